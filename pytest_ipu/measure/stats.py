"""Percentiles, how many samples a percentile needs, and Student's t tail (pure).

The t distribution is written here without scipy: ``t_sf`` and ``t_isf``, used by the
performance gates' tests on repeats and runs (``pytest_ipu.results.decide``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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


# --- Student's t distribution, for the gates' tests on repeats and runs ----------------------------


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
