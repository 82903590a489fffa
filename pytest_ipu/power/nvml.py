"""NVIDIA GPU energy through NVML (``pynvml``, from the ``nvidia-ml-py`` package).

Which reading (R1 and R7 of our measurement notes, section 1 of them for the API), one kind for all
selected GPUs: ``energy_counter`` when every one has ``nvmlDeviceGetTotalEnergyConsumption`` (Volta
and newer), a 64-bit millijoule counter since the driver last loaded that cannot wrap in practice, so
a drop means the driver reloaded (``CounterReset``, R9); ``read`` returns joules since ``open``. Else
``instant_power``: the field ``NVML_FI_DEV_POWER_INSTANT`` (186, milliwatts) through
``nvmlDeviceGetFieldValues``, current power on every architecture. Never ``nvmlDeviceGetPowerUsage``:
on Ampere (except GA100) and newer it is a 1-second average lagging the load by about half a second.

Which GPUs (R12): ``devices`` are CUDA indices as the framework numbers them, in the order of the GPUs
``CUDA_VISIBLE_DEVICES`` leaves visible (indices, ``GPU-<uuid>`` or a unique prefix, ``MIG-`` ids;
CUDA ignores everything from its first invalid entry on), or a UUID (or prefix), ``MIG-`` id or PCI bus
id. NVML's index "may not correlate with the CUDA device index", so GPUs are identified by UUID and PCI
bus id; an integer entry is a position in CUDA's enumeration, which is PCI bus order under
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and also (we assume) when all GPUs are the same model; with different
models in the default fastest-first order ``open`` refuses instead of guessing. A MIG device is
measured through its parent GPU: the whole GPU's energy, shared with any other MIG instance on it.
``open`` discovers the update period by polling the chosen quantity back-to-back, within a bound on
polls and time, taking the shortest interval between changes (R5).

Documented in docs/power.md (sections "Sources" and "How a window is measured").
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import math
import os
import re
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from types import ModuleType
from typing import Any

from pytest_ipu.backends.base import Availability
from pytest_ipu.power.base import CounterReset
from pytest_ipu.power.base import PowerDevice
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.power.base import ReadingKind

#: What ``availability`` says when ``import pynvml`` fails.
NOT_INSTALLED = "nvidia-ml-py is not installed; pip install nvidia-ml-py"

#: ``NVML_FI_DEV_POWER_INSTANT`` in nvml.h (used when the module lacks the constant).
FI_DEV_POWER_INSTANT = 186

#: Defaults bounding the update-period discovery in ``open``: polls of every selected GPU, seconds.
# Enough polls to span the 0.5 s cap at microsecond call times: a 100 ms sensor needs ~300 ms
# to show three changes, and the loop stops as soon as it has.
PERIOD_PROBE_POLLS = 100_000
PERIOD_PROBE_S = 0.5
#: Discovery stops early once every GPU has shown this many intervals between value changes.
PERIOD_PROBE_INTERVALS = 3

# nvml.h return codes and value types (nvidia-ml-py 13.615.71 defines the same numbers).
_SUCCESS = 0
_VALUE_MEMBERS = {
    0: "dVal",  # NVML_VALUE_TYPE_DOUBLE
    1: "uiVal",  # UNSIGNED_INT
    2: "ulVal",  # UNSIGNED_LONG
    3: "ullVal",  # UNSIGNED_LONG_LONG
    4: "sllVal",  # SIGNED_LONG_LONG
    5: "siVal",  # SIGNED_INT
    6: "usVal",  # UNSIGNED_SHORT
}
_DIGITS = re.compile(r"[0-9]+")
_PCI_RE = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?$")


def _text(value: object) -> str:
    """pynvml returns ``str`` since 11.x and ``bytes`` before; accept both."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _pci_key(bus_id: str) -> tuple[int, int, int, int] | None:
    """``(domain, bus, device, function)`` of ``00000000:01:00.0``, ``0000:01:00.0`` or ``01:00.0``."""
    match = _PCI_RE.match(bus_id.strip())
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return (int(domain or "0", 16), int(bus, 16), int(device, 16), int(function or "0", 16))


@dataclass
class _Gpu:
    """A physical GPU as NVML enumerates it."""

    nvml_index: int
    uuid: str
    name: str
    pci_bus_id: str
    handle: Any

    @property
    def pci_key(self) -> tuple[int, int, int, int]:
        return _pci_key(self.pci_bus_id) or (0xFFFFFFFF, 0, 0, self.nvml_index)


@dataclass
class _Target:
    """A selected GPU, with the CUDA indices and MIG devices that led to it."""

    gpu: _Gpu
    cuda_indices: list[int] = field(default_factory=list)
    mig_uuids: list[str] = field(default_factory=list)
    counter_error: str | None = None

    @property
    def id(self) -> str:
        return f"nvml:{self.gpu.uuid}"

    @property
    def label(self) -> str:
        return f"{self.gpu.name} {self.gpu.uuid} (PCI {self.gpu.pci_bus_id})"

    @property
    def device(self) -> PowerDevice:
        return PowerDevice(self.id, self.gpu.name, "gpu")


@dataclass
class _Selection:
    targets: list[_Target]
    visible: list[str]  # what CUDA sees, as UUIDs (MIG ids for MIG devices), in CUDA order
    mapping: str  # how CUDA indices were matched to GPUs


def _add_target(targets: dict[str, _Target], gpu: _Gpu, mig: str | None, cuda_index: int | None) -> None:
    """Add ``gpu`` (through its MIG device ``mig``, as CUDA device ``cuda_index``) to ``targets``."""
    # Several MIG devices (or entries) on one GPU are one physical reading: counted once.
    target = targets.setdefault(gpu.uuid, _Target(gpu))
    if cuda_index is not None and cuda_index not in target.cuda_indices:
        target.cuda_indices.append(cuda_index)
    if mig is not None and mig not in target.mig_uuids:
        target.mig_uuids.append(mig)


class NvmlPowerSource:
    """Energy (or, before Volta, instant power) of NVIDIA GPUs through NVML.

    ``devices``: CUDA indices (or UUIDs, ``MIG-`` ids, PCI bus ids) to measure; ``None`` measures
    every GPU CUDA can see. ``nvml_module`` replaces ``import pynvml`` (tests pass a fake);
    ``environ`` is where ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` are read. The keyword
    arguments bound the update-period discovery in ``open`` (``period_probe_polls=0`` skips it) and
    give its monotonic nanosecond clock.
    """

    def __init__(
        self,
        devices: Sequence[int | str] | None = None,
        nvml_module: ModuleType | None = None,
        environ: Mapping[str, str] = os.environ,
        *,
        period_probe_polls: int = PERIOD_PROBE_POLLS,
        period_probe_s: float = PERIOD_PROBE_S,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self._devices = None if devices is None else list(devices)
        self._module = nvml_module
        self._environ = environ
        self._probe_polls = max(0, int(period_probe_polls))
        self._probe_ns = max(0, int(period_probe_s * 1e9))
        self._clock = clock
        self._nvml: Any = None  # the module while NVML is initialised by open()
        self._selection: _Selection | None = None
        self._kind: ReadingKind = "energy_counter"
        self._start_mj: dict[str, int] = {}
        self._last_mj: dict[str, int] = {}
        self._period_s: float | None = None

    @property
    def name(self) -> str:
        """``nvml``."""
        return "nvml"

    @property
    def kind(self) -> ReadingKind:
        """``energy_counter`` or ``instant_power``, decided in ``open``; before it, the preferred one."""
        return self._kind

    # -- protocol ------------------------------------------------------------------------------------

    def availability(self) -> Availability:
        """pynvml importable, NVML starts, and the selection names at least one GPU; never raises."""
        try:
            nvml = self._import()
        except ImportError:
            return Availability.no(NOT_INSTALLED)
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError (no driver, no library) or anything else: a reason
            return Availability.no(f"nvml: NVML could not start: {exc}")
        try:
            if int(nvml.nvmlDeviceGetCount()) == 0:
                return Availability.no("nvml: NVML sees no NVIDIA GPU")
            self._select(nvml)
        except Exception as exc:  # availability never raises: anything unforeseen is a reason
            return Availability.no(str(exc) if isinstance(exc, PowerSourceError) else f"nvml: {exc}")
        finally:
            _quiet_shutdown(nvml)
        return Availability.yes()

    def open(self) -> list[PowerDevice]:
        """Start NVML, resolve the GPUs, choose the reading kind, discover the update period.

        Raises ``PowerSourceError`` naming the GPU and the reason when a GPU offers neither the
        energy counter nor the instant-power field, or the selection cannot be resolved. Opening
        an open source restarts it (energy counts from the new ``open``).
        """
        self.close()
        try:
            nvml = self._import()
        except ImportError as exc:
            raise PowerSourceError(f"nvml: {NOT_INSTALLED}") from exc
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise PowerSourceError(f"nvml: NVML could not start: {exc}") from exc
        self._nvml = nvml
        try:
            selection = self._select(nvml)
            self._choose_kind(nvml, selection.targets)
            self._selection = selection
            self._period_s = self._discover_period(selection.targets)
            if self._kind == "energy_counter":
                # Energy counts from the end of open, after the discovery's polling.
                self._start_mj = {t.id: self._energy_mj(t) for t in selection.targets}
                self._last_mj = dict(self._start_mj)
        except BaseException:
            self.close()
            raise
        return [t.device for t in selection.targets]

    def read(self) -> Mapping[str, float]:
        """Joules since ``open`` per device id (counter), or watts now (instant power).

        ``CounterReset`` when a counter is lower than at the previous read (the driver reloaded);
        ``PowerSourceError`` naming the GPU for any NVML error. Nothing is updated when a read fails.
        """
        selection = self._require_open()
        out: dict[str, float] = {}
        if self._kind == "energy_counter":
            now = {t.id: self._energy_mj(t) for t in selection.targets}
            for target in selection.targets:
                last, value = self._last_mj[target.id], now[target.id]
                if value < last:
                    raise CounterReset(
                        f"nvml: the energy counter of {target.label} went back from {last} mJ to "
                        f"{value} mJ; NVML's 64-bit counter restarts only when the driver reloads "
                        "(enable persistence mode, nvidia-smi -pm 1, to keep it loaded); the window "
                        "is invalid"
                    )
            for target in selection.targets:
                out[target.id] = (now[target.id] - self._start_mj[target.id]) / 1000.0
            self._last_mj = now
            return out
        for target in selection.targets:
            out[target.id] = self._instant_w(target)[0]
        return out

    def update_period_s(self) -> float | None:
        """The shortest interval between value changes seen in ``open``; ``None`` if none was seen."""
        return self._period_s

    def describe(self) -> dict[str, Any]:
        """Versions, the CUDA-to-GPU mapping, and per GPU its identity, power limits and method.

        Plain JSON; an unsupported query becomes ``null``. Never raises: before ``open`` it starts
        NVML for the queries (and shuts it down again) and reports an ``error`` if that fails.
        """
        out: dict[str, Any] = {
            "source": "nvml",
            "library": "nvidia-ml-py",
            "library_version": self._library_version(),
            "kind": self._kind,
            "sensor": "nvmlDeviceGetTotalEnergyConsumption"
            if self._kind == "energy_counter"
            else "NVML_FI_DEV_POWER_INSTANT",
            "update_period_s": self._period_s,
            "cuda_visible_devices": self._environ.get("CUDA_VISIBLE_DEVICES"),
            "cuda_device_order": self._environ.get("CUDA_DEVICE_ORDER"),
        }
        nvml = self._nvml
        started = False
        try:
            if nvml is None:
                nvml = self._import()
                nvml.nvmlInit()
                started = True
            selection = self._selection if self._selection is not None else self._select(nvml)
            out["driver_version"] = _optional(lambda: _text(nvml.nvmlSystemGetDriverVersion()))
            out["nvml_version"] = _optional(lambda: _text(nvml.nvmlSystemGetNVMLVersion()))
            out["mapping"] = selection.mapping
            out["visible"] = selection.visible
            out["devices"] = [self._describe_target(nvml, t) for t in selection.targets]
        except Exception as exc:  # describe is informational: report, never fail the run
            out["error"] = NOT_INSTALLED if isinstance(exc, ImportError) else str(exc)
        finally:
            if started:
                _quiet_shutdown(nvml)
        return out

    def close(self) -> None:
        """Shut NVML down (once per ``open``); safe to call twice."""
        nvml, self._nvml = self._nvml, None
        self._selection = None
        self._start_mj = {}
        self._last_mj = {}
        if nvml is not None:
            _quiet_shutdown(nvml)

    # -- internals -----------------------------------------------------------------------------------

    def _import(self) -> Any:
        if self._module is not None:
            return self._module
        return importlib.import_module("pynvml")

    def _library_version(self) -> str | None:
        if self._module is not None:
            declared = getattr(self._module, "__version__", None)
            return None if declared is None else str(declared)
        try:
            return importlib.metadata.version("nvidia-ml-py")
        except Exception:  # not installed, or installed without metadata
            return None

    def _require_open(self) -> _Selection:
        if self._selection is None or self._nvml is None:
            raise PowerSourceError("nvml: read() on a source that is not open (call open() first)")
        return self._selection

    def _inventory(self, nvml: Any) -> list[_Gpu]:
        gpus: list[_Gpu] = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            name = _text(nvml.nvmlDeviceGetName(handle))
            pci = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
            gpus.append(_Gpu(index, uuid, name, pci, handle))
        return gpus

    def _mig_parents(self, nvml: Any, gpus: list[_Gpu]) -> dict[str, _Gpu]:
        """MIG device UUID -> parent GPU, for every MIG device NVML lists (none without MIG)."""
        parents: dict[str, _Gpu] = {}
        for gpu in gpus:
            try:
                count = int(nvml.nvmlDeviceGetMaxMigDeviceCount(gpu.handle))
            except nvml.NVMLError:  # no MIG support on this GPU
                continue
            for index in range(count):
                try:
                    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, index)
                    parents[_text(nvml.nvmlDeviceGetUUID(mig))] = gpu
                except nvml.NVMLError:  # an empty MIG slot
                    continue
        return parents

    def _cuda_order(self, gpus: list[_Gpu]) -> tuple[list[_Gpu], str]:
        """The GPUs in the order CUDA numbers them (before ``CUDA_VISIBLE_DEVICES``), and why."""
        by_pci = sorted(gpus, key=lambda g: g.pci_key)
        order = self._environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST").strip().upper()
        if order == "PCI_BUS_ID":
            return by_pci, "CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA indices follow PCI bus order"
        if len({g.name for g in gpus}) <= 1:
            # Fastest-first has nothing to rank among identical GPUs; CUDA then keeps PCI bus order.
            return by_pci, "identical GPUs: CUDA indices follow PCI bus order"
        names = ", ".join(f"{g.name} (PCI {g.pci_bus_id})" for g in by_pci)
        raise PowerSourceError(
            "nvml: cannot tell which GPU CUDA numbers N: with different GPU models "
            f"({names}) CUDA orders them fastest first, which NVML cannot reproduce; set "
            "CUDA_DEVICE_ORDER=PCI_BUS_ID, or select GPUs by UUID (in CUDA_VISIBLE_DEVICES or as "
            "devices, e.g. torch.cuda.get_device_properties(i).uuid)"
        )

    def _match_prefix(self, entry: str, candidates: Mapping[str, _Gpu]) -> _Gpu | None:
        """The one candidate whose UUID starts with ``entry`` (CUDA accepts unique prefixes)."""
        wanted = entry.lower()
        # Keyed by GPU: several MIG devices of one GPU matching the prefix still name one GPU.
        found = {g.uuid: g for u, g in candidates.items() if u.lower().startswith(wanted)}
        return next(iter(found.values())) if len(found) == 1 else None

    def _resolve_id(
        self, nvml: Any, entry: str, gpus: list[_Gpu], migs: dict[str, _Gpu] | None
    ) -> tuple[_Gpu, str | None, dict[str, _Gpu] | None] | None:
        """A ``GPU-``/``MIG-`` id or PCI bus id -> (GPU, MIG id or None, MIG table), or ``None``."""
        if entry.startswith("MIG-GPU-"):
            # The pre-R470 form MIG-GPU-<uuid>/<gpu instance>/<compute instance> names its parent.
            gpu = self._match_prefix(entry[4:].split("/")[0], {g.uuid: g for g in gpus})
            return None if gpu is None else (gpu, entry, migs)
        if entry.startswith("MIG-"):
            migs = migs if migs is not None else self._mig_parents(nvml, gpus)
            gpu = self._match_prefix(entry, migs)
            if gpu is None:
                return None
            full = [u for u, g in migs.items() if g is gpu and u.lower().startswith(entry.lower())]
            return gpu, full[0] if len(full) == 1 else entry, migs
        if entry.startswith("GPU-"):
            gpu = self._match_prefix(entry, {g.uuid: g for g in gpus})
            return None if gpu is None else (gpu, None, migs)
        key = _pci_key(entry)
        if key is not None:
            found = [g for g in gpus if g.pci_key == key]
            return (found[0], None, migs) if len(found) == 1 else None
        return None

    def _select(self, nvml: Any) -> _Selection:
        """Resolve ``CUDA_VISIBLE_DEVICES`` and ``devices`` to GPUs; ``PowerSourceError`` if impossible."""
        gpus = self._inventory(nvml)
        migs: dict[str, _Gpu] | None = None
        raw = self._environ.get("CUDA_VISIBLE_DEVICES")
        mapping = "CUDA_VISIBLE_DEVICES is unset: every GPU is visible"
        visible: list[tuple[_Gpu, str | None]] | None = None
        by_identity = self._devices is not None and all(_cuda_index(d) is None for d in self._devices)
        if by_identity:
            # GPUs named by UUID or PCI bus id need no CUDA numbering (nor its ambiguities).
            mapping = "devices named by identity; CUDA_VISIBLE_DEVICES not consulted"
        elif raw is not None:
            visible, mapping, migs = self._parse_visible(nvml, raw, gpus)
        targets: dict[str, _Target] = {}
        if self._devices is None:
            if visible is None:
                for gpu in sorted(gpus, key=lambda g: g.pci_key):
                    _add_target(targets, gpu, None, None)
            else:
                for cuda_index, (gpu, mig) in enumerate(visible):
                    _add_target(targets, gpu, mig, cuda_index)
        for wanted in self._devices or []:
            wanted_index = _cuda_index(wanted)
            if wanted_index is not None:
                if visible is None:
                    order, why = self._cuda_order(gpus)
                    mapping += f"; {why}"
                    visible = [(g, None) for g in order]
                if wanted_index >= len(visible):
                    raise PowerSourceError(
                        f"nvml: CUDA device {wanted!r} is not visible: {mapping} leaves "
                        f"{len(visible)} GPU(s) visible"
                    )
                _add_target(targets, visible[wanted_index][0], visible[wanted_index][1], wanted_index)
                continue
            resolved = self._resolve_id(nvml, str(wanted).strip(), gpus, migs)
            if resolved is None:
                known = ", ".join(f"{g.uuid} (PCI {g.pci_bus_id})" for g in gpus) or "none"
                raise PowerSourceError(f"nvml: no single GPU matches {wanted!r}; NVML lists: {known}")
            gpu, mig, migs = resolved
            _add_target(targets, gpu, mig, None)
        if not targets:
            raise PowerSourceError(f"nvml: no GPU selected: {mapping} leaves no GPU visible")
        if visible is None:
            shown = [g.uuid for g in sorted(gpus, key=lambda g: g.pci_key)]
        else:
            shown = [mig if mig is not None else gpu.uuid for gpu, mig in visible]
        return _Selection(list(targets.values()), shown, mapping)

    def _parse_visible(
        self, nvml: Any, raw: str, gpus: list[_Gpu]
    ) -> tuple[list[tuple[_Gpu, str | None]], str, dict[str, _Gpu] | None]:
        """The GPUs (and MIG devices) ``CUDA_VISIBLE_DEVICES=raw`` makes visible, in CUDA's order;
        how the mapping reads; and the MIG devices NVML listed on the way, if it was asked."""
        visible: list[tuple[_Gpu, str | None]] = []
        mapping = f"CUDA_VISIBLE_DEVICES={raw!r}"
        migs: dict[str, _Gpu] | None = None
        order: list[_Gpu] | None = None
        for part in raw.split(","):
            entry = part.strip()
            found: tuple[_Gpu, str | None] | None = None
            if _DIGITS.fullmatch(entry):
                if order is None:
                    order, why = self._cuda_order(gpus)
                    mapping += f"; {why}"
                index = int(entry)
                found = (order[index], None) if index < len(order) else None
            elif entry:
                resolved = self._resolve_id(nvml, entry, gpus, migs)
                if resolved is not None:
                    found, migs = (resolved[0], resolved[1]), resolved[2]
            if found is None or found in visible:
                # CUDA makes only the devices before the first invalid entry visible. A repeated
                # device is treated as invalid too (our assumption: CUDA's docs do not say).
                break
            visible.append(found)
        return visible, mapping, migs

    def _choose_kind(self, nvml: Any, targets: list[_Target]) -> None:
        """Counter if every GPU has it, else the instant field; ``PowerSourceError`` if neither."""
        for target in targets:
            target.counter_error = None
            try:
                int(nvml.nvmlDeviceGetTotalEnergyConsumption(target.gpu.handle))
            except nvml.NVMLError as exc:  # NOT_SUPPORTED before Volta; any error rules it out
                target.counter_error = str(exc)
        if all(t.counter_error is None for t in targets):
            self._kind = "energy_counter"
            return
        self._kind = "instant_power"
        for target in targets:
            try:
                self._instant_w(target)
            except PowerSourceError as exc:
                counter = target.counter_error or "available, but not on every selected GPU"
                raise PowerSourceError(
                    f"{exc}; its energy counter: {counter}; so it has no usable power reading"
                ) from exc

    def _energy_mj(self, target: _Target) -> int:
        nvml = self._nvml
        try:
            return int(nvml.nvmlDeviceGetTotalEnergyConsumption(target.gpu.handle))
        except nvml.NVMLError as exc:
            raise PowerSourceError(
                f"nvml: nvmlDeviceGetTotalEnergyConsumption failed on {target.label}: {exc}"
            ) from exc

    def _instant_w(self, target: _Target) -> tuple[float, int]:
        """Watts from ``NVML_FI_DEV_POWER_INSTANT``, checking the entry's own return and type."""
        nvml = self._nvml
        field_id = int(getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", FI_DEV_POWER_INSTANT))
        where = f"NVML_FI_DEV_POWER_INSTANT on {target.label}"
        try:
            values = nvml.nvmlDeviceGetFieldValues(target.gpu.handle, [field_id])
        except nvml.NVMLError as exc:
            raise PowerSourceError(f"nvml: {where} failed: {exc}") from exc
        entry = values[0]
        # The call succeeds if *any* field was filled, so each entry carries its own status.
        status = int(entry.nvmlReturn)
        if status != _SUCCESS:
            raise PowerSourceError(f"nvml: {where} failed: {_error_text(nvml, status)}")
        member = _VALUE_MEMBERS.get(int(entry.valueType))
        if member is None:
            raise PowerSourceError(f"nvml: {where} has unknown value type {int(entry.valueType)}")
        milliwatts = float(getattr(entry.value, member))
        if not math.isfinite(milliwatts) or milliwatts < 0:
            raise PowerSourceError(f"nvml: {where} reported {milliwatts} mW")
        return milliwatts / 1000.0, int(entry.timestamp)

    def _raw(self, target: _Target) -> float:
        """The quantity discovery polls: the counter (mJ) or the instant field (W)."""
        if self._kind == "energy_counter":
            return float(self._energy_mj(target))
        return self._instant_w(target)[0]

    def _discover_period(self, targets: list[_Target]) -> float | None:
        """Poll back-to-back within the bounds; the shortest interval between value changes (R5)."""
        if self._probe_polls == 0 or self._probe_ns == 0:
            return None
        start = self._clock()
        last = {t.id: self._raw(t) for t in targets}
        changed_at: dict[str, int] = {}
        intervals: dict[str, int] = {t.id: 0 for t in targets}
        best_ns: int | None = None
        for _ in range(self._probe_polls):
            for target in targets:
                value = self._raw(target)
                now = self._clock()
                if value == last[target.id]:
                    continue
                last[target.id] = value
                previous = changed_at.get(target.id)
                changed_at[target.id] = now
                # The first change only marks where an update happened; intervals start from it.
                if previous is not None:
                    intervals[target.id] += 1
                    best_ns = now - previous if best_ns is None else min(best_ns, now - previous)
            if self._clock() - start >= self._probe_ns:
                break
            if all(n >= PERIOD_PROBE_INTERVALS for n in intervals.values()):
                break
        return None if best_ns is None else best_ns / 1e9

    def _describe_target(self, nvml: Any, target: _Target) -> dict[str, Any]:
        handle = target.gpu.handle

        def watts(call: Callable[[Any], Any]) -> float | None:
            milliwatts = _optional(lambda: call(handle))
            return None if milliwatts is None else float(milliwatts) / 1000.0

        persistence = _optional(lambda: nvml.nvmlDeviceGetPersistenceMode(handle))
        method = None
        if self._nvml is not None:
            method = "counter" if self._kind == "energy_counter" else "sampled_power"
        return {
            "id": target.id,
            "uuid": target.gpu.uuid,
            "name": target.gpu.name,
            "pci_bus_id": target.gpu.pci_bus_id,
            "nvml_index": target.gpu.nvml_index,
            "cuda_indices": list(target.cuda_indices),
            "mig_devices": list(target.mig_uuids),
            "power_limit_W": watts(nvml.nvmlDeviceGetPowerManagementLimit),
            "enforced_power_limit_W": watts(nvml.nvmlDeviceGetEnforcedPowerLimit),
            "persistence_mode": None if persistence is None else bool(int(persistence)),
            "method": method,
            "energy_counter_error": target.counter_error,
        }


def _cuda_index(wanted: int | str) -> int | None:
    """``1``, ``"1"`` and ``"cuda:1"`` are CUDA index 1; anything else is an identity."""
    if isinstance(wanted, bool):
        raise PowerSourceError(f"nvml: {wanted!r} is not a CUDA device index")
    if isinstance(wanted, int):
        if wanted < 0:
            raise PowerSourceError(f"nvml: CUDA device index {wanted} is negative")
        return wanted
    text = wanted.strip()
    if text.startswith("cuda:"):
        text = text[len("cuda:") :]
    return int(text) if _DIGITS.fullmatch(text) else None


def _optional(query: Callable[[], Any]) -> Any:
    """The query's result, or ``None`` when NVML does not support it (or it fails otherwise)."""
    try:
        return query()
    except Exception:  # NOT_SUPPORTED and friends: describe reports null, never crashes
        return None


def _error_text(nvml: Any, status: int) -> str:
    """NVML's text for a return code ("Not Supported"), as ``str(NVMLError(code))`` gives it."""
    try:
        return f"{nvml.NVMLError(status)} (NVML return code {status})"
    except Exception:
        return f"NVML return code {status}"


def _quiet_shutdown(nvml: Any) -> None:
    """nvmlShutdown, ignoring its failure: there is nothing left to release, and a teardown error
    must not hide the error that led to it."""
    with contextlib.suppress(Exception):
        nvml.nvmlShutdown()
