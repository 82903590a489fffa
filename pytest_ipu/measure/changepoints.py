"""Change points of many series at once: every run is evidence, noise decides, and the false
discoveries are controlled across all series (pure numbers).

A series is a ``Sample`` (its runs' values in commit order, each run's commit). ``disturbed`` leaves
out a run beyond ``OUTLIER`` (2) of its neighbours' level, or beyond ``CLIP`` (5) robust standard
deviations where the series spreads wider. The t test pools the variance (the noise, in logarithms,
is the same on both sides of a change of level, and pooling keeps the test sound with three runs a
side); the segmentation is Vostrikova's, each search one test, and a split is kept only when its
parent segment's was. Once placed (``_place``, ``_joint``), each change point is tested again between
its final neighbours (``_confirmed``): the weakest below its pass's Benjamini-Hochberg level is dropped
and the rest tested again, as Otava merges its windows' change points. Otava (and Hunter) use
E-Divisive with a permutation test per series; the test here is parametric on the logarithms, so a
false discovery rate over hundreds of series costs no permutations and ten runs can reach it.
``Noise``'s smallest step of a split of ``m`` and ``k`` runs is
``exp((z(alpha/2) + z(POWER)) * noise * sqrt(1/m + 1/k)) - 1`` (the t test's normal approximation).

The method is documented in docs/ci.md (section "History across commits: pytest-ipu history", its
"The change points" and "What a history cannot see" paragraphs).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pytest_ipu.measure import stats

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: The share of false change points among those reported that the search allows (Benjamini-Hochberg).
FDR = 0.05
#: The fewest runs on either side of a change point (two would leave one degree of freedom a side).
MIN_RUNS = 3
#: The chance of finding a step of the size ``Noise.smallest_step`` states (at the level ``FDR``
#: gives the history's first change point: the strictest).
POWER = 0.9
#: The confidence of a change point's interval.
CONFIDENCE = 0.95
#: The most a run may differ from the level of the runs beside it (``disturbed``): a factor, or where
#: the series spreads wider, robust standard deviations (1.4826 median absolute deviations) of the
#: runs from their levels.
OUTLIER = 2.0
CLIP = 5.0
#: The quantile of the runs beside a run that ``disturbed`` takes as their level: the undisturbed
#: side of a busy machine's noise.
LEVEL = 0.1
#: How far (commits) ``_place`` may move a change from the best split.
RADIUS = 2
#: How much less likely (the natural logarithm of a likelihood ratio) a series' own runs may find the
#: commit its event is placed at than their own best commit, and still be placed with the event.
AGREE = 1.0


@dataclass(frozen=True)
class Sample:
    """One series: the runs' values (positive) and the commit of each, commits numbered from 0 in
    order (a run's commit is never before the previous run's); ``ids`` names each commit (the pooled
    step matches commits across series by it)."""

    values: Sequence[float]
    commits: Sequence[int]
    ids: Sequence[str] = ()
    #: The values are rates (a throughput): a disturbed run is lower, not higher.
    higher_better: bool = False


@dataclass(frozen=True)
class ChangePoint:
    """A change of level at commit ``index``: the first commit of the new level, with its evidence."""

    #: The first commit (by number) of the new level.
    index: int
    #: The p-value of its test (the best split's, times the splits it was chosen among).
    p_value: float
    #: The test's t statistic (positive: the level went up).
    t: float
    #: The geometric mean of the runs from the previous change point (or the start) to ``index``.
    before: float
    #: The geometric mean of the runs from ``index`` to the next change point (or the end).
    after: float
    #: The 95 % interval of the relative change ``after / before - 1``; ``nan`` where a side has one run.
    low: float
    high: float
    #: Found by the pooled test of a commit where other series changed, not by this series alone.
    pooled: bool = False

    @property
    def change(self) -> float:
        """The relative change of the level, ``after / before - 1``."""
        return self.after / self.before - 1.0


@dataclass(frozen=True)
class Noise:
    """What a series can see: its run-to-run noise and the smallest step its runs can find."""

    #: The standard deviation of the logarithms of the runs around their levels (about the relative
    #: spread of one run), the disturbed runs left out; ``nan`` with too few runs to tell.
    sd: float
    #: The runs of the series the search kept (its disturbed runs left out).
    runs: int
    #: The tests of the whole history (each series' first test is one): a first change point must
    #: reach ``FDR / tests``, divided again by the splits it is the best of.
    tests: int = 1

    def alpha(self, runs: int) -> float:
        """The two-sided level the best split of ``runs`` runs must reach to be a first change point
        (one run a commit: every split between ``MIN_RUNS`` runs from either end is a candidate)."""
        return FDR / max(1, self.tests) / max(1, runs - 2 * MIN_RUNS + 1)

    def smallest_step(self, left: int | None = None, right: int | None = None) -> float:
        """The smallest relative step found with ``POWER`` probability at a split of ``left`` and
        ``right`` runs (default: halfway); ``inf`` when the series is too short to split."""
        if left is None or right is None:
            left, right = self.runs // 2, self.runs - self.runs // 2
        if left < MIN_RUNS or right < MIN_RUNS or not math.isfinite(self.sd):
            return math.inf
        reach = _reach(self.alpha(max(self.runs, left + right)))
        return math.exp(reach * self.sd * math.sqrt(1.0 / left + 1.0 / right)) - 1.0

    def runs_needed(self, step: float) -> int:
        """The fewest runs, split halfway, in which a relative ``step`` is found with ``POWER``
        probability (at least ``2 * MIN_RUNS``)."""
        if not math.isfinite(self.sd):
            return 2 * MIN_RUNS
        runs = 2 * MIN_RUNS
        # More runs mean more splits to choose from, and a stricter level: iterate to a fixed point.
        for _ in range(60):
            per_side = (_reach(self.alpha(runs)) * self.sd / math.log1p(abs(step))) ** 2 * 2.0
            needed = max(2 * MIN_RUNS, 2 * math.ceil(per_side))
            if needed <= runs:
                return runs
            runs = needed
        return runs


def _reach(alpha: float) -> float:
    normal = statistics.NormalDist()
    return normal.inv_cdf(1.0 - alpha / 2.0) + normal.inv_cdf(POWER)


@dataclass
class _Test:
    """One tested segment ``[start, end)`` of series ``series`` (run indices) and its best split."""

    series: int
    start: int
    end: int
    split: int
    t: float
    p: float
    parent: int | None
    kept: bool = False


def _validated(sample: Sample) -> tuple[FloatArray, IntArray]:
    """The logarithms of the values and the commits, checked."""
    values = np.asarray(sample.values, dtype=np.float64)
    commits = np.asarray(sample.commits, dtype=np.int64)
    if values.ndim != 1 or commits.shape != values.shape:
        raise ValueError("values and commits must be 1-D series of the same length")
    if len(values) and not (np.all(np.isfinite(values)) and np.all(values > 0)):
        raise ValueError("values must be finite numbers > 0")
    if len(commits) and (commits[0] < 0 or np.any(np.diff(commits) < 0)):
        raise ValueError("commits must be numbered from 0, in the order of the runs")
    return np.log(values), commits


def _undisturbed(sample: Sample) -> tuple[Sample, IntArray]:
    """``sample`` without its disturbed runs (``disturbed``), its commits numbered again from 0, and
    the number each of its commits had in ``sample``."""
    logs, commits = _validated(sample)
    # ``disturbed`` looks for runs slowed: the high side of a time, the low side of a rate.
    starts = (np.flatnonzero(np.diff(commits) != 0) + 1).astype(np.int64)
    keep = ~disturbed(-logs if sample.higher_better else logs, starts)
    numbers, renumbered = np.unique(commits[keep], return_inverse=True)
    ids = [sample.ids[int(c)] for c in numbers] if sample.ids else []
    values = np.asarray(sample.values, dtype=np.float64)[keep]
    return Sample(list(values), [int(c) for c in renumbered], ids, sample.higher_better), numbers.astype(
        np.int64
    )


def _prepare(sample: Sample) -> tuple[FloatArray, IntArray]:
    """The logarithms of the values and the run index where each commit after the first begins."""
    logs, commits = _validated(sample)
    starts = np.flatnonzero(np.diff(commits) != 0) + 1
    return logs, starts.astype(np.int64)


def _levels(x: FloatArray, width: int, trailing: bool) -> FloatArray:
    """The ``LEVEL`` quantile of the ``width`` runs up to each run (``trailing``) or from it on;
    where the series' end leaves fewer than ``MIN_RUNS`` of them, of the ``MIN_RUNS`` runs at that
    end."""
    pad = np.full(width - 1, np.inf)
    padded = np.concatenate([pad, x]) if trailing else np.concatenate([x, pad])
    windows = np.sort(np.lib.stride_tricks.sliding_window_view(padded, width), axis=1)
    count = np.isfinite(windows).sum(axis=1)
    # Linear interpolation between order statistics, as ``np.quantile`` does, over the runs there.
    at = LEVEL * (count - 1)
    low = np.floor(at).astype(np.int64)
    high = np.minimum(low + 1, count - 1)
    rows = np.arange(len(windows))
    level = windows[rows, low] + (at - low) * (windows[rows, high] - windows[rows, low])
    edge = MIN_RUNS - 1 if trailing else len(x) - MIN_RUNS
    out: FloatArray = np.where(count >= MIN_RUNS, level, level[edge])
    return out


def disturbed(x: FloatArray, starts: IntArray | None = None) -> npt.NDArray[np.bool_]:
    """Which runs of the logarithms ``x`` (of times: a disturbed run is slower) a busy machine
    disturbed: those beyond a factor ``OUTLIER`` of the level of the runs beside them, or ``CLIP``
    robust standard deviations of the runs' distances from their levels where the series spreads
    wider. A run's level is the lower tenth (``LEVEL``) of the ``2 * MIN_RUNS + 1`` runs up to the
    end of its commit, or of those from the start of its commit on (``starts``: where each commit
    after the first begins; default one run a commit; at least ``MIN_RUNS`` runs at either end of
    the series), whichever it is nearer: a run that starts a new level is near the level of the
    runs after it, a run preempted for a time slice near neither, and the runs of a commit at
    either end of the series are judged with each other.

    The search leaves disturbed runs out. It looks for a change of the code, and a call preempted
    for a whole time slice, or a benchmark's slow mode (a call of 1 ms or of 13 ms, run to run), is
    a change of the machine: held at some bound instead, such runs would still count, and a change
    of how often they happen would look like a change of level. The lower tenth stays with the
    undisturbed mode unless nearly all of the runs beside a run are slowed (where the slow mode is
    the more frequent, the runs are too noisy for any search); the two humps of a busy machine's
    noise, a tenth apart, are both kept."""
    width = 2 * MIN_RUNS + 1
    if len(x) < width:
        return np.zeros(len(x), dtype=np.bool_)
    if starts is None:
        starts = np.arange(1, len(x), dtype=np.int64)
    commit = np.searchsorted(starts, np.arange(len(x)), side="right")
    bounds = np.concatenate([[0], starts, [len(x)]])
    before = x - _levels(x, width, trailing=True)[bounds[commit + 1] - 1]
    after = x - _levels(x, width, trailing=False)[bounds[commit]]
    residual = np.where(np.abs(before) <= np.abs(after), before, after)
    spread = 1.4826 * float(np.median(np.abs(residual)))
    bound = max(math.log(OUTLIER), CLIP * spread)
    out: npt.NDArray[np.bool_] = np.abs(residual) > bound
    return out


def _splits(starts: IntArray, start: int, end: int, min_runs: int) -> IntArray:
    """The allowed splits of ``[start, end)``: commit starts with ``min_runs`` runs on each side."""
    allowed: IntArray = starts[(starts >= start + min_runs) & (starts <= end - min_runs)]
    return allowed


def _t(x: FloatArray, start: int, end: int, splits: IntArray) -> FloatArray:
    """Student's pooled two-sample t of ``x[start:split]`` against ``x[split:end]`` at each split."""
    segment = x[start:end] - x[start:end].mean()
    n = len(segment)
    total = np.concatenate([[0.0], np.cumsum(segment)])
    squares = np.concatenate([[0.0], np.cumsum(segment * segment)])
    at = splits - start
    m = at.astype(np.float64)
    k = n - m
    left_sum, right_sum = total[at], total[n] - total[at]
    within = squares[n] - left_sum**2 / m - right_sum**2 / k
    pooled = np.maximum(within, 0.0) / (n - 2)
    diff = right_sum / k - left_sum / m
    scale = np.sqrt(pooled * (1.0 / m + 1.0 / k))
    with np.errstate(divide="ignore", invalid="ignore"):
        t: FloatArray = np.where(scale > 0, diff / scale, np.where(diff == 0, 0.0, np.sign(diff) * np.inf))
    return t


def _p(t: float, df: float, tests: int) -> float:
    """The two-sided p-value of ``t``, times ``tests`` (at most 1)."""
    return min(1.0, 2.0 * stats.t_sf(abs(t), df) * tests)


def _search(
    number: int, x: FloatArray, starts: IntArray, fdr: float, min_runs: int, tests: list[_Test]
) -> None:
    """Binary segmentation of series ``number``: each segment's best split is a test; a segment whose
    best split has p <= ``fdr`` is split and both sides searched."""
    pending: list[tuple[int, int, int | None]] = [(0, len(x), None)]
    while pending:
        start, end, parent = pending.pop()
        splits = _splits(starts, start, end, min_runs)
        if len(splits) == 0:
            continue
        t = _t(x, start, end, splits)
        best = int(np.argmax(np.abs(t)))
        p = _p(float(t[best]), end - start - 2, len(splits))
        tests.append(_Test(number, start, end, int(splits[best]), float(t[best]), p, parent))
        if p <= fdr:
            here = len(tests) - 1
            pending += [(start, int(splits[best]), here), (int(splits[best]), end, here)]


def _step_up(p_values: Sequence[float], fdr: float) -> float:
    """Benjamini-Hochberg: the level ``k * fdr / m`` of the largest rank ``k`` whose p-value is at most
    it; every p-value at or below it is kept (``-1`` when none is)."""
    ordered = sorted(p_values)
    m = len(ordered)
    level = -1.0
    for rank, p in enumerate(ordered, start=1):
        if p <= rank * fdr / m:
            level = rank * fdr / m
    return level


def _keep(tests: list[_Test], fdr: float) -> float:
    """Mark the tests Benjamini-Hochberg keeps over all of them, each only below a kept parent;
    return its level (``_step_up``)."""
    threshold = _step_up([t.p for t in tests], fdr)
    for test in tests:  # parents come before their children
        parent_kept = test.parent is None or tests[test.parent].kept
        test.kept = parent_kept and test.p <= threshold
    return threshold


def find(
    samples: Sequence[Sample], *, fdr: float = FDR, min_runs: int = MIN_RUNS
) -> tuple[list[list[ChangePoint]], list[Noise]]:
    """The change points of every series (by commit, in order) and what each series can see (the
    module docstring's method)."""
    if not 0.0 < fdr < 1.0:
        raise ValueError(f"fdr must be within (0, 1), got {fdr}")
    if min_runs < 2:
        raise ValueError(f"min_runs must be at least 2, got {min_runs}")
    # The search reads each series without its disturbed runs (``reduced``: the series and its
    # commits' numbers in the given one); the change points name the given commits.
    reduced = [_undisturbed(s) for s in samples]
    samples = [sample for sample, _ in reduced]
    prepared = [_prepare(s) for s in samples]
    tests: list[_Test] = []
    for number, (x, starts) in enumerate(prepared):
        _search(number, x, starts, fdr, min_runs, tests)
    first = _keep(tests, fdr)
    kept: list[list[int]] = [[] for _ in samples]
    pooled: set[tuple[int, int]] = set()
    for number, ((_, starts), sample) in enumerate(zip(prepared, samples)):
        own = sorted(t.split for t in tests if t.kept and t.series == number)
        # Placed by the runs as measured: their noise's own shape, spikes and all, tells them apart.
        raw = np.log(np.asarray(sample.values, dtype=np.float64))
        kept[number] = _placed(raw, starts, own, min_runs)
    second = _pool(samples, prepared, kept, pooled, fdr, min_runs)
    _joint(samples, [starts for _, starts in prepared], kept, pooled, min_runs)
    out: list[list[ChangePoint]] = []
    noises: list[Noise] = []
    for number, (sample, (x, starts)) in enumerate(zip(samples, prepared)):
        tested = _confirmed(x, starts, kept[number], pooled, number, first, second, min_runs)
        edges = [0, *(split for split, _, _ in tested), len(x)]
        commits = np.asarray(sample.commits, dtype=np.int64)
        numbers = reduced[number][1]
        points = [
            _describe(
                x,
                edges[j],
                split,
                edges[j + 2],
                int(numbers[commits[split]]),
                p,
                t,
                (number, split) in pooled,
            )
            for j, (split, t, p) in enumerate(tested)
        ]
        out.append(points)
        noises.append(Noise(_noise(x, edges), len(x), max(1, len(tests))))
    return out, noises


def _confirmed(
    x: FloatArray,
    starts: IntArray,
    splits: list[int],
    pooled: set[tuple[int, int]],
    number: int,
    first: float,
    second: float,
    min_runs: int,
) -> list[tuple[int, float, float]]:
    """Each change point tested again between its final neighbours (its split's t there; p times
    the splits of that segment, or alone for a pooled one), the weakest that no longer reaches its
    pass's Benjamini-Hochberg level dropped and the rest tested again: ``(split, t, p)`` in order.
    A split found while a larger change shared its segment is judged on its own segment, so its
    p-value agrees with its levels and interval."""
    current = sorted(splits)
    while True:
        edges = [0, *current, len(x)]
        tested = []
        for j, split in enumerate(current):
            below, above = edges[j], edges[j + 2]
            t = float(_t(x, below, above, np.asarray([split], dtype=np.int64))[0])
            alone = (number, split) in pooled
            choices = 1 if alone else max(1, len(_splits(starts, below, above, min_runs)))
            tested.append((split, t, _p(t, above - below - 2, choices), second if alone else first))
        failing = [c for c in tested if c[2] > c[3]]
        if not failing:
            return [(split, t, p) for split, t, p, _ in tested]
        weakest = max(failing, key=lambda c: c[2])
        current.remove(weakest[0])


def _placed(x: FloatArray, starts: IntArray, splits: list[int], min_runs: int) -> list[int]:
    """Each split moved, within ``RADIUS`` commits, to where the runs there are most likely (the
    module docstring's placement), between its neighbours."""
    out: list[int] = []
    for j, split in enumerate(splits):
        below = out[-1] if out else 0
        above = splits[j + 1] if j + 1 < len(splits) else len(x)
        out.append(_place(x, starts, below, split, above, min_runs))
    return out


def _log_density(at: FloatArray, sample: FloatArray, bandwidth: float, width: float) -> FloatArray:
    """The log of a Gaussian kernel density estimate of ``sample`` at each of ``at``, mixed with a
    uniform density over ``width`` weighing as one run of the sample."""
    z = -0.5 * ((at[:, None] - sample[None, :]) / bandwidth) ** 2
    top = z.max(axis=1)
    # log-sum-exp: a run far from every residual still gets a finite, comparable log density.
    total: FloatArray = top + np.log(np.exp(z - top[:, None]).sum(axis=1))
    kernel = total - math.log((len(sample) + 1) * bandwidth * math.sqrt(2.0 * math.pi))
    # The floor: a run far from every residual (a call preempted for a whole time slice, a hundred
    # times its usual time) is as unlikely under either level, instead of deciding the placement by
    # which level it is a little less far from.
    floor = -math.log((len(sample) + 1) * width)
    out: FloatArray = np.logaddexp(kernel, floor)
    return out


def _place(x: FloatArray, starts: IntArray, below: int, split: int, above: int, min_runs: int) -> int:
    """The most likely start of the new level among the commit starts within ``RADIUS`` commits of
    ``split`` (``_likelihoods``); ``split`` when they cannot be told apart."""
    scores = _likelihoods(x, starts, below, split, above, min_runs)
    if not scores:
        return split
    top = max(scores.values())
    best = [c for c, score in scores.items() if score >= top - 1e-9]
    return min(best, key=lambda c: abs(c - split))


def _likelihoods(
    x: FloatArray, starts: IntArray, below: int, split: int, above: int, min_runs: int
) -> dict[int, float]:
    """The log-likelihood of a change starting at each commit start within ``RADIUS`` commits of
    ``split`` (between ``below`` and ``above``): the runs there each judged by a kernel density
    estimate (Gaussian, Silverman's bandwidth) of the residuals of the runs clear of them around
    their side's median. Empty when there is no choice or those residuals have no spread."""
    allowed = _splits(starts, below, above, min_runs)
    at = int(np.searchsorted(allowed, split))
    near = allowed[max(0, at - RADIUS) : at + RADIUS + 1]
    if len(near) == 0:
        return {}
    low, high = int(near[0]), int(near[-1])
    if high <= low or low - below < 2 or above - high < 2:
        return {}
    left, right = x[below:low], x[high:above]
    level_left, level_right = float(np.median(left)), float(np.median(right))
    sample = np.concatenate([left - level_left, right - level_right])
    q25, q75 = np.percentile(sample, [25, 75])
    spread = min(float(sample.std(ddof=1)), float(q75 - q25) / 1.34)
    bandwidth = 0.9 * spread * len(sample) ** -0.2
    if not bandwidth > 0:
        return {}
    between = x[low:high]
    width = float(x[below:above].max() - x[below:above].min()) + 2.0 * bandwidth
    as_left = np.concatenate([[0.0], np.cumsum(_log_density(between - level_left, sample, bandwidth, width))])
    as_right = np.concatenate(
        [np.cumsum(_log_density(between - level_right, sample, bandwidth, width)[::-1])[::-1], [0.0]]
    )
    # A split at run low + i: the first i runs between are the old level, the rest the new one.
    return {int(c): float(as_left[c - low] + as_right[c - low]) for c in near}


def _joint(
    samples: Sequence[Sample],
    starts: Sequence[IntArray],
    kept: list[list[int]],
    pooled: set[tuple[int, int]],
    min_runs: int,
) -> None:
    """Place each event once for all the series that step with it: change points of one direction
    within ``RADIUS`` commits of the commit most of them name are moved to the commit where the sum
    of their runs' log-likelihoods (``_likelihoods``) is largest, each unless its own runs find that
    commit less likely than their own best by more than ``AGREE`` and the prior the others' own
    choices give (the log of how many more of them chose the event's commit than its own): a change
    of its own nearby.

    Each series alone places a change by a few runs around it; on a busy machine one slowed run
    before a step, or one quick run after it, moves a series' change a commit off. Series that
    stepped together share the commit, and their runs together tell it apart far more surely than
    any one of them."""
    raws = [np.log(np.asarray(s.values, dtype=np.float64)) for s in samples]
    where = [{commit_id: i for i, commit_id in enumerate(s.ids)} for s in samples]
    done: set[tuple[int, int]] = set()
    while True:
        members = _event(samples, raws, where, kept, done)
        if members is None:
            return
        scores = _scores(samples, raws, starts, kept, members, min_runs)
        shared = set.intersection(*(set(v) for v in scores.values())) if len(scores) > 1 else set()
        if not shared:
            continue
        best = max(sorted(shared), key=lambda c: sum(v[c] for v in scores.values()))
        votes = [max(v, key=lambda c: v[c]) for v in scores.values()]
        for number, own in scores.items():
            mine = max(own, key=lambda c: own[c])
            # The others' own choices are the prior (each commit's count among them, plus one): a
            # commit most of them name is likely this one's too, unless its runs say otherwise.
            if (
                mine != best
                and own[best] + math.log((votes.count(best) + 1) / votes.count(mine)) + AGREE < own[mine]
            ):
                continue
            split, moved = members[number], int(starts[number][where[number][best] - 1])
            if moved == split:
                continue
            kept[number][kept[number].index(split)] = moved
            done.add((number, moved))
            if (number, split) in pooled:
                pooled.discard((number, split))
                pooled.add((number, moved))


def _scores(
    samples: Sequence[Sample],
    raws: Sequence[FloatArray],
    starts: Sequence[IntArray],
    kept: list[list[int]],
    members: Mapping[int, int],
    min_runs: int,
) -> dict[int, dict[str, float]]:
    """For each series of an event (``members``: series number -> its change's split), the
    log-likelihood of its runs with the change at each commit near it, by commit id; a series
    whose runs cannot place it is left out."""
    scores: dict[int, dict[str, float]] = {}
    for number, split in members.items():
        edges = [0, *sorted(kept[number]), len(raws[number])]
        j = edges.index(split)
        by_split = _likelihoods(raws[number], starts[number], edges[j - 1], split, edges[j + 1], min_runs)
        ids, commits = samples[number].ids, samples[number].commits
        if by_split:  # none: its runs cannot place it (too few about it, or no spread)
            scores[number] = {ids[int(commits[c])]: v for c, v in by_split.items()}
    return scores


def _event(
    samples: Sequence[Sample],
    raws: Sequence[FloatArray],
    where: Sequence[Mapping[str, int]],
    kept: list[list[int]],
    done: set[tuple[int, int]],
) -> dict[int, int] | None:
    """The next event to place (``_joint``): the commit and direction most change points not yet
    placed name, and of each series the change point of that direction nearest it within
    ``RADIUS`` commits (series number to split), all marked ``done``; ``None`` when none is left."""
    points = [
        (number, split, _rises(raws[number], kept[number], split))
        for number, sample in enumerate(samples)
        if sample.ids
        for split in kept[number]
        if (number, split) not in done
    ]
    counts: dict[tuple[str, bool], int] = {}
    for number, split, rises in points:
        key = (samples[number].ids[int(samples[number].commits[split])], rises)
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return None
    (seed, rises), _ = max(counts.items(), key=lambda item: (item[1], item[0]))
    members: dict[int, int] = {}
    for number, split, up in points:
        if up != rises or seed not in where[number]:
            continue
        distance = abs(int(samples[number].commits[split]) - where[number][seed])
        nearest = number not in members or distance < abs(
            int(samples[number].commits[members[number]]) - where[number][seed]
        )
        if distance <= RADIUS and nearest:
            members[number] = split
    done.update(members.items())
    # The seed's own change points are placed with this event even when it has one series only.
    done.update(
        (n, s) for n, s, up in points if up == rises and samples[n].ids[int(samples[n].commits[s])] == seed
    )
    return members


def _rises(x: FloatArray, splits: Sequence[int], split: int) -> bool:
    """Whether the level of ``x`` rises at ``split`` (medians of the runs back to the previous split
    and on to the next)."""
    edges = [0, *sorted(splits), len(x)]
    j = edges.index(split)
    return bool(np.median(x[split : edges[j + 1]]) > np.median(x[edges[j - 1] : split]))


def _pooled_test(x: FloatArray, start: int, split: int, end: int) -> tuple[float, float]:
    """The t statistic and p-value of one given split of ``x[start:end]`` (no choice of split)."""
    t = float(_t(x, start, end, np.asarray([split], dtype=np.int64))[0])
    return t, _p(t, end - start - 2, 1)


def _pool(
    samples: Sequence[Sample],
    prepared: Sequence[tuple[FloatArray, IntArray]],
    kept: list[list[int]],
    pooled: set[tuple[int, int]],
    fdr: float,
    min_runs: int,
) -> float:
    """Test every series at each commit where another series changed (the module docstring), add
    the splits a second Benjamini-Hochberg pass keeps to ``kept``, and return that pass's level."""
    events = {
        samples[s].ids[int(samples[s].commits[split])]
        for s, splits in enumerate(kept)
        for split in splits
        if samples[s].ids
    }
    if not events:
        return -1.0
    candidates: list[tuple[int, int, float]] = []
    for number, (sample, (x, starts)) in enumerate(zip(samples, prepared)):
        if not sample.ids:
            continue
        own = sorted(kept[number])
        own_commits = {int(sample.commits[s]) for s in own}
        for commit, commit_id in enumerate(sample.ids):
            if commit_id not in events or commit == 0:
                continue
            # A change of its own at or next to the commit is the same event, placed by its own runs.
            if own_commits & {commit - 1, commit, commit + 1}:
                continue
            split = int(starts[commit - 1]) if commit - 1 < len(starts) else len(x)
            edges = [0, *own, len(x)]
            below = max(e for e in edges if e < split) if split < len(x) else len(x)
            above = min((e for e in edges if e > split), default=len(x))
            if split - below < min_runs or above - split < min_runs:
                continue
            _, p = _pooled_test(x, below, split, above)
            candidates.append((number, split, p))
    threshold = _step_up([p for _, _, p in candidates], fdr)
    # The strongest first: a weaker one too near a change already kept (two events a commit or two
    # apart) stays out.
    for number, split, p in sorted(candidates, key=lambda c: c[2]):
        near = any(abs(split - other) < min_runs for other in kept[number])
        if p <= threshold and not near:
            kept[number].append(split)
            pooled.add((number, split))
    return threshold


def _noise(x: FloatArray, edges: Sequence[int]) -> float:
    """The pooled standard deviation of ``x`` around the mean of each segment between ``edges``."""
    residuals = [x[a:b] - x[a:b].mean() for a, b in zip(edges[:-1], edges[1:]) if b > a]
    df = len(x) - (len(edges) - 1)
    if df < 1:
        return math.nan
    return math.sqrt(float(sum(float((r * r).sum()) for r in residuals)) / df)


def _describe(
    x: FloatArray, start: int, split: int, end: int, commit: int, p: float, t: float, pooled: bool
) -> ChangePoint:
    """A change point with the levels of ``x[start:split]`` and ``x[split:end]`` (logarithms)."""
    left, right = x[start:split], x[split:end]
    shift = float(right.mean() - left.mean())
    low = high = math.nan
    if len(left) > 1 and len(right) > 1:
        var = float(left.var(ddof=1)) / len(left) + float(right.var(ddof=1)) / len(right)
        if var == 0:
            low = high = math.expm1(shift)
        else:
            # Welch-Satterthwaite degrees of freedom.
            df = var**2 / (
                (float(left.var(ddof=1)) / len(left)) ** 2 / (len(left) - 1)
                + (float(right.var(ddof=1)) / len(right)) ** 2 / (len(right) - 1)
            )
            half = stats.t_isf((1.0 - CONFIDENCE) / 2.0, df) * math.sqrt(var)
            low, high = math.expm1(shift - half), math.expm1(shift + half)
    before, after = math.exp(float(left.mean())), math.exp(float(right.mean()))
    return ChangePoint(commit, p, t, before, after, low, high, pooled)


def detect(values: Sequence[float] | FloatArray, commits: Sequence[int] | None = None) -> list[ChangePoint]:
    """The change points of one series (``find`` on it alone); ``commits`` defaults to one run a
    commit."""
    numbers = list(range(len(values))) if commits is None else list(commits)
    [found], _ = find([Sample(list(values), numbers)])
    return found
