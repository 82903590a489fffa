"""Device placement: a ``DeviceRequest`` from the marker becomes a ``Placement`` of IPU ids.

A request asks for ``instances`` independent copies of a model, each spanning
``stages x replicas`` IPUs. ``allocate`` gives every instance its own contiguous group of IPU ids,
aligned to the group size, because that is how multi-IPU devices exist on real systems: a 2-IPU
device is ids {0, 1} or {2, 3}, never {1, 2}. Graphcore's ResNeXt-101 study (several independent
single-IPU sessions on C2 boards) is ``instances=N`` with one IPU each.

This module is pure: no pytest, no SDK. The ``pytest_ipu_allocate`` hook defaults to ``allocate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field

#: The marker keywords ``parse_request`` reads; the marker owns the whitelist of the others.
KEYWORDS = ("ipus", "replicas", "stages", "instances")

#: The largest multi-IPU device (an IPU-POD64 partition); no single instance can span more.
MAX_IPUS_PER_INSTANCE = 64


class PlacementError(ValueError):
    """The inventory cannot hold the request; the message says what was asked and what exists."""


def is_power_of_two(n: int) -> bool:
    """Whether ``n`` is 1, 2, 4, 8, ...: the sizes multi-IPU devices come in."""
    return n > 0 and n & (n - 1) == 0


def _round_up_to_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class DeviceRequest:
    """What one test asks for: ``instances`` copies of a model, each on ``ipus_per_instance`` IPUs.

    ``ipus_per_instance`` is ``stages x replicas``, rounded up to a power of two when
    ``parse_request(..., auto_round=True)`` had to; ``rounded_from`` then holds the unrounded count.
    Build it with ``parse_request`` for messages that name the marker keyword; constructing it
    directly checks the same rules.
    """

    ipus_per_instance: int = 1
    replicas: int = 1
    stages: int = 1
    instances: int = 1
    rounded_from: int | None = None

    def __post_init__(self) -> None:
        source = "DeviceRequest"
        for name in ("ipus_per_instance", "replicas", "stages", "instances"):
            _positive_int(name, getattr(self, name), source)
        product = self.stages * self.replicas
        # Either the product itself, or (after auto-rounding) the power of two just above it.
        expected = product if self.rounded_from is None else _round_up_to_power_of_two(product)
        rounded_from_ok = self.rounded_from in (None, product) and expected != self.rounded_from
        if not rounded_from_ok or self.ipus_per_instance != expected:
            raise ValueError(
                f"{source}: invalid ipus_per_instance={self.ipus_per_instance} with "
                f"rounded_from={self.rounded_from}: stages x replicas is {self.stages} x "
                f"{self.replicas} = {product}; build requests with parse_request()"
            )
        _check_size(self.ipus_per_instance, f"ipus_per_instance={self.ipus_per_instance}", source)


def parse_request(mapping: Mapping[str, object], source: str, *, auto_round: bool = False) -> DeviceRequest:
    """Build a ``DeviceRequest`` from the marker keywords ``ipus``, ``replicas``, ``stages``, ``instances``.

    Each is a positive int and defaults to 1, except ``ipus``, which defaults to
    ``stages x replicas`` and must equal it when given. An instance's IPU count must be a power of two
    of at most 64; with ``auto_round=True`` it is rounded up instead and ``rounded_from`` records
    the count asked for. Other keys are ignored. Raises ``ValueError`` naming the keyword, the value,
    ``source`` (say, the node id) and the fix.
    """
    stages = _positive(mapping, "stages", source)
    replicas = _positive(mapping, "replicas", source)
    instances = _positive(mapping, "instances", source)
    product = stages * replicas
    if "ipus" in mapping:
        ipus = _positive(mapping, "ipus", source)
        if ipus != product:
            raise ValueError(
                f"{source}: invalid ipus={ipus}: stages x replicas is {stages} x {replicas} = "
                f"{_ipus(product)} per instance; write ipus={product} or leave ipus out"
            )
        asked = f"ipus={ipus}"
    else:
        asked = f"stages={stages}, replicas={replicas}"
    if auto_round and not is_power_of_two(product) and product <= MAX_IPUS_PER_INSTANCE:
        rounded = _round_up_to_power_of_two(product)
        return DeviceRequest(rounded, replicas, stages, instances, rounded_from=product)
    _check_size(product, asked, source)
    return DeviceRequest(product, replicas, stages, instances)


def _positive(mapping: Mapping[str, object], name: str, source: str) -> int:
    return _positive_int(name, mapping.get(name, 1), source)


def _positive_int(name: str, value: object, source: str) -> int:
    # bool is an int subclass, but ipus=True is a mistake, not a request for one IPU.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"{source}: invalid {name}={value!r}: expected a positive int, got "
            f"{type(value).__name__}; write a number such as {name}=1"
        )
    if value < 1:
        raise ValueError(
            f"{source}: invalid {name}={value!r}: expected a positive int; write {name}=1 or more"
        )
    return value


def _check_size(ipus: int, asked: str, source: str) -> None:
    if ipus > MAX_IPUS_PER_INSTANCE:
        raise ValueError(
            f"{source}: invalid {asked}: {ipus} IPUs per instance, more than the "
            f"{MAX_IPUS_PER_INSTANCE} of the largest multi-IPU device; use fewer stages x replicas "
            "per instance and more instances"
        )
    if not is_power_of_two(ipus):
        up = _round_up_to_power_of_two(ipus)
        raise ValueError(
            f"{source}: invalid {asked}: {ipus} IPUs per instance is not a power of two, the only "
            f"sizes multi-IPU devices come in; make stages x replicas {up}, or pass auto_round=True "
            f"to round up to {up} IPUs"
        )


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
class InstancePlacement:
    """One instance of the model: its index and the IPU ids (ascending) of its multi-IPU device."""

    index: int
    ipu_ids: tuple[int, ...]
    replicas: int
    stages: int

    def as_json(self) -> dict[str, object]:
        """Plain JSON types only, for the benchmark record."""
        return {
            "index": self.index,
            "ipu_ids": list(self.ipu_ids),
            "replicas": self.replicas,
            "stages": self.stages,
        }


@dataclass(frozen=True)
class Placement:
    """Where each instance of a test's model runs; ``rounded_from`` as in ``DeviceRequest``."""

    instances: tuple[InstancePlacement, ...]
    rounded_from: int | None = None

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

    def as_json(self) -> dict[str, object]:
        """Plain JSON for the benchmark record; ``rounded_from`` only when auto-rounding happened."""
        out: dict[str, object] = {"instances": [instance.as_json() for instance in self.instances]}
        if self.rounded_from is not None:
            out["rounded_from"] = self.rounded_from
        return out


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
        ),
        rounded_from=request.rounded_from,
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


def _ipus(n: int) -> str:
    return "1 IPU" if n == 1 else f"{n} IPUs"
