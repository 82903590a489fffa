"""Percentiles and how many samples a percentile needs before it means anything (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

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
