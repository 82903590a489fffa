"""One benchmark, from a compiled model to its typed record.

``measure`` times one repeat (the first call and warm-up untimed, calibration, the timed rounds inside
a power meter's window and the time box, then the counting pass of ``run.counting``); ``pool`` joins a
benchmark's repeats into its record. What only some compiled models have (instances, device counters,
a training step) is each asked for with ``isinstance`` in one small function. Nothing here knows
pytest: the ``ipu_benchmark`` fixture gathers the arguments and publishes what these return. The other
records (LoadGen, time to train, untimed) are built in ``run.records``.

Documented in docs/numbers.md (which defines the figures; sections "Warm-up and rounds" and "Repeats")
and docs/architecture.md (section "Questions a newcomer asks": where is a record built).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import statistics
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import replace
from typing import Protocol

from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.base import Grouped
from pytest_ipu.backends.base import HasDeviceLatency
from pytest_ipu.backends.base import Trainable
from pytest_ipu.backends.base import TrainingInfo
from pytest_ipu.backports import zip_strict
from pytest_ipu.errors import BenchmarkArgumentError
from pytest_ipu.errors import BenchmarkArgumentTypeError
from pytest_ipu.inputs import not_positional
from pytest_ipu.measure import instructions
from pytest_ipu.measure import metrics
from pytest_ipu.measure import timing
from pytest_ipu.measure.contention import ContentionProbe
from pytest_ipu.measure.contention import ContentionRecord
from pytest_ipu.measure.contention import merge as merge_contention
from pytest_ipu.power.meter import PowerMeter
from pytest_ipu.power.meter import not_measured
from pytest_ipu.results import records
from pytest_ipu.results.counts import TIMED_WINDOW
from pytest_ipu.results.counts import CountRecord
from pytest_ipu.results.counts import not_counted
from pytest_ipu.results.counts import over_window
from pytest_ipu.results.counts import pool_counts
from pytest_ipu.results.training import TrainingRecord
from pytest_ipu.run.counting import count_pass
from pytest_ipu.run.first_output import check_first_output
from pytest_ipu.run.plan import MAX_ITEMS_PER_CALL
from pytest_ipu.run.plan import MAX_ROUNDS
from pytest_ipu.run.plan import MAX_WARMUP_ROUNDS
from pytest_ipu.run.plan import RoundsPolicy

#: Share of a repeat's budget spent calibrating the round time (untimed), unless the warm-up calls
#: alone already last that long.
CALIBRATION_SHARE = 0.1
#: The window may land this far either side of its budget before the record says so.
BUDGET_TOLERANCE = 0.25


class Lockstep(Protocol):
    """The other processes of a distributed launch, to time in step with (``placement.torchrun``).

    With one, every rank makes the same calls: a fixed count of warm-up calls, no time-boxed
    calibration, the largest round-time estimate of any rank, the planned rounds with no early end;
    a barrier opens and one closes the timed window. Collectives inside a call (a data-parallel
    step's gradient all-reduce) then never wait for a rank that stopped early.
    """

    def barrier(self, what: str) -> None:
        """Return when every rank has reached ``what``."""

    def agree_max(self, value: float) -> float:
        """The largest ``value`` of every rank."""


@dataclass(frozen=True)
class Measurement:
    """What ``measure`` and ``pool`` return: the record, the per-round times the timer took, and
    the per-call latencies the record's latency summarises (the round times, or with several
    instances every instance's calls)."""

    record: records.IpuRecord
    samples_s: tuple[float, ...]
    calls_s: tuple[float, ...] = ()


def _count(name: str, value: object, minimum: int, maximum: int, fix: str) -> None:
    """``value`` must be ``None`` or a whole number (not a bool) from ``minimum`` to ``maximum``."""
    if value is None:
        return
    where = f"ipu_benchmark({name}={value!r})"
    # bool is an int subclass (True would be 1 round); a float or a string is not a count, even
    # 8.0 or "8": the record stores integers and a fraction of a call is no call.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise BenchmarkArgumentTypeError(
            f"pytest-ipu: {where}: {name} must be a whole number, not {type(value).__name__}; {fix}"
        )
    if value < minimum:
        raise BenchmarkArgumentError(f"pytest-ipu: {where}: {name} must be at least {minimum}; {fix}")
    if int(value) > maximum:
        raise BenchmarkArgumentError(f"pytest-ipu: {where}: {name} must be at most {maximum}; {fix}")


def check_arguments(
    model: object,
    inputs: object,
    *,
    items_per_call: object = None,
    rounds: object = None,
    warmup_rounds: object = None,
) -> None:
    """Reject bad ``ipu_benchmark`` arguments before anything runs, each with one line naming the
    argument, its value and the fix (``BenchmarkArgumentError``; ``BenchmarkArgumentTypeError``
    for a wrong type)."""
    if not callable(model):
        raise BenchmarkArgumentTypeError(
            f"pytest-ipu: ipu_benchmark(model={type(model).__name__} object): the model must be callable "
            "(a compiled model from ipu_compile, or any function); pass ipu_benchmark(model, (x,))"
        )
    wrong = not_positional(inputs)
    if wrong is not None:
        raise BenchmarkArgumentTypeError(
            f"pytest-ipu: ipu_benchmark(model, inputs={wrong.value}): inputs is a sequence of positional "
            + (
                "arguments, not one tensor or array; pass (x,)"
                if wrong.one_array
                else "arguments (a tuple or list); pass (x,), or () for none"
            )
        )
    _count(
        "items_per_call",
        items_per_call,
        1,
        MAX_ITEMS_PER_CALL,
        "pass the items one call completes, e.g. items_per_call=8",
    )
    _count(
        "rounds",
        rounds,
        1,
        MAX_ROUNDS,
        f"pass rounds=N with N >= 1 (at most {MAX_ROUNDS}, as --ipu-rounds), or leave it out for auto rounds",
    )
    _count(
        "warmup_rounds",
        warmup_rounds,
        0,
        MAX_WARMUP_ROUNDS,
        f"pass warmup_rounds=N with N >= 0 (0: none; at most {MAX_WARMUP_ROUNDS}, as --ipu-warmup-rounds)",
    )


def batch_size(inputs: Sequence[object]) -> int:
    """Leading dimension of the first input; 1 for no inputs or a scalar."""
    if not inputs:
        return 1
    shape = getattr(inputs[0], "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else 1
    try:
        return len(inputs[0])  # type: ignore[arg-type]
    except TypeError:
        return 1


def declared_batch(inputs: Sequence[object], items_per_call: int | None) -> int:
    """The batch a record shows: the items per call the benchmark declared, else ``batch_size``.

    A leading dimension is only a guess at the batch (a plain callable may take a whole matrix as
    one item), so a declared ``items_per_call`` wins."""
    return items_per_call if items_per_call is not None else batch_size(inputs)


@dataclass(frozen=True)
class RepeatContext:
    """What one repeat is measured among, beside the model and its rounds: which repeat it is, the
    process it runs in, why there is no power meter, the contention probe, the stability threshold,
    the call timeout and the ranks to time in step with (``measure``)."""

    #: The repeat's number, from 1; the first repeat's first call is the model's first call.
    index: int = 1
    #: The process the repeat ran in, as the record names it.
    process: str = "this"
    #: The source and reason the power section gives when there is no meter.
    unmeasured: tuple[str, str] = ("none", "no power meter")
    #: Measures the other processes' share of the CPU over the window.
    probe: ContentionProbe | None = None
    #: The spread above which the record calls the benchmark unstable.
    unstable_threshold: float = 0.05
    #: Bounds every call (the first, warm-up, calibration and timed ones): one still running then
    #: raises ``CallTimeout`` naming it (``timing.Watchdog``; enforced in the main thread on POSIX).
    call_timeout_s: float | None = None
    #: The other ranks of a distributed launch (``Lockstep``).
    lockstep: Lockstep | None = None


@dataclass(frozen=True)
class _Rounds:
    """The warm-up a repeat made and the rounds it then planned (``_warm_and_plan``)."""

    warm: timing.WarmUp
    #: Auto rounds (a time budget), not a fixed count.
    auto: bool
    planned: int
    box: timing.TimeBox
    cap_s: float | None


@dataclass(frozen=True)
class _Timed:
    """What the timed window gave (``_time_window``): its edges and rounds, the energy, the other
    processes' share of the CPU, and the host's instruction count."""

    window: timing.Window
    power: records.PowerRecord
    contention: ContentionRecord | None
    host_instructions: CountRecord


@dataclass(frozen=True)
class _Ran:
    """What one repeat's calls gave (``_run_repeat``): its plan, its timed window, the timed rounds'
    times and the per-call latencies, each instance's part, and the device's counts."""

    rounds: _Rounds
    timed: _Timed
    samples: tuple[float, ...]
    calls: tuple[float, ...]
    instances: tuple[records.InstanceRecord, ...] | None
    counted: dict[str, CountRecord]


def measure(
    compiled: CompiledModel,
    inputs: Sequence[object],
    *,
    items_per_call: int | None,
    policy: RoundsPolicy,
    timer: timing.PedanticBenchmark,
    round_times_s: Callable[[], Sequence[float]],
    meter: PowerMeter | None,
    context: RepeatContext = RepeatContext(),
) -> Measurement:
    """Measure one repeat of ``compiled`` on ``inputs`` and build its record.

    ``items_per_call`` defaults to the batch size (``batch_size(inputs)``); with several instances
    it is per instance, and a round completes it once per instance. ``meter`` measures the energy
    of the timed rounds (without one, the power section says why, ``context.unmeasured``).
    ``timer`` runs the timed rounds (pytest-benchmark's ``pedantic``, through the seam) and
    ``round_times_s`` then gives the time of each, seconds. The record has one repeat; ``pool``
    joins several. ``context.call_timeout_s`` bounds every call (``timing.Watchdog``); with auto
    rounds the warm-up, and separately the calibration, stop at the budget (docs/numbers.md).
    """
    check_arguments(compiled.run, inputs, items_per_call=items_per_call, rounds=policy.rounds)
    args = compiled.prepare_inputs(tuple(inputs))
    per_instance = _per_instance(inputs, items_per_call)
    # One round is one call of every instance, so it completes items_per_call x instances items.
    items = per_instance * instance_count(compiled)
    ran = _run_repeat(compiled, args, policy, timer, round_times_s, meter, context, items)
    window = ran.timed.window
    ran.counted[instructions.METRIC] = ran.timed.host_instructions
    cpu = cpu_time(compiled, window, items * window.rounds)
    repeat = _repeat_record(context, window, items, ran.samples, ran.calls, cpu, ran.counted)
    return Measurement(
        _ipu_record(compiled, policy, context, per_instance, ran, repeat), ran.samples, ran.calls
    )


def _run_repeat(
    compiled: CompiledModel,
    args: Sequence[object],
    policy: RoundsPolicy,
    timer: timing.PedanticBenchmark,
    round_times_s: Callable[[], Sequence[float]],
    meter: PowerMeter | None,
    context: RepeatContext,
    items: int,
) -> _Ran:
    """Make the repeat's calls under one watchdog: the warm-up, the timed window (``items`` a
    round), then the device's counts; and read the timed rounds' figures."""
    # Every call from the first to the last timed round is bounded by the call timeout; the
    # watchdog stops with the rounds, before anything of pytest-ipu's own runs on.
    with timing.Watchdog(context.call_timeout_s, repeat=context.index) as watch:
        rounds = _warm_and_plan(compiled, args, policy, meter, context, watch)
        forget_calls(compiled)  # the warm-up calls are not part of the statistics
        timed = _time_window(compiled, args, rounds, timer, meter, context, watch, items)
        # The timed rounds' figures first: a group's instances time every call they make, the
        # counting calls' too.
        samples = tuple(round_times_s())
        calls, instances = instance_calls(compiled, samples)
        # The device's counts of a call's work, read in calls of their own after the timed window
        # and the energy window: a read is a device round trip that no timed round may hold.
        skip = (
            None
            if context.lockstep is None
            else "not counted in a lock-step launch (every rank would have to call)"
        )
        counted = count_pass(compiled, args, watch=watch, skip=skip)
    return _Ran(rounds, timed, samples, calls, instances, counted)


def _ipu_record(
    compiled: CompiledModel,
    policy: RoundsPolicy,
    context: RepeatContext,
    per_instance: int,
    ran: _Ran,
    repeat: records.RepeatRecord,
) -> records.IpuRecord:
    """The benchmark's record of one repeat: the model's identity and compile figures, the
    repeat's figures (``repeat``) and what the calls gave (``ran``)."""
    rounds, timed, window = ran.rounds, ran.timed, ran.timed.window
    return records.IpuRecord(
        **records.identity(compiled),
        batch_size=per_instance,
        items_per_call=per_instance,
        rounds=window.rounds,
        rounds_policy="auto" if rounds.auto else "fixed",
        warmup_rounds=len(rounds.warm.warmup_s),
        latency_s=repeat.latency_s,
        window_s=repeat.window_s,
        throughput_items_per_s=repeat.throughput_items_per_s,
        median_throughput_items_per_s=repeat.median_throughput_items_per_s,
        compile_s=compiled.compile_s,
        compile_cached=compiled.compile_cached,
        first_call_s=rounds.warm.first_call_s,
        compile_phases_s=dict(compiled.phases_s),
        compile_info=dict(compiled.info),
        parity=compiled.parity,
        power=timed.power,
        simulator=compiled.simulator,
        placement=compiled.placement,
        instances=ran.instances,
        device_latency=device_latency(compiled),
        repeats=(repeat,),
        budget=_budget(policy, rounds, window),
        stability=stability([repeat], ran.samples, context.unstable_threshold, "single"),
        contention=timed.contention,
        cpu=repeat.cpu,
        training=training_record(compiled.training) if isinstance(compiled, Trainable) else None,
        counts=ran.counted,
    )


def _repeat_record(
    context: RepeatContext,
    window: timing.Window,
    items: int,
    samples: tuple[float, ...],
    calls: tuple[float, ...],
    cpu: metrics.CpuTime | None,
    counted: dict[str, CountRecord],
) -> records.RepeatRecord:
    """The repeat's part of the record: its window, the latency of its ``calls``, its throughput
    (``items`` a round), over the window and over the median round, and its CPU time and counts."""
    return records.RepeatRecord(
        index=context.index,
        rounds=window.rounds,
        window_s=window.seconds,
        latency_s=metrics.summarize_latency(calls),
        throughput_items_per_s=metrics.throughput(items * window.rounds, window.seconds),
        ended=window.ended,
        process=context.process,
        cpu=cpu,
        start_unix_s=None if window.start_unix_ns is None else window.start_unix_ns * 1e-9,
        median_throughput_items_per_s=metrics.median_round_throughput(items, samples) if samples else None,
        counts=counted,
    )


def _per_instance(inputs: Sequence[object], items_per_call: int | None) -> int:
    """The items one call of one instance completes: the declared ``items_per_call``, else the
    batch size; at least 1."""
    per_instance = declared_batch(inputs, items_per_call)
    if per_instance < 1:
        raise BenchmarkArgumentError(
            f"pytest-ipu: ipu_benchmark: items_per_call defaults to the batch size (the leading dimension "
            f"of the first input), here {per_instance}; pass items_per_call=N with N >= 1"
        )
    return per_instance


def _warm_and_plan(
    compiled: CompiledModel,
    args: Sequence[object],
    policy: RoundsPolicy,
    meter: PowerMeter | None,
    context: RepeatContext,
    watch: timing.CallWatch,
) -> _Rounds:
    """Make the first call and the warm-up calls, calibrate the round time where the warm-up was
    too short to tell it, and plan the timed rounds and their time box."""
    index, lockstep = context.index, context.lockstep
    auto = policy.rounds is None
    # A later repeat's first call is not a first call of the model any more: it counts as one of
    # the warm-up calls that warm the repeat anew.
    rewarm = max(policy.warmup_rounds - 1, 0) if index > 1 else policy.warmup_rounds
    # The budget and cap are the plan's (``run.plan``), lengthened there for a power sensor.
    budget_s = policy.max_time_s
    # Auto rounds fill a time budget, so their warm-up (and calibration) is bounded by it too;
    # fixed rounds are counts, not time, and run every warm-up call asked for.
    if lockstep is not None:
        # The first call of a data-parallel step is a collective: meet here first, where a rank
        # that never comes is named.
        lockstep.barrier(f"the first call of repeat {index}")
    # In lock-step every rank makes every warm-up call asked for: a count, not a time.
    warm_budget_s = budget_s if auto and lockstep is None else None
    # The model's output is checked once, on the benchmark's first call (not a later repeat's).
    first = check_first_output if index == 1 else None
    warm = timing.warm_up(compiled.run, args, rewarm, budget_s=warm_budget_s, watch=watch, first=first)
    estimate_s = warm.estimate_s
    stretch_s = CALIBRATION_SHARE * budget_s
    if lockstep is not None:
        # Calibration is time-boxed, so ranks would make different numbers of calls: every rank
        # plans from the slowest rank's warm-up estimate instead.
        estimate_s = lockstep.agree_max(estimate_s)
    elif auto and estimate_s < stretch_s:
        estimate_s = timing.calibrate(compiled.run, args, stretch_s, limit_s=budget_s, watch=watch).estimate_s
    # An energy window must reach the sensor's minimum: those rounds end past the budget, not near
    # it, and only the time box ends them (never a count planned from the estimate).
    reach = auto and lockstep is None and meter is not None
    planned = timing.plan_rounds(policy.rounds, estimate_s, budget_s, policy.min_rounds, reach_budget=reach)
    cap_s = policy.cap_s if auto else None
    box = (
        timing.TimeBox(budget_s, policy.min_rounds, cap_s, nearest=not reach)
        if auto and lockstep is None
        else timing.TimeBox()
    )
    return _Rounds(warm, auto, planned, box, cap_s)


def _time_window(
    compiled: CompiledModel,
    args: Sequence[object],
    rounds: _Rounds,
    timer: timing.PedanticBenchmark,
    meter: PowerMeter | None,
    context: RepeatContext,
    watch: timing.CallWatch,
    items: int,
) -> _Timed:
    """Run the planned timed rounds inside the energy window of ``meter``, the contention probe
    and the host's instruction count, the ranks meeting at both edges in lock-step."""
    clocks = timing.WindowClocks(workers=workers_clock(compiled))
    # Opened here, closed by the ExitStack below: nothing between them can raise.
    counter, uncounted = instruction_counter(compiled)
    edges = _WindowEdges(context, meter, counter)
    with contextlib.ExitStack() as counting:
        if counter is not None:
            counting.enter_context(counter)
        with meter.sampling() if meter is not None else contextlib.nullcontext() as trace:
            window = timing.timed_rounds(
                timer,
                compiled.run,
                args,
                rounds.planned,
                on_start=edges.opened,
                on_end=edges.closed,
                box=rounds.box,
                watch=watch,
                clocks=clocks,
            )
    if meter is None or trace is None:
        power = not_measured(*context.unmeasured)
    else:
        power = meter.result(
            trace, window.start_ns, window.end_ns, items * window.rounds, rounds_fixed=not rounds.auto
        )
    counts, contention = edges.counts, edges.contention
    host = host_instructions(counter, counts[0] if counts else None, window.rounds, uncounted)
    return _Timed(window, power, contention[0] if contention else None, host)


class _WindowEdges:
    """What happens at the timed window's edges (``timing.timed_rounds``' ``on_start`` and
    ``on_end``): the lock-step meeting, the contention probe, the energy marks and the
    instruction counter, opened in that order and closed in the reverse, with what each gave."""

    def __init__(
        self,
        context: RepeatContext,
        meter: PowerMeter | None,
        counter: instructions.InstructionCounter | None,
    ) -> None:
        self.index, self.lockstep, self.probe = context.index, context.lockstep, context.probe
        self.meter, self.counter = meter, counter
        #: The instruction count read at the window's end, and the probe's record.
        self.counts: list[int] = []
        self.contention: list[ContentionRecord] = []

    def opened(self) -> None:
        """Open the window: the ranks meet, then the probe, the energy mark and the counter start."""
        if self.lockstep is not None:
            self.lockstep.barrier(f"the timed window of repeat {self.index}")
        if self.probe is not None:
            self.probe.start()
        if self.meter is not None:
            self.meter.mark()
        # Last before the window opens, first after it closes: the count is of the window.
        if self.counter is not None:
            self.counter.enable()

    def closed(self) -> None:
        """Close the window: read the counter, mark the energy, stop the probe, then the ranks meet."""
        if self.counter is not None:
            self.counts.append(self.counter.read())
        if self.meter is not None:
            self.meter.mark()
        if self.probe is not None:
            self.contention.append(self.probe.stop())
        if self.lockstep is not None:
            self.lockstep.barrier(f"the end of the timed window of repeat {self.index}")


def _budget(policy: RoundsPolicy, rounds: _Rounds, window: timing.Window) -> records.BudgetRecord:
    """The record's budget part: the repeat's budget and cap, its window, how it ended, and
    whether the window strayed from the budget because of the minimum rounds or the round limit."""
    auto = policy.rounds is None
    budget_s = policy.max_time_s
    window_s = window.seconds
    return records.BudgetRecord(
        budget_s=budget_s if auto else None,
        cap_s=rounds.cap_s,
        window_s=window_s,
        ended=window.ended,
        min_rounds_past_budget=auto
        and window.ended != "budget"
        and window_s > (1 + BUDGET_TOLERANCE) * budget_s
        and window.rounds <= policy.min_rounds,
        rounds_limited=auto
        and window.ended == "planned"
        and rounds.planned >= timing.MAX_AUTO_ROUNDS
        and window_s < (1 - BUDGET_TOLERANCE) * budget_s,
    )


def instruction_counter(
    compiled: CompiledModel, counter: Callable[[Sequence[int]], instructions.InstructionCounter] | None = None
) -> tuple[instructions.InstructionCounter | None, str]:
    """An opened counter of the user-space instructions of this process and, where the instances
    run in worker processes, of those (``measure.instructions``); or ``None`` and why it cannot
    open here (the errno and what it means). ``counter`` makes one for the process ids (tests)."""
    pids = [os.getpid()]
    if isinstance(compiled, Grouped) and compiled.group.runner == "processes":
        pids.extend(compiled.group.process_ids())
    made = (counter or instructions.InstructionCounter)(pids)
    try:
        made.open()
    except instructions.CounterUnavailable as exc:
        return None, str(exc)
    return made, ""


def host_instructions(
    counter: instructions.InstructionCounter | None, total: int | None, calls: int, uncounted: str
) -> CountRecord:
    """The host's user-space instructions of a timed window of ``calls`` rounds, as the count
    ``host_instructions`` (``counts.over_window``: ``total`` over the calls, with the processes and
    threads counted); or why not: the counter unavailable here (``uncounted``, the errno and what it
    means) or not read at the window's end."""
    if counter is None or total is None:
        why = uncounted or "the counter was not read at the window's end"
        return not_counted(f"the hardware counter is not available: {why}")
    return over_window(
        total, calls, TIMED_WINDOW, instructions.scope(len(counter.pids), counter.opened_threads)
    )


def cpu_time(compiled: CompiledModel, window: timing.Window, items: float) -> metrics.CpuTime | None:
    """The CPU time of the timed window's rounds, which completed ``items``, and the host cost it
    makes (``metrics.CpuTime``): this process's, and its instance workers' where the instances ran
    in worker processes. ``None`` where they ran in worker processes that reported no CPU time."""
    placement = compiled.placement
    workers = instance_count(compiled) if window.workers_cpu_ns else 0
    unreported = placement is not None and placement.runner == "processes" and not workers
    if not window.thread_cpu_ns or unreported:
        return None
    return metrics.summarize_cpu_time(
        window.thread_cpu_ns, window.process_cpu_ns, window.seconds, items, window.workers_cpu_ns, workers
    )


def workers_clock(compiled: CompiledModel) -> timing.Clock | None:
    """The CPU clock of the worker processes a group's rounds run in, as their latest replies read
    it (``InstanceGroup.workers_cpu_ns``); ``None`` where the calls run in this process."""
    if not isinstance(compiled, Grouped) or compiled.group.workers_cpu_ns() is None:
        return None
    group = compiled.group

    def read() -> int:
        ns = group.workers_cpu_ns()
        if ns is None:
            raise RuntimeError(f"the {group.runner} instance group stopped reporting its workers' CPU time")
        return ns

    return read


def instance_count(compiled: CompiledModel) -> int:
    """How many instances one round calls (``Grouped``): 1 for a single model."""
    return compiled.group.count if isinstance(compiled, Grouped) else 1


def forget_calls(compiled: CompiledModel) -> None:
    """Forget the calls a group's instances timed so far (``Grouped``); a single model times none."""
    if isinstance(compiled, Grouped):
        compiled.group.reset_latencies()


def instance_calls(
    compiled: CompiledModel, samples_s: tuple[float, ...]
) -> tuple[tuple[float, ...], tuple[records.InstanceRecord, ...] | None]:
    """The per-call latencies the record summarises, and each instance's part of the record.

    Latency is one call of one instance (docs/numbers.md): for a single model the timer's round
    times ``samples_s``; for a group (``Grouped``) every instance's calls, the round times keeping
    every instance's call, the slowest last."""
    if not isinstance(compiled, Grouped):
        return samples_s, None
    group = compiled.group
    per = group.latencies_s()
    calls = tuple(x for mine in per for x in mine)
    instances = tuple(
        records.InstanceRecord.measured(info, mine, counters)
        for info, mine, counters in zip_strict(group.compiled_info(), per, group.device_latencies())
    )
    return calls, instances


def device_latency(compiled: CompiledModel) -> dict[str, object] | None:
    """The device's own latency counters for the last call (``HasDeviceLatency``), as plain JSON."""
    counters = compiled.device_latency() if isinstance(compiled, HasDeviceLatency) else None
    return None if counters is None else dict(counters)


def training_record(info: TrainingInfo) -> TrainingRecord:
    """The record's ``training`` part: the global batch's make-up and the losses so far."""
    losses = info.losses
    if losses.first is None or losses.last is None:
        raise ValueError("a training step's record needs at least one step")
    return TrainingRecord(
        micro_batch=info.micro_batch,
        gradient_accumulation=info.gradient_accumulation,
        replicas=info.replicas,
        device_iterations=info.device_iterations,
        processes=info.processes,
        global_batch=info.host_batch * info.processes,
        optimizer=info.optimizer,
        amp=info.amp,
        mode=info.mode,
        steps=losses.steps,
        loss_first=losses.first,
        loss_last=losses.last,
    )


def round_spread(samples_s: Sequence[float]) -> float | None:
    """Interquartile range / median of the round times; ``None`` for fewer than 4 rounds or a zero median."""
    if len(samples_s) < 4:
        return None
    q1, median, q3 = statistics.quantiles(samples_s, n=4, method="inclusive")
    return None if median <= 0 else (q3 - q1) / median


def stability(
    repeats: Sequence[records.RepeatRecord], samples_s: Sequence[float], threshold: float, mode: str
) -> records.StabilityRecord:
    """The spread of a benchmark's figures: between its repeats' throughputs (the coefficient of
    variation) when there are two or more, else between its rounds (IQR / median)."""
    spread = round_spread(samples_s)
    cv = None
    if len(repeats) >= 2:
        values = [r.throughput_items_per_s for r in repeats]
        mean = statistics.fmean(values)
        cv = statistics.stdev(values) / mean if mean > 0 else None
    deciding = cv if len(repeats) >= 2 else spread
    return records.StabilityRecord(
        repeats=len(repeats),
        mode=mode,
        cv=cv,
        round_spread=spread,
        threshold=threshold,
        unstable=deciding is not None and deciding > threshold,
    )


def pool(parts: Sequence[Measurement], mode: str, unstable_threshold: float) -> Measurement:
    """Join the repeats of one benchmark (in the order measured; the last is the one whose rounds
    pytest-benchmark kept) into its record.

    Latency percentiles are of every call of every repeat; throughput is every repeat's items over
    the sum of their windows; rounds and the window are sums. The first call is the first repeat's
    (the others' first calls are warm already). Energy, instances and device counters are the last
    repeat's, the one measured with the power meter. The stability is the spread between repeats.
    CPU time per round is the median of the repeats' and the host cost that of every repeat's
    windows and items together (``metrics.pool_cpu_time``).
    """
    if not parts:
        raise ValueError("no repeats to pool")
    last = parts[-1].record
    repeats = tuple(
        replace(p.record.repeats[0], index=i + 1) if p.record.repeats else _as_repeat(p.record, i + 1)
        for i, p in enumerate(parts)
    )
    samples = tuple(x for p in parts for x in p.samples_s)
    calls = tuple(x for p in parts for x in p.calls_s)
    window_s = math.fsum(r.window_s for r in repeats)
    # The repeats' items, recovered from each repeat's throughput and window.
    items = math.fsum(r.throughput_items_per_s * r.window_s for r in repeats)
    probes = [p.record.contention for p in parts if p.record.contention is not None]
    cpu = _repeats_cpu(repeats)
    record = replace(
        last,
        rounds=sum(r.rounds for r in repeats),
        warmup_rounds=parts[0].record.warmup_rounds,
        latency_s=metrics.summarize_latency(calls) if calls else last.latency_s,
        window_s=window_s,
        throughput_items_per_s=metrics.throughput(items, window_s),
        median_throughput_items_per_s=_pooled_median_throughput(last, samples),
        first_call_s=parts[0].record.first_call_s,
        repeats=repeats,
        budget=_pooled_budget([p.record.budget for p in parts if p.record.budget is not None], window_s),
        stability=stability(repeats, samples, unstable_threshold, mode if len(parts) > 1 else "single"),
        contention=merge_contention(probes) if probes else None,
        # Only when every repeat has it: a median of some repeats would stand for all of them.
        cpu=metrics.pool_cpu_time(cpu) if cpu and len(cpu) == len(repeats) else None,
        counts=pool_counts([r.counts for r in repeats]),
    )
    return Measurement(record, samples, calls)


def _pooled_budget(budgets: Sequence[records.BudgetRecord], window_s: float) -> records.BudgetRecord | None:
    """The repeats' budgets joined over their ``window_s`` together: budgets and caps are sums
    (unknown where one repeat's is), the ending the strongest (cap, then budget), and a flag set
    where any repeat's is; ``None`` where no repeat has a budget."""
    if not budgets:
        return None
    endings = {b.ended for b in budgets}
    return records.BudgetRecord(
        budget_s=None
        if any(b.budget_s is None for b in budgets)
        else math.fsum(b.budget_s or 0.0 for b in budgets),
        cap_s=None if any(b.cap_s is None for b in budgets) else math.fsum(b.cap_s or 0.0 for b in budgets),
        window_s=window_s,
        ended="cap" if "cap" in endings else "budget" if "budget" in endings else "planned",
        min_rounds_past_budget=any(b.min_rounds_past_budget for b in budgets),
        rounds_limited=any(b.rounds_limited for b in budgets),
    )


def _repeats_cpu(
    repeats: Sequence[records.RepeatRecord],
) -> list[tuple[metrics.CpuTime, float, float]]:
    """Each repeat's CPU time with its window and its items (for ``metrics.pool_cpu_time``), of
    the repeats that have one."""
    # Each repeat's items, recovered from its throughput and window as ``pool``'s ``items``.
    # A repeat completes whole items (rounds x items per round): rounded, the count comes back exactly
    # from its rate x window, so one repeat pools to its own host cost, not one a rounding away.
    return [
        (r.cpu, r.window_s, round(r.throughput_items_per_s * r.window_s))
        for r in repeats
        if r.cpu is not None
    ]


def _pooled_median_throughput(last: records.IpuRecord, samples: Sequence[float]) -> float | None:
    """Items per round over the median round of every repeat's rounds together; ``None`` where the
    repeats have no median-round figure (no rounds kept). A round completes ``items_per_call`` of
    every instance: the last repeat's own figure times its median round gives that count back."""
    if last.median_throughput_items_per_s is None or not samples:
        return None
    instances = len(last.instances) if last.instances else 1
    return metrics.median_round_throughput(last.items_per_call * instances, samples)


def _as_repeat(record: records.IpuRecord, index: int) -> records.RepeatRecord:
    return records.RepeatRecord(
        index=index,
        rounds=record.rounds,
        window_s=record.window_s,
        latency_s=record.latency_s,
        throughput_items_per_s=record.throughput_items_per_s,
        cpu=record.cpu,
        median_throughput_items_per_s=record.median_throughput_items_per_s,
    )
