"""Training steps on IPUs through PopTorch's ``trainingModel``, in one process or under PopRun.

PopTorch runs the forward and backward passes and the optimizer on the device from one traced module,
whose forward must return the loss: the step wraps a copy of the model in a module returning
``loss(model(*inputs), *targets)`` marked with ``poptorch.identity_loss`` (PopTorch finds the losses
torch.nn's loss functions build on its own; ``identity_loss`` names any other computation as the
loss). The step sets ``OutputMode.All`` (PopTorch's training default, ``Final``, would return only the
last device iteration's losses): the call's loss is the mean of its micro-batches', a few scalars
beside the batch. Under PopRun the instances train one model on PopDist's ``popdist.poptorch.Options``
(reference ``graphcore-sdk-api.md`` section 5.1), unlike inference (``backends.ipu.poptorch``).

Documented in docs/training.md (sections "The fixtures", "The global batch" and "PopRun").
"""

from __future__ import annotations

import copy
import math
import weakref
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pytest_ipu.backends.base import CountedTrainingStep
from pytest_ipu.backends.base import TrainingInfo
from pytest_ipu.backends.base import TrainingRequest
from pytest_ipu.backends.compile_args import CheckedOptions
from pytest_ipu.backends.compile_args import model_name
from pytest_ipu.backends.ipu.poptorch import _HANDLES
from pytest_ipu.backends.ipu.poptorch import OPTIONS as INFERENCE_OPTIONS
from pytest_ipu.backends.ipu.poptorch import PopTorchBackend
from pytest_ipu.backends.ipu.poptorch import _check_options
from pytest_ipu.backends.ipu.poptorch import _compile_phases
from pytest_ipu.backends.ipu.poptorch import _compiled
from pytest_ipu.backends.ipu.poptorch import _Handle
from pytest_ipu.backends.ipu.poptorch import _handle_latency
from pytest_ipu.backends.ipu.poptorch import _host_tensors
from pytest_ipu.backends.ipu.poptorch import _info
from pytest_ipu.backends.ipu.poptorch import _place
from pytest_ipu.backends.ipu.poptorch import _plain_options
from pytest_ipu.backends.ipu.poptorch import _poptorch_options
from pytest_ipu.backends.ipu.poptorch import _release
from pytest_ipu.backends.ipu.poptorch import _reserved
from pytest_ipu.backends.ipu.poptorch import _version
from pytest_ipu.devices import poprun
from pytest_ipu.devices.poprun import PopRunInstance
from pytest_ipu.errors import CompileError
from pytest_ipu.processes import error_text
from pytest_ipu.sdk import import_sdk

#: Backend options the step sets itself: ``training``; ``gradient_accumulation``, which is
#: ``ipu_train``'s own keyword (``TrainingRequest.gradient_accumulation``); and ``output_mode``, fixed
#: to ``all`` so that the loss covers the whole host batch. ``cycle_counter`` is inference's: a
#: training step's record counts no cycles.
_SET_BY_THE_STEP = ("training", "gradient_accumulation", "output_mode", "cycle_counter")
#: Options ``ipu_train`` accepts on PopTorch, with their defaults: the inference options (see
#: ``PopTorchBackend``) less those the step sets. ``replication_factor`` and ``ipus`` (pipeline
#: stages) are also what ``PopTorchBackend.placement_options`` gives for a placement's replicas and
#: stages; under PopRun both are PopRun's (``--num-replicas``, ``--ipus-per-replica``).
OPTIONS: Mapping[str, object] = {k: v for k, v in INFERENCE_OPTIONS.items() if k not in _SET_BY_THE_STEP}
_CLOSED = "this training step was closed (the run that compiled it has ended)"
#: The popdist modules whose ``init()`` this process has called: once is enough, and whether a second
#: call is harmless is not documented.
_POPDIST_INITIALISED: weakref.WeakSet[ModuleType] = weakref.WeakSet()


@dataclass(frozen=True)
class StepTarget:
    """Where a training step compiles (``compile_training``): the backend's name and device string,
    the device's name, the device id of ``ipu:N`` (``None``: PopTorch or PopDist chooses), whether it
    is the IPU Model, this process's place in a PopRun launch (``None`` outside one) with its
    ``popdist`` module, and ``members``, which gives a device id's single IPUs
    (``PopTorchBackend._members``): the step's ``ipu_ids``, as an inference model's, what its energy
    is measured on."""

    name: str
    device: str
    device_name: str
    ipu_id: int | None
    simulator: bool
    instance: PopRunInstance | None
    popdist: ModuleType | None
    members: Callable[[int], tuple[int, ...] | None]


@dataclass(frozen=True)
class _Shape:
    """How a step's host batch splits: micro-batches accumulated, pipeline stages, local replicas,
    device iterations per call, and the processes of the launch."""

    accumulation: int
    stages: int
    replicas: int
    iterations: int
    processes: int

    @property
    def factor(self) -> int:
        """The micro-batches of one call's host batch in one process."""
        return self.accumulation * self.replicas * self.iterations

    def info(self, host_batch: int, optimizer: str) -> TrainingInfo:
        """The step's ``TrainingInfo`` for a host batch of ``host_batch`` samples."""
        return TrainingInfo(
            micro_batch=host_batch // self.factor,
            gradient_accumulation=self.accumulation,
            replicas=self.replicas,
            device_iterations=self.iterations,
            processes=self.processes,
            optimizer=optimizer,
            amp=False,
            mode="poptorch",
        )


def compile_training(
    poptorch: ModuleType,
    torch: ModuleType,
    target: StepTarget,
    *,
    model: object,
    example_batch: Sequence[object],
    precision: str,
    options: Mapping[str, object],
    request: TrainingRequest,
) -> CountedTrainingStep:
    """The compiled training step of a copy of ``model`` (the caller's model is never trained), on
    ``target``.

    Compiling (and attaching to the IPUs) happens here, with the example batch, not on the first
    call. Raises ``CompileError`` naming the model and the reason (``BackendUnavailable`` when no
    IPUs could be had).
    """
    label = model_name(model)
    merged = CheckedOptions(target.name, OPTIONS, options, label, what="poptorch backend option")
    if not isinstance(model, torch.nn.Module):
        raise CompileError(f"ipu_train needs a torch.nn.Module, got {label}")
    shape = _shape(target, merged, options, request, len(example_batch), label)
    checked = _step_option_values(merged, shape, label, precision)
    prepare_inputs = _host_tensors(torch, precision)
    examples = prepare_inputs(example_batch)
    host_batch = _host_batch(
        examples, shape.factor, shape.accumulation, shape.replicas, shape.iterations, label
    )
    module, wrapped = _trainable(poptorch, torch, model, precision, shape.stages, request, label)
    optimizer = request.optimizer(wrapped.parameters())
    popts = _step_options(poptorch, torch, target, checked, shape.stages, label)
    device = f"{target.name}:{target.device}"
    executor = _compiled(
        lambda: poptorch.trainingModel(wrapped, options=popts, optimizer=optimizer), examples, label, device
    )
    handle = _Handle(executor)
    used = executor.options
    del executor
    info = shape.info(host_batch, type(optimizer).__name__)
    calls = _step_calls(torch, handle, module, prepare_inputs, info, f"{label} on {device}")
    return _counted_step(
        poptorch, target, precision, handle, used, checked, shape, info, calls, prepare_inputs
    )


def _step_option_values(
    merged: CheckedOptions, shape: _Shape, label: str, precision: str
) -> dict[str, object]:
    """The PopTorch options of the step: the ones given, with the replicas, the gradient
    accumulation and every output of the step (``output_mode`` ``all``) that ``shape`` makes,
    checked as inference's are (``_check_options``)."""
    return _check_options(
        {
            **merged.values,
            "replication_factor": shape.replicas,
            "training": True,
            "gradient_accumulation": shape.accumulation,
            "output_mode": "all",
        },
        label,
        precision,
    )


def _counted_step(
    poptorch: ModuleType,
    target: StepTarget,
    precision: str,
    handle: _Handle,
    used: Any,
    checked: Mapping[str, object],
    shape: _Shape,
    info: TrainingInfo,
    calls: tuple[Callable[..., float], Callable[..., object], Callable[[], None]],
    prepare_inputs: Callable[[Sequence[object]], tuple[object, ...]],
) -> CountedTrainingStep:
    """The compiled step around ``handle``, whose executor used the options ``used``: its
    ``calls`` (run, evaluate, close), compile facts and phases, and the IPUs it holds."""
    run, evaluate, close = calls
    _HANDLES[run] = handle
    used_id = _used_ipu_id(used, target.ipu_id)
    facts = _facts(poptorch, target, used, checked, used_id, shape.processes)
    return CountedTrainingStep(
        target=f"{target.name}:{target.device}",
        backend=target.name,
        device=target.device,
        device_name=target.device_name,
        precision=precision,
        io="host",
        run=run,
        prepare_inputs=prepare_inputs,
        close=close,
        options={**_plain_options(checked), "processes": shape.processes},
        phases_s=_compile_phases(handle.executor, facts),
        info=facts,
        device_latency=lambda: _handle_latency(handle),
        simulator=target.simulator,
        training=info,
        evaluate=evaluate,
        # As inference: the members of the device the executor used (PopDist's under PopRun); on
        # plain ``ipu`` only how many, and the meter finds which by the process using them.
        ipu_ids=None if target.simulator or used_id is None else target.members(used_id),
        ipu_count=None if target.simulator else _reserved(facts),
    )


def _shape(
    target: StepTarget,
    merged: CheckedOptions,
    options: Mapping[str, object],
    request: TrainingRequest,
    batch_elements: int,
    label: str,
) -> _Shape:
    """The step's shape from the options and the request, refusing what PopTorch cannot train (no
    targets for the loss, too few micro-batches for the pipeline, a torch.distributed group, options
    PopRun sets itself), each with its fix."""
    if not 1 <= request.inputs < batch_elements:
        raise CompileError(
            f"{label}: inputs={request.inputs} of a batch of {batch_elements} element(s) leaves no "
            "targets for the loss; pass a batch (inputs..., targets...) and inputs=N below its length"
        )
    accumulation = request.gradient_accumulation
    if isinstance(accumulation, bool) or not isinstance(accumulation, int) or accumulation < 1:
        raise CompileError(f"gradient_accumulation={accumulation!r} for {label}; use a positive integer")
    stages = merged.positive_int("ipus")
    replicas = merged.positive_int("replication_factor")
    iterations = merged.positive_int("device_iterations")
    if stages > 1 and accumulation < 2 * stages - 1:
        # Compiler.cpp:672-701: each pipeline stage needs a micro-batch in flight, and training adds a
        # backward stage for every forward stage but the last.
        raise CompileError(
            f"{label}: gradient_accumulation={accumulation} is below the {2 * stages - 1} pipeline stages "
            f"of ipus={stages} ({stages} forward and {stages - 1} backward when training; PopTorch needs "
            f"a micro-batch in every stage); pass gradient_accumulation={2 * stages - 1} or more"
        )
    instance = target.instance
    if request.process_group is not None or (instance is None and request.processes != 1):
        raise CompileError(
            f"{label}: PopTorch cannot average gradients over a torch.distributed process group "
            f"({request.processes} processes); launch the data-parallel run with poprun (PopDist), "
            "not torchrun, or train in one process"
        )
    processes = 1
    if instance is not None:
        _check_poprun(
            instance, target.ipu_id, target.simulator, replicas, options, stages, label, target.device
        )
        replicas, processes = instance.replicas_local, instance.count
    return _Shape(accumulation, stages, replicas, iterations, processes)


def _trainable(
    poptorch: ModuleType,
    torch: ModuleType,
    model: Any,
    precision: str,
    stages: int,
    request: TrainingRequest,
    label: str,
) -> tuple[Any, Any]:
    """A copy of ``model`` to train, in the precision and on the pipeline stages asked for, and the
    module ``trainingModel`` traces: that copy followed by the request's loss."""
    module = copy.deepcopy(model).train()
    if precision == "fp16":
        module = module.half()  # as inference: PopTorch's fp16 is fp16 weights and inputs
    if stages > 1:
        _place(poptorch, torch, module, stages, label)
    return module, _with_loss(torch, poptorch, module, request.loss, request.inputs, label)


def _facts(
    poptorch: ModuleType,
    target: StepTarget,
    used: Any,
    checked: Mapping[str, object],
    used_id: int | None,
    processes: int,
) -> dict[str, object]:
    """The step's compile facts: the inference model's (``_info``), with the launch's processes and,
    under PopRun, this instance's place in it."""
    facts: dict[str, object] = {
        **_info(poptorch, used, checked, used_id, _version(poptorch)),
        "processes": processes,
        "popdist_options": target.instance is not None,
    }
    if target.instance is not None:
        facts["poprun"] = target.instance.as_json()
    return facts


def _step_options(
    poptorch: ModuleType,
    torch: ModuleType,
    target: StepTarget,
    checked: Mapping[str, object],
    stages: int,
    label: str,
) -> Any:
    """The ``poptorch.Options`` of the step: PopDist's under PopRun, on the IPU Model for a
    simulator; ``CompileError`` naming the model where PopTorch rejects them."""
    try:
        # Under PopRun: PopDist's options, and no Distributed.disable(). Inference models stay
        # independent per instance (backends.ipu.poptorch: each is benchmarked alone, the launch's files
        # merged afterwards), but the instances' replicas of a training step train one model, so
        # their gradients must be averaged over the launch: PopDist's distributed replicated graph.
        base = None if target.popdist is None else popdist_options(target.popdist, stages)
        popts = _poptorch_options(poptorch, torch, checked, target.ipu_id, base)
        if target.simulator:
            popts.useIpuModel(True)
    except CompileError:
        raise
    except (AssertionError, ValueError, TypeError, AttributeError) as exc:
        raise CompileError(f"PopTorch rejected the options for {label}: {error_text(exc)}") from exc
    return popts


def _step_calls(
    torch: ModuleType,
    handle: _Handle,
    module: Any,
    prepare_inputs: Callable[[Sequence[object]], tuple[object, ...]],
    info: TrainingInfo,
    where: str,
) -> tuple[Callable[..., float], Callable[..., object], Callable[[], None]]:
    """The step's ``run`` (one call: its mean loss, recorded in ``info``), ``evaluate`` (the trained
    module on inputs, the weights copied from the device first) and ``close`` (the device released)."""

    def run(*batch: object) -> float:
        executor = handle.executor
        if executor is None:
            raise RuntimeError(_CLOSED)
        value = _mean_loss(torch, executor(*batch), where)  # the host read that ends the call
        info.losses.add(value, where)
        return value

    def evaluate(*inputs: object) -> object:
        executor = handle.executor
        if executor is not None and executor.isAttachedToDevice():
            # The trained weights live on the device: copy them into the module trainingModel wrapped
            # (whose parameters ``module`` shares). Detaching (and closing) copies them too.
            executor.copyWeightsToHost()
        module.eval()
        try:
            with torch.no_grad():
                out = module(*prepare_inputs(inputs))
        finally:
            module.train()
        return out.float() if isinstance(out, torch.Tensor) else out

    def close() -> None:
        executor, handle.executor = handle.executor, None
        if executor is not None:
            _release(executor)

    return run, evaluate, close


def _check_poprun(
    instance: PopRunInstance,
    ipu_id: int | None,
    simulator: bool,
    replicas: int,
    options: Mapping[str, object],
    stages: int,
    label: str,
    device: str,
) -> None:
    """Under PopRun the device, the replicas and the IPUs per replica are PopRun's: refuse options
    that ask for others, naming the fix."""
    where = f"PopRun instance {instance.index} of {instance.count}"
    if simulator or ipu_id is not None:
        raise CompileError(
            f"{label}: under PopRun a training step is one replica group of the launch's distributed "
            f"graph, on the IPUs PopDist gives {where}, not on device {device!r}; use the device 'ipu', "
            "or run outside poprun"
        )
    if "replication_factor" in options and replicas != instance.replicas_local:
        raise CompileError(
            f"{label}: replication_factor={replicas}, but PopRun gives {where} {instance.replicas_local} "
            f"local replica(s) (--num-replicas {instance.replicas_total}); under PopRun the replicas are "
            f"PopRun's: leave replication_factor out, or launch poprun with --num-replicas "
            f"{replicas * instance.count}"
        )
    if stages != instance.ipus_per_replica:
        raise CompileError(
            f"{label}: ipus={stages} pipeline stages need {stages} IPU(s) per replica, but PopRun gives "
            f"{where} {instance.ipus_per_replica} (--ipus-per-replica); launch poprun with "
            f"--ipus-per-replica {stages}, or pass ipus={instance.ipus_per_replica}"
        )


def popdist_options(popdist: ModuleType, stages: int) -> Any:
    """``popdist.poptorch.Options(ipus_per_replica=stages)``, after ``popdist.init()`` (once per
    process), as Graphcore's PopRun examples make their options."""
    try:
        # Imported with popdist or not, depending on the release: ask for the submodule if absent.
        integration = getattr(popdist, "poptorch", None)
        if integration is None:
            integration = import_sdk(f"{popdist.__name__}.poptorch")
        if popdist not in _POPDIST_INITIALISED:
            # popdist.init() starts PopDist's MPI backend; PopART would call it itself, with a
            # deprecation warning, when it builds the distributed replicated graph.
            popdist.init()
            _POPDIST_INITIALISED.add(popdist)
        return integration.Options(ipus_per_replica=stages)
    except Exception as exc:
        raise CompileError(
            f"popdist.poptorch.Options(ipus_per_replica={stages}) failed under PopRun ({error_text(exc)}); "
            "install the popdist wheel of the Poplar SDK that provides poptorch"
        ) from exc


def _host_batch(
    batch: Sequence[Any], factor: int, accumulation: int, replicas: int, iterations: int, label: str
) -> int:
    """The samples of the batch (every element's leading dimension, which must agree and split into
    ``factor`` micro-batches, PopTorch's batch rule)."""
    for i, t in enumerate(batch):
        if not t.dim():
            raise CompileError(
                f"{label}: batch element {i} is a scalar, with no batch dimension; every input and target "
                "needs one row per sample"
            )
    host_batch = int(batch[0].shape[0])
    for i, t in enumerate(batch):
        if int(t.shape[0]) != host_batch:
            raise CompileError(
                f"{label}: batch element {i} has {int(t.shape[0])} samples, but element 0 has {host_batch}; "
                "every input and target needs one row per sample"
            )
    if host_batch == 0 or host_batch % factor:
        suggested = factor * max(1, math.ceil(host_batch / factor))
        raise CompileError(
            f"{label}: the batch of {host_batch} samples does not split into gradient_accumulation "
            f"({accumulation}) x replication_factor ({replicas}) x device_iterations ({iterations}) = "
            f"{factor} equal micro-batches; pass a batch of {suggested} samples (or another multiple of "
            f"{factor}) or change those numbers"
        )
    return host_batch


def _with_loss(
    torch: ModuleType, poptorch: ModuleType, model: Any, loss: Any, inputs: int, label: str
) -> Any:
    """``model`` followed by ``loss`` as one module whose forward returns the loss: what
    ``trainingModel`` needs (it differentiates the loss the traced forward returns)."""

    class TrainingLoss(torch.nn.Module):  # type: ignore[name-defined,misc]
        """``loss(model(*batch[:inputs]), *batch[inputs:])``, marked as the loss."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *batch: Any) -> Any:
            value = loss(self.model(*batch[:inputs]), *batch[inputs:])
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"the loss of {label} is a {type(value).__name__}, not a scalar tensor")
            if value.dim() != 0:
                shape = tuple(value.shape)
                raise ValueError(
                    f"the loss of {label} has shape {shape}, not a scalar; reduce it (mean or sum)"
                )
            # "none": the loss is already a scalar, reduced as the loss function chose.
            return poptorch.identity_loss(value, reduction="none")

    return TrainingLoss()


def _mean_loss(torch: ModuleType, out: object, where: str) -> float:
    """The mean of the per-micro-batch losses one call returned (``OutputMode.All``)."""
    if not isinstance(out, torch.Tensor):
        raise RuntimeError(f"PopTorch returned {type(out).__name__} for the loss of {where}, not a tensor")
    return float(out.detach().float().mean())


def _used_ipu_id(used: Any, given: int | None) -> int | None:
    """The device id the executor's options name (PopDist's under PopRun), else ``given``."""
    try:
        return int(used.ipu_id) if used.exists("ipu_id") else given
    except (AttributeError, TypeError, ValueError):
        return given


class PopTorchTrainingBackend(PopTorchBackend):
    """The ``poptorch`` backend of the registry: PopTorch inference (``PopTorchBackend``) and
    ``ipu_train``'s training steps (``TrainingBackend``). The training half lives here so that the
    inference module never imports it."""

    def compile_training(
        self,
        model: object,
        example_batch: Sequence[object],
        precision: str,
        options: Mapping[str, object],
        request: TrainingRequest,
    ) -> CountedTrainingStep:
        """A training step of a copy of ``model`` through ``poptorch.trainingModel``
        (``backends.ipu.poptorch_training``); under PopRun, one replica group of the launch's data-parallel
        training, configured by ``popdist.poptorch.Options``."""
        poptorch = self._import()
        torch = self._import_torch()
        name = model_name(model)
        try:
            ipu_id = self._ipu_id()
            instance = poprun.detect(self._popdist)
        except ValueError as exc:
            raise CompileError(f"{exc} (compiling {name})") from None
        if instance is not None and self._popdist is None:
            self._popdist = import_sdk("popdist")  # detect() found it importable
        target = StepTarget(
            name=self._name,
            device=self._device,
            device_name=self._device_name(poptorch),
            ipu_id=ipu_id,
            simulator=self.simulator,
            instance=instance,
            popdist=self._popdist if instance is not None else None,
            members=self._members,
        )
        return compile_training(
            poptorch,
            torch,
            target,
            model=model,
            example_batch=example_batch,
            precision=precision,
            options=options,
            request=request,
        )
