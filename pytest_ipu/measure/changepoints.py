"""Change points of a series: E-Divisive means with a permutation test (pure numbers).

The method is Matteson and James' E-Divisive (D. S. Matteson, N. A. James, "A Nonparametric
Approach for Multiple Change Point Analysis of Multivariate Data", Journal of the American
Statistical Association 109(505), 2014; the R package ``ecp``), the method MongoDB's performance
CI and Hunter / Apache Otava run over benchmark histories. It is chosen over a fit of a
piecewise-constant function with a penalty (asv's step detection) because it assumes no noise
distribution (benchmark times are skewed, with outliers) and its significance test gives every
change point a p-value, which a CI verdict and a reader can weigh.

For a segment ``x[0:n]`` and a split ``tau`` (left ``x[:tau]``, right ``x[tau:]``, ``m`` and ``k``
points), the statistic is the energy distance of the two sides scaled by their sizes:

    Q(tau) = m k / (m + k) * (2/(m k) sum|x_i - y_j| - sum_{i<i'}|x_i - x_i'| / C(m, 2)
                                                   - sum_{j<j'}|y_j - y_j'| / C(k, 2))

(the moment index alpha = 1). The best split maximises it; it is significant when fewer than a
share ``alpha`` of random permutations of the points reach as high a maximum. Further change
points are found by bisection: the best split over all current segments, tested against
permutations within each segment, until one is not significant (Matteson and James, section 3).

Two things keep it fast (10,000 points well under a second):

- All splits at once: two sums per point of the pairwise distances (each point's distance to all,
  and to the points before it) give every split's three sums in a few vectorised numpy
  operations, and a batch of permutations is one array; the first test of every window of a long
  series is one batch too (``_first_splits``).
- Windows, as Otava analyses long series: a series longer than ``window`` points is cut into
  windows of ``window`` points that overlap by half; each is bisected on its own, and each
  change point is kept from the window whose centre it lies nearest (two found within
  ``min_size`` of each other from neighbouring windows are one: the stronger is kept). A change
  is then judged against the ``window / 2`` or so points on each side of it, which also keeps an
  old change from hiding a new one nearby. The permutation test stops early (Besag and Clifford's
  sequential test, as ``ecp`` uses Gandy's): once enough permutations reach the observed
  statistic that the p-value cannot fall to ``alpha``, the rest are not drawn; batches start
  small and double, so a window without a change is mostly settled after a few permutations.

Permutations are drawn from a generator seeded by ``seed`` and the window's position, so the
same series always gives the same change points and p-values.

Where a change point falls among noisy points is then refined (``_place``): E-Divisive's best
split takes a point of the old level that happens to lie near the new level (a run slowed by a
busy machine just before a slowdown) as the new level's first point, so the commit blamed is one
too early. Within ``RADIUS`` points of the split, the index is the one under which the points there
are most likely, each judged by a kernel density estimate (Gaussian, Silverman's bandwidth) of the
residuals of the points on either side that are clear of the split, relative to their side's
median (the series' own noise shape: for Gaussian noise this is the least-squares split; for
skewed, two-humped benchmark noise it tells a spike of the old level from the new level). Ties
keep E-Divisive's index; the p-value and statistic stay those of the tested split.

Each change point says where (the first index of the new level), its p-value, the mean of the
points between it and its neighbouring change points on each side (the levels before and after),
the relative change of those means and its 95 % interval (Welch's t interval of the difference of
the means, divided by the mean before).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pytest_ipu.measure import stats

FloatArray = npt.NDArray[np.float64]

#: The significance level of each split's permutation test.
ALPHA = 0.01
#: The most permutations drawn for one test (the p-value's resolution is 1 / (PERMUTATIONS + 1)).
PERMUTATIONS = 199
#: Permutations are drawn in batches, the first of this many, each next one twice the last; the
#: test stops after a batch once the p-value cannot reach ``alpha`` any more. Under no change the
#: test stops after a few permutations (half of the time after the first batch): small first
#: batches spare most of the work, doubling keeps the batches few where it goes on.
BATCH = 4
#: The fewest points on either side of a change point (each side needs two for its within-sum).
MIN_SIZE = 3
#: Points per window of a long series (Otava's default window is 50 points).
WINDOW = 64
#: Rows of permutations per ``q_profile`` call when many windows are tested together.
CHUNK = 256
#: How far (points) ``_place`` may move a change point from E-Divisive's split.
RADIUS = 3
#: The confidence of a change point's interval.
CONFIDENCE = 0.95


@dataclass(frozen=True)
class ChangePoint:
    """A change of level at ``index``: the first point of the new level, with its evidence."""

    #: The first index of the new level (the points before it are the old level).
    index: int
    #: The permutation test's p-value of the split (Besag and Clifford's estimate when it stopped early).
    p_value: float
    #: The split's E-Divisive statistic.
    q: float
    #: The mean of the points from the previous change point (or the start) to ``index``.
    before: float
    #: The mean of the points from ``index`` to the next change point (or the end).
    after: float
    #: The 95 % interval of the relative change ``after / before - 1`` (Welch's t interval of the
    #: difference of the means over ``before``); ``nan`` where a side has one point or the mean is 0.
    low: float
    high: float

    @property
    def change(self) -> float:
        """The relative change of the mean, ``after / before - 1`` (``nan`` when ``before`` is 0)."""
        return self.after / self.before - 1.0 if self.before != 0 else math.nan


def q_profile(batch: FloatArray, min_size: int = MIN_SIZE) -> FloatArray:
    """Every split's statistic for each row of ``batch`` (shape ``(b, n)``): an array ``(b, n + 1)``
    whose column ``tau`` is Q of the split before index ``tau``, ``-inf`` where a side would have
    fewer than ``min_size`` points."""
    b, n = batch.shape
    out = np.full((b, n + 1), -np.inf)
    if n < 2 * min_size:
        return out
    distances = batch[:, :, None] - batch[:, None, :]
    np.abs(distances, out=distances)
    # Two sums per point instead of 2-D prefix sums (a third of the passes over b x n x n):
    # row[i] = sum_j |x_i - x_j| and earlier[j] = sum_{i<j} |x_j - x_i|. Over the points before
    # tau, row sums count each left pair twice and each cross pair once; earlier sums count each
    # left pair once.
    row = distances.sum(axis=2)
    earlier = np.einsum("bij,ij->bi", distances, np.tri(n, k=-1))
    zero = np.zeros((b, 1))
    rows_before = np.concatenate([zero, row.cumsum(axis=1)], axis=1)
    pairs_before = np.concatenate([zero, earlier.cumsum(axis=1)], axis=1)
    tau = np.arange(min_size, n - min_size + 1)
    m = tau.astype(np.float64)
    k = n - m
    within_left = pairs_before[:, tau]
    cross = rows_before[:, tau] - 2.0 * within_left
    within_right = rows_before[:, n:] / 2.0 - rows_before[:, tau] + within_left
    energy = 2.0 * cross / (m * k) - within_left / (m * (m - 1) / 2.0) - within_right / (k * (k - 1) / 2.0)
    out[:, tau] = m * k / (m + k) * energy
    return out


def _best(values: FloatArray, bounds: Sequence[tuple[int, int]], min_size: int) -> tuple[int, float]:
    """The best split over the segments ``bounds`` of ``values``: its index and statistic (``-inf``
    when no segment can be split)."""
    best_index, best_q = -1, -math.inf
    for start, end in bounds:
        profile = q_profile(values[None, start:end], min_size)[0]
        at = int(np.argmax(profile))
        if profile[at] > best_q:
            best_index, best_q = start + at, float(profile[at])
    return best_index, best_q


def _p_value(
    values: FloatArray,
    bounds: Sequence[tuple[int, int]],
    observed: float,
    rng: np.random.Generator,
    alpha: float,
    permutations: int,
    min_size: int,
) -> float:
    """The permutation test of the best split: permute the points within each segment, take the best
    split over all segments, count how often it reaches ``observed``; stops early once the p-value
    cannot reach ``alpha`` (then Besag and Clifford's estimate, reached / drawn)."""
    reached = drawn = 0
    # The count of reaching permutations at which the full test's p-value must exceed alpha.
    give_up = max(1, math.floor(alpha * (permutations + 1)))
    batch = BATCH
    while drawn < permutations:
        size = min(batch, permutations - drawn)
        batch *= 2
        best = np.full(size, -np.inf)
        for start, end in bounds:
            if end - start < 2 * min_size:
                continue
            segment = np.broadcast_to(values[start:end], (size, end - start))
            shuffled = rng.permuted(segment, axis=1)
            best = np.maximum(best, q_profile(shuffled, min_size).max(axis=1))
        # A tiny tolerance: a permutation that is the series itself must count as reaching it.
        reached += int(np.count_nonzero(best >= observed * (1.0 - 1e-12)))
        drawn += size
        if reached >= give_up and drawn < permutations:
            return reached / drawn
    return (reached + 1) / (drawn + 1)


def _first_splits(
    windows: FloatArray,
    rngs: Sequence[np.random.Generator],
    alpha: float,
    permutations: int,
    min_size: int,
) -> list[tuple[int, float, float] | None]:
    """The first step of E-Divisive on every window (the rows of ``windows``) at once: each window's
    best split and its permutation test (``_p_value``'s, with the same early stop), as (index,
    p-value, statistic), ``None`` where it is not significant. One array holds the permutations of
    every window still undecided: a long series' hundreds of windows cost a few large numpy
    operations rather than many small ones."""
    count, width = windows.shape
    profile = q_profile(windows, min_size)
    at = profile.argmax(axis=1)
    observed = profile[np.arange(count), at]
    reached = np.zeros(count, dtype=np.int64)
    drawn = 0
    give_up = max(1, math.floor(alpha * (permutations + 1)))
    # A window that cannot be split, or whose best split does not separate anything, is settled.
    open_ = [w for w in range(count) if np.isfinite(observed[w]) and observed[w] > 0]
    stopped: dict[int, float] = {}
    batch = BATCH
    while open_ and drawn < permutations:
        size = min(batch, permutations - drawn)
        batch *= 2
        shuffled = np.concatenate(
            [rngs[w].permuted(np.broadcast_to(windows[w], (size, width)), axis=1) for w in open_]
        )
        # Chunks of about CHUNK rows keep the b x n x n arrays in the caches' reach.
        best = np.concatenate(
            [q_profile(shuffled[i : i + CHUNK], min_size).max(axis=1) for i in range(0, len(shuffled), CHUNK)]
        ).reshape(len(open_), size)
        targets = observed[open_] * (1.0 - 1e-12)
        reached[open_] += np.count_nonzero(best >= targets[:, None], axis=1)
        drawn += size
        still = []
        for w in open_:
            if reached[w] >= give_up and drawn < permutations:
                stopped[w] = float(reached[w] / drawn)
            else:
                still.append(w)
        open_ = still
    out: list[tuple[int, float, float] | None] = []
    for w in range(count):
        if not (np.isfinite(observed[w]) and observed[w] > 0):
            out.append(None)
            continue
        p = stopped.get(w, float((reached[w] + 1) / (drawn + 1)))
        out.append((int(at[w]), p, float(observed[w])) if p <= alpha else None)
    return out


def _bisect(
    values: FloatArray,
    rng: np.random.Generator,
    alpha: float,
    permutations: int,
    min_size: int,
    found: list[tuple[int, float, float]],
) -> list[tuple[int, float, float]]:
    """E-Divisive on one window, from the significant splits ``found`` so far: all of them as
    (index, p-value, statistic)."""
    while True:
        edges = [0, *sorted(i for i, _, _ in found), len(values)]
        bounds = list(zip(edges[:-1], edges[1:]))
        index, q = _best(values, bounds, min_size)
        if index < 0 or not q > 0:
            return found
        p = _p_value(values, bounds, q, rng, alpha, permutations, min_size)
        if p > alpha:
            return found
        found.append((index, p, q))


def _windows(n: int, window: int) -> list[int]:
    """The start of each window over ``n`` points: every ``window // 2``, the last ending at ``n``."""
    if n <= window:
        return [0]
    step = window // 2
    starts = list(range(0, n - window, step))
    return [*starts, n - window]


def detect(
    values: Sequence[float] | FloatArray,
    *,
    alpha: float = ALPHA,
    permutations: int = PERMUTATIONS,
    min_size: int = MIN_SIZE,
    window: int = WINDOW,
    seed: int = 0,
) -> list[ChangePoint]:
    """The change points of ``values`` in order of index (the module docstring's method)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")
    if min_size < 2:
        raise ValueError(f"min_size must be at least 2, got {min_size}")
    if window < 4 * min_size:
        raise ValueError(f"window must be at least 4 x min_size ({4 * min_size}), got {window}")
    series = np.asarray(values, dtype=np.float64)
    if series.ndim != 1 or not np.all(np.isfinite(series)):
        raise ValueError("values must be a 1-D series of finite numbers")
    n = len(series)
    starts = _windows(n, window)
    centres = [s + min(window, n) / 2.0 for s in starts]
    candidates: list[tuple[int, float, float]] = []
    rngs = [np.random.default_rng([seed, start]) for start in starts]
    windows = np.stack([series[start : start + window] for start in starts])
    for number, (start, first) in enumerate(
        zip(starts, _first_splits(windows, rngs, alpha, permutations, min_size))
    ):
        if first is None:
            continue
        for index, p, q in _bisect(windows[number], rngs[number], alpha, permutations, min_size, [first]):
            where = start + index
            # Kept by the window whose centre is nearest (ties to the earlier window).
            nearest = min(range(len(starts)), key=lambda w: (abs(where - centres[w]), w))
            if nearest == number:
                candidates.append((where, p, q))
    kept: list[tuple[int, float, float]] = []
    for candidate in sorted(candidates):
        if kept and candidate[0] - kept[-1][0] < min_size:
            # One change found from two windows: keep the stronger finding.
            if (candidate[1], -candidate[2]) < (kept[-1][1], -kept[-1][2]):
                kept[-1] = candidate
            continue
        kept.append(candidate)
    if len(starts) > 1:
        kept = _confirm(series, kept, np.random.default_rng([seed, n]), alpha, permutations, min_size, window)
    placed: list[tuple[int, float, float]] = []
    for j, (index, p, q) in enumerate(kept):
        start = placed[-1][0] if placed else 0
        end = kept[j + 1][0] if j + 1 < len(kept) else n
        placed.append((_place(series, start, index, end, min_size), p, q))
    kept = placed
    edges = [0, *(i for i, _, _ in kept), n]
    return [_describe(series, edges[j], index, edges[j + 2], p, q) for j, (index, p, q) in enumerate(kept)]


def _confirm(
    series: FloatArray,
    kept: list[tuple[int, float, float]],
    rng: np.random.Generator,
    alpha: float,
    permutations: int,
    min_size: int,
    window: int,
) -> list[tuple[int, float, float]]:
    """The windows' change points tested again, each on the points between its neighbours (at most
    ``window`` on each side): its split's statistic there against the best split of permutations of
    those points. The weakest that fails is dropped and the rest tested again, until all pass (as
    Otava merges its windows' change points). Each kept one gets the p-value of this test.

    A window tests many splits of few points, and a long series has many windows: this second test,
    on more points, is what keeps noise from adding up to false change points along a long series.
    """
    while kept:
        edges = [0, *(i for i, _, _ in kept), len(series)]
        tested = []
        for j, (index, _, _) in enumerate(kept):
            start, end = max(edges[j], index - window), min(edges[j + 2], index + window)
            segment = series[start:end]
            q = float(q_profile(segment[None, :], min_size)[0, index - start])
            p = _p_value(segment, [(0, len(segment))], q, rng, alpha, permutations, min_size)
            tested.append((index, p, q))
        weakest = max(range(len(tested)), key=lambda j: (tested[j][1], -tested[j][2]))
        if tested[weakest][1] <= alpha:
            return tested
        kept = [c for j, c in enumerate(kept) if j != weakest]
    return kept


def _log_density(at: FloatArray, sample: FloatArray, bandwidth: float) -> FloatArray:
    """The log of a Gaussian kernel density estimate of ``sample`` at each of ``at``."""
    z = -0.5 * ((at[:, None] - sample[None, :]) / bandwidth) ** 2
    top = z.max(axis=1)
    # log-sum-exp: a point far from every residual still gets a finite, comparable log density.
    total: FloatArray = top + np.log(np.exp(z - top[:, None]).sum(axis=1))
    return total - math.log(len(sample) * bandwidth * math.sqrt(2.0 * math.pi))


def _place(series: FloatArray, start: int, index: int, end: int, min_size: int) -> int:
    """The most likely first index of the new level within ``RADIUS`` of ``index`` (the module
    docstring), the change's neighbours at ``start`` and ``end``; ``index`` when the points clear of
    the split have no spread to estimate a density from."""
    low, high = max(start + min_size, index - RADIUS), min(end - min_size, index + RADIUS)
    if high <= low:
        return index
    left, right = series[start:low], series[high:end]
    level_left, level_right = float(np.median(left)), float(np.median(right))
    # Benchmark noise scales with the level: residuals relative to it where the levels allow.
    relative = level_left > 0 and level_right > 0

    def residual(values: FloatArray, level: float) -> FloatArray:
        out: FloatArray = values / level - 1.0 if relative else values - level
        return out

    sample = np.concatenate([residual(left, level_left), residual(right, level_right)])
    q25, q75 = np.percentile(sample, [25, 75])
    spread = min(float(sample.std(ddof=1)), float(q75 - q25) / 1.34)
    bandwidth = 0.9 * spread * len(sample) ** -0.2
    if not bandwidth > 0:
        return index
    between = series[low:high]
    as_left = _log_density(residual(between, level_left), sample, bandwidth)
    as_right = _log_density(residual(between, level_right), sample, bandwidth)
    # Split at low + s: the first s points between are the old level, the rest the new one.
    score = np.concatenate([[0.0], np.cumsum(as_left)]) + np.concatenate(
        [np.cumsum(as_right[::-1])[::-1], [0.0]]
    )
    splits = np.arange(low, high + 1)
    best = splits[score >= score.max() - 1e-9]
    return int(best[np.argmin(np.abs(best - index))])


def _describe(series: FloatArray, start: int, index: int, end: int, p: float, q: float) -> ChangePoint:
    """A change point with the levels of ``series[start:index]`` and ``series[index:end]``."""
    left, right = series[start:index], series[index:end]
    before, after = float(left.mean()), float(right.mean())
    low = high = math.nan
    if len(left) > 1 and len(right) > 1 and before != 0:
        low, high = _interval(left, right, before)
    return ChangePoint(index, p, q, before, after, low, high)


def _interval(left: FloatArray, right: FloatArray, before: float) -> tuple[float, float]:
    """Welch's ``CONFIDENCE`` interval of ``mean(right) - mean(left)``, over ``before``, as a
    relative change (the mean before taken as known: its own error is in the difference's)."""
    var_left = float(left.var(ddof=1)) / len(left)
    var_right = float(right.var(ddof=1)) / len(right)
    shift = float(right.mean() - left.mean())
    spread = var_left + var_right
    if spread == 0:
        return shift / before, shift / before
    # Welch-Satterthwaite degrees of freedom.
    df = spread**2 / (var_left**2 / (len(left) - 1) + var_right**2 / (len(right) - 1))
    half = stats.t_isf((1.0 - CONFIDENCE) / 2.0, df) * math.sqrt(spread)
    low, high = (shift - half) / before, (shift + half) / before
    return (low, high) if before > 0 else (high, low)
