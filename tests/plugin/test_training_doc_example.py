"""docs/training.md's ten-line training benchmark, as a user copies it: plain, and under torchrun with
two processes, where one merged file holds the launch and both compare commands read it."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ipu.cli import main as cli

TRAINING = Path(__file__).resolve().parents[2] / "docs" / "training.md"

#: These runs check that the example works, not what it measures.
SHORT = ("--ipu-max-time=0.2s", "--ipu-repeats=1")
FAST = (*SHORT, "--ipu-torch-threads=1", "--ipu-backend=torch:cpu")


def doc_example() -> str:
    """The python block under the page's "A training benchmark in ten lines" heading."""
    section = TRAINING.read_text(encoding="utf-8").split("## A training benchmark in ten lines", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "docs/training.md's ten-line section has no python block"
    return match.group(1)


@pytest.fixture
def example(tmp_path: Path) -> Path:
    # Looked up, not imported: the runs import torch in their own processes.
    if importlib.util.find_spec("torch") is None:
        pytest.skip("the training example needs torch")
    (tmp_path / "test_train.py").write_text(doc_example())
    return tmp_path


def _env(omp_threads: bool = True) -> dict[str, str]:
    """The runs' environment; ``omp_threads`` false leaves torch its own default thread count, as a
    user's shell does (torchrun sets ``OMP_NUM_THREADS=1``, and says so unless it is set)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "TORCHELASTIC_")) and k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    }
    env.update(PYTEST_ADDOPTS="-p no:cacheprovider -p no:hypothesispytest")
    if omp_threads:
        env.update(OMP_NUM_THREADS="1")
    return env


def _run(path: Path, *command: str, omp_threads: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(command),
        cwd=path,
        env=_env(omp_threads),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def doc_command() -> list[str]:
    """The page's command line for a plain run, after ``pytest``."""
    match = re.search(r"Run it plain \(`pytest ([^`]*)`\)", TRAINING.read_text(encoding="utf-8"))
    assert match, "docs/training.md names no plain run of the example"
    return match.group(1).split()


def test_the_ten_lines_run_plain(example: Path) -> None:
    # The page's own command line, only shorter, from a shell that sets no thread count.
    result = _run(example, sys.executable, "-m", "pytest", *SHORT, *doc_command(), omp_threads=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    (bench,) = json.loads((example / "out.json").read_text())["benchmarks"]
    # One torch thread, which the page explains: two wait on each other on a busy machine.
    assert bench["extra_info"]["ipu"]["compile_info"]["threads"]["intra_op"] == 1
    training = bench["extra_info"]["ipu"]["training"]
    assert (training["micro_batch"], training["gradient_accumulation"], training["processes"]) == (32, 2, 1)
    assert training["global_batch"] == 64


def test_the_ten_lines_run_under_torchrun_into_one_merged_file(
    example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = _run(
        example,
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=2",
        "--master-addr=127.0.0.1",
        f"--master-port={port}",
        "-m",
        "pytest",
        "test_train.py",
        *FAST,
        # Three repeats: a gate's verdict needs their spread (one repeat would be INCONCLUSIVE).
        "--ipu-repeats=3",
        "--benchmark-json=out.json",
        "--ipu-gate=throughput>1/s",
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    merged = json.loads((example / "out.json").read_text())
    (bench,) = merged["benchmarks"]
    assert bench["extra_info"]["ipu"]["training"]["global_batch"] == 128  # the example's own assert, too
    assert merged["machine_info"]["ipu"]["torchrun"]["count"] == 2
    # Both compare commands read the launch's file.
    assert cli.main(["compare", str(example / "out.json"), str(example / "out.json")]) == 0
    capsys.readouterr()
    compared = _run(example, str(Path(sys.executable).parent / "pytest-benchmark"), "compare", "out.json")
    assert compared.returncode == 0, compared.stderr[-2000:]
    assert "test_train_step" in compared.stdout
