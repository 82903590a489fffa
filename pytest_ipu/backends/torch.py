"""The torch backend: eager or ``torch.compile`` on CPU and CUDA, in fp32, fp16 or bf16.

torch is imported lazily (or injected, for tests), so importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import re
import weakref
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from pytest_ipu.backends.base import Availability
from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.base import NamedBackend
from pytest_ipu.backends.base import TrainingRequest
from pytest_ipu.backends.base import TrainingStep
from pytest_ipu.backends.compile_args import CheckedOptions
from pytest_ipu.backends.compile_args import model_name
from pytest_ipu.backends.host import cpu_name
from pytest_ipu.backends.runtime_warnings import runtime_internals_quiet
from pytest_ipu.errors import CompileError

#: What the JSON says where torch's own default thread count is kept (as the settings do).
AUTO = "auto"
_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
#: Options ``ipu_compile`` accepts for this backend, with their defaults.
OPTIONS: Mapping[str, object] = {"channels_last": False, "io": "host", "compile_mode": "default"}
_IO = ("host", "device")


class TorchBackend(NamedBackend):
    """Runs ``torch.nn.Module`` models on ``cpu`` or ``cuda[:N]``, eagerly or through ``torch.compile``.

    Options: ``channels_last`` (bool), ``io`` (``"host"``: each timed call copies inputs to the device
    and outputs back to host memory; ``"device"``: inputs stay on the device, outputs are left there
    and the call ends with a device synchronisation), ``compile_mode`` (``torch.compile``'s ``mode``).

    ``intra_op_threads`` and ``inter_op_threads`` (``--ipu-torch-threads`` and
    ``--ipu-torch-interop-threads``; ``None``: torch's default) are process-wide torch settings,
    not per model: they are applied on every ``compile`` (so the first compile sets them for the
    whole process) and the counts in effect are recorded in each compiled model's
    ``info["threads"]``.
    """

    def __init__(
        self,
        name: str = "torch",
        device: str | None = None,
        mode: str = "eager",
        torch_module: ModuleType | None = None,
        intra_op_threads: int | None = None,
        inter_op_threads: int | None = None,
    ) -> None:
        if mode not in ("eager", "compile"):
            raise ValueError(f"torch backend mode must be 'eager' or 'compile', got {mode!r}")
        for label, value in (("intra_op_threads", intra_op_threads), ("inter_op_threads", inter_op_threads)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(
                    f"torch backend {label} must be None (torch's default) or >= 1, got {value!r}"
                )
        super().__init__(name, device or "cpu")
        self._mode = mode
        self._torch = torch_module
        self._intra_op_threads = intra_op_threads
        self._inter_op_threads = inter_op_threads

    def _import(self) -> ModuleType:
        if self._torch is None:
            self._torch = importlib.import_module("torch")
        return self._torch

    def availability(self) -> Availability:
        """torch importable, device type known and present, ``torch.compile`` present if asked for."""
        try:
            torch = self._import()
        except ImportError as exc:
            return Availability.no(
                f"torch is not installed ({exc}); install it with: pip install torch "
                "(for the CPU build, see the quickstart's Install)"
            )
        try:
            dev = torch.device(self._device)
        except (RuntimeError, ValueError) as exc:
            return Availability.no(f"torch does not know device {self._device!r} ({exc})")
        if dev.type == "cuda":
            if not torch.cuda.is_available():
                return Availability.no(
                    f"no CUDA device: torch.cuda.is_available() is False "
                    f"(torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none'})"
                )
            count = torch.cuda.device_count()
            if dev.index is not None and dev.index >= count:
                return Availability.no(f"no device {self._device!r}: this machine has {count} CUDA device(s)")
        elif dev.type != "cpu":
            return Availability.no(f"the torch backend runs on 'cpu' or 'cuda[:N]', not {self._device!r}")
        if self._mode == "compile":
            if not hasattr(torch, "compile"):
                return Availability.no(
                    f"torch {torch.__version__} has no torch.compile; install torch >= 2.0"
                )
            unsupported = _compile_unsupported(torch)
            if unsupported is not None:
                return Availability.no(
                    f"torch {torch.__version__} cannot torch.compile here: {unsupported} "
                    "(torch >= 2.1 compiles on Python 3.11)"
                )
        return Availability.yes()

    def default_precision(self) -> str:
        """fp32 on CPUs (where fp16 is emulated and slow), fp16 on GPUs."""
        return "fp32" if self._device == "cpu" else "fp16"

    def shape_specialized(self, options: Mapping[str, object]) -> bool:
        """Eager models run any shape; compiled ones are compiled for the example shapes."""
        return self._mode == "compile"

    def describe(self) -> dict[str, Any]:
        """torch version, device name, thread counts, CUDA/cuDNN versions and capability."""
        torch = self._import()
        info: dict[str, Any] = {
            "backend": self._name,
            "mode": self._mode,
            "torch": str(torch.__version__),
            "device": self._device,
            "device_name": self._device_name(torch),
            # In effect when the machine info is written: process-wide, so after the first compile
            # they are the requested ones (which are listed too; "auto" is torch's default).
            "threads": int(torch.get_num_threads()),
            "interop_threads": int(torch.get_num_interop_threads()),
            "threads_requested": self._requested_threads(),
        }
        if self._device.startswith("cuda"):
            dev = torch.device(self._device)
            props = torch.cuda.get_device_properties(dev)
            info["cuda"] = torch.version.cuda
            info["cudnn"] = torch.backends.cudnn.version()
            info["capability"] = f"{props.major}.{props.minor}"
            info["memory_bytes"] = int(props.total_memory)
        else:
            capability = _cpu_capability(torch)
            if capability is not None:  # absent where this torch does not say
                info["cpu_capability"] = capability
        return info

    def _requested_threads(self) -> dict[str, int | str]:
        return {
            "intra_op": AUTO if self._intra_op_threads is None else self._intra_op_threads,
            "inter_op": AUTO if self._inter_op_threads is None else self._inter_op_threads,
        }

    def apply_threads(self) -> dict[str, Any]:
        """Apply the requested thread counts to torch (process-wide) and return those in effect.

        Plain JSON: ``{"intra_op": N, "inter_op": M, "requested": {"intra_op": ..., "inter_op": ...}}``
        (``"auto"`` where nothing was requested). Raises ``CompileError`` when the inter-op count
        differs from the requested one and torch no longer allows changing it.
        """
        torch = self._import()
        intra, inter = self._intra_op_threads, self._inter_op_threads
        if intra is not None and int(torch.get_num_threads()) != intra:
            # Unlike the inter-op pool, the intra-op count can be changed at any time.
            torch.set_num_threads(intra)
        if inter is not None:
            current = int(torch.get_num_interop_threads())
            # torch allows set_num_interop_threads once, before its inter-op pool starts: asking
            # again for the count already in effect must not fail, so it is not asked at all.
            if current != inter:
                refusal = CompileError(
                    f"--ipu-torch-interop-threads={inter} cannot be applied: torch's inter-op "
                    f"threads are already {current} in this process, and torch allows "
                    "set_num_interop_threads only once, before any inter-op parallel work starts; "
                    f"use --ipu-torch-interop-threads={current} or auto, or keep conftests and "
                    "earlier code from setting it or running parallel torch work before the first "
                    "torch benchmark compiles"
                )
                # Asked of torch only once: torch 2.0 aborts the whole process on a second call
                # (an uncatchable C++ error) where later versions raise a RuntimeError.
                if _interop_set_before(torch):
                    raise refusal
                try:
                    torch.set_num_interop_threads(inter)
                except RuntimeError:
                    raise refusal from None
                _remember_interop_set(torch)
        return {
            "intra_op": int(torch.get_num_threads()),
            "inter_op": int(torch.get_num_interop_threads()),
            "requested": self._requested_threads(),
        }

    def _device_name(self, torch: ModuleType) -> str:
        if self._device.startswith("cuda"):
            return str(torch.cuda.get_device_name(torch.device(self._device)))
        return cpu_name()

    def compile(
        self,
        model: object,
        example_inputs: Sequence[object],
        precision: str,
        options: Mapping[str, object],
    ) -> CompiledModel:
        """Copy ``model`` (the caller's stays untouched), convert and place it; compile if asked.

        For ``torch-compile`` the example inputs are run once here, because ``torch.compile``
        compiles lazily on the first call and that belongs to compile time, not to a timed round.
        """
        torch = self._import()
        opts = _check_options(options, model)
        if not isinstance(model, torch.nn.Module):
            raise CompileError(f"the torch backend needs a torch.nn.Module, got {model_name(model)}")
        dev = torch.device(self._device)
        dtype = self._dtype(torch, model, precision, dev)
        # Before the model is copied or run, so the whole compile already uses the requested threads.
        threads = self.apply_threads()
        channels_last = bool(opts["channels_last"])
        module = self._module_copy(torch, model, dev, dtype, channels_last, str(opts["compile_mode"]))
        host_io = opts["io"] == "host"
        on_cuda = dev.type == "cuda"
        prepare_inputs = _inputs(torch, dtype, dev, host_io, channels_last)

        # run() reaches the module through this holder, so close() really lets go of it.
        holder: list[Any] = [module]
        del module
        run = _make_run(torch, holder, dev, host_io)
        if self._mode == "compile":
            _first_call(run, prepare_inputs, example_inputs, model)
        return CompiledModel(
            target=f"{self._name}:{self._device}",
            backend=self._name,
            device=self._device,
            device_name=self._device_name(torch),
            precision=precision,
            io=str(opts["io"]),
            run=run,
            prepare_inputs=prepare_inputs,
            close=_close(torch, holder, on_cuda),
            options={**opts, "mode": self._mode},
            info={"threads": threads},
        )

    def _dtype(self, torch: ModuleType, model: object, precision: str, dev: Any) -> Any:
        """The torch dtype of ``precision``; ``CompileError`` for an unknown one, or bf16 on a CUDA
        device without it."""
        if precision not in _DTYPES:
            raise CompileError(
                f"unknown precision {precision!r} for {model_name(model)}; use fp32, fp16 or bf16"
            )
        if precision == "bf16" and dev.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise CompileError(
                f"{self._device} ({self._device_name(torch)}) has no bf16 support for {model_name(model)}; "
                "use precision fp16 or fp32"
            )
        return getattr(torch, _DTYPES[precision])

    def _module_copy(
        self, torch: ModuleType, model: Any, dev: Any, dtype: Any, channels_last: bool, compile_mode: str
    ) -> Any:
        """A copy of ``model`` in eval mode, on ``dev`` in ``dtype`` (channels-last if asked),
        wrapped by ``torch.compile`` in ``compile`` mode."""
        module = copy.deepcopy(model).eval().to(device=dev, dtype=dtype)
        if channels_last:
            module = module.to(memory_format=torch.channels_last)
        if self._mode == "compile":
            with runtime_internals_quiet():
                module = torch.compile(module, mode=compile_mode, dynamic=False)
        return module

    def compile_training(
        self,
        model: object,
        example_batch: Sequence[object],
        precision: str,
        options: Mapping[str, object],
        request: TrainingRequest,
    ) -> TrainingStep:
        """A training step of a copy of ``model`` (``backends.torch_training``): eager or compiled as
        this backend's mode, fp32 or automatic mixed precision (fp16 on CUDA, bf16), data parallel
        over ``request.process_group`` when there is one."""
        from pytest_ipu.backends import torch_training

        torch = self._import()
        threads = self.apply_threads()
        step = torch_training.compile_training(
            torch,
            name=self._name,
            device=self._device,
            device_name=self._device_name(torch),
            mode=self._mode,
            model=model,
            example_batch=example_batch,
            precision=precision,
            options=options,
            request=request,
        )
        return dataclasses.replace(step, info={**step.info, "threads": threads})


def _closed(*_: object) -> object:
    raise RuntimeError("this compiled model was closed (the run that compiled it has ended)")


def _inputs(
    torch: ModuleType, dtype: Any, dev: Any, host_io: bool, channels_last: bool
) -> Callable[[Sequence[object]], tuple[object, ...]]:
    """A compiled model's ``prepare_inputs``: tensors, floating point ones in ``dtype``, 4-D ones
    channels-last where asked, left on the host (pinned for CUDA) for ``io="host"`` or copied to the
    device for ``io="device"``."""
    on_cuda = dev.type == "cuda"

    def prepare_inputs(inputs: Sequence[object]) -> tuple[object, ...]:
        prepared = []
        for x in inputs:
            t = torch.as_tensor(x)
            if t.is_floating_point():
                t = t.to(dtype)
            if channels_last and t.dim() == 4:
                t = t.contiguous(memory_format=torch.channels_last)
            # Pinned host memory is what a tuned input pipeline uses for fast async copies.
            t = (t.pin_memory() if on_cuda else t) if host_io else t.to(dev)
            prepared.append(t)
        return tuple(prepared)

    return prepare_inputs


def _close(torch: ModuleType, holder: list[Any], on_cuda: bool) -> Callable[[], None]:
    """A compiled model's ``close``: the holder lets go of the module, and CUDA's cache is freed."""

    def close() -> None:
        holder[0] = _closed
        if on_cuda:
            torch.cuda.empty_cache()

    return close


def _make_run(torch: ModuleType, holder: list[Any], dev: Any, host_io: bool) -> Callable[..., object]:
    """One synchronous call: it returns only when the outputs exist where ``io`` says."""
    if dev.type != "cuda":

        def run_cpu(*inputs: Any) -> object:
            with torch.inference_mode():
                return holder[0](*inputs)

        return run_cpu

    def run_cuda(*inputs: Any) -> object:
        with torch.inference_mode():
            if host_io:
                inputs = tuple(x.to(dev, non_blocking=True) for x in inputs)
                # .cpu() waits for the device: the outputs are in host memory when it returns.
                return _map_tensors(holder[0](*inputs), lambda t: t.cpu())
            out = holder[0](*inputs)
            torch.cuda.synchronize(dev)
            return out

    return run_cuda


def _map_tensors(obj: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(obj, (tuple, list)):
        return type(obj)(_map_tensors(o, fn) for o in obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return fn(obj) if hasattr(obj, "cpu") else obj


def _check_options(options: Mapping[str, object], model: object) -> dict[str, object]:
    checked = CheckedOptions("torch", OPTIONS, options, model_name(model))
    checked.one_of("io", _IO, "use 'host' or 'device'")
    return checked.values


def eager_reference(model: object, inputs: Sequence[object]) -> object:
    """The reference outputs for parity checks: a copy of ``model`` run eagerly, in fp32, on the CPU."""
    torch = importlib.import_module("torch")
    if not isinstance(model, torch.nn.Module):
        raise CompileError(f"a parity check needs a torch.nn.Module as reference, got {model_name(model)}")
    module = copy.deepcopy(model).eval().float().cpu()
    tensors = []
    for x in inputs:
        t = torch.as_tensor(x).detach().cpu()
        tensors.append(t.float() if t.is_floating_point() else t)
    with torch.inference_mode():
        return module(*tensors)


def _cpu_capability(torch: ModuleType) -> str | None:
    """The instruction set torch's CPU kernels dispatch to (``AVX512``, ``AVX2``, ...), or None when
    this torch does not say."""
    cpu = getattr(torch.backends, "cpu", None)
    if cpu is not None and hasattr(cpu, "get_cpu_capability"):
        return str(cpu.get_cpu_capability())
    # torch 2.0 has no torch.backends.cpu (torch 2.1 added it); its build summary prints the same
    # value, ATen's capability in use, as "CPU capability usage: AVX2".
    config = getattr(torch, "__config__", None)
    match = re.search(r"CPU capability usage: (\S+)", str(config.show())) if config is not None else None
    return match.group(1) if match else None


def _compile_unsupported(torch: ModuleType) -> str | None:
    """torch's own reason why ``torch.compile`` cannot run in this interpreter, or None when it can
    (or when this torch has no such check, and ``torch.compile`` itself will say what fails).

    torch 2.0 refuses Python 3.11 only when ``torch.compile`` is called; its check says so first.
    """
    try:
        check = importlib.import_module(f"{torch.__name__}._dynamo.eval_frame").check_if_dynamo_supported
    except (ImportError, AttributeError):
        return None
    try:
        check()
    except RuntimeError as exc:
        return str(exc) or type(exc).__name__
    return None


#: The torch modules whose inter-op thread count this process has set: torch accepts that once.
_INTEROP_SET: weakref.WeakSet[ModuleType] = weakref.WeakSet()


def _interop_set_before(torch: ModuleType) -> bool:
    try:
        return torch in _INTEROP_SET
    except TypeError:  # an injected stand-in that cannot be weakly referenced: never recorded
        return False


def _remember_interop_set(torch: ModuleType) -> None:
    with contextlib.suppress(TypeError):
        _INTEROP_SET.add(torch)


def _first_call(
    run: Callable[..., object],
    prepare_inputs: Callable[[Sequence[object]], tuple[object, ...]],
    example_inputs: Sequence[object],
    model: object,
) -> None:
    """Call the model once, in which torch.compile compiles: that call belongs to compile time,
    not to a timed round."""
    try:
        with runtime_internals_quiet():
            run(*prepare_inputs(example_inputs))
    except Exception as exc:
        raise CompileError(f"torch.compile failed for {model_name(model)}: {exc}") from exc
