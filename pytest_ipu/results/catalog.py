"""The registry of reported metrics: the one place a metric is declared.

Each ``Metric`` says all that the rest of pytest-ipu knows of it: its name, its ``path`` (both the
record's JSON keys and the typed record's attributes, so the readers here walk a typed record), its
unit (which also says which way is better), how its independent measurements are read, why a value
may be missing, and for a plain benchmark where pytest-benchmark keeps it (``plain``,
``PlainSource``; pytest-benchmark's own names are ``ALIASES``, ``canonical``). Only the units registry
is imported, so that the gate grammar, which ``pytest --help`` loads, names the metrics without the
records.

Documented in docs/architecture.md (section "Questions a newcomer asks": how to add a gate metric) and
docs/ci.md (sections "Gate expressions" and "A plain pytest-benchmark suite").
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_ipu.measure import units


def _walk(obj: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` below ``obj`` (an attribute of a record part, a key of a mapping such as
    ``loadgen.latency_s``); ``None`` where a part on the way is ``None`` or a key is absent."""
    for key in path:
        if obj is None:
            return None
        obj = obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key)
    return obj


@dataclass(frozen=True)
class PlainSource:
    """Where pytest-benchmark keeps a metric for a benchmark of its own ``benchmark`` fixture: one
    of its time statistics (``stat``: ``min``, ``median``, ``mean``, ``max``), as it is or as calls
    per second (``per_second``: ``1 / stat``), or a quantile of its per-round data (``quantile``,
    0 to 1; only where the file keeps ``stats.data``)."""

    stat: str | None = None
    per_second: bool = False
    quantile: float | None = None


@dataclass(frozen=True)
class Metric:
    """A reported number, declared once: name, place in the record, unit, how its independent
    measurements are read, and why it may be missing."""

    #: The name gates and `pytest-ipu compare` use (`latency.p99`).
    name: str
    #: Its place in the record: the JSON keys under `extra_info["ipu"]`, which are also the typed
    #: record's attribute names (`("power", "energy_j")`: `record.power.energy_j`).
    path: tuple[str, ...]
    #: Its unit (`units.UNITS`), which also says which way is better.
    unit: str
    #: True when every independent repeat measures it: a repeat's value is at `path` in that
    #: repeat (`RepeatRecord`). False for a figure measured once per benchmark (energy, compile).
    #: A record whose repeats lack it (written before the metric existed) has it once, or not.
    per_repeat: bool = False
    #: Where the record keeps independent measurements of the metric itself (a time-to-train
    #: benchmark's kept runs), which a gate weighs before repeats; `None` for none.
    runs: tuple[str, ...] | None = None
    #: Why a record has no value for it, as a gate's message says it (given the typed record);
    #: returning `None`, or left `None`, gives "the record has no value at <path>".
    missing: Callable[[Any], str | None] | None = None
    #: Where pytest-benchmark keeps it for a benchmark of its own fixture; `None`: such a benchmark
    #: has no value for it.
    plain: PlainSource | None = None
    #: Where a record that has nothing at `path` keeps the metric as it was defined before (a record
    #: written before `path` was kept, or one with no rounds to define it by); `None` for nowhere.
    #: `definition` says which a record's value comes from, and figures of two definitions are
    #: never compared (`unlike`).
    fallback: tuple[str, ...] | None = None
    #: True for a count of the program's own work that repeats exactly (the IPU's cycles per call: a
    #: property of the compiled graph). The machine's load and drift do not move it, so a gate whose
    #: sides each repeat exactly is decided on the values themselves (`decide`'s exact rule), and
    #: a level shift of the machine takes back none of its verdicts (`level_shift`).
    exact: bool = False

    @property
    def better(self) -> units.Better:
        """``lower`` or ``higher``: the direction in which the metric improves."""
        return units.UNITS[self.unit].better

    def value(self, record: Any) -> float | None:
        """The metric's value in a typed record (``IpuRecord``) or repeat (``RepeatRecord``), SI
        units; ``None`` when the record has none."""
        value = _walk(record, self._path(record))
        return None if value is None else float(value)

    def _path(self, record: Any) -> tuple[str, ...]:
        """``path``, or ``fallback`` where the record has nothing at ``path``."""
        if self.fallback is not None and _walk(record, self.path) is None:
            return self.fallback
        return self.path

    def definition(self, record: Any) -> str:
        """Which definition a record's value follows: its JSON path, dotted."""
        return ".".join(self._path(record))

    def unlike(self, *records: Any) -> str | None:
        """Why the records' values of this metric cannot be compared (they follow different
        definitions: ``fallback``), naming both; ``None`` when they can."""
        kinds = {self.definition(r) for r in records if r is not None}
        if len(kinds) < 2:
            return None
        return (
            f"{self.name} is {' in some records, '.join(sorted(kinds))} in others: unlike figures; "
            f"compare records that both have {'.'.join(self.path)} (save the baselines again)"
        )

    def repeat_values(self, record: Any) -> tuple[float, ...]:
        """The metric's independent measurements in a typed record: the runs it keeps (``runs``),
        else each repeat's value (``per_repeat``), else its one value (none when it has none)."""
        if self.runs is not None:
            kept = _walk(record, self.runs)
            if kept is not None:
                return tuple(float(v) for v in kept)
        if self.per_repeat and record.repeats:
            # The record's own definition in every repeat: a pooled figure and its repeats alike.
            path = self._path(record)
            each = [_walk(r, path) for r in record.repeats]
            if all(v is not None for v in each):
                return tuple(float(v) for v in each)
        value = self.value(record)
        return () if value is None else (value,)

    def why_missing(self, record: Any) -> str:
        """Why a typed record has no value for the metric, as specific as the record allows."""
        reason = None if self.missing is None else self.missing(record)
        return reason or f"the record has no value at {'.'.join(self.path)}"


def _power_missing(record: Any) -> str | None:
    if record.power is None:
        return "power not measured (the record has no power section)"
    return f"power not measured: {record.power.reason}" if record.power.reason else None


def _loadgen_missing(record: Any, name: str) -> str:
    if record.loadgen is None:
        return "not a LoadGen benchmark (loadgen metrics come from ipu_loadgen)"
    scenario = record.loadgen.scenario
    article = "an" if scenario[0] in "AEIOU" else "a"
    return f"LoadGen reported no {name} for {article} {scenario} run"


def _cpu_missing(record: Any) -> str:
    placement = record.placement
    if record.cpu is None and placement is not None and placement.runner == "processes":
        return (
            "no CPU time: the instances ran in worker processes that reported none (a record written "
            "before workers reported their CPU time)"
        )
    if record.cpu is not None and record.cpu.process_s is None:
        return (
            "no CPU time per call: a LoadGen benchmark has no timed rounds (its run's host cost is in "
            "host_cpu_per_item and host_cores)"
        )
    if record.cpu is not None:
        return "no host cost: the record predates it (written before host CPU time per item and host cores)"
    if record.loadgen is not None:
        return "no CPU time: a LoadGen record written before LoadGen runs measured their host cost"
    if record.time_to_train is not None:
        return "no CPU time: a time-to-train benchmark has no timed rounds"
    return "no CPU time: the record predates it"


def counted(name: str, unit: str, *, exact: bool, kept_by: str, in_workers: bool = False) -> Metric:
    """The metric of a count of each call's work, read in every repeat and kept under
    ``counts[name]`` (``counts.CountRecord``): its value is the count per call, each repeat's its
    own. ``kept_by`` says which records keep it (``the IPU backends, poptorch and popart, keep it,
    for inference``), for the reason a record without it gives; ``in_workers`` where instances in
    worker processes are counted too (the host's counters count their processes; a device's count is
    each worker's own). The one place a count per call in each repeat becomes a metric: a second
    counter is one more call here, with the readings under its own name."""

    def missing(record: Any) -> str | None:
        count = record.counts.get(name) if record.counts else None
        if count is not None:
            return f"{name} not counted: {count.reason}" if count.reason else None
        if record.loadgen is not None:
            return f"{name} not counted: a LoadGen benchmark has no timed rounds"
        if record.time_to_train is not None:
            return f"{name} not counted: a time-to-train benchmark has no timed rounds"
        placement = record.placement
        if not in_workers and record.instances and placement is not None and placement.runner == "processes":
            return (
                f"{name} not counted: {len(record.instances)} instances ran in worker processes (each keeps "
                "its own count there; a group of worker processes reports none)"
            )
        return (
            f"{name} not counted: the record has no such count ({kept_by}; records that predate it have none)"
        )

    return Metric(name, ("counts", name, "per_call"), unit, per_repeat=True, missing=missing, exact=exact)


#: pytest-benchmark's statistic of each latency figure (p90 and p99 it does not compute: they come
#: from its per-round data).
_PLAIN_STAT = {"min": "min", "p50": "median", "max": "max", "mean": "mean"}


def _latency(key: str) -> Metric:
    stat = _PLAIN_STAT.get(key)
    plain = PlainSource(stat=stat) if stat is not None else PlainSource(quantile=int(key[1:]) / 100.0)
    return Metric(f"latency.{key}", ("latency_s", key), "s", per_repeat=True, plain=plain)


def _power(name: str, key: str, unit: str) -> Metric:
    return Metric(name, ("power", key), unit, missing=_power_missing)


def _loadgen(name: str, path: tuple[str, ...], unit: str) -> Metric:
    shown = ".".join(path)
    return Metric(f"loadgen.{name}", ("loadgen", *path), unit, missing=lambda r: _loadgen_missing(r, shown))


#: Every metric by name, in the order tables show them.
METRICS: Mapping[str, Metric] = {
    m.name: m
    for m in (
        *(_latency(k) for k in ("min", "p50", "p90", "p99", "max", "mean")),
        # Items per round over the median round (docs/numbers.md): the rounds' throughput, which a
        # neighbour's time slice in one round does not move; the window's figure where a record has
        # no rounds to take a median of, or predates it. For a plain benchmark the same, from its
        # statistics: calls per second over its median round, 1 / median.
        Metric(
            "throughput",
            ("median_throughput_items_per_s",),
            "items/s",
            per_repeat=True,
            fallback=("throughput_items_per_s",),
            plain=PlainSource(stat="median", per_second=True),
        ),
        # The process's CPU time per round (every thread: a runtime's worker threads are host work
        # too; and its instance worker processes'), which other processes barely move; the median
        # over the rounds.
        Metric("cpu_time", ("cpu", "process_s"), "s", per_repeat=True, missing=_cpu_missing),
        # The host cost of the work (docs/numbers.md): every process of the benchmark, its instance
        # workers included, over the timed windows; per item, and as cores kept busy.
        Metric("host_cpu_per_item", ("cpu", "host_per_item_s"), "s", per_repeat=True, missing=_cpu_missing),
        Metric("host_cores", ("cpu", "host_cores"), "cores", per_repeat=True, missing=_cpu_missing),
        # The user-space instructions of every process of the benchmark per call (one timed round),
        # counted over the timed windows where the kernel has the hardware counter: the CPU's
        # counterpart of an IPU's cycle count, which a busy neighbour barely moves. Not exact: a
        # process's bookkeeping (allocation, the garbage collector) differs from run to run.
        counted(
            "host_instructions",
            "instructions",
            exact=False,
            kept_by="every benchmark timed in rounds keeps it",
            in_workers=True,
        ),
        Metric(
            "compile",
            ("compile_s",),
            "s",
            missing=lambda r: "no compile time (the benchmarked object was not a compiled model)",
        ),
        Metric("first_call", ("first_call_s",), "s"),
        _power("energy", "energy_j", "J"),
        _power("power", "mean_power_w", "W"),
        _power("energy_per_item", "energy_per_item_j", "J"),
        _power("items_per_j", "items_per_j", "items/J"),
        # Each kept run of a time-to-train benchmark is an independent measurement of its time.
        Metric(
            "time_to_train", ("time_to_train", "olympic_s"), "s", runs=("time_to_train", "olympic_times_s")
        ),
        # LoadGen benchmarks (``ipu_loadgen``): Server QPS is queries of one sample per second.
        Metric(
            "loadgen.server_qps",
            ("loadgen", "server_qps"),
            "items/s",
            missing=lambda r: _loadgen_missing(r, "") if r.loadgen is None else r.loadgen.why_no_server_qps(),
        ),
        _loadgen("samples_per_s", ("samples_per_s",), "items/s"),
        *(_loadgen(k, ("latency_s", k), "s") for k in ("p50", "p90", "p99")),
        _loadgen("early_stopping_latency", ("early_stopping_latency_s",), "s"),
        # The IPU's own cycle count per call (PopTorch's cycleCount, PopART's getCycleCount), read in
        # every repeat's counting pass: the compiled program's, which no neighbour of the host moves.
        counted(
            "ipu_cycles",
            "cycles",
            exact=True,
            kept_by="the IPU backends, poptorch and popart, keep it, for inference",
        ),
    )
}


#: pytest-benchmark's names of its time statistics, accepted wherever a metric is named: each is the
#: latency figure it is (a record's latency figures are the same rounds' statistics).
ALIASES: Mapping[str, str] = {f"time.{stat}": f"latency.{key}" for key, stat in _PLAIN_STAT.items()}


def canonical(name: str) -> str:
    """The metric ``name`` stands for: an alias's metric (``time.median``: ``latency.p50``), else
    ``name`` itself."""
    return ALIASES.get(name, name)
