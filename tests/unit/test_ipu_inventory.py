"""IPU discovery from gcipuinfo, popart and poptorch (fakes), the IPU Model inventory, and the
``gc-info -l`` numbering of multi-IPU devices, checked against the fake PopART's ``enumerateDevices``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.devices import driver_ids
from pytest_ipu.devices import inventory as ipu_inventory
from pytest_ipu.devices.allocate import Inventory
from pytest_ipu.devices.inventory import IpuInfo
from pytest_ipu.devices.inventory import IpuInventory
from tests.fakes import fake_gcipuinfo
from tests.fakes import fake_popart

SDK_MODULES = ("gcipuinfo", "popart", "poptorch")


@pytest.fixture
def no_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import gcipuinfo/popart/poptorch`` fail, whatever this machine has installed."""
    for name in SDK_MODULES:
        monkeypatch.setitem(sys.modules, name, None)


def exactly(message: str) -> str:
    """A ``pytest.raises`` pattern matching ``message`` and nothing else."""
    return f"^{re.escape(message)}$"


def _poptorch(ipus: int, version: int = 2) -> types.ModuleType:
    """A poptorch with just the two probes discovery uses (the full fake imports torch)."""
    module = types.ModuleType("poptorch")
    module.ipuHardwareIsAvailable = lambda num_ipus=1: 0 < num_ipus <= ipus  # type: ignore[attr-defined]

    def ipuHardwareVersion() -> int:
        assert ipus, "No IPU hardware available on this system"
        return version

    module.ipuHardwareVersion = ipuHardwareVersion  # type: ignore[attr-defined]
    return module


# -- gcipuinfo -------------------------------------------------------------------------------------


def test_gcipuinfo_lists_ipus_boards_and_architecture(no_sdk: None) -> None:
    cards = fake_gcipuinfo.c2_card("SER-A", 0) + fake_gcipuinfo.c2_card("SER-B", 2)
    module = fake_gcipuinfo.FakeGcIpuInfoModule(cards)
    module.listing_order = [3, 1, 0, 2]  # matched by id, not by position
    found = ipu_inventory.discover(gcipuinfo_module=module)
    assert isinstance(found, IpuInventory)
    assert found.source == "gcipuinfo"
    assert found.ipus == (
        IpuInfo(0, "ipu1", "C2", "SER-A", 0),
        IpuInfo(1, "ipu1", "C2", "SER-A", 1),
        IpuInfo(2, "ipu1", "C2", "SER-B", 0),
        IpuInfo(3, "ipu1", "C2", "SER-B", 1),
    )
    assert (found.count, found.architecture, found.board_types) == (4, "ipu1", ("C2",))
    assert found.placement_inventory() == Inventory(
        "ipu", (0, 1, 2, 3), {0: "SER-A", 1: "SER-A", 2: "SER-B", 3: "SER-B"}
    )
    assert found.as_json() == {
        "count": 4,
        "architecture": "ipu1",
        "board_types": ["C2"],
        "ipus": [
            {
                "id": 0,
                "architecture": "ipu1",
                "board_type": "C2",
                "board_serial": "SER-A",
                "board_ipu_index": 0,
            },
            {
                "id": 1,
                "architecture": "ipu1",
                "board_type": "C2",
                "board_serial": "SER-A",
                "board_ipu_index": 1,
            },
            {
                "id": 2,
                "architecture": "ipu1",
                "board_type": "C2",
                "board_serial": "SER-B",
                "board_ipu_index": 0,
            },
            {
                "id": 3,
                "architecture": "ipu1",
                "board_type": "C2",
                "board_serial": "SER-B",
                "board_ipu_index": 1,
            },
        ],
        "source": "gcipuinfo",
        "simulator": False,
        "timing": "hardware",
        # No popart to list the multi-IPU devices: their ids are derived, and the notes say so.
        "notes": [
            ipu_inventory.DERIVED_IDS.format(
                why="popart: not importable (ModuleNotFoundError: import of popart halted; "
                "None in sys.modules)"
            )
        ],
    }
    json.dumps(found.as_json())  # plain JSON


def test_gcipuinfo_na_and_missing_attributes_are_unknown(no_sdk: None) -> None:
    ipus = fake_gcipuinfo.m2000()
    ipus[1].board_serial = None
    ipus[2].extra = {"ipu architecture": "N/A", "board type": " ", "board ipu index": "N/A"}
    ipus[3].architecture = "ipu21"
    found = ipu_inventory.discover(gcipuinfo_module=fake_gcipuinfo.FakeGcIpuInfoModule(ipus))
    assert isinstance(found, IpuInventory)
    assert found.ipus[1] == IpuInfo(1, "ipu2", "M2000", None, 2)
    assert found.ipus[2] == IpuInfo(2, None, None, "0131.0002.8204521", None)
    assert found.architecture is None  # mixed or unknown: no single answer
    assert found.placement_inventory().board_of == {
        0: "0131.0002.8204521",
        2: "0131.0002.8204521",
        3: "0131.0002.8204521",
    }


def test_gcipuinfo_failure_falls_through_to_popart_with_a_note(no_sdk: None) -> None:
    gc = fake_gcipuinfo.FakeGcIpuInfoModule([], construct_error=RuntimeError("no IPU driver\nloaded"))
    found = ipu_inventory.discover(gcipuinfo_module=gc, popart_module=fake_popart.make_module(ipus=2))
    assert isinstance(found, IpuInventory)
    assert found.source == "popart"
    assert found.ipus == (IpuInfo(0, "ipu2"), IpuInfo(1, "ipu2"))
    assert found.notes == (
        "gcipuinfo: failed: RuntimeError: no IPU driver loaded",
        "boards unknown: popart does not report board serials",
    )
    assert found.placement_inventory().board_of == {}


def test_popart_names_the_architecture_from_ipu_version_not_version(no_sdk: None) -> None:
    # DeviceInfo.version is the driver version, "<unknown-ipu-unattached>" on these unattached
    # devices; ipuVersion is the architecture.
    popart = fake_popart.make_module(ipus=2)
    popart.configure(architecture="ipu1")
    assert [d.version for d in popart.DeviceManager().enumerateDevices()] == ["<unknown-ipu-unattached>"] * 2
    found = ipu_inventory.discover(popart_module=popart)
    assert isinstance(found, IpuInventory)
    assert found.ipus == (IpuInfo(0, "ipu1"), IpuInfo(1, "ipu1"))
    assert found.architecture == "ipu1"


@pytest.mark.parametrize("source", ["popart", "gcipuinfo"])
def test_multi_ipu_device_ids_are_read_from_enumerate_devices(no_sdk: None, source: str) -> None:
    # The fake numbers its multi-IPU devices from 100, unlike the derived numbering (4, 5, 6 on 4
    # IPUs): the ids must come from the SDK's listing and each device's driverIds.
    popart = fake_popart.make_module(ipus=4)
    popart.configure(multi_id_base=100)
    gc = fake_gcipuinfo.FakeGcIpuInfoModule(
        fake_gcipuinfo.c2_card("SER-A", 0) + fake_gcipuinfo.c2_card("SER-B", 2)
    )
    found = ipu_inventory.discover(
        gcipuinfo_module=gc if source == "gcipuinfo" else None, popart_module=popart
    )
    assert isinstance(found, IpuInventory)
    assert found.source == source
    manager = popart.DeviceManager()
    devices = [d for n in (2, 4) for d in manager.enumerateDevices(numIpus=n)]
    # Each device's IPUs are its driverIds translated through the single IPUs' listing: the fake's
    # driver ids are not gc-info's ids, as nothing public says they are.
    assert [list(d.driverIds) for d in devices] == [[67, 66], [65, 64], [67, 66, 65, 64]]
    table = driver_ids.read(popart)
    listed = {table.ipu_ids(d.driverIds): d.id for d in devices}
    assert listed == {(0, 1): 100, (2, 3): 101, (0, 1, 2, 3): 102}
    assert found.id_table == table
    assert {group: found.multi_device_id(group) for group in listed} == listed
    assert found.multi_device_id((3,)) == 3
    # And back: each device id names the IPUs the SDK listed for it.
    assert {found.members(device_id): device_id for device_id in listed.values()} == listed
    assert found.members(3) == (3,)
    assert not any("derived" in note for note in found.notes)


def test_a_group_the_sdk_does_not_list_is_refused(no_sdk: None) -> None:
    found = ipu_inventory.discover(popart_module=fake_popart.make_module(ipus=2))
    assert isinstance(found, IpuInventory)
    with pytest.raises(ValueError, match=r"^multi_device_id\(\(0, 1, 2, 3\)\): IPU id\(s\) 2, 3 are not"):
        found.multi_device_id((0, 1, 2, 3))
    empty_table = IpuInventory(found.ipus, "popart", devices=(((0, 1, 2, 3), 9),))
    with pytest.raises(ValueError, match=r"the SDK lists no device made of IPUs \(0, 1\) \(its multi-IPU"):
        empty_table.multi_device_id((0, 1))


def test_without_popart_the_derived_ids_are_labelled(no_sdk: None) -> None:
    gc = fake_gcipuinfo.FakeGcIpuInfoModule(fake_gcipuinfo.c2_card())
    found = ipu_inventory.discover(gcipuinfo_module=gc)
    assert isinstance(found, IpuInventory)
    assert found.devices == ()
    assert found.multi_device_id((0, 1)) == 2
    assert found.notes[-1].startswith("multi-IPU device ids derived from gc-info -l's numbering")


def test_an_inventory_of_the_documented_c2_order_keeps_each_ids_board_index(no_sdk: None) -> None:
    gc = fake_gcipuinfo.FakeGcIpuInfoModule(fake_gcipuinfo.c2_card_as_documented("SER-A"))
    found = ipu_inventory.discover(gcipuinfo_module=gc)
    assert isinstance(found, IpuInventory)
    assert found.ipus == (IpuInfo(0, "ipu1", "C2", "SER-A", 1), IpuInfo(1, "ipu1", "C2", "SER-A", 0))
    assert found.placement_inventory().board_of == {0: "SER-A", 1: "SER-A"}


def test_gcipuinfo_with_an_unusable_id_hands_over(no_sdk: None) -> None:
    ipus = fake_gcipuinfo.c2_card()
    ipus[1].extra = {"id": "N/A"}
    gc = fake_gcipuinfo.FakeGcIpuInfoModule(ipus)
    found = ipu_inventory.discover(gcipuinfo_module=gc, poptorch_module=_poptorch(2))
    assert isinstance(found, IpuInventory)
    assert found.source == "poptorch"
    assert found.notes[0] == "gcipuinfo: device 1 has no usable 'id' ('N/A')"
    assert (
        found.notes[1]
        == "popart: not importable (ModuleNotFoundError: import of popart halted; None in sys.modules)"
    )


def test_poptorch_gives_the_largest_device_and_the_architecture(no_sdk: None) -> None:
    empty_gc = fake_gcipuinfo.FakeGcIpuInfoModule([])
    found = ipu_inventory.discover(
        gcipuinfo_module=empty_gc,
        popart_module=fake_popart.make_module(ipus=0),
        poptorch_module=_poptorch(8, version=21),
    )
    assert isinstance(found, IpuInventory)
    assert (found.source, found.count, found.architecture, found.board_types) == ("poptorch", 8, "ipu21", ())
    assert found.ids == tuple(range(8))
    assert found.notes[:2] == (
        "gcipuinfo: lists no IPUs in the active partition",
        "popart: DeviceManager().enumerateDevices() lists no IPU",
    )
    assert found.notes[2].startswith("boards unknown: poptorch reports only the largest power-of-two")


def test_poptorch_without_a_size_argument_reports_one_ipu(no_sdk: None) -> None:
    old = types.ModuleType("poptorch")
    old.ipuHardwareIsAvailable = lambda: True  # type: ignore[attr-defined]  # PopTorch 1.x
    old.ipuHardwareVersion = lambda: -1  # type: ignore[attr-defined]
    found = ipu_inventory.discover(poptorch_module=old)
    assert isinstance(found, IpuInventory)
    assert (found.count, found.architecture) == (1, None)
    assert found.notes[-1] == "this poptorch cannot probe device sizes: at least one IPU is present"


def test_nothing_found_says_what_each_source_answered_and_the_fix(no_sdk: None) -> None:
    found = ipu_inventory.discover(poptorch_module=_poptorch(0))
    assert found == (
        "no IPU found (gcipuinfo: not importable (ModuleNotFoundError: import of gcipuinfo halted; None in "
        "sys.modules); popart: not importable (ModuleNotFoundError: import of popart halted; None in "
        "sys.modules); poptorch: ipuHardwareIsAvailable() is False (it is also False under "
        "POPTORCH_IPU_MODEL)); enable Graphcore's Poplar SDK in the shell that runs pytest (source the "
        "SDK's enable script) so that gcipuinfo, popart or poptorch imports, and check that `gc-info -l` "
        "lists IPUs; without hardware, use the IPU Model simulator"
    )


def test_popart_after_onnx_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gcipuinfo", None)
    monkeypatch.setitem(sys.modules, "poptorch", None)
    monkeypatch.delitem(sys.modules, "popart", raising=False)
    monkeypatch.setitem(sys.modules, "onnx", types.ModuleType("onnx"))
    finder = fake_popart.PopartFinder(fake_popart.make_module(ipus=4))
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    found = ipu_inventory.discover()
    assert isinstance(found, str)
    assert finder.log == ["popart"], "discover did not try to import popart"
    assert (
        "popart: not importable (ImportError: It looks like onnx has already been imported. Due to an "
        "ongoing issue, popart must be imported before onnx.); onnx was imported before popart, which "
        "popart refuses: import popart first; poptorch:"
    ) in found


def test_popart_imported_lazily_when_onnx_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gcipuinfo", None)
    # Recorded as absent first, so that the fake popart that discover imports is removed afterwards.
    monkeypatch.setitem(sys.modules, "popart", None)
    monkeypatch.delitem(sys.modules, "popart")
    monkeypatch.delitem(sys.modules, "onnx", raising=False)
    finder = fake_popart.PopartFinder(fake_popart.make_module(ipus=4))
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    found = ipu_inventory.discover()
    assert isinstance(found, IpuInventory)
    assert (found.source, found.ids) == ("popart", (0, 1, 2, 3))


def test_importing_the_modules_imports_no_sdk_or_runtime(tmp_path: Path) -> None:
    heavy = ("torch", "onnx", "onnxruntime", "gcipuinfo", "popart", "poptorch", "popdist")
    code = (
        "import json, sys\nimport pytest_ipu.devices.inventory, pytest_ipu.placement.poprun\n"
        f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


# -- the IPU Model ---------------------------------------------------------------------------------


def test_simulator_inventory_is_labelled_simulated() -> None:
    sim = ipu_inventory.simulator_inventory(2, "ipu21")
    data = sim.as_json()
    assert data["simulator"] is True
    assert data["timing"] == "simulated: IPU Model timings are not hardware timings"
    assert (data["source"], data["count"], data["architecture"], data["board_types"]) == (
        "ipu-model",
        2,
        "ipu21",
        [],
    )
    assert sim.placement_inventory() == Inventory("ipu", (0, 1), {})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (0,),
            "simulator_inventory: invalid num_ipus=0: expected a positive int; write num_ipus=1",
        ),
        (
            (True,),
            "simulator_inventory: invalid num_ipus=True: expected a positive int; write num_ipus=1",
        ),
        (
            (2, "ipu3"),
            "simulator_inventory: invalid architecture='ipu3': expected one of ipu1, ipu2, ipu21; "
            "write architecture='ipu2'",
        ),
    ],
)
def test_simulator_inventory_bad_arguments(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=exactly(message)):
        ipu_inventory.simulator_inventory(*args)  # type: ignore[arg-type]


# -- multi-IPU device ids --------------------------------------------------------------------------


def _hardware(n: int) -> IpuInventory:
    return IpuInventory(tuple(IpuInfo(i, "ipu2") for i in range(n)), "test")


@pytest.mark.parametrize(
    ("group", "device_id"),
    [
        ((5,), 5),
        ((0, 1), 16),
        ((14, 15), 23),
        ((0, 1, 2, 3), 24),
        ((12, 13, 14, 15), 27),
        (tuple(range(8)), 28),
        (tuple(range(8, 16)), 29),
        (tuple(range(16)), 30),
    ],
)
def test_multi_device_ids_on_16_ipus(group: tuple[int, ...], device_id: int) -> None:
    assert _hardware(16).multi_device_id(group) == device_id


@pytest.mark.parametrize("ipus", [1, 2, 4, 6, 8, 16, 64])
def test_multi_device_ids_match_popart_enumerate_devices(ipus: int) -> None:
    popart = fake_popart.make_module(ipus=ipus)
    manager, table = popart.DeviceManager(), driver_ids.read(popart)
    inventory = _hardware(ipus)
    size, checked = 1, 0
    while size <= ipus:
        for device in manager.enumerateDevices(numIpus=size):
            assert inventory.multi_device_id(table.ipu_ids(device.driverIds)) == device.id, device
            checked += 1
        size *= 2
    assert checked == sum(ipus // (1 << k) for k in range(ipus.bit_length()) if 1 << k <= ipus)


@pytest.mark.parametrize(
    ("inventory", "group", "message"),
    [
        (_hardware(4), (), "multi_device_id(()): the group is empty; give the ids of at least one IPU"),
        (
            _hardware(4),
            (0, True),
            "multi_device_id((0, True)): IPU ids must be ints; give ids as gc-info -l numbers them",
        ),
        (
            _hardware(4),
            (0, 2),
            "multi_device_id((0, 2)): the ids are not consecutive and ascending; a multi-IPU device is a "
            "run of ids such as (0, 1)",
        ),
        (
            _hardware(4),
            (1, 0),
            "multi_device_id((1, 0)): the ids are not consecutive and ascending; a multi-IPU device is a "
            "run of ids such as (0, 1)",
        ),
        (
            _hardware(4),
            (0, 1, 2),
            "multi_device_id((0, 1, 2)): a group of 3 IPUs is not a power of two, the only sizes "
            "multi-IPU devices come in; use groups of 1, 2, 4, 8, ... IPUs",
        ),
        (
            _hardware(4),
            (1, 2),
            "multi_device_id((1, 2)): a 2-IPU device starts at a multiple of 2, not at 1; use (0, 1) or "
            "(2, 3)",
        ),
        (
            _hardware(8),
            (2, 3, 4, 5),
            "multi_device_id((2, 3, 4, 5)): a 4-IPU device starts at a multiple of 4, not at 2; use "
            "(0, 1, 2, 3) or (4, 5, 6, 7)",
        ),
        (
            _hardware(4),
            (4, 5),
            "multi_device_id((4, 5)): IPU id(s) 4, 5 are not in this inventory (0-3); choose a group "
            "within it",
        ),
        (
            IpuInventory((), "test"),
            (0,),
            "multi_device_id((0,)): IPU id(s) 0 are not in this inventory (no IPUs); choose a group "
            "within it",
        ),
        (
            IpuInventory(tuple(IpuInfo(i) for i in (0, 1, 2, 3, 6, 7)), "test"),
            (2, 3),
            "multi_device_id((2, 3)): this inventory's ids (0-3, 6-7) are not 0..5 without gaps, so "
            "gc-info's multi-IPU numbering cannot be derived; look the device id up with `gc-info -l`",
        ),
    ],
)
def test_multi_device_id_bad_groups(inventory: IpuInventory, group: tuple[int, ...], message: str) -> None:
    with pytest.raises(ValueError, match=exactly(message)):
        inventory.multi_device_id(group)


def test_single_ipu_ids_need_no_contiguous_inventory() -> None:
    sparse = IpuInventory(tuple(IpuInfo(i) for i in (2, 7)), "test")
    assert sparse.multi_device_id((7,)) == 7
    assert sparse.members(7) == (7,)


@pytest.mark.parametrize("ipus", [1, 2, 4, 8, 16])
def test_members_are_the_ipus_of_every_device_id(ipus: int) -> None:
    """``members`` inverts ``multi_device_id``: the IPUs each device id of PopART's listing is made of."""
    popart = fake_popart.make_module(ipus=ipus)
    manager, table = popart.DeviceManager(), driver_ids.read(popart)
    inventory = _hardware(ipus)
    size = 1
    while size <= ipus:
        for device in manager.enumerateDevices(numIpus=size):
            assert inventory.members(device.id) == table.ipu_ids(device.driverIds), device
        size *= 2


def test_a_device_id_no_device_has_is_named() -> None:
    with pytest.raises(
        ValueError,
        match=exactly(
            "device id 7 names no device made of this inventory's IPUs (0-3); "
            "`gc-info -l` lists the device ids"
        ),
    ):
        _hardware(4).members(7)  # 0-3 single, 4-5 pairs, 6 the four: nothing is 7


def test_repeated_ids_are_refused() -> None:
    with pytest.raises(
        ValueError, match=exactly("IpuInventory: IPU ids [0, 0] repeat an id; list each IPU once")
    ):
        IpuInventory((IpuInfo(0), IpuInfo(0)), "test")


# -- contract: the same assertions on the fake and, where it imports, the real gcipuinfo -----------


@pytest.fixture(params=["fake", "real"])
def any_gcipuinfo(request: pytest.FixtureRequest) -> Any:
    if request.param == "fake":
        return fake_gcipuinfo.FakeGcIpuInfoModule(fake_gcipuinfo.c2_card())
    return pytest.importorskip("gcipuinfo")


def test_contract_gcipuinfo_inventory(any_gcipuinfo: Any) -> None:
    found = ipu_inventory.discover(gcipuinfo_module=any_gcipuinfo, popart_module=None, poptorch_module=None)
    if isinstance(found, str):
        pytest.skip(f"no IPU here: {found}")
    assert found.source == "gcipuinfo"
    assert found.count >= 1
    assert found.ids == tuple(sorted(found.ids))
    assert json.loads(json.dumps(found.as_json())) == found.as_json()
    for group_size in (1, 2):
        if found.count >= group_size:
            group = tuple(range(group_size))
            assert found.multi_device_id(group) >= 0
