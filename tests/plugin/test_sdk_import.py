"""The SDK's modules import under ``-W error``: PopTorch 3.4's ``__init__`` runs ``import
pkg_resources``, which the setuptools of Python 3.8 (75.3) deprecates with a warning; pytest-ipu
imports the SDK with those deprecations silenced (``sdk.import_sdk``), so the warning never
turns into a skip of every PopTorch benchmark.

A subprocess run: the warning is raised once per process, at the first ``import pkg_resources``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]

#: A PopTorch that, like SDK 3.4's, imports pkg_resources first thing; the rest is the suite's fake.
POPTORCH_INIT = """
import sys
import warnings

try:
    import pkg_resources  # noqa: F401  (setuptools 75.3 warns: DeprecationWarning)
except ImportError:  # setuptools 81 and later have no pkg_resources: warn as 75.3 does
    warnings.warn(
        "pkg_resources is deprecated as an API. See https://setuptools.pypa.io/en/latest/pkg_resources.html",
        DeprecationWarning,
        stacklevel=2,
    )

from tests.fakes import fake_poptorch

sys.modules[__name__] = fake_poptorch
"""

BENCHMARK = """
import torch


def test_linear(ipu_compile, ipu_benchmark):
    x = torch.randn(4, 8)
    compiled = ipu_compile(torch.nn.Linear(8, 2), (x,))
    record = ipu_benchmark(compiled, (x,))
    assert record.target == "poptorch:ipu-model"
"""


@pytest.fixture
def sdk_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    package = tmp_path / "sdk" / "poptorch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(POPTORCH_INIT, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(package.parent), str(ROOT)]))
    return package.parent


def test_the_sdks_poptorch_warns_at_import(sdk_path: Path) -> None:
    """The premise: a plain ``import poptorch`` fails under ``-W error``."""
    plain = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import poptorch"], capture_output=True, text=True, check=False
    )
    assert plain.returncode != 0
    assert "DeprecationWarning: pkg_resources is deprecated" in plain.stderr


def test_pytest_ipu_imports_it_under_w_error(sdk_path: Path) -> None:
    code = "from pytest_ipu.sdk import import_sdk; print(import_sdk('poptorch').__name__)"
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "tests.fakes.fake_poptorch"), done.stderr


def test_a_poptorch_benchmark_runs_under_filterwarnings_error(
    sdk_path: Path, pytester: pytest.Pytester
) -> None:
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(test_b=BENCHMARK)
    # A short budget: what is checked is that the benchmark runs, not what it measures.
    result = pytester.runpytest_subprocess(
        "-rs", "--ipu-backend=poptorch:ipu-model", "--ipu-precision=fp32", "--ipu-max-time=0.1s"
    )
    result.assert_outcomes(passed=1)
