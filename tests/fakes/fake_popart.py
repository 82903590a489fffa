"""A faithful stand-in for Graphcore's ``popart`` Python module as PopART 3.4 (Poplar SDK 3.4,
September 2023, the last release) has it, with SDK 2.3's device-acquisition behaviour as an option.

Sources: ``graphcore/popart`` at the 3.4 release (commit d2f20d78): ``python/popart/__init__.py.in``,
``python/popart/python_files/session.py``, ``python/popart/popart_core/popart.cpp`` (the bindings),
``willow/src/devicemanager.cpp``, ``dataflow.cpp``, ``stepio_size_assertion.cpp``,
``popx/devicex.cpp``, ``session.cpp``, ``ir.cpp``, ``opmanager.cpp``/``opsets.gen.hpp``; and the
notes in ``shared/reference/graphcore-sdk-api.md`` sections 0.2 and 2.1-2.7. Error texts are the
SDK's own wherever the source has one; texts the SDK has no equivalent for start with ``fake:``.

What it imitates:

- **import quirk**: ``PopartFinder`` makes ``import popart`` load a fake module and raise the SDK's
  ``ImportError`` when ``onnx`` is already in ``sys.modules``;
- ``DeviceManager()``, a singleton per fake module, over ``configure(ipus=N)`` IPUs:
  ``enumerateDevices`` lists single IPUs with ids ``0..N-1`` and then each power-of-two group
  (as ``gc-info -l`` numbers them); a hardware device's ``driverIds`` are *not* those ids (nothing
  public says they are): IPU ``k`` has driver id ``driver_id_base + N - 1 - k`` (``DRIVER_ID_BASE``
  unless configured; ``configure(driver_id_base=None)`` makes them equal), so code that takes a
  driver id for a ``gc-info -l`` id names IPUs that do not exist, or the wrong ones;
  ``tryAcquireAvailableDevice`` (3.4 only) returns ``None`` when
  no device is free and raises for a count that is not a power of two; ``acquireAvailableDevice``
  raises the SDK's "Failed to acquire device with N IPUs..." on 3.4 but returns ``None`` on 2.3
  (``make_module(sdk="2.3")``, which also has no ``try...`` methods); acquire-by-id, the IPU Model
  and offline devices; IPUs held by another process (``configure(busy={0})``) cannot be attached;
- ``DeviceInfo`` properties, ``attach() -> bool``, ``detach()``, a context manager;
- ``DataFlow``, ``AnchorReturnType`` (case-insensitive names, return-period rules) with their texts;
- ``SessionOptions``: the fields of section 2.6 with the SDK's defaults; like a pybind11 class it
  refuses unknown fields (``AttributeError``) and values of the wrong type (``TypeError``);
- ``InferenceSession``: the IR checks made at construction (a missing device, dynamic input
  dimensions, ONNX opsets above 11 under ``strictOpVersions``, replication that does not divide
  the IPUs, pipelining without virtual graphs, manual virtual graphs without annotations),
  ``prepareDevice`` (``OutOfMemoryException`` when injected), ``weightsFromHost``,
  ``initAnchorArrays`` (shapes by the SDK's own rule), ``run`` before ``prepareDevice`` (the SDK's
  error), buffer-size checks on the first run only (as the SDK does), dtype checks, and outputs
  written in place into the anchor arrays;
- ``PyStepIO`` (refuses arrays that are not C-contiguous), ``GraphTransformer.convertFloatsToHalfs``
  and a ``Builder`` that reads models (building ops raises ``NotImplementedError``) and annotates
  them (``virtualGraph``, ``pipelineStage``, ``setAvailableMemoryProportion`` with its (0,1] check);
- pipelining with fewer batches per step than pipeline stages is refused at session creation;
- ``DeviceInfo.version`` is not the architecture (``ipuVersion`` is): the driver version once a
  hardware IPU is attached, ``<unknown-ipu-unattached>`` before; offline devices refuse attach/detach;
- ``prepareDevice`` refuses a model whose weights alone exceed its tiles' memory (an approximation of
  Poplar's out-of-memory failure: the IPU Model's default 4 tiles hold 2.4 MiB).

Outputs are real: a session runs its ONNX model with onnxruntime on the CPU, one micro-batch per
replica and batch, so tests can compare them with torch. ``run`` releases the GIL while it computes
(onnxruntime's ``run`` does), as the SDK's ``run`` does for the whole device run
(``popart.cpp:2101-2106``). ``prepareDevice`` spends its simulated compile time
(``configure(compile_s=...)``, 5 ms by default) blocked *with the GIL held*, as the SDK's holds it
for the whole compile (``popart.cpp:2054-2071``); ``system.compile_spans`` lists those spans
(``tests/fakes/gil.py``). Not imitated: Poplar compilation itself, IPU memory beyond the weights rule
above. ``getCycleCount`` raises as the SDK does with the counter off or before a run; otherwise it
gives the last run's cycles on the first replica, deterministic per graph and batch
(``CALL_CYCLES``), at the stated cost (``COUNTER_S`` per instrumented run, ``READ_S`` per read).

``system.events`` records the calls in order; ``system.sessions`` every session, each keeping the
``DataFlow``, a copy of its ``SessionOptions`` and the model bytes it was given.
"""

from __future__ import annotations

import copy
import enum
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import time
import types
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any
from typing import ClassVar

import numpy as np

from pytest_ipu.backports import zip_strict
from tests.fakes.gil import hold_gil

#: ``popart/__init__.py`` raises this when onnx was imported first (every SDK from 1.2 to 3.4).
IMPORT_ERROR = (
    "It looks like onnx has already been imported. Due to an ongoing issue, "
    "popart must be imported before onnx."
)
#: The ai.onnx opsets PopART 3.4 has op tables for (``willow/src/opsets.gen.hpp``).
ONNX_OPSETS = range(6, 12)
VIRTUAL_GRAPH_ATTRIBUTE = "__ipu_number"
PIPELINE_STAGE_ATTRIBUTE = "__pipeline_stage"
#: ``sAvailMemAttribute`` (``willow/include/popart/names.hpp:221``), written by
#: ``Builder::setAvailableMemoryProportion``.
AVAILABLE_MEMORY_ATTRIBUTE = "__available_memory"
TILES_PER_IPU = 1472  # a Mk2 (ipu2) IPU
IPU_MODEL_TILES = 4  # defaultFewTiles (willow/include/popart/defaulttilecount.hpp:6): the IPU Model's default
#: In-processor memory of one IPU2 tile (624 KiB; 900 MB over 1472 tiles). The fake refuses a
#: model whose weights alone exceed its tiles' memory: an approximation of Poplar's out-of-memory
#: failure (real graphs also need code, activations and exchange buffers, so they fail sooner).
TILE_MEMORY_BYTES = 624 * 1024
#: Tiles and tile memory per architecture (GC2 ipu1: 1216 tiles of 256 KiB; Mk2 ipu2/ipu21: 1472 of 624 KiB).
_ARCHITECTURES = {"ipu1": (1216, 256 * 1024), "ipu2": (1472, 624 * 1024), "ipu21": (1472, 624 * 1024)}
#: What ``DeviceInfo.version`` gives for an attached hardware IPU: the driver version
#: ``"major.minor.point"`` (``willow/src/popx/devicexmanager.cpp:350-362``); the value is the fake's.
DRIVER_VERSION = "1.0.59"
#: Driver id of the last IPU; the others count up from it, in reverse order of their ``gc-info -l``
#: ids, so that neither an offset nor an order carries over from one numbering to the other.
DRIVER_ID_BASE = 64


# -- exceptions, as popart.cpp registers them ------------------------------------------------------


class popart_exception(Exception):
    """``popart::error``."""


class popart_internal_exception(popart_exception):
    """``popart::internal_error``."""


class popart_runtime_error(popart_exception):
    """``popart::runtime_error``."""


class OutOfMemoryException(popart_exception):
    """Raised by ``prepareDevice`` when the graph does not fit in IPU memory."""

    def getSummaryReport(self) -> str:
        return "fake: out-of-memory summary report"

    def getProfilePath(self) -> str:
        return ""


class FakeUndefinedBehaviour(AssertionError):
    """Something the real SDK does not check and would do wrongly (never raised on correct use)."""


# -- enums -----------------------------------------------------------------------------------------


class _PyEnum(enum.Enum):
    def __str__(self) -> str:  # pybind11 enums print as ``Type.Member``
        return f"{type(self).__name__}.{self.name}"


def _cpp_enum(value: Any) -> str:
    """How PopART's C++ messages print an enum: ``VirtualGraphMode::Off`` (``operator<<`` of
    ``willow/src/sessionoptions.cpp:95-105``), not Python's ``VirtualGraphMode.Off``."""
    return f"{type(value).__name__}::{value.name}"


#: ``operator<<(std::ostream&, DeviceType)`` (``willow/src/devicemanager.cpp:295-310``).
_DEVICE_TYPE_NAMES = {
    "Cpu": "cpu",
    "Ipu": "ipu",
    "IpuModel": "ipu-model",
    "OfflineIpu": "offline-ipu",
    "Sim": "sim",
}


SyncPattern = _PyEnum("SyncPattern", ["Full", "SinglePipeline", "ReplicaAndLadder"])
DeviceConnectionType = _PyEnum("DeviceConnectionType", ["Always", "OnDemand", "Never"])
DeviceSelectionCriterion = _PyEnum("DeviceSelectionCriterion", ["First", "Random"])
DeviceType = _PyEnum("DeviceType", ["IpuModel", "Cpu", "Ipu", "OfflineIpu", "Sim"])
VirtualGraphMode = _PyEnum("VirtualGraphMode", ["Off", "Manual", "Auto", "ExecutionPhases"])
SyntheticDataMode = _PyEnum("SyntheticDataMode", ["Off", "Zeros", "RandomNormal", "RandomUniform"])
AnchorReturnTypeId = _PyEnum("AnchorReturnTypeId", ["Final", "EveryN", "All", "Sum"])


# -- the fake machine ------------------------------------------------------------------------------


#: The simulated compile time of ``prepareDevice`` unless configured: short, so that every test of a
#: PopART path meets a compile that holds the GIL without waiting long for it.
DEFAULT_COMPILE_S = 0.005
#: The fake's cost model of the hardware cycle counter (``instrumentWithHardwareCycleCounter``),
#: stated, not measured on an IPU: the counter compiled in adds ``COUNTER_S`` to every ``run`` (the
#: internal sync and the timer compute sets around the main program; the GIL released, as ``run``
#: releases it); each ``getCycleCount()`` read spends ``READ_S`` holding the GIL (PopART runs the
#: ``cycleCountTensorToHost`` program: one host-device round trip; the binding has no GIL release).
COUNTER_S = 1e-6
READ_S = 50e-6
#: The fake's count model: a ``run`` of the first replica takes ``CALL_CYCLES`` (syncs and host
#: exchange) plus, per batch of the step, one cycle per weight element and one per element of the
#: batch's inputs: deterministic per graph and batch, as a compiled IPU program is.
CALL_CYCLES = 2_000


@dataclass
class FakeIpuSystem:
    """The IPUs one fake module sees, what it was asked to fail, and what happened."""

    ipus: int = 1
    sdk: str = "3.4.0"
    #: The hardware IPUs' architecture, as ``DeviceInfo.ipuVersion`` gives it.
    architecture: str = "ipu2"
    #: The id of the first multi-IPU device; ``None``: right after the single IPUs ``0..N-1``. No SDK
    #: source states gc-info's numbering, so tests move it to check that ids are read, not derived.
    multi_id_base: int | None = None
    #: ``DeviceInfo.driverIds`` of IPU ``k`` is ``driver_id_base + ipus - 1 - k``; ``None``: ``k`` itself.
    driver_id_base: int | None = DRIVER_ID_BASE
    #: IPU indices held by another process: attaching to a device that includes them fails.
    busy: set[int] = field(default_factory=set)
    #: Injected failures: ``{"prepareDevice": "oom" | "error", "weightsFromHost" | "run" | "detach"
    #: | "InferenceSession": "error"}``.
    fail: dict[str, str] = field(default_factory=dict)
    #: Simulated seconds of each ``prepareDevice``, spent holding the GIL.
    compile_s: float = DEFAULT_COMPILE_S
    #: The cycle counter's cost model (``COUNTER_S``, ``READ_S``).
    counter_s: float = COUNTER_S
    read_s: float = READ_S
    #: Each ``prepareDevice``'s compile span, as ``time.monotonic_ns`` values (``gil.hold_gil``).
    compile_spans: list[tuple[int, int]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    sessions: list[Any] = field(default_factory=list)
    #: IPU index -> the ``DeviceInfo`` attached to it.
    attached: dict[int, Any] = field(default_factory=dict)
    manager: Any = None

    @property
    def modern(self) -> bool:
        """SDK >= 2.4: ``try...`` acquisition exists and ``acquire...`` raises."""
        major, minor = (int(x) for x in self.sdk.split(".")[:2])
        return (major, minor) >= (2, 4)

    def injected(self, point: str) -> None:
        kind = self.fail.get(point)
        if kind == "oom":
            raise OutOfMemoryException(
                "Out of memory: Cannot fit all variable data onto one or more tiles (fake: injected)"
            )
        if kind is not None:
            raise popart_exception(f"fake: failure injected at {point}")

    def driver_id(self, index: int) -> int:
        """The driver id of IPU ``index`` (its ``gc-info -l`` id)."""
        return index if self.driver_id_base is None else self.driver_id_base + self.ipus - 1 - index

    def attached_count(self) -> int:
        """IPUs attached through this fake module now."""
        return len(self.attached)


def make_module(ipus: int = 1, sdk: str = "3.4") -> types.ModuleType:
    """A fresh ``popart`` module over ``ipus`` IPUs; ``sdk="2.3"`` for the old acquisition behaviour."""
    system = FakeIpuSystem(ipus=ipus, sdk=_full_version(sdk))
    module = types.ModuleType("popart")
    module.__doc__ = "fake popart (tests/fakes/fake_popart.py)"
    module.__version__ = system.sdk
    module.system = system

    def configure(
        ipus: int | None = None,
        sdk: str | None = None,
        busy: set[int] | None = None,
        fail: Mapping[str, str] | None = None,
        architecture: str | None = None,
        multi_id_base: int | None = None,
        compile_s: float | None = None,
        driver_id_base: int | str | None = "unchanged",
        counter_s: float | None = None,
        read_s: float | None = None,
    ) -> None:
        """Change the machine: IPU count, SDK behaviour, IPUs busy elsewhere, injected failures, the
        hardware IPUs' architecture (``ipu1``: a C2 card's; ``ipu2``: the default), the simulated
        compile time ``prepareDevice`` spends holding the GIL, the driver ids' base
        (``driver_id_base``; ``None``: driver ids equal to the ``gc-info -l`` ids), and the cycle
        counter's cost model (``counter_s`` more per instrumented ``run``, ``read_s`` per
        ``getCycleCount``)."""
        if counter_s is not None:
            system.counter_s = counter_s
        if read_s is not None:
            system.read_s = read_s
        if ipus is not None:
            system.ipus = ipus
        if compile_s is not None:
            system.compile_s = compile_s
        if architecture is not None:
            if architecture not in _ARCHITECTURES:
                raise ValueError(f"fake: architecture={architecture!r}; use one of {list(_ARCHITECTURES)}")
            system.architecture = architecture
        if multi_id_base is not None:
            system.multi_id_base = multi_id_base
        if driver_id_base != "unchanged":
            system.driver_id_base = None if driver_id_base is None else int(driver_id_base)
        if sdk is not None:
            system.sdk = module.__version__ = _full_version(sdk)
            module.DeviceManager = _manager_class(system)
            system.manager = None
        if busy is not None:
            system.busy = set(busy)
        if fail is not None:
            system.fail = dict(fail)

    session_cls = type("InferenceSession", (InferenceSession,), {"_system": system})
    names: dict[str, Any] = {
        "configure": configure,
        "versionString": lambda: f"{system.sdk} (fake)",
        "DeviceManager": _manager_class(system),
        "DeviceInfo": DeviceInfo,
        "InferenceSession": session_cls,
        "TrainingSession": TrainingSession,
        "SessionOptions": SessionOptions,
        "DataFlow": DataFlow,
        "AnchorReturnType": AnchorReturnType,
        "PyStepIO": PyStepIO,
        "TensorInfo": TensorInfo,
        "InputShapeInfo": InputShapeInfo,
        "GraphTransformer": GraphTransformer,
        "Builder": Builder,
        "popart_exception": popart_exception,
        "popart_internal_exception": popart_internal_exception,
        "popart_runtime_error": popart_runtime_error,
        "OutOfMemoryException": OutOfMemoryException,
        "SyncPattern": SyncPattern,
        "DeviceConnectionType": DeviceConnectionType,
        "DeviceSelectionCriterion": DeviceSelectionCriterion,
        "DeviceType": DeviceType,
        "VirtualGraphMode": VirtualGraphMode,
        "SyntheticDataMode": SyntheticDataMode,
        "AnchorReturnTypeId": AnchorReturnTypeId,
    }
    for name, value in names.items():
        setattr(module, name, value)
    return module


def _full_version(sdk: str) -> str:
    parts = sdk.split(".")
    return ".".join(parts + ["0"] * (3 - len(parts)))


class PopartFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Put first on ``sys.meta_path``: ``import popart`` then loads ``module`` the way the SDK's
    ``popart/__init__.py`` does, raising ``ImportError`` if onnx was imported first. ``log`` gets
    ``"popart"`` appended at each import."""

    def __init__(self, module: types.ModuleType, log: list[str] | None = None) -> None:
        self.module = module
        self.log = log if log is not None else []

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "popart":
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self.module

    def exec_module(self, module: types.ModuleType) -> None:
        self.log.append("popart")
        if "onnx" in sys.modules:
            raise ImportError(IMPORT_ERROR)


# -- devices ---------------------------------------------------------------------------------------


class DeviceInfo:
    """One device: a single IPU or a power-of-two group of them, the IPU Model, or an offline IPU."""

    def __init__(
        self,
        system: FakeIpuSystem,
        device_id: int,
        ipu_indices: tuple[int, ...],
        device_type: Any = DeviceType.Ipu,
        connection_type: Any = DeviceConnectionType.Always,
        tiles: int = TILES_PER_IPU,
        architecture: str = "ipu2",
    ) -> None:
        self._system, self._id, self._ipus = system, device_id, ipu_indices
        self._type, self._connection, self._tiles, self._architecture = (
            device_type,
            connection_type,
            tiles,
            architecture,
        )
        # Host devices (IPU Model, CPU) need no hardware to attach to.
        self._attached = device_type in (DeviceType.IpuModel, DeviceType.Cpu)

    id = property(lambda self: self._id)
    numIpus = property(lambda self: len(self._ipus))
    tilesPerIPU = property(lambda self: self._tiles)
    tilesPerIpu = property(lambda self: self._tiles)
    type = property(lambda self: self._type)
    #: ``getTarget().getTargetArchString()``: ``"ipu1"``, ``"ipu2"`` or ``"ipu21"`` (popart.cpp bindings).
    ipuVersion = property(lambda self: self._architecture)
    isAttached = property(lambda self: self._attached)
    connectionType = property(lambda self: self._connection)

    @property
    def version(self) -> str:
        """Not the architecture: for hardware, ``DevicexIpuInfo::getVersion``
        (``willow/src/popx/devicexmanager.cpp:350-362``) gives the driver version once attached and
        ``<unknown-ipu-unattached>`` before; the IPU Model gives its ``ipuVersion``, the CPU
        ``<unknown-cpu>`` and an offline IPU ``<offline-ipu>``
        (``willow/include/popart/popx/devicexmanager.hpp:154, 127, 193``)."""
        if self._type == DeviceType.Ipu:
            return DRIVER_VERSION if self._attached else "<unknown-ipu-unattached>"
        if self._type == DeviceType.IpuModel:
            return self._architecture
        if self._type == DeviceType.OfflineIpu:
            return "<offline-ipu>"
        return "<unknown-cpu>"

    @property
    def driverIds(self) -> list[int]:
        """The driver ids of the IPUs the device is made of (``FakeIpuSystem.driver_id``, not their
        ``gc-info -l`` ids); an offline IPU gives ``[0]`` (``devicexmanager.hpp:205``), the IPU Model
        its IPUs' indices."""
        if self._type == DeviceType.OfflineIpu:
            return [0]
        if self._type == DeviceType.Ipu:
            return [self._system.driver_id(i) for i in self._ipus]
        return list(self._ipus)

    def attach(self) -> bool:
        """Attach to every IPU of the device; ``False`` if another device or process holds one."""
        if self._type == DeviceType.OfflineIpu:
            # devicexmanager.hpp:187: DevicexOfflineIpuInfo::attach throws.
            raise popart_exception("Cannot attach to offline device")
        if self._type != DeviceType.Ipu:
            self._attached = True
            return True
        if self._attached:
            return True
        holders = {self._system.attached.get(i) for i in self._ipus} - {None}
        if holders or set(self._ipus) & self._system.busy:
            return False
        for i in self._ipus:
            self._system.attached[i] = self
        self._attached = True
        self._system.events.append(f"attach {self._id}")
        return True

    tryAttachUntilTimeout = attach

    def detach(self) -> None:
        """Release the IPUs (doing nothing if not attached, as the SDK does)."""
        if self._type == DeviceType.OfflineIpu:
            # devicexmanager.hpp:189: DevicexOfflineIpuInfo::detach throws.
            raise popart_exception("Cannot detach from offline device")
        self._system.injected("detach")
        if self._attached and self._type == DeviceType.Ipu:
            self._system.events.append(f"detach {self._id}")
        for i in self._ipus:
            if self._system.attached.get(i) is self:
                del self._system.attached[i]
        self._attached = False

    def __enter__(self) -> DeviceInfo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def __repr__(self) -> str:
        # DeviceInfo::toString (willow/src/devicemanager.cpp:352-370).
        return (
            f"Device Type:{_DEVICE_TYPE_NAMES[self._type.name]} Connection Type:"
            f"{self._connection.name} Id:{self._id} Version:{self.version} "
            f"NumIPUs:{len(self._ipus)} NumTilesPerIPU:{self._tiles} "
            f"DeviceIds: {{{','.join(map(str, self.driverIds))}}}"
        )


def _manager_class(system: FakeIpuSystem) -> type:
    base = _DeviceManager if system.modern else _DeviceManager23
    return type("DeviceManager", (base,), {"_system": system})


class _DeviceManager23:
    """``popart.DeviceManager`` as SDK 2.3 has it: no ``try...`` methods; ``acquire...`` returns None."""

    _system: FakeIpuSystem

    def __new__(cls) -> Any:  # a process-wide singleton
        if cls._system.manager is None:
            cls._system.manager = super().__new__(cls)
            cls._system.manager.attach_timeout = 0
        return cls._system.manager

    def enumerateDevices(
        self,
        pattern: Any = SyncPattern.Full,
        numIpus: int = 1,
        deviceType: Any = DeviceType.Ipu,
        connectionType: Any = DeviceConnectionType.Always,
        tilesPerIPU: int = 0,
    ) -> list[DeviceInfo]:
        """Devices of ``numIpus`` IPUs (power-of-two groups), numbered as ``gc-info -l`` does."""
        system = self._system
        if deviceType != DeviceType.Ipu or numIpus < 1 or numIpus & (numIpus - 1) or numIpus > system.ipus:
            return []
        tiles = _ARCHITECTURES[system.architecture][0]
        offset, size = 0, 1
        while size < numIpus:
            offset += system.ipus // size
            if size == 1 and system.multi_id_base is not None:
                offset = system.multi_id_base
            size *= 2
        return [
            DeviceInfo(
                system,
                offset + k,
                tuple(range(k * numIpus, (k + 1) * numIpus)),
                connection_type=connectionType,
                tiles=tiles,
                architecture=system.architecture,
            )
            for k in range(system.ipus // numIpus)
            if not tilesPerIPU or tilesPerIPU == tiles
        ]

    def _try_acquire(self, numIpus: int, tilesPerIpu: int, connectionType: Any) -> DeviceInfo | None:
        self._system.events.append(f"acquire {numIpus}")
        if numIpus > 0 and numIpus & (numIpus - 1):
            raise popart_exception(
                f"You have attempted to acquire {numIpus} IPUs. The number of IPUs requested must be a "
                "power of two"
            )
        if connectionType == DeviceConnectionType.Never:
            raise popart_exception(
                "Trying to acquire a hardware device when connectionType is DeviceConnectionType::Never"
            )
        for device in self.enumerateDevices(
            SyncPattern.Full, numIpus, DeviceType.Ipu, connectionType, tilesPerIpu
        ):
            if connectionType != DeviceConnectionType.Always or device.attach():
                return device
        return None

    def acquireAvailableDevice(
        self,
        numIpus: int = 1,
        tilesPerIpu: int = 0,
        pattern: Any = SyncPattern.Full,
        connectionType: Any = DeviceConnectionType.Always,
        selectionCriterion: Any = DeviceSelectionCriterion.First,
    ) -> DeviceInfo | None:
        """An attached device, or ``None`` when none is free (SDK <= 2.3)."""
        return self._try_acquire(numIpus, tilesPerIpu, connectionType)

    def _by_id(self, device_id: int, connectionType: Any) -> DeviceInfo | None:
        self._system.events.append(f"acquire id {device_id}")
        size = 1
        while size <= self._system.ipus:
            for device in self.enumerateDevices(SyncPattern.Full, size, DeviceType.Ipu, connectionType):
                if device.id == device_id:
                    if connectionType != DeviceConnectionType.Always or device.attach():
                        return device
                    return None
            size *= 2
        raise popart_internal_exception(
            f"fake: no device with id {device_id} (the real SDK dereferences a null device here)"
        )

    def acquireDeviceById(
        self,
        id: int,
        pattern: Any = SyncPattern.Full,
        connectionType: Any = DeviceConnectionType.Always,
    ) -> DeviceInfo | None:
        """The device with this ``gc-info -l`` id, attached; ``None`` when it is not free (SDK <= 2.3)."""
        return self._by_id(id, connectionType)

    def createCpuDevice(self) -> DeviceInfo:
        return DeviceInfo(self._system, 0, (), DeviceType.Cpu, tiles=1)

    def createIpuModelDevice(self, options: Mapping[str, object]) -> DeviceInfo:
        opts = _host_device_options(
            options, ("numIPUs", "tilesPerIPU", "compileIPUCode", "ipuVersion"), "IpuModel"
        )
        count = int(opts.get("numIPUs", "1"))
        tiles = int(opts.get("tilesPerIPU", str(IPU_MODEL_TILES)))
        self._system.events.append(f"ipu model {count}")
        return DeviceInfo(
            self._system,
            0,
            tuple(range(count)),
            DeviceType.IpuModel,
            tiles=tiles,
            architecture=opts.get("ipuVersion", "ipu2"),
        )

    def createOfflineIPUDevice(self, opts: Mapping[str, object]) -> DeviceInfo:
        options = _host_device_options(
            opts, ("numIPUs", "tilesPerIPU", "ipuVersion", "syncPattern", "gatewayMode"), "OfflineIpu"
        )
        return DeviceInfo(
            self._system,
            0,
            tuple(range(int(options.get("numIPUs", "1")))),
            DeviceType.OfflineIpu,
            DeviceConnectionType.Never,
            tiles=int(options.get("tilesPerIPU", str(TILES_PER_IPU))),
            architecture=options.get("ipuVersion", "ipu2"),
        )

    def setOnDemandAttachTimeout(self, attachTimeout: int) -> None:
        self.attach_timeout = attachTimeout


class _DeviceManager(_DeviceManager23):
    """``popart.DeviceManager`` from SDK 2.4 on: ``try...`` returns ``None``; ``acquire...`` raises."""

    def tryAcquireAvailableDevice(
        self,
        numIpus: int = 1,
        tilesPerIpu: int = 0,
        pattern: Any = SyncPattern.Full,
        connectionType: Any = DeviceConnectionType.Always,
        selectionCriterion: Any = DeviceSelectionCriterion.First,
    ) -> DeviceInfo | None:
        """An attached device of ``numIpus`` IPUs, or ``None`` when none is free."""
        return self._try_acquire(numIpus, tilesPerIpu, connectionType)

    def acquireAvailableDevice(
        self,
        numIpus: int = 1,
        tilesPerIpu: int = 0,
        pattern: Any = SyncPattern.Full,
        connectionType: Any = DeviceConnectionType.Always,
        selectionCriterion: Any = DeviceSelectionCriterion.First,
    ) -> DeviceInfo:
        """An attached device; raises when none is free."""
        device = self._try_acquire(numIpus, tilesPerIpu, connectionType)
        if device is None:
            raise popart_exception(
                f"Failed to acquire device with {numIpus} IPUs. Ensure that there are sufficient IPUs "
                "available. If you have enabled the Poplar SDK you can check device availability with the "
                "`gc-monitor` command-line utility."
            )
        return device

    def tryAcquireDeviceById(
        self,
        id: int,
        pattern: Any = SyncPattern.Full,
        connectionType: Any = DeviceConnectionType.Always,
    ) -> DeviceInfo | None:
        return self._by_id(id, connectionType)

    def acquireDeviceById(
        self,
        id: int,
        pattern: Any = SyncPattern.Full,
        connectionType: Any = DeviceConnectionType.Always,
    ) -> DeviceInfo:
        device = self._by_id(id, connectionType)
        if device is None:
            raise popart_exception(
                f"Failed to acquire device with id '{id}'. Ensure it is available. If you have enabled the "
                "Poplar SDK you can check device availability with the `gc-monitor` command-line utility."
            )
        return device


def _host_device_options(options: Mapping[str, object], valid: tuple[str, ...], kind: str) -> dict[str, str]:
    # The binding turns keys and values into strings with operator<< (so True becomes "True").
    out = {str(k): str(v) for k, v in options.items()}
    for key in out:
        if key not in valid:
            raise popart_exception(
                f"Invalid option `{key}' passed to DevicexManager::createHostDevice for device type {kind}. "
                f"Valid options are {list(valid)}"
            )
    return out


# -- data flow and options -------------------------------------------------------------------------


class AnchorReturnType:
    """``AnchorReturnType("ALL" | "FINAL" | "SUM")`` or ``AnchorReturnType("EVERYN", period)``."""

    _IDS: ClassVar[dict[str, Any]] = {
        "final": AnchorReturnTypeId.Final,
        "everyn": AnchorReturnTypeId.EveryN,
        "all": AnchorReturnTypeId.All,
        "sum": AnchorReturnTypeId.Sum,
    }

    def __init__(self, anchorReturnTypeString: str, returnPeriod: int | None = None, *_: object) -> None:
        art = self._IDS.get(str(anchorReturnTypeString).lower())
        if art is None:
            raise popart_exception(f"Invalid anchor return type ID supplied: {anchorReturnTypeString}")
        if returnPeriod is None and art == AnchorReturnTypeId.EveryN:
            raise popart_exception("Must specify return period with option 'EVERYN'")
        if returnPeriod is not None:
            if art != AnchorReturnTypeId.EveryN:
                raise popart_exception("A return period should not be supplied for this anchor return type")
            if returnPeriod <= 0:
                raise popart_exception("Anchor return period must be greater than zero")
        self._art, self._period, self._text = art, returnPeriod, anchorReturnTypeString

    def id(self) -> Any:
        return self._art

    def rp(self) -> int:
        if self._art != AnchorReturnTypeId.EveryN:
            raise popart_exception("A return period should not be supplied for this anchor return type")
        assert self._period is not None
        return self._period


class DataFlow:
    """``DataFlow(batchesPerStep, {id: AnchorReturnType})`` or ``DataFlow(bps, [ids], AnchorReturnType)``."""

    def __init__(self, batchesPerStep: int, anchorTensors: Any, anchorReturnType: Any = None) -> None:
        if isinstance(anchorTensors, Mapping):
            anchors = dict(anchorTensors)
        else:
            art = anchorReturnType if anchorReturnType is not None else AnchorReturnType("All")
            anchors = {str(t): art for t in anchorTensors}
        if not all(isinstance(a, AnchorReturnType) for a in anchors.values()):
            raise TypeError(
                "__init__(): incompatible constructor arguments (anchors need AnchorReturnType values)"
            )
        if batchesPerStep <= 0:
            raise popart_exception("'Batches per step' must be greater than zero")
        # The anchors live in a std::map: anchors() lists them sorted by tensor id.
        self._anchors = dict(sorted(anchors.items()))
        self._bps = int(batchesPerStep)
        for art in self._anchors.values():
            if art.id() == AnchorReturnTypeId.EveryN:
                if art.rp() > self._bps:
                    raise popart_exception("Return period must be <= to the number of batches per step")
                if self._bps % art.rp():
                    raise popart_exception("Return period must be a factor of the number of batches per step")

    def batchesPerStep(self) -> int:
        return self._bps

    def setBatchesPerStep(self, bps: int) -> None:
        self._bps = bps

    def anchors(self) -> list[str]:
        return list(self._anchors)

    def nAnchors(self) -> int:
        return len(self._anchors)

    def isAnchored(self, id: str) -> bool:
        return id in self._anchors

    def art(self, id: str) -> AnchorReturnType:
        if id not in self._anchors:
            raise popart_exception(f"Tensor {id} is not an anchor")
        return self._anchors[id]


#: ``SessionOptions`` fields this fake knows, with the SDK's defaults (``sessionoptions.hpp``).
_SESSION_OPTIONS: dict[str, Any] = {
    "enableEngineCaching": False,
    "cachePath": "session_cache",
    "virtualGraphMode": VirtualGraphMode.Off,
    "enableReplicatedGraphs": False,
    "replicatedGraphCount": 1,
    "enablePipelining": False,
    "enableGradientAccumulation": False,
    "accumulationFactor": 1,
    "partialsTypeMatMuls": "",
    "engineOptions": {},
    "convolutionOptions": {},
    "reportOptions": {},
    "matmulOptions": {},
    "lstmOptions": {},
    "gclOptions": {},
    "instrumentWithHardwareCycleCounter": False,
    "syntheticDataMode": SyntheticDataMode.Off,
    "enableStochasticRounding": False,
    "enableDistributedReplicatedGraphs": False,
    "globalReplicationFactor": 1,
    "globalReplicaOffset": 0,
    "strictOpVersions": True,
    "constantWeights": True,
    "compileEngine": True,
    "enableLoadAndOffloadRNGState": False,
}


class SessionOptions:
    """An attribute bag with the SDK's fields and defaults; unknown fields and wrong types are refused."""

    def __init__(self) -> None:
        for name, default in _SESSION_OPTIONS.items():
            object.__setattr__(self, name, copy.copy(default))

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _SESSION_OPTIONS:
            raise AttributeError(f"'popart_core.SessionOptions' object has no attribute '{name}'")
        default = _SESSION_OPTIONS[name]
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, dict):
            ok = isinstance(value, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            )
            value = dict(value) if ok else value
        else:
            ok = isinstance(value, type(default))
        if not ok:
            raise TypeError(f"(): incompatible function arguments: SessionOptions.{name} = {value!r}")
        object.__setattr__(self, name, value)

    def copy(self) -> SessionOptions:
        """What the IR keeps: later changes to the caller's object do not reach a session."""
        return copy.deepcopy(self)

    def as_dict(self) -> dict[str, Any]:
        """Every field, for tests to read back."""
        return {name: getattr(self, name) for name in _SESSION_OPTIONS}


class InputShapeInfo:
    """Accepted and ignored (this fake needs static input shapes in the model)."""


@dataclass(frozen=True)
class TensorInfo:
    """``session.getInfo(id)``: ``shape()``, ``data_type_lcase()`` and ``data_type()``."""

    dtype: np.dtype
    dims: tuple[int, ...]

    def shape(self) -> list[int]:
        return list(self.dims)

    def data_type_lcase(self) -> str:
        return str(np.dtype(self.dtype).name)

    def data_type(self) -> str:
        return _ONNX_TYPE_NAMES.get(np.dtype(self.dtype).name, np.dtype(self.dtype).name.upper())

    def nelms(self) -> int:
        return int(np.prod(self.dims, dtype=np.int64))


_ONNX_TYPE_NAMES = {
    "float32": "FLOAT",
    "float16": "FLOAT16",
    "int32": "INT32",
    "int64": "INT64",
    "bool": "BOOL",
}


class PyStepIO:
    """``PyStepIO(inputs, outputs)``: dicts of C-contiguous numpy arrays."""

    def __init__(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> None:
        self.inputs: dict[str, np.ndarray] = {}
        self.outputs: dict[str, np.ndarray] = {}
        for kind, given, store in (("input", inputs, self.inputs), ("output", outputs, self.outputs)):
            for tid, value in given.items():
                array = value if isinstance(value, np.ndarray) else np.asarray(value)
                if not array.flags["C_CONTIGUOUS"]:
                    raise popart_exception(
                        f"PyStepIO is unable to use the numpy {kind} array for tensor '{tid}' as it is not "
                        "c-contiguous (a data conversion here could have a significant impact on performance "
                        "and hence is not allowed)"
                    )
                store[tid] = array
        self.runtime_asserts = True

    def enableRuntimeAsserts(self, b: bool) -> None:
        self.runtime_asserts = b


# -- models ----------------------------------------------------------------------------------------


def _load_model(model: bytes | str | Path) -> Any:
    import onnx

    try:
        if isinstance(model, bytes):
            return onnx.load_from_string(model)
        return onnx.load(str(model))
    except Exception as exc:
        raise popart_exception(f"fake: could not load the ONNX model: {exc}") from exc


class GraphTransformer:
    """``GraphTransformer(modelProtoOrFilename)``: ``convertFloatsToHalfs()``, ``getModelProto()``."""

    def __init__(self, modelProtoOrFilename: bytes | str) -> None:
        self._model = _load_model(modelProtoOrFilename)
        self.calls: list[str] = []

    def convertFloatsToHalfs(self) -> None:
        """Every float32 tensor (inputs, outputs, weights, constants, casts) becomes float16."""
        from onnx import AttributeProto
        from onnx import TensorProto
        from onnx import numpy_helper

        self.calls.append("convertFloatsToHalfs")
        graph = self._model.graph

        def half(tensor: Any) -> None:
            if tensor.data_type == TensorProto.FLOAT:
                tensor.CopyFrom(
                    numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float16), tensor.name)
                )

        for tensor in graph.initializer:
            half(tensor)
        for vi in [*graph.input, *graph.output, *graph.value_info]:
            if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
                vi.type.tensor_type.elem_type = TensorProto.FLOAT16
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == AttributeProto.TENSOR:
                    half(attr.t)
                elif node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.FLOAT:
                    attr.i = TensorProto.FLOAT16

    def getModelProto(self) -> bytes:
        return bytes(self._model.SerializeToString())

    def _not_faked(self, *_: object, **__: object) -> None:
        raise NotImplementedError("fake GraphTransformer: only convertFloatsToHalfs is imitated")

    convertDoublesToHalfs = convertINT64ToINT32 = removeUnusedInputs = prepareNodesForTraining = _not_faked


class _OpsetNotFaked:
    def __getattr__(self, name: str) -> Any:
        raise NotImplementedError(f"fake Builder: building ops ({name}) is not imitated")


class Builder:
    """``Builder(modelProtoOrFilename=None, opsets=None)`` over an existing model."""

    def __init__(self, modelProtoOrFilename: bytes | str | None = None, opsets: Any = None) -> None:
        import onnx

        if modelProtoOrFilename is None:
            self._model = onnx.helper.make_model(onnx.helper.make_graph([], "fake", [], []))
        else:
            self._model = _load_model(modelProtoOrFilename)
            for opset in self._model.opset_import:
                if opset.domain in ("", "ai.onnx") and opset.version not in ONNX_OPSETS:
                    raise popart_exception(
                        f"Encountered ONNX opset version {opset.version}, Maximimum supported opset is 11, "
                        "minimum 6 and default 10."
                    )
        self.aiOnnx = self.aiGraphcore = _OpsetNotFaked()
        self.memory_proportions: dict[str, float] = {}

    def _inputs(self) -> list[Any]:
        initializers = {t.name for t in self._model.graph.initializer}
        return [vi for vi in self._model.graph.input if vi.name not in initializers]

    def getInputTensorIds(self) -> list[str]:
        return [vi.name for vi in self._inputs()]

    def getOutputTensorIds(self) -> list[str]:
        return [vi.name for vi in self._model.graph.output]

    def getModelProto(self) -> bytes:
        return bytes(self._model.SerializeToString())

    def getTensorShape(self, id: str) -> list[int]:
        graph = self._model.graph
        for vi in [*graph.input, *graph.output, *graph.value_info]:
            if vi.name == id:
                return [d.dim_value for d in vi.type.tensor_type.shape.dim]
        raise popart_exception(f"fake: no shape for tensor {id}")

    def _producer(self, tid: str) -> Any:
        for node in self._model.graph.node:
            if tid in node.output:
                return node
        raise popart_exception(f"fake: no node produces tensor {tid}")

    def _annotate(self, tid: str, name: str, value: int) -> None:
        import onnx

        self._producer(tid).attribute.append(onnx.helper.make_attribute(name, value))

    def setAvailableMemoryProportion(
        self, nodeOutputName: str | set[str], availableMemoryProportion: float
    ) -> None:
        """Both bindings (one id or a set of ids; ``popart.cpp:3220-3232``): the range check and the
        ``__available_memory`` node attribute of ``willow/src/builder.cpp:1779-1793``."""
        import onnx

        proportion = float(availableMemoryProportion)
        if proportion > 1.0 or proportion <= 0.0:
            raise popart_exception("availableMemoryProportion must be in (0,1]")
        ids = {nodeOutputName} if isinstance(nodeOutputName, str) else set(nodeOutputName)
        for tid in sorted(ids):
            node = self._producer(tid)
            # The SDK removes a previous value first (an ONNX node keeps one attribute per name).
            kept = [a for a in node.attribute if a.name != AVAILABLE_MEMORY_ATTRIBUTE]
            del node.attribute[:]
            node.attribute.extend(kept)
            node.attribute.append(onnx.helper.make_attribute(AVAILABLE_MEMORY_ATTRIBUTE, proportion))
            self.memory_proportions[tid] = proportion

    def virtualGraph(self, id: str, ipu: int) -> None:
        self._annotate(id, VIRTUAL_GRAPH_ATTRIBUTE, ipu)

    def pipelineStage(self, id: str, stage: int) -> None:
        self._annotate(id, PIPELINE_STAGE_ATTRIBUTE, stage)


# -- sessions --------------------------------------------------------------------------------------


class InferenceSession:
    """``InferenceSession(fnModel, dataFlow, deviceInfo, inputShapeInfo=..., patterns=None,
    userOptions=SessionOptions(), name="inference")``: the IR is built (and checked) here."""

    _system: FakeIpuSystem

    def __init__(
        self,
        fnModel: bytes | str,
        dataFlow: DataFlow,
        deviceInfo: DeviceInfo | None,
        inputShapeInfo: InputShapeInfo | None = None,
        patterns: Any = None,
        userOptions: SessionOptions | None = None,
        name: str = "inference",
    ) -> None:
        system = self._system
        system.events.append("InferenceSession")
        options = userOptions if userOptions is not None else SessionOptions()
        if not isinstance(dataFlow, DataFlow) or not isinstance(options, SessionOptions):
            raise TypeError("__init__(): incompatible constructor arguments")
        if deviceInfo is None:
            raise popart_exception("Must pass a valid deviceInfo to InferenceSession::createFromOnnxModel")
        system.injected("InferenceSession")
        self.fn_model = fnModel
        self.options = options.copy()
        self.dataflow = dataFlow
        self.device = deviceInfo
        self.name = name
        self.prepared = False
        self.weights_written = False
        self.runs = 0
        self.last_cycles: int | None = None
        model = _load_model(fnModel)
        self._weight_elements = _weight_elements(model)  # the count model's, read once
        self.model_bytes = bytes(model.SerializeToString())
        self._check_ir(model, dataFlow, deviceInfo, self.options)
        self._ort = _ort_session(self.model_bytes)
        self._infos = _tensor_infos(self._ort)
        for anchor in dataFlow.anchors():
            if anchor not in self._infos or anchor in self._input_ids:
                raise NotImplementedError(f"fake: anchors must be model outputs, got {anchor!r}")
        system.sessions.append(self)

    @property
    def _input_ids(self) -> list[str]:
        return [i.name for i in self._ort.get_inputs()]

    @staticmethod
    def _check_ir(model: Any, dataflow: DataFlow, device: DeviceInfo, options: SessionOptions) -> None:
        opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=10)
        if options.strictOpVersions and opset not in ONNX_OPSETS:
            raise popart_exception(
                "Internal error encounterd when checking op version against opset.\nCould not find domain "
                f"and version ai.onnx {opset} in opsets. This could be due to the generated files being out "
                "of date. This check may be disabled by setting popart::SessionOptions::strictOpVersions "
                "to false."
            )
        initializers = {t.name for t in model.graph.initializer}
        for vi in model.graph.input:
            if vi.name in initializers:
                continue
            dims = vi.type.tensor_type.shape.dim
            shown = (
                "["
                + ", ".join(d.dim_param if d.HasField("dim_param") else str(d.dim_value) for d in dims)
                + "]"
            )
            for d in dims:
                if d.HasField("dim_param") or d.dim_value <= 0:
                    unknown = d.dim_param if d.HasField("dim_param") else str(d.dim_value)
                    raise popart_exception(
                        f"Input tensor '{vi.name}' must be specified in InputShapeInfo, as it has shape "
                        f"{shown}, which uses an unknown value '{unknown}'."
                    )
        if dataflow.nAnchors() == 0:
            raise popart_exception("User must specify an anchor tensor when doing inference.")
        replicas = options.replicatedGraphCount if options.enableReplicatedGraphs else 1
        if device.numIpus % replicas:
            raise popart_exception(
                "For replicated graphs, the number of IPUs must be divisible by the replication factor."
            )
        graphs = device.numIpus // replicas
        mode = options.virtualGraphMode
        if options.enablePipelining and (mode == VirtualGraphMode.Off or graphs == 1):
            # willow/src/ir.cpp:580-587; C++ prints the mode as VirtualGraphMode::Off.
            raise popart_exception(
                f"Pipelining requires more than 1 IPU (currently {graphs}) and the 'virtualGraphMode' "
                f"session option to not be VirtualGraphMode::Off (currently {_cpp_enum(mode)})."
            )
        virtual_graphs = _attribute_values(model, VIRTUAL_GRAPH_ATTRIBUTE)
        if mode == VirtualGraphMode.Manual and not virtual_graphs:
            # willow/src/ir.cpp:1997-2001.
            raise popart_exception(
                f"SessionOptions flag virtualGraphMode is {_cpp_enum(mode)}, but no Ops have been annotated "
                "with virtual graph information. This is an inconsistent combination. "
            )
        if options.enablePipelining and not options.enableGradientAccumulation:
            stages = _pipeline_stages(model, virtual_graphs, graphs)
            if dataflow.batchesPerStep() < stages:
                # willow/src/transforms/pipeline.cpp:1394-1399 ("5. There must be enough
                # mini-batches of data to fill the pipeline").
                raise popart_exception(
                    "For pipelining, depth (batchesPerStep) must equal at least the number of pipeline "
                    f"stages ({stages})"
                )

    @property
    def dataFlow(self) -> DataFlow:
        return self.dataflow

    def _check_fits(self) -> None:
        """Refuse a model whose weights alone exceed the device's tile memory (an approximation of
        Poplar's out-of-memory failure in ``prepareDevice``; see ``TILE_MEMORY_BYTES``)."""
        device = self.device
        if device.type not in (DeviceType.Ipu, DeviceType.IpuModel):
            return
        tile_bytes = _ARCHITECTURES.get(device.ipuVersion, _ARCHITECTURES["ipu2"])[1]
        # Each replica holds every weight; virtual graphs split them over a replica's IPUs.
        ipus_per_replica = max(1, device.numIpus // self.replicationFactor)
        capacity = device.tilesPerIPU * tile_bytes * ipus_per_replica
        weights = _weight_bytes(_load_model(self.model_bytes))
        if weights > capacity:
            raise OutOfMemoryException(
                "Out of memory: Cannot fit all variable data onto one or more tiles. (fake: the model's "
                f"weights take {weights} bytes; {ipus_per_replica} IPU(s) of {device.tilesPerIPU} tiles x "
                f"{tile_bytes} bytes hold {capacity})"
            )

    @property
    def replicationFactor(self) -> int:
        return self.options.replicatedGraphCount if self.options.enableReplicatedGraphs else 1

    @property
    def accumulationFactor(self) -> int:
        return self.options.accumulationFactor if self.options.enableGradientAccumulation else 1

    def getInfo(self, id: str) -> TensorInfo:
        if id not in self._infos:
            raise popart_runtime_error(f"TensorInfo for `{id}' not set")
        return self._infos[id]

    def prepareDevice(self, loadEngine: bool = True) -> None:
        """Compile (for the simulated compile time, holding the GIL, as the SDK's binding does:
        popart.cpp:2054-2071) and load the engine onto the attached device."""
        self._system.events.append("prepareDevice")
        self._system.injected("prepareDevice")
        self._check_fits()
        self._system.compile_spans.append(hold_gil(self._system.compile_s))
        if loadEngine and self.options.compileEngine:
            if self.device.connectionType == DeviceConnectionType.Never:
                raise popart_runtime_error("Trying to load an engine on an offline device")
            if not self.device.isAttached:
                raise popart_runtime_error(
                    "fake: the device is not attached (the real SDK fails loading the engine)"
                )
        self.prepared = True

    def loadEngineAndConnectStreams(self) -> None:
        if not self.prepared:
            raise popart_runtime_error(
                "Trying to load an engine but no compiled engine. Did you forget to call prepareDevice()?"
            )

    def weightsFromHost(self) -> None:
        self._system.events.append("weightsFromHost")
        self._system.injected("weightsFromHost")
        if not self.prepared:
            raise popart_runtime_error(
                "fake: weightsFromHost before prepareDevice (the real SDK has no engine yet)"
            )
        self.weights_written = True

    def initAnchorArrays(self) -> dict[str, np.ndarray]:
        """Arrays of ``[bps, accumulation, replicas]`` (ALL) etc., dimensions of 1 dropped, + the tensor's."""
        self._system.events.append("initAnchorArrays")
        arrays = {}
        bps = self.dataflow.batchesPerStep()
        for anchor in self.dataflow.anchors():
            info = self.getInfo(anchor)
            art = self.dataflow.art(anchor)
            shape = [self.replicationFactor]
            if art.id() == AnchorReturnTypeId.All:
                shape = [bps, self.accumulationFactor, *shape]
            elif art.id() == AnchorReturnTypeId.EveryN:
                if bps % art.rp():
                    raise RuntimeError("Invalid anchor period, is not divisble by batchesPerStep")
                shape = [bps // art.rp(), self.accumulationFactor, *shape]
            shape = [d for d in shape if d != 1] + info.shape()
            arrays[anchor] = np.empty(shape, dtype=info.data_type_lcase())
        return arrays

    def run(self, stepio: PyStepIO, debugName: str = "") -> None:
        """One step: ``batchesPerStep`` batches on each replica; anchors written into ``stepio``'s outputs."""
        if isinstance(stepio, str):
            raise NotImplementedError("fake: run(programHandle, stepio) is not imitated")
        system = self._system
        system.events.append("run")
        if not self.prepared:
            raise popart_runtime_error(
                "Devicex::prepare() must be called before Devicex::run(const IStepIO &) is called."
            )
        if self.device.connectionType == DeviceConnectionType.Never:
            raise popart_runtime_error("Offline IPU device is not configured for execution")
        if not self.device.isAttached:
            raise popart_runtime_error("fake: the device was detached (the real SDK fails inside Poplar)")
        system.injected("run")
        if self.runs == 0 and stepio.runtime_asserts:
            self._assert_num_elements(stepio)
        else:
            try:
                self._assert_num_elements(stepio)
            except popart_exception as exc:
                raise FakeUndefinedBehaviour(
                    f"PopART checks buffer sizes on the first run only; this later run would misbehave: {exc}"
                ) from exc
        self._compute(stepio)
        self.runs += 1
        if self.options.instrumentWithHardwareCycleCounter:
            # The counter's sync. Spun, not slept: a sleep this short overshoots by tens of microseconds.
            end = time.perf_counter_ns() + round(system.counter_s * 1e9)
            while time.perf_counter_ns() < end:
                pass
            self.last_cycles = self._cycles(stepio)

    def _expected_in(self, tid: str) -> int:
        return (
            self.getInfo(tid).nelms()
            * self.accumulationFactor
            * self.dataflow.batchesPerStep()
            * (self.replicationFactor)
        )

    def _expected_out(self, tid: str) -> int:
        art = self.dataflow.art(tid)
        bps = self.dataflow.batchesPerStep()
        divisor = {
            AnchorReturnTypeId.All: 1,
            AnchorReturnTypeId.Final: bps * self.accumulationFactor,
            AnchorReturnTypeId.Sum: bps * self.accumulationFactor,
        }.get(art.id()) or art.rp()
        base = self.getInfo(tid).nelms() * self.accumulationFactor * bps
        return base * self.replicationFactor // divisor

    def _base_error(self, io: str, tid: str, expected: int, got: int) -> str:
        return (
            f"Unexpected number of {io} elements for Tensor {tid}. Expected {expected}, but received {got}.\n"
            "To disable this check at your own risk, use IStepIO::enableRuntimeAsserts.\n"
            "This with, "
            f"\n   replication  factor = {self.replicationFactor}"
            f"\n   accumulation factor = {self.accumulationFactor}"
            f"\n   batches per step    = {self.dataflow.batchesPerStep()}"
            f"\n   Tensor nelms        = {self.getInfo(tid).nelms()}"
        )

    def _assert_num_elements(self, stepio: PyStepIO) -> None:
        for tid, array in stepio.inputs.items():
            if tid not in self._input_ids:
                raise popart_runtime_error(
                    f"The tensor '{tid}' has been provided as one of the inputs to the stepIO, but it is not "
                    "registered as one of the inputs to the model. Please check this tensor and your stepIO."
                )
            if array.size != self._expected_in(tid):
                raise popart_runtime_error(self._base_error("input", tid, self._expected_in(tid), array.size))
        for tid, array in stepio.outputs.items():
            if not self.dataflow.isAnchored(tid):
                raise popart_runtime_error(
                    f"Testing that the buffer provided by user for output Tensor {tid} has the correct "
                    f"number of elements,  But there is no Tensor named {tid} in the Ir's tensors. "
                )
            if array.size != self._expected_out(tid):
                art = self.dataflow.art(tid)
                text = self._base_error("output", tid, self._expected_out(tid), array.size)
                text += f"\nThe anchor return type is  {str(art.id()).split('.')[-1]}"
                if art.id() == AnchorReturnTypeId.EveryN:
                    text += f"\nThe return period is {art.rp()}"
                raise popart_runtime_error(text)

    def _compute(self, stepio: PyStepIO) -> None:
        bps, replicas = self.dataflow.batchesPerStep(), self.replicationFactor
        feeds = {}
        for tid in self._input_ids:
            if tid not in stepio.inputs:
                raise popart_runtime_error(f"No tensor {tid} provided in PyStepIO's inputs")
            info, array = self.getInfo(tid), stepio.inputs[tid]
            if array.dtype != info.dtype:
                if not (array.dtype == np.int64 and info.dtype == np.int32):
                    raise popart_runtime_error(
                        f"Type discrepancy for tensor {tid}. User provided : "
                        f"{_ONNX_TYPE_NAMES.get(array.dtype.name, array.dtype.name.upper())} and expected : "
                        f"{info.data_type()}. Consider a custom copy here (as memcpy cannot be used)"
                    )
                array = array.astype(np.int32)
            feeds[tid] = array.reshape(bps, replicas, *info.dims)
        results: dict[str, np.ndarray] = {}
        names = [o.name for o in self._ort.get_outputs()]
        for b in range(bps):
            for r in range(replicas):
                outs = self._ort.run(None, {tid: feeds[tid][b, r] for tid in feeds})
                for name, out in zip_strict(names, outs):
                    results.setdefault(name, np.empty((bps, replicas, *out.shape), out.dtype))[b, r] = out
        for tid, target in stepio.outputs.items():
            art, all_batches = self.dataflow.art(tid), results[tid]
            if art.id() == AnchorReturnTypeId.All:
                chosen = all_batches
            elif art.id() == AnchorReturnTypeId.EveryN:
                chosen = all_batches[art.rp() - 1 :: art.rp()]
            elif art.id() == AnchorReturnTypeId.Final:
                chosen = all_batches[-1]
            else:
                chosen = all_batches.sum(axis=0)
            target.reshape(chosen.shape)[...] = chosen.astype(target.dtype)

    def getCycleCount(self, id: str = "") -> int:
        if not self.options.instrumentWithHardwareCycleCounter:
            raise popart_runtime_error(
                "SessionOption 'instrumentWithHardwareCycleCounter' must be set to true in order to measure "
                "cycle count"
            )
        if self.runs == 0 or self.last_cycles is None:
            raise popart_runtime_error("Must call run before getCycleCount.")
        hold_gil(self._system.read_s)  # cycleCountTensorToHost: a program of its own, a round trip
        return self.last_cycles

    def _cycles(self, stepio: PyStepIO) -> int:
        """The fake's count of the last run's cycles on the first replica (``CALL_CYCLES``'s model)."""
        bps, replicas = self.dataflow.batchesPerStep(), self.replicationFactor
        inputs = sum(a.size for a in stepio.inputs.values()) // (bps * replicas)
        return CALL_CYCLES + bps * (self._weight_elements + inputs)

    def _not_faked(self, *_: object, **__: object) -> None:
        raise NotImplementedError("fake InferenceSession: not imitated")

    compileAndExport = loadExecutable = weightsToHost = modelToHost = _not_faked


class TrainingSession:
    """Training is not imitated."""

    def __init__(self, *_: object, **__: object) -> None:
        raise NotImplementedError("fake popart: TrainingSession is not imitated")


def _attribute_values(model: Any, name: str) -> set[int]:
    """The distinct integer values of node attribute ``name`` in the model."""
    return {a.i for node in model.graph.node for a in node.attribute if a.name == name}


def _pipeline_stages(model: Any, virtual_graphs: set[int], graphs: int) -> int:
    """``Ir::getNumPipelineStages`` (``willow/src/ir.cpp:2887-2906``): the distinct pipeline stages.

    Without ``__pipeline_stage`` annotations each op's stage is its virtual graph id
    (``willow/src/transforms/pipeline.cpp:1067-1074``); under ``VirtualGraphMode::Auto`` the fake
    assumes the automatic split (``auto_virtual_graph.cpp``) uses every one of a replica's IPUs.
    """
    stages = _attribute_values(model, PIPELINE_STAGE_ATTRIBUTE)
    if stages:
        return len(stages)
    return len(virtual_graphs) if virtual_graphs else graphs


def _weight_elements(model: Any) -> int:
    """Elements of the model's initializers (its weights)."""
    return sum(int(np.prod(t.dims, dtype=np.int64)) for t in model.graph.initializer)


def _weight_bytes(model: Any) -> int:
    """Bytes of the model's initializers (its weights), from their shapes and element types."""
    import onnx
    from onnx import helper

    # onnx 1.12 (Python 3.8's floor) has the table only; 1.13 added the helper.
    to_numpy = getattr(helper, "tensor_dtype_to_np_dtype", None) or onnx.mapping.TENSOR_TYPE_TO_NP_TYPE.get
    total = 0
    for tensor in model.graph.initializer:
        itemsize = np.dtype(to_numpy(tensor.data_type)).itemsize
        total += int(np.prod(tensor.dims, dtype=np.int64)) * itemsize
    return total


def _ort_session(model: bytes) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only
    try:
        return onnxruntime.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise popart_exception(f"fake: onnxruntime cannot run the model: {exc}") from exc


def _tensor_infos(ort: Any) -> dict[str, TensorInfo]:
    """Input infos from the model; output infos from one run on zeros (static shapes, so exact)."""
    types_ = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64}
    types_.update({"tensor(int32)": np.int32, "tensor(bool)": np.bool_, "tensor(double)": np.float64})
    infos = {}
    feeds = {}
    for i in ort.get_inputs():
        dtype = np.dtype(types_[i.type])
        infos[i.name] = TensorInfo(dtype, tuple(int(d) for d in i.shape))
        feeds[i.name] = np.zeros(i.shape, dtype)
    for o, value in zip_strict(ort.get_outputs(), ort.run(None, feeds)):
        infos[o.name] = TensorInfo(np.dtype(value.dtype), tuple(value.shape))
    return infos
