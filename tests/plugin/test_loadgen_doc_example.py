"""docs/loadgen.md's first example, as a user copies it: the MLP served as SingleStream and Offline,
and its peak Server QPS, on torch on the CPU. A subprocess run (it imports torch). The example runs
unchanged; a conftest beside it shortens LoadGen's default run length (``SHORT_DURATION_S``), which
nothing here reads: the test checks what the runs record, not how long they last."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "loadgen.md"


def doc_example() -> str:
    """The page's first python block."""
    match = re.search(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    assert match, "docs/loadgen.md has no python block"
    return match.group(1)


#: Beside the example: each LoadGen run (and each probe of the peak search) a quarter of a second
#: instead of two. The names are checked first, so that a renamed constant fails here, loudly.
SHORTER_RUNS = """
from pytest_ipu.loadgen import scenario, settings

assert settings.SHORT_DURATION_S == scenario.SHORT_DURATION_S
settings.SHORT_DURATION_S = scenario.SHORT_DURATION_S = 0.25
"""


def test_the_first_example_runs_as_written(tmp_path: Path) -> None:
    for module in ("torch", "mlperf_loadgen"):
        # Looked up, not imported: the run imports them in its own process.
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"the example needs {module}")
    (tmp_path / "test_served.py").write_text(doc_example(), encoding="utf-8")
    (tmp_path / "conftest.py").write_text(SHORTER_RUNS, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTEST_ADDOPTS="-p no:cacheprovider -p no:hypothesispytest", OMP_NUM_THREADS="1")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "test_served.py",
            "--ipu-backend=torch:cpu",
            "--ipu-torch-threads=1",
            "--benchmark-json=out.json",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    benchmarks = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["benchmarks"]
    scenarios = sorted(b["extra_info"]["ipu"]["loadgen"]["scenario"] for b in benchmarks)
    assert scenarios == ["Offline", "Server", "SingleStream"]
    (server,) = (b["extra_info"]["ipu"]["loadgen"] for b in benchmarks if "peak" in b["name"])
    assert 1 <= len(server["peak"]["probes"]) <= 10
    assert "LoadGen (MLPerf LoadGen's verdict and figures" in result.stdout
