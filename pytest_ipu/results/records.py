"""The typed records of a run: what one benchmark measured (``IpuRecord``, with its typed parts
``PowerRecord``, ``ParityRecord``, ``PlacementRecord``, ``InstanceRecord``, ``RepeatRecord``,
``BudgetRecord``, ``StabilityRecord``, the contention's ``ContentionRecord`` and the CPU time's
``CpuTime``) and a measured benchmark as this run's gates, tables and JSON see it (``Measured``).

Records are frozen dataclasses in SI units. Each part's ``as_json`` is its plain-JSON form inside
``extra_info["ipu"]``; ``pytest_ipu.results.schema`` writes and reads the whole record (and reads
the older forms of a version). Readers of a record ask it for a metric's value
(``IpuRecord.value``) and read flags from fields (``PowerRecord.low_confidence``), never from the
JSON or from text.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar
from typing import Literal
from typing import NoReturn

from pytest_ipu.measure.contention import ContentionRecord
from pytest_ipu.measure.metrics import OFF_CPU_FLAG
from pytest_ipu.measure.metrics import CpuTime
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.measure.metrics import summarize_latency
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.codec import fields_of
from pytest_ipu.results.counts import CountRecord
from pytest_ipu.results.loadgen import LoadgenRecord
from pytest_ipu.results.training import ScalingRecord
from pytest_ipu.results.training import TimeToTrainRecord
from pytest_ipu.results.training import TrainingRecord

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
class Identity:
    """The model that ran, declared once: every record (``IpuRecord``, ``NotTimed``) and every
    compiled model (``backends.base.CompiledModel``) extends it, and its fields open their JSON.

    ``identity(x)`` copies them from one to another.
    """

    #: The target measured, `backend:device` (`torch:cpu`, `popart:ipu`).
    target: str
    #: The backend (`torch`, `torch-compile`, `onnxruntime`, `poptorch`, `popart`, `python`).
    backend: str
    #: The device (`cpu`, `cuda:0`, `ipu`).
    device: str
    #: The device's own name (CPU model, GPU model, IPU board).
    device_name: str
    #: The precision compiled (`fp32`, `fp16`, `bf16`; `n/a` for a plain callable).
    precision: str
    #: Where a timed call starts and ends: `host` (inputs in host memory, outputs back there) or `device`.
    io: str


def identity(named: Identity) -> dict[str, Any]:
    """The identity of ``named`` (a compiled model, a record) as keyword arguments for another
    ``Identity``: ``IpuRecord(**identity(compiled), batch_size=...)``."""
    return fields_of(Identity, named)


@dataclass(frozen=True)
class DeviceEnergy:
    """One measured device's share of a power window."""

    #: The source's stable name for the device (`nvml:<GPU UUID>`, `rapl:package-0`, `gcipuinfo:...`).
    id: str
    #: The device's own name (GPU model, RAPL zone, IPU board).
    name: str
    #: What the sensor covers: `gpu`, `cpu-package`, `dram`, `ipu` or `ipu-board`.
    scope: str
    #: Energy over the window, joules.
    energy_j: float
    #: Energy / window, watts.
    mean_w: float
    #: The device's power before the window, watts; `None` where not measured.
    idle_w: float | None
    #: The IPUs the reading covers, by their `gc-info -l` ids: the one IPU of an `ipu` reading, every
    #: IPU on the board of an `ipu-board` one; empty for other devices.
    ipus: tuple[int, ...] = ()
    #: Those of `ipus` that the benchmark did not use: idle while measured, yet in a board's reading.
    unused_ipus: tuple[int, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """Plain-JSON form, an entry of the power object's ``devices``."""
        return {
            "id": self.id,
            "name": self.name,
            "scope": self.scope,
            "energy_j": self.energy_j,
            "mean_w": self.mean_w,
            "idle_w": self.idle_w,
            "ipus": list(self.ipus),
            "unused_ipus": list(self.unused_ipus),
        }


@dataclass(frozen=True)
class PowerRecord:
    """Energy over one timed window, or why there is none (``measured`` false, ``reason`` set).

    ``items_per_j`` equals items/s/W: (items / window) / (energy / window). ``idle_power_w`` is
    reported beside the total and never subtracted from it. ``valid`` is false when the window's
    energy cannot be trusted (its reason or warnings say why). ``low_confidence`` is true when the
    window was shorter than the sensor needs; ``warnings`` then says by how much.
    """

    #: True when a source measured the window's energy.
    measured: bool
    #: The power source (`nvml`, `rapl`, `gcipuinfo`), or `none`.
    source: str
    #: Why energy was not measured; empty when it was.
    reason: str = ""
    #: How the energy was read: `counter` (an energy counter's difference) or `sampled_power`.
    method: str | None = None
    #: The rule that turned readings into joules: `counter_delta`, `trapezoid` or `backward_rect`.
    integration: str | None = None
    #: Each measured device's share (`DeviceEnergy`).
    devices: tuple[DeviceEnergy, ...] = ()
    #: Energy over the timed window, all devices, joules; `None` when not measured.
    energy_j: float | None = None
    #: Energy / window, watts.
    mean_power_w: float | None = None
    #: Power before the window, watts: reported beside the total, never subtracted.
    idle_power_w: float | None = None
    #: Items completed in the window (the benchmark's rounds, or what an `ipu_power` block set).
    items: int = 0
    #: Energy / items, joules.
    energy_per_item_j: float | None = None
    #: Items / energy, equal to items per second per watt.
    items_per_j: float | None = None
    #: Power samples taken in the window (0 for an energy counter read at its edges).
    samples: int = 0
    #: Sampling rate asked for (`--ipu-power-hz`), Hz.
    sample_hz_requested: float | None = None
    #: Sampling rate reached, Hz.
    sample_hz_achieved: float | None = None
    #: How often the sensor itself updates, seconds.
    update_period_s: float | None = None
    #: The measured window's wall time, seconds (set even when energy was not measured).
    window_s: float | None = None
    #: False when the window's energy cannot be trusted (`reason`/`warnings` say why).
    valid: bool = False
    #: What a reader of the energy figures must know.
    warnings: tuple[str, ...] = ()
    #: True when the window was shorter than the sensor needs (max(5 s, 20 update periods)).
    low_confidence: bool = False

    @property
    def scope(self) -> str | None:
        """What the energy covers: `ipus` (exactly the benchmark's IPUs, each read on its own),
        `board` (the whole boards holding them, each counted once: `devices` lists each board's
        IPUs and the `unused_ipus` among them), else the devices' own scope (`gpu`,
        `cpu-package+dram`); `None` when no device was measured."""
        scopes = list(dict.fromkeys(d.scope for d in self.devices))
        if not scopes:
            return None
        if "ipu-board" in scopes:
            return "board"
        return "ipus" if scopes == ["ipu"] else "+".join(scopes)

    def as_json(self) -> dict[str, Any]:
        """Plain-JSON form, stored as ``extra_info["ipu"]["power"]``."""
        return {
            "measured": self.measured,
            "source": self.source,
            "reason": self.reason,
            "method": self.method,
            "integration": self.integration,
            "scope": self.scope,
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

    #: What the outputs were compared against (torch eager fp32 on the CPU).
    reference: str
    #: Largest absolute difference over every output element (+Infinity for a non-finite output).
    max_abs: float
    #: Largest difference relative to the reference's magnitude (+Infinity for a non-finite output).
    max_rel: float
    #: The relative tolerance of the precision that ran (fp16 looser than fp32).
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

    ``runner`` is ``inline`` (one instance, in the test process), ``threads`` or ``processes`` (a
    worker process per instance, also for one whose calls hold the GIL beside LoadGen);
    ``shared_device`` is true when every instance shares the backend's one device (a CPU or one
    GPU). ``devices`` has each
    instance's device; on IPU hardware ``ipu_ids`` has each instance's IPU ids and ``inventory``
    the devices found (plain JSON); ``simulator`` is true on the IPU Model.
    """

    #: Model instances placed (the marker's `instances`).
    instances: int
    #: IPUs each instance holds (replicas x stages on IPUs; 1 elsewhere).
    ipus_per_instance: int
    #: Replicas per instance.
    replicas: int
    #: Pipeline stages per replica.
    stages: int
    #: How instances ran: `inline` (one, in the test process), `threads`, or `processes` (a worker
    #: process each; also one PopTorch instance serving LoadGen).
    runner: str
    #: True when every instance shares the backend's one device (a CPU, one GPU).
    shared_device: bool
    #: Each instance's device.
    devices: tuple[str, ...]
    #: True on the IPU Model (stored only when true).
    simulator: bool = False
    #: On IPU hardware, each instance's IPU ids (stored only there).
    ipu_ids: tuple[tuple[int, ...], ...] | None = None
    #: On IPU hardware, the devices found (plain JSON; stored only there).
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
class InstanceInfo:
    """What one instance's compile produced: where it runs, how long compiling took, and its facts
    (``backends.base.InstanceGroup.compiled_info``); its record (``InstanceRecord``) extends it.

    ``compile_s`` is ``None`` when nobody timed the compile; ``phases_s`` and ``info`` are the
    backend's own breakdown and plain-JSON facts (``CompiledModel.phases_s`` and ``.info``).
    """

    #: The instance's position, from 0.
    index: int
    #: The target it ran on.
    target: str
    #: Its device.
    device: str
    #: Its device's own name.
    device_name: str
    #: Its compile time, seconds; `None` for a plain callable.
    compile_s: float | None
    #: Its compile phases, seconds each.
    phases_s: Mapping[str, float]
    #: What its backend reported about it (plain JSON).
    info: Mapping[str, Any]

    def as_json(self) -> dict[str, Any]:
        """Plain JSON values (a fresh dict; mappings copied), the opening of its record's JSON."""
        return {
            "index": self.index,
            "target": self.target,
            "device": self.device,
            "device_name": self.device_name,
            "compile_s": self.compile_s,
            "phases_s": {str(k): float(v) for k, v in self.phases_s.items()},
            "info": dict(self.info),
        }


@dataclass(frozen=True)
class InstanceRecord(InstanceInfo):
    """One of several concurrently running instances: where it ran, its compile, its own calls.

    ``latency_s`` summarises this instance's ``calls`` (the record's own latency pools every
    instance); ``device_latency`` is the device's latency counters for its last call (plain JSON
    with ``resolution_s``), or ``None`` where the backend has none.
    """

    #: Timed calls it made.
    calls: int
    #: The latency summary of its own calls.
    latency_s: LatencySummary
    #: The device's latency counters for its last call (with `resolution_s`), or `None`.
    device_latency: Mapping[str, Any] | None = None

    @classmethod
    def measured(
        cls, info: InstanceInfo, calls_s: Sequence[float], device_latency: Mapping[str, Any] | None
    ) -> InstanceRecord:
        """The record of the instance ``info`` describes, from its timed calls' durations, seconds."""
        return cls(
            **fields_of(InstanceInfo, info),
            calls=len(calls_s),
            latency_s=summarize_latency(calls_s),
            device_latency=None if device_latency is None else dict(device_latency),
        )

    def as_json(self) -> dict[str, Any]:
        """Plain-JSON form, an entry of ``extra_info["ipu"]["instances"]``."""
        return {
            **super().as_json(),
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

    #: The repeat's position, from 1.
    index: int
    #: Its timed rounds.
    rounds: int
    #: Its timed window, seconds.
    window_s: float
    #: The latency summary of its rounds.
    latency_s: LatencySummary
    #: Its items / its window.
    throughput_items_per_s: float
    #: How its rounds ended: `planned` (every planned round ran), `budget` or `cap`.
    ended: Ending = "planned"
    #: `this` (the pytest process) or `worker` (a fresh worker process, `--ipu-repeat-mode=process`).
    process: str = "this"
    #: Its CPU time beside its wall time, and the host cost (`CpuTime`); `None` in records that
    #: predate it, and in older records whose instances ran in worker processes.
    cpu: CpuTime | None = None
    #: When its window opened, Unix seconds (wall clock): where a merge of separate processes' records
    #: lays their windows side by side; `None` in records that predate it.
    start_unix_s: float | None = None
    #: Items per round / its median round's wall time (`metrics.median_round_throughput`): the
    #: figure the `throughput` metric reads; `None` in records that predate it.
    median_throughput_items_per_s: float | None = None
    #: The counts of a call's work in this repeat, by the metric each feeds (`counts.CountRecord`):
    #: the device's (`ipu_cycles`) and the host's user-space instructions over its timed window
    #: (`host_instructions`), or why each was not counted; empty in records that predate them.
    counts: Mapping[str, CountRecord] = field(default_factory=dict)

    def value(self, metric: str) -> float | None:
        """This repeat's value of a per-round metric (``latency.*``, ``throughput``, ``cpu_time``,
        ``host_cpu_per_item``, ``host_cores``, ``host_instructions``); ``None`` for a metric measured
        once per benchmark (energy, compile), or one this repeat lacks (``cpu_time`` in an older
        record)."""
        known = METRICS.get(metric)
        return known.value(self) if known is not None and known.per_repeat else None

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
            "cpu": None if self.cpu is None else self.cpu.as_json(),
            "start_unix_s": self.start_unix_s,
            # Absent, not null, where there is none: such repeats are written as they always were.
            **(
                {}
                if self.median_throughput_items_per_s is None
                else {"median_throughput_items_per_s": self.median_throughput_items_per_s}
            ),
            **counts_json(self.counts),
        }


def counts_json(counts: Mapping[str, CountRecord]) -> dict[str, Any]:
    """``{"counts": {...}}`` for a record or repeat that has counts; nothing where it has none, so
    that such records are written as they always were."""
    return {"counts": {name: c.as_json() for name, c in counts.items()}} if counts else {}


@dataclass(frozen=True)
class BudgetRecord:
    """The timed window against its time budget (auto rounds) and hard cap.

    ``budget_s`` and ``cap_s`` are ``None`` for fixed rounds (no budget applies). ``ended`` is how
    the rounds ended (``"cap"`` if any repeat hit the cap). ``min_rounds_past_budget`` is true when
    the minimum rounds made the window longer than a quarter past the budget, ``rounds_limited``
    when the most rounds pytest-ipu plans (``MAX_AUTO_ROUNDS``) ended the window a quarter short.
    """

    #: The time budget of the timed windows, seconds; `None` for fixed rounds.
    budget_s: float | None
    #: The hard cap, seconds; `None` for fixed rounds.
    cap_s: float | None
    #: The timed windows of every repeat together, seconds.
    window_s: float
    #: How the rounds ended (`cap` if any repeat hit the cap).
    ended: Ending
    #: True when the minimum rounds ran the window more than a quarter past the budget (flag `over-budget`).
    min_rounds_past_budget: bool = False
    #: True when the most rounds pytest-ipu plans ended the window a quarter short of the budget (flag
    #: `rounds-limit`).
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

    #: Independent repeats measured.
    repeats: int
    #: `interleaved` or `process` (`--ipu-repeat-mode`).
    mode: str
    #: Coefficient of variation of the repeats' throughputs; `None` with one repeat.
    cv: float | None
    #: The rounds' interquartile range / median; decides with one repeat.
    round_spread: float | None
    #: The `--ipu-unstable` threshold, as a fraction.
    threshold: float
    #: True when the deciding figure exceeds the threshold (flag `unstable`).
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
class IpuRecord(Identity):
    """What one benchmark measured, in SI units.

    ``io`` says where a timed call starts and ends: ``"host"`` means inputs start in host memory and
    outputs are back in host memory when the call returns. ``compile_s`` is ``None`` when the
    benchmarked object was a plain callable rather than a compiled model; ``compile_cached`` is true
    when the model was compiled by an earlier test of the same run (``compile_s`` is that compile).
    """

    #: The batch: the items per call the benchmark passed, else the leading dimension of the first input.
    batch_size: int
    #: Items one call completes, per instance (batch x device iterations x replicas, or as the benchmark
    #: passed).
    items_per_call: int
    #: Timed rounds, every repeat together.
    rounds: int
    #: `auto` (the rounds fill the time budget) or `fixed` (`--ipu-rounds`, the marker, the call).
    rounds_policy: Literal["auto", "fixed"]
    #: Untimed warm-up calls after the first call (the last repeat's).
    warmup_rounds: int
    #: Latency per call over every timed round of every repeat (`LatencySummary`), seconds.
    latency_s: LatencySummary
    #: Wall time of the timed windows, every repeat together, seconds.
    window_s: float
    #: Items completed in the windows / their wall time, summed over instances.
    throughput_items_per_s: float
    #: Compile time, seconds, never inside a window; `None` for a plain callable.
    compile_s: float | None
    #: True when an earlier test of the run compiled the model (`compile_s` is that compile).
    compile_cached: bool
    #: The first call's wall time (lazy initialisation included), seconds.
    first_call_s: float
    #: The compile's phases (export, build, load...), seconds each.
    compile_phases_s: Mapping[str, float] = field(default_factory=dict)
    #: What the backend reported about the compile (plain JSON: options, threads, providers...).
    compile_info: Mapping[str, Any] = field(default_factory=dict)
    #: The outputs against torch eager fp32 (`ParityRecord`), or `None` where not checked.
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
    #: CPU time beside the wall time, and the host cost (`CpuTime`), the repeats pooled; a LoadGen
    #: record's is its run's host cost alone (no rounds); ``None`` in time-to-train records, in
    #: records that predate it, and in older records whose instances ran in worker processes (which
    #: did not report theirs).
    cpu: CpuTime | None = None
    #: How a training step's global batch is made (`TrainingRecord`); `None` for inference.
    training: TrainingRecord | None = None
    #: The runs of a time-to-train benchmark and their olympic average (`TimeToTrainRecord`).
    time_to_train: TimeToTrainRecord | None = None
    #: This benchmark against a run on fewer processes (`ScalingRecord`, `--ipu-scaling-baseline`).
    scaling: ScalingRecord | None = None
    #: An MLPerf LoadGen run: its scenario, verdict, figures and compliance (`LoadgenRecord`).
    loadgen: LoadgenRecord | None = None
    #: Items per round / the median round's wall time, over every round of every repeat
    #: (`metrics.median_round_throughput`): the figure the `throughput` metric reads, which one
    #: stretched round does not move. `None` in records with no timed rounds (LoadGen, time to train),
    #: in merged launch records, and in records that predate it: `throughput` reads
    #: `throughput_items_per_s` there.
    median_throughput_items_per_s: float | None = None
    #: The counts of a call's work (`ipu_cycles`, `host_instructions`), the repeats pooled
    #: (`counts.pool`), or why each was not counted; empty where none was read (LoadGen and
    #: time-to-train records, records that predate them).
    counts: Mapping[str, CountRecord] = field(default_factory=dict)
    #: Always true: the figures were measured. ``ipu_benchmark`` returns ``NotTimed`` (``timed``
    #: false) when pytest-benchmark is not timing; ``if record.timed:`` tells them apart (and
    #: narrows the type for mypy).
    timed: ClassVar[Literal[True]] = True

    @property
    def latency_unsupported(self) -> tuple[str, ...]:
        """The percentiles too few rounds support (the JSON's top-level ``latency_unsupported``)."""
        return self.latency_s.unsupported

    def value(self, metric: str) -> float | None:
        """The value of ``metric`` (a name of ``pytest_ipu.results.catalog.METRICS``: ``latency.p50``,
        ``throughput``, ``energy``...) in SI units, or ``None`` when the record has none (power not
        measured, the compile time of a plain callable). Raises ``KeyError`` for a name that is not
        a metric."""
        return METRICS[metric].value(self)

    def repeat_values(self, metric: str) -> tuple[float, ...]:
        """The metric's value in each independent repeat: the evidence a gate weighs. A record from
        before repeats counts as one repeat (its own value); a metric measured once per benchmark
        (energy, compile) has one value whatever the repeats."""
        return METRICS[metric].repeat_values(self)

    def why_missing(self, metric: str) -> str:
        """Why the record has no value for ``metric``, as specific as the record allows."""
        return METRICS[metric].why_missing(self)

    def no_repeats(self) -> None:
        """``None``: a record's metrics may have a value per repeat (``--ipu-repeats``)."""
        return None

    @property
    def off_cpu(self) -> bool:
        """Whether the thread that ran the rounds of a host CPU target (device ``cpu`` or ``host``)
        was off the CPU for at least ``OFF_CPU_FLAG`` of the windows' wall time: the wall figures
        then count time the benchmark did not run. On an accelerator the thread may wait for the
        device off the CPU, which says nothing of the host, so no flag there."""
        return (
            self.cpu is not None
            and self.cpu.off_cpu_share is not None
            and self.device in ("cpu", "host")
            and self.cpu.off_cpu_share >= OFF_CPU_FLAG
        )

    @property
    def flags(self) -> tuple[str, ...]:
        """The conditions a reader of this figure must know: ``unstable``, ``contended``,
        ``off-cpu`` (``off_cpu``), ``capped``, ``over-budget`` (minimum rounds past the budget),
        ``rounds-limit``."""
        out = []
        if self.stability is not None and self.stability.unstable:
            out.append("unstable")
        if self.contention is not None and self.contention.contended:
            out.append("contended")
        if self.off_cpu:
            out.append("off-cpu")
        if self.budget is not None:
            if self.budget.capped:
                out.append("capped")
            if self.budget.min_rounds_past_budget:
                out.append("over-budget")
            if self.budget.rounds_limited:
                out.append("rounds-limit")
        return tuple(out)


@dataclass(frozen=True)
class NotTimed(Identity):
    """What ``ipu_benchmark`` returns when pytest-benchmark is not timing (``--benchmark-disable``,
    or under pytest-xdist, where pytest-benchmark disables itself): the model was called once, as a
    test, and nothing was measured or recorded.

    It names what ran (the same fields as ``IpuRecord``) and ``reason``. The figures
    (``latency_s``, ``throughput_items_per_s``, ``power``...) do not exist: reading one raises
    ``AttributeError`` naming the reason, so an assertion on a figure fails instead of passing on
    a zero. Guard figure checks with ``if record.timed:``.
    """

    #: The batch: the items per call the benchmark passed, else the leading dimension of the first input.
    batch_size: int
    #: Items one call completes.
    items_per_call: int
    #: Why nothing was timed, and how to time it.
    reason: str
    #: Always false: nothing was measured (``IpuRecord.timed`` is always true).
    timed: ClassVar[Literal[False]] = False

    def __getattr__(self, name: str) -> NoReturn:
        # Only called for names the dataclass lacks: a figure of IpuRecord gets the reason.
        if name in IpuRecord.__dataclass_fields__ or name == "latency_unsupported":
            raise AttributeError(
                f"record.{name}: this benchmark was not timed ({self.reason}); "
                "its figures exist only when record.timed is true"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


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
