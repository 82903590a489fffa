"""What each rank of a torchrun launch prints: rank 0 its full output, the others at most a line.

The ranks are in-process pytester runs with the environment torchrun gives its workers; their
peers never start, so the benchmarks are timed alone (the launch itself, merged, is
tests/plugin/test_torchrun_plugin.py's).
"""

from __future__ import annotations

import pytest

#: Each rank's benchmarks timed on their own: the other ranks of the launch never start here.
CONFTEST = """
import pytest

from pytest_ipu.pytest_plugin.session import IpuSession


@pytest.fixture(autouse=True)
def _alone(monkeypatch):
    monkeypatch.setattr(IpuSession, "lockstep", lambda self, where: None)
"""

BENCHMARKS = """
def test_sum(ipu_benchmark):
    ipu_benchmark(lambda: sum(range(100)), rounds=5)


def test_sum_again(ipu_benchmark):
    ipu_benchmark(lambda: sum(range(200)), rounds=5)
"""


def _as_rank(monkeypatch: pytest.MonkeyPatch, rank: int, count: int = 2) -> None:
    """The variables torchrun sets for rank ``rank`` of ``count`` on one node."""
    for name, value in {
        "TORCHELASTIC_RUN_ID": "job-1",
        "RANK": rank,
        "WORLD_SIZE": count,
        "LOCAL_RANK": rank,
        "LOCAL_WORLD_SIZE": count,
        "GROUP_RANK": 0,
    }.items():
        monkeypatch.setenv(name, str(value))


def _printed(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.strip()]


def test_rank_0_prints_the_tables_and_the_other_ranks_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_ranks=BENCHMARKS)
    outputs = []
    for rank in (0, 1):
        _as_rank(monkeypatch, rank)
        result = pytester.runpytest("--ipu-power=off", "--ipu-repeats=1")
        assert result.ret == pytest.ExitCode.OK
        outputs.append(_printed(result))
    first, other = outputs
    # Rank 0: pytest's header, pytest-benchmark's table, pytest-ipu's tables and the counts.
    assert any(line.startswith("platform ") for line in first), first
    assert any(line.startswith("Name (time in ") for line in first), first
    assert any(line.strip("= ") == "pytest-ipu" for line in first), first
    assert any(line.startswith("test_sum ") for line in first), first
    assert any(line.strip("= ").startswith("2 passed") for line in first), first
    # Every other rank: its progress and nothing else.
    assert len(other) <= 1, other
    assert other[0].startswith(".."), other


def test_a_failure_on_another_rank_is_printed_there_in_full(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_fails="""
        def test_fails(ipu_benchmark):
            assert 1 + 1 == 3, "rank 1 went wrong"
        """
    )
    _as_rank(monkeypatch, 1)
    result = pytester.runpytest("--ipu-power=off")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*AssertionError: rank 1 went wrong*"])
