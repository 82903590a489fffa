"""``pytest-ipu ab``'s decision on paired runs (``pytest_ipu.results.ab``), on hand-made values and
records: the arithmetic exactly, drift cancelling within pairs, one pair, absolute gates, missing
benchmarks and values, the tables and the exit codes."""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
from pathlib import Path

import pytest

from pytest_ipu.backports import zip_strict
from pytest_ipu.cli import ab as ab_runner
from pytest_ipu.measure import stats
from pytest_ipu.results import ab
from pytest_ipu.results import gates
from pytest_ipu.results import schema
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from tests.unit.run_files import record

MS = 1e-3
#: Latencies of five pairs that drift by 2x between pairs (a loaded runner), alike on both sides.
DRIFT = [1.0 * MS, 1.5 * MS, 2.0 * MS, 1.2 * MS, 1.8 * MS]


def _gate(text: str) -> gates.Gate:
    return gates.parse(text)


def _expected_p(logs: list[float], against: float, higher_better: bool = False) -> float:
    """The one-sided t test of the module docstring, computed here on its own."""
    mean, se = statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(len(logs))
    excess = (against - mean) if higher_better else (mean - against)
    return stats.t_sf(excess / se, len(logs) - 1)


# --- One gate on paired values ----------------------------------------------------------------------


def test_identical_sides_pass_with_no_change() -> None:
    verdict = ab.check_paired(_gate("latency.p50:+5%"), "b", DRIFT, list(DRIFT))
    assert verdict.passed
    assert verdict.change == 0.0
    assert verdict.p_value == 1.0
    assert verdict.interval == (1.0, 1.0)
    assert verdict.baseline == pytest.approx(verdict.current)
    assert verdict.line().endswith(": pass (" + verdict.method + ")")


def test_a_constant_30_percent_slowdown_fails_with_p_below_alpha() -> None:
    base = [1.0 * MS] * 5
    slow = [1.3 * MS] * 5
    verdict = ab.check_paired(_gate("latency.p50:+10%"), "b", base, slow)
    assert not verdict.passed
    assert verdict.change == pytest.approx(0.3)
    assert verdict.p_value is not None
    assert verdict.p_value < 0.01
    assert "FAIL" in verdict.line()


def test_the_t_test_and_interval_are_exactly_the_rule() -> None:
    ratios = [1.28, 1.30, 1.32, 1.31, 1.29]
    base = [1.0 * MS, 2.0 * MS, 1.5 * MS, 1.1 * MS, 1.7 * MS]
    cand = [b * r for b, r in zip_strict(base, ratios)]
    verdict = ab.check_paired(_gate("latency.p50:+10%"), "b", base, cand, alpha=0.01)
    logs = [math.log(c) - math.log(b) for b, c in zip_strict(base, cand)]
    assert verdict.p_value == pytest.approx(_expected_p(logs, math.log(1.1)), rel=1e-12)
    mean, se = statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(5)
    half = stats.t_isf(0.005, 4) * se
    assert verdict.interval == pytest.approx((math.exp(mean - half), math.exp(mean + half)), rel=1e-12)
    assert verdict.change == pytest.approx(math.exp(mean) - 1.0, rel=1e-12)
    # The two sides' geometric means: their ratio is exactly the geometric-mean ratio.
    assert verdict.current is not None
    assert verdict.baseline is not None
    assert verdict.current / verdict.baseline == pytest.approx(math.exp(mean), rel=1e-12)
    assert not verdict.passed
    assert "5 ABBA pairs" in verdict.method
    assert "df 4" in verdict.method


def test_throughput_regresses_when_it_drops() -> None:
    base = [1000.0, 900.0, 1100.0, 950.0]
    ratios = [0.70, 0.72, 0.69, 0.71]
    cand = [b * r for b, r in zip_strict(base, ratios)]
    dropped = ab.check_paired(_gate("throughput:-5%"), "b", base, cand)
    logs = [math.log(c) - math.log(b) for b, c in zip_strict(base, cand)]
    assert dropped.p_value == pytest.approx(_expected_p(logs, math.log(0.95), higher_better=True), rel=1e-12)
    assert not dropped.passed
    risen = ab.check_paired(_gate("throughput:-5%"), "b", base, [b / r for b, r in zip_strict(base, ratios)])
    assert risen.passed
    assert risen.p_value is not None
    assert risen.p_value > 0.99


def test_drift_that_moves_both_sides_of_a_pair_alike_cancels() -> None:
    """A 3% slowdown under a drift of 2x between pairs: each pair's ratio is exactly 1.03, so the
    drift leaves no trace. A +5% gate passes (not beyond), a +1% gate fails (significantly beyond)."""
    slower = [v * 1.03 for v in DRIFT]
    within = ab.check_paired(_gate("latency.p50:+5%"), "b", DRIFT, slower)
    assert within.passed
    assert within.change == pytest.approx(0.03)
    assert within.interval == pytest.approx((1.03, 1.03))
    beyond = ab.check_paired(_gate("latency.p50:+1%"), "b", DRIFT, slower)
    assert not beyond.passed
    assert beyond.p_value is not None
    assert beyond.p_value < 0.01
    # Unpaired, the 3% would drown: the sides' spread across pairs is 25x the change.
    assert statistics.stdev(DRIFT) / statistics.fmean(DRIFT) > 0.25


def test_noise_within_pairs_beyond_the_threshold_is_not_significant() -> None:
    """A geometric mean past the threshold that the pairs do not support passes, 'not significant'."""
    base = [1.0 * MS] * 4
    cand = [1.40 * MS, 0.95 * MS, 1.30 * MS, 0.90 * MS]
    verdict = ab.check_paired(_gate("latency.p50:+5%"), "b", base, cand)
    assert verdict.change is not None
    assert verdict.change > 0.05
    assert verdict.p_value is not None
    assert verdict.p_value >= 0.01
    assert verdict.passed
    assert ": pass, not significant (" in verdict.line()


def test_one_pair_has_no_variance_estimate_and_never_a_p() -> None:
    failed = ab.check_paired(_gate("latency.p50:+10%"), "b", [1.0 * MS], [1.3 * MS])
    assert not failed.passed  # the threshold alone decides
    assert failed.p_value is None
    assert failed.interval is None
    assert "no variance estimate: use more --pairs" in failed.method
    assert "p=" not in failed.line()
    assert "CI" not in failed.line()
    same = ab.check_paired(_gate("latency.p50:+10%"), "b", [1.0 * MS], [1.0 * MS])
    assert same.passed
    assert "p=" not in same.line()


def test_an_absolute_gate_applies_to_the_candidates_median() -> None:
    base = [5 * MS] * 3  # the baseline does not matter
    passing = ab.check_paired(_gate("latency.p99<2ms"), "b", base, [1.9 * MS, 2.1 * MS, 1.95 * MS])
    assert passing.passed
    assert passing.current == pytest.approx(1.95 * MS)
    assert passing.baseline is None
    assert passing.p_value is None
    assert "candidate's median over 3 pair(s)" in passing.method
    failing = ab.check_paired(_gate("latency.p99<2ms"), "b", base, [2.1 * MS, 2.2 * MS, 1.9 * MS])
    assert not failing.passed
    assert failing.line().startswith("b latency.p99: 2.1 ms, bound < 2 ms: FAIL")


def test_missing_values_fail_on_the_candidate_and_are_not_compared_on_the_baseline() -> None:
    gate = _gate("energy:+5%")
    no_candidate = ab.check_paired(gate, "b", [1.0, 1.0], [1.0, None], candidate_gap="power not measured")
    assert not no_candidate.passed
    assert "no value in the candidate: power not measured" in no_candidate.method
    no_baseline = ab.check_paired(gate, "b", [None, 1.0], [1.0, 1.0], baseline_gap="why")
    assert no_baseline.passed
    assert ": not compared (no value in the baseline: why)" in no_baseline.line()


def test_a_zero_leaves_the_threshold_on_the_medians() -> None:
    verdict = ab.check_paired(_gate("compile:+5%"), "b", [0.0, 1.0, 1.0], [2.0, 2.0, 2.0])
    assert not verdict.passed
    assert verdict.p_value is None
    assert "threshold only on the medians" in verdict.method


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="alpha"):
        ab.check_paired(_gate("throughput:-5%"), "b", [1.0], [1.0], alpha=1.0)
    with pytest.raises(ValueError, match="pairs"):
        ab.check_paired(_gate("throughput:-5%"), "b", [1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="pairs"):
        ab.check_paired(_gate("throughput:-5%"), "b", [], [])


def test_summary_p_tests_no_change_two_sided() -> None:
    base = [1.0, 2.0, 3.0]
    cand = [1.1, 2.0, 2.9]
    summary = ab.summarise(base, cand, alpha=0.05)
    logs = [math.log(c) - math.log(b) for b, c in zip_strict(base, cand)]
    mean, se = statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(3)
    assert summary.p == pytest.approx(2 * stats.t_sf(abs(mean) / se, 2), rel=1e-12)
    assert summary.ratio == pytest.approx(math.exp(mean))
    assert summary.n == 3
    one = ab.summarise([1.0], [2.0])
    assert (one.ratio, one.interval, one.p) == (2.0, None, None)


# --- Whole runs -------------------------------------------------------------------------------------


def _bench(name: str, p50: float, throughput: float) -> StoredBenchmark:
    return StoredBenchmark(
        name, f"test_b.py::{name}", None, schema.from_json(record(1, p50, throughput)), None, {}, {}
    )


def _run(label: str, *benches: StoredBenchmark) -> StoredRun:
    return StoredRun(Path(f"{label}.json"), {}, {}, None, benches)


def _sides(pairs: int, slowdown: float) -> tuple[list[StoredRun], list[StoredRun]]:
    """``pairs`` pairs of runs of test_x and test_y drifting alike; the candidate's test_x slower."""
    base, cand = [], []
    for i in range(pairs):
        drift = DRIFT[i % len(DRIFT)]
        base.append(_run(f"b{i}", _bench("test_x", drift, 1 / drift), _bench("test_y", drift, 1 / drift)))
        x = drift * slowdown
        cand.append(_run(f"c{i}", _bench("test_x", x, 1 / x), _bench("test_y", drift, 1 / drift)))
    return base, cand


def test_analyse_gates_every_benchmark_and_shows_the_metrics() -> None:
    base, cand = _sides(4, 1.3)
    result = ab.analyse(base, cand, [_gate("throughput:-5%"), _gate("latency.p90:+10%")], labels=("A", "B"))
    assert {(line.benchmark, line.metric) for line in result.lines} == {
        (b, m)
        for b in ("test_x", "test_y")
        for m in ("latency.p50", "latency.p90", "latency.p99", "throughput")
    }
    failed = {(v.benchmark, v.gate.metric) for v in result.failed}
    assert failed == {("test_x", "throughput"), ("test_x", "latency.p90")}
    assert len(result.verdicts) == 4
    assert result.missing == ()
    assert ab.exit_code(result) == 1
    lines = ab.gate_lines(result)
    assert lines[0] == "gates: 4 checked, 2 failed"
    assert lines[1:] == [v.line() for v in result.verdicts]


def test_identical_runs_pass() -> None:
    base, _ = _sides(3, 1.0)
    result = ab.analyse(base, list(base), [_gate("throughput:-5%")])
    assert result.failed == ()
    assert ab.exit_code(result) == 0


def test_a_benchmark_missing_on_one_side_is_listed_not_failed() -> None:
    base, cand = _sides(2, 1.0)
    cand[1] = _run("c1", *(b for b in cand[1].benchmarks if b.name != "test_y"))
    only_candidate = _bench("test_z", MS, 1000.0)
    cand[0] = _run("c0", *cand[0].benchmarks, only_candidate)
    result = ab.analyse(base, cand, [_gate("throughput:-5%")])
    assert result.missing == (
        "test_b.py::test_y: not in candidate pair 2: not compared",
        "test_b.py::test_z: not in any baseline run, candidate pair 2: not compared",
    )
    assert [v.benchmark for v in result.verdicts] == ["test_x"]
    assert ab.exit_code(result) == 0
    assert ab.exit_code(result, strict=True) == 1
    assert "missing: test_b.py::test_y: not in candidate pair 2" in ab.render_table(result)


def test_gates_given_but_nothing_checked_exits_1() -> None:
    base = [_run("b0", _bench("test_x", MS, 1000.0))]
    cand = [_run("c0", _bench("test_other", MS, 1000.0))]
    result = ab.analyse(base, cand, [_gate("throughput:-5%")])
    assert result.verdicts == ()
    assert ab.gate_lines(result) == [
        "gates: nothing was checked: no benchmark was measured with a pytest-ipu record in every run"
    ]
    assert ab.exit_code(result) == 1
    assert ab.exit_code(ab.analyse(base, cand, [])) == 0  # no gates: nothing to fail


def test_a_missing_value_names_the_records_reason() -> None:
    base, cand = _sides(2, 1.0)
    result = ab.analyse(base, cand, [_gate("energy:+5%")])
    (verdict,) = (v for v in result.verdicts if v.benchmark == "test_x")
    assert not verdict.passed
    assert "candidate pair 1: power not measured" in verdict.method
    assert not any(line.metric == "energy" for line in result.lines)  # no value anywhere: no row


def test_renderers_show_medians_ratio_interval_and_p() -> None:
    base, cand = _sides(3, 1.3)
    result = ab.analyse(base, cand, [_gate("throughput:-5%")], labels=("git:main (abc)", "git:HEAD (def)"))
    table = ab.render_table(result)
    assert table.splitlines()[:2] == ["baseline: git:main (abc)", "candidate: git:HEAD (def)"]
    assert "test_x (test_b.py::test_x)" in table
    row = next(line for line in table.splitlines() if line.startswith("latency.p50") and "worse" in line)
    assert "1.5 ms" in row
    assert "1.95 ms" in row
    assert "1.300" in row
    assert "+30.0% worse" in row
    markdown = ab.render_markdown(result)
    assert "**test_x** (`test_b.py::test_x`)" in markdown
    assert "| metric | baseline | candidate | ratio | 99% CI | p | change |" in markdown
    rows = list(csv.DictReader(io.StringIO(ab.render_csv(result))))
    x = next(r for r in rows if r["benchmark"] == "test_x" and r["metric"] == "latency.p50")
    assert float(x["ratio"]) == pytest.approx(1.3)
    assert float(x["baseline_median"]) == pytest.approx(1.5 * MS)
    assert len(x["baseline_values"].split(";")) == 3
    assert x["pairs"] == "3"
    assert x["better"] == "lower"
    assert x["unit"] == "s"
    assert set(ab.RENDERERS) == set(ab.FORMATS) == {"table", "markdown", "csv"}


def test_one_pair_tables_show_no_p() -> None:
    base, cand = _sides(1, 1.3)
    result = ab.analyse(base, cand, [_gate("throughput:-5%")])
    table = ab.render_table(result)
    assert "1 pair: no variance estimate: use more --pairs" in table
    row = next(line for line in table.splitlines() if line.startswith("throughput"))
    # The CI and p columns are empty ("-"): one pair has no spread to estimate them from.
    assert re.search(r"0\.769\s+-\s+-\s+-23\.1% worse$", row), row
    assert all("p=" not in line for line in ab.gate_lines(result))
    assert ab.exit_code(result) == 1  # a 30% drop fails on the threshold alone


def test_abba_order_alternates_which_side_runs_first() -> None:
    assert ab_runner.abba_order(3) == [
        (1, "baseline"),
        (1, "candidate"),
        (2, "candidate"),
        (2, "baseline"),
        (3, "baseline"),
        (3, "candidate"),
    ]
