"""A runtime-free backend that worker processes can rebuild: it pickles, compiles by sleeping, and runs
numpy arithmetic, so that tests of ``pytest_ipu.placement.instances`` start workers without importing torch.

``FakeBackend(compile_s=..., run_s=..., fail=..., fail_on_calls=..., close_marker=...)`` is built by
the worker through ``functools.partial(FakeBackend, ...)``, which pickles by reference to this module.

``meet_dir`` and ``meet_count`` make workers prove that they run at the same time, whatever the
machine's load: at the end of its compile, and in each call listed in ``meet_on_calls``, a worker
leaves a file in ``meet_dir`` and waits until ``meet_count`` workers have left theirs, a barrier
between processes. Run one after the other, they would never all arrive, and the wait fails after
``MEET_TIMEOUT_S`` (a guard against a hang, not a bound on speed).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pytest_ipu.backends.base import Availability
from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.base import NamedBackend
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import CompileError

#: How long a worker waits at a meeting point for the others before it gives up (a hang guard).
MEET_TIMEOUT_S = 120.0


def meet(directory: str, point: str, name: str, count: int, error: Callable[[str], Exception]) -> None:
    """Arrive at meeting point ``point`` as ``name`` and wait until ``count`` parties have arrived."""
    folder = Path(directory)
    (folder / f"{point}.{name}").write_text(str(os.getpid()))
    deadline = time.monotonic() + MEET_TIMEOUT_S
    while len(list(folder.glob(f"{point}.*"))) < count:
        if time.monotonic() > deadline:
            arrived = sorted(p.name for p in folder.glob(f"{point}.*"))
            raise error(
                f"{name} waited {MEET_TIMEOUT_S:g} s at {point!r} for {count} parties; only {arrived} came"
            )
        time.sleep(0.002)


class Doubler:
    """The model: ``run`` returns every input times ``factor``."""

    def __init__(self, factor: float = 2.0) -> None:
        self.factor = factor


class FakeBackend(NamedBackend):
    """Compiles a ``Doubler`` after sleeping ``compile_s``; each call sleeps ``run_s`` (releasing the
    GIL, as a device call would).

    ``fail``: ``"compile"`` raises ``CompileError`` and ``"unavailable"`` ``BackendUnavailable`` from
    ``compile``; ``"close"`` makes the compiled model's ``close`` raise. ``fail_on_calls``: the calls
    (counted from 1) that raise ``ValueError``. ``close_marker``: a file that ``close`` creates, so
    that a test can see that a worker closed its model. ``compiled_marker``: a file that ``compile``
    creates once its sleep is over, so that a test can see that a compile ran to its end.
    ``meet_dir``, ``meet_count`` and ``meet_on_calls``: the barrier of the module docstring.
    ``burn_cpu_s``: each call also spins until its process has spent that much more CPU time (a
    host-bound call: the CPU time is certain however loaded the machine, only its wall time varies).
    """

    def __init__(
        self,
        name: str = "fake",
        device: str = "cpu",
        *,
        compile_s: float = 0.0,
        run_s: float = 0.0,
        fail: str | None = None,
        fail_on_calls: tuple[int, ...] = (),
        close_marker: str | None = None,
        compiled_marker: str | None = None,
        meet_dir: str | None = None,
        meet_count: int = 0,
        meet_on_calls: tuple[int, ...] = (),
        burn_cpu_s: float = 0.0,
    ) -> None:
        super().__init__(name, device)
        self.compile_s = compile_s
        self.run_s = run_s
        self.fail = fail
        self.fail_on_calls = fail_on_calls
        self.close_marker = close_marker
        self.compiled_marker = compiled_marker
        self.meet_dir = meet_dir
        self.meet_count = meet_count
        self.meet_on_calls = meet_on_calls
        self.burn_cpu_s = burn_cpu_s

    def availability(self) -> Availability:
        """Always available."""
        return Availability.yes()

    def describe(self) -> dict[str, Any]:
        """Its name and device."""
        return {"backend": self.name, "device": self.device}

    def default_precision(self) -> str:
        """fp32."""
        return "fp32"

    def shape_specialized(self, options: Mapping[str, object]) -> bool:
        """Not tied to shapes."""
        return False

    def compile(
        self,
        model: object,
        example_inputs: Sequence[object],
        precision: str,
        options: Mapping[str, object],
    ) -> CompiledModel:
        """Sleep ``compile_s`` (recording when, on the system-wide monotonic clock), meet the other
        workers if asked to, then fail as ``fail`` says or return a compiled ``Doubler``."""
        started_ns = time.monotonic_ns()
        time.sleep(self.compile_s)
        if self.compiled_marker is not None:
            Path(self.compiled_marker).write_text(str(os.getpid()))
        if self.meet_dir is not None:
            meet(self.meet_dir, "compile", self.device, self.meet_count, CompileError)
        if self.fail == "compile":
            raise CompileError(f"fake compile of {type(model).__name__} failed on {self.device}")
        if self.fail == "unavailable":
            raise BackendUnavailable(f"fake device {self.device} is busy; free it")
        assert isinstance(model, Doubler), model
        factor = model.factor
        calls = [0]
        run_s = self.run_s
        burn_ns = int(self.burn_cpu_s * 1e9)
        fail_on_calls = self.fail_on_calls
        fail_close = self.fail == "close"
        marker = self.close_marker
        meet_dir, meet_count, meet_on_calls, device = (
            self.meet_dir,
            self.meet_count,
            self.meet_on_calls,
            self.device,
        )

        def prepare_inputs(inputs: Sequence[object]) -> tuple[object, ...]:
            return tuple(np.asarray(x, dtype=np.float32) for x in inputs)

        def run(*inputs: Any) -> tuple[Any, ...]:
            calls[0] += 1
            if meet_dir is not None and calls[0] in meet_on_calls:
                meet(meet_dir, f"call{calls[0]}", device, meet_count, TimeoutError)
            time.sleep(run_s)
            if burn_ns:
                end = time.process_time_ns() + burn_ns
                while time.process_time_ns() < end:
                    pass
            if calls[0] in fail_on_calls:
                raise ValueError(f"fake run failed on call {calls[0]}")
            return tuple(x * factor for x in inputs)

        def close() -> None:
            if marker is not None:
                Path(marker).write_text(str(os.getpid()))
            if fail_close:
                raise RuntimeError("fake close failed")

        return CompiledModel(
            target=f"{self.name}:{self.device}",
            backend=self.name,
            device=self.device,
            device_name="Fake device",
            precision=precision,
            io="host",
            run=run,
            prepare_inputs=prepare_inputs,
            close=close,
            phases_s={"sleep": self.compile_s},
            info={"pid": os.getpid(), "compile_start_ns": started_ns, "compile_end_ns": time.monotonic_ns()},
        )
