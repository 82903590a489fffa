"""The parts of ``test_gate_accuracy.py`` that are not the experiment's design: the workload, one
run of it as ``ipu_benchmark`` measures one (K repeats, pooled), the CPU hog beside it, and the
rules that decide on runs (pytest-benchmark's, pyperf's, pytest-ipu's in-run gate, ``pytest-ipu
ab``).
"""

from __future__ import annotations

import contextlib
import math
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_ipu.measure import metrics
from pytest_ipu.results import ab
from pytest_ipu.results import decide
from pytest_ipu.results import gates
from pytest_ipu.results import records
from pytest_ipu.run.benchmark import Measurement
from pytest_ipu.run.benchmark import pool

#: Independent repeats per run (``--ipu-repeats=3``), each warmed up anew.
REPEATS = 3
#: How long each repeat's timed rounds last, about (``calibrate``): a tenth of a second, so that a
#: run (three repeats) is measured over 0.3 s. That is still shorter than a benchmark's default
#: ``--ipu-max-time`` of 2 s, so the spread measured here is, if anything, larger than a user's.
REPEAT_S = 0.1
#: Untimed warm-up calls at the start of every repeat.
WARMUP = 5
#: The real regressions the slowed runs carry.
SLOWDOWN = 0.10
LARGE_SLOWDOWN = 0.30
#: pytest-ipu's gates, one rule: a run fails when either fails (as a CI job with both gates does).
OURS = (gates.parse("latency.p50:+5%"), gates.parse("throughput:-5%"))
#: pytest-benchmark's ``--benchmark-compare-fail`` expression.
THEIRS = "median:5%"
#: pyperf ``compare_to --min-speed``: a significant change smaller than this, in percent, is ignored.
PYPERF_MIN_SPEED = 5.0
BENCHMARK = "sort"

_NUMBERS = np.random.default_rng(0).standard_normal(10_000)


def sort() -> None:
    """The workload: numpy sorting 10,000 numbers (some 30 to 300 us, by machine)."""
    # One thread (np.sort is single-threaded): a multi-threaded kernel would measure the scheduler
    # of a shared machine, not the gate.
    np.sort(_NUMBERS)


def _slowed(fn: Callable[[], None], slowdown: float) -> Callable[[], None]:
    """``fn``, with every call stretched to exactly ``1 + slowdown`` times its own duration."""
    clock = time.perf_counter_ns

    def call() -> None:
        start = clock()
        fn()
        end = start + int((clock() - start) * (1 + slowdown))
        while clock() < end:
            pass

    return call


slowed_sort = _slowed(sort, SLOWDOWN)
much_slowed_sort = _slowed(sort, LARGE_SLOWDOWN)


# --- One run: K repeats, pooled -------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One run of the workload: each repeat's per-round times and the pooled record."""

    repeats_s: tuple[tuple[float, ...], ...]
    record: records.IpuRecord

    @property
    def samples_s(self) -> tuple[float, ...]:
        """Every timed round of every repeat, in the order measured."""
        return tuple(x for repeat in self.repeats_s for x in repeat)


def _repeat(fn: Callable[[], None], index: int, rounds: int) -> Measurement:
    """One repeat as ``measure.run.measure`` times it: a first call and the warm-up (untimed), then
    ``rounds`` timed calls; its one-repeat record."""
    clock = time.perf_counter_ns
    start = clock()
    fn()
    first_call_s = (clock() - start) * 1e-9
    for _ in range(WARMUP):
        fn()
    samples = []
    window_start = clock()
    for _ in range(rounds):
        start = clock()
        fn()
        samples.append((clock() - start) * 1e-9)
    window_s = (clock() - window_start) * 1e-9
    latency = metrics.summarize_latency(samples)
    throughput = metrics.throughput(rounds, window_s)
    repeat = records.RepeatRecord(
        index=index, rounds=rounds, window_s=window_s, latency_s=latency, throughput_items_per_s=throughput
    )
    record = records.IpuRecord(
        target="python:host",
        backend="python",
        device="host",
        device_name="this machine's CPU",
        precision="n/a",
        io="host",
        batch_size=1,
        items_per_call=1,
        rounds=rounds,
        rounds_policy="fixed",
        warmup_rounds=WARMUP,
        latency_s=latency,
        window_s=window_s,
        throughput_items_per_s=throughput,
        compile_s=None,
        compile_cached=False,
        first_call_s=first_call_s,
        repeats=(repeat,),
    )
    return Measurement(record, tuple(samples), tuple(samples))


def calibrate(fn: Callable[[], None], repeat_s: float = REPEAT_S) -> int:
    """The timed rounds per repeat that make a repeat of ``fn`` last about ``repeat_s``: the best
    of five timed batches of calls, as the plugin's ``--ipu-rounds=auto`` sizes a repeat by its
    first calls. Measured once per study, so that every run, plain or slowed, has the same rounds."""
    clock = time.perf_counter
    per_call = math.inf
    for _ in range(5):
        start = clock()
        for _ in range(20):
            fn()
        per_call = min(per_call, (clock() - start) / 20)
    return max(1, round(repeat_s / per_call))


def measure_run(fn: Callable[[], None], rounds: int) -> Run:
    """One run of ``fn`` as ``ipu_benchmark`` measures one with ``--ipu-repeats=3``: the repeats one
    after the other, each warmed up anew with ``rounds`` timed rounds, joined by
    ``measure.run.pool`` into the run's record."""
    parts = [_repeat(fn, index, rounds) for index in range(1, REPEATS + 1)]
    pooled = pool(parts, "interleaved", 0.05)
    return Run(tuple(p.samples_s for p in parts), pooled.record)


# --- The CPU hog ----------------------------------------------------------------------------------


@dataclass
class HogReport:
    """What the CPU hog did: its process id, how long it lived, the CPU time it burned, and
    whether it was still running when the experiment ended (set on exit)."""

    pid: int
    wall_s: float = 0.0
    cpu_s: float = 0.0
    alive_to_the_end: bool = False

    def line(self) -> str:
        """One line for the report."""
        state = "running throughout" if self.alive_to_the_end else "NOT running to the end"
        share = self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0
        return (
            f"CPU hog beside the experiment: process {self.pid} ({sys.executable} -c 'while True: pass'), "
            f"{state}: {self.cpu_s:.1f} s of CPU in {self.wall_s:.1f} s ({share:.0%} of a core)"
        )


@contextlib.contextmanager
def cpu_hog() -> Iterator[HogReport]:
    """A process of its own that spins on one core for as long as the block runs, as another job on
    a shared CI runner does; terminated and waited for on every way out of the block.

    Its CPU time is read from this process's reaped children (``RUSAGE_CHILDREN`` before and after),
    so the report shows it really burned a core, not only that it was started.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    report = HogReport(hog.pid)
    try:
        yield report
        report.alive_to_the_end = hog.poll() is None
    finally:
        hog.terminate()
        try:
            hog.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a spin loop ends on SIGTERM
            hog.kill()
            hog.wait()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        report.wall_s = time.perf_counter() - started
        report.cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


# --- The rules ------------------------------------------------------------------------------------


def pytest_benchmark_fails(base: Run, current: Run) -> bool:
    """pytest-benchmark's ``--benchmark-compare-fail=median:5%``: its own check
    (``PercentageRegressionCheck``), on the two runs' median round times."""
    from pytest_benchmark.utils import parse_compare_fail

    check: Any = parse_compare_fail(THEIRS)  # type: ignore[no-untyped-call]
    now, then = float(np.median(current.samples_s)), float(np.median(base.samples_s))
    return bool(check.fails({"median": now}, {"median": then}))


def _pyperf_benchmark(run: Run) -> Any:
    """The run as pyperf stores a benchmark: one pyperf run (worker) per repeat, its rounds as values."""
    import pyperf  # type: ignore[import-untyped]

    meta = {"name": BENCHMARK, "unit": "second"}
    return pyperf.Benchmark(
        [pyperf.Run(list(values), metadata=meta, collect_metadata=False) for values in run.repeats_s]
    )


def pyperf_fails(base: Run, current: Run) -> bool:
    """pyperf ``compare_to --min-speed=5``, as it judges a pair: the change is significant by
    pyperf's two-sided Student t test at 95 % on the per-round times (``pyperf._utils.is_significant``,
    which ``compare_to`` calls through ``is_significant_benchs``), and the mean moved by at least
    5 %; a regression when the candidate is the slower.

    ``pyperf._compare.CompareResult`` is private API (pyperf documents only the command); it is
    used here so that the decision is pyperf's own code, not a copy of it. Pinned in ``dev``.
    """
    from pyperf._compare import CompareData  # type: ignore[import-untyped]
    from pyperf._compare import CompareResult

    result = CompareResult(
        CompareData("baseline", _pyperf_benchmark(base)),
        CompareData("candidate", _pyperf_benchmark(current)),
        min_speed=PYPERF_MIN_SPEED,
    )
    # norm_mean is candidate mean / baseline mean of the round times: above 1 is slower.
    return bool(result.significant) and float(result.norm_mean) > 1.0


def combined(outcomes: Sequence[str]) -> str:
    """One rule of several gates, as a CI job with all of them: FAIL when one fails, else
    INCONCLUSIVE when one could not tell, else PASS."""
    for outcome in (decide.FAIL, decide.INCONCLUSIVE):
        if outcome in outcomes:
            return outcome
    return decide.PASS


def gate_outcome(history: Sequence[Run], current: Run) -> str:
    """pytest-ipu's in-run gates on ``current`` against earlier plain runs, as the CI recipe runs
    them (``--ipu-baseline`` on the last ``len(history)`` runs of the main branch): the last is
    the baseline, all of them the history whose spread decides (``decide.check``)."""
    base = history[-1]
    return combined(
        [
            decide.check(
                gate,
                BENCHMARK,
                current.record,
                base.record,
                history=[v for v in (run.record.value(gate.metric) for run in history) if v is not None],
            ).outcome
            for gate in OURS
        ]
    )


def ab_outcome(baseline: Sequence[Run], candidate: Sequence[Run], alpha: float) -> str:
    """``pytest-ipu ab``'s verdict on these pairs of runs (run i of each side is pair i), each gate by
    ``ab.check_paired`` at ``alpha`` (a look's share of the sequential plan's alpha)."""
    return combined(
        [
            ab.check_paired(
                gate,
                BENCHMARK,
                [run.record.value(gate.metric) for run in baseline],
                [run.record.value(gate.metric) for run in candidate],
                alpha=alpha,
            ).outcome
            for gate in OURS
        ]
    )
