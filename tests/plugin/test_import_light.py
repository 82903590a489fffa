"""Loading pytest-ipu imports no deep-learning runtime (nor SciPy): ``pytest --help`` and benchmarks of
plain callables work on machines without one, and cost no runtime start-up where they have one.

Each check is a fresh interpreter (this process may have imported anything by now).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ipu.backports import remove_prefix

#: Runtimes, and what only some commands need: SciPy's distributions load with the first gate decided.
HEAVY = ("torch", "poptorch", "popart", "onnxruntime", "onnx", "pynvml", "matplotlib", "scipy")

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


@pytest.mark.parametrize("argv", [["--help"], ["compare", "--help"], ["ab", "--help"], ["history", "--help"]])
def test_the_command_help_imports_no_numpy(tmp_path: Path, argv: list[str]) -> None:
    """``pytest-ipu --help`` and a command's help build every parser: each command's heavy imports wait
    for its run, so none of them loads numpy, let alone a runtime."""
    code = (
        "import contextlib, io, sys\n"
        "from pytest_ipu.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        f"        main.main({argv!r})\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, exc.code\n"
        "assert 'usage: pytest-ipu' in out.getvalue(), out.getvalue()\n"
        "assert 'numpy' not in sys.modules, 'numpy was imported'\n"
    )
    ret, _, imported = _python(code, tmp_path)
    assert ret == 0
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


#: The modules a pytest run loads before any test uses a pytest-ipu fixture: the glue of
#: pytest_addoption and pytest_configure, the hooks' owners and the fixtures' declarations. Anything
#: else (records, backends, measurement, devices, power, the gates and the repeats, a launch's
#: process group and merging, what a fixture's call does, the options' value parsers, the marker's
#: keywords, the saving of the run's files, pytest-benchmark's fixture and runs, the run's backends
#: and power meters, the summary's tables) loads on first use. Exact: the test fails when a module
#: joins the start-up, and when one leaves it without leaving this list.
START_UP = frozenset(
    {
        "pytest_ipu",
        "pytest_ipu.errors",
        # Its package docstring and the variable that says a run is under torchrun.
        "pytest_ipu.placement",
        # SIGTERM unwinds every run as Ctrl-C does (its handler is set at the session's start).
        "pytest_ipu.processes",
        "pytest_ipu.pytest_plugin",
        # --benchmark-json and the routing of pytest-benchmark's saving (its __init__ only).
        "pytest_ipu.pytest_plugin.bench_seam",
        "pytest_ipu.pytest_plugin.fixtures",
        "pytest_ipu.pytest_plugin.fixtures.benchmark",
        "pytest_ipu.pytest_plugin.fixtures.common",
        "pytest_ipu.pytest_plugin.fixtures.compile",
        "pytest_ipu.pytest_plugin.fixtures.loadgen",
        "pytest_ipu.pytest_plugin.fixtures.power",
        "pytest_ipu.pytest_plugin.fixtures.train",
        "pytest_ipu.pytest_plugin.hookspec",
        "pytest_ipu.pytest_plugin.lifecycle",
        "pytest_ipu.pytest_plugin.marker",
        "pytest_ipu.pytest_plugin.options",
        "pytest_ipu.pytest_plugin.plugin",
        "pytest_ipu.pytest_plugin.session",
        "pytest_ipu.pytest_plugin.settings",
        "pytest_ipu.run",
        # Settings' default cap and the rule that refuses a cap below the budget.
        "pytest_ipu.run.plan",
    }
)


def test_a_run_without_the_fixtures_loads_only_the_start_up_modules(tmp_path: Path) -> None:
    """Every pytest run of a project with pytest-ipu installed pays for what the plugin imports: a
    test that uses none of its fixtures loads no numpy, no runtime and none of its heavy modules."""
    import pytest_ipu

    (tmp_path / "test_trivial.py").write_text("def test_trivial():\n    assert True\n")
    code = (
        "import json, sys\n"
        "import pytest\n"
        "ret = pytest.main(['-q', '-p', 'no:cacheprovider', 'test_trivial.py'])\n"
        "assert ret == 0, ret\n"
        "mods = sorted(m for m in sys.modules if m.startswith('pytest_ipu'))\n"
        "print('MODULES=' + json.dumps(mods + [m for m in ('numpy', 'torch') if m in sys.modules]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    # The package under test, wherever this process imported it from (a checkout or the install).
    env["PYTHONPATH"] = str(Path(pytest_ipu.__file__).parent.parent)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES=")]
    assert len(line) == 1, proc.stdout
    loaded = json.loads(remove_prefix(line[0], "MODULES="))
    assert "pytest_ipu.pytest_plugin.plugin" in loaded, "the plugin was not loaded"
    assert "numpy" not in loaded
    assert "torch" not in loaded
    for heavy in ("pytest_ipu.results.records", "pytest_ipu.backends.base", "pytest_ipu.measure.units"):
        assert heavy not in loaded
    assert sorted(set(loaded) - START_UP) == [], "a module was added to the plugin's start-up"
    assert sorted(START_UP - set(loaded)) == [], "START_UP names a module the start-up no longer loads"
