"""A scriptable stand-in for ``pynvml``, the module of NVIDIA's ``nvidia-ml-py`` 13.615.71.

It mirrors the names, argument shapes, return types and errors of that release's ``pynvml.py``
(NVML API 13) for the calls ``pytest_ipu.power.nvml`` makes:

- ``NVMLError(value)`` with ``.value`` and ``str()`` giving NVML's error string ("Not Supported"),
  and per-code subclasses such as ``NVMLError_NotSupported`` that ``NVMLError(3)`` turns into;
- ``nvmlInit`` / ``nvmlShutdown`` with NVML's reference count (a call while not initialised
  raises ``Uninitialized``, as the library does);
- ``nvmlDeviceGetCount``, ``nvmlDeviceGetHandleByIndex`` / ``ByUUID`` / ``ByPciBusId``,
  ``nvmlDeviceGetUUID`` / ``GetName`` (``str``, as 13.x decodes them), ``nvmlDeviceGetPciInfo``
  (a struct whose ``busId`` is ``"00000000:01:00.0"``);
- ``nvmlDeviceGetTotalEnergyConsumption`` (int mJ; ``NOT_SUPPORTED`` on a "pre-Volta" GPU);
- ``nvmlDeviceGetFieldValues(handle, fieldIds)`` returning a ctypes array of
  ``c_nvmlFieldValue_t`` with the real field names (``fieldId``, ``scopeId``, ``timestamp``,
  ``latencyUsec``, ``valueType``, ``nvmlReturn``, ``value``) and the real value union
  ``c_nvmlValue_t`` (``dVal``, ``uiVal``, ``ulVal``, ``ullVal``, ``sllVal``, ``siVal``, ``usVal``);
- power limits (mW), persistence mode, driver and NVML version strings, and the MIG calls
  ``nvmlDeviceGetMaxMigDeviceCount`` / ``nvmlDeviceGetMigDeviceHandleByIndex`` /
  ``nvmlDeviceGetDeviceHandleFromMigDeviceHandle``.

Each fake GPU's sensor follows a scripted function of a fake nanosecond clock, published every
``update_period_s`` (the value holds between updates, like NVML's), so tests are deterministic.
``call_latency_s`` advances the clock on every sensor call, the way a real driver call takes time.
``nvmlDeviceGetPowerUsage`` exists but is counted, so tests can assert it is never used.
"""

from __future__ import annotations

import ctypes
import math
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from typing import Any

# Return codes and constants, with nvidia-ml-py 13.615.71's values.
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_FI_DEV_POWER_INSTANT = 186
NVML_FI_DEV_POWER_AVERAGE = 185
NVML_POWER_SCOPE_GPU = 0
NVML_POWER_SCOPE_MODULE = 1

NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1

_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """NVML's error: ``NVMLError(code)`` becomes the code's subclass, ``str`` is NVML's text."""

    _subclasses: dict[int, type[NVMLError]] = {}  # noqa: RUF012 - filled below, like pynvml's mapping
    value: int

    def __new__(cls, value: int, *args: Any) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._subclasses.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int, *args: Any) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


class NVMLError_NotSupported(NVMLError):
    """``NVML_ERROR_NOT_SUPPORTED``."""


class NVMLError_DriverNotLoaded(NVMLError):
    """``NVML_ERROR_DRIVER_NOT_LOADED``."""


class NVMLError_Uninitialized(NVMLError):
    """``NVML_ERROR_UNINITIALIZED``."""


NVMLError._subclasses.update(
    {
        NVML_ERROR_NOT_SUPPORTED: NVMLError_NotSupported,
        NVML_ERROR_DRIVER_NOT_LOADED: NVMLError_DriverNotLoaded,
        NVML_ERROR_UNINITIALIZED: NVMLError_Uninitialized,
    }
)


class c_nvmlValue_t(ctypes.Union):
    """The value union of ``nvmlFieldValue_t`` (same members and C types as pynvml's)."""

    _fields_ = (
        ("dVal", ctypes.c_double),
        ("uiVal", ctypes.c_uint),
        ("ulVal", ctypes.c_ulong),
        ("ullVal", ctypes.c_ulonglong),
        ("sllVal", ctypes.c_longlong),
        ("siVal", ctypes.c_int),
        ("usVal", ctypes.c_ushort),
    )


class c_nvmlFieldValue_t(ctypes.Structure):
    """One field value, laid out like pynvml's ``c_nvmlFieldValue_t``."""

    _fields_ = (
        ("fieldId", ctypes.c_uint32),
        ("scopeId", ctypes.c_uint32),
        ("timestamp", ctypes.c_int64),
        ("latencyUsec", ctypes.c_int64),
        ("valueType", ctypes.c_uint),
        ("nvmlReturn", ctypes.c_uint),
        ("value", c_nvmlValue_t),
    )


class nvmlPciInfo_t(ctypes.Structure):
    """The part of pynvml's PCI info struct this project reads (``busId`` and its parts)."""

    _fields_ = (
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    )

    def __getattribute__(self, name: str) -> Any:
        # pynvml's _PrintableStructure decodes char arrays to str on Python 3.
        value = super().__getattribute__(name)
        return value.decode() if isinstance(value, bytes) else value


class FakeClock:
    """A nanosecond clock that moves only when told to (or by ``FakeNvml.call_latency_s``)."""

    def __init__(self, start_s: float = 1000.0) -> None:
        self.ns = int(start_s * 1e9)

    def __call__(self) -> int:
        return self.ns

    @property
    def s(self) -> float:
        """The time in seconds."""
        return self.ns / 1e9

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.ns += round(seconds * 1e9)


@dataclass
class FakeGpu:
    """One fake GPU. ``power_w(t)`` is its true draw at fake time ``t`` (seconds).

    The energy counter integrates the draw (exactly, for the default constant power) and, like the
    instant-power field, publishes a new value only every ``update_period_s``. ``energy_mj(t)``
    overrides the raw counter (to script a driver reload), ``power_mw(t)`` the field's raw value.
    """

    uuid: str
    pci_bus_id: str
    name: str = "NVIDIA H100 80GB HBM3"
    watts: float = 250.0
    energy_at_zero_mj: int = 5_000_000
    supports_energy: bool = True
    update_period_s: float = 0.1
    energy_mj: Callable[[float], int] | None = None
    power_mw: Callable[[float], float] | None = None
    field_return: int = NVML_SUCCESS
    field_value_type: int = NVML_VALUE_TYPE_UNSIGNED_INT
    power_limit_mw: int | None = 700_000
    enforced_power_limit_mw: int | None = 700_000
    persistence_mode: int | None = NVML_FEATURE_ENABLED
    mig_uuids: tuple[str, ...] = ()
    energy_error: int | None = None  # an error every energy read raises from now on
    calls: Counter[str] = field(default_factory=Counter)

    def published_time(self, t: float) -> float:
        """The time of the sensor's latest published update at ``t``."""
        if self.update_period_s <= 0:
            return t
        return math.floor(t / self.update_period_s + 1e-9) * self.update_period_s

    def raw_energy_mj(self, t: float) -> int:
        """The counter value NVML would return at ``t``."""
        tp = self.published_time(t)
        if self.energy_mj is not None:
            return int(self.energy_mj(tp))
        return self.energy_at_zero_mj + round(self.watts * tp * 1000)

    def raw_power_mw(self, t: float) -> float:
        """The instant-power field value NVML would return at ``t``."""
        tp = self.published_time(t)
        if self.power_mw is not None:
            return self.power_mw(tp)
        return self.watts * 1000


class FakeHandle:
    """An opaque device handle (pynvml's is a ctypes pointer)."""

    def __init__(self, gpu: FakeGpu, mig_index: int | None = None) -> None:
        self.gpu = gpu
        self.mig_index = mig_index


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class FakeNvml(types.ModuleType):
    """A ``pynvml`` module over a list of fake GPUs, in NVML enumeration order.

    ``init_error`` makes ``nvmlInit`` fail with that code. ``init_calls`` and ``shutdown_calls``
    count the calls that succeeded, ``refcount`` is NVML's initialisation count, ``calls`` counts
    every API call by name.
    """

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_Uninitialized = NVMLError_Uninitialized
    c_nvmlFieldValue_t = c_nvmlFieldValue_t
    c_nvmlValue_t = c_nvmlValue_t
    NVML_SUCCESS = NVML_SUCCESS
    NVML_ERROR_UNINITIALIZED = NVML_ERROR_UNINITIALIZED
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NOT_FOUND = NVML_ERROR_NOT_FOUND
    NVML_ERROR_DRIVER_NOT_LOADED = NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_FI_DEV_POWER_INSTANT = NVML_FI_DEV_POWER_INSTANT
    NVML_FI_DEV_POWER_AVERAGE = NVML_FI_DEV_POWER_AVERAGE
    NVML_POWER_SCOPE_GPU = NVML_POWER_SCOPE_GPU
    NVML_POWER_SCOPE_MODULE = NVML_POWER_SCOPE_MODULE
    NVML_VALUE_TYPE_DOUBLE = NVML_VALUE_TYPE_DOUBLE
    NVML_VALUE_TYPE_UNSIGNED_INT = NVML_VALUE_TYPE_UNSIGNED_INT
    NVML_VALUE_TYPE_UNSIGNED_LONG = NVML_VALUE_TYPE_UNSIGNED_LONG
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = NVML_VALUE_TYPE_SIGNED_LONG_LONG
    NVML_VALUE_TYPE_SIGNED_INT = NVML_VALUE_TYPE_SIGNED_INT
    NVML_VALUE_TYPE_UNSIGNED_SHORT = NVML_VALUE_TYPE_UNSIGNED_SHORT
    NVML_FEATURE_DISABLED = NVML_FEATURE_DISABLED
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        clock: FakeClock | None = None,
        init_error: int | None = None,
        call_latency_s: float = 0.0,
        driver_version: str | None = "550.54.15",
        nvml_version: str | None = "12.550.54.15",
    ) -> None:
        super().__init__("pynvml")
        self.gpus = gpus
        self.clock = clock if clock is not None else FakeClock()
        self.init_error = init_error
        self.call_latency_s = call_latency_s
        self.driver_version = driver_version
        self.nvml_version = nvml_version
        self.refcount = 0
        self.init_calls = 0
        self.shutdown_calls = 0
        self.calls: Counter[str] = Counter()

    # -- library lifetime ----------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.refcount += 1
        self.init_calls += 1

    def nvmlShutdown(self) -> None:
        self.calls["nvmlShutdown"] += 1
        self._check_init()
        self.refcount -= 1
        self.shutdown_calls += 1

    def _check_init(self) -> None:
        if self.refcount <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _call(self, name: str) -> None:
        self.calls[name] += 1
        self._check_init()

    # -- system ----------------------------------------------------------------------------------------

    def nvmlSystemGetDriverVersion(self) -> str:
        self._call("nvmlSystemGetDriverVersion")
        if self.driver_version is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return self.driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._call("nvmlSystemGetNVMLVersion")
        if self.nvml_version is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return self.nvml_version

    # -- enumeration and identity ----------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._call("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(self.gpus[index])

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> FakeHandle:
        self._call("nvmlDeviceGetHandleByUUID")
        wanted = _text(uuid)
        for gpu in self.gpus:
            if gpu.uuid == wanted:
                return FakeHandle(gpu)
            if wanted in gpu.mig_uuids:
                return FakeHandle(gpu, gpu.mig_uuids.index(wanted))
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetHandleByPciBusId(self, pci_bus_id: str | bytes) -> FakeHandle:
        self._call("nvmlDeviceGetHandleByPciBusId")
        wanted = _text(pci_bus_id).lower()
        for gpu in self.gpus:
            if gpu.pci_bus_id.lower() == wanted:
                return FakeHandle(gpu)
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        self._call("nvmlDeviceGetUUID")
        if handle.mig_index is not None:
            return handle.gpu.mig_uuids[handle.mig_index]
        return handle.gpu.uuid

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        self._call("nvmlDeviceGetName")
        return handle.gpu.name

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> nvmlPciInfo_t:
        self._call("nvmlDeviceGetPciInfo")
        bus_id = handle.gpu.pci_bus_id
        domain, bus, rest = bus_id.split(":")
        info = nvmlPciInfo_t()
        info.busId = bus_id.encode()
        info.busIdLegacy = bus_id[-12:].encode()
        info.domain = int(domain, 16)
        info.bus = int(bus, 16)
        info.device = int(rest.split(".")[0], 16)
        return info

    # -- MIG -----------------------------------------------------------------------------------------

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        self._call("nvmlDeviceGetMaxMigDeviceCount")
        if not handle.gpu.mig_uuids:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, index: int) -> FakeHandle:
        self._call("nvmlDeviceGetMigDeviceHandleByIndex")
        if index >= len(handle.gpu.mig_uuids):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return FakeHandle(handle.gpu, index)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: FakeHandle) -> FakeHandle:
        self._call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        if handle.mig_index is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(handle.gpu)

    # -- sensors ---------------------------------------------------------------------------------------

    def _sensor_call(self, name: str, handle: FakeHandle) -> float:
        """Count the call, check it targets a whole GPU, advance the clock; return the time in s."""
        self._call(name)
        handle.gpu.calls[name] += 1
        if handle.mig_index is not None:
            # NVML does not report power or energy for MIG device handles.
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        self.clock.advance(self.call_latency_s)
        return self.clock.s

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        t = self._sensor_call("nvmlDeviceGetTotalEnergyConsumption", handle)
        if not handle.gpu.supports_energy:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if handle.gpu.energy_error is not None:
            raise NVMLError(handle.gpu.energy_error)
        return handle.gpu.raw_energy_mj(t)

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, fieldIds: list[Any]) -> Any:
        t = self._sensor_call("nvmlDeviceGetFieldValues", handle)
        values = (c_nvmlFieldValue_t * len(fieldIds))()
        for i, requested in enumerate(fieldIds):
            field_id, scope_id = requested if isinstance(requested, tuple) else (requested, 0)
            entry = values[i]
            entry.fieldId = field_id
            entry.scopeId = scope_id
            entry.timestamp = int(handle.gpu.published_time(t) * 1e6) + 1_700_000_000_000_000
            entry.latencyUsec = 50
            if field_id != NVML_FI_DEV_POWER_INSTANT:
                entry.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
                continue
            entry.nvmlReturn = handle.gpu.field_return
            entry.valueType = handle.gpu.field_value_type
            mw = handle.gpu.raw_power_mw(t)
            if handle.gpu.field_value_type == NVML_VALUE_TYPE_DOUBLE:
                entry.value.dVal = mw
            elif handle.gpu.field_value_type == NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
                entry.value.ullVal = round(mw)
            else:
                entry.value.uiVal = round(mw)
        return values

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        # A 1 s average on Ampere and newer: the source must never call it (R7); counted for tests.
        t = self._sensor_call("nvmlDeviceGetPowerUsage", handle)
        return round(handle.gpu.raw_power_mw(t))

    # -- limits and modes ------------------------------------------------------------------------------

    def nvmlDeviceGetPowerManagementLimit(self, handle: FakeHandle) -> int:
        self._call("nvmlDeviceGetPowerManagementLimit")
        if handle.gpu.power_limit_mw is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return handle.gpu.power_limit_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        self._call("nvmlDeviceGetEnforcedPowerLimit")
        if handle.gpu.enforced_power_limit_mw is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return handle.gpu.enforced_power_limit_mw

    def nvmlDeviceGetPersistenceMode(self, handle: FakeHandle) -> int:
        self._call("nvmlDeviceGetPersistenceMode")
        if handle.gpu.persistence_mode is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return handle.gpu.persistence_mode


def uuid(n: int) -> str:
    """A well-formed GPU UUID whose first group is ``n`` (so prefixes are easy to write)."""
    return f"GPU-{n:08x}-1111-2222-3333-444455556666"


def mig_uuid(n: int) -> str:
    """A well-formed MIG device UUID (R470+ form)."""
    return f"MIG-{n:08x}-aaaa-bbbb-cccc-ddddeeeeffff"
