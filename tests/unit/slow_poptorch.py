"""The PopTorch backend over the fake PopTorch, with calls that hold the GIL long enough to see, and
each call's GIL-holding span written down where the test can read it, from any process.

``SlowPopTorch(spans_dir, call_s)`` configures the fake's simulated device time to ``call_s`` in
whichever process it is built (a worker process imports the fake afresh) and appends each call's
span, as ``time.monotonic_ns`` values (one clock for every process on Linux), to a file of its
device and process in ``spans_dir``. Its worker factory rebuilds it with the same arguments, so
instance groups in worker processes record their calls too.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path

import torch

from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.ipu.poptorch import PopTorchBackend
from tests.fakes import fake_poptorch


class SlowPopTorch(PopTorchBackend):
    """``PopTorchBackend`` over ``fake_poptorch`` whose calls hold the GIL ``call_s`` each, recorded."""

    def __init__(self, spans_dir: str, call_s: float, name: str = "poptorch", device: str | None = None):
        fake_poptorch.configure(call_s=call_s)
        super().__init__(name, device, poptorch_module=fake_poptorch, torch_module=torch)
        self.spans_dir = spans_dir
        self.call_s = call_s

    def worker_factory(self) -> Callable[[], PopTorchBackend]:
        """Rebuilds this backend, spans directory and call time included, in a worker process."""
        return functools.partial(SlowPopTorch, self.spans_dir, self.call_s, self.name, self.device)

    def compile(
        self,
        model: object,
        example_inputs: Sequence[object],
        precision: str,
        options: Mapping[str, object],
    ) -> CompiledModel:
        """The fake's compiled model, whose ``run`` appends each call's span to this process's file."""
        compiled = super().compile(model, example_inputs, precision, options)
        executor = fake_poptorch.executors[-1]
        path = Path(self.spans_dir) / f"{self.device.replace(':', '_')}.{os.getpid()}.spans"
        run = compiled.run

        def recorded(*args: object) -> object:
            out = run(*args)
            start, end = executor.device_spans[-1]
            with path.open("a", encoding="utf-8") as spans:
                spans.write(f"{start} {end}\n")
            return out

        return dataclasses.replace(compiled, run=recorded)


def read_spans(spans_dir: Path) -> dict[str, list[tuple[int, int]]]:
    """The spans recorded by each device and process, by file name (``ipu_0.<pid>.spans``), in call order."""
    out: dict[str, list[tuple[int, int]]] = {}
    for path in sorted(spans_dir.glob("*.spans")):
        spans = []
        for line in path.read_text(encoding="utf-8").splitlines():
            start, end = line.split()
            spans.append((int(start), int(end)))
        out[path.name] = spans
    return out
