"""Nothing lost: ``--benchmark-json`` reaches disk whole or not at all, and gates that checked
nothing do not pass. Failures are injected (a writer that stops half-way with a full disk); nothing
here depends on timing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BENCH = """
def test_sum(ipu_benchmark):
    ipu_benchmark(lambda: sum(range(100)), rounds=3, warmup_rounds=0)
"""

#: pytest-benchmark's writer, made to write half the file and then find the disk full; put back
#: when the inner run ends (in-process runs share the class with this process).
FULL_DISK = """
import errno
import os

from pytest_benchmark.session import BenchmarkSession

ORIGINAL = BenchmarkSession.save_json


def save_json(self, output_json):
    with open(self.json, "w") as out:
        out.write('{"benchmarks": [')
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def pytest_configure(config):
    BenchmarkSession.save_json = save_json


def pytest_unconfigure(config):
    BenchmarkSession.save_json = ORIGINAL
"""


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_the_json_file_is_written_whole_and_no_temporary_file_is_left(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest("--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    data = json.loads((pytester.path / "out.json").read_text())
    assert [b["name"] for b in data["benchmarks"]] == ["test_sum"]
    assert _leftovers(pytester.path) == []


def test_a_failed_write_leaves_the_previous_file_and_says_so(pytester: pytest.Pytester) -> None:
    (pytester.path / "out.json").write_text('{"previous": true}')
    pytester.makeconftest(FULL_DISK)
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest("--benchmark-json=out.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = [line for line in result.outlines if "--benchmark-json=" in line]
    assert len(lines) == 1, result.outlines
    assert "cannot write the results" in lines[0]
    assert "No space left on device" in lines[0]
    # The half-written file never replaced the previous one, and was removed.
    assert json.loads((pytester.path / "out.json").read_text()) == {"previous": True}
    assert _leftovers(pytester.path) == []


def test_a_failed_write_of_a_new_file_leaves_none(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FULL_DISK)
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest("--benchmark-json=out.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert not (pytester.path / "out.json").exists()
    assert _leftovers(pytester.path) == []


def test_gates_that_checked_nothing_fail_the_run(pytester: pytest.Pytester) -> None:
    # A baseline from another suite: the gated benchmark is not in it, so no gate can be checked.
    pytester.makepyfile(test_bench=BENCH)
    pytester.runpytest("--benchmark-json=base.json").assert_outcomes(passed=1)
    data = json.loads((pytester.path / "base.json").read_text())
    for bench in data["benchmarks"]:
        bench["fullname"] = "elsewhere.py::test_other"
    (pytester.path / "base.json").write_text(json.dumps(data))
    result = pytester.runpytest("--ipu-baseline=base.json", "--ipu-gate=throughput:-50%")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*FAILED no gate was checked*"])
