"""``pytest-ipu ab``'s decision on paired runs (``pytest_ipu.results.ab``), on hand-made values and
records: the arithmetic exactly, drift cancelling within pairs, one pair, absolute gates, missing
benchmarks and values, the tables and the exit codes."""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import math
import re
import statistics
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.backports import zip_strict
from pytest_ipu.measure import stats
from pytest_ipu.report import ab as ab_report
from pytest_ipu.results import ab
from pytest_ipu.results import compare
from pytest_ipu.results import decide
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


def _interval(logs: list[float], alpha: float = decide.ALPHA) -> tuple[float, float]:
    """The interval a paired verdict is read from, computed here on its own: the one-sided
    ``1 - alpha`` bounds of the mean log-ratio, ``exp(mean -+ t(1 - alpha, N - 1) x se)``."""
    mean, se = statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(len(logs))
    reach = stats.t_isf(alpha, len(logs) - 1) * se
    return math.exp(mean - reach), math.exp(mean + reach)


def _logs(base: list[float], cand: list[float]) -> list[float]:
    return [math.log(c) - math.log(b) for b, c in zip_strict(base, cand)]


# --- One gate on paired values ----------------------------------------------------------------------


def test_identical_sides_pass_with_no_change() -> None:
    verdict = ab.check_paired(_gate("latency.p50:+5%"), "b", DRIFT, list(DRIFT))
    assert verdict.outcome == decide.PASS
    assert verdict.change == 0.0
    assert verdict.interval == (1.0, 1.0)
    assert verdict.baseline == pytest.approx(verdict.current)
    assert verdict.method == "paired: 5 ABBA pairs' log-ratios (df 4, alpha 0.05)"
    assert verdict.line() == (
        "b latency.p50: 1.453 ms -> 1.453 ms (+0.0%, threshold +5%), ratio interval [1.000, 1.000]: "
        f"PASS ({verdict.method})"
    )


def test_a_constant_30_percent_slowdown_fails() -> None:
    verdict = ab.check_paired(_gate("latency.p50:+10%"), "b", [1.0 * MS] * 5, [1.3 * MS] * 5)
    assert verdict.outcome == decide.FAIL
    assert verdict.change == pytest.approx(0.3)
    assert verdict.interval == pytest.approx((1.3, 1.3))
    assert verdict.advice == ""


def test_the_interval_is_exactly_the_rule() -> None:
    ratios = [1.28, 1.30, 1.32, 1.31, 1.29]
    base = [1.0 * MS, 2.0 * MS, 1.5 * MS, 1.1 * MS, 1.7 * MS]
    cand = [b * r for b, r in zip_strict(base, ratios)]
    verdict = ab.check_paired(_gate("latency.p50:+10%"), "b", base, cand, alpha=0.01)
    logs = _logs(base, cand)
    # t(0.99, 4) = 3.746947, from tables: the one-sided bound at alpha on each side.
    assert stats.t_isf(0.01, 4) == pytest.approx(3.746947, abs=1e-6)
    assert verdict.interval == pytest.approx(_interval(logs, 0.01), rel=1e-12)
    mean = statistics.fmean(logs)
    assert verdict.change == pytest.approx(math.exp(mean) - 1.0, rel=1e-12)
    # The two sides' geometric means: their ratio is exactly the geometric-mean ratio.
    assert verdict.current is not None
    assert verdict.baseline is not None
    assert verdict.current / verdict.baseline == pytest.approx(math.exp(mean), rel=1e-12)
    assert verdict.interval is not None
    assert verdict.interval[0] > 1.1
    assert verdict.outcome == decide.FAIL
    assert verdict.method == "paired: 5 ABBA pairs' log-ratios (df 4, alpha 0.01)"


def test_throughput_regresses_when_it_drops() -> None:
    base = [1000.0, 900.0, 1100.0, 950.0]
    ratios = [0.70, 0.72, 0.69, 0.71]
    cand = [b * r for b, r in zip_strict(base, ratios)]
    dropped = ab.check_paired(_gate("throughput:-5%"), "b", base, cand)
    assert dropped.interval == pytest.approx(_interval(_logs(base, cand)), rel=1e-12)
    assert dropped.interval is not None
    assert dropped.interval[1] < 0.95
    assert dropped.outcome == decide.FAIL
    risen = ab.check_paired(_gate("throughput:-5%"), "b", base, [b / r for b, r in zip_strict(base, ratios)])
    assert risen.outcome == decide.PASS


def test_drift_that_moves_both_sides_of_a_pair_alike_cancels() -> None:
    """A 3% slowdown under a drift of 2x between pairs: each pair's ratio is exactly 1.03, so the
    drift leaves no trace. A +5% gate passes, a +1% gate fails, both on an interval of one point."""
    slower = [v * 1.03 for v in DRIFT]
    within = ab.check_paired(_gate("latency.p50:+5%"), "b", DRIFT, slower)
    assert within.outcome == decide.PASS
    assert within.change == pytest.approx(0.03)
    assert within.interval == pytest.approx((1.03, 1.03))
    beyond = ab.check_paired(_gate("latency.p50:+1%"), "b", DRIFT, slower)
    assert beyond.outcome == decide.FAIL
    # Unpaired, the 3% would drown: the sides' spread across pairs is 25x the change.
    assert statistics.stdev(DRIFT) / statistics.fmean(DRIFT) > 0.25


def test_noise_within_pairs_is_inconclusive_and_says_how_many_pairs_would_decide() -> None:
    base = [1.0 * MS] * 4
    cand = [1.40 * MS, 0.95 * MS, 1.30 * MS, 0.90 * MS]
    verdict = ab.check_paired(_gate("latency.p50:+5%"), "b", base, cand)
    assert verdict.change is not None
    assert verdict.change > 0.05
    assert verdict.outcome == decide.INCONCLUSIVE
    logs = _logs(base, cand)
    assert verdict.interval == pytest.approx(_interval(logs), rel=1e-12)
    # No drift allowance: the pairs carry the drift. The fewest pairs k at which the interval's
    # half-width, t(0.95, k - 1) x se x sqrt(4 / k), falls below the estimate's distance from the threshold.
    se = statistics.stdev(logs) / 2
    reach = stats.t_isf(decide.ALPHA, 3) * se
    m = math.log(1.05)
    gap = abs(statistics.fmean(logs) - m)
    needed = next(k for k in range(5, 1000) if stats.t_isf(decide.ALPHA, k - 1) * se * math.sqrt(4 / k) < gap)
    assert needed == 37
    # The interval reaches below zero, so what it clears is an improvement, not a change within the limit.
    assert m < reach
    assert verdict.advice == (
        f"this evidence fails only changes past {math.expm1(m + reach) * 100:+.1f}% and passes only "
        f"improvements past {math.expm1(m - reach) * 100:+.1f}%; about {needed} pairs (now 4; --max-pairs), "
        "fewer threads or a quieter runner would decide it"
    )
    assert verdict.line().endswith(f": INCONCLUSIVE ({verdict.method}); {verdict.advice}")


def test_one_pair_has_no_variance_estimate() -> None:
    for after in (1.3 * MS, 1.0 * MS):  # beyond the threshold or unchanged: one pair cannot tell
        verdict = ab.check_paired(_gate("latency.p50:+10%"), "b", [1.0 * MS], [after])
        assert verdict.outcome == decide.INCONCLUSIVE
        assert verdict.interval is None
        assert verdict.method == "1 pair"
        assert verdict.advice == ab.NO_VARIANCE == "no variance estimate: use more --pairs"
        assert verdict.line().endswith(": INCONCLUSIVE (1 pair); no variance estimate: use more --pairs")
        assert "interval" not in verdict.line()


def test_an_absolute_gate_judges_the_candidates_geometric_mean_over_the_pairs() -> None:
    base = [5 * MS] * 3  # the baseline does not matter
    cand = [1.9 * MS, 2.1 * MS, 1.95 * MS]
    method = "absolute bound on the candidate's geometric mean over 3 pairs (df 2, alpha 0.05)"
    straddled = ab.check_paired(_gate("latency.p99<2ms"), "b", base, cand)
    assert straddled.outcome == decide.INCONCLUSIVE
    assert straddled.current == pytest.approx(1.95 * MS)  # shown: the median
    assert straddled.baseline is None
    low, high = _interval([math.log(v) for v in cand])
    assert straddled.interval == pytest.approx((low, high), rel=1e-12)
    assert straddled.method == method
    # The pairs are what gives more values here, not --ipu-repeats.
    assert straddled.advice == (
        "the pairs' interval [1.82 ms, 2.16 ms] contains the bound: more pairs (now 3; --max-pairs), "
        "fewer threads or a quieter runner would decide it"
    )
    passing = ab.check_paired(_gate("latency.p99<2.5ms"), "b", base, cand)
    assert passing.outcome == decide.PASS
    failing = ab.check_paired(_gate("latency.p99<1.5ms"), "b", base, cand)
    assert failing.outcome == decide.FAIL
    assert failing.line() == (
        f"b latency.p99: 1.95 ms, bound < 1.5 ms, interval [1.82 ms, 2.16 ms]: FAIL ({method})"
    )
    # One pair, or a value of 0: no interval to judge by.
    one = ab.check_paired(_gate("latency.p99<2.5ms"), "b", [5 * MS], [1.9 * MS])
    assert one.outcome == decide.INCONCLUSIVE
    assert one.advice == ab.NO_VARIANCE
    zero = ab.check_paired(_gate("latency.p99<2.5ms"), "b", base, [0.0, 2.1 * MS, 1.95 * MS])
    assert zero.outcome == decide.INCONCLUSIVE
    assert zero.advice == "a value of 0 leaves no log to bound"


def test_missing_values_fail_on_the_candidate_and_are_inconclusive_on_the_baseline() -> None:
    gate = _gate("energy:+5%")
    no_candidate = ab.check_paired(gate, "b", [1.0, 1.0], [1.0, None], candidate_gap="power not measured")
    assert no_candidate.outcome == decide.FAIL
    assert no_candidate.method == "no value in the candidate: power not measured"
    no_baseline = ab.check_paired(gate, "b", [None, 1.0], [1.0, 1.0], baseline_gap="why")
    assert no_baseline.outcome == decide.INCONCLUSIVE
    assert (
        no_baseline.line()
        == "b energy: no value -> 1 J (threshold +5%): INCONCLUSIVE (no value in the baseline: why)"
    )
    # An absolute gate asks nothing of the baseline: a missing baseline value does not matter.
    bound = ab.check_paired(_gate("energy<2J"), "b", [None, None], [1.0, 1.0])
    assert bound.outcome == decide.PASS


def test_a_zero_leaves_no_log_ratio_to_test() -> None:
    verdict = ab.check_paired(_gate("compile:+5%"), "b", [0.0, 1.0, 1.0], [2.0, 2.0, 2.0])
    assert verdict.outcome == decide.INCONCLUSIVE
    assert verdict.interval is None
    assert verdict.method == "a value of 0 leaves no log-ratio to test"
    assert verdict.change == pytest.approx(1.0)  # of the medians


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match=r"alpha must be within \(0, 0\.5\), got 0\.5"):
        ab.check_paired(_gate("throughput:-5%"), "b", [1.0], [1.0], alpha=0.5)
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
    assert {v.benchmark for v in result.verdicts if v.passed} == {"test_y"}
    assert result.inconclusive == ()
    assert result.decided  # a FAIL is a decision: the sequential plan may stop
    assert result.missing == ()
    assert ab.exit_code(result) == 1
    lines = ab.gate_lines(result)
    assert lines[0] == "gates: 4 checked: 2 PASS, 2 FAIL, 0 INCONCLUSIVE"
    # One screen: every FAIL; the passes are counted.
    assert lines[1:] == [v.line() for v in result.failed]
    # --verbose: every verdict, passes included (a pass's interval shows how close it came).
    every = ab.gate_lines(result, verbose=True)
    assert every[1:] == [v.line() for v in result.verdicts]
    assert any(": PASS (paired: 4 ABBA pairs' log-ratios (df 3, alpha 0.05))" in line for line in every)


def test_identical_runs_pass() -> None:
    base, _ = _sides(3, 1.0)
    result = ab.analyse(base, list(base), [_gate("throughput:-5%")])
    assert result.failed == ()
    assert ab.exit_code(result) == 0


def test_a_benchmarks_own_gate_replaces_the_jobs_on_its_metric() -> None:
    """A noisy benchmark's own wider gate (its marker's, written by the candidate's runs) decides it,
    while the job's gate still judges the others; the job's gates on other metrics still apply."""
    base, cand = _sides(4, 1.2)  # test_x 20 % slower in every pair
    wide = {"test_b.py::test_x": (_gate("latency.p50:+30%"),)}
    cand = [dataclasses.replace(run, own_gates=wide) for run in cand]
    job = [_gate("latency.p50:+5%"), _gate("throughput:-5%")]
    result = ab.analyse(base, cand, job)
    judged = {(v.benchmark, str(v.gate)): v.outcome for v in result.verdicts}
    assert judged == {
        ("test_x", "throughput:-5%"): decide.FAIL,
        ("test_x", "latency.p50:+30%"): decide.PASS,
        ("test_y", "latency.p50:+5%"): decide.PASS,
        ("test_y", "throughput:-5%"): decide.PASS,
    }
    # Without its own gate, the same pairs FAIL the job's: the own gate is what changed.
    plain = ab.analyse(base, [dataclasses.replace(run, own_gates={}) for run in cand], job)
    assert ("test_x", "latency.p50:+5%", decide.FAIL) in {
        (v.benchmark, str(v.gate), v.outcome) for v in plain.verdicts
    }
    # Own gates alone gate the job: their verdicts count in the exit code and the summary.
    alone = ab.analyse(base, cand, [])
    assert [str(g) for g in alone.gates] == ["latency.p50:+30%"]
    assert ab.exit_code(alone) == 0
    assert ab.gate_lines(alone)[0] == "gates: 1 checked: 1 PASS, 0 FAIL, 0 INCONCLUSIVE"
    # The baseline's own gates are not read: the code under test sets them.
    assert (
        ab.analyse(cand, base, job).verdicts
        == ab.analyse([dataclasses.replace(r, own_gates={}) for r in cand], base, job).verdicts
    )


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
    assert "missing: test_b.py::test_y: not in candidate pair 2" in ab_report.render_table(result)


def test_gates_given_but_nothing_checked_exits_1() -> None:
    base = [_run("b0", _bench("test_x", MS, 1000.0))]
    cand = [_run("c0", _bench("test_other", MS, 1000.0))]
    result = ab.analyse(base, cand, [_gate("throughput:-5%")])
    assert result.verdicts == ()
    assert ab.gate_lines(result) == [
        "gates: nothing was checked: no benchmark was measured, with figures to gate, in every run"
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
    table = ab_report.render_table(result)
    assert table.splitlines()[:2] == ["baseline: git:main (abc)", "candidate: git:HEAD (def)"]
    assert "test_x (test_b.py::test_x)" in table
    row = next(line for line in table.splitlines() if line.startswith("latency.p50") and "worse" in line)
    assert "1.5 ms" in row
    assert "1.95 ms" in row
    assert "1.300" in row
    assert "+30.0% worse" in row
    markdown = ab_report.render_markdown(result)
    assert "**test_x** (`test_b.py::test_x`)" in markdown
    assert "| metric | baseline | candidate | ratio | 95% CI | p | change |" in markdown
    # The table's confidence follows the level the verdicts were read at (alpha per look).
    looked = ab.analyse(base, cand, [_gate("throughput:-5%")], alpha=0.01)
    assert "| metric | baseline | candidate | ratio | 99% CI | p | change |" in ab_report.render_markdown(
        looked
    )
    rows = list(csv.DictReader(io.StringIO(ab_report.render_csv(result))))
    x = next(r for r in rows if r["benchmark"] == "test_x" and r["metric"] == "latency.p50")
    assert float(x["ratio"]) == pytest.approx(1.3)
    assert float(x["baseline_median"]) == pytest.approx(1.5 * MS)
    assert len(x["baseline_values"].split(";")) == 3
    assert x["pairs"] == "3"
    assert x["better"] == "lower"
    assert x["unit"] == "s"
    assert set(ab_report.RENDERERS) == set(ab.FORMATS) == {"table", "markdown", "csv"}


def test_one_pair_tables_show_no_p() -> None:
    base, cand = _sides(1, 1.3)
    result = ab.analyse(base, cand, [_gate("throughput:-5%")])
    table = ab_report.render_table(result)
    assert "1 pair: no variance estimate: use more --pairs" in table
    row = next(line for line in table.splitlines() if line.startswith("throughput"))
    # The CI and p columns are empty ("-"): one pair has no spread to estimate them from.
    # Nor a verdict: one pair says nothing of how much pairs differ, so the change is not tested.
    assert re.search(r"0\.769\s+-\s+-\s+-23\.1% not tested$", row), row
    assert ab.gate_lines(result)[1] == (
        "INCONCLUSIVE test_x: throughput: one pair: no threshold can be decided (no variance estimate: use "
        "more --pairs)"
    )
    assert not result.decided
    assert ab.exit_code(result) == 3  # a 30% drop, but one pair cannot tell


def _change_cell(factors: list[float]) -> tuple[ab.RatioSummary, str]:
    """test_x's latency.p50 summary and change cell when each pair's candidate is ``factors[i]``
    times its baseline (the pairs drifting alike, as ``DRIFT``)."""
    base, cand = [], []
    for i, factor in enumerate(factors):
        drift = DRIFT[i % len(DRIFT)]
        base.append(_run(f"b{i}", _bench("test_x", drift, 1 / drift)))
        cand.append(_run(f"c{i}", _bench("test_x", drift * factor, 1 / (drift * factor))))
    result = ab.analyse(base, cand)
    (line,) = (line for line in result.lines if line.metric == "latency.p50")
    row = next(r for r in ab_report.render_table(result).splitlines() if r.startswith("latency.p50"))
    return line.summary(result.alpha), row


def _within_band(summary: ab.RatioSummary) -> bool:
    assert summary.interval is not None
    low, high = summary.interval
    return low > 1 - compare.SAME_WITHIN and high < 1 + compare.SAME_WITHIN


def test_ab_calls_a_change_under_one_percent_the_same_only_on_a_tight_interval() -> None:
    # Pairs 0.5 % slower give or take 10 %: under 1 %, but the interval is far wider than +/- 1 %.
    wide, row = _change_cell([1.10, 0.91, 1.06, 0.95, 1.0])
    assert wide.ratio is not None
    assert abs(wide.ratio - 1) < compare.SAME_WITHIN
    assert not _within_band(wide)
    assert wide.p is not None
    assert wide.p >= decide.ALPHA
    assert row.endswith(f"{(wide.ratio - 1) * 100:+.1f}% within noise"), row
    # Pairs 0.5 % slower give or take 0.1 %: the interval lies within +/- 1 %, the same.
    tight, row = _change_cell([1.004, 1.005, 1.006, 1.005, 1.005])
    assert tight.ratio is not None
    assert abs(tight.ratio - 1) < compare.SAME_WITHIN
    assert _within_band(tight)
    assert row.endswith(" same"), row
    # One pair 0.5 % slower: no variance estimate, so nothing is claimed.
    single, row = _change_cell([1.005])
    assert single.interval is None
    assert row.endswith("+0.5% not tested"), row


def test_noisy_pairs_are_inconclusive_and_exit_3() -> None:
    base, cand = _sides(4, 1.0)
    # test_x's candidate 5 % slower, give or take 10 % a pair: the pairs cannot tell against +5%.
    noisy = []
    for run, factor in zip_strict(cand, (1.15, 0.95, 1.12, 0.98)):
        x = next(b for b in run.benchmarks if b.name == "test_x")
        assert x.record is not None
        p50 = x.record.latency_s.p50 * factor
        noisy.append(_run(str(run.path.stem), _bench("test_x", p50, 1 / p50), *run.benchmarks[1:]))
    result = ab.analyse(base, noisy, [_gate("latency.p50:+5%")], plan="sequential: a plan")
    by_name = {v.benchmark: v for v in result.verdicts}
    assert by_name["test_x"].outcome == decide.INCONCLUSIVE
    assert by_name["test_y"].outcome == decide.PASS
    assert result.inconclusive == (by_name["test_x"],)
    assert not result.decided  # the sequential plan would add pairs
    assert result.plan == "sequential: a plan"
    assert ab_report.render_table(result).splitlines()[2] == "sequential: a plan"
    assert ab.gate_lines(result)[0] == "gates: 2 checked: 1 PASS, 0 FAIL, 1 INCONCLUSIVE"
    assert ab.exit_code(result) == 3
    # A FAIL beside it: 1.
    failing = ab.analyse(base, noisy, [_gate("latency.p50:+5%"), _gate("throughput>1e9/s")])
    assert ab.exit_code(failing) == 1


def test_strict_fails_a_missing_benchmark_whatever_the_verdicts() -> None:
    base, cand = _sides(2, 1.0)
    cand[1] = _run("c1", *(b for b in cand[1].benchmarks if b.name != "test_y"))
    passing = ab.analyse(base, cand, [_gate("throughput:-5%")])
    assert [v.outcome for v in passing.verdicts] == [decide.PASS]
    assert (ab.exit_code(passing), ab.exit_code(passing, strict=True)) == (0, 1)
    # An inconclusive verdict does not hide the missing benchmark from --strict.
    unsure = ab.analyse(base, cand, [_gate("throughput:-5%"), _gate("latency.p50<1.2ms")])
    assert sorted(v.outcome for v in unsure.verdicts) == [decide.INCONCLUSIVE, decide.PASS]
    assert (ab.exit_code(unsure), ab.exit_code(unsure, strict=True)) == (3, 1)


# --- The sequential plan ------------------------------------------------------------------------------


def test_the_sequential_plan_looks_at_about_one_and_a_half_times_the_pairs() -> None:
    plan = ab.Sequential(5, 20)
    assert plan.looks == (5, 8, 12, 18, 20)
    # Pocock's level for these looks: above Bonferroni's 0.05 / 5, since the looks share their pairs.
    assert plan.alpha_per_look == pytest.approx(0.01778, rel=1e-3)
    assert plan.describe() == (
        "sequential: 5 to 20 pairs, verdicts read after 5, 8, 12, 18, 20 pairs, each look at alpha 0.0178 "
        "(Pocock's level for 0.05 over the 5 looks)"
    )
    assert ab.Sequential() == plan  # the command's defaults
    assert ab.Sequential(2, 4).looks == (2, 3, 4)  # at least one more pair at each look
    assert ab.Sequential(5, 20, alpha=0.1).alpha_per_look == pytest.approx(0.0388, rel=1e-2)
    # first == most: a fixed number of pairs, one look at the whole alpha.
    fixed = ab.Sequential(5, 5)
    assert fixed.looks == (5,)
    assert fixed.alpha_per_look == 0.05
    assert fixed.describe() == "5 pair(s), alpha 0.05"


@pytest.mark.parametrize(
    ("first", "most", "alpha", "message"),
    [
        (6, 5, 0.05, r"need 1 <= first \(6\) <= most \(5\) pairs"),
        (0, 5, 0.05, r"need 1 <= first \(0\) <= most \(5\) pairs"),
        (5, 20, 0.5, r"alpha must be within \(0, 0\.5\), got 0\.5"),
    ],
)
def test_a_plan_out_of_range_raises(first: int, most: int, alpha: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ab.Sequential(first, most, alpha)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=300), st.integers(min_value=0, max_value=700))
def test_looks_grow_by_one_to_half_and_end_at_the_most(first: int, extra: int) -> None:
    looks = ab.Sequential(first, first + extra).looks
    assert looks[0] == first
    assert looks[-1] == first + extra
    for before, after in zip(looks, looks[1:]):
        assert before < after <= max(before + 1, math.ceil(before * ab.GROWTH))


@pytest.fixture
def memoised_quantiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """``stats.t_isf`` memoised: thousands of simulated verdicts ask for the same few quantiles, and
    each is a call into SciPy."""
    monkeypatch.setattr(stats, "t_isf", functools.lru_cache(maxsize=None)(stats.t_isf))


#: Simulated experiments of each kind, and the most verdicts of them at a true rate of alpha to
#: accept: the mean plus three binomial standard deviations (a test of the rate at a fixed seed).
DRAWS = 2000
AT_MOST_ALPHA = DRAWS * decide.ALPHA + 3 * math.sqrt(DRAWS * decide.ALPHA * (1 - decide.ALPHA))


def _sequential(
    plan: ab.Sequential, worse: float, seed: int, sigma: float = 0.05, alpha: float | None = None
) -> tuple[Counter[str], Counter[int]]:
    """The command's procedure on ``DRAWS`` seeded experiments of normal log-ratios (mean ``worse``,
    sd ``sigma``) against ``latency.p50:+5%``: judge at each look at ``alpha`` (the plan's alpha
    per look by default), stop at the first that is not INCONCLUSIVE. The outcomes, and the pairs
    each experiment ran."""
    gate = _gate("latency.p50:+5%")
    level = plan.alpha_per_look if alpha is None else alpha
    ratios = np.random.default_rng(seed).normal(worse, sigma, (DRAWS, plan.most))
    # Each look's mean log-ratio and its standard error, for every experiment at once.
    seen = {
        n: (ratios[:, :n].mean(axis=1), ratios[:, :n].std(axis=1, ddof=1) / math.sqrt(n)) for n in plan.looks
    }
    outcomes: Counter[str] = Counter()
    pairs: Counter[int] = Counter()
    for i in range(DRAWS):
        for n in plan.looks:
            means, errors = seen[n]
            outcome = decide.judge(gate, float(means[i]), float(errors[i]), n - 1, level).outcome
            if outcome != decide.INCONCLUSIVE:
                break
        outcomes[outcome] += 1
        pairs[n] += 1
    return outcomes, pairs


@pytest.mark.usefixtures("memoised_quantiles")
def test_the_sequential_plan_keeps_each_wrong_verdict_below_alpha_over_all_its_looks() -> None:
    # A true change exactly at +5 %: any PASS is wrong, and so is any FAIL.
    plan = ab.Sequential(5, 20)
    boundary = math.log(1.05)
    outcomes, _ = _sequential(plan, boundary, seed=41)
    assert outcomes[decide.PASS] <= AT_MOST_ALPHA, outcomes
    assert outcomes[decide.FAIL] <= AT_MOST_ALPHA, outcomes
    # Looking as often at the fixed-sample level would not keep the rates: the reason for Pocock's level.
    peeking, _ = _sequential(plan, boundary, seed=41, alpha=decide.ALPHA)
    assert peeking[decide.PASS] > AT_MOST_ALPHA, peeking
    assert peeking[decide.FAIL] > AT_MOST_ALPHA, peeking


@pytest.mark.usefixtures("memoised_quantiles")
def test_the_sequential_plan_stops_early_when_the_evidence_is_clear() -> None:
    plan = ab.Sequential(5, 20)
    # Unchanged, 3 % noise a pair: nearly always a PASS, and mostly before the most pairs.
    outcomes, pairs = _sequential(plan, 0.0, seed=42, sigma=0.03)
    assert outcomes[decide.PASS] >= 0.99 * DRAWS, outcomes
    assert pairs[5] + pairs[8] > 0.5 * DRAWS, pairs
    assert pairs[20] < 0.05 * DRAWS, pairs
    # 30 % slower: FAIL, at the first look.
    outcomes, pairs = _sequential(plan, math.log(1.3), seed=43, sigma=0.03)
    assert outcomes[decide.FAIL] == DRAWS
    assert pairs[5] >= 0.99 * DRAWS, pairs
