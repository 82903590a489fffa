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
  (``IpuRecord.repeat_values`` gives its own value); it is written back as version 2.

The metrics (``METRICS``: name, place in this JSON, unit) are defined in ``catalog``. ``to_json``
writes a typed ``IpuRecord`` (its parts write themselves: ``PowerRecord.as_json`` and
the others); ``from_json`` reads any record of a version this code knows back into one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_ipu.measure.contention import ContentionRecord
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.results.catalog import METRICS as METRICS
from pytest_ipu.results.catalog import Metric as Metric
from pytest_ipu.results.records import BudgetRecord
from pytest_ipu.results.records import DeviceEnergy
from pytest_ipu.results.records import InstanceRecord
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import ParityRecord
from pytest_ipu.results.records import PlacementRecord
from pytest_ipu.results.records import PowerRecord
from pytest_ipu.results.records import RepeatRecord
from pytest_ipu.results.records import StabilityRecord
from pytest_ipu.results.records import latency_json as latency_json
from pytest_ipu.results.records import latency_stats

SCHEMA_VERSION = 2
NAMESPACE = "ipu"

#: How the power meter's warning about a window too short for the sensor began, before records
#: carried the ``low_confidence`` flag.
_OLD_LOW_CONFIDENCE = "low confidence"


class SchemaError(ValueError):
    """A JSON object that is not a pytest-ipu record of a version this code can read."""


def to_json(record: IpuRecord) -> dict[str, Any]:
    """The plain-JSON form stored under ``extra_info["ipu"]`` (only str, int, float, bool, None)."""
    lat = record.latency
    return {
        "schema": SCHEMA_VERSION,
        "target": record.target,
        "backend": record.backend,
        "device": record.device,
        "device_name": record.device_name,
        "precision": record.precision,
        "io": record.io,
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
    }


def from_json(data: Mapping[str, Any]) -> IpuRecord:
    """Read a record back; raises ``SchemaError`` saying what is wrong with it."""
    version = data.get("schema") if isinstance(data, Mapping) else None
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SchemaError(f"not a pytest-ipu record (schema version {version!r})")
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"record has schema version {version}, newer than {SCHEMA_VERSION} which this "
            "pytest-ipu reads; upgrade pytest-ipu"
        )
    if not isinstance(data.get("latency_unsupported", []), list):
        raise SchemaError("malformed pytest-ipu record: 'latency_unsupported' must be a list")
    try:
        lat = data["latency_s"]
        return IpuRecord(
            target=str(data["target"]),
            backend=str(data["backend"]),
            device=str(data["device"]),
            device_name=str(data["device_name"]),
            precision=str(data["precision"]),
            io=str(data["io"]),
            batch_size=int(data["batch_size"]),
            items_per_call=int(data["items_per_call"]),
            rounds=int(data["rounds"]),
            rounds_policy="auto" if data["rounds_policy"] == "auto" else "fixed",
            warmup_rounds=int(data["warmup_rounds"]),
            latency=_latency(lat, int(data["rounds"]), data["latency_unsupported"]),
            window_s=float(data["window_s"]),
            throughput_items_per_s=float(data["throughput_items_per_s"]),
            compile_s=_optional_float(data["compile_s"]),
            compile_cached=bool(data["compile_cached"]),
            first_call_s=float(data["first_call_s"]),
            compile_phases_s={str(k): float(v) for k, v in data.get("compile_phases_s", {}).items()},
            compile_info=dict(data.get("compile_info", {})),
            parity=None if data.get("parity") is None else _parity(data["parity"]),
            power=None if data.get("power") is None else _power(data["power"]),
            simulator=bool(data.get("simulator", False)),
            placement=None if data.get("placement") is None else _placement(data["placement"]),
            instances=None
            if data.get("instances") is None
            else tuple(_instance(i) for i in data["instances"]),
            device_latency=None if data.get("device_latency") is None else dict(data["device_latency"]),
            repeats=tuple(_repeat(r) for r in data.get("repeats") or ()),
            budget=None if data.get("budget") is None else _budget(data["budget"]),
            stability=None if data.get("stability") is None else _stability(data["stability"]),
            contention=None
            if data.get("contention") is None
            else ContentionRecord.from_json(data["contention"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SchemaError(f"malformed pytest-ipu record: {type(exc).__name__}: {exc}") from None


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _latency(lat: Mapping[str, Any], rounds: int, unsupported: Any) -> LatencySummary:
    return LatencySummary(
        min_s=float(lat["min"]),
        p50_s=float(lat["p50"]),
        p90_s=float(lat["p90"]),
        p99_s=float(lat["p99"]),
        max_s=float(lat["max"]),
        mean_s=float(lat["mean"]),
        rounds=rounds,
        unsupported=tuple(str(p) for p in unsupported),
    )


def _parity(data: Mapping[str, Any]) -> ParityRecord:
    # ``passed`` is stored for readers of the JSON; the typed record derives it from the numbers.
    return ParityRecord(
        reference=str(data["reference"]),
        max_abs=float(data["max_abs"]),
        max_rel=float(data["max_rel"]),
        tolerance=float(data["tolerance"]),
    )


def _power(data: Mapping[str, Any]) -> PowerRecord:
    warnings = tuple(str(w) for w in data.get("warnings", []))
    low = data.get("low_confidence")
    if low is None:
        # Written before the flag existed: the meter's warning was the only sign of it.
        low = any(w.startswith(_OLD_LOW_CONFIDENCE) for w in warnings)
    return PowerRecord(
        measured=bool(data["measured"]),
        source=str(data.get("source", "")),
        reason=str(data.get("reason") or ""),
        method=None if data.get("method") is None else str(data["method"]),
        integration=None if data.get("integration") is None else str(data["integration"]),
        devices=tuple(
            DeviceEnergy(
                id=str(d["id"]),
                name=str(d["name"]),
                scope=str(d["scope"]),
                energy_j=float(d["energy_j"]),
                mean_w=float(d["mean_w"]),
                idle_w=_optional_float(d.get("idle_w")),
            )
            for d in data.get("devices", [])
        ),
        energy_j=_optional_float(data.get("energy_j")),
        mean_power_w=_optional_float(data.get("mean_power_w")),
        idle_power_w=_optional_float(data.get("idle_power_w")),
        items=int(data.get("items", 0)),
        energy_per_item_j=_optional_float(data.get("energy_per_item_j")),
        items_per_j=_optional_float(data.get("items_per_j")),
        samples=int(data.get("samples", 0)),
        sample_hz_requested=_optional_float(data.get("sample_hz_requested")),
        sample_hz_achieved=_optional_float(data.get("sample_hz_achieved")),
        update_period_s=_optional_float(data.get("update_period_s")),
        window_s=_optional_float(data.get("window_s")),
        valid=bool(data.get("valid", False)),
        warnings=warnings,
        low_confidence=bool(low),
    )


def _placement(data: Mapping[str, Any]) -> PlacementRecord:
    ipu_ids = data.get("ipu_ids")
    inventory = data.get("inventory")
    return PlacementRecord(
        instances=int(data["instances"]),
        ipus_per_instance=int(data["ipus_per_instance"]),
        replicas=int(data["replicas"]),
        stages=int(data["stages"]),
        runner=str(data["runner"]),
        shared_device=bool(data["shared_device"]),
        devices=tuple(str(d) for d in data["devices"]),
        simulator=bool(data.get("simulator", False)),
        ipu_ids=None if ipu_ids is None else tuple(tuple(int(i) for i in ids) for ids in ipu_ids),
        inventory=None if inventory is None else dict(inventory),
    )


def _instance(data: Mapping[str, Any]) -> InstanceRecord:
    lat = data["latency_s"]
    calls = int(data["calls"])
    counters = data.get("device_latency")
    return InstanceRecord(
        index=int(data["index"]),
        target=str(data.get("target", "")),
        device=str(data["device"]),
        device_name=str(data.get("device_name", "")),
        compile_s=_optional_float(data.get("compile_s")),
        calls=calls,
        latency=_latency(lat, int(lat.get("rounds", calls)), lat.get("unsupported", [])),
        phases_s={str(k): float(v) for k, v in data.get("phases_s", {}).items()},
        info=dict(data.get("info", {})),
        device_latency=None if counters is None else dict(counters),
    )


_ENDINGS = ("planned", "budget", "cap")


def _ending(value: Any) -> Any:
    if value not in _ENDINGS:
        raise ValueError(f"'ended' must be one of {', '.join(_ENDINGS)}, got {value!r}")
    return value


def _repeat(data: Mapping[str, Any]) -> RepeatRecord:
    lat = data["latency_s"]
    rounds = int(data["rounds"])
    return RepeatRecord(
        index=int(data["index"]),
        rounds=rounds,
        window_s=float(data["window_s"]),
        latency=_latency(lat, int(lat.get("rounds", rounds)), lat.get("unsupported", [])),
        throughput_items_per_s=float(data["throughput_items_per_s"]),
        ended=_ending(data.get("ended", "planned")),
        process=str(data.get("process", "this")),
    )


def _budget(data: Mapping[str, Any]) -> BudgetRecord:
    return BudgetRecord(
        budget_s=_optional_float(data.get("budget_s")),
        cap_s=_optional_float(data.get("cap_s")),
        window_s=float(data["window_s"]),
        ended=_ending(data.get("ended", "planned")),
        min_rounds_past_budget=bool(data.get("min_rounds_past_budget", False)),
        rounds_limited=bool(data.get("rounds_limited", False)),
    )


def _stability(data: Mapping[str, Any]) -> StabilityRecord:
    return StabilityRecord(
        repeats=int(data["repeats"]),
        mode=str(data["mode"]),
        cv=_optional_float(data.get("cv")),
        round_spread=_optional_float(data.get("round_spread")),
        threshold=float(data["threshold"]),
        unstable=bool(data["unstable"]),
    )
