"""The training harness's own cost: a step through ``ipu_train`` and ``ipu_benchmark`` against a
hand-written training loop.

Two steps of the digits classifier (``benchmarks.models.digits``): the study's own (batch 32, 64
hidden units), a step of about 0.2 ms on one core, where what the harness adds shows most, and a
wider one (batch 512, 1024 hidden units), a step of a few milliseconds, closer to what is trained.
The bare loop is the one anybody writes: ``zero_grad``, forward, loss, backward, ``step``,
``float(loss)``, each step timed by ``perf_counter_ns``, on its own copy of the model and its own
optimizer. The harness is ``ipu_train``'s step of another copy of the same model, timed by
``ipu_benchmark`` over the same number of steps. The two alternate, A B A B ... A: each of the
benchmark's interleaved repeats measures a bare window and then its harness window, and the last
adds a closing bare window, so slow drift of the machine falls on both sides alike. Target: per-step
median through the harness over the bare loop's, at most 1.02. The terminal summary prints the
figures.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch.nn import functional

from benchmarks.models import digits
from pytest_ipu.results.schema import NAMESPACE

#: Steps of each window, bare or through the harness, and the untimed steps before each.
STEPS = 1_000
#: Harness windows (the benchmark's interleaved repeats); one more bare window closes the run.
REPEATS = 3
#: Target: per-step median through the harness over the bare loop's.
MAX_RATIO = 1.02
SECTION = "training harness (ipu_train + ipu_benchmark vs a hand-written loop, medians)"
#: The steps compared: (id, batch, hidden units, steps of each window).
SIZES = (("digits-b32-h64", 32, 64, STEPS), ("wide-b512-h1024", 512, 1024, STEPS // 5))
#: Seed of the classifier's weights and of the batch.
SEED = 0


@dataclass(frozen=True)
class StepCost:
    """The medians of one run's windows, in nanoseconds per step, in the order measured."""

    #: The bare windows: one before each harness window, and one after the last.
    bare_ns: tuple[float, ...]
    #: The harness windows (the repeats of ``ipu_benchmark``).
    harness_ns: tuple[float, ...]
    #: ``ipu_benchmark``'s throughput window divided by its steps: the step plus the bookkeeping.
    window_per_step_ns: float
    #: Steps of each window.
    steps: int = STEPS

    @property
    def bare_mean_ns(self) -> float:
        """The median of the bare windows' medians: one window disturbed by another process (a
        shared machine's usual event) moves a median of windows least."""
        return float(statistics.median(self.bare_ns))

    @property
    def harness_mean_ns(self) -> float:
        """The median of the harness windows' medians."""
        return float(statistics.median(self.harness_ns))

    @property
    def added_ns(self) -> float:
        """What the harness adds to a step's median."""
        return self.harness_mean_ns - self.bare_mean_ns

    @property
    def ratio(self) -> float:
        """The harness's per-step median over the bare loop's."""
        return self.harness_mean_ns / self.bare_mean_ns

    def line(self) -> str:
        """The figures against the target, for the end-of-run report."""
        verdict = "meets" if self.ratio <= MAX_RATIO else "MISSES"
        # The bare windows are one more than the harness's: the last A closes the sequence.
        pairs = zip(self.bare_ns, self.harness_ns)
        order = " ".join(f"A {_us(a)} B {_us(b)}" for a, b in pairs)
        return (
            f"bare {_us(self.bare_mean_ns)} us/step, harness {_us(self.harness_mean_ns)} us/step, "
            f"added {self.added_ns / 1e3:+,.1f} us/step, ratio {self.ratio:.4f} ({verdict} <= {MAX_RATIO}); "
            f"wall window {_us(self.window_per_step_ns)} us/step; {len(self.harness_ns)} x {self.steps} "
            f"steps each side, in order (us): {order} A {_us(self.bare_ns[-1])}"
        )


def _us(ns: float) -> str:
    """Nanoseconds as microseconds, one decimal."""
    return f"{ns / 1e3:,.1f}"


def bare_median_ns(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: Any, y: Any, steps: int
) -> float:
    """Median of ``steps`` hand-written training steps, each timed by ``perf_counter_ns``."""
    clock = time.perf_counter_ns
    samples = []
    for _ in range(steps):
        start = clock()
        optimizer.zero_grad()
        loss = functional.cross_entropy(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        optimizer.step()
        float(loss.detach())  # the host read that ends a step, as in every training loop
        samples.append(clock() - start)
    return float(statistics.median(samples))


def bare_window_ns(x: Any, y: Any, hidden: int, steps: int) -> float:
    """One bare window: a fresh copy of the classifier and its optimizer, warmed, then timed."""
    model = digits.mlp(SEED, hidden=hidden)
    optimizer = digits.optimizer(model.parameters())
    bare_median_ns(model, optimizer, x, y, max(steps // 10, 1))
    return bare_median_ns(model, optimizer, x, y, steps)


@pytest.fixture(scope="session")
def bare_windows() -> dict[str, list[float]]:
    """The bare windows measured so far, by node id: the repeats of a benchmark add to it in turn."""
    return {}


# The torch CPU target only: the bare loop is torch on the CPU, and the comparison is of the same
# step with and without the harness. Interleaved repeats are what alternates the two sides; no
# power sampling, whose thread would compete for the GIL on one side only.
@pytest.mark.ipu(backend="torch:cpu", power="off", repeats=REPEATS, repeat_mode="interleaved")
@pytest.mark.benchmark(group="training-harness")
@pytest.mark.parametrize(("batch", "hidden", "steps"), [s[1:] for s in SIZES], ids=[s[0] for s in SIZES])
def test_training_harness(
    request: pytest.FixtureRequest,
    ipu_train: Any,
    ipu_benchmark: Any,
    ipu_process_group: Any,
    benchmark: Any,
    bare_windows: dict[str, list[float]],
    study_report: dict[str, list[str]],
    batch: int,
    hidden: int,
    steps: int,
) -> None:
    """The digits step through the harness vs by hand, side by side, A B A B ... A."""
    if ipu_process_group.distributed:
        pytest.skip("the bare loop trains on one process; run this benchmark without torchrun")
    data = digits.load()
    x, y = data.train_x[:batch], data.train_y[:batch]
    windows = bare_windows.setdefault(request.node.nodeid, [])
    windows.append(bare_window_ns(x, y, hidden, steps))
    step = ipu_train(digits.mlp(SEED, hidden=hidden), functional.cross_entropy, digits.optimizer, (x, y))
    record = ipu_benchmark(step, (x, y), rounds=steps, warmup_rounds=max(steps // 10, 1))
    if not record.timed:
        pytest.skip("pytest-benchmark is disabled: nothing to compare")
    assert record.repeats[-1].rounds == steps
    if NAMESPACE not in benchmark.extra_info:
        return  # an earlier repeat: its windows wait for the last one, which publishes the record
    windows.append(bare_window_ns(x, y, hidden, steps))
    cost = StepCost(
        bare_ns=tuple(windows),
        harness_ns=tuple(r.latency_s.p50 * 1e9 for r in record.repeats),
        window_per_step_ns=record.window_s / record.rounds * 1e9,
        steps=steps,
    )
    bare_windows.pop(request.node.nodeid)
    benchmark.extra_info["training_harness"] = {
        "bare_medians_s": [v * 1e-9 for v in cost.bare_ns],
        "harness_medians_s": [v * 1e-9 for v in cost.harness_ns],
        "bare_median_s": cost.bare_mean_ns * 1e-9,
        "harness_median_s": cost.harness_mean_ns * 1e-9,
        "added_s": cost.added_ns * 1e-9,
        "ratio": cost.ratio,
        "window_per_step_s": cost.window_per_step_ns * 1e-9,
    }
    study_report.setdefault(SECTION, []).append(f"{request.node.callspec.id}: {cost.line()}")
    assert len(cost.harness_ns) == len(cost.bare_ns) - 1
