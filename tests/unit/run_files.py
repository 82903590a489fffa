"""Saved runs for the tests of ``compare`` and ``report``: pytest-benchmark JSON with pytest-ipu records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.results import records
from pytest_ipu.results import schema


def record(
    batch: int, p50: float, throughput: float, device: str = "Some CPU", **parts: Any
) -> dict[str, Any]:
    """A torch:cpu record of batch ``batch`` with median latency ``p50`` and ``throughput``, and the
    record ``parts`` given (``training=``, ``time_to_train=``...)."""
    lat = LatencySummary(p50 * 0.9, p50, p50 * 1.1, p50 * 1.2, p50 * 1.3, p50, 40)
    return schema.to_json(
        records.IpuRecord(
            target="torch:cpu",
            backend="torch",
            device="cpu",
            device_name=device,
            precision="fp32",
            io="host",
            batch_size=batch,
            items_per_call=batch,
            rounds=40,
            rounds_policy="fixed",
            warmup_rounds=1,
            latency_s=lat,
            window_s=1.0,
            throughput_items_per_s=throughput,
            compile_s=0.5,
            compile_cached=False,
            first_call_s=0.1,
            **parts,
        )
    )


def bench(
    batch: int, p50: float, throughput: float, device: str = "Some CPU", seed: int = 0
) -> dict[str, Any]:
    """One benchmark of a run, with 40 seeded per-round times around ``p50``."""
    data = list(np.random.default_rng(seed).normal(p50, p50 * 0.02, 40))
    return {
        "group": "mlp",
        "name": f"test_mlp[torch-cpu-{batch}]",
        "fullname": f"tests/test_mlp.py::test_mlp[torch-cpu-{batch}]",
        "params": {"batch_size": batch},
        "stats": {"min": min(data), "median": p50, "mean": p50, "max": max(data), "data": data},
        "extra_info": {"ipu": record(batch, p50, throughput, device)},
    }


def write(path: Path, *benchmarks: dict[str, Any], cpu: str = "Xeon") -> Path:
    """Write a run of ``benchmarks`` on a machine whose CPU is ``cpu``."""
    path.write_text(json.dumps({"machine_info": {"cpu": {"brand_raw": cpu}}, "benchmarks": list(benchmarks)}))
    return path
