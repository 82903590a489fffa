"""LoadGen's verdict and figures, read from its ``mlperf_log_detail.txt``.

LoadGen has no API for its results (mlcommons/inference#1189): it writes them as ``:::MLLOG {json}``
lines, each with a ``key`` and a ``value``. ``read`` takes the last value of every key; ``LogResult``
names the ones a record needs. Latencies are LoadGen's own (nanoseconds in the log, seconds here):
from a query's scheduled issue to the SUT's answer of its last sample.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ipu.results.loadgen import LoadgenFigures
from pytest_ipu.results.values import logged_flag
from pytest_ipu.results.values import logged_number

#: The line prefix of LoadGen's structured log.
PREFIX = ":::MLLOG "
#: The percentiles LoadGen reports, as the record names them, and their text in LoadGen's keys.
PERCENTILES = {
    "p50": "50.00",
    "p90": "90.00",
    "p95": "95.00",
    "p97": "97.00",
    "p99": "99.00",
    "p99.9": "99.90",
}


class LogError(ValueError):
    """A detail log that is missing or lacks a key a result needs."""


def read(path: Path) -> tuple[dict[str, Any], list[str]]:
    """Every key's last value in the detail log at ``path``, and the texts LoadGen logged as errors."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise LogError(f"LoadGen's detail log {path} could not be read: {exc.strerror or exc}") from None
    values: dict[str, Any] = {}
    errors: list[str] = []
    for line in text.splitlines():
        if not line.startswith(PREFIX):
            continue
        try:
            entry = json.loads(line[len(PREFIX) :])
        except json.JSONDecodeError:
            continue  # a line cut short by a crash: the keys before it still count
        if not isinstance(entry, dict) or "key" not in entry:
            continue
        values[str(entry["key"])] = entry.get("value")
        metadata = entry.get("metadata")
        if isinstance(metadata, dict) and metadata.get("is_error"):
            errors.append(f"{entry['key']}: {entry.get('value')}")
    return values, errors


@dataclass(frozen=True)
class LogResult(LoadgenFigures):
    """One LoadGen run's verdict and figures (``LoadgenFigures``), with what the record makes its
    own fields of: LoadGen's advice when INVALID and the effective settings."""

    #: LoadGen's advice when INVALID (`Reduce target QPS...`), or "".
    invalid_reason: str
    #: The effective settings, `effective_` stripped (`min_duration_ms`, `target_qps`...).
    effective: Mapping[str, Any]


def parse(path: Path, *, mode: str) -> LogResult:
    """The result of the run whose detail log is ``path``; raises ``LogError`` when LoadGen did not
    log its verdict (a run that did not finish)."""
    values, errors = read(path)
    scenario = str(values.get("effective_scenario", ""))
    validity = values.get("result_validity")
    if mode == "performance" and validity not in ("VALID", "INVALID"):
        raise LogError(
            f"LoadGen's detail log {path} has no verdict (result_validity): the run did not finish"
        )
    # A performance run's record is made of these: a log without one is not read as a zero.
    needed = ("min", "mean", "max", "p50", "p90", "p99")
    checks = {
        name: flag
        for name, key in (
            ("min_duration_met", "result_min_duration_met"),
            ("min_queries_met", "result_min_queries_met"),
            ("perf_constraints_met", "result_perf_constraints_met"),
            ("early_stopping_met", "early_stopping_met"),
        )
        if (flag := logged_flag(values, key)) is not None
    }
    # MultiStream's result is per query (its slowest sample); its per-sample keys are the same
    # figures under another name, and the per-query ones are what MLPerf reports.
    infix = "_per_query" if scenario == "MultiStream" and "result_min_query_latency_ns" in values else ""
    latency: dict[str, float] = {}
    for name, key in (("min", "min"), ("mean", "mean"), ("max", "max")):
        ns = logged_number(values, f"result_{key}{'_query' if infix else ''}_latency_ns")
        if ns is not None:
            latency[name] = ns / 1e9
    for name, text in PERCENTILES.items():
        ns = logged_number(values, f"result_{text}_percentile{infix}_latency_ns")
        if ns is not None:
            latency[name] = ns / 1e9
    missing = [name for name in needed if name not in latency]
    if mode == "performance" and missing:
        raise LogError(
            f"LoadGen's detail log {path} has no {', '.join(missing)} query latency: the run did not finish"
        )
    # An accuracy run issues every query LoadGen generated, and logs no result count.
    counted = logged_number(
        values, "result_query_count" if mode == "performance" else "generated_query_count"
    )
    if counted is None:
        raise LogError(f"LoadGen's detail log {path} has no query count: the run did not finish")
    queries = int(counted)
    per_query = int(logged_number(values, "effective_samples_per_query") or 1)
    if scenario == "Offline":
        rate = logged_number(values, "result_samples_per_second")
    elif scenario == "Server":
        rate = logged_number(values, "result_completed_samples_per_sec")
    else:
        qps = logged_number(values, "result_qps_with_loadgen_overhead")
        rate = None if qps is None else qps * per_query
    early_ns = logged_number(
        values, "early_stopping_latency_ms" if scenario == "MultiStream" else "early_stopping_latency_ss"
    )
    return LogResult(
        version=str(values.get("loadgen_version", "unknown")),
        valid=None if validity is None else validity == "VALID",
        checks=checks,
        invalid_reason=str(values.get("result_invalid_reason") or "").strip(),
        early_stopping=" ".join(str(values.get("early_stopping_result") or "").split()),
        early_stopping_latency_s=early_ns / 1e9 if early_ns else None,
        query_count=queries,
        samples_per_query=per_query,
        samples_per_s=rate,
        scheduled_qps=logged_number(values, "result_scheduled_samples_per_sec")
        if scenario == "Server"
        else None,
        latency_s=latency,
        effective={k[len("effective_") :]: v for k, v in values.items() if k.startswith("effective_")},
        errors=tuple(errors),
    )


#: What each failed check means, as a record's ``invalid_reasons`` says it.
CHECK_REASONS = {
    "min_duration_met": "minimum duration not met",
    "min_queries_met": "minimum query count not met",
    "perf_constraints_met": "latency bound not met at the target percentile",
    "early_stopping_met": "early stopping not met (too few queries for the percentile claim)",
}


def invalid_reasons(result: LogResult) -> tuple[str, ...]:
    """Why LoadGen called the run INVALID, one line per failed check, then LoadGen's own advice."""
    if result.valid is not False:
        return ()
    out = [CHECK_REASONS[name] for name, met in result.checks.items() if not met]
    if result.invalid_reason:
        out.append(f"LoadGen: {result.invalid_reason}")
    return tuple(out) or ("LoadGen called the run INVALID without a reason",)
