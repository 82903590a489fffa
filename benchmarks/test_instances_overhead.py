"""The cost of running instances concurrently: what one round of ``instances=N`` adds to a call.

Side by side in one run, for each runner (threads, as PopART instances use; worker processes, as
PopTorch instances use): the median time of a round of two instances of a no-op call (the
dispatch cost alone), and of a round of two instances of a 5 ms call that releases the GIL, as a
device call does, against one such call made directly. A ratio near 1.0 means the two instances
really ran at the same time; 2.0 would mean one after the other. Nothing here needs an IPU.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import pytest

from pytest_ipu.backends.base import Availability
from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.placement.instances import InstanceGroup
from pytest_ipu.placement.instances import InstanceSpec
from pytest_ipu.placement.instances import ProcessInstances
from pytest_ipu.placement.instances import ThreadInstances

SECTION = "instances: cost of a round of 2 concurrent instances (medians)"
ROUNDS = 300
SLEEP_S = 0.005
#: A round of two concurrent 5 ms calls should take at most this much longer than one call.
MAX_RATIO = 1.10


def _sleep() -> None:
    time.sleep(SLEEP_S)  # releases the GIL, as a device call does


class SleepBackend:
    """A backend whose compiled model's call does nothing, or sleeps ``sleep_s``; picklable by
    reference, so worker processes can rebuild it."""

    def __init__(self, sleep_s: float = 0.0, name: str = "sleep", device: str = "host") -> None:
        self.sleep_s, self.name, self.device = sleep_s, name, device

    def availability(self) -> Availability:
        """Always present."""
        return Availability.yes()

    def describe(self) -> dict[str, Any]:
        """Nothing to describe."""
        return {}

    def default_precision(self) -> str:
        """fp32."""
        return "fp32"

    def shape_specialized(self, options: Mapping[str, object]) -> bool:
        """No shapes."""
        return False

    def compile(
        self, model: object, example_inputs: Sequence[object], precision: str, options: Mapping[str, object]
    ) -> CompiledModel:
        """A call that sleeps ``sleep_s`` (or returns at once)."""
        sleep_s = self.sleep_s
        run = (lambda: time.sleep(sleep_s)) if sleep_s else (lambda: None)
        return CompiledModel(
            "sleep:host", "sleep", "host", "host", precision, "host", run, tuple, lambda: None
        )


def _median_round_s(group: InstanceGroup) -> float:
    try:
        group.prepare([])
        for _ in range(20):
            group.round()
        times = []
        for _ in range(ROUNDS):
            start = time.perf_counter_ns()
            group.round()
            times.append((time.perf_counter_ns() - start) * 1e-9)
        return statistics.median(times)
    finally:
        group.close()


def _threads(sleep_s: float) -> InstanceGroup:
    backend = SleepBackend(sleep_s)
    return ThreadInstances([backend.compile(None, (), "fp32", {}) for _ in range(2)])


def _processes(sleep_s: float) -> InstanceGroup:
    factory = functools.partial(SleepBackend, sleep_s)
    return ProcessInstances([InstanceSpec(i, factory, None, (), "fp32") for i in range(2)])


@pytest.mark.parametrize("runner", ["threads", "processes"])
def test_instance_round_cost(runner: str, study_report: dict[str, list[str]]) -> None:
    """Dispatch cost and concurrency of one runner, measured side by side with a direct call."""
    make = _threads if runner == "threads" else _processes
    direct = []
    for _ in range(ROUNDS // 3):
        start = time.perf_counter_ns()
        _sleep()
        direct.append((time.perf_counter_ns() - start) * 1e-9)
    one_call_s = statistics.median(direct)
    noop_s = _median_round_s(make(0.0))
    pair_s = _median_round_s(make(SLEEP_S))
    ratio = pair_s / one_call_s
    verdict = "meets" if ratio <= MAX_RATIO else "MISSES"
    study_report.setdefault(SECTION, []).append(
        f"{runner:>9}: no-op round {noop_s * 1e6:,.0f} us; round of two 5 ms calls {pair_s * 1e3:.2f} ms "
        f"vs one direct call {one_call_s * 1e3:.2f} ms: ratio {ratio:.3f} ({verdict} <= {MAX_RATIO})"
    )
    assert ratio < 1.9, f"{runner}: two instances ran one after the other (ratio {ratio:.2f})"
