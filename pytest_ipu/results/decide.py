"""Deciding a performance gate: one gate on one benchmark (``check``), and every gate of a run
against its baseline (``GateRunner``); used alike by the pytest plugin and ``pytest-ipu compare``.

Decision rule
-------------
A relative gate (``latency.p99:+10%``, ``throughput:-5%``) fails only when both hold:

1. the observed change of the gated metric, ``current / baseline - 1`` from the two records (the
   figures pooled over each side's repeats), is beyond the threshold in the metric's worse
   direction: a rise of more than 10% for ``latency.p99:+10%``, a drop of more than 5% for
   ``throughput:-5%``; and
2. the change is significantly *beyond the threshold*, judged by how much independent
   measurements of the same code differ. The unit of evidence is the repeat (``--ipu-repeats``)
   or the whole run, never the round: rounds of one run share its machine state (clock,
   neighbours, caches), so two runs of the same code differ by a few percent as a whole, and a
   test on rounds finds that difference significant however small it is.

Which evidence decides, in order:

- **Baseline runs** (three or more, ``history``): a one-sided t test of this run's value (log
  scale) against the baseline runs' mean moved by the threshold, their spread between runs as the
  noise, ``k - 1`` degrees of freedom. Whole runs carry every source of drift.
- **Repeats** (two or more on either side): a one-sided two-sample t test on the logs of each
  repeat's value (its throughput, its latency percentile), the difference of the means against the
  log of the allowed change, the spread between repeats pooled over both sides. The verdict
  reports the (1 - alpha) confidence interval of the ratio of the sides' geometric means.
- **Neither**: the threshold alone, and the verdict says so ("no variance estimate: use
  --ipu-repeats or more baseline runs"); it never prints a p-value it does not have.

The test is against the threshold, not against "no change": a drift has to exceed the allowed
change clearly before the gate fails. ``benchmarks/test_gate_accuracy.py`` measures the false
alarms and detections this gives on a loaded machine, side by side with pytest-benchmark's and
pyperf's checks; docs/ci.md has the figures and their limits.

Energy, power, compile and first-call times are measured once per benchmark, not per repeat:
they have no repeat spread, so baseline runs or the threshold alone decide them. When the
baseline record lacks the metric (the baseline measured no power, say), the gate cannot compare
and passes, saying so.

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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from pytest_ipu.measure import stats
from pytest_ipu.measure import units
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.gates import Gate
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import Measured

#: Significant figures of the values in a verdict's line.
DIGITS = 4


# --- Verdicts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """The outcome of one gate on one benchmark, with the numbers it was decided on.

    ``baseline`` is ``None`` for an absolute gate; ``current`` is ``None`` when the current record
    lacks the metric (the gate then fails and ``method`` says why). ``change`` is ``current /
    baseline - 1`` for a relative gate. ``p_value`` (the one-sided t test's) is set when repeats or
    baseline runs gave a variance estimate, ``interval`` (confidence interval of the ratio of the
    repeats' geometric means) when repeats did. ``method`` says how the verdict was reached,
    including when it rests on the threshold alone.
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
            parts.append(format_p(self.p_value))
        if self.interval is not None:
            parts.append(f"ratio CI [{self.interval[0]:.3f}, {self.interval[1]:.3f}]")
        return f"{', '.join(parts)}: {self._outcome()} ({self.method})"

    def _outcome(self) -> str:
        if not self.passed:
            return "FAIL"
        if self.gate.kind == "relative" and self.baseline is None:
            return "not compared"
        if self.change is not None and beyond_threshold(self.gate, self.change):
            return "pass, not significant"
        return "pass"


def _percent(change: float) -> str:
    """``0.1667`` -> ``+16.7%``."""
    return f"{change * 100:+.1f}%"


def beyond_threshold(gate: Gate, change: float) -> bool:
    """Whether a relative change is past the gate's threshold in the metric's worse direction."""
    if METRICS[gate.metric].better == "higher":
        return change < -gate.threshold
    return change > gate.threshold


def check(
    gate: Gate,
    benchmark: str,
    current: IpuRecord,
    baseline: IpuRecord | None = None,
    *,
    alpha: float = 0.01,
    history: Sequence[float] | None = None,
) -> Verdict:
    """Decide one gate for one benchmark by the rule of the module docstring.

    ``current`` and ``baseline`` are the two typed records (their repeats are the evidence);
    ``history`` holds the gated metric's value in every baseline run (the baseline's own included);
    with ``HISTORY_MIN`` or more of them their spread decides. Raises ``ValueError`` for a relative
    gate without a baseline record (callers decide what a missing baseline means) and for
    ``alpha`` outside (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")
    value = current.value(gate.metric)
    if gate.kind == "absolute":
        if value is None:
            reason = f"no value in the current record: {METRICS[gate.metric].why_missing(current)}"
            return Verdict(gate, benchmark, False, None, None, None, None, None, reason)
        passed = value < gate.threshold if gate.op == "<" else value > gate.threshold
        return Verdict(gate, benchmark, passed, None, value, None, None, None, "absolute bound")
    if baseline is None:
        raise ValueError(f"relative gate {gate} on {benchmark}: no baseline record to compare with")
    before = baseline.value(gate.metric)
    if value is None:
        reason = f"no value in the current record: {METRICS[gate.metric].why_missing(current)}"
        return Verdict(gate, benchmark, False, before, None, None, None, None, reason)
    if before is None:
        reason = f"no value in the baseline: {METRICS[gate.metric].why_missing(baseline)}"
        return Verdict(gate, benchmark, True, None, value, None, None, None, reason)
    found = evidence(
        value, current.repeat_values(gate.metric), baseline.repeat_values(gate.metric), history or ()
    )
    if found is not None and found.source == "run-to-run":
        return _check_history(gate, benchmark, value, _usable(history or ()), alpha)
    if found is not None:
        return _check_repeats(gate, benchmark, before, value, found, alpha)
    change = relative_change(before, value)
    if METRICS[gate.metric].per_repeat:
        advice = f"one repeat on each side): use --ipu-repeats or {HISTORY_MIN} or more baseline runs"
    else:
        advice = f"{gate.metric} is measured once per benchmark): use {HISTORY_MIN} or more baseline runs"
    method = f"threshold only: no variance estimate ({advice}"
    return Verdict(
        gate, benchmark, not beyond_threshold(gate, change), before, value, change, None, None, method
    )


def _check_repeats(
    gate: Gate, benchmark: str, before: float, value: float, found: Evidence, alpha: float
) -> Verdict:
    """The repeat test: a one-sided two-sample t test (pooled variance) on the logs of each repeat's
    value (``found``, from ``evidence``), of the hypothesis that the current side is worse than the
    baseline by more than the threshold allows."""
    shift, scale, df = found.shift, found.scale, found.df
    if METRICS[gate.metric].better == "higher":
        excess = math.log(1.0 - gate.threshold) - shift
    else:
        excess = shift - math.log1p(gate.threshold)
    # Repeats that agree exactly leave no spread: then only the sign of the excess can decide.
    p = (0.0 if excess > 0 else 1.0) if scale == 0.0 else stats.t_sf(excess / scale, df)
    reach = stats.t_isf(alpha / 2.0, df) * scale
    interval = (_exp(shift - reach), _exp(shift + reach))
    change = relative_change(before, value)
    method = (
        f"repeats: one-sided t test on {found.current} current vs {found.baseline} baseline repeats "
        f"(log scale, spread {found.spread * 100:.1f}% sd between repeats, df {df}, alpha {alpha:g}), "
        f"{(1.0 - alpha) * 100:g}% CI of the ratio of geometric means"
    )
    passed = not (beyond_threshold(gate, change) and p < alpha)
    return Verdict(gate, benchmark, passed, before, value, change, p, interval, method)


def _exp(x: float) -> float:
    """``exp(x)``, infinite past what a float holds: repeats far apart give an unbounded interval."""
    return math.inf if x > 709.0 else math.exp(x)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


#: Fewest baseline runs from which the run-to-run spread is estimated.
HISTORY_MIN = 3


def _spread(gate: Gate, history: Sequence[float], alpha: float) -> tuple[float, float, float, float]:
    """Of the baseline runs' log values: mean, sd, the scale of a new run's deviation, and the
    smallest change (as a ratio) the run-to-run test could call beyond the threshold."""
    centre, spread, scale = _history_noise(history)
    critical = stats.t_isf(alpha, len(history) - 1) * scale
    if METRICS[gate.metric].better == "higher":
        detectable = math.exp(-(math.log(1.0 - gate.threshold) - critical))
    else:
        detectable = math.exp(math.log1p(gate.threshold) + critical)
    return centre, spread, scale, detectable


def _check_history(
    gate: Gate, benchmark: str, value: float, history: Sequence[float], alpha: float
) -> Verdict:
    """The run-to-run test: is this run's value beyond the threshold, judged by how much the
    baseline runs themselves spread?

    On log values (ratios become differences): the one-sided t statistic of this run, as a new
    observation, against the baseline runs' mean moved by the threshold,
    ``(log(value) - mean - log(1 + t)) / (sd * sqrt(1 + 1/k))`` with ``k - 1`` degrees of freedom
    (mirrored for better-higher metrics). ``method`` states the spread and the smallest change it
    lets the gate detect.
    """
    centre, spread, scale, detectable = _spread(gate, history, alpha)
    baseline = math.exp(centre)
    change = value / baseline - 1.0
    beyond = beyond_threshold(gate, change)
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


def relative_change(before: float, after: float) -> float:
    """``after / before - 1``; from a baseline of 0 any rise is infinite (metrics are never negative)."""
    if before == 0.0:
        return 0.0 if after == 0.0 else math.copysign(math.inf, after)
    return after / before - 1.0


# --- Evidence of a change ------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """The variance estimate a gate is decided by, for a caller that asks "did it change?" rather
    than "is it beyond a threshold?" (``pytest-ipu compare``'s verdicts). All on the log scale.

    ``source`` is ``"run-to-run"`` (``baseline`` earlier runs; ``shift`` is the current value's log
    less their mean log) or ``"repeats"`` (``current`` and ``baseline`` repeats; ``shift`` is the
    difference of the sides' mean logs). ``spread`` is the standard deviation between those runs or
    repeats, ``scale`` the standard error of ``shift`` and ``df`` its degrees of freedom.
    """

    source: Literal["run-to-run", "repeats"]
    current: int
    baseline: int
    shift: float
    spread: float
    scale: float
    df: int

    def p_change(self) -> float:
        """The two-sided p of "no change": a t test of ``shift`` against 0."""
        if self.scale == 0.0:
            # Runs or repeats that agree exactly leave no spread: only whether there is a shift decides.
            return 1.0 if self.shift == 0.0 else 0.0
        return min(1.0, 2.0 * stats.t_sf(abs(self.shift) / self.scale, self.df))


def evidence(
    value: float,
    current_repeats: Sequence[float],
    baseline_repeats: Sequence[float],
    history: Sequence[float] = (),
) -> Evidence | None:
    """The evidence ``check`` decides a relative gate by, in its order: ``HISTORY_MIN`` or more
    baseline runs (``history``, the metric's value in each), else two or more repeats on either
    side (each side's repeat values), else ``None``: there is no variance estimate. Values that are
    not positive and finite take no part (a log needs them)."""
    usable = _usable(history)
    if len(usable) >= HISTORY_MIN and 0.0 < value < math.inf:
        centre, spread, scale = _history_noise(usable)
        return Evidence(
            "run-to-run", 1, len(usable), math.log(value) - centre, spread, scale, len(usable) - 1
        )
    mine, theirs = _usable(current_repeats), _usable(baseline_repeats)
    if mine and theirs and (len(mine) >= 2 or len(theirs) >= 2):
        logs_now = [math.log(v) for v in mine]
        logs_before = [math.log(v) for v in theirs]
        n, m = len(logs_now), len(logs_before)
        shift = _mean(logs_now) - _mean(logs_before)
        squares = sum((x - _mean(logs_now)) ** 2 for x in logs_now) + sum(
            (x - _mean(logs_before)) ** 2 for x in logs_before
        )
        df = n + m - 2
        spread = math.sqrt(squares / df)
        return Evidence("repeats", n, m, shift, spread, spread * math.sqrt(1.0 / n + 1.0 / m), df)
    return None


def _usable(values: Sequence[float]) -> list[float]:
    """The values a log-scale test can use: positive and finite."""
    return [v for v in values if v > 0 and math.isfinite(v)]


def _history_noise(history: Sequence[float]) -> tuple[float, float, float]:
    """Of the baseline runs' log values: mean, sd, and the scale of a new run's deviation from the mean."""
    logs = np.log(np.asarray(history, dtype=np.float64))
    centre, spread = float(np.mean(logs)), float(np.std(logs, ddof=1))
    return centre, spread, spread * math.sqrt(1.0 + 1.0 / len(logs))


#: Below this a p-value is shown as ``p<0.001``: a t tail that far out rests on the normal model
#: more than on the data, and a rounded ``p=0`` would claim certainty.
P_FLOOR = 0.001


def format_p_value(p: float) -> str:
    """A p-value for a table cell: ``<0.001`` below ``P_FLOOR``, else two significant digits
    (``0.0031``, ``0.41``, ``1``)."""
    return f"<{P_FLOOR:g}" if p < P_FLOOR else f"{p:.2g}"


def format_p(p: float) -> str:
    """A p-value in a line of text: ``p<0.001`` or ``p=0.0031`` (``format_p_value``'s rule)."""
    text = format_p_value(p)
    return f"p{text}" if text.startswith("<") else f"p={text}"


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
                elif before is not None:
                    verdicts.append(self._relative(gate, m, before))
            if before is not None and before.device_name != m.record.device_name:
                was, now = before.device_name, m.record.device_name
                devices[f"the baseline ran {m.name} on {was!r}, this run on {now!r}"] = None
        return GateOutcome(
            tuple(verdicts), tuple(missing), tuple(f"different hardware: {d}" for d in devices)
        )

    def _relative(self, gate: Gate, m: Measured, before: IpuRecord) -> Verdict:
        return check(
            gate, m.name, m.record, before, alpha=self.alpha, history=self.history_of(m.fullname, gate.metric)
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
