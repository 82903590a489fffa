"""Every run samples its machine's speed, keeps the samples in its file, and its gates do not take
a level shift of the machine since the baselines' time for a change of the code.

The gated runs sample a fake machine whose reference workload takes exactly what the test says
(``tests/fakes/machine_speed.py``), and time their benchmarks with a clock of their own, so the
verdicts are the same on a busy machine."""

from __future__ import annotations

import json

import pytest

from pytest_ipu.measure.machine_speed import WORKLOAD
from pytest_ipu.measure.machine_speed import SpeedProbe
from pytest_ipu.pytest_plugin import machine_speed
from pytest_ipu.results import codec
from pytest_ipu.results.benchmark_json import read_run
from tests.fakes.machine_speed import steady_probe

#: The real probe, before tests/plugin/conftest.py puts a steady fake in its place.
REAL_PROBE = machine_speed.new_probe

CLOCK = """
_ns = 0


def now():
    return _ns * 1e-9


def work(seconds):
    global _ns
    _ns += round(seconds * 1e9)
"""

BENCH = """
import os

from clock import work

SLOW = float(os.environ.get("SLOW", "0.001"))


def test_steady(ipu_benchmark):
    ipu_benchmark(lambda: work(0.001), rounds=20, warmup_rounds=1)


def test_changing(ipu_benchmark):
    ipu_benchmark(lambda: work(SLOW), rounds=20, warmup_rounds=1)


def test_not_a_benchmark():
    pass
"""

ARGS = ("--ipu-power=off", "--benchmark-timer=clock.now")


@pytest.fixture(autouse=True)
def bench(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(clock=CLOCK, test_work=BENCH)
    pytester.syspathinsert()


def test_the_real_probe_is_recorded_and_read_back(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(machine_speed, "new_probe", REAL_PROBE)
    pytester.runpytest(*ARGS, "--benchmark-json=run.json").assert_outcomes(passed=3)
    section = json.loads((pytester.path / "run.json").read_text())["pytest_ipu"]["machine_speed"]
    assert section["workload"] == WORKLOAD
    # Before the first benchmark, and at the end (the second benchmark comes within the spacing,
    # or not: between two and three samples).
    assert 2 <= len(section["samples"]) <= 3
    assert section["samples"][0]["at_s"] == 0.0
    assert section["samples"][0]["others_share"] is None
    speed = read_run(pytester.path / "run.json").machine_speed
    assert speed is not None
    # Read back as written, every sample and the probe's own cost.
    assert codec.to_json(speed) == section
    assert speed.level_s() is not None


def test_a_run_without_benchmarks_samples_nothing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def counted() -> SpeedProbe:
        calls.append(1)
        return steady_probe()

    monkeypatch.setattr(machine_speed, "new_probe", counted)
    pytester.runpytest(*ARGS, "-k", "not_a_benchmark").assert_outcomes(passed=1, deselected=2)
    assert calls == []


def _baselines(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Three baseline runs on a machine whose reference workload takes 1 ms."""
    monkeypatch.setenv("SLOW", "0.001")
    monkeypatch.setattr(machine_speed, "new_probe", lambda: steady_probe(0.001))
    for i in range(3):
        pytester.runpytest(*ARGS, f"--benchmark-json=base{i}.json").assert_outcomes(passed=3)
    return [f"--ipu-baseline=base{i}.json" for i in range(3)]


@pytest.mark.parametrize(("level_now", "outcome"), [(0.001, "FAIL"), (0.0013, "INCONCLUSIVE")])
def test_a_fail_on_a_slower_machine_is_inconclusive_in_the_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, level_now: float, outcome: str
) -> None:
    baselines = _baselines(pytester, monkeypatch)
    monkeypatch.setenv("SLOW", "0.0012")  # 20 % slower code
    monkeypatch.setattr(machine_speed, "new_probe", lambda: steady_probe(level_now))
    result = pytester.runpytest(
        *ARGS,
        *baselines,
        "--ipu-gate=latency.p50:+5%",
        "--ipu-inconclusive=warn",
        "--benchmark-json=now.json",
    )
    recorded = {
        v["benchmark"]: v for v in json.loads((pytester.path / "now.json").read_text())["pytest_ipu"]["gates"]
    }
    assert recorded["test_steady"]["outcome"] == "PASS"
    assert recorded["test_changing"]["outcome"] == outcome
    if outcome == "INCONCLUSIVE":
        # The machine ran 30 % slower than at the baselines' time: the 20 % could be the machine's.
        assert (
            "this runner ran 30.0% slower than at the baselines' time" in recorded["test_changing"]["advice"]
        )
        result.stdout.fnmatch_lines(["NOTE machine level: this runner ran 30.0% slower*"])
        assert result.ret == pytest.ExitCode.OK  # an INCONCLUSIVE verdict under --ipu-inconclusive=warn
    else:
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        assert "machine level" not in result.stdout.str()
