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

from pytest_ipu.measure import instructions
from pytest_ipu.measure.contention import ContentionRecord
from pytest_ipu.measure.metrics import OFF_CPU_FLAG
from pytest_ipu.measure.metrics import CpuTime
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.measure.metrics import call_time_problem
from pytest_ipu.measure.metrics import summarize_latency
from pytest_ipu.results import codec
from pytest_ipu.results import counts
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.codec import RECORD
from pytest_ipu.results.codec import Coded
from pytest_ipu.results.codec import fields_of
from pytest_ipu.results.codec import meta
from pytest_ipu.results.counts import CountRecord
from pytest_ipu.results.loadgen import LoadgenRecord
from pytest_ipu.results.training import ScalingRecord
from pytest_ipu.results.training import TimeToTrainRecord
from pytest_ipu.results.training import TrainingRecord
from pytest_ipu.results.values import ABSENT

if TYPE_CHECKING:
    from pytest_ipu.results.gates import Gate


def group_name(group: str | None, name: str) -> str:
    """The table a benchmark belongs to: its pytest-benchmark group, else its test function's name
    (``test_mlp[torch-cpu-4]`` -> ``test_mlp``). Every table, plot, comparison and summary groups
    benchmarks by this."""
    return group or name.partition("[")[0]


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


def read_latency(data: Mapping[str, Any], at: str, rounds_key: str) -> LatencySummary:
    """The ``latency_s`` of an instance or a repeat: its statistics, its rounds (``rounds_key`` of
    the object where the summary lacks them) and its unsupported percentiles."""
    name = f"{at}latency_s"
    lat = RECORD.mapping(data.get("latency_s", ABSENT), name)
    rounds = RECORD.whole(codec.get(lat, "rounds", data.get(rounds_key)), f"{name}.rounds")
    return checked_latency(codec.from_json(LatencySummary, {**lat, "rounds": rounds}, f"{name}."), f"{name}.")


def checked_latency(lat: LatencySummary, at: str) -> LatencySummary:
    """``lat`` where each statistic is a time a timed call can take (``call_time_problem``) once
    rounds ran; raises ``SchemaError`` naming the first that is not."""
    for key in ("min", "p50", "p90", "p99", "max", "mean"):
        value = getattr(lat, key)
        problem = call_time_problem(value) if lat.rounds > 0 else None
        if problem is not None:
            raise RECORD.refuse(value, at + key, problem=problem)
    return lat


def _record_latency(data: Mapping[str, Any], at: str) -> LatencySummary:
    """A record's ``latency_s``: its statistics, over the record's ``rounds``, with its
    ``latency_unsupported`` percentiles beside it."""
    lat = RECORD.mapping(data.get("latency_s", ABSENT), f"{at}latency_s")
    rounds = RECORD.whole(data.get("rounds", ABSENT), f"{at}rounds")
    name = f"{at}latency_unsupported"
    unsupported = [
        RECORD.text(v, f"{name}[{i}]")
        for i, v in enumerate(RECORD.array(data.get("latency_unsupported", ABSENT), name))
    ]
    summary = codec.from_json(
        LatencySummary, {**lat, "rounds": rounds, "unsupported": unsupported}, f"{at}latency_s."
    )
    return checked_latency(summary, f"{at}latency_s.")


#: The figures of a ``cpu`` that are per timed round: null in a LoadGen record's (a run of no rounds).
_PER_ROUND = ("process_s", "thread_s", "thread_total_s", "off_cpu_share")


def read_cpu(data: Mapping[str, Any], at: str, rounds: bool = False) -> CpuTime | None:
    """The ``cpu`` of a record or, with ``rounds``, of a repeat (of timed rounds, so every figure is
    a number); ``None`` where absent or null. Its per-round figures are there in every record that
    has one, null in a LoadGen record's."""
    if data.get("cpu") is None:
        return None
    name = f"{at}cpu"
    found = RECORD.mapping(data["cpu"], name)
    for key in _PER_ROUND:
        value = found.get(key, ABSENT)
        if value is ABSENT or (rounds and value is None):
            raise RECORD.refuse(
                value, f"{name}.{key}", "a number >= 0" if rounds else "a number >= 0 or null"
            )
    # Absent from records written before them: no workers then (a record whose instances ran in
    # worker processes had no ``cpu``), and no host cost: the fields' defaults.
    return codec.from_json(CpuTime, found, f"{name}.")


def read_counts(data: Mapping[str, Any], at: str) -> dict[str, CountRecord]:
    """A record's or repeat's ``counts`` by name; none in records written before them. A
    ``host_instructions`` object beside them (written before that count joined ``counts``) reads
    as ``counts["host_instructions"]``."""
    found: dict[str, CountRecord] = {}
    if data.get("counts") is not None:
        kept = RECORD.mapping(data["counts"], f"{at}counts")
        found = {
            str(name): CountRecord.from_json(
                RECORD.mapping(value, f"{at}counts.{name}"), f"{at}counts.{name}."
            )
            for name, value in kept.items()
        }
    if data.get("host_instructions") is not None and "host_instructions" not in found:
        legacy = RECORD.mapping(data["host_instructions"], f"{at}host_instructions")
        found["host_instructions"] = _legacy_instructions(legacy, f"{at}host_instructions.")
    return found


def _legacy_instructions(data: Mapping[str, Any], at: str) -> CountRecord:
    """A ``host_instructions`` object written before the host's instructions joined ``counts``, as
    the count ``counts["host_instructions"]``: its total over its calls, or its reason."""
    total = None if data.get("total") is None else RECORD.whole(data["total"], f"{at}total")
    calls = RECORD.whole(codec.get(data, "calls", 0), f"{at}calls")
    if not RECORD.flag(data.get("available", ABSENT), f"{at}available") or total is None or calls < 1:
        why = (
            RECORD.text(codec.get(data, "reason", ""), f"{at}reason")
            or "the counter did not count the window"
        )
        return counts.not_counted(f"the hardware counter is not available: {why}")
    processes = RECORD.whole(codec.get(data, "processes", 0), f"{at}processes")
    threads = RECORD.whole(codec.get(data, "threads", 0), f"{at}threads")
    return counts.over_window(total, calls, counts.TIMED_WINDOW, instructions.scope(processes, threads))


#: How the power meter's warning about a window too short for the sensor began, before records
#: carried the ``low_confidence`` flag.
_OLD_LOW_CONFIDENCE = "low confidence"


def _old_low_confidence(data: Mapping[str, Any]) -> bool:
    """A power object written before the ``low_confidence`` flag: the meter's warning was the only
    sign of it (its ``warnings`` are read, and checked, before the flag)."""
    return any(str(w).startswith(_OLD_LOW_CONFIDENCE) for w in data.get("warnings") or ())


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
class DeviceEnergy(Coded):
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


@dataclass(frozen=True)
class PowerRecord(Coded):
    """Energy over one timed window, or why there is none (``measured`` false, ``reason`` set).

    ``items_per_j`` equals items/s/W: (items / window) / (energy / window). ``idle_power_w`` is
    reported beside the total and never subtracted from it. ``valid`` is false when the window's
    energy cannot be trusted (its reason or warnings say why). ``low_confidence`` is true when the
    window was shorter than the sensor needs; ``warnings`` then says by how much.
    """

    #: True when a source measured the window's energy.
    measured: bool
    #: The power source (`nvml`, `rapl`, `gcipuinfo`), or `none`.
    source: str = field(metadata=meta(old=""))
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
    low_confidence: bool = field(
        default=False, metadata=meta(old_from=lambda data, at: _old_low_confidence(data))
    )

    #: Written for readers of the file, after the key named: derived from `devices`.
    JSON_DERIVED = (("scope", "integration"),)

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


@dataclass(frozen=True)
class ParityRecord(Coded):
    """The comparison of one compiled model's outputs against the reference on the example inputs."""

    #: What the outputs were compared against (torch eager fp32 on the CPU).
    reference: str
    #: Largest absolute difference over every output element (+Infinity for a non-finite output).
    max_abs: float = field(metadata=meta(number="inf"))
    #: Largest difference relative to the reference's magnitude (+Infinity for a non-finite output).
    max_rel: float = field(metadata=meta(number="inf"))
    #: The relative tolerance of the precision that ran (fp16 looser than fp32).
    tolerance: float

    #: Written for readers of the file, last: derived from the numbers.
    JSON_DERIVED = (("passed", None),)

    @property
    def passed(self) -> bool:
        """Whether ``max_rel`` is within the tolerance."""
        return self.max_rel <= self.tolerance


@dataclass(frozen=True)
class PlacementRecord(Coded):
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
    simulator: bool = field(default=False, metadata=meta(omit_if=False, after="shared_device"))
    #: On IPU hardware, each instance's IPU ids (stored only there).
    ipu_ids: tuple[tuple[int, ...], ...] | None = field(
        default=None, metadata=meta(omit_if=None, after="runner")
    )
    #: On IPU hardware, the devices found (plain JSON; stored only there).
    inventory: Mapping[str, Any] | None = field(default=None, metadata=meta(omit_if=None))


@dataclass(frozen=True)
class InstanceInfo(Coded):
    """What one instance's compile produced: where it runs, how long compiling took, and its facts
    (``backends.base.InstanceGroup.compiled_info``); its record (``InstanceRecord``) extends it.

    ``compile_s`` is ``None`` when nobody timed the compile; ``phases_s`` and ``info`` are the
    backend's own breakdown and plain-JSON facts (``CompiledModel.phases_s`` and ``.info``).
    """

    #: The instance's position, from 0.
    index: int
    #: The target it ran on.
    target: str = field(metadata=meta(old=""))
    #: Its device.
    device: str
    #: Its device's own name.
    device_name: str = field(metadata=meta(old=""))
    #: Its compile time, seconds; `None` for a plain callable.
    compile_s: float | None
    #: Its compile phases, seconds each.
    phases_s: Mapping[str, float] = field(metadata=meta(old={}))
    #: What its backend reported about it (plain JSON).
    info: Mapping[str, Any] = field(metadata=meta(old={}))


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
    latency_s: LatencySummary = field(metadata=meta(read=lambda data, at: read_latency(data, at, "calls")))
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


#: How a repeat's timed rounds ended: every planned round ran, the time budget was reached, or the
#: hard cap was (``measure.timing.Ending``).
Ending = Literal["planned", "budget", "cap"]


@dataclass(frozen=True)
class RepeatRecord(Coded):
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
    latency_s: LatencySummary = field(metadata=meta(read=lambda data, at: read_latency(data, at, "rounds")))
    #: Its items / its window.
    throughput_items_per_s: float
    #: How its rounds ended: `planned` (every planned round ran), `budget` or `cap`.
    ended: Ending = "planned"
    #: `this` (the pytest process) or `worker` (a fresh worker process, `--ipu-repeat-mode=process`).
    process: str = "this"
    #: Its CPU time beside its wall time, and the host cost (`CpuTime`); `None` in records that
    #: predate it, and in older records whose instances ran in worker processes.
    cpu: CpuTime | None = field(
        default=None, metadata=meta(read=lambda data, at: read_cpu(data, at, rounds=True))
    )
    #: When its window opened, Unix seconds (wall clock): where a merge of separate processes' records
    #: lays their windows side by side; `None` in records that predate it.
    start_unix_s: float | None = None
    #: Items per round / its median round's wall time (`metrics.median_round_throughput`): the
    #: figure the `throughput` metric reads; `None` in records that predate it.
    median_throughput_items_per_s: float | None = field(default=None, metadata=meta(omit_if=None))
    #: The counts of a call's work in this repeat, by the metric each feeds (`counts.CountRecord`):
    #: the device's (`ipu_cycles`) and the host's user-space instructions over its timed window
    #: (`host_instructions`), or why each was not counted; empty in records that predate them.
    counts: Mapping[str, CountRecord] = field(
        default_factory=dict, metadata=meta(omit_if={}, read=read_counts)
    )

    def value(self, metric: str) -> float | None:
        """This repeat's value of a per-round metric (``latency.*``, ``throughput``, ``cpu_time``,
        ``host_cpu_per_item``, ``host_cores``, ``host_instructions``); ``None`` for a metric measured
        once per benchmark (energy, compile), or one this repeat lacks (``cpu_time`` in an older
        record)."""
        known = METRICS.get(metric)
        return known.value(self) if known is not None and known.per_repeat else None


@dataclass(frozen=True)
class BudgetRecord(Coded):
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
    ended: Ending = field(metadata=meta(old="planned"))
    #: True when the minimum rounds ran the window more than a quarter past the budget (flag `over-budget`).
    min_rounds_past_budget: bool = False
    #: True when the most rounds pytest-ipu plans ended the window a quarter short of the budget (flag
    #: `rounds-limit`).
    rounds_limited: bool = False

    #: Written for readers of the file, each after the key named.
    JSON_DERIVED = (("ratio", "window_s"), ("capped", "ended"))

    @property
    def ratio(self) -> float | None:
        """Window / budget; ``None`` for fixed rounds."""
        return None if not self.budget_s else self.window_s / self.budget_s

    @property
    def capped(self) -> bool:
        """Whether the hard cap ended rounds that were still running."""
        return self.ended == "cap"


@dataclass(frozen=True)
class StabilityRecord(Coded):
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

    #: Written for readers of the file, after the key named.
    JSON_DERIVED = (("basis", "round_spread"),)

    @property
    def basis(self) -> str:
        """Which figure decided: ``"repeats"`` (the CV) or ``"rounds"`` (the spread)."""
        return "repeats" if self.cv is not None else "rounds"


@dataclass(frozen=True)
class IpuRecord(Identity, Coded):
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
    #: Latency per call over every timed round of every repeat (`LatencySummary`), seconds: its
    #: statistics; its rounds are the record's, its unsupported percentiles `latency_unsupported`.
    latency_s: LatencySummary = field(
        metadata=meta(read=lambda data, at: _record_latency(data, at), write=latency_stats)
    )
    #: Wall time of the timed windows, every repeat together, seconds.
    window_s: float
    #: Items completed in the windows / their wall time, summed over instances.
    throughput_items_per_s: float
    #: Compile time, seconds, never inside a window; `None` for a plain callable.
    compile_s: float | None = field(metadata=meta(required=True))
    #: True when an earlier test of the run compiled the model (`compile_s` is that compile).
    compile_cached: bool
    #: The first call's wall time (lazy initialisation included), seconds.
    first_call_s: float
    #: The compile's phases (export, build, load...), seconds each.
    compile_phases_s: Mapping[str, float] = field(default_factory=dict, metadata=meta(null_ok=False))
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
    cpu: CpuTime | None = field(default=None, metadata=meta(read=read_cpu))
    #: How a training step's global batch is made (`TrainingRecord`); `None` for inference.
    training: TrainingRecord | None = field(default=None, metadata=meta(omit_if=None))
    #: The runs of a time-to-train benchmark and their olympic average (`TimeToTrainRecord`).
    time_to_train: TimeToTrainRecord | None = field(default=None, metadata=meta(omit_if=None))
    #: This benchmark against a run on fewer processes (`ScalingRecord`, `--ipu-scaling-baseline`).
    scaling: ScalingRecord | None = field(default=None, metadata=meta(omit_if=None))
    #: An MLPerf LoadGen run: its scenario, verdict, figures and compliance (`LoadgenRecord`).
    loadgen: LoadgenRecord | None = field(default=None, metadata=meta(omit_if=None))
    #: Items per round / the median round's wall time, over every round of every repeat
    #: (`metrics.median_round_throughput`): the figure the `throughput` metric reads, which one
    #: stretched round does not move. `None` in records with no timed rounds (LoadGen, time to train),
    #: in merged launch records, and in records that predate it: `throughput` reads
    #: `throughput_items_per_s` there.
    median_throughput_items_per_s: float | None = field(
        default=None, metadata=meta(omit_if=None, after="cpu")
    )
    #: The counts of a call's work (`ipu_cycles`, `host_instructions`), the repeats pooled
    #: (`counts.pool`), or why each was not counted; empty where none was read (LoadGen and
    #: time-to-train records, records that predate them).
    counts: Mapping[str, CountRecord] = field(
        default_factory=dict, metadata=meta(omit_if={}, after="cpu", read=read_counts)
    )
    #: Always true: the figures were measured. ``ipu_benchmark`` returns ``NotTimed`` (``timed``
    #: false) when pytest-benchmark is not timing; ``if record.timed:`` tells them apart (and
    #: narrows the type for mypy).
    timed: ClassVar[Literal[True]] = True
    #: Written for readers of the file, after the key named.
    JSON_DERIVED = (("latency_unsupported", "latency_s"),)

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
