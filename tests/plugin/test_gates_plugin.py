"""Gates in a pytest run: baselines, relative and absolute gates, marker gates, missing benchmarks,
and the three verdicts (PASS, FAIL, INCONCLUSIVE) with what an INCONCLUSIVE one does.

In-process runs of plain callables (no deep-learning runtime). A "slow" benchmark sleeps 10 ms per
call instead of 1 ms, a 900 % regression; the others do not change. A failing gate fails the
benchmark's own test (``pytest-ipu gate FAILED: <verdict line>``) and is listed again in the
"pytest-ipu gates" summary.

Every verdict here must come out the same on a busy machine, where two runs of unchanged code can
differ by more than a gate allows. So the round times that pytest-benchmark records, from which
the latency figures come, are read from a clock of the test's own
(``--benchmark-timer=gate_clock.now``) that moves only by what each call says it took: exactly 1
ms, or 10 ms once regressed, on any machine. Throughput, from pytest-ipu's wall-clock window,
stays real: the regressed benchmark runs at least 10 ms a round against 1 ms, so its real
throughput falls far beyond any threshold used here, and the unchanged ones are gated only with
generous thresholds or by their latency.

Inner runs measure one repeat (tests/plugin/conftest.py): a relative gate then has no variance
estimate and is INCONCLUSIVE. The runs that decide ask for three repeats (``REPEATS``); the
earlier repeats are timed by pytest-ipu's own clock, in real time, so their gates are generous for
unchanged code and their regression is tenfold.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.plugin.inner import GATE_CLOCK
from tests.plugin.inner import assert_usage_error

BENCH = """
import os

import pytest

from gate_clock import work

SLOW = float(os.environ.get("SLOW", "0.001"))


@pytest.mark.parametrize("batch", [1, 4])
def test_steady(ipu_benchmark, batch):
    ipu_benchmark(lambda: work(0.001), rounds=30, warmup_rounds=1, items_per_call=batch)


def test_changing(ipu_benchmark):
    ipu_benchmark(lambda: work(SLOW), rounds=30, warmup_rounds=1)
"""

#: What test_changing sleeps once it has regressed.
REGRESSED = "0.01"

NEW_BENCH = """

def test_new(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=30, warmup_rounds=1)
"""

ARGS = ("--ipu-power=off", "--benchmark-timer=gate_clock.now")
#: Three repeats of each benchmark: the spread between them is what a gate decides by.
REPEATS = "--ipu-repeats=3"


@pytest.fixture(autouse=True)
def gate_clock(pytester: pytest.Pytester) -> None:
    """The clock module, importable by the inner runs (which import it anew each run, from 0)."""
    pytester.makepyfile(gate_clock=GATE_CLOCK)
    pytester.syspathinsert()


def _failed_items(result: pytest.RunResult) -> list[str]:
    """The node ids of the inner run's failed tests, from its short test summary, in order."""
    return [line.split()[1] for line in result.outlines if line.startswith("FAILED test_work.py::")]


def _gate_lines(result: pytest.RunResult) -> list[str]:
    """The lines with which gates failed the inner run's tests."""
    return [line for line in result.outlines if line.startswith("pytest-ipu gate FAILED: ")]


def _baseline(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str) -> Path:
    pytester.makepyfile(test_work=BENCH)
    monkeypatch.setenv("SLOW", "0.001")
    pytester.runpytest(*ARGS, *args, "--benchmark-json=base.json").assert_outcomes(passed=3)
    return pytester.path / "base.json"


def test_a_real_regression_fails_the_run_with_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _baseline(pytester, monkeypatch, REPEATS)
    monkeypatch.setenv("SLOW", REGRESSED)
    result = pytester.runpytest(
        *ARGS,
        REPEATS,
        "--ipu-baseline=base.json",
        "--ipu-gate=latency.p50:+50%",
        "--benchmark-json=current.json",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1, passed=2)  # the gate fails the regressed benchmark's own test
    current = pytester.path / "current.json"
    # Latency from the test's clock: exactly 1 ms and 10 ms in every repeat, so no spread between
    # repeats; the interval is the change widened by the 5 % drift allowance on each side.
    verdict = (
        "test_changing latency.p50: 1 ms -> 10 ms (+900.0%, threshold +50%), ratio interval [[]9.524, "
        "10.500[]]: FAIL (repeats: 3 current vs 3 baseline repeats (log scale, spread 0.0% sd between "
        "repeats, df 4, alpha 0.05); within-run noise, widened by the 5% run-to-run drift allowance "
        "(--ipu-drift))"
    )
    result.stdout.fnmatch_lines(
        [
            "*_ test_changing _*",
            f"pytest-ipu gate FAILED: {verdict}",
            "*pytest-ipu gates*",
            "3 gate check(s) on 3 benchmark(s) against base.json: 2 PASS, 1 FAIL, 0 INCONCLUSIVE",
            f"FAILED {verdict}",
            "*short test summary info*",
            "FAILED test_work.py::test_changing - Failed: pytest-ipu gate FAILED: *",
        ]
    )
    assert _failed_items(result) == ["test_work.py::test_changing"]
    # The verdicts are in the run's file too, each with its line.
    recorded = json.loads(current.read_text())["pytest_ipu"]["gates"]
    assert [(v["benchmark"], v["outcome"]) for v in recorded] == [
        ("test_steady[1]", "PASS"),
        ("test_steady[4]", "PASS"),
        ("test_changing", "FAIL"),
    ]
    assert recorded[2]["gate"] == "latency.p50:+50%"
    assert recorded[2]["line"].startswith("test_changing latency.p50: 1 ms -> 10 ms")
    assert recorded[2]["interval"][0] > 1.5  # the whole interval is beyond the threshold


def test_one_repeat_a_side_is_inconclusive_and_fails_unless_told_otherwise(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _baseline(pytester, monkeypatch)  # one repeat: no spread to judge a change by
    monkeypatch.setenv("SLOW", REGRESSED)
    gate = ("--ipu-baseline=base.json", "--ipu-gate=latency.p50:+50%")
    verdict = (
        "test_changing latency.p50: 1 ms -> 10 ms (+900.0%, threshold +50%): INCONCLUSIVE (no variance "
        "estimate); one repeat on each side: use --ipu-repeats=3 or 3 or more baseline runs"
    )
    folded = (
        "latency.p50: no threshold can be decided (one repeat on each side: use --ipu-repeats=3 "
        "or 3 or more baseline runs)"
    )
    result = pytester.runpytest(*ARGS, *gate)
    # Not a pass, even for a tenfold change: the evidence cannot tell it from noise.
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "pytest-ipu gate INCONCLUSIVE (fails under --ipu-inconclusive=fail; 'warn' or 'pass' accepts "
            f"it): {verdict}",
            "3 gate check(s) on 3 benchmark(s) against base.json: 0 PASS, 0 FAIL, 3 INCONCLUSIVE",
            "job: a FAIL is one at the 1% family-wise level (Holm over 3 gate check(s)); INCONCLUSIVE fails "
            "the run",
            f"INCONCLUSIVE (fails the run) test_changing: {folded}",
        ]
    )
    # Each undecided benchmark once in the summary; pytest -v lists every verdict's own line.
    assert sum(line.startswith("INCONCLUSIVE (fails the run) test_changing") for line in result.outlines) == 1
    warned = pytester.runpytest(*ARGS, *gate, "--ipu-inconclusive=warn", "-v")
    assert warned.ret == pytest.ExitCode.OK
    warned.assert_outcomes(passed=3)
    warned.stdout.fnmatch_lines([f"INCONCLUSIVE (a warning: --ipu-inconclusive=warn) {verdict}"])
    monkeypatch.setenv("PYTEST_IPU_INCONCLUSIVE", "pass")
    accepted = pytester.runpytest(*ARGS, *gate)
    assert accepted.ret == pytest.ExitCode.OK
    accepted.stdout.fnmatch_lines(
        [f"INCONCLUSIVE (accepted as a pass: --ipu-inconclusive=pass) test_changing: {folded}"]
    )


def test_the_summary_names_each_undecided_benchmark_once_and_the_json_keeps_every_verdict(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _baseline(pytester, monkeypatch)  # one repeat: nothing decides, on either metric
    gate = ("--ipu-baseline=base.json", "--ipu-gate=latency.p50:+50%", "--ipu-gate=latency.mean:+50%")
    result = pytester.runpytest(*ARGS, *gate, "--ipu-inconclusive=warn", "--benchmark-json=out.json")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "6 gate check(s) on 3 benchmark(s) against base.json: 0 PASS, 0 FAIL, 6 INCONCLUSIVE",
            "job: a FAIL is one at the 1% family-wise level (Holm over 6 gate check(s)); INCONCLUSIVE a "
            "warning: --ipu-inconclusive=warn",
            "INCONCLUSIVE (a warning: --ipu-inconclusive=warn) test_changing: latency.p50, latency.mean: no "
            "threshold can be decided (one repeat on each side*",
        ]
    )
    undecided = [line for line in result.outlines if line.startswith("INCONCLUSIVE (a warning")]
    assert [line.split()[4] for line in undecided] == ["test_steady[1]:", "test_steady[4]:", "test_changing:"]
    recorded = json.loads((pytester.path / "out.json").read_text())["pytest_ipu"]["gates"]
    assert len(recorded) == 6
    assert {v["noise"] for v in recorded} == {"one repeat"}
    # pytest -v: every verdict on its own line.
    verbose = pytester.runpytest(*ARGS, *gate, "--ipu-inconclusive=warn", "-v")
    assert sum(line.startswith("INCONCLUSIVE (a warning") for line in verbose.outlines) == 6


def test_no_change_passes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    _baseline(pytester, monkeypatch, REPEATS)
    result = pytester.runpytest(*ARGS, REPEATS, "--ipu-baseline=base.json", "--ipu-gate=latency.p50:+50%")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        ["3 gate check(s) on 3 benchmark(s) against base.json: 3 PASS, 0 FAIL, 0 INCONCLUSIVE"]
    )


def test_a_change_within_the_drift_allowance_of_the_threshold_is_inconclusive(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _baseline(pytester, monkeypatch, REPEATS)
    # The same code, exact latencies (the test's clock): no spread between repeats at all. A 3 %
    # threshold is within the 5 % drift allowance of no change, so one baseline run cannot decide it.
    gate = ("--ipu-baseline=base.json", "--ipu-gate=latency.p50:+3%", "--ipu-inconclusive=warn")
    result = pytester.runpytest(*ARGS, REPEATS, *gate)
    result.stdout.fnmatch_lines(
        [
            "3 gate check(s) on 3 benchmark(s) against base.json: 0 PASS, 0 FAIL, 3 INCONCLUSIVE",
            "INCONCLUSIVE (a warning: *) test_changing: latency.p50: spread 0.0% between repeats, 5% drift "
            "allowance: smallest threshold this evidence decides: +5.0%",
        ]
    )
    # A smaller allowance, for a machine whose runs agree better, decides it.
    result = pytester.runpytest(*ARGS, REPEATS, *gate, "--ipu-drift=1%")
    result.stdout.fnmatch_lines(
        ["3 gate check(s) on 3 benchmark(s) against base.json: 3 PASS, 0 FAIL, 0 INCONCLUSIVE"]
    )


def test_absolute_gates_need_no_baseline(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_work=BENCH)
    result = pytester.runpytest(
        *ARGS, REPEATS, "--ipu-gate=latency.p50<1s", "--ipu-gate=throughput>1000000/s"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=3)  # each benchmark misses 1,000,000 items/s: each test fails
    assert _failed_items(result) == [
        "test_work.py::test_steady[1]",
        "test_work.py::test_steady[4]",
        "test_work.py::test_changing",
    ]
    result.stdout.fnmatch_lines(
        [
            "pytest-ipu gate FAILED: test_steady[[]1[]] throughput: * items/s, bound > 1000000 items/s, "
            "interval [[]*[]]: FAIL (absolute bound on the interval of 3 repeats' geometric mean (df 2, "
            "alpha 0.05))",
            "*pytest-ipu gates*",
            "6 gate check(s) on 3 benchmark(s): 3 PASS, 3 FAIL, 0 INCONCLUSIVE",
        ]
    )
    # Only the bound that was missed fails a test, once for each benchmark.
    lines = _gate_lines(result)
    assert len(lines) == 3
    assert all("throughput" in line and "latency.p50" not in line for line in lines)
    summary = [
        line
        for line in result.outlines
        if line.startswith("FAILED test_") and "::" not in line and "bound >" in line
    ]
    assert len(summary) == 3
    # One repeat leaves a bound nothing to be judged by, however far the value is from it.
    once = pytester.runpytest(*ARGS, "--ipu-gate=latency.p50<1s")
    assert once.ret == pytest.ExitCode.TESTS_FAILED
    once.stdout.fnmatch_lines(
        [
            "INCONCLUSIVE (fails the run) test_changing: latency.p50: no threshold can be "
            "decided (one repeat: no spread to bound the value by; use --ipu-repeats=3)"
        ]
    )


def test_gates_from_the_environment_and_the_ini_file(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_work=BENCH)
    pytester.makeini("[pytest]\nipu_repeats = 3\nipu_gate =\n    latency.p50<1s\n    latency.p99<1s\n")
    monkeypatch.delenv("PYTEST_IPU_REPEATS")  # the ini file's three repeats
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["6 gate check(s) on 3 benchmark(s): 6 PASS, 0 FAIL, 0 INCONCLUSIVE"])
    monkeypatch.setenv("PYTEST_IPU_GATE", "throughput>1000000/s; latency.p50<1s")
    result = pytester.runpytest(*ARGS)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["6 gate check(s) on 3 benchmark(s): 3 PASS, 3 FAIL, 0 INCONCLUSIVE"])


def test_relative_gates_without_a_baseline_stop_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_work=BENCH)
    result = pytester.runpytest(*ARGS, "--ipu-gate=throughput:-5%")
    assert_usage_error(
        pytester,
        result,
        "relative gates (such as 'throughput:-5%') need a baseline run, and there is none: pass "
        "--ipu-baseline=PATH (a pytest-benchmark JSON file) or --benchmark-compare with a saved run "
        "(--benchmark-save or --benchmark-autosave makes one)",
    )


def test_a_bad_expression_is_a_usage_error_naming_its_source(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_work=BENCH)
    result = pytester.runpytest(*ARGS, "--ipu-gate=latency.p99<2xs")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [line for line in result.errlines if line.strip()]
    assert line.startswith(
        "ERROR: pytest-ipu: invalid value 'latency.p99<2xs' for --ipu-gate from the command line: "
    )
    assert "'xs'" in line


def test_an_unreadable_baseline_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_work=BENCH)
    (pytester.path / "base.json").write_text("{not json")
    result = pytester.runpytest(*ARGS, "--ipu-baseline=base.json", "--ipu-gate=throughput:-5%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [line for line in result.errlines if line.strip()]
    assert line.startswith("ERROR: pytest-ipu: --ipu-baseline: base.json: not JSON: ")


def test_a_benchmark_missing_from_the_baseline_is_reported_and_fails_only_when_asked(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _baseline(pytester, monkeypatch, REPEATS)
    pytester.makepyfile(test_work=BENCH + NEW_BENCH)
    gate = (REPEATS, "--ipu-baseline=base.json", "--ipu-gate=latency.p50:+50%")
    result = pytester.runpytest(*ARGS, *gate)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "MISSING (a warning) test_new is not in the baseline (base.json): its relative gates "
            "(latency.p50:+50%) were not checked"
        ]
    )
    result = pytester.runpytest(*ARGS, *gate, "--ipu-baseline-missing=fail")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=4)  # no gate failed: the missing benchmark fails the run, not a test
    result.stdout.fnmatch_lines(["MISSING (fails the run) test_new is not in the baseline*"])


def test_a_marker_gate_replaces_the_runs_gate_on_its_metric(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _baseline(pytester, monkeypatch, REPEATS)
    monkeypatch.setenv("SLOW", REGRESSED)
    # test_changing's latency may rise 999 % (it rises 900 %, 950 % with the drift allowance: far
    # beyond the run's 50 %); the others keep the run's gate.
    pytester.makepyfile(
        test_work=BENCH.replace(
            "def test_changing", '@pytest.mark.ipu(gate="latency.p50:+999%")\ndef test_changing'
        )
    )
    result = pytester.runpytest(*ARGS, REPEATS, "--ipu-baseline=base.json", "--ipu-gate=latency.p50:+50%")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        ["3 gate check(s) on 3 benchmark(s) against base.json: 3 PASS, 0 FAIL, 0 INCONCLUSIVE"]
    )


def test_a_run_of_pytest_ipu_ab_checks_no_gate_and_writes_the_markers_gates(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A side's run (``PYTEST_IPU_AB_SIDE=1``): ab gates the pairs, so the run needs no baseline for
    a marker's relative gate or the run's own, checks none, and writes each benchmark's own gates
    into its JSON for ab; without the variable the same run stops for want of a baseline."""
    pytester.makepyfile(
        test_work=BENCH.replace(
            "def test_changing",
            '@pytest.mark.ipu(gate=["latency.p50:+20%", "throughput>1/s"])\ndef test_changing',
        )
    )
    monkeypatch.setenv("PYTEST_IPU_GATE", "latency.p50:+5%")
    result = pytester.runpytest(*ARGS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    monkeypatch.setenv("PYTEST_IPU_AB_SIDE", "1")
    result = pytester.runpytest(*ARGS, "--benchmark-json=run.json", "-W", "error::UserWarning")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=3)
    assert "pytest-ipu gates" not in result.stdout.str()
    section = json.loads((pytester.path / "run.json").read_text())["pytest_ipu"]
    assert "gates" not in section
    assert section["own_gates"] == {"test_work.py::test_changing": ["latency.p50:+20%", "throughput>1/s"]}


def test_a_bad_marker_gate_stops_the_run_at_collection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_work=BENCH.replace("def test_changing", '@pytest.mark.ipu(gate="speed:-5%")\ndef test_changing')
    )
    result = pytester.runpytest(*ARGS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [line for line in result.errlines if line.strip()]
    assert line.startswith(
        "ERROR: pytest-ipu: test_work.py::test_changing: @pytest.mark.ipu(gate=...): bad gate 'speed:-5%'"
    )


def test_pytest_benchmarks_compare_storage_is_a_baseline_too(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_work=BENCH)
    storage = f"--benchmark-storage=file://{pytester.path / 'store'}"
    monkeypatch.setenv("SLOW", "0.001")
    pytester.runpytest(
        *ARGS, REPEATS, storage, "--benchmark-save=base", "--benchmark-save-data"
    ).assert_outcomes(passed=3)
    monkeypatch.setenv("SLOW", REGRESSED)
    result = pytester.runpytest(*ARGS, REPEATS, storage, "--benchmark-compare", "--ipu-gate=latency.p50:+50%")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1, passed=2)
    assert _failed_items(result) == ["test_work.py::test_changing"]
    result.stdout.fnmatch_lines(
        [
            "pytest-ipu gate FAILED: test_changing latency.p50: 1 ms -> 10 ms (+900.0%, threshold +50%), "
            "ratio interval *: FAIL (repeats: *)",
            "*pytest-ipu gates*",
            "3 gate check(s) on 3 benchmark(s) against --benchmark-compare: 2 PASS, 1 FAIL, 0 INCONCLUSIVE",
            "FAILED test_changing latency.p50: *: FAIL (repeats: *)",
        ]
    )


def test_a_baseline_from_other_hardware_is_called_out(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = _baseline(pytester, monkeypatch)
    data = json.loads(base.read_text())
    for bench in data["benchmarks"]:
        bench["extra_info"]["ipu"]["device_name"] = "Another CPU"
    base.write_text(json.dumps(data))
    result = pytester.runpytest(*ARGS, "--ipu-baseline=base.json", "--ipu-gate=latency.p50:+50%")
    result.stdout.fnmatch_lines(
        ["NOTE different hardware: the baseline ran test_steady[[]1[]] on 'Another CPU', this run on *"]
    )


def test_several_baseline_runs_from_a_glob_report_the_machines_drift(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_work=BENCH)
    monkeypatch.setenv("SLOW", "0.001")
    for n in range(3):
        pytester.runpytest(*ARGS, f"--benchmark-json=base{n}.json").assert_outcomes(passed=3)
    monkeypatch.setenv("SLOW", REGRESSED)
    result = pytester.runpytest(*ARGS, "--ipu-baseline=base*.json", "--ipu-gate=latency.p50:+20%")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1, passed=2)
    assert _failed_items(result) == ["test_work.py::test_changing"]
    # Three baseline runs: their spread decides, by the run-to-run test (latency from the test's
    # clock: exactly 1 ms in every run, 10 ms now).
    verdict = (
        "test_changing latency.p50: 1 ms -> 10 ms (+900.0%, threshold +20%), ratio interval [[]10.000, "
        "10.000[]]: FAIL (run-to-run: 3 baseline runs (geometric mean; spread 0.0% sd between runs, df 2, "
        "alpha 0.05))"
    )
    result.stdout.fnmatch_lines(
        [
            f"pytest-ipu gate FAILED: {verdict}",
            "3 gate check(s) on 3 benchmark(s) against base2.json (and 2 earlier baseline run(s)): "
            "2 PASS, 1 FAIL, 0 INCONCLUSIVE",
            f"FAILED {verdict}",
        ]
    )
    result = pytester.runpytest(*ARGS, "--ipu-baseline=nothing*.json", "--ipu-gate=latency.p50:+20%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "no file matches 'nothing*.json'" in result.errlines[0]


def test_with_repeats_a_tenfold_slowdown_fails_and_no_change_passes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_IPU_REPEATS", "3")
    _baseline(pytester, monkeypatch)  # three repeats of each benchmark
    gate = ("--ipu-baseline=base.json", "--ipu-gate=latency.p50:+100%")
    # The same code: every benchmark passes, with three repeats on each side to weigh.
    same = pytester.runpytest(*ARGS, *gate, "--benchmark-json=same.json")
    assert same.ret == pytest.ExitCode.OK
    same.assert_outcomes(passed=3)
    same.stdout.fnmatch_lines(
        ["3 gate check(s) on 3 benchmark(s) against base.json: 3 PASS, 0 FAIL, 0 INCONCLUSIVE"]
    )
    for path in (pytester.path / "base.json", pytester.path / "same.json"):
        records = [b["extra_info"]["ipu"] for b in json.loads(path.read_text())["benchmarks"]]
        assert [len(r["repeats"]) for r in records] == [3, 3, 3]
    # Ten times slower in every repeat: the repeats' interval fails the benchmark's own test.
    monkeypatch.setenv("SLOW", REGRESSED)
    result = pytester.runpytest(*ARGS, *gate)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1, passed=2)
    assert _failed_items(result) == ["test_work.py::test_changing"]
    verdict = (
        "test_changing latency.p50: * -> * (+*%, threshold +100%), ratio interval [[]*, *[]]: FAIL "
        "(repeats: 3 current vs 3 baseline repeats (log scale, spread *% sd between repeats, df 4, alpha "
        "0.05); within-run noise, widened by the 5% run-to-run drift allowance (--ipu-drift))"
    )
    result.stdout.fnmatch_lines(
        [
            f"pytest-ipu gate FAILED: {verdict}",
            "*pytest-ipu gates*",
            "3 gate check(s) on 3 benchmark(s) against base.json: 2 PASS, 1 FAIL, 0 INCONCLUSIVE",
            f"FAILED {verdict}",
        ]
    )
