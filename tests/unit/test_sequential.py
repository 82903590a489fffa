"""Pocock's nominal level for the looks of a group-sequential test (``measure/sequential.py``),
checked against the published constants and the chance of crossing it stands for."""

from __future__ import annotations

import pytest

from pytest_ipu.measure import sequential


@pytest.mark.parametrize(
    ("looks", "published"),
    # Pocock (1977); Jennison and Turnbull (2000), table 2.1: K equally spaced looks, two-sided
    # alpha 0.05, that is one-sided 0.025 on either side.
    [(2, 2.178), (3, 2.289), (4, 2.361), (5, 2.413), (6, 2.453)],
)
def test_the_constant_is_pococks_published_one(looks: int, published: float) -> None:
    constant = sequential.pocock_constant(0.025, tuple(range(1, looks + 1)))
    assert constant == pytest.approx(published, abs=1.5e-3)


def test_the_level_lies_between_bonferronis_and_alpha_and_one_look_is_alpha() -> None:
    looks = (5, 8, 12, 18, 27, 40)
    level = sequential.pocock_level(0.05, looks)
    assert 0.05 / len(looks) < level < 0.05
    assert sequential.pocock_level(0.05, (5,)) == 0.05
    # More looks, each at a lower level.
    assert sequential.pocock_level(0.05, looks) < sequential.pocock_level(0.05, looks[:-1])


def test_looks_cut_short_by_time_cross_less_often_than_alpha() -> None:
    plan = (5, 8, 12, 18, 27, 40)
    c = sequential.pocock_constant(0.05, plan)
    assert sequential._crossing(c, plan) == pytest.approx(0.05, abs=1e-6)
    # Stopped at 29 pairs instead of 40, or before the fourth look: still within alpha.
    assert sequential._crossing(c, (5, 8, 12, 18, 27, 29)) < 0.05
    assert sequential._crossing(c, (5, 8, 12)) < 0.05


@pytest.mark.parametrize(
    ("alpha", "looks", "message"),
    [
        (0.5, (1, 2), r"alpha must be within \(0, 0\.5\), got 0\.5"),
        (0.05, (3, 3), r"looks must be increasing positive counts, got \(3, 3\)"),
        (0.05, (0, 2), r"looks must be increasing positive counts, got \(0, 2\)"),
    ],
)
def test_bad_plans_raise(alpha: float, looks: tuple[int, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sequential.pocock_constant(alpha, looks)
