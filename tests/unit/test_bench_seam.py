"""``pytest_ipu.pytest_plugin.bench_seam``: the one package that names pytest-benchmark's internals, and how
it bridges pytest-benchmark 4.0.0 (Python 3.8's) and 5.x.

The suite runs against both (``make test`` has 5.3, ``make test-floor`` 4.0.0), so every plugin test
exercises the installed version's path; these tests cover both paths of each bridge on either.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

import pytest_ipu
from pytest_ipu.pytest_plugin import bench_seam
from pytest_ipu.pytest_plugin.bench_seam import fixture as bench_fixture
from pytest_ipu.pytest_plugin.bench_seam import runs

PACKAGE = Path(pytest_ipu.__file__).parent

#: What only the seam may name: pytest-benchmark's session object and its parts, the fixture's
#: private state, and the argparse type of ``--benchmark-json`` before 5.3.
INTERNALS = re.compile(
    r"_benchmarksession|\.stats\.stats\b|\bhas_error\b|\bsave_json\b|\bFileType\b|\bget_machine_info\b"
    r"|\bstorage\.save\b|\.save_data\b|\.skipped\s*=(?!=)|\bhandle_saving\b"
)


def test_only_the_seam_names_pytest_benchmark_internals() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "bench_seam" not in path.relative_to(PACKAGE).parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if INTERNALS.search(line)
    ]
    assert found == []


def test_no_module_uses_pytests_private_modules() -> None:
    # pytest's public API (hooks, pytest.*) is all the glue needs: a private module changes without
    # notice between pytest releases.
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\b(from|import)\s+_pytest\b", line)
    ]
    assert found == []


# -- pedantic's teardown ----------------------------------------------------------------------------


class _Stats:
    def __init__(self) -> None:
        self.data: list[float] = []


class Fixture40:
    """pytest-benchmark 4.0.0's ``pedantic`` loop (to 5.1): no ``teardown``; per round the setup
    (``make_arguments``), the timed call, then ``stats.update``; disabled, the target once; a raise
    sets ``has_error``."""

    def __init__(self, events: list[str], enabled: bool = True) -> None:
        self.events = events
        self.enabled = enabled
        self.stats = SimpleNamespace(stats=_Stats())
        self.has_error = False

    def pedantic(
        self,
        target: Callable[..., object],
        args: Sequence[object] = (),
        kwargs: dict[str, object] | None = None,
        setup: Callable[[], object] | None = None,
        rounds: int = 1,
        warmup_rounds: int = 0,
        iterations: int = 1,
    ) -> object:
        return self._loop(target, args, setup, None, warmup_rounds + rounds)

    def _loop(
        self,
        target: Callable[..., object],
        args: Sequence[object],
        setup: Callable[[], object] | None,
        teardown: Callable[..., object] | None,
        rounds: int,
    ) -> object:
        try:
            if not self.enabled:
                if setup is not None:
                    setup()
                return target(*args)
            result = None
            for _ in range(rounds):
                if setup is not None:
                    setup()
                result = target(*args)
                self.events.append("bookkeeping")
                self.stats.stats.data.append(0.5)
                if teardown is not None:
                    teardown(*args)
            return result
        except Exception:
            self.has_error = True
            raise


class Fixture52(Fixture40):
    """5.2 and later: ``teardown(*args)`` after each round's bookkeeping; none when disabled."""

    def pedantic(  # type: ignore[override]
        self,
        target: Callable[..., object],
        args: Sequence[object] = (),
        kwargs: dict[str, object] | None = None,
        setup: Callable[[], object] | None = None,
        teardown: Callable[..., object] | None = None,
        rounds: int = 1,
        warmup_rounds: int = 0,
        iterations: int = 1,
    ) -> object:
        return self._loop(target, args, setup, teardown, warmup_rounds + rounds)


@pytest.mark.parametrize("fixture_type", [Fixture40, Fixture52])
def test_teardown_runs_between_rounds_after_the_bookkeeping_on_every_version(fixture_type: type) -> None:
    events: list[str] = []
    timer = bench_fixture.Timer(fixture_type(events))
    result = timer.pedantic(
        lambda x: events.append(f"call {x}") or x,
        args=(7,),
        setup=lambda: events.append("setup"),
        teardown=lambda x: events.append(f"teardown {x}"),
        rounds=3,
    )
    assert result == 7
    assert events == ["setup", "call 7", "bookkeeping", "teardown 7"] * 3
    assert timer.round_times == (0.5, 0.5, 0.5)


@pytest.mark.parametrize("fixture_type", [Fixture40, Fixture52])
def test_no_teardown_when_disabled_on_every_version(fixture_type: type) -> None:
    events: list[str] = []
    timer = bench_fixture.Timer(fixture_type(events, enabled=False))
    timer.pedantic(lambda: events.append("call"), teardown=lambda: events.append("teardown"), rounds=5)
    assert events == ["call"]


def test_a_raise_from_setup_ends_the_rounds_after_the_last_rounds_teardown() -> None:
    events: list[str] = []
    fixture = Fixture40(events)
    timer = bench_fixture.Timer(fixture)
    started = [0]

    class End(Exception):
        pass

    def setup() -> None:
        started[0] += 1
        if started[0] == 3:
            raise End

    with pytest.raises(End):
        timer.pedantic(
            lambda: events.append("call"), setup=setup, teardown=lambda: events.append("td"), rounds=9
        )
    assert events == ["call", "bookkeeping", "td"] * 2
    assert fixture.has_error
    timer.rounds_ended_early()
    assert not fixture.has_error


# -- --benchmark-json -------------------------------------------------------------------------------


def test_before_5_3_the_json_file_is_opened_only_when_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(bench_seam, "_version", lambda: (4, 0, 0))
    target = tmp_path / "out.json"
    option = SimpleNamespace(benchmark_json=str(target))
    assert bench_seam.json_path(option) == target
    bench_seam.set_json_path(option, target)
    assert not target.exists()  # nothing opened yet
    assert str(option.benchmark_json) == str(target)  # what pytest-benchmark prints
    with option.benchmark_json as handle:  # as pytest-benchmark 4.0.0 writes it
        handle.write(b"{}")
    assert target.read_bytes() == b"{}"
    assert bench_seam.json_path(option) == target


def test_from_5_3_the_json_option_is_a_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(bench_seam, "_version", lambda: (5, 3, 1))
    option = SimpleNamespace(benchmark_json=tmp_path / "a.json")
    bench_seam.set_json_path(option, tmp_path / "b.json")
    assert option.benchmark_json == tmp_path / "b.json"
    bench_seam.set_json_path(option, None)
    assert bench_seam.json_path(option) is None


@pytest.mark.parametrize("version", [(4, 0, 0), (5, 3, 1)])
def test_a_temporary_json_file_is_printed_as_the_file_it_becomes(
    tmp_path: Path, monkeypatch, version
) -> None:
    """Written at the temporary path, named (what pytest-benchmark prints) as the target."""
    monkeypatch.setattr(bench_seam, "_version", lambda: version)
    temporary, target = tmp_path / ".out.json.1.tmp", tmp_path / "out.json"
    option = SimpleNamespace(benchmark_json=str(target))
    bench_seam.set_json_path(option, temporary, shown=target)
    assert f"{option.benchmark_json}" == str(target)
    if version < (5, 3):
        with option.benchmark_json as handle:
            handle.write(b"{}")
    else:
        with open(option.benchmark_json, "wb") as handle:  # noqa: PTH123 - as pytest-benchmark 5.3 writes it
            handle.write(b"{}")
    assert temporary.read_bytes() == b"{}"
    assert not target.exists()
    assert bench_seam.json_path(option) == temporary


def test_an_already_opened_json_file_is_closed_and_read_as_its_path(tmp_path: Path) -> None:
    handle = (tmp_path / "opened.json").open("wb")
    option = SimpleNamespace(benchmark_json=handle)
    assert bench_seam.json_path(option) == tmp_path / "opened.json"
    assert handle.closed


# -- saving and the compared runs -------------------------------------------------------------------


@pytest.mark.parametrize(("has", "instead_says", "saved"), [(True, False, True), (False, True, False)])
def test_routed_saving_asks_first_and_saves_only_when_told(
    has: bool, instead_says: bool, saved: bool
) -> None:
    calls: list[str] = []
    asked: list[bool] = []
    bench = SimpleNamespace(benchmarks=[object()] if has else [], handle_saving=lambda: calls.append("saved"))
    config = SimpleNamespace(_benchmarksession=bench)

    def instead(with_benchmarks: bool) -> bool:
        asked.append(with_benchmarks)
        return instead_says

    bench_seam.route_saving(config, instead, lambda exc: pytest.fail(f"not interrupted: {exc!r}"))
    bench.handle_saving()
    assert asked == [has]
    assert calls == (["saved"] if saved else [])


def test_an_interrupt_during_routed_saving_is_handed_over_not_raised() -> None:
    def save() -> None:
        raise KeyboardInterrupt("in the middle of the file")

    bench = SimpleNamespace(benchmarks=[object()], handle_saving=save)
    handed: list[BaseException] = []
    bench_seam.route_saving(SimpleNamespace(_benchmarksession=bench), lambda has: False, handed.append)
    bench.handle_saving()
    assert [str(e) for e in handed] == ["in the middle of the file"]


class FileStorage:
    """pytest-benchmark's file storage, as far as the seam reads it: its runs matching a glob."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.globs: list[str] = []

    def query(self, glob: str) -> list[str]:
        self.globs.append(glob)
        return self.names


@pytest.mark.parametrize(
    ("compare", "expected"), [(True, ["0001_a.json", "0002_b.json"]), ("0001", []), ([], [])]
)
def test_the_compared_runs_are_listed_only_for_a_bare_compare(compare: object, expected: list[str]) -> None:
    storage = FileStorage(["0001_a.json", "0002_b.json"])
    config = SimpleNamespace(_benchmarksession=SimpleNamespace(compare=compare, storage=storage))
    assert runs.saved_runs_compared(config) == [Path(n) for n in expected]
    # pytest-benchmark's own query for the run it loads.
    assert storage.globs == (["[0-9][0-9][0-9][0-9]_"] if expected else [])


def test_no_compared_runs_from_another_storage() -> None:
    other = SimpleNamespace(query=lambda: ["some-id"])  # elasticsearch's: no glob
    config = SimpleNamespace(_benchmarksession=SimpleNamespace(compare=True, storage=other))
    assert runs.saved_runs_compared(config) == []
