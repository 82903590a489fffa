"""A runtime-free backend that worker processes can rebuild: it pickles, compiles by sleeping, and runs
numpy arithmetic, so that tests of ``pytest_ipu.placement.instances`` start workers without importing torch.

``FakeBackend(compile_s=..., run_s=..., fail=..., fail_on_calls=..., close_marker=...)`` is built by
the worker through ``functools.partial(FakeBackend, ...)``, which pickles by reference to this module.
"""

from __future__ import annotations

import os
import time
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
    that a test can see that a worker closed its model.
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
    ) -> None:
        super().__init__(name, device)
        self.compile_s = compile_s
        self.run_s = run_s
        self.fail = fail
        self.fail_on_calls = fail_on_calls
        self.close_marker = close_marker

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
        """Sleep ``compile_s`` (recording when, on the system-wide monotonic clock), then fail as
        ``fail`` says or return a compiled ``Doubler``."""
        started_ns = time.monotonic_ns()
        time.sleep(self.compile_s)
        if self.fail == "compile":
            raise CompileError(f"fake compile of {type(model).__name__} failed on {self.device}")
        if self.fail == "unavailable":
            raise BackendUnavailable(f"fake device {self.device} is busy; free it")
        assert isinstance(model, Doubler), model
        factor = model.factor
        calls = [0]
        run_s = self.run_s
        fail_on_calls = self.fail_on_calls
        fail_close = self.fail == "close"
        marker = self.close_marker

        def prepare_inputs(inputs: Sequence[object]) -> tuple[object, ...]:
            return tuple(np.asarray(x, dtype=np.float32) for x in inputs)

        def run(*inputs: Any) -> tuple[Any, ...]:
            calls[0] += 1
            time.sleep(run_s)
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
