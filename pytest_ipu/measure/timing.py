"""The timed loop: untimed first call and warm-up, the round plan, and rounds through pytest-benchmark.

Nothing here knows JSON or pytest options. The clock is injectable; the default is
``time.perf_counter_ns``, a monotonic clock with nanosecond resolution.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Protocol

#: Most rounds ``auto`` plans: enough for p99 (100) many times over, and a bounded JSON size.
MAX_AUTO_ROUNDS = 10_000

Clock = Callable[[], int]


class PedanticBenchmark(Protocol):
    """The part of pytest-benchmark's ``benchmark`` fixture the timed loop uses."""

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
        """Run ``target`` for ``rounds`` timed rounds."""


@dataclass(frozen=True)
class WarmUp:
    """Untimed calls before the timed rounds: the first call and the warm-up rounds, in seconds."""

    first_call_s: float
    warmup_s: tuple[float, ...]

    @property
    def estimate_s(self) -> float:
        """Best guess of one round's duration: the warm-up median, else the first call."""
        return statistics.median(self.warmup_s) if self.warmup_s else self.first_call_s


def warm_up(
    fn: Callable[..., object], args: Sequence[Any], rounds: int, clock: Clock = time.perf_counter_ns
) -> WarmUp:
    """Call ``fn`` once (the first call), then ``rounds`` more times, timing each call."""
    durations = []
    for _ in range(rounds + 1):
        start = clock()
        fn(*args)
        durations.append((clock() - start) * 1e-9)
    return WarmUp(durations[0], tuple(durations[1:]))


def plan_rounds(fixed: int | None, estimate_s: float, max_time_s: float, min_rounds: int) -> int:
    """Rounds to time: ``fixed`` if given, else as many as fit in ``max_time_s``, clamped to
    ``[min_rounds, MAX_AUTO_ROUNDS]``."""
    if fixed is not None:
        return fixed
    fit = MAX_AUTO_ROUNDS if estimate_s <= 0 else math.ceil(max_time_s / estimate_s)
    return max(min_rounds, min(fit, MAX_AUTO_ROUNDS))


def timed_rounds(
    benchmark: PedanticBenchmark,
    fn: Callable[..., object],
    args: Sequence[Any],
    rounds: int,
    clock: Clock = time.perf_counter_ns,
    on_start: Callable[[], None] | None = None,
    on_end: Callable[[], None] | None = None,
) -> tuple[int, int]:
    """Run ``rounds`` timed rounds through ``benchmark.pedantic``; return the window's edges (ns).

    pytest-benchmark times each call; the window runs from just before the first round's call to
    just after the last one's, so it includes pytest-benchmark's bookkeeping between rounds, as a
    wall-clock throughput must. The marks are taken in pedantic's setup/teardown, outside the
    timed calls. ``on_start`` runs just before the window opens and ``on_end`` just after it closes
    (reading an energy counter at the exact edges, say), both outside it.
    """
    marks: list[int] = []
    ended = [0]

    def mark_start() -> None:
        # Returning None matters: pedantic treats a truthy return as replacement arguments.
        if not marks:
            if on_start is not None:
                on_start()
            marks.append(clock())

    def mark_end(*_: object) -> None:
        end = clock()
        if len(marks) == 2:
            marks[1] = end
        else:
            marks.append(end)
        ended[0] += 1
        if ended[0] == rounds and on_end is not None:
            on_end()

    benchmark.pedantic(
        fn,
        args=tuple(args),
        setup=mark_start,
        teardown=mark_end,
        rounds=rounds,
        warmup_rounds=0,
        iterations=1,
    )
    return marks[0], marks[1]
