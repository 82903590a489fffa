"""The job's gate summary on one screen (``results.job_summary``): FAILs first, each undecided
benchmark once with its cause and the smallest threshold its evidence decides, the rest folded."""

from __future__ import annotations

from pytest_ipu.results import decide
from pytest_ipu.results import family
from pytest_ipu.results import gates
from pytest_ipu.results import job_summary
from pytest_ipu.results.decide import Verdict


def _undecided(name: str, metric: str, noise: str, interval: tuple[float, float] | None) -> Verdict:
    gate = gates.parse(f"{metric}:+5%" if metric != "throughput" else "throughput:-5%")
    return Verdict(gate, name, decide.INCONCLUSIVE, 1.0, 1.02, 0.02, interval, "how", "advice", None, noise)


def _failed(name: str) -> Verdict:
    gate = gates.parse("latency.p50:+5%")
    return Verdict(
        gate,
        name,
        decide.FAIL,
        1.0,
        1.3,
        0.3,
        (1.25, 1.35),
        "run-to-run",
        "",
        1e-6,
        "spread 1.0% between runs",
    )


def test_a_cause_the_missing_threshold_already_names_is_said_once() -> None:
    gate = gates.parse("latency.p50:+5%")
    advice = "a pytest-benchmark benchmark has one value per run (its rounds are not independent repeats)"
    plain = Verdict(
        gate,
        "test_plain",
        decide.INCONCLUSIVE,
        1.0,
        1.02,
        0.02,
        None,
        "how",
        advice,
        None,
        "one value per run",
    )
    (line,) = job_summary.lines([plain])
    assert line == f"INCONCLUSIVE test_plain: latency.p50: no threshold can be decided ({advice})"
    assert line.count("one value per run") == 1


def test_metrics_holding_the_same_number_are_one_line_with_the_cause_and_the_smallest_threshold() -> None:
    # A one-round benchmark: latency.p50 and latency.mean are the same value with the same noise.
    verdicts = [
        _undecided("test_once", "latency.p50", "one value per run", None),
        _undecided("test_once", "latency.mean", "one value per run", None),
        _undecided("test_noisy", "latency.p50", "spread 12.0% between runs", (0.9, 1.21)),
        _undecided("test_noisy", "throughput", "spread 12.0% between runs", (0.8, 1.1)),
    ]
    lines = job_summary.lines(verdicts)
    assert len(lines) == 2
    assert lines[0] == (
        "INCONCLUSIVE test_once: latency.p50, latency.mean: one value per run: no threshold can be decided "
        "(advice)"
    )
    assert lines[1] == (
        "INCONCLUSIVE test_noisy: latency.p50: spread 12.0% between runs: smallest threshold this evidence "
        "decides: +21.0% | throughput: spread 12.0% between runs: smallest threshold this evidence decides: "
        "-20.0%"
    )


def test_fails_come_first_and_the_rest_folds_with_each_undecided_benchmark_once() -> None:
    verdicts = []
    for b in range(60):
        for metric in ("latency.p50", "latency.mean"):
            verdicts.append(_undecided(f"test_{b}", metric, "one repeat", None))
    verdicts[30:30] = [_failed("test_slow"), _failed("test_slower")]
    lines = job_summary.lines(verdicts, failed_label="FAILED")
    assert len(lines) == job_summary.MAX_LINES + 1
    assert [line.split(" ")[1] for line in lines[:2]] == ["test_slow", "test_slower"]
    assert all(line.startswith("FAILED ") for line in lines[:2])
    shown = [line.split(" ")[1].rstrip(":") for line in lines[2:-1]]
    assert shown == [f"test_{b}" for b in range(job_summary.MAX_LINES - 2)]  # each once, in order
    assert lines[-1] == "and 42 more INCONCLUSIVE benchmark(s): --verbose lists them"
    # --verbose: every verdict that is not a PASS, each its own line.
    assert job_summary.lines(verdicts, verbose=True) == [v.line() for v in verdicts]


def test_a_fail_of_the_gate_only_says_it_failed_at_the_gate_not_the_job() -> None:
    gate = gates.parse("latency.p50:+5%")
    weak = Verdict(gate, "test_edge", decide.FAIL, 1.0, 1.08, 0.08, (1.051, 1.11), "how", "", 0.04)
    adjusted = family.adjust([weak, *(_failed(f"t{i}") for i in range(99))])
    assert [v.benchmark for v in adjusted if not v.failed] == ["test_edge"]
    (line,) = job_summary.undecided_lines(adjusted)
    assert line.startswith(
        "INCONCLUSIVE test_edge: latency.p50: FAILs its own gate, not beyond the threshold at the job's 1% "
        "family-wise level: its one-sided p=0.04 of 'within the threshold' is above Holm's step 0.01"
    )
    assert line.endswith(": smallest threshold this evidence decides: +11.0%")
