"""The training parts of a record (``results.training``): their JSON round trip and rejections, the
olympic average and its refusals, the scaling arithmetic, a baseline file; and the time-to-train
loop (``measure.time_to_train.run_once``) and the loss trace of a step (``backends.base.LossTrace``),
driven by fakes and an injected clock (no torch, no time passing)."""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.backends.base import LossTrace
from pytest_ipu.errors import NonFiniteLoss
from pytest_ipu.measure.metrics import summarize_latency
from pytest_ipu.results import scaling_baseline
from pytest_ipu.results import schema
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.schema import SchemaError
from pytest_ipu.results.training import CurvePoint
from pytest_ipu.results.training import NoScore
from pytest_ipu.results.training import ScalingRecord
from pytest_ipu.results.training import TimeToTrainRecord
from pytest_ipu.results.training import TrainingRecord
from pytest_ipu.results.training import TrainRun
from pytest_ipu.results.training import olympic
from pytest_ipu.results.training import scaling
from pytest_ipu.results.training import summarize
from pytest_ipu.run import time_to_train as ttt

# -- records -----------------------------------------------------------------------------------------

#: Times, rates and counts: >= 0 and finite, as the reader demands; losses and qualities take any sign.
seconds = st.floats(min_value=0.0, max_value=1e9, allow_nan=False, allow_infinity=False)
signed = st.floats(allow_nan=False, allow_infinity=False)
count = st.integers(min_value=0, max_value=2**53)
name = st.text(max_size=12)

trainings = st.builds(
    TrainingRecord,
    micro_batch=count,
    gradient_accumulation=count,
    replicas=count,
    device_iterations=count,
    processes=count,
    global_batch=count,
    optimizer=name,
    amp=st.booleans(),
    mode=st.sampled_from(["eager", "compile", "poptorch"]),
    steps=count,
    loss_first=signed,
    loss_last=signed,
)
points = st.builds(CurvePoint, epoch=count, elapsed_s=seconds, samples=count, quality=signed)
train_runs = st.builds(
    TrainRun,
    index=count,
    seed=st.integers(min_value=0, max_value=2**31 - 1),
    reached=st.booleans(),
    time_s=st.none() | seconds,
    epochs=count,
    samples=count,
    samples_per_s=st.none() | seconds,
    curve=st.lists(points, max_size=3).map(tuple),
)
times_to_train = st.builds(
    TimeToTrainRecord,
    quality=name,
    quality_target=signed,
    higher_is_better=st.booleans(),
    max_epochs=count,
    processes=count,
    runs=st.lists(train_runs, max_size=3).map(tuple),
    olympic_s=seconds,
    olympic_runs=st.lists(count, max_size=3).map(tuple),
    min_s=seconds,
    max_s=seconds,
    cv=st.none() | seconds,
)
scalings = st.builds(
    ScalingRecord,
    processes=count,
    baseline_processes=count,
    baseline_file=name,
    baseline_throughput_items_per_s=seconds,
    speedup=seconds,
    efficiency=seconds,
    baseline_time_to_train_s=st.none() | seconds,
    time_to_train_speedup=st.none() | seconds,
)


def make_record(**parts: Any) -> IpuRecord:
    """A torch:cpu record of 1280 items/s with the given parts (``training``, ``time_to_train``...)."""
    fields: dict[str, Any] = {
        "target": "torch:cpu",
        "backend": "torch",
        "device": "cpu",
        "device_name": "Some CPU",
        "precision": "fp32",
        "io": "host",
        "batch_size": 32,
        "items_per_call": 32,
        "rounds": 4,
        "rounds_policy": "fixed",
        "warmup_rounds": 1,
        "latency_s": summarize_latency([0.01, 0.02, 0.03, 0.04]),
        "window_s": 0.1,
        "throughput_items_per_s": 1280.0,
        "compile_s": None,
        "compile_cached": False,
        "first_call_s": 0.05,
    }
    fields.update(parts)
    return IpuRecord(**fields)


def run(index: int, time_s: float | None, seed: int | None = None) -> TrainRun:
    """A run that reached the target in ``time_s`` (``None``: did not, after its 3 epochs)."""
    return TrainRun(
        index=index,
        seed=100 + index if seed is None else seed,
        reached=time_s is not None,
        time_s=time_s,
        epochs=3,
        samples=96,
        samples_per_s=96.0,
        curve=(CurvePoint(1, 1.0, 32, 0.5),),
    )


STEP = TrainingRecord(16, 2, 1, 1, 2, 64, "SGD", False, "eager", 30, 2.5, -0.25)


def _summary(runs: Sequence[TrainRun]) -> TimeToTrainRecord:
    return summarize(
        runs, quality="accuracy", quality_target=0.9, higher_is_better=True, max_epochs=3, processes=1
    )


@settings(max_examples=60, deadline=None)
@given(st.none() | trainings, st.none() | times_to_train, st.none() | scalings)
def test_training_parts_round_trip(
    training: TrainingRecord | None, time_to_train: TimeToTrainRecord | None, scaled: ScalingRecord | None
) -> None:
    record = make_record(training=training, time_to_train=time_to_train, scaling=scaled)
    data = schema.to_json(record)
    assert schema.from_json(data) == record
    # Through JSON text, as the record travels in the pytest-benchmark file.
    assert schema.from_json(json.loads(json.dumps(data, allow_nan=False))) == record


def test_the_training_parts_json_layout() -> None:
    summary = _summary([run(1, 2.0), run(2, 1.0), run(3, 3.0)])
    part = scaling(2, 1800.0, 1, 1000.0, "base.json", time_to_train_s=1.0, baseline_time_to_train_s=1.5)
    data = schema.to_json(make_record(training=STEP, time_to_train=summary, scaling=part))
    assert data["training"]["global_batch"] == 64
    assert data["training"]["loss_last"] == -0.25
    assert data["time_to_train"]["olympic_runs"] == [1]
    assert data["time_to_train"]["runs"][0]["curve"] == [
        {"epoch": 1, "elapsed_s": 1.0, "samples": 32, "quality": 0.5}
    ]
    assert data["scaling"]["efficiency"] == 0.9
    # A record without them (inference, or written before they existed) has no such keys, and reads
    # back with None; a null reads the same.
    plain = schema.to_json(make_record())
    assert not {"training", "time_to_train", "scaling"} & set(plain)
    assert schema.from_json(plain) == make_record()
    assert (
        schema.from_json({**plain, "training": None, "time_to_train": None, "scaling": None}) == make_record()
    )


def _full_json() -> dict[str, Any]:
    summary = _summary([run(1, 2.0), run(2, None), run(3, 3.0)])
    part = scaling(2, 1800.0, 1, 1000.0, "base.json", time_to_train_s=1.0, baseline_time_to_train_s=1.5)
    return schema.to_json(make_record(training=STEP, time_to_train=summary, scaling=part))


def _put(data: dict[str, Any], path: str, value: object) -> None:
    """Set the key at the dotted ``path`` (``a.b[2].c``); ``...`` as ``value`` deletes it."""
    *parents, last = (
        int(part[1:-1]) if part.startswith("[") else part for part in path.replace("[", ".[").split(".")
    )
    node: Any = data
    for part in parents:
        node = node[part]
    if value is ...:
        del node[last]
    else:
        node[last] = value


@pytest.mark.parametrize(
    ("path", "value", "want"),
    [
        ("training.micro_batch", -1, "it must be >= 0"),
        ("training.global_batch", 6.5, "it must be a whole number >= 0"),
        ("training.amp", 1, "it must be true or false"),
        ("training.optimizer", None, "it must be a string"),
        ("training.loss_first", float("nan"), "it must be a finite number"),
        ("training.loss_last", "low", "it must be a finite number"),
        ("training.steps", ..., "it must be a whole number >= 0"),
        ("time_to_train.quality_target", float("inf"), "it must be a finite number"),
        ("time_to_train.olympic_s", -1.0, "it must be"),
        ("time_to_train.olympic_runs[0]", "1", "it must be a whole number >= 0"),
        ("time_to_train.runs[1].reached", "no", "it must be true or false"),
        ("time_to_train.runs[1].time_s", ..., "it must be a number >= 0 or null"),
        ("time_to_train.runs[2].seed", -5, "it must be >= 0"),
        ("time_to_train.runs[0].curve[0].quality", None, "it must be a finite number"),
        ("time_to_train.runs[0].curve[0].elapsed_s", -0.5, "it must be"),
        ("time_to_train.cv", "wide", "it must be"),
        ("scaling.efficiency", "high", "it must be"),
        ("scaling.baseline_file", 3, "it must be a string"),
        ("scaling.processes", True, "it must be a whole number >= 0"),
    ],
)
def test_a_bad_value_in_a_training_part_is_named_by_its_dotted_key(
    path: str, value: object, want: str
) -> None:
    data = _full_json()
    _put(data, path, value)
    with pytest.raises(SchemaError, match=r"^malformed pytest-ipu record: ") as info:
        schema.from_json(data)
    message = str(info.value)
    assert f"'{path}' is " in message
    assert want in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("training", [1, 2]),
        ("time_to_train", "fast"),
        ("scaling", 0.9),
        ("time_to_train.runs", {"index": 1}),
        ("time_to_train.runs[0]", 3),
        ("time_to_train.runs[0].curve[0]", [1, 2.0, 32, 0.5]),
    ],
)
def test_a_training_part_that_is_not_an_object_or_list_is_named(path: str, value: object) -> None:
    data = _full_json()
    _put(data, path, value)
    with pytest.raises(SchemaError, match=f"'{re.escape(path)}' is "):
        schema.from_json(data)


def test_a_time_to_train_record_gives_its_metric_and_kept_runs_to_gates() -> None:
    summary = _summary([run(1, 4.0), run(2, 1.0), run(3, 2.0), run(4, 3.0)])
    record = make_record(time_to_train=summary)
    assert record.value("time_to_train") == 2.5
    # Each kept run is one measurement of the time to train: the evidence a gate weighs.
    assert record.repeat_values("time_to_train") == (2.0, 3.0)
    assert make_record(training=STEP).value("time_to_train") is None
    assert STEP.devices == 2


# -- olympic average ---------------------------------------------------------------------------------


def test_with_three_runs_or_more_the_fastest_and_slowest_are_dropped() -> None:
    runs = [run(1, 5.0), run(2, 1.0), run(3, 3.0), run(4, 2.0), run(5, 4.0)]
    assert olympic(runs) == (3.0, (3, 4, 5))
    assert olympic(runs[:3]) == (3.0, (3,))


def test_one_missed_run_of_three_or_more_is_dropped_as_the_slowest() -> None:
    assert olympic([run(1, 2.0), run(2, None), run(3, 1.0)]) == (2.0, (1,))
    average, kept = olympic([run(1, None), run(2, 4.0), run(3, 1.0), run(4, 2.0)])
    assert (average, kept) == (3.0, (2, 4))


def test_two_missed_runs_leave_no_score_naming_both_runs_and_seeds() -> None:
    runs = [run(1, 1.0), run(2, None, seed=17), run(3, 2.0), run(4, None, seed=99)]
    with pytest.raises(NoScore) as info:
        olympic(runs)
    message = str(info.value)
    assert message.startswith("run 2 (seed 17), run 4 (seed 99) did not reach the target")
    assert "one run of three or more may miss it" in message
    assert "run 1" not in message
    assert "\n" not in message


@pytest.mark.parametrize("count_", [1, 2])
def test_with_fewer_than_three_runs_none_may_miss(count_: int) -> None:
    runs = [run(1, None, seed=5), run(2, 1.0)][:count_]
    with pytest.raises(NoScore, match=r"^run 1 \(seed 5\) did not reach .*with fewer than 3 runs none may"):
        olympic(runs)


def test_with_fewer_than_three_runs_every_run_counts() -> None:
    assert olympic([run(1, 3.0)]) == (3.0, (1,))
    assert olympic([run(1, 3.0), run(2, 1.0)]) == (2.0, (1, 2))


def test_no_runs_have_no_score() -> None:
    with pytest.raises(NoScore, match="no runs"):
        olympic([])


def test_summarize_spreads_over_the_runs_that_reached_the_target() -> None:
    runs = [run(1, 2.0), run(2, None), run(3, 1.0), run(4, 3.0)]
    summary = _summary(runs)
    assert summary.runs == tuple(runs)
    assert (summary.olympic_s, summary.olympic_runs) == (2.5, (1, 4))
    # The missed run has no time: min and max and the spread are the reached runs'.
    assert (summary.min_s, summary.max_s) == (1.0, 3.0)
    assert summary.cv == pytest.approx(statistics.stdev([2.0, 1.0, 3.0]) / 2.0, rel=1e-12)
    assert summary.olympic_times_s == (2.0, 3.0)
    assert (summary.quality, summary.quality_target, summary.max_epochs, summary.processes) == (
        "accuracy",
        0.9,
        3,
        1,
    )


def test_one_reached_run_has_no_spread() -> None:
    summary = _summary([run(1, 2.5)])
    assert (summary.min_s, summary.max_s, summary.cv) == (2.5, 2.5, None)


def test_summarize_raises_no_score_like_the_average() -> None:
    with pytest.raises(NoScore, match=r"run 1 \(seed 101\), run 2 \(seed 102\)"):
        _summary([run(1, None), run(2, None), run(3, 1.0)])


# -- scaling -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "throughput", "n0", "base", "speedup", "efficiency"),
    [
        (4, 300.0, 1, 100.0, 3.0, 0.75),
        (8, 360.0, 2, 100.0, 3.6, 0.9),
        (1, 90.0, 1, 100.0, 0.9, 0.9),
        (2, 250.0, 1, 100.0, 2.5, 1.25),  # superlinear: reported as measured, never clipped
    ],
)
def test_scaling_efficiency_is_the_speedup_over_the_process_ratio(
    n: int, throughput: float, n0: int, base: float, speedup: float, efficiency: float
) -> None:
    part = scaling(n, throughput, n0, base, "base.json")
    assert part.speedup == pytest.approx(speedup, rel=1e-12)
    assert part.efficiency == pytest.approx(efficiency, rel=1e-12)
    assert (part.processes, part.baseline_processes, part.baseline_file) == (n, n0, "base.json")
    assert part.baseline_throughput_items_per_s == base
    assert (part.baseline_time_to_train_s, part.time_to_train_speedup) == (None, None)


def test_the_time_to_train_speedup_is_the_baseline_time_over_this_one() -> None:
    part = scaling(4, 300.0, 1, 100.0, "b.json", time_to_train_s=10.0, baseline_time_to_train_s=30.0)
    assert part.time_to_train_speedup == pytest.approx(3.0, rel=1e-12)
    assert part.baseline_time_to_train_s == 30.0
    # Either time absent: no speed-up, never a made-up one.
    assert scaling(4, 300.0, 1, 100.0, "b.json", baseline_time_to_train_s=30.0).time_to_train_speedup is None
    assert scaling(4, 300.0, 1, 100.0, "b.json", time_to_train_s=10.0).time_to_train_speedup is None


def _document(path: Path, records: dict[str, IpuRecord]) -> Path:
    benchmarks = [{"fullname": k, "extra_info": {"ipu": schema.to_json(r)}} for k, r in records.items()]
    path.write_text(json.dumps({"machine_info": {}, "benchmarks": benchmarks}))
    return path


def test_a_baseline_scales_the_training_records_it_has(tmp_path: Path) -> None:
    one = dataclasses.replace(STEP, processes=1, global_batch=32)
    base = _document(
        tmp_path / "base.json",
        {"t.py::step": make_record(training=one), "t.py::infer": make_record()},
    )
    baselines = scaling_baseline.load(base)
    assert list(baselines) == ["t.py::step"]  # an inference record has no processes to scale over
    document = json.loads(
        _document(
            tmp_path / "run.json",
            {
                "t.py::step": make_record(training=STEP, throughput_items_per_s=1920.0),
                "t.py::other": make_record(training=STEP),
            },
        ).read_text()
    )
    scaling_baseline.apply(document, baselines, str(base))
    scaled, other = (b["extra_info"]["ipu"] for b in document["benchmarks"])
    assert scaled["scaling"]["processes"] == 2
    assert scaled["scaling"]["baseline_processes"] == 1
    assert scaled["scaling"]["efficiency"] == pytest.approx(1920.0 / 1280.0 / 2, rel=1e-12)
    assert "scaling" not in other  # the baseline lacks it


@pytest.mark.parametrize(
    ("content", "part"),
    [
        (None, "cannot read"),
        ("{not json", "not JSON"),
        (json.dumps({"benchmarks": []}), "holds no training or time-to-train record"),
    ],
)
def test_a_bad_baseline_file_is_named(tmp_path: Path, content: str | None, part: str) -> None:
    path = tmp_path / "base.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(scaling_baseline.BaselineError, match=r"^--ipu-scaling-baseline") as info:
        scaling_baseline.load(path)
    assert str(path) in str(info.value)
    assert part in str(info.value)
    assert "\n" not in str(info.value)


# -- run_once ----------------------------------------------------------------------------------------


class Clock:
    """A clock that moves only when the fake run says its work took time."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeRun:
    """Trains for 2 s and evaluates for 0.5 s per epoch (on ``clock``); qualities as given."""

    def __init__(self, clock: Clock, qualities: Sequence[float], samples: object = 32) -> None:
        self.clock = clock
        self.qualities = list(qualities)
        self.samples = samples
        self.epochs = 0
        self.evaluations = 0

    def train_epoch(self) -> Any:
        self.clock.now += 2.0
        self.epochs += 1
        return self.samples

    def evaluate(self) -> float:
        self.clock.now += 0.5
        self.evaluations += 1
        return self.qualities[self.epochs - 1]


def _run_once(fake: FakeRun, clock: Clock, **kwargs: Any) -> TrainRun:
    options: dict[str, Any] = {
        "index": 2,
        "seed": 42,
        "target": 0.9,
        "higher_is_better": True,
        "max_epochs": 10,
    }
    options.update(kwargs)
    return ttt.run_once(fake, clock=clock, **options)


def test_a_run_stops_at_the_epoch_that_reaches_the_target() -> None:
    clock = Clock()
    fake = FakeRun(clock, [0.5, 0.8, 0.95, 0.99])
    done = _run_once(fake, clock)
    assert fake.epochs == fake.evaluations == 3
    assert (done.index, done.seed, done.reached, done.epochs) == (2, 42, True, 3)
    # The clock runs over training and evaluation alike: 2.5 s an epoch.
    assert done.time_s == pytest.approx(7.5)
    assert done.samples == 96
    assert done.samples_per_s == pytest.approx(96 / 7.5)
    assert [(p.epoch, p.samples, p.quality) for p in done.curve] == [
        (1, 32, 0.5),
        (2, 64, 0.8),
        (3, 96, 0.95),
    ]
    assert [p.elapsed_s for p in done.curve] == pytest.approx([2.5, 5.0, 7.5])


def test_the_target_itself_counts_as_reached() -> None:
    clock = Clock()
    assert _run_once(FakeRun(clock, [0.9]), clock).epochs == 1
    assert _run_once(FakeRun(clock, [0.5]), clock, target=0.5, higher_is_better=False).epochs == 1


def test_a_run_that_never_reaches_the_target_ends_at_the_epoch_limit() -> None:
    clock = Clock()
    fake = FakeRun(clock, [0.1] * 20)
    done = _run_once(fake, clock, max_epochs=4)
    assert fake.epochs == 4
    assert (done.reached, done.time_s, done.epochs, done.samples) == (False, None, 4, 128)
    assert len(done.curve) == 4
    assert done.curve[-1].elapsed_s == pytest.approx(10.0)
    assert done.samples_per_s == pytest.approx(128 / 10.0)


def test_a_lower_is_better_quality_reaches_the_target_from_above() -> None:
    clock = Clock()
    losses = [2.0, 1.0, 0.4, 0.1]
    done = _run_once(FakeRun(clock, losses), clock, target=0.5, higher_is_better=False)
    assert (done.reached, done.epochs) == (True, 3)
    # Read the other way round, the first loss already "reaches" 0.5.
    assert _run_once(FakeRun(clock, losses), clock, target=0.5, higher_is_better=True).epochs == 1


@pytest.mark.parametrize("bad", ["32", 32.0, True, -1, None])
def test_train_epoch_must_return_the_samples_it_saw(bad: object) -> None:
    clock = Clock()
    with pytest.raises(TypeError) as info:
        _run_once(FakeRun(clock, [0.5], samples=bad), clock)
    message = str(info.value)
    assert message.startswith(f"train_epoch() of time-to-train run 2 returned {bad!r}: ")
    assert "a whole number >= 0" in message
    assert "\n" not in message


class FakeRanks:
    """Two ranks: the other one trains as many samples, and first reaches the target after ``behind``
    epochs that did not."""

    def __init__(self, behind: int) -> None:
        self.behind = behind
        self.barriers: list[str] = []
        self.asked: list[float] = []

    def barrier(self, what: str) -> None:
        self.barriers.append(what)

    def total(self, value: float) -> float:
        return 2 * value

    def agree_max(self, value: float) -> float:
        self.asked.append(value)
        other = 1.0 if len(self.asked) <= self.behind else 0.0
        return max(value, other)


def test_ranks_start_together_count_every_sample_and_stop_at_the_same_epoch() -> None:
    clock = Clock()
    ranks = FakeRanks(behind=2)
    # This rank reaches the target in its first epoch; the other rank only in its third.
    done = _run_once(FakeRun(clock, [0.95] * 10), clock, ranks=ranks)
    assert ranks.barriers == ["the start of time-to-train run 2"]
    assert ranks.asked == [0.0, 0.0, 0.0]  # this rank said "reached" at every epoch
    assert (done.reached, done.epochs) == (True, 3)
    assert [p.samples for p in done.curve] == [64, 128, 192]
    assert done.samples == 192


# -- LossTrace ---------------------------------------------------------------------------------------


def test_a_loss_trace_keeps_the_first_and_last_losses() -> None:
    trace = LossTrace()
    assert (trace.steps, trace.first, trace.last) == (0, None, None)
    for loss in (2.0, 1.5, -0.5):
        trace.add(loss, "Net on torch:cpu")
    assert (trace.steps, trace.first, trace.last) == (3, 2.0, -0.5)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_loss_raises_naming_its_step(bad: float) -> None:
    trace = LossTrace()
    trace.add(1.0, "Net on torch:cpu")
    trace.add(0.5, "Net on torch:cpu")
    with pytest.raises(NonFiniteLoss) as info:
        trace.add(bad, "Net on torch:cpu")
    message = str(info.value)
    assert message.startswith(f"pytest-ipu: training step 3 of Net on torch:cpu: the loss is {bad}; ")
    assert "\n" not in message
    # The bad loss is counted as a step but never becomes the last loss.
    assert (trace.steps, trace.first, trace.last) == (3, 1.0, 0.5)


def test_a_first_loss_that_is_nan_names_step_one() -> None:
    with pytest.raises(NonFiniteLoss, match="training step 1 of "):
        LossTrace().add(float("nan"), "m")


def test_the_items_per_second_mark_leaves_data_parallel_and_time_to_train_records_alone() -> None:
    from pytest_ipu.report.terminal import apart

    # 32 items at a 25 ms median would be 1280 items/s; a record at 4000 items/s is marked ...
    far = make_record(throughput_items_per_s=4000.0)
    assert apart(far)
    # ... but not when it is one rank's (or, merged, every rank's) share of a launch, nor a time to
    # train, whose calls are whole runs: nothing in the record predicts their rate from one call.
    assert not apart(dataclasses.replace(far, training=dataclasses.replace(STEP, processes=2)))
    assert apart(dataclasses.replace(far, training=dataclasses.replace(STEP, processes=1)))
    summary = _summary([run(1, 2.0), run(2, 1.0), run(3, 3.0)])
    assert not apart(dataclasses.replace(far, time_to_train=summary))
