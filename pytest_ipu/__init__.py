"""pytest-ipu: benchmark deep-learning models on Graphcore IPUs, NVIDIA GPUs and CPUs with pytest.

Importing this package imports no runtime (torch, poptorch, popart, onnxruntime): each backend
imports its own, lazily, when it is selected.
"""

from __future__ import annotations

from typing import Any

__all__ = ["__version__"]

__version__: str


def __getattr__(name: str) -> Any:
    # Read from the installed metadata when first asked for: every pytest run imports this package,
    # and reading the metadata loads the email parser (benchmarks/test_startup_cost.py).
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version

    try:
        found = version("pytest-ipu")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found
