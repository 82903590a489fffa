"""The power meter: energy of a window from each reading kind, idle baseline, checks (R18), rates.

Most tests build a trace by reading a constant-power fake source at chosen times on a fake clock,
so every expected number is exact; a few go through ``PowerMeter.sampling`` on the real clock, and
assert only what holds however late the sampling thread reads on a busy machine.
"""

from __future__ import annotations

import json
import math
import sys
import time

import pytest

from pytest_ipu.backports import zip_strict
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.power.meter import MAX_MISSED
from pytest_ipu.power.meter import PowerMeter
from pytest_ipu.power.meter import min_window_s
from pytest_ipu.power.meter import not_measured
from pytest_ipu.power.meter import sample_hz
from pytest_ipu.power.sampler import PowerSampler
from pytest_ipu.power.sampler import Trace
from pytest_ipu.results.records import PowerRecord
from tests.fakes.fake_power import FakePowerSource
from tests.waiting import wait_for

S = 1_000_000_000  # ns per second
T0 = 1_000 * S
KINDS = ("energy_counter", "instant_power", "average_power")
RULES = {"energy_counter": "counter_delta", "instant_power": "trapezoid", "average_power": "backward_rect"}
METHODS = {"energy_counter": "counter", "instant_power": "sampled_power", "average_power": "sampled_power"}


class FakeClock:
    def __init__(self) -> None:
        self.ns = T0

    def __call__(self) -> int:
        return self.ns


def _meter(kind, watts=40.0, *, update_period_s=0.01, hz=None):
    """An open meter (no idle baseline) over a fake source on a fake clock, and that clock."""
    clock = FakeClock()
    source = FakePowerSource(kind, watts, update_period_s=update_period_s, clock=clock)
    meter = PowerMeter(source, hz=hz, idle_s=0, clock=clock)
    meter.open()
    return meter, clock


def _trace(meter, clock, *, every_s=0.01, until_s=7.0, hz=100.0):
    """Read the meter's source every ``every_s`` from T0 to T0 + ``until_s``, as the sampler would."""
    trace = Trace(requested_hz=hz)
    for k in range(round(until_s / every_s) + 1):
        clock.ns = T0 + round(k * every_s * S)
        trace.t_ns.append(clock.ns)
        trace.values.append(dict(meter.source.read()))
    return trace


#: A 6 s window inside the readings, its edges between readings.
START, END = T0 + 505_000_000, T0 + 6_505_000_000
WINDOW_S = 6.0


def _counter_error_j(watts: float, source: FakePowerSource, t_ns: list[int]) -> float:
    """How far the counter rule may be from the truth over any window, for the fake's counter.

    The fake counts continuously (``watts x`` the time of its clock reading inside ``read``), while
    the rule takes a counter that holds between refreshes: it places each change up to half a
    refresh period before the reading's timestamp, and a timestamp (the read's midpoint) is off
    from the fake's own clock reading by ``gap``, up to half the read's latency. So the counter the
    rule reconstructs at either edge of a window is off by ``watts x`` something between ``-gap``
    and ``gap + refresh / 2``, and the window's energy by at most ``watts x (2 gap + refresh / 2)``
    (the largest gap of the run), whenever the thread happened to read. ``t_ns``: every reading's
    timestamp, in read order.
    """
    gaps = [abs(at - t) for at, t in zip_strict(source.read_started_ns, t_ns)]
    refresh_ns = source.update_period_s() * 1e9
    return watts * (2 * max(gaps) + refresh_ns / 2) * 1e-9 + 1e-12


# -- energy of constant power, each reading kind ------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_constant_power_gives_power_times_window(kind):
    meter, clock = _meter(kind, 40.0)
    result = meter.result(_trace(meter, clock), START, END, items=1200, rounds_fixed=False)
    assert result.measured
    assert result.valid
    assert result.source == "fake"
    assert result.window_s == pytest.approx(WINDOW_S, rel=1e-12)
    assert result.energy_j == pytest.approx(40.0 * WINDOW_S, rel=1e-9)
    assert result.mean_power_w == pytest.approx(40.0, rel=1e-9)
    assert result.items == 1200
    assert result.items_per_j == pytest.approx(1200 / result.energy_j, rel=1e-12)
    assert result.energy_per_item_j == pytest.approx(result.energy_j / 1200, rel=1e-12)
    assert result.items_per_j * result.energy_per_item_j == pytest.approx(1.0)
    assert result.warnings == ()
    assert result.reason == ""


@pytest.mark.parametrize("kind", KINDS)
def test_integration_rule_and_method_follow_the_reading_kind(kind):
    meter, clock = _meter(kind)
    result = meter.result(_trace(meter, clock), START, END, items=1, rounds_fixed=False)
    assert result.integration == RULES[kind]
    assert result.method == METHODS[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_energy_is_split_per_device_and_summed(kind):
    meter, clock = _meter(kind, {"dev:a": 30.0, "dev:b": 20.0})
    result = meter.result(_trace(meter, clock), START, END, items=10, rounds_fixed=False)
    by_id = {d.id: d for d in result.devices}
    assert list(by_id) == ["dev:a", "dev:b"]
    assert by_id["dev:a"].energy_j == pytest.approx(30.0 * WINDOW_S, rel=1e-9)
    assert by_id["dev:b"].energy_j == pytest.approx(20.0 * WINDOW_S, rel=1e-9)
    assert by_id["dev:a"].mean_w == pytest.approx(30.0, rel=1e-9)
    assert by_id["dev:b"].mean_w == pytest.approx(20.0, rel=1e-9)
    assert by_id["dev:a"].scope == "cpu-package"
    assert by_id["dev:a"].name == "fake device dev:a"
    assert result.energy_j == pytest.approx(50.0 * WINDOW_S, rel=1e-9)
    assert result.mean_power_w == pytest.approx(50.0, rel=1e-9)
    assert by_id["dev:a"].idle_w is None  # no baseline was measured (idle_s=0)


def test_samples_and_rates_are_recorded():
    meter, clock = _meter("instant_power", update_period_s=0.05, hz=100.0)
    result = meter.result(_trace(meter, clock, hz=100.0), START, END, items=1, rounds_fixed=False)
    # readings at T0 + k * 10 ms inside [0.505 s, 6.505 s]: k = 51 .. 650
    assert result.samples == 600
    assert result.sample_hz_requested == 100.0
    assert result.sample_hz_achieved == pytest.approx(600 / WINDOW_S)
    assert result.update_period_s == 0.05


@pytest.mark.parametrize("kind", KINDS)
def test_real_sampling_through_the_meter(kind):
    source = FakePowerSource(kind, 25.0)
    meter = PowerMeter(source, hz=1000, idle_s=0)
    meter.open()
    try:
        with meter.sampling() as trace:
            start = time.perf_counter_ns()
            time.sleep(0.05)
            end = time.perf_counter_ns()
        result = meter.result(trace, start, end, items=3, rounds_fixed=True)
    finally:
        meter.close()
    window_s = (end - start) * 1e-9
    assert result.valid, result
    # sampled constant power is exact whenever the readings were taken; the counter rule is off by
    # at most what _counter_error_j says for the readings this run happened to take
    if kind == "energy_counter":
        error_j = _counter_error_j(25.0, source, trace.t_ns)
        assert result.energy_j == pytest.approx(25.0 * window_s, abs=error_j)
        assert result.mean_power_w == pytest.approx(25.0, abs=error_j / window_s)
    else:
        assert result.energy_j == pytest.approx(25.0 * window_s, rel=1e-9)
        assert result.mean_power_w == pytest.approx(25.0, rel=1e-9)
    assert result.sample_hz_requested == 1000


# -- idle baseline ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_idle_power_is_measured_once_at_open_and_reported_not_subtracted(kind, monkeypatch):
    samplers: list[PowerSampler] = []

    class Kept(PowerSampler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            samplers.append(self)

    monkeypatch.setattr(sys.modules[PowerMeter.__module__], "PowerSampler", Kept)  # to see the idle readings
    source = FakePowerSource(kind, {"dev:a": 30.0, "dev:b": 20.0})
    meter = PowerMeter(source, hz=1000, idle_s=0.05)
    started = time.perf_counter()
    meter.open()
    assert time.perf_counter() - started >= 0.05  # it did wait out the idle period
    (idle,) = samplers
    reads = source.reads
    assert reads == len(idle.trace.t_ns) >= 2  # bracketing the idle period
    # see test_real_sampling_through_the_meter; the idle period lasted at least idle_s
    if kind == "energy_counter":
        error_j = {d: _counter_error_j(w, source, idle.trace.t_ns) for d, w in source.watts.items()}
        assert meter.idle_w["dev:a"] == pytest.approx(30.0, abs=error_j["dev:a"] / 0.05)
        assert meter.idle_w["dev:b"] == pytest.approx(20.0, abs=error_j["dev:b"] / 0.05)
    else:
        assert meter.idle_w == pytest.approx({"dev:a": 30.0, "dev:b": 20.0}, rel=1e-9)
    meter.open()  # a second open neither reopens the source nor measures idle again
    assert source.opens == 1
    assert source.reads == reads
    # a window at the same power as idle: the energy is the total, not total minus idle (~0)
    with meter.sampling() as trace:
        start = time.perf_counter_ns()
        time.sleep(0.05)
        end = time.perf_counter_ns()
    result = meter.result(trace, start, end, items=5, rounds_fixed=True)
    meter.close()
    window_s = (end - start) * 1e-9
    assert {d.id: d.idle_w for d in result.devices} == meter.idle_w
    assert result.idle_power_w == pytest.approx(sum(meter.idle_w.values()), rel=1e-12)
    if kind == "energy_counter":
        error_j = _counter_error_j(50.0, source, idle.trace.t_ns + trace.t_ns)
        assert result.energy_j == pytest.approx(50.0 * window_s, abs=error_j)
    else:
        assert result.idle_power_w == pytest.approx(50.0, rel=1e-9)
        assert result.energy_j == pytest.approx(50.0 * window_s, rel=1e-9)


def test_idle_zero_skips_the_baseline():
    clock = FakeClock()
    source = FakePowerSource(clock=clock)
    meter = PowerMeter(source, idle_s=0, clock=clock)
    meter.open()
    assert source.opens == 1
    assert source.reads == 0
    assert meter.idle_w == {}
    assert [d.id for d in meter.devices] == ["fake:0"]
    result = meter.result(_trace(meter, clock), START, END, items=1, rounds_fixed=False)
    assert result.idle_power_w is None
    assert result.devices[0].idle_w is None


def test_a_failed_idle_measurement_leaves_idle_unknown_not_zero():
    source = FakePowerSource(read_error_at=1)  # the sampling thread's first read fails
    meter = PowerMeter(source, hz=1000, idle_s=0.02)
    meter.open()
    assert meter.idle_w == {}
    meter.close()


# -- checks (R18) -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("rounds_fixed", "why"), [(True, "the rounds were fixed"), (False, "round cap")])
def test_a_window_shorter_than_the_minimum_is_low_confidence(rounds_fixed, why):
    meter, clock = _meter("instant_power")
    trace = _trace(meter, clock)
    result = meter.result(trace, START, START + S, items=1, rounds_fixed=rounds_fixed)
    assert result.valid  # flagged, not refused
    assert result.low_confidence
    low = [w for w in result.warnings if w.startswith("low confidence")]
    assert len(low) == 1
    assert "window 1 s < 5 s" in low[0]
    assert why in low[0]


def test_the_minimum_window_follows_a_slow_sensor():
    meter, clock = _meter("instant_power", update_period_s=0.5)  # min window 20 x 0.5 = 10 s
    result = meter.result(_trace(meter, clock), START, END, items=1, rounds_fixed=True)
    assert result.low_confidence
    assert any(w.startswith("low confidence: window 6 s < 10 s") for w in result.warnings)


def test_a_long_enough_window_is_not_low_confidence():
    meter, clock = _meter("instant_power")
    result = meter.result(_trace(meter, clock), START, START + 5 * S, items=1, rounds_fixed=True)
    assert not result.low_confidence
    assert not any("low confidence" in w for w in result.warnings)


@pytest.mark.parametrize("kind", ["instant_power", "average_power"])
def test_too_few_power_readings_in_the_window_are_flagged(kind):
    meter, clock = _meter(kind)
    trace = _trace(meter, clock, every_s=1.0)  # 1 Hz: 6 readings inside the 6 s window
    result = meter.result(trace, START, END, items=1, rounds_fixed=False)
    assert result.samples == 6
    assert "only 6 power readings in the window (want >= 10)" in result.warnings
    assert result.energy_j == pytest.approx(40.0 * WINDOW_S, rel=1e-9)


def test_few_counter_readings_are_not_flagged_as_few_samples():
    meter, clock = _meter("energy_counter")
    result = meter.result(_trace(meter, clock, every_s=1.0), START, END, items=1, rounds_fixed=False)
    assert not any("power readings" in w for w in result.warnings)


def test_a_counter_that_did_not_move_is_flagged_and_gives_no_items_per_joule():
    meter, clock = _meter("energy_counter", 0.0)
    result = meter.result(_trace(meter, clock), START, END, items=10, rounds_fixed=False)
    assert "an energy counter did not move during the window" in result.warnings
    assert result.energy_j == 0.0
    assert result.items_per_j is None  # not infinity, not a division error


def test_moving_counters_are_not_flagged():
    meter, clock = _meter("energy_counter", {"a": 1.0, "b": 2.0})
    result = meter.result(_trace(meter, clock), START, END, items=10, rounds_fixed=False)
    assert not any("did not move" in w for w in result.warnings)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("watts", [-50.0, math.nan, math.inf, 1e300])
def test_an_impossible_reading_makes_the_window_not_measured_with_the_reason(kind, watts):
    # NaN, infinite, negative or absurd power (as read, or as a counter's change over the window):
    # no energy figure at all, so nothing downstream can print or gate on it.
    meter, clock = _meter(kind, {"a": 30.0, "b": watts})
    result = meter.result(_trace(meter, clock), START, END, items=10, rounds_fixed=False)
    assert not result.valid
    assert result.reason.startswith("invalid reading from fake: device b"), result.reason
    assert (result.energy_j, result.mean_power_w, result.energy_per_item_j, result.items_per_j) == (None,) * 4
    assert result.devices == ()
    json.dumps(result.as_json(), allow_nan=False)  # the record holds no NaN or Infinity


def test_one_nan_reading_inside_the_window_invalidates_it():
    meter, clock = _meter("instant_power")
    trace = _trace(meter, clock)
    trace.values[300] = {"fake:0": math.nan}  # 3 s in: inside the window
    result = meter.result(trace, START, END, items=10, rounds_fixed=False)
    assert result.reason == (
        "invalid reading from fake: device fake:0 read nan W +2.495 s from the window's start "
        "(power is a finite number >= 0 W)"
    )


def test_a_nan_reading_outside_the_window_does_not_touch_it():
    meter, clock = _meter("instant_power")
    trace = _trace(meter, clock)
    trace.values[-1] = {"fake:0": math.nan}  # 7 s: after the reading that closes the window
    result = meter.result(trace, START, END, items=10, rounds_fixed=False)
    assert result.valid
    assert result.energy_j == pytest.approx(40.0 * WINDOW_S)


def test_an_impossible_idle_reading_reports_no_idle_power():
    source = FakePowerSource("instant_power", math.nan)
    meter = PowerMeter(source, hz=1000, idle_s=0.02)
    meter.open()
    try:
        assert meter.idle_w == {}
    finally:
        meter.close()


def test_a_sampling_error_makes_the_window_invalid_with_the_reason():
    meter, clock = _meter("instant_power")
    trace = _trace(meter, clock)
    trace.error = PowerSourceError("fake: the sensor went away")
    result = meter.result(trace, START, END, items=10, rounds_fixed=False)
    assert result.measured
    assert not result.valid
    assert result.reason == "sampling failed: fake: the sensor went away"
    assert result.energy_j is None
    assert result.mean_power_w is None
    assert result.items_per_j is None


def test_a_window_the_readings_do_not_cover_is_invalid_with_the_reason():
    meter, clock = _meter("instant_power")
    trace = _trace(meter, clock, until_s=2.0)
    result = meter.result(trace, START, END, items=10, rounds_fixed=False)
    assert not result.valid
    assert result.reason.startswith("cannot integrate the window: readings span")
    assert result.energy_j is None


def test_many_missed_reads_are_flagged():
    meter, clock = _meter("instant_power")
    trace = _trace(meter, clock)
    scheduled = 7 * 100  # 7 s at 100 Hz
    trace.missed = math.ceil(scheduled * MAX_MISSED) + 100
    result = meter.result(trace, START, END, items=10, rounds_fixed=False)
    assert any("missed" in w for w in result.warnings)


def test_no_items_gives_no_per_item_figures_rather_than_zero():
    meter, clock = _meter("instant_power")
    result = meter.result(_trace(meter, clock), START, END, items=0, rounds_fixed=True)
    assert result.energy_per_item_j is None
    assert result.items_per_j is None


def test_a_persistent_read_error_reports_the_window_invalid_instead_of_raising():
    source = FakePowerSource(read_error_at=2, persistent=True)
    meter = PowerMeter(source, hz=1000, idle_s=0)
    meter.open()
    with meter.sampling() as trace:
        start = time.perf_counter_ns()
        # the thread's first read (read 1) works and its second fails, however late they come
        wait_for(lambda: trace.error is not None, "a failed read by the thread", poll_s=0.001)
        end = time.perf_counter_ns()
    result = meter.result(trace, start, end, items=1, rounds_fixed=True)
    assert not result.valid
    assert result.reason.startswith("sampling failed: fake: read 2 failed")


# -- not measured and JSON --------------------------------------------------------------------------


def test_not_measured_says_why_and_has_no_numbers():
    result = not_measured("nvml", "nvml unavailable: no NVIDIA driver")
    assert result.measured is False
    assert result.valid is False
    assert result.source == "nvml"
    assert result.reason == "nvml unavailable: no NVIDIA driver"
    for key in ("energy_j", "mean_power_w", "idle_power_w", "energy_per_item_j", "items_per_j", "window_s"):
        assert getattr(result, key) is None, key
    assert result.devices == ()
    assert result.low_confidence is False
    data = result.as_json()
    assert json.loads(json.dumps(data)) == data
    assert data["energy_j"] is None
    assert 0 not in (data["energy_j"], data["mean_power_w"], data["items_per_j"])


def test_not_measured_keeps_the_window_and_items_it_is_given_and_no_energy():
    # What an ipu_power block without a source knows: its wall time and the items it completed.
    result = not_measured("off", "power measurement is off", window_s=0.25, items=160)
    assert (result.measured, result.valid, result.window_s, result.items) == (False, False, 0.25, 160)
    for key in ("energy_j", "mean_power_w", "idle_power_w", "energy_per_item_j", "items_per_j"):
        assert getattr(result, key) is None, key
    assert result.as_json()["window_s"] == 0.25
    assert result.as_json()["items"] == 160


def test_as_json_is_plain_json_with_every_field():
    meter, clock = _meter("energy_counter", {"a": 30.0, "b": 20.0})
    meter.idle_w = {"a": 3.0, "b": 2.0}
    result = meter.result(_trace(meter, clock), START, START + S, items=7, rounds_fixed=True)
    data = result.as_json()
    text = json.dumps(data, allow_nan=False)
    back = json.loads(text)
    assert back == data
    assert set(back) == {*PowerRecord.__dataclass_fields__, "scope"}  # scope: derived from the devices
    assert back["scope"] == "cpu-package"
    device = {"name": "fake device a", "scope": "cpu-package", "energy_j": 30.0, "mean_w": 30.0}
    assert [(d.pop("ipus"), d.pop("unused_ipus")) for d in back["devices"]] == [([], [])] * 2  # not IPUs
    assert back["devices"] == [
        pytest.approx({**device, "id": "a", "idle_w": 3.0}),
        pytest.approx(
            {**device, "id": "b", "name": "fake device b", "energy_j": 20.0, "mean_w": 20.0, "idle_w": 2.0}
        ),
    ]
    assert isinstance(back["warnings"], list)
    assert back["warnings"][0].startswith("low confidence")
    assert back["low_confidence"] is True
    assert back["idle_power_w"] == 5.0
    assert back["method"] == "counter"
    assert back["integration"] == "counter_delta"


# -- minimum window and sampling rate --------------------------------------------------------------


@pytest.mark.parametrize(
    ("period", "expected"), [(None, 5.0), (0.0, 5.0), (0.001, 5.0), (0.1, 5.0), (0.25, 5.0), (1.0, 20.0)]
)
def test_min_window_is_5_s_or_20_sensor_periods(period, expected):
    assert min_window_s(period) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("requested", "period", "kind", "expected"),
    [
        # power sensors: twice their rate, within [10 Hz, 1 kHz]
        (None, 0.1, "instant_power", 20.0),
        (None, 0.02, "average_power", 100.0),
        (None, 0.01, "instant_power", 200.0),
        (None, 0.001, "instant_power", 1000.0),  # 2 kHz capped
        (None, 1.0, "instant_power", 10.0),  # 2 Hz raised to the floor
        # energy counters: ten times their rate, capped at 100 Hz; those refreshing within 10 ms
        # are read at the window's edges instead, and at 2 Hz between them to unwrap
        (None, 0.5, "energy_counter", 20.0),
        (None, 0.1, "energy_counter", 100.0),
        (None, 0.011, "energy_counter", 100.0),
        (None, 0.01, "energy_counter", 2.0),
        (None, 0.001, "energy_counter", 2.0),  # RAPL
        (None, 5.0, "energy_counter", 10.0),
        # an unknown update period: 100 Hz, fast enough for a 100 ms sensor (docs/power.md)
        (None, None, "instant_power", 100.0),
        (None, 0.0, "average_power", 100.0),
        (None, None, "energy_counter", 100.0),
        # an explicit rate wins, outside the automatic bounds too
        (3.0, 0.001, "instant_power", 3.0),
        (5000.0, 0.1, "energy_counter", 5000.0),
        (50.0, None, "average_power", 50.0),
    ],
)
def test_sample_hz(requested, period, kind, expected):
    assert sample_hz(requested, period, kind) == pytest.approx(expected)


def test_the_default_kind_of_sample_hz_is_a_power_sensor():
    assert sample_hz(None, 0.01) == pytest.approx(200.0)


@pytest.mark.parametrize(("kind", "expected"), [("instant_power", 200.0), ("energy_counter", 2.0)])
def test_meter_rate_uses_the_source_period_and_kind(kind, expected):
    assert PowerMeter(FakePowerSource(kind, update_period_s=0.01)).rate_hz == pytest.approx(expected)
    assert PowerMeter(FakePowerSource(kind), hz=33.0).rate_hz == 33.0


# -- open and close ---------------------------------------------------------------------------------


def test_close_closes_the_source_and_is_safe_twice():
    closed = []
    source = FakePowerSource(on_close=lambda: closed.append(True))
    meter = PowerMeter(source, idle_s=0)
    meter.open()
    meter.close()
    assert source.closes >= 1
    assert closed == [True]
    with pytest.raises(PowerSourceError, match="not open"):
        source.read()
    meter.close()  # idempotent: no error (sources' close is idempotent too)
    assert closed == [True]


def test_open_error_propagates():
    source = FakePowerSource(open_error="fake: no such device")
    meter = PowerMeter(source, idle_s=0)
    with pytest.raises(PowerSourceError, match="fake: no such device"):
        meter.open()


def test_close_after_a_failed_open_releases_the_source():
    """RunMeters._open_meter closes the meter after 'failed to open': that must reach the source,
    which may hold half-acquired handles (nvmlInit without nvmlShutdown)."""
    source = FakePowerSource(open_error="fake: half-initialised")
    meter = PowerMeter(source, idle_s=0)
    with pytest.raises(PowerSourceError):
        meter.open()
    meter.close()
    assert source.closes == 1
