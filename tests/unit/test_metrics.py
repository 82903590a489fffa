"""Latency summaries and throughput (pytest_ipu.measure.metrics)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_ipu.measure import metrics

MS_1_TO_100 = [i / 1000 for i in range(1, 101)]


def test_summary_of_known_sample():
    s = metrics.summarize_latency(MS_1_TO_100)
    assert s.min == 0.001
    assert s.max == 0.1
    assert s.mean == pytest.approx(0.0505, rel=1e-12)
    assert s.p50 == float(np.percentile(MS_1_TO_100, 50))
    assert s.p50 == pytest.approx(0.0505, rel=1e-12)
    assert s.p90 == float(np.percentile(MS_1_TO_100, 90))
    assert s.p99 == float(np.percentile(MS_1_TO_100, 99))
    assert s.p99 == pytest.approx(0.09901, rel=1e-12)
    assert s.rounds == 100
    assert s.unsupported == ()


def test_summary_does_not_depend_on_sample_order():
    a = metrics.summarize_latency(MS_1_TO_100)
    b = metrics.summarize_latency(list(reversed(MS_1_TO_100)))
    assert (a.min, a.p50, a.p90, a.p99, a.max) == (b.min, b.p50, b.p90, b.p99, b.max)


@pytest.mark.parametrize(
    ("n", "unsupported"),
    [
        (100, ()),
        (99, ("p99",)),
        (10, ("p99",)),
        (9, ("p90", "p99")),
        (5, ("p90", "p99")),
        (2, ("p90", "p99")),
        (1, ("p50", "p90", "p99")),
    ],
)
def test_unsupported_percentiles_by_round_count(n, unsupported):
    s = metrics.summarize_latency(MS_1_TO_100[:n])
    assert s.unsupported == unsupported
    assert s.rounds == n


def test_single_sample_summary_is_that_sample():
    s = metrics.summarize_latency([0.25])
    assert s.min == s.p50 == s.p90 == s.p99 == s.max == s.mean == 0.25


def test_summary_fields_are_floats_for_int_input():
    s = metrics.summarize_latency([1, 2, 3])
    for value in (s.min, s.p50, s.p90, s.p99, s.max, s.mean):
        assert type(value) is float


def test_summary_rejects_empty():
    with pytest.raises(ValueError, match="no latency samples"):
        metrics.summarize_latency([])


def test_summary_rejects_negative():
    with pytest.raises(ValueError, match=r"latency samples must be >= 0 s, got -1e-09"):
        metrics.summarize_latency([0.5, -1e-9, 0.2])


def test_summary_accepts_zero():
    assert metrics.summarize_latency([0.0, 0.0]).max == 0.0


def test_mean_of_constant_sample_is_that_value():
    s = metrics.summarize_latency([0.1, 0.1, 0.1])
    assert s.min <= s.mean <= s.max
    assert s.mean == 0.1


def test_mean_does_not_depend_on_sample_order():
    a = metrics.summarize_latency([0.1, 0.2, 0.3])
    b = metrics.summarize_latency([0.3, 0.2, 0.1])
    assert a.mean == b.mean


@pytest.mark.parametrize(
    ("items", "window_s", "expected"),
    [(100, 2.0, 50.0), (0, 1.0, 0.0), (1, 0.001, 1000.0), (64 * 200, 3.2, 4000.0)],
)
def test_throughput(items, window_s, expected):
    assert metrics.throughput(items, window_s) == pytest.approx(expected, rel=1e-12)


def test_throughput_rejects_negative_items():
    with pytest.raises(ValueError, match="items must be >= 0, got -1"):
        metrics.throughput(-1, 1.0)


@pytest.mark.parametrize("window_s", [0.0, -1.0, math.nan])
def test_throughput_rejects_empty_window(window_s):
    with pytest.raises(ValueError, match="timed window must last > 0 s"):
        metrics.throughput(10, window_s)


# -- CPU time -------------------------------------------------------------------------------------


def test_cpu_time_per_round_is_the_median_and_the_share_is_of_the_whole_window() -> None:
    # Four rounds, thread CPU 1, 2, 3, 10 us; the process had a second thread in the third round.
    cpu = metrics.summarize_cpu_time([1_000, 2_000, 3_000, 10_000], [1_000, 2_000, 9_000, 10_000], 32e-6, 8)
    assert cpu.thread_s == pytest.approx(2.5e-6)
    assert cpu.process_s == pytest.approx(5.5e-6)
    assert cpu.thread_total_s == pytest.approx(16e-6)
    assert cpu.process_total_s == pytest.approx(22e-6)
    # The thread ran 16 us of the window's 32: off the CPU half of it.
    assert cpu.off_cpu_share == pytest.approx(0.5)
    # The host cost: 22 us of CPU time over 8 items, and over the window's 32 us.
    assert cpu.host_per_item_s == pytest.approx(22e-6 / 8)
    assert cpu.host_cores == pytest.approx(22 / 32)
    assert (cpu.workers, cpu.workers_total_s) == (0, 0.0)


def test_the_host_cost_counts_the_worker_processes_beside_this_one() -> None:
    # Three rounds: this process waits (1 us each) while two workers compute (10, 20, 30 us together).
    alone = metrics.summarize_cpu_time([1_000] * 3, [1_000] * 3, 100e-6, 6)
    cpu = metrics.summarize_cpu_time([1_000] * 3, [1_000] * 3, 100e-6, 6, [10_000, 20_000, 30_000], 2)
    assert cpu.workers == 2
    assert cpu.workers_total_s == pytest.approx(60e-6)
    assert cpu.process_s == pytest.approx(21e-6)  # the median round, both parts together
    assert cpu.process_total_s == pytest.approx(63e-6)
    assert cpu.host_per_item_s == pytest.approx(63e-6 / 6)
    assert cpu.host_cores == pytest.approx(0.63)
    assert alone.host_cores is not None
    assert cpu.host_cores > alone.host_cores
    # The timing thread is this process's: the workers do not change its share off the CPU.
    assert cpu.off_cpu_share == alone.off_cpu_share


@pytest.mark.parametrize(
    ("thread_s", "window_s", "share"), [(2.0, 1.0, 0.0), (0.0, 1.0, 1.0), (1.0, 0.0, 0.0)]
)
def test_the_off_cpu_share_stays_within_0_and_1(thread_s: float, window_s: float, share: float) -> None:
    assert metrics.off_cpu_share(thread_s, window_s) == share


@pytest.mark.parametrize(
    ("thread", "process", "workers_ns", "workers"),
    [
        ([], [], [], 0),
        ([1, 2], [1], [], 0),
        ([-1], [1], [], 0),
        ([1], [1], [-1], 1),
        ([1, 2], [1, 2], [1], 1),
        ([1], [1], [1], 0),
        ([1], [1], [], 2),
    ],
    ids=["none", "unequal", "negative", "negative-worker", "worker-rounds", "no-workers", "workers-unread"],
)
def test_cpu_time_of_no_rounds_or_a_negative_round_is_refused(
    thread: list[int], process: list[int], workers_ns: list[int], workers: int
) -> None:
    with pytest.raises(ValueError, match="CPU time"):
        metrics.summarize_cpu_time(thread, process, 1.0, 1, workers_ns, workers)


@pytest.mark.parametrize(("items", "window_s"), [(0, 1.0), (1, 0.0)])
def test_no_host_cost_without_items_or_a_window(items: int, window_s: float) -> None:
    with pytest.raises(ValueError, match=r"items > 0|window > 0 s"):
        metrics.summarize_cpu_time([1], [1], window_s, items)


def test_pooled_cpu_time_is_the_median_of_the_repeats_and_the_share_of_their_windows() -> None:
    a = metrics.CpuTime(
        process_s=1.0, thread_s=1.0, process_total_s=10.0, thread_total_s=9.0, off_cpu_share=0.1
    )
    b = metrics.CpuTime(
        process_s=3.0, thread_s=2.0, process_total_s=30.0, thread_total_s=20.0, off_cpu_share=0.6
    )
    c = metrics.CpuTime(
        process_s=2.0, thread_s=5.0, process_total_s=20.0, thread_total_s=1.0, off_cpu_share=0.9
    )
    pooled = metrics.pool_cpu_time([(a, 10.0, 100.0), (b, 50.0, 300.0), (c, 10.0, 200.0)])
    assert (pooled.process_s, pooled.thread_s) == (2.0, 2.0)
    assert (pooled.process_total_s, pooled.thread_total_s) == (60.0, 30.0)
    assert pooled.off_cpu_share == pytest.approx(1 - 30.0 / 70.0)
    # The host cost of every repeat together: 60 s of CPU time over 600 items and 70 s of windows
    # (not the mean of the repeats' figures, which would weigh a short repeat as a long one).
    assert pooled.host_per_item_s == pytest.approx(0.1)
    assert pooled.host_cores == pytest.approx(60.0 / 70.0)
    with pytest.raises(ValueError, match="no repeats"):
        metrics.pool_cpu_time([])


def test_one_slow_round_moves_the_window_throughput_but_not_the_median_rounds() -> None:
    steady = [0.001] * 10
    # The same rounds, one of them stretched by a neighbour's 50 ms time slice.
    stretched = [0.001] * 9 + [0.051]

    def window(rounds: list[float]) -> float:
        return metrics.throughput(8 * len(rounds), math.fsum(rounds))

    assert window(stretched) < window(steady) / 5  # the window's figure takes the whole slice
    assert metrics.median_round_throughput(8, stretched) == metrics.median_round_throughput(8, steady)
    assert metrics.median_round_throughput(8, steady) == pytest.approx(8000.0)


@pytest.mark.parametrize(
    ("items", "rounds", "message"),
    [(-1, [0.001], "items per round must be >= 0, got -1"), (1, [], "no round times"), (1, [-1.0], ">= 0 s")],
)
def test_a_median_round_throughput_needs_items_and_rounds_of_some_length(
    items: float, rounds: list[float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        metrics.median_round_throughput(items, rounds)


def test_a_median_round_of_no_measurable_time_gives_no_rate() -> None:
    assert metrics.median_round_throughput(4, [0.0, 0.0, 0.001]) is None
