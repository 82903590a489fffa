"""``placed.plan``: from the marker's request and a backend's inventory to one plan per instance."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_ipu.backends.base import PlacedBackend
from pytest_ipu.devices.allocate import Inventory
from pytest_ipu.devices.request import DeviceRequest
from pytest_ipu.devices.request import parse_request
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import CompileError
from pytest_ipu.placement import plan as placed


class StubInventory:
    """What ``plan`` needs of an ``IpuInventory``: ids, boards, multi-device ids, JSON."""

    def __init__(self, ids: tuple[int, ...], simulator: bool = False) -> None:
        self.ids = ids
        self.simulator = simulator

    def placement_inventory(self) -> Inventory:
        return Inventory("ipu", self.ids, {i: f"board{i // 2}" for i in self.ids})

    def multi_device_id(self, group: tuple[int, ...]) -> int:
        return 1000 + group[0]  # distinguishable from any single-IPU id

    def as_json(self) -> dict[str, Any]:
        return {"count": len(self.ids)}


class StubBackend:
    """A backend placement cannot spread: no inventory (a CPU or GPU runtime)."""

    def __init__(self, name: str, device: str) -> None:
        self.name, self.device = name, device

    def availability(self) -> object:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        raise NotImplementedError

    def default_precision(self) -> str:
        raise NotImplementedError

    def shape_specialized(self, options: object) -> bool:
        raise NotImplementedError

    def compile(self, *args: object) -> object:
        raise NotImplementedError


class PlacedStub(StubBackend):
    """An IPU-style backend: every member of the PlacedBackend protocol."""

    exclusive_device = True

    def __init__(self, name: str, device: str, inventory: object, concurrency: str = "threads") -> None:
        super().__init__(name, device)
        self.concurrency = concurrency
        self._inventory = inventory

    def inventory(self) -> object:
        return self._inventory

    def placement_options(self, replicas: int, stages: int) -> dict[str, object]:
        return {"replication_factor": replicas, "ipus": stages}


def _for(name: str, device: str) -> Any:
    return StubBackend(name, device)


def _req(**kw: object) -> DeviceRequest:
    return parse_request(kw, "test")


def test_one_instance_on_one_device_needs_no_placement() -> None:
    assert placed.is_trivial(_req())
    assert not placed.is_trivial(_req(instances=2))
    assert not placed.is_trivial(_req(replicas=2))


def test_placement_capabilities_are_a_declared_protocol() -> None:
    assert isinstance(PlacedStub("popart", "ipu", StubInventory((0,))), PlacedBackend)
    assert not isinstance(StubBackend("torch", "cpu"), PlacedBackend)


def test_instances_on_ipus_get_one_ipu_each_and_its_device_id() -> None:
    backend = PlacedStub("popart", "ipu", StubInventory((0, 1, 2, 3)))
    plan = placed.plan(backend, _req(instances=2), {}, _for)  # type: ignore[arg-type]
    assert [p.device for p in plan.instances] == ["ipu:0", "ipu:1"]
    assert [p.ipu_ids for p in plan.instances] == [(0,), (1,)]
    assert [p.backend.device for p in plan.instances] == ["ipu:0", "ipu:1"]
    assert plan.placement.as_json()["runner"] == "threads"
    assert plan.placement.as_json()["devices"] == ["ipu:0", "ipu:1"]
    assert plan.placement.as_json()["shared_device"] is False
    assert plan.placement.as_json()["ipu_ids"] == [[0], [1]]
    assert plan.placement.as_json()["instances"] == 2
    assert plan.ipu_ids == (0, 1)  # what the model's energy is measured on, not the device "ipu"


def test_multi_ipu_instances_use_the_multi_ipu_device_id_and_the_backend_options() -> None:
    backend = PlacedStub("poptorch", "ipu", StubInventory((0, 1, 2, 3)), concurrency="processes")
    plan = placed.plan(backend, _req(instances=2, replicas=2), {}, _for)  # type: ignore[arg-type]
    assert [p.device for p in plan.instances] == ["ipu:1000", "ipu:1002"]
    assert [p.options for p in plan.instances] == [{"replication_factor": 2, "ipus": 1}] * 2
    assert plan.placement.as_json()["runner"] == "processes"
    # Every member of both multi-IPU devices, not their device ids 1000 and 1002.
    assert plan.ipu_ids == (0, 1, 2, 3)


def test_a_backend_whose_calls_hold_the_gil_runs_even_one_instance_in_a_process_when_asked() -> None:
    gil = PlacedStub("poptorch", "ipu:2", StubInventory((0, 1, 2, 3)), concurrency="processes")
    free = PlacedStub("popart", "ipu", StubInventory((0, 1, 2, 3)))
    assert placed.runner(gil, 1) == "inline"
    assert placed.runner(gil, 1, own_process=True) == "processes"
    assert placed.runner(gil, 2) == "processes"
    assert placed.runner(free, 1, own_process=True) == "inline"
    assert placed.runner(free, 2, own_process=True) == "threads"
    assert placed.runner(StubBackend("torch", "cpu"), 1, own_process=True) == "inline"  # type: ignore[arg-type]
    # One instance on the backend's own device (pinned or not), as in this process: nothing allocated.
    plan = placed.plan(gil, _req(), {}, _for, own_process=True)  # type: ignore[arg-type]
    assert [(p.device, p.backend, p.ipu_ids) for p in plan.instances] == [("ipu:2", gil, ())]
    assert plan.placement.as_json()["runner"] == "processes"
    assert plan.placement.as_json()["devices"] == ["ipu:2"]
    # A placed single instance (two replicas) is allocated as ever, and runs in a process.
    unpinned = PlacedStub("poptorch", "ipu", StubInventory((0, 1, 2, 3)), concurrency="processes")
    plan = placed.plan(unpinned, _req(replicas=2), {}, _for, own_process=True)  # type: ignore[arg-type]
    assert plan.placement.as_json()["runner"] == "processes"
    assert [p.device for p in plan.instances] == ["ipu:1000"]


def test_too_few_ipus_skips_naming_what_was_asked_and_what_exists() -> None:
    backend = PlacedStub("popart", "ipu", StubInventory((0,)))
    with pytest.raises(BackendUnavailable) as info:
        placed.plan(backend, _req(instances=2), {}, _for)  # type: ignore[arg-type]
    text = str(info.value)
    assert text.startswith("placement on popart:ipu: cannot place 2 instance(s) x 1 IPU each = 2 IPUs")
    assert "the ipu inventory has 1 IPU, ids [0]" in text


def test_no_inventory_skips_with_the_backends_reason() -> None:
    backend = PlacedStub("popart", "ipu", "no IPU: gc-info -l lists none")
    with pytest.raises(BackendUnavailable, match="cannot place the model on popart:ipu: no IPU: gc-info -l"):
        placed.plan(backend, _req(instances=2), {}, _for)  # type: ignore[arg-type]


def test_a_pinned_device_id_cannot_take_a_placement() -> None:
    backend = PlacedStub("popart", "ipu:3", StubInventory((0, 1, 2, 3)))
    with pytest.raises(CompileError, match=r"pins one device id.*use target popart:ipu$"):
        placed.plan(backend, _req(instances=2), {}, _for)  # type: ignore[arg-type]


def test_options_contradicting_the_marker_are_refused() -> None:
    backend = PlacedStub("poptorch", "ipu", StubInventory((0, 1)))
    with pytest.raises(CompileError) as info:
        placed.plan(backend, _req(replicas=2), {"replication_factor": 4}, _for)  # type: ignore[arg-type]
    assert str(info.value) == (
        "ipu_compile option replication_factor=4 contradicts the ipu marker's placement (replicas=2, "
        "stages=1 means replication_factor=2); set it in one place only"
    )


def test_the_simulator_runs_every_instance_on_its_own_simulated_device() -> None:
    backend = PlacedStub("popart", "ipu-model", StubInventory((), simulator=True))
    plan = placed.plan(backend, _req(instances=3), {}, _for)  # type: ignore[arg-type]
    assert [p.device for p in plan.instances] == ["ipu-model"] * 3
    assert plan.placement.as_json()["simulator"] is True
    assert plan.ipu_ids is None


def test_backends_without_inventory_share_their_device_between_instances() -> None:
    backend = StubBackend("onnxruntime", "cpu")
    plan = placed.plan(backend, _req(instances=2), {}, _for)  # type: ignore[arg-type]
    assert [p.device for p in plan.instances] == ["cpu", "cpu"]
    assert all(p.backend is backend for p in plan.instances)
    assert plan.placement.as_json()["shared_device"] is True
    assert plan.ipu_ids is None


def test_replicas_and_stages_need_an_ipu_backend() -> None:
    with pytest.raises(CompileError, match="is not an IPU backend; use a poptorch or popart target"):
        placed.plan(StubBackend("torch", "cpu"), _req(stages=2), {}, _for)  # type: ignore[arg-type]


def test_under_poprun_placement_keeps_to_the_instances_ipus_and_says_so() -> None:
    from pytest_ipu.devices import poprun
    from pytest_ipu.devices.inventory import IpuInfo
    from pytest_ipu.devices.inventory import IpuInventory

    machine = IpuInventory(tuple(IpuInfo(i, "ipu2") for i in range(8)), "test")
    instance = poprun.PopRunInstance(1, 2, 1, 2, 4, 2)  # instance 1 of 2: two replicas of two IPUs
    device = poprun.PopRunDevice(instance, machine.multi_device_id((4, 5, 6, 7)), (4, 5, 6, 7))
    backend = PlacedStub("poptorch", "ipu", poprun.instance_inventory(machine, device))
    plan = placed.plan(backend, _req(instances=2, replicas=2), {}, _for)  # type: ignore[arg-type]
    # The pairs {4, 5} and {6, 7}, numbered over the whole machine (pairs are 8-11 on 8 IPUs).
    assert [p.device for p in plan.instances] == ["ipu:10", "ipu:11"]
    assert [p.ipu_ids for p in plan.instances] == [(4, 5), (6, 7)]
    assert plan.ipu_ids == (4, 5, 6, 7)  # the instance's own IPUs only
    assert plan.placement.as_json()["inventory"]["count"] == 8
    with pytest.raises(BackendUnavailable) as exc:
        placed.plan(backend, _req(instances=3, replicas=2), {}, _for)  # type: ignore[arg-type]
    assert "the ipu (PopRun instance 1 of 2, device 13) inventory has 4 IPUs, ids [4, 5, 6, 7]" in str(
        exc.value
    )


class CompilingStub(StubBackend):
    """A backend that compiles to a model doing nothing, on the device it was made for; on ``ipu:N``
    it names IPU ``N`` as a backend reading the SDK's device would (``None`` elsewhere)."""

    def compile(self, *args: object) -> Any:
        from pytest_ipu.backends.base import CompiledModel

        index = self.device.partition(":")[2]
        return CompiledModel(
            target=f"{self.name}:{self.device}",
            backend=self.name,
            device=self.device,
            device_name="stub",
            precision="fp32",
            io="host",
            run=lambda *inputs: None,
            prepare_inputs=tuple,
            close=lambda: None,
            ipu_ids=(int(index),) if index else None,
        )


def test_a_compiled_group_holds_every_instances_ipus_and_a_placed_model_its_devices_members() -> None:
    def backend_for(name: str, device: str) -> Any:
        return CompilingStub(name, device)

    backend = PlacedStub("popart", "ipu", StubInventory((0, 1, 2, 3)))
    group = placed.compile_plan(
        placed.plan(backend, _req(instances=2), {}, backend_for),  # type: ignore[arg-type]
        object(),
        (),
        "fp32",
        {},
    )
    try:
        assert (group.device, group.ipu_ids) == ("ipu", (0, 1))
    finally:
        group.close()
    # One instance on a multi-IPU device (replicas=2): device ipu:1000, holding IPUs 0 and 1.
    one = placed.compile_plan(
        placed.plan(backend, _req(replicas=2), {}, backend_for),  # type: ignore[arg-type]
        object(),
        (),
        "fp32",
        {},
    )
    assert (one.device, one.ipu_ids) == ("ipu:1000", (0, 1))
