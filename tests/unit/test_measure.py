"""The round plan, the warm-up and the timed window (pytest_ipu.measure.timing), on fake clocks."""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.errors import CallTimeout
from pytest_ipu.measure import timing as measure
from pytest_ipu.measure.timing import MAX_AUTO_ROUNDS
from tests.waiting import wait_for

needs_alarm = pytest.mark.skipif(
    measure.TIMEOUT_SIGNAL is None or not hasattr(signal, "pthread_kill"),
    reason="the call timeout is enforced with SIGALRM and pthread_kill (POSIX only)",
)


class ScriptedClock:
    """A clock returning the given nanosecond readings in order; fails if read too often."""

    def __init__(self, readings: Sequence[int]) -> None:
        self.readings = list(readings)
        self.reads = 0

    def __call__(self) -> int:
        assert self.reads < len(self.readings), "clock read more often than scripted"
        value = self.readings[self.reads]
        self.reads += 1
        return value


class SimulatedClock:
    """A clock that only moves when told to (by the fake target or the fake benchmark)."""

    def __init__(self, start: int = 1_000) -> None:
        self.now = start
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.now


class FakeBenchmark:
    """Mimics pytest-benchmark 5.3's ``benchmark.pedantic`` control flow (BenchmarkFixture._raw_pedantic).

    Per round: ``setup()`` (a truthy return would replace the arguments, which pytest-benchmark
    rejects when ``args`` are given), ``target(*args)``, then ``teardown(*args)``. ``overhead_ns``
    advances the clock between rounds, as pytest-benchmark's own bookkeeping does.
    """

    def __init__(self, clock: SimulatedClock, overhead_ns: int = 0) -> None:
        self.clock = clock
        self.overhead_ns = overhead_ns
        self.calls: list[dict[str, object]] = []
        self.events: list[str] = []
        self.has_error = False

    def pedantic(
        self,
        target: Callable[..., object],
        args: Sequence[object] = (),
        kwargs: dict[str, object] | None = None,
        setup: Callable[[], object] | None = None,
        teardown: Callable[..., object] | None = None,
        rounds: int = 1,
        warmup_rounds: int = 0,
        iterations: int = 1,
    ) -> object:
        self.calls.append(
            {"args": args, "kwargs": kwargs, "rounds": rounds, "warmup": warmup_rounds, "iters": iterations}
        )
        assert isinstance(rounds, int)
        assert rounds >= 1
        assert not (iterations > 1 and setup), "pytest-benchmark rejects iterations > 1 with a setup"
        kwargs = kwargs or {}
        result = None
        try:
            for _ in range(warmup_rounds + rounds):
                if setup is not None:
                    self.events.append("setup")
                    returned = setup()
                    assert returned is None, "a truthy setup() return replaces the arguments"
                self.events.append("target")
                result = target(*args, **kwargs)
                if teardown is not None:
                    self.events.append("teardown")
                    teardown(*args, **kwargs)
                self.clock.now += self.overhead_ns
        except Exception:
            self.has_error = True  # as pytest-benchmark does: such a benchmark leaves its JSON
            raise
        return result

    def rounds_ended_early(self) -> None:
        self.has_error = False  # as bench_seam.Timer does


# -- plan_rounds ----------------------------------------------------------------------------------


@pytest.mark.parametrize("estimate_s", [0.0, 1e-9, 0.01, 100.0])
def test_plan_fixed_rounds_win(estimate_s):
    assert measure.plan_rounds(7, estimate_s, max_time_s=2.0, min_rounds=50) == 7
    assert measure.plan_rounds(20_000, estimate_s, max_time_s=2.0, min_rounds=5) == 20_000


@pytest.mark.parametrize(
    ("estimate_s", "max_time_s", "min_rounds", "expected"),
    [
        (0.01, 2.0, 5, 250),  # 200 fit: planned with a quarter of headroom (the time box ends them)
        (0.3, 1.0, 1, 5),  # 4.17 rounds fit in 1.25 s: rounded up
        (1.0, 2.0, 5, 5),  # only 2 fit: min_rounds
        (10.0, 2.0, 5, 5),  # none fit: min_rounds
        (1e-6, 2.0, 5, MAX_AUTO_ROUNDS),  # 2 million fit: capped
        (0.0, 2.0, 5, MAX_AUTO_ROUNDS),  # too fast to time: capped
        (-1e-9, 2.0, 5, MAX_AUTO_ROUNDS),
    ],
)
def test_plan_auto_rounds(estimate_s, max_time_s, min_rounds, expected):
    assert measure.plan_rounds(None, estimate_s, max_time_s, min_rounds) == expected


def test_plan_min_rounds_beats_the_cap():
    assert measure.plan_rounds(None, 1e-6, 2.0, MAX_AUTO_ROUNDS + 5) == MAX_AUTO_ROUNDS + 5


@pytest.mark.parametrize("estimate_s", [0.0, 1e-6, 0.01, 10.0])
def test_a_window_that_must_reach_the_budget_plans_every_round_the_time_box_may_need(estimate_s):
    # An energy window: the time box alone ends its rounds, whatever the estimate said.
    assert measure.plan_rounds(None, estimate_s, 5.0, 5, reach_budget=True) == MAX_AUTO_ROUNDS
    assert measure.plan_rounds(None, estimate_s, 5.0, MAX_AUTO_ROUNDS + 5, reach_budget=True) == (
        MAX_AUTO_ROUNDS + 5
    )
    assert measure.plan_rounds(7, estimate_s, 5.0, 5, reach_budget=True) == 7  # fixed rounds still win


@settings(max_examples=100, deadline=None)
@given(
    st.floats(min_value=1e-7, max_value=100.0),
    st.floats(min_value=1e-3, max_value=60.0),
    st.integers(min_value=1, max_value=1_000),
)
def test_plan_auto_rounds_property(estimate_s, max_time_s, min_rounds):
    n = measure.plan_rounds(None, estimate_s, max_time_s, min_rounds)
    assert min_rounds <= n <= MAX_AUTO_ROUNDS
    room = measure.HEADROOM * max_time_s
    fit = math.ceil(room / estimate_s)
    if min_rounds < n < MAX_AUTO_ROUNDS:
        # Not clamped: just enough rounds to fill the budget and its headroom.
        assert n * estimate_s >= room * (1 - 1e-12)
        assert (n - 1) * estimate_s < room * (1 + 1e-12)
        assert n == fit
    if n == MAX_AUTO_ROUNDS:
        assert fit >= MAX_AUTO_ROUNDS
    if n == min_rounds:
        assert fit <= min_rounds


# -- warm_up --------------------------------------------------------------------------------------


def test_warm_up_times_first_call_and_each_round():
    calls = []
    # first call: 5 us; warm-ups: 300 ns, 200 ns, 900 ns (gaps between calls are not counted)
    clock = ScriptedClock([0, 5_000, 5_000, 5_300, 6_000, 6_200, 7_000, 7_900])
    result = measure.warm_up(lambda *a: calls.append(a), ("x", 2), rounds=3, clock=clock)
    assert calls == [("x", 2)] * 4
    assert clock.reads == 8
    assert result.first_call_s == pytest.approx(5e-6, rel=1e-12)
    assert result.warmup_s == pytest.approx((300e-9, 200e-9, 900e-9), rel=1e-12)
    assert len(result.warmup_s) == 3
    assert result.estimate_s == pytest.approx(300e-9, rel=1e-12)  # the median


def test_warm_up_estimate_is_median_of_even_count():
    clock = ScriptedClock([0, 10, 10, 110, 110, 410])
    result = measure.warm_up(lambda: None, (), rounds=2, clock=clock)
    assert result.estimate_s == pytest.approx(200e-9, rel=1e-12)


def test_warm_up_without_rounds_estimates_from_first_call():
    calls = []
    clock = ScriptedClock([1_000_000, 3_000_000])
    result = measure.warm_up(lambda: calls.append(1), (), rounds=0, clock=clock)
    assert calls == [1]
    assert result.first_call_s == pytest.approx(2e-3, rel=1e-12)
    assert result.warmup_s == ()
    assert result.estimate_s == result.first_call_s


def test_warm_up_estimate_ignores_slow_first_call():
    w = measure.WarmUp(first_call_s=30.0, warmup_s=(0.1, 0.5, 0.2))
    assert w.estimate_s == 0.2


# -- timed_rounds ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rounds", [1, 2, 5])
def test_timed_rounds_window_spans_first_start_to_last_end(rounds):
    clock = SimulatedClock(start=1_000)
    bench = FakeBenchmark(clock, overhead_ns=7)
    seen = []
    durations = iter([100, 250, 40, 90, 60])

    def fn(*args):
        seen.append(args)
        clock.now += next(durations)

    window = measure.timed_rounds(bench, fn, ["a", 1], rounds, clock=clock).seconds

    expected_ns = sum([100, 250, 40, 90, 60][:rounds]) + 7 * (rounds - 1)
    assert window == pytest.approx(expected_ns * 1e-9, rel=1e-12)
    assert seen == [("a", 1)] * rounds
    assert bench.calls == [{"args": ("a", 1), "kwargs": None, "rounds": rounds, "warmup": 0, "iters": 1}]
    assert bench.events == ["setup", "target", "teardown"] * rounds
    # One start mark, one end mark per round: the clock is read outside the timed calls only.
    assert clock.reads == rounds + 1


def test_timed_rounds_with_scripted_clock():
    # start, then end of rounds 1..3: the window is last end minus first start.
    clock = ScriptedClock([10_000, 12_000, 15_000, 19_500])
    bench = FakeBenchmark(SimulatedClock())
    window = measure.timed_rounds(bench, lambda: None, (), 3, clock=clock).seconds
    assert window == pytest.approx(9_500e-9, rel=1e-12)
    assert clock.reads == 4


def test_edge_callbacks_run_once_just_outside_the_window():
    clock = ScriptedClock([10_000, 12_000, 15_000, 19_500])
    bench = FakeBenchmark(SimulatedClock())
    seen: list[tuple[str, int]] = []
    result = measure.timed_rounds(
        bench,
        lambda: bench.events.append("call"),
        (),
        3,
        clock=clock,
        on_start=lambda: seen.append(("start", clock.reads)),
        on_end=lambda: seen.append(("end", clock.reads)),
    )
    # on_start before the first clock read (the window opens after it); on_end after the last.
    assert seen == [("start", 0), ("end", 4)]
    assert (result.start_ns, result.end_ns, result.rounds, result.ended) == (10_000, 19_500, 3, "planned")


class LoggedClock:
    """A clock that logs its reads under its name into a shared log, returning ``step`` more ns each
    read: the order of reads of several clocks is then in the log."""

    def __init__(self, name: str, log: list[str], step: int) -> None:
        self.name = name
        self.log = log
        self.step = step
        self.now = 0

    def __call__(self) -> int:
        self.log.append(self.name)
        self.now += self.step
        return self.now


def test_each_round_gets_its_thread_and_process_cpu_time_from_two_reads_per_round() -> None:
    bench = FakeBenchmark(SimulatedClock())
    thread = ScriptedClock([100, 130, 200, 210])
    process = ScriptedClock([1_000, 1_050, 1_200, 1_230])
    window = measure.timed_rounds(
        bench,
        lambda: None,
        (),
        3,
        clock=ScriptedClock([0, 500, 1_000, 1_500]),
        clocks=measure.WindowClocks(thread=thread, process=process),
    )
    # Each round's CPU time: from the end of the round before (the window's start) to its own end.
    assert window.thread_cpu_ns == (30, 70, 10)
    assert window.process_cpu_ns == (50, 150, 30)
    # One read of each at the start, then one of each per round: two extra reads per round.
    assert (thread.reads, process.reads) == (4, 4)
    assert window.start_unix_ns is not None
    assert window.start_unix_ns > 0


def test_the_workers_clock_is_read_with_the_process_clock_and_gives_each_round_its_workers_cpu_time() -> None:
    log: list[str] = []
    bench = FakeBenchmark(SimulatedClock())
    workers = LoggedClock("workers", log, 40)
    window = measure.timed_rounds(
        bench,
        lambda: log.append("call"),
        (),
        2,
        clock=LoggedClock("wall", log, 1),
        clocks=measure.WindowClocks(
            thread=LoggedClock("thread", log, 1), process=LoggedClock("process", log, 1), workers=workers
        ),
    )
    assert log == [
        "wall", "thread", "process", "workers",
        "call", "thread", "process", "workers", "wall",
        "call", "thread", "process", "workers", "wall",
    ]  # fmt: skip
    assert window.workers_cpu_ns == (40, 40)
    # Without worker processes there is no workers' clock, and no figure for it.
    alone = measure.timed_rounds(FakeBenchmark(SimulatedClock()), lambda: None, (), 2)
    assert alone.workers_cpu_ns == ()


def test_the_cpu_clocks_are_read_inside_the_wall_marks_and_outside_the_calls() -> None:
    log: list[str] = []
    bench = FakeBenchmark(SimulatedClock())
    measure.timed_rounds(
        bench,
        lambda: log.append("call"),
        (),
        2,
        clock=LoggedClock("wall", log, 1),
        clocks=measure.WindowClocks(
            thread=LoggedClock("thread", log, 1),
            process=LoggedClock("process", log, 1),
            wall=LoggedClock("unix", log, 1),
        ),
    )
    # The CPU reads after the opening wall mark and before each closing one, so the CPU time they
    # span lies within the wall window (the off-CPU share is never negative); none inside a call.
    # The Unix clock once, just before the window opens: the edge other processes can compare.
    assert log == [
        "unix", "wall", "thread", "process",
        "call", "thread", "process", "wall",
        "call", "thread", "process", "wall",
    ]  # fmt: skip


def test_rounds_ended_by_the_time_box_have_one_cpu_time_each() -> None:
    clock = SimulatedClock()
    bench = FakeBenchmark(clock)
    window = measure.timed_rounds(
        bench, _ticking(clock, [100] * 50), (), 50, clock=clock, box=measure.TimeBox(budget_s=430e-9)
    )
    assert window.rounds == len(window.thread_cpu_ns) == len(window.process_cpu_ns) == 4


# -- the time box ----------------------------------------------------------------------------------


def _ticking(clock: SimulatedClock, durations: Sequence[int]) -> Callable[[], None]:
    it = iter(durations)

    def fn() -> None:
        clock.now += next(it)

    return fn


def test_auto_rounds_end_once_the_window_reaches_the_budget() -> None:
    clock = SimulatedClock()
    bench = FakeBenchmark(clock)
    ends: list[int] = []
    # 100 ns calls, a 430 ns budget: after 4 rounds (400 ns) a fifth would end 70 ns past it, 30 ns
    # further than the window now falls short: the rounds end at the nearer boundary, 400 ns.
    window = measure.timed_rounds(
        bench,
        _ticking(clock, [100] * 50),
        (),
        50,
        clock=clock,
        on_end=lambda: ends.append(clock.now),
        box=measure.TimeBox(budget_s=430e-9, min_rounds=1),
    )
    assert (window.rounds, window.ended, window.end_ns - window.start_ns) == (4, "budget", 400)
    assert bench.events.count("target") == 4
    assert ends == [window.end_ns]  # the energy edge is read once, at the window's end
    assert bench.has_error is False  # the end is the plan: pytest-benchmark keeps the rounds


def test_a_budget_nearer_the_next_boundary_takes_one_more_round() -> None:
    clock = SimulatedClock()
    bench = FakeBenchmark(clock)
    # A 470 ns budget: 4 rounds fall 70 ns short, a fifth ends 30 ns past it: five rounds.
    window = measure.timed_rounds(
        bench, _ticking(clock, [100] * 50), (), 50, clock=clock, box=measure.TimeBox(budget_s=470e-9)
    )
    assert (window.rounds, window.ended) == (5, "budget")


def test_minimum_rounds_run_past_the_budget() -> None:
    clock = SimulatedClock()
    bench = FakeBenchmark(clock)
    window = measure.timed_rounds(
        bench,
        _ticking(clock, [100] * 50),
        (),
        50,
        clock=clock,
        box=measure.TimeBox(budget_s=150e-9, min_rounds=7),
    )
    assert (window.rounds, window.ended) == (7, "budget")


def test_the_cap_ends_rounds_below_the_minimum() -> None:
    clock = SimulatedClock()
    bench = FakeBenchmark(clock)
    # Calls slow down 10x after the third: the cap (1 us) ends the rounds before the 20 minimum.
    window = measure.timed_rounds(
        bench,
        _ticking(clock, [100, 100, 100] + [1_000] * 47),
        (),
        50,
        clock=clock,
        box=measure.TimeBox(budget_s=200e-9, min_rounds=20, cap_s=1e-6),
    )
    assert (window.rounds, window.ended) == (4, "cap")
    assert window.end_ns - window.start_ns == 1_300


def test_fixed_rounds_run_every_round() -> None:
    clock = SimulatedClock()
    bench = FakeBenchmark(clock)
    window = measure.timed_rounds(bench, _ticking(clock, [100] * 9), (), 9, clock=clock)
    assert (window.rounds, window.ended) == (9, "planned")


# -- calibration ----------------------------------------------------------------------------------


def test_calibration_doubles_the_batch_until_it_lasts_the_stretch() -> None:
    clock = SimulatedClock()
    calls = []

    def fn() -> None:
        calls.append(1)
        clock.now += 1_000  # 1 us a call

    found = measure.calibrate(fn, (), stretch_s=10e-6, clock=clock)
    # Batches of 1, 2, 4, 8 (8 us, short) and 16 (16 us): the last one decides.
    assert (found.calls, found.total_calls, len(calls)) == (16, 31, 31)
    assert found.estimate_s == pytest.approx(1e-6)


def test_calibration_stops_at_the_most_calls() -> None:
    clock = SimulatedClock()
    found = measure.calibrate(lambda: None, (), stretch_s=1.0, clock=clock, max_calls=8)
    assert (found.calls, found.batch_s) == (8, 0.0)


# -- bounded warm-up and calibration ---------------------------------------------------------------


def test_warm_up_stops_once_its_rounds_have_lasted_the_budget() -> None:
    # First call 5 s (never counted), then warm-up calls of 0.4 s: 0.4, 0.8, 1.2 >= 1 s -> three ran.
    readings = [0, 5_000_000_000]
    for i in range(10):
        readings += [10_000_000_000 + i * 400_000_000, 10_000_000_000 + (i + 1) * 400_000_000]
    calls: list[int] = []
    result = measure.warm_up(
        lambda: calls.append(1), (), rounds=10, clock=ScriptedClock(readings), budget_s=1.0
    )
    assert (result.first_call_s, len(result.warmup_s), len(calls)) == (5.0, 3, 4)


def test_warm_up_without_a_budget_runs_every_round() -> None:
    result = measure.warm_up(lambda: None, (), rounds=4, clock=SimulatedClock())
    assert len(result.warmup_s) == 4


def test_calibration_stops_at_its_limit_and_estimates_from_the_cut_batch() -> None:
    clock = SimulatedClock()
    calls = []

    def fn() -> None:
        calls.append(1)
        # 1 us a call for the first 7 calls (batches 1, 2, 4), then 1 s a call: the slowdown arrives
        # in the batch of 8, which would last 8 s without the limit.
        clock.now += 1_000 if len(calls) <= 7 else 1_000_000_000

    found = measure.calibrate(fn, (), stretch_s=10.0, clock=clock, limit_s=2.0)
    assert found.limited
    # The limit (2 s) is reached after the second slow call of the batch of 8.
    assert (found.calls, found.total_calls, len(calls)) == (2, 9, 9)
    assert found.estimate_s == pytest.approx(1.0)


def test_calibration_within_its_limit_is_unchanged() -> None:
    clock = SimulatedClock()

    def fn() -> None:
        clock.now += 1_000

    found = measure.calibrate(fn, (), stretch_s=10e-6, clock=clock, limit_s=1.0)
    assert (found.calls, found.total_calls, found.limited) == (16, 31, False)


# -- the call watchdog -----------------------------------------------------------------------------


class FakeTime:
    """A monotonic clock in seconds that only the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _after_two_polls(dog: measure.Watchdog) -> None:
    """Wait until the watchdog has looked twice more: one full look after whatever the test changed."""
    target = dog.polls + 2
    wait_for(lambda: dog.polls >= target, "two more looks by the watchdog's thread", poll_s=0.001)


def test_watchdog_counts_records_and_names_the_running_call() -> None:
    watch = measure.CallWatch(repeat=2)
    watch.enter("timed round {n}")
    watch.done += 4
    assert watch.running() == "timed round 5 of repeat 2"
    watch.enter("warm-up call {n}")
    assert watch.running() == "warm-up call 1 of repeat 2"


@needs_alarm
def test_calls_that_progress_are_never_interrupted_however_long_they_last_together() -> None:
    clock = FakeTime()
    dog = measure.Watchdog(10.0, poll_s=0.001, clock=clock)
    with dog as watch:
        watch.enter("warm-up call {n}")
        for _ in range(5):  # five calls of 6 s each: 30 s in all, three timeouts' worth
            clock.now += 6.0
            _after_two_polls(dog)
            watch.done += 1
            _after_two_polls(dog)
    assert dog.fired is None


@needs_alarm
def test_a_call_without_progress_past_the_timeout_is_interrupted_naming_it() -> None:
    clock = FakeTime()
    dog = measure.Watchdog(10.0, repeat=3, poll_s=0.001, clock=clock)

    def nineteen_rounds_then_a_hang() -> None:
        with dog as watch:
            watch.enter("timed round {n}")
            watch.done += 19
            _after_two_polls(dog)
            clock.now += 10.0
            threading.Event().wait()  # blocks until the watchdog's signal ends the wait

    with pytest.raises(CallTimeout) as info:
        nineteen_rounds_then_a_hang()
    assert str(info.value) == (
        "pytest-ipu: timed round 20 of repeat 3 was still running after the call timeout of 10s "
        "(--ipu-call-timeout, or the ipu marker's call_timeout=): the model hangs or its calls are slower "
        "than that; if they really are, raise it, e.g. --ipu-call-timeout=30min"
    )


@needs_alarm
def test_a_real_blocking_sleep_is_interrupted() -> None:
    still_running = "the first call of repeat 1 was still running"
    with pytest.raises(CallTimeout, match=still_running), measure.Watchdog(0.2):
        time.sleep(3600)


@needs_alarm
def test_the_handler_is_ours_only_inside_the_block_and_passes_on_alien_alarms() -> None:
    assert measure.TIMEOUT_SIGNAL is not None
    seen: list[int] = []

    def previous(signum: int, frame: object) -> None:
        seen.append(signum)

    before = signal.signal(measure.TIMEOUT_SIGNAL, previous)
    try:
        with measure.Watchdog(600.0):
            assert signal.getsignal(measure.TIMEOUT_SIGNAL) is not previous
            signal.raise_signal(measure.TIMEOUT_SIGNAL)  # pytest-timeout's alarm, say: not ours
        assert seen == [measure.TIMEOUT_SIGNAL]
        assert signal.getsignal(measure.TIMEOUT_SIGNAL) is previous
    finally:
        signal.signal(measure.TIMEOUT_SIGNAL, before)


def test_no_enforcement_without_a_timeout_or_off_the_main_thread() -> None:
    assert not measure.Watchdog(None).enforced
    found: list[bool] = []
    thread = threading.Thread(target=lambda: found.append(measure.Watchdog(1.0).enforced))
    thread.start()
    thread.join()
    assert found == [False]
    with measure.Watchdog(None) as watch:  # the loops still get a watch to count on
        watch.done += 1
