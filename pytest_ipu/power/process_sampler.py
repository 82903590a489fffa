"""Power readings taken in a process of their own, so that nothing the measured process does delays them.

``SamplerProcess`` is one child process per open power source: it builds its own copy of the source
from ``SourceSpec`` (the unopened source, pickled: an open handle cannot cross processes), opens it
once and runs a ``PowerSampler`` whenever this process opens a window; ``window(hz)`` gives a
``ProcessSampler``, which has ``PowerSampler``'s interface. The child is a
``pytest_ipu.processes.Worker``, as the instances' worker processes are, started with ``spawn``:
forking a process that has started an SDK's threads can deadlock the child. The child stamps its
readings with ``time.monotonic_ns`` (``CLOCK_MONOTONIC`` on Linux, one clock for every process of the
system; likewise on macOS); each window maps them onto the meter's clock (``time.perf_counter_ns`` by
default, whose reference point Python leaves undefined: not comparable across processes in general)
by their offset, from the closest of a few back-to-back reads (0 when both are one clock). The child
also exits when this process's end of the pipe closes.

Documented in docs/power.md (section "Where the sampler runs").
"""

from __future__ import annotations

import contextlib
import pickle
import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING
from typing import Any
from typing import Final

from pytest_ipu.power.base import PowerSource
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.power.sampler import Clock
from pytest_ipu.power.sampler import PowerSampler
from pytest_ipu.power.sampler import Trace
from pytest_ipu.processes import FAILED
from pytest_ipu.processes import Worker
from pytest_ipu.processes import WorkerGone
from pytest_ipu.processes import WorkerTimeout
from pytest_ipu.processes import child_requests
from pytest_ipu.processes import describe_error
from pytest_ipu.processes import send_reply

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

#: How the child starts: a fresh interpreter (``fork`` would copy the SDK's threads' locks).
START_METHOD: Final = "spawn"
#: Seconds the child may take to start and open its source (a gcipuinfo source probes its sensor's
#: update period for up to 0.5 s), and to answer a request.
START_TIMEOUT_S = 120.0
REPLY_TIMEOUT_S = 30.0
#: Seconds a terminated child has to exit before it is killed.
_TERMINATE_GRACE_S = 5.0
#: Back-to-back clock reads from which the offset between the two clocks is taken.
_OFFSET_PAIRS = 5

# Requests, parent to child.
_START = "start"
_MARK = "mark"
_STOP = "stop"
_CLOSE = "close"
# Replies, child to parent (a failure's is ``processes.FAILED``).
_READY = "ready"
_OK = "ok"


@dataclass(frozen=True)
class SourceSpec:
    """An unopened power source, pickled: what a sampler process builds its own copy from.

    Make it with ``of`` before the source is opened: an open source holds handles (a gcipuinfo
    object, an NVML handle) that do not cross processes.
    """

    name: str
    payload: bytes

    @classmethod
    def of(cls, source: PowerSource) -> SourceSpec:
        """``source`` pickled; ``PowerSourceError`` naming it and the fix when it does not pickle."""
        try:
            payload = pickle.dumps(source, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise PowerSourceError(
                f"{source.name}: the power source ({type(source).__qualname__}) cannot be sent to its "
                f"sampler process: {describe_error(exc)}; a source read from a sampler process must pickle "
                "before it is opened (no open handles or lambdas; an injected library must pickle too)"
            ) from exc
        return cls(source.name, payload)

    def build(self) -> PowerSource:
        """A new, unopened copy of the source."""
        source: PowerSource = pickle.loads(self.payload)
        return source


def clock_offset(clock: Clock) -> int:
    """``clock() - time.monotonic_ns()`` in nanoseconds: 0 when ``clock`` is that clock, else from the
    closest of a few back-to-back reads (their midpoint against the monotonic read between them)."""
    if clock is time.monotonic_ns or (
        clock is time.perf_counter_ns
        and time.get_clock_info("perf_counter").implementation
        == time.get_clock_info("monotonic").implementation
    ):
        return 0
    best: tuple[int, int] | None = None
    for _ in range(_OFFSET_PAIRS):
        before = clock()
        monotonic = time.monotonic_ns()
        after = clock()
        if best is None or after - before < best[0]:
            best = (after - before, (before + after) // 2 - monotonic)
    assert best is not None
    return best[1]


# -- the child ------------------------------------------------------------------------------------


def _serve_source(conn: Connection, payload: bytes) -> None:
    """The sampler process (a ``processes.Worker``): open the source, then serve windows until told
    to close or orphaned.

    Every failure travels as one line of text: an exception object might not unpickle in the parent.
    """
    source: PowerSource | None = None
    sampler: PowerSampler | None = None
    try:
        try:
            source = pickle.loads(payload)
            assert source is not None
            devices = [device.id for device in source.open()]
        except BaseException as exc:
            send_reply(conn, (FAILED, describe_error(exc)))
            return
        if not send_reply(conn, (_READY, devices)):
            return
        for request in child_requests(conn):
            command = request[0]
            answer: tuple[object, ...] = (_OK, None)
            if command == _START:
                sampler, answer = _start_window(source, sampler, request[1])
            elif command == _MARK and sampler is not None:
                sampler.mark()  # a failure is kept in the trace, as the thread's are
            elif command == _STOP and sampler is not None:
                answer = _stop_window(sampler, request[1])
                sampler = None
            elif command == _CLOSE:
                try:
                    source.close()
                except Exception as exc:
                    answer = (FAILED, describe_error(exc))
                source = None
                send_reply(conn, answer)
                return
            else:
                answer = (FAILED, f"unexpected request {command!r}")
            if not send_reply(conn, answer):
                return
    finally:
        if sampler is not None:
            sampler.stop(last_reading=False)
        if source is not None:
            with contextlib.suppress(Exception):
                source.close()


def _start_window(
    source: PowerSource, sampler: PowerSampler | None, hz: Any
) -> tuple[PowerSampler | None, tuple[object, ...]]:
    """Start a window sampled at ``hz``, ending first a ``sampler`` the parent gave up on: the new
    sampler and the reply, or ``None`` and why where the first reading failed."""
    if sampler is not None:  # a window the parent gave up on: end it first
        sampler.stop(last_reading=False)
    # Monotonic: the one clock both processes read (see the module docstring).
    started = PowerSampler(source, hz, clock=time.monotonic_ns)
    try:
        started.start()
    except Exception as exc:  # the first reading failed: no thread was started
        return None, (FAILED, describe_error(exc))
    return started, (_OK, None)


def _stop_window(sampler: PowerSampler, last_reading: Any) -> tuple[object, ...]:
    """End the window: the reply carrying its trace (times, values, missed readings, error)."""
    trace = sampler.stop(last_reading=last_reading)
    error = None if trace.error is None else describe_error(trace.error)
    return (_OK, (trace.t_ns, [dict(v) for v in trace.values], trace.missed, error))


# -- the parent -----------------------------------------------------------------------------------


class SamplerProcess:
    """A child process holding its own open copy of a power source, sampling it in windows.

    The constructor returns once the child has opened the source; ``device_ids`` are the devices
    it reads. ``PowerSourceError`` (the child stopped) when the source cannot be sent to it, the child
    cannot open it, or does not answer within ``start_timeout_s``. ``reply_timeout_s`` bounds every
    later request. ``close`` stops it; it is idempotent.
    """

    def __init__(
        self,
        source: PowerSource | SourceSpec,
        *,
        start_timeout_s: float = START_TIMEOUT_S,
        reply_timeout_s: float = REPLY_TIMEOUT_S,
    ) -> None:
        spec = source if isinstance(source, SourceSpec) else SourceSpec.of(source)
        self.name = spec.name
        self._reply_timeout_s = reply_timeout_s
        #: Why the process can serve no more windows (``None`` while it can).
        self._broken: str | None = None
        self._closed = False
        # A daemon: multiprocessing terminates it at interpreter exit if nothing closed it before.
        self._worker = Worker(
            _serve_source,
            (spec.payload,),
            name=f"pytest-ipu-power-{spec.name}",
            context=START_METHOD,
            daemon=True,
            grace_s=_TERMINATE_GRACE_S,
        )
        try:
            reply = self._receive(start_timeout_s, "opening the source")
            if reply[0] != _READY:
                raise PowerSourceError(
                    f"{self.name}: the sampler process could not open the source: {reply[1]}"
                )
        except BaseException as exc:
            self._release(f"it did not start ({describe_error(exc)})")
            raise
        #: The ids of the devices the child's source reads, in its order.
        self.device_ids: list[str] = list(reply[1])

    @property
    def pid(self) -> int | None:
        """The child's process id."""
        return self._worker.pid

    def window(self, hz: float, clock: Clock = time.perf_counter_ns) -> ProcessSampler:
        """A sampler over this process at ``hz``, timestamps on ``clock`` (not started yet)."""
        return ProcessSampler(self, hz, clock)

    def request(self, message: tuple[object, ...], what: str) -> Any:
        """Send ``message`` and return the value of the child's reply; ``PowerSourceError`` naming
        ``what`` when the child reports a failure. A child that is gone, does not answer in time, or
        an interrupt meanwhile (KeyboardInterrupt included) leaves it stopped and unusable."""
        if self._closed or self._broken is not None:
            reason = "it was closed" if self._closed else self._broken
            raise PowerSourceError(f"{self.name}: the sampler process cannot serve {what}: {reason}")
        try:
            try:
                self._worker.send(message)
            except WorkerGone:
                raise self._gone(f"before {what}") from None
            reply = self._receive(self._reply_timeout_s, what)
        except BaseException as exc:
            self._release(f"{what} was interrupted ({describe_error(exc)})")
            raise
        if reply[0] != _OK:
            raise PowerSourceError(f"{self.name}: the sampler process failed {what}: {reply[1]}")
        return reply[1]

    def _receive(self, timeout_s: float, what: str) -> tuple[Any, ...]:
        try:
            return self._worker.receive(timeout_s)
        except WorkerTimeout:
            self._broken = f"it did not answer within {timeout_s:g} s ({what})"
            raise PowerSourceError(f"{self.name}: the sampler process {self._broken}") from None
        except WorkerGone:
            raise self._gone(f"while {what}") from None

    def _gone(self, when: str) -> PowerSourceError:
        """The error of a child that ended (killed, out of memory, crashed) ``when`` it was asked
        for something: it names the sampler, its process id, its exit code and the fix; the process
        serves no more windows."""
        self._worker.process.join(1.0)
        ended = f"(pid {self.pid}) ended with exit code {self._worker.process.exitcode} {when}"
        self._broken = f"it {ended}"
        return PowerSourceError(
            f"{self.name}: the sampler process {ended}; find what ended it (a kill, the "
            "out-of-memory killer), or measure without power (--ipu-power=off)"
        )

    def close(self) -> None:
        """Ask the child to close its source and exit; stop it if it does not. ``PowerSourceError``
        when its source's ``close`` failed (raised once the child is gone)."""
        if self._closed:
            return
        self._closed = True
        failure: str | None = None
        try:
            if self._broken is None:
                # A child that is gone already is reaped by the release below.
                with contextlib.suppress(PowerSourceError, WorkerGone):
                    self._worker.send((_CLOSE,))
                    reply = self._receive(self._reply_timeout_s, "closing the source")
                    if reply[0] != _OK:
                        failure = str(reply[1])
                self._worker.process.join(self._reply_timeout_s)
        finally:
            self._release("it was closed")
        if failure is not None:
            raise PowerSourceError(
                f"{self.name}: closing the source in the sampler process failed: {failure}"
            )

    def _release(self, reason: str) -> None:
        """Stop the child whatever state it is in (``Worker.stop``); later requests are refused,
        naming ``reason`` (unless an earlier one was recorded)."""
        if self._broken is None:
            self._broken = reason
        self._worker.stop()


class ProcessSampler:
    """``PowerSampler``'s interface over a ``SamplerProcess``: the child reads, this process is free
    to hold its GIL. The trace fills when sampling stops; its timestamps are on ``clock``.

    A child that fails (a read error, no answer) makes the trace's ``error`` say so, as a failing
    sampling thread does; ``start`` raises ``PowerSourceError`` when the first reading fails.
    """

    def __init__(self, process: SamplerProcess, hz: float, clock: Clock = time.perf_counter_ns) -> None:
        if not hz > 0:
            raise ValueError(f"sampling rate must be > 0 Hz, got {hz}")
        self._process = process
        self._hz = float(hz)
        self._clock = clock
        self._offset_ns = 0
        self._running = False
        self.trace = Trace(requested_hz=hz)

    def start(self) -> Trace:
        """Start the child's sampling (it takes the first reading before this returns)."""
        self._offset_ns = clock_offset(self._clock)
        self._process.request((_START, self._hz), "starting a window")
        self._running = True
        return self.trace

    def mark(self) -> None:
        """Have the child take a reading now: the exact edges of a window."""
        if not self._running or self.trace.error is not None:
            return
        try:
            self._process.request((_MARK,), "an edge reading")
        except PowerSourceError as exc:
            self.trace.error = exc

    def stop(self, last_reading: bool = True) -> Trace:
        """Stop the child's sampling and bring its readings back (after one last reading unless
        ``last_reading`` is false or sampling already failed)."""
        if not self._running:
            return self.trace
        self._running = False
        try:
            t_ns, values, missed, error = self._process.request((_STOP, last_reading), "ending a window")
        except PowerSourceError as exc:
            self.trace.error = exc
            return self.trace
        self.trace.t_ns.extend(t + self._offset_ns for t in t_ns)
        self.trace.values.extend(values)
        self.trace.missed += missed
        if error is not None and self.trace.error is None:
            self.trace.error = PowerSourceError(f"{self._process.name} (sampler process): {error}")
        return self.trace

    def __enter__(self) -> Trace:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop(last_reading=exc_type is None)
