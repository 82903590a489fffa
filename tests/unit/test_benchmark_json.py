"""Reading saved runs (results.benchmark_json.load_run) and the host CPU name (backends.host)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_ipu.backends import host
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import schema
from pytest_ipu.results.benchmark_json import RunFileError
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.records import IpuRecord

RECORD = IpuRecord(
    target="torch:cpu",
    backend="torch",
    device="cpu",
    device_name="Some CPU",
    precision="fp32",
    io="host",
    batch_size=4,
    items_per_call=4,
    rounds=120,
    rounds_policy="fixed",
    warmup_rounds=2,
    latency_s=LatencySummary(0.001, 0.002, 0.003, 0.004, 0.005, 0.0025, 120, ()),
    window_s=0.3,
    throughput_items_per_s=1600.0,
    compile_s=None,
    compile_cached=False,
    first_call_s=0.02,
)


def _bench(name: str, extra_info: dict[str, Any] | None, group: str | None = "g") -> dict[str, Any]:
    bench: dict[str, Any] = {
        "group": group,
        "name": name,
        "fullname": f"tests/test_x.py::{name}",
        "params": None,
        "param": None,
        "stats": {"min": 0.001, "max": 0.005, "mean": 0.0025, "rounds": 120, "data": [0.001, 0.005]},
        "options": {"disable_gc": False, "timer": "perf_counter"},
    }
    if extra_info is not None:
        bench["extra_info"] = extra_info
    return bench


def _run(*benchmarks: dict[str, Any]) -> dict[str, Any]:
    return {
        "machine_info": {"node": "host", "ipu": {"schema": 1}},
        "commit_info": {},
        "benchmarks": list(benchmarks),
        "datetime": "2025-01-01T00:00:00",
        "version": "5.3.1",
        benchmark_json.TOP_LEVEL_KEY: {"schema": 1},
    }


def _write(tmp_path, data: object, name: str = "run.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_load_run_reads_records_and_plain_benchmarks(tmp_path):
    path = _write(
        tmp_path,
        _run(
            _bench("test_x[torch-cpu]", {"ipu": schema.to_json(RECORD), "other": 1}),
            _bench("test_plain", {"something": "else"}, group=None),
            _bench("test_no_extra", None),
        ),
    )
    stored = benchmark_json.load_run(path)
    data = (0.001, 0.005)
    stats = {"min": 0.001, "max": 0.005, "mean": 0.0025}
    assert stored == [
        StoredBenchmark(
            "test_x[torch-cpu]",
            "tests/test_x.py::test_x[torch-cpu]",
            "g",
            RECORD,
            data,
            {},
            stats,
            rounds=120,
        ),
        StoredBenchmark("test_plain", "tests/test_x.py::test_plain", None, None, data, {}, stats, rounds=120),
        StoredBenchmark(
            "test_no_extra", "tests/test_x.py::test_no_extra", "g", None, data, {}, stats, rounds=120
        ),
    ]


def test_read_run_keeps_machine_params_and_samples_and_says_when_samples_are_absent(tmp_path):
    with_params = _bench("test_p[4]", None)
    with_params["params"] = {"batch_size": 4}
    without_data = _bench("test_q", None)
    del without_data["stats"]["data"]
    run = benchmark_json.read_run(_write(tmp_path, _run(with_params, without_data)))
    assert run.machine_info == {"node": "host", "ipu": {"schema": 1}}
    assert run.datetime == "2025-01-01T00:00:00"
    assert [b.params for b in run.benchmarks] == [{"batch_size": 4}, {}]
    assert [b.samples_s for b in run.benchmarks] == [(0.001, 0.005), None]


@pytest.mark.parametrize(
    ("data", "read"),
    [
        ([0.001, 1e-6, 2.5e-7], (0.001, 1e-6, 2.5e-7)),  # plain floats: checked whole
        ([1, 0.5], (1.0, 0.5)),  # a whole number: checked one by one, read the same
        ([86400.0, 3600.0], (86400.0, 3600.0)),  # up to a day a call, the longest a reader takes
    ],
)
def test_per_round_times_read_whole_or_one_by_one_alike(tmp_path, data, read):
    bench = _bench("t", None)
    bench["stats"]["data"] = data
    [stored] = benchmark_json.load_run(_write(tmp_path, _run(bench)))
    assert stored.samples_s == read


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-1e-9", "true"])
def test_a_bad_per_round_time_among_many_is_named_by_its_index(tmp_path, bad):
    bench = _bench("t", None)
    bench["stats"]["data"] = [0.001] * 1000
    text = json.dumps(_run(bench)).replace("0.001]", f"{bad}]", 1)
    path = tmp_path / "run.json"
    path.write_text(text, encoding="utf-8")
    assert "'stats.data[999]'" in _load_error(path)


def test_dropping_round_data_leaves_other_tools_benchmarks_and_statistics() -> None:
    ours = _bench("ours", {schema.NAMESPACE: schema.to_json(RECORD)})
    theirs = _bench("theirs", None)
    partial = _bench("partial", {"other": 1})
    document = _run(ours, theirs, partial)
    benchmark_json.drop_round_data(document)
    assert "data" not in ours["stats"]
    assert ours["stats"]["rounds"] == 120  # pytest-benchmark's statistics stay
    assert theirs["stats"]["data"] == partial["stats"]["data"] == [0.001, 0.005]


def test_the_accessors_edit_the_document_they_read(tmp_path) -> None:
    """The merge and the scaling baseline edit documents through these: what they return is the
    document's own parts, and entries without a record object are passed over."""
    ours = _bench("ours", {schema.NAMESPACE: schema.to_json(RECORD)})
    document = _run(ours, _bench("theirs", None), _bench("odd", {schema.NAMESPACE: [1]}))
    document["benchmarks"].append("not an entry")
    assert benchmark_json.is_document(document)
    assert not benchmark_json.is_document({"benchmarks": {}})
    assert len(benchmark_json.entries(document)) == 4
    [(entry, record)] = benchmark_json.ipu_entries(document)
    assert entry is ours
    record["scaling"] = {"processes": 2}
    assert ours["extra_info"][schema.NAMESPACE]["scaling"] == {"processes": 2}
    benchmark_json.set_ipu_data(entry, {"replaced": True})
    assert benchmark_json.ipu_data(ours) == {"replaced": True}
    assert benchmark_json.extra_info({"extra_info": [1]}) is None
    assert benchmark_json.extra_info({}) == {}
    document["machine_info"] = {"node": "host", schema.NAMESPACE: "not an object"}
    assert benchmark_json.ipu_machine_info(document) is None
    benchmark_json.own_ipu_machine_info(document)["poprun"] = {"count": 2}
    assert document["machine_info"] == {"node": "host", schema.NAMESPACE: {"poprun": {"count": 2}}}
    path = tmp_path / "run.json"
    benchmark_json.write_document(path, document)
    assert benchmark_json.read_document(path) == document


def test_load_run_of_empty_run(tmp_path):
    assert benchmark_json.load_run(_write(tmp_path, _run())) == []


def test_attach_then_load(tmp_path):
    extra_info: dict[str, Any] = {}
    benchmark_json.attach(extra_info, schema.to_json(RECORD))
    [stored] = benchmark_json.load_run(_write(tmp_path, _run(_bench("t", extra_info))))
    assert stored.record == RECORD


def test_a_runs_own_gates_read_back_as_gates_and_a_bad_one_is_named(tmp_path):
    """ab's runs write each benchmark's own gates (``OWN_GATES_KEY``); they read back as gates, and
    one that does not parse is refused naming the file, the key, the benchmark and the expression."""
    data = _run(_bench("t", None))
    section = data[benchmark_json.TOP_LEVEL_KEY]
    section[benchmark_json.OWN_GATES_KEY] = {"tests/test_x.py::t": ["time.median:+30%", "latency.p99<2ms"]}
    run = benchmark_json.read_run(_write(tmp_path, data))
    assert {k: [str(g) for g in v] for k, v in run.own_gates.items()} == {
        "tests/test_x.py::t": ["latency.p50:+30%", "latency.p99<2ms"]
    }
    assert benchmark_json.read_run(_write(tmp_path, _run(), "none.json")).own_gates == {}
    section[benchmark_json.OWN_GATES_KEY] = {"tests/test_x.py::t": ["time.median:+30"]}
    message = _load_error(_write(tmp_path, data, "bad.json"))
    assert "bad.json: 'pytest_ipu.own_gates' of 'tests/test_x.py::t': bad gate 'time.median:+30'" in message
    section[benchmark_json.OWN_GATES_KEY] = {"tests/test_x.py::t": "time.median:+30%"}
    assert "pytest_ipu.own_gates['tests/test_x.py::t']" in _load_error(_write(tmp_path, data, "bad2.json"))


def _load_error(path) -> str:
    with pytest.raises(RunFileError) as info:
        benchmark_json.load_run(path)
    return str(info.value)


def test_missing_file(tmp_path):
    path = tmp_path / "absent.json"
    message = _load_error(path)
    assert message.startswith(f"{path}: cannot read: ")
    assert "No such file" in message


def test_directory_is_not_a_run(tmp_path):
    assert _load_error(tmp_path).startswith(f"{tmp_path}: cannot read: ")


def test_invalid_json(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"benchmarks": [', encoding="utf-8")
    assert _load_error(path).startswith(f"{path}: not JSON: ")


def test_not_utf8(tmp_path):
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert _load_error(path).startswith(f"{path}: not JSON: ")


@pytest.mark.parametrize(
    "data", [{"machine_info": {}}, {"benchmarks": {}}, {"benchmarks": None}, [], "text", 3]
)
def test_json_without_benchmarks_list(tmp_path, data):
    path = _write(tmp_path, data)
    assert _load_error(path) == f"{path}: not a pytest-benchmark run (no 'benchmarks' list)"


def test_record_with_newer_schema(tmp_path):
    newer = schema.to_json(RECORD)
    newer["schema"] = schema.SCHEMA_VERSION + 1
    path = _write(
        tmp_path, _run(_bench("test_ok", {"ipu": schema.to_json(RECORD)}), _bench("test_new", {"ipu": newer}))
    )
    message = _load_error(path)
    assert message.startswith(f"{path}: benchmark 'tests/test_x.py::test_new': record has schema version 3")
    assert message.endswith("upgrade pytest-ipu")


def test_malformed_record(tmp_path):
    broken = schema.to_json(RECORD)
    del broken["rounds"]
    path = _write(tmp_path, _run(_bench("test_bad", {"ipu": broken})))
    assert _load_error(path) == (
        f"{path}: benchmark 'tests/test_x.py::test_bad': malformed pytest-ipu record: 'rounds' is missing: "
        "it must be a whole number >= 0; re-run the benchmark to write the record again, or correct the "
        "value in the file"
    )


def test_record_that_is_not_an_object(tmp_path):
    path = _write(tmp_path, _run(_bench("test_bad", {"ipu": "fast"})))
    assert _load_error(path).startswith(
        f"{path}: benchmark 'tests/test_x.py::test_bad': not a pytest-ipu record"
    )


@pytest.mark.parametrize("entry", [1, "x", None, {"name": "t", "extra_info": ["not", "a", "dict"]}])
def test_malformed_benchmark_entry_is_a_run_file_error(tmp_path, entry):
    path = _write(tmp_path, _run(entry))
    assert _load_error(path).startswith(f"{path}: ")


def test_run_file_error_is_a_value_error():
    assert issubclass(RunFileError, ValueError)


# -- host.cpu_name --------------------------------------------------------------------------------

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz
stepping\t: 7

processor\t: 1
model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz
"""


def test_cpu_name_from_cpuinfo(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    assert host.cpu_name(path) == "Intel(R) Xeon(R) CPU @ 2.20GHz"


def test_cpu_name_without_model_name_falls_back(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n")
    name = host.cpu_name(path)
    assert isinstance(name, str)
    assert name
    assert name == (host.platform.processor() or host.platform.machine() or "unknown CPU")


def test_cpu_name_missing_file_falls_back(tmp_path):
    name = host.cpu_name(tmp_path / "no-such-cpuinfo")
    assert isinstance(name, str)
    assert name.strip()


def test_cpu_name_last_resort(tmp_path, monkeypatch):
    monkeypatch.setattr(host.platform, "processor", lambda: "")
    monkeypatch.setattr(host.platform, "machine", lambda: "")
    assert host.cpu_name(tmp_path / "no-such-cpuinfo") == "unknown CPU"
    monkeypatch.setattr(host.platform, "machine", lambda: "aarch64")
    assert host.cpu_name(tmp_path / "no-such-cpuinfo") == "aarch64"
