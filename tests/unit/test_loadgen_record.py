"""The record's ``loadgen`` part (pytest_ipu.results.loadgen): built by ``run.records.loadgen_record``,
written and read back by the schema, read by the catalog's ``loadgen.*`` metrics and explained when
a metric has no value."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.power.meter import not_measured
from pytest_ipu.results import schema
from pytest_ipu.results.loadgen import BatchingRecord
from pytest_ipu.results.loadgen import LoadgenRecord
from pytest_ipu.results.loadgen import PeakSearch
from pytest_ipu.results.loadgen import ServerProbe
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.schema import SchemaError
from pytest_ipu.run.records import loadgen_record
from tests.unit.test_schema import make_record

LATENCY = {
    "min": 0.001,
    "mean": 0.004,
    "max": 0.02,
    "p50": 0.003,
    "p90": 0.006,
    "p95": 0.008,
    "p97": 0.009,
    "p99": 0.012,
    "p99.9": 0.018,
}
INVALID_REASONS = (
    "latency bound not met at the target percentile",
    "LoadGen: Reduce target QPS to improve latency.",
)


def compiled() -> CompiledModel:
    """A compiled model as a backend returns it (its calls are never made here)."""
    return CompiledModel(
        target="torch:cpu",
        backend="torch",
        device="cpu",
        device_name="Some CPU @ 2.0GHz",
        precision="fp32",
        io="host",
        run=lambda *args: None,
        prepare_inputs=tuple,
        close=lambda: None,
        phases_s={"export": 0.5},
        info={"provider": "cpu"},
        compile_s=1.25,
    )


def probe(qps: float, valid: bool) -> ServerProbe:
    """One probe of a peak search, VALID or INVALID at ``qps``."""
    return ServerProbe(
        target_qps=qps,
        valid=valid,
        scheduled_qps=qps * 1.001,
        completed_qps=qps if valid else qps * 0.7,
        latency_s=0.01 if valid else 0.09,
        reasons=() if valid else INVALID_REASONS,
        elapsed_s=3.5,
    )


def search(*probes: ServerProbe, ended: str = "converged") -> PeakSearch:
    """A peak search of ``probes``: its peak the highest VALID one."""
    valid = [p.target_qps for p in probes if p.valid]
    invalid = [p.target_qps for p in probes if not p.valid]
    return PeakSearch(
        peak_qps=max(valid) if valid else None,
        probes=probes,
        max_probes=10,
        budget_s=600.0,
        tolerance=0.05,
        ended=ended,
        capacity_estimate_qps=1600.0,
        lowest_invalid_qps=min(invalid) if invalid else None,
    )


def part(**changes: Any) -> LoadgenRecord:
    """A VALID Server run's ``loadgen`` part, with ``changes``."""
    base: dict[str, Any] = {
        "scenario": "Server",
        "mode": "performance",
        "version": "6.0.17 @ d6147c7eb7",
        "settings": {
            "scenario": "Server",
            "target_qps": 200,
            "target_latency_ns": 15_000_000,
            "seeds": [1, 2],
        },
        "valid": True,
        "invalid_reasons": (),
        "checks": {"min_duration_met": True, "min_queries_met": True, "perf_constraints_met": True},
        "early_stopping": "* Run successful.",
        "early_stopping_latency_s": None,
        "query_count": 400,
        "samples_per_query": 1,
        "samples_per_s": 199.5,
        "scheduled_qps": 200.25,
        "latency_s": dict(LATENCY),
        "mlperf_model": None,
        "mlperf_compliant": False,
        "compliance_reasons": (
            "no MLPerf benchmark named (mlperf_model=...): judged by MLPerf's general rules",
        ),
        "batching": BatchingRecord(
            max_batch=8,
            timeout_s=0.001,
            pad_to=None,
            instances=2,
            batches=60,
            mean_batch=400 / 60,
            batch_sizes={"8": 40, "3": 20},
            instance_batches=(31, 29),
        ),
        "log_dir": "results/latest.loadgen/test_server",
        "calibration": {"batch_1_s": 0.002, "batch_max_s": 0.01, "capacity_estimate_qps": 1600.0},
        "errors": (),
    }
    base.update(changes)
    return LoadgenRecord(**base)


#: The power part of a LoadGen record that measured no energy.
NO_POWER = not_measured("none", "no power meter for this run")


#: An accuracy run's answer times, as the system under test measured them (LoadGen times nothing).
ANSWERED_S = (0.002, 0.003, 0.004, 0.005)
ANSWERED_WINDOW_S = 0.02


def record(loadgen: LoadgenRecord, elapsed_s: float = 2.5) -> IpuRecord:
    """The benchmark's record around ``loadgen``, as ``ipu_loadgen`` builds it."""
    answered = loadgen.mode == "accuracy"
    return loadgen_record(
        loadgen,
        compiled=compiled(),
        first_call_s=0.3,
        elapsed_s=elapsed_s,
        answered_s=ANSWERED_S if answered else (),
        answered_window_s=ANSWERED_WINDOW_S if answered else None,
        power=NO_POWER,
    )


SEARCHED = part(
    peak=search(probe(800.0, True), probe(1600.0, False), probe(1131.4, False), probe(951.4, True)),
    scheduled_qps=951.9,
)
NO_VALID = part(
    peak=search(probe(800.0, False), probe(200.0, False), probe(50.0, False), ended="no-valid"),
    valid=False,
    invalid_reasons=INVALID_REASONS,
)
INVALID = part(valid=False, invalid_reasons=INVALID_REASONS, checks={"perf_constraints_met": False})
OFFLINE = part(
    scenario="Offline",
    scheduled_qps=None,
    samples_per_query=24576,
    query_count=1,
    samples_per_s=5000.0,
    latency_s={"min": 4.9, "max": 4.9, "mean": 4.9},
    mode="accuracy",
    valid=None,
    accuracy=-0.25,
    accuracy_name="neg_log_loss",
    errors=("error_runtime: Ending early",),
)


# --- building the record ----------------------------------------------------------------------------


def test_loadgen_record_reports_loadgens_figures() -> None:
    rec = record(part())
    assert rec.loadgen == part()
    assert rec.target == "torch:cpu"
    assert rec.compile_s == 1.25
    assert rec.compile_phases_s == {"export": 0.5}
    assert rec.batch_size == 8
    assert rec.items_per_call == 1
    assert rec.rounds == 400  # LoadGen's queries
    assert rec.rounds_policy == "fixed"
    assert rec.latency_s.p50 == LATENCY["p50"]
    assert rec.latency_s.p99 == LATENCY["p99"]
    assert rec.latency_s.max == LATENCY["max"]
    assert rec.latency_s.rounds == 400
    assert rec.throughput_items_per_s == 199.5
    assert rec.window_s == pytest.approx(400 / 199.5)
    assert rec.first_call_s == 0.3
    assert rec.power == NO_POWER


def test_loadgen_record_without_a_rate_uses_the_elapsed_time() -> None:
    # MultiStream: LoadGen reports its latencies and no rate.
    rec = record(part(samples_per_s=None), elapsed_s=4.0)
    assert rec.window_s == 4.0
    assert rec.throughput_items_per_s == pytest.approx(400 / 4.0)
    assert rec.latency_s.p50 == LATENCY["p50"]


def test_a_performance_record_never_makes_up_a_latency_loadgen_did_not_give() -> None:
    with pytest.raises(KeyError, match="p50"):
        record(part(latency_s={"min": 0.001, "mean": 0.004, "max": 0.01}))


def test_an_accuracy_record_has_the_system_under_tests_own_times() -> None:
    rec = record(OFFLINE)
    assert rec.latency_s.rounds == len(ANSWERED_S)  # a "call" is one sample
    assert rec.latency_s.min == min(ANSWERED_S)
    assert rec.latency_s.max == max(ANSWERED_S)
    assert rec.items_per_call == 1
    assert rec.window_s == ANSWERED_WINDOW_S
    assert rec.throughput_items_per_s == pytest.approx(len(ANSWERED_S) / ANSWERED_WINDOW_S)
    with pytest.raises(ValueError, match="needs the system under test's answer times"):
        loadgen_record(OFFLINE, compiled=compiled(), first_call_s=0.3, elapsed_s=1.0, power=NO_POWER)


def test_the_runs_host_cost_is_the_records_and_cpu_time_per_call_says_why_it_has_none() -> None:
    from pytest_ipu.measure.metrics import run_cpu_time
    from pytest_ipu.results import schema

    # 0.3 s of this process and 0.9 s of two workers over a 2 s run that answered 400 samples.
    cpu = run_cpu_time(300_000_000, 900_000_000, 2, 2.0, 400)
    rec = loadgen_record(
        part(), compiled=compiled(), first_call_s=0.3, elapsed_s=2.0, power=NO_POWER, cpu=cpu
    )
    assert rec.value("host_cpu_per_item") == pytest.approx(1.2 / 400)
    assert rec.value("host_cores") == pytest.approx(0.6)
    assert (rec.cpu.workers, rec.cpu.workers_total_s) == (2, pytest.approx(0.9))
    # The workers' part is inside the process total, not beside it.
    assert rec.cpu.process_total_s == pytest.approx(0.3 + 0.9)
    assert rec.value("cpu_time") is None
    assert rec.why_missing("cpu_time").startswith(
        "no CPU time per call: a LoadGen benchmark has no timed rounds"
    )
    assert "off-cpu" not in rec.flags
    back = schema.from_json(schema.to_json(rec))
    assert back.cpu == rec.cpu
    # A record written before LoadGen runs measured their host cost says so.
    old = replace(rec, cpu=None)
    assert "written before LoadGen runs measured their host cost" in old.why_missing("host_cores")
    with pytest.raises(ValueError, match="needs a worker"):
        run_cpu_time(1, 5, 0, 1.0, 1)
    with pytest.raises(ValueError, match="items > 0"):
        run_cpu_time(1, 0, 0, 1.0, 0)


# --- the JSON ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("loadgen", [part(), SEARCHED, NO_VALID, INVALID, OFFLINE], ids=lambda p: p.scenario)
def test_round_trip(loadgen: LoadgenRecord) -> None:
    rec = record(loadgen)
    data = schema.to_json(rec)
    assert data["loadgen"]["server_qps"] == loadgen.server_qps  # written for readers of the JSON
    assert schema.from_json(data) == rec
    assert schema.from_json(json.loads(json.dumps(data))) == rec


def test_a_record_without_loadgen_does_not_write_the_key() -> None:
    data = schema.to_json(make_record())
    assert "loadgen" not in data
    assert schema.from_json(data).loadgen is None
    assert schema.from_json({**data, "loadgen": None}).loadgen is None


def _set(data: dict[str, Any], path: str, value: object) -> None:
    """Set the value at a dotted path with list indices (``loadgen.peak.probes[0].target_qps``)."""
    node: Any = data
    keys = path.replace("[", ".").replace("]", "").split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = value
    elif value is KeyError:
        del node[last]
    else:
        node[last] = value


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("loadgen.peak.probes[0].target_qps", "fast", "'loadgen.peak.probes[0].target_qps' is 'fast'"),
        ("loadgen.peak.probes[1].valid", "no", "'loadgen.peak.probes[1].valid' is 'no'"),
        ("loadgen.peak.probes[1].reasons", "slow", "'loadgen.peak.probes[1].reasons' is 'slow'"),
        ("loadgen.peak.ended", "timeout", "'loadgen.peak.ended' is 'timeout': it must be one of"),
        ("loadgen.peak.peak_qps", -1.0, "'loadgen.peak.peak_qps' is -1"),
        ("loadgen.scenario", "Sever", "'loadgen.scenario' is 'Sever': it must be one of 'SingleStream'"),
        ("loadgen.mode", None, "'loadgen.mode' is None"),
        ("loadgen.valid", "VALID", "'loadgen.valid' is 'VALID'"),
        ("loadgen.query_count", KeyError, "'loadgen.query_count' is missing"),
        ("loadgen.checks.perf_constraints_met", "yes", "'loadgen.checks.perf_constraints_met' is 'yes'"),
        ("loadgen.latency_s.p99", -0.5, "'loadgen.latency_s.p99' is -0.5"),
        ("loadgen.batching.batch_sizes.8", -1, "'loadgen.batching.batch_sizes.8' is -1"),
        ("loadgen.batching.instance_batches[1]", 1.5, "'loadgen.batching.instance_batches[1]' is 1.5"),
        ("loadgen.batching.max_batch", True, "'loadgen.batching.max_batch' is True"),
        ("loadgen.calibration.batch_1_s", "2 ms", "'loadgen.calibration.batch_1_s' is '2 ms'"),
        ("loadgen.accuracy", float("nan"), "'loadgen.accuracy' is nan"),
        ("loadgen.batching", [], "'loadgen.batching' is a list: it must be a JSON object"),
        ("loadgen", [], "'loadgen' is a list: it must be a JSON object"),
    ],
)
def test_from_json_names_the_dotted_key(path: str, value: object, message: str) -> None:
    data = json.loads(json.dumps(schema.to_json(record(SEARCHED))))
    _set(data, path, value)
    with pytest.raises(SchemaError, match="malformed pytest-ipu record: ") as caught:
        schema.from_json(data)
    assert message in str(caught.value)


# --- metrics and why they are missing ---------------------------------------------------------------


def test_server_qps_of_a_search_is_its_peak() -> None:
    rec = record(SEARCHED)
    assert rec.value("loadgen.server_qps") == 951.4
    assert rec.value("loadgen.samples_per_s") == 199.5


def test_server_qps_of_a_valid_run_is_the_scheduled_rate() -> None:
    assert record(part()).value("loadgen.server_qps") == 200.25


@pytest.mark.parametrize(
    ("loadgen", "reason"),
    [
        (INVALID, "LoadGen called the Server run INVALID: " + "; ".join(INVALID_REASONS)),
        (
            NO_VALID,
            "the peak search found no QPS that LoadGen calls VALID (3 probe(s), the lowest at 50 QPS)",
        ),
        (part(peak=search(ended="budget")), "the peak search ran no probe"),
        (OFFLINE, "an Offline run has no Server QPS (loadgen.server_qps is for Server runs)"),
        (part(scenario="SingleStream"), "a SingleStream run has no Server QPS"),
    ],
    ids=["invalid", "no-valid", "no-probe", "offline", "single-stream"],
)
def test_no_server_qps_is_explained(loadgen: LoadgenRecord, reason: str) -> None:
    rec = record(loadgen)
    assert rec.value("loadgen.server_qps") is None
    assert rec.why_missing("loadgen.server_qps").startswith(reason)


def test_latency_metrics_read_loadgens_percentiles() -> None:
    rec = record(part(early_stopping_latency_s=0.011))
    assert rec.value("loadgen.p50") == LATENCY["p50"]
    assert rec.value("loadgen.p90") == LATENCY["p90"]
    assert rec.value("loadgen.p99") == LATENCY["p99"]
    assert rec.value("loadgen.early_stopping_latency") == 0.011


def test_a_figure_loadgen_did_not_give_is_explained() -> None:
    rec = record(OFFLINE)
    assert rec.value("loadgen.p99") is None
    assert "LoadGen reported no latency_s.p99" in rec.why_missing("loadgen.p99")
    assert rec.value("loadgen.early_stopping_latency") is None


@pytest.mark.parametrize(
    "metric",
    ["loadgen.server_qps", "loadgen.samples_per_s", "loadgen.p99", "loadgen.early_stopping_latency"],
)
def test_a_record_without_loadgen_has_no_loadgen_metrics(metric: str) -> None:
    rec = make_record()
    assert rec.value(metric) is None
    assert rec.why_missing(metric) == "not a LoadGen benchmark (loadgen metrics come from ipu_loadgen)"


def test_each_loadgen_metric_is_what_its_json_path_holds() -> None:
    for loadgen in (part(early_stopping_latency_s=0.011), SEARCHED, NO_VALID, INVALID, OFFLINE):
        rec = record(loadgen)
        data = schema.to_json(rec)
        for name, metric in schema.METRICS.items():
            if metric.path[0] != "loadgen":
                continue
            node: Any = data
            for key in metric.path:
                node = None if node is None else node.get(key)
            assert rec.value(name) == node, (name, loadgen.scenario)


def test_server_qps_is_a_higher_is_better_rate() -> None:
    metric = schema.METRICS["loadgen.server_qps"]
    assert metric.unit == "items/s"
    assert metric.better == "higher"
    assert schema.METRICS["loadgen.p99"].better == "lower"


def test_a_search_record_keeps_every_probe() -> None:
    rec = schema.from_json(schema.to_json(record(SEARCHED)))
    assert rec.loadgen is not None
    assert rec.loadgen.peak is not None
    assert [p.valid for p in rec.loadgen.peak.probes] == [True, False, False, True]
    assert rec.loadgen.peak.lowest_invalid_qps == 1131.4
    assert replace(rec.loadgen, peak=None).server_qps == rec.loadgen.scheduled_qps
