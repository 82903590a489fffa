"""PopART's ``driverIds`` and the ids ``gc-info -l`` prints: the table that translates one into the other.

``DeviceInfo.driverIds`` is Poplar's ``Device::getDriverIDs()`` (popart
``willow/include/popart/popx/devicexmanager.hpp:74-76``). Nothing public says those are the ids
``gc-info -l`` prints (gcipuinfo's ``"id"``, which ``acquireDeviceById`` takes and power readings are
keyed by): the header calls them "the version of the drivers on the IPU" (``devicemanager.hpp:207``),
and PopART's ``getChildIds`` (Poplar's ``DeviceManager::getChildDeviceIds``,
``willow/src/popx/devicexmanager.cpp:333-348``) has no Python binding. So the table is read from
``enumerateDevices(numIpus=1)`` (driver id -> device id) and ``numIpus=n`` for n = 2, 4, ...; what does
not fit is a mismatch (besides those docs/doctor.md lists, a multi-IPU device whose driver ids are not
as many as its IPUs): kept, said in one line, never guessed around.

Documented in docs/ipu.md (section "Targets and options") and docs/doctor.md (its step 3, IPU devices).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from types import ModuleType
from typing import Any

from pytest_ipu.results.codec import Coded
from pytest_ipu.results.codec import Written
from pytest_ipu.results.codec import meta

#: Largest device size asked for: PopTorch reserves at most 64 IPUs per process, and no partition a
#: benchmark runs on is larger.
MAX_DEVICE_IPUS = 64


@dataclass(frozen=True)
class ListedDevice(Coded):
    """One device as ``enumerateDevices`` listed it: its id, size and driver ids (in listing order),
    and the ``gc-info -l`` ids of its single IPUs (ascending), ``None`` where a driver id has no single
    IPU to translate to."""

    id: int
    num_ipus: int = field(metadata=meta(key="numIpus"))
    driver_ids: tuple[int, ...] = field(metadata=meta(key="driverIds"))
    ipu_ids: tuple[int, ...] | None


@dataclass(frozen=True)
class DeviceTable(Written):
    """Both enumerations, the translation they give, and every mismatch found.

    ``singles`` are the ``numIpus=1`` devices, ``multis`` the larger ones, each in listing order.
    Its JSON: both enumerations, the translation (driver id -> device id) and the mismatches.
    """

    JSON_DERIVED = (
        ("translation", "multi_ipu_devices", "driver_id_to_device_id"),
        ("ids_differ", "driver_id_to_device_id", "driver_ids_differ_from_device_ids"),
    )

    singles: tuple[ListedDevice, ...] = field(metadata=meta(key="single_ipu_devices"))
    multis: tuple[ListedDevice, ...] = field(metadata=meta(key="multi_ipu_devices"))
    mismatches: tuple[str, ...] = ()

    @property
    def translation(self) -> dict[int, int]:
        """Driver id -> ``gc-info -l`` id, from every single IPU that lists exactly one driver id, in
        ascending driver id."""
        found = {d.driver_ids[0]: d.id for d in self.singles if len(d.driver_ids) == 1}
        return dict(sorted(found.items()))

    @property
    def ids_differ(self) -> bool:
        """Whether some single IPU's driver id is not its device id (then only the translation is right)."""
        return any(driver != device for driver, device in self.translation.items())

    @property
    def devices(self) -> tuple[tuple[tuple[int, ...], int], ...]:
        """The multi-IPU devices whose driver ids all translate: ``(single-IPU ids, device id)`` pairs."""
        return tuple(sorted((d.ipu_ids, d.id) for d in self.multis if d.ipu_ids is not None))

    def ipu_ids(self, driver_ids: Iterable[int]) -> tuple[int, ...]:
        """The ``gc-info -l`` ids (ascending) of the IPUs with these driver ids (an acquired device's
        ``driverIds``); ``ValueError`` naming any driver id no single IPU has."""
        given = [int(i) for i in driver_ids]
        table = self.translation
        unknown = [i for i in given if i not in table]
        if unknown:
            raise ValueError(
                f"driverIds {given}: driver id(s) {', '.join(map(str, unknown))} belong to no single IPU of "
                f"enumerateDevices(numIpus=1) (its driver ids: {sorted(table) or 'none'}); run `pytest-ipu "
                "doctor` to see both enumerations"
            )
        return tuple(sorted(table[i] for i in given))

    def lines(self) -> list[str]:
        """The table as text, one line per device: ``doctor``'s section."""
        out = [f"numIpus=1: {len(self.singles)} device(s) (id <- driverIds)"]
        out += [f"  {d.id} <- {list(d.driver_ids)}" for d in self.singles]
        out.append(f"numIpus>1: {len(self.multis)} device(s) (id: driverIds -> gc-info ids)")
        out += [
            f"  {d.id} ({d.num_ipus} IPUs): {list(d.driver_ids)} -> "
            f"{'untranslatable' if d.ipu_ids is None else list(d.ipu_ids)}"
            for d in self.multis
        ]
        same = "differ from" if self.ids_differ else "equal"
        out.append(f"driver ids {same} the device ids; placement and energy use the translated ids")
        out += [f"MISMATCH: {m}" for m in self.mismatches]
        return out


def read(popart: ModuleType, max_ipus: int = MAX_DEVICE_IPUS) -> DeviceTable:
    """Both enumerations of ``popart.DeviceManager()`` (``numIpus=1``, then 2, 4, ... up to
    ``max_ipus`` or the first size with no device) and their translation. The SDK's own exceptions
    pass through: the caller says what failed."""
    manager = popart.DeviceManager()
    singles = [_listed(d) for d in manager.enumerateDevices(numIpus=1)]
    multis: list[tuple[int, int, tuple[int, ...]]] = []
    size = 2
    while size <= max(max_ipus, 1):
        listed = [_listed(d) for d in manager.enumerateDevices(numIpus=size)]
        if not listed:
            break
        multis.extend(listed)
        size *= 2
    return build(singles, multis)


def build(
    singles: Iterable[tuple[int, int, tuple[int, ...]]], multis: Iterable[tuple[int, int, tuple[int, ...]]]
) -> DeviceTable:
    """The table of ``(id, numIpus, driverIds)`` rows of both enumerations, with its mismatches."""
    mismatches: list[str] = []
    one: list[ListedDevice] = []
    owner: dict[int, int] = {}
    for device_id, num_ipus, driver_ids in singles:
        one.append(ListedDevice(device_id, num_ipus, driver_ids, (device_id,)))
        if len(driver_ids) != 1:
            mismatches.append(
                f"single-IPU device {device_id} lists driverIds {list(driver_ids)}, not exactly one; its "
                "driver id is unknown"
            )
            continue
        driver = driver_ids[0]
        if driver in owner:
            mismatches.append(
                f"single-IPU devices {owner[driver]} and {device_id} both list driver id {driver}; it "
                f"translates to {owner[driver]} only"
            )
            continue
        owner[driver] = device_id
    many: list[ListedDevice] = []
    for device_id, num_ipus, driver_ids in multis:
        unknown = [i for i in driver_ids if i not in owner]
        translated = None if unknown else tuple(sorted(owner[i] for i in driver_ids))
        if unknown:
            mismatches.append(
                f"{num_ipus}-IPU device {device_id} lists driver id(s) {', '.join(map(str, unknown))}, which "
                "no single-IPU device has: its IPUs are unknown"
            )
        elif len(set(driver_ids)) != num_ipus:
            mismatches.append(
                f"{num_ipus}-IPU device {device_id} lists {len(set(driver_ids))} distinct driver id(s) "
                f"{list(driver_ids)}, not {num_ipus}"
            )
        many.append(ListedDevice(device_id, num_ipus, driver_ids, translated))
    return DeviceTable(tuple(one), tuple(many), tuple(mismatches))


def _listed(device: Any) -> tuple[int, int, tuple[int, ...]]:
    """``(id, numIpus, driverIds)`` of a ``DeviceInfo`` as plain ints (pybind11 gives a list)."""
    return int(device.id), int(device.numIpus), tuple(int(i) for i in device.driverIds)
