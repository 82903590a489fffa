"""E-Divisive means (``measure.changepoints``): the statistic against its definition, steps found
at the right index (short series, long windowed ones, two steps), none on pure noise at the
stated rate, determinism, the levels and interval of a change, and bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pytest_ipu.measure import changepoints


def _naive_q(x: np.ndarray, tau: int) -> float:
    """Matteson and James' statistic written out from its definition."""
    left, right = x[:tau], x[tau:]
    m, k = len(left), len(right)
    cross = sum(abs(a - b) for a in left for b in right)
    within_left = sum(abs(a - b) for a, b in itertools.combinations(left, 2))
    within_right = sum(abs(a - b) for a, b in itertools.combinations(right, 2))
    energy = 2 * cross / (m * k) - within_left / (m * (m - 1) / 2) - within_right / (k * (k - 1) / 2)
    return m * k / (m + k) * energy


def test_q_profile_is_the_statistic_of_every_split() -> None:
    x = np.random.default_rng(3).normal(size=17)
    profile = changepoints.q_profile(x[None, :], min_size=3)[0]
    for tau in range(len(x) + 1):
        if 3 <= tau <= len(x) - 3:
            assert profile[tau] == pytest.approx(_naive_q(x, tau), rel=1e-9)
        else:
            assert profile[tau] == -np.inf


def _noise(n: int, seed: int, sd: float = 0.02) -> np.ndarray:
    return np.random.default_rng(seed).normal(1.0, sd, n)


@pytest.mark.parametrize(("n", "at"), [(20, 10), (30, 4), (30, 26), (60, 31)])
def test_a_step_is_found_at_its_index(n: int, at: int) -> None:
    x = _noise(n, seed=n + at)
    x[at:] *= 1.10
    [found] = changepoints.detect(x)
    assert found.index == at
    assert found.p_value <= changepoints.ALPHA
    assert found.change == pytest.approx(0.10, abs=0.03)
    assert found.low < 0.10 < found.high


def test_two_steps_each_found() -> None:
    x = _noise(90, seed=5)
    x[30:] *= 1.10
    x[60:] *= 0.85
    assert [c.index for c in changepoints.detect(x)] == [30, 60]


@pytest.mark.parametrize("at", [100, 127, 128, 160, 1900])
def test_long_series_are_searched_in_windows_and_find_each_step_once(at: int) -> None:
    x = _noise(2000, seed=at)
    x[at:] *= 1.10
    found = changepoints.detect(x)
    assert [c.index for c in found] == [at]
    # The levels are those of the whole segments on each side.
    assert found[0].before == pytest.approx(float(x[:at].mean()))
    assert found[0].after == pytest.approx(float(x[at:].mean()))


def test_pure_noise_gives_change_points_at_about_the_stated_rate() -> None:
    """200 seeded noise series of 60 points, one window each: a false change point in each with
    probability about ALPHA (0.01); more than 8 of 200 would be a rate above 4 %."""
    found = sum(len(changepoints.detect(_noise(60, seed=1000 + s))) for s in range(200))
    assert found <= 8


def test_the_same_series_gives_the_same_answer() -> None:
    x = _noise(300, seed=9)
    x[150:] *= 1.10
    first = changepoints.detect(x, seed=4)
    assert first == changepoints.detect(x, seed=4)
    assert [c.index for c in first] == [150]


def test_a_series_too_short_to_split_has_none() -> None:
    assert changepoints.detect([1.0, 1.0, 1.0, 2.0, 2.0]) == []
    assert changepoints.detect([]) == []


def test_a_regression_of_a_higher_is_better_metric_is_a_negative_change() -> None:
    x = _noise(24, seed=2)
    x[12:] *= 0.5
    [found] = changepoints.detect(x)
    assert found.change == pytest.approx(-0.5, abs=0.05)
    assert found.high < 0


@pytest.mark.parametrize(
    ("values", "kwargs", "message"),
    [
        ([1.0, float("nan")], {}, "finite"),
        ([[1.0, 2.0]], {}, "1-D"),
        ([1.0], {"alpha": 0.0}, "alpha"),
        ([1.0], {"min_size": 1}, "min_size"),
        ([1.0], {"window": 8}, "window"),
    ],
)
def test_bad_input_is_refused(values: list, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        changepoints.detect(values, **kwargs)


@pytest.mark.parametrize("at", [12, 25, 40])
def test_a_spike_of_the_old_level_just_before_a_step_is_not_taken_as_its_start(at: int) -> None:
    # Benchmark noise with two humps: most runs near the level, one in eight slowed by about 10 %
    # (a busy machine). A slowed run just before a 10 % slowdown looks like the new level's first
    # point; the commit that caused the slowdown is still ``at``.
    rng = np.random.default_rng(at)
    noise = rng.normal(0.0, 0.002, 60) + np.where(rng.random(60) < 0.125, 0.107, 0.0)
    noise[at - 1] = 0.107 + abs(noise[at - 1] % 0.002)
    noise[at] = 0.0
    x = (1.0 + noise) * np.where(np.arange(60) >= at, 1.10, 1.0)
    assert [c.index for c in changepoints.detect(x)] == [at]
