"""Student's t tail (measure.stats), against the standard tables."""

from __future__ import annotations

import math

import pytest

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
