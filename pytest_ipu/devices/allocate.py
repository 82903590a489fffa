"""Which IPU ids each instance of a request gets (pure: no pytest, no SDK).

``allocate`` gives every instance its own contiguous group of IPU ids, aligned to the group size,
because that is how multi-IPU devices exist on real systems: a 2-IPU device is ids {0, 1} or
{2, 3}, never {1, 2}. Groups on one board are preferred.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field

from pytest_ipu.devices.request import DeviceRequest
from pytest_ipu.devices.request import ipus_text as _ipus
from pytest_ipu.results.codec import Coded


class PlacementError(ValueError):
    """The inventory cannot hold the request; the message says what was asked and what exists."""


@dataclass(frozen=True)
class Inventory:
    """The devices this process may use.

    ``device_ids`` are single-IPU ids as ``gc-info -l`` numbers them; ``board_of`` maps an IPU id
    to its board serial (IPUs missing from it are on an unknown board), so reports can say which
    IPUs share a board and ``allocate`` can keep an instance on one board.
    """

    kind: str
    device_ids: tuple[int, ...]
    board_of: Mapping[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = [i for i in self.device_ids if isinstance(i, bool) or not isinstance(i, int) or i < 0]
        if bad:
            raise ValueError(
                f"Inventory: invalid device ids {bad!r}: expected ints >= 0 as gc-info -l numbers them"
            )
        if len(set(self.device_ids)) != len(self.device_ids):
            raise ValueError(
                f"Inventory: device ids {list(self.device_ids)} repeat an id; list each IPU once"
            )


@dataclass(frozen=True)
class InstancePlacement(Coded):
    """One instance of the model: its index and the IPU ids (ascending) of its multi-IPU device."""

    index: int
    ipu_ids: tuple[int, ...]
    replicas: int
    stages: int


@dataclass(frozen=True)
class Placement(Coded):
    """Where each instance of a test's model runs."""

    instances: tuple[InstancePlacement, ...]

    def __post_init__(self) -> None:
        # A hook implementation may build its own Placement; two sessions on one IPU cannot attach.
        ids = self.ipu_ids
        if len(set(ids)) != len(ids):
            raise PlacementError(f"Placement: IPU ids {list(ids)} give one IPU to two instances")

    @property
    def ipu_ids(self) -> tuple[int, ...]:
        """Every IPU id in use, instance by instance (what a power source should read)."""
        return tuple(i for instance in self.instances for i in instance.ipu_ids)

    @property
    def total_ipus(self) -> int:
        """The number of IPUs all instances use together."""
        return len(self.ipu_ids)


def allocate(inventory: Inventory, request: DeviceRequest) -> Placement:
    """Give each instance a contiguous, aligned group of ``request.ipus_per_instance`` IPU ids.

    Groups start at a multiple of their size (a 2-IPU device is {0, 1} or {2, 3}), never overlap,
    and go to instances in ascending order of id. Groups whose IPUs all sit on one board (per
    ``inventory.board_of``) are preferred. Raises ``PlacementError`` when too few groups exist.
    """
    size = request.ipus_per_instance
    groups = _aligned_groups(inventory.device_ids, size)
    # Stable sort: one-board groups first, each kind in ascending order of id.
    ranked = sorted(groups, key=lambda group: not _on_one_board(group, inventory.board_of))
    if len(ranked) < request.instances:
        raise PlacementError(_shortfall_message(inventory, request, groups))
    chosen = sorted(ranked[: request.instances])
    return Placement(
        tuple(
            InstancePlacement(index, group, request.replicas, request.stages)
            for index, group in enumerate(chosen)
        )
    )


def _aligned_groups(device_ids: tuple[int, ...], size: int) -> list[tuple[int, ...]]:
    available = set(device_ids)
    starts = sorted({i - i % size for i in available})
    groups = [tuple(range(start, start + size)) for start in starts]
    return [group for group in groups if available.issuperset(group)]


def _on_one_board(group: tuple[int, ...], board_of: Mapping[int, str]) -> bool:
    boards = {board_of.get(i) for i in group}
    return len(boards) == 1 and None not in boards


def _shortfall_message(inventory: Inventory, request: DeviceRequest, groups: list[tuple[int, ...]]) -> str:
    size, count = request.ipus_per_instance, request.instances
    needed = size * count
    free = ", ".join("{" + ", ".join(map(str, group)) + "}" for group in groups) or "none"
    return (
        f"cannot place {count} instance(s) x {_ipus(size)} each = {_ipus(needed)} in aligned groups "
        f"of {size}: the {inventory.kind} inventory has {_ipus(len(inventory.device_ids))}, ids "
        f"{sorted(inventory.device_ids)}, with {len(groups)} such group(s): {free}; run where "
        f"{_ipus(needed)} or more can be seen (gc-info -l lists them; on a Pod, a larger partition) or "
        "ask for fewer instances, stages or replicas"
    )
