"""MLPerf's rules from LoadGen's own mlperf.conf, LoadGen's TestSettings made from a run's settings,
and the compliance verdict (pytest_ipu.loadgen.settings)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pytest_ipu.loadgen import settings as lgs
from pytest_ipu.loadgen.settings import Rules
from pytest_ipu.loadgen.settings import RunSettings
from pytest_ipu.loadgen.settings import compliance
from pytest_ipu.loadgen.settings import make_test_settings
from pytest_ipu.loadgen.settings import rules


@pytest.fixture(scope="module")
def lg() -> Any:
    """LoadGen's Python module (the SDK environment has none: these tests skip there)."""
    return pytest.importorskip("mlperf_loadgen")


# --- MLPerf's rules ---------------------------------------------------------------------------------


def test_resnet50_server_rules(lg: Any) -> None:
    rule = rules(lg, "resnet50", "Server")
    assert rule.model == "resnet50"
    assert rule.scenario == "Server"
    assert rule.target_latency_s == pytest.approx(0.015)
    assert rule.min_duration_s == pytest.approx(600.0)
    assert rule.latency_percentile == pytest.approx(0.99)
    assert rule.performance_sample_count == 1024


def test_general_rules_for_an_unnamed_model(lg: Any) -> None:
    server = rules(lg, None, "Server")
    assert server.model == lgs.GENERAL_MODEL
    assert server.min_duration_s == pytest.approx(600.0)
    assert server.latency_percentile == pytest.approx(0.99)
    assert server.performance_sample_count == 0  # no benchmark, no rule on the samples loaded
    single = rules(lg, None, "SingleStream")
    assert single.latency_percentile == pytest.approx(0.9)
    assert single.min_query_count >= 1
    assert rules(lg, None, "MultiStream").samples_per_query == 8


def test_a_benchmark_with_its_own_bound_differs_from_the_general_rules(lg: Any) -> None:
    assert rules(lg, "resnet50", "Server").target_latency_s != rules(lg, None, "Server").target_latency_s


# --- TestSettings -----------------------------------------------------------------------------------


def test_short_runs_last_two_seconds_and_need_one_query(lg: Any) -> None:
    for scenario in lgs.SCENARIOS:
        s = make_test_settings(lg, RunSettings(scenario), samples=100)  # type: ignore[arg-type]
        assert s.min_duration_ms == round(lgs.SHORT_DURATION_S * 1000) == 2000
        assert s.min_query_count == 1


def test_mlperf_runs_keep_the_rules_durations_and_query_counts(lg: Any) -> None:
    s = make_test_settings(lg, RunSettings("Server", mlperf=True, mlperf_model="resnet50"), samples=2000)
    rule = rules(lg, "resnet50", "Server")
    assert s.min_duration_ms == round(rule.min_duration_s * 1000) == 600_000
    assert s.min_query_count == rule.min_query_count
    assert s.server_target_latency_ns == 15_000_000
    assert s.performance_sample_count_override == 1024


@pytest.mark.parametrize("mlperf", [False, True])
def test_what_the_caller_passes_wins(lg: Any, mlperf: bool) -> None:
    run = RunSettings(
        "Server",
        mlperf=mlperf,
        mlperf_model="resnet50",
        min_duration_s=0.5,
        min_query_count=7,
        max_duration_s=3.0,
        target_qps=123.5,
        target_latency_s=0.05,
        latency_percentile=0.9,
    )
    s = make_test_settings(lg, run, samples=100)
    assert s.min_duration_ms == 500
    assert s.min_query_count == 7
    assert s.max_duration_ms == 3000
    assert s.server_target_qps == pytest.approx(123.5)
    assert s.server_target_latency_ns == 50_000_000
    assert s.server_target_latency_percentile == pytest.approx(0.9)
    assert s.single_stream_target_latency_percentile == pytest.approx(0.9)
    assert s.multi_stream_target_latency_percentile == pytest.approx(0.9)


def test_offline_target_qps_is_its_expected_qps(lg: Any) -> None:
    s = make_test_settings(lg, RunSettings("Offline", target_qps=900.0), samples=100)
    assert s.offline_expected_qps == pytest.approx(900.0)


def test_stream_expectations_and_query_size(lg: Any) -> None:
    run = RunSettings("MultiStream", samples_per_query=4, expected_latency_s=0.002)
    s = make_test_settings(lg, run, samples=100)
    assert s.multi_stream_samples_per_query == 4
    assert s.multi_stream_expected_latency_ns == 2_000_000
    assert s.single_stream_expected_latency_ns == 2_000_000
    tiny = make_test_settings(lg, replace(run, expected_latency_s=1e-12), samples=100)
    assert tiny.multi_stream_expected_latency_ns == 1  # never 0: LoadGen divides by it


@pytest.mark.parametrize(
    ("model", "asked", "samples", "loaded"),
    [
        ("resnet50", None, 100, 100),  # the rule's 1024, capped at the library's 100
        ("resnet50", None, 5000, 1024),  # the rule's 1024
        (None, None, 300, 300),  # no rule: the whole library
        (None, 50, 300, 50),  # the caller's
        ("resnet50", 5000, 300, 300),  # the caller's, capped at the library
    ],
)
def test_performance_sample_count_is_capped_at_the_library(
    lg: Any, model: str | None, asked: int | None, samples: int, loaded: int
) -> None:
    run = RunSettings("Offline", mlperf_model=model, performance_sample_count=asked)
    assert make_test_settings(lg, run, samples=samples).performance_sample_count_override == loaded


def test_accuracy_mode_is_loadgens_accuracy_only(lg: Any) -> None:
    s = make_test_settings(lg, RunSettings("Offline", mode="accuracy"), samples=10)
    assert s.mode == lg.TestMode.AccuracyOnly
    assert make_test_settings(lg, RunSettings("Offline"), samples=10).mode == lg.TestMode.PerformanceOnly


# --- compliance -------------------------------------------------------------------------------------


def resnet50_server_effective() -> dict[str, Any]:
    """Effective settings (as the detail log names them) that meet every rule of resnet50 Server."""
    return {
        "scenario": "Server",
        "min_duration_ms": 600_000,
        "min_query_count": 270_336,
        "target_latency_ns": 15_000_000,
        "target_latency_percentile": 0.99,
        "samples_per_query": 1,
        "performance_sample_count": 1024,
    }


@pytest.fixture(scope="module")
def server_rule(lg: Any) -> Rules:
    """MLPerf's rules of resnet50 Server."""
    return rules(lg, "resnet50", "Server")


def test_a_run_meeting_every_rule_is_compliant(server_rule: Rules) -> None:
    effective = resnet50_server_effective()
    assert compliance(effective, server_rule, mode="performance", valid=True, named=True) == (True, ())
    # A tighter bound than MLPerf's is still within its rule.
    effective["target_latency_ns"] = 10_000_000
    assert compliance(effective, server_rule, mode="performance", valid=True, named=True) == (True, ())


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("min_duration_ms", 2000, "minimum duration 2 s < MLPerf's 600 s"),
        ("min_query_count", 1, "minimum query count 1 < MLPerf's "),
        ("target_latency_ns", 50_000_000, "latency bound 50 ms > MLPerf's 15 ms"),
        ("target_latency_ns", 0, "latency bound 0 ms > MLPerf's 15 ms"),
        ("target_latency_percentile", 0.9, "latency percentile 0.9 < MLPerf's 0.99 for Server"),
        ("performance_sample_count", 100, "performance sample count 100 < MLPerf's 1024 for resnet50"),
    ],
)
def test_each_broken_rule_is_the_one_reason(server_rule: Rules, key: str, value: object, reason: str) -> None:
    effective = resnet50_server_effective()
    effective[key] = value
    compliant, reasons = compliance(effective, server_rule, mode="performance", valid=True, named=True)
    assert not compliant
    assert len(reasons) == 1
    assert reasons[0].startswith(reason)


@pytest.mark.parametrize("valid", [False, None])
def test_a_run_loadgen_did_not_call_valid_is_not_compliant(server_rule: Rules, valid: bool | None) -> None:
    effective = resnet50_server_effective()
    assert compliance(effective, server_rule, mode="performance", valid=valid, named=True) == (
        False,
        ("LoadGen called the run INVALID",),
    )


def test_an_accuracy_run_is_never_compliant(server_rule: Rules) -> None:
    effective = resnet50_server_effective()
    for valid in (True, None):
        compliant, reasons = compliance(effective, server_rule, mode="accuracy", valid=valid, named=True)
        assert not compliant
        assert reasons == ("an accuracy run has no performance result; MLPerf judges the performance run",)


def test_an_unnamed_model_is_not_compliant(lg: Any) -> None:
    rule = rules(lg, None, "Server")
    effective = resnet50_server_effective()
    effective["target_latency_ns"] = round(rule.target_latency_s * 1e9)
    compliant, reasons = compliance(effective, rule, mode="performance", valid=True, named=False)
    assert not compliant
    assert reasons == ("no MLPerf benchmark named (mlperf_model=...): judged by MLPerf's general rules",)


def test_multistream_needs_its_query_size(lg: Any) -> None:
    rule = rules(lg, "resnet50", "MultiStream")
    effective = {
        "min_duration_ms": 600_000,
        "min_query_count": rule.min_query_count,
        "target_latency_percentile": rule.latency_percentile,
        "samples_per_query": 8,
        "performance_sample_count": 1024,
    }
    assert compliance(effective, rule, mode="performance", valid=True, named=True) == (True, ())
    effective["samples_per_query"] = 4
    assert compliance(effective, rule, mode="performance", valid=True, named=True) == (
        False,
        ("4 samples per query, MLPerf's MultiStream has 8",),
    )


def test_a_short_run_lists_every_reason(lg: Any) -> None:
    rule = rules(lg, None, "SingleStream")
    effective = {"min_duration_ms": 2000, "min_query_count": 1, "target_latency_percentile": 0.9}
    compliant, reasons = compliance(effective, rule, mode="performance", valid=True, named=False)
    assert not compliant
    assert [r.split(" ")[0] for r in reasons] == ["no", "minimum", "minimum"]


# --- small helpers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Server", "Server"),
        ("server", "Server"),
        ("single-stream", "SingleStream"),
        ("multi_stream", "MultiStream"),
    ],
)
def test_scenario_names_match_without_case(text: str, name: str) -> None:
    assert lgs.scenario_name(text) == name


@pytest.mark.parametrize("value", ["Servr", 3, None])
def test_an_unknown_scenario_names_the_choices(value: object) -> None:
    with pytest.raises(
        ValueError, match=r"is not a LoadGen scenario; choose one of SingleStream, MultiStream"
    ):
        lgs.scenario_name(value)


# --- runner.expected: what LoadGen sizes its schedule by -----------------------------------------


def _calibration(batch_1_s: float, batch_max_s: float, max_batch: int = 8, instances: int = 1) -> Any:
    from pytest_ipu.loadgen.runner import Calibration

    return Calibration(batch_1_s, batch_max_s, max_batch, instances, first_call_s=batch_1_s)


def test_expected_latency_leaves_room_for_a_faster_run() -> None:
    from pytest_ipu.loadgen.runner import LATENCY_HEADROOM
    from pytest_ipu.loadgen.runner import expected

    single = expected(RunSettings("SingleStream"), _calibration(0.004, 0.010), 2.0)
    assert single.expected_latency_s == pytest.approx(0.004 / LATENCY_HEADROOM)
    # MultiStream's 8 samples on one instance at batch 4: two calls of a full batch per query.
    multi = expected(RunSettings("MultiStream"), _calibration(0.004, 0.010, max_batch=4), 2.0)
    assert multi.expected_latency_s == pytest.approx(2 * 0.010 / LATENCY_HEADROOM)


def test_expected_values_are_bounded_for_a_model_that_answers_at_once() -> None:
    from pytest_ipu.loadgen.runner import MAX_GENERATED
    from pytest_ipu.loadgen.runner import expected

    instant = _calibration(1e-9, 1e-9)
    single = expected(RunSettings("SingleStream"), instant, 2.0)
    assert single.expected_latency_s == pytest.approx(2.0 / MAX_GENERATED)
    offline = expected(RunSettings("Offline"), instant, 2.0)
    assert offline.target_qps == pytest.approx(MAX_GENERATED / 2.0)


def test_expected_keeps_what_the_caller_gave() -> None:
    from pytest_ipu.loadgen.runner import OFFLINE_HEADROOM
    from pytest_ipu.loadgen.runner import expected

    calibration = _calibration(0.004, 0.010)
    given = RunSettings("SingleStream", expected_latency_s=0.5)
    assert expected(given, calibration, 2.0) == given
    assert expected(RunSettings("Offline", target_qps=7.0), calibration, 2.0).target_qps == 7.0
    offline = expected(RunSettings("Offline"), calibration, 2.0)
    assert offline.target_qps == pytest.approx(8 / 0.010 * OFFLINE_HEADROOM)
    server = RunSettings("Server", target_qps=100.0)
    assert expected(server, calibration, 2.0) == server
