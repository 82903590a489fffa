"""pytest-ipu: benchmark deep-learning models on Graphcore IPUs, NVIDIA GPUs and CPUs with pytest.

Importing this package imports no runtime (torch, poptorch, popart, onnxruntime): each backend
imports its own, lazily, when it is selected.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version

try:
    __version__ = version("pytest-ipu")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
