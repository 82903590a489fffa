"""Numbers from numbers: latency summaries, throughput, CPU time and the host cost it makes (pure;
seconds in, SI units out)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: The longest a timed call may take: a latency beyond a day is no measurement (the longest
#: budget and call timeout the options allow is a day too).
MAX_CALL_S = 86400.0
#: The shortest a timed call may take: the timers' resolution (``time.perf_counter_ns``); a call
#: timed at 0 s, or a rate that implies calls shorter than this, is no measurement.
MIN_CALL_S = 1e-9


def call_time_problem(seconds: float) -> str | None:
    """Why ``seconds`` (finite, >= 0) cannot be the time of a timed call, or ``None`` when it can:
    the one rule every reader of saved runs applies to a latency (a record's, pytest-benchmark's)."""
    if seconds < MIN_CALL_S:
        return f"a timed call takes at least the timer's resolution ({MIN_CALL_S:g} s), so it must be > 0"
    if seconds > MAX_CALL_S:
        return f"a call beyond a day ({MAX_CALL_S:g} s) is no measurement"
    return None


@dataclass(frozen=True)
class LatencySummary:
    """Per-round latency in seconds: one synchronous call of one model instance on one batch.

    ``unsupported`` names the percentiles (``"p99"``) that the round count cannot support: they are
    still reported, but they are really the maximum of too few samples.
    """

    #: Fastest round, seconds.
    min: float
    #: Median round (linear interpolation between closest ranks, as numpy's default), seconds.
    p50: float
    #: 90th percentile of the rounds, seconds.
    p90: float
    #: 99th percentile of the rounds, seconds; with fewer than 100 rounds it is their maximum (listed in
    #: `unsupported`).
    p99: float
    #: Slowest round, seconds.
    max: float
    #: Mean round, seconds.
    mean: float
    #: Rounds summarised.
    rounds: int
    #: Percentiles the round count cannot support (`p90` needs 10 rounds, `p99` 100): reported all the same,
    #: marked `*` in the table.
    unsupported: tuple[str, ...] = ()


def summarize_latency(samples_s: Sequence[float]) -> LatencySummary:
    """Summarize per-round latencies (seconds); raises ``ValueError`` on an empty or negative sample."""
    # numpy (under stats) loads on the first summary, not when pytest starts.
    from pytest_ipu.measure import stats

    if not samples_s:
        raise ValueError("no latency samples to summarize")
    if min(samples_s) < 0:
        raise ValueError(f"latency samples must be >= 0 s, got {min(samples_s)}")
    n = len(samples_s)
    p50, p90, p99 = (stats.percentile(samples_s, q) for q in stats.PERCENTILES)
    return LatencySummary(
        min=float(min(samples_s)),
        p50=p50,
        p90=p90,
        p99=p99,
        max=float(max(samples_s)),
        # fsum is exact; the clamp keeps rounding of the division from leaving [min, max].
        mean=min(max(math.fsum(samples_s) / n, float(min(samples_s))), float(max(samples_s))),
        rounds=n,
        unsupported=tuple(f"p{q}" for q in stats.PERCENTILES if not stats.is_supported(q, n)),
    )


def throughput(items: float, window_s: float) -> float:
    """Items completed per second of wall time over a timed window."""
    if items < 0:
        raise ValueError(f"items must be >= 0, got {items}")
    if not window_s > 0:
        raise ValueError(f"the timed window must last > 0 s, got {window_s}")
    return items / window_s


def median_round_throughput(items_per_round: float, round_times_s: Sequence[float]) -> float | None:
    """Items per round over the median round's wall time: the throughput of a typical round.

    One round is one call of every instance, started together and ended when the slowest is done,
    so with several instances this is their summed rate over the median round. A round that a
    neighbour's time slice (or a collection pause) stretched moves the window's throughput
    (``throughput``), which counts every round's time, but not this median, as it moves no
    ``latency.p50``: the figure a gate judges throughput by (docs/numbers.md). ``None`` when the
    median round took no time the timer could see (no rate to state)."""
    if items_per_round < 0:
        raise ValueError(f"items per round must be >= 0, got {items_per_round}")
    if not round_times_s:
        raise ValueError("no round times to take the median of")
    median = statistics.median(round_times_s)
    if median < 0:
        raise ValueError(f"round times must be >= 0 s, got a median of {median}")
    return items_per_round / median if median > 0 else None


#: The off-CPU share at which a host CPU benchmark is flagged ``off-cpu`` (``IpuRecord.off_cpu``).
OFF_CPU_FLAG = 0.25


@dataclass(frozen=True)
class CpuTime:
    """CPU time over the timed rounds, beside their wall time, and the host cost it makes
    (docs/numbers.md defines them).

    A round's CPU time runs from the end of the round before (the window's start for the first) to
    the end of this one: its call and the bookkeeping between rounds, as the window's wall time
    has them. The process's clock counts every thread of the process (a runtime's worker threads
    too); the thread's clock counts only the thread that ran the rounds. Neither counts the time a
    thread waits: for a CPU, a lock, a sleep, I/O or a device that it waits for without spinning.
    Where the instances run in worker processes, each worker reports its own process clock with
    every reply, and the process figures count the workers' CPU time beside this process's.

    A run with no timed rounds (a LoadGen run, ``run_cpu_time``) has only the totals and the host
    cost: its per-round and timing-thread figures are ``None``.
    """

    #: The CPU time per timed round (one call; with several instances, one call of each) of this
    #: process, every thread counted, and of its instance worker processes (`workers`): the median
    #: over the rounds, seconds. The `cpu_time` metric. `None` for a run with no rounds (LoadGen).
    process_s: float | None
    #: The CPU time of the thread that ran the timed rounds, per round: the median over the rounds,
    #: seconds. `None` for a run with no rounds (LoadGen).
    thread_s: float | None
    #: The CPU time of this process and its instance workers over the timed windows (a LoadGen
    #: record: over the LoadGen run), every round together, seconds.
    process_total_s: float
    #: The timing thread's CPU time over the timed windows, seconds. `None` for a run with no rounds.
    thread_total_s: float | None
    #: Share of the windows' wall time the timing thread was not running on a CPU, 0..1: 1 -
    #: `thread_total_s` / `window_s`. Descheduled for other processes, or waiting (a sleep, I/O, a
    #: device, other threads of its own): for single-threaded CPU work, the time other processes took.
    #: `None` for a run with no rounds (LoadGen: its threads are LoadGen's and the model's).
    off_cpu_share: float | None
    #: How many instance worker processes the process figures count besides this process; 0 where
    #: every instance ran in this process.
    workers: int = 0
    #: The worker processes' part of `process_total_s`, seconds (0 with no workers).
    workers_total_s: float = 0.0
    #: Host CPU time per item: `process_total_s` / the items the windows completed (a LoadGen
    #: record: the samples its system under test answered), seconds. On a CPU target the compute
    #: itself; on an accelerator the host's work to keep it busy. `None` in records that predate it.
    host_per_item_s: float | None = None
    #: Host cores kept busy during the windows (a LoadGen record: the LoadGen run):
    #: `process_total_s` / their wall time. `None` in records that predate it.
    host_cores: float | None = None


def off_cpu_share(thread_total_s: float, window_s: float) -> float:
    """1 - the thread's CPU time / the window's wall time, within 0..1 (0 for a window of no length).

    The CPU clock is read inside the wall marks, so the share is never below 0 but for the two
    clocks' rounding; the clamp keeps that from showing as a negative share."""
    if not window_s > 0:
        return 0.0
    return min(max(1.0 - thread_total_s / window_s, 0.0), 1.0)


def host_per_item(cpu_total_s: float, items: float) -> float:
    """Host CPU time per item: the CPU time of every process of the benchmark over its windows /
    the items those windows completed. Raises ``ValueError`` for no items."""
    if not items > 0:
        raise ValueError(f"host CPU time per item needs the windows' items > 0, got {items}")
    return cpu_total_s / items


def host_cores(cpu_total_s: float, window_s: float) -> float:
    """Host cores kept busy: the CPU time of every process of the benchmark over its windows / the
    windows' wall time. Raises ``ValueError`` for a window of no length."""
    if not window_s > 0:
        raise ValueError(f"host cores need a timed window > 0 s, got {window_s}")
    return cpu_total_s / window_s


def summarize_cpu_time(
    thread_ns: Sequence[int],
    process_ns: Sequence[int],
    window_s: float,
    items: float,
    workers_ns: Sequence[int] = (),
    workers: int = 0,
) -> CpuTime:
    """The CPU time of one timed window from each round's thread and process CPU time (ns), the
    window's wall time and the items it completed; ``workers_ns`` is each round's CPU time of the
    ``workers`` instance worker processes together (empty with none), counted in the process figures.
    Raises ``ValueError`` for no rounds, unequal counts or a negative time."""
    if not thread_ns or len(thread_ns) != len(process_ns):
        raise ValueError(
            f"CPU times of {len(thread_ns)} and {len(process_ns)} rounds: need the same count, at least 1"
        )
    if (workers > 0) != bool(workers_ns) or (workers_ns and len(workers_ns) != len(process_ns)):
        raise ValueError(
            f"{workers} worker(s) with CPU times of {len(workers_ns)} rounds: {len(process_ns)} rounds "
            "need one time each from at least one worker, or none without workers"
        )
    if min(thread_ns) < 0 or min(process_ns) < 0 or min(workers_ns, default=0) < 0:
        raise ValueError("a round's CPU time must be >= 0 ns")
    # Each round's CPU time on the host: this process's and its workers'.
    host_ns = [p + w for p, w in zip(process_ns, workers_ns)] if workers_ns else list(process_ns)
    thread_total_s = sum(thread_ns) * 1e-9
    total_s = sum(host_ns) * 1e-9
    return CpuTime(
        process_s=statistics.median(host_ns) * 1e-9,
        thread_s=statistics.median(thread_ns) * 1e-9,
        process_total_s=total_s,
        thread_total_s=thread_total_s,
        off_cpu_share=off_cpu_share(thread_total_s, window_s),
        workers=workers,
        workers_total_s=sum(workers_ns) * 1e-9,
        host_per_item_s=host_per_item(total_s, items),
        host_cores=host_cores(total_s, window_s),
    )


def run_cpu_time(process_ns: int, workers_ns: int, workers: int, window_s: float, items: float) -> CpuTime:
    """The host cost of a run with no timed rounds (a LoadGen run): the CPU time of this process
    (``process_ns``, every thread: LoadGen's and the model's) and of its ``workers`` instance worker
    processes (``workers_ns`` together, 0 with none) over the run's wall time ``window_s``, which
    completed ``items``. Its per-round and timing-thread figures are ``None``: there are no rounds.
    Raises ``ValueError`` for a negative time, no items or a window of no length."""
    if process_ns < 0 or workers_ns < 0:
        raise ValueError("a run's CPU time must be >= 0 ns")
    if workers_ns and workers < 1:
        raise ValueError(f"{workers_ns} ns of workers' CPU time with {workers} workers: it needs a worker")
    total_s = (process_ns + workers_ns) * 1e-9
    return CpuTime(
        process_s=None,
        thread_s=None,
        process_total_s=total_s,
        thread_total_s=None,
        off_cpu_share=None,
        workers=workers,
        workers_total_s=workers_ns * 1e-9,
        host_per_item_s=host_per_item(total_s, items),
        host_cores=host_cores(total_s, window_s),
    )


def _per_round(values: Sequence[float | None]) -> list[float]:
    """The repeats' per-round figures; raises ``ValueError`` where one has none (a run of no rounds)."""
    known = [v for v in values if v is not None]
    if len(known) != len(values):
        raise ValueError("pooling needs every repeat's per-round CPU time; a run of no rounds has none")
    return known


def pool_cpu_time(repeats: Sequence[tuple[CpuTime, float, float]]) -> CpuTime:
    """The CPU time of several repeats, each with its window's wall time and the items it completed:
    per round, the median of the repeats' medians; the totals summed; the off-CPU share and the
    host cost of the summed windows and items."""
    if not repeats:
        raise ValueError("no repeats to pool")
    thread_total_s = math.fsum(_per_round([cpu.thread_total_s for cpu, _, _ in repeats]))
    total_s = math.fsum(cpu.process_total_s for cpu, _, _ in repeats)
    window_s = math.fsum(w for _, w, _ in repeats)
    return CpuTime(
        process_s=statistics.median(_per_round([cpu.process_s for cpu, _, _ in repeats])),
        thread_s=statistics.median(_per_round([cpu.thread_s for cpu, _, _ in repeats])),
        process_total_s=total_s,
        thread_total_s=thread_total_s,
        off_cpu_share=off_cpu_share(thread_total_s, window_s),
        workers=max(cpu.workers for cpu, _, _ in repeats),
        workers_total_s=math.fsum(cpu.workers_total_s for cpu, _, _ in repeats),
        host_per_item_s=host_per_item(total_s, math.fsum(n for _, _, n in repeats)),
        host_cores=host_cores(total_s, window_s),
    )
