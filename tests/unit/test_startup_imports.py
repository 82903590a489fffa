"""What pytest-ipu loads in every pytest run of a project that has it installed: only the glue that
pytest_addoption and pytest_configure need, never a runtime, the records or the device modules.

Behaviour, not time (the start-up time is measured by benchmarks/test_startup_cost.py): a fresh
interpreter runs a trivial test file with the plugin, and the test itself reports which modules
were loaded by then.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: Modules a run that uses no pytest-ipu fixture must not load: the heavy part of pytest-ipu
#: (records, backends' protocol, devices, power, measurement, results, reports) and the runtimes.
FORBIDDEN_PREFIXES = (
    "numpy",
    "torch",
    "onnxruntime",
    "pytest_ipu.results",
    "pytest_ipu.backends.base",
    "pytest_ipu.devices",
    "pytest_ipu.power",
    # measure.units may load (the options' defaults such as '5%' are parsed by it); not the rest.
    "pytest_ipu.measure.metrics",
    "pytest_ipu.measure.contention",
    "pytest_ipu.measure.stats",
    "pytest_ipu.measure.timing",
    "pytest_ipu.report",
    "pytest_ipu.placement.poprun",
    "pytest_ipu.loadgen",
)

TEST = """
import json, sys

def test_trivial():
    loaded = sorted(m for m in sys.modules if m.startswith(("pytest_ipu", "numpy", "torch", "onnxruntime")))
    with open("loaded.json", "w") as f:
        json.dump(loaded, f)
"""


def test_a_run_without_benchmarks_loads_only_the_glue(tmp_path: Path) -> None:
    (tmp_path / "test_trivial.py").write_text(TEST)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "test_trivial.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    loaded = json.loads((tmp_path / "loaded.json").read_text())
    assert "pytest_ipu.pytest_plugin.plugin" in loaded  # the plugin did load
    heavy = [m for m in loaded if m.startswith(FORBIDDEN_PREFIXES)]
    assert heavy == []
