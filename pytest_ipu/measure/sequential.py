"""The nominal level of each look of a group-sequential test: Pocock's boundary for given looks.

Pocock's boundary is the one constant ``c`` for every look's standardised statistic at which the
chance of a wrong rejection at any look, for normal observations, is exactly ``alpha``; ``1 - Phi(c)``
is each look's level. That chance is integrated numerically (Jennison and Turnbull 2000, chapter 19):
the partial sums ``S_k`` of a standard normal walk (variance ``n_k``) that has not crossed
``c sqrt(n_k)`` by look ``k`` have a sub-density on a grid, carried to the next look by a normal
convolution, and what it sends past the boundary is the chance of crossing there. ``c`` is found by
Brent's method on that chance (SciPy). ``tests/unit/test_ab.py`` simulates the error rates of the
``t`` approximation the gates read this level through.

Documented in docs/ci.md (section "Sequential sampling").
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence

import numpy as np

#: Grid points of each look's sub-density, and how far below zero it reaches (standard deviations of
#: the walk at that look): the mass below is under 1e-15.
GRID = 600
FLOOR_SD = 8.0


#: The standard normal distribution: its scalar quantiles (the standard library's, as
#: ``changepoints`` uses).
_NORMAL = statistics.NormalDist()


def _grid(top: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The points of a look's sub-density (from ``FLOOR_SD`` walk deviations below zero up to the
    boundary ``top``) and their trapezoid-rule weights."""
    points = np.linspace(-FLOOR_SD * math.sqrt(n), top, GRID)
    weights = np.full(GRID, points[1] - points[0])
    weights[[0, -1]] *= 0.5
    return points, weights


def _crossing(c: float, looks: Sequence[int]) -> float:
    """The chance that a standard normal walk crosses ``c sqrt(n)`` at some look ``n`` of ``looks``."""
    from scipy import special

    first = looks[0]
    total = 1.0 - _NORMAL.cdf(c)
    points, weights = _grid(c * math.sqrt(first), first)
    density = np.exp(-0.5 * points * points / first) / math.sqrt(2.0 * math.pi * first)
    for before, n in zip(looks, looks[1:]):
        step = math.sqrt(n - before)
        edge = c * math.sqrt(n)
        # What the walks still inside send past this look's boundary (ndtr(-x): the normal's tail).
        total += float(np.sum(weights * density * special.ndtr((points - edge) / step)))
        after, after_weights = _grid(edge, n)
        moved = (after[:, None] - points[None, :]) / step
        density = (np.exp(-0.5 * moved * moved) / (step * math.sqrt(2.0 * math.pi))) @ (weights * density)
        points, weights = after, after_weights
    return total


@functools.lru_cache(maxsize=64)
def pocock_constant(alpha: float, looks: tuple[int, ...]) -> float:
    """Pocock's ``c`` for one-sided level ``alpha`` over ``looks`` (strictly increasing counts)."""
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be within (0, 0.5), got {alpha}")
    if not looks or any(n <= 0 for n in looks) or any(b >= a for b, a in zip(looks, looks[1:])):
        raise ValueError(f"looks must be increasing positive counts, got {looks}")
    from scipy import optimize

    if len(looks) == 1:
        return _NORMAL.inv_cdf(1.0 - alpha)
    # Between the fixed-sample constant (one look) and Bonferroni's (looks that share nothing).
    low, high = _NORMAL.inv_cdf(1.0 - alpha), _NORMAL.inv_cdf(1.0 - alpha / len(looks))
    return float(optimize.brentq(lambda c: _crossing(c, looks) - alpha, low, high + 1e-9, xtol=1e-7))


def pocock_level(alpha: float, looks: Sequence[int]) -> float:
    """Each look's nominal one-sided level under Pocock's boundary: ``alpha`` for one look, else
    between ``alpha / len(looks)`` and ``alpha``."""
    if len(looks) == 1:
        return alpha
    return 1.0 - _NORMAL.cdf(pocock_constant(alpha, tuple(looks)))
