"""Scaling against a baseline run: ``--ipu-scaling-baseline FILE``.

A run of the training benchmarks on N processes is read against a run of the same benchmarks on
N0 processes (usually 1): each record whose benchmark the baseline also has gains a ``scaling``
part (``results.training.ScalingRecord``): speed-up, efficiency = throughput(N) / ((N / N0) x
throughput(N0)) and, for time-to-train benchmarks, the olympic time's speed-up. Benchmarks pair by
pytest's node id (``fullname``); a benchmark the baseline lacks gets no scaling part.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_ipu.results import benchmark_json
from pytest_ipu.results import schema
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.training import ScalingRecord
from pytest_ipu.results.training import scaling


class BaselineError(ValueError):
    """A baseline file that cannot be read; the one-line message names it and the fix."""


def processes(record: IpuRecord) -> int | None:
    """The data-parallel processes a training record ran on; ``None`` for an inference record."""
    if record.time_to_train is not None:
        return record.time_to_train.processes
    if record.training is not None:
        return record.training.processes
    return None


def load(path: Path) -> dict[str, IpuRecord]:
    """The baseline's training records by ``fullname``; ``BaselineError`` for a file that is not a
    pytest-benchmark run or holds no training record."""
    where = "--ipu-scaling-baseline"
    try:
        document = benchmark_json.read_document(path)
    except benchmark_json.RunFileError as exc:
        raise BaselineError(f"{where}: {exc}") from None
    out: dict[str, IpuRecord] = {}
    for bench, data in benchmark_json.ipu_entries(document):
        try:
            record = schema.from_json(data)
        except schema.SchemaError as exc:
            raise BaselineError(f"{where} {path}: benchmark {bench.get('fullname')!r}: {exc}") from None
        if processes(record) is not None:
            out[str(bench.get("fullname"))] = record
    if not out:
        raise BaselineError(
            f"{where} {path}: holds no training or time-to-train record; pass the JSON of a run of the same "
            "training benchmarks on fewer processes"
        )
    return out


def against(record: IpuRecord, baseline: IpuRecord | None, baseline_file: str) -> ScalingRecord | None:
    """``record``'s scaling against ``baseline`` (``None`` when either is not a training record, or
    the baseline has no throughput to divide by)."""
    n, n0 = processes(record), None if baseline is None else processes(baseline)
    if baseline is None or n is None or n0 is None or n0 < 1 or baseline.throughput_items_per_s <= 0:
        return None
    ttt = record.time_to_train
    base_ttt = baseline.time_to_train
    return scaling(
        processes=n,
        throughput=record.throughput_items_per_s,
        baseline_processes=n0,
        baseline_throughput=baseline.throughput_items_per_s,
        baseline_file=baseline_file,
        time_to_train_s=None if ttt is None else ttt.olympic_s,
        baseline_time_to_train_s=None if base_ttt is None else base_ttt.olympic_s,
    )


def apply(document: Mapping[str, Any], baselines: Mapping[str, IpuRecord], baseline_file: str) -> None:
    """Add the ``scaling`` part to every record of a merged or single-process ``document`` whose
    benchmark the baseline has (in place)."""
    for bench, data in benchmark_json.ipu_entries(document):
        part = against(schema.from_json(data), baselines.get(str(bench.get("fullname"))), baseline_file)
        if part is not None:
            data["scaling"] = part.as_json()
