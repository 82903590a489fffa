"""The PopART backend: ONNX models (or torch models, exported through ``onnx_export``) in a
``popart.InferenceSession`` on Graphcore IPUs (``ipu``, ``ipu:N``) or the IPU Model simulator
(``ipu-model``).

PopART ships with Graphcore's Poplar SDK (the last release, 3.4, is from September 2023); it is not
on PyPI, whose ``popart`` is an unrelated project. This module is written against PopART 3.x and
keeps the one 2.x difference that matters here (acquiring a device, below).

**Import order.** ``import popart`` raises ``ImportError`` when ``onnx`` is already in
``sys.modules`` ("popart must be imported before onnx", in every SDK from 1.2 to 3.4). This backend
itself imports onnx (to fix the batch dimension), and so do the exporter and other backends, so
``_import`` imports popart lazily but *first*, before anything in a compile can import onnx; when
something else imported onnx earlier, ``availability`` says so and how to fix it.

**A compile** follows the SDK's documented flow (Graphcore's ResNeXt-101 inference example):

1. a torch model is exported to ONNX; ONNX bytes or a path are used as they are. PopART 3.x imports
   ONNX opsets 6 to 11 only (its op tables stop at opset 11, and ``strictOpVersions``, on by
   default, rejects a newer model), so the default ``opset`` is 11 and a newer file is refused;
2. every input's batch dimension is fixed to the micro-batch (PopART compiles static shapes; the
   ResNeXt example rewrote ``dim_value`` the same way); for fp16, a torch model is exported in fp32
   and, like an fp32 ONNX model, converted with ``popart.GraphTransformer.convertFloatsToHalfs()``
   (as the ResNeXt example did; torch 2.0.1, PopTorch 3.4's torch, cannot trace fp16 on the CPU);
3. ``DataFlow(batches_per_step, {output: AnchorReturnType("ALL")})``, ``SessionOptions``, and a
   device from ``DeviceManager().tryAcquireAvailableDevice(n)`` (SDK >= 2.4, ``None`` when no
   device is free); older SDKs only have ``acquireAvailableDevice``, which returned ``None`` too
   (from 2.4 it raises instead). Either way this raises ``BackendUnavailable("Failed to acquire ...")``;
4. ``InferenceSession(fnModel=..., dataFlow=..., deviceInfo=..., userOptions=...)``,
   ``prepareDevice()`` (compiles the Poplar graph and loads the engine), ``weightsFromHost()``,
   ``initAnchorArrays()`` and one ``run``, timed as the phases ``export``, ``session``, ``weights``
   and ``first_run``.

**Batches.** One ``run`` executes ``batches_per_step`` batches on each of ``replicated_graphs``
replicas, so a call takes ``micro_batch x batches_per_step x replicated_graphs`` items: the leading
dimension of every input. Inputs are handed to ``PyStepIO`` in PopART's layout
``[batches_per_step, replicas, micro_batch, ...]`` (prefix dimensions of 1 dropped), and outputs
come back with those prefix dimensions merged into the leading one again.

**Threads.** ``session.run`` releases the GIL (from SDK 2.1; pybind11 ``gil_scoped_release``), so
several single-IPU sessions in one process can run at the same time from threads (Graphcore's 2020
ResNeXt example used one process per IPU because SDKs up to 2.0 held the GIL).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
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
from pytest_ipu.backends.base import merge_options
from pytest_ipu.backports import zip_strict
from pytest_ipu.devices import inventory as ipu_inventory
from pytest_ipu.devices.inventory import IpuInventory
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import CompileError
from pytest_ipu.sdk import import_sdk

#: The ONNX (``ai.onnx``) opsets PopART 3.x imports.
MIN_OPSET = 6
MAX_OPSET = 11

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
}
#: The IPU architectures Poplar's IPU Model simulates (``DeviceInfo.ipuVersion`` values).
_IPU_MODEL_VERSIONS = ("ipu1", "ipu2", "ipu21")
#: The ONNX node attribute ``popart.Builder.pipelineStage`` writes (``sPipelineStageAttribute``).
_PIPELINE_STAGE_ATTRIBUTE = "__pipeline_stage"
#: ``virtual_graph_mode`` values and the ``popart.VirtualGraphMode`` members they select.
_VIRTUAL_GRAPH_MODES = {"off": "Off", "manual": "Manual", "auto": "Auto"}
_ANCHORS = ("all", "final", "sum", "everyn:N")
_PARTIALS = ("float", "half")
#: The ONNX node attribute ``popart.Builder.virtualGraph`` writes (``sVirtualGraphAttribute``).
_VIRTUAL_GRAPH_ATTRIBUTE = "__ipu_number"
_FLOAT, _FLOAT16 = 1, 10  # onnx.TensorProto.FLOAT and FLOAT16

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

    ``device`` is ``ipu`` (any free IPUs), ``ipu:N`` (device id ``N`` as ``gc-info -l`` lists it,
    which may name a multi-IPU device) or ``ipu-model`` (the IPU Model simulator: its timings are
    not hardware timings). A torch model is exported to ONNX first (cached under ``cache_dir``).

    Options: ``batches_per_step`` (batches per ``run``; by default 1, or the number of pipeline
    stages when pipelining, the fewest PopART accepts), ``replicated_graphs`` (data-parallel
    replicas), ``ipus`` (IPUs per replica; ``ipus x replicated_graphs`` IPUs are acquired, a power
    of two), ``virtual_graph_mode`` (``None``/``"off"``, ``"manual"``: the ONNX model's
    ``virtualGraph`` annotations, ``"auto"``: PopART splits the model), ``pipelining`` (bool),
    ``anchors`` (``"all"``: every batch's outputs; ``"final"``, ``"sum"``, ``"everyn:N"``),
    ``partials_type`` (``None``, ``"float"`` or ``"half"``: matmul and convolution partials),
    ``enable_engine_caching`` and ``cache_path`` (the compiled executable cache; default
    ``<cache_dir>/popart-engines``), ``opset`` (for exports, 6 to 11),
    ``available_memory_proportion`` (``None``: PopART's default; a number in (0, 1]: set on every
    convolution's output with ``Builder.setAvailableMemoryProportion``, as Graphcore's ResNeXt-101
    example does with 0.3), and for ``ipu-model`` ``ipu_model_tiles`` (default 1472, a real IPU2's
    tiles; PopART's own default of 4 tiles holds only toy models) and ``ipu_model_version``
    (``"ipu2"``; ``"ipu1"`` or ``"ipu21"``).

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
    ) -> None:
        super().__init__(name, device or "ipu")
        self._kind, self._index, self._device_error = _parse_device(self._device)
        self._cache_dir = cache_dir or Path(".pytest-ipu-cache")
        self._popart = popart_module

    #: ``session.run`` releases the GIL, so concurrent instances run in threads of this process.
    concurrency = "threads"
    #: A session keeps its IPUs attached until closed: the run keeps one such model open at a time.
    exclusive_device = True

    def inventory(self) -> IpuInventory | str:
        """The IPUs present (gcipuinfo, else PopART's device list), or why there are none; for the
        IPU Model, a simulated inventory that any number of instances can share."""
        if self.simulator:
            return ipu_inventory.simulator_inventory(1)
        try:
            popart = self._require()
        except BackendUnavailable as exc:
            return str(exc)
        return ipu_inventory.discover(popart_module=popart)

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
        """Export or load the ONNX model, fix its batch, acquire IPUs, compile the session, run it once."""
        # popart first: a compile imports onnx, after which ``import popart`` fails.
        popart = self._require()
        label = _label(model)
        opts = _check_options(options, label)
        stages = _stages(opts)
        if precision not in ("fp32", "fp16"):
            raise CompileError(
                f"the popart backend runs fp32 or fp16, not {precision} ({label}); "
                "pass precision='fp16' (the IPU default) or 'fp32'"
            )
        if self._device_error:
            raise BackendUnavailable(self._device_error)
        bps, replicas, ipus = (int(str(opts[k])) for k in ("batches_per_step", "replicated_graphs", "ipus"))
        num_ipus = ipus * replicas
        if num_ipus & (num_ipus - 1):
            raise CompileError(
                f"popart options ipus={ipus} x replicated_graphs={replicas} = {num_ipus} IPUs for {label}; "
                "PopART acquires a power of two (1, 2, 4, 8, ...): choose ipus and replicated_graphs "
                "whose product is one"
            )
        arrays = [_as_array(v, None) for v in example_inputs]
        micro = _micro_batch(arrays, bps, replicas, label)
        phases: dict[str, float] = {}
        info: dict[str, Any] = {
            "popart": _version(popart),
            "device_type": self._kind,
            "simulator": self.simulator,
            "ipus": num_ipus,
            "micro_batch": micro,
            "batches_per_step": bps,
            # Where the value came from: PopART refuses fewer batches per step than pipeline stages.
            "batches_per_step_from": (
                "option"
                if options.get("batches_per_step") is not None
                else f"default: the {stages} pipeline stages"
                if stages > 1
                else "default"
            ),
            "replicated_graphs": replicas,
            "anchors": str(opts["anchors"]),
            "available_memory_proportion": opts["available_memory_proportion"],
        }
        if self.simulator:
            info.update(ipu_model_tiles=opts["ipu_model_tiles"], ipu_model_version=opts["ipu_model_version"])

        from_torch = hasattr(model, "state_dict") and hasattr(model, "forward")
        if from_torch:
            exported = onnx_export.export(
                model,
                example_inputs,
                self._cache_dir,
                # fp32 whatever the precision: PopART converts it to fp16 below, as the example did.
                onnx_export.ExportOptions(opset=int(str(opts["opset"])), precision="fp32"),
            )
            phases["export"] = exported.export_s
            info.update(export_cached=exported.cached, onnx_sha256=exported.sha256)
            if exported.opset > MAX_OPSET:
                raise CompileError(
                    f"torch exported {label} at ONNX opset {exported.opset} (converting it down to opset "
                    f"{opts['opset']} failed), and PopART 3.x imports ONNX opsets {MIN_OPSET} to {MAX_OPSET} "
                    "only; export the model yourself with torch.onnx.export(model, inputs, 'model.onnx', "
                    f"opset_version={MAX_OPSET}), with dynamo=False on torch 2.5 and newer, and pass "
                    "the ONNX file"
                )
            source: bytes | str = str(exported.path)
        elif isinstance(model, (bytes, str, Path)):
            source = model if isinstance(model, bytes) else str(model)
        else:
            raise CompileError(
                f"the popart backend needs an ONNX model (bytes or path) or a torch.nn.Module, "
                f"got {type(model).__name__}"
            )

        start = time.perf_counter_ns()
        prepared = _prepare_onnx(popart, source, label, arrays, micro, precision, opts, from_torch)
        info.update(
            opset=prepared.opset,
            fp16_conversion=prepared.fp16_conversion,
            available_memory_convs=prepared.memory_convs,
        )
        engine_cache = _engine_cache(opts, self._cache_dir)
        info["engine_cache"] = engine_cache
        device = self._acquire(popart, num_ipus, label, opts)
        runner: _Runner | None = None
        try:
            info.update(
                device_id=_plain(getattr(device, "id", None)),
                # ipuVersion is the architecture; version is the driver version of an attached IPU
                # (the IPU Model's version repeats its architecture, so it says nothing more).
                ipu_version=_plain(getattr(device, "ipuVersion", None)),
                driver_version=None if self.simulator else _plain(getattr(device, "version", None)),
            )
            session = popart.InferenceSession(
                fnModel=prepared.proto,
                dataFlow=_dataflow(popart, prepared.output_ids, bps, str(opts["anchors"])),
                deviceInfo=device,
                userOptions=_session_options(popart, opts, replicas, engine_cache),
            )
            session.prepareDevice()
            phases["session"] = (time.perf_counter_ns() - start) * 1e-9

            start = time.perf_counter_ns()
            session.weightsFromHost()
            phases["weights"] = (time.perf_counter_ns() - start) * 1e-9

            start = time.perf_counter_ns()
            anchors = session.initAnchorArrays()
            layout = _layout(bps, replicas)
            runner = _Runner(
                popart, session, device, prepared, anchors, layout, str(opts["anchors"]), bps, replicas
            )
            runner.run(*runner.prepare_inputs(example_inputs))
            phases["first_run"] = (time.perf_counter_ns() - start) * 1e-9
        except BaseException as exc:
            # Whatever failed, the IPUs go back: another test (or process) may need them.
            _detach_quietly(device)
            if isinstance(exc, (CompileError, BackendUnavailable)) or not isinstance(exc, Exception):
                raise
            raise CompileError(_session_error(exc, label)) from exc

        return CompiledModel(
            target=f"{self._name}:{self._device}",
            backend=self._name,
            device=self._device,
            device_name=_device_name(device, self.simulator, num_ipus),
            precision=precision,
            io="host",
            run=runner.run,
            prepare_inputs=runner.prepare_inputs,
            close=runner.close,
            options=dict(opts),
            phases_s=phases,
            info=info,
            simulator=self.simulator,
        )

    def _acquire(self, popart: ModuleType, num_ipus: int, label: str, opts: Mapping[str, object]) -> Any:
        """An attached device of ``num_ipus`` IPUs, or ``BackendUnavailable`` naming the count."""
        what = f"{num_ipus} IPU(s) for {label}"
        try:
            manager = popart.DeviceManager()
            if self.simulator:
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
            if self._index is not None:
                ids = _device_ids(popart, None, num_ipus)
                if self._index not in ids:
                    # tryAcquireDeviceById dereferences a null device for an unknown id (3.4
                    # devicemanager.cpp), so the id is checked against the list first.
                    raise CompileError(
                        f"device ipu:{self._index} is not a {num_ipus}-IPU device (ipus x "
                        f"replicated_graphs); the {num_ipus}-IPU device ids here are {sorted(ids)}: "
                        "use one of them or device 'ipu'"
                    )
                by_id = getattr(manager, "tryAcquireDeviceById", None)
                device = by_id(self._index) if by_id else manager.acquireDeviceById(self._index)
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
                f"Failed to acquire {what}{'' if self._index is None else f' (device id {self._index})'}: "
                "none free (another process holds them, or there are fewer); gc-monitor shows who uses them"
            )
        return device


@dataclass(frozen=True)
class _Prepared:
    """The ONNX model as the session gets it, with what running it needs to know."""

    proto: bytes
    input_ids: tuple[str, ...]
    input_dtypes: tuple[Any, ...]
    #: Each input's shape for one call, as the caller passes it (leading dimension: all items).
    call_shapes: tuple[tuple[int, ...], ...]
    output_ids: tuple[str, ...]
    opset: int
    fp16_conversion: str | None
    #: How many convolutions got ``available_memory_proportion``; ``None`` when it was not set.
    memory_convs: int | None = None


@dataclass(frozen=True)
class _Layout:
    """How one call's items are laid out for PopART: ``[batches_per_step, replicas, micro_batch, ...]``."""

    prefix: tuple[int, ...]  # the prefix dimensions other than 1

    def to_popart(self, array: np.ndarray) -> np.ndarray:
        """Split the leading dimension into the prefix dimensions and the micro-batch."""
        if not self.prefix:
            return array
        return array.reshape(*self.prefix, -1, *array.shape[1:])


def _layout(bps: int, replicas: int) -> _Layout:
    return _Layout(tuple(d for d in (bps, replicas) if d != 1))


class _Runner:
    """One synchronous ``session.run`` on prepared inputs; outputs are views of the anchor arrays."""

    def __init__(
        self,
        popart: ModuleType,
        session: Any,
        device: Any,
        prepared: _Prepared,
        anchors: Mapping[str, np.ndarray],
        layout: _Layout,
        anchor_mode: str,
        bps: int,
        replicas: int,
    ) -> None:
        self._popart, self._session, self._device = popart, session, device
        self._prepared, self._anchors, self._layout = prepared, dict(anchors), layout
        self._stepio: Any = None
        self._stepio_inputs: tuple[object, ...] = ()
        self._closed = False
        prefix = _anchor_prefix(anchor_mode, bps, replicas)
        self._outputs = tuple(_merge_prefix(self._anchors[oid], prefix) for oid in prepared.output_ids)

    def prepare_inputs(self, values: Sequence[object]) -> tuple[object, ...]:
        """Contiguous arrays of the model's dtypes and compiled shapes, in PopART's layout."""
        p = self._prepared
        if len(values) != len(p.input_ids):
            raise ValueError(
                f"the ONNX model takes {len(p.input_ids)} input(s) ({', '.join(p.input_ids)}), "
                f"got {len(values)}"
            )
        out = []
        for name, value, dtype, shape in zip_strict(p.input_ids, values, p.input_dtypes, p.call_shapes):
            array = _as_array(value, dtype)
            if array.shape != shape:
                # PopART checks buffer sizes on the first run only; a wrong size later reads wrong memory.
                raise ValueError(
                    f"input {name!r} has shape {tuple(array.shape)} but the PopART session was compiled "
                    f"for {shape}; compile again for other shapes (a session's batch is fixed)"
                )
            out.append(np.ascontiguousarray(self._layout.to_popart(array)))
        return tuple(out)

    def run(self, *arrays: object) -> tuple[np.ndarray, ...]:
        """Run one step; the returned arrays are overwritten in place by the next call."""
        if self._closed:
            raise RuntimeError("this compiled model was closed (the run that compiled it has ended)")
        if len(arrays) != len(self._stepio_inputs) or any(
            a is not b for a, b in zip_strict(arrays, self._stepio_inputs)
        ):
            # A PyStepIO holds its arrays and wraps its read offsets after each full step, so one
            # built for these very arrays serves every later call with them.
            inputs = dict(zip_strict(self._prepared.input_ids, arrays))
            self._stepio = self._popart.PyStepIO(inputs, self._anchors)
            self._stepio_inputs = tuple(arrays)
        self._session.run(self._stepio)
        return self._outputs

    def close(self) -> None:
        """Detach the IPUs and drop the session; idempotent. Later ``run`` calls raise ``RuntimeError``."""
        if self._closed:
            return
        self._closed = True
        device, self._device = self._device, None
        self._session = self._stepio = None
        self._stepio_inputs = ()
        try:
            device.detach()
        except Exception as exc:
            raise RuntimeError(f"PopART could not detach the device: {exc}") from exc


def _anchor_prefix(anchor_mode: str, bps: int, replicas: int) -> int:
    """How many prefix dimensions an anchor array has: ``[bps, replicas]`` for ALL, ``[bps // N, replicas]``
    for EVERYN, ``[replicas]`` for FINAL and SUM, dimensions of 1 dropped (PopART's ``initAnchorArrays``)."""
    if anchor_mode == "all":
        dims = [bps, replicas]
    elif anchor_mode in ("final", "sum"):
        dims = [replicas]
    else:
        dims = [bps // int(anchor_mode.partition(":")[2]), replicas]
    return sum(d != 1 for d in dims)


def _merge_prefix(array: np.ndarray, prefix: int) -> np.ndarray:
    """A view with the first ``prefix`` dimensions merged into the model's own leading dimension."""
    if prefix == 0:
        return array
    own = array.shape[prefix:]
    lead = int(np.prod(array.shape[:prefix]))
    return array.reshape(lead * own[0], *own[1:]) if own else array.reshape(lead)


def _prepare_onnx(
    popart: ModuleType,
    source: bytes | str,
    label: str,
    arrays: Sequence[np.ndarray],
    micro: int,
    precision: str,
    opts: Mapping[str, object],
    from_torch: bool,
) -> _Prepared:
    """Load the ONNX model, check its opset, fix every input's shape, convert it to fp16 if asked."""
    import onnx  # after popart (see the module docstring)

    try:
        proto = onnx.load_from_string(source) if isinstance(source, bytes) else onnx.load(source)
    except Exception as exc:
        raise CompileError(f"could not read the ONNX model {label}: {type(exc).__name__}: {exc}") from exc
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise CompileError(
            f"the ONNX model {label} uses ONNX opset {opset}, and PopART 3.x imports opsets {MIN_OPSET} to "
            f"{MAX_OPSET} only; export it at opset {MAX_OPSET} (torch.onnx.export(..., "
            f"opset_version={MAX_OPSET}), with dynamo=False on torch 2.5 and newer)"
        )
    graph = proto.graph
    initializers = {t.name for t in graph.initializer}
    inputs = [vi for vi in graph.input if vi.name not in initializers]
    if len(inputs) != len(arrays):
        names = ", ".join(vi.name for vi in inputs)
        raise CompileError(
            f"the ONNX model {label} takes {len(inputs)} input(s) ({names}), "
            f"got {len(arrays)} example input(s)"
        )
    bps, replicas = int(str(opts["batches_per_step"])), int(str(opts["replicated_graphs"]))
    symbols: dict[str, int] = {}
    for vi, array in zip_strict(inputs, arrays):
        _fix_shape(vi, array, micro, bps, replicas, label, symbols)
    # Outputs and intermediate values may carry the same batch symbols: make them concrete too.
    for vi in [*graph.output, *graph.value_info]:
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in symbols:
                dim.dim_value = symbols[dim.dim_param]

    if opts["virtual_graph_mode"] == "manual" and not any(
        a.name == _VIRTUAL_GRAPH_ATTRIBUTE for node in graph.node for a in node.attribute
    ):
        raise CompileError(
            f"popart option virtual_graph_mode='manual' needs ops annotated with "
            f"popart.Builder.virtualGraph, and the ONNX model {label} has none; use 'auto'"
        )
    if opts["pipelining"] and opts["virtual_graph_mode"] == "manual":
        stages = _annotated_stages(graph)
        if bps < stages:
            raise CompileError(
                f"popart option batches_per_step={bps} for {label} is fewer than the model's {stages} "
                f"annotated pipeline stages; PopART needs at least one batch per stage to fill the "
                f"pipeline: pass batches_per_step={stages} or more"
            )

    memory_convs: int | None = None
    proportion = opts["available_memory_proportion"]
    if proportion is not None:
        # As Graphcore's ResNeXt-101 example does: every Conv output gets the proportion, through the
        # Builder (which writes the ``__available_memory`` node attribute), before any fp16 conversion.
        builder = popart.Builder(proto.SerializeToString())
        conv_outputs = [node.output[0] for node in graph.node if node.op_type == "Conv"]
        for tid in conv_outputs:
            builder.setAvailableMemoryProportion(tid, float(str(proportion)))
        memory_convs = len(conv_outputs)
        proto = onnx.load_from_string(builder.getModelProto())
        graph = proto.graph
        inputs = [vi for vi in graph.input if vi.name not in initializers]

    floats = {vi.type.tensor_type.elem_type for vi in inputs} | {t.data_type for t in graph.initializer}
    model_precision = "fp32" if _FLOAT in floats else "fp16" if _FLOAT16 in floats else None
    data = proto.SerializeToString()
    conversion: str | None = None
    if not from_torch and model_precision == "fp16" and precision == "fp32":
        raise CompileError(
            f"the ONNX model {label} is fp16 but precision fp32 was asked for; pass precision='fp16'"
        )
    if model_precision == "fp32" and precision == "fp16":
        transformer = popart.GraphTransformer(data)
        transformer.convertFloatsToHalfs()
        data = transformer.getModelProto()
        conversion = "GraphTransformer.convertFloatsToHalfs"
        proto = onnx.load_from_string(data)
        inputs = [vi for vi in proto.graph.input if vi.name not in initializers]

    # onnx 1.13 added this helper; 1.12 (the floor on Python 3.8, the newest that takes PopART 3.4's
    # protobuf 3.17.3) has only the table it reads.
    to_numpy = getattr(onnx.helper, "tensor_dtype_to_np_dtype", None)
    if to_numpy is None:
        to_numpy = importlib.import_module("onnx.mapping").TENSOR_TYPE_TO_NP_TYPE.get
    total = micro * bps * replicas
    return _Prepared(
        proto=data,
        input_ids=tuple(vi.name for vi in inputs),
        input_dtypes=tuple(np.dtype(to_numpy(vi.type.tensor_type.elem_type)) for vi in inputs),
        call_shapes=tuple((total, *a.shape[1:]) for a in arrays),
        output_ids=tuple(o.name for o in proto.graph.output),
        opset=opset,
        fp16_conversion=conversion,
        memory_convs=memory_convs,
    )


def _fix_shape(
    vi: Any, array: np.ndarray, micro: int, bps: int, replicas: int, label: str, symbols: dict[str, int]
) -> None:
    """Set the input's unknown dimensions from the example (batch: the micro-batch); check known ones."""
    dims = vi.type.tensor_type.shape.dim
    wanted = (micro, *array.shape[1:])
    declared = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims)
    if len(dims) != len(wanted):
        raise CompileError(
            f"input {vi.name!r} of the ONNX model {label} has {len(dims)} dimension(s) but the example input "
            f"has shape {tuple(array.shape)}; pass inputs of the model's rank"
        )
    for k, (dim, want) in enumerate(zip_strict(dims, wanted)):
        if dim.HasField("dim_value") and dim.dim_value > 0:
            if dim.dim_value == want:
                continue
            if k == 0:
                items = dim.dim_value * bps * replicas
                raise CompileError(
                    f"the ONNX model {label} fixes input {vi.name!r} to batch {dim.dim_value}, so a call "
                    f"takes {dim.dim_value} x batches_per_step={bps} x replicated_graphs={replicas} = "
                    f"{items} items, but the inputs have {array.shape[0]}; pass inputs with leading "
                    f"dimension {items}"
                )
            raise CompileError(
                f"input {vi.name!r} of the ONNX model {label} has shape {declared} but the example input has "
                f"{tuple(array.shape)} (micro-batch {micro}); pass inputs of the model's shape"
            )
        if dim.HasField("dim_param"):
            symbols[dim.dim_param] = want
        # Setting dim_value clears dim_param (they are one protobuf oneof).
        dim.dim_value = want


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
    popart: ModuleType, opts: Mapping[str, object], replicas: int, engine_cache: str | None
) -> Any:
    so = popart.SessionOptions()
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
    opts = merge_options("popart", OPTIONS, options, label)
    for key in ("batches_per_step", "replicated_graphs", "ipus", "ipu_model_tiles"):
        value = opts[key]
        if key == "batches_per_step" and value is None:
            continue  # resolved below, once the pipeline stages are known
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CompileError(f"popart option {key}={value!r} for {label}; use a positive integer")
    opset = opts["opset"]
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise CompileError(
            f"popart option opset={opset!r} for {label}; PopART 3.x imports ONNX opsets {MIN_OPSET} to "
            f"{MAX_OPSET}: use an integer in that range"
        )
    for key in ("pipelining", "enable_engine_caching"):
        if not isinstance(opts[key], bool):
            raise CompileError(f"popart option {key}={opts[key]!r} for {label}; use True or False")
    mode = opts["virtual_graph_mode"]
    if mode is not None:
        normal = str(mode).lower() if isinstance(mode, str) else None
        if normal not in _VIRTUAL_GRAPH_MODES:
            raise CompileError(
                f"popart option virtual_graph_mode={mode!r} for {label}; use None or one of "
                f"{', '.join(map(repr, _VIRTUAL_GRAPH_MODES))}"
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
    _check_memory_proportion(opts["available_memory_proportion"], label)
    version = opts["ipu_model_version"]
    if version not in _IPU_MODEL_VERSIONS:
        raise CompileError(
            f"popart option ipu_model_version={version!r} for {label}; use one of "
            f"{', '.join(map(repr, _IPU_MODEL_VERSIONS))}"
        )
    anchors = opts["anchors"]
    if not isinstance(anchors, str) or not _valid_anchors(anchors.lower(), bps):
        raise CompileError(
            f"popart option anchors={anchors!r} for {label}; use one of {', '.join(map(repr, _ANCHORS))} "
            "(everyn's N must divide batches_per_step)"
        )
    opts["anchors"] = anchors.lower()
    if opts["partials_type"] is not None and opts["partials_type"] not in _PARTIALS:
        raise CompileError(
            f"popart option partials_type={opts['partials_type']!r} for {label}; use None, 'float' or 'half'"
        )
    cache_path = opts["cache_path"]
    if cache_path is not None:
        if not isinstance(cache_path, (str, Path)):
            raise CompileError(f"popart option cache_path={cache_path!r} for {label}; use a path or None")
        if not opts["enable_engine_caching"]:
            raise CompileError(
                f"popart option cache_path={str(cache_path)!r} for {label} has no effect without "
                "enable_engine_caching=True; pass both"
            )
        opts["cache_path"] = str(cache_path)
    return opts


def _stages(opts: Mapping[str, object]) -> int:
    """The pipeline stages PopART makes: one per IPU of a replica when pipelining (``auto`` splits
    the model over every IPU; ``manual`` models are counted again from their annotations), else 1."""
    return int(str(opts["ipus"])) if opts["pipelining"] else 1


def _annotated_stages(graph: Any) -> int:
    """Distinct ``__pipeline_stage`` values, or else distinct virtual graphs: PopART uses an op's
    virtual graph as its stage when no stage is annotated."""
    for attribute in (_PIPELINE_STAGE_ATTRIBUTE, _VIRTUAL_GRAPH_ATTRIBUTE):
        values = {a.i for node in graph.node for a in node.attribute if a.name == attribute}
        if values:
            return len(values)
    return 1


def _check_memory_proportion(value: object, label: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise CompileError(
            f"popart option available_memory_proportion={value!r} for {label}; use a number in (0, 1] "
            "(Graphcore's ResNeXt-101 example uses 0.3) or None for PopART's default"
        )


def _valid_anchors(anchors: str, bps: int) -> bool:
    if anchors in ("all", "final", "sum"):
        return True
    kind, _, period = anchors.partition(":")
    return kind == "everyn" and period.isdigit() and int(period) > 0 and bps % int(period) == 0


def _label(model: object) -> str:
    if isinstance(model, (str, Path)):
        return repr(str(model))
    return type(model).__name__


def _as_array(value: object, dtype: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # torch tensors, possibly on a device or in bf16 (numpy has none)
        tensor = value.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":
            tensor = tensor.float()
        value = tensor.numpy()
    array = np.asarray(value)
    if dtype is not None and array.dtype != dtype:
        array = array.astype(dtype)
    return array


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
