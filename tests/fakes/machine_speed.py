"""A machine whose speed the test sets: the reference workload's timings come from a clock that
moves only by what the test says each kernel took, so the level-shift rule sees exactly that."""

from __future__ import annotations

from collections.abc import Callable

from pytest_ipu.measure.machine_speed import SpeedProbe


class KernelClock:
    """A clock that moves by ``step_s`` at each kernel's end (and not otherwise)."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s

    def kernel(self) -> Callable[[], object]:
        """A kernel that 'takes' ``step_s`` on this clock."""

        def run() -> object:
            self.now_s += self.step_s
            return None

        return run


def steady_probe(level_s: float = 0.001) -> SpeedProbe:
    """A probe whose every timing of either kernel is exactly ``level_s``: a steady machine."""
    clock = KernelClock(level_s)
    return SpeedProbe(clock=clock, python=clock.kernel(), numpy=clock.kernel())
