"""The training parts of a record: how a step's global batch is made, time to train, and scaling.

A training-step benchmark is an ``IpuRecord`` like any other (its latency is one step, its
throughput samples per second over the global batch) with a ``training`` part saying how that
batch is made. A time-to-train benchmark is an ``IpuRecord`` whose "calls" are whole training runs
(latency: each run's time to the quality target) with a ``time_to_train`` part: every run, its
seed and quality curve, and the olympic average MLPerf scores with. ``scaling`` compares a
record with the same benchmark measured on fewer processes (``--ipu-scaling-baseline``).

Pure data and arithmetic: no pytest, no torch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field

from pytest_ipu.results.codec import Coded
from pytest_ipu.results.codec import meta


@dataclass(frozen=True)
class TrainingRecord(Coded):
    """How one training step's global batch is made, and what the loss did while it was timed.

    ``global_batch`` = ``micro_batch`` x ``gradient_accumulation`` x ``replicas`` x
    ``device_iterations`` x ``processes``: the samples one step of the whole launch consumes. A
    record exists only when every step's loss was finite: a NaN or infinite loss fails the benchmark
    (``errors.NonFiniteLoss``), naming the step.
    """

    #: Samples one replica processes in one forward and backward pass.
    micro_batch: int
    #: Micro-batches whose gradients are summed before one optimizer step.
    gradient_accumulation: int
    #: Data-parallel replicas inside one process (PopTorch replication; 1 for torch).
    replicas: int
    #: Optimizer steps one call makes on the device (PopTorch device iterations; 1 for torch).
    device_iterations: int
    #: Data-parallel processes of the launch (torchrun's world size, PopRun's instances; 1 alone).
    processes: int
    #: The product of the five above: samples one call of the whole launch consumes.
    global_batch: int
    #: The optimizer's class name (`SGD`, `AdamW`).
    optimizer: str
    #: True when the step ran under automatic mixed precision (fp16 or bf16 autocast).
    amp: bool
    #: How the step ran: `eager`, `compile` (`torch.compile`) or `poptorch` (`trainingModel`).
    mode: str
    #: Calls of the step in this process, untimed ones (first call, warm-up) included.
    steps: int
    #: The loss of the first call.
    loss_first: float = field(metadata=meta(number="signed"))
    #: The loss of the last call.
    loss_last: float = field(metadata=meta(number="signed"))

    @property
    def devices(self) -> int:
        """Devices the launch trained on: processes x replicas (the x axis of the scaling views)."""
        return self.processes * self.replicas


@dataclass(frozen=True)
class CurvePoint(Coded):
    """The quality after one epoch of a time-to-train run."""

    #: The epoch just finished (1 for the first).
    epoch: int
    #: Seconds since the run's clock started, evaluation included.
    elapsed_s: float
    #: Training samples the launch has seen so far (every process).
    samples: int
    #: The quality measured on the held-out data.
    quality: float = field(metadata=meta(number="signed"))


@dataclass(frozen=True)
class TrainRun(Coded):
    """One training run from initialised model to the quality target (or to the epoch limit)."""

    #: The run's position, from 1.
    index: int
    #: The seed the run's model and data order were made with (MLPerf records every seed).
    seed: int
    #: True when the run reached the quality target.
    reached: bool
    #: Seconds from the clock's start to the evaluation that reached the target; `None` when not reached.
    time_s: float | None = field(metadata=meta(required=True))
    #: Epochs trained.
    epochs: int
    #: Training samples the launch saw (every process).
    samples: int
    #: `samples` / the run's timed seconds; `None` when the clock did not advance.
    samples_per_s: float | None = field(metadata=meta(required=True))
    #: The quality after each epoch (`CurvePoint`).
    curve: tuple[CurvePoint, ...] = field(metadata=meta(old=()))


@dataclass(frozen=True)
class TimeToTrainRecord(Coded):
    """Time to a quality target, MLPerf-style: several seeded runs and their olympic average.

    The clock of a run starts after its set-up (model creation and initialisation, untimed as
    MLPerf's init) and stops at the evaluation that reaches the target; training and evaluation
    in between are both timed. ``olympic_s`` is the mean of the runs left once the fastest and the
    slowest are dropped (with three runs or more); a run that missed the target counts as the
    slowest, so one such run among three or more is dropped, and more than one leaves no score.
    """

    #: What `evaluate()` measures (`accuracy`).
    quality: str
    #: The target it must reach.
    quality_target: float = field(metadata=meta(number="signed"))
    #: True when a larger quality is better (accuracy), false when smaller is (a loss, perplexity).
    higher_is_better: bool
    #: The epoch limit of a run.
    max_epochs: int
    #: Data-parallel processes each run trained on.
    processes: int
    #: Every run, in the order run (`TrainRun`).
    runs: tuple[TrainRun, ...] = field(metadata=meta(old=()))
    #: The olympic average of the runs' times, seconds.
    olympic_s: float
    #: The indexes of the runs the average kept.
    olympic_runs: tuple[int, ...] = field(metadata=meta(old=()))
    #: The fastest run's time, seconds.
    min_s: float
    #: The slowest run's time among those that reached the target, seconds.
    max_s: float
    #: Coefficient of variation of the reached runs' times (`None` with fewer than two).
    cv: float | None

    @property
    def olympic_times_s(self) -> tuple[float, ...]:
        """The times of the runs the olympic average kept, in run order (a gate's evidence)."""
        kept = set(self.olympic_runs)
        return tuple(r.time_s for r in self.runs if r.index in kept and r.time_s is not None)


class NoScore(ValueError):
    """Too many runs missed the target for an olympic average; the message names them."""


def olympic(runs: Sequence[TrainRun]) -> tuple[float, tuple[int, ...]]:
    """The olympic average of ``runs`` and the indexes it kept.

    With three runs or more the fastest and the slowest are dropped (a run that missed the target
    is the slowest); with fewer, every run counts and each must have reached the target.
    """
    if not runs:
        raise NoScore("no runs")
    missed = [r for r in runs if not r.reached]
    allowed = 1 if len(runs) >= 3 else 0
    if len(missed) > allowed:
        names = ", ".join(f"run {r.index} (seed {r.seed})" for r in missed)
        limit = (
            "one run of three or more may miss it" if len(runs) >= 3 else "with fewer than 3 runs none may"
        )
        raise NoScore(f"{names} did not reach the target within the epoch limit; {limit}")
    ranked = sorted(runs, key=lambda r: math.inf if r.time_s is None else r.time_s)
    kept = ranked[1:-1] if len(runs) >= 3 else ranked
    times = [r.time_s for r in kept if r.time_s is not None]
    return statistics.fmean(times), tuple(sorted(r.index for r in kept))


def summarize(
    runs: Sequence[TrainRun],
    *,
    quality: str,
    quality_target: float,
    higher_is_better: bool,
    max_epochs: int,
    processes: int,
) -> TimeToTrainRecord:
    """The ``TimeToTrainRecord`` of ``runs``; raises ``NoScore`` when they have no olympic average."""
    average, kept = olympic(runs)
    reached = [r.time_s for r in runs if r.time_s is not None]
    cv = statistics.stdev(reached) / statistics.fmean(reached) if len(reached) >= 2 else None
    return TimeToTrainRecord(
        quality=quality,
        quality_target=quality_target,
        higher_is_better=higher_is_better,
        max_epochs=max_epochs,
        processes=processes,
        runs=tuple(runs),
        olympic_s=average,
        olympic_runs=kept,
        min_s=min(reached),
        max_s=max(reached),
        cv=cv,
    )


@dataclass(frozen=True)
class ScalingRecord(Coded):
    """A benchmark against the same benchmark measured on fewer processes (the baseline run).

    ``efficiency`` = throughput(N) / ((N / N0) x throughput(N0)): 1 is linear scaling. For a
    time-to-train benchmark ``time_to_train_speedup`` = olympic time(N0) / olympic time(N).
    """

    #: Processes of this run (N).
    processes: int
    #: Processes of the baseline run (N0).
    baseline_processes: int
    #: The baseline run's JSON file.
    baseline_file: str
    #: The baseline's samples/s.
    baseline_throughput_items_per_s: float
    #: This run's samples/s over the baseline's.
    speedup: float
    #: `speedup` / (N / N0).
    efficiency: float
    #: The baseline's olympic time to train, seconds (time-to-train benchmarks only).
    baseline_time_to_train_s: float | None = None
    #: The baseline's olympic time over this run's (time-to-train benchmarks only).
    time_to_train_speedup: float | None = None


def scaling(
    processes: int,
    throughput: float,
    baseline_processes: int,
    baseline_throughput: float,
    baseline_file: str,
    time_to_train_s: float | None = None,
    baseline_time_to_train_s: float | None = None,
) -> ScalingRecord:
    """This run against its baseline: speed-up, efficiency, and the time-to-train speed-up."""
    speedup = throughput / baseline_throughput
    ttt = (
        baseline_time_to_train_s / time_to_train_s
        if time_to_train_s and baseline_time_to_train_s is not None
        else None
    )
    return ScalingRecord(
        processes=processes,
        baseline_processes=baseline_processes,
        baseline_file=baseline_file,
        baseline_throughput_items_per_s=baseline_throughput,
        speedup=speedup,
        efficiency=speedup / (processes / baseline_processes),
        baseline_time_to_train_s=baseline_time_to_train_s,
        time_to_train_speedup=ttt,
    )
