"""``pytest-ipu ab``: the decision on interleaved A/B runs, and its tables (no subprocess, no pytest).

``pytest_ipu.cli.ab`` runs the ABBA pairs; this module reads the runs back as values and decides: each
gate by ``decide.judge`` on the pairs' log-ratios, at each look of ``Sequential`` (``first`` to ``most``
pairs, each look at Pocock's level from ``measure/sequential.py``), a look's verdicts one job
(``family``); a benchmark whose gates a look decides is ``Settled``. The candidate's own gates
(``StoredRun.own_gates``) win over the job's on the same metric (``decide.effective_gates``). A value
of 0 (no log-ratio) leaves a gate INCONCLUSIVE. The change column is ``compare.judge``'s. This module
finds the result and what to say beside it (``legend``, ``notes``); ``report/ab.py`` writes its tables.

Documented in docs/ci.md (section "Interleaved A/B on one runner: pytest-ipu ab", its "Decision" and
"Output" paragraphs, and section "Sequential sampling").
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import Counter
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_ipu.backports import zip_strict
from pytest_ipu.measure import sequential
from pytest_ipu.measure import stats
from pytest_ipu.results import compare
from pytest_ipu.results import decide
from pytest_ipu.results import family
from pytest_ipu.results import formats
from pytest_ipu.results import job_summary
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.decide import Verdict
from pytest_ipu.results.gates import Gate
from pytest_ipu.results.plain import gated
from pytest_ipu.results.plain import not_gated
from pytest_ipu.results.records import group_name

#: Metrics every table shows (with every gated metric added), in the catalog's order.
SHOWN = ("throughput", "latency.p50", "latency.p99")
#: What a verdict with a single pair says instead of an interval.
NO_VARIANCE = "no variance estimate: use more --pairs"

BASELINE = "baseline"
CANDIDATE = "candidate"


# --- Paired statistics -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RatioSummary:
    """What N paired values say about the ratio candidate / baseline.

    ``ratio`` is the geometric mean of the paired ratios; ``interval`` its (1 - alpha) t
    confidence interval and ``p`` a two-sided paired t test of "no change" (both ``None`` with
    fewer than two pairs, or when a value is missing or not positive: then ``ratio`` is that of the
    medians, or ``None`` when a side has no value at all).
    """

    n: int
    ratio: float | None
    interval: tuple[float, float] | None
    p: float | None


def log_ratios(baseline: Sequence[float | None], candidate: Sequence[float | None]) -> list[float] | None:
    """``log(candidate_i / baseline_i)`` for every pair; ``None`` when a value is missing, zero,
    negative or not finite in any pair (then there is no log-ratio to test)."""
    if len(baseline) != len(candidate):
        raise ValueError(f"unpaired values: {len(baseline)} baseline vs {len(candidate)} candidate")
    out = []
    for before, after in zip_strict(baseline, candidate):
        if before is None or after is None or not (0.0 < before < math.inf and 0.0 < after < math.inf):
            return None
        # Subtracting logs rather than taking log(after / before): exact for equal values.
        out.append(math.log(after) - math.log(before))
    return out


def _mean_se(logs: Sequence[float]) -> tuple[float, float]:
    """Mean of the log-ratios and its standard error (``len(logs)`` >= 2)."""
    return statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(len(logs))


def _interval(logs: Sequence[float], alpha: float) -> tuple[float, float]:
    """The (1 - alpha) two-sided t interval of the geometric-mean ratio (``len(logs)`` >= 2)."""
    centre, se = _mean_se(logs)
    half = stats.t_isf(alpha / 2.0, len(logs) - 1) * se
    return math.exp(centre - half), math.exp(centre + half)


def median(values: Sequence[float | None]) -> float | None:
    """The median of the values present; ``None`` when none is."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarise(
    baseline: Sequence[float | None], candidate: Sequence[float | None], alpha: float = decide.ALPHA
) -> RatioSummary:
    """The ratio candidate / baseline of N paired values, with its interval and p (see the class)."""
    decide.check_alpha(alpha)
    logs = log_ratios(baseline, candidate)
    if logs is None or not logs:
        before, after = median(baseline), median(candidate)
        ratio = after / before if before and after is not None else None
        return RatioSummary(len(baseline), ratio, None, None)
    ratio = math.exp(statistics.fmean(logs))
    if len(logs) < 2:
        return RatioSummary(1, ratio, None, None)
    centre, se = _mean_se(logs)
    if se == 0.0:
        # Every pair gave the same ratio: no spread, so only whether it is 1 can decide.
        p = 1.0 if centre == 0.0 else 0.0
    else:
        p = min(1.0, 2.0 * stats.t_sf(abs(centre) / se, len(logs) - 1))
    return RatioSummary(len(logs), ratio, _interval(logs, alpha), p)


# --- Verdicts ---------------------------------------------------------------------------------------


def _geometric_mean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def check_paired(
    gate: Gate,
    benchmark: str,
    baseline: Sequence[float | None],
    candidate: Sequence[float | None],
    *,
    alpha: float = decide.ALPHA,
    baseline_gap: str | None = None,
    candidate_gap: str | None = None,
) -> Verdict:
    """Decide one gate for one benchmark on N paired values (SI units, pair order) by the module
    docstring's rule. ``baseline_gap`` and ``candidate_gap`` say why a side lacks a value where it
    does (the record's reason). Raises ``ValueError`` for unpaired values, no pairs, or ``alpha``
    outside (0, 0.5)."""
    decide.check_alpha(alpha)
    if len(baseline) != len(candidate) or not baseline:
        raise ValueError(f"need N >= 1 pairs, got {len(baseline)} baseline and {len(candidate)} candidate")
    if any(v is None for v in candidate):
        reason = f"no value in the candidate: {candidate_gap or 'missing from a run'}"
        return Verdict(gate, benchmark, decide.FAIL, None, None, None, None, reason)
    present = [v for v in candidate if v is not None]
    if gate.kind == "absolute":
        return _check_absolute(gate, benchmark, present, alpha)
    if any(v is None for v in baseline):
        reason = f"no value in the baseline: {baseline_gap or 'missing from a run'}"
        return Verdict(
            gate, benchmark, decide.INCONCLUSIVE, None, statistics.median(present), None, None, reason
        )
    return _check_ratios(gate, benchmark, baseline, present, alpha)


def _check_ratios(
    gate: Gate, benchmark: str, baseline: Sequence[float | None], present: Sequence[float], alpha: float
) -> Verdict:
    """A relative gate on the pairs' log-ratios, every pair having both values: inconclusive for
    one pair or a value of 0."""
    n = len(present)
    logs = log_ratios(baseline, present)
    if logs is None:
        before = statistics.median(v for v in baseline if v is not None)
        after = statistics.median(present)
        method = "a value of 0 leaves no log-ratio to test"
        change = decide.relative_change(before, after)
        return Verdict(gate, benchmark, decide.INCONCLUSIVE, before, after, change, None, method)
    before = _geometric_mean([v for v in baseline if v is not None])
    after = _geometric_mean(present)
    change = math.exp(statistics.fmean(logs)) - 1.0
    if n < 2:
        return Verdict(
            gate,
            benchmark,
            decide.INCONCLUSIVE,
            before,
            after,
            change,
            None,
            "1 pair",
            NO_VARIANCE,
            None,
            "one pair",
        )
    centre, se = _mean_se(logs)
    judged = decide.judge(gate, centre, se, n - 1, alpha, more="pairs", option="--max-pairs", n=n)
    method = f"paired: {n} ABBA pairs' log-ratios (df {n - 1}, alpha {alpha:.3g})"
    noise = f"spread {statistics.stdev(logs) * 100:.1f}% between pairs"
    return Verdict(
        gate,
        benchmark,
        judged.outcome,
        before,
        after,
        change,
        judged.interval,
        method,
        judged.advice,
        judged.p_fail,
        noise,
    )


def _check_absolute(gate: Gate, benchmark: str, present: Sequence[float], alpha: float) -> Verdict:
    """An absolute gate on the candidate's values alone (every pair has one): a bound on their
    geometric mean, inconclusive for one pair or a value of 0."""
    n = len(present)
    value = statistics.median(present)
    positive = [v for v in present if 0.0 < v < math.inf]
    if n < 2 or len(positive) < n:
        method = f"absolute bound on the candidate over {n} pair(s)"
        why = NO_VARIANCE if n < 2 else "a value of 0 leaves no log to bound"
        noise = "one pair" if n < 2 else "a value of 0"
        return Verdict(
            gate, benchmark, decide.INCONCLUSIVE, None, value, None, None, method, why, None, noise
        )
    logs_now = [math.log(v) for v in positive]
    judged = decide.judge_bound(gate, logs_now, alpha, more="pairs", option="--max-pairs")
    method = (
        f"absolute bound on the candidate's geometric mean over {n} pairs (df {n - 1}, alpha {alpha:.3g})"
    )
    noise = f"spread {statistics.stdev(logs_now) * 100:.1f}% between pairs"
    return judged.verdict(gate, benchmark, None, value, method, noise)


# --- The sequential plan ------------------------------------------------------------------------------


#: Each look after the first comes at about this many times the pairs of the one before.
GROWTH = 1.5


@dataclass(frozen=True)
class Sequential:
    """The command's group-sequential plan (the module docstring): look after ``first`` pairs, then
    at about ``GROWTH`` times as many each time up to ``most``, each gate at Pocock's level for
    ``alpha`` over the looks."""

    first: int = 5
    most: int = 20
    alpha: float = decide.ALPHA
    #: The job's level for FAIL over every gate and look together (``family``).
    job_alpha: float = family.JOB_ALPHA

    def __post_init__(self) -> None:
        decide.check_alpha(self.alpha)
        decide.check_alpha(self.job_alpha)
        if not 1 <= self.first <= self.most:
            raise ValueError(f"need 1 <= first ({self.first}) <= most ({self.most}) pairs")

    @property
    def looks(self) -> tuple[int, ...]:
        """The pair counts after which the verdicts are read."""
        out = [self.first]
        while out[-1] < self.most:
            out.append(min(self.most, max(out[-1] + 1, math.ceil(out[-1] * GROWTH))))
        return tuple(out)

    @property
    def alpha_per_look(self) -> float:
        """The level each look tests a gate at: Pocock's nominal level for ``alpha`` over the looks
        (``sequential.pocock_level``; ``alpha`` itself for one look)."""
        return sequential.pocock_level(self.alpha, self.looks)

    @property
    def job_alpha_per_look(self) -> float:
        """The job's level for FAIL at each look: ``job_alpha`` spent evenly over the looks."""
        return self.job_alpha / len(self.looks)

    def describe(self) -> str:
        """One line for the legend: the looks and the levels."""
        looks = self.looks
        if len(looks) == 1:
            return f"{looks[0]} pair(s), alpha {self.alpha:g}"
        return (
            f"sequential: {looks[0]} to {looks[-1]} pairs, verdicts read after "
            f"{', '.join(map(str, looks))} pairs, each look at alpha {self.alpha_per_look:.3g} "
            f"(Pocock's level for {self.alpha:g} over the {len(looks)} looks)"
        )


# --- Pairing the runs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Paired:
    """One metric of one benchmark in every pair: each side's values in pair order (``None`` where
    a run lacks the value; ``*_gap`` then says why, from the record)."""

    benchmark: str
    fullname: str
    group: str
    metric: str
    baseline: tuple[float | None, ...]
    candidate: tuple[float | None, ...]
    baseline_gap: str | None = None
    candidate_gap: str | None = None

    def summary(self, alpha: float) -> RatioSummary:
        """The ratio candidate / baseline over the pairs (``summarise``)."""
        return summarise(self.baseline, self.candidate, alpha)


@dataclass(frozen=True)
class Settled:
    """A benchmark whose gates were all decided at a look: the pairs it had then (later pairs do
    not run it) and the job's verdicts on its gates at that look, kept as they were."""

    pairs: int
    verdicts: tuple[Verdict, ...]


@dataclass(frozen=True)
class ABResult:
    """Everything ``pytest-ipu ab`` reports: the paired values, the gates' verdicts, the
    benchmarks not measured by every run, and how the sides were named."""

    labels: tuple[str, str]
    pairs: int
    alpha: float
    lines: tuple[Paired, ...]
    verdicts: tuple[Verdict, ...]
    missing: tuple[str, ...]
    #: The job's gates, then the benchmarks' own gates that differ from them.
    gates: tuple[Gate, ...] = ()
    #: How the pairs were planned and why they stopped, for the legend (empty: a fixed count).
    plan: str = ""
    #: The full name of each verdict's benchmark, in the verdicts' order.
    fullnames: tuple[str, ...] = ()
    #: The benchmarks decided at an earlier look, by full name (``Settled``).
    settled: Mapping[str, Settled] = dataclasses.field(default_factory=dict)
    #: The job's level for FAIL these verdicts were read at (``family``; of one look).
    job_alpha: float = family.JOB_ALPHA

    @property
    def failed(self) -> tuple[Verdict, ...]:
        """The verdicts that failed."""
        return tuple(v for v in self.verdicts if v.failed)

    @property
    def inconclusive(self) -> tuple[Verdict, ...]:
        """The verdicts that could not tell."""
        return tuple(v for v in self.verdicts if v.inconclusive)

    @property
    def decided(self) -> bool:
        """Whether no verdict is INCONCLUSIVE (the sequential plan stops then)."""
        return not self.inconclusive

    def undecided(self) -> tuple[str, ...]:
        """The full names of the benchmarks with an INCONCLUSIVE verdict, in order."""
        names = (f for f, v in zip_strict(self.fullnames, self.verdicts) if v.inconclusive)
        return tuple(dict.fromkeys(names))

    def settle(self) -> dict[str, Settled]:
        """Every benchmark whose gates are all decided (PASS or FAIL), the earlier ones included,
        with this result's pairs and verdicts for those decided now."""
        out = dict(self.settled)
        open_ = set(self.undecided())
        for fullname, verdict in zip_strict(self.fullnames, self.verdicts):
            if fullname not in open_ and fullname not in self.settled:
                kept = out.get(fullname)
                out[fullname] = Settled(self.pairs, (*(kept.verdicts if kept else ()), verdict))
        return out


def _gap(runs: Sequence[StoredRun], fullname: str, metric: str, side: str) -> str | None:
    """Why the first run of ``side`` that lacks ``metric`` for ``fullname`` lacks it."""
    for index, run in enumerate(runs, start=1):
        bench = _find(run, fullname)
        figures = None if bench is None else gated(bench, run.machine_info)
        if figures is not None and figures.value(metric) is None:
            return f"{side} pair {index}: {figures.why_missing(metric)}"
    return None


def _find(run: StoredRun, fullname: str) -> StoredBenchmark | None:
    return next((b for b in run.benchmarks if b.fullname == fullname), None)


def analyse(
    baseline_runs: Sequence[StoredRun],
    candidate_runs: Sequence[StoredRun],
    gate_list: Sequence[Gate] = (),
    *,
    alpha: float = decide.ALPHA,
    job_alpha: float = family.JOB_ALPHA,
    labels: tuple[str, str] = (BASELINE, CANDIDATE),
    plan: str = "",
    settled: Mapping[str, Settled] | None = None,
) -> ABResult:
    """Pair the runs (run ``i`` of each side is pair ``i``), then check every gate on every benchmark
    that every run measured with figures a gate can read (``plain.gated``: a pytest-ipu record, or
    pytest-benchmark's statistics of a benchmark of its own fixture), and take them as one job
    (``family.adjust`` at ``job_alpha`` over every gate, the settled ones' included). A benchmark in
    ``settled`` (decided at an earlier look) is read from the pairs it had then and keeps its
    verdicts. Benchmarks missing from some run, or only a partial entry there, are listed in
    ``missing``. ``plan`` describes the pairs for the legend. Raises ``ValueError`` for unequal or no
    runs and for ``alpha`` or ``job_alpha`` outside (0, 0.5)."""
    _check_arguments(baseline_runs, candidate_runs, alpha, job_alpha)
    settled = dict(settled or {})
    sides = {BASELINE: baseline_runs, CANDIDATE: candidate_runs}
    complete, missing = _complete(sides, settled, len(baseline_runs))
    names = [b.name for b in complete]
    own = _own_gates(candidate_runs)
    shown = {*SHOWN, *(g.metric for g in gate_list), *(g.metric for gs in own.values() for g in gs)}
    metrics = [m for m in METRICS if m in shown]
    lines: list[Paired] = []
    verdicts: list[Verdict] = []
    fullnames: list[str] = []
    for bench in complete:
        # Short names read better; two benchmarks of one name (in two files) need their full names.
        display = bench.name if names.count(bench.name) == 1 else bench.fullname
        gates = decide.effective_gates(gate_list, own.get(bench.fullname, ()))
        shown_lines, checked = _check_bench(bench, display, metrics, sides, settled, gates, alpha)
        lines.extend(shown_lines)
        verdicts.extend(checked)
        fullnames.extend(bench.fullname for _ in checked)
    _adjust(verdicts, fullnames, settled, job_alpha)
    return ABResult(
        labels,
        len(baseline_runs),
        alpha,
        tuple(lines),
        tuple(verdicts),
        tuple(missing),
        (*gate_list, *dict.fromkeys(g for gs in own.values() for g in gs if g not in gate_list)),
        plan,
        tuple(fullnames),
        settled,
        job_alpha,
    )


def _own_gates(candidate_runs: Sequence[StoredRun]) -> dict[str, tuple[Gate, ...]]:
    """Each benchmark's own gates (its marker's), by full name, as the candidate's code declares
    them: the code under test sets them, as it does for the in-run gate."""
    out: dict[str, tuple[Gate, ...]] = {}
    for run in candidate_runs:
        for fullname, gates in run.own_gates.items():
            out.setdefault(fullname, gates)
    return out


def _check_arguments(
    baseline_runs: Sequence[StoredRun], candidate_runs: Sequence[StoredRun], alpha: float, job_alpha: float
) -> None:
    """``ValueError`` for unequal or no runs, and for ``alpha`` or ``job_alpha`` outside (0, 0.5)."""
    decide.check_alpha(alpha)
    decide.check_alpha(job_alpha)
    if len(baseline_runs) != len(candidate_runs) or not baseline_runs:
        raise ValueError(
            f"need N >= 1 pairs of runs, got {len(baseline_runs)} baseline and "
            f"{len(candidate_runs)} candidate runs"
        )


def _check_bench(
    bench: StoredBenchmark,
    display: str,
    metrics: Sequence[str],
    sides: Mapping[str, Sequence[StoredRun]],
    settled: Mapping[str, Settled],
    gate_list: Sequence[Gate],
    alpha: float,
) -> tuple[list[Paired], list[Verdict]]:
    """The lines of ``bench`` that hold a value, and its verdicts: every gate of ``gate_list`` (the
    job's, or the benchmark's own on the same metric) checked on its pairs, or the verdicts it kept
    where it was settled at an earlier look."""
    kept = settled.get(bench.fullname)
    lines: list[Paired] = []
    verdicts: list[Verdict] = []
    for line in _paired(bench, display, metrics, sides, settled):
        if any(v is not None for v in (*line.baseline, *line.candidate)):
            lines.append(line)
        if kept is not None:
            continue
        for gate in (g for g in gate_list if g.metric == line.metric):
            verdicts.append(
                check_paired(
                    gate,
                    display,
                    line.baseline,
                    line.candidate,
                    alpha=alpha,
                    baseline_gap=line.baseline_gap,
                    candidate_gap=line.candidate_gap,
                )
            )
    if kept is not None:
        verdicts.extend(kept.verdicts)
    return lines, verdicts


def _runs_of(fullname: str, runs: Sequence[StoredRun], settled: Mapping[str, Settled]) -> Sequence[StoredRun]:
    """The runs of one side that hold ``fullname``'s pairs."""
    # A settled benchmark was not run after the look that decided it.
    return runs[: settled[fullname].pairs] if fullname in settled else runs


def _complete(
    sides: Mapping[str, Sequence[StoredRun]], settled: Mapping[str, Settled], pairs: int
) -> tuple[list[StoredBenchmark], list[str]]:
    """The benchmarks every run of both sides measured with figures a gate can read, in the order
    first seen; and for each of the others, the line that says where it is missing or bare."""
    order: dict[str, StoredBenchmark] = {}
    for runs in sides.values():
        for run in runs:
            for bench in run.benchmarks:
                order.setdefault(bench.fullname, bench)
    missing: list[str] = []
    complete: list[StoredBenchmark] = []
    for fullname, first in order.items():
        absent = [
            f"{side} pair {i}"
            for side, runs in sides.items()
            for i, run in enumerate(_runs_of(fullname, runs, settled), start=1)
            if _find(run, fullname) is None
        ]
        bare = {
            f"{side} pair {i}": b
            for side, runs in sides.items()
            for i, run in enumerate(_runs_of(fullname, runs, settled), start=1)
            if (b := _find(run, fullname)) is not None and gated(b, run.machine_info) is None
        }
        if absent:
            missing.append(f"{fullname}: not in {_places(absent, pairs)}: not compared")
        elif bare:
            why = not_gated(next(iter(bare.values())))
            missing.append(f"{fullname} {why} in {_places(list(bare), pairs)}: not compared")
        else:
            complete.append(first)
    return complete, missing


def _paired(
    bench: StoredBenchmark,
    display: str,
    metrics: Sequence[str],
    sides: Mapping[str, Sequence[StoredRun]],
    settled: Mapping[str, Settled],
) -> list[Paired]:
    """Each of ``metrics`` of ``bench`` in every pair (its settled pairs only, if settled), shown as
    ``display``, with why a side lacks a value where it does."""
    fullname = bench.fullname
    values = {
        side: {
            metric: tuple(_value(run, fullname, metric) for run in _runs_of(fullname, runs, settled))
            for metric in metrics
        }
        for side, runs in sides.items()
    }
    out = []
    for metric in metrics:
        before, after = values[BASELINE][metric], values[CANDIDATE][metric]
        out.append(
            Paired(
                display,
                fullname,
                group_name(bench.group, bench.name),
                metric,
                before,
                after,
                _gap(sides[BASELINE], fullname, metric, BASELINE) if None in before else None,
                _gap(sides[CANDIDATE], fullname, metric, CANDIDATE) if None in after else None,
            )
        )
    return out


def _adjust(
    verdicts: list[Verdict], fullnames: Sequence[str], settled: Mapping[str, Settled], job_alpha: float
) -> None:
    """Apply the job's rule, in place, to the verdicts decided now, in the family of every gate (the
    settled ones' included): each look spends its share of the job's level
    (``Sequential.job_alpha_per_look``)."""
    fresh = [i for i, f in enumerate(fullnames) if f not in settled]
    adjusted = family.adjust([verdicts[i] for i in fresh], job_alpha, size=len(verdicts))
    for i, verdict in zip_strict(fresh, adjusted):
        verdicts[i] = verdict


def _value(run: StoredRun, fullname: str, metric: str) -> float | None:
    bench = _find(run, fullname)
    figures = None if bench is None else gated(bench, run.machine_info)
    return None if figures is None else figures.value(metric)


def _places(where: Sequence[str], pairs: int) -> str:
    """``baseline pair 2, candidate pair 3``, or ``every baseline run`` when a whole side lacks it."""
    out = []
    for side in (BASELINE, CANDIDATE):
        mine = [w for w in where if w.startswith(f"{side} ")]
        if len(mine) == pairs:
            out.append(f"any {side} run")
        else:
            out.extend(mine)
    return ", ".join(out)


# --- What the output says beside the figures ------------------------------------------------------


def confidence(result: ABResult) -> str:
    """The interval's name in the tables: ``99% CI`` at alpha 0.01."""
    return f"{(1.0 - result.alpha) * 100:.4g}% CI"


def legend(result: ABResult) -> list[str]:
    """The lines above the tables: the two sides, the plan of looks and the job's rule when gated, and
    what the columns and the change's words mean."""
    base, cand = result.labels
    plan = [result.plan] if result.plan else []
    if result.gates:
        # The job's rule: a gate's FAIL counts at the job's family-wise level (its look's share).
        plan.append(f"job: {family.describe(result.job_alpha, len(result.verdicts))}")
    return [
        f"baseline: {base}",
        f"candidate: {cand}",
        *plan,
        f"{result.pairs} pair(s) in ABBA order; values are medians over the pairs; ratio = geometric mean "
        f"of candidate/baseline per pair, with its {confidence(result)} (t); p = paired t test of no change",
        f"change: same when the {confidence(result)} lies within +/-{compare.SAME_WITHIN:.0%}; else better "
        f"or worse when p < {result.alpha:.3g}, within noise when not; not tested without a CI (one pair)",
    ]


def notes(result: ABResult) -> list[str]:
    """The lines under the tables: benchmarks missing from a run, those a look decided early, and
    what one pair cannot estimate."""
    found = [f"missing: {m}" for m in result.missing]
    earlier = Counter(s.pairs for s in result.settled.values() if s.pairs < result.pairs)
    if earlier:
        # Counts, not names: a suite of 60 benchmarks would list 60 names here; each benchmark's
        # verdict names its pairs, and a decided one is never the benchmark a reader looks for.
        looks = ", ".join(f"{count} after {pairs} pairs" for pairs, count in sorted(earlier.items()))
        found.append(
            f"{sum(earlier.values())} benchmark(s) decided at an earlier look kept that look's verdicts and "
            f"were not run after it ({looks})"
        )
    if result.pairs < 2:
        found.append(f"1 pair: {NO_VARIANCE}")
    return found


FORMATS = formats.TABLES


def gate_lines(result: ABResult, verbose: bool = False) -> list[str]:
    """The gates' summary line, then the job's summary on one screen (``job_summary.lines``: every
    FAIL, each undecided benchmark once, the rest folded); ``verbose`` lists every verdict's line,
    passes included (the interval of a pass shows how close it came). Empty when no gate was given."""
    if not result.gates:
        return []
    if not result.verdicts:
        return ["gates: nothing was checked: no benchmark was measured, with figures to gate, in every run"]
    return [
        decide.summary(result.verdicts),
        *job_summary.lines(result.verdicts, verbose=verbose, passes=True),
    ]


def exit_code(result: ABResult, strict: bool = False) -> int:
    """``decide.exit_code`` of the verdicts: 0 every gate PASS, 1 one FAIL (or gates given but none
    checked), 3 one INCONCLUSIVE and none FAIL; with ``strict``, a benchmark missing from a run is 1
    (a failure, whatever the verdicts)."""
    if strict and result.missing:
        return decide.EXIT_FAIL
    return decide.exit_code(result.verdicts, bool(result.gates))
