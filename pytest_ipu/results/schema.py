"""The versioned JSON contract of pytest-ipu's namespace, ``extra_info["ipu"]``, and its metrics.

``to_json`` writes a typed ``IpuRecord`` and ``from_json`` reads a record of any version this code knows
back into one, both through ``codec`` (each field's type, and what older files lack, declared beside
the field in ``records`` and its parts' modules); this module adds the version and the checks of a
whole record (a throughput its window and items can hold, a pooled throughput within its repeats').
The metrics (``METRICS``) are ``catalog``'s. A version-1 record reads as one repeat
(``IpuRecord.repeat_values`` gives its own value). Version 1 grew, in turn: ``compile_phases_s``,
``compile_info``, ``parity`` and ``power``; ``simulator``, ``placement``, ``instances`` and
``device_latency``; power's ``low_confidence`` (older: from the meter's warning, "low confidence ...").

Documented in docs/json-schema.md (the key table of ``benchmarks[].extra_info["ipu"]``, and section
"Compatibility") and docs/record.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pytest_ipu.measure.metrics import MAX_CALL_S as MAX_CALL_S
from pytest_ipu.measure.metrics import MIN_CALL_S as MIN_CALL_S
from pytest_ipu.measure.metrics import call_time_problem as call_time_problem
from pytest_ipu.results.catalog import METRICS as METRICS
from pytest_ipu.results.catalog import Metric as Metric
from pytest_ipu.results.codec import RECORD
from pytest_ipu.results.codec import SchemaError as SchemaError
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import PowerRecord
from pytest_ipu.results.values import MAX_WHOLE
from pytest_ipu.results.values import show

SCHEMA_VERSION = 2
NAMESPACE = "ipu"


def to_json(record: IpuRecord) -> dict[str, Any]:
    """The plain-JSON form stored under ``extra_info["ipu"]`` (only str, int, float, bool, None,
    lists and objects): the schema version, then the record's fields."""
    return {"schema": SCHEMA_VERSION, **record.as_json()}


def read_version(version: Any, what: str) -> int:
    """A schema version this code reads (a whole number from 1 to ``SCHEMA_VERSION``), of ``what``
    (a record, the run's section); raises ``SchemaError`` for anything else."""
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RECORD.refuse(version, "", problem=f"not a pytest-ipu {what} (schema version {show(version)})")
    if version > SCHEMA_VERSION:
        raise RECORD.refuse(
            version,
            "",
            problem=f"{what} has schema version {version}, newer than {SCHEMA_VERSION} which this "
            "pytest-ipu reads; upgrade pytest-ipu",
        )
    return version


def from_json(data: Mapping[str, Any]) -> IpuRecord:
    """Read a record back; raises ``SchemaError`` naming the key (a dotted path such as
    ``power.devices[0].energy_j``), its value and the fix.

    Every value is checked where it is read (``codec``), so a corrupt or hand-edited record never
    reaches a table, a gate or a plot: a time, rate, energy or share must be a finite number >= 0, a
    count a whole number >= 0, a flag true or false, a name a string. The one exception is parity's
    ``max_abs`` and ``max_rel``, which are +Infinity when an output was not finite
    (``backends.parity``; such a parity fails). Free-form objects (``compile_info``,
    ``device_latency``, an instance's ``info``, ``placement.inventory``) may hold any JSON but NaN
    or Infinity.
    """
    read_version(data.get("schema") if isinstance(data, Mapping) else None, "record")
    record = IpuRecord.from_json(data)
    # Calls at a time: one per instance; LoadGen keeps many queries in flight, so its rate is left
    # to the count check.
    concurrency = MAX_WHOLE if record.loadgen is not None else max(1, len(record.instances or ()))
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
        raise RECORD.refuse(
            throughput,
            f"{at}throughput_items_per_s",
            problem=f"{rounds} rounds of {items_per_call} items each completed items, so it must be > 0",
        )
    items = throughput * window_s
    if not math.isfinite(items) or items > MAX_WHOLE:
        raise RECORD.refuse(
            throughput,
            f"{at}throughput_items_per_s",
            problem=f"over its window of {window_s:.4g} s that is {items:.3g} items, more than a run can "
            f"count (at most {MAX_WHOLE})",
        )
    if items_per_call > 0 and throughput * MIN_CALL_S > items_per_call * concurrency:
        raise RECORD.refuse(
            throughput,
            f"{at}throughput_items_per_s",
            problem=f"{items_per_call} items a call at that rate means calls shorter than the timer's "
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
        raise RECORD.refuse(
            pooled,
            "throughput_items_per_s",
            problem=f"its repeats ran at {low:.6g} to {high:.6g} items/s, and a record's throughput (their "
            "items over their windows) lies between those",
        )


def power_from_json(data: Mapping[str, Any], at: str = "power.") -> PowerRecord:
    """A power object (``PowerRecord.as_json``) read back, checked as in a record: raises
    ``SchemaError`` naming the key (prefixed with ``at``) for a missing or impossible value."""
    return PowerRecord.from_json(data, at)
