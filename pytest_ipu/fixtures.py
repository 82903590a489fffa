"""The public fixtures: ``ipu_settings``, ``ipu_backend``, ``ipu_placement``, ``ipu_compile``,
``ipu_benchmark`` and ``ipu_power``.

Each is thin: it reads the test's settings and marker and calls the layer that does the work
(``compiling`` for compiles, ``measure.run`` for a benchmark's record, ``power.meter`` for energy),
then hands the result to the session. Those layers are imported inside the fixtures, so loading
the plugin at pytest start-up imports none of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any
from typing import NoReturn
from typing import Protocol

import pytest

from pytest_ipu.backends.target import Target
from pytest_ipu.backends.target import parse_target
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import ConfigError
from pytest_ipu.marker import marker_gates
from pytest_ipu.marker import marker_overrides
from pytest_ipu.marker import placement_request
from pytest_ipu.options import AUTO
from pytest_ipu.options import Settings
from pytest_ipu.session import SESSION_KEY
from pytest_ipu.session import IpuSession

if TYPE_CHECKING:
    from pytest_ipu.backends.base import Backend
    from pytest_ipu.backends.base import CompiledModel
    from pytest_ipu.placement import plan as placed
    from pytest_ipu.placement.request import DeviceRequest
    from pytest_ipu.results import records
    from pytest_ipu.results.records import PowerRecord


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


def _skip_or_fail(settings: Settings, exc: BackendUnavailable) -> NoReturn:
    """A missing runtime, device or free IPU skips the test, or fails it under ``--ipu-missing-sdk=fail``."""
    __tracebackhide__ = True  # the skip is reported at the test's line, not here
    if settings.missing_sdk == "fail":
        raise exc
    pytest.skip(str(exc) if str(exc).startswith("pytest-ipu:") else f"pytest-ipu: {exc}")


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
        _skip_or_fail(ipu_settings, exc)


@pytest.fixture
def ipu_placement(
    request: pytest.FixtureRequest, ipu_backend: Backend, ipu_settings: Settings
) -> placed.Plan:
    """Where this test's model goes, for benchmarks that build their own sessions.

    The ``ipu`` marker's request (``replicas=``, ``stages=``, ``instances=``; default one instance on
    one device) placed on the backend's devices: ``plan.instances[i]`` has the device to use
    (``ipu:N``, a ``gc-info -l`` id), its IPU ids and the backend options that give it its replicas
    and stages; ``plan.placement`` is what records store. ``ipu_compile`` places models the same way.
    Too few IPUs skips the test with what was asked and what exists (fails it under
    ``--ipu-missing-sdk=fail``).
    """
    from pytest_ipu.placement import plan as placed

    try:
        return placed.plan(ipu_backend, _placement_request(request), {}, _session(request).backend_for)
    except BackendUnavailable as exc:
        _skip_or_fail(ipu_settings, exc)


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
        try:
            return session.compiled.compile(
                ipu_backend,
                model,
                example_inputs,
                precision=ipu_backend.default_precision() if chosen == AUTO else chosen,
                key=key,
                options=options,
                placement=_placement_request(request),
                user=request.node.nodeid,
                parity=parity,
                backend_for=session.backend_for,
            )
        except BackendUnavailable as exc:
            # No device free or too few of them ("Failed to acquire 2 IPU(s)"): like a missing SDK.
            _skip_or_fail(ipu_settings, exc)

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
    the model then runs once and nothing is recorded. The record is built by
    ``pytest_ipu.measure.run.measure``; this fixture only gathers its arguments and publishes it.
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
        from pytest_ipu.backends.base import CompiledModel
        from pytest_ipu.backends.host import wrap_callable
        from pytest_ipu.measure.run import RoundsPolicy
        from pytest_ipu.measure.run import measure
        from pytest_ipu.results.records import group_name

        compiled = model if isinstance(model, CompiledModel) else wrap_callable(model)
        if not benchmark.enabled:
            benchmark.pedantic(compiled.run, args=compiled.prepare_inputs(tuple(inputs)), rounds=1)
            return None
        s = ipu_settings
        policy = RoundsPolicy(
            warmup_rounds=s.warmup_rounds if warmup_rounds is None else warmup_rounds,
            rounds=s.rounds if rounds is None else rounds,
            max_time_s=s.max_time_s,
            min_rounds=s.min_rounds,
        )
        meter, source, reason = session.power_meter(compiled.device, s.power)
        result = measure(
            compiled,
            inputs,
            items_per_call=items_per_call,
            policy=policy,
            timer=benchmark,
            meter=meter,
            round_times_s=lambda: benchmark.stats.stats.data,
            unmeasured=(source, reason),
        )
        node = request.node
        group = group_name(benchmark.group, node.name)
        session.publish(
            node, benchmark.extra_info, result.record, result.samples_s, group, marker_gates(node)
        )
        return result.record

    return run


@dataclass
class PowerWindow:
    """What ``ipu_power`` yields: set ``items`` inside the block; read ``result`` after it."""

    device: str
    items: int = 0
    result: PowerRecord | None = None


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
    (max(5 s, 20 update periods)) has ``result.low_confidence`` set, and ``result.warnings`` says why.
    """
    session = _session(request)

    @contextlib.contextmanager
    def measure_power(device: str = "cpu", items: int = 0) -> Iterator[PowerWindow]:
        from pytest_ipu.power.meter import not_measured

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
