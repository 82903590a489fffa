"""The seam to pytest-benchmark: the only module that knows its JSON layout.

We add to it through its public extension points only (``extra_info``, the machine-info and JSON
update hooks), so a file written with pytest-ipu still loads in ``pytest-benchmark compare``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from pytest_ipu.results import records
from pytest_ipu.results import schema

#: Top-level key of the run-wide section pytest-ipu adds to the JSON.
TOP_LEVEL_KEY = "pytest_ipu"


class RunFileError(ValueError):
    """A file that is not a readable pytest-benchmark JSON run; the message names the file."""


@dataclass(frozen=True)
class StoredBenchmark:
    """One benchmark of a saved run: pytest-benchmark's identity fields and our record, if any."""

    name: str
    fullname: str
    group: str | None
    record: records.IpuRecord | None
    #: pytest-benchmark's per-round times, seconds (``stats.data``): present with ``--benchmark-json``,
    #: and in saved runs only with ``--benchmark-save-data``; ``None`` when absent.
    samples_s: tuple[float, ...] | None = None
    #: The test's parameters (``params``), e.g. ``{"batch_size": 4}``; empty when it has none.
    params: Mapping[str, Any] = field(default_factory=dict)
    #: pytest-benchmark's time statistics of the rounds, seconds (``min``, ``median``, ``mean``,
    #: ``max``, ``stddev``, ``iqr``), as far as the file has them.
    stats: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredRun:
    """A whole saved run: where it came from, the machine it ran on, and its benchmarks."""

    path: Path
    machine_info: Mapping[str, Any]
    commit_info: Mapping[str, Any]
    datetime: str | None
    benchmarks: tuple[StoredBenchmark, ...]


def attach(extra_info: dict[str, Any], record: Mapping[str, Any]) -> None:
    """Store a record under ``extra_info["ipu"]`` (the dict pytest-benchmark serialises)."""
    extra_info[schema.NAMESPACE] = dict(record)


def update_machine_info(machine_info: dict[str, Any], device_info: Mapping[str, Any]) -> None:
    """Put the run's backend and device inventory under ``machine_info["ipu"]``."""
    machine_info[schema.NAMESPACE] = dict(device_info)


def update_json(output_json: dict[str, Any], run_info: Mapping[str, Any]) -> None:
    """Add pytest-ipu's run-wide section (schema version, settings) at the top level."""
    output_json[TOP_LEVEL_KEY] = dict(run_info)


def load_run(path: Path) -> list[StoredBenchmark]:
    """Read the benchmarks of a pytest-benchmark JSON file; raises ``RunFileError`` on bad input."""
    return list(read_run(path).benchmarks)


def read_run(path: Path) -> StoredRun:
    """Read a pytest-benchmark JSON file whole; raises ``RunFileError`` naming the file and the problem."""
    return parse_run(read_document(path), path)


def read_document(path: Path) -> dict[str, Any]:
    """The parsed JSON of a pytest-benchmark run file, checked to have a ``benchmarks`` list; raises
    ``RunFileError`` naming the file and the problem."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RunFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise RunFileError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise RunFileError(f"{path}: not a pytest-benchmark run (no 'benchmarks' list)")
    return data


def parse_run(data: object, path: Path) -> StoredRun:
    """A run from its parsed JSON (``path`` names where it came from, in messages and the result);
    raises ``RunFileError`` naming ``path`` and the problem."""
    benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benchmarks, list):
        raise RunFileError(f"{path}: not a pytest-benchmark run (no 'benchmarks' list)")
    out = []
    for index, bench in enumerate(benchmarks):
        extra = bench.get("extra_info") if isinstance(bench, dict) else None
        if not isinstance(bench, dict) or not isinstance(extra or {}, dict):
            raise RunFileError(f"{path}: benchmarks[{index}] is not a pytest-benchmark benchmark object")
        info = (extra or {}).get(schema.NAMESPACE)
        try:
            record = schema.from_json(info) if info is not None else None
        except schema.SchemaError as exc:
            raise RunFileError(f"{path}: benchmark {bench.get('fullname')!r}: {exc}") from None
        out.append(
            StoredBenchmark(
                str(bench.get("name")),
                str(bench.get("fullname")),
                bench.get("group"),
                record,
                _samples(bench),
                dict(bench.get("params") or {}) if isinstance(bench.get("params") or {}, dict) else {},
                _time_stats(bench),
            )
        )
    assert isinstance(data, dict)  # a list of benchmarks was found in it
    machine = data.get("machine_info")
    commit = data.get("commit_info")
    return StoredRun(
        path,
        dict(machine) if isinstance(machine, dict) else {},
        dict(commit) if isinstance(commit, dict) else {},
        str(data["datetime"]) if isinstance(data.get("datetime"), str) else None,
        tuple(out),
    )


def _samples(bench: Mapping[str, Any]) -> tuple[float, ...] | None:
    stats = bench.get("stats")
    data = stats.get("data") if isinstance(stats, dict) else None
    if not isinstance(data, list) or not data:
        return None
    try:
        return tuple(float(x) for x in data)
    except (TypeError, ValueError):
        return None


#: The time statistics of pytest-benchmark's ``stats`` that ``StoredBenchmark.stats`` keeps.
TIME_STATS = ("min", "median", "mean", "max", "stddev", "iqr")


def _time_stats(bench: Mapping[str, Any]) -> dict[str, float]:
    stats = bench.get("stats")
    if not isinstance(stats, dict):
        return {}
    return {
        k: float(stats[k])
        for k in TIME_STATS
        if isinstance(stats.get(k), (int, float)) and not isinstance(stats.get(k), bool)
    }
