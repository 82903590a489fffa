"""A stand-in for Graphcore's ``poptorch`` module, version 3.4 (Poplar SDK 3.4, September 2023).

It imitates the surface of section 0.1 of ``shared/reference/graphcore-sdk-api.md``, and the exact
messages and rules of ``graphcore/poptorch`` at tag ``sdk/poptorch/3.4.0`` (``python/options.py``,
``python/_options_impl.py``, ``python/_poplar_executor.py``, ``popart_compiler/source/Compiler.cpp`` and
``popart_compiler/source/CompilerImpl.cpp``):

- ``Options`` setters chain; values read back in snake_case; passing an ``Options`` to
  ``inferenceModel``/``trainingModel``/``DataLoader`` freezes the caller's object (any later setter
  raises ``AttributeError("Can't modify frozen Options")``) and the executor keeps a frozen clone;
- a ``PoplarExecutor`` compiles lazily on its first call (or on ``compile(*inputs)``), checks the
  batch rule (``AssertionError`` with PopTorch's text), the pipelining rule, the 64-IPU limit and the
  power-of-two rule, the available memory proportion's range (PopART's check) and distributed
  execution (see below), then acquires IPUs from a fake machine: "Failed to acquire N IPU(s)" when none
  are free; ``detachFromDevice``/``attachToDevice``/``destroy`` behave and fail as PopTorch's do,
  and a call after ``detachFromDevice`` re-attaches (as PopTorch's ``__call__`` does);
- outputs are real: the torch model runs on the CPU, once per micro-batch, and the results are
  combined as the output mode says (``All``, ``Final``, ``Sum``, ``EveryN``);
- the GIL: a call then spends its simulated device time (``configure(iteration_s=...)`` per
  micro-batch, else ``call_s`` per call, 2 ms by default) blocked *with the GIL held*, as
  ``poptorch_core.execute`` holds it for the whole device run (``python/poptorch.cpp:864-878``): no
  other thread of the process runs meanwhile. Each executor's ``device_spans`` lists those spans;
- ``getPerfCounters`` has PopTorch's shapes and tick counts, with host timestamps truncated to whole
  milliseconds; the ``get*Latency`` methods are PopTorch's own ``_computeLatency``;
- ``cycleCount()`` raises as PopTorch's does when ``logCycleCount`` is off and before the first
  run; otherwise it gives the count the last call read at its end (as ``Compiler::run`` does), the
  cycles of the first replica, deterministic per graph and batch (``CALL_CYCLES``); a call with the
  counter costs what the stated cost model says (``COUNTER_S`` and ``READ_S``, both in the call).

Not imitated (they raise ``NotImplementedError``): executable files (``compileAndExport``, ``save``,
``loadExecutable``), ``AsynchronousDataAccessor``, keyword inputs, ``POPTORCH_WAIT_FOR_IPU`` and
``POPTORCH_DEFAULT_OPTIONS``. Training is approximate: the loss is the model's 0-d output (the
last one, if it returns several; ``identity_loss`` marks nothing, it only applies its reduction),
gradients are averaged over the micro-batches of each device iteration (one optimizer step per
device iteration, as PopTorch steps once per ``gradientAccumulation x replicas`` micro-batches), with
plain ``torch.optim.SGD(lr=0.01)`` as the default optimizer. The fake trains the wrapped model's own
parameters on the CPU, so the host model is always up to date: ``copyWeightsToHost`` (which PopTorch
needs to bring the device's weights back, and calls implicitly when the wrapped model is used) only
checks that the model is compiled and counts the copy (``_host_weights_version``). The real PopTorch
3.4 needs torch 2.0.1 exactly; the fake runs on whatever torch is installed.

Distributed execution: ``Options().Distributed`` reads ``OMPI_COMM_WORLD_SIZE`` and
``OMPI_COMM_WORLD_RANK`` when constructed, as PopTorch's does, so any process started by ``mpirun`` or
``poprun`` asks for one replica of a cross-process (distributed replicated) graph unless it calls
``Options().Distributed.disable()``. The fake machine is one host without IPU-over-fabric, so such a
compile fails (see ``PoplarExecutor._check_distributed``), unless the options are the
``popdist.poptorch.Options`` of ``tests/fakes/fake_popdist.py`` (PopDist configured the device): then
the instance compiles its local replicas on PopDist's device and trains on its own batches only
(the other instances' gradients, which the real launch averages in, do not exist here).

Compile time: ``compilationTime()`` exists from PopTorch 3.3 on (``configure(sdk="3.2")`` makes an
older PopTorch, whose executors have no such attribute); it raises as PopTorch's does, and returns
``None`` after an executable-cache hit, as PopTorch's does (its progress bar, which times the
compilation, never runs when the executable is loaded). The executable cache
(``enableExecutableCaching(path)``) is a file per compiled graph in that directory, keyed by the
model, the inputs' shapes and dtypes and the options that shape the graph: a second compile of the
same graph, in any process, is a hit.

The machine has 4 Mk2 IPUs unless ``configure(ipus=..., version=...)`` says otherwise; ``reset()``
frees them and forgets what was recorded (``executors`` and ``options_passed``). Where a test shares
the host between processes (``tests.fakes.ipu_users``), attaching records this process as the IPUs'
user, which the fake gcipuinfo then lists as their ``"user process id"``, and IPUs another live
process holds are not acquired, as the driver refuses them.
"""

from __future__ import annotations

import copy
import datetime
import enum
import hashlib
import inspect
import logging
import math
import os
import time
import weakref
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import torch

from pytest_ipu.backports import zip_strict
from tests.fakes import ipu_users
from tests.fakes.gil import hold_gil

__version__ = "3.4.0-fake"

logger = logging.getLogger("poptorch::python")

#: The environment variables PopTorch (and its distributed options, through MPI's) reads: a test of
#: the fake clears them first, so that the machine's own do not leak in.
ENVIRONMENT = (
    "POPTORCH_CACHE_DIR",
    "POPTORCH_IPU_MODEL",
    "POPTORCH_WAIT_FOR_IPU",
    "POPTORCH_DEFAULT_OPTIONS",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
)

NO_EXECUTABLE_ERR = "Model has not been compiled or has been destroyed."
#: PopTorch's C++ sources that raise the errors imitated here (paths as its error messages print them).
_COMPILER = "popart_compiler/source/Compiler.cpp"
_CPP = "popart_compiler/source/CompilerImpl.cpp"
_PY = "python/_poplar_executor.py"


# -- errors -------------------------------------------------------------------------------------


class Error(Exception):
    """``poptorch.Error``: ``str()`` is the long message; ``message`` is the bare one."""

    def __init__(self, long_message: str, message: str | None = None, type: str = "poptorch_py_error"):
        super().__init__(long_message)
        self.message = message if message is not None else long_message
        self.type = type
        self.location = ""


class RecoverableError(Error):
    """``poptorch.RecoverableError``; ``recovery_action`` says what would fix it."""

    recovery_action = ""


class UnrecoverableError(Error):
    """``poptorch.UnrecoverableError``."""


def createPoptorchError(msg: str) -> Error:
    """As ``poptorch._impl.createPoptorchError``: ``"'poptorch_py_error': msg"``."""
    return Error(f"'poptorch_py_error': {msg}", msg, "poptorch_py_error")


def _cpp_error(msg: str, line: int, source: str = _CPP, type: str = "poptorch_cpp_error") -> Error:
    """An error raised by PopTorch's C++ side, formatted as its ``poptorch_err/source/ExceptionHandling.cpp``
    does (``"In <file>:<line>: '<type>': <message>"``); a PopART error caught there has type
    ``popart_exception`` (``Compiler.cpp:1912-1914``)."""
    return Error(f"In {source}:{line}: '{type}': {msg}", msg, type)


# -- enums --------------------------------------------------------------------------------------


class OutputMode(enum.IntEnum):
    """Which results a call returns: the final batch, every N, all, their sum, or the default."""

    Final = 0
    EveryN = 1
    All = 2
    Sum = 3
    Default = 4


class ConnectionType(enum.IntEnum):
    """When the executor attaches to the IPUs."""

    Always = 0
    OnDemand = 1
    Never = 2


class SyncPattern(enum.IntEnum):
    """How IPUs synchronise with each other and the host."""

    Full = 0
    SinglePipeline = 1
    ReplicaAndLadder = 2


class AutoStage(enum.IntEnum):
    """How pipeline stage ids are derived from blocks."""

    SameAsIpu = 0
    AutoIncrement = 1


class DataLoaderMode(enum.IntEnum):
    """``poptorch.DataLoader`` modes."""

    Sync = 0
    Async = 1
    AsyncRebatched = 2


_LOG_LEVELS = {
    "TRACE": 0,
    "TRACE_ALL": 0,
    "DEBUG": 1,
    "DEBUG_IR": 1,
    "INFO": 2,
    "WARN": 3,
    "ERR": 4,
    "OFF": 6,
}
log_level = "INFO"


def setLogLevel(level: str | int) -> None:
    """Accepts PopTorch's level names (or their legacy integers); anything else raises ValueError."""
    global log_level
    if isinstance(level, int):
        for key, value in _LOG_LEVELS.items():
            if value == level:
                log_level = key
                return
    if not isinstance(level, str) or level not in _LOG_LEVELS:
        raise ValueError("Level must be one of " + ", ".join(_LOG_LEVELS))
    log_level = level


# -- the fake machine ---------------------------------------------------------------------------


#: The simulated device time of one call unless configured: short, so that every test of a PopTorch
#: path meets a call that holds the GIL without waiting long for it.
DEFAULT_CALL_S = 0.002
#: The fake's cost model of the hardware cycle counter (``logCycleCount(True)``), stated, not
#: measured on an IPU: the counter compiled in adds ``COUNTER_S`` to every call's device time (the
#: internal sync and the two timer compute sets around the main program), and PopTorch reads the
#: count at the end of every call (``Compiler::run`` asks PopART's ``getCycleCount``, which runs a
#: program of its own that copies it to the host: one host-device round trip), ``READ_S`` more with
#: the GIL held. ``cycleCount()`` returns what the last call read, at no cost.
COUNTER_S = 1e-6
READ_S = 50e-6
#: The fake's count model: a call of the first replica takes ``CALL_CYCLES`` (syncs and host
#: exchange) plus, per micro-batch, one cycle per parameter element of the model and one per
#: element of the micro-batch's inputs: deterministic per graph and batch, as a compiled IPU
#: program is.
CALL_CYCLES = 2_000


@dataclass
class _Machine:
    ipus: int = 4
    version: int = 2
    #: The PopTorch release imitated, as ``(major, minor)``: before 3.3 there is no ``compilationTime``.
    sdk: tuple[int, int] = (3, 4)
    #: Simulated seconds per device iteration (``None``: ``call_s`` per call): each call holds the GIL
    #: that long per micro-batch, and the perf counters show it.
    iteration_s: float | None = None
    #: Simulated device seconds of one call when ``iteration_s`` is not set, held with the GIL.
    call_s: float = DEFAULT_CALL_S
    #: The cycle counter's cost model (``COUNTER_S``, ``READ_S``).
    counter_s: float = COUNTER_S
    read_s: float = READ_S
    busy: set[int] = field(default_factory=set)

    def device_s(self, micro_batches: int) -> float:
        """The simulated device time of one call of ``micro_batches`` micro-batches."""
        return self.call_s if self.iteration_s is None else self.iteration_s * micro_batches

    def devices(self) -> list[tuple[int, ...]]:
        """Device ids as ``gc-info -l`` numbers them: single IPUs first, then aligned groups of 2, 4, ..."""
        devices = [(i,) for i in range(self.ipus)]
        size = 2
        while size <= self.ipus:
            devices += [tuple(range(s, s + size)) for s in range(0, self.ipus - size + 1, size)]
            size *= 2
        return devices

    def acquire(self, num_ipus: int) -> tuple[int, tuple[int, ...]] | None:
        """The first free device of exactly ``num_ipus`` IPUs, as (device id, its IPUs), now busy."""
        taken = self.busy | ipu_users.held_by_others(os.getpid())
        for device_id, ipus in enumerate(self.devices()):
            if len(ipus) == num_ipus and not taken.intersection(ipus):
                self._take(ipus)
                return device_id, ipus
        return None

    def acquire_id(self, device_id: int) -> tuple[int, tuple[int, ...]] | None:
        """Device ``device_id`` if it exists and is free, now busy."""
        devices = self.devices()
        taken = self.busy | ipu_users.held_by_others(os.getpid())
        if not 0 <= device_id < len(devices) or taken.intersection(devices[device_id]):
            return None
        self._take(devices[device_id])
        return device_id, devices[device_id]

    def _take(self, ipus: tuple[int, ...]) -> None:
        # The driver knows which process attached the IPUs; gcipuinfo lists it ("user process id").
        self.busy.update(ipus)
        ipu_users.attach(ipus, os.getpid())

    def release(self, ipus: tuple[int, ...]) -> None:
        self.busy.difference_update(ipus)
        ipu_users.release(ipus, os.getpid())


_MACHINE = _Machine()
#: Every executor created, in order (tests read their frozen ``options`` back).
executors: list[PoplarExecutor] = []
#: Every ``Options`` object passed to a wrapper or a DataLoader (the caller's, now frozen).
options_passed: list[Options] = []


def configure(
    ipus: int | None = None,
    version: int | None = None,
    iteration_s: float | None = None,
    call_s: float | None = None,
    sdk: str | None = None,
    counter_s: float | None = None,
    read_s: float | None = None,
) -> None:
    """Set the fake machine: its IPU count, its ``ipuHardwareVersion()`` (1, 2, 21, or -1 for unknown),
    the simulated device time, which each call spends holding the GIL: ``iteration_s`` per
    micro-batch (the perf counters show it), else ``call_s`` per call; the PopTorch release
    imitated (``sdk="3.2"``: no ``compilationTime``; ``reset()`` goes back to 3.4); and the cycle
    counter's cost model: ``counter_s`` and ``read_s`` more per call with the counter (both inside
    the call)."""
    if sdk is not None:
        major, minor = (int(x) for x in sdk.split(".")[:2])
        _MACHINE.sdk = (major, minor)
    if counter_s is not None:
        _MACHINE.counter_s = counter_s
    if read_s is not None:
        _MACHINE.read_s = read_s
    if ipus is not None:
        _MACHINE.ipus = ipus
    if version is not None:
        _MACHINE.version = version
    if iteration_s is not None:
        _MACHINE.iteration_s = iteration_s
    if call_s is not None:
        _MACHINE.call_s = call_s


def reset() -> None:
    """Back to 4 free Mk2 IPUs, with nothing recorded."""
    global _MACHINE, log_level
    ipu_users.release(_MACHINE.busy, os.getpid())
    _MACHINE = _Machine()
    executors.clear()
    options_passed.clear()
    log_level = "INFO"


def busy_ipus() -> set[int]:
    """The IPUs currently attached by some executor."""
    return set(_MACHINE.busy)


def _ipu_model_env() -> bool:
    return any(
        os.environ.get(v, "0") not in ("", "0") for v in ("POPTORCH_IPU_MODEL", "POPTORCH_SMALL_IPU_MODEL")
    )


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:
    """Whether a device of ``num_ipus`` IPUs exists (free or not); False under ``POPTORCH_IPU_MODEL``."""
    if _ipu_model_env():
        return False
    return any(len(ipus) == num_ipus for ipus in _MACHINE.devices())


def ipuHardwareVersion() -> int:
    """1, 2, 21 or -1 (unknown); ``AssertionError`` when there is no IPU."""
    version = 0 if _ipu_model_env() or _MACHINE.ipus == 0 else _MACHINE.version
    assert version != 0, "No IPU hardware available on this system"
    return version


# -- options ------------------------------------------------------------------------------------


class _OptionsDict:
    """PopTorch's ``OptionsDict``: only known keys can be set, with their default's type."""

    def __init__(self, **defaults: Any) -> None:
        object.__setattr__(self, "_is_frozen", False)
        object.__setattr__(self, "_values", dict(defaults))

    def checkIsFrozen(self, option: str | None = None) -> None:
        if option != "_is_frozen" and self._is_frozen:
            raise AttributeError("Can't modify frozen Options")

    def set(self, **kwargs: Any) -> None:
        self.checkIsFrozen()
        for option, value in kwargs.items():
            assert self.exists(option), f"Invalid option {option}, valid options are {self._values.keys()}"
            assert isinstance(value, type(self._values[option])), (
                f"Unexpected type {type(value)} for option {option}. Expected {type(self._values[option])}"
            )
            self._values[option] = value

    def createOrSet(self, **kwargs: Any) -> None:
        self.checkIsFrozen()
        for option, value in kwargs.items():
            if option in self._values:
                self.set(**{option: value})
            else:
                self._values[option] = value

    def exists(self, option: str) -> bool:
        return option in self._values

    def _changeFreezeState(self, state: bool) -> None:
        object.__setattr__(self, "_is_frozen", state)
        for value in list(self.__dict__.values()):
            if isinstance(value, (_OptionsDict, _PopartOptions)):
                value._changeFreezeState(state)

    def _freeze(self) -> None:
        self._changeFreezeState(True)

    def __setattr__(self, option: str, value: Any) -> None:
        self.checkIsFrozen(option)
        if option.startswith("_"):
            object.__setattr__(self, option, value)
        else:
            self.set(**{option: value})

    def __getattr__(self, option: str) -> Any:
        values = self.__dict__.get("_values", {})
        if option.startswith("_") or option not in values:
            raise AttributeError(f"Invalid attribute {option}.")
        return values[option]

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        for key, value in self.__dict__.items():
            object.__setattr__(clone, key, False if key == "_is_frozen" else copy.deepcopy(value, memo))
        return clone


class _PopartOptions:
    """``Options._Popart``: raw PopART session options in ``options``."""

    def __init__(self) -> None:
        self._is_frozen = False
        self.options: dict[str, Any] = {}
        self.set("instrumentWithHardwareCycleCounter", False)
        self.set("rearrangeAnchorsOnHost", False)

    def _changeFreezeState(self, state: bool) -> None:
        self._is_frozen = state

    def checkIsFrozen(self) -> None:
        if self._is_frozen:
            raise AttributeError("Can't modify frozen Options")

    def set(self, key: str, value: Any) -> _PopartOptions:
        self.checkIsFrozen()
        self.options[key] = value
        return self

    def setEngineOptions(self, engine_options: dict[str, str]) -> _PopartOptions:
        return self.set("engineOptions", engine_options)


class _PrecisionOptions(_OptionsDict):
    def __init__(self, popart: _PopartOptions) -> None:
        super().__init__()
        self._popart_options = popart

    def setPartialsType(self, dtype: torch.dtype) -> _PrecisionOptions:
        if dtype in (torch.float, torch.float32):
            type_str = "float"
        elif dtype in (torch.half, torch.float16):
            type_str = "half"
        else:
            raise ValueError("parameter to setPartialsType should be either torch.float or torch.half")
        self._popart_options.set("partialsTypeMatMuls", type_str)
        self._popart_options.set("convolutionOptions", {"partialsType": type_str})
        return self

    def enableStochasticRounding(self, enabled: bool) -> _PrecisionOptions:
        self._popart_options.set("enableStochasticRounding", enabled)
        return self


class _TrainingOptions(_OptionsDict):
    def __init__(self) -> None:
        super().__init__(gradient_accumulation=1)

    def gradientAccumulation(self, gradient_accumulation: int) -> _TrainingOptions:
        self.set(gradient_accumulation=gradient_accumulation)
        return self


class _DistributedOptions(_OptionsDict):
    """``Options().Distributed`` (``python/options.py:449-512``): the process id and count."""

    def __init__(self) -> None:
        super().__init__(num_distributed_processes=1, distributed_process_id=0, ipuof_configs={})
        # options.py:466: every Options() reads OpenMPI's variables, which mpirun and poprun set in
        # each process they start; outside them the defaults give one process.
        self.setEnvVarNames("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")

    def disable(self) -> _DistributedOptions:
        """Ignore the options and environment variables: one process, id 0 (options.py:468-473)."""
        self.set(num_distributed_processes=1, distributed_process_id=0)
        return self

    def setEnvVarNames(self, var_num_processes: str, var_process_id: str) -> _DistributedOptions:
        """Read the process id and count from these variables (options.py:475-490)."""
        return self.configureProcessId(
            int(os.environ.get(var_process_id, "0")), int(os.environ.get(var_num_processes, "1"))
        )

    def configureProcessId(self, process_id: int, num_processes: int) -> _DistributedOptions:
        self.set(distributed_process_id=process_id)
        self.set(num_distributed_processes=num_processes)
        return self

    @property
    def processId(self) -> int:
        return int(self.distributed_process_id)

    @property
    def numProcesses(self) -> int:
        return int(self.num_distributed_processes)


class _IExecutionStrategy:
    pass


class Stage:
    """``poptorch.Stage(*block_ids).ipu(n)``."""

    def __init__(self, *block_ids: str) -> None:
        assert all(isinstance(b, str) for b in block_ids), "Block ids are expected to be strings"
        self._blocks = list(block_ids)
        self._ipu: int | None = None

    @property
    def blocks(self) -> list[str]:
        return self._blocks

    def ipu(self, ipu: int) -> Stage:
        self._ipu = ipu
        return self


class PipelinedExecution(_IExecutionStrategy):
    """The default strategy; its arguments are block ids, lists of them, Stages or one AutoStage."""

    def __init__(self, *args: Any) -> None:
        self.args = args


class ShardedExecution(PipelinedExecution):
    """Shards run one after another (no pipelining rule)."""


class Options(_OptionsDict):
    """``poptorch.Options``: reads ``POPTORCH_CACHE_DIR`` when constructed; setters return ``self``."""

    #: The fake's stand-in for a device PopDist configured (no such attribute in PopTorch): True in
    #: ``fake_popdist.poptorch.Options``, whose distributed compiles this fake machine then accepts.
    _configured_by_popdist = False

    def __init__(self) -> None:
        object.__setattr__(self, "_popart", _PopartOptions())
        object.__setattr__(self, "_precision", _PrecisionOptions(self._popart))
        object.__setattr__(self, "_training", _TrainingOptions())
        object.__setattr__(self, "_distributed", _DistributedOptions())
        object.__setattr__(self, "_execution_strategy", PipelinedExecution())
        object.__setattr__(self, "_show_compilation_progress_bar", True)
        super().__init__(
            replication_factor=1,
            input_group_size=1,
            device_iterations=1,
            log_dir=".",
            auto_round_num_ipus=False,
            output_mode=OutputMode.Default.value,
            output_return_period=1,
            connection_type=ConnectionType.Always.value,
            sync_pattern=SyncPattern.Full.value,
            available_memory_proportion={},
        )
        path = os.environ.get("POPTORCH_CACHE_DIR", "")
        if path:
            self.enableExecutableCaching(path)
        if os.environ.get("POPTORCH_DEFAULT_OPTIONS", "{}").strip() not in ("", "{}"):
            raise NotImplementedError("fake_poptorch does not imitate POPTORCH_DEFAULT_OPTIONS")

    @property
    def Precision(self) -> _PrecisionOptions:
        return self._precision

    @property
    def Training(self) -> _TrainingOptions:
        return self._training

    @property
    def Distributed(self) -> _DistributedOptions:
        return self._distributed

    @property
    def _Popart(self) -> _PopartOptions:
        return self._popart

    def deviceIterations(self, device_iterations: int) -> Options:
        self.set(device_iterations=device_iterations)
        return self

    def replicationFactor(self, replication_factor: int) -> Options:
        self.set(replication_factor=replication_factor)
        return self

    def autoRoundNumIPUs(self, auto_round_num_ipus: bool = True) -> Options:
        self.set(auto_round_num_ipus=auto_round_num_ipus)
        return self

    def enableExecutableCaching(self, path: str | None) -> Options:
        if path is None:
            self._Popart.set("enableEngineCaching", False)
        else:
            self._Popart.set("cachePath", path)
            self._Popart.set("enableEngineCaching", True)
        return self

    def useIpuModel(self, use_model: bool) -> Options:
        self.createOrSet(use_model=use_model)
        return self

    def useIpuId(self, ipu_id: int) -> Options:
        assert isinstance(ipu_id, int)
        self.createOrSet(ipu_id=ipu_id)
        return self

    def useOfflineIpuTarget(self, ipu_version: int = 2) -> Options:
        self.connectionType(ConnectionType.Never)
        self.createOrSet(ipu_version=ipu_version)
        return self

    def connectionType(self, connection_type: ConnectionType) -> Options:
        assert isinstance(connection_type, ConnectionType)
        self.set(connection_type=connection_type.value)
        return self

    def syncPattern(self, sync_pattern: SyncPattern) -> Options:
        assert isinstance(sync_pattern, SyncPattern)
        self.set(sync_pattern=sync_pattern.value)
        return self

    def outputMode(self, output_mode: OutputMode, output_return_period: int | None = None) -> Options:
        assert isinstance(output_mode, OutputMode)
        if output_mode == OutputMode.EveryN:
            valid = output_return_period is not None and output_return_period > 0
            assert valid, "EveryN anchor must have output_return_period set to valid positive integer"
        self.set(output_mode=output_mode.value, output_return_period=output_return_period or 1)
        return self

    def defaultOutputMode(self) -> bool:
        return bool(self.output_mode == OutputMode.Default)

    def randomSeed(self, random_seed: int) -> Options:
        assert isinstance(random_seed, int)
        torch.manual_seed(random_seed)
        self.createOrSet(random_seed=random_seed)
        return self

    def setAvailableMemoryProportion(self, available_memory_proportion: dict[str, float]) -> Options:
        actual: dict[int, float] = {}
        for key, mem in available_memory_proportion.items():
            assert key.startswith("IPU"), (
                'Available memory proportions are expected to be in a dictionary of {"IPU0": 0.5} where '
                f"the 0 in IPU is the index of the IPU. Invalid key: {key}"
            )
            actual[int(key[3:])] = mem
        self.createOrSet(available_memory_proportion=actual)
        return self

    def setExecutionStrategy(self, strategy: _IExecutionStrategy) -> Options:
        assert isinstance(strategy, _IExecutionStrategy)
        self.checkIsFrozen()
        object.__setattr__(self, "_execution_strategy", strategy)
        return self

    def logCycleCount(self, log_cycle_count: bool) -> Options:
        self._Popart.set("instrumentWithHardwareCycleCounter", log_cycle_count)
        return self

    def enableSyntheticData(self, enabled: bool) -> Options:
        self._Popart.set("syntheticDataMode", 2 if enabled else 0)
        return self

    def showCompilationProgressBar(self, show: bool = True) -> Options:
        self.checkIsFrozen()
        object.__setattr__(self, "_show_compilation_progress_bar", show)
        return self

    def modelName(self, name: str) -> Options:
        self.createOrSet(model_name=name)
        return self

    def logDir(self, log_dir: str) -> Options:
        self.set(log_dir=log_dir)
        return self

    def clone(self) -> Options:
        """An unfrozen deep copy."""
        return copy.deepcopy(self)


# -- blocks -------------------------------------------------------------------------------------

#: The IPU ids seen while a model is traced (``None`` outside a trace).
_traced_ipus: set[int] | None = None


def _record_ipu(ipu_id: int | None) -> None:
    if _traced_ipus is not None and ipu_id is not None:
        _traced_ipus.add(ipu_id)


class _BlockHook:
    def __init__(self, user_id: str | None, ipu_id: int | None) -> None:
        self.user_id, self.ipu_id = user_id, ipu_id

    def __call__(self, module: torch.nn.Module, inputs: Any) -> None:
        _record_ipu(self.ipu_id)


def BeginBlock(layer_to_call: torch.nn.Module, user_id: str | None = None, ipu_id: int | None = None) -> Any:
    """Register a block pre-hook on ``layer_to_call`` and return it; a second annotation raises."""
    if not isinstance(layer_to_call, torch.nn.Module):
        raise createPoptorchError("module is not an instance of torch.nn.Module or function.")
    if any(isinstance(hook, _BlockHook) for hook in layer_to_call._forward_pre_hooks.values()):
        raise createPoptorchError("module has already been assigned to a block.")
    layer_to_call.register_forward_pre_hook(_BlockHook(user_id, ipu_id))
    return layer_to_call


class Block:
    """``with poptorch.Block(user_id, ipu_id=...):`` places the ops inside on ``ipu_id``."""

    def __init__(self, user_id: str | None = None, ipu_id: int | None = None) -> None:
        self.user_id, self.ipu_id = user_id, ipu_id

    def __enter__(self) -> Block:
        _record_ipu(self.ipu_id)
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def BlockFunction(user_id: str | None = None, ipu_id: int | None = None) -> Callable[[Any], Any]:
    """A decorator running the function inside ``Block(user_id, ipu_id)``."""

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with Block(user_id, ipu_id):
                return fn(*args, **kwargs)

        return wrapped

    return decorator


# -- data loading -------------------------------------------------------------------------------


class DataLoader(torch.utils.data.DataLoader):  # type: ignore[type-arg]
    """Batches of ``batch_size x deviceIterations x replicas x gradientAccumulation``; freezes ``options``."""

    def __init__(self, options: Options, dataset: Any, batch_size: int = 1, **kwargs: Any) -> None:
        options._freeze()
        options_passed.append(options)
        self._combined_batch_size = (
            batch_size
            * options.device_iterations
            * (options.replication_factor // options.input_group_size)
            * options.Training.gradient_accumulation
        )
        kwargs.setdefault("drop_last", True)
        super().__init__(dataset, batch_size=self._combined_batch_size, **kwargs)

    @property
    def combinedBatchSize(self) -> int:
        return self._combined_batch_size


class AsynchronousDataAccessor:
    """Not imitated: the real one runs a worker process over shared memory."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("fake_poptorch does not imitate AsynchronousDataAccessor")


# -- the executor -------------------------------------------------------------------------------


@dataclass
class _Executable:
    num_ipus: int
    stages: int
    device_id: int | None
    ipus: tuple[int, ...]
    hardware: bool
    #: ``None`` after an executable-cache hit: nothing was compiled, so nothing was timed.
    compile_time: datetime.timedelta | None
    attached: bool = False
    last_run_s: float = 0.0
    #: The last run's cycles on the first replica (``CALL_CYCLES`` model); ``None`` before a run or
    #: without the counter.
    last_cycles: int | None = None


_wrapped_for_training: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


class PoplarExecutor:
    """What ``inferenceModel`` and ``trainingModel`` return."""

    def __init__(
        self,
        model: torch.nn.Module,
        options: Options | None,
        training: bool,
        optimizer: torch.optim.Optimizer | None = None,
        user_model: torch.nn.Module | None = None,
    ) -> None:
        if options:
            if not isinstance(options, Options):
                raise createPoptorchError(
                    f"Invalid type: 'options' is of type {type(options)} (Expected poptorch.Options)"
                )
            options._freeze()
            options_passed.append(options)
            options = options.clone()
        else:
            options = Options()
        self._user_model = user_model or model
        if training:
            if options.defaultOutputMode():
                options.outputMode(OutputMode.Final)
            if not optimizer:
                optimizer = torch.optim.SGD(self._user_model.parameters(), lr=0.01)
        else:
            if options.defaultOutputMode():
                options.outputMode(OutputMode.All)
            if options.Training.gradient_accumulation != 1:
                msg = (
                    "You must set poptorch.Options().Training.gradientAccumulation to 1 or leave it as its "
                    "default value (1) when running a poptorch.inferenceModel()."
                )
                strategy = options._execution_strategy
                if isinstance(strategy, PipelinedExecution) and not isinstance(strategy, ShardedExecution):
                    msg += (
                        " Use poptorch.Options().deviceIterations to process a sufficient number of "
                        "batches each run for pipelined execution instead."
                    )
                raise createPoptorchError(msg)
            assert not optimizer, "Optimizer should be None for inference"
        self._model = model
        self._options = options
        self._training = training
        self._optimizer = optimizer
        self._executable: _Executable | None = None
        self._is_attached = False
        self._compiled_inputs: tuple[Any, ...] | None = None
        self._timestamps: list[list[list[float]]] | None = None
        #: Bumped by every ``copyWeightsToHost``; ``_dirty_host_weights``: trained since the last one.
        self._host_weights_version = 0
        self._dirty_host_weights = False
        #: Each call's simulated device run, as ``time.monotonic_ns`` values: the GIL was held from
        #: the first (one bytecode after) to at least the second (``tests/fakes/gil.py``).
        self.device_spans: list[tuple[int, int]] = []
        self._options._freeze()
        executors.append(self)

    def __repr__(self) -> str:
        return f"PoplarExecutor({self._model!r})"

    @property
    def model(self) -> torch.nn.Module:
        return self._model

    @property
    def options(self) -> Options:
        return self._options

    @property
    def training(self) -> bool:
        return self._training

    # -- compilation ----------------------------------------------------------------------------

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Trace and compile for ``args`` without running; a second call only logs a warning."""
        if kwargs:
            raise NotImplementedError("fake_poptorch takes positional inputs only")
        if self._executable is not None:
            logger.warning("Call to compile() ignored: the executable is already compiled")
        else:
            self._compile(args)

    def _batch_factor(self) -> int:
        o = self._options
        return (
            o.device_iterations
            * (o.replication_factor // o.input_group_size)
            * o.Training.gradient_accumulation
        )

    def _narrow(self, tensor: Any) -> Any:
        """PopTorch's ``_narrow_tensor``: the batch rule, with its message."""
        if not isinstance(tensor, torch.Tensor):
            return tensor
        o = self._options
        extra = self._batch_factor()
        b_size = 1 if not tensor.size() else tensor.size()[0]
        assert b_size % extra == 0, (
            f"Invalid batch dimension: In the input {tensor.shape}, the batch dimension ({b_size}) must be a "
            f"multiple of Options.deviceIterations({o.device_iterations}) * "
            f"(Options.replicationFactor({o.replication_factor}) / "
            f"Options.inputReplicaGrouping.input_group_size({o.input_group_size})) * "
            f"Options.Training.gradientAccumulation({o.Training.gradient_accumulation}) = {extra} because it "
            "is used to calculate the batch size which will be executed on the device in any given "
            "iteration. For a full explanation see the batching semantics page of the documentation."
        )
        return tensor if tensor.shape == torch.Size([]) else tensor.narrow(0, 0, b_size // extra)

    def _trace(self, inputs: tuple[Any, ...]) -> int:
        """Run the model once on one micro-batch, collecting the IPU ids its blocks name."""
        global _traced_ipus
        model = copy.deepcopy(self._model) if self._training else self._model
        _traced_ipus = set()
        try:
            with torch.no_grad():
                model(*inputs)
            used = _traced_ipus or {0}
        finally:
            _traced_ipus = None
        return max(used) + 1

    def _compile(self, args: tuple[Any, ...]) -> None:
        start = time.perf_counter()
        self._compiled_inputs = tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)
        narrowed = tuple(self._narrow(a) for a in args)
        stages = self._trace(narrowed)
        o = self._options
        self._check_memory_proportions(stages)
        strategy = o._execution_strategy
        if isinstance(strategy, PipelinedExecution) and not isinstance(strategy, ShardedExecution):
            # Compiler.cpp:672-701 (Compiler::initSession): one pipeline stage per IPU here (blocks
            # placed with AutoStage.SameAsIpu); training adds a backward stage for all but the last.
            if self._training:
                num_stages = 2 * stages - 1
                if o.Training.gradient_accumulation < num_stages:
                    raise _cpp_error(
                        "poptorch.Options().Training.gradientAccumulation must be greater than or equal "
                        f"to the number of pipeline stages ({num_stages}) when using "
                        f"poptorch.PipelinedExecution. Please note that a model with {stages} pipeline "
                        f"stages in PopTorch will have an additional {stages - 1} stages when training.",
                        690,
                        _COMPILER,
                    )
            elif o.device_iterations < stages:
                raise _cpp_error(
                    "poptorch.Options().deviceIterations must be greater than or equal to the number of "
                    f"pipeline stages ({stages}) when using PopTorch.PipelinedExecution.",
                    700,
                    _COMPILER,
                )
        num_ipus = stages * o.replication_factor
        if num_ipus > 64:
            raise _cpp_error(
                f"Too many IPUs requested ({num_ipus}). Experiments that need more than 64 IPUs require "
                "distributed execution.",
                235,
            )
        never = o.connection_type == ConnectionType.Never
        use_model = bool(o._values.get("use_model", _ipu_model_env()))
        hardware = not never and not use_model
        self._check_distributed(use_model, num_ipus)
        device: tuple[int, tuple[int, ...]] | None = None
        if hardware:
            rounded = 1 << (num_ipus - 1).bit_length()
            if rounded != num_ipus:
                common = ", because PopTorch must reserve a power of 2 or maximum of 64 IPUs per process"
                if not o.auto_round_num_ipus:
                    raise _cpp_error(
                        f"The model specifies the use of {num_ipus} IPUs, however PopTorch must reserve a "
                        f"minimum of {rounded} in order to allow the model to run{common}. Please "
                        "reconfigure your model to use a different number of IPUs or set "
                        "poptorch.Options().autoRoundNumIPUs(True).",
                        707,
                    )
                logger.warning(
                    "Reserving %d IPUs when the model specifices the use of only %d%s. %d will be reserved "
                    "but not used.",
                    rounded,
                    num_ipus,
                    common,
                    rounded - num_ipus,
                )
                num_ipus = rounded
            device = self._acquire(num_ipus)
        cached = self._cache_file(args)
        hit = cached is not None and cached.exists()
        if cached is not None and not hit:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text("fake_poptorch executable\n")
        self._executable = _Executable(
            num_ipus,
            stages,
            device[0] if device else None,
            device[1] if device else (),
            hardware,
            None if hit else datetime.timedelta(seconds=time.perf_counter() - start),
            attached=hardware,
        )
        self._is_attached = hardware
        self._timestamps = [[[] for _ in args], [[] for _ in args], [[]], [[]]]

    def _cache_file(self, args: tuple[Any, ...]) -> Path | None:
        """The executable-cache file of this graph (``None`` without caching): one per model, input
        shapes and dtypes, and the options that shape the compiled graph."""
        popart = self._options._Popart.options
        if not popart.get("enableEngineCaching") or not popart.get("cachePath"):
            return None
        o = self._options
        key = repr(
            (
                repr(self._model),
                [(tuple(a.shape), str(a.dtype)) for a in args if isinstance(a, torch.Tensor)],
                o.replication_factor,
                o.device_iterations,
                o.Training.gradient_accumulation,
                int(o.output_mode),
                self._training,
            )
        )
        return Path(str(popart["cachePath"])) / f"{hashlib.sha256(key.encode()).hexdigest()}.popef"

    def _check_memory_proportions(self, stages: int) -> None:
        """PopART's range check on every IPU the model uses.

        ``Options.setAvailableMemoryProportion`` stores ``{ipu: p}`` unchecked (options.py:1426-1457);
        while lowering, PopTorch calls ``Builder::setAvailableMemoryProportion(output, p)`` on every
        single-output op of IPU ``ipu`` (Compiler.cpp:121-130), and PopART throws
        ``error("availableMemoryProportion must be in (0,1]")`` when ``p > 1.0f || p <= 0.0f``
        (popart willow/src/builder.cpp:1779-1793), so NaN passes, as there. Entries for IPUs the
        model does not use are never applied. PopTorch prints the location where it caught the
        PopART error, which is not verified: the fake prints the call site.
        """
        for ipu, proportion in sorted(self._options.available_memory_proportion.items()):
            if ipu < stages and (proportion > 1.0 or proportion <= 0.0):
                raise _cpp_error(
                    "availableMemoryProportion must be in (0,1]", 129, _COMPILER, "popart_exception"
                )

    def _check_distributed(self, use_model: bool, num_ipus: int) -> None:
        """A compile for more than one process fails: this fake machine has no IPU-over-fabric.

        With ``num_distributed_processes > 1`` PopTorch turns on PopART's
        ``enableDistributedReplicatedGraphs`` with ``globalReplicationFactor = processes x replicas``
        and ``globalReplicaOffset = process id x replicas`` (Compiler.cpp:655-666), and PopART builds
        a Poplar target of the IPUs of every process (popart willow/src/popx/irlowering.cpp:4056-4075).
        On the IPU Model that is PopART's error, verbatim (irlowering.cpp:4080-4086; the device
        description follows ``DeviceInfo::toString``, devicemanager.cpp:352-370, with the fake's own
        id and tile count). On hardware, every process's engine run is synchronised through popdist
        (popart devicex.cpp:248-250) with processes that do not exist; popdist and GCL are not public,
        so the real failure (an error or a hang) is not verifiable here: the fake raises an error
        naming the distributed replicated graph instead, in place of that unverified failure. Options
        made by ``fake_popdist.poptorch.Options`` stand for a PopRun launch on hardware, whose device
        PopDist configured: their compile goes ahead (each instance on the device PopDist gives it).
        """
        d = self._options.Distributed
        if d.numProcesses <= 1:
            return
        if self._options._configured_by_popdist and not use_model:
            return
        if use_model:
            device = (
                f"Device Type:ipu-model Connection Type:Always Id:0 Version:ipu{_MACHINE.version} "
                f"NumIPUs:{num_ipus} NumTilesPerIPU:1472 DeviceIds: {{{','.join(map(str, range(num_ipus)))}}}"
            )
            raise _cpp_error(
                "Only IPU Hardware devices supported with distributed replicated graphs. Unsupported device "
                f"type {device}",
                4082,
                "popart willow/src/popx/irlowering.cpp",
                "popart_exception",
            )
        replicas = self._options.replication_factor
        raise createPoptorchError(
            f"fake_poptorch: process {d.processId} of {d.numProcesses} compiles one replica of a distributed "
            f"replicated graph (enableDistributedReplicatedGraphs, globalReplicationFactor "
            f"{d.numProcesses * replicas}), which needs IPU-over-fabric and a device configured by PopDist; "
            "this machine has neither. Call Options().Distributed.disable() for an independent model"
        )

    def _acquire(self, num_ipus: int) -> tuple[int, tuple[int, ...]]:
        """``CompilerImpl::createDevice`` for hardware: a device by id (``useIpuId``) or any free one."""
        if os.environ.get("POPTORCH_WAIT_FOR_IPU", "0") not in ("", "0"):
            raise NotImplementedError("fake_poptorch does not imitate POPTORCH_WAIT_FOR_IPU")
        if self._options.exists("ipu_id"):
            ipu_id = self._options.ipu_id
            device = _MACHINE.acquire_id(ipu_id)
            if device is None:
                raise _cpp_error(f"Failed to acquire device Id {ipu_id}{self._system_config(num_ipus)}", 737)
            size = len(device[1])
            rf = self._options.replication_factor
            if size < num_ipus:
                _MACHINE.release(device[1])
                raise _cpp_error(
                    f"Expected at least replication factor * used IPUs = {num_ipus // rf} * {rf} = "
                    f"{num_ipus} device Ids but the user provided {size}",
                    740,
                )
            return device
        device = _MACHINE.acquire(num_ipus)
        if device is None:
            raise _cpp_error(f"Failed to acquire {num_ipus} IPU(s){self._system_config(num_ipus)}", 726)
        return device

    def _system_config(self, num_ipus: int) -> str:
        """``CompilerImpl::checkSystemConfig``: why no device could be acquired."""
        if _MACHINE.ipus == 0:
            return (
                "\nNo IPU detected in the system. \nFor more information use the Graphcore command-line "
                "tool `gc-monitor`."
            )
        if self._options.exists("ipu_id"):
            return ""
        if not any(len(ipus) == num_ipus for ipus in _MACHINE.devices()):
            return f"\nNo device found on the system with {num_ipus} IPUs: the configuration needs changing"
        return ""

    # -- device ---------------------------------------------------------------------------------

    def isCompiled(self) -> bool:
        """True once compiled, until ``destroy()``."""
        return bool(self._executable)

    def isAttachedToDevice(self) -> bool:
        """False when not compiled."""
        if self._executable is None:
            return False
        return self._executable.attached or not self._executable.hardware

    def detachFromDevice(self) -> None:
        """Release the IPUs; the executable stays."""
        if self._executable is None:
            raise createPoptorchError(NO_EXECUTABLE_ERR)
        if not self._is_attached:
            raise createPoptorchError("Device is not attached")
        if self._training:
            self.copyWeightsToHostIfNeeded()  # PopTorch reads the weights back before detaching
        _MACHINE.release(self._executable.ipus)
        self._executable.attached = False
        self._is_attached = False

    def attachToDevice(self) -> None:
        """Acquire the IPUs again (this can fail with "Failed to acquire")."""
        if self._executable is None:
            raise createPoptorchError(NO_EXECUTABLE_ERR)
        assert self._options.connection_type != ConnectionType.Never, (
            "Trying to attach to an offline device (ConnectionType.Never)"
        )
        if self._is_attached:
            raise createPoptorchError("Device is already attached")
        if self._executable.hardware:
            device_id, ipus = self._acquire(self._executable.num_ipus)
            self._executable.device_id, self._executable.ipus = device_id, ipus
            self._executable.attached = True
        self._is_attached = True

    def copyWeightsToHostIfNeeded(self) -> bool:
        """``copyWeightsToHost`` if the device trained since the last copy; whether it copied."""
        if self._dirty_host_weights:
            self.copyWeightsToHost()
            return True
        return False

    def copyWeightsToHost(self) -> None:
        """Bring the device's weights into the wrapped model's parameters (already there in the fake)."""
        if not self.isCompiled():
            raise createPoptorchError(NO_EXECUTABLE_ERR)
        self._dirty_host_weights = False
        self._host_weights_version += 1

    def copyWeightsToDevice(self) -> None:
        """Write the host parameters to the device (the fake's device uses them directly)."""
        if not self.isCompiled():
            raise createPoptorchError(NO_EXECUTABLE_ERR)

    def destroy(self) -> None:
        """Free the executable and the IPUs; nothing happens if never compiled."""
        if self._executable is None:
            return
        if self._training and self._is_attached:
            self.copyWeightsToHostIfNeeded()  # PopTorch syncs the weights before freeing them
        if self._executable.attached:
            _MACHINE.release(self._executable.ipus)
        self._executable = None
        self._is_attached = False
        if self._training:
            _wrapped_for_training.discard(self._user_model)

    # -- execution ------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Compile if needed, attach if needed, validate the inputs, run."""
        assert self._options.connection_type != ConnectionType.Never, (
            "Trying to run a model on an offline device (ConnectionType.Never): use model.compile(inputs) "
            "instead of model(inputs)"
        )
        if kwargs:
            raise NotImplementedError("fake_poptorch takes positional inputs only")
        if not self.isCompiled():
            self._compile(args)
        if not self._is_attached:
            self.attachToDevice()
        self._validate(args)
        return self._execute(args)

    def _validate(self, args: tuple[Any, ...]) -> None:
        """``_args_parser.validateInputs``: the inputs must match the compiled ones."""
        compiled = self._compiled_inputs or ()
        end = (
            "\nThis error occurred because the inputs passed at runtime don't match the inputs used to "
            "compile the model.\nTo recompile the model for the new inputs create a new inferenceModel / "
            "trainingModel wrapper or call destroy() on the curent one and try again."
        )
        if len(args) != len(compiled):
            raise createPoptorchError(
                "Number of positional arguments mismatch: expected "
                f"{len(compiled)} arguments but got {len(args)}.{end}"
            )
        names = _arg_names(self._model, len(args))
        for name, c, x in zip_strict(names, compiled, args):
            if type(c) is not type(x):
                raise createPoptorchError(
                    f"Type mismatch for {name}: expected {type(c)} but got {type(x)}.{end}"
                )
            if isinstance(c, torch.Tensor):
                if c.dtype != x.dtype:
                    raise createPoptorchError(
                        f"Data type mismatch for {name}: expected {c.dtype} but got {x.dtype}.{end}"
                    )
                if c.shape != x.shape:
                    raise createPoptorchError(
                        f"Shape mismatch for {name}: expected {c.shape} but got {x.shape}.{end}"
                    )

    def _execute(self, args: tuple[Any, ...]) -> Any:
        o = self._options
        replicas = o.replication_factor // o.input_group_size
        accumulation = o.Training.gradient_accumulation
        chunks = self._batch_factor()
        pieces = [self._micro_batch(args, k, chunks) for k in range(chunks)]
        start = time.time()
        t0 = time.perf_counter()
        if self._training:
            results = self._train(pieces, replicas * accumulation)
            self._dirty_host_weights = True
        else:
            with torch.no_grad():
                results = [self._model(*piece) for piece in pieces]
        # The device run: PopTorch's execute keeps the GIL for all of it (python/poptorch.cpp:864-878),
        # so no other thread of this process runs meanwhile. The CPU run above, which computes the
        # outputs, releases it in torch's kernels; the real call never does.
        counting = bool(o._Popart.options["instrumentWithHardwareCycleCounter"])
        # With the counter, Compiler::run reads it after every run: the read's round trip is in the call.
        extra_s = _MACHINE.counter_s + _MACHINE.read_s if counting else 0.0
        self.device_spans.append(hold_gil(_MACHINE.device_s(chunks) + extra_s))
        elapsed = time.perf_counter() - t0
        assert self._executable is not None
        self._executable.last_run_s = elapsed
        if counting:
            # The first replica's micro-batches: the count is of replica 0 only.
            self._executable.last_cycles = _cycles(self._model, pieces[: max(1, chunks // max(1, replicas))])
        mode = OutputMode(o.output_mode)
        returned = _returned(results, mode, o.output_return_period, accumulation, replicas)
        outputs = _reduce(returned, _cat)
        self._record_ticks(args, start, elapsed, chunks, len(returned))
        return outputs

    def _micro_batch(self, args: tuple[Any, ...], k: int, chunks: int) -> tuple[Any, ...]:
        out = []
        for a in args:
            if isinstance(a, torch.Tensor) and a.dim() > 0:
                size = a.shape[0] // chunks
                out.append(a.narrow(0, k * size, size))
            else:
                out.append(a)
        return tuple(out)

    def _train(self, pieces: list[tuple[Any, ...]], per_step: int) -> list[Any]:
        assert self._optimizer is not None
        self._model.train()
        results = []
        for k, piece in enumerate(pieces):
            out = self._model(*piece)
            _loss_of(out).div(per_step).backward()
            results.append(_detach(out))
            if (k + 1) % per_step == 0:
                self._optimizer.step()
                self._optimizer.zero_grad()
        return results

    def _record_ticks(
        self, args: tuple[Any, ...], start: float, elapsed: float, n_in: int, n_out: int
    ) -> None:
        """Host-side timestamps per input and output tensor, truncated to whole milliseconds."""

        def ms(t: float) -> float:
            return math.floor(t * 1000) / 1000

        step = _MACHINE.iteration_s if _MACHINE.iteration_s is not None else elapsed / max(n_in, 1)
        inputs = [ms(start + k * step) for k in range(n_in)]
        inputs_done = [ms(start + k * step + step * 0.1) for k in range(n_in)]
        group = n_in // max(n_out, 1)
        outputs = [ms(start + ((j + 1) * group - 0.1) * step) for j in range(n_out)]
        outputs_done = [ms(start + (j + 1) * group * step) for j in range(n_out)]
        n_tensors = max(1, sum(isinstance(a, torch.Tensor) for a in args))
        self._timestamps = [
            [list(inputs) for _ in range(n_tensors)],
            [list(inputs_done) for _ in range(n_tensors)],
            [list(outputs)],
            [list(outputs_done)],
        ]

    # -- counters -------------------------------------------------------------------------------

    def getPerfCounters(self) -> dict[str, list[list[float]]]:
        """Per-tensor timestamps (seconds since the epoch, whole ms) of the last call."""
        if not self.isCompiled() or self._timestamps is None:
            return {"input": [[]], "input_complete": [[]], "output": [[]], "output_complete": [[]]}
        values = self._timestamps

        def normalize(timestamps: list[list[float]]) -> list[list[float]]:
            return timestamps if timestamps else [[]]

        return {
            "input": normalize(values[0]),
            "input_complete": normalize(values[1]),
            "output": normalize(values[2]),
            "output_complete": normalize(values[3]),
        }

    def _computeLatency(
        self,
        from_event: str,
        from_reduce: Callable[[list[float]], float],
        to_event: str,
        to_reduce: Callable[[list[float]], float],
    ) -> tuple[float, float, float]:
        """PopTorch's own computation, verbatim in substance."""
        perf_counters = self.getPerfCounters()
        start_times = []
        end_times = []
        num_inputs = len(perf_counters[from_event])
        for step in range(len(perf_counters[from_event][0])):
            start_times.append(from_reduce([perf_counters[from_event][i][step] for i in range(num_inputs)]))
        num_outputs = len(perf_counters[to_event])
        for step in range(len(perf_counters[to_event][0])):
            end_times.append(to_reduce([perf_counters[to_event][i][step] for i in range(num_outputs)]))
        if len(end_times) == 0:
            return (0.0, 0.0, 0.0)
        assert len(start_times) % len(end_times) == 0, (
            "Internal PopTorch error: mismatching number of start timestamps and ending timestamps when "
            "calculating latency"
        )
        factor = len(start_times) // len(end_times)
        start_groups = [min(start_times[i : i + factor]) for i in range(0, len(start_times), factor)]
        durations = [end - begin for begin, end in zip(start_groups, end_times)]
        return (min(durations), max(durations), sum(durations) / len(durations))

    def getHostIpuLatency(self) -> tuple[float, float, float]:
        """First input requested to last input transferred."""
        return self._computeLatency("input", min, "input_complete", max)

    def getComputeLatency(self) -> tuple[float, float, float]:
        """Last input transferred to last output requested."""
        return self._computeLatency("input_complete", max, "output", max)

    def getIpuHostLatency(self) -> tuple[float, float, float]:
        """First output requested to last output transferred."""
        return self._computeLatency("output", min, "output_complete", max)

    def getLatency(self) -> tuple[float, float, float]:
        """Round trip: first input requested to last output transferred."""
        return self._computeLatency("input", min, "output_complete", max)

    def cycleCount(self) -> int:
        """Cycles of the last run (first replica); needs ``logCycleCount(True)``."""
        if not self._options._Popart.options["instrumentWithHardwareCycleCounter"]:
            raise createPoptorchError(
                "Cycle count logging is disabled. Please set option logCycleCount to True to enable."
            )
        if self._executable is None:
            raise createPoptorchError("Please run the model at least once before obtaining cycle count.")
        if self._executable.last_cycles is None:
            # Compiled, never run: Compiler::getCycleCount has no count yet.
            raise createPoptorchError("Please run the model at least once before obtaining cycle count.")
        return self._executable.last_cycles  # read by the last call itself (Compiler::run)

    @property
    def compilationTime(self) -> Callable[[], datetime.timedelta | None]:
        """``compilationTime()``, from PopTorch 3.3 on: an older fake's executors have no such
        attribute (``AttributeError``, as on the real 3.2)."""
        if _MACHINE.sdk < (3, 3):
            raise AttributeError("'PoplarExecutor' object has no attribute 'compilationTime'")
        return self._compilation_time

    def _compilation_time(self) -> datetime.timedelta | None:
        """How long the last compilation took; ``None`` when the executable came from the cache
        (``self._options._progress_bar.compilation_time``, ``_poplar_executor.py:1200-1221``)."""
        if self._executable is None:
            raise createPoptorchError("Please compile the model before obtaining compilation time.")
        if not self._options._show_compilation_progress_bar:
            raise createPoptorchError(
                "Please set showCompilationProgressBar option to obtain compilation time."
            )
        return self._executable.compile_time

    def compileAndExport(self, filename: str, *args: Any, export_model: bool = True, **kwargs: Any) -> None:
        """Not imitated."""
        raise NotImplementedError("fake_poptorch does not imitate executable files")

    def save(self, filename: str, export_model: bool = True, save_rng_state: bool = True) -> None:
        """Not imitated."""
        raise NotImplementedError("fake_poptorch does not imitate executable files")

    def loadExecutable(self, filename: str) -> None:
        """Not imitated."""
        raise NotImplementedError("fake_poptorch does not imitate executable files")


def _cycles(model: torch.nn.Module, micro_batches: list[tuple[Any, ...]]) -> int:
    """The fake's count of one call's cycles (``CALL_CYCLES``'s model) over ``micro_batches``."""
    parameters = sum(p.numel() for p in model.parameters())
    per_batch = [sum(a.numel() for a in piece if isinstance(a, torch.Tensor)) for piece in micro_batches]
    return CALL_CYCLES + sum(parameters + n for n in per_batch)


def _arg_names(model: torch.nn.Module, n: int) -> list[str]:
    try:
        params = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"args[{i}]" for i in range(n)]


def _detach(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.detach()
    if isinstance(out, (tuple, list)):
        return type(out)(_detach(o) for o in out)
    return out


def _loss_of(out: Any) -> torch.Tensor:
    """The fake's stand-in for PopTorch finding the loss in the traced graph: the last 0-d output."""
    leaves = (
        [out] if isinstance(out, torch.Tensor) else [o for o in _leaves(out) if isinstance(o, torch.Tensor)]
    )
    losses = [t for t in leaves if t.dim() == 0]
    if not losses:
        raise createPoptorchError("The model must return a loss (a 0-d tensor) to be trained.")
    return losses[-1]


def _leaves(out: Any) -> Iterator[Any]:
    if isinstance(out, (tuple, list)):
        for o in out:
            yield from _leaves(o)
    elif isinstance(out, dict):
        for o in out.values():
            yield from _leaves(o)
    else:
        yield out


def _returned(
    results: list[Any], mode: OutputMode, period: int, accumulation: int, replicas: int
) -> list[Any]:
    """The micro-batch results a call sends back to the host, one per output tick.

    ``results`` is in PopTorch's data order: device iteration, then accumulation step, then replica,
    so the replica of result ``k`` is ``k % replicas``.
    """
    per_iteration = accumulation * replicas
    iterations = [results[i : i + per_iteration] for i in range(0, len(results), per_iteration)]
    if mode == OutputMode.All:
        return results
    if mode == OutputMode.EveryN:
        return [r for it in iterations[period - 1 :: period] for r in it]
    if mode == OutputMode.Final:
        return iterations[-1][-replicas:]
    # Sum: every micro-batch of each replica, added up.
    return [
        _reduce([r for k, r in enumerate(results) if k % replicas == rep], _sum) for rep in range(replicas)
    ]


def _sum(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(tensors).sum(0)


def _cat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(tensors) if tensors[0].dim() == 0 else torch.cat(tensors)


def _reduce(results: list[Any], fn: Callable[[list[torch.Tensor]], torch.Tensor]) -> Any:
    first = results[0]
    if isinstance(first, torch.Tensor):
        return fn(results)
    if isinstance(first, (tuple, list)):
        return type(first)(_reduce([r[i] for r in results], fn) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: _reduce([r[k] for r in results], fn) for k in first}
    return results[-1]


def identity_loss(x: torch.Tensor, reduction: str) -> torch.Tensor:
    """``poptorch.identity_loss``: marks ``x`` as the loss (PopTorch's way to train on a loss not built
    from torch.nn's loss functions), reduced as ``"sum"``, ``"mean"`` or ``"none"``; the fake only
    reduces (it takes the last 0-d output as the loss)."""
    if reduction == "sum":
        return x.sum()
    if reduction == "mean":
        return x.mean()
    assert reduction == "none", "Unsupported reduction type!"
    return x


# -- wrappers -----------------------------------------------------------------------------------


def inferenceModel(model: Any, options: Options | None = None) -> PoplarExecutor:
    """Wrap a shallow copy of ``model`` for inference (``options`` is frozen)."""
    if isinstance(model, PoplarExecutor):
        model = model._user_model
    return PoplarExecutor(copy.copy(model), options, training=False)


def trainingModel(
    model: Any, options: Options | None = None, optimizer: torch.optim.Optimizer | None = None
) -> PoplarExecutor:
    """Wrap ``model`` for training; its parameters are shared, so the host copy sees the updates."""
    if isinstance(model, PoplarExecutor):
        model = model._user_model
    if model in _wrapped_for_training:
        raise RuntimeError(
            "Model has already been wrapped in 'poptorch.trainingModel'. Call model.destroy() on the model "
            "to unwrap before wrapping again."
        )
    _wrapped_for_training.add(model)
    return PoplarExecutor(copy.copy(model), options, training=True, optimizer=optimizer, user_model=model)
