"""The PopART backend: ONNX models (or torch models, exported through ``onnx_export``) in a
``popart.InferenceSession`` on Graphcore IPUs (``ipu``, ``ipu:N``) or the IPU Model simulator
(``ipu-model``).

Written against PopART 3.x (the Poplar SDK's last release, 3.4, is from September 2023), keeping the
one 2.x difference that matters here, acquiring a device. ``import popart`` raises ``ImportError``
once ``onnx`` is in ``sys.modules`` ("popart must be imported before onnx", every SDK from 1.2 to
3.4), and this backend, the exporter and other backends import onnx, so ``_import`` imports popart
lazily but *first*; where something imported onnx earlier, ``availability`` says so and the fix.

**A compile** follows the SDK's documented flow (Graphcore's ResNeXt-101 inference example): the
ONNX model (opset at most 11: PopART 3.x's op tables stop there and ``strictOpVersions``, on by
default, rejects a newer model), every input's batch dimension fixed to the micro-batch
(``popart_onnx``: PopART compiles static shapes, and the example rewrote ``dim_value`` so), fp16 by
``GraphTransformer.convertFloatsToHalfs()``; ``DataFlow(batches_per_step, {output:
AnchorReturnType("ALL")})``, ``SessionOptions`` and a device from
``DeviceManager().tryAcquireAvailableDevice(n)`` (SDK >= 2.4, ``None`` when no device is free; older
SDKs only have ``acquireAvailableDevice``, which returned ``None`` too and raises from 2.4), either
way ``BackendUnavailable("Failed to acquire ...")``; then ``InferenceSession(fnModel=..., dataFlow=...,
deviceInfo=..., userOptions=...)``, ``prepareDevice()`` (compiles the Poplar graph and loads the engine),
``weightsFromHost()``, ``initAnchorArrays()`` and one ``run``, timed as the phases ``export``,
``session``, ``weights`` and ``first_run``.

**Batches.** One ``run`` executes ``batches_per_step`` batches on each of ``replicated_graphs``
replicas: ``micro_batch x batches_per_step x replicated_graphs`` items, the leading dimension of every
input. ``popart_runner`` hands inputs to ``PyStepIO`` in PopART's layout ``[batches_per_step, replicas,
micro_batch, ...]`` (prefix dimensions of 1 dropped) and merges those prefixes of the outputs again.

``session.run`` releases the GIL from SDK 2.1 (pybind11 ``gil_scoped_release``; Graphcore's 2020
ResNeXt example used one process per IPU because SDKs up to 2.0 held it), so single-IPU sessions run
side by side in threads.

Documented in docs/ipu.md (sections "The SDK's environment", "Targets and options": the opsets and the
``driverIds`` behind ``ipu_ids``, and "Placement: replicas, pipeline stages and parallel instances").
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from pytest_ipu.backends import onnx_export
from pytest_ipu.backends.base import Availability
from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.base import NamedBackend
from pytest_ipu.backends.compile_args import CheckedOptions
from pytest_ipu.backends.compile_args import model_label
from pytest_ipu.backends.compile_args import onnx_source
from pytest_ipu.backends.ipu import cycles
from pytest_ipu.backends.ipu import popart_onnx
from pytest_ipu.backends.ipu.options import MemoryProportions
from pytest_ipu.backends.ipu.options import memory_proportions
from pytest_ipu.backends.ipu.options import plain_memory_proportion
from pytest_ipu.backends.ipu.popart_onnx import MAX_OPSET
from pytest_ipu.backends.ipu.popart_onnx import MIN_OPSET
from pytest_ipu.backends.ipu.popart_onnx import Prepared
from pytest_ipu.backends.ipu.popart_runner import Runner
from pytest_ipu.backends.ipu.popart_runner import as_array
from pytest_ipu.backends.ipu.popart_runner import layout
from pytest_ipu.devices import driver_ids
from pytest_ipu.devices import inventory as ipu_inventory
from pytest_ipu.devices import poprun
from pytest_ipu.devices.inventory import IpuInventory
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import CompileError
from pytest_ipu.processes import error_text
from pytest_ipu.sdk import import_sdk

#: Options ``ipu_compile`` accepts for this backend, with their defaults.
OPTIONS: Mapping[str, object] = {
    "batches_per_step": None,
    "replicated_graphs": 1,
    "ipus": 1,
    "virtual_graph_mode": None,
    "pipelining": False,
    "anchors": "all",
    "partials_type": None,
    "enable_engine_caching": False,
    "cache_path": None,
    "opset": MAX_OPSET,
    "available_memory_proportion": None,
    "ipu_model_tiles": 1472,
    "ipu_model_version": "ipu2",
    cycles.OPTION: cycles.POPART_DEFAULT,
}
#: The IPU architectures Poplar's IPU Model simulates (``DeviceInfo.ipuVersion`` values).
_IPU_MODEL_VERSIONS = ("ipu1", "ipu2", "ipu21")
#: ``virtual_graph_mode`` values and the ``popart.VirtualGraphMode`` members they select.
_VIRTUAL_GRAPH_MODES = {"off": "Off", "manual": "Manual", "auto": "Auto"}
_ANCHORS = ("all", "final", "sum", "everyn:N")
_PARTIALS = ("float", "half")

#: What ``availability`` says when there is no ``popart`` module at all.
NOT_INSTALLED = (
    "PopART ships with Graphcore's Poplar SDK, not PyPI (PyPI's 'popart' is an unrelated project): "
    "source the SDK's enable script (source <poplar_sdk>/enable) or pip install the popart wheel "
    "from the SDK directory"
)


class _NotPopart(ImportError):
    """A ``popart`` module that is not Graphcore's (PyPI has an unrelated project of that name)."""


class PopArtBackend(NamedBackend):
    """Runs ONNX models in a ``popart.InferenceSession`` on IPUs or the IPU Model simulator.

    ``device`` is ``ipu`` (any free IPUs; under PopRun, the IPUs PopDist gives the instance),
    ``ipu:N`` (device id ``N`` as ``gc-info -l`` lists it, which may name a multi-IPU device) or
    ``ipu-model`` (the IPU Model simulator: its timings are not hardware timings). A torch model
    is exported to ONNX first (cached under ``cache_dir``).

    Options: ``batches_per_step`` (batches per ``run``; by default 1, or the number of pipeline
    stages when pipelining, the fewest PopART accepts), ``replicated_graphs`` (data-parallel
    replicas), ``ipus`` (IPUs per replica; ``ipus x replicated_graphs`` IPUs are acquired, a power
    of two), ``virtual_graph_mode`` (``None``/``"off"``, ``"manual"``: the ONNX model's
    ``virtualGraph`` annotations, ``"auto"``: PopART splits the model), ``pipelining`` (bool),
    ``anchors`` (``"all"``: every batch's outputs; ``"final"``, ``"sum"``, ``"everyn:N"``),
    ``partials_type`` (``None``, ``"float"`` or ``"half"``: matmul and convolution partials),
    ``enable_engine_caching`` and ``cache_path`` (the compiled executable cache; default
    ``<cache_dir>/popart-engines``), ``opset`` (for exports, 6 to 11),
    ``available_memory_proportion`` (``None``: PopART's default; a number in (0, 1], or a mapping
    ``{"IPU0": p, ...}`` checked by ``options.memory_proportions`` as PopTorch's is: set on every
    convolution's output with ``Builder.setAvailableMemoryProportion``, as Graphcore's ResNeXt-101
    example does with 0.3, each its IPU's value), and for ``ipu-model`` ``ipu_model_tiles``
    (default 1472, a real IPU2's tiles; PopART's own default of 4 tiles holds only toy models) and
    ``ipu_model_version`` (``"ipu2"``; ``"ipu1"`` or ``"ipu21"``), and ``cycle_counter`` (default
    True: compile in the hardware cycle counter, ``instrumentWithHardwareCycleCounter``, which the
    ``ipu_cycles`` metric reads in the untimed counting pass; ``cycles.py``).

    Compile phases: ``export`` (torch models), ``session`` (preparing the ONNX model, acquiring the
    device, creating the session and ``prepareDevice``, which compiles the Poplar graph),
    ``weights`` (``weightsFromHost``) and ``first_run``.
    """

    def __init__(
        self,
        name: str = "popart",
        device: str | None = None,
        cache_dir: Path | None = None,
        popart_module: ModuleType | None = None,
        popdist_module: ModuleType | None = None,
    ) -> None:
        super().__init__(name, device or "ipu")
        self._kind, self._index, self._device_error = _parse_device(self._device)
        self._cache_dir = cache_dir or Path(".pytest-ipu-cache")
        self._popart = popart_module
        # popdist says whether this process is a PopRun instance; imported lazily when not given.
        self._popdist = popdist_module

    #: ``session.run`` releases the GIL, so concurrent instances run in threads of this process.
    concurrency = "threads"
    #: A session keeps its IPUs attached until closed: the run keeps one such model open at a time.
    exclusive_device = True

    def inventory(self) -> IpuInventory | str:
        """The IPUs present (gcipuinfo, else PopART's device list), or why there are none; for the
        IPU Model, a simulated inventory that any number of instances can share. Under PopRun,
        placement keeps to the device PopDist gives this instance (``devices.poprun``)."""
        if self.simulator:
            return ipu_inventory.simulator_inventory(1)
        try:
            popart = self._require()
        except BackendUnavailable as exc:
            return str(exc)
        found = ipu_inventory.discover(popart_module=popart)
        if isinstance(found, str):
            return found
        return poprun.placeable(found, self._popdist)

    def _poprun_device_id(self, needed: int, label: str) -> int | None:
        """Under PopRun, the device id for a model on ``ipu`` (no id given): this instance's PopDist
        device, or the first aligned part of it the model needs; ``None`` outside PopRun.

        Without it PopART would acquire any free IPUs, which may be another instance's, and the
        energy of those IPUs would be charged to this instance.
        """
        try:
            launched = poprun.detect(self._popdist) is not None
        except ValueError as exc:
            raise CompileError(f"{exc} (compiling {label})") from None
        if not launched:
            return None
        found = self.inventory()
        if isinstance(found, str):
            raise BackendUnavailable(f"cannot place {label} on {self._name}:{self._device}: {found}")
        if not isinstance(found, poprun.InstanceInventory):
            return None
        try:
            return poprun.device_for_model(found, needed, "ipus x replicated_graphs")
        except ValueError as exc:
            raise CompileError(f"{label} {exc}") from None

    def placement_options(self, replicas: int, stages: int) -> dict[str, object]:
        """``replicated_graphs`` for replicas; ``stages`` pipeline stages, one IPU each, split by
        PopART itself (``virtual_graph_mode="auto"``)."""
        options: dict[str, object] = {"replicated_graphs": replicas, "ipus": stages}
        if stages > 1:
            options.update(virtual_graph_mode="auto", pipelining=True)
        return options

    @property
    def simulator(self) -> bool:
        """Whether this is the IPU Model simulator, whose timings are not hardware timings."""
        return self._kind == "ipu-model"

    def _import(self) -> ModuleType:
        """The popart module, imported on first use and before anything here imports onnx.

        ``import popart`` fails once ``onnx`` is imported (see the module docstring), and a compile
        imports onnx; importing popart first thing keeps the order right within this backend.
        """
        if self._popart is None:
            module = import_sdk("popart")
            if not hasattr(module, "InferenceSession") or not hasattr(module, "DeviceManager"):
                where = getattr(module, "__file__", None) or "unknown location"
                raise _NotPopart(
                    f"the importable 'popart' module ({where}) is not Graphcore's PopART (it has no "
                    f"InferenceSession); uninstall it (pip uninstall popart): {NOT_INSTALLED}"
                )
            self._popart = module
        return self._popart

    def _unavailable_reason(self, exc: BaseException) -> str:
        text = str(exc)
        if isinstance(exc, ModuleNotFoundError) and exc.name == "popart":
            return f"popart is not importable ({text}); {NOT_INSTALLED}"
        if "onnx" in text and "before onnx" in text:
            return (
                f"popart cannot be imported: {text} Something in this process imported onnx first "
                "(an ONNX export, onnxruntime or a test module); import popart before anything imports "
                "onnx, e.g. 'import popart' at the top of conftest.py, or run the popart targets in "
                "their own pytest run"
            )
        if isinstance(exc, _NotPopart):
            return text
        return (
            f"popart failed to import ({type(exc).__name__}: {text}); check that the enabled Poplar SDK "
            "matches this Python version"
        )

    def _require(self) -> ModuleType:
        try:
            return self._import()
        except Exception as exc:  # an SDK that fails to load raises ImportError or RuntimeError
            raise BackendUnavailable(self._unavailable_reason(exc)) from exc

    def availability(self) -> Availability:
        """popart importable (and Graphcore's), the device name valid, and the device present."""
        try:
            popart = self._import()
        except Exception as exc:  # never raise: the reason says what is wrong
            return Availability.no(self._unavailable_reason(exc))
        if self._device_error:
            return Availability.no(self._device_error)
        if self.simulator:
            return Availability.yes()  # the IPU Model needs no hardware
        try:
            devices = list(popart.DeviceManager().enumerateDevices())
        except Exception as exc:
            return Availability.no(f"PopART could not list IPU devices: {exc}")
        if not devices:
            return Availability.no(
                f"PopART {_version(popart)} finds no IPU (gc-info -l lists them; on a Pod, check the "
                "IPUOF_VIPU_API_* partition settings); device 'ipu-model' runs the IPU Model simulator"
            )
        if self._index is not None and self._index not in _device_ids(popart, len(devices)):
            return Availability.no(
                f"there is no IPU device with id {self._index} (gc-info -l lists the ids; "
                f"this machine has {len(devices)} IPU(s))"
            )
        return Availability.yes()

    def default_precision(self) -> str:
        """fp16, the IPU's usual inference precision."""
        return "fp16"

    def shape_specialized(self, options: Mapping[str, object]) -> bool:
        """A PopART session is compiled for fixed input shapes (batch included)."""
        return True

    def describe(self) -> dict[str, Any]:
        """popart version, the device, whether it is the simulator, and the IPU devices present."""
        out: dict[str, Any] = {
            "backend": self._name,
            "device": self._device,
            "simulator": self.simulator,
        }
        try:
            popart = self._import()
        except Exception as exc:
            out["error"] = self._unavailable_reason(exc)
            return out
        out["popart"] = _version(popart)
        if self.simulator:
            out["device_name"] = "IPU Model simulator (simulated timings, not IPU hardware)"
        try:
            devices = list(popart.DeviceManager().enumerateDevices())
        except Exception as exc:
            out["devices_error"] = str(exc)
            return out
        out["ipus"] = len(devices)
        out["devices"] = [_device_facts(d) for d in devices]
        inventory = self.inventory()
        out["inventory"] = inventory if isinstance(inventory, str) else inventory.as_json()
        return out

    def compile(
        self,
        model: object,
        example_inputs: Sequence[object],
        precision: str,
        options: Mapping[str, object],
    ) -> CompiledModel:
        """Export or load the ONNX model, fix its batch, acquire IPUs, compile the session, run it once.

        The steps, each a function below: check the options into a plan, read or export the ONNX
        model, prepare it (``popart_onnx``), acquire the IPUs, open the session, load the weights and
        run once. Whatever fails after the IPUs are acquired detaches them.
        """
        # popart first: a compile imports onnx, after which ``import popart`` fails.
        popart = self._require()
        label = model_label(model)
        plan = _plan(options, precision, example_inputs, label, self._device_error)
        info = _compile_info(popart, plan, options, self._kind, self.simulator)
        phases: dict[str, float] = {}
        source, from_torch = _onnx_source(model, example_inputs, plan, label, self._cache_dir, phases, info)
        with _timed(phases, "session"):
            prepared = popart_onnx.prepare(
                popart, source, label, plan.arrays, plan.request(precision, from_torch)
            )
            info.update(
                opset=prepared.opset,
                fp16_conversion=prepared.fp16_conversion,
                available_memory_convs=prepared.memory_convs,
            )
            engine_cache = _engine_cache(plan.opts, self._cache_dir)
            info["engine_cache"] = engine_cache
            index = self._index
            if index is None and not self.simulator:
                index = self._poprun_device_id(plan.num_ipus, label)
            device = _acquire(popart, plan.num_ipus, label, plan.opts, self.simulator, index)
            info.update(_device_info(device, self.simulator))
            counting = cycles.wanted(bool(plan.opts[cycles.OPTION]), self.simulator)
            session = _open_session(popart, device, prepared, plan, engine_cache, label, counting)
        runner = _load_and_run_once(popart, session, device, prepared, plan, example_inputs, label, phases)
        ipu_ids = None if self.simulator else _held_ipus(popart, device, info)
        return self._compiled(plan, device, runner, precision, phases, info, ipu_ids)

    def _compiled(
        self,
        plan: _Plan,
        device: Any,
        runner: Runner,
        precision: str,
        phases: dict[str, float],
        info: dict[str, Any],
        ipu_ids: tuple[int, ...] | None,
    ) -> CompiledModel:
        """The compiled model of the session ``runner`` runs on ``device`` (holding ``ipu_ids``)."""
        return CompiledModel(
            target=f"{self._name}:{self._device}",
            backend=self._name,
            device=self._device,
            device_name=_device_name(device, self.simulator, plan.num_ipus),
            precision=precision,
            io="host",
            run=runner.run,
            prepare_inputs=runner.prepare_inputs,
            close=runner.close,
            options=dict(plan.opts),
            phases_s=phases,
            info=info,
            simulator=self.simulator,
            ipu_ids=ipu_ids,
            counters=(
                cycles.counter(
                    runner.cycle_count, bool(plan.opts[cycles.OPTION]), self.simulator, self._name, ipu_ids
                ),
            ),
        )


@dataclass(frozen=True)
class _Plan:
    """One compile's checked options, resolved: how a call's items spread over steps, replicas and IPUs."""

    #: The options with their defaults, checked, in the form the record shows.
    opts: dict[str, object]
    #: The example inputs as numpy arrays.
    arrays: tuple[np.ndarray, ...]
    bps: int
    replicas: int
    #: IPUs per replica.
    ipus: int
    stages: int
    micro: int
    #: ``available_memory_proportion`` per IPU of a replica; ``None``: PopART's default.
    memory: MemoryProportions | None

    @property
    def num_ipus(self) -> int:
        """The IPUs acquired: ``ipus x replicated_graphs``."""
        return self.ipus * self.replicas

    def request(self, precision: str, from_torch: bool) -> popart_onnx.ModelRequest:
        """What the session needs of the ONNX model."""
        mode = self.opts["virtual_graph_mode"]
        return popart_onnx.ModelRequest(
            micro_batch=self.micro,
            batches_per_step=self.bps,
            replicated_graphs=self.replicas,
            ipus=self.ipus,
            precision=precision,
            from_torch=from_torch,
            virtual_graph_mode=None if mode is None else str(mode),
            pipelining=bool(self.opts["pipelining"]),
            memory=self.memory,
            memory_option=self.opts["available_memory_proportion"],
        )


@contextlib.contextmanager
def _timed(phases: dict[str, float], name: str) -> Iterator[None]:
    """Time the block as the compile phase ``name`` (kept only when the block completes)."""
    start = time.perf_counter_ns()
    yield
    phases[name] = (time.perf_counter_ns() - start) * 1e-9


@contextlib.contextmanager
def _released_on_error(device: Any, label: str) -> Iterator[None]:
    """Whatever fails in the block, the IPUs go back: another test (or process) may need them.

    An SDK error becomes a ``CompileError`` naming the model; ours pass as they are.
    """
    try:
        yield
    except BaseException as exc:
        _detach_quietly(device)
        if isinstance(exc, (CompileError, BackendUnavailable)) or not isinstance(exc, Exception):
            raise
        raise CompileError(_session_error(exc, label)) from exc


def _open_session(
    popart: ModuleType,
    device: Any,
    prepared: Prepared,
    plan: _Plan,
    engine_cache: str | None,
    label: str,
    counting: bool,
) -> Any:
    """``InferenceSession`` on the device and ``prepareDevice()``, which compiles the Poplar graph
    (with the hardware cycle counter where ``counting``)."""
    with _released_on_error(device, label):
        session = popart.InferenceSession(
            fnModel=prepared.proto,
            dataFlow=_dataflow(popart, prepared.output_ids, plan.bps, str(plan.opts["anchors"])),
            deviceInfo=device,
            userOptions=_session_options(popart, plan.opts, plan.replicas, engine_cache, counting),
        )
        session.prepareDevice()
    return session


def _load_and_run_once(
    popart: ModuleType,
    session: Any,
    device: Any,
    prepared: Prepared,
    plan: _Plan,
    example_inputs: Sequence[object],
    label: str,
    phases: dict[str, float],
) -> Runner:
    """``weightsFromHost()`` (phase ``weights``), then the anchors and one run (phase ``first_run``)."""
    with _released_on_error(device, label):
        with _timed(phases, "weights"):
            session.weightsFromHost()
        with _timed(phases, "first_run"):
            runner = Runner(
                popart,
                session,
                device,
                prepared,
                session.initAnchorArrays(),
                layout(plan.bps, plan.replicas),
                str(plan.opts["anchors"]),
                plan.bps,
                plan.replicas,
            )
            runner.run(*runner.prepare_inputs(example_inputs))
    return runner


def _plan(
    options: Mapping[str, object],
    precision: str,
    example_inputs: Sequence[object],
    label: str,
    device_error: str,
) -> _Plan:
    """The options checked with the precision and the device, and the call's layout the examples make."""
    opts = _check_options(options, label)
    if precision not in ("fp32", "fp16"):
        raise CompileError(
            f"the popart backend runs fp32 or fp16, not {precision} ({label}); "
            "pass precision='fp16' (the IPU default) or 'fp32'"
        )
    if device_error:
        raise BackendUnavailable(device_error)
    bps, replicas, ipus = (int(str(opts[k])) for k in ("batches_per_step", "replicated_graphs", "ipus"))
    num_ipus = ipus * replicas
    if num_ipus & (num_ipus - 1):
        raise CompileError(
            f"popart options ipus={ipus} x replicated_graphs={replicas} = {num_ipus} IPUs for {label}; "
            "PopART acquires a power of two (1, 2, 4, 8, ...): choose ipus and replicated_graphs "
            "whose product is one"
        )
    arrays = tuple(as_array(v, None) for v in example_inputs)
    memory = memory_proportions(opts["available_memory_proportion"], ipus, "popart option", label)
    opts["available_memory_proportion"] = plain_memory_proportion(opts["available_memory_proportion"])
    return _Plan(
        opts=opts,
        arrays=arrays,
        bps=bps,
        replicas=replicas,
        ipus=ipus,
        stages=_stages(opts),
        micro=_micro_batch(arrays, bps, replicas, label),
        memory=memory,
    )


def _compile_info(
    popart: ModuleType, plan: _Plan, options: Mapping[str, object], kind: str, simulator: bool
) -> dict[str, Any]:
    """What the record's ``info`` says of the compile before it starts."""
    stages = plan.stages
    info: dict[str, Any] = {
        "popart": _version(popart),
        "device_type": kind,
        "simulator": simulator,
        "ipus": plan.num_ipus,
        "micro_batch": plan.micro,
        "batches_per_step": plan.bps,
        # Where the value came from: PopART refuses fewer batches per step than pipeline stages.
        "batches_per_step_from": (
            "option"
            if options.get("batches_per_step") is not None
            else f"default: the {stages} pipeline stages"
            if stages > 1
            else "default"
        ),
        "replicated_graphs": plan.replicas,
        "anchors": str(plan.opts["anchors"]),
        "available_memory_proportion": plan.opts["available_memory_proportion"],
        # Matmul and convolution partials (None: PopART's default, float).
        "partials_type": plan.opts["partials_type"],
    }
    if simulator:
        info.update(
            ipu_model_tiles=plan.opts["ipu_model_tiles"], ipu_model_version=plan.opts["ipu_model_version"]
        )
    return info


def _onnx_source(
    model: object,
    example_inputs: Sequence[object],
    plan: _Plan,
    label: str,
    cache_dir: Path,
    phases: dict[str, float],
    info: dict[str, Any],
) -> tuple[bytes | str, bool]:
    """The ONNX model (bytes or a path) and whether it was exported from torch (phase ``export``),
    at an opset PopART imports."""
    source = onnx_source(
        "popart",
        model,
        example_inputs,
        cache_dir,
        # fp32 whatever the precision: PopART converts it to fp16 later, as the example did.
        onnx_export.ExportOptions(opset=int(str(plan.opts["opset"])), precision="fp32"),
    )
    source.record(phases, info)
    exported = source.exported
    if exported is not None and exported.opset > MAX_OPSET:
        raise CompileError(
            f"torch exported {label} at ONNX opset {exported.opset} (converting it down to opset "
            f"{plan.opts['opset']} failed), and PopART 3.x imports ONNX opsets {MIN_OPSET} to "
            f"{MAX_OPSET} only; export the model yourself with torch.onnx.export(model, inputs, "
            f"'model.onnx', opset_version={MAX_OPSET}), with dynamo=False on torch 2.5 and newer, "
            "and pass the ONNX file"
        )
    return source.model, exported is not None


def _device_info(device: Any, simulator: bool) -> dict[str, Any]:
    """The acquired device's id, architecture and driver version, for the record's ``info``."""
    return {
        "device_id": _plain(getattr(device, "id", None)),
        # ipuVersion is the architecture; version is the driver version of an attached IPU
        # (the IPU Model's version repeats its architecture, so it says nothing more).
        "ipu_version": _plain(getattr(device, "ipuVersion", None)),
        "driver_version": None if simulator else _plain(getattr(device, "version", None)),
    }


def _held_ipus(popart: ModuleType, device: Any, info: dict[str, Any]) -> tuple[int, ...] | None:
    """The ``gc-info -l`` ids (ascending) of the single IPUs an acquired hardware device is made of:
    its ``driverIds`` translated through PopART's single-IPU listing (``devices.driver_ids``; the
    driver ids are not taken for ``gc-info -l`` ids). ``None`` when they cannot be, with the reason
    in ``info["ipu_ids_unknown"]``: the energy of unknown IPUs is not charged to the model."""
    try:
        given = tuple(int(i) for i in device.driverIds)
    except Exception as exc:  # an SDK without the property, or an odd value
        info["ipu_ids_unknown"] = f"DeviceInfo.driverIds unreadable: {exc}"
        return None
    info["driver_ids"] = list(given)
    if not given:
        info["ipu_ids_unknown"] = "DeviceInfo.driverIds is empty"
        return None
    try:
        return driver_ids.read(popart).ipu_ids(given)
    except Exception as exc:  # the listing failed, or a driver id it does not have: both say why
        info["ipu_ids_unknown"] = error_text(exc)
        return None


def _acquire(
    popart: ModuleType,
    num_ipus: int,
    label: str,
    opts: Mapping[str, object],
    simulator: bool,
    index: int | None,
) -> Any:
    """An attached device of ``num_ipus`` IPUs, or ``BackendUnavailable`` naming the count."""
    what = f"{num_ipus} IPU(s) for {label}"
    try:
        manager = popart.DeviceManager()
        if simulator:
            # The SDK turns option values into strings with operator<<: pass strings ("True" != "true").
            # PopART's own default is 4 tiles (defaultFewTiles), too few for real models: the
            # tiles and architecture of a real IPU are passed instead, as PopTorch's IPU Model has.
            return manager.createIpuModelDevice(
                {
                    "numIPUs": str(num_ipus),
                    "tilesPerIPU": str(opts["ipu_model_tiles"]),
                    "ipuVersion": str(opts["ipu_model_version"]),
                }
            )
        if index is not None:
            device = _acquire_by_id(popart, manager, num_ipus, index)
        else:
            try_acquire = getattr(manager, "tryAcquireAvailableDevice", None)
            # SDK >= 2.4: try... returns None when no device is free (acquire... raises).
            # SDK <= 2.3: only acquire..., which returns None.
            acquire = try_acquire or manager.acquireAvailableDevice
            device = acquire(numIpus=num_ipus)
    except CompileError:
        raise
    except Exception as exc:
        raise BackendUnavailable(f"Failed to acquire {what}: {exc}") from exc
    if device is None:
        raise BackendUnavailable(
            f"Failed to acquire {what}{'' if index is None else f' (device id {index})'}: "
            "none free (another process holds them, or there are fewer); gc-monitor shows who uses them"
        )
    return device


def _acquire_by_id(popart: ModuleType, manager: Any, num_ipus: int, index: int) -> Any:
    """The device ``index`` of ``num_ipus`` IPUs, attached; ``None`` where it is not free, and
    ``CompileError`` where no such device exists."""
    ids = _device_ids(popart, None, num_ipus)
    if index not in ids:
        # tryAcquireDeviceById dereferences a null device for an unknown id (3.4
        # devicemanager.cpp), so the id is checked against the list first.
        raise CompileError(
            f"device ipu:{index} is not a {num_ipus}-IPU device (ipus x "
            f"replicated_graphs); the {num_ipus}-IPU device ids here are {sorted(ids)}: "
            "use one of them or device 'ipu'"
        )
    by_id = getattr(manager, "tryAcquireDeviceById", None)
    return by_id(index) if by_id else manager.acquireDeviceById(index)


def _micro_batch(arrays: Sequence[np.ndarray], bps: int, replicas: int, label: str) -> int:
    """The micro-batch that every input's leading dimension (the items per call) makes."""
    if not arrays or not arrays[0].ndim:
        raise CompileError(
            f"the popart backend needs batched example inputs for {label} (leading dimension: "
            "micro_batch x batches_per_step x replicated_graphs items)"
        )
    total = int(arrays[0].shape[0])
    for k, array in enumerate(arrays[1:], start=2):
        if not array.ndim or array.shape[0] != total:
            lead = array.shape[0] if array.ndim else "none (a scalar)"
            raise CompileError(
                f"example input {k} of {label} has leading dimension {lead} but the first has {total}; "
                "PopART feeds every input per batch: give all inputs the same leading dimension"
            )
    group = bps * replicas
    if total % group or total == 0:
        raise CompileError(
            f"the inputs of {label} have leading dimension {total}, not a multiple of batches_per_step={bps} "
            f"x replicated_graphs={replicas} = {group}; a PopART call takes micro_batch x batches_per_step "
            f"x replicated_graphs items: pass a leading dimension that is a positive multiple of {group}"
        )
    return total // group


def _dataflow(popart: ModuleType, output_ids: Sequence[str], bps: int, anchors: str) -> Any:
    """``DataFlow(batches_per_step, {output: AnchorReturnType(...)})`` for every model output."""
    kind, _, period = anchors.partition(":")

    def art() -> Any:
        if kind == "everyn":
            return popart.AnchorReturnType("EVERYN", int(period))
        return popart.AnchorReturnType(kind.upper())

    return popart.DataFlow(bps, {oid: art() for oid in output_ids})


def _session_options(
    popart: ModuleType, opts: Mapping[str, object], replicas: int, engine_cache: str | None, counting: bool
) -> Any:
    so = popart.SessionOptions()
    # The counter is compiled into the graph (cycles.py): set here or not at all.
    so.instrumentWithHardwareCycleCounter = counting
    so.enableReplicatedGraphs = replicas > 1
    so.replicatedGraphCount = replicas
    mode = opts["virtual_graph_mode"] or "off"
    so.virtualGraphMode = getattr(popart.VirtualGraphMode, _VIRTUAL_GRAPH_MODES[str(mode)])
    so.enablePipelining = bool(opts["pipelining"])
    if opts["partials_type"] is not None:
        # As Graphcore's ResNeXt example (2022) and PopTorch's setPartialsType set them.
        so.partialsTypeMatMuls = str(opts["partials_type"])
        so.convolutionOptions = {"partialsType": str(opts["partials_type"])}
    if opts["enable_engine_caching"] and engine_cache is not None:
        so.enableEngineCaching = True
        so.cachePath = engine_cache
    return so


def _engine_cache(opts: Mapping[str, object], cache_dir: Path) -> str | None:
    """Where compiled executables are cached: the option, or POPART_CACHE_DIR (which turns caching on)."""
    if opts["enable_engine_caching"]:
        return str(opts["cache_path"] or cache_dir / "popart-engines")
    return os.environ.get("POPART_CACHE_DIR") or None


def _check_options(options: Mapping[str, object], label: str) -> dict[str, object]:
    """The options with their defaults, checked, and resolved: ``virtual_graph_mode`` and ``anchors``
    lower case, ``batches_per_step`` set, ``cache_path`` a string. ``available_memory_proportion`` is
    checked with the IPU count (``options.memory_proportions``)."""
    checked = CheckedOptions("popart", OPTIONS, options, label, what="popart option")
    _check_kinds(checked)
    _resolve_split(checked)
    _resolve_outputs(checked)
    return checked.values


def _check_kinds(checked: CheckedOptions) -> None:
    """Counts positive integers, the opset one PopART imports, the switches booleans."""
    for key in ("batches_per_step", "replicated_graphs", "ipus", "ipu_model_tiles"):
        if key == "batches_per_step" and checked.values[key] is None:
            continue  # resolved below, once the pipeline stages are known
        checked.positive_int(key)
    opset = checked.values["opset"]
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise checked.refuse(
            "opset",
            f"PopART 3.x imports ONNX opsets {MIN_OPSET} to {MAX_OPSET}: use an integer in that range",
        )
    for key in ("pipelining", "enable_engine_caching"):
        checked.flag(key)
    cycles.check(checked.values[cycles.OPTION], "popart", checked.model)


def _resolve_split(checked: CheckedOptions) -> None:
    """How the model splits over a replica's IPUs: virtual graphs, pipelining, batches per step."""
    opts, label = checked.values, checked.model
    mode = opts["virtual_graph_mode"]
    if mode is not None:
        normal = str(mode).lower() if isinstance(mode, str) else None
        if normal not in _VIRTUAL_GRAPH_MODES:
            raise checked.refuse(
                "virtual_graph_mode", f"use None or one of {', '.join(map(repr, _VIRTUAL_GRAPH_MODES))}"
            )
        opts["virtual_graph_mode"] = None if normal == "off" else normal
    ipus = int(str(opts["ipus"]))
    if ipus > 1 and opts["virtual_graph_mode"] is None:
        raise CompileError(
            f"popart option ipus={ipus} for {label} needs virtual_graph_mode='auto' (or 'manual', with "
            "annotated ops) to split the model over the IPUs"
        )
    if opts["pipelining"] and (ipus < 2 or opts["virtual_graph_mode"] is None):
        raise CompileError(
            f"popart option pipelining=True for {label} needs ipus >= 2 and virtual_graph_mode 'auto' or "
            "'manual' (PopART pipelines over virtual graphs)"
        )
    stages = _stages(opts)
    if opts["batches_per_step"] is None:
        # The fewest batches per step PopART accepts: one per pipeline stage (1 without pipelining).
        opts["batches_per_step"] = stages
    bps = int(str(opts["batches_per_step"]))
    if bps < stages:
        raise CompileError(
            f"popart option batches_per_step={bps} for {label} is fewer than the {stages} pipeline stages "
            f"(pipelining over ipus={ipus}); PopART needs at least one batch per stage to fill the "
            f"pipeline: pass batches_per_step={stages} or more, or leave it unset"
        )


def _resolve_outputs(checked: CheckedOptions) -> None:
    """The IPU Model's architecture, the anchors, the partials type and the engine cache path."""
    opts, label = checked.values, checked.model
    bps = int(str(opts["batches_per_step"]))
    checked.one_of(
        "ipu_model_version", _IPU_MODEL_VERSIONS, f"use one of {', '.join(map(repr, _IPU_MODEL_VERSIONS))}"
    )
    anchors = opts["anchors"]
    if not isinstance(anchors, str) or not _valid_anchors(anchors.lower(), bps):
        raise checked.refuse(
            "anchors",
            f"use one of {', '.join(map(repr, _ANCHORS))} (everyn's N must divide batches_per_step)",
        )
    opts["anchors"] = anchors.lower()
    if opts["partials_type"] is not None:
        checked.one_of("partials_type", _PARTIALS, "use None, 'float' or 'half'")
    cache_path = opts["cache_path"]
    if cache_path is not None:
        if not isinstance(cache_path, (str, Path)):
            raise checked.refuse("cache_path", "use a path or None")
        if not opts["enable_engine_caching"]:
            raise CompileError(
                f"popart option cache_path={str(cache_path)!r} for {label} has no effect without "
                "enable_engine_caching=True; pass both"
            )
        opts["cache_path"] = str(cache_path)


def _stages(opts: Mapping[str, object]) -> int:
    """The pipeline stages PopART makes: one per IPU of a replica when pipelining (``auto`` splits
    the model over every IPU; ``manual`` models are counted again from their annotations), else 1."""
    return int(str(opts["ipus"])) if opts["pipelining"] else 1


def _valid_anchors(anchors: str, bps: int) -> bool:
    if anchors in ("all", "final", "sum"):
        return True
    kind, _, period = anchors.partition(":")
    return kind == "everyn" and period.isdigit() and int(period) > 0 and bps % int(period) == 0


def _version(popart: ModuleType) -> str:
    return str(getattr(popart, "__version__", "unknown"))


def _device_ids(popart: ModuleType, count: int | None, num_ipus: int | None = None) -> set[int]:
    """Device ids (as ``gc-info -l`` numbers them) of ``num_ipus``-IPU devices, or of every size."""
    manager = popart.DeviceManager()
    sizes = [num_ipus] if num_ipus is not None else [1 << k for k in range(int(count or 1).bit_length())]
    return {int(d.id) for n in sizes for d in manager.enumerateDevices(numIpus=n)}


def _device_facts(device: Any) -> dict[str, Any]:
    return {
        key: _plain(getattr(device, key, None))
        # ``ipuVersion`` is the architecture; ``version`` the driver version (of an attached IPU).
        for key in ("id", "numIpus", "tilesPerIPU", "ipuVersion", "version", "type", "isAttached")
    }


def _plain(value: object) -> object:
    """A plain JSON value: numbers, strings and bools as they are, anything else (SDK enums) as text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _device_name(device: Any, simulator: bool, num_ipus: int) -> str:
    ipus = f"{num_ipus} IPU{'s' if num_ipus > 1 else ''}"
    if simulator:
        return f"IPU Model simulator ({ipus}; simulated timings, not IPU hardware)"
    architecture = getattr(device, "ipuVersion", None) or "IPU"
    return f"Graphcore {architecture} (device {getattr(device, 'id', '?')}, {ipus})"


def _detach_quietly(device: Any) -> None:
    with contextlib.suppress(Exception):  # the compile's own error is the one to report
        device.detach()


def _session_error(exc: BaseException, label: str) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if type(exc).__name__ == "OutOfMemoryException":
        return (
            f"PopART ran out of IPU memory compiling {label}: {text}; use a smaller batch, "
            "partials_type='half', or more IPUs (ipus with virtual_graph_mode='auto')"
        )
    return f"PopART could not compile or run {label}: {type(exc).__name__}: {text}"


def _parse_device(device: str) -> tuple[str, int | None, str]:
    """``(kind, index, error)``: ``("ipu", None, "")``, ``("ipu", 3, "")``, ``("ipu-model", None, "")``."""
    if device in ("ipu", "ipu-model"):
        return device, None, ""
    kind, _, index = device.partition(":")
    if kind == "ipu" and index.isdigit():
        return "ipu", int(index), ""
    return (
        "ipu",
        None,
        f"the popart backend runs on 'ipu', 'ipu:N' (a device id from gc-info -l) or 'ipu-model', "
        f"not {device!r}",
    )
