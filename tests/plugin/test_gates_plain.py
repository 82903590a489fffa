"""A plain pytest-benchmark suite (its own ``benchmark`` fixture: ``pedantic`` and plain calls),
written without pytest-ipu, gated in-run (``--ipu-gate``) and by ``pytest-ipu compare --gate``.

Its baselines are written with pytest-ipu switched off (``-p no:ipu``), as a team's existing runs
are. The ``pedantic`` benchmarks time with a clock of the test's own
(``--benchmark-timer=gate_clock.now``, as tests/plugin/test_gates_plugin.py does) that moves only by
what each call says it took: exactly 1 ms, or 3 ms once regressed, on any machine, so every verdict
here comes out the same on a busy machine. A plain call (``benchmark(fn)``) calibrates against
pytest-benchmark's timer, which such a clock cannot serve: it is timed in real time, and its
regression is tenfold (1 ms of sleep against 10 ms), far beyond any spread a loaded machine gives.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_ipu.cli import main as cli
from tests.plugin.inner import GATE_CLOCK

PLAIN = """
import os

from gate_clock import work

SLOW = float(os.environ.get("SLOW", "0.001"))


def test_steady(benchmark):
    benchmark.pedantic(work, args=(0.001,), rounds=20, warmup_rounds=1)


def test_changing(benchmark):
    benchmark.pedantic(work, args=(SLOW,), rounds=20, iterations=2)
"""

#: What test_changing takes a call once it has regressed: three times as long.
REGRESSED = "0.003"

CALLED = """
import os
import time


def test_called(benchmark):
    benchmark(time.sleep, float(os.environ.get("NAP", "0.001")))
"""

CLOCK = "--benchmark-timer=gate_clock.now"
GATES = ("--ipu-gate=time.median:+20%", "--ipu-gate=throughput:-20%")


@pytest.fixture(autouse=True)
def gate_clock(pytester: pytest.Pytester) -> None:
    """The clock module, importable by the inner runs (which import it anew each run, from 0)."""
    pytester.makepyfile(gate_clock=GATE_CLOCK)
    pytester.syspathinsert()


def _baselines(pytester: pytest.Pytester, count: int, *args: str) -> list[Path]:
    """``count`` runs of the unchanged suite written without pytest-ipu, oldest first."""
    paths = []
    for n in range(count):
        # In a process of its own: without pytest-ipu, pytest-benchmark 4.0.0 leaves the file its
        # --benchmark-json opened (an argparse FileType) to the garbage collector, whose ResourceWarning
        # would land in this test.
        result = pytester.runpytest_subprocess("-p", "no:ipu", *args, f"--benchmark-json=base{n}.json")
        result.assert_outcomes(passed=2)
        paths.append(pytester.path / f"base{n}.json")
    assert "pytest_ipu" not in json.loads(paths[0].read_text())  # no trace of pytest-ipu in them
    return paths


def _gate_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith("pytest-ipu gate FAILED: ")]


def test_a_plain_suite_passes_unchanged_and_fails_the_slower_benchmarks_own_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_work=PLAIN)
    _baselines(pytester, 3, CLOCK)
    result = pytester.runpytest(CLOCK, "--ipu-baseline=base*.json", *GATES, "--benchmark-json=same.json")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*pytest-ipu gates*",
            "4 gate check(s) on 2 benchmark(s) against base2.json (and 2 earlier baseline run(s)): "
            "4 PASS, 0 FAIL, 0 INCONCLUSIVE",
        ]
    )
    # The verdicts are in the run's file, under pytest-benchmark's median's metric name.
    recorded = json.loads((pytester.path / "same.json").read_text())["pytest_ipu"]["gates"]
    assert [(v["benchmark"], v["gate"], v["outcome"]) for v in recorded] == [
        ("test_steady", "latency.p50:+20%", "PASS"),
        ("test_steady", "throughput:-20%", "PASS"),
        ("test_changing", "latency.p50:+20%", "PASS"),
        ("test_changing", "throughput:-20%", "PASS"),
    ]

    monkeypatch.setenv("SLOW", REGRESSED)
    result = pytester.runpytest(CLOCK, "--ipu-baseline=base*.json", *GATES)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)  # the gate fails the slower benchmark's own test
    latency = (
        "test_changing latency.p50: 1 ms -> 3 ms (+200.0%, threshold +20%), ratio interval [[]3.000, "
        "3.000[]]: FAIL (run-to-run: 3 baseline runs (geometric mean; spread 0.0% sd between runs, df 2, "
        "alpha 0.05))"
    )
    result.stdout.fnmatch_lines(
        [
            "*_ test_changing _*",
            f"pytest-ipu gate FAILED: {latency}",
            "pytest-ipu gate FAILED: test_changing throughput: 1,000 items/s -> 333.3 items/s (-66.7%, *",
            "*pytest-ipu gates*",
            "4 gate check(s) on 2 benchmark(s) against base2.json (and 2 earlier baseline run(s)): "
            "2 PASS, 2 FAIL, 0 INCONCLUSIVE",
            f"FAILED {latency}",
            "*short test summary info*",
            # pytest before 8 shows no message beside a failure whose report a plugin failed.
            "FAILED test_work.py::test_changing*",
        ]
    )
    # Two verdicts fail the test (the short summary repeats the second line under CI=true, where
    # pytest shows a failure's message whole).
    assert len(set(_gate_lines(result))) == 2


def test_one_baseline_run_is_inconclusive_naming_the_cause(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_work=PLAIN)
    _baselines(pytester, 1, CLOCK)
    result = pytester.runpytest(CLOCK, "--ipu-baseline=base0.json", "--ipu-gate=latency.p50:+20%")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # --ipu-inconclusive=fail, the default
    result.stdout.fnmatch_lines(
        [
            "2 gate check(s) on 2 benchmark(s) against base0.json: 0 PASS, 0 FAIL, 2 INCONCLUSIVE",
            "job: *",
            "INCONCLUSIVE (fails the run) test_steady: latency.p50: no threshold can be "
            "decided (a pytest-benchmark benchmark has one value per run (its rounds are not independent "
            "repeats): give 3 or more baseline runs)",
        ]
    )
    # What a plain benchmark cannot give is named in the verdict, not an error.
    result = pytester.runpytest(
        CLOCK, "--ipu-baseline=base0.json", "--ipu-gate=cpu_time:+20%", "--ipu-inconclusive=warn"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "FAILED test_steady cpu_time: no value -> no value (threshold +20%): FAIL (no value in the "
            "current record: a pytest-benchmark benchmark has no cpu_time: pytest-benchmark keeps time "
            "statistics only (measure with ipu_benchmark for it))",
        ]
    )


def test_a_plain_call_ten_times_slower_fails_its_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_called=CALLED)
    for n in range(3):
        pytester.runpytest_subprocess("-p", "no:ipu", f"--benchmark-json=base{n}.json").assert_outcomes(
            passed=1
        )
    monkeypatch.setenv("NAP", "0.01")
    result = pytester.runpytest("--ipu-baseline=base*.json", "--ipu-gate=latency.p50:+50%")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1)
    assert len(_gate_lines(result)) == 1
    assert _gate_lines(result)[0].startswith("pytest-ipu gate FAILED: test_called latency.p50: ")
    assert ": FAIL (run-to-run: 3 baseline runs" in _gate_lines(result)[0]


def test_a_partial_entry_is_no_baseline_for_its_benchmark_with_a_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_work=PLAIN)
    paths = _baselines(pytester, 3, CLOCK)
    # The newest run's test_steady entry: a pytest-ipu fixture began it and its test stopped before
    # the record was written.
    document = json.loads(paths[2].read_text())
    entry = next(b for b in document["benchmarks"] if b["name"] == "test_steady")
    entry["extra_info"]["ipu_pending"] = "ipu_benchmark"
    paths[2].write_text(json.dumps(document))
    result = pytester.runpytest(
        CLOCK, "--ipu-baseline=base*.json", "--ipu-gate=latency.p50:+20%", "--ipu-baseline-missing=warn"
    )
    assert result.ret == pytest.ExitCode.OK
    partial = (
        "is a partial entry (ipu_benchmark began measuring it and its test stopped before the pytest-ipu "
        "record was written)"
    )
    result.stdout.fnmatch_lines(
        [
            "1 gate check(s) on 1 benchmark(s) against base2.json (and 2 earlier baseline run(s)): "
            "1 PASS, 0 FAIL, 0 INCONCLUSIVE",
            f"MISSING (a warning) test_steady {partial} in the baseline *",
            f"SKIPPED baseline base2.json: test_work.py::test_steady {partial}: not a baseline for it",
        ]
    )


def test_compare_gates_the_last_run_against_the_runs_before_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(test_work=PLAIN)
    paths = [str(p) for p in _baselines(pytester, 3, CLOCK)]
    # The candidate runs with pytest-ipu active: its plain benchmarks have no records either.
    pytester.runpytest(CLOCK, "--benchmark-json=same.json").assert_outcomes(passed=2)
    monkeypatch.setenv("SLOW", REGRESSED)
    pytester.runpytest(CLOCK, "--benchmark-json=slow.json").assert_outcomes(passed=2)
    capsys.readouterr()

    def compare(*files: str) -> tuple[int, list[str]]:
        code = cli.main(["compare", *files, "--gate", "time.median:+20%"])
        return code, capsys.readouterr().out.splitlines()

    code, out = compare(*paths, "same.json")
    assert code == 0
    assert "gates: 2 checked: 2 PASS, 0 FAIL, 0 INCONCLUSIVE" in out
    code, out = compare(*paths, "slow.json")
    assert code == 1
    assert "gates: 2 checked: 1 PASS, 1 FAIL, 0 INCONCLUSIVE" in out
    assert (
        "test_changing latency.p50: 1 ms -> 3 ms (+200.0%, threshold +20%), ratio interval [3.000, 3.000]: "
        "FAIL (run-to-run: 3 baseline runs (geometric mean; spread 0.0% sd between runs, df 2, alpha 0.05))"
    ) in out
    # One earlier run: no spread to weigh, and a plain benchmark has no repeats.
    code, out = compare(paths[0], "same.json")
    assert code == 3
    assert (
        "INCONCLUSIVE test_steady: latency.p50: no threshold can be decided (a "
        "pytest-benchmark benchmark has one value per run (its rounds are not independent repeats): give 3 "
        "or more baseline runs)"
    ) in out


def test_pytest_benchmarks_saved_runs_are_a_baseline_through_benchmark_compare(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_work=PLAIN)
    pytester.runpytest("-p", "no:ipu", CLOCK, "--benchmark-autosave").assert_outcomes(passed=2)
    (saved,) = (pytester.path / ".benchmarks").rglob("0001_*.json")
    # pytest-benchmark warns that the machine info differs (pytest-ipu adds machine_info["ipu"]),
    # which -W error would make an error.
    result = pytester.runpytest(
        CLOCK,
        "--benchmark-compare",
        "--ipu-gate=latency.p50:+20%",
        "--ipu-inconclusive=warn",
        "-W",
        "ignore::pytest_benchmark.logger.PytestBenchmarkWarning",
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "2 gate check(s) on 2 benchmark(s) against --benchmark-compare: 0 PASS, 0 FAIL, 2 INCONCLUSIVE",
            "job: *",
            "INCONCLUSIVE (a warning: --ipu-inconclusive=warn) test_steady: latency.p50: no threshold can be "
            "decided (a pytest-benchmark benchmark has one value per run *",
        ]
    )
    assert "SKIPPED" not in result.stdout.str()
    assert saved.exists()
