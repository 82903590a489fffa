"""The peak Server QPS search (pytest_ipu.loadgen.search) against synthetic probes: a SUT whose true
capacity is ``C`` is VALID at every rate up to ``C`` and INVALID above it."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.loadgen.search import early_stopping_queries
from pytest_ipu.loadgen.search import find_peak
from pytest_ipu.pytest_plugin.fixtures.calls import Loadgen
from pytest_ipu.results.loadgen import ServerProbe

#: Each synthetic probe's wall time, seconds.
PROBE_S = 10.0
#: The search's bounds as ``ipu_loadgen`` passes them by default (its signature states them).
_DEFAULTS = inspect.signature(Loadgen.__call__).parameters
MAX_PROBES: int = _DEFAULTS["max_probes"].default
TOLERANCE: float = _DEFAULTS["search_tolerance"].default


def search(probe: Callable[[float], ServerProbe], **changes: Any) -> Any:
    """``find_peak`` with ``ipu_loadgen``'s default bounds, and ``changes``."""
    return find_peak(probe, **{"max_probes": MAX_PROBES, "tolerance": TOLERANCE, **changes})


def probe_result(qps: float, valid: bool) -> ServerProbe:
    """A probe's record as the scenario builds it, with a fixed wall time."""
    return ServerProbe(
        target_qps=qps,
        valid=valid,
        scheduled_qps=qps,
        completed_qps=qps if valid else qps * 0.8,
        latency_s=0.01 if valid else 0.2,
        reasons=() if valid else ("latency bound not met at the target percentile",),
        elapsed_s=PROBE_S,
    )


def capacity(c: float, asked: list[float] | None = None) -> Callable[[float], ServerProbe]:
    """A probe of a SUT whose capacity is ``c``; ``asked`` collects the rates probed."""

    def probe(qps: float) -> ServerProbe:
        if asked is not None:
            asked.append(qps)
        return probe_result(qps, qps <= c)

    return probe


def check_bracket(c: float, estimate: float) -> None:
    """Search a SUT of capacity ``c`` from ``estimate`` and check the peak it reports."""
    asked: list[float] = []
    result = search(capacity(c, asked), capacity_estimate_qps=estimate)
    assert result.ended == "converged"
    assert len(result.probes) <= MAX_PROBES
    assert result.peak_qps is not None
    assert result.peak_qps <= c  # never above the capacity
    assert result.peak_qps >= 0.9 * c  # within 10 % below it
    # The peak is the highest VALID probe, the bracket's top the lowest INVALID one.
    assert result.peak_qps == max(p.target_qps for p in result.probes if p.valid)
    assert result.lowest_invalid_qps == min(p.target_qps for p in result.probes if not p.valid)
    assert result.lowest_invalid_qps <= result.peak_qps * (1 + TOLERANCE)
    assert [p.target_qps for p in result.probes] == asked
    assert asked[0] == pytest.approx(estimate / 2)  # the first probe: half the estimate


@settings(max_examples=200, deadline=None)
@given(
    c=st.floats(min_value=1.0, max_value=1e6, allow_nan=False, allow_infinity=False),
    share=st.floats(min_value=0.3, max_value=3.0),
)
@example(c=1000.0, share=0.3)
@example(c=1000.0, share=3.0)
@example(c=1000.0, share=2.0)  # the first probe exactly at the capacity
@example(c=1000.0, share=1.0)
def test_the_peak_is_found_within_ten_percent_below_capacity(c: float, share: float) -> None:
    check_bracket(c, c * share)


@pytest.mark.parametrize("share", [0.3, 0.5, 0.99, 1.0, 1.01, 2.0, 2.5, 3.0])
def test_estimates_from_a_third_to_three_times_capacity(share: float) -> None:
    check_bracket(250.0, 250.0 * share)


def test_no_valid_probe_reports_no_peak() -> None:
    asked: list[float] = []
    result = search(capacity(0.0, asked), capacity_estimate_qps=1000.0)
    assert result.peak_qps is None
    assert result.ended == "no-valid"
    assert len(result.probes) == MAX_PROBES
    # Each probe a quarter of the last, from half the estimate.
    assert asked[:3] == pytest.approx([500.0, 125.0, 31.25])
    assert result.lowest_invalid_qps == pytest.approx(min(asked))


def test_the_most_probes_end_the_search() -> None:
    result = search(capacity(1000.0), capacity_estimate_qps=1000.0, max_probes=3)
    assert len(result.probes) == 3
    assert result.ended == "probes"
    assert result.peak_qps is not None
    assert result.peak_qps <= 1000.0


class FakeClock:
    """A clock the probes advance by their wall time."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("budget", "runs"), [(35.0, 3), (40.0, 4), (10.0, 1), (9.0, 1)])
def test_the_budget_stops_before_a_probe_that_would_overrun(budget: float, runs: int) -> None:
    clock = FakeClock()
    start = clock.now
    inner = capacity(1000.0)

    def probe(qps: float) -> ServerProbe:
        clock.now += PROBE_S
        return inner(qps)

    result = search(probe, capacity_estimate_qps=1000.0, budget_s=budget, clock=clock)
    assert len(result.probes) == runs
    assert result.ended == "budget"
    # The first probe always runs; every later one only when the longest so far still fits.
    if runs > 1:
        assert clock.now - start <= budget


def test_the_budget_ends_a_search_with_no_valid_probe_as_budget() -> None:
    clock = FakeClock()

    def probe(qps: float) -> ServerProbe:
        clock.now += PROBE_S
        return probe_result(qps, False)

    result = search(probe, capacity_estimate_qps=1000.0, budget_s=25.0, clock=clock)
    assert result.peak_qps is None
    assert result.ended == "budget"
    assert len(result.probes) == 2


def test_no_budget_means_the_clock_does_not_matter() -> None:
    clock = FakeClock()

    def probe(qps: float) -> ServerProbe:
        clock.now += 1e9
        return probe_result(qps, qps <= 700.0)

    result = search(probe, capacity_estimate_qps=1000.0, clock=clock)
    assert result.ended == "converged"


def test_a_noisy_invalid_probe_below_capacity_still_reports_the_highest_valid() -> None:
    # The SUT can take 1000 QPS, but the second probe (1000 QPS, at the capacity) flakes INVALID.
    # The search cannot return above a probe it saw INVALID; the peak is still the highest rate
    # any probe found VALID, and never a rate it did not probe.
    calls: list[float] = []

    def probe(qps: float) -> ServerProbe:
        calls.append(qps)
        return probe_result(qps, qps <= 1000.0 and len(calls) != 2)

    result = search(probe, capacity_estimate_qps=1000.0)
    assert calls[:2] == [500.0, 1000.0]
    assert result.peak_qps == max(p.target_qps for p in result.probes if p.valid)
    assert result.peak_qps in calls
    assert result.lowest_invalid_qps == 1000.0
    assert 500.0 < result.peak_qps < 1000.0
    assert result.ended == "converged"


def test_after_an_invalid_first_probe_the_valid_ones_climb_to_it() -> None:
    # Every probe but the very first is VALID, whatever its rate: the peak follows the VALID probes
    # up to the bracket's top, and each VALID probe is kept in the record.
    calls: list[float] = []

    def probe(qps: float) -> ServerProbe:
        calls.append(qps)
        return probe_result(qps, len(calls) > 1)

    result = search(probe, capacity_estimate_qps=1000.0)
    assert result.probes[0].valid is False
    assert result.peak_qps == max(calls[1:])
    assert result.peak_qps is not None
    assert result.peak_qps >= 500.0 / (1 + TOLERANCE)


@pytest.mark.parametrize("estimate", [0.0, -5.0, math.inf, math.nan])
def test_the_estimate_must_be_a_positive_rate(estimate: float) -> None:
    with pytest.raises(ValueError, match="capacity estimate must be a finite QPS > 0"):
        search(capacity(1.0), capacity_estimate_qps=estimate)


def test_early_stopping_needs_459_queries_at_p99_and_44_at_p90() -> None:
    assert early_stopping_queries(0.99) == 459
    assert early_stopping_queries(0.9) == 44
    assert early_stopping_queries(0.999) > early_stopping_queries(0.99)


@pytest.mark.parametrize("percentile", [0, 1, 99, -0.5])
def test_early_stopping_needs_a_fraction(percentile: float) -> None:
    with pytest.raises(ValueError, match="a percentile must be a fraction in"):
        early_stopping_queries(percentile)
