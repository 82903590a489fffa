"""An ``ipu_cycles`` gate decides in one run, end to end against the fake PopTorch.

Three subprocess runs of one PopTorch benchmark (an MLP whose hidden width the environment sets),
three repeats each: a baseline; the same model gated at ``ipu_cycles:+1%`` against it, and a model
0.77 % more cycles per call, and one 6.1 % more (the fake counts parameter and input elements per
call, ``fake_poptorch.CALL_CYCLES``). Each gate run decides, PASS, PASS and FAIL, by the exact rule:
the counts repeat exactly, so the spread that keeps a wall-time gate INCONCLUSIVE within its drift
allowance is not there to allow for. Every repeat of every record holds the count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.plugin.inner import INNER_ADDOPTS
from tests.plugin.inner import XDIST_VARIABLES

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
import sys

from pytest_ipu.backends.ipu.poptorch import PopTorchBackend
from tests.fakes import fake_gcipuinfo
from tests.fakes import fake_poptorch

# The IPU's clock comes from gcipuinfo, as on a real host: an M2000's four IPUs at 1300 MHz.
sys.modules["gcipuinfo"] = fake_gcipuinfo.FakeGcIpuInfoModule(fake_gcipuinfo.m2000())


def pytest_ipu_make_backend(config, target):
    if target.backend == "poptorch":
        return PopTorchBackend(target.backend, target.device, poptorch_module=fake_poptorch)
    return None
"""

BENCH = """
import os

import pytest
import torch

HIDDEN = int(os.environ["HIDDEN"])


@pytest.mark.ipu(backend="poptorch:ipu", precision="fp32", power="off")
def test_mlp(ipu_compile, ipu_benchmark):
    torch.manual_seed(0)
    layers = (torch.nn.Linear(16, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 4))
    model = torch.nn.Sequential(*layers).eval()
    x = torch.randn(4, 16)
    ipu_benchmark(ipu_compile(model, (x,), cycle_counter=True), (x,))
"""


def _run(path: Path, hidden: int, *args: str) -> tuple[int, list[str], dict]:
    """One run of the benchmark at width ``hidden``, three repeats: exit code, output lines, JSON."""
    env = {k: v for k, v in os.environ.items() if k not in XDIST_VARIABLES}
    env.update(
        HIDDEN=str(hidden),
        PYTEST_ADDOPTS=INNER_ADDOPTS,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    out = path / f"run-{hidden}-{time.monotonic_ns()}.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:randomly",
            "--ipu-repeats=3",
            "--ipu-rounds=4",
            "--ipu-warmup-rounds=1",
            "--ipu-idle=0",
            f"--benchmark-json={out}",
            *args,
        ],
        cwd=path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = (done.stdout + done.stderr).splitlines()
    data = json.loads(out.read_text()) if out.exists() else {}
    return done.returncode, lines, data


def _cycles(data: dict) -> list[float]:
    (bench,) = data["benchmarks"]
    return [r["counts"]["ipu_cycles"]["per_call"] for r in bench["extra_info"]["ipu"]["repeats"]]


def test_a_one_percent_cycle_gate_decides_in_one_run(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_bench.py").write_text(BENCH)
    code, lines, base = _run(tmp_path, 32)
    assert code == 0, lines[-30:]
    baseline = _cycles(base)
    assert len(baseline) == 3, baseline
    assert len(set(baseline)) == 1, baseline
    saved = tmp_path / "base.json"
    saved.write_text(json.dumps(base))
    gate = (f"--ipu-baseline={saved}", "--ipu-gate=ipu_cycles:+1%")
    for hidden, change, outcome, exit_code in (
        (32, 0.0, "PASS", 0),
        (33, 0.0077, "PASS", 0),
        (40, 0.061, "FAIL", 1),
    ):
        code, lines, data = _run(tmp_path, hidden, *gate)
        now = _cycles(data)
        assert len(set(now)) == 1, now
        assert now[0] / baseline[0] - 1 == pytest.approx(change, abs=5e-4), now
        (verdict,) = data["pytest_ipu"]["gates"]
        assert (verdict["gate"], verdict["outcome"]) == ("ipu_cycles:+1%", outcome), verdict
        assert verdict["method"].startswith("exact: 3 current and 3 baseline repeats"), verdict
        assert verdict["interval"] == [now[0] / baseline[0]] * 2
        assert code == exit_code, lines[-30:]
        if outcome == "FAIL":  # the failing gate fails the benchmark's own test, naming the verdict
            assert any("pytest-ipu gate FAILED" in line and "ipu_cycles" in line for line in lines), lines[
                -30:
            ]
