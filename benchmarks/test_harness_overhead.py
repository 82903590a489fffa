"""The harness's own cost: what ``ipu_benchmark`` adds to each timed round.

For a no-op and for a ~1 ms workload, the median per-round time that ``ipu_benchmark`` reports is
compared with a bare ``perf_counter_ns`` loop around the same callable, measured in the same test
just before and just after (their mean is the reference, so slow drift cancels). Targets: at most
2 us added per round, and a ratio of at most 1.02 at 1 ms. The terminal summary prints the figures.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import pytest

from benchmarks.conftest import HarnessCost

ROUNDS = {"noop": 20_000, "1ms": 1_000}


def _noop() -> None:
    return None


def _spin_for_1ms() -> Callable[[], int]:
    """A CPU-bound pure-Python loop sized on this machine to take about 1 ms."""
    n = 1_000
    while True:
        start = time.perf_counter_ns()
        sum(range(n))
        if time.perf_counter_ns() - start >= 1_000_000 or n > 10**8:
            break
        n *= 2
    # Refine linearly from the last doubling, then take the median of a few calls to settle it.
    per_item = statistics.median(_time_ns(lambda: sum(range(n))) for _ in range(5)) / n
    k = max(1, round(1_000_000 / per_item))
    return lambda: sum(range(k))


def _time_ns(fn: Callable[[], object]) -> int:
    start = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - start


def bare_median_ns(fn: Callable[[], object], rounds: int) -> float:
    """Median of ``rounds`` bare ``perf_counter_ns`` measurements of one call each."""
    clock = time.perf_counter_ns
    samples = []
    for _ in range(rounds):
        start = clock()
        fn()
        samples.append(clock() - start)
    return float(statistics.median(samples))


@pytest.mark.benchmark(group="harness-overhead")
@pytest.mark.parametrize("workload", list(ROUNDS))
def test_harness_overhead(
    ipu_benchmark: Any, benchmark: Any, harness_costs: list[HarnessCost], workload: str
) -> None:
    """ipu_benchmark's reported median vs a bare loop, side by side in one run."""
    fn = _noop if workload == "noop" else _spin_for_1ms()
    rounds = ROUNDS[workload]
    warm = rounds // 10
    bare_median_ns(fn, warm)  # warm caches and frequency before the first bare measurement
    before = bare_median_ns(fn, rounds)
    record = ipu_benchmark(fn, (), rounds=rounds, warmup_rounds=warm)
    after = bare_median_ns(fn, rounds)
    if record is None:
        pytest.skip("pytest-benchmark is disabled: nothing to compare")
    cost = HarnessCost(workload, rounds, (before + after) / 2, record.latency.p50_s * 1e9)
    benchmark.extra_info["harness"] = {
        "bare_median_s": cost.bare_ns * 1e-9,
        "harness_median_s": cost.harness_ns * 1e-9,
        "added_s": cost.added_ns * 1e-9,
        "ratio": cost.ratio,
    }
    harness_costs.append(cost)
    assert record.rounds == rounds
