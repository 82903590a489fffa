"""Device placement (pytest_ipu.devices.request): marker keywords -> DeviceRequest -> Placement."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.devices.allocate import InstancePlacement
from pytest_ipu.devices.allocate import Inventory
from pytest_ipu.devices.allocate import Placement
from pytest_ipu.devices.allocate import PlacementError
from pytest_ipu.devices.allocate import allocate
from pytest_ipu.devices.request import DeviceRequest
from pytest_ipu.devices.request import is_power_of_two
from pytest_ipu.devices.request import parse_request

SRC = "tests/test_x.py::test_a"


def ipus(*ids, boards=None):
    return Inventory("ipu", tuple(ids), boards or {})


def ids_of(placement):
    return [instance.ipu_ids for instance in placement.instances]


# --- parse_request -------------------------------------------------------------------------------


def test_defaults_are_one_instance_on_one_ipu():
    assert parse_request({}, SRC) == DeviceRequest(1, 1, 1, 1)
    assert DeviceRequest() == DeviceRequest(1, 1, 1, 1)


@pytest.mark.parametrize(
    ("keywords", "expected"),
    [
        ({"replicas": 2}, DeviceRequest(2, replicas=2)),
        ({"stages": 4}, DeviceRequest(4, stages=4)),
        ({"stages": 2, "replicas": 4}, DeviceRequest(8, replicas=4, stages=2)),
        ({"stages": 2, "replicas": 2, "ipus": 4}, DeviceRequest(4, replicas=2, stages=2)),
        ({"instances": 8}, DeviceRequest(1, instances=8)),
        ({"stages": 4, "replicas": 16, "instances": 2}, DeviceRequest(64, 16, 4, 2)),
        ({"replicas": 2, "backend": "poptorch"}, DeviceRequest(2, replicas=2)),  # not ours: ignored
    ],
)
def test_ipus_per_instance_is_stages_times_replicas(keywords, expected):
    assert parse_request(keywords, SRC) == expected


@pytest.mark.parametrize(
    ("keyword", "value", "message"),
    [
        ("ipus", 0, "invalid ipus=0: expected a positive int; write ipus=1 or more"),
        ("replicas", -1, "invalid replicas=-1: expected a positive int; write replicas=1 or more"),
        (
            "stages",
            "two",
            "invalid stages='two': expected a positive int, got str; write a number such as stages=1",
        ),
        (
            "instances",
            True,
            "invalid instances=True: expected a positive int, got bool; write a number such as instances=1",
        ),
        ("ipus", 2.0, "invalid ipus=2.0: expected a positive int, got float; write a number such as ipus=1"),
        (
            "replicas",
            None,
            "invalid replicas=None: expected a positive int, got NoneType; write a number such as replicas=1",
        ),
    ],
)
def test_bad_values_name_keyword_value_source_and_fix(keyword, value, message):
    with pytest.raises(ValueError, match=f"^{re.escape(SRC)}: {re.escape(message)}$") as info:
        parse_request({keyword: value}, SRC)
    assert "\n" not in str(info.value)


def test_ipus_must_equal_stages_times_replicas():
    message = (
        f"{SRC}: invalid ipus=2: stages x replicas is 2 x 2 = 4 IPUs per instance; "
        "write ipus=4 or leave ipus out"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_request({"ipus": 2, "stages": 2, "replicas": 2}, SRC)


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32, 64])
def test_powers_of_two_are_accepted(n):
    assert parse_request({"replicas": n}, SRC).ipus_per_instance == n
    assert is_power_of_two(n)


@pytest.mark.parametrize("n", [0, -2, 3, 5, 6, 12, 63])
def test_is_power_of_two_rejects(n):
    assert not is_power_of_two(n)


def test_non_power_of_two_is_rejected_naming_the_keywords():
    message = (
        f"{SRC}: invalid stages=3, replicas=1: 3 IPUs per instance is not a power of two, the only "
        "sizes multi-IPU devices come in; make stages x replicas a power of two: write stages=2 or stages=4"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_request({"stages": 3}, SRC)
    with pytest.raises(ValueError, match=r"^tests/test_x.py::test_a: invalid ipus=6: 6 IPUs per instance"):
        parse_request({"ipus": 6, "stages": 3, "replicas": 2}, SRC)


@pytest.mark.parametrize(
    ("mapping", "advice"),
    [
        # Each fix changes one keyword to a value that makes the product a power of two.
        ({"stages": 3, "replicas": 2}, "write stages=2 or stages=4"),
        ({"replicas": 3}, "write replicas=2 or replicas=4"),
        ({"stages": 48}, "write stages=32 or stages=64"),
        ({"stages": 24, "replicas": 2}, "write stages=16 or stages=32"),
        ({"stages": 3, "replicas": 3}, "make stages and replicas powers of two, e.g. stages=4, replicas=1"),
    ],
)
def test_non_power_of_two_advice_is_a_value_that_works(mapping, advice):
    with pytest.raises(ValueError, match=re.escape(advice) + "$"):
        parse_request(mapping, SRC)


def test_the_advice_names_no_keyword_the_marker_lacks():
    """Rounding up to idle IPUs (PopTorch's auto_round_num_ipus) is not a marker keyword: never advised."""
    with pytest.raises(ValueError, match="not a power of two") as info:
        parse_request({"stages": 3}, SRC)
    assert "auto_round" not in str(info.value)


@pytest.mark.parametrize("n", [1, 64])
def test_up_to_64_instances_are_accepted(n):
    assert parse_request({"instances": n}, SRC).instances == n


@pytest.mark.parametrize("n", [65, 10**6])
def test_more_than_64_instances_are_rejected_naming_the_range(n):
    message = (
        f"{SRC}: invalid instances={n}: expected 1 to 64 (one per IPU of the largest multi-IPU device); "
        "write instances=64 or fewer"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_request({"instances": n}, SRC)
    with pytest.raises(ValueError, match=r"^DeviceRequest: invalid instances="):
        DeviceRequest(instances=n)


def test_at_most_64_ipus_per_instance():
    message = (
        f"{SRC}: invalid stages=8, replicas=16: 128 IPUs per instance, more than the 64 of the "
        "largest multi-IPU device; use fewer stages x replicas per instance and more instances"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_request({"stages": 8, "replicas": 16}, SRC)
    with pytest.raises(ValueError, match=r"invalid stages=65, replicas=1: 65 IPUs per instance, more than"):
        parse_request({"stages": 65}, SRC)


def test_direct_construction_checks_the_same_rules():
    with pytest.raises(ValueError, match=r"^DeviceRequest: invalid replicas=0: expected a positive int"):
        DeviceRequest(replicas=0)
    with pytest.raises(ValueError, match=r"^DeviceRequest: invalid ipus_per_instance=2: stages x replicas"):
        DeviceRequest(2, replicas=1)
    with pytest.raises(ValueError, match=r"invalid ipus_per_instance=3: 3 IPUs per instance is not a power"):
        DeviceRequest(3, stages=3)


# --- allocate ------------------------------------------------------------------------------------


def test_c2_two_instances_one_ipu_each():
    # The ResNeXt-101 study: one independent session per IPU of a C2 board.
    inventory = ipus(0, 1, boards={0: "C2-0001", 1: "C2-0001"})
    placement = allocate(inventory, parse_request({"instances": 2}, SRC))
    assert placement == Placement(
        (InstancePlacement(0, (0,), 1, 1), InstancePlacement(1, (1,), 1, 1)),
    )
    assert placement.total_ipus == 2
    assert placement.ipu_ids == (0, 1)


def test_aligned_groups_of_two():
    placement = allocate(ipus(0, 1, 2, 3), parse_request({"instances": 2, "replicas": 2}, SRC))
    assert ids_of(placement) == [(0, 1), (2, 3)]
    assert [instance.index for instance in placement.instances] == [0, 1]
    assert placement.total_ipus == 4


def test_groups_never_straddle_an_alignment_boundary():
    # {1, 2} is not a multi-IPU device; only {2, 3} is.
    assert ids_of(allocate(ipus(1, 2, 3), parse_request({"replicas": 2}, SRC))) == [(2, 3)]
    with pytest.raises(PlacementError):
        allocate(ipus(1, 2, 5, 6), parse_request({"replicas": 2}, SRC))


def test_shortfall_names_what_was_asked_and_what_exists():
    with pytest.raises(PlacementError) as info:
        allocate(ipus(0, 1, 2), parse_request({"instances": 2, "replicas": 2}, SRC))
    assert str(info.value) == (
        "cannot place 2 instance(s) x 2 IPUs each = 4 IPUs in aligned groups of 2: the ipu inventory "
        "has 3 IPUs, ids [0, 1, 2], with 1 such group(s): {0, 1}; run where 4 IPUs or more can be seen "
        "(gc-info -l lists them; on a Pod, a larger partition) or ask for fewer instances, stages or replicas"
    )
    assert isinstance(info.value, ValueError)


def test_shortfall_on_an_empty_inventory():
    with pytest.raises(
        PlacementError, match=r"1 IPU each = 1 IPU .* has 0 IPUs, ids \[\], with 0 such group\(s\): none"
    ):
        allocate(ipus(), DeviceRequest())


def test_unsorted_inventory_is_placed_in_ascending_order():
    placement = allocate(ipus(7, 3, 5, 1, 0, 2), parse_request({"instances": 3}, SRC))
    assert ids_of(placement) == [(0,), (1,), (2,)]


def test_prefers_groups_on_one_board():
    boards = {0: "A", 1: "B", 2: "C", 3: "C", 4: "D", 5: "D"}
    placement = allocate(ipus(*range(6), boards=boards), parse_request({"replicas": 2}, SRC))
    assert ids_of(placement) == [(2, 3)]
    # When one-board groups run out, the rest are used, still in ascending order.
    placement = allocate(ipus(*range(6), boards=boards), parse_request({"replicas": 2, "instances": 3}, SRC))
    assert ids_of(placement) == [(0, 1), (2, 3), (4, 5)]


def test_unknown_boards_do_not_count_as_one_board():
    placement = allocate(ipus(0, 1, 2, 3, boards={2: "A", 3: "A"}), parse_request({"replicas": 2}, SRC))
    assert ids_of(placement) == [(2, 3)]


def test_stages_and_replicas_are_carried_to_each_instance():
    request = parse_request({"stages": 2, "replicas": 2, "instances": 2}, SRC)
    placement = allocate(ipus(*range(8)), request)
    assert placement.instances == (
        InstancePlacement(0, (0, 1, 2, 3), replicas=2, stages=2),
        InstancePlacement(1, (4, 5, 6, 7), replicas=2, stages=2),
    )


def test_inventory_rejects_bad_ids():
    with pytest.raises(ValueError, match=r"^Inventory: invalid device ids \[-1, True\]"):
        Inventory("ipu", (0, -1, True))
    with pytest.raises(ValueError, match=r"^Inventory: device ids \[0, 1, 1\] repeat an id"):
        Inventory("ipu", (0, 1, 1))


def test_placement_rejects_a_shared_ipu():
    with pytest.raises(PlacementError, match=r"IPU ids \[0, 1, 1\] give one IPU to two instances"):
        Placement((InstancePlacement(0, (0, 1), 2, 1), InstancePlacement(1, (1,), 1, 1)))


def test_as_json_round_trips():
    request = parse_request({"stages": 4, "instances": 2}, SRC)
    placement = allocate(ipus(*range(8)), request)
    record = placement.as_json()
    assert record == {
        "instances": [
            {"index": 0, "ipu_ids": [0, 1, 2, 3], "replicas": 1, "stages": 4},
            {"index": 1, "ipu_ids": [4, 5, 6, 7], "replicas": 1, "stages": 4},
        ],
    }
    assert json.loads(json.dumps(record)) == record


# --- properties ----------------------------------------------------------------------------------


@st.composite
def fitting_cases(draw):
    size = draw(st.sampled_from([1, 2, 4, 8]))
    ids = draw(st.sets(st.integers(0, 31), max_size=32))
    groups = {i // size for i in ids if all(j in ids for j in range(i - i % size, i - i % size + size))}
    if not groups:
        ids |= set(range(size))
        groups = {0}
    instances = draw(st.integers(1, len(groups)))
    stages = draw(st.sampled_from([s for s in (1, 2, 4, 8) if s <= size]))
    boards = draw(st.dictionaries(st.sampled_from(sorted(ids)), st.sampled_from("ABCD")))
    inventory = Inventory("ipu", tuple(draw(st.permutations(sorted(ids)))), boards)
    return inventory, parse_request(
        {"stages": stages, "ipus": size, "replicas": size // stages, "instances": instances}, SRC
    )


@settings(max_examples=200, deadline=None)
@given(fitting_cases())
def test_fitting_requests_are_placed_without_overlap_and_aligned(case):
    inventory, request = case
    placement = allocate(inventory, request)
    used = placement.ipu_ids
    assert len(used) == len(set(used))
    assert set(used) <= set(inventory.device_ids)
    assert placement.total_ipus == request.instances * request.ipus_per_instance
    assert [instance.index for instance in placement.instances] == list(range(request.instances))
    firsts = [instance.ipu_ids[0] for instance in placement.instances]
    assert firsts == sorted(firsts)
    for instance in placement.instances:
        size = request.ipus_per_instance
        assert len(instance.ipu_ids) == size
        assert instance.ipu_ids[0] % size == 0
        assert instance.ipu_ids == tuple(range(instance.ipu_ids[0], instance.ipu_ids[0] + size))
        assert (instance.replicas, instance.stages) == (request.replicas, request.stages)
    assert json.loads(json.dumps(placement.as_json())) == placement.as_json()


@settings(max_examples=100, deadline=None)
@given(st.sets(st.integers(0, 15), max_size=16), st.sampled_from([1, 2, 4]), st.integers(1, 8))
def test_allocate_either_fits_or_explains(ids, size, instances):
    request = DeviceRequest(size, replicas=size, instances=instances)
    inventory = Inventory("ipu", tuple(sorted(ids)))
    free = sum(1 for start in range(0, 16, size) if set(range(start, start + size)) <= ids)
    if free >= instances:
        assert allocate(inventory, request).total_ipus == instances * size
    else:
        asked = f"{instances} instance(s) x {size} IPU"
        with pytest.raises(
            PlacementError, match=rf"^cannot place {re.escape(asked)}.* ids {re.escape(str(sorted(ids)))}, "
        ):
            allocate(inventory, request)
