"""What every backend provides: availability, a description, and compiling a model (no SDK imports)."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol

from pytest_ipu.backends.parity import Parity
from pytest_ipu.errors import CompileError

if TYPE_CHECKING:
    from pytest_ipu.placement.instances import InstanceGroup


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


@dataclass(frozen=True)
class CompiledModel:
    """A model prepared by a backend for one target, ready to be called in timed rounds.

    ``run(*prepared_inputs)`` is one synchronous call: when it returns, the outputs are available where
    ``io`` says (``"host"``: in host memory). ``prepare_inputs`` converts user inputs once, outside
    any timed window (dtype, memory layout, pinned or device memory). ``compile_s`` and
    ``compile_cached`` are filled in by the ``ipu_compile`` fixture, which times the compile.
    """

    target: str
    backend: str
    device: str
    device_name: str
    precision: str
    io: str
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
    parity: Parity | None = None
    #: The device's own latency counters for the last call (plain JSON with ``resolution_s``), for
    #: backends that have them (PopTorch's ``getLatency``); ``None`` when the backend has none.
    device_latency: Callable[[], Mapping[str, object] | None] | None = None
    #: Where the model was placed (plain JSON: instances, their IPU ids, replicas, stages, runner),
    #: when the test's marker asked for a placement.
    placement: Mapping[str, object] | None = None
    #: The concurrently running instances behind ``run`` when the placement has more than one:
    #: each ``run`` is one round in which every instance makes one call.
    group: InstanceGroup | None = None
    #: Whether the device is a simulator (the IPU Model): its timings are not hardware timings.
    simulator: bool = False


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


def merge_options(
    backend: str, defaults: Mapping[str, object], given: Mapping[str, object], model: str
) -> dict[str, object]:
    """``defaults`` overlaid with ``given``; an unknown option is a ``CompileError`` naming it, the
    model and the options the backend allows."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise CompileError(
            f"unknown {backend} backend option(s) {', '.join(map(repr, unknown))} for {model}; "
            f"allowed: {', '.join(defaults)}"
        )
    return {**defaults, **given}


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
