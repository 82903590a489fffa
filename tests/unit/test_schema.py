"""The versioned record JSON (pytest_ipu.results.schema): round trip, plain types, rejections, metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.measure.metrics import CpuTime
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import counts
from pytest_ipu.results import schema
from pytest_ipu.results.loadgen import BatchingRecord
from pytest_ipu.results.loadgen import LoadgenRecord
from pytest_ipu.results.loadgen import PeakSearch
from pytest_ipu.results.loadgen import ServerProbe
from pytest_ipu.results.records import DeviceEnergy
from pytest_ipu.results.records import InstanceRecord
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import ParityRecord
from pytest_ipu.results.records import PlacementRecord
from pytest_ipu.results.records import PowerRecord
from pytest_ipu.results.schema import SchemaError
from pytest_ipu.results.training import TrainRun
from pytest_ipu.results.training import summarize

GOLDEN = Path(__file__).parent.parent / "golden"

# Records hold times, rates and energies: finite and >= 0, as the reader demands.
finite = st.floats(min_value=0.0, allow_nan=False, allow_infinity=False)
count = st.integers(min_value=0, max_value=10**9)
text = st.text(max_size=20)


optional = st.none() | finite
# A timed call's latency: at least the timer's resolution, at most a day, as the reader demands.
call_time = st.floats(min_value=schema.MIN_CALL_S, max_value=schema.MAX_CALL_S)
plain = st.none() | st.booleans() | count | text


@st.composite
def latencies(draw: Any, rounds: int | None = None) -> LatencySummary:
    return LatencySummary(
        min=draw(call_time),
        p50=draw(call_time),
        p90=draw(call_time),
        p99=draw(call_time),
        max=draw(call_time),
        mean=draw(call_time),
        rounds=draw(count) if rounds is None else rounds,
        unsupported=tuple(draw(st.lists(st.sampled_from(["p50", "p90", "p99"]), unique=True))),
    )


powers = st.builds(
    PowerRecord,
    measured=st.booleans(),
    source=text,
    reason=text,
    method=st.none() | st.sampled_from(["counter", "sampled_power"]),
    integration=st.none() | text,
    devices=st.lists(
        st.builds(
            DeviceEnergy, id=text, name=text, scope=text, energy_j=finite, mean_w=finite, idle_w=optional
        ),
        max_size=2,
    ).map(tuple),
    energy_j=optional,
    mean_power_w=optional,
    idle_power_w=optional,
    items=count,
    energy_per_item_j=optional,
    items_per_j=optional,
    samples=count,
    sample_hz_requested=optional,
    sample_hz_achieved=optional,
    update_period_s=optional,
    window_s=optional,
    valid=st.booleans(),
    warnings=st.lists(text, max_size=2).map(tuple),
    low_confidence=st.booleans(),
)

placements = st.builds(
    PlacementRecord,
    instances=count,
    ipus_per_instance=count,
    replicas=count,
    stages=count,
    runner=st.sampled_from(["inline", "threads", "processes"]),
    shared_device=st.booleans(),
    devices=st.lists(text, max_size=3).map(tuple),
    simulator=st.booleans(),
    ipu_ids=st.none() | st.lists(st.lists(count, max_size=2).map(tuple), max_size=3).map(tuple),
    inventory=st.none() | st.dictionaries(text, plain, max_size=2),
)

cpus = st.builds(
    CpuTime,
    process_s=finite,
    thread_s=finite,
    process_total_s=finite,
    thread_total_s=finite,
    off_cpu_share=st.floats(min_value=0.0, max_value=1.0),
)

instances = st.builds(
    InstanceRecord,
    index=count,
    target=text,
    device=text,
    device_name=text,
    compile_s=optional,
    calls=count,
    latency_s=latencies(),
    phases_s=st.dictionaries(text, finite, max_size=2),
    info=st.dictionaries(text, plain, max_size=2),
    device_latency=st.none() | st.dictionaries(text, plain, max_size=2),
)

# A LoadGen benchmark's part: small, but every kind of value its reader checks.
probes = st.builds(
    ServerProbe,
    target_qps=finite,
    valid=st.booleans(),
    scheduled_qps=optional,
    completed_qps=optional,
    latency_s=optional,
    reasons=st.lists(text, max_size=2).map(tuple),
    elapsed_s=finite,
)
loadgens = st.builds(
    LoadgenRecord,
    scenario=st.sampled_from(["SingleStream", "MultiStream", "Server", "Offline"]),
    mode=st.sampled_from(["performance", "accuracy"]),
    version=text,
    settings=st.dictionaries(text, plain, max_size=2),
    valid=st.none() | st.booleans(),
    invalid_reasons=st.lists(text, max_size=2).map(tuple),
    checks=st.dictionaries(text, st.booleans(), max_size=2),
    early_stopping=text,
    early_stopping_latency_s=optional,
    query_count=count,
    samples_per_query=count,
    samples_per_s=optional,
    scheduled_qps=optional,
    latency_s=st.dictionaries(
        st.sampled_from(["min", "p50", "p90", "p99", "max"]) | text, finite, max_size=3
    ),
    mlperf_model=st.none() | text,
    mlperf_compliant=st.booleans(),
    compliance_reasons=st.lists(text, max_size=2).map(tuple),
    batching=st.builds(
        BatchingRecord,
        max_batch=count,
        timeout_s=finite,
        pad_to=st.none() | count,
        instances=count,
        batches=count,
        mean_batch=optional,
        batch_sizes=st.dictionaries(text, count, max_size=2),
        instance_batches=st.lists(count, max_size=3).map(tuple),
    ),
    log_dir=text,
    calibration=st.dictionaries(text, finite, max_size=2),
    accuracy=st.none() | st.floats(allow_nan=False, allow_infinity=False),
    accuracy_name=st.none() | text,
    peak=st.none()
    | st.builds(
        PeakSearch,
        peak_qps=optional,
        probes=st.lists(probes, max_size=2).map(tuple),
        max_probes=count,
        budget_s=optional,
        tolerance=finite,
        ended=st.sampled_from(["converged", "probes", "budget", "no-valid"]),
        capacity_estimate_qps=finite,
        lowest_invalid_qps=optional,
    ),
    errors=st.lists(text, max_size=2).map(tuple),
)


@st.composite
def records(draw: Any) -> IpuRecord:
    rounds = draw(count)
    return IpuRecord(
        target=draw(text),
        backend=draw(text),
        device=draw(text),
        device_name=draw(text),
        precision=draw(st.sampled_from(["fp32", "fp16", "bf16"]) | text),
        io=draw(st.sampled_from(["host", "device"])),
        batch_size=draw(count),
        items_per_call=draw(count),
        rounds=rounds,
        rounds_policy=draw(st.sampled_from(["auto", "fixed"])),
        warmup_rounds=draw(count),
        latency_s=draw(latencies(rounds)),
        # A throughput stands for a count of items in its window (at most 2**53, and some when rounds
        # ran): both are drawn from ranges whose product stays a count.
        window_s=draw(st.floats(min_value=0.0, max_value=1e6)),
        throughput_items_per_s=draw(st.floats(min_value=1e-6, max_value=1e6)),
        compile_s=draw(optional),
        compile_cached=draw(st.booleans()),
        first_call_s=draw(finite),
        compile_phases_s=draw(st.dictionaries(text, finite, max_size=3)),
        compile_info=draw(st.dictionaries(text, plain, max_size=3)),
        parity=draw(
            st.none()
            | st.builds(ParityRecord, reference=text, max_abs=finite, max_rel=finite, tolerance=finite)
        ),
        power=draw(st.none() | powers),
        simulator=draw(st.booleans()),
        placement=draw(st.none() | placements),
        instances=draw(st.none() | st.lists(instances, min_size=1, max_size=3).map(tuple)),
        device_latency=draw(st.none() | st.dictionaries(text, plain, max_size=2)),
        cpu=draw(st.none() | cpus),
        loadgen=draw(st.none() | loadgens),
    )


def make_record(**changes: Any) -> IpuRecord:
    latency = LatencySummary(
        min=0.001,
        p50=0.002,
        p90=0.003,
        p99=0.004,
        max=0.005,
        mean=0.0025,
        rounds=50,
        unsupported=("p99",),
    )
    base: dict[str, Any] = {
        "target": "torch:cpu",
        "backend": "torch",
        "device": "cpu",
        "device_name": "Some CPU @ 2.0GHz",
        "precision": "fp32",
        "io": "host",
        "batch_size": 8,
        "items_per_call": 8,
        "rounds": 50,
        "rounds_policy": "auto",
        "warmup_rounds": 2,
        "latency_s": latency,
        "window_s": 0.13,
        "throughput_items_per_s": 3076.9,
        "compile_s": 1.5,
        "compile_cached": False,
        "first_call_s": 0.2,
    }
    base.update(changes)
    return IpuRecord(**base)


def _assert_plain(value: object, where: str = "record") -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            assert type(key) is str, f"{where}: non-str key {key!r}"
            _assert_plain(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _assert_plain(item, f"{where}[{i}]")
    else:
        assert type(value) in (str, int, float, bool, type(None)), f"{where}: {type(value).__name__}"


@settings(max_examples=100, deadline=None)
@given(records())
def test_round_trip(record):
    data = schema.to_json(record)
    assert schema.from_json(data) == record
    # Through JSON text too, as the record travels in the pytest-benchmark file.
    assert schema.from_json(json.loads(json.dumps(data))) == record


@settings(max_examples=50, deadline=None)
@given(records())
def test_to_json_holds_only_plain_types(record):
    data = schema.to_json(record)
    _assert_plain(data)
    json.dumps(data, allow_nan=False)


def test_to_json_layout():
    data = schema.to_json(make_record())
    assert data["schema"] == schema.SCHEMA_VERSION == 2
    assert data["latency_s"] == {
        "min": 0.001,
        "p50": 0.002,
        "p90": 0.003,
        "p99": 0.004,
        "max": 0.005,
        "mean": 0.0025,
    }
    assert data["latency_unsupported"] == ["p99"]
    assert data["compile_s"] == 1.5
    assert schema.to_json(make_record(compile_s=None))["compile_s"] is None
    # Additive in version 1: empty or None unless a backend or a parity check filled them in.
    assert (data["compile_phases_s"], data["compile_info"], data["parity"]) == ({}, {}, None)


def test_version_2_parts_round_trip() -> None:
    from pytest_ipu.measure.contention import ContentionRecord
    from pytest_ipu.measure.metrics import summarize_latency
    from pytest_ipu.results.records import BudgetRecord
    from pytest_ipu.results.records import RepeatRecord
    from pytest_ipu.results.records import StabilityRecord

    repeats = tuple(
        RepeatRecord(i, 10, 0.5, summarize_latency([0.05 + i * 1e-3] * 10), 20.0 - i, "budget", p)
        for i, p in ((1, "worker"), (2, "this"))
    )
    record = make_record(
        repeats=repeats,
        throughput_items_per_s=18.5,  # the repeats' items over their windows
        budget=BudgetRecord(1.0, 3.0, 1.0, "cap", min_rounds_past_budget=True, rounds_limited=False),
        stability=StabilityRecord(2, "process", 0.035, 0.02, 0.05, False),
        contention=ContentionRecord(True, "", 1.0, 2, 0.25, 0.5, None, 1.5, 0.1, True),
    )
    data = json.loads(json.dumps(schema.to_json(record), allow_nan=False))
    assert data["repeats"][0]["process"] == "worker"
    assert data["budget"]["ratio"] == 1.0
    assert data["budget"]["capped"] is True
    assert data["stability"]["basis"] == "repeats"
    assert data["contention"]["contended"] is True
    back = schema.from_json(data)
    assert back == record
    assert back.repeat_values("throughput") == (19.0, 18.0)
    assert back.repeat_values("energy") == ()  # measured once per benchmark, and not here
    assert back.flags == ("contended", "capped", "over-budget")


def test_cpu_time_of_the_record_and_of_each_repeat_round_trips_and_feeds_the_metric() -> None:
    from dataclasses import replace

    from pytest_ipu.measure.metrics import summarize_latency
    from pytest_ipu.results.records import RepeatRecord

    repeats = tuple(
        RepeatRecord(i, 10, 0.5, summarize_latency([0.05] * 10), 20.0, cpu=replace(CPU, process_s=0.001 * i))
        for i in (1, 2, 3)
    )
    record = make_record(repeats=repeats, cpu=CPU, throughput_items_per_s=20.0)
    data = json.loads(json.dumps(schema.to_json(record), allow_nan=False))
    assert data["cpu"] == {
        "process_s": 0.0021,
        "thread_s": 0.002,
        "process_total_s": 0.105,
        "thread_total_s": 0.1,
        "off_cpu_share": 0.3 / 1.3,
        "workers": 0,
        "workers_total_s": 0.0,
        "host_per_item_s": 0.105 / 25,
        "host_cores": 0.105 / 0.13,
    }
    assert data["repeats"][1]["cpu"]["process_s"] == 0.002
    back = schema.from_json(data)
    assert back == record
    assert back.value("cpu_time") == 0.0021
    assert back.repeat_values("cpu_time") == (0.001, 0.002, 0.003)
    assert back.repeats[0].value("cpu_time") == 0.001
    assert back.value("host_cpu_per_item") == 0.105 / 25
    assert back.value("host_cores") == 0.105 / 0.13
    assert back.repeat_values("host_cores") == (0.105 / 0.13,) * 3


def test_the_host_cost_of_instances_in_worker_processes_round_trips_with_its_workers() -> None:
    from dataclasses import replace

    from pytest_ipu.results.records import PlacementRecord

    # Two workers computed 0.5 s of the 0.6 s of CPU time; this process waited for them.
    cpu = replace(
        CPU, process_total_s=0.6, workers=2, workers_total_s=0.5, host_per_item_s=0.024, host_cores=4.6
    )
    placed = PlacementRecord(2, 1, 1, 1, "processes", False, ("ipu:0", "ipu:1"))
    record = make_record(placement=placed, cpu=cpu)
    data = json.loads(json.dumps(schema.to_json(record), allow_nan=False))
    assert (data["cpu"]["workers"], data["cpu"]["workers_total_s"]) == (2, 0.5)
    back = schema.from_json(data)
    assert back == record
    assert (back.value("host_cpu_per_item"), back.value("host_cores")) == (0.024, 4.6)


def test_a_cpu_part_from_before_the_host_cost_reads_without_it_and_says_why() -> None:
    data = schema.to_json(make_record(cpu=CPU))
    for key in ("workers", "workers_total_s", "host_per_item_s", "host_cores"):
        del data["cpu"][key]
    back = schema.from_json(data)
    assert back.cpu is not None
    assert (back.cpu.workers, back.cpu.workers_total_s, back.cpu.host_cores) == (0, 0.0, None)
    assert back.value("cpu_time") == CPU.process_s
    for name in ("host_cpu_per_item", "host_cores"):
        assert back.value(name) is None
        assert back.repeat_values(name) == ()
        assert "predates" in schema.METRICS[name].why_missing(back)


def test_a_record_from_before_cpu_time_reads_without_it_and_says_why() -> None:
    from pytest_ipu.measure.metrics import summarize_latency
    from pytest_ipu.results.records import RepeatRecord

    data = schema.to_json(
        make_record(
            repeats=(RepeatRecord(1, 5, 0.1, summarize_latency([0.02] * 5), 50.0),),
            throughput_items_per_s=50.0,
        )
    )
    del data["cpu"]
    del data["repeats"][0]["cpu"]
    back = schema.from_json(data)
    assert (back.cpu, back.repeats[0].cpu) == (None, None)
    assert back.value("cpu_time") is None
    assert back.repeat_values("cpu_time") == ()
    assert "no CPU time" in schema.METRICS["cpu_time"].why_missing(back)
    assert "off-cpu" not in back.flags


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        ("cpu", "fast", "'cpu' is 'fast': it must be a JSON object"),
        ("cpu.off_cpu_share", -0.5, "'cpu.off_cpu_share' is -0.5: it must be >= 0"),
        ("repeats.cpu.process_s", None, "'repeats[0].cpu.process_s' is None: it must be a number >= 0"),
    ],
)
def test_a_bad_cpu_time_is_refused_naming_its_key(where: str, value: object, message: str) -> None:
    from pytest_ipu.measure.metrics import summarize_latency
    from pytest_ipu.results.records import RepeatRecord

    repeat = RepeatRecord(1, 5, 0.1, summarize_latency([0.02] * 5), 50.0, cpu=CPU)
    record = make_record(repeats=(repeat,), cpu=CPU, throughput_items_per_s=50.0)
    data = json.loads(json.dumps(schema.to_json(record)))
    parts = where.split(".")
    node = data["repeats"][0] if parts[0] == "repeats" else data
    keys = parts[1:] if parts[0] == "repeats" else parts
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    with pytest.raises(SchemaError, match=re.escape(message)):
        schema.from_json(data)


def test_a_repeat_that_ended_in_an_unknown_way_is_refused() -> None:
    from pytest_ipu.measure.metrics import summarize_latency
    from pytest_ipu.results.records import RepeatRecord

    data = schema.to_json(
        make_record(
            repeats=(RepeatRecord(1, 5, 0.1, summarize_latency([0.02] * 5), 50.0),),
            throughput_items_per_s=50.0,
        )
    )
    data["repeats"][0]["ended"] = "sometime"
    with pytest.raises(
        schema.SchemaError,
        match=r"'repeats\[0\]\.ended' is 'sometime': it must be one of 'planned', 'budget', 'cap'",
    ):
        schema.from_json(data)


def test_to_json_of_an_onnxruntime_compile_with_parity():
    parity = {"reference": "torch eager fp32 on cpu", "max_abs": 1e-7, "max_rel": 2e-8, "tolerance": 1e-3}
    record = make_record(
        compile_phases_s={"export": 1.25, "session": 0.5, "first_run": 0.25},
        compile_info={"provider": "CPUExecutionProvider", "export_cached": True, "onnx_sha256": "ab" * 32},
        parity=ParityRecord(**parity),
    )
    data = json.loads(json.dumps(schema.to_json(record)))
    assert data["compile_phases_s"] == {"export": 1.25, "session": 0.5, "first_run": 0.25}
    assert data["compile_info"]["export_cached"] is True
    assert data["parity"] == {**parity, "passed": True}
    assert schema.from_json(data) == record


def test_records_written_before_the_additive_keys_still_read():
    data = schema.to_json(make_record())
    for key in ("compile_phases_s", "compile_info", "parity"):
        del data[key]
    record = schema.from_json(data)
    assert (record.compile_phases_s, record.compile_info, record.parity) == ({}, {}, None)
    assert record == make_record()


@pytest.mark.parametrize(
    ("key", "value"), [("compile_info", 3), ("parity", "passed"), ("compile_phases_s", {"a": "b"})]
)
def test_malformed_additive_keys_are_schema_errors(key, value):
    data = schema.to_json(make_record())
    data[key] = value
    with pytest.raises(SchemaError, match="malformed pytest-ipu record: "):
        schema.from_json(data)


def test_a_key_of_the_files_own_is_named_on_one_line():
    data = schema.to_json(make_record())
    data["compile_phases_s"] = {"load\nrun": None}
    with pytest.raises(SchemaError) as caught:
        schema.from_json(data)
    assert "\n" not in str(caught.value)
    assert "'compile_phases_s.load\\nrun' is None: it must be a number >= 0" in str(caught.value)


@pytest.mark.parametrize("value", [None, [1.0, 2.0], "fast"])
def test_compile_phases_that_are_no_mapping_are_schema_errors(value):
    data = schema.to_json(make_record())
    data["compile_phases_s"] = value
    with pytest.raises(SchemaError, match="malformed pytest-ipu record: "):
        schema.from_json(data)


@pytest.mark.parametrize("data", [None, [], "record", 1, {}, {"schema": None}])
def test_from_json_rejects_non_records(data):
    with pytest.raises(SchemaError, match="not a pytest-ipu record"):
        schema.from_json(data)


@pytest.mark.parametrize("version", [0, -1, "1", 1.0])
def test_from_json_rejects_bad_versions(version):
    data = schema.to_json(make_record())
    data["schema"] = version
    with pytest.raises(SchemaError, match=r"not a pytest-ipu record \(schema version"):
        schema.from_json(data)


def test_from_json_rejects_newer_schema_asking_for_upgrade():
    data = schema.to_json(make_record())
    data["schema"] = schema.SCHEMA_VERSION + 1
    with pytest.raises(SchemaError) as info:
        schema.from_json(data)
    message = str(info.value)
    assert f"schema version {schema.SCHEMA_VERSION + 1}" in message
    assert "upgrade pytest-ipu" in message


@pytest.mark.parametrize("key", ["target", "window_s", "compile_s", "latency_s", "latency_unsupported"])
def test_from_json_names_missing_key(key):
    data = schema.to_json(make_record())
    del data[key]
    with pytest.raises(SchemaError, match=rf"malformed pytest-ipu record: '{key}' is missing: it must be"):
        schema.from_json(data)


def test_from_json_names_missing_latency_key():
    data = schema.to_json(make_record())
    del data["latency_s"]["p90"]
    with pytest.raises(
        SchemaError,
        match=r"malformed pytest-ipu record: 'latency_s\.p90' is missing: it must be a number >= 0",
    ):
        schema.from_json(data)


@pytest.mark.parametrize(
    ("key", "value", "kind"),
    [
        ("batch_size", "eight", "'batch_size' is 'eight': it must be a whole number >= 0"),
        ("window_s", None, "'window_s' is None: it must be a number >= 0"),
        ("latency_s", [1, 2], "'latency_s' is a list: it must be a JSON object"),
    ],
)
def test_from_json_rejects_wrong_types(key, value, kind):
    data = schema.to_json(make_record())
    data[key] = value
    with pytest.raises(SchemaError, match=f"malformed pytest-ipu record: {kind}"):
        schema.from_json(data)


def test_schema_error_is_a_value_error():
    assert issubclass(SchemaError, ValueError)


def _resolve(data: dict[str, Any], path: tuple[str, ...]) -> object:
    for key in path:
        data = data[key]
    return data


#: CPU time beside a window of 0.13 s that completed 25 items: the thread was on the CPU for 0.1 s
#: of it, the process for 0.105 s.
CPU = CpuTime(
    process_s=0.0021,
    thread_s=0.002,
    process_total_s=0.105,
    thread_total_s=0.1,
    off_cpu_share=0.3 / 1.3,
    host_per_item_s=0.105 / 25,
    host_cores=0.105 / 0.13,
)

#: A window's user-space instructions, as a kernel with the hardware counter counts them.
INSTRUCTIONS = counts.over_window(12_500_000, 10, counts.TIMED_WINDOW, "1 process, 3 threads")

#: A repeat's IPU cycle count: three counting calls that agreed, at a C2's clock.
CYCLES = counts.measured(
    (1_330_000,) * 3, counts.COUNTING_PASS, 1.3e9, "gcipuinfo 'clock' of IPU(s) 0 (0: 1300MHz)"
)

MEASURED = PowerRecord(
    measured=True,
    source="rapl",
    energy_j=6.0,
    mean_power_w=46.2,
    energy_per_item_j=0.015,
    items_per_j=66.7,
    valid=True,
)

#: A VALID LoadGen Server run with every figure a ``loadgen.*`` metric reads.
LOADGEN = LoadgenRecord(
    scenario="Server",
    mode="performance",
    version="6.0.17",
    settings={},
    valid=True,
    invalid_reasons=(),
    checks={},
    early_stopping="",
    early_stopping_latency_s=0.011,
    query_count=400,
    samples_per_query=1,
    samples_per_s=199.5,
    scheduled_qps=200.25,
    latency_s={"p50": 0.003, "p90": 0.006, "p99": 0.012},
    mlperf_model=None,
    mlperf_compliant=False,
    compliance_reasons=(),
    batching=BatchingRecord(8, 0.0, None, 1, 50, 8.0, {"8": 50}, (50,)),
    log_dir="",
    errors=(),
)


@pytest.mark.parametrize("name", list(schema.METRICS))
def test_every_metric_path_resolves(name):
    metric = schema.METRICS[name]
    assert metric.name == name
    # A time-to-train record has the time_to_train part, a LoadGen record the loadgen part; every
    # record has the others.
    runs = [TrainRun(i, i, True, 0.5 + i / 10, 3, 900, 1800.0, ()) for i in (1, 2, 3)]
    ttt = summarize(
        runs, quality="accuracy", quality_target=0.9, higher_is_better=True, max_epochs=5, processes=1
    )
    data = schema.to_json(
        make_record(
            power=MEASURED,
            time_to_train=ttt,
            loadgen=LOADGEN,
            cpu=CPU,
            median_throughput_items_per_s=3200.0,
            counts={"ipu_cycles": CYCLES, "host_instructions": INSTRUCTIONS},
        )
    )
    assert isinstance(_resolve(data, metric.path), float)
    if metric.fallback is not None:  # where a record without the value at its path keeps it
        assert isinstance(_resolve(data, metric.fallback), float)


def _json_value(data: dict[str, Any], metric: str) -> float | None:
    """A metric's value read from the record JSON along its path, as gates read it before records
    were typed: ``None`` for a missing key, a null or anything that is not a number."""
    known = schema.METRICS[metric]
    for path in (known.path, known.fallback or ()):
        node: Any = data
        for key in path:
            if not isinstance(node, dict) or node.get(key) is None:
                node = None
                break
            node = node[key]
        if path and node is not None:
            return None if isinstance(node, bool) or not isinstance(node, (int, float)) else float(node)
    return None


@pytest.mark.parametrize("name", list(schema.METRICS))
def test_value_of_every_metric_is_what_the_json_path_holds(name):
    for record in (
        make_record(power=MEASURED),
        make_record(),  # no power section
        make_record(compile_s=None, power=PowerRecord(measured=False, source="off", reason="off")),
    ):
        value = record.value(name)
        assert value == _json_value(schema.to_json(record), name)
        assert value is None or type(value) is float


@settings(max_examples=100, deadline=None)
@given(records())
def test_value_agrees_with_the_json_path_for_any_record(record):
    data = schema.to_json(record)
    for name in schema.METRICS:
        assert record.value(name) == _json_value(data, name), name


def test_value_of_what_is_not_a_metric_is_a_key_error():
    with pytest.raises(KeyError):
        make_record().value("latency")


def test_value_reads_the_typed_fields():
    record = make_record(power=MEASURED, compile_s=None)
    assert record.value("latency.p99") == 0.004
    assert record.value("throughput") == 3076.9  # the window's figure: the record has no median round's
    assert make_record(median_throughput_items_per_s=3200.0).value("throughput") == 3200.0
    assert record.value("compile") is None  # a plain callable has no compile step
    assert record.value("energy") == 6.0
    assert record.value("items_per_j") == 66.7
    assert make_record().value("power") is None  # no power section


def test_metric_directions_and_units():
    metrics = schema.METRICS
    latency = [m for m in metrics.values() if m.name.startswith("latency.")]
    assert {m.name for m in latency} == {f"latency.{k}" for k in ("min", "p50", "p90", "p99", "max", "mean")}
    for m in latency:
        assert m.better == "lower"
        assert m.unit == "s"
    assert metrics["throughput"].better == "higher"
    assert metrics["throughput"].unit == "items/s"
    assert metrics["compile"].better == "lower"
    assert metrics["first_call"].better == "lower"
    assert {m.better for m in metrics.values()} == {"lower", "higher"}


def test_metric_values_match_the_record():
    record = make_record(median_throughput_items_per_s=3200.0)
    data = schema.to_json(record)
    assert _resolve(data, schema.METRICS["latency.p99"].path) == record.latency_s.p99
    assert _resolve(data, schema.METRICS["throughput"].path) == record.median_throughput_items_per_s
    assert _resolve(data, schema.METRICS["throughput"].fallback or ()) == record.throughput_items_per_s
    assert _resolve(data, schema.METRICS["compile"].path) == record.compile_s
    assert _resolve(data, schema.METRICS["first_call"].path) == record.first_call_s


# -- parts of the record, and records written by older code ----------------------------------------


def _low(warnings: tuple[str, ...], low_confidence: bool) -> PowerRecord:
    return PowerRecord(
        measured=True,
        source="rapl",
        energy_j=0.5,
        valid=True,
        warnings=warnings,
        low_confidence=low_confidence,
    )


def test_low_confidence_is_a_field_of_the_power_json():
    data = schema.to_json(make_record(power=_low(("low confidence: window 1 s < 5 s (fixed)",), True)))
    assert data["power"]["low_confidence"] is True
    assert schema.from_json(data).power == _low(("low confidence: window 1 s < 5 s (fixed)",), True)


@pytest.mark.parametrize(
    ("warnings", "low"),
    [
        (("low confidence: window 0.0104 s < 5 s (the rounds were fixed)", "only 2 power readings"), True),
        (("only 2 power readings in the window (want >= 10)",), False),
        ((), False),
    ],
)
def test_a_record_written_before_the_flag_derives_it_from_the_warning(warnings, low):
    data = schema.to_json(make_record(power=_low(warnings, low)))
    del data["power"]["low_confidence"]
    power = schema.from_json(data).power
    assert power is not None
    assert power.low_confidence is low
    assert power.warnings == warnings  # the text still says why


def test_a_record_with_the_flag_is_taken_at_its_word():
    data = schema.to_json(make_record(power=_low(("low confidence: window 1 s < 5 s",), False)))
    power = schema.from_json(data).power
    assert power is not None
    assert power.low_confidence is False


def test_placement_and_instances_json_keep_their_keys():
    placement = PlacementRecord(2, 1, 1, 1, "threads", True, ("cpu", "cpu"))
    assert placement.as_json() == {
        "instances": 2,
        "ipus_per_instance": 1,
        "replicas": 1,
        "stages": 1,
        "runner": "threads",
        "shared_device": True,
        "devices": ["cpu", "cpu"],
    }
    on_ipus = PlacementRecord(
        2, 1, 1, 1, "processes", False, ("ipu:0", "ipu:1"), ipu_ids=((0,), (1,)), inventory={}
    )
    assert list(on_ipus.as_json()) == [
        "instances", "ipus_per_instance", "replicas", "stages", "runner", "ipu_ids", "shared_device",
        "devices", "inventory",
    ]  # fmt: skip
    simulated = PlacementRecord(3, 1, 1, 1, "threads", False, ("ipu-model",) * 3, simulator=True)
    assert simulated.as_json()["simulator"] is True
    lat = LatencySummary(1.0, 2.0, 3.0, 4.0, 5.0, 2.5, 5, ("p90", "p99"))
    instance = InstanceRecord(0, "torch:cpu", "cpu", "Some CPU", 0.5, {}, {}, calls=5, latency_s=lat)
    assert instance.as_json() == {
        "index": 0,
        "target": "torch:cpu",
        "device": "cpu",
        "device_name": "Some CPU",
        "compile_s": 0.5,
        "phases_s": {},
        "info": {},
        "calls": 5,
        "latency_s": {
            "min": 1.0,
            "p50": 2.0,
            "p90": 3.0,
            "p99": 4.0,
            "max": 5.0,
            "mean": 2.5,
            "rounds": 5,
            "unsupported": ["p90", "p99"],
        },
        "device_latency": None,
    }
    record = make_record(placement=on_ipus, instances=(instance,))
    assert schema.from_json(json.loads(json.dumps(schema.to_json(record)))) == record


@pytest.mark.parametrize("name", ["schema-v1.json", "pytest-benchmark-5.2.0.json"])
def test_golden_files_load_into_typed_records_and_write_back_the_same_json(name):
    """Files written by pytest-ipu 0.1.0 (schema 1, before ``low_confidence``) read into typed records;
    written again they are the same JSON in schema 2: plus the flag, which their warnings gave, and
    the parts of version 2, empty (a record of one repeat, with no budget, stability or contention)."""
    path = GOLDEN / name
    run = benchmark_json.read_run(path)
    stored = {b["fullname"]: b["extra_info"]["ipu"] for b in json.loads(path.read_text())["benchmarks"]}
    assert len(run.benchmarks) == 6
    for bench in run.benchmarks:
        record = bench.record
        assert record is not None
        assert record.power is not None
        # Every window of these runs was low confidence; the one with power off measured nothing.
        assert record.power.low_confidence is record.power.measured
        expected = json.loads(json.dumps(stored[bench.fullname]))
        expected["power"]["low_confidence"] = record.power.measured
        # Written again with what came later: the scope derived from the devices (RAPL's packages,
        # gcipuinfo's IPUs each read on its own; none when nothing was measured), and no IPUs named
        # by the devices, which predate it.
        scopes = {d["scope"] for d in expected["power"]["devices"]}
        assert len(scopes) <= 1  # each of these records read one kind of device
        expected["power"]["scope"] = (
            {"ipu": "ipus", "cpu-package": "cpu-package"}[scopes.pop()] if scopes else None
        )
        for device in expected["power"]["devices"]:
            device.update(ipus=[], unused_ipus=[])
        assert expected["schema"] == 1
        expected.update(schema=2, repeats=[], budget=None, stability=None, contention=None, cpu=None)
        assert schema.to_json(record) == expected
        assert record.repeats == ()
        assert record.repeat_values("throughput") == (record.throughput_items_per_s,)
        for metric in schema.METRICS:
            assert record.value(metric) == _json_value(expected, metric)
    by_name = {b.name: b.record for b in run.benchmarks if b.record is not None}
    placed = by_name["test_mlp_poptorch_instances[poptorch-ipu]"]
    assert placed.placement is not None
    assert placed.placement.ipu_ids == ((0,), (1,))
    assert placed.placement.runner == "processes"
    assert placed.instances is not None
    assert [i.device for i in placed.instances] == ["ipu:0", "ipu:1"]
    assert all(i.device_latency is not None for i in placed.instances)
    shared = by_name["test_mlp_instances[torch-cpu]"]
    assert shared.placement is not None
    assert shared.placement.shared_device
    assert shared.instances is not None
    assert shared.instances[0].latency_s.unsupported == ("p90", "p99")
    assert by_name["test_mlp[torch-cpu-2]"].parity == ParityRecord("torch eager fp32 on cpu", 0.0, 0.0, 0.001)


def test_golden_pytest_benchmark_4_file_reads_as_a_run_without_records():
    """A baseline saved by pytest-benchmark 4.0 before a project adopted pytest-ipu: its benchmarks
    have no record, but their time statistics and per-round samples are there to compare."""
    run = benchmark_json.read_run(GOLDEN / "pytest-benchmark-4.0.0.json")
    assert [b.record for b in run.benchmarks] == [None] * 4
    assert {b.group for b in run.benchmarks} >= {"fib"}
    for bench in run.benchmarks:
        assert bench.samples_s, bench.name
        assert set(bench.stats) >= {"min", "median", "mean", "max"}
        assert bench.stats["min"] <= bench.stats["median"] <= bench.stats["max"]
