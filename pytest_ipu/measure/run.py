"""One benchmark, from a compiled model to its typed record: the one place a record is built.

``measure`` converts the inputs once, makes the first call and the warm-up rounds (untimed),
plans the timed rounds, runs them inside the energy window of a power meter when there is one,
and computes latency and throughput (docs/numbers.md defines both). It knows nothing of pytest:
the ``ipu_benchmark`` fixture gathers the arguments and publishes what this returns.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.measure import metrics
from pytest_ipu.measure import timing
from pytest_ipu.power.meter import PowerMeter
from pytest_ipu.power.meter import min_window_s
from pytest_ipu.power.meter import not_measured
from pytest_ipu.results import records


@dataclass(frozen=True)
class RoundsPolicy:
    """How one benchmark is timed: warm-up rounds, then ``rounds`` timed rounds, or (``None``:
    auto) as many as fill ``max_time_s``, at least ``min_rounds``."""

    warmup_rounds: int
    rounds: int | None
    max_time_s: float
    min_rounds: int


@dataclass(frozen=True)
class Measurement:
    """What ``measure`` returns: the record, and the per-round times the timer took."""

    record: records.IpuRecord
    samples_s: tuple[float, ...]


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


def measure(
    compiled: CompiledModel,
    inputs: Sequence[object],
    *,
    items_per_call: int | None,
    policy: RoundsPolicy,
    timer: timing.PedanticBenchmark,
    round_times_s: Callable[[], Sequence[float]],
    meter: PowerMeter | None,
    unmeasured: tuple[str, str] = ("none", "no power meter"),
) -> Measurement:
    """Measure ``compiled`` on ``inputs`` and build its record.

    ``items_per_call`` defaults to the batch size (``batch_size(inputs)``); with several instances
    it is per instance, and a round completes it once per instance. ``meter`` measures the energy
    of the timed rounds; without one, the record's power section says it was not measured, with
    the source and reason of ``unmeasured``. ``timer`` runs the timed rounds (pytest-benchmark's
    fixture) and ``round_times_s`` then gives the time of each, seconds.
    """
    args = compiled.prepare_inputs(tuple(inputs))
    batch = batch_size(inputs)
    per_instance = items_per_call if items_per_call is not None else batch
    if per_instance < 1:
        raise ValueError(f"items_per_call must be >= 1, got {per_instance}")
    group = compiled.group
    # One round is one call of every instance, so it completes items_per_call x instances items.
    items = per_instance * (group.count if group is not None else 1)
    warm = timing.warm_up(compiled.run, args, policy.warmup_rounds)
    planned = timing.plan_rounds(policy.rounds, warm.estimate_s, policy.max_time_s, policy.min_rounds)
    if meter is not None and policy.rounds is None:
        # An energy window shorter than the sensor can resolve is lengthened with more rounds.
        needed = math.ceil(min_window_s(meter.source.update_period_s()) / max(warm.estimate_s, 1e-9))
        planned = max(planned, min(needed, timing.MAX_AUTO_ROUNDS))
    if group is not None:
        group.reset_latencies()  # the warm-up calls are not part of the statistics
    if meter is None:
        start_ns, end_ns = timing.timed_rounds(timer, compiled.run, args, planned)
        power = not_measured(*unmeasured)
    else:
        with meter.sampling() as trace:
            start_ns, end_ns = timing.timed_rounds(
                timer, compiled.run, args, planned, on_start=meter.mark, on_end=meter.mark
            )
        power = meter.result(trace, start_ns, end_ns, items * planned, rounds_fixed=policy.rounds is not None)
    samples = tuple(round_times_s())
    window_s = (end_ns - start_ns) * 1e-9
    instances: tuple[records.InstanceRecord, ...] | None = None
    if group is None:
        latency = metrics.summarize_latency(samples)
    else:
        # Latency is one call of one instance (docs/numbers.md); the timer's samples keep the round
        # times (every instance's call, the slowest last).
        per = group.latencies_s()
        latency = metrics.summarize_latency([x for calls in per for x in calls])
        instances = tuple(
            records.InstanceRecord(
                index=info.index,
                target=info.target,
                device=info.device,
                device_name=info.device_name,
                compile_s=info.compile_s,
                calls=len(calls),
                latency=metrics.summarize_latency(calls),
                phases_s=dict(info.phases_s),
                info=dict(info.info),
                device_latency=None if counters is None else dict(counters),
            )
            for info, calls, counters in zip(
                group.compiled_info(), per, group.device_latencies(), strict=True
            )
        )
    device_latency = compiled.device_latency() if compiled.device_latency is not None else None
    record = records.IpuRecord(
        target=compiled.target,
        backend=compiled.backend,
        device=compiled.device,
        device_name=compiled.device_name,
        precision=compiled.precision,
        io=compiled.io,
        batch_size=batch,
        items_per_call=per_instance,
        rounds=planned,
        rounds_policy="fixed" if policy.rounds is not None else "auto",
        warmup_rounds=len(warm.warmup_s),
        latency=latency,
        window_s=window_s,
        throughput_items_per_s=metrics.throughput(items * planned, window_s),
        compile_s=compiled.compile_s,
        compile_cached=compiled.compile_cached,
        first_call_s=warm.first_call_s,
        compile_phases_s=dict(compiled.phases_s),
        compile_info=dict(compiled.info),
        parity=compiled.parity,
        power=power,
        simulator=compiled.simulator,
        placement=compiled.placement,
        instances=instances,
        device_latency=None if device_latency is None else dict(device_latency),
    )
    return Measurement(record, samples)
