"""The ONNX Runtime backend: ONNX models (or torch models, exported through ``onnx_export``) on the CPU,
CUDA or TensorRT execution providers.

onnxruntime is imported lazily (or injected, for tests), so importing this module costs nothing.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from pytest_ipu.backends import onnx_export
from pytest_ipu.backends.base import Availability
from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.base import NamedBackend
from pytest_ipu.backends.compile_args import CheckedOptions
from pytest_ipu.backends.compile_args import is_torch_module
from pytest_ipu.backends.compile_args import model_name
from pytest_ipu.backends.compile_args import onnx_source
from pytest_ipu.backends.host import cpu_name
from pytest_ipu.backports import zip_strict
from pytest_ipu.errors import CompileError

#: Options ``ipu_compile`` accepts for this backend, with their defaults.
OPTIONS: Mapping[str, object] = {
    "graph_optimization_level": "all",
    "intra_op_threads": 0,
    "inter_op_threads": 0,
    "io": "host",
    "opset": onnx_export.DEFAULT_OPSET,
}
_LEVELS = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
_PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}
_NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}
_PRECISION_OF_TYPE = {"tensor(float)": "fp32", "tensor(float16)": "fp16"}


class OrtBackend(NamedBackend):
    """Runs ONNX models in an ``onnxruntime.InferenceSession``.

    ``provider`` is ``cpu``, ``cuda`` or ``tensorrt`` (the last two on ``cuda[:N]`` devices). A torch
    model is exported to ONNX first (cached under ``cache_dir``); ``compile_s`` then covers the
    export (or the cache look-up), the session creation and the first run, each also reported
    separately in ``compile_phases_s``.

    Options: ``graph_optimization_level`` (disabled, basic, extended, all), ``intra_op_threads`` and
    ``inter_op_threads`` (0: ONNX Runtime's default), ``io`` (``"host"``: numpy inputs and outputs in
    host memory each call; ``"device"``: inputs bound once in device memory with IO binding, outputs
    left there) and ``opset`` (for exports).
    """

    def __init__(
        self,
        name: str = "onnxruntime",
        device: str | None = None,
        provider: str | None = None,
        cache_dir: Path | None = None,
        ort_module: ModuleType | None = None,
    ) -> None:
        super().__init__(name, device or "cpu")
        self._provider = provider or ("cpu" if self._device == "cpu" else "cuda")
        if self._provider not in _PROVIDERS:
            raise ValueError(f"onnxruntime provider must be one of {', '.join(_PROVIDERS)}, got {provider!r}")
        self._cache_dir = cache_dir or Path(".pytest-ipu-cache")
        self._ort = ort_module

    @property
    def provider(self) -> str:
        """The execution provider's full name, e.g. ``CUDAExecutionProvider``."""
        return _PROVIDERS[self._provider]

    def _import(self) -> ModuleType:
        if self._ort is None:
            self._ort = importlib.import_module("onnxruntime")
        return self._ort

    def availability(self) -> Availability:
        """onnxruntime importable, the device type fits the provider, and the provider is in this build."""
        try:
            ort = self._import()
        except ImportError as exc:
            return Availability.no(
                f"onnxruntime is not installed ({exc}); install it with: pip install onnxruntime"
            )
        kind = self._device.partition(":")[0]
        if (self._provider == "cpu") != (kind == "cpu") or kind not in ("cpu", "cuda"):
            return Availability.no(
                f"the {self.provider} runs on {'cpu' if self._provider == 'cpu' else 'cuda[:N]'}, "
                f"not {self._device!r}"
            )
        present = list(ort.get_available_providers())
        if self.provider not in present:
            hint = "; install onnxruntime-gpu for CUDA and TensorRT" if self._provider != "cpu" else ""
            return Availability.no(
                f"onnxruntime {ort.__version__} has no {self.provider} (it has {', '.join(present)}){hint}"
            )
        return Availability.yes()

    def default_precision(self) -> str:
        """fp32 on CPUs, fp16 on GPUs."""
        return "fp32" if self._device == "cpu" else "fp16"

    def shape_specialized(self, options: Mapping[str, object]) -> bool:
        """Exports have a dynamic batch dimension: one session serves every batch size."""
        return False

    def describe(self) -> dict[str, Any]:
        """onnxruntime version, providers in this build, the provider used, and the device."""
        ort = self._import()
        return {
            "backend": self._name,
            "onnxruntime": str(ort.__version__),
            "providers_available": list(ort.get_available_providers()),
            "provider": self.provider,
            "device": self._device,
            "device_name": cpu_name() if self._device == "cpu" else f"CUDA device {self._device_index()}",
        }

    def _device_index(self) -> int:
        _, _, index = self._device.partition(":")
        return int(index) if index else 0

    def compile(
        self,
        model: object,
        example_inputs: Sequence[object],
        precision: str,
        options: Mapping[str, object],
    ) -> CompiledModel:
        """Export (torch models) or load (ONNX bytes or path), create the session, run it once."""
        ort = self._import()
        opts = _check_options(options, model)
        phases: dict[str, float] = {}
        info: dict[str, Any] = {"provider": self.provider}
        if is_torch_module(model) and precision not in ("fp32", "fp16"):
            raise CompileError(
                f"the onnxruntime backend runs fp32 or fp16 exports, not {precision} ({model_name(model)})"
            )
        source = self._source(model, example_inputs, precision, opts, phases, info)
        start = time.perf_counter_ns()
        session = self._session(ort, source, opts, model)
        phases["session"] = (time.perf_counter_ns() - start) * 1e-9
        inputs = session.get_inputs()
        _check_precision(inputs, precision, model)
        names = [i.name for i in inputs]
        dtypes = [_NUMPY_TYPES.get(i.type) for i in inputs]
        device_io = opts["io"] == "device"
        runner = _Runner(
            ort, session, names, device_io, "cpu" if self._device == "cpu" else "cuda", self._device_index()
        )
        prepare_inputs = _preparer(runner, names, dtypes, device_io)
        start = time.perf_counter_ns()
        try:
            runner.run(*prepare_inputs(example_inputs))
        except Exception as exc:
            raise CompileError(f"onnxruntime failed on the first run of {model_name(model)}: {exc}") from exc
        phases["first_run"] = (time.perf_counter_ns() - start) * 1e-9

        return CompiledModel(
            target=f"{self._name}:{self._device}",
            backend=self._name,
            device=self._device,
            device_name=cpu_name() if self._device == "cpu" else f"CUDA device {self._device_index()}",
            precision=precision,
            io=str(opts["io"]),
            run=runner.run,
            prepare_inputs=prepare_inputs,
            close=runner.close,
            options=dict(opts),
            phases_s=phases,
            info=info,
        )

    def _source(
        self,
        model: object,
        example_inputs: Sequence[object],
        precision: str,
        opts: Mapping[str, object],
        phases: dict[str, float],
        info: dict[str, Any],
    ) -> str | bytes:
        """The ONNX model to run: ``model`` exported (a torch model) or loaded (ONNX bytes or a
        path), its phases and facts recorded in ``phases`` and ``info``."""
        source = onnx_source(
            "onnxruntime",
            model,
            example_inputs,
            self._cache_dir,
            onnx_export.ExportOptions(opset=int(str(opts["opset"])), precision=precision),
        )
        source.record(phases, info)
        if source.exported is not None:
            info["opset"] = source.exported.opset
        return source.model

    def _session(
        self, ort: ModuleType, source: str | bytes, opts: Mapping[str, object], model: object
    ) -> Any:
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(
            ort.GraphOptimizationLevel, _LEVELS[str(opts["graph_optimization_level"])]
        )
        so.intra_op_num_threads = int(str(opts["intra_op_threads"]))
        so.inter_op_num_threads = int(str(opts["inter_op_threads"]))
        provider: Any = self.provider
        if self._provider != "cpu":
            provider = (self.provider, {"device_id": self._device_index()})
        try:
            return ort.InferenceSession(source, sess_options=so, providers=[provider])
        except Exception as exc:
            raise CompileError(
                f"onnxruntime could not create a session for {model_name(model)}: {exc}"
            ) from exc


class _Runner:
    """One synchronous call of a session: plain ``run`` on host arrays, or IO binding on device values."""

    def __init__(
        self, ort: ModuleType, session: Any, names: list[str], device_io: bool, kind: str, index: int
    ):
        self._ort, self._session, self._names = ort, session, names
        self._kind, self._index = kind, index
        self._binding: Any = session.io_binding() if device_io else None
        self.run: Callable[..., object] = self._run_bound if device_io else self._run_host

    def bind(self, arrays: Sequence[np.ndarray]) -> tuple[object, ...]:
        """Copy inputs to the device once and bind them and the outputs there (outside any timing)."""
        values = tuple(self._ort.OrtValue.ortvalue_from_numpy(a, self._kind, self._index) for a in arrays)
        for name, value in zip_strict(self._names, values):
            self._binding.bind_ortvalue_input(name, value)
        for out in self._session.get_outputs():
            self._binding.bind_output(out.name, self._kind, self._index)
        return values

    def _run_host(self, *arrays: np.ndarray) -> object:
        return self._session.run(None, dict(zip_strict(self._names, arrays)))

    def _run_bound(self, *_: object) -> object:
        binding = self._binding
        self._session.run_with_iobinding(binding)
        # Outputs stay on the device; waiting for them makes the call synchronous.
        binding.synchronize_outputs()
        return binding

    def close(self) -> None:
        """Drop the session and its bound device memory; later calls raise ``RuntimeError``."""
        self._binding = None
        self._session = _ClosedSession()


class _ClosedSession:
    """Stands in for a released session, so a stale ``run`` fails with a message, not a None error."""

    def _closed(self, *_: object, **__: object) -> object:
        raise RuntimeError("this compiled model was closed (the run that compiled it has ended)")

    run = run_with_iobinding = _closed


def _as_array(value: object, dtype: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # torch tensors, possibly on a device
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if dtype is not None and np.issubdtype(array.dtype, np.floating):
        array = array.astype(dtype, copy=False)
    return np.ascontiguousarray(array)


def _check_options(options: Mapping[str, object], model: object) -> dict[str, object]:
    opts = CheckedOptions(
        "onnxruntime", OPTIONS, options, model_name(model), what="onnxruntime option", name_model=False
    )
    opts.one_of("graph_optimization_level", _LEVELS, f"use one of {', '.join(_LEVELS)}")
    opts.one_of("io", ("host", "device"), "use 'host' or 'device'")
    for key in ("intra_op_threads", "inter_op_threads", "opset"):
        opts.non_negative_int(key)
    return opts.values


def _check_precision(inputs: Sequence[Any], precision: str, model: object) -> None:
    """``CompileError`` where the ONNX model's inputs are of another precision than the one asked
    for (a model's inputs of no known precision are taken as asked)."""
    model_precision = next(
        (_PRECISION_OF_TYPE[i.type] for i in inputs if i.type in _PRECISION_OF_TYPE), precision
    )
    if model_precision != precision:
        raise CompileError(
            f"the ONNX model {model_name(model)} takes {model_precision} inputs but precision "
            f"{precision} was asked for; pass precision={model_precision!r}"
        )


def _preparer(
    runner: _Runner, names: Sequence[str], dtypes: Sequence[Any], device_io: bool
) -> Callable[[Sequence[object]], tuple[object, ...]]:
    """The model's ``prepare_inputs``: one array per input (``names``), of its type, bound to the
    device for ``io="device"``."""

    def prepare_inputs(values: Sequence[object]) -> tuple[object, ...]:
        if len(values) != len(names):
            raise ValueError(
                f"the ONNX model takes {len(names)} input(s) ({', '.join(names)}), got {len(values)}"
            )
        arrays = tuple(_as_array(v, t) for v, t in zip_strict(values, dtypes))
        return runner.bind(arrays) if device_io else arrays

    return prepare_inputs
