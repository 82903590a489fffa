"""Time to train, MLPerf's metric: the digits classifier to a held-out accuracy, five seeded runs.

Each run builds the classifier from its seed (untimed, MLPerf's init), then trains an epoch at a
time through ``ipu_train``'s step and scores the held-out digits after each; its clock stops at the
evaluation that reaches the target. The record's score is the olympic average of the five runs (the
fastest and the slowest dropped). Under ``torchrun --nproc-per-node=N`` every rank trains on its own
shard of each epoch (``benchmarks.models.digits``), so a global batch is N x ``digits.BATCH``.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.models import digits

#: The held-out accuracy a run must reach. Measured over 80 seeded runs of 30 epochs at the global
#: batches of 1 and 2 processes (32 and 64): 0.96 was reached by every run, in 1 to 5 epochs; 0.97
#: was missed by 1 run in 20 (the classifier's plateau is close to it), which would fail a five-run
#: benchmark (two misses) a few times in a hundred.
QUALITY_TARGET = 0.96
#: MLPerf's smallest number of runs for an olympic average of vision benchmarks.
RUNS = 5
#: Far beyond the slowest run measured (5 epochs), so that a miss says the training is broken.
MAX_EPOCHS = 30


@pytest.fixture(scope="session")
def digits_data() -> digits.Digits:
    """The split and standardised digits, loaded once per run."""
    return digits.load()


@pytest.mark.benchmark(group="digits-time-to-train")
def test_digits_time_to_train(
    ipu_train: Any, ipu_time_to_train: Any, ipu_process_group: Any, digits_data: digits.Digits
) -> None:
    """Five runs of the digits classifier to QUALITY_TARGET; their olympic average."""
    rank, world_size = ipu_process_group.rank, ipu_process_group.world_size

    def setup(seed: int) -> digits.DigitsRun:
        return digits.make_run(ipu_train, digits_data, seed, digits.BATCH, rank, world_size)

    record = ipu_time_to_train(setup, quality_target=QUALITY_TARGET, runs=RUNS, max_epochs=MAX_EPOCHS)
    if record.timed:
        score = record.time_to_train
        assert len(score.runs) == RUNS
        # The olympic average drops the fastest and the slowest run, so it lies between them.
        assert len(score.olympic_runs) == RUNS - 2
        assert score.min_s <= score.olympic_s <= score.max_s
        assert score.processes == world_size
