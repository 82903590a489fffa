"""IPU discovery: which IPUs this process can see, their architecture and the boards they sit on.

``discover`` asks, in order, the sources that can answer without attaching to any IPU (reference
``graphcore-sdk-api.md``): ``gcipuinfo`` (sections 0.3 and 4.1; ``"N/A"`` means unknown), PopART's
``DeviceManager().enumerateDevices()`` (section 2.2; nothing about boards), then PopTorch's
``ipuHardwareIsAvailable(n)`` and ``ipuHardwareVersion()`` (sections 0.1 and 6: only the size of the
largest power-of-two device and the architecture). Multi-IPU device ids come from PopART whenever it
imports (``devices.driver_ids``). Each SDK module is imported lazily (or injected by tests), so
importing this module imports no SDK, torch or onnx; a missing SDK is not an error: ``discover``
returns the reason as a string. ``simulator_inventory`` describes the IPU Model, whose JSON says its
timings are not hardware timings.

Documented in docs/ipu.md (sections "Targets and options" and "Placement: replicas, pipeline stages and
parallel instances").
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from types import ModuleType
from typing import Any

from pytest_ipu.devices import driver_ids
from pytest_ipu.devices.allocate import Inventory
from pytest_ipu.devices.request import MAX_IPUS_PER_INSTANCE
from pytest_ipu.devices.request import is_power_of_two
from pytest_ipu.processes import describe_error
from pytest_ipu.results.codec import Coded
from pytest_ipu.results.codec import Written
from pytest_ipu.results.codec import meta
from pytest_ipu.sdk import import_sdk

#: gcipuinfo attribute keys, as gcipuinfo and ``gc-info -i`` spell them (reference section 4.1).
KEY_ID = "id"
KEY_ARCHITECTURE = "ipu architecture"
KEY_BOARD_TYPE = "board type"
KEY_BOARD_SERIAL = "board serial number"
KEY_BOARD_IPU_INDEX = "board ipu index"

#: ``ipu architecture`` values (reference section 0.3); also the IPU Model's ``ipuVersion`` values.
ARCHITECTURES = ("ipu1", "ipu2", "ipu21")
#: What ``as_json`` says about timings measured on the IPU Model.
SIMULATED_TIMING = "simulated: IPU Model timings are not hardware timings"
HARDWARE_TIMING = "hardware"
#: PopTorch reserves at most this many IPUs per process; probing stops there.
_MAX_PROBE_IPUS = MAX_IPUS_PER_INSTANCE

_FIX = (
    "enable Graphcore's Poplar SDK in the shell that runs pytest (source the SDK's enable script) so "
    "that gcipuinfo, popart or poptorch imports, and check that `gc-info -l` lists IPUs; without "
    "hardware, use the IPU Model simulator"
)


@dataclass(frozen=True)
class IpuInfo(Coded):
    """One IPU as discovery saw it; ``None`` where the source does not say (or says ``N/A``)."""

    id: int
    architecture: str | None = None
    board_type: str | None = None
    board_serial: str | None = None
    board_ipu_index: int | None = None


def _ipus_json(ipus: tuple[IpuInfo, ...]) -> list[dict[str, Any]]:
    """The inventory's IPUs as JSON, in ascending id order."""
    return [ipu.as_json() for ipu in sorted(ipus, key=lambda ipu: ipu.id)]


@dataclass(frozen=True)
class IpuInventory(Written):
    """The IPUs found, in ascending id order, the source that listed them, and what it could not say.

    ``simulator`` is true for the IPU Model; ``notes`` carry what a reader of the results should
    know (sources that failed before this one, facts this source cannot give). Its JSON is
    ``machine_info["ipu"]["inventory"]``: the count, architecture and board types before the IPUs,
    and whether their timings are the hardware's (``timing``).
    """

    JSON_DERIVED = (
        ("count", ""),
        ("architecture", "count"),
        ("board_types", "architecture"),
        ("timing", "simulator"),
    )

    ipus: tuple[IpuInfo, ...] = field(metadata=meta(write=_ipus_json))
    source: str
    simulator: bool = False
    notes: tuple[str, ...] = ()
    #: Multi-IPU devices as the SDK lists them: ``(single-IPU ids ascending, device id)`` pairs, the
    #: ids translated from the device's ``driverIds``; empty when no SDK listing was available
    #: (``multi_device_id`` then derives ids).
    devices: tuple[tuple[tuple[int, ...], int], ...] = field(default=(), metadata=meta(written=False))
    #: PopART's two enumerations and their driver-id translation (``None``: popart gave none).
    id_table: driver_ids.DeviceTable | None = field(default=None, metadata=meta(written=False))

    def __post_init__(self) -> None:
        ids = [ipu.id for ipu in self.ipus]
        if len(set(ids)) != len(ids):
            raise ValueError(f"IpuInventory: IPU ids {ids} repeat an id; list each IPU once")

    @property
    def count(self) -> int:
        """How many IPUs were found."""
        return len(self.ipus)

    @property
    def ids(self) -> tuple[int, ...]:
        """The IPU ids, ascending."""
        return tuple(sorted(ipu.id for ipu in self.ipus))

    @property
    def architecture(self) -> str | None:
        """The architecture every IPU shares, or ``None`` when unknown or mixed."""
        found = {ipu.architecture for ipu in self.ipus}
        return found.pop() if len(found) == 1 else None

    @property
    def board_types(self) -> tuple[str, ...]:
        """The distinct known board types, sorted."""
        return tuple(sorted({ipu.board_type for ipu in self.ipus if ipu.board_type is not None}))

    @property
    def timing(self) -> str:
        """What its timings are: the hardware's, or the IPU Model's simulated ones."""
        return SIMULATED_TIMING if self.simulator else HARDWARE_TIMING

    def placement_inventory(self) -> Inventory:
        """The ``Inventory`` to allocate from: every IPU, grouped into boards by serial."""
        return Inventory(
            "ipu",
            self.ids,
            {ipu.id: ipu.board_serial for ipu in self.ipus if ipu.board_serial is not None},
        )

    def multi_device_id(self, group: tuple[int, ...]) -> int:
        """The ``gc-info -l`` device id of the device made of the IPUs ``group`` (ascending ids).

        A group of one IPU is that IPU's id. A larger group must be a power of two of consecutive
        ids starting at a multiple of its size, as multi-IPU devices are. Its id is the one the SDK
        listed for the device whose ``driverIds`` translate to those ids (``devices``); only an
        inventory without that listing derives it.

        Derived numbering (an assumption): ``gc-info -l`` lists the single IPUs ``0..N-1`` first,
        then every 2-IPU device, then every 4-IPU device, and so on, each size in ascending order of
        its first IPU; so on 16 IPUs the pairs are 16-23, the quads 24-27, the eights 28-29 and the
        whole 16 is 30. The reference (``graphcore-sdk-api.md`` sections 1.3, 2.2 and 4.3) only says
        that these ids name single- or multi-IPU devices; the order is the one our PopART and
        PopTorch fakes implement by default, and no SDK source states it.
        """
        label = f"multi_device_id({group!r})"
        _check_group_shape(label, group)
        size, first = len(group), group[0]
        ids = self.ids
        missing = [i for i in group if i not in ids]
        if missing:
            raise ValueError(
                f"{label}: IPU id(s) {', '.join(map(str, missing))} are not in this inventory "
                f"({_id_ranges(ids) or 'no IPUs'}); choose a group within it"
            )
        if size == 1:
            return first
        if self.devices:
            listed = dict(self.devices)
            if group in listed:
                return listed[group]
            sizes = sorted({len(g) for g in listed})
            raise ValueError(
                f"{label}: the SDK lists no device made of IPUs {group} (its multi-IPU devices have "
                f"{', '.join(map(str, sizes))} IPUs); look the device id up with `gc-info -l`"
            )
        total = len(ids)
        if ids != tuple(range(total)):
            raise ValueError(
                f"{label}: this inventory's ids ({_id_ranges(ids)}) are not 0..{total - 1} without gaps, "
                "so gc-info's multi-IPU numbering cannot be derived; look the device id up with "
                "`gc-info -l`"
            )
        offset, smaller = 0, 1
        while smaller < size:
            offset += total // smaller
            smaller *= 2
        return offset + first // size

    def members(self, device_id: int) -> tuple[int, ...]:
        """The single-IPU ids (ascending) of the device ``gc-info -l`` numbers ``device_id``: the IPU
        itself for a single IPU, the IPUs a multi-IPU device is made of otherwise.

        The inverse of ``multi_device_id``, with the same numbering (the SDK's listing when there is
        one, else the derived one). ``ValueError`` naming the id when no device of this inventory
        has it.
        """
        ids = self.ids
        if device_id in ids:
            return (device_id,)
        listed = {number: group for group, number in self.devices}
        if device_id in listed and set(listed[device_id]).issubset(ids):
            return listed[device_id]
        size = 2
        while size <= len(ids):
            for start in range(0, ids[-1] + 1, size):
                group = tuple(range(start, start + size))
                if not set(group).issubset(ids):
                    continue
                try:
                    if self.multi_device_id(group) == device_id:
                        return group
                except ValueError:
                    continue  # a group the SDK does not list, or ids with gaps (nothing to derive)
            size *= 2
        raise ValueError(
            f"device id {device_id} names no device made of this inventory's IPUs "
            f"({_id_ranges(ids) or 'no IPUs'}); `gc-info -l` lists the device ids"
        )


def simulator_inventory(num_ipus: int, architecture: str = "ipu2") -> IpuInventory:
    """The IPU Model (Poplar's simulator) with ``num_ipus`` IPUs of ``architecture``; no boards."""
    if isinstance(num_ipus, bool) or not isinstance(num_ipus, int) or num_ipus < 1:
        raise ValueError(
            f"simulator_inventory: invalid num_ipus={num_ipus!r}: expected a positive int; write num_ipus=1"
        )
    if architecture not in ARCHITECTURES:
        raise ValueError(
            f"simulator_inventory: invalid architecture={architecture!r}: expected one of "
            f"{', '.join(ARCHITECTURES)}; write architecture='ipu2'"
        )
    return IpuInventory(
        tuple(IpuInfo(i, architecture) for i in range(num_ipus)),
        "ipu-model",
        simulator=True,
        notes=(SIMULATED_TIMING,),
    )


def discover(
    *,
    gcipuinfo_module: ModuleType | None = None,
    popart_module: ModuleType | None = None,
    poptorch_module: ModuleType | None = None,
) -> IpuInventory | str:
    """The IPUs of this machine from the first source that lists any, or why none was found.

    Sources are tried in the order gcipuinfo, popart, poptorch; a module not given is imported by
    name, and one that fails to import (or to answer) hands over to the next. Never raises for a
    missing SDK: the returned string says what each source answered and how to fix it.
    """
    failures: list[str] = []
    sources = (
        ("gcipuinfo", gcipuinfo_module, _from_gcipuinfo),
        ("popart", popart_module, _from_popart),
        ("poptorch", poptorch_module, _from_poptorch),
    )
    for name, injected, read in sources:
        module = injected if injected is not None else _import(name, failures)
        if module is None:
            continue
        try:
            found = read(module)
        except Exception as exc:  # an SDK failing to answer (no driver, a broken install)
            failures.append(f"{name}: failed: {describe_error(exc)}")
            continue
        if isinstance(found, str):
            failures.append(f"{name}: {found}")
            continue
        table, table_notes = _device_table(found, popart_module if name != "popart" else module)
        notes = (*failures, *found.notes, *table_notes)
        devices = () if table is None else table.devices
        return IpuInventory(found.ipus, found.source, notes=notes, devices=devices, id_table=table)
    return f"no IPU found ({'; '.join(failures)}); {_FIX}"


#: The note an inventory carries when multi-IPU device ids could not be read from the SDK.
DERIVED_IDS = (
    "multi-IPU device ids derived from gc-info -l's numbering (not read from the SDK: {why}); "
    "check them with `gc-info -l`"
)


def _device_table(
    inventory: IpuInventory, popart: ModuleType | None
) -> tuple[driver_ids.DeviceTable | None, tuple[str, ...]]:
    """PopART's two enumerations and their translation (``devices.driver_ids``), with notes: why
    there is none (multi-IPU ids are then derived), each mismatch, and single-IPU ids that are not
    the inventory's. A single IPU needs no table unless popart was given (its backend translates
    the acquired device's ``driverIds``)."""
    if popart is None:
        if inventory.count < 2:
            return None, ()
        failures: list[str] = []
        popart = _import("popart", failures)
        if popart is None:
            return None, (DERIVED_IDS.format(why="; ".join(failures)),)
    try:
        table = driver_ids.read(popart, max(inventory.count, 1))
    except Exception as exc:  # an SDK failing to answer: fall back to the derived numbering, said so
        why = f"popart enumerateDevices failed: {describe_error(exc)}"
        return None, ((DERIVED_IDS.format(why=why),) if inventory.count > 1 else ())
    notes = [f"PopART device listing: {m}" for m in table.mismatches]
    singles = {d.id for d in table.singles}
    if singles and singles != set(inventory.ids):
        notes.append(
            f"PopART device listing: its single-IPU ids ({_id_ranges(tuple(sorted(singles)))}) are not "
            f"{inventory.source}'s ({_id_ranges(inventory.ids) or 'none'})"
        )
    return table, tuple(notes)


def _import(name: str, failures: list[str]) -> ModuleType | None:
    onnx_first = "onnx" in sys.modules
    try:
        return import_sdk(name)
    except Exception as exc:  # ImportError, or an SDK asserting at import (PopTorch checks torch)
        reason = f"{name}: not importable ({describe_error(exc)})"
        if name == "popart" and onnx_first and "onnx" in str(exc):
            # popart refuses to load once onnx is imported (reference section 0.2); its ImportError
            # says so, which tells this apart from popart simply being absent.
            reason += "; onnx was imported before popart, which popart refuses: import popart first"
        failures.append(reason)
        return None


def _from_gcipuinfo(module: ModuleType) -> IpuInventory | str:
    devices = module.gcipuinfo().getDevices()
    if not devices:
        return "lists no IPUs in the active partition"
    ipus = []
    for position, raw in enumerate(devices):
        attributes: Mapping[str, Any] = dict(raw)
        ipu_id = _int(attributes.get(KEY_ID))
        if ipu_id is None:
            return f"device {position} has no usable {KEY_ID!r} ({attributes.get(KEY_ID)!r})"
        ipus.append(
            IpuInfo(
                ipu_id,
                _text(attributes.get(KEY_ARCHITECTURE)),
                _text(attributes.get(KEY_BOARD_TYPE)),
                _text(attributes.get(KEY_BOARD_SERIAL)),
                _int(attributes.get(KEY_BOARD_IPU_INDEX)),
            )
        )
    ids = [ipu.id for ipu in ipus]
    if len(set(ids)) != len(ids):
        return f"lists an IPU id twice ({sorted(ids)})"
    return IpuInventory(tuple(sorted(ipus, key=lambda ipu: ipu.id)), "gcipuinfo")


def _from_popart(module: ModuleType) -> IpuInventory | str:
    # The defaults list single-IPU hardware devices (numIpus=1, deviceType=Ipu); nothing is attached.
    devices = module.DeviceManager().enumerateDevices()
    if not devices:
        return "DeviceManager().enumerateDevices() lists no IPU"
    # ipuVersion is the architecture; version is a driver version, unknown while not attached.
    ipus = tuple(sorted((IpuInfo(int(d.id), _text(d.ipuVersion)) for d in devices), key=lambda ipu: ipu.id))
    if len({ipu.id for ipu in ipus}) != len(ipus):
        return f"enumerateDevices() lists a device id twice ({[ipu.id for ipu in ipus]})"
    return IpuInventory(ipus, "popart", notes=("boards unknown: popart does not report board serials",))


def _from_poptorch(module: ModuleType) -> IpuInventory | str:
    try:
        present = bool(module.ipuHardwareIsAvailable(1))
        probe_sizes = True
    except TypeError:
        # PopTorch 1.x takes no argument (reference section 6): presence only.
        present = bool(module.ipuHardwareIsAvailable())
        probe_sizes = False
    if not present:
        return "ipuHardwareIsAvailable() is False (it is also False under POPTORCH_IPU_MODEL)"
    count = 1
    while probe_sizes and count * 2 <= _MAX_PROBE_IPUS and module.ipuHardwareIsAvailable(count * 2):
        count *= 2
    try:
        version = int(module.ipuHardwareVersion())
    except Exception:  # it asserts when no IPU is present; -1 means unknown
        version = -1
    architecture = f"ipu{version}" if version > 0 else None
    notes = [
        "boards unknown: poptorch reports only the largest power-of-two IPU device, so the count is "
        "that device's size (a lower bound) and the ids are assumed to be 0..count-1"
    ]
    if not probe_sizes:
        notes.append("this poptorch cannot probe device sizes: at least one IPU is present")
    return IpuInventory(tuple(IpuInfo(i, architecture) for i in range(count)), "poptorch", notes=tuple(notes))


def _text(value: object) -> str | None:
    """A gcipuinfo string, with ``N/A``, empty and absent all meaning unknown."""
    if value is None:
        return None
    text = str(value).strip()
    return None if text in ("", "N/A") else text


def _int(value: object) -> int | None:
    text = _text(value)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _id_ranges(ids: tuple[int, ...]) -> str:
    """``0-3, 6`` for ids (0, 1, 2, 3, 6)."""
    parts: list[str] = []
    start: int | None = None
    previous: int | None = None
    for i in ids:
        if previous is not None and i == previous + 1:
            previous = i
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = i
    if start is not None:
        parts.append(str(start) if start == previous else f"{start}-{previous}")
    return ", ".join(parts)


def _check_group_shape(label: str, group: tuple[int, ...]) -> None:
    """``ValueError`` (its message starting ``label``) unless ``group`` could be a device: IPU ids,
    consecutive and ascending, a power of two of them, starting at a multiple of their count."""
    if not group:
        raise ValueError(f"{label}: the group is empty; give the ids of at least one IPU")
    if any(isinstance(i, bool) or not isinstance(i, int) for i in group):
        raise ValueError(f"{label}: IPU ids must be ints; give ids as gc-info -l numbers them")
    size, first = len(group), group[0]
    if list(group) != list(range(first, first + size)):
        raise ValueError(
            f"{label}: the ids are not consecutive and ascending; a multi-IPU device is a run of "
            f"ids such as {tuple(range(size))}"
        )
    if not is_power_of_two(size):
        raise ValueError(
            f"{label}: a group of {size} IPUs is not a power of two, the only sizes multi-IPU "
            f"devices come in; use groups of 1, 2, 4, 8, ... IPUs"
        )
    if first % size:
        start = first - first % size
        raise ValueError(
            f"{label}: a {size}-IPU device starts at a multiple of {size}, not at {first}; use "
            f"{tuple(range(start, start + size))} or {tuple(range(start + size, start + 2 * size))}"
        )
