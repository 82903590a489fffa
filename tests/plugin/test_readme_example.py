"""The README's own benchmark, as a user copies it, under every way pytest and pytest-benchmark run.

pytest-benchmark times nothing under ``--benchmark-disable`` and under pytest-xdist (it disables
itself), skips benchmarks under ``--benchmark-skip`` and runs only them under ``--benchmark-only``.
In each mode the example must pass (or be skipped where pytest-benchmark skips it): its record is
an ``IpuRecord`` when timed and a ``NotTimed`` otherwise, never ``None``.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"

#: A short budget: these runs check that the example works in each mode, not what it measures.
FAST = ("--ipu-max-time=0.05s", "--ipu-repeats=1", "-p", "no:cacheprovider")


def readme_example() -> str:
    """The python block under the README's "Your own benchmark" heading."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Your own benchmark", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "the README's 'Your own benchmark' section has no python block"
    return match.group(1)


@pytest.fixture
def example(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    # Looked up, not imported: the inner runs import torch in their own processes.
    if importlib.util.find_spec("torch") is None:
        pytest.skip("the README example needs torch")
    # The user's own run: their options only (no -W error from this suite's inner-run options).
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest")
    monkeypatch.delenv("PYTEST_IPU_REPEATS", raising=False)
    pytester.makepyfile(test_example=readme_example())
    return pytester


def _counts(result: pytest.RunResult) -> dict[str, int]:
    outcomes = result.parseoutcomes()
    return {k: outcomes.get(k, 0) for k in ("passed", "skipped", "failed", "errors")}


def test_plain_run_times_every_parameter(example: pytest.Pytester) -> None:
    result = example.runpytest_subprocess(
        *FAST, "--ipu-backend=torch:cpu", "--ipu-torch-threads=1", "--benchmark-json=out.json"
    )
    assert _counts(result) == {"passed": 3, "skipped": 0, "failed": 0, "errors": 0}, result.stdout.str()
    benchmarks = json.loads((example.path / "out.json").read_text())["benchmarks"]
    # Each parameter's record is in the file, with its figures (the timed path, not NotTimed's).
    assert sorted(b["extra_info"]["ipu"]["batch_size"] for b in benchmarks) == [1, 8, 32]
    assert all("throughput_items_per_s" in b["extra_info"]["ipu"] for b in benchmarks)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (("--benchmark-disable",), {"passed": 3, "skipped": 0, "failed": 0, "errors": 0}),
        (("--benchmark-skip",), {"passed": 0, "skipped": 3, "failed": 0, "errors": 0}),
        (("--benchmark-only",), {"passed": 3, "skipped": 0, "failed": 0, "errors": 0}),
        (("-n", "2"), {"passed": 3, "skipped": 0, "failed": 0, "errors": 0}),
    ],
    ids=["benchmark-disable", "benchmark-skip", "benchmark-only", "xdist"],
)
def test_every_pytest_mode(example: pytest.Pytester, mode: tuple[str, ...], expected: dict[str, int]) -> None:
    if mode[0] == "-n" and importlib.util.find_spec("xdist") is None:
        pytest.skip("needs pytest-xdist")
    # One torch thread, as in the plain run above: beside busy neighbours, two intra-op threads wait
    # on each other and a batch-1 call can fall below the example's floor of 100 items/s.
    result = example.runpytest_subprocess(*FAST, "--ipu-backend=torch:cpu", "--ipu-torch-threads=1", *mode)
    assert _counts(result) == expected, result.stdout.str()
    assert "AttributeError" not in result.stdout.str()
