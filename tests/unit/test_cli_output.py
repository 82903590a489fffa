"""The command's output: quiet when its reader closes the pipe, and ``targets`` naming what
``--ipu-backend=auto`` selects here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ipu import backends
from pytest_ipu.cli import main as cli
from tests.unit.run_files import bench
from tests.unit.run_files import write

ROOT = Path(__file__).resolve().parents[2]
#: The ``pytest-ipu`` console script, run by this interpreter (the script need not be installed).
COMMAND = [sys.executable, "-c", "import sys; from pytest_ipu.cli.main import main; sys.exit(main())"]


def test_a_reader_that_closes_the_pipe_gets_no_traceback(tmp_path: Path) -> None:
    # Far more output than a pipe holds (64 KiB on Linux), so that writing must meet the closed pipe.
    benchmarks = [bench(b, 0.0001 * b, 1000.0) for b in range(1, 301)]
    a = write(tmp_path / "a.json", *benchmarks)
    b = write(tmp_path / "b.json", *benchmarks)
    with subprocess.Popen(
        [*COMMAND, "compare", str(a), str(b)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()  # as `| head -1` does
        err = process.stderr.read()
        code = process.wait(timeout=300)  # a guard against a hang, not a measure
    assert first.startswith("group")
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err
    assert err == ""
    assert code == cli.PIPE_CLOSED == 141


def test_the_whole_output_still_exits_0(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", bench(2, 0.002, 1000.0))
    b = write(tmp_path / "b.json", bench(2, 0.002, 1000.0))
    done = subprocess.run(
        [*COMMAND, "compare", str(a), str(b)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("group")


def test_targets_marks_what_auto_selects(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["targets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # torch is installed here, so the CPU target is present, and auto selects it.
    assert any(line.startswith("* torch:cpu ") and line.endswith(" present") for line in lines)
    footer = lines[-1]
    assert footer.startswith("* --ipu-backend=auto (the default) selects: ")
    selected = footer.split(": ", 1)[1].split(", ")
    assert "torch:cpu" in selected
    # Exactly the auto candidates that are present, in the registry's order, and each marked.
    expected = []
    for target in backends.auto_candidates():
        backend = backends.make_backend(target)
        if backend is not None and backend.availability().ok:
            expected.append(str(target))
    assert selected == expected
    marked = [line.split()[1] for line in lines if line.startswith("* ") and line is not footer]
    assert marked == expected
    # A target auto never selects (torch.compile must be asked for) carries no mark.
    assert any(line.startswith("  torch-compile:cpu ") for line in lines)
