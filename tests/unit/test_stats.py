"""Percentiles and the sample counts they need (measure.stats), checked against numpy and by property."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.measure import metrics
from pytest_ipu.measure import stats

# Latencies in seconds: non-negative, finite, from well under a nanosecond to hours.
latency = st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False)
samples = st.lists(latency, min_size=1, max_size=200)
quantile = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)
open_quantile = st.floats(min_value=0.0, max_value=100.0, exclude_min=True, exclude_max=True)

SLACK = Fraction(1, 10**9)


def _type7(values: list[float], q: float) -> float:
    """Hyndman and Fan type 7, written out independently of numpy."""
    ordered = sorted(values)
    h = (len(ordered) - 1) * q / 100
    lo = math.floor(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])


@settings(max_examples=100, deadline=None)
@given(samples, quantile)
def test_percentile_matches_numpy(values, q):
    got = stats.percentile(values, q)
    assert isinstance(got, float)
    assert got == float(np.percentile(np.asarray(values, dtype=np.float64), q))
    assert got == pytest.approx(_type7(values, q), rel=1e-9, abs=1e-12)


def test_percentile_known_values():
    values = [4.0, 1.0, 3.0, 2.0]
    assert stats.percentile(values, 0) == 1.0
    assert stats.percentile(values, 100) == 4.0
    assert stats.percentile(values, 50) == 2.5
    # (n - 1) * 0.9 = 2.7: 3 + 0.7 * (4 - 3)
    assert stats.percentile(values, 90) == pytest.approx(3.7)
    assert stats.percentile([7.0], 99) == 7.0


@settings(max_examples=100, deadline=None)
@given(samples)
def test_summary_percentiles_are_ordered(values):
    s = metrics.summarize_latency(values)
    assert s.min <= s.p50 <= s.p90 <= s.p99 <= s.max
    assert s.min == min(values)
    assert s.max == max(values)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_summary_is_permutation_invariant(data):
    values = data.draw(samples)
    shuffled = data.draw(st.permutations(values))
    a = metrics.summarize_latency(values)
    b = metrics.summarize_latency(shuffled)
    assert (a.min, a.p50, a.p90, a.p99, a.max) == (b.min, b.p50, b.p90, b.p99, b.max)
    assert (a.rounds, a.unsupported) == (b.rounds, b.unsupported)
    assert a.mean == pytest.approx(b.mean, rel=1e-12, abs=1e-300)


@pytest.mark.parametrize(("q", "n"), [(50, 2), (90, 10), (99, 100), (99.9, 1000), (75, 4), (10, 2), (1, 2)])
def test_min_samples_for_known(q, n):
    assert stats.min_samples_for(q) == n


@settings(max_examples=100, deadline=None)
@given(open_quantile)
def test_min_samples_for_is_the_least_count_with_one_sample_above(q):
    need = stats.min_samples_for(q)
    assert need >= 2
    above = 1 - Fraction(q) / 100  # exact: Fraction(float) is the float's exact value
    # Enough samples: at least one lies above the q-th percentile (up to float noise in the bound).
    assert need * above >= 1 - SLACK
    assert (need + 1) * above >= 1 - SLACK
    # One fewer is not enough (unless the floor of two samples is what decided it).
    if need > 2:
        assert (need - 1) * above < 1


@settings(max_examples=100, deadline=None)
@given(open_quantile, st.integers(min_value=0, max_value=20_000))
def test_is_supported_agrees_with_min_samples_for(q, n):
    assert stats.is_supported(q, n) == (n >= stats.min_samples_for(q))


@pytest.mark.parametrize(
    ("q", "n", "ok"),
    [(50, 1, False), (50, 2, True), (90, 9, False), (90, 10, True), (99, 99, False), (99, 100, True)],
)
def test_is_supported_known(q, n, ok):
    assert stats.is_supported(q, n) is ok


def test_percentile_rejects_empty_sample():
    with pytest.raises(ValueError, match="empty sample"):
        stats.percentile([], 50)


@pytest.mark.parametrize("q", [-0.001, 100.001, -50, 1000])
def test_percentile_rejects_q_out_of_range(q):
    with pytest.raises(ValueError, match=r"within \[0, 100\]"):
        stats.percentile([1.0, 2.0], q)


@pytest.mark.parametrize("q", [0, 100, -1, 150])
def test_min_samples_for_rejects_q_out_of_range(q):
    with pytest.raises(ValueError, match=r"within \(0, 100\)"):
        stats.min_samples_for(q)
    with pytest.raises(ValueError, match=r"within \(0, 100\)"):
        stats.is_supported(q, 1000)
