"""The versioned record JSON (pytest_ipu.results.schema): round trip, plain types, rejections, metrics."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.results import schema
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.schema import SchemaError

finite = st.floats(allow_nan=False, allow_infinity=False)
count = st.integers(min_value=0, max_value=10**9)
text = st.text(max_size=20)


@st.composite
def records(draw: Any) -> IpuRecord:
    rounds = draw(count)
    latency = LatencySummary(
        min_s=draw(finite),
        p50_s=draw(finite),
        p90_s=draw(finite),
        p99_s=draw(finite),
        max_s=draw(finite),
        mean_s=draw(finite),
        rounds=rounds,
        unsupported=tuple(draw(st.lists(st.sampled_from(["p50", "p90", "p99"]), unique=True))),
    )
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
        latency=latency,
        window_s=draw(finite),
        throughput_items_per_s=draw(finite),
        compile_s=draw(st.none() | finite),
        compile_cached=draw(st.booleans()),
        first_call_s=draw(finite),
        compile_phases_s=draw(st.dictionaries(text, finite, max_size=3)),
        compile_info=draw(st.dictionaries(text, st.none() | st.booleans() | count | text, max_size=3)),
        parity=draw(
            st.none()
            | st.fixed_dictionaries(
                {
                    "reference": text,
                    "max_abs": finite,
                    "max_rel": finite,
                    "tolerance": finite,
                    "passed": st.booleans(),
                }
            )
        ),
    )


def make_record(**changes: Any) -> IpuRecord:
    latency = LatencySummary(
        min_s=0.001,
        p50_s=0.002,
        p90_s=0.003,
        p99_s=0.004,
        max_s=0.005,
        mean_s=0.0025,
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
        "latency": latency,
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
    assert data["schema"] == schema.SCHEMA_VERSION == 1
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


def test_to_json_of_an_onnxruntime_compile_with_parity():
    parity = {"reference": "torch eager fp32 on cpu", "max_abs": 1e-7, "max_rel": 2e-8, "tolerance": 1e-3}
    record = make_record(
        compile_phases_s={"export": 1.25, "session": 0.5, "first_run": 0.25},
        compile_info={"provider": "CPUExecutionProvider", "export_cached": True, "onnx_sha256": "ab" * 32},
        parity={**parity, "passed": True},
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
    with pytest.raises(SchemaError, match=rf"malformed pytest-ipu record: KeyError: '{key}'"):
        schema.from_json(data)


def test_from_json_names_missing_latency_key():
    data = schema.to_json(make_record())
    del data["latency_s"]["p90"]
    with pytest.raises(SchemaError, match="malformed pytest-ipu record: KeyError: 'p90'"):
        schema.from_json(data)


@pytest.mark.parametrize(
    ("key", "value", "kind"),
    [
        ("batch_size", "eight", "ValueError"),
        ("window_s", None, "TypeError"),
        ("latency_s", [1, 2], "TypeError"),
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


@pytest.mark.parametrize("name", list(schema.METRICS))
def test_every_metric_path_resolves(name):
    metric = schema.METRICS[name]
    assert metric.name == name
    measured = {
        "measured": True,
        "energy_j": 6.0,
        "mean_power_w": 46.2,
        "energy_per_item_j": 0.015,
        "items_per_j": 66.7,
    }
    value = _resolve(schema.to_json(make_record(power=measured)), metric.path)
    assert isinstance(value, float)


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
    record = make_record()
    data = schema.to_json(record)
    assert _resolve(data, schema.METRICS["latency.p99"].path) == record.latency.p99_s
    assert _resolve(data, schema.METRICS["throughput"].path) == record.throughput_items_per_s
    assert _resolve(data, schema.METRICS["compile"].path) == record.compile_s
    assert _resolve(data, schema.METRICS["first_call"].path) == record.first_call_s
