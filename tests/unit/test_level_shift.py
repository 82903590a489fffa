"""A stored-baseline gate never turns a level shift of the machine into a verdict
(``results.level_shift``): with a fake history of the reference workload's samples, a steady
machine leaves every verdict as it was, and a machine that ran slower (faster) than at the
baselines' time turns a FAIL (a PASS) it could explain into INCONCLUSIVE naming the shift."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_ipu.measure.machine_speed import WORKLOAD
from pytest_ipu.measure.machine_speed import MachineSpeed
from pytest_ipu.measure.machine_speed import SpeedSample
from pytest_ipu.results import codec
from pytest_ipu.results import compare
from pytest_ipu.results import decide
from pytest_ipu.results import gates
from pytest_ipu.results import level_shift
from pytest_ipu.results.benchmark_json import MACHINE_SPEED_KEY
from pytest_ipu.results.benchmark_json import RunFileError
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.benchmark_json import read_run
from tests.unit import run_files

#: The baseline runs' machine levels (reference workload, seconds): a steady machine, 0.5 % apart.
STEADY = (1.000e-3, 1.004e-3, 0.996e-3, 1.002e-3, 0.998e-3)
#: The baseline runs' median latencies of the one benchmark, seconds: about 0.5 % apart.
P50 = (1.000e-3, 1.005e-3, 0.995e-3, 1.003e-3, 0.997e-3)


def _speed(level_s: float, samples: int = 4, load: float | None = 1.0) -> MachineSpeed:
    """A run's samples, each with both kernels at ``level_s`` (so the level is ``level_s``)."""
    return MachineSpeed(
        WORKLOAD, 0.01, tuple(SpeedSample(float(i), level_s, level_s, load) for i in range(samples))
    )


def _run(path: Path, p50: float, speed: MachineSpeed | None) -> Path:
    """A saved run of one benchmark with median latency ``p50``, and the machine's samples."""
    document = {
        "machine_info": {"cpu": {"brand_raw": "Xeon"}},
        "benchmarks": [run_files.bench(1, p50, 1.0 / p50)],
        "pytest_ipu": {} if speed is None else {MACHINE_SPEED_KEY: codec.to_json(speed)},
    }
    path.write_text(json.dumps(document))
    return path


def _verdict(
    tmp_path: Path,
    gate: str,
    p50_now: float,
    level_now: float | None,
    levels_then: Sequence[float | None] = STEADY,
) -> decide.Verdict:
    """The candidate's verdict of ``gate`` against the five baseline runs (``compare --gate``)."""
    tmp_path.mkdir(exist_ok=True)
    paths = [
        _run(tmp_path / f"base{i}.json", p50, None if level is None else _speed(level))
        for i, (p50, level) in enumerate(zip(P50, levels_then))
    ]
    now = _run(tmp_path / "now.json", p50_now, None if level_now is None else _speed(level_now))
    runs = [read_run(p) for p in [*paths, now]]
    verdicts = compare.check_gates(compare.compare_runs(runs), [gates.parse(gate)])
    (mine,) = verdicts  # compare --gate judges the last run only
    return mine


@pytest.mark.parametrize(
    ("gate", "p50_now", "outcome"),
    [
        ("latency.p50:+5%", 1.10e-3, "FAIL"),  # 10 % slower
        ("latency.p50:+5%", 1.00e-3, "PASS"),
        ("throughput:-5%", 1.10e-3, "FAIL"),
        ("throughput:-5%", 1.00e-3, "PASS"),
    ],
)
def test_on_a_steady_machine_verdicts_are_unchanged(
    tmp_path: Path, gate: str, p50_now: float, outcome: str
) -> None:
    with_samples = _verdict(tmp_path, gate, p50_now, level_now=1.001e-3)
    without = _verdict(tmp_path / "plain", gate, p50_now, level_now=None, levels_then=(None,) * 5)
    assert with_samples.outcome == without.outcome == outcome
    assert with_samples == without


def test_a_fail_on_a_slower_machine_becomes_inconclusive_naming_the_shift(tmp_path: Path) -> None:
    # The code is 10 % slower, and so is the machine: the FAIL could be the machine's.
    verdict = _verdict(tmp_path, "latency.p50:+5%", 1.10e-3, level_now=1.12e-3)
    assert verdict.outcome == "INCONCLUSIVE"
    assert (
        "FAIL on the benchmark's figures, but this runner ran 12.0% slower than at the baselines' time"
        in (verdict.advice)
    )
    assert "(reference workload 1.12 ms now against 1 ms over 5 baseline run(s)" in verdict.advice
    assert verdict.line().endswith(verdict.advice)


def test_a_fail_far_beyond_what_the_shift_explains_stays_a_fail(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, "latency.p50:+5%", 2.0e-3, level_now=1.12e-3)  # twice as slow
    assert verdict.outcome == "FAIL"


def test_a_pass_on_a_slower_machine_stands(tmp_path: Path) -> None:
    # The machine ran slower, yet the code was shown within the threshold.
    assert _verdict(tmp_path, "latency.p50:+5%", 1.00e-3, level_now=1.12e-3).outcome == "PASS"


@pytest.mark.parametrize("gate", ["latency.p50:+5%", "throughput:-5%"])
def test_a_pass_on_a_faster_machine_becomes_inconclusive(tmp_path: Path, gate: str) -> None:
    # The baselines ran on a busier machine: a 10 % slowdown on a 20 % faster machine looks like none.
    verdict = _verdict(tmp_path, gate, 1.00e-3, level_now=0.80e-3)
    assert verdict.outcome == "INCONCLUSIVE"
    assert "PASS on the benchmark's figures, but this runner ran 25.0% faster than" in verdict.advice


def test_a_fail_on_a_faster_machine_stands(tmp_path: Path) -> None:
    assert _verdict(tmp_path, "latency.p50:+5%", 1.10e-3, level_now=0.80e-3).outcome == "FAIL"


def test_baselines_without_samples_leave_the_verdicts_and_say_so(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, "latency.p50:+5%", 1.10e-3, level_now=1.5e-3, levels_then=(None,) * 5)
    assert verdict.outcome == "FAIL"
    runs = [StoredRun(Path("base.json"), {}, {}, None, ())]
    note = level_shift.note(_speed(1.5e-3), runs, level_shift.estimate(_speed(1.5e-3), runs))
    assert note is not None
    assert "cannot be told from a change of the code" in note


def test_samples_of_another_workload_are_not_compared() -> None:
    other = MachineSpeed("another workload", samples=_speed(2e-3).samples)
    runs = [StoredRun(Path(f"b{i}.json"), {}, {}, None, (), machine_speed=other) for i in range(5)]
    assert level_shift.estimate(_speed(1e-3), runs) is None


def test_with_fewer_than_three_baselines_a_shift_must_pass_the_drift_allowance() -> None:
    def run(level: float) -> StoredRun:
        factors = (0.99, 1.0, 1.01)
        spread = MachineSpeed(
            samples=tuple(SpeedSample(float(i), level * f, level * f) for i, f in enumerate(factors))
        )
        return StoredRun(Path("base.json"), {}, {}, None, (), machine_speed=spread)

    within = level_shift.estimate(run(1.03e-3).machine_speed, [run(1e-3)])
    beyond = level_shift.estimate(run(1.30e-3).machine_speed, [run(1e-3)])
    assert within is not None
    assert beyond is not None
    assert within.allowance == pytest.approx(math.log1p(decide.DRIFT))
    assert not within.moved  # 3 % is within the 5 % the gates on repeats allow for
    assert beyond.slower
    assert "30.0% slower" in beyond.describe()


def test_the_samples_are_read_back_and_checked(tmp_path: Path) -> None:
    path = _run(tmp_path / "run.json", 1e-3, _speed(1e-3, load=2.5))
    speed = read_run(path).machine_speed
    assert speed == _speed(1e-3, load=2.5)
    assert speed is not None
    assert speed.level_s() == pytest.approx(1e-3)
    document = json.loads(path.read_text())
    document["pytest_ipu"][MACHINE_SPEED_KEY]["samples"][1]["python_s"] = -1
    path.write_text(json.dumps(document))
    with pytest.raises(
        RunFileError, match=r"machine_speed'\.samples\[1\]\.python_s is -1: it must be a finite"
    ):
        read_run(path)
    assert read_run(_run(tmp_path / "old.json", 1e-3, None)).machine_speed is None  # older files
