"""The run's samples of its machine's speed (``measure.machine_speed``): what a sample holds, when
one is due, how many a run takes, and their JSON form read back."""

from __future__ import annotations

import math

import pytest

from pytest_ipu.measure import machine_speed
from pytest_ipu.measure.contention import ContentionRecord
from pytest_ipu.measure.machine_speed import MachineSpeed
from pytest_ipu.measure.machine_speed import SpeedProbe
from pytest_ipu.results import codec
from tests.fakes.machine_speed import KernelClock


class FakeContention:
    """Start/stop of a CPU-share window, each stop reporting a fixed share."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    def stop(self) -> ContentionRecord:
        self.calls.append("stop")
        return ContentionRecord(readable=True, others_share=0.4, steal_share=0.0)


def _probe(contention: FakeContention | None = None) -> tuple[SpeedProbe, KernelClock]:
    clock = KernelClock(0.002)  # the pure-Python kernel takes 2 ms on it
    python = clock.kernel()

    def numpy_kernel() -> object:  # and the numpy kernel 0.5 ms
        clock.now_s += 0.0005
        return None

    probe = SpeedProbe(
        clock=clock, python=python, numpy=numpy_kernel, load=lambda: 2.5, contention=contention, spacing_s=1.0
    )
    return probe, clock


def test_a_sample_is_the_kernels_medians_their_level_and_the_load_around_it() -> None:
    contention = FakeContention()
    probe, clock = _probe(contention)
    first = probe.sample()
    assert first is not None
    assert (first.python_s, first.numpy_s) == (pytest.approx(0.002), pytest.approx(0.0005))
    assert first.level_s == pytest.approx(math.sqrt(0.002 * 0.0005))
    assert (first.load_avg_1m, first.others_share, first.at_s) == (2.5, None, 0.0)
    clock.now_s += 5.0
    second = probe.sample()
    assert second is not None
    assert (second.others_share, second.steal_share) == (0.4, 0.0)  # since the sample before
    assert contention.calls == ["start", "stop", "start"]
    assert probe.cost_s == pytest.approx(2 * 5 * 0.0025)  # five timings of each kernel, twice


def test_between_benchmarks_a_sample_is_due_after_the_spacing_and_one_is_kept_for_the_end() -> None:
    probe, clock = _probe()
    assert probe.due()  # the first benchmark always samples
    probe.sample()
    assert not probe.due()
    clock.now_s += 1.5
    assert probe.due()
    while probe.due():
        probe.sample()
        clock.now_s += 1.5
    assert len(probe.samples) == machine_speed.MAX_SAMPLES - 1  # the last one is the end's
    assert probe.sample() is not None
    assert probe.sample() is None  # never more than MAX_SAMPLES


def test_the_samples_round_trip_through_json() -> None:
    probe, _ = _probe(FakeContention())
    probe.sample()
    probe.sample()
    speed = probe.result()
    assert speed is not None
    assert machine_speed.from_json(codec.to_json(speed), "here") == speed
    assert speed.level_s() == pytest.approx(math.sqrt(0.002 * 0.0005))
    assert speed.load_avg_1m() == 2.5


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "here must be a JSON object"),
        ({"workload": 1, "samples": []}, "here needs a string 'workload' and a list 'samples'"),
        ({"workload": "w", "samples": [{"at_s": 0, "python_s": 0, "numpy_s": 1}]}, r"python_s is 0: .* > 0"),
        (
            {"workload": "w", "samples": [{"at_s": 0, "python_s": 1, "numpy_s": 1, "others_share": 2}]},
            r"others_share is 2: it must be at most 1",
        ),
    ],
)
def test_a_bad_section_names_the_key_and_the_problem(data: object, message: str) -> None:
    with pytest.raises(machine_speed.MachineSpeedError, match=message):
        machine_speed.from_json(data, "here")


def test_no_samples_no_level() -> None:
    assert MachineSpeed().level_s() is None
    assert SpeedProbe().result() is None
