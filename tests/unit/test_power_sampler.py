"""The power sampler: midpoint timestamps, a fixed grid, missed reads, errors and thread lifetime.

Most tests drive the sampler on a fake clock with a fake ``wait`` that moves that clock, so the
schedule is exact; the sampling thread then only ever runs while the main thread waits for it.
The tests on the real clock assert what holds however busy the machine is (the readings bracket
the block and every grid point is read or counted as missed), never a rate: the achieved rate is
measured by benchmarks/test_power_sampling.py.
"""

from __future__ import annotations

import math
import threading
import time

import pytest

from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.power.sampler import PowerSampler
from pytest_ipu.power.sampler import Trace
from pytest_ipu.power.sampler import next_deadline
from tests.fakes.fake_power import FakePowerSource
from tests.waiting import HANG_S
from tests.waiting import wait_for

MS = 1_000_000  # ns per millisecond
T0 = 1_000_000 * MS  # where the fake clock starts (1000 s)


class FakeClock:
    """Nanoseconds that move only when told to."""

    def __init__(self) -> None:
        self.ns = T0

    def __call__(self) -> int:
        return self.ns

    def advance_ns(self, ns: int) -> None:
        self.ns += ns


class FakeWait:
    """The sampler's ``wait``: moves the fake clock by the time asked, and says "stop" on wait
    number ``stop_at`` (without moving the clock), which ends the sampling loop."""

    def __init__(self, clock: FakeClock, stop_at: int) -> None:
        self.clock = clock
        self.stop_at = stop_at
        self.calls: list[int] = []  # nanoseconds asked for, one entry per call

    def __call__(self, seconds: float) -> bool:
        ns = round(seconds * 1e9)
        self.calls.append(ns)
        if len(self.calls) >= self.stop_at:
            return True
        self.clock.advance_ns(ns)
        return False


def _latency(clock: FakeClock, per_read_ns: dict[int, int], default_ns: int):
    """``on_read`` for the fake source: read number ``i`` takes ``per_read_ns.get(i, default_ns)``."""

    def on_read(index: int) -> None:
        clock.advance_ns(per_read_ns.get(index, default_ns))

    return on_read


def _run_until_the_loop_ends(sampler: PowerSampler) -> Trace:
    """Enter the sampler, let its thread run until the fake wait stops it, and leave."""
    with sampler as trace:
        thread = sampler._thread
        assert thread is not None
        thread.join(timeout=10)
        assert not thread.is_alive()
    return trace


# -- next_deadline (pure) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "start", "period", "expected"),
    [
        (0, 0, 10, 10),  # at the start: the next grid point
        (10, 0, 10, 20),  # exactly on a grid point: the one after it ("after now")
        (11, 0, 10, 20),
        (19, 0, 10, 20),
        (45, 0, 10, 50),  # late by several periods: skips to the first point ahead
        (1_005, 1_000, 10, 1_010),  # grid anchored at start, not at 0
        (1_003, 997, 7, 1_004),  # 997 + 7k
        (5, 100, 10, 10),  # now before start: the first grid point after now, still on the grid
    ],
)
def test_next_deadline_is_the_first_grid_point_after_now(now, start, period, expected):
    got = next_deadline(now, start, period)
    assert got == expected
    assert got > now
    assert (got - start) % period == 0


# -- timestamps and schedule on a fake clock ---------------------------------------------------------


def test_readings_are_timestamped_at_the_midpoint_of_the_read():
    clock = FakeClock()
    latencies = {0: 2 * MS, 1: 3 * MS, 2: 1 * MS, 3: 5}  # odd ns: the midpoint is floored
    source = FakePowerSource(clock=clock, on_read=_latency(clock, latencies, 0))
    source.open()
    sampler = PowerSampler(source, hz=100, clock=clock, wait=FakeWait(clock, stop_at=3))
    trace = _run_until_the_loop_ends(sampler)
    # first read in start(), two by the thread, the last one in __exit__
    assert source.reads == 4
    expected = [(b + (b + latencies[i])) // 2 for i, b in enumerate(source.read_started_ns)]
    assert trace.t_ns == expected
    assert trace.values == [{"fake:0": 50.0}] * 4
    assert trace.error is None


def test_reads_start_on_the_grid_anchored_at_the_first_reading():
    clock = FakeClock()
    period = 10 * MS
    latency = 1 * MS
    source = FakePowerSource(clock=clock, on_read=_latency(clock, {}, latency))
    source.open()
    wait = FakeWait(clock, stop_at=8)
    sampler = PowerSampler(source, hz=100, clock=clock, wait=wait)
    trace = _run_until_the_loop_ends(sampler)
    start = trace.t_ns[0]
    assert start == T0 + latency // 2
    # reads 1..7 were made by the thread, each starting exactly at start + k * period
    thread_reads = source.read_started_ns[1:8]
    assert thread_reads == [start + k * period for k in range(1, 8)]
    assert trace.t_ns[1:8] == [start + k * period + latency // 2 for k in range(1, 8)]
    # each wait asked for exactly the time left to the next grid point (no drift accumulates)
    assert wait.calls[0] == period - latency // 2
    assert wait.calls[1:7] == [period - latency] * 6
    assert trace.missed == 0
    assert trace.requested_hz == 100


def test_a_slow_read_skips_grid_points_and_counts_them_as_missed():
    clock = FakeClock()
    period = 10 * MS
    # read 2 (the second by the thread, at start + 2 periods) takes 2.5 periods: the grid points
    # at start + 3 and start + 4 periods pass while it runs
    source = FakePowerSource(clock=clock, on_read=_latency(clock, {2: 25 * MS}, 1 * MS))
    source.open()
    sampler = PowerSampler(source, hz=100, clock=clock, wait=FakeWait(clock, stop_at=6))
    trace = _run_until_the_loop_ends(sampler)
    start = trace.t_ns[0]
    assert source.read_started_ns[1:6] == [start + k * period for k in (1, 2, 5, 6, 7)]
    assert trace.missed == 2


def test_a_read_overrunning_one_grid_point_misses_exactly_that_one():
    clock = FakeClock()
    # a 15 ms read at a 10 ms period ends after the next grid point, which is skipped, not caught up
    source = FakePowerSource(clock=clock, on_read=_latency(clock, {1: 15 * MS}, 0))
    source.open()
    trace = _run_until_the_loop_ends(PowerSampler(source, 100, clock=clock, wait=FakeWait(clock, 4)))
    start = trace.t_ns[0]
    assert source.read_started_ns[1:4] == [start + 10 * MS, start + 30 * MS, start + 40 * MS]
    assert trace.missed == 1


def test_stop_requested_by_wait_ends_the_loop_without_another_read():
    clock = FakeClock()
    source = FakePowerSource(clock=clock)
    source.open()
    trace = _run_until_the_loop_ends(PowerSampler(source, 100, clock=clock, wait=FakeWait(clock, 1)))
    assert source.reads == 2  # start() and __exit__ only
    assert len(trace.t_ns) == 2


# -- errors ------------------------------------------------------------------------------------------


def test_a_read_error_in_the_thread_is_kept_in_the_trace_and_ends_the_thread():
    clock = FakeClock()
    source = FakePowerSource(clock=clock, read_error_at=3, on_read=_latency(clock, {}, MS))
    source.open()
    sampler = PowerSampler(source, hz=100, clock=clock, wait=FakeWait(clock, stop_at=1_000))
    with sampler as trace:
        thread = sampler._thread
        assert thread is not None
        thread.join(timeout=10)
        # it ended on its own, long before the wait would have said stop
        assert not thread.is_alive()
        assert isinstance(trace.error, PowerSourceError)
        assert "read 3 failed" in str(trace.error)
        assert len(trace.t_ns) == 3  # reads 0..2; the failed read left no half-reading behind
        assert len(trace.values) == len(trace.t_ns)
    assert sampler._thread is None
    assert trace.error is not None  # still there after the block


def test_a_read_error_in_start_propagates_and_starts_no_thread():
    source = FakePowerSource(read_error_at=0)
    source.open()
    sampler = PowerSampler(source, hz=100)
    before = threading.active_count()
    with pytest.raises(PowerSourceError, match="read 0 failed"), sampler:
        pytest.fail("the block must not run")
    assert sampler._thread is None
    assert threading.active_count() == before


@pytest.mark.parametrize("hz", [0, -1, -0.5, math.nan])
def test_a_rate_that_is_not_positive_is_rejected(hz):
    with pytest.raises(ValueError, match="sampling rate must be > 0 Hz"):
        PowerSampler(FakePowerSource(), hz)


# -- the thread never outlives the block -------------------------------------------------------------


class Boom(Exception):
    pass


@pytest.mark.parametrize("raised", [None, Boom, KeyboardInterrupt])
def test_the_thread_is_joined_on_every_way_out_of_the_block(raised):
    source = FakePowerSource()
    source.open()
    sampler = PowerSampler(source, hz=1000)
    before = threading.active_count()
    seen: list[threading.Thread] = []

    def block() -> None:
        with sampler:
            assert sampler._thread is not None
            seen.append(sampler._thread)
            assert seen[0].is_alive()
            assert threading.active_count() == before + 1
            time.sleep(0.01)
            if raised is not None:
                raise raised("inside the block")

    if raised is None:
        block()
    else:
        with pytest.raises(raised, match="inside the block"):
            block()
    assert sampler._thread is None
    assert not seen[0].is_alive()
    assert threading.active_count() == before
    assert len(sampler.trace.t_ns) >= 2
    assert sampler.trace.error is None


def test_stop_does_not_wait_out_a_long_period():
    source = FakePowerSource()
    source.open()
    sampler = PowerSampler(source, hz=1 / 3600)  # a read every hour
    left = threading.Event()

    def block() -> None:
        with sampler:
            pass
        left.set()

    user = threading.Thread(target=block, daemon=True)
    user.start()
    # Leaving the block stops the thread's hour-long wait instead of waiting it out.
    assert left.wait(HANG_S), "leaving the block waited for the sampling period"
    user.join()
    assert sampler._thread is None
    assert len(sampler.trace.t_ns) == 2  # the first and the last reading only


def test_start_and_stop_without_with():
    source = FakePowerSource()
    source.open()
    sampler = PowerSampler(source, hz=1000)
    trace = sampler.start()
    thread = sampler._thread
    assert thread is not None
    assert thread.is_alive()
    assert thread.daemon  # never keeps the interpreter alive
    wait_for(lambda: len(trace.t_ns) >= 2, "a reading by the thread", poll_s=0.001)
    assert sampler.stop() is trace
    assert not thread.is_alive()
    assert sampler._thread is None
    assert trace.t_ns == sorted(trace.t_ns)
    assert len(trace.t_ns) == len(set(trace.t_ns)) >= 3


# -- the real clock ----------------------------------------------------------------------------------


def test_on_the_real_clock_every_grid_point_is_read_or_counted_as_missed():
    source = FakePowerSource()
    source.open()
    sampler = PowerSampler(source, hz=200)
    period = 5 * MS
    with sampler as trace:
        start = time.perf_counter_ns()
        wait_for(lambda: len(trace.t_ns) >= 6, "five readings by the thread", poll_s=0.001)
        end = time.perf_counter_ns()
    assert trace.error is None
    # readings bracket the window and increase strictly
    assert trace.t_ns[0] <= start
    assert trace.t_ns[-1] >= end
    assert all(b > a for a, b in zip(trace.t_ns, trace.t_ns[1:]))
    # The thread's reads (all but the first and the last reading) plus the reads it skipped are
    # the grid points start + k * period it went through: up to the first one after its last read,
    # which comes no later than one period after the last reading. A loaded machine moves reads
    # into "missed"; it cannot make grid points disappear or appear.
    first, last_by_thread, last = trace.t_ns[0], trace.t_ns[-2], trace.t_ns[-1]
    scheduled = (len(trace.t_ns) - 2) + trace.missed
    assert (last_by_thread - first) / period - 1 < scheduled <= (last - first) / period


# -- Trace helpers -----------------------------------------------------------------------------------


def test_trace_achieved_hz_counts_readings_inside_the_window_only():
    trace = Trace(requested_hz=10, t_ns=[0, 100 * MS, 200 * MS, 300 * MS, 400 * MS])
    assert trace.achieved_hz(100 * MS, 300 * MS) == pytest.approx(3 / 0.2)
    assert trace.achieved_hz(5, 5) == 0.0  # an empty window has no rate, not a division by zero


def test_trace_series_returns_one_device():
    trace = Trace(requested_hz=10, t_ns=[1, 2], values=[{"a": 1.0, "b": 2.0}, {"a": 3.0, "b": 4.0}])
    assert trace.series("b") == ([1, 2], [2.0, 4.0])
    with pytest.raises(KeyError):
        trace.series("c")


def test_the_switch_interval_is_shortened_while_sampling_and_restored_after():
    import sys

    before = sys.getswitchinterval()
    source = FakePowerSource("instant_power", 10.0)
    source.open()
    with PowerSampler(source, 500.0):  # 2 ms period: a 5 ms GIL handoff would skip most reads
        during = sys.getswitchinterval()
    assert during == pytest.approx(0.0002, rel=0.01)
    assert sys.getswitchinterval() == before
    with pytest.raises(Boom), PowerSampler(source, 500.0):
        raise Boom
    assert sys.getswitchinterval() == before
