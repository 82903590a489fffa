"""What the installed torch can do, read from its version without importing it, for skips of tests
of features an older torch lacks (``make test-floor`` runs the suite with torch 2.0.1, the torch
PopTorch 3.4 asserts, on Python 3.8).

Without importing torch: some test modules must not import it in the pytest process (see
tests/plugin/test_onnx_plugin.py). Each skip names the torch version the feature needs.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys

import pytest

#: The first torch whose ``torch.onnx.export`` has the dynamo exporter (``dynamo=True``).
DYNAMO_EXPORTER = (2, 5)
#: The first torch whose ``torch.compile`` runs on Python 3.11 (torch 2.0 refuses it there).
COMPILE_ON_PYTHON_3_11 = (2, 1)


def torch_version() -> tuple[int, int] | None:
    """The installed torch's (major, minor), or None when torch is not installed."""
    try:
        text = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    match = re.match(r"(\d+)\.(\d+)", text)
    if match is None:
        raise ValueError(f"torch's installed version {text!r} does not start with major.minor")
    return int(match.group(1)), int(match.group(2))


def has_dynamo_exporter() -> bool:
    """Whether the installed torch exports ONNX with its dynamo exporter (torch 2.5 and later)."""
    version = torch_version()
    return version is not None and version >= DYNAMO_EXPORTER


def onnx_export_modules() -> tuple[str, ...]:
    """The modules an ONNX export and run needs here: onnxscript only where torch exports with its
    dynamo exporter (torch 2.5 and later); torch 2.0.1's TorchScript exporter does without it."""
    return ("torch", "onnx", "onnxruntime", *(("onnxscript",) if has_dynamo_exporter() else ()))


def compiles_here() -> bool:
    """Whether the installed torch's ``torch.compile`` runs on this Python."""
    version = torch_version()
    return version is not None and (sys.version_info < (3, 11) or version >= COMPILE_ON_PYTHON_3_11)


def cpu_runs_fp16() -> bool:
    """Whether the installed torch has fp16 matmuls and convolutions on the CPU (torch 2.0 has
    neither). Imports torch: only for modules that import it anyway."""
    import torch

    half = torch.float16
    try:
        torch.nn.functional.linear(torch.ones(1, 2, dtype=half), torch.ones(2, 2, dtype=half))
        torch.nn.functional.conv2d(torch.ones(1, 1, 3, 3, dtype=half), torch.ones(1, 1, 1, 1, dtype=half))
    except RuntimeError:
        return False
    return True


#: Why a test of fp16 on the CPU is skipped where ``cpu_runs_fp16()`` is False.
NO_CPU_FP16 = "needs torch >= 2.1: torch 2.0 has no fp16 matmul or convolution on the CPU"

#: For tests where torch refuses ``set_num_interop_threads`` with a RuntimeError once the count can no
#: longer change: torch 2.0 aborts the whole process instead (an uncatchable C++ error).
needs_catchable_interop_refusal = pytest.mark.skipif(
    (torch_version() or (2, 1)) < (2, 1),
    reason="needs torch >= 2.1: torch 2.0 aborts the process, instead of raising, when "
    "set_num_interop_threads comes too late",
)

#: For tests that run ``torch.compile``.
needs_torch_compile = pytest.mark.skipif(
    not compiles_here(),
    reason="needs torch >= 2.1 on Python 3.11 (torch.compile); this torch refuses to compile here",
)


def torchscript_exporter() -> dict[str, bool]:
    """The argument of ``torch.onnx.export`` that picks its TorchScript exporter: ``dynamo=False``
    where the export has the dynamo one (torch 2.5 on; its default from torch 2.9), nothing before
    (torch 2.0.1's export has no ``dynamo`` argument and raises a TypeError for one)."""
    return {"dynamo": False} if has_dynamo_exporter() else {}
