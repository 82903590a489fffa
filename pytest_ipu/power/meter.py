"""Energy over a timed window: an open source, its idle baseline, sampling, integration, checks.

``PowerMeter`` owns one open source for a run: it measures idle power once, before the first window,
then any number of windows, each a ``PowerRecord`` (``pytest_ipu.results.records``) that is never zero
in place of unknown. It also decides where the source is read (``reads_in_a_process``): a thread of
this process (``pytest_ipu.power.sampler``) or a sampler process (``pytest_ipu.power.process_sampler``).

Documented in docs/power.md (sections "How a window is measured" and "Where the sampler runs").
"""

from __future__ import annotations

import bisect
import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from pytest_ipu.power import energy
from pytest_ipu.power.base import PowerDevice
from pytest_ipu.power.base import PowerSource
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.power.process_sampler import SamplerProcess
from pytest_ipu.power.process_sampler import SourceSpec
from pytest_ipu.power.sampler import Clock
from pytest_ipu.power.sampler import PowerSampler
from pytest_ipu.power.sampler import Sampler
from pytest_ipu.power.sampler import Trace
from pytest_ipu.results.records import DeviceEnergy
from pytest_ipu.results.records import PowerRecord

#: Shortest window whose energy we call confident, and its multiple of the sensor period (R3).
MIN_WINDOW_S = 5.0
MIN_WINDOW_PERIODS = 20
#: Fewest readings inside a sampled-power window, and the largest share of missed reads (R18).
MIN_SAMPLES = 10
MAX_MISSED = 0.10
#: Sampling rate limits: at least 10 Hz (R4), at most 1 kHz (a Python thread's honest ceiling).
MIN_HZ, MAX_HZ, MAX_COUNTER_HZ = 10.0, 1000.0, 100.0
#: Counters refreshing at least this often are read at the edges and at FAST_COUNTER_HZ between.
FAST_COUNTER_S, FAST_COUNTER_HZ = 0.010, 2.0
#: When the sensor's period could not be discovered: fast enough for a 100 ms sensor either way.
UNKNOWN_PERIOD_HZ = 100.0

#: The most power one measured device (an IPU, a board, a GPU, a CPU package) can draw, watts: the
#: largest boards draw a few kW. A reading or a window's mean above it is a sensor fault, not a figure.
MAX_DEVICE_W = 100_000.0

_RULE = {"energy_counter": "counter_delta", "instant_power": "trapezoid", "average_power": "backward_rect"}

#: Sources read from a sampler process of their own: the runtimes of the devices they measure may keep
#: the GIL for a whole call (PopTorch's execute does), which stops every thread of the process.
PROCESS_SAMPLED = frozenset({"gcipuinfo"})


def reads_in_a_process(source: PowerSource) -> bool:
    """Whether ``source`` is read from a sampler process rather than a thread (see ``PROCESS_SAMPLED``)."""
    return source.name in PROCESS_SAMPLED


def _impossible_w(watts: float) -> str | None:
    """Why ``watts`` cannot be one device's power, or ``None`` when it can."""
    if not math.isfinite(watts) or watts < 0:
        return "power is a finite number >= 0 W"
    if watts > MAX_DEVICE_W:
        return f"no device draws more than {MAX_DEVICE_W:.0f} W"
    return None


def not_measured(source: str, reason: str, *, window_s: float | None = None, items: int = 0) -> PowerRecord:
    """An explicit "not measured", with the reason; shown as such, never as 0.

    The window's wall time and its items are facts without a sensor: an ``ipu_power`` block passes
    them, so the record still says how long the block ran and what it completed. The energy figures
    stay ``None``.
    """
    return PowerRecord(measured=False, source=source, reason=reason, window_s=window_s, items=items)


def min_window_s(update_period_s: float | None) -> float:
    """max(5 s, 20 x the sensor's update period): below it the window's edges dominate (R3)."""
    return max(MIN_WINDOW_S, MIN_WINDOW_PERIODS * (update_period_s or 0.0))


def sample_hz(requested: float | None, update_period_s: float | None, kind: str = "instant_power") -> float:
    """The rate to sample at: as asked, else a multiple of the sensor's rate, within [10 Hz, 1 kHz].

    Power sensors are read at twice their rate (R4), up to 1 kHz. Energy counters are also read at
    the window's exact edges (``PowerMeter.mark``). One that refreshes within 10 ms (RAPL, ~1 ms)
    is then exact to that refresh at the edges, and the thread only has to read it often enough to
    unwrap it: 2 Hz. Slower counters (NVML, ~100 ms) are read at ten times their rate, up to
    100 Hz, which pins down when each refresh happened near the edges (see ``energy``).
    """
    if requested is not None:
        return requested
    if not update_period_s:
        return UNKNOWN_PERIOD_HZ
    if kind == "energy_counter":
        if update_period_s <= FAST_COUNTER_S:
            return FAST_COUNTER_HZ
        return min(MAX_COUNTER_HZ, max(MIN_HZ, 10.0 / update_period_s))
    return min(MAX_HZ, max(MIN_HZ, 2.0 / update_period_s))


@dataclass
class PowerMeter:
    """One open power source for a run: idle baseline once, then any number of windows.

    ``in_process`` chooses the sampler: ``True`` a sampler process, ``False`` a thread, ``None`` as
    ``reads_in_a_process`` says for the source. A source read from a process must pickle before it
    is opened (``SourceSpec``); the process opens its own copy and is stopped by ``close``.
    """

    source: PowerSource
    hz: float | None = None
    idle_s: float = 5.0
    clock: Clock = time.perf_counter_ns
    devices: list[PowerDevice] = field(default_factory=list)
    idle_w: dict[str, float] = field(default_factory=dict)
    in_process: bool | None = None
    _opened: bool = False
    _active: Sampler | None = None
    _process: SamplerProcess | None = None

    @property
    def sampled_in_a_process(self) -> bool:
        """Whether this meter's windows are read from a sampler process."""
        return reads_in_a_process(self.source) if self.in_process is None else self.in_process

    @property
    def rate_hz(self) -> float:
        """The sampling rate this meter uses."""
        return sample_hz(self.hz, self.source.update_period_s(), self.source.kind)

    def open(self) -> None:
        """Open the source (and its sampler process, if it has one) and, unless ``idle_s`` is 0,
        measure idle power per device. ``PowerSourceError`` when either cannot open; ``close`` then
        releases what did."""
        if self._opened:
            return
        # Taken before this process opens the source: an open one holds handles no process can share.
        spec = SourceSpec.of(self.source) if self.sampled_in_a_process else None
        self.devices = self.source.open()
        self._opened = True
        if spec is not None:
            self._process = SamplerProcess(spec)
            mine = [d.id for d in self.devices]
            if self._process.device_ids != mine:
                raise PowerSourceError(
                    f"{self.source.name}: the sampler process's copy of the source reads devices "
                    f"{', '.join(self._process.device_ids) or 'none'}, this process's "
                    f"{', '.join(mine) or 'none'}; the readings could not be attributed"
                )
        if self.idle_s > 0:
            with self._sampler(self.rate_hz) as trace:
                start = self.clock()
                time.sleep(self.idle_s)
                end = self.clock()
            if trace.error is None:
                idle = {
                    d.id: self._joules(trace, d.id, start, end) / ((end - start) * 1e-9) for d in self.devices
                }
                # A baseline from a faulty reading is no baseline: idle power is then not reported.
                if all(_impossible_w(w) is None for w in idle.values()):
                    self.idle_w = idle

    def close(self) -> None:
        """Stop the sampler process and close the source, also after a failed ``open`` (sources'
        ``close`` is idempotent)."""
        self._opened = False
        process, self._process = self._process, None
        try:
            if process is not None:
                process.close()
        finally:
            self.source.close()

    def _sampler(self, hz: float) -> Sampler:
        """A sampler of the source at ``hz``, in the sampler process or a thread (not started)."""
        if self._process is not None:
            return self._process.window(hz, clock=self.clock)
        return PowerSampler(self.source, hz, clock=self.clock)

    @contextlib.contextmanager
    def sampling(self) -> Iterator[Trace]:
        """Sample for the duration of the block (the window must lie inside it)."""
        sampler = self._sampler(self.rate_hz)
        self._active = sampler
        try:
            with sampler as trace:
                yield trace
        finally:
            self._active = None

    def mark(self) -> None:
        """At a window's edge: read an energy counter now (R2), so the edge needs no interpolation
        over the thread's readings. Power sensors need no edge reading; this does nothing for them."""
        if self._active is not None and self.source.kind == "energy_counter":
            self._active.mark()

    def _joules(self, trace: Trace, device_id: str, start_ns: int, end_ns: int) -> float:
        t, v = trace.series(device_id)
        period = self.source.update_period_s()
        refresh = period * 1e9 if period and self.source.kind == "energy_counter" else None
        return energy.integrate(_RULE[self.source.kind], t, v, start_ns, end_ns, refresh)  # type: ignore[arg-type]

    def result(self, trace: Trace, start_ns: int, end_ns: int, items: int, rounds_fixed: bool) -> PowerRecord:
        """Integrate ``trace`` over the window, check it (R18) and derive the per-item figures."""
        window_s = (end_ns - start_ns) * 1e-9
        period = self.source.update_period_s()
        base = self._base(trace, start_ns, end_ns, items, period)
        if trace.error is not None:
            return PowerRecord(**base, reason=f"sampling failed: {trace.error}", valid=False)
        try:
            bad = next(
                (b for b in (self._bad_reading(trace, d.id, start_ns, end_ns) for d in self.devices) if b),
                None,
            )
            per_device = (
                {} if bad else {d.id: self._joules(trace, d.id, start_ns, end_ns) for d in self.devices}
            )
        except (ValueError, KeyError) as exc:
            return PowerRecord(**base, reason=f"cannot integrate the window: {exc}", valid=False)
        for device_id, joules in per_device.items():
            why = _impossible_w(joules / window_s) if window_s > 0 else None
            if why is not None:
                bad = f"device {device_id}'s energy over the window is {joules!r} J ({why})"
                break
        if bad is not None:
            # Never a figure from a faulty sensor: the window's energy is not measured, and a gate on
            # it fails as on any metric without a value.
            return PowerRecord(**base, reason=f"invalid reading from {self.source.name}: {bad}", valid=False)
        low_confidence = window_s < min_window_s(period)
        warnings = self._warnings(
            per_device, base, window_s, period, rounds_fixed, len(trace.t_ns), trace.missed
        )
        total = math.fsum(per_device.values())
        return PowerRecord(
            **base,
            devices=self._device_energies(per_device, window_s),
            energy_j=total,
            mean_power_w=total / window_s,
            idle_power_w=math.fsum(self.idle_w.values()) if self.idle_w else None,
            energy_per_item_j=total / items if items else None,
            items_per_j=items / total if items and total > 0 else None,
            valid=True,
            warnings=tuple(warnings),
            low_confidence=low_confidence,
        )

    def _base(
        self, trace: Trace, start_ns: int, end_ns: int, items: int, period: float | None
    ) -> dict[str, Any]:
        """The record's fields that every window has, measured or not: the source, its method and
        rule, the ``items``, and the sampling over the window."""
        return {
            "measured": True,
            "source": self.source.name,
            "method": "counter" if self.source.kind == "energy_counter" else "sampled_power",
            "integration": _RULE[self.source.kind],
            "items": items,
            "samples": sum(1 for t in trace.t_ns if start_ns <= t <= end_ns),
            "sample_hz_requested": trace.requested_hz,
            "sample_hz_achieved": trace.achieved_hz(start_ns, end_ns),
            "update_period_s": period,
            "window_s": (end_ns - start_ns) * 1e-9,
        }

    def _device_energies(self, per_device: dict[str, float], window_s: float) -> tuple[DeviceEnergy, ...]:
        """Each device's part of the record: its energy over the window, mean and idle power."""
        return tuple(
            DeviceEnergy(
                d.id,
                d.name,
                d.scope,
                per_device[d.id],
                per_device[d.id] / window_s,
                self.idle_w.get(d.id),
                ipus=d.ipus,
                unused_ipus=d.unused_ipus,
            )
            for d in self.devices
        )

    def _bad_reading(self, trace: Trace, device_id: str, start_ns: int, end_ns: int) -> str | None:
        """What is wrong with the first impossible reading of ``device_id`` that the window's energy
        uses (those inside it and the one either side), or ``None``: a power reading must be a finite
        number of watts from 0 to ``MAX_DEVICE_W``, an energy counter a finite number of joules >= 0."""
        t, v = trace.series(device_id)
        first = max(bisect.bisect_right(t, start_ns) - 1, 0)
        last = bisect.bisect_left(t, end_ns) + 1
        counter = self.source.kind == "energy_counter"
        for at, value in zip(t[first:last], v[first:last]):
            if counter:
                why = (
                    None
                    if math.isfinite(value) and value >= 0
                    else "an energy counter reads a finite number >= 0 J"
                )
            else:
                why = _impossible_w(value)
            if why is not None:
                unit = "J" if counter else "W"
                when = (at - start_ns) * 1e-9
                return (
                    f"device {device_id} read {value!r} {unit} {when:+.3f} s from the window's start ({why})"
                )
        return None

    def _warnings(
        self,
        per_device: dict[str, float],
        base: dict[str, Any],
        window_s: float,
        period: float | None,
        rounds_fixed: bool,
        total_reads: int,
        missed: int,
    ) -> list[str]:
        out = []
        shortest = min_window_s(period)
        if window_s < shortest:
            # The record's low_confidence flag says so too; this says by how much and why.
            why = "the rounds were fixed" if rounds_fixed else "the round cap was reached"
            out.append(f"low confidence: window {window_s:.3g} s < {shortest:.3g} s ({why})")
        if base["method"] == "sampled_power" and base["samples"] < MIN_SAMPLES:
            out.append(f"only {base['samples']} power readings in the window (want >= {MIN_SAMPLES})")
        if base["method"] == "counter" and any(e == 0 for e in per_device.values()):
            out.append("an energy counter did not move during the window")
        scheduled = missed + total_reads
        if scheduled and missed / scheduled > MAX_MISSED:
            out.append(f"the sampler missed {missed} of {scheduled} scheduled reads (> {MAX_MISSED:.0%})")
        return out
