"""What pytest-ipu costs every pytest run of a project that has it installed: start-up time.

A trivial test file (one ``assert True``) in a project of its own is run by a fresh interpreter,
``python -m pytest -q -p no:cacheprovider``, with the plugin loaded and with ``-p no:ipu``, the two
alternating (ABAB...) so that drift of the machine lands on both; and the same pair again without
bytecode caching (an empty ``PYTHONPYCACHEPREFIX``, nothing written), where every module is
compiled. Both sides load pytest-benchmark, which pytest-ipu needs, and no other installed plugin
(``conftest.other_plugins_off``: the
development environment's hypothesis and pytest-xdist would add most of a second to every run, and
their noise, to both sides of a difference of milliseconds). The medians of the two and their
difference are printed at the end of ``make bench``; the target is at most 50 ms added (for scale:
pytest-benchmark's own plugin costs about 100 ms). Also printed: how many pytest-ipu modules the
plugin imports at start-up and whether numpy is among them.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.conftest import other_plugins_off
from pytest_ipu.backports import remove_prefix

#: Start-ups measured per side.
RUNS = 9
#: Target: milliseconds the plugin may add to a trivial run's start-up.
MAX_ADDED_MS = 50.0
SECTION = "start-up cost (trivial test file, pytest with the plugin vs -p no:ipu, medians)"

_PROBE = """
import json, sys
import pytest_ipu.pytest_plugin.plugin
mods = sorted(m for m in sys.modules if m.startswith("pytest_ipu"))
print(json.dumps({"modules": mods, "numpy": "numpy" in sys.modules, "torch": "torch" in sys.modules}))
"""


def _env(cache: Path | None = None) -> dict[str, str]:
    # The user's pytest options must not leak into the measured runs.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_ADDOPTS", "PYTEST_IPU_"))}
    if cache is not None:
        # Without bytecode caching: every module compiled from source, as on a first run or a
        # read-only install. An empty cache prefix of its own per run, and nothing written to it.
        env["PYTHONPYCACHEPREFIX"] = str(cache)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run_s(project: Path, *extra: str, cache: Path | None = None) -> float:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *other_plugins_off()]
    start = time.perf_counter()
    proc = subprocess.run(
        [*command, *extra, "test_trivial.py"],
        cwd=project,
        env=_env(cache),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return elapsed


@pytest.mark.benchmark(group="startup")
def test_startup_cost(tmp_path: Path, study_report: dict[str, list[str]], benchmark: Any) -> None:
    """The plugin's added start-up time, side by side with the same run without it."""
    (tmp_path / "test_trivial.py").write_text("def test_trivial():\n    assert True\n")
    _run_s(tmp_path)  # warm the file system cache for both sides
    _run_s(tmp_path, "-p", "no:ipu")
    with_plugin: list[float] = []
    without: list[float] = []
    cold_with: list[float] = []
    cold_without: list[float] = []
    empty = tmp_path / "no-bytecode"
    empty.mkdir()
    for _ in range(RUNS):
        with_plugin.append(_run_s(tmp_path))
        without.append(_run_s(tmp_path, "-p", "no:ipu"))
        cold_with.append(_run_s(tmp_path, cache=empty))
        cold_without.append(_run_s(tmp_path, "-p", "no:ipu", cache=empty))
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE], env=_env(), capture_output=True, text=True, timeout=120, check=True
    )
    loaded = json.loads(probe.stdout)
    on, off = statistics.median(with_plugin), statistics.median(without)
    added_ms = (on - off) * 1e3
    verdict = "meets" if added_ms <= MAX_ADDED_MS else "MISSES"
    cold_on, cold_off = statistics.median(cold_with), statistics.median(cold_without)
    cold_ms = (cold_on - cold_off) * 1e3
    cold_verdict = "meets" if cold_ms <= MAX_ADDED_MS else "MISSES"
    others = " ".join(remove_prefix(arg, "no:") for arg in other_plugins_off()[1::2])
    study_report.setdefault(SECTION, []).append(
        f"with pytest-ipu {on * 1e3:.0f} ms, with -p no:ipu {off * 1e3:.0f} ms: added {added_ms:+.0f} ms "
        f"({verdict} <= {MAX_ADDED_MS:.0f} ms); {RUNS} runs each, alternating; the plugin imports "
        f"{len(loaded['modules'])} pytest-ipu modules at start-up, "
        f"numpy {'yes' if loaded['numpy'] else 'no'}, torch {'yes' if loaded['torch'] else 'no'}; "
        f"other plugins off on both sides: {others or 'none installed'}"
    )
    study_report[SECTION].append(
        f"without bytecode caching (every module compiled): with pytest-ipu {cold_on * 1e3:.0f} ms, "
        f"with -p no:ipu {cold_off * 1e3:.0f} ms: added {cold_ms:+.0f} ms "
        f"({cold_verdict} <= {MAX_ADDED_MS:.0f} ms)"
    )
    benchmark.extra_info["startup"] = {
        "with_plugin_s": on,
        "without_plugin_s": off,
        "added_s": on - off,
        "added_without_bytecode_s": cold_on - cold_off,
        "runs": RUNS,
        "modules": loaded["modules"],
        "numpy": loaded["numpy"],
    }
    # A benchmark of our own making, timed by pytest-benchmark too: one start-up with the plugin.
    benchmark.pedantic(_run_s, args=(tmp_path,), rounds=1, iterations=1)
