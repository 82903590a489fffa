"""PopART's ``driverIds`` translated into ``gc-info -l`` ids (pytest_ipu/devices/driver_ids.py): the
table of both enumerations, its mismatches, and what the inventory, the PopART backend's energy
attribution and the doctor make of it, with the fake's driver ids unlike its device ids."""

from __future__ import annotations

import json

import pytest

from pytest_ipu.devices import driver_ids
from pytest_ipu.devices import inventory as ipu_inventory
from pytest_ipu.devices.inventory import IpuInventory
from tests.fakes import fake_gcipuinfo
from tests.fakes import fake_popart


def test_the_fake_driver_ids_are_not_its_device_ids() -> None:
    popart = fake_popart.make_module(ipus=4)
    singles = popart.DeviceManager().enumerateDevices(numIpus=1)
    assert [(d.id, list(d.driverIds)) for d in singles] == [(0, [67]), (1, [66]), (2, [65]), (3, [64])]
    popart.configure(driver_id_base=None)  # the assumption nothing public confirms, for contrast
    assert [list(d.driverIds) for d in popart.DeviceManager().enumerateDevices(numIpus=1)] == [
        [0],
        [1],
        [2],
        [3],
    ]


def test_both_enumerations_and_their_translation() -> None:
    table = driver_ids.read(fake_popart.make_module(ipus=4))
    assert table.translation == {67: 0, 66: 1, 65: 2, 64: 3}
    assert table.ids_differ
    assert [(d.id, d.driver_ids, d.ipu_ids) for d in table.multis] == [
        (4, (67, 66), (0, 1)),
        (5, (65, 64), (2, 3)),
        (6, (67, 66, 65, 64), (0, 1, 2, 3)),
    ]
    assert table.devices == (((0, 1), 4), ((0, 1, 2, 3), 6), ((2, 3), 5))
    assert table.ipu_ids([64, 67]) == (0, 3)
    assert table.mismatches == ()
    assert table.lines() == [
        "numIpus=1: 4 device(s) (id <- driverIds)",
        "  0 <- [67]",
        "  1 <- [66]",
        "  2 <- [65]",
        "  3 <- [64]",
        "numIpus>1: 3 device(s) (id: driverIds -> gc-info ids)",
        "  4 (2 IPUs): [67, 66] -> [0, 1]",
        "  5 (2 IPUs): [65, 64] -> [2, 3]",
        "  6 (4 IPUs): [67, 66, 65, 64] -> [0, 1, 2, 3]",
        "driver ids differ from the device ids; placement and energy use the translated ids",
    ]
    json.dumps(table.as_json())


def test_equal_ids_translate_to_themselves() -> None:
    popart = fake_popart.make_module(ipus=2)
    popart.configure(driver_id_base=None)
    table = driver_ids.read(popart)
    assert not table.ids_differ
    assert table.devices == (((0, 1), 2),)
    assert table.lines()[-1] == "driver ids equal the device ids; placement and energy use the translated ids"


def test_a_driver_id_no_single_ipu_has_is_named() -> None:
    table = driver_ids.read(fake_popart.make_module(ipus=2))
    with pytest.raises(
        ValueError, match=r"^driverIds \[65, 0\]: driver id\(s\) 0 belong to no single IPU of"
    ):
        table.ipu_ids([65, 0])


@pytest.mark.parametrize(
    ("singles", "multis", "mismatch"),
    [
        (
            [(0, 1, (10,)), (1, 1, (10,))],
            [],
            "single-IPU devices 0 and 1 both list driver id 10; it translates to 0 only",
        ),
        (
            [(0, 1, (10, 11))],
            [],
            "single-IPU device 0 lists driverIds [10, 11], not exactly one; its driver id is unknown",
        ),
        (
            [(0, 1, (10,)), (1, 1, (11,))],
            [(2, 2, (10, 12))],
            "2-IPU device 2 lists driver id(s) 12, which no single-IPU device has: its IPUs are unknown",
        ),
        (
            [(0, 1, (10,)), (1, 1, (11,))],
            [(2, 2, (10, 10))],
            "2-IPU device 2 lists 1 distinct driver id(s) [10, 10], not 2",
        ),
    ],
)
def test_mismatches_are_said_and_never_guessed_around(
    singles: list[tuple[int, int, tuple[int, ...]]],
    multis: list[tuple[int, int, tuple[int, ...]]],
    mismatch: str,
) -> None:
    table = driver_ids.build(singles, multis)
    assert table.mismatches == (mismatch,)
    assert f"MISMATCH: {mismatch}" in table.lines()
    if "its IPUs are unknown" in mismatch:
        assert table.devices == ()  # the device is left out of placement, not given guessed IPUs


def test_the_inventory_notes_a_mismatch_and_single_ids_unlike_gcipuinfos() -> None:
    # gcipuinfo lists ids 4 and 5 (a second C2 card), PopART's single IPUs are 0 and 1.
    gc = fake_gcipuinfo.FakeGcIpuInfoModule(fake_gcipuinfo.c2_card("SER-B", 4))
    popart = fake_popart.make_module(ipus=2)
    found = ipu_inventory.discover(gcipuinfo_module=gc, popart_module=popart)
    assert isinstance(found, IpuInventory)
    assert found.notes[-1] == "PopART device listing: its single-IPU ids (0-1) are not gcipuinfo's (4-5)"
    assert found.id_table is not None
    assert found.id_table.ipu_ids((65, 64)) == (0, 1)
