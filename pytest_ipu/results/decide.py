"""Deciding a performance gate: one gate on one benchmark (``check``), and every gate of a run
against its baseline (``GateRunner``); used alike by the pytest plugin and ``pytest-ipu compare``.

Decision rule
-------------
A relative gate (``latency.p99:+10%``, ``throughput:-5%``) fails only when both hold:

1. the observed change of the gated metric, ``current / baseline - 1`` from the two records, is
   beyond the threshold in the metric's worse direction: a rise of more than 10% for
   ``latency.p99:+10%``, a drop of more than 5% for ``throughput:-5%``; and
2. the change is significantly *beyond the threshold* on pytest-benchmark's per-round times: a
   one-sided Mann-Whitney U test (normal approximation with tie and continuity corrections) of
   the hypothesis that the current round times are larger than the baseline's grown by the
   allowed amount (x 1.10 for ``latency.p99:+10%``; x 1/0.95 for ``throughput:-5%``) gives
   p < alpha (0.01 by default). Throughput is tested on the round times too: it regresses when
   rounds take longer.

Why against the threshold and not against "no change": the rounds of one run share its machine
state (clock frequency, neighbours, caches), so two runs of the same code differ by a few percent
as a whole, and a test against no change finds that difference significant, however small. Tested
against the threshold, a run-to-run drift has to exceed the allowed change clearly before the
gate fails. ``benchmarks/test_gate_accuracy.py`` measures the false alarms and detections this
gives, side by side with pytest-benchmark's check; docs/ci.md has the figures and their limits.

The test compares whole distributions of round times, so a change confined to the slowest rounds
(a p99 that grows while the bulk stays put) may be beyond the threshold yet not significant; the
bootstrap interval below shows how far the statistic itself moved.

Each verdict also reports a (1 - alpha) confidence interval, 99% by default, of the ratio current
/ baseline of the gated statistic of the round times: the median for throughput (the ratio of
throughputs, baseline median time / current median time), the percentile itself for
latency.p50, p90 and p99, the minimum and maximum for latency.min and latency.max, the mean for
latency.mean. The interval is a percentile bootstrap of 2000 resamples of both samples, seeded
(``numpy.random.default_rng(0)``), so the same runs always give the same interval.

Energy, power, compile and first-call times are measured once per benchmark, not per round, and a
baseline saved without ``--benchmark-save-data`` keeps no round times: such a gate decides on the
threshold alone, and its verdict's method says so. When the baseline record lacks the metric (the
baseline measured no power, say), the gate cannot compare and passes, saying so.

Given three or more baseline runs (``history``), the verdict also states how much the gated metric
differs between them and the smallest change that drift lets a run-to-run test see; and a gate
that has no per-round samples to test is decided by that run-to-run test instead of the threshold
alone: a one-sided t test of this run's value (log scale) against the baseline runs' mean moved by
the threshold, their spread as the noise, ``k - 1`` degrees of freedom, p < alpha.

An absolute gate (``latency.p99<2ms``, ``throughput>2500/s``) fails when the current value is not
strictly within the bound. A value the current record lacks fails any gate, with the reason the
record gives (for power, the reason it was not measured).

Every gate of a run
-------------------
``GateRunner`` checks a run's benchmarks (``records.Measured``) against baseline runs. Each
benchmark gets the run's gates, except where its own gates (its marker's) name the same metric
(``effective_gates``). Its relative gates compare it with the benchmark of the same full name in
the baseline run, its history is that benchmark's value of the gated metric in every baseline run
that has it. A benchmark with relative gates but no counterpart in the baseline (or one without a
pytest-ipu record) gets a line in ``missing`` instead of verdicts for them; a counterpart that ran
on another device (by device name) gets a line in ``notes``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pytest_ipu.measure import stats
from pytest_ipu.measure import units
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.gates import Gate
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import Measured

# --- Values in records ----------------------------------------------------------------------------


def _missing_reason(record: IpuRecord, metric: str) -> str:
    """Why ``metric`` has no value in ``record``, as specific as the record allows."""
    path = METRICS[metric].path
    if path[0] == "power":
        if record.power is None:
            return "power not measured (the record has no power section)"
        if record.power.reason:
            return f"power not measured: {record.power.reason}"
    if metric == "compile":
        return "no compile time (the benchmarked object was not a compiled model)"
    return f"the record has no value at {'.'.join(path)}"


#: Significant figures of the values in a verdict's line.
DIGITS = 4


# --- Verdicts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """The outcome of one gate on one benchmark, with the numbers it was decided on.

    ``baseline`` is ``None`` for an absolute gate; ``current`` is ``None`` when the current record
    lacks the metric (the gate then fails and ``method`` says why). ``change`` is ``current /
    baseline - 1`` for a relative gate. ``p_value`` (one-sided Mann-Whitney U) and ``interval``
    (bootstrap confidence interval of the ratio current / baseline of the gated statistic) are set
    when per-round samples were used. ``method`` says how the verdict was reached, including when it
    rests on the threshold alone.
    """

    gate: Gate
    benchmark: str
    passed: bool
    baseline: float | None
    current: float | None
    change: float | None
    p_value: float | None
    interval: tuple[float, float] | None
    method: str

    def line(self) -> str:
        """One line for a list of results: benchmark, metric, values, change, threshold, evidence, verdict."""
        unit = METRICS[self.gate.metric].unit
        current = "no value" if self.current is None else units.format_value(self.current, unit, DIGITS)
        head = f"{self.benchmark} {self.gate.metric}: "
        if self.gate.kind == "absolute":
            # The bound exactly as the gate has it: rounding it could show '2 ms, bound < 2 ms: FAIL'.
            number, shown = units.exact_text(self.gate.threshold, unit, short=False)
            bound = f"bound {self.gate.op} {number} {shown}"
            return f"{head}{current}, {bound}: {self._outcome()} ({self.method})"
        baseline = "no value" if self.baseline is None else units.format_value(self.baseline, unit, DIGITS)
        sign = "-" if METRICS[self.gate.metric].better == "higher" else "+"
        percent = units.decimal_text(units.float_decimal(self.gate.threshold).scaleb(2))
        limit = f"threshold {sign}{percent}%"
        change = "" if self.change is None else f"{_percent(self.change)}, "
        parts = [f"{head}{baseline} -> {current} ({change}{limit})"]
        if self.p_value is not None:
            parts.append(f"p={self.p_value:.2g}")
        if self.interval is not None:
            parts.append(f"ratio CI [{self.interval[0]:.3f}, {self.interval[1]:.3f}]")
        return f"{', '.join(parts)}: {self._outcome()} ({self.method})"

    def _outcome(self) -> str:
        if not self.passed:
            return "FAIL"
        if self.gate.kind == "relative" and self.baseline is None:
            return "not compared"
        if self.change is not None and _beyond(self.gate, self.change):
            return "pass, not significant"
        return "pass"


def _percent(change: float) -> str:
    """``0.1667`` -> ``+16.7%``."""
    return f"{change * 100:+.1f}%"


def _beyond(gate: Gate, change: float) -> bool:
    """Whether a relative change is past the gate's threshold in the metric's worse direction."""
    if METRICS[gate.metric].better == "higher":
        return change < -gate.threshold
    return change > gate.threshold


#: How each metric with per-round samples is computed from them, for the bootstrap interval:
#: a percentile, or the mean. Throughput is items per unit time, so its ratio is the inverse of
#: the ratio of median round times (``check`` swaps the samples).
_SAMPLE_STATISTIC: Mapping[str, float | Callable[[stats.FloatArray], float]] = {
    "latency.min": 0.0,
    "latency.p50": 50.0,
    "latency.p90": 90.0,
    "latency.p99": 99.0,
    "latency.max": 100.0,
    "latency.mean": np.mean,
    "throughput": 50.0,
}

#: Resamples of the bootstrap interval a verdict reports.
BOOTSTRAP_RESAMPLES = 2000


def check(
    gate: Gate,
    benchmark: str,
    current: IpuRecord,
    baseline: IpuRecord | None = None,
    current_samples_s: Sequence[float] | None = None,
    baseline_samples_s: Sequence[float] | None = None,
    *,
    alpha: float = 0.01,
    history: Sequence[float] | None = None,
) -> Verdict:
    """Decide one gate for one benchmark by the rule of the module docstring.

    ``current`` and ``baseline`` are the two typed records; the samples are
    pytest-benchmark's per-round times in seconds (``None`` or empty when not saved). ``history``
    holds the gated metric's value in every baseline run (the baseline's own included); with
    ``HISTORY_MIN`` or more of them the verdict states their drift, and where there are no per-round
    samples to test, a run-to-run test against that drift decides instead of the threshold alone. Raises
    ``ValueError`` for a relative gate without a baseline record (callers decide what a missing
    baseline means) and for ``alpha`` outside (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")
    value = current.value(gate.metric)
    if gate.kind == "absolute":
        if value is None:
            reason = f"no value in the current record: {_missing_reason(current, gate.metric)}"
            return Verdict(gate, benchmark, False, None, None, None, None, None, reason)
        passed = value < gate.threshold if gate.op == "<" else value > gate.threshold
        return Verdict(gate, benchmark, passed, None, value, None, None, None, "absolute bound")
    if baseline is None:
        raise ValueError(f"relative gate {gate} on {benchmark}: no baseline record to compare with")
    before = baseline.value(gate.metric)
    if value is None:
        reason = f"no value in the current record: {_missing_reason(current, gate.metric)}"
        return Verdict(gate, benchmark, False, before, None, None, None, None, reason)
    if before is None:
        reason = f"no value in the baseline: {_missing_reason(baseline, gate.metric)}"
        return Verdict(gate, benchmark, True, None, value, None, None, None, reason)
    usable = [h for h in history or () if h > 0 and math.isfinite(h)]
    runs = len(usable) >= HISTORY_MIN and value > 0
    change = _relative_change(before, value)
    beyond = _beyond(gate, change)
    statistic = _SAMPLE_STATISTIC.get(gate.metric)
    no_samples = (
        baseline_samples_s is None
        or len(baseline_samples_s) == 0
        or current_samples_s is None
        or len(current_samples_s) == 0
    )
    if runs and (statistic is None or no_samples):
        # Nothing per round to test: the spread of whole baseline runs is the best evidence there is.
        return _check_history(gate, benchmark, value, usable, alpha)
    drift = f"; {_drift(gate, usable, alpha)}" if runs else ""
    if statistic is None:
        method = f"threshold only: {gate.metric} is measured once per benchmark, not per round"
    elif baseline_samples_s is None or len(baseline_samples_s) == 0:
        method = "threshold only: no per-round samples in the baseline (save it with --benchmark-save-data)"
    elif current_samples_s is None or len(current_samples_s) == 0:
        method = "threshold only: no per-round samples in the current run"
    else:
        # Both throughput and latency regress when round times grow. The test is against the
        # threshold, not against no change: are the current round times larger than the baseline's
        # grown by the allowed amount? Per-round samples of one run share its machine state, so a
        # test against no change calls any run-to-run drift significant (docs/ci.md measures this).
        allowed = _allowed_time_factor(gate)
        scaled = [t * allowed for t in baseline_samples_s]
        _, p = stats.mann_whitney_u(current_samples_s, scaled, alternative="greater")
        top, bottom = current_samples_s, baseline_samples_s
        if gate.metric == "throughput":
            top, bottom = bottom, top
        interval = stats.bootstrap_ratio_ci(
            top, bottom, statistic, confidence=1.0 - alpha, resamples=BOOTSTRAP_RESAMPLES, seed=0
        )
        method = (
            f"one-sided Mann-Whitney U of per-round times against the baseline's x {allowed:.4g} "
            f"(n={len(current_samples_s)} current vs {len(baseline_samples_s)} baseline, alpha {alpha:g}), "
            f"bootstrap {(1.0 - alpha) * 100:g}% CI of the ratio{drift}"
        )
        return Verdict(
            gate, benchmark, not (beyond and p < alpha), before, value, change, p, interval, method
        )
    return Verdict(gate, benchmark, not beyond, before, value, change, None, None, method + drift)


#: Fewest baseline runs from which the run-to-run spread is estimated.
HISTORY_MIN = 3


def _spread(gate: Gate, history: Sequence[float], alpha: float) -> tuple[float, float, float, float]:
    """Of the baseline runs' log values: mean, sd, the scale of a new run's deviation, and the
    smallest change (as a ratio) the run-to-run test could call beyond the threshold."""
    logs = np.log(np.asarray(history, dtype=np.float64))
    k = len(logs)
    centre, spread = float(np.mean(logs)), float(np.std(logs, ddof=1))
    scale = spread * math.sqrt(1.0 + 1.0 / k)
    critical = stats.t_isf(alpha, k - 1) * scale
    if METRICS[gate.metric].better == "higher":
        detectable = math.exp(-(math.log(1.0 - gate.threshold) - critical))
    else:
        detectable = math.exp(math.log1p(gate.threshold) + critical)
    return centre, spread, scale, detectable


def _drift(gate: Gate, history: Sequence[float], alpha: float) -> str:
    """What the baseline runs say about this machine's run-to-run drift, as a caution."""
    _, spread, _, detectable = _spread(gate, history, alpha)
    return (
        f"{len(history)} baseline runs differ by {spread * 100:.1f}% sd between runs: a change under "
        f"{_percent(detectable - 1.0)} is within this machine's drift"
    )


def _check_history(
    gate: Gate, benchmark: str, value: float, history: Sequence[float], alpha: float
) -> Verdict:
    """The run-to-run test, for metrics without per-round samples: is this run's value beyond the
    threshold, judged by how much the baseline runs themselves spread?

    On log values (ratios become differences): the one-sided t statistic of this run, as a new
    observation, against the baseline runs' mean moved by the threshold,
    ``(log(value) - mean - log(1 + t)) / (sd * sqrt(1 + 1/k))`` with ``k - 1`` degrees of freedom
    (mirrored for better-higher metrics). ``method`` states the spread and the smallest change it
    lets the gate detect.
    """
    centre, spread, scale, detectable = _spread(gate, history, alpha)
    baseline = math.exp(centre)
    change = value / baseline - 1.0
    beyond = _beyond(gate, change)
    if METRICS[gate.metric].better == "higher":
        excess = centre + math.log(1.0 - gate.threshold) - math.log(value)
    else:
        excess = math.log(value) - centre - math.log1p(gate.threshold)
    # Identical baseline runs leave no spread: then only the sign of the excess can decide.
    p = (0.0 if excess > 0 else 1.0) if scale == 0.0 else stats.t_sf(excess / scale, len(history) - 1)
    method = (
        f"run-to-run: one-sided t test against {len(history)} baseline runs (geometric mean; spread "
        f"{spread * 100:.1f}% sd between runs, alpha {alpha:g}); changes under {_percent(detectable - 1.0)} "
        "cannot fail here"
    )
    return Verdict(gate, benchmark, not (beyond and p < alpha), baseline, value, change, p, None, method)


def _allowed_time_factor(gate: Gate) -> float:
    """How much longer rounds may take before ``gate`` is crossed: ``1 + t`` for a time metric,
    ``1 / (1 - t)`` for throughput (5 % less throughput is 5.26 % longer rounds)."""
    if METRICS[gate.metric].better == "higher":
        return 1.0 / (1.0 - gate.threshold)
    return 1.0 + gate.threshold


def _relative_change(before: float, after: float) -> float:
    """``after / before - 1``; from a baseline of 0 any rise is infinite (metrics are never negative)."""
    if before == 0.0:
        return 0.0 if after == 0.0 else math.copysign(math.inf, after)
    return after / before - 1.0


# --- Every gate of a run ---------------------------------------------------------------------------


def effective_gates(run_gates: Sequence[Gate], own: Sequence[Gate]) -> tuple[Gate, ...]:
    """The run's gates, except where the benchmark's own gates name the same metric (theirs win)."""
    mine = {g.metric for g in own}
    return (*(g for g in run_gates if g.metric not in mine), *own)


@dataclass(frozen=True)
class GateOutcome:
    """What ``GateRunner.check`` found: every verdict, the gated benchmarks the baseline lacks (their
    relative gates were not checked), and notes such as a baseline from different hardware."""

    verdicts: tuple[Verdict, ...] = ()
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def failed(self) -> tuple[Verdict, ...]:
        """The verdicts that failed."""
        return tuple(v for v in self.verdicts if not v.passed)


@dataclass(frozen=True)
class GateRunner:
    """Every gate of a run against its baseline runs (the module docstring's rule for each).

    ``history`` holds every baseline run, oldest first; the baseline is ``baseline`` when given,
    else the last of them. ``run_gates`` apply to every benchmark (``--ipu-gate``, ``--gate``),
    except where a benchmark's own gates name the same metric.
    """

    history: Sequence[StoredRun] = ()
    run_gates: Sequence[Gate] = ()
    alpha: float = 0.01
    baseline: StoredRun | None = None

    @property
    def base(self) -> StoredRun | None:
        """The run relative gates compare with."""
        if self.baseline is not None:
            return self.baseline
        return self.history[-1] if self.history else None

    def baseline_name(self) -> str:
        """How messages name the baseline: its path, and how many other baseline runs there are."""
        base = self.base
        if base is None:
            return "none"
        others = sum(1 for run in self.history if run is not base)
        if others:
            return f"{base.path} (and {others} earlier baseline run(s))"
        return str(base.path)

    def check(self, measured: Sequence[Measured]) -> GateOutcome:
        """Check every gate of every benchmark in ``measured``; benchmarks without gates are skipped."""
        base = self.base
        counterparts = {b.fullname: b for b in base.benchmarks} if base is not None else {}
        verdicts: list[Verdict] = []
        missing: list[str] = []
        devices: dict[str, None] = {}
        for m in measured:
            chosen = effective_gates(self.run_gates, m.gates)
            if not chosen:
                continue
            counterpart = counterparts.get(m.fullname)
            before = counterpart.record if counterpart is not None else None
            relative = [g for g in chosen if g.kind == "relative"]
            if relative and before is None:
                why = "is not in" if counterpart is None else "has no pytest-ipu record in"
                missing.append(
                    f"{m.name} {why} the baseline ({self.baseline_name()}): its relative gates "
                    f"({', '.join(map(str, relative))}) were not checked"
                )
            for gate in chosen:
                if gate.kind == "absolute":
                    verdicts.append(check(gate, m.name, m.record, alpha=self.alpha))
                elif counterpart is not None and before is not None:
                    verdicts.append(self._relative(gate, m, counterpart, before))
            if before is not None and before.device_name != m.record.device_name:
                was, now = before.device_name, m.record.device_name
                devices[f"the baseline ran {m.name} on {was!r}, this run on {now!r}"] = None
        return GateOutcome(
            tuple(verdicts), tuple(missing), tuple(f"different hardware: {d}" for d in devices)
        )

    def _relative(self, gate: Gate, m: Measured, counterpart: StoredBenchmark, before: IpuRecord) -> Verdict:
        return check(
            gate,
            m.name,
            m.record,
            before,
            m.samples_s or None,
            counterpart.samples_s,
            alpha=self.alpha,
            history=self.history_of(m.fullname, gate.metric),
        )

    def history_of(self, fullname: str, metric: str) -> list[float]:
        """The metric's value for ``fullname`` in every baseline run that has it, oldest first."""
        values = []
        for run in self.history:
            bench = next((b for b in run.benchmarks if b.fullname == fullname), None)
            value = None if bench is None or bench.record is None else bench.record.value(metric)
            if value is not None:
                values.append(value)
        return values
