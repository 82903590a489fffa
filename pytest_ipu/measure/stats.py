"""Percentiles, how many samples a percentile needs, and whether two samples differ (pure).

The significance tests are written here with numpy alone (no scipy): ``mann_whitney_u`` and
``bootstrap_ratio_ci``, used by the performance gates (``pytest_ipu.results.gates``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any
from typing import Literal

import numpy as np
import numpy.typing as npt

#: A 1-D array of float64 samples.
FloatArray = npt.NDArray[np.float64]

#: The latency percentiles every record carries.
PERCENTILES: tuple[int, ...] = (50, 90, 99)


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks.

    This is numpy's default ('linear', Hyndman and Fan type 7), so results match what users get
    from ``numpy.percentile`` on the raw ``stats.data`` of the JSON.
    """
    if not samples:
        raise ValueError("percentile of an empty sample")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within [0, 100], got {q}")
    return float(np.percentile(np.asarray(samples, dtype=np.float64), q))


def min_samples_for(q: float) -> int:
    """Fewest samples for which the ``q``-th percentile is more than the maximum.

    With ``n`` samples only ``n * (1 - q/100)`` of them lie above the ``q``-th percentile; below one
    such sample the 'percentile' is just the largest value seen (p99 of 50 rounds is the max).
    The median needs two samples to differ from the one value there is.
    """
    if not 0 < q < 100:
        raise ValueError(f"percentile must be within (0, 100), got {q}")
    # round() first: 100 / (100 - 99) is 100.00000000000001 in floating point.
    return max(2, math.ceil(round(100.0 / (100.0 - q), 9)))


def is_supported(q: float, n: int) -> bool:
    """Whether ``n`` samples can support the ``q``-th percentile (see ``min_samples_for``)."""
    return n >= min_samples_for(q)


# --- Significance of a change between two samples -------------------------------------------------

#: The alternatives ``mann_whitney_u`` can test, named for the first sample against the second.
Alternative = Literal["less", "greater", "two-sided"]

#: numpy reductions ``bootstrap_ratio_ci`` applies to all resamples at once (along an axis) instead
#: of calling them once per resample.
_VECTORISED: dict[Callable[..., Any], Callable[[FloatArray], FloatArray]] = {
    np.mean: lambda x: np.mean(x, axis=1),
    np.median: lambda x: np.median(x, axis=1),
    np.min: lambda x: np.min(x, axis=1),
    np.max: lambda x: np.max(x, axis=1),
}

#: Most resampled values held in memory at once: 2000 resamples of 100,000 rounds would be 1.6 GB.
_BOOTSTRAP_CHUNK_VALUES = 4_000_000


def _sample(values: Sequence[float] | FloatArray, name: str) -> FloatArray:
    """A 1-D float array of ``values``; raises ``ValueError`` when it is empty or not finite."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a flat sequence of numbers, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} has values that are not finite (nan or inf)")
    return array


def _normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z; erfc keeps precision far into the upper tail."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_u(
    a: Sequence[float] | FloatArray,
    b: Sequence[float] | FloatArray,
    alternative: Alternative = "two-sided",
) -> tuple[float, float]:
    """Mann-Whitney U test of ``a`` against ``b``: ``(u, p)``, with ``u`` the statistic of ``a``.

    ``u`` counts the pairs ``(x in a, y in b)`` with ``x > y``, a tie counting one half; it is
    ``len(a) * len(b) / 2`` when neither sample tends to be larger. ``alternative`` names the
    hypothesis about ``a``: ``"greater"`` (values of ``a`` tend to be larger than those of ``b``),
    ``"less"``, or ``"two-sided"``.

    The p-value uses the normal approximation of ``u`` with the tie correction of its variance and a
    continuity correction of one half. With 10 or more values per sample and no ties it is within
    about 0.01 of the exact permutation p-value, and in the far tail (below 0.01) it tends to be the
    larger of the two, so a decision at a small alpha errs towards "no difference". Samples with
    only a few distinct values have a lumpy exact distribution, which the approximation follows
    less closely (a few hundredths). When every value is the same there is no evidence either way
    and ``p`` is 1. Raises
    ``ValueError`` for an empty sample, a value that is not finite, or an unknown alternative.
    """
    x = _sample(a, "first sample")
    y = _sample(b, "second sample")
    if alternative not in ("less", "greater", "two-sided"):
        raise ValueError(f"alternative must be 'less', 'greater' or 'two-sided', got {alternative!r}")
    n1, n2 = x.size, y.size
    n = n1 + n2
    # Midranks: each run of tied values shares the mean of the ranks it spans.
    _, inverse, counts = np.unique(np.concatenate([x, y]), return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    midranks = ends - (counts - 1) / 2.0
    rank_sum = float(np.sum(midranks[inverse[:n1]]))
    u = rank_sum - n1 * (n1 + 1) / 2.0
    mean = n1 * n2 / 2.0
    # Ties shrink the spread of u: sum(t^3 - t) over runs of t tied values.
    tie_term = float(np.sum(counts.astype(np.float64) ** 3 - counts))
    variance = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if variance <= 0.0:
        # Every value equal (or one value in all): each arrangement gives the same u.
        return u, 1.0
    sd = math.sqrt(variance)
    if alternative == "greater":
        p = _normal_sf((u - mean - 0.5) / sd)
    elif alternative == "less":
        p = _normal_sf((mean - u - 0.5) / sd)
    else:
        p = min(1.0, 2.0 * _normal_sf((abs(u - mean) - 0.5) / sd))
    return u, p


def _row_reducer(statistic: Callable[[FloatArray], float] | float) -> Callable[[FloatArray], FloatArray]:
    """A function from a 2-D array of resamples (one per row) to the statistic of each row."""
    if callable(statistic):
        func = statistic
        vectorised = _VECTORISED.get(func)
        if vectorised is not None:
            return vectorised

        def each_row(rows: FloatArray) -> FloatArray:
            return np.array([func(row) for row in rows], dtype=np.float64)

        return each_row
    q = float(statistic)
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within [0, 100], got {statistic}")

    def percentile_of_rows(rows: FloatArray) -> FloatArray:
        # Sorting the rows and interpolating is several times faster than numpy.percentile's
        # partition along an axis for the short rows of a bootstrap; same type-7 interpolation.
        ordered = np.sort(rows, axis=1)
        h = (ordered.shape[1] - 1) * q / 100.0
        lo = math.floor(h)
        hi = min(lo + 1, ordered.shape[1] - 1)
        below, above = ordered[:, lo], ordered[:, hi]
        result: FloatArray = below + (h - lo) * (above - below)
        return result

    return percentile_of_rows


def bootstrap_ratio_ci(
    a: Sequence[float] | FloatArray,
    b: Sequence[float] | FloatArray,
    statistic: Callable[[FloatArray], float] | float,
    confidence: float = 0.99,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of ``statistic(a) / statistic(b)``: ``(low, high)``.

    ``statistic`` is a percentile ``q`` (0-100, as ``percentile``) or a function of one sample;
    percentiles and numpy's ``mean``, ``median``, ``min`` and ``max`` are computed for all resamples
    at once, any other function once per resample. Each of the ``resamples`` draws resamples both
    samples with replacement, from ``numpy.random.default_rng(seed)``, so the interval is the same
    on every run. A ratio whose denominator is 0 is infinite (or nan for 0/0). Raises
    ``ValueError`` for an empty sample, a value that is not finite, a confidence outside (0, 1),
    fewer than one resample or a percentile outside [0, 100].
    """
    x = _sample(a, "first sample")
    y = _sample(b, "second sample")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")
    reduce = _row_reducer(statistic)
    rng = np.random.default_rng(seed)
    # Chunks of resamples bound the memory; their size depends on the inputs only, so a given pair
    # of samples always consumes the generator the same way and gets the same interval.
    chunk = max(1, _BOOTSTRAP_CHUNK_VALUES // max(x.size, y.size))
    ratios = np.empty(resamples, dtype=np.float64)
    for start in range(0, resamples, chunk):
        rows = min(chunk, resamples - start)
        top = reduce(x[rng.integers(0, x.size, size=(rows, x.size))])
        bottom = reduce(y[rng.integers(0, y.size, size=(rows, y.size))])
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios[start : start + rows] = top / bottom
    tail = (1.0 - confidence) / 2.0 * 100.0
    ordered = np.sort(ratios)
    return _sorted_percentile(ordered, tail), _sorted_percentile(ordered, 100.0 - tail)


def _sorted_percentile(ordered: FloatArray, q: float) -> float:
    """Type-7 percentile of sorted values that may be infinite (numpy's would make inf - inf = nan)."""
    h = (ordered.size - 1) * q / 100.0
    lo = math.floor(h)
    below, above = float(ordered[lo]), float(ordered[min(lo + 1, ordered.size - 1)])
    if below == above or h == lo:
        return below
    if math.isinf(below) or math.isinf(above):
        # No interpolation towards an infinity: the nearer neighbour stands for the percentile.
        return below if h - lo < 0.5 else above
    return below + (h - lo) * (above - below)


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (modified
    Lentz), evaluated where it converges fast and mirrored (I_x(a, b) = 1 - I_{1-x}(b, a)) elsewhere."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 500):
        # The even and the odd step of the continued fraction.
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * fraction / a


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t distribution with ``df`` degrees of freedom (``df`` > 0)."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_isf(p: float, df: float) -> float:
    """The ``t`` with P(T > t) = ``p`` (0 < p < 1), by bisection on ``t_sf``."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be within (0, 1), got {p}")
    low, high = -1e6, 1e6
    for _ in range(200):
        middle = (low + high) / 2.0
        if t_sf(middle, df) > p:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0
