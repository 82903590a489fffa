"""Training steps on torch: eager or ``torch.compile``, fp32 or automatic mixed precision, alone or
data parallel over a torch.distributed process group (DistributedDataParallel).

One call of the step is what a hand-written loop does per batch: zero the gradients, run the
forward and backward pass of each of the ``gradient_accumulation`` micro-batches (gradients
averaged across processes on the last), step the optimizer, and read the loss back to the host.
Reading the loss makes the call synchronous (its outputs exist when it returns, as every timed call
must) and lets a NaN fail the benchmark at the step where it appeared.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from pytest_ipu.backends.base import TrainingInfo
from pytest_ipu.backends.base import TrainingRequest
from pytest_ipu.backends.base import TrainingStep
from pytest_ipu.backends.compile_args import CheckedOptions
from pytest_ipu.backends.compile_args import model_name
from pytest_ipu.backends.runtime_warnings import runtime_internals_quiet
from pytest_ipu.errors import CompileError

#: Options ``ipu_train`` accepts on torch, with their defaults: ``io`` as for inference (``host``:
#: each step copies its batch to the device), ``compile_mode`` for ``torch.compile``.
OPTIONS: Mapping[str, object] = {"io": "host", "compile_mode": "default"}
#: Autocast dtypes of the mixed precisions; fp32 trains without autocast.
_AMP = {"fp16": "float16", "bf16": "bfloat16"}


def split_batch(host_batch: int, accumulation: int, model: str) -> int:
    """The micro-batch of a host batch split into ``accumulation`` equal parts; ``CompileError``
    naming both numbers when they do not divide."""
    if accumulation < 1 or host_batch % accumulation:
        raise CompileError(
            f"{model}: the batch of {host_batch} samples does not split into gradient_accumulation="
            f"{accumulation} equal micro-batches; pass a batch that is a multiple of it"
        )
    return host_batch // accumulation


def compile_training(
    torch: ModuleType,
    *,
    name: str,
    device: str,
    device_name: str,
    mode: str,
    model: object,
    example_batch: Sequence[object],
    precision: str,
    options: Mapping[str, object],
    request: TrainingRequest,
) -> TrainingStep:
    """The compiled training step of ``model`` (copied: the caller's model is never trained)."""
    label = model_name(model)
    opts = CheckedOptions(name, OPTIONS, options, label).values
    dev = torch.device(device)
    module = _module_copy(torch, model, opts, precision, request, example_batch, dev, device, label)
    host_batch = int(torch.as_tensor(example_batch[0]).shape[0])
    micro = split_batch(host_batch, request.gradient_accumulation, label)
    optimizer = request.optimizer(module.parameters())
    trained = _data_parallel(torch, module, request.process_group, dev)
    amp_dtype = getattr(torch, _AMP[precision]) if precision in _AMP else None
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
    host_io = opts["io"] == "host"
    prepare_inputs = _inputs(torch, dev, host_io)
    autocast = _autocast(torch, dev, amp_dtype)
    info = _training_info(request, micro, optimizer, amp_dtype is not None, mode)
    where = f"{label} on {name}:{device}"
    forward = _forward(torch, trained, mode, str(opts["compile_mode"]))
    live = _Live(forward, module, getattr(trained, "no_sync", None))
    step = _make_step(
        live, optimizer, request, scaler, autocast, dev, host_io, info, where, amp_dtype is None
    )
    if mode == "compile":
        _first_step(step, prepare_inputs, example_batch, label)
    return TrainingStep(
        target=f"{name}:{device}",
        backend=name,
        device=device,
        device_name=device_name,
        precision=precision,
        io=str(opts["io"]),
        run=step,
        prepare_inputs=prepare_inputs,
        close=_close(torch, optimizer, live, dev.type == "cuda"),
        options={**opts, "mode": mode, "gradient_accumulation": request.gradient_accumulation},
        training=info,
        evaluate=_evaluate(torch, live, autocast, dev),
    )


def _module_copy(
    torch: ModuleType,
    model: object,
    opts: Mapping[str, object],
    precision: str,
    request: TrainingRequest,
    example_batch: Sequence[object],
    dev: Any,
    device: str,
    label: str,
) -> Any:
    """A copy of the checked ``model`` in training mode on ``dev`` (``_checked``): the one the
    step trains."""
    network = _checked(
        torch,
        model,
        str(opts["io"]),
        precision,
        request.inputs,
        len(example_batch),
        dev.type == "cuda",
        label,
        device,
    )
    # Weights stay fp32: mixed precision casts inside autocast, and the optimizer updates fp32.
    return copy.deepcopy(network).train().to(device=dev)


def _forward(torch: ModuleType, trained: Any, mode: str, compile_mode: str) -> Any:
    """What the step calls forward: the (data-parallel) module, compiled by ``torch.compile`` in
    ``compile`` mode."""
    if mode != "compile":
        return trained
    with runtime_internals_quiet():
        return torch.compile(trained, mode=compile_mode)


def _training_info(
    request: TrainingRequest, micro: int, optimizer: Any, amp: bool, mode: str
) -> TrainingInfo:
    """The step's make-up for the record: one replica and device iteration a step, on this
    backend."""
    return TrainingInfo(
        micro_batch=micro,
        gradient_accumulation=request.gradient_accumulation,
        replicas=1,
        device_iterations=1,
        processes=request.processes,
        optimizer=type(optimizer).__name__,
        amp=amp,
        mode=mode,
    )


def _first_step(
    step: Callable[..., float],
    prepare_inputs: Callable[[Sequence[object]], tuple[object, ...]],
    batch: Sequence[object],
    label: str,
) -> None:
    """Make the first step, in which torch.compile compiles: that step belongs to compile time,
    not a round."""
    try:
        with runtime_internals_quiet():
            step(*prepare_inputs(batch))
    except Exception as exc:
        raise CompileError(f"torch.compile failed for the training step of {label}: {exc}") from exc


def _checked(
    torch: ModuleType,
    model: object,
    io: str,
    precision: str,
    inputs: int,
    batch_elements: int,
    on_cuda: bool,
    label: str,
    device: str,
) -> Any:
    """``model``, once checked: refuse what the step cannot train, each with its fix (an unknown
    ``io`` or precision, a model that is no ``torch.nn.Module``, a batch with no targets for the
    loss, fp16 off CUDA)."""
    if io not in ("host", "device"):
        raise CompileError(f"io must be 'host' or 'device', got {io!r} for {label}")
    if not isinstance(model, torch.nn.Module):
        raise CompileError(f"ipu_train needs a torch.nn.Module, got {label}")
    if precision not in ("fp32", *_AMP):
        raise CompileError(f"unknown precision {precision!r} for {label}; use fp32, fp16 or bf16")
    if not 1 <= inputs < batch_elements:
        raise CompileError(
            f"{label}: inputs={inputs} of a batch of {batch_elements} element(s) leaves no "
            "targets for the loss; pass a batch (inputs..., targets...) and inputs=N below its length"
        )
    if precision == "fp16" and not on_cuda:
        raise CompileError(f"{label}: fp16 mixed precision needs a CUDA device; on {device} use bf16 or fp32")
    return model


def _data_parallel(torch: ModuleType, module: Any, process_group: Any, dev: Any) -> Any:
    """``module`` wrapped in DistributedDataParallel over ``process_group``; ``module`` itself
    without one."""
    if process_group is None:
        return module
    parallel = torch.nn.parallel.DistributedDataParallel
    if dev.type != "cuda":
        return parallel(module, process_group=process_group)
    # A plain `cuda` is the current device, which torchrun's ranks set to their local rank.
    device_ids = [dev.index if dev.index is not None else torch.cuda.current_device()]
    return parallel(module, device_ids=device_ids, process_group=process_group)


def _inputs(torch: ModuleType, dev: Any, host_io: bool) -> Callable[[Sequence[object]], tuple[object, ...]]:
    """The step's ``prepare_inputs``: tensors, floating point ones in fp32, left on the host (pinned
    for CUDA) for ``io="host"`` or copied to the device for ``io="device"``."""
    on_cuda = dev.type == "cuda"

    def prepare_inputs(batch: Sequence[object]) -> tuple[object, ...]:
        prepared = []
        for x in batch:
            t = torch.as_tensor(x)
            if t.is_floating_point():
                t = t.to(torch.float32)
            prepared.append((t.pin_memory() if on_cuda else t) if host_io else t.to(dev))
        return tuple(prepared)

    return prepare_inputs


def _autocast(
    torch: ModuleType, dev: Any, amp_dtype: Any
) -> Callable[[], contextlib.AbstractContextManager[object]]:
    """A new autocast context to ``amp_dtype`` on ``dev`` per call; a null one for fp32."""

    def autocast() -> contextlib.AbstractContextManager[object]:
        if amp_dtype is None:
            return contextlib.nullcontext()
        cast: contextlib.AbstractContextManager[object] = torch.autocast(
            device_type=dev.type, dtype=amp_dtype
        )
        return cast

    return autocast


def _close(torch: ModuleType, optimizer: Any, live: _Live, on_cuda: bool) -> Callable[[], None]:
    """The step's ``close``: its gradients dropped, the model let go of, CUDA's cached memory freed."""

    def close() -> None:
        optimizer.zero_grad(set_to_none=True)
        live.close()
        if on_cuda:
            torch.cuda.empty_cache()

    return close


def _evaluate(
    torch: ModuleType,
    live: _Live,
    autocast: Callable[[], contextlib.AbstractContextManager[object]],
    dev: Any,
) -> Callable[..., object]:
    """The step's ``evaluate``: the trained module in eval mode on inputs, on the host in fp32."""

    def evaluate(*inputs: object) -> object:
        trained_module = live.module
        if trained_module is _closed:
            _closed()
        trained_module.eval()
        try:
            with torch.no_grad(), autocast():
                out = trained_module(*(torch.as_tensor(x).to(dev) for x in inputs))
        finally:
            trained_module.train()
        return out.float().cpu()

    return evaluate


class _Live:
    """The trained model as the step reaches it. ``close`` lets go of it: a closed step (which its
    test's stash keeps to the end of the run) then holds neither the model nor the
    DistributedDataParallel wrapper, which holds the process group, so that the group can be
    destroyed, and its threads end, before the interpreter does (``placement.torchrun``)."""

    __slots__ = ("forward", "module", "no_sync")

    def __init__(self, forward: Any, module: Any, no_sync: Any) -> None:
        #: The callable of a step's forward pass (DistributedDataParallel, ``torch.compile``'s wrapper).
        self.forward = forward
        #: The plain module, for ``evaluate``.
        self.module = module
        #: DistributedDataParallel's ``no_sync``; ``None`` for a model trained alone.
        self.no_sync: Callable[[], contextlib.AbstractContextManager[object]] | None = no_sync

    def close(self) -> None:
        """Let go of the model; the step's later calls raise."""
        self.forward = self.module = _closed
        self.no_sync = None


def _closed(*_: object) -> object:
    raise RuntimeError("this training step was closed (the test that compiled it has ended)")


def _make_step(
    live: _Live,
    optimizer: Any,
    request: TrainingRequest,
    scaler: Any,
    autocast: Callable[[], contextlib.AbstractContextManager[object]],
    dev: Any,
    host_io: bool,
    info: TrainingInfo,
    where: str,
    autocast_off: bool = False,
) -> Callable[..., float]:
    """The training step: one optimizer step over the batch, in ``gradient_accumulation``
    micro-batches, returning the loss it read back (the read that ends the step). The leanest
    closure that does the job is chosen: a step is timed, and every branch in it would count."""
    # Host tensors already live where a CPU step runs: copying them would cost, not model, a transfer.
    copy_in = host_io and dev.type != "cpu"
    simple = request.gradient_accumulation == 1 and scaler is None and autocast_off
    if simple and request.inputs == 1 and not copy_in:
        return _pair_step(live, optimizer, request, info, where)
    if simple:
        return _plain_step(live, optimizer, request, dev, copy_in, info, where)
    return _accumulating_step(live, optimizer, request, scaler, autocast, dev, copy_in, info, where)


def _pair_step(
    live: _Live, optimizer: Any, request: TrainingRequest, info: TrainingInfo, where: str
) -> Callable[..., float]:
    """The step of the commonest case of all, (inputs, targets) on the CPU, without unpacking the
    batch."""
    loss_fn = request.loss
    step_optimizer = optimizer.step
    zero_grad = optimizer.zero_grad
    losses = info.losses

    def pair_step(x: Any, *targets: Any) -> float:
        zero_grad(set_to_none=True)
        loss = loss_fn(live.forward(x), *targets)
        loss.backward()
        step_optimizer()
        value = float(loss.detach())  # the host read that ends the step
        losses.add(value, where)
        return value

    return pair_step


def _plain_step(
    live: _Live,
    optimizer: Any,
    request: TrainingRequest,
    dev: Any,
    copy_in: bool,
    info: TrainingInfo,
    where: str,
) -> Callable[..., float]:
    """The step of the common case, as lean as a hand-written loop: one micro-batch, no scaling,
    no autocast, so no division, no running sum and no context managers around the forward pass."""
    inputs = request.inputs
    loss_fn = request.loss
    step_optimizer = optimizer.step

    def plain_step(*batch: Any) -> float:
        if copy_in:
            batch = tuple(t.to(dev, non_blocking=True) for t in batch)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(live.forward(*batch[:inputs]), *batch[inputs:])
        loss.backward()
        step_optimizer()
        value = float(loss.detach())  # the host read that ends the step
        info.losses.add(value, where)
        return value

    return plain_step


def _accumulating_step(
    live: _Live,
    optimizer: Any,
    request: TrainingRequest,
    scaler: Any,
    autocast: Callable[[], contextlib.AbstractContextManager[object]],
    dev: Any,
    copy_in: bool,
    info: TrainingInfo,
    where: str,
) -> Callable[..., float]:
    """The general step: micro-batches whose losses add up, under autocast, with the loss scaled
    where ``scaler`` is given (fp16)."""
    accumulation = request.gradient_accumulation
    inputs = request.inputs
    loss_fn = request.loss

    def step(*batch: Any) -> float:
        if copy_in:
            batch = tuple(t.to(dev, non_blocking=True) for t in batch)
        parts = [t.chunk(accumulation) for t in batch] if accumulation > 1 else [(t,) for t in batch]
        optimizer.zero_grad(set_to_none=True)
        total: Any = 0.0
        # DistributedDataParallel averages gradients on every backward unless told to wait: the
        # micro-batches before the last accumulate locally (its ``no_sync``), the last one reduces.
        no_sync = live.no_sync
        for i in range(accumulation):
            micro = [p[i] for p in parts]
            waiting = no_sync is not None and i < accumulation - 1
            with no_sync() if no_sync is not None and waiting else contextlib.nullcontext(), autocast():
                loss = loss_fn(live.forward(*micro[:inputs]), *micro[inputs:]) / accumulation
            (scaler.scale(loss) if scaler is not None else loss).backward()
            total = total + loss.detach()
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        value = float(total)  # the host read that ends the step
        info.losses.add(value, where)
        return value

    return step
