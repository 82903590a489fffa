"""The timed loop: untimed first call and warm-up, the round plan, and rounds through pytest-benchmark.

Nothing here knows JSON or pytest options. The clock is injectable; the default is
``time.perf_counter_ns``, a monotonic clock with nanosecond resolution. The timed rounds also read
two CPU clocks at every round boundary (``time.thread_time_ns``, the timing thread's CPU time, and
``time.process_time_ns``, the whole process's), injectable as well. ``Watchdog`` bounds each
call (the call timeout): the loops only count the calls they finish (``CallWatch``), a thread
watches the count, and a call that has not finished in time is interrupted by a signal.
"""

from __future__ import annotations

import math
import signal
import statistics
import threading
import time
import typing
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Literal
from typing import Protocol

from pytest_ipu.errors import CallTimeout

#: Most rounds ``auto`` plans: enough for p99 (100) many times over and for a 2 s budget of 20 us calls,
#: with a bounded JSON size (about 2 MB of samples under --benchmark-save-data).
MAX_AUTO_ROUNDS = 100_000

Clock = typing.Callable[[], int]


class PedanticBenchmark(Protocol):
    """What the timed loop needs of a timer: pytest-benchmark's ``benchmark`` fixture (through
    ``bench_seam.Timer``, the same on every version), for every repeat alike."""

    def rounds_ended_early(self) -> None:
        """The rounds were ended on purpose by a raise from ``setup``: keep them (pytest-benchmark
        counts a raise inside ``pedantic`` as an error and leaves such a benchmark out of its JSON)."""

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
        """Run ``target`` for ``rounds`` timed rounds."""


@dataclass(frozen=True)
class WarmUp:
    """Untimed calls before the timed rounds: the first call and the warm-up rounds, in seconds."""

    first_call_s: float
    warmup_s: tuple[float, ...]

    @property
    def estimate_s(self) -> float:
        """Best guess of one round's duration: the warm-up median, else the first call."""
        return statistics.median(self.warmup_s) if self.warmup_s else self.first_call_s


def warm_up(
    fn: Callable[..., object],
    args: Sequence[Any],
    rounds: int,
    clock: Clock = time.perf_counter_ns,
    budget_s: float | None = None,
    watch: CallWatch | None = None,
    first: Callable[[object], None] | None = None,
) -> WarmUp:
    """Call ``fn`` once (the first call), then up to ``rounds`` more times, timing each call.

    ``first`` is given the first call's output once its time is taken (to check it; it may raise).

    With ``budget_s`` the warm-up rounds stop once together they have lasted that long: a slow
    model is warm long before 50 warm-up calls of a minute each are done, and the record's
    ``warmup_rounds`` (``len(warmup_s)``) says how many ran. The first call never counts.
    """
    watch = watch if watch is not None else CallWatch()
    watch.enter("the first call")
    start = clock()
    output = fn(*args)
    first_s = (clock() - start) * 1e-9
    watch.done += 1
    if first is not None:
        first(output)
    del output  # not kept alive through the rounds
    watch.enter("warm-up call {n}")
    durations: list[float] = []
    total_s = 0.0
    for _ in range(rounds):
        if budget_s is not None and total_s >= budget_s:
            break
        start = clock()
        fn(*args)
        elapsed = (clock() - start) * 1e-9
        watch.done += 1
        durations.append(elapsed)
        total_s += elapsed
    return WarmUp(first_s, tuple(durations))


def calibrate(
    fn: Callable[..., object],
    args: Sequence[Any],
    stretch_s: float,
    clock: Clock = time.perf_counter_ns,
    max_calls: int = MAX_AUTO_ROUNDS,
    limit_s: float | None = None,
    watch: CallWatch | None = None,
) -> Calibration:
    """Estimate one call's duration as ``timeit.autorange`` does: time 1, 2, 4, ... calls back to back
    until one batch lasts at least ``stretch_s`` (or ``max_calls`` calls), then divide.

    A batch of calls is far less disturbed by the clock's resolution and by one unlucky call than
    the two warm-up calls are, so the rounds it sizes fill their budget (``plan_rounds``).

    ``limit_s`` bounds the whole calibration (the repeat's budget): calls that slow down in the
    middle of a long batch would otherwise keep it going for up to ``max_calls`` calls. The clock
    is then read after every call (about 50 ns each, inside the batch's time: a round costs more
    than a bare call anyway); the batch running when the limit is reached gives the estimate.
    """
    watch = watch if watch is not None else CallWatch()
    watch.enter("calibration call {n}")
    calls = 1
    total_calls = 0
    deadline = None if limit_s is None else clock() + limit_s * 1e9
    while True:
        start = clock()
        made = 0
        if deadline is None:
            for _ in range(calls):
                fn(*args)
            watch.done += calls
            made = calls
        else:
            while made < calls:
                fn(*args)
                made += 1
                watch.done += 1
                if clock() >= deadline:
                    break
        end = clock()
        elapsed = (end - start) * 1e-9
        total_calls += made
        if elapsed >= stretch_s or made >= max_calls:
            return Calibration(calls=made, batch_s=elapsed, total_calls=total_calls)
        if deadline is not None and end >= deadline:
            # The limit ended the calibration: the batch so far (possibly cut short) is the estimate.
            return Calibration(calls=made, batch_s=elapsed, total_calls=total_calls, limited=True)
        calls = min(calls * 2, max_calls)


@dataclass(frozen=True)
class Calibration:
    """What ``calibrate`` found: the last batch of ``calls`` back-to-back calls lasted ``batch_s``;
    ``total_calls`` were made in all (untimed, like the warm-up)."""

    calls: int
    batch_s: float
    total_calls: int
    #: True when the calibration's time limit (``limit_s``) ended it before a batch lasted the stretch.
    limited: bool = False

    @property
    def estimate_s(self) -> float:
        """One call's duration, seconds."""
        return self.batch_s / self.calls


#: Rounds are planned for this much more than the budget, and the time box ends them at the
#: budget: calls that run faster than calibrated then still fill it.
HEADROOM = 1.25


def plan_rounds(
    fixed: int | None, estimate_s: float, max_time_s: float, min_rounds: int, reach_budget: bool = False
) -> int:
    """Rounds to time: ``fixed`` if given, else as many as fit in ``HEADROOM`` x ``max_time_s``
    (the time box of ``timed_rounds`` ends them once the budget is reached), clamped to
    ``[min_rounds, MAX_AUTO_ROUNDS]``.

    ``reach_budget``: the window must reach the budget (an energy window, the sensor's minimum), so
    ``MAX_AUTO_ROUNDS`` and the time box ends them there: a count from ``estimate_s``, which a
    machine busy while calibrating inflates, would end the rounds short of it."""
    if fixed is not None:
        return fixed
    if reach_budget or estimate_s <= 0:
        fit = MAX_AUTO_ROUNDS
    else:
        fit = math.ceil(HEADROOM * max_time_s / estimate_s)
    return max(min_rounds, min(fit, MAX_AUTO_ROUNDS))


@dataclass(frozen=True)
class TimeBox:
    """When the timed rounds end early: at the round boundary nearest ``budget_s`` once ``min_rounds``
    are done (``None``: run every planned round, as fixed rounds do), and at ``cap_s`` whatever was
    done (``None``: never)."""

    budget_s: float | None = None
    min_rounds: int = 1
    cap_s: float | None = None
    #: False: end only once the window has reached the budget (an energy window must be at least
    #: as long as its sensor needs), instead of at the nearest round boundary.
    nearest: bool = True


#: How timed rounds ended: every planned round ran, the budget was reached, or the cap was.
Ending = Literal["planned", "budget", "cap"]


@dataclass(frozen=True)
class Window:
    """The timed window: its edges (clock ns), the rounds it holds and how it ended."""

    start_ns: int
    end_ns: int
    rounds: int
    ended: Ending
    #: The timing thread's CPU time in each round, ns: from the end of the round before (the start
    #: of the window for the first) to the end of this one, so the call and the bookkeeping between
    #: rounds, as the window's wall time has them. Together they are the window's thread CPU time.
    thread_cpu_ns: tuple[int, ...] = ()
    #: The process's CPU time (every thread) in each round, ns, over the same stretches.
    process_cpu_ns: tuple[int, ...] = ()
    #: The wall-clock time (Unix epoch, ns) when the window opened: the one edge that processes,
    #: and hosts whose clocks are synchronised, can compare (``start_ns`` is this process's own).
    start_unix_ns: int | None = None
    #: The instance worker processes' CPU time in each round, ns, together, as their clocks read at
    #: their replies (``WindowClocks.workers``); empty where no workers ran the rounds.
    workers_cpu_ns: tuple[int, ...] = ()

    @property
    def seconds(self) -> float:
        """The window's wall time."""
        return (self.end_ns - self.start_ns) * 1e-9


class _EndRounds(Exception):
    """Raised from pedantic's setup to end the rounds at the time box; never leaves ``timed_rounds``."""


@dataclass(frozen=True)
class WindowClocks:
    """The clocks ``timed_rounds`` reads beside its round clock, at the window's start and at every
    round's end: the calling thread's CPU time (it runs the rounds) and the process's, ns; the Unix
    wall clock, ns, read once as the window opens; and, where the rounds' calls run in worker
    processes, their CPU time together as their latest replies reported it (``None``: no workers).

    The thread and process CPU clocks are read once each at the window's start and at every round's
    end: two reads per round, between rounds, never inside a round's own time. The CPU reads sit
    inside the wall marks (after the opening one, before each closing one), so the CPU time they
    span lies within the wall window (``Window.thread_cpu_ns``). The Unix clock is read once, just
    before the window opens (``Window.start_unix_ns``), so separate processes' windows can be laid
    side by side. The workers' clock is read with the process clock: each round's difference is the
    workers' CPU time from their reply to the round before to their reply to this one
    (``Window.workers_cpu_ns``)."""

    thread: Clock = time.thread_time_ns
    process: Clock = time.process_time_ns
    wall: Clock = time.time_ns
    workers: Clock | None = None


def timed_rounds(
    benchmark: PedanticBenchmark,
    fn: Callable[..., object],
    args: Sequence[Any],
    rounds: int,
    clock: Clock = time.perf_counter_ns,
    on_start: Callable[[], None] | None = None,
    on_end: Callable[[], None] | None = None,
    box: TimeBox = TimeBox(),
    watch: CallWatch | None = None,
    clocks: WindowClocks = WindowClocks(),
) -> Window:
    """Run up to ``rounds`` timed rounds through ``benchmark.pedantic``; return the window.

    pytest-benchmark times each call; the window runs from just before the first round's call to
    just after the last one's, so it includes pytest-benchmark's bookkeeping between rounds, as a
    wall-clock throughput must. The marks are taken in pedantic's setup/teardown, outside the
    timed calls. ``on_start`` runs just before the window opens and ``on_end`` just after it closes
    (reading an energy counter at the exact edges, say), both outside it.

    ``box`` ends the rounds early: before each round, the window so far (up to the previous round's
    end mark, so no extra clock read) is compared with the budget, and the rounds end at the round
    boundary nearest to it (within half a mean round), and with the cap, which ends them outright.
    Ending is done by raising from pedantic's setup, which pytest-benchmark counts as an error and
    would leave out of its JSON; the rounds it timed are kept (``rounds_ended_early``): an end at
    the time box is the plan, not a failure.

    ``watch`` counts the finished rounds for the call timeout's ``Watchdog`` (one attribute
    increment per round, in the teardown that already runs between rounds: no clock read, no
    system call).

    ``clocks`` are the CPU and Unix clocks read beside the round clock (``WindowClocks`` says
    when, and why there).
    """
    marks = _Marks(rounds, clock, clocks, box, watch if watch is not None else CallWatch(), on_start, on_end)
    try:
        benchmark.pedantic(
            fn,
            args=tuple(args),
            setup=marks.start,
            teardown=marks.end,
            rounds=rounds,
            warmup_rounds=0,
            iterations=1,
        )
    except _EndRounds:
        benchmark.rounds_ended_early()
    return marks.window()


class _Marks:
    """The marks ``timed_rounds`` takes in pedantic's setup (``start``) and teardown (``end``): the
    window's edges, each clock of ``WindowClocks`` at the start and every round's end, the rounds
    ended, and why the rounds ended early, if they did."""

    def __init__(
        self,
        rounds: int,
        clock: Clock,
        clocks: WindowClocks,
        box: TimeBox,
        watch: CallWatch,
        on_start: Callable[[], None] | None,
        on_end: Callable[[], None] | None,
    ) -> None:
        self.rounds, self.clock, self.clocks, self.box = rounds, clock, clocks, box
        self.watch, self.on_start, self.on_end = watch, on_start, on_end
        watch.enter("timed round {n}")
        self.marks: list[int] = []
        # The CPU clocks at the window's start and at each round's end.
        self.thread_marks: list[int] = []
        self.process_marks: list[int] = []
        self.wall_marks: list[int] = []
        self.workers_marks: list[int] = []
        self.ended = 0
        self.reason: list[Ending] = []
        self.budget_ns = None if box.budget_s is None else box.budget_s * 1e9
        self.cap_ns = None if box.cap_s is None else box.cap_s * 1e9

    def _finish(self) -> None:
        if self.on_end is not None:
            self.on_end()

    def _cpu(self) -> None:
        self.thread_marks.append(self.clocks.thread())
        self.process_marks.append(self.clocks.process())
        if self.clocks.workers is not None:
            self.workers_marks.append(self.clocks.workers())

    def start(self) -> None:
        """Open the window before the first round; before each later one, end the rounds at the
        time box (raising ``_EndRounds``)."""
        # Returning None matters: pedantic treats a truthy return as replacement arguments.
        if not self.marks:
            if self.on_start is not None:
                self.on_start()
            self.wall_marks.append(self.clocks.wall())
            self.marks.append(self.clock())
            self._cpu()
            return
        so_far = self.marks[1] - self.marks[0]
        # End at the round boundary nearest the budget: when another round (as long as the mean so
        # far) would take the window further past the budget than it now falls short of it.
        slack = so_far / self.ended / 2 if self.box.nearest else 0.0
        if (
            self.budget_ns is not None
            and so_far + slack >= self.budget_ns
            and self.ended >= self.box.min_rounds
        ):
            self.reason.append("budget")
        elif self.cap_ns is not None and so_far >= self.cap_ns:
            self.reason.append("cap")
        if self.reason:
            self._finish()
            raise _EndRounds

    def end(self, *_: object) -> None:
        """Mark a round's end (the CPU clocks first, then the round clock); close the window after
        the last planned round."""
        self._cpu()
        end = self.clock()
        if len(self.marks) == 2:
            self.marks[1] = end
        else:
            self.marks.append(end)
        self.ended += 1
        self.watch.done += 1
        if self.ended == self.rounds:
            self._finish()

    def window(self) -> Window:
        """The window the marks make."""
        return Window(
            self.marks[0],
            self.marks[1],
            self.ended,
            self.reason[0] if self.reason else "planned",
            thread_cpu_ns=_differences(self.thread_marks),
            process_cpu_ns=_differences(self.process_marks),
            start_unix_ns=self.wall_marks[0] if self.wall_marks else None,
            workers_cpu_ns=_differences(self.workers_marks),
        )


def _differences(marks: Sequence[int]) -> tuple[int, ...]:
    """Each reading minus the one before."""
    return tuple(b - a for a, b in zip(marks, marks[1:]))


class CallWatch:
    """What the loops tell the ``Watchdog``: which kind of call they are making and how many calls
    they have finished. Writing it costs one attribute increment per call, no clock read.

    ``phase`` is the running calls' name, a template whose ``{n}`` is the call's number within the
    phase (``"warm-up call {n}"``), paired with the value of ``done`` when the phase began.
    """

    __slots__ = ("done", "phase", "repeat")

    def __init__(self, repeat: int = 1) -> None:
        self.done = 0
        self.phase: tuple[str, int] = ("the first call", 0)
        self.repeat = repeat

    def enter(self, template: str) -> None:
        """The calls from now on are ``template``'s (one tuple stored: the watchdog reads it whole)."""
        self.phase = (template, self.done)

    def running(self) -> str:
        """The name of the call running now (the one after the ``done`` finished), with the repeat."""
        template, base = self.phase
        return f"{template.format(n=self.done - base + 1)} of repeat {self.repeat}"


#: The signal the watchdog interrupts the main thread with (POSIX only; ``None`` elsewhere).
TIMEOUT_SIGNAL: int | None = getattr(signal, "SIGALRM", None)


class Watchdog:
    """Enforce the call timeout over a block of calls: ``with Watchdog(600.0, repeat=1) as watch``.

    A Python call cannot be stopped from another thread, but the main thread can be interrupted.
    A daemon thread polls ``watch.done`` (and the phase) every ``poll_s`` (a tenth of the timeout,
    at most 1 s); a call that has made no progress for ``timeout_s`` gets the main thread a
    ``SIGALRM`` (``signal.pthread_kill``), whose handler, installed for the block only, raises
    ``CallTimeout`` naming the call. ``time.sleep``, lock and ``Event`` waits, pipe reads and most
    blocking C calls return early to run it; a C call that never returns to the interpreter (a
    hung device driver, say) is not interrupted. The timeout fires between ``timeout_s`` and
    ``timeout_s + poll_s`` after the call began: the thread times the count it sees change, never
    the call itself, so the loops pay one increment per call and the harness no system call.

    Not enforced (the block runs unwatched) without a timeout, off the main thread (a signal
    handler can only be installed there) and where ``SIGALRM`` or ``pthread_kill`` are missing
    (Windows). A ``SIGALRM`` that is not the watchdog's (``pytest-timeout``'s signal method, say)
    goes on to the handler that was installed before.
    """

    def __init__(
        self,
        timeout_s: float | None,
        repeat: int = 1,
        poll_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout_s = timeout_s
        self.clock = clock
        #: How many times the thread has looked (tests order their steps by it).
        self.polls = 0
        self.watch = CallWatch(repeat)
        self.poll_s = poll_s if poll_s is not None else (min(timeout_s / 10, 1.0) if timeout_s else 1.0)
        self.enforced = (
            timeout_s is not None
            and TIMEOUT_SIGNAL is not None
            and hasattr(signal, "pthread_kill")
            and threading.current_thread() is threading.main_thread()
        )
        #: The message to raise, set by the thread just before it signals; ``None``: not fired.
        self.fired: str | None = None
        self._armed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous: Any = None

    def __enter__(self) -> CallWatch:
        if self.enforced:
            assert TIMEOUT_SIGNAL is not None
            self._previous = signal.signal(TIMEOUT_SIGNAL, self._on_signal)
            self._armed = True
            self._thread = threading.Thread(
                target=self._run, args=(threading.get_ident(),), name="pytest-ipu-call-watchdog", daemon=True
            )
            self._thread.start()
        return self.watch

    def __exit__(self, *_: object) -> None:
        if not self.enforced:
            return
        assert TIMEOUT_SIGNAL is not None
        assert self._thread is not None
        # Disarm first: a signal already sent for a call that then finished must not raise later.
        self._armed = False
        self._stop.set()
        self._thread.join()
        signal.signal(TIMEOUT_SIGNAL, self._previous)

    def message(self, call: str) -> str:
        """The one line a timed-out call fails its test with."""
        return (
            f"pytest-ipu: {call} was still running after the call timeout of {self.timeout_s:g}s "
            "(--ipu-call-timeout, or the ipu marker's call_timeout=): the model hangs or its calls are "
            "slower than that; if they really are, raise it, e.g. --ipu-call-timeout=30min"
        )

    def _run(self, main_ident: int) -> None:
        assert self.timeout_s is not None
        assert TIMEOUT_SIGNAL is not None
        watch = self.watch
        seen = (watch.done, watch.phase)
        since = self.clock()
        while not self._stop.wait(self.poll_s):
            now = self.clock()
            current = (watch.done, watch.phase)
            if current != seen:
                # A call finished (or a new phase began) since the last look: the running call began
                # after the last look, so timing it from now never fires early.
                seen, since = current, now
            elif now - since >= self.timeout_s:
                self.fired = self.message(watch.running())
                signal.pthread_kill(main_ident, TIMEOUT_SIGNAL)
                self.polls += 1
                return
            self.polls += 1

    def _on_signal(self, signum: int, frame: Any) -> None:
        message = self.fired
        if message is not None and self._armed:
            self.fired = None  # raised once: the interrupted call's caller decides what follows
            raise CallTimeout(message)
        if callable(self._previous):
            self._previous(signum, frame)
