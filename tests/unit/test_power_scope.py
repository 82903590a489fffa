"""Which IPUs a model's energy is measured on (``power.metered_device``), how a power device names
single IPUs (``power.ipus_of``), and the scope a power record states and reads back."""

from __future__ import annotations

import pytest

from pytest_ipu import power
from pytest_ipu.power.gcipuinfo import GcIpuInfoPowerSource
from pytest_ipu.results import schema
from pytest_ipu.results.records import DeviceEnergy
from pytest_ipu.results.records import PowerRecord
from tests.fakes.fake_gcipuinfo import FakeGcIpuInfoModule
from tests.fakes.fake_gcipuinfo import c2_card


@pytest.mark.parametrize(
    ("device", "ipu_ids", "metered"),
    [
        # Not IPU hardware: measured as it is (the IPU Model has no power source).
        ("cpu", None, "cpu"),
        ("cuda:1", None, "cuda:1"),
        ("ipu-model", None, "ipu-model"),
        # On IPUs, exactly the IPUs held, whatever the backend's device says.
        ("ipu", (2,), "ipu:2"),
        ("ipu", (3, 2, 3), "ipu:2,3"),
        ("ipu:5", (2, 3), "ipu:2,3"),  # a multi-IPU device id: its members
        ("ipu:1", (1,), "ipu:1"),
        # IPUs the backend cannot name: none (never "ipu", the whole partition).
        ("ipu", None, None),
        ("ipu", (), None),
        ("ipu:5", None, None),
    ],
)
def test_a_model_on_ipus_is_metered_on_exactly_its_ipus(device, ipu_ids, metered):
    assert power.metered_device(device, ipu_ids) == metered


def test_the_reason_for_unknown_ipus_names_the_target_and_the_fix():
    reason = power.UNKNOWN_IPUS.format(target="poptorch:ipu", backend="poptorch", lookup="why")
    assert reason.startswith(
        "which IPUs poptorch:ipu runs on is unknown (its backend let the SDK choose them, and why)"
    )
    assert reason.endswith(
        "pin the device (target poptorch:ipu:N, N a device id from gc-info -l) to measure it"
    )


@pytest.mark.parametrize(
    ("device", "ipus"), [("ipu", None), ("ipu:3", [3]), ("ipu:0,1", [0, 1]), ("cpu", None), ("cuda:0", None)]
)
def test_a_power_device_names_single_ipus(device, ipus):
    assert power.ipus_of(device) == ipus


def test_the_built_in_source_is_made_for_exactly_the_ipus_named(monkeypatch):
    module = FakeGcIpuInfoModule(c2_card("A", 0, "60.0 W") + c2_card("B", 2, "110.0 W"))
    monkeypatch.setattr("pytest_ipu.power.gcipuinfo.import_sdk", lambda name: module)
    source = power.make_source("gcipuinfo", "ipu:2,3")
    assert isinstance(source, GcIpuInfoPowerSource)
    assert [(d.id, d.ipus) for d in source.open()] == [("gcipuinfo:board-B", (2, 3))]
    assert source.read() == {"gcipuinfo:board-B": 110.0}


def _energy(scope: str, ipus: tuple[int, ...] = (), unused: tuple[int, ...] = ()) -> DeviceEnergy:
    return DeviceEnergy(f"x:{scope}", scope, scope, 10.0, 5.0, None, ipus, unused)


@pytest.mark.parametrize(
    ("devices", "scope"),
    [
        ((), None),
        ((_energy("ipu", (0,)), _energy("ipu", (1,))), "ipus"),
        ((_energy("ipu-board", (2, 3), (3,)),), "board"),
        ((_energy("ipu", (0,)), _energy("ipu-board", (4, 5))), "board"),
        ((_energy("gpu"),), "gpu"),
        ((_energy("cpu-package"), _energy("dram"), _energy("cpu-package")), "cpu-package+dram"),
    ],
)
def test_the_scope_says_what_the_energy_covers(devices, scope):
    assert PowerRecord(measured=bool(devices), source="x", devices=devices).scope == scope


def test_the_scope_and_each_readings_ipus_are_written_and_read_back():
    record = PowerRecord(
        measured=True, source="gcipuinfo", devices=(_energy("ipu-board", (2, 3), (3,)),), energy_j=10.0
    )
    data = record.as_json()
    assert data["scope"] == "board"
    assert data["devices"][0]["ipus"] == [2, 3]
    assert data["devices"][0]["unused_ipus"] == [3]
    assert schema.power_from_json(data) == record
    # A power object written before the IPUs were named reads with none.
    for device in data["devices"]:
        del device["ipus"], device["unused_ipus"]
    del data["scope"]
    older = schema.power_from_json(data)
    assert (older.devices[0].ipus, older.devices[0].unused_ipus, older.scope) == ((), (), "board")
    data["devices"][0]["unused_ipus"] = [-3]
    with pytest.raises(schema.SchemaError, match=r"power\.devices\[0\]\.unused_ipus\[0\]"):
        schema.power_from_json(data)
