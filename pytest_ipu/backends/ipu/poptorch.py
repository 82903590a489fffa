"""The PopTorch backend: torch models compiled by PopTorch (Poplar SDK 3.x) and run on Graphcore IPUs.

poptorch (and torch) are imported lazily, or injected for tests. Written against PopTorch 3.4, the last
SDK release (September 2023); the calls used exist unchanged since SDK 2.1 (``getLatency`` and the perf
counters) or 2.4 (``outputMode``), but ``PoplarExecutor.compilationTime()``: from PopTorch 3.3 only
(absent at tag ``sdk/poptorch/3.2.0``, present at ``3.3.0``), it raises unless
``showCompilationProgressBar`` is on (the default) and returns ``None`` when no compilation was watched
(after an executable-cache hit the progress bar never runs: ``_options_impl.ProgressBar``). One call
runs ``device_iterations x replication_factor x gradient_accumulation`` micro-batches: its items are
the inputs' whole leading dimension.

**Inference under PopRun** keeps an independent model per instance (``Options()``,
``Distributed.disable()``, ``useIpuId`` of PopDist's device or its first aligned part), which the merge
(``placement.poprun``) assumes; training steps (``poptorch_training``) take PopDist's options. Not
``popdist.poptorch.Options``, though Graphcore's PopRun inference benchmark uses them (graphcore/examples
``vision/cnns/pytorch/inference/run_benchmark.py:120-124``, every instance driven in step): with more
than one process PopTorch turns on PopART's ``enableDistributedReplicatedGraphs``
(``globalReplicationFactor`` = instances x local replicas; poptorch
``popart_compiler/source/Compiler.cpp:655-666``), whose steps PopART runs synchronised with the other
instances (``popdist::run``, popart ``willow/src/popx/devicex.cpp:248-250``). This plugin plans each
instance's rounds on its own, with no PopRun lockstep (``run.benchmark.Lockstep`` is torchrun's), so a
synchronised run would put the other instances' pace inside an instance's timed calls, or leave it
waiting for calls they never make. Unverified on hardware (popdist's test for a "distributed
environment" is not public; ``cli.first_contact`` records both ways): should only the popdist way work,
switching to it needs a PopRun lockstep first.

Documented in docs/ipu.md (sections "Targets and options", "PopRun and PopDist" and "What to check on
the first machine with IPUs").
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import math
import os
import re
import weakref
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from pytest_ipu.backends.base import Availability
from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.base import CountedModel
from pytest_ipu.backends.base import NamedBackend
from pytest_ipu.backends.compile_args import CheckedOptions
from pytest_ipu.backends.compile_args import model_name
from pytest_ipu.backends.ipu import cycles
from pytest_ipu.backends.ipu.options import memory_proportions
from pytest_ipu.backends.ipu.options import plain_memory_proportion
from pytest_ipu.backends.runtime_warnings import runtime_internals_quiet
from pytest_ipu.devices import inventory as ipu_inventory
from pytest_ipu.devices import poprun
from pytest_ipu.devices.inventory import IpuInventory
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import CompileError
from pytest_ipu.processes import error_text
from pytest_ipu.processes import one_line
from pytest_ipu.sdk import import_sdk

#: Options ``ipu_compile`` accepts for this backend, with their defaults.
OPTIONS: Mapping[str, object] = {
    "device_iterations": 1,
    "replication_factor": 1,
    "gradient_accumulation": 1,
    "training": False,
    "output_mode": "default",
    "executable_cache_dir": None,
    "available_memory_proportion": None,
    "partials_type": None,
    "random_seed": None,
    "ipus": 1,
    "auto_round_num_ipus": False,
    cycles.OPTION: cycles.POPTORCH_DEFAULT,
}
#: ``output_mode`` values and the ``poptorch.OutputMode`` member each one selects.
OUTPUT_MODES: Mapping[str, str] = {"default": "Default", "all": "All", "final": "Final", "sum": "Sum"}
#: PopTorch reserves at most this many IPUs per process (more needs PopRun/PopDist).
MAX_IPUS_PER_PROCESS = 64
#: PopTorch's perf-counter timestamps are host clock times truncated to whole milliseconds.
LATENCY_RESOLUTION_S = 1e-3
_PRECISIONS = ("fp32", "fp16")
_PARTIALS = {"fp32": "float32", "fp16": "float16"}
_DEVICE = re.compile(r"^ipu(?::(\d+))?$|^ipu-model$")
#: ``ipuHardwareVersion()`` values (the digits after "ipu" in the architecture name).
_GENERATIONS = {1: "Mk1/C2 (ipu1)", 2: "Mk2/Bow (ipu2)", 21: "C600 (ipu21)"}
#: Texts of PopTorch errors that mean "no IPU for you now", not "this model does not compile".
_UNAVAILABLE = (
    "Failed to acquire",
    "No IPU detected",
    "Cannot find a valid device",
    "Still not attached to a device",
)
_CLOSED = "this compiled model was closed (the run that compiled it has ended)"
_INSTALL = (
    "PopTorch ships as a wheel inside Graphcore's Poplar SDK and is not on PyPI (PyPI packages with "
    "similar names are unrelated): enable the SDK with `source <sdk>/enable` (or the poplar and popart "
    "enable.sh scripts) and install its wheel with `pip install <sdk>/poptorch-*.whl`; PopTorch 3.3 and "
    "3.4 need torch 2.0.1 exactly"
)


class _Handle:
    """What ``run``, ``close`` and ``device_latency`` share: the wrapped model, until closed."""

    def __init__(self, executor: Any) -> None:
        self.executor: Any = executor


#: From each compiled model's ``run`` callable to its handle. Weak keys: an entry lives exactly as
#: long as the ``run`` callable (the ``CompiledModel`` and its ``dataclasses.replace`` copies).
_HANDLES: weakref.WeakKeyDictionary[Callable[..., object], _Handle] = weakref.WeakKeyDictionary()


class PopTorchBackend(NamedBackend):
    """Runs ``torch.nn.Module`` models on IPUs through ``poptorch.inferenceModel`` (or ``trainingModel``).

    ``device`` is ``ipu`` (any free IPUs; under PopRun, the IPUs PopDist gives the instance) or
    ``ipu:N``, where ``N`` is a device id as ``gc-info -l`` lists it (``Options.useIpuId(N)``); a
    model on several IPUs needs the id of a multi-IPU device of at least ``ipus x
    replication_factor`` IPUs.

    ``compile_training`` makes ``ipu_train``'s training steps (``poptorch_training``), with the
    options of ``poptorch_training.OPTIONS``.

    Options (defaults in ``OPTIONS``): ``device_iterations``, ``replication_factor`` and
    ``gradient_accumulation`` (training only) multiply into the batch one call consumes;
    ``training`` (wrap with ``trainingModel``: the model must return its loss, and PopTorch's
    default optimizer, SGD with lr 0.01, updates the weights on every call); ``output_mode``
    (``default``: ``all`` for inference, ``final`` for training; ``all``, ``final``, ``sum``);
    ``executable_cache_dir`` (PopTorch's executable cache, never pruned; ``None`` leaves
    ``POPTORCH_CACHE_DIR`` in charge); ``available_memory_proportion`` (a number in (0, 1] for every
    IPU, or ``{"IPU0": 0.3, ...}``); ``partials_type`` (``fp32``, or ``fp16`` with fp16 precision);
    ``random_seed`` (``Options.randomSeed``, which also seeds torch's global generator); ``ipus``
    (split an ``nn.Sequential``'s layers into that many pipeline stages, one per IPU) and
    ``auto_round_num_ipus`` (reserve the next power of two when ``ipus x replication_factor`` is
    not one); ``cycle_counter`` (default False: ``True`` sets ``Options.logCycleCount(True)`` on IPU
    hardware, for the count the ``ipu_cycles`` metric reads; PopTorch then reads the counter in
    every call, timed rounds included: ``cycles.py``).
    """

    def __init__(
        self,
        name: str = "poptorch",
        device: str | None = None,
        poptorch_module: ModuleType | None = None,
        torch_module: ModuleType | None = None,
        popdist_module: ModuleType | None = None,
    ) -> None:
        super().__init__(name, device or "ipu")
        self._poptorch = poptorch_module
        self._torch = torch_module
        # popdist says whether this process is a PopRun instance; imported lazily when not given.
        self._popdist = popdist_module

    #: A PopTorch call holds the GIL from start to end, so concurrent instances need a process each.
    concurrency = "processes"
    #: A compiled model keeps its IPUs attached until closed: the run keeps one such model open at a time.
    exclusive_device = True

    @property
    def simulator(self) -> bool:
        """Whether this is the IPU Model simulator (``ipu-model``), whose timings are not hardware timings."""
        return self._device == "ipu-model"

    def inventory(self) -> IpuInventory | str:
        """The IPUs present (gcipuinfo, PopART's device list, else PopTorch's count), or why there
        are none; for the IPU Model, a simulated inventory that any number of instances can share."""
        if self.simulator:
            return ipu_inventory.simulator_inventory(1)
        try:
            poptorch = self._import()
        except Exception as exc:
            return f"poptorch failed to import ({error_text(exc)}); {_INSTALL}"
        found = ipu_inventory.discover(poptorch_module=poptorch)
        if isinstance(found, str):
            return found
        return poprun.placeable(found, self._popdist)

    def placement_options(self, replicas: int, stages: int) -> dict[str, object]:
        """``replication_factor`` for replicas; ``ipus`` pipeline stages (an ``nn.Sequential`` split
        into that many blocks, one per IPU)."""
        return {"replication_factor": replicas, "ipus": stages}

    def worker_factory(self) -> Callable[[], PopTorchBackend]:
        """A picklable zero-argument callable that builds this backend again in a worker process.

        PopTorch holds the GIL for the whole of a call, so threads cannot overlap two instances'
        calls: each instance runs in a worker process of its own, which compiles its own copy of the
        model and needs its own backend. Modules cannot be pickled, so an injected ``poptorch`` or
        ``torch`` module travels as its name and the worker imports it; ``ValueError`` when that
        name does not import the very same module.
        """
        names: list[str | None] = []
        modules = (("poptorch", self._poptorch), ("torch", self._torch), ("popdist", self._popdist))
        for role, module in modules:
            if module is None:  # not injected: the worker's backend imports it lazily, as here
                names.append(None)
                continue
            name = module.__name__
            try:
                imported = importlib.import_module(name)
            except Exception as exc:
                raise ValueError(
                    f"the {role} module {name!r} given to the poptorch backend cannot be imported by its "
                    f"name ({error_text(exc)}), so worker processes cannot rebuild the backend; pass a "
                    "module that is importable as its __name__"
                ) from exc
            if imported is not module:
                raise ValueError(
                    f"the {role} module {name!r} given to the poptorch backend is not the module that "
                    f"importing {name!r} gives, so worker processes would rebuild the backend with another "
                    "one; pass the module that is importable as its __name__"
                )
            names.append(name)
        return functools.partial(_rebuild, self._name, self._device, *names)

    def _import(self) -> ModuleType:
        if self._poptorch is None:
            self._poptorch = import_sdk("poptorch")
        return self._poptorch

    def _import_torch(self) -> ModuleType:
        if self._torch is None:
            self._torch = importlib.import_module("torch")
        return self._torch

    def _ipu_id(self) -> int | None:
        """The ``N`` of ``ipu:N`` (``None`` for ``ipu`` and ``ipu-model``); ``ValueError`` for any other
        device."""
        match = _DEVICE.match(self._device)
        if match is None:
            raise ValueError(
                f"the poptorch backend runs on 'ipu', 'ipu:N' (N: a device id from gc-info -l) or "
                f"'ipu-model' (the IPU Model simulator), not {self._device!r}"
            )
        return None if match.group(1) is None else int(match.group(1))

    def _poprun_ipu_id(self, opts: Mapping[str, object], name: str) -> int | None:
        """Under PopRun, the device id for a model on ``ipu`` (no id given): PopDist's device for this
        instance, or the first aligned group of it the model needs; ``None`` outside PopRun.

        Without it PopTorch would take any free IPUs, which may be another instance's.
        """
        try:
            launched = poprun.detect(self._popdist) is not None
        except ValueError as exc:
            raise CompileError(f"{exc} (compiling {name})") from None
        if not launched:
            return None  # not under PopRun: PopTorch chooses any free IPUs
        found = self.inventory()
        if isinstance(found, str):
            raise BackendUnavailable(f"cannot place {name} on {self._name}:{self._device}: {found}")
        if not isinstance(found, poprun.InstanceInventory):
            return None
        needed = int(str(opts["ipus"])) * int(str(opts["replication_factor"]))
        needed = 1 << (needed - 1).bit_length()  # PopTorch reserves a power of two
        try:
            return poprun.device_for_model(found, needed, "ipus x replication_factor, a power of two")
        except ValueError as exc:
            raise CompileError(f"{name} {exc}") from None

    def availability(self) -> Availability:
        """poptorch importable, the device spelled ``ipu[:N]``, and IPU hardware present (free or not)."""
        try:
            poptorch = self._import()
        except ImportError as exc:
            return Availability.no(f"poptorch is not importable ({error_text(exc)}); {_INSTALL}")
        except Exception as exc:
            # PopTorch asserts at import that torch is the exact version it was built against.
            return Availability.no(f"poptorch failed to import ({error_text(exc)}); {_INSTALL}")
        try:
            self._ipu_id()
        except ValueError as exc:
            return Availability.no(str(exc))
        if self.simulator:
            return Availability.yes()  # the IPU Model needs no hardware
        try:
            present = bool(poptorch.ipuHardwareIsAvailable(1))
        except Exception as exc:
            return Availability.no(f"poptorch.ipuHardwareIsAvailable() failed: {error_text(exc)}")
        if not present:
            hint = (
                " (POPTORCH_IPU_MODEL is set, which makes PopTorch report no hardware: unset it)"
                if os.environ.get("POPTORCH_IPU_MODEL", "0") not in ("", "0")
                else "; `gc-info -l` lists the IPUs this machine can see"
            )
            return Availability.no(
                f"no IPU: poptorch.ipuHardwareIsAvailable() is False "
                f"(poptorch {_version(poptorch) or 'unknown'}){hint}"
            )
        return Availability.yes()

    def default_precision(self) -> str:
        """fp16: what Graphcore's own inference benchmarks run."""
        return "fp16"

    def shape_specialized(self, options: Mapping[str, object]) -> bool:
        """PopTorch compiles an executable per input shape."""
        return True

    def describe(self) -> dict[str, Any]:
        """PopTorch and SDK versions, the IPU generation and the largest IPU device present (or null)."""
        info: dict[str, Any] = {
            "backend": self._name,
            "device": self._device,
            "poptorch": None,
            "sdk": None,
            "ipu_hardware_available": None,
            "ipu_version": None,
            "ipu_generation": None,
            "largest_device_ipus": None,
        }
        try:
            poptorch = self._import()
        except Exception:
            return info
        version = _version(poptorch)
        info["poptorch"] = version
        # PopTorch is versioned with the SDK it ships in (tag sdk/poptorch/3.4.0 is SDK 3.4.0).
        sdk = re.match(r"\d+\.\d+\.\d+", version or "")
        info["sdk"] = sdk.group(0) if sdk else None
        try:
            info["ipu_hardware_available"] = bool(poptorch.ipuHardwareIsAvailable(1))
        except Exception:
            return info
        if info["ipu_hardware_available"]:
            info["ipu_version"] = _hardware_version(poptorch)
            info["ipu_generation"] = _GENERATIONS.get(info["ipu_version"] or 0)
            info["largest_device_ipus"] = _largest_device(poptorch)
        info["simulator"] = self.simulator
        inventory = self.inventory()
        info["inventory"] = inventory if isinstance(inventory, str) else inventory.as_json()
        return info

    def _device_name(self, poptorch: ModuleType) -> str:
        if self.simulator:
            return "IPU Model simulator (simulated timings, not IPU hardware)"
        generation = _GENERATIONS.get(_hardware_version(poptorch) or 0)
        return f"Graphcore IPU {generation}" if generation else "Graphcore IPU"

    def compile(
        self,
        model: object,
        example_inputs: Sequence[object],
        precision: str,
        options: Mapping[str, object],
    ) -> CompiledModel:
        """Check the options, copy and convert ``model``, wrap it and compile it for ``example_inputs``.

        The caller's model is never changed: PopTorch wraps a deep copy (in fp16, ``model.half()`` of
        it). Compilation (and attaching to the IPUs) happens here, not on the first timed call.
        """
        poptorch = self._import()
        torch = self._import_torch()
        name = model_name(model)
        opts = _check_options(options, name, precision)
        if not isinstance(model, torch.nn.Module):
            raise CompileError(f"the poptorch backend needs a torch.nn.Module, got {name}")
        ipu_id = self._target_id(opts, name)
        training = bool(opts["training"])
        prepare_inputs = _host_tensors(torch, precision)

        examples = prepare_inputs(example_inputs)
        _check_batch(examples, opts, name)
        module = _module_copy(poptorch, torch, model, training, precision, int(str(opts["ipus"])), name)
        counting = cycles.wanted(bool(opts[cycles.OPTION]), self.simulator)
        try:
            popts = _poptorch_options(poptorch, torch, opts, ipu_id)
            if self.simulator:
                popts.useIpuModel(True)
            if counting:
                popts.logCycleCount(True)
        except (AssertionError, ValueError, TypeError, AttributeError) as exc:
            raise CompileError(f"PopTorch rejected the options for {name}: {error_text(exc)}") from exc

        target = f"{self._name}:{self._device}"
        wrap = poptorch.trainingModel if training else poptorch.inferenceModel
        executor = _compiled(functools.partial(wrap, module, popts), examples, name, target)
        handle = _Handle(executor)
        del executor, module
        return self._counted(poptorch, handle, opts, ipu_id, precision, prepare_inputs, target)

    def _target_id(self, opts: Mapping[str, object], name: str) -> int | None:
        """The device id to compile for: the one this device names, else PopRun's for this
        instance (on hardware); ``None`` where PopTorch takes any free IPUs."""
        try:
            ipu_id = self._ipu_id()
        except ValueError as exc:
            raise CompileError(f"{exc} (compiling {name})") from None
        if ipu_id is None and not self.simulator:
            ipu_id = self._poprun_ipu_id(opts, name)
        return ipu_id

    def _counted(
        self,
        poptorch: ModuleType,
        handle: _Handle,
        opts: Mapping[str, object],
        ipu_id: int | None,
        precision: str,
        prepare_inputs: Callable[[Sequence[object]], tuple[object, ...]],
        target: str,
    ) -> CountedModel:
        """The compiled model around ``handle``: its calls, the options PopTorch used, the compile
        phases, the IPUs it holds and its cycle counter."""
        run, close, cycle_count = _handle_calls(handle)
        _HANDLES[run] = handle
        used = handle.executor.options
        info = _info(poptorch, used, opts, ipu_id, _version(poptorch))
        phases = _compile_phases(handle.executor, info)
        ipu_ids = None if self.simulator or ipu_id is None else self._members(ipu_id)
        return CountedModel(
            target=target,
            backend=self._name,
            device=self._device,
            device_name=self._device_name(poptorch),
            precision=precision,
            io="host",
            run=run,
            prepare_inputs=prepare_inputs,
            close=close,
            options=_plain_options(opts),
            phases_s=phases,
            info=info,
            device_latency=lambda: _handle_latency(handle),
            simulator=self.simulator,
            ipu_ids=ipu_ids,
            ipu_count=None if self.simulator else _reserved(info),
            counters=(
                cycles.counter(
                    cycle_count,
                    bool(opts[cycles.OPTION]),
                    self.simulator,
                    self._name,
                    ipu_ids,
                    in_every_call=True,
                ),
            ),
        )

    def _members(self, device_id: int) -> tuple[int, ...] | None:
        """The single IPUs of device ``device_id`` (``useIpuId``), by the inventory's numbering;
        ``None`` when there is no inventory to read it from. Without a device id PopTorch takes any
        free IPUs and does not say which, so a model on plain ``ipu`` has none outside PopRun."""
        found = self.inventory()
        if isinstance(found, str):
            return None
        try:
            return found.members(device_id)
        except ValueError:
            return None


def _rebuild(
    name: str,
    device: str,
    poptorch_module: str | None,
    torch_module: str | None,
    popdist_module: str | None = None,
) -> PopTorchBackend:
    """A ``PopTorchBackend`` built from what ``worker_factory`` pickled: module names (``None``: the
    backend imports ``poptorch``, ``torch`` and ``popdist`` itself, lazily)."""
    return PopTorchBackend(
        name,
        device,
        None if poptorch_module is None else import_sdk(poptorch_module),
        None if torch_module is None else importlib.import_module(torch_module),
        None if popdist_module is None else import_sdk(popdist_module),
    )


def device_latency(compiled: CompiledModel) -> dict[str, Any] | None:
    """PopTorch's own latency counters for the last call of ``compiled``, in seconds.

    Returns ``None`` when ``compiled`` is not a PopTorch model, was closed, or has not run (or ran
    on synthetic data, which records no output tick). Otherwise a plain-JSON dict::

        {"round_trip": {"min_s", "max_s", "avg_s"},   # getLatency()
         "host_to_ipu": {...},                        # getHostIpuLatency()
         "compute": {...},                            # getComputeLatency()
         "ipu_to_host": {...},                        # getIpuHostLatency()
         "samples": int,                              # output ticks of the last call
         "resolution_s": 0.001,
         "source": "..."}

    The values are differences of host timestamps truncated to whole milliseconds: each is good
    to about 1 ms, and a latency under 1 ms can read 0. They cover the iterations of the last call
    only (one per micro-batch for output mode ``all``, one per replica for ``final``/``sum``).
    """
    try:
        handle = _HANDLES.get(compiled.run)
    except TypeError:  # a run callable that cannot be weakly referenced is not one of ours
        return None
    return None if handle is None else _handle_latency(handle)


def _handle_latency(handle: _Handle) -> dict[str, Any] | None:
    """``device_latency`` for one compiled model's handle (``None`` once closed or before a call)."""
    executor = handle.executor
    if executor is None:
        return None
    counters = executor.getPerfCounters()
    ends = counters.get("output_complete") or [[]]
    samples = len(ends[0])
    if samples == 0:
        return None

    def triple(values: Sequence[float]) -> dict[str, float]:
        low, high, avg = values
        return {"min_s": float(low), "max_s": float(high), "avg_s": float(avg)}

    return {
        "round_trip": triple(executor.getLatency()),
        "host_to_ipu": triple(executor.getHostIpuLatency()),
        "compute": triple(executor.getComputeLatency()),
        "ipu_to_host": triple(executor.getIpuHostLatency()),
        "samples": samples,
        "resolution_s": LATENCY_RESOLUTION_S,
        "source": "poptorch PoplarExecutor.getLatency/getHostIpuLatency/getComputeLatency/"
        "getIpuHostLatency over the last call (host timestamps, whole milliseconds)",
    }


def _release(executor: Any) -> None:
    """Detach (if attached), then destroy, even when detaching fails; the last error propagates."""
    try:
        if executor.isAttachedToDevice():
            executor.detachFromDevice()
    finally:
        executor.destroy()


def _compile_failure(exc: BaseException, name: str, target: str) -> Exception:
    """``BackendUnavailable`` when PopTorch could not get IPUs, else ``CompileError``."""
    message = _sdk_message(exc)
    if any(marker in message for marker in _UNAVAILABLE):
        return BackendUnavailable(
            f"PopTorch could not get IPUs for {name} on {target}: {message}; free them (gc-monitor shows "
            "which processes hold IPUs) or set POPTORCH_WAIT_FOR_IPU=1 to wait for them"
        )
    return CompileError(f"PopTorch could not compile {name} for {target}: {message}")


def _sdk_message(exc: BaseException) -> str:
    """A PopTorch error's bare message (``poptorch.Error.message``), on one line."""
    message = getattr(exc, "message", None)
    text = message if isinstance(message, str) and message else str(exc) or type(exc).__name__
    return one_line(text)


def _version(poptorch: ModuleType) -> str | None:
    version = getattr(poptorch, "__version__", None)
    return str(version) if version is not None else None


def _hardware_version(poptorch: ModuleType) -> int | None:
    """``ipuHardwareVersion()``, or ``None`` when there is no IPU (it asserts) or it is unknown (-1)."""
    try:
        version = int(poptorch.ipuHardwareVersion())
    except Exception:
        return None
    return version if version > 0 else None


def _largest_device(poptorch: ModuleType) -> int | None:
    """The largest power-of-two IPU device present (``ipuHardwareIsAvailable(n)``; free or not)."""
    largest = None
    n = 1
    while n <= MAX_IPUS_PER_PROCESS:
        try:
            if not poptorch.ipuHardwareIsAvailable(n):
                break
        except Exception:
            break
        largest, n = n, n * 2
    return largest


def _compile_phases(executor: Any, info: dict[str, object]) -> dict[str, float]:
    """The compile's phases PopTorch timed: its graph compilation, when it reports one; otherwise
    why not, in ``info["graph_compilation_unknown"]`` (never a phase of 0 s)."""
    # An SDK version difference, not a capability: PopTorch before 3.3 has no such method.
    method = getattr(executor, "compilationTime", None)
    if method is None:
        info["graph_compilation_unknown"] = (
            "this PopTorch has no compilationTime() (it exists from PopTorch 3.3 on)"
        )
        return {}
    try:
        elapsed = method()
    except Exception as exc:  # showCompilationProgressBar(False), or the model was not compiled
        info["graph_compilation_unknown"] = f"compilationTime() raised: {_sdk_message(exc)}"
        return {}
    if elapsed is None:
        info["graph_compilation_unknown"] = (
            "compilationTime() returned None: PopTorch times only a compilation it watched, and none "
            "ran (the executable came from PopTorch's executable cache)"
        )
        return {}
    return {"graph_compilation": float(elapsed.total_seconds())}


def _compiled(make: Callable[[], Any], examples: Sequence[object], name: str, target: str) -> Any:
    """``make()``'s PopTorch model compiled on ``examples``; a failure releases whatever it acquired
    and raises ``CompileError`` (``_compile_failure``), the compile error being the one worth reading."""
    executor: Any = None
    try:
        with runtime_internals_quiet():
            executor = make()
            executor.compile(*examples)
    except Exception as exc:
        if executor is not None:
            with contextlib.suppress(Exception):
                _release(executor)
        raise _compile_failure(exc, name, target) from exc
    return executor


def _module_copy(
    poptorch: ModuleType, torch: ModuleType, model: Any, training: bool, precision: str, ipus: int, name: str
) -> Any:
    """The copy of ``model`` PopTorch wraps: in the mode wanted, the precision asked for, and placed
    on ``ipus`` pipeline stages where there are several."""
    module = copy.deepcopy(model)
    # PopTorch wraps a shallow copy and does not switch modes: the copy must already be in the
    # mode wanted (eval: dropout off, batch norm on its running statistics).
    module = module.train() if training else module.eval()
    if precision == "fp16":
        module = module.half()
    if ipus > 1:
        _place(poptorch, torch, module, ipus, name)
    return module


def _handle_calls(
    handle: _Handle,
) -> tuple[Callable[..., object], Callable[[], None], Callable[[], int]]:
    """A compiled model's ``run``, ``close`` and cycle count read, all through ``handle`` (whose
    executor ``close`` lets go of)."""

    def run(*inputs: object) -> object:
        executor = handle.executor
        if executor is None:
            raise RuntimeError(_CLOSED)
        # Synchronous: PopTorch returns host tensors once the device has sent them back.
        return executor(*inputs)

    def close() -> None:
        executor, handle.executor = handle.executor, None
        if executor is not None:
            _release(executor)

    def cycle_count() -> int:
        executor = handle.executor
        if executor is None:
            raise RuntimeError(_CLOSED)
        return int(executor.cycleCount())

    return run, close, cycle_count


def _host_tensors(torch: ModuleType, precision: str) -> Callable[[Sequence[object]], tuple[object, ...]]:
    """The ``prepare_inputs`` of a PopTorch model: contiguous host tensors, floating point ones in
    the precision compiled (PopTorch copies host tensors to the IPU itself, on every call)."""
    dtype = torch.float16 if precision == "fp16" else torch.float32

    def prepare_inputs(inputs: Sequence[object]) -> tuple[object, ...]:
        prepared = []
        for x in inputs:
            t = torch.as_tensor(x).detach()
            if t.is_floating_point():
                t = t.to(dtype)
            prepared.append(t.contiguous())
        return tuple(prepared)

    return prepare_inputs


def _check_options(options: Mapping[str, object], name: str, precision: str) -> dict[str, object]:
    """Every rule PopTorch would enforce late (or with a long message), checked up front."""
    checked = CheckedOptions("poptorch", OPTIONS, options, name)
    if precision not in _PRECISIONS:
        raise CompileError(
            f"precision {precision!r} is not supported by the poptorch backend ({name}); use fp16 "
            "(model.half(), the IPU default) or fp32"
        )
    opts = checked.values
    iterations = checked.positive_int("device_iterations")
    replicas = checked.positive_int("replication_factor")
    accumulation = checked.positive_int("gradient_accumulation")
    ipus = checked.positive_int("ipus")
    for key in ("training", "auto_round_num_ipus"):
        checked.flag(key)
    cycles.check(opts[cycles.OPTION], "poptorch", name)
    training = bool(opts["training"])
    checked.one_of("output_mode", OUTPUT_MODES, f"use one of {', '.join(OUTPUT_MODES)}")
    cache = opts["executable_cache_dir"]
    if cache is not None and not isinstance(cache, (str, os.PathLike)):
        raise checked.refuse("executable_cache_dir", "use a directory path or None")
    memory_proportions(opts["available_memory_proportion"], ipus, "poptorch backend option", name)
    partials = opts["partials_type"]
    if partials is not None:
        checked.one_of("partials_type", _PARTIALS, "use 'fp32', 'fp16' or None")
    if partials == "fp16" and precision != "fp16":
        raise CompileError(
            f"poptorch backend option partials_type='fp16' for {name} needs precision fp16 "
            f"(got {precision}); use partials_type='fp32' or precision fp16"
        )
    seed = opts["random_seed"]
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise checked.refuse("random_seed", "use a non-negative integer or None")
    if accumulation != 1 and not training:
        raise CompileError(
            f"poptorch backend option gradient_accumulation={accumulation} for {name} applies to training "
            "only (PopTorch's inferenceModel needs 1); pass training=True, or raise device_iterations"
        )
    _check_ipus(ipus, replicas, bool(opts["auto_round_num_ipus"]), name)
    _check_pipeline(ipus, training, iterations, accumulation, name)
    return opts


def _check_pipeline(ipus: int, training: bool, iterations: int, accumulation: int, name: str) -> None:
    """``CompileError`` where a model pipelined over ``ipus`` stages gets too few micro-batches a
    call to fill them: device iterations for inference, gradient accumulation for training."""
    # PopTorch's pipelining rule (popart_compiler Compiler.cpp:672-701): every stage needs a
    # micro-batch in flight, so a call must carry at least one per stage.
    if ipus > 1 and not training and iterations < ipus:
        raise CompileError(
            f"poptorch backend option device_iterations={iterations} for {name} is below its {ipus} "
            f"pipeline stages (ipus={ipus}; PopTorch needs one device iteration per stage for inference); "
            f"pass device_iterations={ipus} or more"
        )
    if ipus > 1 and training and accumulation < 2 * ipus - 1:
        raise CompileError(
            f"poptorch backend option gradient_accumulation={accumulation} for {name} is below its "
            f"{2 * ipus - 1} pipeline stages (ipus={ipus} forward and {ipus - 1} backward when training; "
            f"PopTorch needs one micro-batch per stage); pass gradient_accumulation={2 * ipus - 1} or more"
        )


def _check_ipus(ipus: int, replicas: int, auto_round: bool, name: str) -> None:
    """PopTorch reserves (IPUs per replica) x replicas IPUs: a power of two, at most 64 per process."""
    total = ipus * replicas
    if total > MAX_IPUS_PER_PROCESS:
        raise CompileError(
            f"{name} needs ipus ({ipus}) x replication_factor ({replicas}) = {total} IPUs, more than the "
            f"{MAX_IPUS_PER_PROCESS} PopTorch reserves per process; use fewer, or run several processes "
            "with PopRun"
        )
    rounded = 1 << (total - 1).bit_length()
    if rounded != total and not auto_round:
        raise CompileError(
            f"{name} needs ipus ({ipus}) x replication_factor ({replicas}) = {total} IPUs, but PopTorch "
            f"reserves a power of 2 per process; make the product a power of 2, or pass "
            f"auto_round_num_ipus=True to reserve {rounded} ({rounded - total} idle)"
        )


def _check_batch(inputs: Sequence[Any], opts: Mapping[str, object], name: str) -> None:
    """PopTorch's batch rule: every tensor's leading dimension (1 for a scalar) is a multiple of
    device_iterations x replication_factor x gradient_accumulation."""
    iterations = int(str(opts["device_iterations"]))
    replicas = int(str(opts["replication_factor"]))
    accumulation = int(str(opts["gradient_accumulation"]))
    factor = iterations * replicas * accumulation
    for i, t in enumerate(inputs):
        batch = int(t.shape[0]) if t.dim() else 1
        if batch % factor:
            suggested = factor * max(1, math.ceil(batch / factor))
            raise CompileError(
                f"input {i} of {name} has leading dimension {batch}, not a multiple of device_iterations "
                f"({iterations}) x replication_factor ({replicas}) x gradient_accumulation ({accumulation}) "
                f"= {factor}, which each call's batch is split into; pass a batch of {suggested} (or another "
                "multiple) or change those options"
            )


def _place(poptorch: ModuleType, torch: ModuleType, module: Any, ipus: int, name: str) -> None:
    """Split an ``nn.Sequential`` into ``ipus`` contiguous stages of near-equal layer counts,
    stage ``i`` on IPU ``i`` (``poptorch.BeginBlock`` on its first layer)."""
    if not isinstance(module, torch.nn.Sequential) or len(module) < ipus:
        raise CompileError(
            f"ipus={ipus} splits a torch.nn.Sequential's layers over {ipus} IPUs, but {name} is not a "
            f"Sequential of at least {ipus} layers; annotate its layers with poptorch.BeginBlock(layer, "
            "ipu_id=i) yourself and pass ipus=1"
        )
    size, extra = divmod(len(module), ipus)
    start = 0
    for stage in range(ipus):
        try:
            poptorch.BeginBlock(module[start], ipu_id=stage)
        except Exception as exc:
            raise CompileError(
                f"could not place layer {start} of {name} on IPU {stage}: {_sdk_message(exc)}; a model "
                "annotated with poptorch blocks already places itself: pass ipus=1"
            ) from exc
        start += size + (1 if stage < extra else 0)


def _poptorch_options(
    poptorch: ModuleType,
    torch: ModuleType,
    opts: Mapping[str, object],
    ipu_id: int | None,
    base: Any = None,
) -> Any:
    """A ``poptorch.Options`` built from the checked backend options, for one independent process;
    or, given ``base`` (a PopRun instance's ``popdist.poptorch.Options``, for training), on top of
    what PopDist set there: the launch's process id and count, the local replicas and the device."""
    if base is None:
        popts = poptorch.Options()
        # Options() reads OMPI_COMM_WORLD_SIZE/RANK (poptorch options.py:466), which mpirun and PopRun
        # set in every process they start; with more than one process PopTorch would compile this
        # model as one replica of a graph distributed over all of them. Every model compiled here is
        # its own.
        popts.Distributed.disable()
        popts.replicationFactor(int(str(opts["replication_factor"])))
    else:
        popts = base
    popts.deviceIterations(int(str(opts["device_iterations"])))
    if opts["training"]:
        popts.Training.gradientAccumulation(int(str(opts["gradient_accumulation"])))
    mode = str(opts["output_mode"])
    if mode != "default":
        popts.outputMode(getattr(poptorch.OutputMode, OUTPUT_MODES[mode]))
    if opts["auto_round_num_ipus"]:
        popts.autoRoundNumIPUs(True)
    cache = opts["executable_cache_dir"]
    if cache is not None:
        popts.enableExecutableCaching(str(Path(str(cache))))
    # Checked already (_check_options); PopTorch takes one entry per IPU, keyed "IPU<n>".
    proportions = memory_proportions(
        opts["available_memory_proportion"], int(str(opts["ipus"])), "poptorch backend option", "the model"
    )
    if proportions is not None:
        popts.setAvailableMemoryProportion({f"IPU{ipu}": p for ipu, p in proportions.items()})
    partials = opts["partials_type"]
    if partials is not None:
        popts.Precision.setPartialsType(getattr(torch, _PARTIALS[str(partials)]))
    seed = opts["random_seed"]
    if seed is not None:
        popts.randomSeed(int(str(seed)))
    if ipu_id is not None:
        popts.useIpuId(ipu_id)
    return popts


def _plain_options(opts: Mapping[str, object]) -> dict[str, object]:
    """The options as plain JSON values (paths as strings)."""
    plain = dict(opts)
    if plain["executable_cache_dir"] is not None:
        plain["executable_cache_dir"] = str(plain["executable_cache_dir"])
    plain["available_memory_proportion"] = plain_memory_proportion(plain["available_memory_proportion"])
    return plain


def _reserved(info: Mapping[str, object]) -> int | None:
    """The IPUs the executor reserved, as ``_info`` read them back (``None`` if it could not)."""
    value = info.get("ipus_reserved")
    return value if isinstance(value, int) and value > 0 else None


def _info(
    poptorch: ModuleType, used: Any, opts: Mapping[str, object], ipu_id: int | None, version: str | None
) -> dict[str, object]:
    """Plain-JSON facts about the compile, read back from the executor's own (frozen) options."""
    ipus = int(str(opts["ipus"]))
    replicas = int(used.replication_factor)
    requested = ipus * replicas
    reserved = 1 << (requested - 1).bit_length() if opts["auto_round_num_ipus"] else requested
    popart = dict(getattr(getattr(used, "_Popart", None), "options", {}) or {})
    cache = popart.get("cachePath") if popart.get("enableEngineCaching") else None
    try:
        output_mode = poptorch.OutputMode(int(used.output_mode)).name.lower()
    except (ValueError, TypeError, AttributeError):
        output_mode = str(opts["output_mode"])
    return {
        "poptorch": version,
        "training": bool(opts["training"]),
        "ipus_per_replica": ipus,
        "ipus_requested": requested,
        "ipus_reserved": reserved,
        "ipu_id": ipu_id,
        "replication_factor": replicas,
        "device_iterations": int(used.device_iterations),
        "gradient_accumulation": int(used.Training.gradient_accumulation),
        "micro_batches_per_call": int(used.device_iterations)
        * replicas
        * int(used.Training.gradient_accumulation),
        "output_mode": output_mode,
        "executable_cache_dir": None if cache is None else str(cache),
        # PopTorch does not say whether an executable came from its cache.
        "executable_cache_hit": None,
        # The partials PopTorch passed on to PopART (setPartialsType), None where left at its default.
        "popart_partials": {
            "matmuls": popart.get("partialsTypeMatMuls"),
            "convolutions": dict(popart.get("convolutionOptions") or {}).get("partialsType"),
        },
        "options": _plain_options(opts),
    }
