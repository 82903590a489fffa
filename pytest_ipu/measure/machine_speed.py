"""How fast this machine is at a moment: a short reference workload timed a few times over a run.

Two kernels, each timed ``REPEATS`` times for a median: a pure-Python loop (``PYTHON_STEPS`` steps of
integer arithmetic) and a numpy sort of ``NUMPY_SIZE`` fixed float64 values (numpy's sort never uses
BLAS or OpenMP threads, so the kernel's threads are the same everywhere); a sample's ``level_s`` is
their geometric mean. Between benchmarks at most one sample every ``SPACING_S`` seconds,
``MAX_SAMPLES`` in all; ``pytest_ipu.results.level_shift`` reads them. Pure apart from the clock and
the kernels, both injectable (tests pass fakes); no pytest here.

Documented in docs/ci.md (section "Level shifts of the machine") and docs/json-schema.md (section
"machine_speed").
"""

from __future__ import annotations

import math
import statistics
import time
import typing
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

#: Steps of the pure-Python loop.
PYTHON_STEPS = 25000
#: Values the numpy kernel sorts.
NUMPY_SIZE = 65536
#: Timings of each kernel per sample; the median is kept.
REPEATS = 5
#: Fewest seconds between two samples taken between benchmarks (the first and the last are always taken).
SPACING_S = 2.0
#: Most samples in one run, the last included.
MAX_SAMPLES = 12
#: What the workload is, stored with the samples: runs whose workloads differ are not compared.
WORKLOAD = (
    f"median of {REPEATS} timings each of a {PYTHON_STEPS}-step pure-Python loop and a numpy sort of "
    f"{NUMPY_SIZE} float64; level = their geometric mean"
)

#: A kernel: runs once; the caller times it (``typing``'s Callable: Python 3.8 cannot subscript
#: ``collections.abc.Callable`` at run time).
Kernel = typing.Callable[[], object]


def python_kernel() -> int:
    """The pure-Python reference loop: fixed integer arithmetic, no allocation past small ints."""
    total = 0
    for i in range(PYTHON_STEPS):
        total = (total + i * i) % 1000003
    return total


def numpy_kernel_factory() -> Kernel:
    """The numpy reference kernel: a sort of the same ``NUMPY_SIZE`` values each time (a fresh copy,
    so every call sorts unsorted data). numpy loads here, when a run first samples."""
    import numpy as np

    values = np.random.default_rng(12345).random(NUMPY_SIZE)

    def kernel() -> object:
        return np.sort(values, kind="quicksort")

    return kernel


@dataclass(frozen=True)
class SpeedSample:
    """One reading of the machine's speed: the two kernels' median times and the load around it. Its
    fields in order are its JSON (an entry of ``machine_speed.samples``; ``results.codec`` writes it)."""

    #: Seconds since the run's first sample (0 for the first).
    at_s: float
    #: The pure-Python loop's median time, seconds.
    python_s: float
    #: The numpy kernel's median time, seconds.
    numpy_s: float
    #: The 1-minute load average when it was taken; `None` where the system does not say.
    load_avg_1m: float | None = None
    #: Share of the machine's CPU time other processes took since the sample before, 0..1; `None` for
    #: the first sample and where /proc is not readable.
    others_share: float | None = None
    #: Share the hypervisor took (steal) since the sample before, 0..1; `None` as `others_share`, and
    #: where the kernel reports no steal.
    steal_share: float | None = None

    @property
    def level_s(self) -> float:
        """The sample's level: the geometric mean of the two kernels' times, seconds."""
        return math.sqrt(self.python_s * self.numpy_s)


@dataclass(frozen=True)
class MachineSpeed:
    """A run's samples of its machine's speed. Its fields in order are its JSON (the top-level
    section's ``machine_speed``; ``results.codec`` writes it), the samples last."""

    #: What was timed (``WORKLOAD``): runs with different workloads are not compared.
    workload: str = WORKLOAD
    #: Seconds the run spent sampling, every sample together.
    cost_s: float = 0.0
    #: The samples, in the order taken.
    samples: tuple[SpeedSample, ...] = ()

    def log_levels(self) -> list[float]:
        """The log of each sample's level (positive and finite ones only)."""
        return [math.log(s.level_s) for s in self.samples if 0.0 < s.level_s < math.inf]

    def level_s(self) -> float | None:
        """The run's level: the geometric mean of its samples' levels, seconds; ``None`` without one."""
        logs = self.log_levels()
        return math.exp(math.fsum(logs) / len(logs)) if logs else None

    def load_avg_1m(self) -> float | None:
        """The mean 1-minute load average over the samples that have it; ``None`` where none has."""
        loads = [s.load_avg_1m for s in self.samples if s.load_avg_1m is not None]
        return math.fsum(loads) / len(loads) if loads else None


def median_time(kernel: Kernel, clock: Callable[[], float], repeats: int = REPEATS) -> float:
    """The median of ``repeats`` timings of ``kernel`` by ``clock`` (seconds)."""
    times = []
    for _ in range(repeats):
        start = clock()
        kernel()
        times.append(clock() - start)
    return float(statistics.median(times))


@dataclass
class SpeedProbe:
    """Samples a run's machine speed: ``sample`` always, ``due`` says whether a sample between
    benchmarks is due (``SPACING_S`` since the last, fewer than ``MAX_SAMPLES - 1`` taken, one
    being kept for the end). ``clock`` is a monotonic clock in seconds; ``python`` and ``numpy``
    the kernels; ``load`` and ``contention`` read the load average and start/stop a CPU-share
    window (``None``: not read)."""

    clock: Callable[[], float] = time.perf_counter
    python: Kernel = python_kernel
    numpy: Kernel | None = None
    load: Callable[[], float | None] | None = None
    contention: Any = None
    spacing_s: float = SPACING_S
    max_samples: int = MAX_SAMPLES
    samples: list[SpeedSample] = field(default_factory=list)
    cost_s: float = 0.0
    _first: float | None = None
    _last: float | None = None

    def due(self) -> bool:
        """Whether a sample between benchmarks is due now (one is always kept for the end)."""
        if not self.samples:
            return True
        if len(self.samples) >= self.max_samples - 1 or self._last is None:
            return False
        return self.clock() - self._last >= self.spacing_s

    def sample(self) -> SpeedSample | None:
        """Take a sample now (``None`` once ``max_samples`` were taken)."""
        if len(self.samples) >= self.max_samples:
            return None
        if self.numpy is None:
            self.numpy = numpy_kernel_factory()
        begin = self.clock()
        if self._first is None:
            self._first = begin
        others = steal = None
        if self.contention is not None:
            if self.samples:
                window = self.contention.stop()
                others, steal = window.others_share, window.steal_share
            self.contention.start()
        python_s = median_time(self.python, self.clock)
        numpy_s = median_time(self.numpy, self.clock)
        load = self.load() if self.load is not None else None
        end = self.clock()
        taken = SpeedSample(begin - self._first, python_s, numpy_s, load, others, steal)
        self.samples.append(taken)
        self.cost_s += end - begin
        self._last = end
        return taken

    def result(self) -> MachineSpeed | None:
        """The samples so far as a ``MachineSpeed``; ``None`` before the first."""
        return MachineSpeed(WORKLOAD, self.cost_s, tuple(self.samples)) if self.samples else None


class MachineSpeedError(ValueError):
    """A ``machine_speed`` section that is not one this code wrote; the message says where and why."""


def from_json(data: object, where: str) -> MachineSpeed:
    """A ``MachineSpeed`` from its JSON form; raises ``MachineSpeedError`` naming ``where``, the key
    and the problem (a time must be finite and > 0, a share within 0..1)."""
    if not isinstance(data, Mapping):
        raise MachineSpeedError(f"{where} must be a JSON object")
    workload, samples = data.get("workload"), data.get("samples")
    if not isinstance(workload, str) or not isinstance(samples, list):
        raise MachineSpeedError(f"{where} needs a string 'workload' and a list 'samples'")
    cost = _number(data.get("cost_s", 0.0), f"{where}.cost_s", low=0.0)
    out = []
    for i, entry in enumerate(samples):
        at = f"{where}.samples[{i}]"
        if not isinstance(entry, Mapping):
            raise MachineSpeedError(f"{at} must be a JSON object")
        out.append(
            SpeedSample(
                _number(entry.get("at_s"), f"{at}.at_s", low=0.0),
                _number(entry.get("python_s"), f"{at}.python_s", low=0.0, open_low=True),
                _number(entry.get("numpy_s"), f"{at}.numpy_s", low=0.0, open_low=True),
                _optional(entry.get("load_avg_1m"), f"{at}.load_avg_1m", None),
                _optional(entry.get("others_share"), f"{at}.others_share", 1.0),
                _optional(entry.get("steal_share"), f"{at}.steal_share", 1.0),
            )
        )
    return MachineSpeed(workload, cost, tuple(out))


def _number(
    value: object, where: str, low: float, open_low: bool = False, high: float | None = None
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MachineSpeedError(f"{where} is {value!r}: it must be a number")
    number = float(value)
    if not math.isfinite(number) or number < low or (open_low and number == low):
        bound = f"> {low:g}" if open_low else f">= {low:g}"
        raise MachineSpeedError(f"{where} is {value!r}: it must be a finite number {bound}")
    if high is not None and number > high:
        raise MachineSpeedError(f"{where} is {value!r}: it must be at most {high:g}")
    return number


def _optional(value: object, where: str, high: float | None) -> float | None:
    return None if value is None else _number(value, where, low=0.0, high=high)
