"""What pytest-ipu costs every pytest run of a project that has it installed: start-up time.

A trivial test file (one ``assert True``) in a project of its own is run by a fresh interpreter,
``python -m pytest -q -p no:cacheprovider``, with the plugin loaded and with ``-p no:ipu``, the two
alternating (ABAB...) so that drift of the machine lands on both. Both sides load pytest-benchmark,
which pytest-ipu needs, and no other installed plugin (``conftest.other_plugins_off``: the
development environment's hypothesis and pytest-xdist would add most of a second to every run, and
their noise, to both sides of a difference of milliseconds). The medians of the two and their
difference are printed at the end of ``make bench``; the target is at most 50 ms added (for scale:
pytest-benchmark's own plugin costs about 100 ms). Measured both with bytecode caching (the usual
case) and without it (a fresh clone, a read-only install, ``PYTHONDONTWRITEBYTECODE``): then every
module is compiled from source in every run (``PYTHONPYCACHEPREFIX`` names an empty directory of the
run's own, on both sides alike, so only the plugin's own compiling and importing differ). Also
printed: how many pytest-ipu modules (and lines of source) the plugin imports at start-up and whether
numpy is among them.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
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
# Lines of source compiled at start-up when no bytecode is cached (the uncached cost follows them).
lines = sum(len(open(sys.modules[m].__file__, "rb").read().splitlines()) for m in mods)
heavy = {name: name in sys.modules for name in ("numpy", "torch")}
print(json.dumps({"modules": mods, "lines": lines, **heavy}))
"""


def _env(pycache: str | None = None) -> dict[str, str]:
    # The user's pytest options must not leak into the measured runs.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_ADDOPTS", "PYTEST_IPU_"))}
    env.pop("PYTHONPYCACHEPREFIX", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if pycache is not None:
        # Bytecode is looked for (and would be written) under an empty directory: none is found,
        # every module is compiled from its source, and nothing is kept for the next run.
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def _run_s(project: Path, *extra: str, cached: bool = True) -> float:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *other_plugins_off()]
    with tempfile.TemporaryDirectory(prefix="pycache-") as empty:
        env = _env(None if cached else empty)
        start = time.perf_counter()
        proc = subprocess.run(
            [*command, *extra, "test_trivial.py"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return elapsed


def _added(on: list[float], off: list[float]) -> tuple[float, float, float, str]:
    """Medians with and without the plugin (s), the difference (ms), and the verdict on it."""
    with_plugin, without = statistics.median(on), statistics.median(off)
    added_ms = (with_plugin - without) * 1e3
    return with_plugin, without, added_ms, "meets" if added_ms <= MAX_ADDED_MS else "MISSES"


@pytest.mark.benchmark(group="startup")
def test_startup_cost(tmp_path: Path, study_report: dict[str, list[str]], benchmark: Any) -> None:
    """The plugin's added start-up time, side by side with the same run without it."""
    (tmp_path / "test_trivial.py").write_text("def test_trivial():\n    assert True\n")
    _run_s(tmp_path)  # warm the file system cache for both sides
    _run_s(tmp_path, "-p", "no:ipu")
    times: dict[tuple[bool, bool], list[float]] = {(c, p): [] for c in (True, False) for p in (True, False)}
    for _ in range(RUNS):
        for cached in (True, False):
            times[cached, True].append(_run_s(tmp_path, cached=cached))
            times[cached, False].append(_run_s(tmp_path, "-p", "no:ipu", cached=cached))
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE], env=_env(), capture_output=True, text=True, timeout=120, check=True
    )
    loaded = json.loads(probe.stdout)
    on, off, added_ms, verdict = _added(times[True, True], times[True, False])
    on_src, off_src, added_src_ms, verdict_src = _added(times[False, True], times[False, False])
    others = " ".join(remove_prefix(arg, "no:") for arg in other_plugins_off()[1::2])
    study_report.setdefault(SECTION, []).append(
        f"with bytecode caching: with pytest-ipu {on * 1e3:.0f} ms, with -p no:ipu {off * 1e3:.0f} ms: "
        f"added {added_ms:+.0f} ms ({verdict} <= {MAX_ADDED_MS:.0f} ms); without it (compiled from "
        f"source): {on_src * 1e3:.0f} ms vs {off_src * 1e3:.0f} ms: added {added_src_ms:+.0f} ms "
        f"({verdict_src} <= {MAX_ADDED_MS:.0f} ms); {RUNS} runs each, alternating; the plugin imports "
        f"{len(loaded['modules'])} pytest-ipu modules ({loaded['lines']} lines) at start-up, "
        f"numpy {'yes' if loaded['numpy'] else 'no'}, torch {'yes' if loaded['torch'] else 'no'}; "
        f"other plugins off on both sides: {others or 'none installed'}"
    )
    benchmark.extra_info["startup"] = {
        "with_plugin_s": on,
        "without_plugin_s": off,
        "added_s": on - off,
        "uncached_with_plugin_s": on_src,
        "uncached_without_plugin_s": off_src,
        "uncached_added_s": on_src - off_src,
        "runs": RUNS,
        "modules": loaded["modules"],
        "lines": loaded["lines"],
        "numpy": loaded["numpy"],
    }
    # A benchmark of our own making, timed by pytest-benchmark too: one start-up with the plugin.
    benchmark.pedantic(_run_s, args=(tmp_path,), rounds=1, iterations=1)
