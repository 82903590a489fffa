"""One benchmark to its record (pytest_ipu.run.benchmark): what is called, counted and derived."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from pytest_ipu.backends.base import GroupedModel
from pytest_ipu.backends.host import wrap_callable
from pytest_ipu.errors import CallTimeout
from pytest_ipu.measure import stats
from pytest_ipu.measure import timing
from pytest_ipu.measure.contention import ContentionRecord
from pytest_ipu.measure.metrics import summarize_latency
from pytest_ipu.placement.instances import ThreadInstances
from pytest_ipu.power.meter import PowerMeter
from pytest_ipu.report import terminal
from pytest_ipu.results.records import RepeatRecord
from pytest_ipu.results.records import identity
from pytest_ipu.run.benchmark import Measurement
from pytest_ipu.run.benchmark import RepeatContext
from pytest_ipu.run.benchmark import batch_size
from pytest_ipu.run.benchmark import check_arguments
from pytest_ipu.run.benchmark import measure
from pytest_ipu.run.benchmark import pool
from pytest_ipu.run.benchmark import round_spread
from pytest_ipu.run.benchmark import stability
from pytest_ipu.run.plan import RoundsPolicy
from tests.fakes.fake_pedantic import RecordingBenchmark
from tests.fakes.fake_power import FakePowerSource


def test_a_record_is_built_from_the_rounds_that_were_timed() -> None:
    calls: list[object] = []
    bench = RecordingBenchmark()
    result = measure(
        wrap_callable(calls.append),
        ([1, 2, 3, 4],),
        items_per_call=None,
        policy=RoundsPolicy(warmup_rounds=2, rounds=7, max_time_s=1.0, min_rounds=5),
        timer=bench,
        round_times_s=lambda: bench.times_s,
        meter=None,
        context=RepeatContext(unmeasured=("off", "power measurement is off")),
    )
    record = result.record
    assert len(calls) == 1 + 2 + 7  # first call, warm-up, timed rounds
    assert result.samples_s == tuple(bench.times_s)
    assert (record.rounds, record.rounds_policy, record.warmup_rounds) == (7, "fixed", 2)
    assert record.batch_size == record.items_per_call == 4
    assert record.latency_s.p50 == stats.percentile(bench.times_s, 50)
    assert record.latency_s.rounds == 7
    # Throughput: items of every round over the window's wall time, which holds every round.
    assert record.throughput_items_per_s == 4 * 7 / record.window_s
    assert record.window_s >= sum(bench.times_s)
    assert record.power is not None
    assert (record.power.measured, record.power.source) == (False, "off")
    assert record.target == "python:host"
    assert record.compile_s is None


def test_items_per_call_must_be_positive() -> None:
    bench = RecordingBenchmark()
    with pytest.raises(
        ValueError, match=r"ipu_benchmark\(items_per_call=0\): items_per_call must be at least 1"
    ):
        measure(
            wrap_callable(lambda: None),
            (),
            items_per_call=0,
            policy=RoundsPolicy(0, 1, 1.0, 1),
            timer=bench,
            round_times_s=lambda: bench.times_s,
            meter=None,
        )


@pytest.mark.parametrize(("inputs", "expected"), [((), 1), (([1, 2, 3],), 3), ((5,), 1), ((object(),), 1)])
def test_batch_size_is_the_leading_dimension_of_the_first_input(
    inputs: tuple[object, ...], expected: int
) -> None:
    assert batch_size(inputs) == expected


@pytest.mark.parametrize(("items_per_call", "batch"), [(1, 1), (None, 256)])
def test_the_batch_shown_is_the_items_per_call_the_benchmark_declared(
    items_per_call: int | None, batch: int
) -> None:
    # A plain callable taking one 256 x 256 matrix as one item: the leading dimension is no batch.
    bench = RecordingBenchmark()
    record = measure(
        wrap_callable(lambda m: m.sum()),
        (np.ones((256, 256)),),
        items_per_call=items_per_call,
        policy=RoundsPolicy(warmup_rounds=0, rounds=3, max_time_s=1.0, min_rounds=1),
        timer=bench,
        round_times_s=lambda: bench.times_s,
        meter=None,
    ).record
    assert (record.batch_size, record.items_per_call) == (batch, batch)
    table = terminal.tables([terminal.Row("g", "test_matrix", record)])
    header = table[1].split()
    assert table[3].split()[header.index("batch")] == str(batch)


# -- repeats: one repeat's parts, pooling, stability ------------------------------------------------


class FakeProbe:
    """Stands in for the contention probe: records when it is started and stopped."""

    def __init__(self, events: list[str], others: float) -> None:
        self.events = events
        self.others = others

    def start(self) -> None:
        self.events.append("probe start")

    def stop(self) -> ContentionRecord:
        self.events.append("probe stop")
        return ContentionRecord(
            True, window_s=1.0, cpus=2, others_share=self.others, contended=self.others > 0.1
        )


def _repeat(calls: list[str], index: int, rounds: int = 6, others: float = 0.0) -> Measurement:
    timer = RecordingBenchmark()
    return measure(
        wrap_callable(lambda _batch: calls.append("call")),
        ([1, 2],),
        items_per_call=None,
        policy=RoundsPolicy(warmup_rounds=1, rounds=rounds, max_time_s=1.0, min_rounds=1),
        timer=timer,
        round_times_s=lambda: timer.times_s,
        meter=None,
        context=RepeatContext(index=index, probe=FakeProbe(calls, others)),  # type: ignore[arg-type]
    )


def test_one_repeat_records_itself_its_budget_and_the_contention_around_its_window() -> None:
    calls: list[str] = []
    result = _repeat(calls, index=2)
    record = result.record
    # The probe brackets the timed rounds only, not the warm-up: a later repeat's first call is
    # one of its warm-up calls (one here).
    assert calls == ["call", "probe start", *["call"] * 6, "probe stop"]
    assert len(record.repeats) == 1
    assert (record.repeats[0].index, record.repeats[0].rounds, record.repeats[0].ended) == (2, 6, "planned")
    assert record.repeats[0].throughput_items_per_s == record.throughput_items_per_s
    assert record.budget is not None
    assert (record.budget.budget_s, record.budget.cap_s, record.budget.ended) == (None, None, "planned")
    assert record.contention is not None
    assert record.contention.others_share == 0.0
    assert record.stability is not None
    assert (record.stability.repeats, record.stability.mode, record.stability.cv) == (1, "single", None)
    assert result.calls_s == result.samples_s


def test_the_throughput_a_gate_judges_is_the_median_rounds_and_one_slow_round_does_not_move_it() -> None:
    # The rounds' times as pytest-benchmark's timer took them: one stretched by a neighbour.
    rounds = [0.002, 0.002, 0.002, 0.002, 0.002, 0.002, 0.080]
    result = measure(
        wrap_callable(lambda _batch: None),
        ([1, 2, 3, 4],),
        items_per_call=None,
        policy=RoundsPolicy(warmup_rounds=0, rounds=7, max_time_s=1.0, min_rounds=1),
        timer=RecordingBenchmark(),
        round_times_s=lambda: rounds,
        meter=None,
    )
    record = result.record
    assert record.median_throughput_items_per_s == pytest.approx(4 / 0.002)
    assert record.repeats[0].median_throughput_items_per_s == record.median_throughput_items_per_s
    assert record.value("throughput") == record.median_throughput_items_per_s
    assert record.repeat_values("throughput") == (record.median_throughput_items_per_s,)
    # The window's figure stays in the record, as the tables show it.
    assert record.throughput_items_per_s == 4 * 7 / record.window_s
    # Pooled repeats: items per round over the median of every repeat's rounds.
    pooled = pool([result, result], "interleaved", unstable_threshold=0.05).record
    assert pooled.median_throughput_items_per_s == pytest.approx(4 / 0.002)


def test_pooled_repeats_sum_rounds_and_windows_and_keep_each_summary() -> None:
    calls: list[str] = []
    parts = [_repeat(calls, index=1, rounds=5), _repeat(calls, index=2, rounds=7, others=0.3)]
    pooled = pool(parts, "interleaved", unstable_threshold=0.05)
    record = pooled.record
    assert record.rounds == 12
    assert [r.index for r in record.repeats] == [1, 2]
    assert [r.rounds for r in record.repeats] == [5, 7]
    assert record.window_s == pytest.approx(parts[0].record.window_s + parts[1].record.window_s)
    items = sum(p.record.throughput_items_per_s * p.record.window_s for p in parts)
    assert record.throughput_items_per_s == pytest.approx(items / record.window_s)
    assert record.latency_s.rounds == 12  # the percentiles are of every call of every repeat
    assert pooled.samples_s == parts[0].samples_s + parts[1].samples_s
    assert record.first_call_s == parts[0].record.first_call_s
    assert record.contention is not None
    assert record.contention.contended
    assert record.stability is not None
    assert (record.stability.repeats, record.stability.mode) == (2, "interleaved")
    values = [p.record.throughput_items_per_s for p in parts]
    assert record.stability.cv == pytest.approx(statistics.stdev(values) / statistics.fmean(values))
    assert record.stability.unstable == (record.stability.cv > 0.05)
    # Each repeat keeps its CPU time; the record's totals are theirs summed.
    assert [r.cpu for r in record.repeats] == [p.record.cpu for p in parts]
    assert record.cpu is not None
    cpus = [p.record.cpu for p in parts if p.record.cpu is not None]
    assert record.cpu.process_total_s == pytest.approx(sum(c.process_total_s for c in cpus))


def test_stability_decides_on_repeats_when_there_are_two_and_on_rounds_otherwise() -> None:
    def repeat(throughput: float) -> RepeatRecord:
        return RepeatRecord(1, 4, 1.0, summarize_latency([0.1] * 4), throughput)

    steady = stability([repeat(100.0), repeat(101.0)], [0.1, 0.5, 0.1, 0.5], 0.05, "interleaved")
    assert steady.basis == "repeats"
    assert steady.unstable is False  # the rounds spread widely, the repeats agree: repeats decide
    shaky = stability([repeat(100.0), repeat(130.0)], [0.1] * 4, 0.05, "interleaved")
    assert shaky.unstable is True
    alone = stability([repeat(100.0)], [1.0, 1.0, 2.0, 2.0], 0.05, "single")
    assert (alone.basis, alone.cv, alone.unstable) == ("rounds", None, True)
    assert alone.round_spread == pytest.approx(1.0 / 1.5)  # IQR 1 over median 1.5
    assert round_spread([1.0, 2.0, 3.0]) is None  # too few rounds for quartiles
    with pytest.raises(ValueError, match="no repeats to pool"):
        pool([], "interleaved", 0.05)


# -- CPU time ---------------------------------------------------------------------------------------


def _measured(fn: Callable[[], object], rounds: int = 5) -> Measurement:
    timer = RecordingBenchmark()
    return measure(
        wrap_callable(fn),
        (),
        items_per_call=1,
        policy=RoundsPolicy(warmup_rounds=1, rounds=rounds, max_time_s=1.0, min_rounds=1),
        timer=timer,
        round_times_s=lambda: timer.times_s,
        meter=None,
    )


def test_a_sleeping_call_spends_far_less_cpu_time_than_wall_time() -> None:
    # Relations that hold however loaded the machine: a thread asleep is off the CPU, and a thread
    # never runs longer than the wall time that passes.
    record = _measured(lambda: time.sleep(0.005)).record
    cpu = record.cpu
    assert cpu is not None
    assert cpu.thread_s < record.latency_s.p50
    assert cpu.process_s < record.latency_s.p50
    assert cpu.thread_total_s <= record.window_s
    assert cpu.off_cpu_share > 0.5
    assert record.repeats[0].cpu == cpu
    assert record.value("cpu_time") == cpu.process_s
    assert "off-cpu" in record.flags  # a host target, off the CPU most of its window


def test_process_cpu_time_counts_the_work_of_the_threads_a_call_waits_for() -> None:
    def call() -> None:
        # The work runs on another thread; the calling thread waits for it off the CPU (join).
        worker = threading.Thread(target=lambda: sum(i * i for i in range(200_000)))
        worker.start()
        worker.join()

    cpu = _measured(call).record.cpu
    assert cpu is not None
    assert cpu.process_s > cpu.thread_s
    assert cpu.process_total_s > cpu.thread_total_s


def test_instances_in_worker_processes_count_in_the_cpu_time_only_as_their_workers_report_it() -> None:
    from dataclasses import replace

    from pytest_ipu.measure.timing import Window
    from pytest_ipu.results.records import PlacementRecord
    from pytest_ipu.run.benchmark import cpu_time

    window = Window(0, 1_000, 1, "planned", thread_cpu_ns=(500,), process_cpu_ns=(600,))
    model = wrap_callable(lambda: None)
    placed = replace(model, placement=PlacementRecord(2, 1, 1, 1, "processes", True, ("cpu", "cpu")))
    threads = replace(model, placement=PlacementRecord(2, 1, 1, 1, "threads", True, ("cpu", "cpu")))
    # Workers that reported no CPU time: this process's alone would understate the host's.
    assert cpu_time(placed, window, 8) is None
    cpu = cpu_time(threads, window, 8)
    assert cpu is not None
    assert (cpu.thread_s, cpu.process_s, cpu.off_cpu_share) == pytest.approx((500e-9, 600e-9, 0.5))
    assert (cpu.host_per_item_s, cpu.host_cores, cpu.workers) == pytest.approx((75e-9, 0.6, 0))


def test_the_host_cost_of_instances_in_worker_processes_counts_the_work_of_the_workers() -> None:
    import functools

    from pytest_ipu.placement.instances import InstanceSpec
    from pytest_ipu.placement.instances import ProcessInstances
    from pytest_ipu.results.records import PlacementRecord
    from tests.fakes.fake_backend import Doubler
    from tests.fakes.fake_backend import FakeBackend

    burn_s, rounds = 0.02, 4
    # Two workers whose every call spends 20 ms of CPU time (host-bound work), while this process
    # only waits for their replies.
    group = ProcessInstances(
        [
            InstanceSpec(
                i,
                functools.partial(FakeBackend, device=f"dev{i}", burn_cpu_s=burn_s),
                Doubler(),
                (np.zeros(3),),
                "fp32",
            )
            for i in range(2)
        ]
    )
    try:
        compiled = GroupedModel(
            **identity(wrap_callable(lambda: None)),
            run=lambda *_: group.round(),
            prepare_inputs=lambda inputs: (group.prepare(inputs), ())[1],
            close=group.close,
            placement=PlacementRecord(2, 1, 1, 1, "processes", False, ("dev0", "dev1")),
            group=group,
        )
        record = measure(
            compiled,
            (np.zeros(3),),
            items_per_call=4,
            policy=RoundsPolicy(warmup_rounds=1, rounds=rounds, max_time_s=1.0, min_rounds=1),
            timer=RecordingBenchmark(),
            round_times_s=list,
            meter=None,
        ).record
    finally:
        group.close()
    cpu = record.cpu
    assert cpu is not None
    assert cpu.host_per_item_s is not None
    assert cpu.host_cores is not None
    assert cpu.workers == 2
    # Every timed call's burn is in the workers' part, which this process's clock alone never sees.
    assert cpu.workers_total_s >= 2 * rounds * burn_s
    parent_s = cpu.process_total_s - cpu.workers_total_s
    assert parent_s < cpu.workers_total_s
    # Host cores and CPU time per item count both parts: above this process's alone.
    assert cpu.host_cores * record.window_s == pytest.approx(cpu.process_total_s)
    assert cpu.host_cores > parent_s / record.window_s
    assert cpu.host_per_item_s >= 2 * burn_s / (2 * 4)  # a round: two calls of 4 items, 40 ms of CPU
    assert cpu.process_s >= 2 * burn_s  # a round's CPU time: both workers' calls
    assert record.value("host_cores") == cpu.host_cores
    assert record.repeats[0].value("host_cpu_per_item") == cpu.host_per_item_s


# -- bad arguments, the call timeout, the bounded warm-up -------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"rounds": 0}, ValueError, r"ipu_benchmark\(rounds=0\): rounds must be at least 1; pass rounds=N"),
        ({"rounds": -1}, ValueError, r"ipu_benchmark\(rounds=-1\): rounds must be at least 1"),
        (
            {"rounds": 2.0},
            TypeError,
            r"ipu_benchmark\(rounds=2\.0\): rounds must be a whole number, not float",
        ),
        (
            {"rounds": True},
            TypeError,
            r"ipu_benchmark\(rounds=True\): rounds must be a whole number, not bool",
        ),
        (
            {"warmup_rounds": -5},
            ValueError,
            r"ipu_benchmark\(warmup_rounds=-5\): warmup_rounds must be at least 0",
        ),
        (
            {"items_per_call": "8"},
            TypeError,
            r"ipu_benchmark\(items_per_call='8'\): .* not str; pass the items",
        ),
        ({"items_per_call": 2.5}, TypeError, r"ipu_benchmark\(items_per_call=2\.5\): .* not float"),
        (
            {"items_per_call": 0},
            ValueError,
            r"ipu_benchmark\(items_per_call=0\): items_per_call must be at least 1",
        ),
    ],
)
def test_bad_counts_are_rejected_naming_the_argument_the_value_and_the_fix(
    arguments: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^pytest-ipu: {message}"):
        check_arguments(len, (), **arguments)


def test_good_arguments_pass_and_numpy_integers_are_counts() -> None:
    np = pytest.importorskip("numpy")
    check_arguments(len, [1], items_per_call=np.int64(8), rounds=1, warmup_rounds=0)
    check_arguments(len, (), items_per_call=None, rounds=None, warmup_rounds=None)


def test_an_array_passed_as_the_inputs_says_to_pass_a_tuple() -> None:
    np = pytest.importorskip("numpy")
    with pytest.raises(
        TypeError, match=r"inputs=ndarray of shape \(4, 3\)\): inputs is a sequence .*; pass \(x,\)$"
    ):
        check_arguments(len, np.zeros((4, 3)))
    check_arguments(len, (np.zeros((4, 3)),))  # the right way


def test_a_non_callable_model_and_a_non_sequence_of_inputs_are_rejected() -> None:
    with pytest.raises(TypeError, match=r"ipu_benchmark\(model=int object\): the model must be callable"):
        check_arguments(3, ())
    with pytest.raises(TypeError, match=r"inputs=int object\): inputs is a sequence"):
        check_arguments(len, 3)
    with pytest.raises(TypeError, match=r"inputs=str object\)"):
        check_arguments(len, "abc")


def _blocking_on_call(n: int, release: threading.Event) -> Callable[..., None]:
    calls = [0]

    def model(*_: object) -> None:
        calls[0] += 1
        if calls[0] == n:
            release.wait()  # hangs until the test releases it (or a signal ends the wait)

    return model


def test_a_call_that_hangs_in_the_timed_rounds_fails_naming_its_round() -> None:
    release = threading.Event()
    # Call 1 is the first call, 2 the warm-up call, 3-5 timed rounds 1-3: call 5 is timed round 3.
    with pytest.raises(CallTimeout, match=r"^pytest-ipu: timed round 3 of repeat 2 was still running after"):
        measure(
            wrap_callable(_blocking_on_call(5, release)),
            (),
            items_per_call=1,
            policy=RoundsPolicy(warmup_rounds=2, rounds=10, max_time_s=1.0, min_rounds=1),
            timer=RecordingBenchmark(),
            round_times_s=list,
            meter=None,
            # A later repeat re-warms with one call fewer: its first call is call 1.
            context=RepeatContext(index=2, call_timeout_s=0.2),
        )


def test_a_hang_in_one_of_several_thread_instances_still_ends_the_benchmark() -> None:
    release = threading.Event()
    models = [wrap_callable(lambda *_: None), wrap_callable(_blocking_on_call(4, release))]
    group = ThreadInstances(models)
    compiled = GroupedModel(
        **identity(models[0]),
        run=lambda *_: group.round(),
        prepare_inputs=lambda inputs: (group.prepare(inputs), ())[1],
        close=group.close,
        group=group,
    )
    try:
        # The main thread waits on the hung instance's lock; the signal ends that wait.
        with pytest.raises(CallTimeout, match=r"^pytest-ipu: timed round 2 of repeat 1 "):
            measure(
                compiled,
                (),
                items_per_call=1,
                policy=RoundsPolicy(warmup_rounds=1, rounds=5, max_time_s=1.0, min_rounds=1),
                timer=RecordingBenchmark(),
                round_times_s=list,
                meter=None,
                context=RepeatContext(call_timeout_s=0.2),
            )
    finally:
        release.set()
        group.close()


def test_auto_rounds_stop_warming_up_at_the_budget_and_record_how_many_ran() -> None:
    def slow() -> None:
        time.sleep(0.002)  # sleeps at least 2 ms: every warm-up call alone exceeds the 1 ms budget

    timer = RecordingBenchmark()
    policy = RoundsPolicy(warmup_rounds=50, rounds=None, max_time_s=0.001, min_rounds=1, cap_s=0.003)
    result = measure(
        wrap_callable(slow),
        (),
        items_per_call=1,
        policy=policy,
        timer=timer,
        round_times_s=lambda: timer.times_s,
        meter=None,
    )
    assert result.record.warmup_rounds == 1


@pytest.mark.parametrize("energy", [True, False])
def test_an_energy_window_reaches_its_budget_whatever_the_estimate(
    monkeypatch: pytest.MonkeyPatch, energy: bool
) -> None:
    # A warm-up estimate that a busy machine inflated fiftyfold (50 ms for a call of 1 ms): it plans
    # ceil(1.25 x 0.1 s / 50 ms) = 3 rounds, and is past a tenth of the budget, so no calibration.
    real = timing.warm_up

    def inflated(*args: Any, **kwargs: Any) -> timing.WarmUp:
        warm = real(*args, **kwargs)
        return timing.WarmUp(warm.first_call_s, (0.05,) * len(warm.warmup_s))

    monkeypatch.setattr(timing, "warm_up", inflated)
    meter = PowerMeter(FakePowerSource(), idle_s=0, in_process=False) if energy else None
    if meter is not None:
        meter.open()
    timer = RecordingBenchmark()
    try:
        record = measure(
            wrap_callable(lambda: time.sleep(0.001)),
            (),
            items_per_call=1,
            policy=RoundsPolicy(warmup_rounds=2, rounds=None, max_time_s=0.1, min_rounds=1, cap_s=60.0),
            timer=timer,
            round_times_s=lambda: timer.times_s,
            meter=meter,
        ).record
    finally:
        if meter is not None:
            meter.close()
    assert record.budget is not None
    if energy:
        # The window must reach the budget: the time box ended the rounds there, not the plan.
        assert (record.budget.ended, record.window_s >= 0.1) == ("budget", True)
        assert record.rounds > 3
        assert record.power is not None
        assert record.power.measured, record.power.reason
    else:
        # A throughput window keeps the plan: every planned round ran.
        assert (record.budget.ended, record.rounds) == ("planned", 3)


def test_fixed_rounds_run_every_warm_up_call_asked_for() -> None:
    calls: list[int] = []
    timer = RecordingBenchmark()
    policy = RoundsPolicy(warmup_rounds=6, rounds=2, max_time_s=1e-9, min_rounds=1)
    result = measure(
        wrap_callable(lambda: calls.append(1)),
        (),
        items_per_call=1,
        policy=policy,
        timer=timer,
        round_times_s=lambda: timer.times_s,
        meter=None,
    )
    assert (result.record.warmup_rounds, len(calls)) == (6, 1 + 6 + 2)
