"""One benchmark to its record (pytest_ipu.measure.run): what is called, counted and derived."""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Sequence

import pytest

from pytest_ipu.backends.host import wrap_callable
from pytest_ipu.measure import stats
from pytest_ipu.measure.run import RoundsPolicy
from pytest_ipu.measure.run import batch_size
from pytest_ipu.measure.run import measure


class RecordingBenchmark:
    """pytest-benchmark's ``pedantic`` control flow, keeping each round's time as it does."""

    def __init__(self) -> None:
        self.times_s: list[float] = []

    def pedantic(
        self,
        target: Callable[..., object],
        args: Sequence[object] = (),
        kwargs: dict[str, object] | None = None,
        setup: Callable[[], object] | None = None,
        teardown: Callable[..., object] | None = None,
        rounds: int = 1,
        warmup_rounds: int = 0,
        iterations: int = 1,
    ) -> object:
        for _ in range(rounds):
            if setup is not None:
                assert setup() is None
            start = time.perf_counter_ns()
            target(*args)
            self.times_s.append((time.perf_counter_ns() - start) * 1e-9)
            if teardown is not None:
                teardown(*args)
        return None


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
        unmeasured=("off", "power measurement is off"),
    )
    record = result.record
    assert len(calls) == 1 + 2 + 7  # first call, warm-up, timed rounds
    assert result.samples_s == tuple(bench.times_s)
    assert (record.rounds, record.rounds_policy, record.warmup_rounds) == (7, "fixed", 2)
    assert record.batch_size == record.items_per_call == 4
    assert record.latency.p50_s == stats.percentile(bench.times_s, 50)
    assert record.latency.rounds == 7
    # Throughput: items of every round over the window's wall time, which holds every round.
    assert record.throughput_items_per_s == 4 * 7 / record.window_s
    assert record.window_s >= sum(bench.times_s)
    assert record.power is not None
    assert (record.power.measured, record.power.source) == (False, "off")
    assert record.target == "python:host"
    assert record.compile_s is None


def test_items_per_call_must_be_positive() -> None:
    bench = RecordingBenchmark()
    with pytest.raises(ValueError, match="items_per_call must be >= 1, got 0"):
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
