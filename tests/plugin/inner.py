"""What the plugin tests share about the inner pytest runs they start (pytester)."""

from __future__ import annotations

import pytest

#: Inner runs: no hypothesis plugin (re-imported by every in-process run, ~0.7 s), no cache, and
#: warnings are errors, as in this project's own configuration.
INNER_ADDOPTS = "-p no:hypothesispytest -p no:cacheprovider -W error"
#: An outer xdist worker's traces; pytest-benchmark disables itself when it sees them.
XDIST_VARIABLES = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")

#: A test that records that it ran: a usage error must stop the run before any test.
SENTINEL_TEST = """
from pathlib import Path

def test_ran():
    Path("ran.txt").write_text("yes")
"""


def assert_usage_error(pytester: pytest.Pytester, result: pytest.RunResult, message: str) -> None:
    """The run stopped with exit 4, one ``ERROR: pytest-ipu: <message>`` line, and no test ran."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.errlines if line.strip()] == [f"ERROR: pytest-ipu: {message}"]
    assert not (pytester.path / "ran.txt").exists(), "a test ran despite the usage error"


#: The ``gate_clock`` module of the gate tests' inner runs (``--benchmark-timer=gate_clock.now``).
GATE_CLOCK = """
# pytest-benchmark's timer in these runs: it moves only when a call says how long it took.
_ns = 0


def now():
    return _ns * 1e-9


def work(seconds):
    global _ns
    __import__("time").sleep(seconds)  # real time passes too: the throughput window is wall time
    _ns += round(seconds * 1e9)
"""
