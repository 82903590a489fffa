"""Percentiles, how many samples a percentile needs, and Student's t tail.

The t distribution (``t_sf`` and ``t_isf``, for the performance gates' tests on repeats and runs,
``pytest_ipu.results.decide``) is SciPy's, imported on first use.
"""

from __future__ import annotations

import functools
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
# From SciPy's special functions (``scipy.special``: the t distribution's own, without the import cost of
# ``scipy.stats``), imported on first use: a run without gates never loads SciPy.


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t distribution with ``df`` degrees of freedom (``df`` > 0): SciPy's
    ``stdtr`` (accurate to about 1e-14 relative, in every SciPy this package supports)."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    from scipy import special

    return float(special.stdtr(df, -t))


# Memoised: a comparison of many runs asks for the same few quantiles (its level, at each count of runs
# or repeats) thousands of times.
@functools.lru_cache(maxsize=4096)
def t_isf(p: float, df: float) -> float:
    """The ``t`` with P(T > t) = ``p`` (0 < p < 1), for ``df`` > 0 degrees of freedom: SciPy's
    ``stdtrit``, with one Newton step on ``t_sf``.

    The step is there for older SciPy (the 3.8 floors' among them), whose ``stdtrit`` ends its search
    at about 3e-9 relative error; one step on a tail accurate to 1e-14 squares that error away. Checked
    against 40-digit arithmetic (mpmath) for df from 0.5 to 1e7 and p down to 1e-8: within 3e-15
    relative on SciPy 1.6 and 1.17 alike. It is one step, not a search: the quantile is SciPy's.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be within (0, 1), got {p}")
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    from scipy import special

    # Sign by the side of the median p is on: far out (p = 1e-300) SciPy's search can end at an
    # infinity of either sign.
    t = math.copysign(abs(float(special.stdtrit(df, p))), 0.5 - p)
    density = _t_density(t, df)
    if math.isfinite(t) and density > 0.0:
        t += (t_sf(t, df) - p) / density
    return t


def _t_density(t: float, df: float) -> float:
    """The density of Student's t distribution at ``t`` (its closed form, on the log scale)."""
    if math.isinf(t):
        return 0.0
    log_norm = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1.0) / 2.0 * math.log1p(t * t / df))
