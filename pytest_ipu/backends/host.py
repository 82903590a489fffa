"""The host itself as a target: the CPU's name, and a plain callable wrapped as a compiled model."""

from __future__ import annotations

import platform
from collections.abc import Callable
from pathlib import Path

from pytest_ipu.backends.base import CompiledModel


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU model name from /proc/cpuinfo where there is one, else what ``platform`` says."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def wrap_callable(fn: Callable[..., object]) -> CompiledModel:
    """A plain callable, measured as it is: host CPU, no compile step, inputs passed unchanged."""
    if not callable(fn):
        raise TypeError(f"ipu_benchmark needs a CompiledModel or a callable, got {type(fn).__name__}")
    return CompiledModel(
        target="python:host",
        backend="python",
        device="host",
        device_name=cpu_name(),
        precision="n/a",
        io="host",
        run=fn,
        prepare_inputs=tuple,
        close=lambda: None,
        options={"callable": getattr(fn, "__qualname__", repr(fn))},
    )
