"""The versioned JSON contract of pytest-ipu's namespace, ``extra_info["ipu"]``, and its metrics.

Every stored number is in SI units with the unit in the key (``_s``, ``_per_s``); display code
scales. Version history (additive changes only within a version):

- 1: target, backend, device, precision, io, batch and round counts, latency summary with
  unsupported percentiles, timed window, throughput, compile and first-call times; then (additive)
  compile_phases_s, compile_info, parity and power; then (additive) simulator, placement,
  instances (per-instance latency when several run concurrently) and device_latency.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Literal

from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.results.records import IpuRecord

SCHEMA_VERSION = 1
NAMESPACE = "ipu"


class SchemaError(ValueError):
    """A JSON object that is not a pytest-ipu record of a version this code can read."""


@dataclass(frozen=True)
class Metric:
    """A reported number: where it sits in the record JSON, its unit, and which way is better."""

    name: str
    path: tuple[str, ...]
    unit: str
    better: Literal["lower", "higher"]


METRICS: Mapping[str, Metric] = {
    m.name: m
    for m in (
        *(
            Metric(f"latency.{k}", ("latency_s", k), "s", "lower")
            for k in ("min", "p50", "p90", "p99", "max", "mean")
        ),
        Metric("throughput", ("throughput_items_per_s",), "items/s", "higher"),
        Metric("compile", ("compile_s",), "s", "lower"),
        Metric("first_call", ("first_call_s",), "s", "lower"),
        Metric("energy", ("power", "energy_j"), "J", "lower"),
        Metric("power", ("power", "mean_power_w"), "W", "lower"),
        Metric("energy_per_item", ("power", "energy_per_item_j"), "J", "lower"),
        Metric("items_per_j", ("power", "items_per_j"), "items/J", "higher"),
    )
}


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
        "latency_s": _latency_stats(lat),
        "latency_unsupported": list(lat.unsupported),
        "window_s": record.window_s,
        "throughput_items_per_s": record.throughput_items_per_s,
        "compile_s": record.compile_s,
        "compile_cached": record.compile_cached,
        "first_call_s": record.first_call_s,
        "compile_phases_s": dict(record.compile_phases_s),
        "compile_info": dict(record.compile_info),
        "parity": None if record.parity is None else dict(record.parity),
        "power": None if record.power is None else dict(record.power),
        "simulator": record.simulator,
        "placement": None if record.placement is None else dict(record.placement),
        "instances": None if record.instances is None else [dict(i) for i in record.instances],
        "device_latency": None if record.device_latency is None else dict(record.device_latency),
    }


def latency_json(lat: LatencySummary) -> dict[str, Any]:
    """A latency summary as the record stores it: seconds per statistic, and the unsupported ones."""
    return {**_latency_stats(lat), "rounds": lat.rounds, "unsupported": list(lat.unsupported)}


def _latency_stats(lat: LatencySummary) -> dict[str, float]:
    return {
        "min": lat.min_s,
        "p50": lat.p50_s,
        "p90": lat.p90_s,
        "p99": lat.p99_s,
        "max": lat.max_s,
        "mean": lat.mean_s,
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
            latency=LatencySummary(
                min_s=float(lat["min"]),
                p50_s=float(lat["p50"]),
                p90_s=float(lat["p90"]),
                p99_s=float(lat["p99"]),
                max_s=float(lat["max"]),
                mean_s=float(lat["mean"]),
                rounds=int(data["rounds"]),
                unsupported=tuple(str(p) for p in data["latency_unsupported"]),
            ),
            window_s=float(data["window_s"]),
            throughput_items_per_s=float(data["throughput_items_per_s"]),
            compile_s=None if data["compile_s"] is None else float(data["compile_s"]),
            compile_cached=bool(data["compile_cached"]),
            first_call_s=float(data["first_call_s"]),
            compile_phases_s={str(k): float(v) for k, v in data.get("compile_phases_s", {}).items()},
            compile_info=dict(data.get("compile_info", {})),
            parity=None if data.get("parity") is None else dict(data["parity"]),
            power=None if data.get("power") is None else dict(data["power"]),
            simulator=bool(data.get("simulator", False)),
            placement=None if data.get("placement") is None else dict(data["placement"]),
            instances=None if data.get("instances") is None else tuple(dict(i) for i in data["instances"]),
            device_latency=None if data.get("device_latency") is None else dict(data["device_latency"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SchemaError(f"malformed pytest-ipu record: {type(exc).__name__}: {exc}") from None
