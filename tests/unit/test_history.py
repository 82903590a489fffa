"""Saved runs as series (``results.history``) and their change points and regression check
(``results.changes``), on storage folders written here; and ``pytest-ipu history``'s errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.cli import main as cli
from pytest_ipu.results import changes
from pytest_ipu.results import decide
from pytest_ipu.results import history
from pytest_ipu.results import schema
from tests.unit import run_files

LINUX = {
    "system": "Linux",
    "python_implementation": "CPython",
    "python_version": "3.11.4",
    "cpu": {"bits": 64},
}
MACHINE = "Linux-CPython-3.11-64bit"
OTHER = {**LINUX, "system": "Darwin"}
DARWIN = "Darwin-CPython-3.11-64bit"


def _plain(name: str, mean: float) -> dict[str, Any]:
    """A pytest-benchmark benchmark without a pytest-ipu record."""
    return {
        "group": None,
        "name": name,
        "fullname": f"test_x.py::{name}",
        "params": None,
        "stats": {"min": mean * 0.9, "median": mean, "mean": mean, "max": mean * 1.1},
    }


def _save(
    folder: Path,
    number: int,
    commit: str,
    benchmarks: list[dict[str, Any]],
    *,
    commit_time: str | None = "2026-01-01T10:00:00+00:00",
    ran: str = "2026-01-02T10:00:00",
    machine: dict[str, Any] = LINUX,
    dirty: bool = False,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{number:04d}_{commit}_{ran.replace(':', '')}.json"
    path.write_text(
        json.dumps(
            {
                "machine_info": machine,
                "commit_info": {"id": commit, "time": commit_time, "dirty": dirty},
                "datetime": ran,
                "benchmarks": benchmarks,
            }
        )
    )
    return path


def _minute(m: int) -> str:
    return f"2026-01-01T10:{m:02d}:00+00:00"


def _load(storage: Path, **kwargs: Any) -> history.History:
    given, found = history.find_runs([str(storage)], "unused")
    return history.load(given, found, **kwargs)


def test_runs_of_one_commit_are_one_point_with_their_spread_ordered_by_commit_time(tmp_path: Path) -> None:
    folder = tmp_path / MACHINE
    # Saved out of commit order: c2 (committed at minute 2) was measured first.
    _save(folder, 1, "c2", [_plain("test_a", 2.0)], commit_time=_minute(2), ran="2026-01-02T10:00:01")
    _save(folder, 2, "c1", [_plain("test_a", 1.0)], commit_time=_minute(1), ran="2026-01-02T10:00:02")
    _save(folder, 3, "c1", [_plain("test_a", 1.4)], commit_time=_minute(1), ran="2026-01-02T10:00:03")
    _save(folder, 4, "c1", [_plain("test_a", 1.2)], commit_time=_minute(1), ran="2026-01-02T10:00:04")
    found = _load(tmp_path, machines=[MACHINE], metrics=["time.mean"])
    [series] = found.series
    assert (series.metric, series.machine, series.unit) == ("time.mean", MACHINE, "s")
    assert [p.commit for p in series.points] == ["c1", "c2"]
    first = series.points[0]
    assert first.values == (1.0, 1.4, 1.2)
    assert (first.value, first.low, first.high) == (1.2, 1.0, 1.4)
    assert found.runs == 4


def test_a_run_named_twice_is_read_once(tmp_path: Path) -> None:
    path = _save(tmp_path / MACHINE, 1, "c1", [_plain("test_a", 1.0)])
    given, found = history.find_runs([str(tmp_path), str(path), str(path)], "unused")
    assert (given, found) == ([path], [])
    assert history.load(given, found, machines=[MACHINE]).runs == 1


def test_commits_of_the_same_second_keep_the_order_they_were_measured_in(tmp_path: Path) -> None:
    folder = tmp_path / MACHINE
    for number, commit in enumerate(["b", "a", "c"], start=1):
        _save(folder, number, commit, [_plain("test_a", 1.0)], ran=f"2026-01-02T10:00:0{number}")
    [series] = _load(tmp_path, machines=[MACHINE], metrics=["time.mean"]).series
    assert [p.commit for p in series.points] == ["b", "a", "c"]


def test_other_machines_stay_out_unless_asked_for(tmp_path: Path) -> None:
    _save(tmp_path / MACHINE, 1, "c1", [_plain("test_a", 1.0)])
    _save(tmp_path / "Darwin-CPython-3.11-64bit", 1, "c1", [_plain("test_a", 5.0)], machine=OTHER)
    found = _load(tmp_path, machines=[MACHINE], metrics=["time.mean"])
    assert [s.machine for s in found.series] == [MACHINE]
    assert found.notes == (f"1 run(s) of machine {DARWIN} left out (--machine {DARWIN} shows them)",)
    every = _load(tmp_path, machines=["*"], metrics=["time.mean"])
    assert sorted(s.machine for s in every.series) == ["Darwin-CPython-3.11-64bit", MACHINE]
    with pytest.raises(
        history.HistoryError, match=r"no run of machine Windows-\* .*Darwin-CPython-3.11-64bit \(1\)"
    ):
        _load(tmp_path, machines=["Windows-*"])


def test_partial_entries_and_runs_without_a_commit_stay_out_with_a_note(tmp_path: Path) -> None:
    folder = tmp_path / MACHINE
    _save(folder, 1, "c1", [run_files.bench(4, 0.001, 4000.0)], commit_time=_minute(1))
    partial = run_files.bench(4, 0.5, 1.0)
    del partial["extra_info"]  # pytest-benchmark's entry of an interrupted run: no record
    _save(folder, 2, "c2", [partial], commit_time=_minute(2))
    _save(folder, 3, "unversioned", [run_files.bench(4, 0.001, 4000.0)], commit_time=None)
    found = _load(tmp_path, machines=[MACHINE])
    metrics = {s.metric for s in found.series}
    assert "throughput" in metrics
    assert not any(m.startswith("time.") for m in metrics)  # a record's benchmark: the record's metrics
    assert all([p.commit for p in s.points] == ["c1"] for s in found.series)
    assert any("0002_c2" in n and "partial entry" in n for n in found.notes)
    assert any("0003_unversioned" in n and "no commit id" in n for n in found.notes)


def test_an_unreadable_file_in_a_storage_is_left_out_but_a_given_one_is_an_error(tmp_path: Path) -> None:
    folder = tmp_path / MACHINE
    _save(folder, 1, "c1", [_plain("test_a", 1.0)])
    broken = folder / "0002_c2_x.json"
    broken.write_text("{")
    found = _load(tmp_path, machines=[MACHINE])
    assert any(str(broken) in n and "left out" in n for n in found.notes)
    with pytest.raises(history.benchmark_json.RunFileError, match="not JSON"):
        history.load([broken], machines=[MACHINE])


def _steady(
    tmp_path: Path, values: list[float], name: str = "test_a", dirty: tuple[int, ...] = ()
) -> history.History:
    folder = tmp_path / MACHINE
    for number, value in enumerate(values, start=1):
        _save(
            folder,
            number,
            f"c{number:02d}",
            [_plain(name, value)],
            commit_time=_minute(number),
            dirty=number in dirty,
        )
    return _load(tmp_path, machines=[MACHINE], metrics=["time.mean"])


NOISE = [1.00, 1.02, 0.99, 1.01, 0.98, 1.00, 1.01, 0.99, 1.02, 1.00, 0.99, 1.01, 1.00, 0.98]


def _changes(found: history.History) -> list[changes.Change]:
    return changes.analyse(found)[0]


def test_a_regression_in_the_newest_commits_fails_the_check(tmp_path: Path) -> None:
    found = _steady(tmp_path, NOISE[:9] + [v * 1.5 for v in NOISE[9:]])
    result = changes.report(found, 0.10)
    assert [(c.commit, c.previous, c.worse) for c in result.changes] == [("c10", "c09", True)]
    [verdict] = result.verdicts
    assert verdict.outcome == decide.FAIL
    assert "from c10" in verdict.reason
    assert changes.exit_code([verdict]) == decide.EXIT_FAIL
    # An older regression, before the newest 3 commits, is not the newest commits' doing.
    [old] = changes.report(found, 0.10, recent=3).verdicts
    assert old.outcome == decide.PASS


def test_newest_commits_too_few_to_tell_are_inconclusive(tmp_path: Path) -> None:
    found = _steady(tmp_path, [*NOISE[:13], 1.5])
    result = changes.report(found, 0.10)
    assert result.changes == ()
    [verdict] = result.verdicts
    assert verdict.outcome == decide.INCONCLUSIVE
    assert "newest 2 commit(s) from c13" in verdict.reason
    assert "run the benchmarks 1 more time(s)" in verdict.reason
    assert changes.exit_code([verdict]) == decide.EXIT_INCONCLUSIVE


def test_a_steady_series_passes_and_a_short_one_is_inconclusive(tmp_path: Path) -> None:
    found = _steady(tmp_path, NOISE)
    [verdict] = changes.report(found, 0.05).verdicts
    assert verdict.outcome == decide.PASS
    assert changes.exit_code([verdict]) == decide.EXIT_PASS
    short = _steady(tmp_path / "short", NOISE[:4])
    [verdict] = changes.report(short, 0.05).verdicts
    assert verdict.outcome == decide.INCONCLUSIVE
    assert verdict.reason.startswith("only 4 run(s): a change needs 3 runs on each side")


def test_an_improvement_is_listed_after_regressions_and_does_not_fail(tmp_path: Path) -> None:
    folder = tmp_path / MACHINE
    for number, value in enumerate(NOISE, start=1):
        slow = value * (1.3 if number > 7 else 1.0)  # worse from c08 (a time: lower is better)
        fast = value * (0.5 if number > 4 else 1.0)  # better from c05
        _save(
            folder,
            number,
            f"c{number:02d}",
            [_plain("test_a", slow), _plain("test_b", fast)],
            commit_time=_minute(number),
            dirty=number == 8,
        )
    found = _load(tmp_path, machines=[MACHINE], metrics=["time.mean"])
    result = changes.report(found, 0.1)
    assert [(c.series.name, c.commit, c.worse) for c in result.changes] == [
        ("test_a", "c08", True),
        ("test_b", "c05", False),
    ]
    verdicts = {v.series.name: v.outcome for v in result.verdicts}
    assert verdicts == {"test_a": decide.FAIL, "test_b": decide.PASS}


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _steady(tmp_path, NOISE[:9] + [v * 1.5 for v in NOISE[9:]])
    code = cli.main(
        [
            "history",
            str(tmp_path),
            "--machine",
            MACHINE,
            "--metric",
            "time.mean",
            "--format",
            "json",
            "--fail-on-regression",
            "10%",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert out["history_version"] == changes.JSON_VERSION
    [change] = out["change_points"]
    assert change["commit"] == "c10"
    assert change["change"] == pytest.approx(0.5, abs=0.05)
    assert out["series"][0]["change_points"] == [change]
    assert out["check"]["exit_code"] == 1


def test_markdown_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _steady(tmp_path, NOISE[:9] + [v * 1.5 for v in NOISE[9:]])
    assert (
        cli.main(
            ["history", str(tmp_path), "--machine", MACHINE, "--format", "markdown", "--metric", "time.mean"]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| benchmark | metric | commit |")
    assert "`c10`" in lines[2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fail-on-regression", "lots"], "pytest-ipu: --fail-on-regression 'lots': expected a share"),
        (["--recent", "0"], "pytest-ipu: --recent 0: give a number of commits >= 1"),
        (["--metric", "speed"], "pytest-ipu: --metric 'speed': no such metric"),
        (["nowhere"], "pytest-ipu: nowhere: no such file, and no saved run"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    _save(tmp_path / MACHINE, 1, "c1", [_plain("test_a", 1.0)])
    code = cli.main(["history", "--storage", str(tmp_path), "--machine", MACHINE, *args])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.splitlines()) == 1
    assert err.startswith(message)


def test_a_missing_or_empty_storage_says_how_to_fill_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["history", "--storage", str(tmp_path / "absent")]) == 2
    assert "no such folder: run the benchmarks with --benchmark-autosave" in capsys.readouterr().err
    assert cli.main(["history", str(tmp_path)]) == 2
    assert "a folder with no pytest-benchmark runs" in capsys.readouterr().err


def test_report_of_a_storage_draws_the_history_with_its_change_points(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    folder = tmp_path / "storage" / MACHINE
    for number, value in enumerate(NOISE, start=1):
        slow = value * (1.3 if number > 7 else 1.0)
        fast = value * (0.5 if number > 4 else 1.0)
        _save(
            folder,
            number,
            f"c{number:02d}",
            [_plain("test_a", slow), _plain("test_b", fast)],
            commit_time=_minute(number),
            dirty=number == 8,
        )
    out = tmp_path / "out"
    assert cli.main(["report", str(tmp_path / "storage"), "--machine", MACHINE, "-o", str(out)]) == 0
    # The default metric (time.median) of two benchmarks, each with its change point, each drawn.
    assert "history of 2 series, 2 change point(s), 2 figure(s)" in capsys.readouterr().out
    page = (out / "index.html").read_text()
    # The summary table, newest change first: c08 (test_a, worse) before c05 (test_b, better).
    table = page.split("<h2>Change points, newest first</h2>")[1].split("</table>")[0]
    assert table.index("c08") < table.index("c05")
    # c08 was measured with uncommitted changes: its change points say so, c05's do not.
    assert "c08 (dirty)" in table
    assert "c05 (dirty)" not in table
    assert page.count("data:image/svg+xml;base64,") == 2
    assert "http://" not in page.replace("http://www.w3.org", "")  # no server, no remote resource
    assert len(list(out.glob("history-*-test_a-time.median.png"))) == 1


def test_report_refuses_folders_and_files_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _save(tmp_path / MACHINE, 1, "c1", [_plain("test_a", 1.0)])
    assert cli.main(["report", str(tmp_path), str(path)]) == 2
    assert "not both" in capsys.readouterr().err
    assert cli.main(["report", str(path), "--machine", MACHINE]) == 2
    assert "--machine picks the runs of a storage folder's history" in capsys.readouterr().err


def test_a_change_at_a_commit_measured_with_uncommitted_changes_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # c10's run was made from a work tree with uncommitted changes: they, not c10, may be the cause.
    found = _steady(tmp_path, NOISE[:9] + [v * 1.5 for v in NOISE[9:]], dirty=(10,))
    [series] = found.series
    assert [p.commit for p in series.points if p.dirty] == ["c10"]
    assert any(n.startswith("1 run(s) made with uncommitted changes") for n in found.notes)
    result = changes.report(found, 0.10)
    [change] = result.changes
    assert (change.commit, change.dirty) == ("c10", True)
    assert change.line().endswith(changes.DIRTY_NOTE)
    [verdict] = result.verdicts
    assert verdict.outcome == decide.FAIL
    assert "from c10 (dirty: its runs had uncommitted changes" in verdict.reason
    args = ["history", str(tmp_path), "--machine", MACHINE, "--metric", "time.mean"]
    assert cli.main([*args, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["change_points"][0]["dirty"] is True
    assert [p["commit"] for p in out["series"][0]["points"] if p["dirty"]] == ["c10"]
    assert cli.main([*args, "--format", "markdown"]) == 0
    assert "`c10` dirty" in capsys.readouterr().out.splitlines()[2]


def test_a_clean_history_marks_nothing_dirty(tmp_path: Path) -> None:
    found = _steady(tmp_path, NOISE[:9] + [v * 1.5 for v in NOISE[9:]])
    [change] = _changes(found)
    assert not change.dirty
    assert "DIRTY" not in change.line()
    assert not any("uncommitted" in n for n in found.notes)


def _history_cli(tmp_path: Path, *args: str) -> list[str]:
    return ["history", str(tmp_path), "--machine", MACHINE, *args]


@pytest.mark.parametrize(
    ("newest", "reason"),
    [
        ('{"benchmarks": [{"name": "test_a", "stats": {"median": NaN}}]', "not JSON"),
        # Refused as the run is read (benchmark_json: the one rule of every reader of saved runs).
        (None, "a timed call takes at least the timer's resolution"),
        (1e308, "a call beyond a day (86400 s) is no measurement"),
        (-0.5, "a time must be a finite number of seconds >= 0"),
        (float("inf"), "a time must be a finite number of seconds >= 0"),
    ],
)
def test_the_check_refuses_a_history_whose_newest_run_was_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], newest: object, reason: str
) -> None:
    _steady(tmp_path, NOISE)
    path = tmp_path / MACHINE / "0015_c15_x.json"
    if isinstance(newest, str):
        path.write_text(newest)
    else:
        _save(tmp_path / MACHINE, 15, "c15", [_plain("test_a", 0.0 if newest is None else float(newest))])
        path = next((tmp_path / MACHINE).glob("0015_*.json"))
    # Without the check the run is left out with a note; the history of the others is shown.
    assert cli.main(_history_cli(tmp_path)) == 0
    assert str(path) in capsys.readouterr().out
    # With it, the run the job just made cannot be judged: bad input, naming the file and why.
    assert cli.main(_history_cli(tmp_path, "--fail-on-regression", "5%")) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert f"the newest run {path} was left out" in err
    assert reason in err


def test_an_older_run_left_out_does_not_stop_the_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _steady(tmp_path, NOISE)
    (tmp_path / MACHINE / "0001_c01_x.json").write_text("{")
    assert cli.main(_history_cli(tmp_path, "--fail-on-regression", "10%")) == 0
    assert "0001_c01_x.json: not JSON" in capsys.readouterr().out


def test_when_every_run_is_left_out_the_message_gives_the_causes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / MACHINE
    folder.mkdir()
    for number in (1, 2):
        (folder / f"000{number}_c{number}_x.json").write_text('{"benchmarks": [NaN]}')
    assert cli.main(_history_cli(tmp_path)) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert "2 run(s) left out, such as" in err
    assert "0001_c1_x.json: benchmarks[0] is not a pytest-benchmark benchmark object (and 1 more)" in err
    assert "pass --machine" not in err


def test_each_benchmark_is_one_series_of_the_gates_metric_and_equal_metrics_fold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / MACHINE
    for number in range(1, 5):
        single = {**_plain("test_one", 1.0), "stats": dict.fromkeys(("min", "median", "mean", "max"), 1.0)}
        _save(folder, number, f"c{number}", [_plain("test_a", 1.0), single], commit_time=_minute(number))
    default = _load(tmp_path, machines=[MACHINE])
    assert [(s.name, s.metrics) for s in default.series] == [
        ("test_a", "time.median"),
        ("test_one", "time.median"),
    ]
    every = _load(tmp_path, machines=[MACHINE], metrics=[history.ALL])
    labels = [s.label for s in every.series]
    # test_a: min and max differ, median and mean are the same numbers; a single round: all four.
    assert labels == [
        "test_a time.min",
        "test_a time.median=time.mean",
        "test_a time.max",
        "test_one time.min=time.median=time.mean=time.max",
    ]


def test_a_records_default_series_is_its_throughput(tmp_path: Path) -> None:
    _save(tmp_path / MACHINE, 1, "c1", [run_files.bench(4, 0.001, 4000.0)])
    [series] = _load(tmp_path, machines=[MACHINE]).series
    assert series.metric == "throughput"


def test_benchmarks_that_step_at_one_commit_are_one_event(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / MACHINE
    for number, value in enumerate(NOISE, start=1):
        faster = 0.7 if number >= 6 else 1.0
        benches = [_plain(f"test_{k}", value * faster * (1 + k / 10)) for k in range(4)]
        benches.append(_plain("test_steady", value))
        _save(folder, number, f"c{number:02d}", benches, commit_time=_minute(number))
    assert cli.main(_history_cli(tmp_path)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("c06: 4 benchmarks ")
    assert lines[0].endswith("% faster (test_0, test_1, test_2, test_3)")
    assert all(line.startswith("  better -") and "at c06" in line for line in lines[1:5])
    assert lines[5].startswith("4 change point(s) at 1 commit(s) in 5 series")


def test_a_commit_that_made_one_benchmark_faster_and_another_slower_is_one_commit_of_two_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / MACHINE
    for number, value in enumerate(NOISE, start=1):
        after = number >= 6
        benches = [
            _plain("test_up", value * (1.4 if after else 1.0)),
            _plain("test_down", value * (0.7 if after else 1.0)),
        ]
        _save(folder, number, f"c{number:02d}", benches, commit_time=_minute(number))
    assert cli.main(_history_cli(tmp_path)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["worse", "better"]
    assert lines[2].startswith("2 change point(s) at 1 commit(s) in 2 series")


def test_blind_spots_and_series_too_noisy_for_the_step_are_stated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / MACHINE
    wild = [1.0, 3.1, 0.4, 2.2, 0.9, 5.0, 0.5, 1.7, 0.3, 2.8, 1.2, 0.6, 4.1, 0.8]
    for number, (value, noisy) in enumerate(zip(NOISE, wild), start=1):
        _save(
            folder,
            number,
            f"c{number:02d}",
            [_plain("test_quiet", value), _plain("test_wild", noisy)],
            commit_time=_minute(number),
        )
    assert cli.main(_history_cli(tmp_path, "--fail-on-regression", "10%")) == 3
    out = capsys.readouterr().out
    assert (
        "note: blind spots: a change at c02, c03 (fewer than 3 runs before it; 2 more run(s) of c01 would "
        "judge c02) or at c13, c14 (fewer than 3 runs from it on; 2 more run(s) of c14 would judge it) "
        "cannot be found"
    ) in out
    [unseen] = [line for line in out.splitlines() if line.startswith("note: cannot see a 10% step")]
    assert unseen.startswith("note: cannot see a 10% step, 1 series (")
    assert "test_wild time.median (noise " in unseen
    assert "test_quiet" not in unseen
    verdicts = [line for line in out.splitlines() if line.startswith("INCONCLUSIVE")]
    assert len(verdicts) == 1
    assert verdicts[0].startswith("INCONCLUSIVE test_wild time.median")
    assert "too noisy to judge a 10% regression" in verdicts[0]


def test_a_benchmark_the_newest_run_did_not_measure_is_not_judged_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / MACHINE
    for number, value in enumerate(NOISE, start=1):
        benches = [_plain("test_a", value)] + ([_plain("test_gone", value)] if number < len(NOISE) else [])
        _save(folder, number, f"c{number:02d}", benches, commit_time=_minute(number))
    assert cli.main(_history_cli(tmp_path, "--fail-on-regression", "10%")) == 0
    out = capsys.readouterr().out
    assert "regression check (10%): 1 PASS, 0 FAIL, 0 INCONCLUSIVE; 1 series not judged" in out
    assert "not judged: 1 series the newest run of their machine did not measure (" in out
    assert out.rstrip().endswith(".json): test_gone time.median")


def test_each_machine_is_judged_on_its_own_newest_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for number, value in enumerate(NOISE, start=1):
        _save(
            tmp_path / MACHINE,
            number,
            f"c{number:02d}",
            [_plain("test_a", value)],
            commit_time=_minute(number),
        )
    # The other machine's runs are newer by their counter, and it has only an older commit's runs.
    for number in range(1, 8):
        _save(
            tmp_path / DARWIN,
            20 + number,
            f"c{number:02d}",
            [_plain("test_a", 1.0 + number / 1000)],
            commit_time=_minute(number),
            machine=OTHER,
        )
    (tmp_path / DARWIN / "0028_c08_x.json").write_text("{")
    code = cli.main(["history", str(tmp_path), "--machine", "*", "--fail-on-regression", "10%"])
    captured = capsys.readouterr()
    # Darwin's newest run cannot be read: the check refuses, naming that file, not Linux's.
    assert code == 2
    assert "0028_c08_x.json was left out" in captured.err
    (tmp_path / DARWIN / "0028_c08_x.json").unlink()
    assert cli.main(["history", str(tmp_path), "--machine", "*", "--fail-on-regression", "10%"]) == 0
    assert "not judged" not in capsys.readouterr().out


def test_runs_whose_throughput_has_another_definition_are_left_out_with_a_note(tmp_path: Path) -> None:
    folder = tmp_path / MACHINE
    # Two runs before the median round's throughput was kept (only the window's), three after.
    for i in range(5):
        bench = run_files.bench(1, 1e-3, 900.0)
        if i >= 2:
            bench["extra_info"]["ipu"]["median_throughput_items_per_s"] = 1000.0
        _save(folder, i + 1, f"c{i}", [bench], commit_time=_minute(i), ran=f"2026-01-02T10:00:0{i}")
    found = _load(tmp_path, machines=[MACHINE], metrics=["throughput", "latency.p50"])
    by_metric = {s.metric: s for s in found.series}
    assert [p.commit for p in by_metric["throughput"].points] == ["c2", "c3", "c4"]
    assert {p.value for p in by_metric["throughput"].points} == {1000.0}
    assert len(by_metric["latency.p50"].points) == 5  # one definition: every run
    assert any(
        "throughput: 2 older run(s) left out: their throughput is throughput_items_per_s, the newest runs' "
        "median_throughput_items_per_s (unlike figures)" in note
        for note in found.notes
    )


@pytest.mark.parametrize(
    ("value", "unit", "reason"),
    [
        # Times: the readers' one rule (schema.call_time_problem), below the timer's resolution too.
        (0.0, "s", schema.call_time_problem(0.0)),
        (1e-10, "s", schema.call_time_problem(1e-10)),
        (2 * schema.MAX_CALL_S, "s", schema.call_time_problem(2 * schema.MAX_CALL_S)),
        (float("nan"), "s", "not a finite number"),
        (0.0, "items/s", "a series compares ratios, so it must be > 0"),
        (-1.0, "items/s", "a series compares ratios, so it must be > 0"),
    ],
)
def test_a_value_no_series_can_hold_is_named_by_the_readers_rule_for_times(
    value: float, unit: str, reason: str
) -> None:
    assert reason is not None
    assert history.impossible(value, unit) == reason


def test_a_time_a_call_can_take_and_a_rate_above_zero_are_kept() -> None:
    assert history.impossible(schema.MIN_CALL_S, "s") is None
    assert history.impossible(schema.MAX_CALL_S, "s") is None
    assert history.impossible(1e-12, "items/s") is None


def test_a_newest_run_the_search_leaves_out_as_disturbed_still_keeps_the_check_from_passing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The newest commit's three runs: two at the level, one a hundred times slower (a call preempted
    # for a time slice, or a regression that only one run showed). The search leaves it out; the
    # check, judging the newest commit on every run, cannot pass it.
    folder = tmp_path / MACHINE
    number = 0
    for commit, value in enumerate(NOISE, start=1):
        for run in range(3 if commit == len(NOISE) else 1):
            number += 1
            slowed = 100.0 if commit == len(NOISE) and run == 1 else 1.0
            _save(
                folder,
                number,
                f"c{commit:02d}",
                [_plain("test_a", value * slowed)],
                commit_time=_minute(commit),
            )
    found = _load(tmp_path, machines=[MACHINE])
    assert _changes(found) == []
    assert cli.main(_history_cli(tmp_path, "--fail-on-regression", "5%")) == 3
    assert "INCONCLUSIVE test_a" in capsys.readouterr().out
