"""Bad run files given to ``pytest-ipu summary``, ``compare`` and ``report`` (issue 12's audit).

One table, one test: each row breaks a valid run in one way, and the command must answer with one
line on stderr naming the problem and exit 2 (bad input), never a traceback and never 1 (which
means a gate failed); or, for the gate rows, exit 1 with the reason. ``ab`` runs pytest in
subprocesses and is left to its own tests.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.cli import main as cli
from tests.unit.run_files import bench
from tests.unit.run_files import write


@dataclass(frozen=True)
class BadRun:
    """A way to break a run: ``mutate`` edits the candidate run's JSON in place; ``command`` is run
    on the baseline and candidate files (``summary`` and ``report`` on the candidate only)."""

    description: str
    mutate: Callable[[dict[str, Any]], None]
    command: str
    message_part: str
    exit_code: int = 2
    gates: tuple[str, ...] = ()
    #: What the error line names after the file: the benchmark, or the run's own section.
    names: str = "benchmark"

    def __str__(self) -> str:
        return f"{self.command}: {self.description}"


def _record(run: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = run["benchmarks"][0]["extra_info"]["ipu"]
    return record


def _set(*path: str | int, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set the value at ``path`` below the first benchmark's record."""

    def mutate(run: dict[str, Any]) -> None:
        target: Any = _record(run)
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _bench_set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(run: dict[str, Any]) -> None:
        run["benchmarks"][0][key] = value

    return mutate


def _stats_set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(run: dict[str, Any]) -> None:
        run["benchmarks"][0]["stats"][key] = value

    return mutate


def _sample(value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(run: dict[str, Any]) -> None:
        run["benchmarks"][0]["stats"]["data"][3] = value

    return mutate


def _with_part(key: str, part: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(run: dict[str, Any]) -> None:
        _record(run)[key] = part

    return mutate


def _top_set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set ``key`` of the run's own top-level section."""

    def mutate(run: dict[str, Any]) -> None:
        run.setdefault("pytest_ipu", {})[key] = value

    return mutate


def _pooled(throughput: float) -> Callable[[dict[str, Any]], None]:
    """Two repeats that pool to the record's window (2 x 0.5 s) and its 200 items/s, and the pooled
    throughput then set to ``throughput``."""

    def mutate(run: dict[str, Any]) -> None:
        _record(run)["repeats"] = [{**REPEAT, "index": 1}, {**REPEAT, "index": 2}]
        _record(run)["throughput_items_per_s"] = throughput

    return mutate


def _twice(run: dict[str, Any]) -> None:
    """The first benchmark a second time, as two runs joined by hand would have it."""
    run["benchmarks"].append(json.loads(json.dumps(run["benchmarks"][0])))


def _rename(run: dict[str, Any]) -> None:
    """No benchmark in common with the baseline."""
    for b in run["benchmarks"]:
        b["fullname"] += "-renamed"


def _rename_and_drop_records(run: dict[str, Any]) -> None:
    """No benchmark in common, and none a gate can read for an absolute gate to check: each entry is
    partial (a pytest-ipu fixture began it and its test stopped before the record was written)."""
    _rename(run)
    for b in run["benchmarks"]:
        b["extra_info"] = {"ipu_pending": "ipu_benchmark"}


NAN, INF = float("nan"), float("inf")
HUGE = 10**400
POWER = {"measured": True, "source": "rapl", "energy_j": 5.0, "devices": []}
CONTENTION = {"readable": True, "others_share": 0.01, "threshold": 0.1, "contended": False}
REPEAT: dict[str, Any] = {
    "index": 0,
    "rounds": 40,
    "window_s": 0.5,
    "latency_s": {"min": 0.009, "p50": 0.01, "p90": 0.011, "p99": 0.012, "max": 0.013, "mean": 0.01},
    "throughput_items_per_s": 200.0,
}

ROWS = [
    # Item 1: non-finite and impossible numbers in the record.
    BadRun("p50 NaN", _set("latency_s", "p50", value=NAN), "compare", "'latency_s.p50' is nan"),
    BadRun("p50 negative", _set("latency_s", "p50", value=-1), "summary", "'latency_s.p50' is -1"),
    BadRun("p99 Infinity", _set("latency_s", "p99", value=INF), "report", "'latency_s.p99' is inf"),
    BadRun(
        "throughput NaN", _set("throughput_items_per_s", value=NAN), "compare", "'throughput_items_per_s'"
    ),
    BadRun("throughput -Inf", _set("throughput_items_per_s", value=-INF), "report", "is -inf"),
    BadRun("throughput 400 digits", _set("throughput_items_per_s", value=HUGE), "summary", "it is too large"),
    # Physically impossible records: more items than a run can count, none from rounds that ran,
    # pooled figures their repeats do not make, a section of no known version.
    BadRun(
        "throughput 1e308",
        _set("throughput_items_per_s", value=1e308),
        "compare",
        "'throughput_items_per_s' is 1e+308: over its window of 1 s that is 1e+308 items",
        gates=("throughput:-5%",),
    ),
    BadRun(
        "throughput 0 over 40 rounds", _set("throughput_items_per_s", value=0.0), "summary", "must be > 0"
    ),
    BadRun(
        "pooled throughput 0 beside its repeats",
        _pooled(0.0),
        "compare",
        "'throughput_items_per_s' is 0.0",
        gates=("throughput:-5%",),
    ),
    BadRun(
        "pooled throughput half its repeats'",
        _pooled(100.0),
        "report",
        "'throughput_items_per_s' is 100.0: its repeats ran at 200 to 200 items/s",
    ),
    BadRun(
        "repeat throughput 1e308",
        _with_part("repeats", [{**REPEAT, "throughput_items_per_s": 1e308}]),
        "summary",
        "'repeats[0].throughput_items_per_s' is 1e+308",
    ),
    BadRun(
        "section schema 'two'",
        _top_set("schema", "two"),
        "compare",
        "run section 'pytest_ipu' (schema version 'two')",
        gates=("throughput:-5%",),
        names="not a pytest-ipu",
    ),
    BadRun("window negative", _set("window_s", value=-0.5), "compare", "'window_s' is -0.5"),
    BadRun("compile_s Infinity", _set("compile_s", value=INF), "summary", "'compile_s' is inf"),
    BadRun("first_call_s string", _set("first_call_s", value="fast"), "compare", "'first_call_s' is 'fast'"),
    BadRun("batch_size Infinity", _set("batch_size", value=INF), "compare", "'batch_size' is inf"),
    BadRun("batch_size 4.5", _set("batch_size", value=4.5), "summary", "must be a whole number"),
    BadRun("batch_size 400 digits", _set("batch_size", value=HUGE), "report", "'batch_size' is 1000"),
    BadRun("rounds negative", _set("rounds", value=-3), "compare", "'rounds' is -3"),
    BadRun("rounds true", _set("rounds", value=True), "summary", "'rounds' is True"),
    BadRun("warmup_rounds null", _set("warmup_rounds", value=None), "report", "'warmup_rounds' is None"),
    BadRun(
        "compile phase NaN",
        _set("compile_phases_s", value={"trace": NAN}),
        "compare",
        "compile_phases_s.trace",
    ),
    BadRun(
        "compile_info NaN", _set("compile_info", value={"x": [NAN]}), "summary", "'compile_info.x[0]' is nan"
    ),
    BadRun(
        "power energy negative",
        _with_part("power", {**POWER, "energy_j": -5.0}),
        "compare",
        "'power.energy_j' is -5.0",
    ),
    BadRun(
        "power items/J NaN",
        _with_part("power", {**POWER, "items_per_j": NAN}),
        "report",
        "'power.items_per_j'",
    ),
    BadRun(
        "power device energy Inf",
        _with_part(
            "power", {**POWER, "devices": [{"id": "a", "name": "a", "scope": "cpu", "energy_j": INF}]}
        ),
        "summary",
        "'power.devices[0].energy_j' is inf",
    ),
    BadRun(
        "power samples -1", _with_part("power", {**POWER, "samples": -1}), "compare", "'power.samples' is -1"
    ),
    BadRun(
        "parity NaN max_rel",
        _with_part("parity", {"reference": "r", "max_abs": 0.0, "max_rel": NAN, "tolerance": 0.01}),
        "compare",
        "'parity.max_rel' is nan",
    ),
    BadRun(
        "repeat throughput NaN",
        _with_part("repeats", [{**REPEAT, "throughput_items_per_s": NAN}]),
        "compare",
        "'repeats[0].throughput_items_per_s' is nan",
    ),
    BadRun(
        "repeat p50 negative",
        _with_part("repeats", [{**REPEAT, "latency_s": {**REPEAT["latency_s"], "p50": -0.01}}]),
        "report",
        "'repeats[0].latency_s.p50' is -0.01",
    ),
    BadRun(
        "contention share Inf",
        _with_part("contention", {**CONTENTION, "others_share": INF}),
        "summary",
        "'contention.others_share' is inf",
    ),
    BadRun(
        "contention flag null",
        _with_part("contention", {**CONTENTION, "readable": None}),
        "compare",
        "'contention.readable' is None",
    ),
    BadRun(
        "stability threshold NaN",
        _with_part(
            "stability",
            {"repeats": 3, "mode": "p", "cv": 0.1, "round_spread": 0.1, "threshold": NAN, "unstable": False},
        ),
        "report",
        "'stability.threshold' is nan",
    ),
    BadRun(
        "placement replicas -1",
        _with_part(
            "placement",
            {
                "instances": 1,
                "ipus_per_instance": 1,
                "replicas": -1,
                "stages": 1,
                "runner": "inline",
                "shared_device": True,
                "devices": ["cpu"],
            },
        ),
        "summary",
        "'placement.replicas' is -1",
    ),
    # Item 1: pytest-benchmark's own numbers.
    BadRun("sample NaN", _sample(NAN), "compare", "'stats.data[3]' is nan"),
    BadRun("sample negative", _sample(-0.01), "compare", "'stats.data[3]' is -0.01"),
    BadRun("sample Infinity", _sample(INF), "summary", "'stats.data[3]' is inf"),
    BadRun("sample string", _sample("slow"), "report", "'stats.data[3]' is 'slow'"),
    BadRun("samples not a list", _stats_set("data", {"a": 1}), "compare", "'stats.data' is an object"),
    BadRun("stats median NaN", _stats_set("median", NAN), "compare", "'stats.median' is nan"),
    BadRun("stats min negative", _stats_set("min", -1.0), "summary", "'stats.min' is -1.0"),
    BadRun("stats max 400 digits", _stats_set("max", HUGE), "report", "'stats.max' is 1000"),
    # Times no timed call can take: 0 s (below the timer's resolution) and beyond a day; and a rate
    # that means calls shorter than the timer resolves. The same rule for the record and for
    # pytest-benchmark's own statistics, in every reader.
    BadRun(
        "p50 0 s",
        _set("latency_s", "p50", value=0.0),
        "compare",
        "'latency_s.p50' is 0.0: a timed call takes at least the timer's resolution (1e-09 s), so it "
        "must be > 0",
        gates=("latency.p50:+5%",),
    ),
    BadRun(
        "min 0 s", _set("latency_s", "min", value=0), "summary", "'latency_s.min' is 0.0: a timed call takes"
    ),
    BadRun(
        "p99 1e308 s",
        _set("latency_s", "p99", value=1e308),
        "report",
        "'latency_s.p99' is 1e+308: a call beyond a day (86400 s) is no measurement",
    ),
    BadRun(
        "repeat max two days",
        _with_part("repeats", [{**REPEAT, "latency_s": {**REPEAT["latency_s"], "max": 172800.0}}]),
        "compare",
        "'repeats[0].latency_s.max' is 172800.0: a call beyond a day",
    ),
    BadRun(
        "throughput beyond the timer",
        _set("throughput_items_per_s", value=1e10),
        "compare",
        "'throughput_items_per_s' is 10000000000.0: 2 items a call at that rate means calls shorter than "
        "the timer's resolution (1e-09 s)",
        gates=("throughput:-5%",),
    ),
    BadRun("sample 0 s", _sample(0.0), "compare", "'stats.data[3]' is 0.0: a timed call takes at least"),
    BadRun("stats median 0 s", _stats_set("median", 0), "summary", "'stats.median' is 0: a timed call"),
    BadRun(
        "stats max 1e308 s", _stats_set("max", 1e308), "report", "'stats.max' is 1e+308: a call beyond a day"
    ),
    # A benchmark twice in one run: each reader would pick a different copy.
    BadRun(
        "a benchmark twice",
        _twice,
        "compare",
        "is in it twice: a run has one result per benchmark; give the JSON file pytest-benchmark wrote",
        gates=("throughput:-5%",),
        names="benchmark 'tests/test_mlp.py::test_mlp[torch-cpu-2]' is in it twice",
    ),
    BadRun("a benchmark twice, summary", _twice, "summary", "is in it twice", names="benchmark"),
    # Item 2: what used to be a traceback.
    BadRun(
        "group is a number", _bench_set("group", 5), "compare", "'group' is 5: it must be a string or null"
    ),
    BadRun("group is a list", _bench_set("group", ["g"]), "report", "'group' is a list"),
    BadRun("name is null", _bench_set("name", None), "summary", "'name' is None: it must be a string"),
    BadRun("fullname is a number", _bench_set("fullname", 7), "compare", "'fullname' is 7"),
    BadRun("params is a list", _bench_set("params", [1]), "compare", "'params' is a list"),
    BadRun(
        "latency_unsupported a string",
        _set("latency_unsupported", value="p99"),
        "compare",
        "'latency_unsupported' is 'p99': it must be a list",
    ),
    BadRun(
        "latency_unsupported of numbers",
        _set("latency_unsupported", value=[99]),
        "summary",
        "'latency_unsupported[0]' is 99",
    ),
    BadRun("extra_info a list", _bench_set("extra_info", []), "report", "'extra_info' is a list"),
    BadRun(
        "record target a number", _set("target", value=1), "summary", "'target' is 1: it must be a string"
    ),
    BadRun("compile_cached a string", _set("compile_cached", value="no"), "compare", "must be true or false"),
    BadRun(
        "rounds_policy unknown", _set("rounds_policy", value="often"), "report", "'rounds_policy' is 'often'"
    ),
    # Item 3: gates given, nothing checked.
    BadRun(
        "no benchmark in common", _rename, "compare", "gates: nothing was checked", 1, ("throughput:-5%",)
    ),
    BadRun(
        "no benchmark in common, absolute gate",
        _rename_and_drop_records,
        "compare",
        "gates: nothing was checked",
        1,
        ("latency.p99<2ms",),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=str)
def test_bad_run(row: BadRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline = write(tmp_path / "base.json", bench(2, 0.01, 200.0))
    document = json.loads(write(tmp_path / "unused.json", bench(2, 0.01, 200.0, seed=1)).read_text())
    row.mutate(document)
    candidate = tmp_path / "cand.json"
    candidate.write_text(json.dumps(document), encoding="utf-8")  # NaN and Infinity as Python writes them
    if row.command == "compare":
        argv = ["compare", str(baseline), str(candidate), *(f"--gate={g}" for g in row.gates)]
    elif row.command == "report":
        argv = ["report", str(candidate), "-o", str(tmp_path / "report")]
    else:
        argv = [row.command, str(candidate)]

    code = cli.main(argv)

    out, err = capsys.readouterr()
    assert code == row.exit_code
    if row.exit_code == 2:
        assert err.count("\n") == 1, err
        assert err.startswith(f"pytest-ipu: {candidate}: {row.names}"), err
        assert row.message_part in err
        assert "Traceback" not in err
    else:
        assert row.message_part in out
    assert not (tmp_path / "report" / "index.html").exists()


def test_there_are_forty_rows_or_more() -> None:
    assert len(ROWS) >= 40


def test_json_nested_100000_deep_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"benchmarks": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    for argv in (["summary", str(path)], ["compare", str(path), str(path)], ["report", str(path)]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err == (
            f"pytest-ipu: {path}: not a pytest-benchmark run: its JSON is nested too deeply to read; "
            "give the JSON file pytest-benchmark wrote\n"
        )


@dataclass(frozen=True)
class BadArgs:
    """A bad command line to ``pytest-ipu``: ``argv`` is made in the test's folder (which holds a
    valid run as ``good.json``); the command answers with one line on stderr and ``exit_code``."""

    description: str
    argv: Callable[[Path], list[str]]
    message_part: str
    exit_code: int = 2

    def __str__(self) -> str:
        return self.description


ARGS_ROWS = [
    BadArgs(
        "doctor --timeout 1e308",
        lambda _: ["doctor", "--timeout", "1e308"],
        "doctor --timeout 1e+308: not a positive number of seconds up to 86400; give e.g. 300",
    ),
    BadArgs(
        "report of a file named in no encoding",
        lambda d: ["report", _not_utf8_name(d), "-o", str(d / "report")],
        "index.html",
        exit_code=0,
    ),
    BadArgs("doctor --timeout nan", lambda _: ["doctor", "--timeout", "nan"], "doctor --timeout nan"),
    BadArgs("doctor --timeout 0", lambda _: ["doctor", "--timeout", "0"], "doctor --timeout 0"),
    BadArgs(
        "merge with a FIFO",
        lambda d: ["merge", str(d / "out.json"), str(d / "good.json"), _fifo(d)],
        "a-fifo: is a FIFO, not a regular file; give the JSON file pytest-benchmark wrote",
    ),
    BadArgs("summary of a FIFO", lambda d: ["summary", _fifo(d)], "a-fifo: is not a regular file, not a run"),
    BadArgs("compare with a FIFO", lambda d: ["compare", str(d / "good.json"), _fifo(d)], "a-fifo: is not a"),
]


def _not_utf8_name(folder: Path) -> str:
    """A valid run under a name whose bytes are not UTF-8 (``name_\\xff.json``)."""
    path = folder / os.fsdecode(b"name_\xff.json")
    write(path, bench(2, 0.01, 200.0))
    return str(path)


def _fifo(folder: Path) -> str:
    """A FIFO nobody writes to: reading it would block forever."""
    path = folder / "a-fifo"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize("row", ARGS_ROWS, ids=str)
def test_bad_arguments(row: BadArgs, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "good.json", bench(2, 0.01, 200.0))

    code = cli.main(row.argv(tmp_path))

    out, err = capsys.readouterr()
    assert code == row.exit_code
    assert "Traceback" not in out + err
    if row.exit_code == 0:  # a strange input that is still good: the command does its work
        assert row.message_part in out, out
        return
    assert err.count("\n") == 1, err
    assert err.startswith("pytest-ipu: "), err
    assert row.message_part in err
    assert "Traceback" not in err
