"""Energy integration: exact cases, and properties that must hold for any readings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.power.energy import CoverageError
from pytest_ipu.power.energy import integrate

S = 1_000_000_000  # ns per second
RULES = ("counter_delta", "trapezoid", "backward_rect")


def _series(rule, t, watts):
    """Readings of constant-or-varying power ``watts(t)`` as each sensor kind would report them."""
    t = np.asarray(t, dtype=np.float64)
    if rule == "counter_delta":
        # exact cumulative energy of piecewise-linear power between the sample times
        w = np.array([watts(x) for x in t])
        e = np.concatenate(([0.0], np.cumsum((w[1:] + w[:-1]) / 2 * np.diff(t) * 1e-9)))
        return e
    return np.array([watts(x) for x in t])


@pytest.mark.parametrize("rule", RULES)
def test_constant_power_over_a_window_inside_the_readings(rule):
    t = np.arange(0, 11 * S, S // 10)  # 10 Hz for 11 s
    joules = integrate(rule, t, _series(rule, t, lambda _: 150.0), int(0.55 * S), int(8.05 * S))
    assert joules == pytest.approx(150.0 * 7.5, rel=1e-12)


def test_trapezoid_integrates_a_ramp_exactly_with_interpolated_edges():
    t = [0, S, 2 * S, 3 * S]
    w = [0.0, 10.0, 20.0, 30.0]  # 10 W/s ramp
    # energy of P(t) = 10 t over [0.5, 2.5] s = 5 * (2.5^2 - 0.5^2) = 30 J
    assert integrate("trapezoid", t, w, S // 2, 5 * S // 2) == pytest.approx(30.0)


def test_backward_rectangle_gives_each_reading_the_interval_before_it():
    t = [0, S, 2 * S]
    w = [999.0, 10.0, 20.0]  # the first reading covers time before the window: never used
    assert integrate("backward_rect", t, w, 0, 2 * S) == pytest.approx(30.0)
    assert integrate("backward_rect", t, w, S // 2, 3 * S // 2) == pytest.approx(5.0 + 10.0)


def test_counter_delta_places_each_change_midway_into_the_gap_where_it_happened():
    t = [0, S, 2 * S]
    e = [100.0, 110.0, 130.0]
    # 110 appeared in (0, 1] s: placed at 0.5 s; 130 in (1, 2] s: placed at 1.5 s.
    assert integrate("counter_delta", t, e, S // 2, 3 * S // 2) == pytest.approx(130.0 - 110.0)


def test_a_held_counter_read_ten_times_per_refresh_gives_the_energy_of_its_refreshes():
    # 100 W, counter refreshed every 100 ms (at 0.03 + k * 0.1 s), read every 10 ms
    refresh = 0.03 + np.arange(0, 30) * 0.1
    reads = np.arange(0.0, 2.9, 0.01)
    held = np.array([100.0 * refresh[refresh <= r].max() if (refresh <= r).any() else 0.0 for r in reads])
    joules = integrate("counter_delta", (reads * S).astype(np.int64), held, int(0.5 * S), int(2.5 * S))
    assert joules == pytest.approx(200.0, rel=0.01)


@pytest.mark.parametrize("rule", RULES)
def test_readings_that_do_not_cover_the_window_are_refused(rule):
    t = [S, 2 * S, 3 * S]
    with pytest.raises(CoverageError, match=r"readings span \[1000000000, 3000000000\] ns"):
        integrate(rule, t, [1.0, 2.0, 3.0], 0, 2 * S)
    with pytest.raises(CoverageError):
        integrate(rule, t, [1.0, 2.0, 3.0], 2 * S, 4 * S)
    with pytest.raises(CoverageError, match="nothing"):
        integrate(rule, [], [], 0, 1)


def test_bad_inputs_are_errors_not_numbers():
    with pytest.raises(ValueError, match="one value per timestamp"):
        integrate("trapezoid", [0, 1], [1.0], 0, 1)
    with pytest.raises(ValueError, match="strictly"):
        integrate("trapezoid", [0, 0, 2], [1.0, 1.0, 1.0], 0, 1)
    with pytest.raises(ValueError, match="ends before it starts"):
        integrate("trapezoid", [0, 2], [1.0, 1.0], 2, 1)
    with pytest.raises(ValueError, match="unknown integration rule"):
        integrate("simpson", [0, 2], [1.0, 1.0], 0, 1)  # type: ignore[arg-type]


readings = st.lists(st.floats(0.0, 1000.0), min_size=3, max_size=40)
gaps = st.lists(st.integers(1, 10**9), min_size=39, max_size=39)


@settings(max_examples=100, deadline=None)
@given(readings, gaps, st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.sampled_from(RULES))
def test_additive_over_adjacent_windows_and_never_negative(values, steps, a, b, rule):
    t = np.concatenate(([0], np.cumsum(steps[: len(values) - 1]))).astype(np.int64)
    v = np.cumsum(values) if rule == "counter_delta" else np.asarray(values)  # counters only grow
    lo, hi = sorted((a, b))
    start, end = int(t[-1] * lo), int(t[-1] * hi)
    mid = (start + end) // 2
    whole = integrate(rule, t, v, start, end)
    parts = integrate(rule, t, v, start, mid) + integrate(rule, t, v, mid, end)
    assert whole == pytest.approx(parts, rel=1e-9, abs=1e-9)
    assert whole >= -1e-12


@settings(max_examples=50, deadline=None)
@given(st.floats(0.1, 1000.0), st.floats(0.01, 100.0), st.sampled_from(("trapezoid", "backward_rect")))
def test_constant_power_p_over_t_gives_p_times_t(power, seconds, rule):
    t = np.linspace(0, seconds * S, 50).astype(np.int64)
    joules = integrate(rule, t, np.full(len(t), power), int(t[1]), int(t[-2]))
    assert joules == pytest.approx(power * (t[-2] - t[1]) * 1e-9, rel=1e-9)


def test_a_known_refresh_period_bounds_how_long_ago_a_change_happened():
    # A counter refreshed every 1 ms, read sparsely (0.5 s apart) and exactly at the window edges,
    # under power that steps from 300 W to 100 W just as the window opens and back as it closes.
    reads = np.array([0.0, 0.5, 0.8003, 1.0, 1.5, 2.0, 2.3002, 2.5, 3.0])
    start_s, end_s = 0.8003, 2.3002

    def energy_at(t: float) -> float:
        t = np.floor(t / 0.001) * 0.001  # held between refreshes
        inside = min(max(t - start_s, 0.0), end_s - start_s)
        return 300.0 * (t - inside) + 100.0 * inside

    t_ns = (reads * S).astype(np.int64)
    values = [energy_at(r) for r in reads]
    truth = 100.0 * (end_s - start_s)
    with_period = integrate("counter_delta", t_ns, values, int(start_s * S), int(end_s * S), refresh_ns=1e6)
    assert with_period == pytest.approx(truth, rel=2e-3)
    # Without the period the edge changes are placed midway into 0.3 s and 0.2 s gaps: far off.
    without = integrate("counter_delta", t_ns, values, int(start_s * S), int(end_s * S))
    assert abs(without - truth) / truth > 0.05
