"""What every backend provides: availability, a description, and compiling a model (no SDK imports)."""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal
from typing import NoReturn
from typing import Protocol
from typing import runtime_checkable

from pytest_ipu.errors import NonFiniteLoss
from pytest_ipu.results.records import Identity
from pytest_ipu.results.records import InstanceInfo

if TYPE_CHECKING:
    from pytest_ipu.devices.inventory import IpuInventory
    from pytest_ipu.results.records import ParityRecord
    from pytest_ipu.results.records import PlacementRecord


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here; when it cannot, ``reason`` says why and how to fix it."""

    ok: bool
    reason: str = ""

    @classmethod
    def yes(cls) -> Availability:
        """Available."""
        return cls(True)

    @classmethod
    def no(cls, reason: str) -> Availability:
        """Not available, because of ``reason`` (which should also say what would fix it)."""
        return cls(False, reason)


class InstanceGroup(Protocol):
    """N independent instances of a compiled model, called together one round at a time."""

    #: Number of instances.
    count: int
    #: ``"threads"`` or ``"processes"``.
    runner: str

    def prepare(self, inputs: Sequence[object]) -> None:
        """Untimed: every instance converts ``inputs`` once (its own ``prepare_inputs``) and keeps them."""

    def round(self) -> None:
        """One call of every instance on its prepared inputs, all at once; returns when all have
        finished. An instance's failure raises ``InstanceError`` naming it, and the group is then
        unusable (only ``close`` works)."""

    def call(self, index: int, inputs: Sequence[object]) -> object:
        """Untimed: instance ``index`` called once on ``inputs``; its outputs (for parity checks). A
        failing call raises ``InstanceError`` and leaves the group usable."""

    def reset_latencies(self) -> None:
        """Forget the call durations recorded so far."""

    def latencies_s(self) -> list[list[float]]:
        """Per instance, the duration (s) of each call ``round`` made since the last reset, timed
        inside the instance around the call only."""

    def compiled_info(self) -> list[InstanceInfo]:
        """Per instance: where it runs and what its compile produced."""

    def device_latencies(self) -> list[Mapping[str, object] | None]:
        """Per instance, the device's own latency counters for its last call
        (``HasDeviceLatency``), or ``None`` where the model has none."""

    def workers_cpu_ns(self) -> int | None:
        """The CPU time, ns, the group's worker processes have used together, as their latest
        replies reported it (no request of its own: cheap enough to read between rounds); ``None``
        where the instances run in this process, whose own clock counts them."""

    def process_ids(self) -> tuple[int, ...]:
        """The processes whose calls run the instances' models: each worker's, or this process's
        where the instances are its threads (gcipuinfo names them as their IPUs' users)."""

    def close(self) -> None:
        """Release everything (idempotent); close errors are raised once, after all is released."""


class LossTrace:
    """The losses of a training step's calls, checked as they come: the first non-finite one raises
    ``NonFiniteLoss`` naming its step. Owned by one compiled training step; not thread-safe."""

    __slots__ = ("first", "last", "steps")

    def __init__(self) -> None:
        self.steps = 0
        self.first: float | None = None
        self.last: float | None = None

    def add(self, loss: float, where: str) -> None:
        """Count one step whose loss was ``loss``; ``where`` names the step's model in the error."""
        self.steps += 1
        if not math.isfinite(loss):
            raise NonFiniteLoss(
                f"pytest-ipu: training step {self.steps} of {where}: the loss is {loss}; nothing after it "
                "can be trusted: lower the learning rate, check the batch for NaN, or train in fp32"
            )
        if self.first is None:
            self.first = loss
        self.last = loss


@dataclass(frozen=True)
class TrainingInfo:
    """What a compiled training step is: how its global batch is made, and its losses so far.

    One call consumes a host batch of ``micro_batch`` x ``gradient_accumulation`` x ``replicas`` x
    ``device_iterations`` samples; ``processes`` such calls (one per data-parallel process) make one
    global batch.
    """

    micro_batch: int
    gradient_accumulation: int
    replicas: int
    device_iterations: int
    processes: int
    optimizer: str
    amp: bool
    mode: str
    losses: LossTrace = field(default_factory=LossTrace)

    @property
    def host_batch(self) -> int:
        """Samples one call of this process consumes."""
        return self.micro_batch * self.gradient_accumulation * self.replicas * self.device_iterations


@dataclass(frozen=True)
class CallCounter:
    """A count the device keeps of each call's work (the IPU's cycles), as a compiled model offers it.

    ``read()`` gives the last call's count; it is called only after a call, outside every timed round
    (``run.benchmark``'s counting pass), because a read may cost a device round trip of its own.
    ``None`` when the counter is off, ``reason`` saying why (the option off, a simulator). ``clock()``
    gives the clock the count ticks at, Hz, and where it was read, or ``None`` and why not;
    ``method`` how the count is read, for the record.
    """

    #: The metric the count feeds (`ipu_cycles`).
    metric: str
    #: The last call's count; `None`: the counter is off.
    read: Callable[[], int] | None
    #: Why the counter is off; `None` when it is on.
    reason: str | None = None
    #: The clock of the count: `(Hz, where it was read)`, or `(None, why not)`.
    clock: Callable[[], tuple[float | None, str]] | None = None
    #: How the count is read, as the record names it: `counting pass` (only there), or how the SDK
    #: reads it otherwise (PopTorch, in every call).
    method: str = "counting pass"


@dataclass(frozen=True)
class CompiledModel(Identity):
    """A model prepared by a backend for one target, ready to be called in timed rounds.

    ``run(*prepared_inputs)`` is one synchronous call: when it returns, the outputs are available where
    ``io`` says (``"host"``: in host memory). ``prepare_inputs`` converts user inputs once, outside
    any timed window (dtype, memory layout, pinned or device memory). ``compile_s`` and
    ``compile_cached`` are filled in by the ``ipu_compile`` fixture, which times the compile. What
    it is (target, backend, device, precision, io) is its ``Identity``, which its records copy.

    This is the core every compiled model has. What only some have is a capability, a protocol
    checked with ``isinstance``: ``HasDeviceLatency`` (the device's own latency counters),
    ``Grouped`` (several instances behind ``run``), ``Trainable`` (a training step). ``parity`` and
    ``placement`` are not abilities of the backend but facts the compile step attaches
    (``run.compiling``, ``placement.plan``), copied into the record as they are.
    """

    run: Callable[..., object]
    prepare_inputs: Callable[[Sequence[object]], tuple[object, ...]]
    close: Callable[[], None]
    options: Mapping[str, object] = field(default_factory=dict)
    #: The backend's own breakdown of its compile step, seconds (e.g. export, session, first_run).
    phases_s: Mapping[str, float] = field(default_factory=dict)
    #: Plain-JSON facts about the compile (e.g. export_cached, onnx_sha256, provider).
    info: Mapping[str, object] = field(default_factory=dict)
    compile_s: float | None = None
    compile_cached: bool = False
    #: The output comparison against the reference, when ``ipu_compile(..., parity=True)`` asked.
    parity: ParityRecord | None = None
    #: Where the model was placed (plain JSON: instances, their IPU ids, replicas, stages, runner),
    #: when the test's marker asked for a placement.
    placement: PlacementRecord | None = None
    #: Whether the device is a simulator (the IPU Model): its timings are not hardware timings.
    simulator: bool = False
    #: The single IPUs the model holds on IPU hardware, ascending, as ``gc-info -l`` and gcipuinfo
    #: number them (every member of a multi-IPU device; every instance's, for a group): what its
    #: energy is measured on. ``None`` off IPU hardware, and where the backend let the SDK choose the
    #: IPUs and cannot tell which it took.
    ipu_ids: tuple[int, ...] | None = None
    #: How many single IPUs the model holds where the backend knows that but not which (PopTorch on
    #: plain ``ipu``: the power of two it reserves). The IPUs gcipuinfo names the model's process as
    #: user of must be exactly that many, or they are not all this model's (``pytest_plugin.session``).
    ipu_count: int | None = None
    #: The counts the device keeps of each call's work (`CallCounter`: the IPU backends' cycle
    #: counter, on or off with its reason); empty for a target that keeps none.
    counters: tuple[CallCounter, ...] = ()

    def __call__(self, *inputs: object) -> object:
        """Prepare ``inputs`` and make one call (untimed convenience; benchmarks use ``run``)."""
        return self.run(*self.prepare_inputs(inputs))


@runtime_checkable
class HasDeviceLatency(Protocol):
    """A compiled model whose device keeps its own latency counters (PopTorch's ``getLatency``)."""

    def device_latency(self) -> Mapping[str, object] | None:
        """The counters for the last call (plain JSON with ``resolution_s``); ``None`` before a
        call or once closed."""


@runtime_checkable
class Grouped(Protocol):
    """A compiled model whose ``run`` is one round of several concurrently running instances: each
    ``run`` is one round in which every instance makes one call."""

    @property
    def group(self) -> InstanceGroup:
        """The instances."""


@runtime_checkable
class Trainable(Protocol):
    """A training step (``ipu_train``): ``run`` makes one optimizer step (``device_iterations`` on an
    IPU) and returns the loss as a float."""

    @property
    def training(self) -> TrainingInfo:
        """Its global batch and losses."""

    def evaluate(self, *inputs: object) -> object:
        """The trained model in evaluation mode: its outputs on the host, without gradients."""


def _required(name: str) -> Callable[[], Any]:
    """The default factory of a dataclass field that must be given although it follows fields with
    defaults (Python 3.8 has no ``kw_only``): leaving it out raises ``TypeError`` naming it, as a
    missing argument does."""

    def missing() -> NoReturn:
        raise TypeError(f"missing required argument: {name!r}")

    return missing


@dataclass(frozen=True)
class CountedModel(CompiledModel):
    """A compiled model with device latency counters (``HasDeviceLatency``)."""

    #: The counters for the last call, as ``HasDeviceLatency.device_latency`` returns them.
    device_latency: Callable[[], Mapping[str, object] | None] = field(
        default_factory=_required("device_latency")
    )


@dataclass(frozen=True)
class GroupedModel(CompiledModel):
    """A compiled model that is a group of instances (``Grouped``), made by ``placement.plan``."""

    group: InstanceGroup = field(default_factory=_required("group"))


@dataclass(frozen=True)
class TrainingStep(CompiledModel):
    """A compiled training step (``Trainable``), made by ``TrainingBackend.compile_training``."""

    training: TrainingInfo = field(default_factory=_required("training"))
    #: ``Trainable.evaluate``: the trained model's outputs on the host, in evaluation mode.
    evaluate: Callable[..., object] = field(default_factory=_required("evaluate"))


@dataclass(frozen=True)
class CountedTrainingStep(TrainingStep, CountedModel):
    """A training step with device latency counters (PopTorch's)."""


class NamedBackend:
    """What every built-in backend reports about itself, fixed when it is made."""

    def __init__(self, name: str, device: str) -> None:
        self._name = name
        self._device = device

    @property
    def name(self) -> str:
        """The registry name, e.g. ``torch`` or ``onnxruntime-trt``."""
        return self._name

    @property
    def device(self) -> str:
        """The device it runs on, e.g. ``cpu``, ``cuda:0`` or ``ipu``."""
        return self._device


class Backend(Protocol):
    """A runtime that compiles and runs models on one device (torch, onnxruntime, poptorch, ...).

    Implementations import their runtime lazily, inside these methods, so that importing
    pytest-ipu never imports an SDK. Backends run models; they never time anything.
    """

    @property
    def name(self) -> str:
        """The registry name, e.g. ``torch``."""

    @property
    def device(self) -> str:
        """The device the backend runs on, e.g. ``cpu`` or ``cuda:0``."""

    def availability(self) -> Availability:
        """Whether the runtime and the device are present; never raises."""

    def describe(self) -> dict[str, Any]:
        """Versions and device facts for ``machine_info["ipu"]`` (plain JSON values only)."""

    def default_precision(self) -> str:
        """The precision ``auto`` means on this device (``fp32``, ``fp16`` or ``bf16``)."""

    def shape_specialized(self, options: Mapping[str, object]) -> bool:
        """Whether a compiled model is tied to its example inputs' shapes (then each shape compiles)."""

    def compile(
        self,
        model: object,
        example_inputs: Sequence[object],
        precision: str,
        options: Mapping[str, object],
    ) -> CompiledModel:
        """Prepare ``model`` to run; raise ``CompileError`` naming the model and the reason."""


@runtime_checkable
class PlacedBackend(Backend, Protocol):
    """A backend whose models placement can spread over several devices (the IPU backends).

    ``ipu_compile`` and the ``ipu_placement`` fixture check for this protocol (``isinstance``), never
    for single members. A backend without it runs ``instances=N`` copies side by side on its one
    device, and cannot take replicas or pipeline stages.
    """

    #: How concurrent instances run: ``"threads"`` in this process (calls release the GIL) or
    #: ``"processes"``, one worker each (calls hold the GIL); the latter needs ``WorkerBackend``.
    concurrency: Literal["threads", "processes"]
    #: Whether a compiled model holds its devices until closed (an IPU executable stays attached),
    #: so that the run's other cached models must be closed before another compiles.
    exclusive_device: bool

    def inventory(self) -> IpuInventory | str:
        """The devices present, or why there are none (a message naming the fix)."""

    def placement_options(self, replicas: int, stages: int) -> dict[str, object]:
        """The backend options that give one model ``replicas`` replicas and ``stages`` stages."""


@runtime_checkable
class WorkerBackend(PlacedBackend, Protocol):
    """A placed backend whose instances run in worker processes: it can be rebuilt in one."""

    def worker_factory(self) -> Callable[[], Backend]:
        """A picklable callable that makes an equal backend in a worker process."""


@dataclass(frozen=True)
class TrainingRequest:
    """What ``ipu_train`` asks of a backend: the loss, the optimizer, and how batches are split.

    ``loss(outputs, *targets)`` returns a scalar; ``optimizer(parameters)`` makes the optimizer; the
    first ``inputs`` elements of a batch go to the model and the rest to the loss.
    ``process_group`` is the torch.distributed group to average gradients over (``None``: this
    process alone) and ``processes`` its size.
    """

    loss: Callable[..., Any]
    optimizer: Callable[[Any], Any]
    inputs: int = 1
    gradient_accumulation: int = 1
    process_group: Any = None
    processes: int = 1


@runtime_checkable
class TrainingBackend(Backend, Protocol):
    """A backend that can compile a training step (torch, PopTorch)."""

    def compile_training(
        self,
        model: object,
        example_batch: Sequence[object],
        precision: str,
        options: Mapping[str, object],
        request: TrainingRequest,
    ) -> TrainingStep:
        """A training step whose ``run`` makes one optimizer step on a prepared batch and returns the
        loss as a float (``Trainable``); raise ``CompileError`` naming the model and the reason."""
