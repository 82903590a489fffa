"""Print the pins of the Poplar SDK 3.4's Python environment, for ``make test-sdk-env``.

The SDK decides two of them: PopTorch 3.4 asserts ``torch==2.0.1`` when it is imported, and PopART
3.4 pins numpy 1.x. The SDK's own wheels are built for Python 3.8 (Ubuntu 20.04, cp38) while
pytest-ipu needs Python >= 3.11, so this environment holds the SDK's pins as far as they exist for
Python 3.11, not the SDK itself; docs/ipu.md ("The SDK's environment") says what that checks.

This file is the one place of those pins. The test tools (pytest, pytest-benchmark, hypothesis,
pytest-xdist) have nothing to do with the SDK: they come from pyproject.toml's dev extra at its pins,
the one place of the development versions, so both environments run the suite with the same tools.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

# Run as a script (``python tests/sdk_env_pins.py``) or imported from the suite (``tests.``).
try:
    from floor_pins import floor_pins
except ImportError:
    from tests.floor_pins import floor_pins

#: The SDK's pins where they exist for Python 3.11, and the versions that work with them.
SDK_PINS = (
    # Exact: PopTorch 3.4 asserts it at import (poptorch python/__init__.py:20-23, the version from
    # CMakeLists.txt:30 ``set(TORCH_VERSION 2.0.1)``; requirements.txt:5 ``torch==2.0.1``). From the
    # package registry this is the CUDA build with nvidia wheels (about 4.4 GB).
    "torch==2.0.1",
    # PopART 3.4 pins numpy==1.22.3 (popart requirements/run.txt), which has no Python 3.11 wheel
    # (numpy's first are 1.23.2). pytest-ipu's own floor, 1.24.2, is the nearest 1.x that pytest-ipu
    # supports; numpy 2 cannot be used by torch 2.0.1, which was built against numpy 1.x.
    "numpy==1.24.2",
    # PopART pins protobuf==3.17.3 for its C++ build (requirements/build.txt:23) and its Python
    # imports neither protobuf nor onnx, so neither is the SDK's: the lowest the onnx below accepts.
    "protobuf==3.20.3",
    # PopART does not pin the Python onnx package (it builds the ONNX C++ library 1.6.0). pytest-ipu
    # reads exported files with it; its declared floor, the oldest it supports, which takes numpy 1.x.
    "onnx==1.17.0",
    # ONNX Runtime at pytest-ipu's declared floor: built against numpy 1.x, so it runs with the above.
    "onnxruntime==1.18.0",
    # `pytest-ipu report`'s plots, at pytest-ipu's declared floor (it takes numpy 1.x).
    "matplotlib==3.10.7",
)
#: Test tools taken from the dev extra at its pins.
TEST_TOOLS = ("pytest", "pytest-benchmark", "hypothesis", "pytest-xdist")
#: pytest-ipu's extras that an SDK user installs beside the SDK, at pytest-ipu's declared floors
#: (tests/floor_pins.py reads them from pyproject.toml): MLPerf's LoadGen needs neither torch nor
#: numpy, so the SDK constrains it in nothing, and ``ipu_loadgen`` is then tested with the SDK's torch.
FLOOR_EXTRAS = ("mlcommons-loadgen",)


def sdk_env_pins(pyproject: Path) -> list[str]:
    """The ``name==version`` lines: the SDK environment's pins, then the test tools' dev pins."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    dev = {re.split(r"[=<>\[ ]", r, maxsplit=1)[0]: r for r in project["optional-dependencies"]["dev"]}
    missing = [tool for tool in TEST_TOOLS if tool not in dev]
    if missing:
        raise SystemExit(f"{pyproject}: the dev extra pins no {', '.join(missing)}; add it there")
    floors = {re.split(r"==", pin, maxsplit=1)[0]: pin for pin in floor_pins(pyproject)}
    return [*SDK_PINS, *(floors[name] for name in FLOOR_EXTRAS), *(dev[tool] for tool in TEST_TOOLS)]


if __name__ == "__main__":
    print("\n".join(sdk_env_pins(Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml"))))
