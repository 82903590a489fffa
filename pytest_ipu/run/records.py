"""The records of the benchmarks ``run.benchmark.measure`` does not time round by round: LoadGen
runs, time-to-train runs, and benchmarks pytest-benchmark left untimed.

With ``run.benchmark`` (the timed record, ``measure`` and ``pool``) this is where records are
built: the fixtures gather the arguments (an untimed reason, LoadGen's results, the runs) and
publish what these return.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_ipu.measure import metrics
from pytest_ipu.measure import stats
from pytest_ipu.power.meter import not_measured
from pytest_ipu.results.records import Identity
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import NotTimed
from pytest_ipu.results.records import PowerRecord
from pytest_ipu.results.records import identity
from pytest_ipu.run.benchmark import declared_batch

if TYPE_CHECKING:
    from pytest_ipu.backends.base import Backend
    from pytest_ipu.backends.base import CompiledModel
    from pytest_ipu.backends.base import TrainingStep
    from pytest_ipu.results.loadgen import LoadgenRecord
    from pytest_ipu.results.training import TimeToTrainRecord


def not_timed(
    compiled: CompiledModel, inputs: Sequence[object], items_per_call: int | None, reason: str
) -> NotTimed:
    """The record of a benchmark that ran once untimed, ``reason`` saying why (pytest-benchmark's)."""
    batch = declared_batch(inputs, items_per_call)
    return NotTimed(
        **identity(compiled),
        batch_size=batch,
        items_per_call=batch,
        reason=reason,
    )


def not_timed_training(backend: Backend, reason: str) -> NotTimed:
    """The record of a time-to-train benchmark that ran untimed: the backend's identity, and why."""
    return NotTimed(
        **identity(training_identity(backend, None)),
        batch_size=1,
        items_per_call=1,
        reason=reason,
    )


def device_name(backend: Backend) -> str:
    """The device's name as the backend describes it, else the backend's device."""
    described = backend.describe()
    name = described.get("device_name") if isinstance(described, dict) else None
    return str(name) if name else backend.device


def training_identity(backend: Backend, step: TrainingStep | None) -> Identity:
    """What a time-to-train benchmark ran: the backend and its device, described by the last training
    step its set-up compiled with ``ipu_train`` (``step``: target, device name, precision, io);
    without one, the backend's own, precision ``n/a``."""
    if step is None:
        return Identity(
            target=f"{backend.name}:{backend.device}",
            backend=backend.name,
            device=backend.device,
            device_name=device_name(backend),
            precision="n/a",
            io="host",
        )
    return Identity(**identity(step))


def time_to_train_record(
    backend: Backend,
    summary: TimeToTrainRecord,
    setups_s: Sequence[float],
    step: TrainingStep | None,
) -> IpuRecord:
    """The record of a time-to-train benchmark, whose "calls" are whole runs: latency summarises the
    runs' times (each ended by its last evaluation, at the target or at the epoch limit),
    throughput is every run's samples over their total time, and the runs' set-up (untimed, as
    MLPerf's init) is kept as the compile phase ``setup``. It is described by ``training_identity``
    (``step`` is the last training step the set-up compiled), its batch the step's host batch (1
    without a step)."""
    times = [r.curve[-1].elapsed_s for r in summary.runs]
    samples = sum(r.samples for r in summary.runs)
    window = math.fsum(times)
    return IpuRecord(
        **identity(training_identity(backend, step)),
        batch_size=1 if step is None else step.training.host_batch,
        # A "call" is a whole run: its items are the samples a run trained on, on average.
        items_per_call=max(1, round(samples / len(summary.runs))),
        rounds=len(summary.runs),
        rounds_policy="fixed",
        warmup_rounds=0,
        latency_s=metrics.summarize_latency(times),
        window_s=window,
        throughput_items_per_s=metrics.throughput(samples, window),
        compile_s=None,
        compile_cached=False,
        first_call_s=times[0],
        compile_phases_s={"setup": math.fsum(setups_s)},
        power=not_measured("none", "time to train has no energy window"),
        time_to_train=summary,
    )


def loadgen_record(
    part: LoadgenRecord,
    *,
    compiled: CompiledModel,
    first_call_s: float,
    elapsed_s: float,
    answered_s: Sequence[float] = (),
    answered_window_s: float | None = None,
    power: PowerRecord,
    cpu: metrics.CpuTime | None = None,
) -> IpuRecord:
    """The record of a LoadGen benchmark, whose "calls" are LoadGen's queries (``part`` is the
    record's ``loadgen`` part; docs/numbers.md, "LoadGen benchmarks").

    In performance mode latency is LoadGen's query latency (from a query's scheduled issue to its
    last sample's answer), throughput LoadGen's samples per second, and the window the time those
    samples took at that rate; MultiStream, for which LoadGen reports no rate, has the LoadGen run's
    wall time ``elapsed_s`` as its window. An accuracy run, which LoadGen does not time, has the
    system under test's own figures: each sample's time from LoadGen's issue callback to its answer
    (``answered_s``) and the samples over the time from the first issue to the last answer
    (``answered_window_s``); a "call" is then one sample. ``cpu`` is the LoadGen run's host cost
    (``loadgen.runner.Outcome.cpu``: over the run's wall time, per sample answered).
    """
    summary, samples, window, per_call = _calls(part, elapsed_s, answered_s, answered_window_s)
    return IpuRecord(
        **identity(compiled),
        batch_size=part.batching.max_batch,
        items_per_call=per_call,
        rounds=summary.rounds,
        rounds_policy="fixed",
        warmup_rounds=0,
        latency_s=summary,
        window_s=window,
        throughput_items_per_s=metrics.throughput(samples, window),
        compile_s=compiled.compile_s,
        compile_cached=compiled.compile_cached,
        first_call_s=first_call_s,
        compile_phases_s=dict(compiled.phases_s),
        compile_info=dict(compiled.info),
        power=power,
        simulator=compiled.simulator,
        placement=compiled.placement,
        loadgen=part,
        cpu=cpu,
    )


def _query_latency(part: LoadgenRecord) -> metrics.LatencySummary:
    """LoadGen's query latency of a performance run, as the record's latency summary: a percentile
    the query count cannot support is marked so (``stats.is_supported``)."""
    lat = part.latency_s
    count = part.query_count
    return metrics.LatencySummary(
        min=lat["min"],
        p50=lat["p50"],
        p90=lat["p90"],
        p99=lat["p99"],
        max=lat["max"],
        mean=lat["mean"],
        rounds=count,
        unsupported=tuple(f"p{q}" for q in stats.PERCENTILES if not stats.is_supported(q, count)),
    )


def _calls(
    part: LoadgenRecord, elapsed_s: float, answered_s: Sequence[float], answered_window_s: float | None
) -> tuple[metrics.LatencySummary, int, float, int]:
    """What a LoadGen run's "calls" were (``loadgen_record``'s rules): their latency, the samples
    they answered, the window those samples took, and the samples of one call."""
    if part.mode == "accuracy":
        if not answered_s or not answered_window_s:
            raise ValueError("an accuracy run's record needs the system under test's answer times")
        summary = metrics.summarize_latency(answered_s)
        samples, window, per_call = len(answered_s), answered_window_s, 1
    else:
        summary = _query_latency(part)
        samples, per_call = part.query_count * part.samples_per_query, part.samples_per_query
        window = samples / part.samples_per_s if part.samples_per_s else elapsed_s
    return summary, samples, window, per_call
