"""A fake of pytest-benchmark's ``pedantic``: its control flow, keeping each round's time as it does,
for the tests that measure without pytest-benchmark's fixture."""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Sequence


class RecordingBenchmark:
    """pytest-benchmark's ``pedantic`` control flow, keeping each round's time as it does."""

    def __init__(self) -> None:
        self.times_s: list[float] = []

    def rounds_ended_early(self) -> None:
        """The rounds were ended on purpose (a raise from ``setup``): nothing to undo here."""

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
