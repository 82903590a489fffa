"""Independent repeats (``--ipu-repeats``): the interleaved order, pooling, process workers, and the
flags a record carries (``unstable``, ``capped``), through inner pytest runs.

Nothing here bounds wall time: orders are read from files the inner tests write; ``unstable`` is
provoked by a window clock that steps ten times further in one repeat than in the other (the
throughputs, and so the spread, are then the same on any machine), ``capped`` by rounds that cannot
all fit under the cap (a call lasts at least its sleep, however loaded the machine).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

ORDERED = """
import os
import time
from pathlib import Path

import pytest


@pytest.mark.parametrize("name", ["a", "b", "c"])
def test_step(ipu_benchmark, name):
    with Path("order.txt").open("a") as out:
        out.write(f"{name} {os.getpid()}\\n")
    record = ipu_benchmark(lambda: time.sleep(0.001), rounds=4, warmup_rounds=1)
    assert record.rounds in (4, 12)  # one repeat's rounds, then the pooled record's
"""


def _records(path: Path) -> dict[str, dict[str, Any]]:
    data = json.loads(path.read_text())
    return {b["name"]: {**b["extra_info"]["ipu"], "stats": b["stats"]} for b in data["benchmarks"]}


def test_repeats_run_round_robin_over_the_parametrized_set_and_pool(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_IPU_REPEATS", "3")
    pytester.makepyfile(test_ordered=ORDERED)
    result = pytester.runpytest("--benchmark-json=out.json", "--junitxml=runs.xml")
    result.assert_outcomes(passed=3)  # one result per test, whatever the repeats
    order = [line.split()[0] for line in (pytester.path / "order.txt").read_text().splitlines()]
    assert order == ["a", "b", "c"] * 3
    # Each repeat is a run of the test through pytest's own protocol, which reporters see...
    assert (pytester.path / "runs.xml").read_text().count("<testcase ") == 9
    # ...and one benchmark per test in pytest-benchmark's results: the last repeat's rounds.
    assert len(json.loads((pytester.path / "out.json").read_text())["benchmarks"]) == 3
    records = _records(pytester.path / "out.json")
    assert sorted(records) == ["test_step[a]", "test_step[b]", "test_step[c]"]
    for record in records.values():
        assert [r["index"] for r in record["repeats"]] == [1, 2, 3]
        assert [r["rounds"] for r in record["repeats"]] == [4, 4, 4]
        assert [r["process"] for r in record["repeats"]] == ["this"] * 3
        assert record["rounds"] == 12
        # pytest-benchmark keeps the last repeat's rounds; the record pools all of them.
        assert record["stats"]["rounds"] == 4
        # The pooled median is of every call of every repeat: it lies within the repeats' medians.
        medians = [r["latency_s"]["p50"] for r in record["repeats"]]
        assert min(medians) <= record["latency_s"]["p50"] <= max(medians)
        assert record["window_s"] == pytest.approx(sum(r["window_s"] for r in record["repeats"]))
        items = sum(r["throughput_items_per_s"] * r["window_s"] for r in record["repeats"])
        assert record["throughput_items_per_s"] == pytest.approx(items / record["window_s"])
        assert (record["stability"]["repeats"], record["stability"]["mode"]) == (3, "interleaved")
        assert record["stability"]["basis"] == "repeats"
        assert record["stability"]["cv"] is not None
    # The table says how many repeats and how far apart they were.
    result.stdout.fnmatch_lines(["*[[]a[]]*3 cv *%*"])


def test_one_repeat_measures_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ordered=ORDERED.replace("(4, 12)", "(4,)"))
    pytester.runpytest("--benchmark-json=out.json", "--ipu-repeats=1").assert_outcomes(passed=3)
    assert len((pytester.path / "order.txt").read_text().splitlines()) == 3
    for record in _records(pytester.path / "out.json").values():
        assert len(record["repeats"]) == 1
        assert (record["stability"]["mode"], record["stability"]["cv"]) == ("single", None)
        assert record["stability"]["basis"] == "rounds"


def test_the_marker_sets_one_tests_repeats(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_marked="""
import pytest

@pytest.mark.ipu(repeats=2)
def test_two(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=3)

def test_one(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=3)
"""
    )
    pytester.runpytest("--benchmark-json=out.json").assert_outcomes(passed=2)
    records = _records(pytester.path / "out.json")
    assert len(records["test_two"]["repeats"]) == 2
    assert len(records["test_one"]["repeats"]) == 1  # PYTEST_IPU_REPEATS=1 from the environment


def test_a_failing_earlier_repeat_is_reported_once_and_not_run_again(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_IPU_REPEATS", "3")
    pytester.makepyfile(
        test_flaky="""
from pathlib import Path

import pytest


@pytest.mark.parametrize("name", ["good", "bad"])
def test_x(ipu_benchmark, name):
    runs = Path(f"{name}.txt")
    count = len(runs.read_text()) if runs.exists() else 0
    runs.write_text("x" * (count + 1))
    ipu_benchmark(lambda: None, rounds=3)
    if name == "bad" and count == 1:
        raise AssertionError("the second repeat of bad fails")
"""
    )
    result = pytester.runpytest("--benchmark-json=out.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: the second repeat of bad fails*"])
    assert (pytester.path / "good.txt").read_text() == "xxx"
    assert (pytester.path / "bad.txt").read_text() == "xx"  # never run after its failure
    assert list(_records(pytester.path / "out.json")) == ["test_x[good]"]


def test_a_module_ending_with_failed_repeats_is_torn_down_for_the_next_module(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As a target that is not there fails every benchmark's set-up under --ipu-missing-sdk=fail
    # (torch:cuda without CUDA): the module's last tests are done after their first, failed repeat,
    # and its fixtures are released all the same, before the next module's tests run.
    monkeypatch.setenv("PYTEST_IPU_REPEATS", "3")
    pytester.makepyfile(
        test_a="""
import pytest


@pytest.fixture(scope="module")
def shared():
    yield
    with open("released.txt", "w") as out:
        out.write("module fixture released")


@pytest.fixture
def unavailable():
    raise RuntimeError("target torch:cuda is not available")


def test_plain(benchmark, shared):
    benchmark(lambda: None)


@pytest.mark.parametrize("n", [1, 2])
def test_cuda(ipu_benchmark, shared, unavailable, n):
    ipu_benchmark(lambda: None, rounds=3)
""",
        test_b="""
def test_next_module(benchmark):
    benchmark(lambda: None)
""",
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.no_fnmatch_line("*previous item was not torn down properly*")
    assert (pytester.path / "released.txt").read_text() == "module fixture released"


def test_process_mode_measures_earlier_repeats_in_fresh_workers(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_IPU_REPEATS", "3")
    pytester.makepyfile(test_ordered=ORDERED.replace('["a", "b", "c"]', '["a"]'))
    result = pytester.runpytest(
        "--benchmark-json=out.json", "--ipu-repeat-mode=process", "--ipu-gate=latency.p50<100s"
    )
    result.assert_outcomes(passed=1)
    pids = [line.split()[1] for line in (pytester.path / "order.txt").read_text().splitlines()]
    assert len(set(pids)) == len(pids) == 3  # two workers and this process
    record = _records(pytester.path / "out.json")["test_step[a]"]
    assert [r["process"] for r in record["repeats"]] == ["worker", "worker", "this"]
    assert record["rounds"] == 12
    assert record["stability"]["mode"] == "process"
    # Only this process gates: one check, not one per worker.
    result.stdout.fnmatch_lines(["*1 gate check(s) on 1 benchmark(s)*: 1 PASS, 0 FAIL, 0 INCONCLUSIVE*"])


def test_a_failing_worker_fails_the_test_naming_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_IPU_REPEATS", "2")
    pytester.makepyfile(
        test_worker="""
import os

def test_w(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=3)
    if os.environ.get("PYTEST_IPU_REPEAT_WORKER"):
        raise RuntimeError("only in the worker")
"""
    )
    result = pytester.runpytest("--ipu-repeat-mode=process")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*pytest-ipu: repeat worker 1 of test_worker.py::test_w exited 1:*", "*only in the worker*"]
    )


def test_a_killed_worker_fails_the_test_naming_the_signal(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Killed as the out-of-memory killer kills: the test fails in one line naming the worker and the
    # signal, not a bare exit code.
    monkeypatch.setenv("PYTEST_IPU_REPEATS", "2")
    pytester.makepyfile(
        test_worker="""
import os
import signal

def test_w(ipu_benchmark):
    if os.environ.get("PYTEST_IPU_REPEAT_WORKER"):
        os.kill(os.getpid(), signal.SIGKILL)
    ipu_benchmark(lambda: None, rounds=3)
"""
    )
    result = pytester.runpytest("--ipu-repeat-mode=process")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["pytest-ipu: repeat worker 1 of test_worker.py::test_w was killed by SIGKILL (exit -9): *"]
    )


def test_repeats_that_differ_are_flagged_unstable(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_IPU_REPEATS", "2")
    pytester.makepyfile(
        test_drift="""
import itertools
from pathlib import Path

import pytest

from pytest_ipu.measure import timing

#: How far the window's clock moves at each of its reads: a round lasts one step on it, and the
#: second repeat's steps are ten times the first's.
STEPS_NS = (2_000_000, 20_000_000)


@pytest.fixture(autouse=True)
def stepping_clock(monkeypatch):
    # The window's clock (timed_rounds' injectable one) moves by a fixed step at each read, so the
    # repeats' throughputs are what the steps make them on any machine, loaded or not.
    marker = Path("ran")
    step = STEPS_NS[1] if marker.exists() else STEPS_NS[0]
    marker.touch()
    reads = itertools.count(0, step)
    real = timing.timed_rounds

    def timed_rounds(*args, **kwargs):
        return real(*args, clock=lambda: next(reads), **kwargs)

    monkeypatch.setattr(timing, "timed_rounds", timed_rounds)


def test_drift(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=5)
"""
    )
    result = pytester.runpytest("--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    record = _records(pytester.path / "out.json")["test_drift"]
    # One read opens the window and one ends each of its 5 rounds: 5 steps of 2 ms, then of 20 ms.
    throughputs = [r["throughput_items_per_s"] for r in record["repeats"]]
    assert throughputs == pytest.approx([500.0, 50.0], rel=1e-9)
    # The spread between the repeats is their throughputs' coefficient of variation, and it decides.
    cv = statistics.stdev(throughputs) / statistics.fmean(throughputs)
    assert record["stability"]["cv"] == pytest.approx(cv, rel=1e-9)
    assert (record["stability"]["threshold"], record["stability"]["unstable"]) == (0.05, True)
    result.stdout.fnmatch_lines(
        [
            "*unstable*",
            f"unstable: test_drift: throughput varied {cv * 100:.1f}% (cv) between 2 repeats, above 5%",
        ]
    )


def test_the_hard_cap_ends_rounds_and_flags_the_record(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_slow="""
import time

def test_slow(ipu_benchmark):
    ipu_benchmark(lambda: time.sleep(0.005))
"""
    )
    # 1000 rounds of 5 ms are at least 5 s; the cap (2 x 50 ms) ends them long before.
    result = pytester.runpytest(
        "--benchmark-json=out.json", "--ipu-max-time=50ms", "--ipu-min-rounds=1000", "--ipu-max-time-cap=2x"
    )
    result.assert_outcomes(passed=1)
    record = _records(pytester.path / "out.json")["test_slow"]
    budget = record["budget"]
    assert (budget["ended"], budget["capped"], budget["budget_s"]) == ("cap", True, 0.05)
    assert budget["cap_s"] == pytest.approx(0.1)
    # The cap is checked between rounds: the window passes it, then the rounds end.
    assert budget["window_s"] >= budget["cap_s"]
    assert record["rounds"] < 1000
    assert budget["min_rounds_past_budget"] is True  # the 1000 minimum pushed it past the budget, to the cap
    result.stdout.fnmatch_lines(["*capped*", "capped: test_slow: the hard cap (100 ms) ended the rounds: *"])


def test_auto_rounds_end_at_the_budget(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_fill="""
import time

def test_fill(ipu_benchmark):
    ipu_benchmark(lambda: time.sleep(0.001))
"""
    )
    pytester.runpytest("--benchmark-json=out.json", "--ipu-max-time=0.2").assert_outcomes(passed=1)
    record = _records(pytester.path / "out.json")["test_fill"]
    budget = record["budget"]
    assert budget["budget_s"] == 0.2
    assert budget["cap_s"] == pytest.approx(0.6)
    # Rounds planned with headroom end at the round boundary nearest the budget: within half a
    # mean round of it.
    if budget["ended"] == "budget":
        assert budget["window_s"] * (1 + 0.5 / record["rounds"]) >= budget["budget_s"]
    assert budget["ratio"] == pytest.approx(record["window_s"] / 0.2)


def test_maxfail_stops_the_earlier_repeats_too(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_IPU_REPEATS", "3")
    pytester.makepyfile(
        test_stop="""
from pathlib import Path

import pytest


@pytest.mark.parametrize("name", ["a", "b", "c"])
def test_x(ipu_benchmark, name):
    with Path("ran.txt").open("a") as out:
        out.write(name)
    ipu_benchmark(lambda: None, rounds=3)
    assert name != "a", "a fails in its first repeat"
"""
    )
    result = pytester.runpytest("-x")
    result.assert_outcomes(failed=1)
    assert (pytester.path / "ran.txt").read_text() == "a"
