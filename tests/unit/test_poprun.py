"""PopRun instances from popdist (the fake), per-instance JSON paths, and ``merge`` of the instances'
files: sums, worst latencies, the checks that the files are one launch, and ``pytest-ipu merge``."""

from __future__ import annotations

import copy
import json
import math
import re
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.cli import main as cli
from pytest_ipu.devices import driver_ids
from pytest_ipu.devices import poprun as poprun_devices
from pytest_ipu.devices.inventory import IpuInfo
from pytest_ipu.devices.inventory import IpuInventory
from pytest_ipu.devices.poprun import PopRunInstance
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.placement import poprun
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import counts
from pytest_ipu.results import launch_merge
from pytest_ipu.results import records
from pytest_ipu.results import schema
from tests.fakes import fake_popart
from tests.fakes import fake_popdist


def exactly(message: str) -> str:
    """A ``pytest.raises`` pattern matching ``message`` and nothing else."""
    return f"^{re.escape(message)}$"


@pytest.fixture(autouse=True)
def _fresh_popdist() -> Any:
    fake_popdist.reset()
    yield
    fake_popdist.reset()


# -- detect ----------------------------------------------------------------------------------------


def test_outside_poprun_there_is_no_instance() -> None:
    assert poprun_devices.detect(fake_popdist) is None  # type: ignore[arg-type]
    assert fake_popdist.calls() == ["isPopdistEnvSet"]


def test_without_popdist_there_is_no_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "popdist", None)
    assert poprun_devices.detect() is None


def test_an_instance_reads_every_getter_and_popdist_is_imported_lazily(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_popdist.configure(1, 2, local_instance_index=0, replicas_local=2, ipus_per_replica=4)
    monkeypatch.setitem(sys.modules, "popdist", fake_popdist)
    instance = poprun_devices.detect()
    assert instance == PopRunInstance(
        index=1, count=2, local_index=0, replicas_local=2, replicas_total=4, ipus_per_replica=4
    )
    assert instance.as_json() == {
        "index": 1,
        "count": 2,
        "local_index": 0,
        "replicas_local": 2,
        "replicas_total": 4,
        "ipus_per_replica": 4,
    }


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"instance_index": 2, "num_instances": 2},
            "popdist.getInstanceIndex() = 2 is not below popdist.getNumInstances() = 2; an instance index "
            "lies in [0, 2): check the poprun command line (--num-instances)",
        ),
        (
            {"instance_index": 0, "num_instances": 2, "local_instance_index": 3},
            "popdist.getLocalInstanceIndex() = 3 is not below popdist.getNumInstances() = 2; an instance "
            "index lies in [0, 2): check the poprun command line (--num-instances)",
        ),
        (
            {"instance_index": -1, "num_instances": 2},
            "popdist.getInstanceIndex() = -1 is below 0; check the poprun command line (--num-instances, "
            "--num-replicas, --ipus-per-replica)",
        ),
        (
            {"instance_index": 0, "num_instances": 0},
            "popdist.getNumInstances() = 0 is below 1; check the poprun command line (--num-instances, "
            "--num-replicas, --ipus-per-replica)",
        ),
        (
            {"instance_index": 0, "num_instances": 2, "ipus_per_replica": "2"},
            "popdist.getNumIpusPerReplica() = '2' is not an int; check the poprun command line and the "
            "popdist installation",
        ),
        (
            {"instance_index": 0, "num_instances": 2, "replicas_local": 4, "replicas_total": 2},
            "popdist.getNumLocalReplicas() = 4 exceeds popdist.getNumTotalReplicas() = 2; check the poprun "
            "command line (--num-replicas)",
        ),
    ],
)
def test_impossible_popdist_settings(settings: dict[str, Any], message: str) -> None:
    fake_popdist.configure(**settings)
    with pytest.raises(ValueError, match=exactly(message)):
        poprun_devices.detect(fake_popdist)


def test_a_failing_getter_is_named() -> None:
    broken = types.ModuleType("popdist")
    broken.isPopdistEnvSet = lambda: True  # type: ignore[attr-defined]

    def fails() -> int:
        raise RuntimeError("POPDIST variables incomplete")

    for getter in ("getInstanceIndex", "getNumInstances"):
        setattr(broken, getter, fails)
    with pytest.raises(
        ValueError,
        match=exactly(
            "popdist.getInstanceIndex() failed under PopRun: RuntimeError: POPDIST variables incomplete; "
            "check the poprun command line"
        ),
    ):
        poprun_devices.detect(broken)


def test_a_directly_built_instance_is_checked_too() -> None:
    with pytest.raises(
        ValueError,
        match=exactly(
            "PopRunInstance.index = 3 is not below PopRunInstance.count = 3; an instance index lies in "
            "[0, 3): check the poprun command line (--num-instances)"
        ),
    ):
        PopRunInstance(3, 3, 0, 1, 3, 1)


def test_fake_device_ids_follow_gc_info_numbering() -> None:
    # 4 instances x 1 replica x 2 IPUs on 8 IPUs: instance i holds the i-th pair.
    popart = fake_popart.make_module(ipus=8)
    pairs = popart.DeviceManager().enumerateDevices(numIpus=2)
    table = driver_ids.read(popart)
    inventory = IpuInventory(tuple(IpuInfo(i) for i in range(8)), "test")
    for device in pairs:
        fake_popdist.configure(device.id - 8, 4, ipus_per_replica=2)
        assert fake_popdist.getDeviceId() == device.id
        # The pair's IPUs are its driverIds translated, not the driver ids themselves.
        assert inventory.multi_device_id(table.ipu_ids(device.driverIds)) == device.id


# -- the device PopDist gives each instance --------------------------------------------------------


def _machine(ipus: int) -> IpuInventory:
    return IpuInventory(tuple(IpuInfo(i, "ipu2", board_serial=f"board{i // 2}") for i in range(ipus)), "test")


def test_outside_poprun_there_is_no_instance_device() -> None:
    assert poprun_devices.instance_device(_machine(4), fake_popdist) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("settings", "device_id", "ipu_ids"),
    [
        ({"instance_index": 0, "num_instances": 2}, 0, (0,)),
        ({"instance_index": 1, "num_instances": 2}, 1, (1,)),
        ({"instance_index": 0, "num_instances": 2, "replicas_local": 2}, 4, (0, 1)),
        ({"instance_index": 1, "num_instances": 2, "ipus_per_replica": 2}, 5, (2, 3)),
    ],
)
def test_each_instance_gets_the_ipus_of_its_popdist_device(
    settings: dict[str, Any], device_id: int, ipu_ids: tuple[int, ...]
) -> None:
    fake_popdist.configure(**settings)
    device = poprun_devices.instance_device(_machine(4), fake_popdist)  # type: ignore[arg-type]
    assert device is not None
    assert (device.device_id, device.ipu_ids) == (device_id, ipu_ids)
    # popdist is asked for the device of one replica's IPUs, as popdist.poptorch.Options does.
    assert fake_popdist.calls()[-1] == "getDeviceId"


def test_two_instances_place_on_different_ipus() -> None:
    placements = []
    for index in (0, 1):
        fake_popdist.configure(index, 2, replicas_local=2)
        device = poprun_devices.instance_device(_machine(4), fake_popdist)  # type: ignore[arg-type]
        assert device is not None
        inventory = poprun_devices.instance_inventory(_machine(4), device)
        placements.append(inventory.placement_inventory().device_ids)
        # The whole machine stays, so multi-IPU device ids keep gc-info's numbering.
        assert inventory.ids == (0, 1, 2, 3)
        assert inventory.multi_device_id(device.ipu_ids) == device.device_id
        assert inventory.notes[-1] == (
            f"PopRun instance {index} of 2: placement uses only IPU(s) {2 * index}, {2 * index + 1}, "
            f"device {4 + index} (popdist.getDeviceId(1))"
        )
        assert inventory.placement_inventory().board_of == {
            2 * index: f"board{index}",
            2 * index + 1: f"board{index}",
        }
    assert placements == [(0, 1), (2, 3)]


def test_a_popdist_device_this_machine_does_not_have_is_one_line() -> None:
    # Two instances of two IPUs each, but only two IPUs visible: PopDist's pair id 5 is not here.
    fake_popdist.configure(1, 2, ipus_per_replica=2)
    with pytest.raises(
        ValueError,
        match=exactly(
            "popdist.getDeviceId(2) = 5 is not a device of 2 IPU(s) (local replicas x IPUs per replica) "
            "among this machine's IPUs [0, 1] as gc-info -l numbers them; check the poprun command line "
            "(--num-replicas, --ipus-per-replica) against `gc-info -l`"
        ),
    ):
        poprun_devices.instance_device(_machine(2), fake_popdist)  # type: ignore[arg-type]


def test_a_popdist_device_id_that_is_not_an_int_is_named() -> None:
    odd = types.ModuleType("popdist")
    for name in dir(fake_popdist):
        if name.startswith(("get", "is")):
            setattr(odd, name, getattr(fake_popdist, name))
    odd.getDeviceId = lambda ipus_per_replica=0: "0"  # type: ignore[attr-defined]
    fake_popdist.configure(0, 2)
    with pytest.raises(
        ValueError,
        match=exactly(
            "popdist.getDeviceId(1) = '0' is not a device id (an int >= 0); check the popdist installation"
        ),
    ):
        poprun_devices.instance_device(_machine(2), odd)


# -- JSON paths ------------------------------------------------------------------------------------

TWO = PopRunInstance(0, 2, 0, 1, 2, 1)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("results/run.json", "results/run.instance-0-of-2.json"),
        ("run", "run.instance-0-of-2"),
        ("a.b/run.v1.json", "a.b/run.v1.instance-0-of-2.json"),
        ("results/run.instance-0-of-2.json", "results/run.instance-0-of-2.json"),
    ],
)
def test_instance_json_path(path: str, expected: str) -> None:
    assert poprun.instance_json_path(Path(path), TWO) == Path(expected)


def _config(json_path: Path | None) -> Any:
    return types.SimpleNamespace(option=types.SimpleNamespace(benchmark_json=json_path))


def test_configure_json_path_under_poprun() -> None:
    fake_popdist.configure(1, 2)
    config = _config(Path("out/run.json"))
    instance = poprun.configure_json_path(config.option, fake_popdist)
    assert instance is not None
    assert instance.index == 1
    assert config.option.benchmark_json == Path("out/run.instance-1-of-2.json")
    poprun.configure_json_path(config.option, fake_popdist)
    assert config.option.benchmark_json == Path("out/run.instance-1-of-2.json"), "not idempotent"


def test_configure_json_path_without_json_or_outside_poprun() -> None:
    fake_popdist.configure(0, 2)
    no_json = _config(None)
    assert poprun.configure_json_path(no_json.option, fake_popdist) is not None  # type: ignore[arg-type]
    assert no_json.option.benchmark_json is None
    fake_popdist.reset()
    plain = _config(Path("run.json"))
    assert poprun.configure_json_path(plain.option, fake_popdist) is None  # type: ignore[arg-type]
    assert plain.option.benchmark_json == Path("run.json")


# -- merge -----------------------------------------------------------------------------------------


def merge(paths: Sequence[Path]) -> dict[str, Any]:
    """The merge as ``pytest-ipu merge`` runs it: each file's instance checked by PopRun's class."""
    return launch_merge.merge(paths, poprun.IDENTITIES)


def _record(
    throughput: float, window_s: float, rounds: int, p50: float, p99: float, **over: Any
) -> dict[str, Any]:
    record = schema.to_json(
        records.IpuRecord(
            target="poptorch:ipu",
            backend="poptorch",
            device="ipu",
            device_name="IPU",
            precision="fp16",
            io="host",
            batch_size=4,
            items_per_call=4,
            rounds=rounds,
            rounds_policy="fixed",
            warmup_rounds=1,
            latency_s=LatencySummary(p50 / 2, p50, (p50 + p99) / 2, p99, p99 * 1.1, p50, rounds),
            window_s=window_s,
            throughput_items_per_s=throughput,
            compile_s=1.0,
            compile_cached=False,
            first_call_s=0.5,
            power=records.PowerRecord(measured=False, source="off", reason="off"),
        )
    )
    record.update(over)
    return record


def _bench(fullname: str, record: dict[str, Any] | None, mean: float) -> dict[str, Any]:
    extra = {} if record is None else {"ipu": record}
    return {
        "group": None,
        "name": fullname.rpartition("::")[2],
        "fullname": fullname,
        "params": None,
        "param": None,
        "extra_info": extra,
        "options": {"timer": "perf_counter"},
        "stats": {"mean": mean, "rounds": 10},
    }


def _run(index: int, count: int, benchmarks: list[dict[str, Any]], node: str = "host") -> dict[str, Any]:
    identity = PopRunInstance(index, count, 0, 1, count, 1).as_json()
    return {
        "machine_info": {"node": node, "ipu": {"schema": 1, "poprun": identity}},
        "commit_info": {"id": "abc"},
        "benchmarks": benchmarks,
        "datetime": f"2026-01-0{index + 1}T00:00:00",
        "version": "5.3.1",
    }


def _two_instances() -> list[dict[str, Any]]:
    return [
        _run(
            0,
            2,
            [
                _bench("t.py::test_a", _record(100.0, 2.0, 50, 0.010, 0.020), 0.011),
                _bench("t.py::test_plain", None, 0.5),
            ],
            node="host-a",
        ),
        _run(
            1,
            2,
            [
                _bench("t.py::test_plain", None, 0.7),
                _bench("t.py::test_a", _record(80.0, 2.5, 40, 0.012, 0.018), 0.013),
            ],
            node="host-b",
        ),
    ]


def _write(tmp_path: Path, docs: list[Any]) -> list[Path]:
    paths = []
    for i, doc in enumerate(docs):
        path = tmp_path / f"run.instance-{i}.json"
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        paths.append(path)
    return paths


def test_merge_counts_every_item_over_the_launch_window_and_keeps_the_worst_latency(tmp_path: Path) -> None:
    docs = _two_instances()
    paths = _write(tmp_path, docs)
    merged = merge(list(reversed(paths)))  # any order: instances are ordered by index
    assert [b["fullname"] for b in merged["benchmarks"]] == ["t.py::test_a", "t.py::test_plain"]
    bench = merged["benchmarks"][0]
    record = bench["extra_info"]["ipu"]
    # Without the windows' edges: 100/s x 2 s + 80/s x 2.5 s over the longest window, 2.5 s.
    assert record["throughput_items_per_s"] == pytest.approx(400 / 2.5)
    assert record["sum_of_instances_items_per_s"] == 180.0
    assert record["poprun"]["window_rule"] == "longest window"
    assert record["poprun"]["window_overlap"] is None
    assert record["window_s"] == 2.5
    assert record["rounds"] == 90
    assert record["latency_worst_instance_p50_s"] == 0.012
    assert record["latency_worst_instance_p99_s"] == 0.020
    assert record["latency_s"]["p50"] == 0.012
    assert record["latency_s"]["p99"] == 0.020
    assert record["power"] is None
    assert record["poprun"]["merged"] is True
    assert record["poprun"]["count"] == 2
    assert record["poprun"]["aggregation"] == dict(launch_merge.AGGREGATION)
    assert "launch's window" in record["poprun"]["aggregation"]["throughput_items_per_s"]
    assert record["poprun"]["instances"] == [
        docs[0]["benchmarks"][0]["extra_info"]["ipu"],
        docs[1]["benchmarks"][1]["extra_info"]["ipu"],
    ]
    assert bench["stats"] == {"mean": 0.011, "rounds": 10}, "stats are instance 0's"
    assert merged["benchmarks"][1] == docs[0]["benchmarks"][1], "a benchmark without a record is instance 0's"
    info = merged["machine_info"]["ipu"]["poprun"]
    assert info["merged"] is True
    assert info["instances"] == [
        docs[0]["machine_info"]["ipu"]["poprun"],
        docs[1]["machine_info"]["ipu"]["poprun"],
    ]
    assert info["hosts"] == ["host-a", "host-b"]
    assert info["files"] == [str(p) for p in paths]
    assert (merged["commit_info"], merged["datetime"]) == (docs[0]["commit_info"], docs[0]["datetime"])
    assert docs == _two_instances(), "the inputs were modified"


def _timed(record: dict[str, Any], *windows: tuple[float, float]) -> dict[str, Any]:
    """``record`` with one repeat per ``(start_unix_s, window_s)``, each at the record's rate."""
    rate = record["throughput_items_per_s"]
    first = dict(record["repeats"][0]) if record.get("repeats") else None
    template = first or {
        "index": 1,
        "rounds": record["rounds"],
        "latency_s": record["latency_s"],
        "ended": "planned",
        "process": "this",
        "cpu": None,
    }
    record["repeats"] = [
        {**template, "index": i + 1, "window_s": w, "throughput_items_per_s": rate, "start_unix_s": t}
        for i, (t, w) in enumerate(windows)
    ]
    record["window_s"] = math.fsum(w for _, w in windows)
    return record


@pytest.mark.parametrize(
    ("second_start", "span", "overlap"),
    [
        (1000.0, 2.5, 2.0 / 2.5),  # opened together: the longer window is the launch's
        (1000.5, 3.0, 1.5 / 3.0),  # half a second late: the span reaches its close
        (1002.0, 4.5, 0.0),  # one after the other: no window in which both ran
    ],
)
def test_the_launch_window_spans_the_instances_windows_by_their_wall_clock_edges(
    tmp_path: Path, second_start: float, span: float, overlap: float
) -> None:
    docs = _two_instances()
    first = _timed(docs[0]["benchmarks"][0]["extra_info"]["ipu"], (1000.0, 2.0))
    _timed(docs[1]["benchmarks"][1]["extra_info"]["ipu"], (second_start, 2.5))
    assert schema.from_json(first).repeats[0].start_unix_s == 1000.0  # the reader keeps the edge
    record = merge(_write(tmp_path, docs))["benchmarks"][0]["extra_info"]["ipu"]
    assert record["poprun"]["window_rule"] == "common span"
    assert record["window_s"] == pytest.approx(span)
    assert record["poprun"]["window_overlap"] == pytest.approx(overlap)
    assert record["throughput_items_per_s"] == pytest.approx((100.0 * 2.0 + 80.0 * 2.5) / span)
    # The sum of the instances' own rates is kept beside it, and never below the launch's rate.
    assert record["sum_of_instances_items_per_s"] == 180.0
    assert record["throughput_items_per_s"] <= record["sum_of_instances_items_per_s"]


def test_the_launch_window_pairs_repeats_and_sums_their_spans(tmp_path: Path) -> None:
    docs = _two_instances()
    _timed(docs[0]["benchmarks"][0]["extra_info"]["ipu"], (1000.0, 1.0), (1010.0, 1.0))
    _timed(docs[1]["benchmarks"][1]["extra_info"]["ipu"], (1000.0, 1.0), (1011.0, 1.0))
    record = merge(_write(tmp_path, docs))["benchmarks"][0]["extra_info"]["ipu"]
    # Repeat 1 ran side by side (1 s), repeat 2 one after the other (2 s): the 9 s between the
    # repeats, when neither instance was timed, are not in the window.
    assert record["window_s"] == pytest.approx(3.0)
    assert record["poprun"]["window_overlap"] == pytest.approx(1.0 / 3.0)
    assert record["throughput_items_per_s"] == pytest.approx((100.0 * 2 + 80.0 * 2) / 3.0)


def test_without_every_edge_the_launch_window_is_the_longest_per_repeat(tmp_path: Path) -> None:
    docs = _two_instances()
    _timed(docs[0]["benchmarks"][0]["extra_info"]["ipu"], (1000.0, 1.0), (1010.0, 3.0))
    second = _timed(docs[1]["benchmarks"][1]["extra_info"]["ipu"], (1000.0, 2.0), (1011.0, 1.0))
    second["repeats"][1]["start_unix_s"] = None  # an edge missing: no span can be laid out
    record = merge(_write(tmp_path, docs))["benchmarks"][0]["extra_info"]["ipu"]
    assert record["poprun"]["window_rule"] == "longest window"
    assert record["window_s"] == pytest.approx(2.0 + 3.0)


def test_merge_keeps_the_largest_cpu_time_of_any_instance(tmp_path: Path) -> None:
    docs = _two_instances()
    first, second = (
        docs[0]["benchmarks"][0]["extra_info"]["ipu"],
        docs[1]["benchmarks"][1]["extra_info"]["ipu"],
    )
    keys = ("process_s", "thread_s", "process_total_s", "thread_total_s", "off_cpu_share")
    first["cpu"] = dict(zip(keys, (0.004, 0.003, 0.2, 0.15, 0.25)))
    second["cpu"] = dict(zip(keys, (0.005, 0.002, 0.25, 0.1, 0.5)))
    record = merge(_write(tmp_path, docs))["benchmarks"][0]["extra_info"]["ipu"]
    # Instances written before the host cost: the launch has none either.
    assert record["cpu"] == {
        **dict(zip(keys, (0.005, 0.003, 0.25, 0.15, 0.5))),
        "host_per_item_s": None,
        "host_cores": None,
    }
    del second["cpu"]  # an instance of a pytest-ipu from before CPU time
    record = merge(_write(tmp_path, docs))["benchmarks"][0]["extra_info"]["ipu"]
    assert record["cpu"] is None


def test_the_host_cost_of_a_launch_is_every_instances_together(tmp_path: Path) -> None:
    from pytest_ipu.results import schema

    docs = _two_instances()
    first, second = (
        docs[0]["benchmarks"][0]["extra_info"]["ipu"],
        docs[1]["benchmarks"][1]["extra_info"]["ipu"],
    )
    # Instance 0: 0.2 s of CPU time over its 200 items and 2 s window; instance 1: 0.25 s over its
    # 200 items (80 items/s for 2.5 s) and 2.5 s. Each kept a tenth of a core busy.
    base = {"process_s": 0.004, "thread_s": 0.003, "thread_total_s": 0.15, "off_cpu_share": 0.25}
    first["cpu"] = {**base, "process_total_s": 0.2, "workers": 0, "workers_total_s": 0.0}
    first["cpu"].update(host_per_item_s=0.001, host_cores=0.1)
    second["cpu"] = {**base, "process_total_s": 0.25, "workers": 0, "workers_total_s": 0.0}
    second["cpu"].update(host_per_item_s=0.00125, host_cores=0.1)
    merged = merge(_write(tmp_path, docs))
    record = merged["benchmarks"][0]["extra_info"]["ipu"]
    assert record["cpu"]["host_cores"] == pytest.approx(0.2)  # the cores the launch kept busy
    assert record["cpu"]["host_per_item_s"] == pytest.approx(0.45 / 400)  # not the larger 1.25 ms
    assert record["cpu"]["workers"] == 0
    assert isinstance(record["cpu"]["workers"], int)
    assert "host_cores is the sum over instances" in record["poprun"]["aggregation"]["cpu"]
    back = schema.from_json(record)
    assert back.value("host_cores") == pytest.approx(0.2)


def test_the_host_instructions_of_a_launch_are_every_instances_together(tmp_path: Path) -> None:
    from pytest_ipu.results import schema

    docs = _two_instances()
    first, second = (
        docs[0]["benchmarks"][0]["extra_info"]["ipu"],
        docs[1]["benchmarks"][1]["extra_info"]["ipu"],
    )
    cycles = counts.measured((1_000,) * 3, counts.COUNTING_PASS, None, None).as_json()
    first["counts"] = {
        "host_instructions": counts.over_window(
            3_000_000, 10, counts.TIMED_WINDOW, "1 process, 4 threads"
        ).as_json(),
        "ipu_cycles": cycles,
    }
    second["counts"] = {
        "host_instructions": counts.over_window(
            5_000_000, 10, counts.TIMED_WINDOW, "1 process, 4 threads"
        ).as_json(),
        "ipu_cycles": counts.measured((1_001,) * 3, counts.COUNTING_PASS, None, None).as_json(),
    }
    record = merge(_write(tmp_path, docs))["benchmarks"][0]["extra_info"]["ipu"]
    # Every instance's instructions over every instance's calls: not instance 0's alone.
    assert (
        record["counts"]["host_instructions"]
        == counts.over_window(
            8_000_000, 20, counts.TIMED_WINDOW, "2 instances, each 1 process, 4 threads"
        ).as_json()
    )
    # A count read call by call is instance 0's, as the aggregation says.
    assert record["counts"]["ipu_cycles"] == cycles
    assert schema.from_json(record).value("host_instructions") == 400_000.0
    assert "every instance's total over every instance's calls" in record["poprun"]["aggregation"]["counts"]
    # An instance whose counter did not count: the launch says why, with no figure.
    why = "the hardware counter is not available: perf_event_open failed with ENOENT"
    second["counts"]["host_instructions"] = counts.not_counted(why).as_json()
    record = merge(_write(tmp_path, docs))["benchmarks"][0]["extra_info"]["ipu"]
    assert record["counts"]["host_instructions"]["per_call"] is None
    assert record["counts"]["host_instructions"]["reason"] == why
    del second["counts"]  # an instance of a pytest-ipu from before the counts
    record = merge(_write(tmp_path, docs))["benchmarks"][0]["extra_info"]["ipu"]
    assert (
        record["counts"]["host_instructions"]["reason"]
        == "instance 1 of the launch kept no host_instructions"
    )
    assert schema.from_json(record).value("host_instructions") is None


def test_a_merged_file_reads_back_as_a_run(tmp_path: Path) -> None:
    out = tmp_path / "merged.json"
    launch_merge.write_atomic(out, merge(_write(tmp_path, _two_instances())))
    stored = {b.fullname: b for b in benchmark_json.load_run(out)}
    merged_record = stored["t.py::test_a"].record
    assert merged_record is not None
    assert merged_record.throughput_items_per_s == pytest.approx(160.0)
    assert merged_record.latency_s.p99 == 0.020
    assert stored["t.py::test_plain"].record is None


def test_identity_from_the_records_when_machine_info_lacks_it(tmp_path: Path) -> None:
    docs = _two_instances()
    for doc in docs:
        identity = doc["machine_info"]["ipu"].pop("poprun")
        for bench in doc["benchmarks"]:
            if bench["extra_info"]:
                bench["extra_info"]["ipu"]["poprun"] = identity
    merged = merge(_write(tmp_path, docs))
    assert merged["benchmarks"][0]["extra_info"]["ipu"]["throughput_items_per_s"] == pytest.approx(160.0)


def test_one_instance_merges_to_itself(tmp_path: Path) -> None:
    doc = _run(0, 1, [_bench("t.py::test_a", _record(100.0, 2.0, 50, 0.010, 0.020), 0.011)])
    merged = merge(_write(tmp_path, [doc]))
    assert merged["benchmarks"][0]["extra_info"]["ipu"]["throughput_items_per_s"] == 100.0


def _edit(change: Any) -> list[Any]:
    docs: list[Any] = _two_instances()
    change(docs)
    return docs


def _set(doc_index: int, path: tuple[Any, ...], value: Any) -> Any:
    def change(docs: list[Any]) -> None:
        target = docs[doc_index]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


BAD_MERGES = [
    (
        "not JSON",
        lambda docs: docs.__setitem__(1, "{nope"),
        "{1}: not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
    ),
    (
        "no benchmarks",
        lambda docs: docs.__setitem__(1, {"machine_info": {}}),
        "{1}: not a pytest-benchmark run (no 'benchmarks' list)",
    ),
    (
        "a benchmark that is not an object",
        lambda docs: docs[1]["benchmarks"].append(3),
        "{1}: benchmarks[2] is not a pytest-benchmark benchmark object",
    ),
    (
        "no PopRun identity",
        lambda docs: docs[0]["machine_info"].pop("ipu"),
        "{0}: not written by a PopRun instance or torchrun rank of pytest-ipu (no "
        "machine_info['ipu']['poprun'] or ['torchrun'] section); pass the files pytest-ipu wrote under "
        "poprun or torchrun",
    ),
    (
        "a malformed identity",
        _set(0, ("machine_info", "ipu", "poprun", "index"), 5),
        "{0}: malformed machine_info['ipu']['poprun']: PopRunInstance.index = 5 is not below "
        "PopRunInstance.count = 2; an instance index lies in [0, 2): check the poprun command line "
        "(--num-instances)",
    ),
    (
        "another launch",
        _set(1, ("machine_info", "ipu", "poprun"), PopRunInstance(1, 3, 0, 1, 3, 1).as_json()),
        "{1}: written by instance 1 of 3, but {0} by instance 0 of 2: not one PopRun launch; merge files "
        "of one launch",
    ),
    (
        "an instance twice",
        _set(1, ("machine_info", "ipu", "poprun"), TWO.as_json()),
        "{1}: instance 0 of 2 again (also {0}); pass each instance's file once",
    ),
    (
        "a missing benchmark",
        lambda docs: docs[1]["benchmarks"].pop(1),
        "{1}: has no benchmark 't.py::test_a', which {0} has; every instance must run the same benchmarks",
    ),
    (
        "an extra benchmark",
        lambda docs: docs[1]["benchmarks"].append(_bench("t.py::test_z", None, 1.0)),
        "{1}: benchmark 't.py::test_z' is not in {0}; every instance must run the same benchmarks",
    ),
    (
        "a benchmark twice",
        lambda docs: docs[1]["benchmarks"].append(copy.deepcopy(docs[1]["benchmarks"][0])),
        "{1}: benchmark 't.py::test_plain' appears twice; pass unmerged files",
    ),
    (
        "a different batch",
        _set(1, ("benchmarks", 1, "extra_info", "ipu", "items_per_call"), 8),
        "{1}: benchmark 't.py::test_a' has items_per_call=8 but {0} has items_per_call=4: not the same "
        "benchmark; merge files of one launch",
    ),
    (
        "a record in one instance only",
        _set(0, ("benchmarks", 0, "extra_info"), {}),
        "{0}: benchmark 't.py::test_a' has no extra_info['ipu'] record, while {1} has one; merge files of "
        "one launch",
    ),
    (
        "a foreign record",
        _set(1, ("benchmarks", 1, "extra_info", "ipu"), {"schema": "x"}),
        "{1}: benchmark 't.py::test_a': not a pytest-ipu record (schema version 'x')",
    ),
    (
        "an extra_info that is not an object",
        _set(1, ("benchmarks", 0, "extra_info"), [1]),
        "{1}: benchmark 't.py::test_plain': extra_info is not an object",
    ),
    (
        "an already merged file",
        _set(1, ("machine_info", "ipu", "poprun"), {"merged": True, "count": 2}),
        "{1}: already a merged file; pass the files of the instances",
    ),
]


@pytest.mark.parametrize(("change", "message"), [b[1:] for b in BAD_MERGES], ids=[b[0] for b in BAD_MERGES])
def test_bad_merges(tmp_path: Path, change: Any, message: str) -> None:
    paths = _write(tmp_path, _edit(change))
    with pytest.raises(launch_merge.MergeError, match=exactly(message.format(*paths))):
        merge(paths)


def test_a_missing_instance_and_an_unreadable_file(tmp_path: Path) -> None:
    paths = _write(tmp_path, _two_instances())
    with pytest.raises(
        launch_merge.MergeError,
        match=exactly(f"{paths[1]}: instance(s) 0 of 2 missing; pass the JSON file of every instance"),
    ):
        merge(paths[1:])
    with pytest.raises(
        launch_merge.MergeError,
        match=exactly(f"{tmp_path / 'gone.json'}: cannot read: No such file or directory"),
    ):
        merge([paths[0], tmp_path / "gone.json"])
    with pytest.raises(
        launch_merge.MergeError,
        match=exactly("no input files; pass the JSON file of every instance of the PopRun launch"),
    ):
        merge([])


def test_merged_files_are_not_merged_again(tmp_path: Path) -> None:
    paths = _write(tmp_path, _two_instances())
    merged = merge(paths)
    merged["machine_info"]["ipu"]["poprun"] = TWO.as_json()  # disguised as an instance file
    again = tmp_path / "again.json"
    again.write_text(json.dumps(merged))
    with pytest.raises(
        launch_merge.MergeError,
        match=exactly(f"{again}: benchmark 't.py::test_a' is already merged; pass unmerged files"),
    ):
        merge([again, paths[1]])


# -- writing and the command -----------------------------------------------------------------------


def test_write_atomic_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    out.write_text("old")
    launch_merge.write_atomic(out, {"a": 1})
    assert json.loads(out.read_text()) == {"a": 1}
    with pytest.raises(TypeError):
        launch_merge.write_atomic(out, {"a": object()})
    assert json.loads(out.read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"], "a temporary file was left behind"


def test_cli_merge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _write(tmp_path, _two_instances())
    out = tmp_path / "merged.json"
    assert cli.main(["merge", str(out), *map(str, paths)]) == 0
    assert capsys.readouterr().out == f"merged 2 PopRun instance(s), 2 benchmark(s), into {out}\n"
    assert json.loads(out.read_text())["benchmarks"][0]["extra_info"]["ipu"][
        "throughput_items_per_s"
    ] == pytest.approx(160.0)


def test_cli_merge_bad_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = _write(tmp_path, _two_instances())
    out = tmp_path / "merged.json"
    assert cli.main(["merge", str(out), str(paths[0]), str(paths[0])]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"pytest-ipu: {paths[0]}: instance 0 of 2 again (also {paths[0]}); pass each instance's file once\n"
    )
    assert not out.exists()
    assert cli.main(["merge", str(tmp_path / "no-dir" / "m.json"), *map(str, paths)]) == 2
    assert capsys.readouterr().err == (
        f"pytest-ipu: {tmp_path / 'no-dir' / 'm.json'}: cannot write: No such file or directory\n"
    )


# -- contract: the same assertions on the fake and, where it imports, the real popdist -------------


@pytest.fixture(params=["fake", "real"])
def any_popdist(request: pytest.FixtureRequest) -> Any:
    if request.param == "fake":
        return fake_popdist
    return pytest.importorskip("popdist")


def test_contract_outside_poprun(any_popdist: Any) -> None:
    if any_popdist.isPopdistEnvSet():
        pytest.skip("this process was launched by PopRun")
    assert poprun_devices.detect(any_popdist) is None
    # Single-process defaults, which detect relies on never being asked for outside PopRun.
    assert any_popdist.getInstanceIndex() == 0
    assert any_popdist.getNumLocalReplicas() == 1
    assert any_popdist.getNumIpusPerReplica() == 1


# -- bad inputs: never write over an input, malformed fields are one line ---------------------------------


@pytest.mark.parametrize("spelling", ["same", "dotted"])
def test_merge_refuses_to_write_over_an_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spelling: str
) -> None:
    paths = _write(tmp_path, _two_instances())
    before = paths[0].read_text()
    out = paths[0] if spelling == "same" else tmp_path / "." / "x" / ".." / paths[0].name
    (tmp_path / "x").mkdir()
    assert cli.main(["merge", str(out), *map(str, paths)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pytest-ipu: {out}: is also an input file ")
    assert err.endswith("pass an output path that is not one of the files being merged\n")
    assert err.count("\n") == 1
    assert paths[0].read_text() == before


@pytest.mark.parametrize(
    "unsupported", [3, "p99", [1], [["p99"]], [None]], ids=["int", "str", "ints", "lists", "none"]
)
def test_malformed_latency_unsupported_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], unsupported: Any
) -> None:
    docs = _two_instances()
    docs[1]["benchmarks"][1]["extra_info"]["ipu"]["latency_unsupported"] = unsupported
    paths = _write(tmp_path, docs)
    out = tmp_path / "merged.json"
    assert cli.main(["merge", str(out), *map(str, paths)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pytest-ipu: {paths[1]}: benchmark 't.py::test_a': ")
    assert "latency_unsupported" in err
    assert err.count("\n") == 1
    assert not out.exists()
