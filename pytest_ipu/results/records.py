"""The typed records of a run: what one benchmark measured (``IpuRecord``, with its typed parts
``PowerRecord``, ``ParityRecord``, ``PlacementRecord``, ``InstanceRecord``, ``RepeatRecord``,
``BudgetRecord``, ``StabilityRecord`` and the contention's ``ContentionRecord``) and a measured
benchmark as this run's gates, tables and JSON see it (``Measured``).

Records are frozen dataclasses in SI units. Each part's ``as_json`` is its plain-JSON form inside
``extra_info["ipu"]``; ``pytest_ipu.results.schema`` writes and reads the whole record (and reads
the older forms of a version). Readers of a record ask it for a metric's value
(``IpuRecord.value``) and read flags from fields (``PowerRecord.low_confidence``), never from the
JSON or from text.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal

from pytest_ipu.measure.contention import ContentionRecord
from pytest_ipu.measure.metrics import LatencySummary

if TYPE_CHECKING:
    from pytest_ipu.results.gates import Gate


def group_name(group: str | None, name: str) -> str:
    """The table a benchmark belongs to: its pytest-benchmark group, else its test function's name
    (``test_mlp[torch-cpu-4]`` -> ``test_mlp``). Every table, plot, comparison and summary groups
    benchmarks by this."""
    return group or name.partition("[")[0]


def latency_json(lat: LatencySummary) -> dict[str, Any]:
    """A latency summary as an instance's record stores it: seconds per statistic, the round count
    and the unsupported percentiles."""
    return {**latency_stats(lat), "rounds": lat.rounds, "unsupported": list(lat.unsupported)}


def latency_stats(lat: LatencySummary) -> dict[str, float]:
    """The six statistics of a latency summary, seconds, keyed as the record JSON keys them."""
    return {
        "min": lat.min,
        "p50": lat.p50,
        "p90": lat.p90,
        "p99": lat.p99,
        "max": lat.max,
        "mean": lat.mean,
    }


@dataclass(frozen=True)
class DeviceEnergy:
    """One measured device's share of a power window."""

    id: str
    name: str
    scope: str
    energy_j: float
    mean_w: float
    idle_w: float | None

    def as_json(self) -> dict[str, Any]:
        """Plain-JSON form, an entry of the power object's ``devices``."""
        return {
            "id": self.id,
            "name": self.name,
            "scope": self.scope,
            "energy_j": self.energy_j,
            "mean_w": self.mean_w,
            "idle_w": self.idle_w,
        }


@dataclass(frozen=True)
class PowerRecord:
    """Energy over one timed window, or why there is none (``measured`` false, ``reason`` set).

    ``items_per_j`` equals items/s/W: (items / window) / (energy / window). ``idle_power_w`` is
    reported beside the total and never subtracted from it. ``valid`` is false when the window's
    energy cannot be trusted (its reason or warnings say why). ``low_confidence`` is true when the
    window was shorter than the sensor needs; ``warnings`` then says by how much.
    """

    measured: bool
    source: str
    reason: str = ""
    method: str | None = None
    integration: str | None = None
    devices: tuple[DeviceEnergy, ...] = ()
    energy_j: float | None = None
    mean_power_w: float | None = None
    idle_power_w: float | None = None
    items: int = 0
    energy_per_item_j: float | None = None
    items_per_j: float | None = None
    samples: int = 0
    sample_hz_requested: float | None = None
    sample_hz_achieved: float | None = None
    update_period_s: float | None = None
    window_s: float | None = None
    valid: bool = False
    warnings: tuple[str, ...] = ()
    low_confidence: bool = False

    def as_json(self) -> dict[str, Any]:
        """Plain-JSON form, stored as ``extra_info["ipu"]["power"]``."""
        return {
            "measured": self.measured,
            "source": self.source,
            "reason": self.reason,
            "method": self.method,
            "integration": self.integration,
            "devices": [d.as_json() for d in self.devices],
            "energy_j": self.energy_j,
            "mean_power_w": self.mean_power_w,
            "idle_power_w": self.idle_power_w,
            "items": self.items,
            "energy_per_item_j": self.energy_per_item_j,
            "items_per_j": self.items_per_j,
            "samples": self.samples,
            "sample_hz_requested": self.sample_hz_requested,
            "sample_hz_achieved": self.sample_hz_achieved,
            "update_period_s": self.update_period_s,
            "window_s": self.window_s,
            "valid": self.valid,
            "warnings": list(self.warnings),
            "low_confidence": self.low_confidence,
        }


@dataclass(frozen=True)
class ParityRecord:
    """The comparison of one compiled model's outputs against the reference on the example inputs."""

    reference: str
    max_abs: float
    max_rel: float
    tolerance: float

    @property
    def passed(self) -> bool:
        """Whether ``max_rel`` is within the tolerance."""
        return self.max_rel <= self.tolerance

    def as_json(self) -> dict[str, Any]:
        """Plain-JSON form, stored as ``extra_info["ipu"]["parity"]``."""
        return {
            "reference": self.reference,
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "tolerance": self.tolerance,
            "passed": self.passed,
        }


@dataclass(frozen=True)
class PlacementRecord:
    """Where a placed model ran: what the ``ipu`` marker asked and what it got.

    ``runner`` is ``inline`` (one instance), ``threads`` or ``processes``; ``shared_device`` is true
    when every instance shares the backend's one device (a CPU or one GPU). ``devices`` has each
    instance's device; on IPU hardware ``ipu_ids`` has each instance's IPU ids and ``inventory``
    the devices found (plain JSON); ``simulator`` is true on the IPU Model.
    """

    instances: int
    ipus_per_instance: int
    replicas: int
    stages: int
    runner: str
    shared_device: bool
    devices: tuple[str, ...]
    simulator: bool = False
    ipu_ids: tuple[tuple[int, ...], ...] | None = None
    inventory: Mapping[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        """Plain-JSON form, stored as ``extra_info["ipu"]["placement"]``; ``simulator``,
        ``ipu_ids`` and ``inventory`` only where they apply."""
        out: dict[str, Any] = {
            "instances": self.instances,
            "ipus_per_instance": self.ipus_per_instance,
            "replicas": self.replicas,
            "stages": self.stages,
            "runner": self.runner,
        }
        if self.ipu_ids is not None:
            out["ipu_ids"] = [list(ids) for ids in self.ipu_ids]
        out["shared_device"] = self.shared_device
        if self.simulator:
            out["simulator"] = True
        out["devices"] = list(self.devices)
        if self.inventory is not None:
            out["inventory"] = dict(self.inventory)
        return out


@dataclass(frozen=True)
class InstanceRecord:
    """One of several concurrently running instances: where it ran, its compile, its own calls.

    ``latency_s`` summarises this instance's ``calls`` (the record's own latency pools every
    instance); ``device_latency`` is the device's latency counters for its last call (plain JSON
    with ``resolution_s``), or ``None`` where the backend has none.
    """

    index: int
    target: str
    device: str
    device_name: str
    compile_s: float | None
    calls: int
    latency_s: LatencySummary
    phases_s: Mapping[str, float] = field(default_factory=dict)
    info: Mapping[str, Any] = field(default_factory=dict)
    device_latency: Mapping[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        """Plain-JSON form, an entry of ``extra_info["ipu"]["instances"]``."""
        return {
            "index": self.index,
            "target": self.target,
            "device": self.device,
            "device_name": self.device_name,
            "compile_s": self.compile_s,
            "phases_s": dict(self.phases_s),
            "info": dict(self.info),
            "calls": self.calls,
            "latency_s": latency_json(self.latency_s),
            "device_latency": None if self.device_latency is None else dict(self.device_latency),
        }


#: How a repeat's timed rounds ended: every planned round ran, the time budget was reached, or the
#: hard cap was (``measure.timing.Ending``).
Ending = Literal["planned", "budget", "cap"]


@dataclass(frozen=True)
class RepeatRecord:
    """One independent repeat of a benchmark: warmed up anew, then timed on its own.

    ``process`` is ``"this"`` for a repeat measured in the pytest process and ``"worker"`` for one
    measured in a fresh worker process (``--ipu-repeat-mode=process``).
    """

    index: int
    rounds: int
    window_s: float
    latency_s: LatencySummary
    throughput_items_per_s: float
    ended: Ending = "planned"
    process: str = "this"

    def value(self, metric: str) -> float | None:
        """This repeat's value of a per-round metric (``latency.*``, ``throughput``); ``None`` for a
        metric measured once per benchmark (energy, compile)."""
        read = _REPEAT_VALUES.get(metric)
        return None if read is None else float(read(self))

    def as_json(self) -> dict[str, Any]:
        """Plain-JSON form, an entry of ``extra_info["ipu"]["repeats"]``."""
        return {
            "index": self.index,
            "rounds": self.rounds,
            "window_s": self.window_s,
            "latency_s": latency_json(self.latency_s),
            "throughput_items_per_s": self.throughput_items_per_s,
            "ended": self.ended,
            "process": self.process,
        }


#: The latency metrics and the ``LatencySummary`` field each reads.
_LATENCY_FIELDS: Mapping[str, str] = {
    "latency.min": "min",
    "latency.p50": "p50",
    "latency.p90": "p90",
    "latency.p99": "p99",
    "latency.max": "max",
    "latency.mean": "mean",
}


def _latency_value(field: str) -> Callable[[RepeatRecord | IpuRecord], float]:
    return lambda record: float(getattr(record.latency_s, field))


#: How each per-round metric is read from one repeat (``RepeatRecord.value``).
_REPEAT_VALUES: Mapping[str, Callable[[RepeatRecord], float]] = {
    **{metric: _latency_value(field) for metric, field in _LATENCY_FIELDS.items()},
    "throughput": lambda r: r.throughput_items_per_s,
}


@dataclass(frozen=True)
class BudgetRecord:
    """The timed window against its time budget (auto rounds) and hard cap.

    ``budget_s`` and ``cap_s`` are ``None`` for fixed rounds (no budget applies). ``ended`` is how
    the rounds ended (``"cap"`` if any repeat hit the cap). ``min_rounds_past_budget`` is true when
    the minimum rounds made the window longer than a quarter past the budget, ``rounds_limited``
    when the most rounds pytest-ipu plans (``MAX_AUTO_ROUNDS``) ended the window a quarter short.
    """

    budget_s: float | None
    cap_s: float | None
    window_s: float
    ended: Ending
    min_rounds_past_budget: bool = False
    rounds_limited: bool = False

    @property
    def ratio(self) -> float | None:
        """Window / budget; ``None`` for fixed rounds."""
        return None if not self.budget_s else self.window_s / self.budget_s

    @property
    def capped(self) -> bool:
        """Whether the hard cap ended rounds that were still running."""
        return self.ended == "cap"

    def as_json(self) -> dict[str, Any]:
        """Plain-JSON form, stored as ``extra_info["ipu"]["budget"]``."""
        return {
            "budget_s": self.budget_s,
            "cap_s": self.cap_s,
            "window_s": self.window_s,
            "ratio": self.ratio,
            "ended": self.ended,
            "capped": self.capped,
            "min_rounds_past_budget": self.min_rounds_past_budget,
            "rounds_limited": self.rounds_limited,
        }


@dataclass(frozen=True)
class StabilityRecord:
    """How much a benchmark's figures moved while it was measured.

    With two or more repeats, ``cv`` is the coefficient of variation of the repeats' throughputs
    (sample standard deviation / mean) and decides; with one, ``round_spread`` (the rounds'
    interquartile range / median) does. ``unstable`` is true when the deciding figure exceeds
    ``threshold`` (``--ipu-unstable``).
    """

    repeats: int
    mode: str
    cv: float | None
    round_spread: float | None
    threshold: float
    unstable: bool

    @property
    def basis(self) -> str:
        """Which figure decided: ``"repeats"`` (the CV) or ``"rounds"`` (the spread)."""
        return "repeats" if self.cv is not None else "rounds"

    def as_json(self) -> dict[str, Any]:
        """Plain-JSON form, stored as ``extra_info["ipu"]["stability"]``."""
        return {
            "repeats": self.repeats,
            "mode": self.mode,
            "cv": self.cv,
            "round_spread": self.round_spread,
            "basis": self.basis,
            "threshold": self.threshold,
            "unstable": self.unstable,
        }


@dataclass(frozen=True)
class IpuRecord:
    """What one benchmark measured, in SI units.

    ``io`` says where a timed call starts and ends: ``"host"`` means inputs start in host memory and
    outputs are back in host memory when the call returns. ``compile_s`` is ``None`` when the
    benchmarked object was a plain callable rather than a compiled model; ``compile_cached`` is true
    when the model was compiled by an earlier test of the same run (``compile_s`` is that compile).
    """

    target: str
    backend: str
    device: str
    device_name: str
    precision: str
    io: str
    batch_size: int
    items_per_call: int
    rounds: int
    rounds_policy: Literal["auto", "fixed"]
    warmup_rounds: int
    latency_s: LatencySummary
    window_s: float
    throughput_items_per_s: float
    compile_s: float | None
    compile_cached: bool
    first_call_s: float
    compile_phases_s: Mapping[str, float] = field(default_factory=dict)
    compile_info: Mapping[str, Any] = field(default_factory=dict)
    parity: ParityRecord | None = None
    #: The energy of the timed window, or why it was not measured; ``None`` only in records that
    #: predate power measurement or were made by hand.
    power: PowerRecord | None = None
    #: True on a simulator (the IPU Model): its timings are not hardware timings.
    simulator: bool = False
    #: Where the model ran when the test's marker asked for a placement; ``None`` for one model on
    #: the backend's own device.
    placement: PlacementRecord | None = None
    #: One entry per concurrently running instance; ``None`` for a single instance.
    instances: tuple[InstanceRecord, ...] | None = None
    #: The device's own latency counters (PopTorch's ``getLatency``), with their ``resolution_s``.
    device_latency: Mapping[str, Any] | None = None
    #: Every independent repeat, in the order measured; empty in records that predate repeats
    #: (schema 1), which were one repeat (``repeat_values``).
    repeats: tuple[RepeatRecord, ...] = ()
    #: The window against its budget and cap; ``None`` in records that predate it.
    budget: BudgetRecord | None = None
    #: Spread between repeats (or rounds) and the ``unstable`` flag; ``None`` in older records.
    stability: StabilityRecord | None = None
    #: Other processes' share of the CPU during the timed windows; ``None`` in older records.
    contention: ContentionRecord | None = None

    def value(self, metric: str) -> float | None:
        """The value of ``metric`` (a name of ``pytest_ipu.results.catalog.METRICS``: ``latency.p50``,
        ``throughput``, ``energy``...) in SI units, or ``None`` when the record has none (power not
        measured, the compile time of a plain callable). Raises ``KeyError`` for a name that is not
        a metric."""
        value = _METRIC_VALUES[metric](self)
        return None if value is None else float(value)

    def repeat_values(self, metric: str) -> tuple[float, ...]:
        """The metric's value in each independent repeat: the evidence a gate weighs. A record from
        before repeats counts as one repeat (its own value); a metric measured once per benchmark
        (energy, compile) has one value whatever the repeats."""
        if self.repeats and metric in _REPEAT_VALUES:
            return tuple(float(_REPEAT_VALUES[metric](r)) for r in self.repeats)
        value = self.value(metric)
        return () if value is None else (value,)

    @property
    def flags(self) -> tuple[str, ...]:
        """The conditions a reader of this figure must know: ``unstable``, ``contended``,
        ``capped``, ``over-budget`` (minimum rounds past the budget), ``rounds-limit``."""
        out = []
        if self.stability is not None and self.stability.unstable:
            out.append("unstable")
        if self.contention is not None and self.contention.contended:
            out.append("contended")
        if self.budget is not None:
            if self.budget.capped:
                out.append("capped")
            if self.budget.min_rounds_past_budget:
                out.append("over-budget")
            if self.budget.rounds_limited:
                out.append("rounds-limit")
        return tuple(out)


def _power_value(read: Callable[[PowerRecord], float | None]) -> Callable[[IpuRecord], float | None]:
    return lambda record: None if record.power is None else read(record.power)


#: How each metric of ``catalog.METRICS`` is read from a typed record (``IpuRecord.value``).
_METRIC_VALUES: Mapping[str, Callable[[IpuRecord], float | None]] = {
    **{metric: _latency_value(field) for metric, field in _LATENCY_FIELDS.items()},
    "throughput": lambda r: r.throughput_items_per_s,
    "compile": lambda r: r.compile_s,
    "first_call": lambda r: r.first_call_s,
    "energy": _power_value(lambda p: p.energy_j),
    "power": _power_value(lambda p: p.mean_power_w),
    "energy_per_item": _power_value(lambda p: p.energy_per_item_j),
    "items_per_j": _power_value(lambda p: p.items_per_j),
}


@dataclass(frozen=True)
class Measured:
    """One benchmark measured in this run: who it is, its record, its per-round times and gates.

    The session keeps one list of these; the terminal tables, the gates and the JSON all read it.
    ``fullname`` is pytest's node id (pytest-benchmark's ``fullname``), ``group`` the table it
    belongs to (``group_name``), ``samples_s`` the per-round times pytest-benchmark took, ``gates``
    the benchmark's own gates from its marker.
    """

    fullname: str
    name: str
    group: str
    record: IpuRecord
    samples_s: tuple[float, ...] = ()
    gates: tuple[Gate, ...] = ()
