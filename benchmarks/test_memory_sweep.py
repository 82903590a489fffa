"""Memory across a parameter sweep: a sweep that builds a new model per parameter must not grow.

A 20-parameter sweep of a ~17 MB torch model (``nn.Sequential`` of four ``Linear(1024, 1024)``,
16.8 MB in fp32), built anew for each parameter, is compiled with ``ipu_compile`` and measured with
``ipu_benchmark`` (a few rounds, one repeat) in an inner ``python -m pytest`` of its own. Its
conftest writes the process's resident set size (``VmRSS``) after each test has finished, teardown
included. The end of ``make bench`` prints the first and last RSS and their ratio against the target,
"flat within 5 % over 20 tests": a compile cache that kept every test's model and its compiled copy
until the run ends grew by about twice the model per test (issue 12).

The verdict is on a run with glibc's mmap threshold fixed (``MALLOC_MMAP_THRESHOLD_``), so that each
freed 4 MB weight buffer goes back to the system and RSS tracks what the run still holds. By default
glibc raises the threshold after the first large free, and later buffers come from a heap that keeps
freed memory: RSS then steps up once after the first test and wanders within about one model's size,
which says more about the allocator than about the run. That run is printed too, for reference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.conftest import other_plugins_off

#: Tests in the sweep, and the target: the last RSS at most this much above the first.
SWEEP = 20
MAX_GROWTH = 0.05
#: glibc's default mmap threshold (128 KiB), fixed: setting it disables the dynamic raise.
FIXED_MMAP_THRESHOLD = {"MALLOC_MMAP_THRESHOLD_": "131072"}
SECTION = "memory across a sweep (new ~17 MB model per test, RSS after each test)"

_CONFTEST = """
from pathlib import Path


def _rss_kib():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    import resource  # no /proc: the peak, which can only grow, is the best there is

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def pytest_runtest_logfinish(nodeid, location):
    # After the item's teardown: what the run holds on to once the test is over.
    with open("rss.jsonl", "a") as out:
        out.write('{"nodeid": "%s", "rss_kib": %d}\\n' % (nodeid, _rss_kib()))
"""

_TEST = """
import pytest
import torch


@pytest.mark.parametrize("param", range(SWEEP))
def test_sweep(ipu_compile, ipu_benchmark, param):
    torch.manual_seed(param)
    # Built anew for each parameter, as a sweep over model variants does.
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).eval()
    x = torch.randn(2, 1024)
    compiled = ipu_compile(model, (x,))
    record = ipu_benchmark(compiled, (x,), rounds=3, warmup_rounds=1)
    assert record.throughput_items_per_s > 0
""".replace("SWEEP", str(SWEEP))


def _env() -> dict[str, str]:
    # The user's pytest options must not leak into the measured run.
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_ADDOPTS", "PYTEST_IPU_"))}


def _sweep_rss(project: Path, allocator_env: dict[str, str]) -> list[int]:
    project.mkdir()
    (project / "conftest.py").write_text(_CONFTEST)
    (project / "test_sweep.py").write_text(_TEST)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--ipu-backend=torch:cpu",
            "--ipu-repeats=1",
            "--ipu-torch-threads=1",
            # Only the plugins pytest-ipu needs: the others' imports are start-up time, not the sweep.
            *other_plugins_off(),
            "test_sweep.py",
        ],
        cwd=project,
        env={**_env(), **allocator_env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = [json.loads(line) for line in (project / "rss.jsonl").read_text().splitlines()]
    assert len(rows) == SWEEP, rows
    return [int(row["rss_kib"]) for row in rows]


@pytest.mark.benchmark(group="memory")
def test_memory_sweep(tmp_path: Path, study_report: dict[str, list[str]], benchmark: Any) -> None:
    """RSS after the first and the last test of the sweep, and their ratio against the target."""
    rss = benchmark.pedantic(
        _sweep_rss, args=(tmp_path / "fixed", FIXED_MMAP_THRESHOLD), rounds=1, iterations=1
    )
    default_rss = _sweep_rss(tmp_path / "default", {})
    ratio = rss[-1] / rss[0]
    verdict = "meets" if ratio <= 1 + MAX_GROWTH else "MISSES"
    lines = study_report.setdefault(SECTION, [])
    lines.append(f"{_line(rss)} ({verdict} flat within {MAX_GROWTH:.0%} over {SWEEP} tests)")
    lines.append(f"glibc's default (dynamic) mmap threshold, for reference: {_line(default_rss)}")
    benchmark.extra_info["memory_sweep"] = {
        "tests": SWEEP,
        "rss_kib": rss,
        "ratio": ratio,
        "default_allocator_rss_kib": default_rss,
        "default_allocator_ratio": default_rss[-1] / default_rss[0],
    }


def _line(rss: list[int]) -> str:
    first, last = rss[0] / 1024, rss[-1] / 1024
    return (
        f"RSS after test 1 {first:,.0f} MB, after test {SWEEP} {last:,.0f} MB: ratio {last / first:.3f}, "
        f"{(last - first) / (SWEEP - 1):+.1f} MB per test, peak {max(rss) / 1024:,.0f} MB"
    )
