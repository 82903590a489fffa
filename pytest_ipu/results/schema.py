"""The versioned JSON contract of pytest-ipu's namespace, ``extra_info["ipu"]``, and its metrics.

Every stored number is in SI units with the unit in the key (``_s``, ``_per_s``); display code
scales. Version history (additive changes only within a version):

- 1: target, backend, device, precision, io, batch and round counts, latency summary with
  unsupported percentiles, timed window, throughput, compile and first-call times; then (additive)
  compile_phases_s, compile_info, parity and power; then (additive) simulator, placement,
  instances (per-instance latency when several run concurrently) and device_latency; then
  (additive) the power object's ``low_confidence`` flag. A record written before the flag has it
  derived from the meter's warning, which started with "low confidence" (``from_json``).
- 2: a benchmark is measured in independent repeats. ``repeats`` (each repeat's rounds, window,
  latency summary, throughput, how its rounds ended and in which process), ``budget`` (the window
  against its time budget and hard cap), ``stability`` (the spread between repeats, ``unstable``)
  and ``contention`` (other processes' share of the CPU during the windows, ``contended``). The
  top-level figures pool the repeats. A version-1 record reads as one repeat without these parts
  (``IpuRecord.repeat_values`` gives its own value); it is written back as version 2. Then
  (additive) ``cpu``, of the record and of each repeat: CPU time beside the wall time (per round,
  of the process and of the timing thread; their totals; the timing thread's off-CPU share). A
  record written before it reads with ``cpu`` null, and the ``cpu_time`` metric has no value there.
  Then (additive) the power object's ``scope`` (``ipus``, ``board``, or the devices' own; derived
  from its devices, as it was written) and each power device's ``ipus`` and ``unused_ipus`` (the
  IPUs a reading covers, and which of them the benchmark did not use); older devices read with none.
  Then (additive) within ``cpu``: ``workers`` and ``workers_total_s`` (the instance worker processes
  whose CPU time the process figures now count; ``cpu`` is no longer null for instances in worker
  processes), ``host_per_item_s`` and ``host_cores`` (the host cost: the ``host_cpu_per_item`` and
  ``host_cores`` metrics). A ``cpu`` written before them reads with no workers and the host cost
  null, and those metrics have no value there. Then (additive) a LoadGen record's ``cpu``: its run's
  host cost (``process_total_s``, ``workers``, ``workers_total_s``, ``host_per_item_s``,
  ``host_cores``), with ``process_s``, ``thread_s``, ``thread_total_s`` and ``off_cpu_share`` null
  (no rounds); it was null before. Then (additive) ``host_instructions``, of the record
  and of each repeat: the user-space instructions of the benchmark's processes per call over the
  timed windows (``available``, ``per_call``, ``total``, ``calls``, ``read``, ``processes``,
  ``threads``, ``reason``). Then (additive) ``counts``, of the record and of each repeat: the counts
  of a call's work, by the metric each feeds (``ipu_cycles``: cycles per call, each counting call's
  read, the clock and the device time they mean, or why nothing was counted; ``host_instructions``:
  the window's ``total`` over its ``calls``, with the ``scope`` counted, or why not). Absent where
  none was read; a record written before it reads with no counts, and those metrics have no value
  there, but for a ``host_instructions`` object, which reads as ``counts["host_instructions"]``
  (the host's instructions are written there now).

The metrics (``METRICS``: name, place in this JSON, unit) are defined in ``catalog``. ``to_json``
writes a typed ``IpuRecord`` (its parts write themselves: ``PowerRecord.as_json`` and
the others); ``from_json`` reads any record of a version this code knows back into one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import TypeVar

from pytest_ipu.measure import instructions
from pytest_ipu.measure.contention import DEFAULT_THRESHOLD as DEFAULT_CONTENTION_THRESHOLD
from pytest_ipu.measure.contention import ContentionRecord
from pytest_ipu.measure.metrics import CpuTime
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.results import counts
from pytest_ipu.results.catalog import METRICS as METRICS
from pytest_ipu.results.catalog import Metric as Metric
from pytest_ipu.results.counts import CountRecord
from pytest_ipu.results.loadgen import BatchingRecord
from pytest_ipu.results.loadgen import LoadgenRecord
from pytest_ipu.results.loadgen import PeakSearch
from pytest_ipu.results.loadgen import ServerProbe
from pytest_ipu.results.records import BudgetRecord
from pytest_ipu.results.records import DeviceEnergy
from pytest_ipu.results.records import Identity
from pytest_ipu.results.records import InstanceRecord
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import ParityRecord
from pytest_ipu.results.records import PlacementRecord
from pytest_ipu.results.records import PowerRecord
from pytest_ipu.results.records import RepeatRecord
from pytest_ipu.results.records import StabilityRecord
from pytest_ipu.results.records import counts_json
from pytest_ipu.results.records import identity
from pytest_ipu.results.records import latency_json as latency_json
from pytest_ipu.results.records import latency_stats
from pytest_ipu.results.training import CurvePoint
from pytest_ipu.results.training import ScalingRecord
from pytest_ipu.results.training import TimeToTrainRecord
from pytest_ipu.results.training import TrainingRecord
from pytest_ipu.results.training import TrainRun

SCHEMA_VERSION = 2
NAMESPACE = "ipu"

#: How the power meter's warning about a window too short for the sensor began, before records
#: carried the ``low_confidence`` flag.
_OLD_LOW_CONFIDENCE = "low confidence"


class SchemaError(ValueError):
    """A JSON object that is not a pytest-ipu record of a version this code can read."""


def to_json(record: IpuRecord) -> dict[str, Any]:
    """The plain-JSON form stored under ``extra_info["ipu"]`` (only str, int, float, bool, None)."""
    lat = record.latency_s
    return {
        "schema": SCHEMA_VERSION,
        **identity(record),
        "batch_size": record.batch_size,
        "items_per_call": record.items_per_call,
        "rounds": record.rounds,
        "rounds_policy": record.rounds_policy,
        "warmup_rounds": record.warmup_rounds,
        "latency_s": latency_stats(lat),
        "latency_unsupported": list(lat.unsupported),
        "window_s": record.window_s,
        "throughput_items_per_s": record.throughput_items_per_s,
        "compile_s": record.compile_s,
        "compile_cached": record.compile_cached,
        "first_call_s": record.first_call_s,
        "compile_phases_s": dict(record.compile_phases_s),
        "compile_info": dict(record.compile_info),
        "parity": None if record.parity is None else record.parity.as_json(),
        "power": None if record.power is None else record.power.as_json(),
        "simulator": record.simulator,
        "placement": None if record.placement is None else record.placement.as_json(),
        "instances": None if record.instances is None else [i.as_json() for i in record.instances],
        "device_latency": None if record.device_latency is None else dict(record.device_latency),
        "repeats": [r.as_json() for r in record.repeats],
        "budget": None if record.budget is None else record.budget.as_json(),
        "stability": None if record.stability is None else record.stability.as_json(),
        "contention": None if record.contention is None else record.contention.as_json(),
        "cpu": None if record.cpu is None else record.cpu.as_json(),
        # Absent, not null, where there is none: such records are written as they always were.
        **(
            {}
            if record.median_throughput_items_per_s is None
            else {"median_throughput_items_per_s": record.median_throughput_items_per_s}
        ),
        **counts_json(record.counts),
        # The training parts are absent, not null, from inference records: those are written as
        # they always were.
        **{
            key: part.as_json()
            for key, part in (
                ("training", record.training),
                ("time_to_train", record.time_to_train),
                ("scaling", record.scaling),
                ("loadgen", record.loadgen),
            )
            if part is not None
        },
    }


def read_version(version: Any, what: str) -> int:
    """A schema version this code reads (a whole number from 1 to ``SCHEMA_VERSION``), of ``what``
    (a record, the run's section); raises ``SchemaError`` for anything else."""
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SchemaError(f"not a pytest-ipu {what} (schema version {_show(version)})")
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"{what} has schema version {version}, newer than {SCHEMA_VERSION} which this "
            "pytest-ipu reads; upgrade pytest-ipu"
        )
    return version


def _identity(data: Mapping[str, Any]) -> dict[str, Any]:
    """The record's identity fields (``records.Identity``), each a string."""
    return {f.name: _text(data, f.name) for f in dataclasses.fields(Identity)}


def from_json(data: Mapping[str, Any]) -> IpuRecord:
    """Read a record back; raises ``SchemaError`` naming the key (a dotted path such as
    ``power.devices[0].energy_j``), its value and the fix.

    Every value is checked where it is read, so a corrupt or hand-edited record never reaches a
    table, a gate or a plot: a time, rate, energy or share must be a finite number >= 0, a count a
    whole number >= 0, a flag true or false, a name a string. The one exception is parity's
    ``max_abs`` and ``max_rel``, which are +Infinity when an output was not finite
    (``backends.parity``; such a parity fails). Free-form objects (``compile_info``,
    ``device_latency``, an instance's ``info``, ``placement.inventory``) may hold any JSON but NaN
    or Infinity.
    """
    read_version(data.get("schema") if isinstance(data, Mapping) else None, "record")
    rounds = _count(data, "rounds")
    policy = _choice(data, "rounds_policy", ("auto", "fixed"))
    record = IpuRecord(
        **_identity(data),
        batch_size=_count(data, "batch_size"),
        items_per_call=_count(data, "items_per_call"),
        rounds=rounds,
        rounds_policy="auto" if policy == "auto" else "fixed",
        warmup_rounds=_count(data, "warmup_rounds"),
        latency_s=_latency(
            _object(data, "latency_s"),
            "latency_s.",
            rounds,
            _texts(data, "latency_unsupported", default=_ABSENT),
        ),
        window_s=_number(data, "window_s"),
        throughput_items_per_s=_number(data, "throughput_items_per_s"),
        compile_s=_number_or_none(data, "compile_s", required=True),
        compile_cached=_flag(data, "compile_cached"),
        first_call_s=_number(data, "first_call_s"),
        compile_phases_s=_number_map(data, "compile_phases_s"),
        compile_info=_free(data, "compile_info") or {},
        parity=_part(data, "parity", _parity),
        power=_part(data, "power", _power),
        simulator=_flag(data, "simulator", default=False),
        placement=_part(data, "placement", _placement),
        instances=None if data.get("instances") is None else _each(data, "instances", _instance),
        device_latency=_free(data, "device_latency"),
        repeats=() if data.get("repeats") is None else _each(data, "repeats", _repeat),
        median_throughput_items_per_s=_number_or_none(data, "median_throughput_items_per_s"),
        budget=_part(data, "budget", _budget),
        stability=_part(data, "stability", _stability),
        contention=_part(data, "contention", _contention),
        cpu=_part(data, "cpu", _record_cpu),
        training=_part(data, "training", _training),
        time_to_train=_part(data, "time_to_train", _time_to_train),
        scaling=_part(data, "scaling", _scaling),
        loadgen=_part(data, "loadgen", _loadgen),
        counts=_counts(data),
    )
    # Calls at a time: one per instance; LoadGen keeps many queries in flight, so its rate is left
    # to the count check.
    concurrency = MAX_COUNT if record.loadgen is not None else max(1, len(record.instances or ()))
    _check_items(
        record.throughput_items_per_s, record.window_s, record.rounds, record.items_per_call, "", concurrency
    )
    for i, repeat in enumerate(record.repeats):
        _check_items(
            repeat.throughput_items_per_s,
            repeat.window_s,
            repeat.rounds,
            record.items_per_call,
            f"repeats[{i}].",
            concurrency,
        )
    # A record merged from a launch's processes (a section marked ``merged``) keeps one process's
    # repeats beside the launch's pooled figures: those are not its repeats pooled.
    merged = any(isinstance(v, dict) and v.get("merged") is True for v in data.values())
    if record.repeats and not merged:
        _check_pooled(record)
    return record


def _check_items(
    throughput: float, window_s: float, rounds: int, items_per_call: int, at: str, concurrency: int
) -> None:
    """A throughput must stand for a count of items in its window that a run can hold: 1e308 items/s
    over a window of milliseconds is no measurement, and would print as hundreds of digits and make
    every ratio against it meaningless. Rounds that ran calls of items completed some: their
    throughput is never 0. Nor can ``concurrency`` calls at a time (instances, queries in flight)
    complete items faster than the timer resolves a call."""
    if throughput == 0 and rounds > 0 and items_per_call > 0:
        raise _bad(
            f"{at}throughput_items_per_s",
            throughput,
            f"{rounds} rounds of {items_per_call} items each completed items, so it must be > 0",
        )
    items = throughput * window_s
    if not math.isfinite(items) or items > MAX_COUNT:
        raise _bad(
            f"{at}throughput_items_per_s",
            throughput,
            f"over its window of {window_s:.4g} s that is {items:.3g} items, more than a run can count "
            f"(at most {MAX_COUNT})",
        )
    if items_per_call > 0 and throughput * MIN_CALL_S > items_per_call * concurrency:
        raise _bad(
            f"{at}throughput_items_per_s",
            throughput,
            f"{items_per_call} items a call at that rate means calls shorter than the timer's "
            f"resolution ({MIN_CALL_S:g} s)",
        )


#: How far, relatively, a pooled throughput may lie outside its repeats' range: rounding only.
_POOLED_TOLERANCE = 1e-9


def _check_pooled(record: IpuRecord) -> None:
    """A record with repeats pools them (``run.benchmark.pool``): its throughput is their items over
    their windows, a window-weighted mean of their throughputs, so it lies between the lowest and
    the highest of them. One outside (a pooled throughput of 0 beside unchanged repeats) was edited
    or corrupted."""
    rates = [r.throughput_items_per_s for r in record.repeats]
    low, high = min(rates), max(rates)
    pooled = record.throughput_items_per_s
    if pooled < low * (1 - _POOLED_TOLERANCE) or pooled > high * (1 + _POOLED_TOLERANCE):
        raise _bad(
            "throughput_items_per_s",
            pooled,
            f"its repeats ran at {low:.6g} to {high:.6g} items/s, and a record's throughput (their "
            "items over their windows) lies between those",
        )


# --- readers of one value ---------------------------------------------------------------------
# Each takes the object, the key and ``at``, the object's own dotted path with a trailing dot
# ("" for the record, "power." for its power object), so every message names the full key.

#: How every bad value's message ends: how to get a good one.
_FIX = "re-run the benchmark to write the record again, or correct the value in the file"
#: The largest count a record may hold: beyond it a count is impossible, and a table, sort key or
#: ratio that converts it to a float would overflow or round it.
MAX_COUNT = 2**53
#: A key that is not in its object (told apart from JSON null).
_ABSENT: Any = object()


def _show(value: Any) -> str:
    """A value as a message shows it: on one line and short, containers by their kind."""
    if value is _ABSENT:
        return "missing"
    if isinstance(value, (dict, Mapping)):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def _bad(name: str, value: Any, want: str) -> SchemaError:
    # repr: a name holds the file's own keys (``compile_phases_s.<key>``), and a key may hold a
    # newline; the message stays on one line.
    return SchemaError(f"malformed pytest-ipu record: {name!r} is {_show(value)}: {want}; {_FIX}")


def _get(data: Mapping[str, Any], key: str, default: Any) -> Any:
    """``data[key]``; ``default`` when absent or null, unless ``default`` is ``_ABSENT`` (required)."""
    value = data.get(key, _ABSENT)
    return default if (value is _ABSENT or value is None) and default is not _ABSENT else value


def _object(data: Mapping[str, Any], key: str, at: str = "") -> Mapping[str, Any]:
    value = data.get(key, _ABSENT)
    if not isinstance(value, dict):
        raise _bad(at + key, value, "it must be a JSON object")
    return value


def _real(value: Any, name: str, allow_inf: bool = False) -> float:
    """A finite number >= 0 (+Infinity too where ``allow_inf``), as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(name, value, "it must be a number >= 0")
    try:
        number = float(value)
    except OverflowError:  # a whole number of hundreds of digits
        raise _bad(name, value, "it is too large: it must be a finite number >= 0") from None
    if math.isnan(number) or (math.isinf(number) and not (allow_inf and number > 0)):
        raise _bad(name, value, "it must be a finite number >= 0")
    if number < 0:
        raise _bad(name, value, "it must be >= 0 (a time, rate, energy or share is never negative)")
    return number


def _number(data: Mapping[str, Any], key: str, at: str = "", default: Any = _ABSENT) -> float:
    return _real(_get(data, key, default), at + key)


def _number_or_none(data: Mapping[str, Any], key: str, at: str = "", required: bool = False) -> float | None:
    """A number or JSON null; a missing key reads as null unless ``required``."""
    value = data.get(key, _ABSENT)
    if value is _ABSENT and required:
        raise _bad(at + key, value, "it must be a number >= 0 or null")
    return None if value is None or value is _ABSENT else _real(value, at + key)


def _whole(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, value, "it must be a whole number >= 0")
    if value < 0:
        raise _bad(name, value, "it must be >= 0 (a count is never negative)")
    if value > MAX_COUNT:
        raise _bad(name, value, f"it is too large: a count is at most {MAX_COUNT}")
    return value


def _count(data: Mapping[str, Any], key: str, at: str = "", default: Any = _ABSENT) -> int:
    return _whole(_get(data, key, default), at + key)


def _text(data: Mapping[str, Any], key: str, at: str = "", default: Any = _ABSENT) -> str:
    value = _get(data, key, default)
    if not isinstance(value, str):
        raise _bad(at + key, value, "it must be a string")
    return value


def _text_or_none(data: Mapping[str, Any], key: str, at: str = "") -> str | None:
    value = data.get(key)
    return None if value is None else _text(data, key, at)


def _choice(
    data: Mapping[str, Any], key: str, choices: tuple[str, ...], at: str = "", default: Any = _ABSENT
) -> str:
    value = _get(data, key, default)
    if value not in choices or not isinstance(value, str):
        raise _bad(at + key, value, f"it must be one of {', '.join(repr(c) for c in choices)}")
    return value


def _flag(data: Mapping[str, Any], key: str, at: str = "", default: Any = _ABSENT) -> bool:
    value = _get(data, key, default)
    if not isinstance(value, bool):
        raise _bad(at + key, value, "it must be true or false")
    return value


def _list(data: Mapping[str, Any], key: str, at: str = "", default: Any = ()) -> list[Any]:
    """A list; ``default`` when absent or null (pass ``_ABSENT`` for a list that must be there)."""
    value = _get(data, key, default)
    if isinstance(value, tuple):
        return list(value)
    if not isinstance(value, list):
        raise _bad(at + key, value, "it must be a list")
    return value


def _texts(data: Mapping[str, Any], key: str, at: str = "", default: Any = ()) -> tuple[str, ...]:
    items = _list(data, key, at, default)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise _bad(f"{at}{key}[{i}]", item, "it must be a string")
    return tuple(items)


def _number_map(data: Mapping[str, Any], key: str, at: str = "") -> dict[str, float]:
    """An object of numbers >= 0 (phase times); ``{}`` when absent, never null (the writer has always
    written an object)."""
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise _bad(at + key, value, "it must be a JSON object of numbers")
    return {str(k): _real(v, f"{at}{key}.{k}") for k, v in value.items()}


def _free(data: Mapping[str, Any], key: str, at: str = "") -> dict[str, Any] | None:
    """A free-form object (any JSON but NaN or Infinity, which no reader could use), or ``None``."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad(at + key, value, "it must be a JSON object or null")
    # Walked with a stack, not recursion: the nesting is as deep as the file makes it.
    stack: list[tuple[str, Any]] = [(at + key, value)]
    while stack:
        name, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise _bad(name, item, "it must be a finite number")
        if isinstance(item, dict):
            stack.extend((f"{name}.{k}", v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((f"{name}[{i}]", v) for i, v in enumerate(item))
    return dict(value)


_Part = TypeVar("_Part")


def _part(
    data: Mapping[str, Any], key: str, read: Callable[[Mapping[str, Any], str], _Part], at: str = ""
) -> _Part | None:
    """An optional sub-object read by ``read``; ``None`` when absent or null."""
    return None if data.get(key) is None else read(_object(data, key, at), f"{at}{key}.")


def _each(
    data: Mapping[str, Any], key: str, read: Callable[[Mapping[str, Any], str], _Part], at: str = ""
) -> tuple[_Part, ...]:
    """Every entry of a list of sub-objects, each read by ``read``."""
    out = []
    for i, item in enumerate(_list(data, key, at)):
        name = f"{at}{key}[{i}]"
        if not isinstance(item, dict):
            raise _bad(name, item, "it must be a JSON object")
        out.append(read(item, f"{name}."))
    return tuple(out)


# --- readers of the parts ---------------------------------------------------------------------


def _latency(lat: Mapping[str, Any], at: str, rounds: int, unsupported: tuple[str, ...]) -> LatencySummary:
    return LatencySummary(
        min=_call_time(lat, "min", at, rounds),
        p50=_call_time(lat, "p50", at, rounds),
        p90=_call_time(lat, "p90", at, rounds),
        p99=_call_time(lat, "p99", at, rounds),
        max=_call_time(lat, "max", at, rounds),
        mean=_call_time(lat, "mean", at, rounds),
        rounds=rounds,
        unsupported=unsupported,
    )


def _call_time(data: Mapping[str, Any], key: str, at: str, rounds: int) -> float:
    """A latency of timed calls: a time a call can take (``call_time_problem``) once rounds ran."""
    value = _number(data, key, at)
    problem = call_time_problem(value) if rounds > 0 else None
    if problem is not None:
        raise _bad(at + key, value, problem)
    return value


#: The longest a timed call may take: a latency beyond a day is no measurement (the longest
#: budget and call timeout the options allow is a day too).
MAX_CALL_S = 86400.0
#: The shortest a timed call may take: the timers' resolution (``time.perf_counter_ns``); a call
#: timed at 0 s, or a rate that implies calls shorter than this, is no measurement.
MIN_CALL_S = 1e-9


def call_time_problem(seconds: float) -> str | None:
    """Why ``seconds`` (finite, >= 0) cannot be the time of a timed call, or ``None`` when it can:
    the one rule every reader of saved runs applies to a latency (a record's, pytest-benchmark's)."""
    if seconds < MIN_CALL_S:
        return f"a timed call takes at least the timer's resolution ({MIN_CALL_S:g} s), so it must be > 0"
    if seconds > MAX_CALL_S:
        return f"a call beyond a day ({MAX_CALL_S:g} s) is no measurement"
    return None


def _parity(data: Mapping[str, Any], at: str) -> ParityRecord:
    # ``passed`` is stored for readers of the JSON; the typed record derives it from the numbers.
    return ParityRecord(
        reference=_text(data, "reference", at),
        max_abs=_real(data.get("max_abs", _ABSENT), f"{at}max_abs", allow_inf=True),
        max_rel=_real(data.get("max_rel", _ABSENT), f"{at}max_rel", allow_inf=True),
        tolerance=_number(data, "tolerance", at),
    )


def _device_energy(data: Mapping[str, Any], at: str) -> DeviceEnergy:
    return DeviceEnergy(
        id=_text(data, "id", at),
        name=_text(data, "name", at),
        scope=_text(data, "scope", at),
        energy_j=_number(data, "energy_j", at),
        mean_w=_number(data, "mean_w", at),
        idle_w=_number_or_none(data, "idle_w", at),
        # Written before readings said which IPUs they cover: none named.
        ipus=_ids(data, "ipus", at),
        unused_ipus=_ids(data, "unused_ipus", at),
    )


def _ids(data: Mapping[str, Any], key: str, at: str) -> tuple[int, ...]:
    """A list of IPU ids (whole numbers); ``()`` when absent or null."""
    return tuple(_whole(i, f"{at}{key}[{n}]") for n, i in enumerate(_list(data, key, at)))


def _power(data: Mapping[str, Any], at: str) -> PowerRecord:
    warnings = _texts(data, "warnings", at)
    if data.get("low_confidence") is None:
        # Written before the flag existed: the meter's warning was the only sign of it.
        low = any(w.startswith(_OLD_LOW_CONFIDENCE) for w in warnings)
    else:
        low = _flag(data, "low_confidence", at)
    return PowerRecord(
        measured=_flag(data, "measured", at),
        source=_text(data, "source", at, default=""),
        reason=_text(data, "reason", at, default=""),
        method=_text_or_none(data, "method", at),
        integration=_text_or_none(data, "integration", at),
        devices=_each(data, "devices", _device_energy, at),
        energy_j=_number_or_none(data, "energy_j", at),
        mean_power_w=_number_or_none(data, "mean_power_w", at),
        idle_power_w=_number_or_none(data, "idle_power_w", at),
        items=_count(data, "items", at, default=0),
        energy_per_item_j=_number_or_none(data, "energy_per_item_j", at),
        items_per_j=_number_or_none(data, "items_per_j", at),
        samples=_count(data, "samples", at, default=0),
        sample_hz_requested=_number_or_none(data, "sample_hz_requested", at),
        sample_hz_achieved=_number_or_none(data, "sample_hz_achieved", at),
        update_period_s=_number_or_none(data, "update_period_s", at),
        window_s=_number_or_none(data, "window_s", at),
        valid=_flag(data, "valid", at, default=False),
        warnings=warnings,
        low_confidence=low,
    )


def _placement(data: Mapping[str, Any], at: str) -> PlacementRecord:
    ipu_ids = None
    if data.get("ipu_ids") is not None:
        rows = []
        for n, ids in enumerate(_list(data, "ipu_ids", at)):
            if not isinstance(ids, list):
                raise _bad(f"{at}ipu_ids[{n}]", ids, "it must be a list of IPU ids")
            rows.append(tuple(_whole(i, f"{at}ipu_ids[{n}][{m}]") for m, i in enumerate(ids)))
        ipu_ids = tuple(rows)
    return PlacementRecord(
        instances=_count(data, "instances", at),
        ipus_per_instance=_count(data, "ipus_per_instance", at),
        replicas=_count(data, "replicas", at),
        stages=_count(data, "stages", at),
        runner=_text(data, "runner", at),
        shared_device=_flag(data, "shared_device", at),
        devices=_texts(data, "devices", at, default=_ABSENT),
        simulator=_flag(data, "simulator", at, default=False),
        ipu_ids=ipu_ids,
        inventory=_free(data, "inventory", at),
    )


def _instance(data: Mapping[str, Any], at: str) -> InstanceRecord:
    calls = _count(data, "calls", at)
    lat = _object(data, "latency_s", at)
    return InstanceRecord(
        index=_count(data, "index", at),
        target=_text(data, "target", at, default=""),
        device=_text(data, "device", at),
        device_name=_text(data, "device_name", at, default=""),
        compile_s=_number_or_none(data, "compile_s", at),
        calls=calls,
        latency_s=_latency(
            lat,
            f"{at}latency_s.",
            _count(lat, "rounds", f"{at}latency_s.", calls),
            _texts(lat, "unsupported", f"{at}latency_s."),
        ),
        phases_s=_number_map(data, "phases_s", at),
        info=_free(data, "info", at) or {},
        device_latency=_free(data, "device_latency", at),
    )


_ENDINGS = ("planned", "budget", "cap")


def _repeat(data: Mapping[str, Any], at: str) -> RepeatRecord:
    rounds = _count(data, "rounds", at)
    lat = _object(data, "latency_s", at)
    ended = _choice(data, "ended", _ENDINGS, at, default="planned")
    return RepeatRecord(
        index=_count(data, "index", at),
        rounds=rounds,
        window_s=_number(data, "window_s", at),
        latency_s=_latency(
            lat,
            f"{at}latency_s.",
            _count(lat, "rounds", f"{at}latency_s.", rounds),
            _texts(lat, "unsupported", f"{at}latency_s."),
        ),
        throughput_items_per_s=_number(data, "throughput_items_per_s", at),
        ended="cap" if ended == "cap" else "budget" if ended == "budget" else "planned",
        process=_text(data, "process", at, default="this"),
        cpu=_part(data, "cpu", _cpu, at),
        start_unix_s=_number_or_none(data, "start_unix_s", at),
        median_throughput_items_per_s=_number_or_none(data, "median_throughput_items_per_s", at),
        counts=_counts(data, at),
    )


def _counts(data: Mapping[str, Any], at: str = "") -> dict[str, CountRecord]:
    """A record's or repeat's ``counts`` by name; none in records written before them. A
    ``host_instructions`` object beside them (written before that count joined ``counts``) reads
    as ``counts["host_instructions"]``."""
    found: dict[str, CountRecord] = {}
    if data.get("counts") is not None:
        kept = _object(data, "counts", at)
        found = {
            str(name): _count_record(_object(kept, name, f"{at}counts."), f"{at}counts.{name}.")
            for name in kept
        }
    legacy = _part(data, "host_instructions", _legacy_instructions, at)
    if legacy is not None and "host_instructions" not in found:
        found["host_instructions"] = legacy
    return found


def _count_record(data: Mapping[str, Any], at: str) -> CountRecord:
    reads = tuple(_whole(v, f"{at}reads[{i}]") for i, v in enumerate(_list(data, "reads", at)))
    # ``time_s`` is written for readers of the file; it is derived (per_call / clock_hz), not read.
    return CountRecord(
        per_call=_number_or_none(data, "per_call", at),
        reason=_text_or_none(data, "reason", at),
        method=_text_or_none(data, "method", at),
        reads=reads,
        clock_hz=_number_or_none(data, "clock_hz", at),
        clock=_text_or_none(data, "clock", at),
        # Absent from counts read call by call.
        total=None if data.get("total") is None else _count(data, "total", at),
        calls=None if data.get("calls") is None else _count(data, "calls", at),
        scope=_text_or_none(data, "scope", at),
    )


def _cpu(data: Mapping[str, Any], at: str) -> CpuTime:
    """A repeat's ``cpu``: of timed rounds, so every figure is a number."""
    return _record_cpu(data, at, rounds=True)


def _record_cpu(data: Mapping[str, Any], at: str, rounds: bool = False) -> CpuTime:
    """The record's ``cpu``; its per-round and timing-thread figures are null in a LoadGen record's
    (a run of no rounds), so null is read there unless ``rounds``."""

    def per_round(key: str) -> float | None:
        return _number(data, key, at) if rounds else _number_or_none(data, key, at, required=True)

    return CpuTime(
        process_s=per_round("process_s"),
        thread_s=per_round("thread_s"),
        process_total_s=_number(data, "process_total_s", at),
        thread_total_s=per_round("thread_total_s"),
        off_cpu_share=per_round("off_cpu_share"),
        # Absent from records written before them: no workers then (a record whose instances ran
        # in worker processes had no ``cpu``), and no host cost.
        workers=_count(data, "workers", at, default=0),
        workers_total_s=_number(data, "workers_total_s", at, default=0.0),
        host_per_item_s=_number_or_none(data, "host_per_item_s", at),
        host_cores=_number_or_none(data, "host_cores", at),
    )


def _legacy_instructions(data: Mapping[str, Any], at: str) -> CountRecord:
    """A ``host_instructions`` object written before the host's instructions joined ``counts``, as
    the count ``counts["host_instructions"]``: its total over its calls, or its reason."""
    total = None if data.get("total") is None else _count(data, "total", at)
    calls = _count(data, "calls", at, default=0)
    if not _flag(data, "available", at) or total is None or calls < 1:
        why = _text(data, "reason", at, default="") or "the counter did not count the window"
        return counts.not_counted(f"the hardware counter is not available: {why}")
    processes = _count(data, "processes", at, default=0)
    threads = _count(data, "threads", at, default=0)
    return counts.over_window(total, calls, counts.TIMED_WINDOW, instructions.scope(processes, threads))


def _budget(data: Mapping[str, Any], at: str) -> BudgetRecord:
    ended = _choice(data, "ended", _ENDINGS, at, default="planned")
    return BudgetRecord(
        budget_s=_number_or_none(data, "budget_s", at),
        cap_s=_number_or_none(data, "cap_s", at),
        window_s=_number(data, "window_s", at),
        ended="cap" if ended == "cap" else "budget" if ended == "budget" else "planned",
        min_rounds_past_budget=_flag(data, "min_rounds_past_budget", at, default=False),
        rounds_limited=_flag(data, "rounds_limited", at, default=False),
    )


def _stability(data: Mapping[str, Any], at: str) -> StabilityRecord:
    return StabilityRecord(
        repeats=_count(data, "repeats", at),
        mode=_text(data, "mode", at),
        cv=_number_or_none(data, "cv", at),
        round_spread=_number_or_none(data, "round_spread", at),
        threshold=_number(data, "threshold", at),
        unstable=_flag(data, "unstable", at),
    )


def _signed(data: Mapping[str, Any], key: str, at: str = "") -> float:
    """A finite number of either sign (a loss may be negative)."""
    value = _get(data, key, _ABSENT)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(at + key, value, "it must be a finite number")
    return float(value)


def _training(data: Mapping[str, Any], at: str) -> TrainingRecord:
    return TrainingRecord(
        micro_batch=_count(data, "micro_batch", at),
        gradient_accumulation=_count(data, "gradient_accumulation", at),
        replicas=_count(data, "replicas", at),
        device_iterations=_count(data, "device_iterations", at),
        processes=_count(data, "processes", at),
        global_batch=_count(data, "global_batch", at),
        optimizer=_text(data, "optimizer", at),
        amp=_flag(data, "amp", at),
        mode=_text(data, "mode", at),
        steps=_count(data, "steps", at),
        loss_first=_signed(data, "loss_first", at),
        loss_last=_signed(data, "loss_last", at),
    )


def _curve_point(data: Mapping[str, Any], at: str) -> CurvePoint:
    return CurvePoint(
        epoch=_count(data, "epoch", at),
        elapsed_s=_number(data, "elapsed_s", at),
        samples=_count(data, "samples", at),
        quality=_signed(data, "quality", at),
    )


def _train_run(data: Mapping[str, Any], at: str) -> TrainRun:
    return TrainRun(
        index=_count(data, "index", at),
        seed=_count(data, "seed", at),
        reached=_flag(data, "reached", at),
        time_s=_number_or_none(data, "time_s", at, required=True),
        epochs=_count(data, "epochs", at),
        samples=_count(data, "samples", at),
        samples_per_s=_number_or_none(data, "samples_per_s", at, required=True),
        curve=_each(data, "curve", _curve_point, at),
    )


def _time_to_train(data: Mapping[str, Any], at: str) -> TimeToTrainRecord:
    return TimeToTrainRecord(
        quality=_text(data, "quality", at),
        quality_target=_signed(data, "quality_target", at),
        higher_is_better=_flag(data, "higher_is_better", at),
        max_epochs=_count(data, "max_epochs", at),
        processes=_count(data, "processes", at),
        runs=_each(data, "runs", _train_run, at),
        olympic_s=_number(data, "olympic_s", at),
        olympic_runs=tuple(
            _whole(v, f"{at}olympic_runs[{i}]") for i, v in enumerate(_list(data, "olympic_runs", at))
        ),
        min_s=_number(data, "min_s", at),
        max_s=_number(data, "max_s", at),
        cv=_number_or_none(data, "cv", at),
    )


def _scaling(data: Mapping[str, Any], at: str) -> ScalingRecord:
    return ScalingRecord(
        processes=_count(data, "processes", at),
        baseline_processes=_count(data, "baseline_processes", at),
        baseline_file=_text(data, "baseline_file", at),
        baseline_throughput_items_per_s=_number(data, "baseline_throughput_items_per_s", at),
        speedup=_number(data, "speedup", at),
        efficiency=_number(data, "efficiency", at),
        baseline_time_to_train_s=_number_or_none(data, "baseline_time_to_train_s", at),
        time_to_train_speedup=_number_or_none(data, "time_to_train_speedup", at),
    )


def _flag_or_none(data: Mapping[str, Any], key: str, at: str) -> bool | None:
    return None if data.get(key) is None else _flag(data, key, at)


def _count_or_none(data: Mapping[str, Any], key: str, at: str) -> int | None:
    return None if data.get(key) is None else _count(data, key, at)


def _batching(data: Mapping[str, Any], at: str) -> BatchingRecord:
    sizes = _object(data, "batch_sizes", at)
    return BatchingRecord(
        max_batch=_count(data, "max_batch", at),
        timeout_s=_number(data, "timeout_s", at),
        pad_to=_count_or_none(data, "pad_to", at),
        instances=_count(data, "instances", at),
        batches=_count(data, "batches", at),
        mean_batch=_number_or_none(data, "mean_batch", at),
        batch_sizes={str(k): _count(sizes, k, f"{at}batch_sizes.") for k in sizes},
        instance_batches=tuple(
            _whole(v, f"{at}instance_batches[{i}]") for i, v in enumerate(_list(data, "instance_batches", at))
        ),
    )


def _server_probe(data: Mapping[str, Any], at: str) -> ServerProbe:
    return ServerProbe(
        target_qps=_number(data, "target_qps", at),
        valid=_flag(data, "valid", at),
        scheduled_qps=_number_or_none(data, "scheduled_qps", at),
        completed_qps=_number_or_none(data, "completed_qps", at),
        latency_s=_number_or_none(data, "latency_s", at),
        reasons=_texts(data, "reasons", at),
        elapsed_s=_number(data, "elapsed_s", at),
    )


def _peak(data: Mapping[str, Any], at: str) -> PeakSearch:
    return PeakSearch(
        peak_qps=_number_or_none(data, "peak_qps", at),
        probes=_each(data, "probes", _server_probe, at),
        max_probes=_count(data, "max_probes", at),
        budget_s=_number_or_none(data, "budget_s", at),
        tolerance=_number(data, "tolerance", at),
        ended=_choice(data, "ended", ("converged", "probes", "budget", "no-valid"), at),
        capacity_estimate_qps=_number(data, "capacity_estimate_qps", at),
        lowest_invalid_qps=_number_or_none(data, "lowest_invalid_qps", at),
    )


def _loadgen(data: Mapping[str, Any], at: str) -> LoadgenRecord:
    checks = _object(data, "checks", at)
    return LoadgenRecord(
        scenario=_choice(data, "scenario", ("SingleStream", "MultiStream", "Server", "Offline"), at),
        mode=_choice(data, "mode", ("performance", "accuracy"), at),
        version=_text(data, "version", at),
        settings=_free(data, "settings", at) or {},
        valid=_flag_or_none(data, "valid", at),
        invalid_reasons=_texts(data, "invalid_reasons", at),
        checks={str(k): _flag(checks, k, f"{at}checks.") for k in checks},
        early_stopping=_text(data, "early_stopping", at, default=""),
        early_stopping_latency_s=_number_or_none(data, "early_stopping_latency_s", at),
        query_count=_count(data, "query_count", at),
        samples_per_query=_count(data, "samples_per_query", at),
        samples_per_s=_number_or_none(data, "samples_per_s", at),
        scheduled_qps=_number_or_none(data, "scheduled_qps", at),
        latency_s=_number_map(data, "latency_s", at),
        mlperf_model=_text_or_none(data, "mlperf_model", at),
        mlperf_compliant=_flag(data, "mlperf_compliant", at),
        compliance_reasons=_texts(data, "compliance_reasons", at),
        batching=_batching(_object(data, "batching", at), f"{at}batching."),
        log_dir=_text(data, "log_dir", at),
        calibration=_number_map(data, "calibration", at),
        accuracy=None if data.get("accuracy") is None else _signed(data, "accuracy", at),
        accuracy_name=_text_or_none(data, "accuracy_name", at),
        peak=None if data.get("peak") is None else _peak(_object(data, "peak", at), f"{at}peak."),
        errors=_texts(data, "errors", at),
    )


def _contention(data: Mapping[str, Any], at: str) -> ContentionRecord:
    return contention_from_json(data, at)


def power_from_json(data: Mapping[str, Any], at: str = "power.") -> PowerRecord:
    """A power object (``PowerRecord.as_json``) read back, checked as in a record: raises
    ``SchemaError`` naming the key (prefixed with ``at``) for a missing or impossible value."""
    return _power(data, at)


def contention_from_json(data: Mapping[str, Any], at: str = "contention.") -> ContentionRecord:
    """The contention part of a record (``ContentionRecord.as_json``) read back: only ``readable``
    is required; a null flag, reason or threshold reads as its default. Raises ``SchemaError``
    naming the key for a value of the wrong kind or a number that is not finite and >= 0, so that
    a corrupt file is never read as "not contended"."""
    return ContentionRecord(
        readable=_flag(data, "readable", at),
        reason=_text(data, "reason", at, default=""),
        window_s=_number_or_none(data, "window_s", at),
        cpus=None if data.get("cpus") is None else _count(data, "cpus", at),
        others_share=_number_or_none(data, "others_share", at),
        own_share=_number_or_none(data, "own_share", at),
        steal_share=_number_or_none(data, "steal_share", at),
        load_avg_1m=_number_or_none(data, "load_avg_1m", at),
        threshold=_number(data, "threshold", at, default=DEFAULT_CONTENTION_THRESHOLD),
        contended=_flag(data, "contended", at, default=False),
        flagged_share=_number_or_none(data, "flagged_share", at),
        flagged_repeat=None if data.get("flagged_repeat") is None else _count(data, "flagged_repeat", at),
    )
