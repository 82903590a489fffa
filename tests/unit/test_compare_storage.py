"""Runs named as ``pytest-benchmark compare`` names them: saved-run ids, globs and paths, looked up
in ``--storage``; an id that names no run, or several, is a one-line error."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ipu.cli import main as cli
from pytest_ipu.results import storage
from tests.unit.run_files import bench
from tests.unit.run_files import write

LINUX = "Linux-CPython-3.11-64bit"
DARWIN = "Darwin-CPython-3.11-64bit"


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A pytest-benchmark storage: two runs of one machine, and a run 0001 of another machine."""
    root = tmp_path / ".benchmarks"
    for machine in (LINUX, DARWIN):
        (root / machine).mkdir(parents=True)
    write(root / LINUX / "0001_abc_20260101_000000.json", bench(2, 0.002, 1000.0))
    write(root / LINUX / "0002_def_20260102_000000.json", bench(2, 0.003, 700.0, seed=1))
    write(root / DARWIN / "0001_xyz_20260103_000000.json", bench(2, 0.002, 1000.0, seed=2))
    return root


def _names(paths: list[Path]) -> list[str]:
    return [f"{p.parent.name}/{p.name}" for p in paths]


def test_an_id_finds_its_run_in_any_machine_folder(saved: Path) -> None:
    assert _names(storage.resolve("0002", saved)) == [f"{LINUX}/0002_def_20260102_000000.json"]
    assert _names(storage.resolve("0001_abc", saved)) == [f"{LINUX}/0001_abc_20260101_000000.json"]
    assert _names(storage.resolve(f"{DARWIN}/0001", saved)) == [f"{DARWIN}/0001_xyz_20260103_000000.json"]
    exact = f"{LINUX}/0002_def_20260102_000000.json"
    assert _names(storage.resolve(exact, saved)) == [exact]


def test_a_glob_finds_every_run_sorted_by_name_then_folder(saved: Path) -> None:
    assert _names(storage.resolve("*/0001_*", saved)) == [
        f"{LINUX}/0001_abc_20260101_000000.json",
        f"{DARWIN}/0001_xyz_20260103_000000.json",
    ]
    assert _names(storage.resolve("Linux-*/*", saved)) == [
        f"{LINUX}/0001_abc_20260101_000000.json",
        f"{LINUX}/0002_def_20260102_000000.json",
    ]


def test_an_existing_path_is_that_file(saved: Path, tmp_path: Path) -> None:
    elsewhere = write(tmp_path / "0002", bench(2, 0.002, 1000.0))  # a file named like an id wins
    assert storage.resolve(str(elsewhere), saved) == [elsewhere]


def test_an_id_that_matches_nothing_names_the_id_the_storage_and_the_fix(saved: Path) -> None:
    with pytest.raises(storage.RunLookupError) as caught:
        storage.resolve("0009", saved)
    message = str(caught.value)
    assert message.startswith(f"0009: no such file, and no saved run in {saved} matches it; ")
    assert "--storage" in message
    assert "\n" not in message
    with pytest.raises(storage.RunLookupError, match=r"^\*/0009_\*: no such file"):
        storage.resolve("*/0009_*", saved)


def test_an_id_that_matches_several_runs_is_refused(saved: Path) -> None:
    with pytest.raises(storage.RunLookupError) as caught:
        storage.resolve("0001", saved)
    message = str(caught.value)
    assert message.startswith(f"0001: matches 2 saved runs in {saved} (")
    assert f"'{LINUX}/0001'" in message  # how to name one
    assert "glob" in message
    assert "\n" not in message


def test_a_storage_that_does_not_exist_is_named(tmp_path: Path) -> None:
    with pytest.raises(storage.RunLookupError, match=r"which does not exist"):
        storage.resolve("0001", tmp_path / "nowhere")


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("file://./.benchmarks", Path(".benchmarks")),
        (".benchmarks", Path(".benchmarks")),
        ("file:///b", Path("/b")),
    ],
)
def test_storage_uris(uri: str, path: Path) -> None:
    assert storage.storage_path(uri) == path


def test_other_storages_are_refused() -> None:
    with pytest.raises(
        storage.RunLookupError, match=r"--storage 'elasticsearch\+http://h/i': only file storage"
    ):
        storage.storage_path("elasticsearch+http://h/i")


# --- the commands -----------------------------------------------------------------------------


def test_compare_takes_ids_from_the_default_storage(
    saved: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(saved.parent)
    assert cli.main(["compare", "0001_abc", "0002"]) == 0
    out = capsys.readouterr().out
    # Long saved-run names become their run numbers, with a legend.
    assert out.splitlines()[0] == f"0001 = .benchmarks/{LINUX}/0001_abc_20260101_000000.json"
    assert "0002 vs 0001" in out
    assert "+50.0% not tested" in out


@pytest.mark.parametrize("form", ["{}", "file://{}"])
def test_compare_takes_ids_and_globs_from_the_storage_given(
    saved: Path, form: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["compare", "Linux-*/*", "--storage", form.format(saved)]) == 0
    assert "0002 vs 0001" in capsys.readouterr().out


def test_summary_and_report_take_ids(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["summary", "0002", "-s", str(saved)]) == 0
    assert "test_mlp[torch-cpu-2]" in capsys.readouterr().out
    assert cli.main(["report", "0009", "-s", str(saved)]) == 2
    assert capsys.readouterr().err.startswith("pytest-ipu: 0009: no such file")


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["compare", "0001_abc", "0009"], "pytest-ipu: 0009: no such file, and no saved run in"),
        (["compare", "0001", "0002"], "pytest-ipu: 0001: matches 2 saved runs in"),
        (["compare", "0002"], "pytest-ipu: compare needs at least two runs, got 1 ("),
        (["summary", "0001"], "pytest-ipu: 0001: matches 2 saved runs in"),
    ],
)
def test_bad_ids_exit_2_with_one_line(
    saved: Path, argv: list[str], start: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*argv, "--storage", str(saved)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(start)
    assert captured.err.count("\n") == 1
    assert captured.out == ""
