"""Student's t tail (measure.stats), against the standard tables, the pure-Python implementation it
replaced, and its own inverse."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.measure import stats


@pytest.mark.parametrize(
    ("t", "df", "p"),
    [
        # One-sided critical values of Student's t (standard tables).
        (6.965, 2, 0.01),
        (3.747, 4, 0.01),
        (2.132, 4, 0.05),
        (3.365, 5, 0.01),
        (2.764, 10, 0.01),
        (1.812, 10, 0.05),
        (31.821, 1, 0.01),
        (2.326, 1e7, 0.01),  # the normal limit
        (0.0, 3, 0.5),
        (-2.132, 4, 0.95),
    ],
)
def test_t_tail_matches_the_tables(t: float, df: float, p: float) -> None:
    assert stats.t_sf(t, df) == pytest.approx(p, abs=2e-4)
    if 0 < p < 1:
        assert stats.t_isf(p, df) == pytest.approx(t, abs=2e-3)


def test_t_tail_edges_and_bad_input() -> None:
    assert stats.t_sf(math.inf, 3) == 0.0
    assert stats.t_sf(-math.inf, 3) == 1.0
    with pytest.raises(ValueError, match="degrees of freedom must be > 0, got 0"):
        stats.t_sf(1.0, 0)
    with pytest.raises(ValueError, match=r"p must be within \(0, 1\), got 1.0"):
        stats.t_isf(1.0, 3)


# --- Against the pure-Python t distribution this module used before SciPy's ---------------------------


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function by its continued fraction (modified Lentz), mirrored
    where that converges slowly: the reference the SciPy-based functions must agree with."""
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


def _reference_sf(t: float, df: float) -> float:
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def _reference_isf(p: float, df: float) -> float:
    """By bisection on ``_reference_sf`` (200 halvings of [-1e6, 1e6])."""
    low, high = -1e6, 1e6
    for _ in range(200):
        middle = (low + high) / 2.0
        if _reference_sf(middle, df) > p:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


#: Degrees of freedom the gates meet (2 repeats to a thousand baseline runs; Welch's are fractional).
DFS = (1, 2, 3, 4, 5, 7, 9, 2.7, 12.5, 19, 30, 58, 99, 250, 999, 4000)
#: Tail probabilities the gates ask for (alpha, alpha / 2 at the levels in use) and p-values.
PS = (1e-6, 1e-4, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3)


@pytest.mark.parametrize("df", DFS)
def test_quantiles_agree_with_the_pure_python_reference(df: float) -> None:
    """Within 1e-9 relative, where the reference is right: its bisection stops at +-1e6 and its
    continued fraction loses digits near p = 0.5 with thousands of degrees of freedom, so the
    tails far out (p = 1e-6 with one degree of freedom, t > 1e5) are left out."""
    for p in PS:
        want = _reference_isf(p, df)
        if abs(want) > 1e5:
            continue
        assert stats.t_isf(p, df) == pytest.approx(want, rel=1e-9), p
        assert stats.t_isf(1.0 - p, df) == pytest.approx(-want, rel=1e-9), p


@pytest.mark.parametrize("df", DFS)
def test_tails_agree_with_the_pure_python_reference(df: float) -> None:
    for t in (0.01, 0.1, 0.5, 1.0, 1.645, 2.0, 3.0, 5.0, 10.0, 40.0, 300.0):
        for signed in (t, -t):
            assert stats.t_sf(signed, df) == pytest.approx(_reference_sf(signed, df), rel=1e-9), signed


@settings(max_examples=200, deadline=None)
@given(
    st.floats(min_value=1e-9, max_value=1 - 1e-9),
    st.floats(min_value=0.5, max_value=1e6),
)
def test_the_quantile_is_the_inverse_of_the_tail(p: float, df: float) -> None:
    t = stats.t_isf(p, df)
    assert stats.t_sf(t, df) == pytest.approx(p, rel=1e-9)
    assert stats.t_isf(1.0 - p, df) == pytest.approx(-t, rel=1e-6, abs=1e-9)  # 1 - p rounds


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=1e-6, max_value=0.4), st.floats(min_value=1.0, max_value=1e4))
def test_more_degrees_of_freedom_narrow_the_quantile(p: float, df: float) -> None:
    """What the advice's bisection over counts rests on (``decide._Evidence.needed``)."""
    assert stats.t_isf(p, df + 1.0) < stats.t_isf(p, df)


def test_the_distribution_loads_with_the_first_quantile_not_with_the_module() -> None:
    """SciPy is imported by the first quantile, never by importing ``stats`` (the start-up of a run
    without gates): checked in a fresh interpreter."""
    code = (
        "import sys\n"
        "from pytest_ipu.measure import stats\n"
        "assert 'scipy' not in sys.modules\n"
        "stats.t_isf(0.05, 4)\n"
        "assert 'scipy.special' in sys.modules\n"
        "assert 'scipy.stats' not in sys.modules\n"
    )
    import pytest_ipu

    # The package under test, wherever this process imported it from (a checkout or the install).
    env = {**os.environ, "PYTHONPATH": str(Path(pytest_ipu.__file__).parent.parent)}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env)
