"""Loading pytest-ipu imports no deep-learning runtime: ``pytest --help`` and benchmarks of plain callables
work on machines without one, and cost no runtime start-up where they have one.

Each check is a fresh interpreter (this process may have imported anything by now).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pytest_ipu.backports import remove_prefix

HEAVY = ("torch", "poptorch", "popart", "onnxruntime", "onnx", "pynvml", "matplotlib")

REPORT = f"""
import json, sys
heavy = [m for m in {HEAVY!r} if m in sys.modules]
sys.stderr.write("\\nIMPORTED=" + json.dumps(heavy) + "\\n")
"""


def _python(code: str, cwd: Path) -> tuple[int, str, list[str]]:
    """Run ``python -c code``; return its exit code, stdout, and the heavy modules it reported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    proc = subprocess.run(
        [sys.executable, "-c", code + REPORT],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    marker = [line for line in proc.stderr.splitlines() if line.startswith("IMPORTED=")]
    assert len(marker) == 1, proc.stderr
    return proc.returncode, proc.stdout, json.loads(remove_prefix(marker[0], "IMPORTED="))


def test_importing_the_plugin_imports_no_runtime(tmp_path: Path) -> None:
    code = (
        "import pytest_ipu.cli.main\n"
        "from pytest_ipu.pytest_plugin import plugin, session\n"
        "from pytest_ipu.pytest_plugin.fixtures import benchmark\n"
        "import pytest_ipu.backends, pytest_ipu.backends.torch\n"  # the torch backend imports torch lazily
        "assert plugin.ipu_benchmark is benchmark.ipu_benchmark\n"
    )
    ret, _, imported = _python(code, tmp_path)
    assert ret == 0
    assert imported == []


def test_pytest_help_imports_no_runtime(tmp_path: Path) -> None:
    code = "import pytest\nret = pytest.main(['--help', '-p', 'no:cacheprovider'])\nassert ret == 0, ret\n"
    ret, stdout, imported = _python(code, tmp_path)
    assert ret == 0
    assert "  --ipu-backend=TARGETS" in stdout, "the plugin was not loaded"
    assert imported == []


def test_benchmarking_a_plain_callable_imports_no_runtime(tmp_path: Path) -> None:
    """Only a test that needs a backend makes one: a callable's benchmark leaves torch unimported, even
    with ``--ipu-backend=auto`` (the default), which probes the torch targets when it is used."""
    (tmp_path / "test_plain.py").write_text(
        "def test_plain(ipu_benchmark, ipu_settings):\n"
        "    record = ipu_benchmark(lambda: sum(range(10)))\n"
        "    assert record.target == 'python:host'\n"
        "    assert ipu_settings.targets == ()\n"
    )
    code = (
        "import pytest\n"
        "ret = pytest.main(['-q', '-p', 'no:cacheprovider', '--ipu-rounds=3', '--benchmark-json=out.json',"
        " 'test_plain.py'])\n"
        "assert ret == 0, ret\n"
    )
    ret, stdout, imported = _python(code, tmp_path)
    assert ret == 0, stdout
    assert imported == []
    data = json.loads((tmp_path / "out.json").read_text())
    record = data["benchmarks"][0]["extra_info"]["ipu"]
    # 3 rounds in each of the 3 repeats a benchmark gets by default.
    assert (record["rounds"], [r["rounds"] for r in record["repeats"]]) == (9, [3, 3, 3])
    assert data["machine_info"]["ipu"]["backends"] == {}
