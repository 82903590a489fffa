"""LoadGen's detail log read into a verdict and figures (pytest_ipu.loadgen.detail_log): synthetic
``:::MLLOG`` files for each scenario, and one log written by a real LoadGen run."""

from __future__ import annotations

import json
import os
import queue
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.loadgen import detail_log
from pytest_ipu.loadgen.detail_log import LogError
from pytest_ipu.loadgen.detail_log import invalid_reasons
from pytest_ipu.loadgen.detail_log import parse

PERCENTILE_KEYS = ("50.00", "90.00", "95.00", "97.00", "99.00", "99.90")


def mllog(key: str, value: object, *, error: bool = False) -> str:
    """One line of LoadGen's structured log."""
    entry = {
        "key": key,
        "value": value,
        "time_ms": 12.5,
        "namespace": "mlperf::logging",
        "event_type": "POINT_IN_TIME",
        "metadata": {"is_error": error, "is_warning": False, "file": "results.cc", "line_no": 1},
    }
    return detail_log.PREFIX + json.dumps(entry)


def write_log(tmp_path: Path, entries: list[tuple[str, object]], *extra: str) -> Path:
    """A detail log of ``entries``, then the raw lines ``extra``."""
    lines = ["some text LoadGen printed that is not structured", *(mllog(k, v) for k, v in entries), *extra]
    path = tmp_path / "mlperf_log_detail.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def latencies(base_ns: int, *, per_query: bool = False) -> list[tuple[str, object]]:
    """The latency keys, ``base_ns`` times 1 (min), 2 (mean), 10 (max) and 3..8 (percentiles)."""
    query = "_query" if per_query else ""
    entries: list[tuple[str, object]] = [
        (f"result_min{query}_latency_ns", base_ns),
        (f"result_mean{query}_latency_ns", base_ns * 2),
        (f"result_max{query}_latency_ns", base_ns * 10),
    ]
    infix = "_per_query" if per_query else ""
    for i, text in enumerate(PERCENTILE_KEYS):
        entries.append((f"result_{text}_percentile{infix}_latency_ns", base_ns * (3 + i)))
    return entries


def common(scenario: str, validity: str, per_query: int = 1) -> list[tuple[str, object]]:
    """The keys every run logs: version, effective settings, the verdict, and a finished run's query
    counts and latencies (a test's own later values of these win: the last value of a key does)."""
    return [
        ("generated_query_count", 2),
        ("result_query_count", 2),
        *latencies(500_000),
        ("loadgen_version", "6.0.17 @ d6147c7eb7"),
        ("effective_scenario", scenario),
        ("effective_test_mode", "PerformanceOnly"),
        ("effective_samples_per_query", per_query),
        ("effective_min_duration_ms", 2000),
        ("effective_target_latency_percentile", 0.99),
        ("requested_min_duration_ms", 2000),
        ("result_validity", validity),
    ]


def test_single_stream_valid(tmp_path: Path) -> None:
    path = write_log(
        tmp_path,
        [
            *common("SingleStream", "VALID"),
            ("result_min_duration_met", True),
            ("result_min_queries_met", True),
            ("early_stopping_met", True),
            ("result_invalid_reason", ""),
            ("early_stopping_result", " * Processed at least 64 queries (4001).\n  * Would discard 355 "),
            ("result_query_count", 4001),
            ("result_qps_with_loadgen_overhead", 250.5),
            ("early_stopping_latency_ss", 6_820_000),
            ("early_stopping_latency_ms", 21_587_000),  # MultiStream's: not this scenario's
            *latencies(1_000_000),
        ],
    )
    result = parse(path, mode="performance")
    assert result.valid is True
    assert result.version == "6.0.17 @ d6147c7eb7"
    assert result.checks == {"min_duration_met": True, "min_queries_met": True, "early_stopping_met": True}
    assert result.query_count == 4001
    assert result.samples_per_query == 1
    assert result.samples_per_s == pytest.approx(250.5)
    assert result.scheduled_qps is None
    assert result.early_stopping_latency_s == pytest.approx(0.00682)
    assert result.early_stopping == "* Processed at least 64 queries (4001). * Would discard 355"
    assert result.latency_s == pytest.approx(
        {
            "min": 0.001,
            "mean": 0.002,
            "max": 0.010,
            "p50": 0.003,
            "p90": 0.004,
            "p95": 0.005,
            "p97": 0.006,
            "p99": 0.007,
            "p99.9": 0.008,
        }
    )
    assert result.effective["scenario"] == "SingleStream"
    assert result.effective["min_duration_ms"] == 2000
    assert "requested_min_duration_ms" not in result.effective
    assert "min_duration_ms" in result.effective
    assert result.invalid_reason == ""
    assert result.errors == ()
    assert invalid_reasons(result) == ()


def test_multi_stream_reads_the_per_query_keys(tmp_path: Path) -> None:
    path = write_log(
        tmp_path,
        [
            *common("MultiStream", "VALID", per_query=8),
            *latencies(2_000_000, per_query=True),
            # LoadGen logs the per-sample keys after the per-query ones: other figures here, so a
            # parser that read them would be caught.
            *latencies(1_000_000),
            ("result_query_count", 700),
            ("result_qps_with_loadgen_overhead", 50.0),
            ("early_stopping_latency_ss", 1_000_000),
            ("early_stopping_latency_ms", 19_000_000),
        ],
    )
    result = parse(path, mode="performance")
    assert result.samples_per_query == 8
    assert result.latency_s["p99"] == pytest.approx(0.014)
    assert result.latency_s["min"] == pytest.approx(0.002)
    assert result.latency_s["mean"] == pytest.approx(0.004)
    assert result.latency_s["max"] == pytest.approx(0.020)
    assert result.early_stopping_latency_s == pytest.approx(0.019)
    assert result.samples_per_s == pytest.approx(400.0)  # queries per second times samples per query


def test_multi_stream_without_per_query_keys_reads_the_per_sample_ones(tmp_path: Path) -> None:
    path = write_log(tmp_path, [*common("MultiStream", "VALID", per_query=8), *latencies(1_000_000)])
    result = parse(path, mode="performance")
    assert result.latency_s["p50"] == pytest.approx(0.003)
    assert result.samples_per_s is None  # LoadGen gave no rate


def test_server_invalid_names_the_latency_bound_and_loadgens_advice(tmp_path: Path) -> None:
    path = write_log(
        tmp_path,
        [
            *common("Server", "INVALID"),
            ("effective_target_latency_ns", 15_000_000),
            ("result_perf_constraints_met", False),
            ("result_min_duration_met", True),
            ("result_min_queries_met", True),
            ("early_stopping_met", True),
            ("result_invalid_reason", "Reduce target QPS to improve latency. "),
            ("result_scheduled_samples_per_sec", 200.5),
            ("result_completed_samples_per_sec", 199.25),
            ("result_samples_per_second", 1.0),  # Offline's key: not this scenario's
            ("result_query_count", 1200),
            *latencies(5_000_000),
        ],
    )
    result = parse(path, mode="performance")
    assert result.valid is False
    assert result.scheduled_qps == pytest.approx(200.5)
    assert result.samples_per_s == pytest.approx(199.25)
    assert result.checks["perf_constraints_met"] is False
    assert result.effective["target_latency_ns"] == 15_000_000
    assert invalid_reasons(result) == (
        "latency bound not met at the target percentile",
        "LoadGen: Reduce target QPS to improve latency.",
    )


def test_server_valid_has_no_reasons(tmp_path: Path) -> None:
    path = write_log(
        tmp_path,
        [
            *common("Server", "VALID"),
            ("result_perf_constraints_met", True),
            ("result_scheduled_samples_per_sec", 100.0),
            ("result_completed_samples_per_sec", 100.0),
        ],
    )
    result = parse(path, mode="performance")
    assert result.valid is True
    assert invalid_reasons(result) == ()


def test_offline_reads_samples_per_second(tmp_path: Path) -> None:
    path = write_log(
        tmp_path,
        [
            *common("Offline", "INVALID", per_query=24576),
            ("result_min_duration_met", False),
            ("result_min_queries_met", True),
            ("result_invalid_reason", "Increase expected QPS so the loadgen pre-generates a larger query. "),
            ("result_samples_per_second", 5612.5),
            ("result_query_count", 1),
            *latencies(3_000_000),
        ],
    )
    result = parse(path, mode="performance")
    assert result.samples_per_s == pytest.approx(5612.5)
    assert result.scheduled_qps is None
    assert result.query_count == 1
    assert result.samples_per_query == 24576
    assert invalid_reasons(result) == (
        "minimum duration not met",
        "LoadGen: Increase expected QPS so the loadgen pre-generates a larger query.",
    )


def test_invalid_without_a_reason_still_says_so(tmp_path: Path) -> None:
    result = parse(write_log(tmp_path, common("Offline", "INVALID")), mode="performance")
    assert invalid_reasons(result) == ("LoadGen called the run INVALID without a reason",)


def test_a_truncated_last_line_is_ignored(tmp_path: Path) -> None:
    cut = mllog("result_validity", "INVALID")[:40]  # a crash mid-write
    path = write_log(tmp_path, [*common("Offline", "VALID"), ("result_samples_per_second", 10.0)], cut)
    path.write_text(path.read_text(encoding="utf-8").rstrip("\n"), encoding="utf-8")  # no final newline
    result = parse(path, mode="performance")
    assert result.valid is True
    assert result.samples_per_s == pytest.approx(10.0)


def test_the_last_value_of_a_key_wins(tmp_path: Path) -> None:
    path = write_log(
        tmp_path, [*common("Offline", "VALID"), ("result_query_count", 1), ("result_query_count", 3)]
    )
    assert parse(path, mode="performance").query_count == 3


def test_a_missing_verdict_is_an_error_in_performance_mode_only(tmp_path: Path) -> None:
    entries = [e for e in common("SingleStream", "VALID") if e[0] != "result_validity"]
    path = write_log(tmp_path, entries)
    with pytest.raises(LogError, match=r"has no verdict \(result_validity\): the run did not finish"):
        parse(path, mode="performance")
    result = parse(path, mode="accuracy")
    assert result.valid is None
    assert invalid_reasons(result) == ()


def test_a_missing_log_is_a_log_error(tmp_path: Path) -> None:
    with pytest.raises(LogError, match="could not be read"):
        parse(tmp_path / "nowhere" / "mlperf_log_detail.txt", mode="performance")


def test_entries_logged_as_errors_are_collected(tmp_path: Path) -> None:
    path = write_log(
        tmp_path,
        common("SingleStream", "INVALID"),
        mllog("error_runtime", "Ending early: Ran out of generated queries", error=True),
        mllog("warning_generic_message", "Logging allocation detected"),
        mllog("error_invalid_config", "bad setting", error=True),
        detail_log.PREFIX + json.dumps(["not", "an", "entry"]),
        detail_log.PREFIX + json.dumps({"value": "no key"}),
    )
    result = parse(path, mode="performance")
    assert result.errors == (
        "error_runtime: Ending early: Ran out of generated queries",
        "error_invalid_config: bad setting",
    )


def test_non_numbers_are_not_figures(tmp_path: Path) -> None:
    path = write_log(
        tmp_path,
        [*common("Offline", "VALID"), ("result_samples_per_second", True), ("result_min_latency_ns", "fast")],
    )
    # A performance run needs its latencies: one that is not a number is missing, not a zero.
    with pytest.raises(LogError, match=r"has no min query latency: the run did not finish"):
        parse(path, mode="performance")
    result = parse(path, mode="accuracy")
    assert result.samples_per_s is None
    assert "min" not in result.latency_s


def test_a_performance_run_without_its_query_count_is_a_log_error(tmp_path: Path) -> None:
    entries = [e for e in common("Server", "VALID") if e[0] != "result_query_count"]
    with pytest.raises(LogError, match=r"has no query count: the run did not finish"):
        parse(write_log(tmp_path, entries), mode="performance")


def test_an_accuracy_run_counts_the_queries_loadgen_generated(tmp_path: Path) -> None:
    # LoadGen logs no result count in accuracy mode; it issues every query it generated.
    entries = [
        e for e in common("SingleStream", "VALID") if e[0] not in ("result_query_count", "result_validity")
    ]
    path = write_log(tmp_path, [*entries, ("generated_query_count", 32)])
    assert parse(path, mode="accuracy").query_count == 32


# --- a real LoadGen log -----------------------------------------------------------------------------


def _run_loadgen(out: Path) -> None:
    """One short SingleStream run of LoadGen on a SUT that answers each query at once, from a thread
    (as a real SUT does: LoadGen's issue callback must return without waiting for the answer)."""
    lg: Any = pytest.importorskip("mlperf_loadgen")
    pending: queue.Queue[list[Any] | None] = queue.Queue()

    def answer() -> None:
        while (samples := pending.get()) is not None:
            lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in samples])

    worker = threading.Thread(target=answer, daemon=True)
    worker.start()
    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.SingleStream
    settings.mode = lg.TestMode.PerformanceOnly
    settings.min_duration_ms = 200
    settings.min_query_count = 1
    # A short expected latency: LoadGen generates enough queries for the duration up front.
    settings.single_stream_expected_latency_ns = 10_000
    logging = lg.LogSettings()
    logging.log_output.outdir = os.fspath(out)
    logging.log_output.copy_summary_to_stdout = False
    logging.enable_trace = False
    sut = lg.ConstructSUT(lambda samples: pending.put(list(samples)), lambda: None)
    qsl = lg.ConstructQSL(16, 16, lambda indices: None, lambda indices: None)
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, logging)
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
        pending.put(None)
        worker.join(10)


def test_a_real_loadgen_log_parses(tmp_path: Path) -> None:
    pytest.importorskip("mlperf_loadgen")
    _run_loadgen(tmp_path)
    result = parse(tmp_path / "mlperf_log_detail.txt", mode="performance")
    assert result.valid is not None  # VALID or INVALID: what matters is that LoadGen's verdict was read
    assert result.version
    assert result.query_count > 0
    assert result.samples_per_query == 1
    assert result.effective["scenario"] == "SingleStream"
    assert result.effective["min_duration_ms"] == 200
    lat = result.latency_s
    assert 0 < lat["min"] <= lat["p50"] <= lat["p99"] <= lat["max"]
    assert result.samples_per_s is not None
    assert result.samples_per_s > 0
    assert set(result.checks) >= {"min_duration_met", "min_queries_met"}
    assert result.valid == (invalid_reasons(result) == ())
