"""Deciding a performance gate: one gate on one benchmark (``check``), and every gate of a run
against its baseline (``GateRunner``); used alike by the pytest plugin and ``pytest-ipu compare``
(``pytest-ipu ab`` decides its paired runs by the same ``judge``).

``judge_exact`` decides an exact count (``catalog.Metric.exact``) first; else ``evidence`` takes
``HISTORY_MIN`` baseline runs (``history``), else repeats widened by ``drift``; an absolute gate needs
two or more current repeats. ``ALPHA`` is the rule's alpha; ``p_fail`` feeds the job's rule (``family``).
``GateRunner`` reads a benchmark as ``gated.Gated`` (a record, or ``plain``) with its ``effective_gates``,
compares it with the baseline run's benchmark of the same full name, and lists one absent there in
``missing``, one from another device in ``notes``; ``level_shift.check`` runs it, then takes back the
verdicts a level shift of the machine could explain.

The rule is documented in docs/ci.md (sections "Three verdicts", "The evidence: which noise" and
"The baseline").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Final
from typing import Literal

import numpy as np

from pytest_ipu.measure import stats
from pytest_ipu.measure import units
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.codec import Written
from pytest_ipu.results.codec import meta
from pytest_ipu.results.gated import Candidate
from pytest_ipu.results.gated import Gated
from pytest_ipu.results.gates import Gate
from pytest_ipu.results.plain import gated
from pytest_ipu.results.plain import not_gated
from pytest_ipu.results.records import IpuRecord

#: Significant figures of the values in a verdict's line.
DIGITS = 4
#: The default confidence of a verdict: a wrong PASS, and a wrong FAIL, each at most this likely.
ALPHA = 0.05
#: The default run-to-run drift allowance (relative) when repeats of one run are the only noise
#: estimate. CodSpeed measures a 2.7 % coefficient of variation between runs on hosted CI runners;
#: the difference of two such runs then has a 3.8 % sd, and this allowance covers 1.3 of them: a
#: machine that drifts more needs a larger one (--ipu-drift) or, better, measured drift (three or
#: more baseline runs), since drift beyond the allowance makes wrong verdicts likelier than alpha.
DRIFT = 0.05
#: Fewest baseline runs from which the run-to-run spread is estimated.
HISTORY_MIN = 3

PASS: Final = "PASS"
FAIL: Final = "FAIL"
INCONCLUSIVE: Final = "INCONCLUSIVE"
Outcome = Literal["PASS", "FAIL", "INCONCLUSIVE"]
OUTCOMES: tuple[Outcome, ...] = (PASS, FAIL, INCONCLUSIVE)


# --- The rule ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Judgement:
    """The rule applied to one estimate: its outcome, the interval of the change (as a ratio
    current / baseline, or of the value for an absolute gate) and, when not decided, what was
    decidable and what would decide it."""

    outcome: Outcome
    interval: tuple[float, float]
    #: For INCONCLUSIVE: the changes this evidence could have decided, and what would decide it.
    advice: str = ""
    #: The one-sided p of "the change is within the threshold" (``p_fail``): FAIL is ``p_fail < alpha``.
    p_fail: float | None = None

    def verdict(
        self, gate: Gate, benchmark: str, baseline: float | None, current: float, method: str, noise: str = ""
    ) -> Verdict:
        """This judgement as the verdict of ``gate`` on ``benchmark`` (``baseline`` ``None`` for an
        absolute gate), its change computed from the two values; ``noise`` is ``Verdict.noise``."""
        change = None if baseline is None else relative_change(baseline, current)
        return Verdict(
            gate,
            benchmark,
            self.outcome,
            baseline,
            current,
            change,
            self.interval,
            method,
            self.advice,
            self.p_fail,
            noise,
        )


def orient(gate: Gate) -> float:
    """+1 when a rise of the gated metric is worse (latency), -1 when a drop is (throughput)."""
    return 1.0 if METRICS[gate.metric].better == "lower" else -1.0


def margin(gate: Gate) -> float:
    """The relative gate's threshold on the oriented log scale (worse is positive)."""
    if METRICS[gate.metric].better == "higher":
        return -math.log(1.0 - gate.threshold) if gate.threshold < 1.0 else math.inf
    return math.log1p(gate.threshold)


def judge(
    gate: Gate,
    shift: float,
    scale: float,
    df: int,
    alpha: float,
    *,
    allowance: float = 0.0,
    more: str = "",
    option: str = "",
    n: int = 0,
    one_run: bool = False,
) -> Judgement:
    """The module docstring's rule for a relative gate: ``shift`` is the estimated
    ``log(current / baseline)``, ``scale`` its standard error with ``df`` degrees of freedom,
    ``allowance`` a log drift added to both sides of the interval. ``more`` names the evidence
    (``repeats``, ``pairs``), ``option`` what gives more of it (``--ipu-repeats``), ``n`` how many of
    it there were: the advice of an INCONCLUSIVE verdict. ``one_run``: the estimate is one run
    against ``n`` baseline runs, whose spread more runs cannot shrink below their own drift."""
    sign, m = orient(gate), margin(gate)
    worse = sign * shift
    reach = stats.t_isf(alpha, df) * scale + allowance
    low, high = worse - reach, worse + reach
    ratio = (_exp(sign * low), _exp(sign * high))
    interval = (min(ratio), max(ratio))
    p = p_fail(gate, shift, scale, df, allowance)
    if low > m:
        return Judgement(FAIL, interval, p_fail=p)
    if high < m:
        return Judgement(PASS, interval, p_fail=p)
    evidence = _Evidence(scale, df, alpha, n, one_run)
    advice = _advice(gate, worse, reach, allowance, more, option, evidence)
    return Judgement(INCONCLUSIVE, interval, advice, p)


def p_fail(gate: Gate, shift: float, scale: float, df: int, allowance: float = 0.0) -> float:
    """The one-sided p of the FAIL side's test of a relative gate: of "the change is within the
    threshold" (worse by at most ``margin``), from ``judge``'s ``shift``, ``scale``, ``df`` and
    ``allowance``. ``judge`` FAILs exactly when it is below ``alpha``: ``w - allowance - q s > m``
    is ``t_sf((w - allowance - m) / s, df) < alpha``. A family of gates (``family``) adjusts it."""
    m = margin(gate)
    if math.isinf(m):
        return 1.0  # a threshold of -100% or less: nothing is beyond it
    excess = orient(gate) * shift - allowance - m
    if scale <= 0.0:
        # Runs that agree exactly: only which side of the threshold the change lies on decides.
        return 0.0 if excess > 0.0 else 1.0
    return stats.t_sf(excess / scale, df)


#: The most repeats, pairs or baseline runs an INCONCLUSIVE verdict's advice counts up to.
ADVICE_MAX = 1000


@dataclass(frozen=True)
class _Evidence:
    """What an estimate rests on, for the advice: its standard error, degrees of freedom, level,
    how many measurements, and whether it is one run against ``n`` baseline runs."""

    scale: float
    df: int
    alpha: float
    n: int
    one_run: bool

    def needed(self, gap: float) -> int | None:
        """About how many measurements would bring the interval's statistical half-width under
        ``gap``: the fewest ``k`` above ``n`` (up to ``ADVICE_MAX``) whose ``reach(k)`` is below it;
        ``None`` when no count up to ``ADVICE_MAX`` would.

        ``reach`` falls as ``k`` grows (more degrees of freedom, a smaller standard error), so the
        first such ``k`` is found by bisection: about ten quantiles, not one per count.
        """
        if self.n < 1 or self.scale <= 0.0:
            return None
        low, high = self.n + 1, ADVICE_MAX
        if low > high or self.reach(high) >= gap:
            return None
        while low < high:  # invariant: reach(high) < gap, and every k below low has reach(k) >= gap
            middle = (low + high) // 2
            if self.reach(middle) < gap:
                high = middle
            else:
                low = middle + 1
        return high

    def reach(self, k: int) -> float:
        """The statistical half-width of the interval with ``k`` measurements (``k`` > ``n``) where
        there are ``n``, at the same spread."""
        if self.one_run:
            # One new run against k baseline runs: s = sd * sqrt(1 + 1/k), never below sd.
            sd = self.scale / math.sqrt(1.0 + 1.0 / self.n)
            return stats.t_isf(self.alpha, k - 1) * sd * math.sqrt(1.0 + 1.0 / k)
        return stats.t_isf(self.alpha, self.df + k - self.n) * self.scale * math.sqrt(self.n / k)


def _advice(
    gate: Gate, worse: float, reach: float, allowance: float, more: str, option: str, evidence: _Evidence
) -> str:
    """What an inconclusive relative verdict could have told, and what would decide it."""
    m, sign = margin(gate), orient(gate)
    caught = _percent(_exp(sign * (m + reach)) - 1.0)
    cleared = _percent(_exp(sign * (m - reach)) - 1.0)
    # Where the interval is wider than the threshold, only an improvement (the metric's better
    # direction: a rise of throughput, a fall of latency) can pass: say so, not "within" a change of
    # the other sign than the gate's.
    passes = f"changes within {cleared}" if m > reach else f"improvements past {cleared}"
    text = f"this evidence fails only changes past {caught} and passes only {passes}"
    gap = abs(worse - m) - allowance
    statistical = reach - allowance
    if allowance > 0.0 and gap <= 0.0:
        return (
            f"{text}; the change is within the run-to-run drift allowance ({_percent(math.expm1(allowance))})"
            f" of the threshold: give {HISTORY_MIN} or more baseline runs, whose drift is measured"
        )
    needed = evidence.needed(gap) if more and gap > 0.0 and statistical > 0.0 else None
    if needed is None:
        return (
            f"{text}; the change is too close to the threshold for more {more or 'measurements'} to "
            "decide it: fewer threads or a quieter runner would narrow the interval"
        )
    given = f"now {evidence.n}; {option}" if option else f"now {evidence.n}"
    return f"{text}; about {needed} {more} ({given}), fewer threads or a quieter runner would decide it"


#: Fewest values on each side from which a count is taken to repeat exactly (the exact rule).
EXACT_MIN = 2


def judge_exact(gate: Gate, now: Sequence[float], before: Sequence[float]) -> Judgement | None:
    """The exact rule, for a relative gate on a count that repeats exactly (``Metric.exact``: the
    IPU's cycles per call): where each side has ``EXACT_MIN`` or more values, all equal, the change
    is known, not estimated: FAIL when it is beyond the threshold, PASS otherwise (a change of
    exactly the threshold is not worse than it), the interval the one ratio. ``p_fail`` is 0 for a
    FAIL and 1 for a PASS: a family of gates keeps the one and never fails the other.

    ``None`` (the ordinary rule decides) for any other metric, and where a side has fewer values
    or values that differ: a count that varies between repeats (a program whose work depends on
    its data) has a spread, and then its spread, not this rule, says what the evidence shows."""
    if not METRICS[gate.metric].exact or min(len(now), len(before)) < EXACT_MIN:
        return None
    if len(set(now)) != 1 or len(set(before)) != 1:
        return None
    current, baseline = now[0], before[0]
    if not (0.0 < current < math.inf and 0.0 < baseline < math.inf):
        return None
    ratio = current / baseline
    # On the values, not their logs: a count exactly at the threshold (1,010,000 against 1,000,000
    # at +1 %) stays at it, where a difference of logs would round either way.
    if METRICS[gate.metric].better == "higher":
        beyond = current < baseline * (1.0 - gate.threshold)
    else:
        beyond = current > baseline * (1.0 + gate.threshold)
    if beyond:
        return Judgement(FAIL, (ratio, ratio), p_fail=0.0)
    return Judgement(PASS, (ratio, ratio), p_fail=1.0)


def judge_bound(
    gate: Gate, logs: Sequence[float], alpha: float, *, more: str = "repeats", option: str = "--ipu-repeats"
) -> Judgement:
    """The rule for an absolute gate on the current run's repeats (their log values, two or more):
    the one-sided bounds of their geometric mean against the bound. ``more`` names the values
    (``pairs`` for ``pytest-ipu ab``) and ``option`` what gives more of them, in the advice."""
    n = len(logs)
    centre = math.fsum(logs) / n
    spread = math.sqrt(math.fsum((x - centre) ** 2 for x in logs) / (n - 1))
    reach = stats.t_isf(alpha, n - 1) * spread / math.sqrt(n)
    low, high = _exp(centre - reach), _exp(centre + reach)
    bound = gate.threshold
    below = gate.op == "<"
    # The FAIL side's test of "the value is within the bound", on the same centre, spread and df.
    excess = (centre - math.log(bound)) if below else (math.log(bound) - centre)
    se = spread / math.sqrt(n)
    p = (0.0 if excess >= 0.0 else 1.0) if se <= 0.0 else stats.t_sf(excess / se, n - 1)
    if (high < bound) if below else (low > bound):
        return Judgement(PASS, (low, high), p_fail=p)
    if (low >= bound) if below else (high <= bound):
        return Judgement(FAIL, (low, high), p_fail=p)
    unit = METRICS[gate.metric].unit
    shown = f"[{units.format_value(low, unit, 3)}, {units.format_value(high, unit, 3)}]"
    return Judgement(
        INCONCLUSIVE,
        (low, high),
        f"the {more}' interval {shown} contains the bound: more {more} (now {n}; {option}), "
        "fewer threads or a quieter runner would decide it",
        p,
    )


# --- Verdicts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict(Written):
    """The outcome of one gate on one benchmark, with the numbers it was decided on.

    ``outcome`` is PASS, FAIL or INCONCLUSIVE (the module docstring's rule). ``baseline`` is
    ``None`` for an absolute gate or when the baseline lacks the metric; ``current`` is ``None``
    when the current record lacks it. ``change`` is ``current / baseline - 1`` for a relative gate.
    ``interval`` is the ``1 - 2 alpha`` interval the verdict was read from (of the ratio current /
    baseline, or of the value for an absolute gate), drift allowance included; ``None`` without a
    variance estimate. ``method`` says how the verdict was reached; ``advice``, for an
    INCONCLUSIVE one, what could have been decided and what would decide it. ``p_fail`` is the
    one-sided p of the FAIL side's test, of "the change is within the threshold" (``decide.p_fail``;
    a per-gate FAIL is ``p_fail < alpha``), from the same estimate as the interval: what the job's
    family-wise rule (``family``) adjusts; ``None`` where the verdict was not a test (no variance
    estimate, a missing value). ``noise`` names, in a few words, what the interval's width rests on
    (``spread 6.9% between runs``, ``one repeat``): the cause the job's summary gives for a
    benchmark it cannot decide. Its JSON (the run's file, the reports) names the benchmark first,
    then the gate as written and its metric.
    """

    JSON_DERIVED = (("metric", "gate"),)

    gate: Gate = field(metadata=meta(write=str, after="benchmark"))
    benchmark: str
    outcome: Outcome
    baseline: float | None
    current: float | None
    change: float | None
    interval: tuple[float, float] | None
    method: str
    advice: str = ""
    p_fail: float | None = None
    noise: str = ""

    @property
    def metric(self) -> str:
        """The gated metric (the gate's)."""
        return self.gate.metric

    @property
    def passed(self) -> bool:
        """Whether the evidence showed the change within the gate."""
        return self.outcome == PASS

    @property
    def failed(self) -> bool:
        """Whether the evidence showed the change beyond the gate (or the current record lacks the value)."""
        return self.outcome == FAIL

    @property
    def inconclusive(self) -> bool:
        """Whether the evidence could not tell."""
        return self.outcome == INCONCLUSIVE

    def line(self) -> str:
        """One line: benchmark, metric, values, change, threshold, interval, verdict, how, and (when
        inconclusive) what would decide it."""
        unit = METRICS[self.gate.metric].unit
        current = "no value" if self.current is None else units.format_value(self.current, unit, DIGITS)
        head = f"{self.benchmark} {self.gate.metric}: "
        if self.gate.kind == "absolute":
            # The bound exactly as the gate has it: rounding it could show '2 ms, bound < 2 ms: FAIL'.
            number, shown = units.exact_text(self.gate.threshold, unit, short=False)
            parts = [f"{head}{current}, bound {self.gate.op} {number} {shown}"]
            if self.interval is not None:
                low, high = (units.format_value(v, unit, 3) for v in self.interval)
                parts.append(f"interval [{low}, {high}]")
        else:
            baseline = (
                "no value" if self.baseline is None else units.format_value(self.baseline, unit, DIGITS)
            )
            sign = "-" if METRICS[self.gate.metric].better == "higher" else "+"
            percent = units.decimal_text(units.float_decimal(self.gate.threshold).scaleb(2))
            change = "" if self.change is None else f"{_percent(self.change)}, "
            parts = [f"{head}{baseline} -> {current} ({change}threshold {sign}{percent}%)"]
            if self.interval is not None:
                parts.append(f"ratio interval [{self.interval[0]:.3f}, {self.interval[1]:.3f}]")
        text = f"{', '.join(parts)}: {self.outcome} ({self.method})"
        return f"{text}; {self.advice}" if self.advice else text


def _percent(change: float) -> str:
    """``0.1667`` -> ``+16.7%``."""
    if math.isinf(change):
        return "+inf%" if change > 0 else "-inf%"
    return f"{change * 100:+.1f}%"


def check_alpha(alpha: float) -> None:
    """``ValueError`` for a confidence level outside (0, 0.5): the rule's two one-sided tests
    need ``alpha`` below one half."""
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be within (0, 0.5), got {alpha}")


def check(
    gate: Gate,
    benchmark: str,
    current: Gated,
    baseline: Gated | None = None,
    *,
    alpha: float = ALPHA,
    history: Sequence[float] | None = None,
    drift: float = DRIFT,
) -> Verdict:
    """Decide one gate for one benchmark by the rule of the module docstring.

    ``current`` and ``baseline`` are the two benchmarks' figures (``gated.Gated``: a pytest-ipu
    record, or pytest-benchmark's of a plain benchmark; their repeats are the evidence);
    ``history`` holds the gated metric's value in every baseline run (the baseline's own included);
    with ``HISTORY_MIN`` or more of them their spread decides. ``drift`` is the run-to-run drift
    allowance of the repeat test. Raises ``ValueError`` for a relative gate without a baseline
    record (callers decide what a missing baseline means) and for ``alpha`` outside (0, 0.5).
    """
    check_alpha(alpha)
    value = current.value(gate.metric)
    if value is None:
        reason = f"no value in the current record: {current.why_missing(gate.metric)}"
        before = None if baseline is None else baseline.value(gate.metric)
        return Verdict(gate, benchmark, FAIL, before, None, None, None, reason)
    if gate.kind == "absolute":
        return _check_bound(gate, benchmark, current, value, alpha)
    if baseline is None:
        raise ValueError(f"relative gate {gate} on {benchmark}: no baseline record to compare with")
    before = baseline.value(gate.metric)
    if before is None:
        reason = f"no value in the baseline: {baseline.why_missing(gate.metric)}"
        return Verdict(gate, benchmark, INCONCLUSIVE, None, value, None, None, reason)
    now, then = current.repeat_values(gate.metric), baseline.repeat_values(gate.metric)
    exact = _check_exact(gate, benchmark, now, then)
    if exact is not None:
        return exact
    found = evidence(value, now, then, history or ())
    if found is None:
        return _no_variance_verdict(gate, benchmark, current, baseline, before, value)
    if found.source == "run-to-run":
        return _check_run_to_run(gate, benchmark, found, value, alpha)
    return _check_repeats(gate, benchmark, found, before, value, alpha, drift)


def _no_variance_verdict(
    gate: Gate, benchmark: str, current: Gated, baseline: Gated, before: float, value: float
) -> Verdict:
    """Inconclusive: no spread to judge the change by (``_no_variance`` says what to give)."""
    advice, noise = _no_variance(gate, current, baseline)
    change = relative_change(before, value)
    return Verdict(
        gate,
        benchmark,
        INCONCLUSIVE,
        before,
        value,
        change,
        None,
        "no variance estimate",
        advice,
        None,
        noise,
    )


def _check_exact(gate: Gate, benchmark: str, now: Sequence[float], then: Sequence[float]) -> Verdict | None:
    """The verdict where both sides' repeats each gave one count, the same on each side
    (``judge_exact``); ``None`` where they did not and the spread must decide."""
    exact = judge_exact(gate, now, then)
    if exact is None:
        return None
    method = (
        f"exact: {len(now)} current and {len(then)} baseline repeats each gave one count, the same on "
        "each side (a count of the compiled program, which the machine's load does not move): "
        "the change is the counts' ratio, with no spread to allow for"
    )
    return exact.verdict(gate, benchmark, then[0], now[0], method, "exact count, no spread")


def _check_repeats(
    gate: Gate, benchmark: str, found: Evidence, before: float, value: float, alpha: float, drift: float
) -> Verdict:
    """The verdict from the spread between the repeats (``found``), widened by the run-to-run
    ``drift`` allowance."""
    allowance = math.log1p(drift)
    method = (
        f"repeats: {found.current} current vs {found.baseline} baseline repeats (log scale, spread "
        f"{found.spread * 100:.1f}% sd between repeats, df {found.df}, alpha {alpha:.3g}); within-run noise, "
        f"widened by the {drift * 100:g}% run-to-run drift allowance (--ipu-drift)"
    )
    judged = judge(
        gate,
        found.shift,
        found.scale,
        found.df,
        alpha,
        allowance=allowance,
        more="repeats",
        option="--ipu-repeats",
        n=max(found.current, found.baseline),
    )
    noise = f"spread {found.spread * 100:.1f}% between repeats, {drift * 100:g}% drift allowance"
    return judged.verdict(gate, benchmark, before, value, method, noise)


def _no_variance(gate: Gate, current: Gated, baseline: Gated) -> tuple[str, str]:
    """What to give for a verdict with no variance estimate, and how the noise reads: one value
    per run, or one repeat on each side."""
    single = current.no_repeats() or baseline.no_repeats()
    if single is not None:
        return f"{single}: give {HISTORY_MIN} or more baseline runs", "one value per run"
    if METRICS[gate.metric].per_repeat:
        advice = f"one repeat on each side: use --ipu-repeats=3 or {HISTORY_MIN} or more baseline runs"
        return advice, "one repeat"
    advice = f"{gate.metric} is measured once per benchmark: give {HISTORY_MIN} or more baseline runs"
    return advice, "one value per run"


def _check_run_to_run(gate: Gate, benchmark: str, found: Evidence, value: float, alpha: float) -> Verdict:
    """The verdict from the spread between the baseline runs: the value against their geometric
    mean."""
    baseline_value = math.exp(math.log(value) - found.shift)
    method = (
        f"run-to-run: {found.baseline} baseline runs (geometric mean; spread {found.spread * 100:.1f}% "
        f"sd between runs, df {found.df}, alpha {alpha:.3g})"
    )
    judged = judge(
        gate,
        found.shift,
        found.scale,
        found.df,
        alpha,
        more="baseline runs",
        option="--ipu-baseline",
        n=found.baseline,
        one_run=True,
    )
    noise = f"spread {found.spread * 100:.1f}% between runs"
    return judged.verdict(gate, benchmark, baseline_value, value, method, noise)


def _check_bound(gate: Gate, benchmark: str, current: Gated, value: float, alpha: float) -> Verdict:
    logs = [math.log(v) for v in _usable(current.repeat_values(gate.metric))]
    if len(logs) < 2:
        single = current.no_repeats()
        if single is not None:
            advice = f"{single}: no spread to bound the value by"
        elif METRICS[gate.metric].per_repeat:
            advice = "one repeat: no spread to bound the value by; use --ipu-repeats=3"
        elif METRICS[gate.metric].runs is not None:
            advice = f"{gate.metric} has one value (one run kept): no spread to bound the value by"
        else:
            advice = f"{gate.metric} is measured once per benchmark: no spread to bound the value by"
        noise = "one repeat" if single is None and METRICS[gate.metric].per_repeat else "one value per run"
        return Verdict(
            gate,
            benchmark,
            INCONCLUSIVE,
            None,
            value,
            None,
            None,
            "no variance estimate",
            advice,
            None,
            noise,
        )
    judged = judge_bound(gate, logs, alpha)
    what = "runs" if METRICS[gate.metric].runs is not None else "repeats"
    method = (
        f"absolute bound on the interval of {len(logs)} {what}' geometric mean "
        f"(df {len(logs) - 1}, alpha {alpha:.3g})"
    )
    spread = math.sqrt(math.fsum((x - _mean(logs)) ** 2 for x in logs) / (len(logs) - 1))
    return judged.verdict(gate, benchmark, None, value, method, f"spread {spread * 100:.1f}% between {what}")


def _exp(x: float) -> float:
    """``exp(x)``, infinite past what a float holds: repeats far apart give an unbounded interval."""
    if x > 709.0:
        return math.inf
    return 0.0 if x < -745.0 else math.exp(x)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


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

    def interval(self, alpha: float) -> tuple[float, float]:
        """The two-sided ``1 - alpha`` t interval of the change as a ratio, ``exp(shift -+ q scale)``
        (the interval the test of ``p_change`` rejects "no change" outside of, at ``alpha``)."""
        half = 0.0 if self.scale == 0.0 else stats.t_isf(alpha / 2.0, self.df) * self.scale
        return _exp(self.shift - half), _exp(self.shift + half)


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


# --- Summaries and exit codes ----------------------------------------------------------------------

#: The exit codes of ``pytest-ipu compare`` and ``ab`` for their gates (2 is bad input, the CLI's).
EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_INCONCLUSIVE = 3


def summary(verdicts: Sequence[Verdict]) -> str:
    """``gates: 6 checked: 4 PASS, 1 FAIL, 1 INCONCLUSIVE``."""
    counts = ", ".join(f"{sum(v.outcome == o for v in verdicts)} {o}" for o in OUTCOMES)
    return f"gates: {len(verdicts)} checked: {counts}"


def exit_code(verdicts: Sequence[Verdict], gates_given: bool) -> int:
    """``EXIT_FAIL`` when a verdict failed or gates were given but none was checked (a gate that
    checked nothing guards nothing), else ``EXIT_INCONCLUSIVE`` when one could not tell, else
    ``EXIT_PASS``."""
    if any(v.failed for v in verdicts) or (gates_given and not verdicts):
        return EXIT_FAIL
    return EXIT_INCONCLUSIVE if any(v.inconclusive for v in verdicts) else EXIT_PASS


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
        return tuple(v for v in self.verdicts if v.failed)

    @property
    def inconclusive(self) -> tuple[Verdict, ...]:
        """The verdicts that could not tell."""
        return tuple(v for v in self.verdicts if v.inconclusive)


@dataclass(frozen=True)
class GateRunner:
    """Every gate of a run against its baseline runs (the module docstring's rule for each).

    ``history`` holds every baseline run, oldest first; the baseline is ``baseline`` when given,
    else the last of them. ``run_gates`` apply to every benchmark (``--ipu-gate``, ``--gate``),
    except where a benchmark's own gates name the same metric. ``alpha`` and ``drift`` are
    ``check``'s.
    """

    history: Sequence[StoredRun] = ()
    run_gates: Sequence[Gate] = ()
    alpha: float = ALPHA
    baseline: StoredRun | None = None
    drift: float = DRIFT

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

    def check(self, measured: Sequence[Candidate]) -> GateOutcome:
        """Check every gate of every benchmark in ``measured`` (``records.Measured``, or a plain
        benchmark's ``plain.PlainMeasured``); benchmarks without gates are skipped."""
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
            before = None
            if counterpart is not None and base is not None:
                before = gated(counterpart, base.machine_info)
            relative = [g for g in chosen if g.kind == "relative"]
            if relative and before is None:
                why = "is not in" if counterpart is None else f"{not_gated(counterpart)} in"
                missing.append(
                    f"{m.name} {why} the baseline ({self.baseline_name()}): its relative gates "
                    f"({', '.join(map(str, relative))}) were not checked"
                )
            for gate in chosen:
                if gate.kind == "absolute":
                    verdicts.append(check(gate, m.name, m.record, alpha=self.alpha))
                elif before is not None:
                    verdicts.append(self._relative(gate, m, before))
            was, now = None if before is None else before.device_name, m.record.device_name
            if was is not None and now is not None and was != now:
                devices[f"the baseline ran {m.name} on {was!r}, this run on {now!r}"] = None
        return GateOutcome(
            tuple(verdicts), tuple(missing), tuple(f"different hardware: {d}" for d in devices)
        )

    def _relative(self, gate: Gate, m: Candidate, before: Gated) -> Verdict:
        # A metric whose definition changed (throughput: the median round's, once the window's)
        # compares only like with like: a baseline of the other definition cannot decide. Only
        # records have definitions to differ (a plain benchmark's figures are pytest-benchmark's).
        baselines = (b.record for run in self.history for b in run.benchmarks if b.fullname == m.fullname)
        unlike = METRICS[gate.metric].unlike(
            *(r for r in (m.record, before, *baselines) if isinstance(r, IpuRecord))
        )
        if unlike is not None:
            then, now = before.value(gate.metric), m.record.value(gate.metric)
            return Verdict(gate, m.name, INCONCLUSIVE, then, now, None, None, "unlike figures", unlike)
        history = self.history_of(m.fullname, gate.metric)
        return check(gate, m.name, m.record, before, alpha=self.alpha, history=history, drift=self.drift)

    def history_of(self, fullname: str, metric: str) -> list[float]:
        """The metric's value for ``fullname`` in every baseline run that has it, oldest first."""
        values = []
        for run in self.history:
            bench = next((b for b in run.benchmarks if b.fullname == fullname), None)
            figures = None if bench is None else gated(bench, run.machine_info)
            value = None if figures is None else figures.value(metric)
            if value is not None:
                values.append(value)
        return values
