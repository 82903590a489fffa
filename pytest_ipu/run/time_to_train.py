"""Time to train, as MLPerf training times it: one run from an initialised model to a quality target.

A run's clock starts once its set-up has returned (creating and initialising the model is
MLPerf's untimed "init") and stops at the evaluation that reaches the target: every epoch's
training and every evaluation in between are timed. A run that has not reached the target after
``max_epochs`` ends there, not reached. Under a distributed launch the ranks start each run's clock
at a barrier, add up their samples, and agree on whether the target was reached (the slowest
evaluation decides), so every rank stops at the same epoch.

No pytest here: the ``ipu_time_to_train`` fixture calls ``run_once`` and pools the runs with
``results.training.summarize``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from pytest_ipu.results.training import CurvePoint
from pytest_ipu.results.training import TrainRun


class TrainingRun(Protocol):
    """What a time-to-train set-up returns: one model being trained, and its evaluation."""

    def train_epoch(self) -> int:
        """Train one epoch; the samples this process trained on."""

    def evaluate(self) -> float:
        """The quality on the held-out data now."""


class Agreement(Protocol):
    """The ranks of a distributed launch (``placement.rank_group.RankGroup``)."""

    def barrier(self, what: str) -> None:
        """Return when every rank has reached ``what``."""

    def agree_max(self, value: float) -> float:
        """The largest ``value`` of every rank."""

    def total(self, value: float) -> float:
        """The sum of ``value`` over every rank."""


def reached(quality: float, target: float, higher_is_better: bool) -> bool:
    """Whether ``quality`` meets ``target`` in the direction that is better."""
    return quality >= target if higher_is_better else quality <= target


def run_once(
    run: TrainingRun,
    *,
    index: int,
    seed: int,
    target: float,
    higher_is_better: bool,
    max_epochs: int,
    ranks: Agreement | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> TrainRun:
    """Train ``run`` until its evaluation reaches ``target`` or ``max_epochs`` (at least 1) have
    passed. The run's time is that of its last evaluation: the one that reached the target."""
    if max_epochs < 1:
        raise ValueError(f"max_epochs={max_epochs}: a time-to-train run trains at least one epoch")
    curve: list[CurvePoint] = []
    samples = 0
    if ranks is not None:
        ranks.barrier(f"the start of time-to-train run {index}")
    start = clock()
    for epoch in range(1, max_epochs + 1):
        seen = run.train_epoch()
        if isinstance(seen, bool) or not isinstance(seen, int) or seen < 0:
            raise TypeError(
                f"train_epoch() of time-to-train run {index} returned {seen!r}: it must return the samples "
                "this process trained on, a whole number >= 0"
            )
        quality = float(run.evaluate())
        hit = reached(quality, target, higher_is_better)
        if ranks is not None:
            seen = int(ranks.total(seen))
            # Every rank stops at the same epoch: only once every rank's evaluation reached it.
            hit = ranks.agree_max(0.0 if hit else 1.0) == 0.0
        samples += seen
        curve.append(CurvePoint(epoch=epoch, elapsed_s=clock() - start, samples=samples, quality=quality))
        if hit:
            break
    last = curve[-1]
    return TrainRun(
        index=index,
        seed=seed,
        reached=hit,
        time_s=last.elapsed_s if hit else None,
        epochs=last.epoch,
        samples=last.samples,
        samples_per_s=last.samples / last.elapsed_s if last.elapsed_s > 0 else None,
        curve=tuple(curve),
    )
