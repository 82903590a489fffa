"""One benchmark's time plan, made in one place: its budget, the hard cap, the lengthening of both
for a power sensor, and each repeat's share of them.

Nothing else computes a budget or a cap. A cap below its budget is an error naming both
(``TimeCapError``), never raised to the budget: it would end every auto benchmark early without saying
so. Imports nothing heavy: the options parse ``TimeCap`` at pytest's start-up.

Documented in docs/architecture.md (section "The budget, from the option to the timed loop") and
docs/numbers.md (section "Rounds and the time budget").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pytest_ipu.errors import ConfigError

#: Fixed timed rounds: a million 1 us calls is a second; more only grows the JSON (8 bytes a round).
#: The one bound of ``--ipu-rounds``, ``@pytest.mark.ipu(rounds=...)`` and ``ipu_benchmark(rounds=...)``
#: (the time cap does not end fixed rounds, so this is what bounds them).
MAX_ROUNDS = 1_000_000
#: Warm-up rounds: far more than any runtime needs to reach a steady state (the same three sources).
MAX_WARMUP_ROUNDS = 100_000
#: Items one call completes: a record's counts stay whole numbers a float holds exactly (2**53,
#: ``results.values.MAX_WHOLE``) over the most rounds a benchmark may run.
MAX_ITEMS_PER_CALL = 2**53 // MAX_ROUNDS

#: The cap's factor when none is given: three times the budget.
DEFAULT_CAP_FACTOR = 3.0


class TimeCapError(ConfigError):
    """A fixed cap shorter than the budget it caps; the message names both and the fix."""


@dataclass(frozen=True)
class TimeCap:
    """The hard limit on one benchmark's timed rounds: ``factor`` times its time budget, or a fixed
    ``seconds``. Rounds still running when it passes are ended and the record is flagged."""

    factor: float | None = DEFAULT_CAP_FACTOR
    seconds: float | None = None

    def __str__(self) -> str:
        return f"{self.factor:g}x" if self.seconds is None else f"{self.seconds:g}s"


@dataclass(frozen=True)
class RoundsPolicy:
    """How one repeat is timed: warm-up rounds, then ``rounds`` timed rounds, or (``None``: auto)
    as many as fill ``max_time_s`` (this repeat's budget), at least ``min_rounds``, ended at
    ``cap_s`` whatever was done (auto rounds only; ``None``: no cap)."""

    warmup_rounds: int
    rounds: int | None
    max_time_s: float
    min_rounds: int
    cap_s: float | None = None


def check_cap(budget_s: float, cap: TimeCap, *, where: str = "") -> float:
    """The cap, seconds, of a budget of ``budget_s``; ``TimeCapError`` when a fixed cap is shorter.

    ``where`` says where the budget came from when it is not the options alone (a marker, a power
    sensor's lengthening), for the message.
    """
    if cap.seconds is None:
        return budget_s * (cap.factor if cap.factor is not None else DEFAULT_CAP_FACTOR)
    if cap.seconds < budget_s:
        raise TimeCapError(
            f"the time cap --ipu-max-time-cap={cap.seconds:g}s is shorter than the time budget "
            f"{budget_s:g}s{where} it caps; raise the cap to at least {budget_s:g}s, give it as a "
            "multiple of the budget ('3x'), or lower --ipu-max-time"
        )
    return cap.seconds


def rounds_policy(
    *,
    max_time_s: float,
    min_rounds: int,
    cap: TimeCap,
    rounds: int | None,
    warmup_rounds: int,
    share: int = 1,
    min_window_s: float | None = None,
) -> RoundsPolicy:
    """The policy of one repeat of a benchmark whose repeats split ``max_time_s`` ``share`` ways.

    Each repeat gets ``1/share`` of the budget, of a fixed cap, and of the minimum rounds (rounded
    up): ``share`` repeats together fill one budget. With auto rounds and an energy window to
    measure, a budget shorter than the sensor's shortest resolvable window (``min_window_s``) is
    lengthened to it, and a cap given as a multiple lengthens with it; a fixed cap shorter than the
    lengthened budget is an error, as it is for the budget as given. Fixed rounds have no cap.
    """
    if share < 1:
        raise ValueError(f"share must be >= 1, got {share}")
    budget_s = max_time_s / share
    lengthened_from: float | None = None
    if rounds is None and min_window_s is not None and min_window_s > budget_s:
        lengthened_from, budget_s = budget_s, min_window_s
    per_repeat_cap = cap if cap.seconds is None else TimeCap(factor=None, seconds=cap.seconds / share)
    where = ""
    if share > 1:
        where = f" (--ipu-max-time={max_time_s:g}s over {share} repeats)"
    if lengthened_from is not None:
        where = f" (lengthened from {lengthened_from:g}s to the power sensor's shortest window)"
    cap_s = check_cap(budget_s, per_repeat_cap, where=where)
    return RoundsPolicy(
        warmup_rounds=warmup_rounds,
        rounds=rounds,
        max_time_s=budget_s,
        min_rounds=math.ceil(min_rounds / share),
        # Fixed rounds are a count, not a time: no time box (a bad cap is still refused above).
        cap_s=cap_s if rounds is None else None,
    )
