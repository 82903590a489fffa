"""A benchmark of pytest-benchmark's own ``benchmark`` fixture (plain calls and ``pedantic``) as a
gate reads it: from what pytest-benchmark keeps of it, its time statistics of the run's rounds and,
where kept, its per-round data.

Its metrics are the registry's (``catalog.Metric.plain``), one value per run each (``no_repeats``);
``why_missing`` names what it cannot give, which a verdict quotes. An entry a pytest-ipu fixture began
and never finished (``StoredBenchmark.pending``) is partial, not plain: no gate reads it.

The mapping is documented in docs/ci.md (section "A plain pytest-benchmark suite"); the partial entry
in docs/json-schema.md (section "benchmarks[].extra_info["ipu_pending"]").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.gated import Gated
from pytest_ipu.results.gates import Gate

#: Why a plain benchmark has one value per run, as a verdict names it.
ONE_VALUE = "a pytest-benchmark benchmark has one value per run (its rounds are not independent repeats)"


@dataclass(frozen=True)
class PlainBenchmark:
    """What pytest-benchmark kept of one benchmark of its own fixture: its time statistics
    (seconds: ``min``, ``median``, ``mean``, ``max``...), its per-round times where kept, and the
    CPU it ran on where known. A ``gated.Gated``."""

    stats: Mapping[str, float]
    samples_s: tuple[float, ...] | None = None
    device_name: str | None = None

    def value(self, metric: str) -> float | None:
        """The metric's value from pytest-benchmark's figures (the module docstring's mapping);
        ``None`` where it has none. Raises ``KeyError`` for a name that is not a metric."""
        source = METRICS[metric].plain
        if source is None:
            return None
        if source.quantile is not None:
            if not self.samples_s:
                return None
            from pytest_ipu.measure import stats

            return stats.percentile(self.samples_s, source.quantile * 100.0)
        value = None if source.stat is None else self.stats.get(source.stat)
        if value is None or not source.per_second:
            return value
        return 1.0 / value if value > 0.0 else None

    def repeat_values(self, metric: str) -> tuple[float, ...]:
        """The metric's one value (none when it has none): pytest-benchmark has no repeats."""
        value = self.value(metric)
        return () if value is None else (value,)

    def why_missing(self, metric: str) -> str:
        """Why pytest-benchmark's figures give no value for ``metric``."""
        source = METRICS[metric].plain
        if source is None:
            return (
                f"a pytest-benchmark benchmark has no {metric}: pytest-benchmark keeps time statistics "
                "only (measure with ipu_benchmark for it)"
            )
        if source.quantile is not None:
            return (
                f"a pytest-benchmark benchmark has {metric} only from its per-round data, which this run "
                "did not keep: save the runs with --benchmark-save-data (or write --benchmark-json)"
            )
        if source.stat not in self.stats:
            return f"pytest-benchmark's statistics have no '{source.stat}'"
        return f"a mean of {self.stats[str(source.stat)]:g} s has no calls per second"

    def no_repeats(self) -> str:
        """Always ``ONE_VALUE``: only baseline runs give a plain benchmark's gate its noise."""
        return ONE_VALUE


@dataclass(frozen=True)
class PlainMeasured:
    """A plain benchmark of the run being gated (a ``gated.Candidate``): pytest's node id, the
    name verdicts show, pytest-benchmark's figures and its own gates (its marker's)."""

    fullname: str
    name: str
    record: PlainBenchmark
    gates: tuple[Gate, ...] = ()


def cpu_name(machine_info: Mapping[str, Any]) -> str | None:
    """The CPU a run ran on, as pytest-benchmark's machine info names it (``cpu.brand_raw``)."""
    cpu = machine_info.get("cpu")
    brand = cpu.get("brand_raw") if isinstance(cpu, Mapping) else None
    return str(brand) if brand else None


def gated(bench: StoredBenchmark, machine_info: Mapping[str, Any]) -> Gated | None:
    """What a gate reads of a saved run's benchmark (``machine_info`` is the run's): its pytest-ipu
    record, else pytest-benchmark's figures of a plain benchmark; ``None`` for a partial entry or
    one without statistics (``not_gated`` says which)."""
    if bench.record is not None:
        return bench.record
    if bench.pending is not None or not bench.stats:
        return None
    return PlainBenchmark(bench.stats, bench.samples_s, cpu_name(machine_info))


def not_gated(bench: StoredBenchmark) -> str:
    """Why ``gated`` gives nothing for ``bench``, as a message says it after the benchmark's name."""
    if bench.pending is not None:
        return (
            f"is a partial entry ({bench.pending} began measuring it and its test stopped before the "
            "pytest-ipu record was written)"
        )
    return "has neither a pytest-ipu record nor pytest-benchmark statistics"
