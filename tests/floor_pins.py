"""Print the declared floors of pytest-ipu's dependencies as exact pins, for ``make test-floor``.

Every ``name>=X`` of ``[project] dependencies`` and of the runtime extras (torch, onnx, nvidia,
report) becomes ``name==X``; the dev extra adds the test tools the suite needs (hypothesis) at
their dev pins. One source of truth: the floors are those pyproject.toml declares.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

EXTRAS = ("torch", "onnx", "nvidia", "report", "loadgen")
#: Test tools taken from the dev extra at its pins (not floors of pytest-ipu's own ranges).
TEST_TOOLS = ("hypothesis",)


def floor_pins(pyproject: Path) -> list[str]:
    """The ``name==floor`` lines, one per package, in a stable order."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    wanted = list(project["dependencies"])
    for extra in EXTRAS:
        wanted += project["optional-dependencies"][extra]
    pins: dict[str, str] = {}
    for requirement in wanted:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][^,;\s]*)\s*", requirement)
        if match is None:
            raise SystemExit(f"{pyproject}: {requirement!r} has no plain '>=' floor to test")
        name, floor = match.groups()
        # A package in several extras keeps its highest floor: that is what installs them together.
        if name not in pins or _version(floor) > _version(pins[name]):
            pins[name] = floor
    dev = {re.split(r"[=<>]", r, maxsplit=1)[0]: r for r in project["optional-dependencies"]["dev"]}
    return [f"{name}=={floor}" for name, floor in pins.items()] + [dev[tool] for tool in TEST_TOOLS]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


if __name__ == "__main__":
    print("\n".join(floor_pins(Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml"))))
