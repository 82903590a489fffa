"""The public fixtures: ``ipu_settings``, ``ipu_backend``, ``ipu_placement``, ``ipu_compile``,
``ipu_benchmark`` and ``ipu_power``."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any
from typing import Protocol

import pytest

from pytest_ipu.backends.base import Backend
from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.host import cpu_name
from pytest_ipu.backends.parity import Parity
from pytest_ipu.backends.parity import ParityError
from pytest_ipu.backends.parity import compare
from pytest_ipu.backends.target import Target
from pytest_ipu.backends.target import parse_target
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import ConfigError
from pytest_ipu.gating import GATE_KEY
from pytest_ipu.gating import Measured
from pytest_ipu.marker import marker_gates
from pytest_ipu.marker import marker_overrides
from pytest_ipu.marker import placement_request
from pytest_ipu.measure import metrics
from pytest_ipu.measure import timing as measure
from pytest_ipu.options import AUTO
from pytest_ipu.options import Settings
from pytest_ipu.placement import plan as placed
from pytest_ipu.placement import poprun
from pytest_ipu.placement.request import DeviceRequest
from pytest_ipu.power.meter import PowerResult
from pytest_ipu.power.meter import min_window_s
from pytest_ipu.power.meter import not_measured
from pytest_ipu.report import terminal as report
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import records
from pytest_ipu.results import schema
from pytest_ipu.session import SESSION_KEY
from pytest_ipu.session import IpuSession


class Compile(Protocol):
    """The callable ``ipu_compile`` returns."""

    def __call__(
        self,
        model: object,
        example_inputs: Sequence[object],
        *,
        precision: str | None = None,
        key: object = None,
        parity: bool = False,
        **options: object,
    ) -> CompiledModel:
        """Compile ``model`` for this test's backend (or take it from the run's cache)."""


class Benchmark(Protocol):
    """The callable ``ipu_benchmark`` returns."""

    def __call__(
        self,
        model: CompiledModel | Callable[..., object],
        inputs: Sequence[object] = (),
        *,
        items_per_call: int | None = None,
        rounds: int | None = None,
        warmup_rounds: int | None = None,
    ) -> records.IpuRecord | None:
        """Measure ``model`` on ``inputs``; the record, or ``None`` when benchmarking is disabled."""


def _session(request: pytest.FixtureRequest) -> IpuSession:
    return request.config.stash[SESSION_KEY]


@pytest.fixture
def ipu_settings(request: pytest.FixtureRequest) -> Settings:
    """The pytest-ipu settings for this test: the run's options, overridden by its ``ipu`` marker."""
    try:
        overrides = marker_overrides(request.node)
    except ConfigError as exc:
        raise pytest.UsageError(f"pytest-ipu: {exc}") from None
    return dataclasses.replace(_session(request).settings, **overrides)


@pytest.fixture
def ipu_backend(request: pytest.FixtureRequest, ipu_settings: Settings) -> Backend:
    """The backend this test runs on, ready to compile models.

    Tests that use it are parametrized over ``--ipu-backend`` (or the marker's ``backend=``); with
    ``auto``, over every default backend present. A backend, runtime or device that is missing
    skips the test with the reason, or fails it under ``--ipu-missing-sdk=fail``.
    """
    target = _requested_target(request, ipu_settings)
    try:
        return _session(request).backend_for(target.backend, target.device)
    except BackendUnavailable as exc:
        if ipu_settings.missing_sdk == "fail":
            raise
        pytest.skip(str(exc))


@pytest.fixture
def ipu_placement(
    request: pytest.FixtureRequest, ipu_backend: Backend, ipu_settings: Settings
) -> placed.Plan:
    """Where this test's model goes, for benchmarks that build their own sessions.

    The ``ipu`` marker's request (``replicas=``, ``stages=``, ``instances=``; default one instance on
    one device) placed on the backend's devices: ``plan.instances[i]`` has the device to use
    (``ipu:N``, a ``gc-info -l`` id), its IPU ids and the backend options that give it its replicas
    and stages; ``plan.as_json`` is what records store. ``ipu_compile`` places models the same way.
    Too few IPUs skips the test with what was asked and what exists (fails it under
    ``--ipu-missing-sdk=fail``).
    """
    try:
        return placed.plan(ipu_backend, _placement_request(request), {}, _session(request).backend_for)
    except BackendUnavailable as exc:
        if ipu_settings.missing_sdk == "fail":
            raise
        pytest.skip(f"pytest-ipu: {exc}")


@pytest.fixture
def ipu_compile(request: pytest.FixtureRequest, ipu_backend: Backend, ipu_settings: Settings) -> Compile:
    """Compile a model for this test's backend, once per run for each model and set of options.

    ``ipu_compile(model, example_inputs, precision=None, key=None, parity=False, **options)`` returns a
    ``CompiledModel`` whose ``compile_s`` was measured here, never inside a timed window. A model
    compiled by an earlier test with the same backend, precision and options (and, for backends
    that specialise on shapes, the same input shapes) is reused: its ``compile_cached`` is true.
    ``key`` identifies the model in the cache (default: the model object itself). ``precision``
    defaults to the test's ``--ipu-precision`` (``auto``: the backend's choice for its device).
    With ``parity=True`` (a torch model only) the compiled model's outputs on the example inputs must
    match torch eager fp32 on the CPU within the precision's tolerance, else ``ParityError`` says by
    how much they differ; the comparison is stored in the record.

    The test's ``ipu`` marker can place the model (``replicas=``, ``stages=``, ``instances=``): each
    instance is compiled on its own IPUs and the returned model runs them all at once, one call
    each per round (docs/fixtures.md). Too few IPUs, or none free ("Failed to acquire"), skips the
    test with the reason (fails it under ``--ipu-missing-sdk=fail``).
    """
    session = _session(request)

    def compile_model(
        model: object,
        example_inputs: Sequence[object],
        *,
        precision: str | None = None,
        key: object = None,
        parity: bool = False,
        **options: object,
    ) -> CompiledModel:
        __tracebackhide__ = True
        chosen = precision or ipu_settings.precision
        if chosen == AUTO:
            chosen = ipu_backend.default_precision()
        request_ = _placement_request(request)
        cache_key: tuple[Any, ...] = (
            ipu_backend.name,
            ipu_backend.device,
            key if key is not None else id(model),
            chosen,
            tuple(sorted((k, repr(v)) for k, v in options.items())),
            _signature(example_inputs) if ipu_backend.shape_specialized(options) else None,
            request_,
        )
        user = request.node.nodeid
        exclusive = bool(getattr(ipu_backend, "exclusive_device", False))
        compiled = session.cached(cache_key, user)
        if compiled is not None:
            compiled = dataclasses.replace(compiled, compile_cached=True)
        else:
            if exclusive:
                session.release_exclusive(user)
            start = time.perf_counter_ns()
            try:
                if placed.is_trivial(request_):
                    compiled = ipu_backend.compile(model, example_inputs, chosen, options)
                else:
                    the_plan = placed.plan(ipu_backend, request_, options, session.backend_for)
                    compiled = placed.compile_plan(the_plan, model, example_inputs, chosen, options)
            except BackendUnavailable as exc:
                # No device free or too few of them ("Failed to acquire 2 IPU(s)"): like a missing SDK.
                if ipu_settings.missing_sdk == "fail":
                    raise
                pytest.skip(f"pytest-ipu: {exc}")
            compiled = dataclasses.replace(compiled, compile_s=(time.perf_counter_ns() - start) * 1e-9)
            session.remember(cache_key, compiled, model, exclusive=exclusive, user=user)
        if parity and compiled.parity is None:
            compiled = dataclasses.replace(compiled, parity=_check_parity(compiled, model, example_inputs))
            session.remember(cache_key, compiled, model, exclusive=exclusive, user=user)
        if parity and compiled.parity is not None and not compiled.parity.passed:
            p = compiled.parity
            raise ParityError(
                f"{compiled.target} {compiled.precision} outputs of {type(model).__name__} differ from "
                f"{p.reference}: max abs error {p.max_abs:.3g}, max rel error {p.max_rel:.3g} "
                f"> tolerance {p.tolerance:g}"
            )
        return compiled

    return compile_model


@pytest.fixture
def ipu_benchmark(request: pytest.FixtureRequest, benchmark: Any, ipu_settings: Settings) -> Benchmark:
    """Measure a compiled model (or any callable) the way every pytest-ipu number is measured.

    ``ipu_benchmark(model, inputs, items_per_call=None, rounds=None, warmup_rounds=None)``:

    1. converts ``inputs`` once (``CompiledModel.prepare_inputs``), untimed;
    2. makes the first call and the warm-up rounds, timed apart and never part of the statistics;
    3. runs the timed rounds through pytest-benchmark's ``pedantic`` (``auto`` rounds fill
       ``--ipu-max-time``), one synchronous call per round;
    4. stores latency percentiles, throughput (``items_per_call`` x rounds / window wall time),
       compile and first-call times under ``extra_info["ipu"]`` and returns the ``IpuRecord``.

    ``items_per_call`` defaults to the leading dimension of the first input (the batch size); with
    several instances it is per instance, and a round completes it once per instance.
    Returns ``None`` when pytest-benchmark is disabled (``--benchmark-disable``, or under xdist):
    the model then runs once and nothing is recorded.
    """
    session = _session(request)

    def run(
        model: CompiledModel | Callable[..., object],
        inputs: Sequence[object] = (),
        *,
        items_per_call: int | None = None,
        rounds: int | None = None,
        warmup_rounds: int | None = None,
    ) -> records.IpuRecord | None:
        __tracebackhide__ = True
        compiled = model if isinstance(model, CompiledModel) else _wrap_callable(model)
        args = compiled.prepare_inputs(tuple(inputs))
        batch = _batch_size(inputs)
        per_instance = items_per_call if items_per_call is not None else batch
        if per_instance < 1:
            raise ValueError(f"items_per_call must be >= 1, got {per_instance}")
        group = compiled.group
        # One round is one call of every instance, so it completes items_per_call x instances items.
        items = per_instance * (group.count if group is not None else 1)
        if not benchmark.enabled:
            benchmark.pedantic(compiled.run, args=args, rounds=1)
            return None
        warm = measure.warm_up(
            compiled.run, args, ipu_settings.warmup_rounds if warmup_rounds is None else warmup_rounds
        )
        fixed = _or(rounds, ipu_settings.rounds)
        planned = measure.plan_rounds(
            fixed, warm.estimate_s, ipu_settings.max_time_s, ipu_settings.min_rounds
        )
        meter, source_name, reason = session.power_meter(compiled.device, ipu_settings.power)
        if meter is not None and fixed is None:
            # An energy window shorter than the sensor can resolve is lengthened with more rounds.
            needed = math.ceil(min_window_s(meter.source.update_period_s()) / max(warm.estimate_s, 1e-9))
            planned = max(planned, min(needed, measure.MAX_AUTO_ROUNDS))
        if group is not None:
            group.reset_latencies()  # the warm-up calls are not part of the statistics
        if meter is None:
            start_ns, end_ns = measure.timed_rounds(benchmark, compiled.run, args, planned)
            power = not_measured(source_name, reason)
        else:
            with meter.sampling() as trace:
                start_ns, end_ns = measure.timed_rounds(
                    benchmark, compiled.run, args, planned, on_start=meter.mark, on_end=meter.mark
                )
            power = meter.result(trace, start_ns, end_ns, items * planned, rounds_fixed=fixed is not None)
        window_s = (end_ns - start_ns) * 1e-9
        instances_json: tuple[dict[str, Any], ...] | None = None
        if group is None:
            latency = metrics.summarize_latency(list(benchmark.stats.stats.data))
        else:
            # Latency is one call of one instance (docs/numbers.md); pytest-benchmark's own stats
            # keep the round times (every instance's call, the slowest last).
            per = group.latencies_s()
            latency = metrics.summarize_latency([x for calls in per for x in calls])
            instances_json = tuple(
                {
                    **info.as_json(),
                    "calls": len(calls),
                    "latency_s": schema.latency_json(metrics.summarize_latency(calls)),
                    "device_latency": None if counters is None else dict(counters),
                }
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
            rounds_policy="fixed" if fixed is not None else "auto",
            warmup_rounds=len(warm.warmup_s),
            latency=latency,
            window_s=window_s,
            throughput_items_per_s=metrics.throughput(items * planned, window_s),
            compile_s=compiled.compile_s,
            compile_cached=compiled.compile_cached,
            first_call_s=warm.first_call_s,
            compile_phases_s=dict(compiled.phases_s),
            compile_info=dict(compiled.info),
            parity=None if compiled.parity is None else compiled.parity.as_json(),
            power=power.as_json(),
            simulator=compiled.simulator,
            placement=None if compiled.placement is None else dict(compiled.placement),
            instances=instances_json,
            device_latency=None if device_latency is None else dict(device_latency),
        )
        data = schema.to_json(record)
        if session.poprun is not None:
            data[poprun.KEY] = session.poprun.as_json()
        request.config.hook.pytest_ipu_update_record(config=request.config, item=request.node, record=data)
        benchmark_json.attach(benchmark.extra_info, data)
        request.config.stash[GATE_KEY].add(
            Measured(
                request.node.nodeid,
                request.node.name,
                data,
                tuple(benchmark.stats.stats.data),
                marker_gates(request.node),
            )
        )
        group = benchmark.group or getattr(request.node, "originalname", request.node.name)
        session.add_row(report.Row(group, request.node.name, record))
        return record

    return run


@dataclasses.dataclass
class PowerWindow:
    """What ``ipu_power`` yields: set ``items`` inside the block; read ``result`` after it."""

    device: str
    items: int = 0
    result: PowerResult | None = None


class Power(Protocol):
    """The callable ``ipu_power`` returns."""

    def __call__(self, device: str = "cpu", items: int = 0) -> contextlib.AbstractContextManager[PowerWindow]:
        """A context manager measuring the energy of its block on ``device``'s power source."""


@pytest.fixture
def ipu_power(request: pytest.FixtureRequest, ipu_settings: Settings) -> Power:
    """Measure the energy of any block of code, the same way ``ipu_benchmark`` measures its rounds::

        with ipu_power("cuda:0") as window:
            for batch in batches:
                model(batch)
            window.items = len(batches) * batch_size
        print(window.result.energy_j, window.result.items_per_j)

    The source follows ``--ipu-power`` (``auto``: NVML for ``cuda``, RAPL for ``cpu``, gcipuinfo
    for ``ipu``). When nothing can measure the device, ``result.measured`` is false and
    ``result.reason`` says why; it is never zero. A block shorter than the sensor needs
    (max(5 s, 20 update periods)) is flagged "low confidence" in ``result.warnings``.
    """
    session = _session(request)

    @contextlib.contextmanager
    def measure_power(device: str = "cpu", items: int = 0) -> Iterator[PowerWindow]:
        window = PowerWindow(device, items)
        meter, name, reason = session.power_meter(device, ipu_settings.power)
        if meter is None:
            yield window
            window.result = not_measured(name, reason)
            return
        with meter.sampling() as trace:
            meter.mark()
            start = time.perf_counter_ns()
            try:
                yield window
            finally:
                end = time.perf_counter_ns()
                meter.mark()
        window.result = meter.result(trace, start, end, window.items, rounds_fixed=True)

    return measure_power


def _check_parity(compiled: CompiledModel, model: object, example_inputs: Sequence[object]) -> Parity:
    """Run the compiled model and the eager fp32 CPU reference on the example inputs and compare."""
    from pytest_ipu.backends.torch import eager_reference

    reference = eager_reference(model, example_inputs)
    if compiled.group is not None:
        # Every instance is the same compiled model; the first one's outputs stand for all.
        actual = compiled.group.call(0, tuple(example_inputs))
    else:
        actual = compiled.run(*compiled.prepare_inputs(tuple(example_inputs)))
    return compare(reference, actual, compiled.precision, "torch eager fp32 on cpu")


def _requested_target(request: pytest.FixtureRequest, settings: Settings) -> Target:
    """The target from indirect parametrization (a ``Target`` or ``"name[:device]"``), else the first
    of the test's targets."""
    param = getattr(request, "param", None)
    if isinstance(param, Target):
        return param
    if isinstance(param, str):
        try:
            return parse_target(param)
        except ValueError as exc:
            raise pytest.UsageError(
                f"pytest-ipu: {request.node.nodeid}: ipu_backend parameter: {exc}"
            ) from None
    if param is not None:
        raise pytest.UsageError(
            f"pytest-ipu: {request.node.nodeid}: ipu_backend parameter must be a Target or a string such as "
            f"'torch:cpu', got {param!r}"
        )
    return _session(request).targets_for(settings.targets)[0]


def _placement_request(request: pytest.FixtureRequest) -> DeviceRequest:
    try:
        return placement_request(request.node)
    except ConfigError as exc:
        raise pytest.UsageError(f"pytest-ipu: {exc}") from None


def _or(value: int | None, default: int | None) -> int | None:
    return default if value is None else value


def _batch_size(inputs: Sequence[object]) -> int:
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


def _signature(inputs: Sequence[object]) -> tuple[tuple[Any, ...], ...]:
    return tuple((tuple(getattr(x, "shape", ())), str(getattr(x, "dtype", type(x).__name__))) for x in inputs)


def _wrap_callable(fn: Callable[..., object]) -> CompiledModel:
    """A plain callable, measured as it is: host CPU, no compile step, inputs passed unchanged."""
    if not callable(fn):
        raise TypeError(f"ipu_benchmark needs a CompiledModel or a callable, got {type(fn).__name__}")
    return CompiledModel(
        target="python:host",
        backend="python",
        device="host",
        device_name=cpu_name(),
        precision="n/a",
        io="host",
        run=fn,
        prepare_inputs=tuple,
        close=lambda: None,
        options={"callable": getattr(fn, "__qualname__", repr(fn))},
    )
