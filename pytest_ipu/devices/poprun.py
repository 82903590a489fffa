"""PopRun's devices: which instance of a launch this process is, and the IPUs PopDist gives it.

``detect`` reads ``popdist``'s getters (``isPopdistEnvSet()``, ``getInstanceIndex()`` in
``[0, getNumInstances())``, ``getLocalInstanceIndex()``, ``getNumLocalReplicas()``,
``getNumTotalReplicas()``, ``getNumIpusPerReplica()``; reference ``graphcore-sdk-api.md`` section 5.1)
into a ``PopRunInstance``.
The reference names none of the environment variables PopRun sets (and popdist's source is not public),
so without the ``popdist`` module a process is taken to be outside PopRun. ``instance_device`` asks
PopDist for this instance's device (``popdist.getDeviceId``), and ``InstanceInventory`` limits placement
to its IPUs. The launch's files are ``placement.poprun``'s; their merge is ``results.launch_merge``'s.

Documented in docs/ipu.md (section "PopRun and PopDist").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType

from pytest_ipu.devices.allocate import Inventory
from pytest_ipu.devices.inventory import IpuInventory
from pytest_ipu.results.codec import Coded
from pytest_ipu.sdk import import_sdk


@dataclass(frozen=True)
class PopRunInstance(Coded):
    """This process's place in a PopRun launch.

    ``index`` of ``count`` instances (``local_index`` among those on this host), running
    ``replicas_local`` of the launch's ``replicas_total`` replicas, each on ``ipus_per_replica`` IPUs.
    """

    index: int
    count: int
    local_index: int
    replicas_local: int
    replicas_total: int
    ipus_per_replica: int

    def __post_init__(self) -> None:
        _check(self.as_json(), "PopRunInstance")


#: ``PopRunInstance`` field -> the popdist getter that gives it.
GETTERS: Mapping[str, str] = {
    "index": "getInstanceIndex",
    "count": "getNumInstances",
    "local_index": "getLocalInstanceIndex",
    "replicas_local": "getNumLocalReplicas",
    "replicas_total": "getNumTotalReplicas",
    "ipus_per_replica": "getNumIpusPerReplica",
}


def detect(popdist_module: ModuleType | None = None) -> PopRunInstance | None:
    """This process's ``PopRunInstance``, or ``None`` when it was not launched by PopRun.

    ``popdist`` is imported lazily unless given; a process without it is not under PopRun.
    Raises ``ValueError`` naming the popdist getter and its value when PopRun's settings are
    inconsistent (say, an instance index not below the instance count).
    """
    module = popdist_module
    if module is None:
        try:
            module = import_sdk("popdist")
        except ImportError:
            return None
    if not module.isPopdistEnvSet():
        return None
    values: dict[str, object] = {}
    for name, getter in GETTERS.items():
        try:
            values[name] = getattr(module, getter)()
        except Exception as exc:
            raise ValueError(
                f"popdist.{getter}() failed under PopRun: {type(exc).__name__}: {exc}; check the "
                "poprun command line"
            ) from None
    labels = {name: f"popdist.{getter}()" for name, getter in GETTERS.items()}
    return PopRunInstance(**_check(values, "popdist", labels))


def _check(
    values: Mapping[str, object], source: str, labels: Mapping[str, str] | None = None
) -> dict[str, int]:
    """The values as ints; ``ValueError`` for one that no PopRun launch can have, naming it and the fix."""

    def label(name: str) -> str:
        return labels[name] if labels else f"{source}.{name}"

    checked: dict[str, int] = {}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(
                f"{label(name)} = {value!r} is not an int; check the poprun command line and the "
                "popdist installation"
            )
        minimum = 0 if name in ("index", "local_index") else 1
        if value < minimum:
            raise ValueError(
                f"{label(name)} = {value} is below {minimum}; check the poprun command line "
                "(--num-instances, --num-replicas, --ipus-per-replica)"
            )
        checked[name] = value
    count = checked["count"]
    for name in ("index", "local_index"):
        if checked[name] >= count:
            raise ValueError(
                f"{label(name)} = {checked[name]} is not below {label('count')} = {count}; an instance "
                f"index lies in [0, {count}): check the poprun command line (--num-instances)"
            )
    if checked["replicas_local"] > checked["replicas_total"]:
        raise ValueError(
            f"{label('replicas_local')} = {checked['replicas_local']} exceeds {label('replicas_total')} "
            f"= {checked['replicas_total']}; check the poprun command line (--num-replicas)"
        )
    return checked


@dataclass(frozen=True)
class PopRunDevice:
    """The device PopDist gives this instance: its ``gc-info -l`` id and the IPU ids it is made of.

    ``device_id`` is ``popdist.getDeviceId(ipus_per_replica)``: a device of ``replicas_local x
    ipus_per_replica`` IPUs, the instance's share of the launch. That it has this size, and which
    IPUs each instance gets, are not documented (the popdist source is not public): the size is
    what ``popdist.poptorch.Options`` needs for its local replicas, and the IPUs are read back from
    the inventory's device listing (PopART's ``driverIds`` translated into ``gc-info -l`` ids,
    ``devices.driver_ids``; derived from ``gc-info -l``'s numbering only without popart).
    """

    instance: PopRunInstance
    device_id: int
    ipu_ids: tuple[int, ...]

    @property
    def note(self) -> str:
        """One line for the inventory's notes: which IPUs this instance places its models on."""
        return (
            f"PopRun instance {self.instance.index} of {self.instance.count}: placement uses only IPU(s) "
            f"{', '.join(map(str, self.ipu_ids))}, device {self.device_id} "
            f"(popdist.getDeviceId({self.instance.ipus_per_replica}))"
        )


@dataclass(frozen=True)
class InstanceInventory(IpuInventory):
    """Every IPU of the machine, as discovered, but placement only on the IPUs of ``device``.

    The whole inventory stays, because multi-IPU device ids are numbered over all of it
    (``multi_device_id``); ``placement_inventory`` gives ``allocate`` the instance's IPUs only, so
    the instances of one launch never choose the same ones.
    """

    device: PopRunDevice | None = None

    def placement_inventory(self) -> Inventory:
        """The instance's IPUs only (all IPUs when no device is set), grouped into boards by serial."""
        whole = super().placement_inventory()
        if self.device is None:
            return whole
        ids = tuple(i for i in whole.device_ids if i in self.device.ipu_ids)
        instance = self.device.instance
        return Inventory(
            f"{whole.kind} (PopRun instance {instance.index} of {instance.count}, device "
            f"{self.device.device_id})",
            ids,
            {i: board for i, board in whole.board_of.items() if i in ids},
        )


def instance_device(inventory: IpuInventory, popdist_module: ModuleType | None = None) -> PopRunDevice | None:
    """This instance's ``PopRunDevice`` (the IPUs of ``popdist.getDeviceId``), or ``None`` outside PopRun.

    ``popdist`` is imported lazily unless given. ``ValueError`` (one line: the getter, its value
    and the fix) when PopDist's device id is not an int or names no device of the right size in
    ``inventory``.
    """
    instance = detect(popdist_module)
    if instance is None:
        return None
    module = popdist_module if popdist_module is not None else import_sdk("popdist")
    per_replica = instance.ipus_per_replica
    getter = f"popdist.getDeviceId({per_replica})"
    try:
        device_id = module.getDeviceId(per_replica)
    except Exception as exc:
        raise ValueError(
            f"{getter} failed under PopRun: {type(exc).__name__}: {exc}; check the poprun command line"
        ) from None
    if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
        raise ValueError(
            f"{getter} = {device_id!r} is not a device id (an int >= 0); check the popdist installation"
        )
    size = instance.replicas_local * per_replica
    return PopRunDevice(instance, device_id, _device_ipus(inventory, device_id, size, getter))


def instance_inventory(inventory: IpuInventory, device: PopRunDevice) -> InstanceInventory:
    """``inventory`` with placement limited to ``device``'s IPUs, and a note saying so."""
    # Every field the discovered inventory has, whatever they are, so nothing it found is lost.
    fields = {f.name: getattr(inventory, f.name) for f in dataclasses.fields(IpuInventory)}
    fields["notes"] = (*inventory.notes, device.note)
    return InstanceInventory(**fields, device=device)


def placeable(inventory: IpuInventory, popdist_module: ModuleType | None = None) -> IpuInventory | str:
    """The IPUs a backend may place on: ``inventory`` itself outside PopRun, only this instance's
    device under it (every instance sees every IPU, so placing from all of them would give each
    instance the same ids); the reason, as a string, when PopDist's device cannot be read."""
    try:
        device = instance_device(inventory, popdist_module)
    except ValueError as exc:
        return f"cannot place under PopRun: {exc}"
    return inventory if device is None else instance_inventory(inventory, device)


def device_for_model(inventory: InstanceInventory, needed: int, how: str) -> int | None:
    """The device id a model of ``needed`` IPUs (``how`` says what makes that number) compiles on
    under PopRun: the instance's whole device, or its first aligned part; ``None`` without a
    device (outside PopRun). Without an id the SDK takes any free IPUs, which may be another
    instance's, and the energy read for them would not be this instance's.

    ``ValueError`` starting ``needs N IPUs (how), but PopRun instance ...`` when the instance's
    device has fewer; the caller puts the model's name in front.
    """
    device = inventory.device
    if device is None:
        return None
    have = len(device.ipu_ids)
    if needed > have:
        instance = device.instance
        raise ValueError(
            f"needs {needed} IPUs ({how}), but PopRun instance {instance.index} of {instance.count} has "
            f"{have} (device {device.device_id}, IPUs {', '.join(map(str, device.ipu_ids))}: "
            f"{instance.replicas_local} local replica(s) x {instance.ipus_per_replica} IPU(s)); launch "
            "poprun with --ipus-per-replica and --num-replicas giving each instance that many"
        )
    if needed == have:
        return device.device_id
    first = device.ipu_ids[0]
    return inventory.multi_device_id(tuple(range(first, first + needed))) if needed > 1 else first


def _device_ipus(inventory: IpuInventory, device_id: int, size: int, getter: str) -> tuple[int, ...]:
    """The IPU ids of device ``device_id``, which must have ``size`` IPUs, by the inventory's numbering."""
    ids = inventory.ids
    try:
        members = inventory.members(device_id)
    except ValueError:
        members = ()
    if len(members) == size:
        return members
    raise ValueError(
        f"{getter} = {device_id} is not a device of {size} IPU(s) (local replicas x IPUs per replica) "
        f"among this machine's IPUs {list(ids)} as gc-info -l numbers them; check the poprun command line "
        "(--num-replicas, --ipus-per-replica) against `gc-info -l`"
    )
