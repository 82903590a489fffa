"""What only some compiled models have, as protocols (``backends.base``): a plain model has none, each
capability's class is recognised by its protocol, a capability's field cannot be left out, and
``run.benchmark.measure`` records what each capability gives."""

from __future__ import annotations

import pytest

from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.base import CountedModel
from pytest_ipu.backends.base import CountedTrainingStep
from pytest_ipu.backends.base import Grouped
from pytest_ipu.backends.base import HasDeviceLatency
from pytest_ipu.backends.base import Trainable
from pytest_ipu.backends.base import TrainingInfo
from pytest_ipu.backends.base import TrainingStep
from pytest_ipu.backends.host import wrap_callable
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import identity
from pytest_ipu.run.benchmark import measure
from pytest_ipu.run.plan import RoundsPolicy
from tests.fakes.fake_pedantic import RecordingBenchmark

PLAIN = wrap_callable(lambda: None)
CORE = {**identity(PLAIN), "run": PLAIN.run, "prepare_inputs": PLAIN.prepare_inputs, "close": PLAIN.close}
COUNTERS = {"resolution_s": 0.001, "round_trip": {"min_s": 0.0, "max_s": 0.001, "avg_s": 0.0005}}


def _info() -> TrainingInfo:
    return TrainingInfo(
        micro_batch=2,
        gradient_accumulation=1,
        replicas=1,
        device_iterations=1,
        processes=1,
        optimizer="SGD",
        amp=False,
        mode="eager",
    )


def _measure(compiled: CompiledModel) -> IpuRecord:
    return measure(
        compiled,
        (),
        items_per_call=1,
        policy=RoundsPolicy(warmup_rounds=0, rounds=3, max_time_s=1.0, min_rounds=1),
        timer=RecordingBenchmark(),
        # The record's figures are not under test here: three fixed round times stand for the timer's.
        round_times_s=lambda: [0.001, 0.001, 0.001],
        meter=None,
    ).record


def test_a_plain_compiled_model_has_no_capability() -> None:
    assert isinstance(PLAIN, CompiledModel)
    assert not isinstance(PLAIN, (HasDeviceLatency, Grouped, Trainable))
    record = _measure(PLAIN)
    assert (record.device_latency, record.training, record.instances) == (None, None, None)


def test_each_capability_is_recognised_by_its_protocol() -> None:
    counted = CountedModel(**CORE, device_latency=lambda: COUNTERS)
    step = TrainingStep(**CORE, training=_info(), evaluate=lambda *x: x)
    both = CountedTrainingStep(**CORE, training=_info(), evaluate=lambda *x: x, device_latency=lambda: None)
    assert isinstance(counted, HasDeviceLatency)
    assert not isinstance(counted, (Trainable, Grouped))
    assert isinstance(step, Trainable)
    assert not isinstance(step, (HasDeviceLatency, Grouped))
    assert isinstance(both, Trainable)
    assert isinstance(both, HasDeviceLatency)


@pytest.mark.parametrize(
    ("kind", "given", "missing"),
    [
        (CountedModel, {}, "device_latency"),
        (TrainingStep, {"evaluate": print}, "training"),
        (TrainingStep, {"training": None}, "evaluate"),
    ],
)
def test_a_capability_cannot_be_left_out(kind: type, given: dict[str, object], missing: str) -> None:
    with pytest.raises(TypeError, match=f"missing required argument: '{missing}'"):
        kind(**CORE, **given)


def test_measure_records_the_device_counters_of_a_counted_model() -> None:
    record = _measure(CountedModel(**CORE, device_latency=lambda: COUNTERS))
    assert record.device_latency == COUNTERS


def test_measure_records_the_training_part_of_a_training_step() -> None:
    info = _info()

    def step() -> float:
        info.losses.add(0.25, "step")
        return 0.25

    record = _measure(TrainingStep(**{**CORE, "run": step}, training=info, evaluate=lambda *x: x))
    assert record.training is not None
    assert (record.training.global_batch, record.training.steps) == (2, info.losses.steps)
    assert record.training.loss_last == 0.25
