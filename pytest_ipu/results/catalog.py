"""The catalog of reported metrics: each one's name (as gates and ``pytest-ipu compare`` spell it),
where it sits in the record JSON, and its unit, which also says which way is better.

``IpuRecord.value(name)`` reads a metric from a typed record; ``schema`` re-exports ``METRICS``.
This module imports only the units registry, so the gate grammar, which ``pytest --help`` loads,
can name the metrics without the records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pytest_ipu.measure import units


@dataclass(frozen=True)
class Metric:
    """A reported number: where it sits in the record JSON and its unit (``units.UNITS``), which
    also says which way is better. ``IpuRecord.value(name)`` reads it from a typed record."""

    name: str
    path: tuple[str, ...]
    unit: str

    @property
    def better(self) -> units.Better:
        """``lower`` or ``higher``: the direction in which the metric improves."""
        return units.UNITS[self.unit].better


METRICS: Mapping[str, Metric] = {
    m.name: m
    for m in (
        *(Metric(f"latency.{k}", ("latency_s", k), "s") for k in ("min", "p50", "p90", "p99", "max", "mean")),
        Metric("throughput", ("throughput_items_per_s",), "items/s"),
        Metric("compile", ("compile_s",), "s"),
        Metric("first_call", ("first_call_s",), "s"),
        Metric("energy", ("power", "energy_j"), "J"),
        Metric("power", ("power", "mean_power_w"), "W"),
        Metric("energy_per_item", ("power", "energy_per_item_j"), "J"),
        Metric("items_per_j", ("power", "items_per_j"), "items/J"),
        Metric("time_to_train", ("time_to_train", "olympic_s"), "s"),
        # LoadGen benchmarks (``ipu_loadgen``): Server QPS is queries of one sample per second.
        Metric("loadgen.server_qps", ("loadgen", "server_qps"), "items/s"),
        Metric("loadgen.samples_per_s", ("loadgen", "samples_per_s"), "items/s"),
        *(Metric(f"loadgen.{k}", ("loadgen", "latency_s", k), "s") for k in ("p50", "p90", "p99")),
        Metric("loadgen.early_stopping_latency", ("loadgen", "early_stopping_latency_s"), "s"),
    )
}
