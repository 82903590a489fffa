"""A background thread that reads a power source at a fixed rate onto one monotonic clock.

The thread only reads and timestamps (a reading at the midpoint of the clock values just before and
after the read); the caller integrates (``pytest_ipu.power.energy``). It is stopped, and its thread
joined, on every path out of its ``with`` block, exceptions and KeyboardInterrupt included.
``pytest_ipu.power.process_sampler`` runs this same sampler in a process of its own, for runtimes that
keep the GIL; ``pytest_ipu.power.meter`` chooses which (``Sampler`` is what both offer).

Documented in docs/power.md (sections "How a window is measured" and "Where the sampler runs").
"""

from __future__ import annotations

import sys
import threading
import time
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from types import TracebackType

from pytest_ipu.power.base import PowerSource

Clock = typing.Callable[[], int]
#: Waits up to the given seconds; returns True if the sampler was asked to stop meanwhile.
Wait = typing.Callable[[float], bool]


@dataclass
class Trace:
    """Readings taken by a sampler: timestamps (ns) and one value per device per reading."""

    requested_hz: float
    t_ns: list[int] = field(default_factory=list)
    values: list[Mapping[str, float]] = field(default_factory=list)
    #: Scheduled reads that were skipped because a read (or the OS) ran late.
    missed: int = 0
    #: The exception that stopped the sampling thread, if one did (the trace is then invalid).
    error: BaseException | None = None

    def achieved_hz(self, start_ns: int, end_ns: int) -> float:
        """Readings per second that fell inside ``[start_ns, end_ns]``."""
        n = sum(1 for t in self.t_ns if start_ns <= t <= end_ns)
        return n / ((end_ns - start_ns) * 1e-9) if end_ns > start_ns else 0.0

    def series(self, device_id: str) -> tuple[list[int], list[float]]:
        """Timestamps and values of one device, in time order (edge readings taken by ``mark`` can
        land between the thread's)."""
        order = sorted(range(len(self.t_ns)), key=self.t_ns.__getitem__)
        return [self.t_ns[i] for i in order], [self.values[i][device_id] for i in order]


class Sampler(typing.Protocol):
    """What a sampler offers, in a thread of this process or in a process of its own.

    ``start`` takes the first reading and returns the trace, ``stop`` ends sampling after one last
    reading, ``mark`` takes a reading now; ``with sampler as trace:`` is ``start``/``stop``, the
    last reading skipped when the block raised. The trace is complete once sampling has stopped.
    """

    trace: Trace

    def start(self) -> Trace:
        """Take the first reading and start sampling."""

    def stop(self) -> Trace:
        """Stop sampling, then take the last reading (unless sampling already failed)."""

    def mark(self) -> None:
        """Take a reading now: the exact edges of a window."""

    def __enter__(self) -> Trace:
        """``start``."""

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop on every path; the last reading only when the block did not raise."""


def next_deadline(now_ns: int, start_ns: int, period_ns: int) -> int:
    """The first read time after ``now_ns`` on the grid ``start + k * period`` (pure, testable).

    Staying on the grid keeps the average rate exact; a late read skips the grid points it
    overran rather than bunching reads to catch up.
    """
    return start_ns + ((now_ns - start_ns) // period_ns + 1) * period_ns


class PowerSampler:
    """Read ``source`` every ``1/hz`` seconds in a daemon thread between ``start`` and ``stop``.

    ``with PowerSampler(source, hz) as trace:`` takes one reading before the block's first line
    and one after its last, so any window inside the block is covered by readings on both sides.
    ``source`` must already be open; the sampler never opens or closes it. ``clock`` and ``wait``
    are injectable for tests.
    """

    def __init__(
        self, source: PowerSource, hz: float, clock: Clock = time.perf_counter_ns, wait: Wait | None = None
    ):
        if not hz > 0:
            raise ValueError(f"sampling rate must be > 0 Hz, got {hz}")
        self._source = source
        self._period_ns = max(1, round(1e9 / hz))
        self._clock = clock
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # Event.wait rather than sleep: stop() must not have to wait out a long period.
        self._wait: Wait = wait or self._stop.wait
        self._thread: threading.Thread | None = None
        self._switch_interval = sys.getswitchinterval()
        self.trace = Trace(requested_hz=hz)

    def _read(self) -> None:
        # One reading at a time: ``mark`` reads from the caller's thread while the sampler runs.
        with self._lock:
            before = self._clock()
            values = self._source.read()
            after = self._clock()
            self.trace.t_ns.append((before + after) // 2)
            self.trace.values.append(dict(values))

    def mark(self) -> None:
        """Take a reading now, from the calling thread: the exact edges of a window (R2)."""
        if self.trace.error is None:
            try:
                self._read()
            except Exception as error:  # kept like the thread's errors: the window is invalid
                self.trace.error = error

    def _loop(self, start_ns: int) -> None:
        deadline = start_ns + self._period_ns
        try:
            while not self._stop.is_set():
                now = self._clock()
                if now < deadline and self._wait((deadline - now) * 1e-9):
                    break
                self._read()
                following = next_deadline(self._clock(), start_ns, self._period_ns)
                self.trace.missed += max(0, (following - deadline) // self._period_ns - 1)
                deadline = following
        except BaseException as exc:  # kept, so the window is reported invalid rather than lost
            self.trace.error = exc

    def start(self) -> Trace:
        """Take the first reading and start the thread."""
        self._read()
        self._stop.clear()
        # A thread waiting for the GIL gets it only after the interpreter's switch interval (5 ms by
        # default): against a workload that holds the GIL, a faster sampler would miss most of its
        # reads. While sampling, the interval is shortened to a tenth of the period, and restored
        # after. The workload pays the same one handoff per reading either way.
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, max(1e-5, self._period_ns * 1e-10)))
        self._thread = threading.Thread(target=self._loop, args=(self.trace.t_ns[-1],), daemon=True)
        self._thread.start()
        return self.trace

    def _join(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            sys.setswitchinterval(self._switch_interval)

    def stop(self, last_reading: bool = True) -> Trace:
        """Stop and join the thread, then take the last reading (unless ``last_reading`` is false or
        sampling already failed)."""
        # On every path, KeyboardInterrupt included: the thread must not outlive the block.
        self._join()
        if last_reading and self.trace.error is None:
            try:
                self._read()
            except Exception as error:  # kept like the thread's errors: the window is invalid
                self.trace.error = error
        return self.trace

    def __enter__(self) -> Trace:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop(last_reading=exc_type is None)
