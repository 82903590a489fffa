"""Significance of a change (measure.stats): Mann-Whitney U against exact enumeration, bootstrap CI."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.measure import stats

# Round times: finite, non-negative, with few enough distinct values that ties happen.
value = st.floats(min_value=0.0, max_value=1e3, allow_nan=False, allow_infinity=False)
tied_value = st.integers(min_value=0, max_value=5).map(float)
sample = st.lists(st.one_of(value, tied_value), min_size=1, max_size=40)


@functools.cache
def _splits(n1: int, n: int) -> np.ndarray:
    """Every choice of ``n1`` positions out of ``n``, one per row."""
    flat = itertools.chain.from_iterable(itertools.combinations(range(n), n1))
    return np.fromiter(flat, dtype=np.int8).reshape(-1, n1)


def _exact(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Exact permutation p-values (greater, less) of the rank sum of ``a``, by enumerating all splits."""
    pooled = np.concatenate([a, b])
    _, inverse, counts = np.unique(pooled, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[inverse]
    sums = ranks[_splits(a.size, pooled.size)].sum(axis=1)
    observed = ranks[: a.size].sum()
    return float(np.mean(sums >= observed - 1e-9)), float(np.mean(sums <= observed + 1e-9))


def _pairs_u(a: list[float], b: list[float]) -> float:
    """U of ``a`` by its definition: pairs where ``a`` is larger, ties counting a half."""
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)


@pytest.mark.parametrize(("granularity", "tolerance"), [(None, 0.01), (0.5, 0.03)])
@pytest.mark.parametrize(("n1", "n2"), [(10, 10), (12, 8), (8, 12)])
def test_normal_approximation_is_close_to_exact_enumeration(n1, n2, granularity, tolerance):
    # With 10 or so values per sample the corrected normal approximation is within a hundredth of
    # the exact permutation p-value; ties from coarse rounding make the exact distribution lumpy.
    rng = np.random.default_rng(n1 * 100 + n2)
    for _ in range(8):
        a = rng.normal(rng.uniform(0.0, 1.5), 1.0, n1)
        b = rng.normal(0.0, 1.0, n2)
        if granularity is not None:
            a, b = np.round(a / granularity) * granularity, np.round(b / granularity) * granularity
        greater, less = _exact(a, b)
        assert stats.mann_whitney_u(a, b, "greater")[1] == pytest.approx(greater, abs=tolerance)
        assert stats.mann_whitney_u(a, b, "less")[1] == pytest.approx(less, abs=tolerance)


def test_far_tail_errs_towards_no_difference():
    # Fully separated samples: the exact p is 1 / C(20, 10); the approximation is larger, never smaller.
    a = np.arange(10.0, 20.0)
    b = np.arange(0.0, 10.0)
    u, p = stats.mann_whitney_u(a, b, "greater")
    assert u == 100.0
    assert 1 / math.comb(20, 10) < p < 1e-3


@settings(max_examples=150, deadline=None)
@given(sample, sample)
def test_u_counts_pairs_and_alternatives_are_symmetric(a, b):
    u, two_sided = stats.mann_whitney_u(a, b)
    assert u == pytest.approx(_pairs_u(a, b))
    u_ba, _ = stats.mann_whitney_u(b, a)
    assert u + u_ba == pytest.approx(len(a) * len(b))
    _, greater = stats.mann_whitney_u(a, b, "greater")
    _, less = stats.mann_whitney_u(a, b, "less")
    assert stats.mann_whitney_u(b, a, "less")[1] == pytest.approx(greater)
    assert stats.mann_whitney_u(b, a, "greater")[1] == pytest.approx(less)
    assert 0.0 <= greater <= 1.0
    assert 0.0 <= less <= 1.0
    # Both one-sided p-values include the observed arrangement, so they cover everything at least once.
    assert greater + less >= 1.0 - 1e-12
    assert two_sided == pytest.approx(min(1.0, 2.0 * min(greater, less)))


def test_ties_are_ranked_by_midrank():
    # a = [1, 2, 2], b = [2, 3]: pairs a > b: none; ties: two 2s against one 2 -> u = 1.
    u, _ = stats.mann_whitney_u([1.0, 2.0, 2.0], [2.0, 3.0], "less")
    assert u == 1.0


def test_identical_samples_show_no_difference():
    sample_ = np.random.default_rng(1).lognormal(0.0, 0.05, 50)
    for alternative in ("greater", "less"):
        u, p = stats.mann_whitney_u(sample_, sample_, alternative)
        assert u == 50 * 50 / 2
        assert 0.5 <= p < 0.55
    assert stats.mann_whitney_u(sample_, sample_)[1] == 1.0


def test_all_values_equal_gives_p_one():
    assert stats.mann_whitney_u([3.0] * 5, [3.0] * 7, "greater") == (17.5, 1.0)
    assert stats.mann_whitney_u([3.0], [3.0], "less") == (0.5, 1.0)


def test_false_alarm_rate_matches_alpha():
    # Same distribution on both sides: p < alpha about alpha of the time (seeded, so exact counts).
    rng = np.random.default_rng(7)
    p = np.array([stats.mann_whitney_u(*rng.lognormal(0.0, 0.05, (2, 60)), "greater")[1] for _ in range(400)])
    assert np.mean(p < 0.01) <= 0.02
    assert 0.02 <= np.mean(p < 0.05) <= 0.08


@pytest.mark.parametrize(
    ("a", "b", "alternative", "message"),
    [
        ([], [1.0], "less", "first sample is empty"),
        ([1.0], [], "less", "second sample is empty"),
        ([1.0, math.nan], [1.0], "less", "first sample has values that are not finite"),
        ([1.0], [math.inf], "less", "second sample has values that are not finite"),
        ([[1.0]], [1.0], "less", "first sample must be a flat sequence"),
        ([1.0], [1.0], "bigger", "alternative must be 'less', 'greater' or 'two-sided', got 'bigger'"),
    ],
)
def test_mann_whitney_rejects_bad_input(a, b, alternative, message):
    with pytest.raises(ValueError, match=message):
        stats.mann_whitney_u(a, b, alternative)


def test_bootstrap_is_reproducible_and_brackets_the_true_ratio():
    rng = np.random.default_rng(2)
    base = rng.lognormal(0.0, 0.05, 200)
    slow = rng.lognormal(math.log(1.10), 0.05, 200)
    low, high = stats.bootstrap_ratio_ci(slow, base, 50)
    assert (low, high) == stats.bootstrap_ratio_ci(slow, base, 50)
    assert 1.0 < low < 1.10 < high
    point = np.median(slow) / np.median(base)
    assert low < point < high
    # A narrower confidence gives a narrower interval from the same resamples.
    low90, high90 = stats.bootstrap_ratio_ci(slow, base, 50, confidence=0.9)
    assert low <= low90 <= high90 <= high


def test_bootstrap_statistic_forms_agree():
    rng = np.random.default_rng(3)
    a, b = rng.lognormal(0.0, 0.1, (2, 80))
    # The same seed draws the same resamples, whichever way the statistic is given.
    assert stats.bootstrap_ratio_ci(a, b, np.median) == pytest.approx(stats.bootstrap_ratio_ci(a, b, 50))
    assert stats.bootstrap_ratio_ci(a, b, np.max) == pytest.approx(stats.bootstrap_ratio_ci(a, b, 100))
    assert stats.bootstrap_ratio_ci(a, b, np.min) == pytest.approx(stats.bootstrap_ratio_ci(a, b, 0))
    per_row = stats.bootstrap_ratio_ci(a, b, lambda x: float(np.percentile(x, 99)), resamples=300)
    assert per_row == pytest.approx(stats.bootstrap_ratio_ci(a, b, 99, resamples=300))
    assert stats.bootstrap_ratio_ci(a, b, lambda x: float(np.mean(x)), resamples=300) == pytest.approx(
        stats.bootstrap_ratio_ci(a, b, np.mean, resamples=300)
    )
    assert stats.bootstrap_ratio_ci(a, b, 50, seed=1) != stats.bootstrap_ratio_ci(a, b, 50, seed=0)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(min_value=0.0, max_value=1e3, allow_nan=False), min_size=1, max_size=30),
    st.floats(min_value=0.0, max_value=100.0),
)
def test_bootstrap_percentile_of_rows_matches_numpy(values, q):
    rows = np.random.default_rng(0).choice(np.asarray(values), size=(5, len(values)))
    got = stats._row_reducer(q)(rows)
    assert got == pytest.approx(np.percentile(rows, q, axis=1), rel=1e-12, abs=1e-12)


def test_bootstrap_of_large_samples_works_in_chunks(monkeypatch):
    monkeypatch.setattr(stats, "_BOOTSTRAP_CHUNK_VALUES", 1000)
    rng = np.random.default_rng(4)
    a, b = rng.lognormal(0.0, 0.05, (2, 300))
    interval = stats.bootstrap_ratio_ci(a, b, 50, resamples=50)
    assert interval == stats.bootstrap_ratio_ci(a, b, 50, resamples=50)
    assert interval[0] < 1.0 < interval[1]


def test_bootstrap_of_a_zero_denominator_is_infinite():
    assert stats.bootstrap_ratio_ci([1.0, 2.0], [0.0, 0.0], 50, resamples=10) == (math.inf, math.inf)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"a": []}, "first sample is empty"),
        ({"b": []}, "second sample is empty"),
        ({"confidence": 1.0}, r"confidence must be within \(0, 1\), got 1.0"),
        ({"confidence": 0.0}, r"confidence must be within \(0, 1\), got 0.0"),
        ({"resamples": 0}, "resamples must be a positive integer, got 0"),
        ({"resamples": True}, "resamples must be a positive integer, got True"),
        ({"statistic": 101.0}, r"percentile must be within \[0, 100\], got 101.0"),
    ],
)
def test_bootstrap_rejects_bad_input(kwargs, message):
    args = {"a": [1.0, 2.0], "b": [1.0, 3.0], "statistic": 50.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        stats.bootstrap_ratio_ci(**args)


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
