"""The previous implementation of ``pytest_ipu.measure.changepoints``, kept unchanged so that
``benchmarks/test_history.py`` times it beside the current one on the same series: the statistic
from 2-D prefix sums of the pairwise distances, permutations in fixed batches of 20, and no
placement of a change after its split. Not used by pytest-ipu.

Change points of a series: E-Divisive means with a permutation test (pure numbers).

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

- All splits at once: the pairwise distances' 2-D prefix sums give every split's three sums in
  a few vectorised numpy operations, and a batch of permutations is one array.
- Windows, as Otava analyses long series: a series longer than ``window`` points is cut into
  windows of ``window`` points that overlap by half; each is bisected on its own, and each
  change point is kept from the window whose centre it lies nearest (two found within
  ``min_size`` of each other from neighbouring windows are one: the stronger is kept). A change
  is then judged against the ``window / 2`` or so points on each side of it, which also keeps an
  old change from hiding a new one nearby. The permutation test stops early (Besag and Clifford's
  sequential test, as ``ecp`` uses Gandy's): once enough permutations reach the observed
  statistic that the p-value cannot fall to ``alpha``, the rest are not drawn.

Permutations are drawn from a generator seeded by ``seed`` and the window's position, so the
same series always gives the same change points and p-values.

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
#: Permutations are drawn in batches of this many; the test stops after a batch once the p-value
#: cannot reach ``alpha`` any more.
BATCH = 20
#: The fewest points on either side of a change point (each side needs two for its within-sum).
MIN_SIZE = 3
#: Points per window of a long series (Otava's default window is 50 points).
WINDOW = 64
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
    distances = np.abs(batch[:, :, None] - batch[:, None, :])
    # prefix[:, a, c] = sum of distances[:, i, j] over i < a, j < c.
    prefix = np.zeros((b, n + 1, n + 1))
    prefix[:, 1:, 1:] = distances.cumsum(axis=1).cumsum(axis=2)
    tau = np.arange(min_size, n - min_size + 1)
    m = tau.astype(np.float64)
    k = n - m
    square = prefix[:, tau, tau]  # both indices below tau: the left side's ordered pairs
    band = prefix[:, tau, n]  # rows below tau, every column
    total = prefix[:, n, n][:, None]
    within_left = square / 2.0
    cross = band - square
    within_right = (total - 2.0 * band + square) / 2.0
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
    while drawn < permutations:
        size = min(BATCH, permutations - drawn)
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


def _bisect(
    values: FloatArray, rng: np.random.Generator, alpha: float, permutations: int, min_size: int
) -> list[tuple[int, float, float]]:
    """E-Divisive on one window: the significant splits as (index, p-value, statistic)."""
    found: list[tuple[int, float, float]] = []
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
    for number, start in enumerate(starts):
        rng = np.random.default_rng([seed, start])
        for index, p, q in _bisect(series[start : start + window], rng, alpha, permutations, min_size):
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
