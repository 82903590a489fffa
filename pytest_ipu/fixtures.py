"""The public fixtures: ``ipu_settings``, ``ipu_backend``, ``ipu_placement``, ``ipu_compile``,
``ipu_benchmark``, ``ipu_power``, the training ones (``ipu_train``, ``ipu_time_to_train``,
``ipu_process_group``) and ``ipu_loadgen``.

Each is thin: it reads the test's settings and marker and calls the layer that does the work
(``compiling`` for compiles, ``measure.run`` for a benchmark's record, ``power.meter`` for energy),
then hands the result to the session. Those layers are imported inside the fixtures, so loading
the plugin at pytest start-up imports none of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
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

from pytest_ipu import bench_seam
from pytest_ipu.backends.target import Target
from pytest_ipu.backends.target import parse_target
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import ConfigError
from pytest_ipu.marker import marker_gates
from pytest_ipu.marker import marker_overrides
from pytest_ipu.marker import placement_request
from pytest_ipu.options import AUTO
from pytest_ipu.options import Settings
from pytest_ipu.session import JSON_PATH_KEY
from pytest_ipu.session import SESSION_KEY
from pytest_ipu.session import IpuSession

if TYPE_CHECKING:
    from pytest_ipu.backends.base import Backend
    from pytest_ipu.backends.base import CompiledModel
    from pytest_ipu.backends.base import TrainingBackend
    from pytest_ipu.measure.run import Measurement
    from pytest_ipu.measure.timing import PedanticBenchmark
    from pytest_ipu.placement import plan as placed
    from pytest_ipu.placement.request import DeviceRequest
    from pytest_ipu.power.meter import PowerMeter
    from pytest_ipu.results import records
    from pytest_ipu.results.records import PowerRecord
    from pytest_ipu.results.training import TimeToTrainRecord


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
    ) -> records.IpuRecord | records.NotTimed:
        """Measure ``model`` on ``inputs``: the record, or ``NotTimed`` when pytest-benchmark is not
        timing (``--benchmark-disable``, pytest-xdist)."""


#: The last training step ``ipu_train`` compiled in a test: ``ipu_time_to_train`` describes its runs by it
#: (target, precision, device, batch).
LAST_STEP_KEY = pytest.StashKey["CompiledModel"]()

#: Set on a test item whose setup or call failed (``plugin.pytest_runtest_makereport``): a test that
#: failed before it reached ``ipu_benchmark`` did not forget it.
FAILED_KEY = pytest.StashKey[bool]()


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
        from pytest_ipu.errors import UnplaceableError

        chosen = precision or ipu_settings.precision
        problem: str | None = None
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
        except UnplaceableError as exc:
            # The marker asks what the target cannot do: the message names the fix, and a traceback
            # through the placement code would only hide it. Failed outside the ``except``, else
            # pytest prints the error twice ("during handling of the above exception").
            problem = f"pytest-ipu: {exc}"
        assert problem is not None  # every other path returned or raised
        pytest.fail(problem, pytrace=False)

    return compile_model


@pytest.fixture
def ipu_benchmark(
    request: pytest.FixtureRequest, benchmark: Any, ipu_settings: Settings
) -> Iterator[Benchmark]:
    """Measure a compiled model (or any callable) the way every pytest-ipu number is measured.

    ``ipu_benchmark(model, inputs, items_per_call=None, rounds=None, warmup_rounds=None)``:

    1. converts ``inputs`` once (``CompiledModel.prepare_inputs``), untimed;
    2. makes the first call and the warm-up rounds, timed apart and never part of the statistics,
       then (auto rounds) calibrates the round time over a stretch of back-to-back calls;
    3. runs the timed rounds, one synchronous call per round: ``auto`` rounds fill the time
       budget (``--ipu-max-time``) and end there, at least ``--ipu-min-rounds``, and never past
       the hard cap (``--ipu-max-time-cap``);
    4. does this in ``--ipu-repeats`` independent repeats (each warmed up anew, each given its share
       of the budget; the test function runs once per repeat, ``pytest_ipu.repeats``), and pools
       them: latency percentiles, throughput (items / window wall time), the spread between repeats
       (``unstable``), other processes' share of the CPU (``contended``);
    5. stores the record under ``extra_info["ipu"]``, checks the benchmark's gates (a failing gate
       fails this test) and returns the ``IpuRecord``.

    pytest-benchmark times the rounds of the last repeat (its JSON statistics are those rounds);
    the earlier repeats are timed the same way by pytest-ipu. ``items_per_call`` defaults to the
    leading dimension of the first input (the batch size); with several instances it is per
    instance, and a round completes it once per instance. When pytest-benchmark is not timing
    (``--benchmark-disable``, or under pytest-xdist) the model runs once, as a test, nothing is
    recorded, and the fixture returns a ``NotTimed`` record (``record.timed`` false, no figures).
    The record is built by ``pytest_ipu.measure.run``; this fixture gathers its arguments.

    Bad arguments (``rounds=0``, ``items_per_call="8"``, a tensor as ``inputs`` instead of ``(x,)``)
    and a call still running at ``--ipu-call-timeout`` fail the test with one line saying what to
    change.
    """
    session = _session(request)
    #: Set when this run used the fixture without pytest-benchmark's timer (an earlier repeat, or a
    #: worker that failed before the last repeat): its "not used" warning would be wrong.
    quiet = [False]

    def run(
        model: CompiledModel | Callable[..., object],
        inputs: Sequence[object] = (),
        *,
        items_per_call: int | None = None,
        rounds: int | None = None,
        warmup_rounds: int | None = None,
    ) -> records.IpuRecord | records.NotTimed:
        __tracebackhide__ = True
        from pytest_ipu import repeats as repeating
        from pytest_ipu.backends.base import CompiledModel
        from pytest_ipu.backends.host import wrap_callable
        from pytest_ipu.errors import BenchmarkArgumentError
        from pytest_ipu.errors import CallTimeout
        from pytest_ipu.errors import NonFiniteLoss
        from pytest_ipu.errors import RankError
        from pytest_ipu.measure.contention import ContentionProbe
        from pytest_ipu.measure.run import RoundsPolicy
        from pytest_ipu.measure.run import check_arguments
        from pytest_ipu.measure.run import measure
        from pytest_ipu.measure.run import pool
        from pytest_ipu.measure.timing import LocalTimer
        from pytest_ipu.measure.timing import Watchdog

        s = ipu_settings
        #: A bad argument or a call timeout: failed below, outside the ``except`` (else pytest would
        #: print the error twice, "during handling of the above exception").
        problem: str | None = None
        try:
            # One test's mistake fails that test in one line, before anything is called.
            check_arguments(
                model.run if isinstance(model, CompiledModel) else model,
                inputs,
                items_per_call=items_per_call,
                rounds=rounds,
                warmup_rounds=warmup_rounds,
            )
        except BenchmarkArgumentError as exc:
            problem = str(exc)
        if problem is not None:
            quiet[0] = True
            pytest.fail(problem, pytrace=False)
        compiled = model if isinstance(model, CompiledModel) else wrap_callable(model)
        if not benchmark.enabled:
            try:
                with Watchdog(s.call_timeout_s):
                    benchmark.pedantic(compiled.run, args=compiled.prepare_inputs(tuple(inputs)), rounds=1)
            except (CallTimeout, NonFiniteLoss) as exc:
                problem = str(exc)
            if problem is not None:
                pytest.fail(problem, pytrace=False)
            return _not_timed(compiled, inputs, items_per_call, request.config)
        node = request.node
        count, mode = repeating.plan(s)
        state = session.repeats.state(node.nodeid)
        # Into how many repeats the budget is split: a worker is told by its parent; a benchmark
        # whose earlier repeats did not run (skipped, say) is measured once, on the whole budget.
        share = repeating.worker_share() or (
            count if mode == "process" or not state.final or state.done else 1
        )
        policy = RoundsPolicy(
            warmup_rounds=s.warmup_rounds if warmup_rounds is None else warmup_rounds,
            rounds=s.rounds if rounds is None else rounds,
            # Each repeat gets its share of the budget and of the cap: K repeats fill one budget.
            max_time_s=s.max_time_s / share,
            # The minimum is the benchmark's, like the budget: its repeats share it (rounded up).
            min_rounds=-(-s.min_rounds // share),
            cap_s=s.time_cap.for_budget(s.max_time_s) / share,
        )
        if session.torchrun is not None and mode == "process" and count > 1:
            quiet[0] = True
            pytest.fail(
                "pytest-ipu: --ipu-repeat-mode=process cannot run under torchrun: its worker processes are "
                "not ranks of the launch; use --ipu-repeat-mode=interleaved (the default)",
                pytrace=False,
            )
        if state.final and mode == "process" and count > 1:
            try:
                state.done = repeating.run_workers(node, count - 1, s)
            except repeating.RepeatError as exc:
                quiet[0] = True
                pytest.fail(f"pytest-ipu: {exc}", pytrace=False)
        index = len(state.done) + 1

        def timed(
            timer: PedanticBenchmark,
            times: Callable[[], Sequence[float]],
            meter: PowerMeter | None,
            unmeasured: tuple[str, str],
        ) -> Measurement:
            return measure(
                compiled,
                inputs,
                items_per_call=items_per_call,
                policy=policy,
                timer=timer,
                round_times_s=times,
                meter=meter,
                unmeasured=unmeasured,
                probe=ContentionProbe(threshold=s.contended_threshold),
                unstable_threshold=s.unstable_threshold,
                index=index,
                call_timeout_s=s.call_timeout_s,
                lockstep=session.lockstep(node.name),
            )

        try:
            if not state.final:
                # An earlier repeat: timed here, kept for the last run, not recorded by pytest-benchmark.
                local = LocalTimer()
                quiet[0] = True
                earlier = timed(local, lambda: local.data, None, ("none", "measured in the last repeat only"))
                state.done.append(earlier)
                return earlier.record
            meter, source, reason = session.power_meter(compiled.device, s.power)
            timer = bench_seam.Timer(benchmark)
            result = timed(timer, lambda: timer.round_times, meter, (source, reason))
        except RankError as exc:
            problem = _end_launch(request, session, exc)
        except (CallTimeout, BenchmarkArgumentError, NonFiniteLoss) as exc:
            # The message names the call (or argument, step), the value and the fix; the traceback
            # would only show where the model was blocked, which its author can reproduce.
            problem = str(exc)
        if problem is not None:
            quiet[0] = True
            pytest.fail(problem, pytrace=False)
        pooled = pool([*state.done, result], mode, s.unstable_threshold)
        session.repeats.states.pop(node.nodeid, None)  # the earlier repeats' samples are not kept
        # pytest-benchmark's statistics are the last repeat's rounds; gates weigh whole repeats.
        _publish(request, session, benchmark, pooled.record, result.samples_s)
        return pooled.record

    yield run
    if quiet[0] or request.node.stash.get(FAILED_KEY, False):
        # Tell pytest-benchmark its fixture was not forgotten (else it warns "Benchmark fixture was
        # not used at all in this test!"): this run measured without it, or failed before it.
        bench_seam.mark_used(benchmark)


@dataclass
class PowerWindow:
    """What ``ipu_power`` yields: set ``items`` inside the block; read ``result`` after it.

    ``result`` is set when the block ends, also when it raised (the window then ends where it
    raised): the block's wall time (``window_s``) and ``items`` always, its energy where a source
    measured it.
    """

    device: str
    items: int = 0
    result: PowerRecord | None = None


class Power(Protocol):
    """The callable ``ipu_power`` returns."""

    def __call__(self, device: str = "cpu", items: int = 0) -> contextlib.AbstractContextManager[PowerWindow]:
        """A context manager measuring the energy of its block on ``device``'s power source."""


def _power_items_problem(items: object, where: str) -> str | None:
    """Why ``items`` cannot be a block's item count (a whole number >= 0), or ``None``."""
    if isinstance(items, bool) or not isinstance(items, int) or items < 0:
        return (
            f"pytest-ipu: {where} is {items!r}: the items a block completed are a whole number >= 0; "
            "set window.items = N inside the block (or pass ipu_power(device, items=N))"
        )
    return None


@pytest.fixture
def ipu_power(request: pytest.FixtureRequest, ipu_settings: Settings) -> Power:
    """Measure the energy of any block of code, the same way ``ipu_benchmark`` measures its rounds::

        with ipu_power("cuda:0") as window:
            for batch in batches:
                model(batch)
            window.items = len(batches) * batch_size
        print(window.result.energy_j, window.result.items_per_j)

    The source follows ``--ipu-power`` (``auto``: NVML for ``cuda``, RAPL for ``cpu`` and ``host``,
    gcipuinfo for ``ipu``). Every block is recorded, with or without a source: ``result.window_s``
    is its wall time and ``result.items`` the items it set. When nothing can measure the device,
    ``result.measured`` is false and ``result.reason`` says why; the energy figures are then
    ``None``, never zero. A block shorter than the sensor needs (max(5 s, 20 update periods)) has
    ``result.low_confidence`` set, and ``result.warnings`` says why. A block that raises is
    recorded too, up to where it raised, and its exception propagates.

    Each block goes to the run's JSON (``pytest_ipu.power_blocks``, written even when the run has
    no benchmark) and to the "ipu_power blocks" table. A device that is not a compute device's
    spelling (``"gpu7"``, ``""``) or a bad ``items`` fails the test with one line naming it.
    """
    session = _session(request)

    @contextlib.contextmanager
    def measure_power(device: str = "cpu", items: int = 0) -> Iterator[PowerWindow]:
        __tracebackhide__ = True
        from pytest_ipu import power
        from pytest_ipu.power.meter import not_measured
        from pytest_ipu.results.power_blocks import describe_error

        problem = _power_items_problem(items, "ipu_power(items=...)")
        try:
            power.check_device(device)
        except ValueError as exc:
            problem = f"pytest-ipu: ipu_power(device=...): {exc}"
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        window = PowerWindow(device, items)
        meter, name, reason = session.power_meter(device, ipu_settings.power)
        #: What the block raised, if anything: the window is still recorded, then it propagates.
        error: str | None = None
        edges: list[int] = []  # the window's start and end, perf_counter_ns
        try:
            with contextlib.nullcontext(None) if meter is None else meter.sampling() as trace:
                if meter is not None:
                    meter.mark()
                edges.append(time.perf_counter_ns())
                try:
                    yield window
                except BaseException as exc:  # a failed assert, pytest.skip, an interrupt alike
                    error = describe_error(exc)
                    raise
                finally:
                    edges.append(time.perf_counter_ns())
                    if meter is not None:
                        meter.mark()
        finally:
            # After the sampler stopped (it must have read past the window's end); also when the
            # block raised, so that nothing it measured is lost.
            problem = _power_items_problem(window.items, "window.items")
            if problem is None and len(edges) == 2:
                start, end = edges
                if meter is None or trace is None:
                    result = not_measured(name, reason, window_s=(end - start) * 1e-9, items=window.items)
                else:
                    result = meter.result(trace, start, end, window.items, rounds_fixed=True)
                window.result = result
                session.add_power_block(request.node.nodeid, device, result, error)
        if problem is not None:
            # Reached only when the block did not raise: its own exception would say more.
            pytest.fail(problem, pytrace=False)

    return measure_power


class Train(Protocol):
    """The callable ``ipu_train`` returns."""

    def __call__(
        self,
        model: object,
        loss: Callable[..., Any],
        optimizer: Callable[[Any], Any],
        example_batch: Sequence[object],
        *,
        inputs: int = 1,
        gradient_accumulation: int = 1,
        precision: str | None = None,
        **options: object,
    ) -> CompiledModel:
        """A compiled training step of a copy of ``model``."""


def _require_training(backend: Backend, settings: Settings) -> TrainingBackend:
    """``backend``, which can train; a training test on an inference-only backend is skipped (or
    failed, under ``--ipu-missing-sdk=fail``)."""
    __tracebackhide__ = True
    from pytest_ipu.backends.base import TrainingBackend

    if not isinstance(backend, TrainingBackend):
        _skip_or_fail(
            settings,
            BackendUnavailable(
                f"pytest-ipu: the {backend.name} backend runs inference only; train on torch, "
                "torch-compile or poptorch"
            ),
        )
    return backend


def _positive(name: str, value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"pytest-ipu: ipu_train({name}={value!r}): {name} must be a whole number >= 1"
    return None


@pytest.fixture
def ipu_process_group(request: pytest.FixtureRequest) -> Iterator[Any]:
    """This process's place in a torchrun launch, and the process group to train over.

    Under ``torchrun --nproc-per-node=N [--nnodes=M ...] -m pytest``: ``rank``, ``world_size``,
    ``local_rank``, ``node``, ``backend`` (gloo on the CPU; ``cpu:gloo,cuda:nccl`` where torch has
    CUDA and NCCL) and ``group``, opened once for the run. Outside torchrun: rank 0 of 1,
    ``distributed`` false. ``ipu_train`` uses it to make data-parallel steps; a test uses it to feed
    each rank its own shard (``rank``, ``world_size``).
    """
    from pytest_ipu.placement.torchrun import ProcessGroup

    session = _session(request)
    ranks = session.rank_group()
    if ranks is None:
        yield ProcessGroup()
        return
    rank = ranks.rank
    yield ProcessGroup(rank.index, rank.count, rank.local_index, rank.node, ranks.backend, ranks.group)


@pytest.fixture
def ipu_train(
    request: pytest.FixtureRequest, ipu_backend: Backend, ipu_settings: Settings, ipu_process_group: Any
) -> Iterator[Train]:
    """Compile a training step for this test's backend::

        sgd = lambda params: torch.optim.SGD(params, lr=0.1)
        step = ipu_train(model, torch.nn.functional.cross_entropy, sgd, (x, y))
        loss = step(x, y)                   # one step, untimed
        record = ipu_benchmark(step, (x, y))  # timed steps; record.training says how the batch is made

    ``loss(outputs, *targets)`` returns a scalar and ``optimizer(parameters)`` makes the optimizer;
    the first ``inputs`` elements of a batch go to the model, the rest to the loss. One call of the
    step takes a host batch of micro-batch x ``gradient_accumulation`` (x replicas x device
    iterations on PopTorch: ``replicas=``, ``device_iterations=``) samples and makes one optimizer
    step; its compile (``torch.compile``'s first step, PopTorch's ``compile``) is ``compile_s``, never
    timed. ``precision`` ``fp16``/``bf16`` trains in automatic mixed precision (fp32 weights);
    ``auto`` is the backend's choice. Under torchrun the model is wrapped in DistributedDataParallel
    over ``ipu_process_group``, and every rank feeds its own batches.

    The model is copied: the caller's stays untouched. A non-finite loss fails the benchmark naming
    the step. ``step.evaluate(*inputs)`` runs the trained model in evaluation mode. A backend that
    cannot train (ONNX Runtime, PopART) skips the test with the reason.
    """
    from pytest_ipu.backends.base import TrainingRequest
    from pytest_ipu.errors import CompileError
    from pytest_ipu.errors import RankError

    made: list[CompiledModel] = []

    def train(
        model: object,
        loss: Callable[..., Any],
        optimizer: Callable[[Any], Any],
        example_batch: Sequence[object],
        *,
        inputs: int = 1,
        gradient_accumulation: int = 1,
        precision: str | None = None,
        **options: object,
    ) -> CompiledModel:
        __tracebackhide__ = True
        trainer = _require_training(ipu_backend, ipu_settings)
        problem = _positive("inputs", inputs) or _positive("gradient_accumulation", gradient_accumulation)
        if problem is None and (not callable(loss) or not callable(optimizer)):
            problem = (
                "pytest-ipu: ipu_train(model, loss, optimizer, ...): loss and optimizer must be callables: "
                "loss(outputs, *targets) -> scalar, optimizer(parameters) -> torch.optim.Optimizer"
            )
        if problem is None and (
            isinstance(example_batch, (str, bytes)) or not isinstance(example_batch, Sequence)
        ):
            problem = (
                f"pytest-ipu: ipu_train(example_batch={type(example_batch).__name__} object): the batch is a "
                "tuple (inputs..., targets...); pass (x, y)"
            )
        chosen = precision or ipu_settings.precision
        ranks = _session(request).lockstep(request.node.name)
        if problem is None and ranks is not None:
            # DistributedDataParallel's first act is a collective (it broadcasts rank 0's weights):
            # wait here first, where a rank that never comes is named instead of timing out unnamed.
            try:
                ranks.barrier("ipu_train")
            except RankError as exc:
                problem = _end_launch(request, _session(request), exc)
        start = time.perf_counter()
        if problem is None:
            try:
                step = trainer.compile_training(
                    model,
                    tuple(example_batch),
                    # auto trains in fp32, but with CUDA's mixed precision (fp32 weights, fp16
                    # autocast): PopTorch's fp16 would be half weights with no loss scaling.
                    ("fp16" if ipu_backend.device.startswith("cuda") else "fp32")
                    if chosen == AUTO
                    else chosen,
                    options,
                    TrainingRequest(
                        loss=loss,
                        optimizer=optimizer,
                        inputs=inputs,
                        gradient_accumulation=gradient_accumulation,
                        process_group=ipu_process_group.group,
                        processes=ipu_process_group.world_size,
                    ),
                )
            except CompileError as exc:
                problem = f"pytest-ipu: ipu_train: {exc}"
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        step = dataclasses.replace(step, compile_s=time.perf_counter() - start)
        made.append(step)
        request.node.stash[LAST_STEP_KEY] = step
        return step

    yield train
    for step in made:
        step.close()


class TimeToTrain(Protocol):
    """The callable ``ipu_time_to_train`` returns."""

    def __call__(
        self,
        setup: Callable[[int], Any],
        *,
        quality_target: float,
        runs: int = 5,
        max_epochs: int = 30,
        quality: str = "accuracy",
        higher_is_better: bool = True,
        seeds: Sequence[int] | None = None,
    ) -> records.IpuRecord | records.NotTimed:
        """Time ``runs`` training runs to ``quality_target``; the record."""


@pytest.fixture
def ipu_time_to_train(
    request: pytest.FixtureRequest,
    benchmark: Any,
    ipu_backend: Backend,
    ipu_settings: Settings,
    ipu_process_group: Any,
) -> Iterator[TimeToTrain]:
    """Time to train, MLPerf's metric: ``ipu_time_to_train(setup, quality_target=0.95, runs=5)``.

    ``setup(seed)`` makes one run (untimed, as MLPerf's init: build and initialise the model, usually
    with ``ipu_train``) and returns an object with ``train_epoch() -> int`` (trains one epoch, returns
    the samples this process saw) and ``evaluate() -> float`` (the quality on held-out data). Each
    run's clock starts after ``setup`` and stops at the evaluation that reaches ``quality_target``
    (``higher_is_better=False`` for a loss); training and evaluation are both timed. ``runs`` runs,
    each with its own seed (``seeds``, else drawn at random and recorded), give the olympic average
    (the fastest and slowest dropped, with 3 runs or more), the record's ``time_to_train`` and the
    metric ``time_to_train`` that gates read. A run that misses the target in ``max_epochs`` counts
    as the slowest; more than one such run fails the benchmark, naming them.

    pytest-benchmark's statistics are the runs' times; the record's throughput is samples per second
    over every run. Under torchrun every rank runs in step and the samples of all ranks count.
    Under ``--benchmark-disable`` one epoch of one run is made, untimed.
    """
    session = _session(request)
    quiet = [False]

    def time_to_train(
        setup: Callable[[int], Any],
        *,
        quality_target: float,
        runs: int = 5,
        max_epochs: int = 30,
        quality: str = "accuracy",
        higher_is_better: bool = True,
        seeds: Sequence[int] | None = None,
    ) -> records.IpuRecord | records.NotTimed:
        __tracebackhide__ = True
        import random

        from pytest_ipu.errors import RankError
        from pytest_ipu.measure import time_to_train as ttt
        from pytest_ipu.results import training

        problem = None
        if not callable(setup):
            problem = f"pytest-ipu: ipu_time_to_train(setup={setup!r}): setup must be a callable setup(seed)"
        for name, value in (("runs", runs), ("max_epochs", max_epochs)):
            if problem is None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                problem = (
                    f"pytest-ipu: ipu_time_to_train({name}={value!r}): {name} must be a whole number >= 1"
                )
        if problem is None and seeds is not None and len(seeds) != runs:
            problem = (
                f"pytest-ipu: ipu_time_to_train(seeds={list(seeds)!r}): {len(seeds)} seed(s) for "
                f"runs={runs}; pass one seed per run, or none to draw them"
            )
        if problem is not None:
            quiet[0] = True
            pytest.fail(problem, pytrace=False)
        quiet[0] = True  # until the runs start: a skip here leaves pytest-benchmark nothing to write
        _require_training(ipu_backend, ipu_settings)
        quiet[0] = False
        ranks = session.lockstep(request.node.name)
        if seeds is None:
            # Drawn at random as MLPerf asks, and recorded; the ranks of a launch take the largest
            # of their draws, so that all train with the same seeds.
            first = random.SystemRandom().randrange(2**31)
            if ranks is not None:
                first = int(ranks.agree_max(first))
            seeds = [(first + i) % 2**31 for i in range(runs)]
        if not benchmark.enabled:
            state = setup(seeds[0])
            state.train_epoch()
            state.evaluate()
            quiet[0] = True
            return _not_timed_training(ipu_backend, request.config)
        done: list[training.TrainRun] = []
        order = iter(enumerate(seeds, start=1))
        setups: list[float] = []

        def make() -> tuple[tuple[Any, ...], dict[str, Any]]:
            index, seed = next(order)
            start = time.perf_counter()
            state = setup(seed)
            setups.append(time.perf_counter() - start)
            return (state, index, seed), {}

        def one(state: Any, index: int, seed: int) -> None:
            done.append(
                ttt.run_once(
                    state,
                    index=index,
                    seed=seed,
                    target=quality_target,
                    higher_is_better=higher_is_better,
                    max_epochs=max_epochs,
                    ranks=ranks,
                )
            )

        try:
            benchmark.pedantic(one, setup=make, rounds=runs, iterations=1, warmup_rounds=0)
        except RankError as exc:
            problem = _end_launch(request, session, exc)
        except BaseException:
            # A run that raised (a NaN loss, a skip from inside setup) leaves pytest-benchmark a
            # benchmark without rounds, which it cannot write: it is marked skipped in the teardown.
            quiet[0] = True
            raise
        if problem is not None:
            quiet[0] = True
            pytest.fail(problem, pytrace=False)
        processes = 1 if ipu_process_group.group is None else ipu_process_group.world_size
        summary = None
        try:
            summary = training.summarize(
                done,
                quality=quality,
                quality_target=quality_target,
                higher_is_better=higher_is_better,
                max_epochs=max_epochs,
                processes=processes,
            )
        except training.NoScore as exc:
            problem = f"pytest-ipu: time to train of {request.node.name}: {exc}"
        if summary is None:
            # Failed outside the ``except`` (else pytest prints it twice), and with no record the
            # runs' times are not written as a benchmark either.
            quiet[0] = True
            pytest.fail(str(problem), pytrace=False)
        record = _time_to_train_record(
            ipu_backend, summary, setups, request.node.stash.get(LAST_STEP_KEY, None)
        )
        _publish(request, session, benchmark, record, bench_seam.Timer(benchmark).round_times)
        return record

    yield time_to_train
    if quiet[0] or request.node.stash.get(FAILED_KEY, False):
        bench_seam.mark_used(benchmark)


class Loadgen(Protocol):
    """The callable ``ipu_loadgen`` returns."""

    def __call__(
        self,
        model: CompiledModel | Callable[..., object],
        samples: Sequence[object],
        *,
        scenario: str = "SingleStream",
        mode: str = "performance",
        target_qps: float | None = None,
        target_latency: float | str | None = None,
        latency_percentile: float | None = None,
        samples_per_query: int | None = None,
        min_duration: float | str | None = None,
        min_queries: int | None = None,
        max_duration: float | str | None = None,
        max_batch: int | None = None,
        batch_timeout: float | str = 0.0,
        pad_to: int | None = None,
        find_peak: bool = False,
        max_probes: int = 10,
        search_budget: float | str | None = None,
        search_tolerance: float = 0.05,
        mlperf: bool = False,
        mlperf_model: str | None = None,
        accuracy: Callable[[dict[int, object]], float] | None = None,
        accuracy_name: str = "accuracy",
        performance_samples: int | None = None,
    ) -> records.IpuRecord | records.NotTimed:
        """Run ``model`` as MLPerf LoadGen's system under test over ``samples``; the record."""


@pytest.fixture
def ipu_loadgen(request: pytest.FixtureRequest, benchmark: Any, ipu_settings: Settings) -> Iterator[Loadgen]:
    """MLPerf LoadGen's scenarios as a benchmark: ``ipu_loadgen(model, (x,), scenario="Server", ...)``.

    ``model`` (a ``CompiledModel`` from ``ipu_compile``, of one or several instances, or any callable)
    is LoadGen's system under test; ``samples`` its query sample library: inputs whose leading
    dimension is the samples (row ``i`` of each is sample ``i``). LoadGen issues queries by the
    ``scenario``'s rules (``SingleStream``, ``MultiStream``, ``Server``, ``Offline``); a batching
    system under test gathers their samples into batches of up to ``max_batch``, waiting at most
    ``batch_timeout`` for a batch to fill, spread over the model's instances (``pad_to`` pads the
    batches of a model compiled for one batch size). ``mode="accuracy"`` runs every sample once and
    scores the outputs with ``accuracy(outputs_by_index) -> float``. ``find_peak=True`` (Server)
    searches for the highest ``target_qps`` that LoadGen calls VALID under ``target_latency``, in at
    most ``max_probes`` LoadGen runs and ``search_budget``.

    Settings start from MLPerf's own (LoadGen's ``mlperf.conf``, for ``mlperf_model`` when named):
    its seeds, percentiles and latency bound; its minimum durations (600 s) only with
    ``mlperf=True``, else a run lasts ``min_duration`` (2 s by default). The record's
    ``extra_info["ipu"]["loadgen"]`` holds LoadGen's verdict with its reasons, its figures, the
    batching, every probe of a search, ``mlperf_compliant`` with every reason it is not, and where
    LoadGen's log files are kept (beside ``--benchmark-json``). The gates' ``loadgen.*`` metrics
    read it. An exception in the model ends the LoadGen run (its remaining queries answered unrun)
    and fails the test naming it. Without the ``loadgen`` extra the test is skipped (failed under
    ``--ipu-missing-sdk=fail``). docs/loadgen.md has the details.
    """
    session = _session(request)
    quiet = [False]

    def run(
        model: CompiledModel | Callable[..., object], samples: Sequence[object], **settings: Any
    ) -> records.IpuRecord | records.NotTimed:
        __tracebackhide__ = True

        from pytest_ipu.backends.base import CompiledModel
        from pytest_ipu.backends.host import wrap_callable
        from pytest_ipu.errors import LoadgenError
        from pytest_ipu.loadgen import request as checked
        from pytest_ipu.loadgen import runner
        from pytest_ipu.loadgen import scenario as scenarios
        from pytest_ipu.loadgen.sut import SampleLibrary
        from pytest_ipu.measure.run import loadgen_record

        problem: str | None = None
        try:
            asked = checked.build(**settings)
            library = SampleLibrary(samples)
        except TypeError as exc:  # a keyword ipu_loadgen does not take, in Python's own words
            problem = f"pytest-ipu: {str(exc).replace('build()', 'ipu_loadgen()')}"
        except ValueError as exc:
            text = str(exc)
            prefix = "" if text.startswith("ipu_loadgen") else "ipu_loadgen(samples): "
            problem = f"pytest-ipu: {prefix}{text}"
        if problem is None and session.torchrun is not None and session.torchrun.count > 1:
            # Each rank would be a LoadGen of its own, issuing its own queries: not one system under
            # test, and no merge could make the ranks' verdicts one.
            problem = (
                "pytest-ipu: ipu_loadgen runs one LoadGen in one process; run it without torchrun "
                "(several instances of a model come from @pytest.mark.ipu(instances=N))"
            )
        if problem is not None:
            quiet[0] = True
            pytest.fail(problem, pytrace=False)
        quiet[0] = True  # until LoadGen runs: a skip leaves pytest-benchmark nothing to write
        try:
            lg = runner.load_loadgen()
        except ImportError as exc:
            _skip_or_fail(ipu_settings, BackendUnavailable(f"pytest-ipu: {exc}"))
        quiet[0] = False
        compiled = model if isinstance(model, CompiledModel) else wrap_callable(model)
        group = compiled.group
        if group is not None:
            callers: list[runner.Caller] = [functools.partial(group.call, i) for i in range(group.count)]
        else:

            def call(batch: tuple[object, ...]) -> object:
                return compiled.run(*compiled.prepare_inputs(batch))

            callers = [call]
        if not benchmark.enabled:
            callers[0](library.batch([0] * (asked.pad_to or 1)))
            quiet[0] = True
            return _not_timed(compiled, (library.batch([0]),), 1, request.config)
        json_path = request.config.stash.get(JSON_PATH_KEY, None)
        # Beside the JSON: results/latest.json keeps them in results/latest.loadgen/<test>/.
        root = (
            session.loadgen_log_root()
            if json_path is None
            else json_path.with_name(json_path.stem + ".loadgen")
        )
        where = root / scenarios.log_dir_name(request.node.name)
        done: list[scenarios.Measured] = []

        meter, source, reason = session.power_meter(compiled.device, ipu_settings.power)

        def one() -> None:
            done.append(
                scenarios.measure(
                    lg,
                    asked,
                    library,
                    callers,
                    log_dir=where,
                    call_timeout_s=ipu_settings.call_timeout_s,
                    meter=meter,
                    unmeasured=(source, reason),
                )
            )

        try:
            # One pytest-benchmark round: the LoadGen run (a search: all its probes), timed whole.
            benchmark.pedantic(one, rounds=1, iterations=1, warmup_rounds=0)
        except LoadgenError as exc:
            problem = str(exc)
        except BaseException:
            # An accuracy score that raised, a skip from the model: pytest-benchmark is left a
            # benchmark without rounds, which it cannot write, so it is marked skipped at teardown.
            quiet[0] = True
            raise
        if problem is not None:
            quiet[0] = True
            pytest.fail(problem, pytrace=False)
        measured_run = done[0]
        record = loadgen_record(
            measured_run.part,
            compiled=compiled,
            first_call_s=measured_run.calibration.first_call_s,
            elapsed_s=measured_run.outcome.elapsed_s,
            answered_s=measured_run.outcome.answered_s,
            answered_window_s=measured_run.outcome.answered_window_s,
            power=measured_run.power,
        )
        _publish(request, session, benchmark, record, bench_seam.Timer(benchmark).round_times)
        return record

    yield run
    if quiet[0] or request.node.stash.get(FAILED_KEY, False):
        bench_seam.mark_used(benchmark)


def _publish(
    request: pytest.FixtureRequest,
    session: IpuSession,
    benchmark: Any,
    record: records.IpuRecord,
    samples_s: Sequence[float],
) -> None:
    """Hand a benchmark's record to the session (its JSON under ``extra_info["ipu"]``, the tables)
    and check its gates: a failing gate fails the test, one line per gate. ``samples_s`` are the
    per-round times pytest-benchmark took."""
    __tracebackhide__ = True
    from pytest_ipu.results.records import group_name

    node = request.node
    group = group_name(benchmark.group, node.name)
    measured = session.publish(
        node, benchmark.extra_info, record, tuple(samples_s), group, marker_gates(node)
    )
    failed = session.gate_check.check_item(measured)
    if failed:
        pytest.fail("\n".join(f"pytest-ipu gate FAILED: {line}" for line in failed), pytrace=False)


def _end_launch(request: pytest.FixtureRequest, session: IpuSession, exc: Exception) -> str:
    """Another rank failed or hangs: this test fails with the message returned, and the run stops
    after it, since every later wait would be for that rank too. Nothing is merged from part of a
    launch (``IpuSession.launch_error``)."""
    session.launch_error = str(exc)
    session.ranks_lost = True
    request.session.shouldstop = str(exc)
    return str(exc)


def _device_name(backend: Backend) -> str:
    described = backend.describe()
    name = described.get("device_name") if isinstance(described, dict) else None
    return str(name) if name else backend.device


def _time_to_train_record(
    backend: Backend, summary: TimeToTrainRecord, setups: Sequence[float], step: CompiledModel | None
) -> records.IpuRecord:
    """The record of a time-to-train benchmark (``measure.run.time_to_train_record``), described by
    the last training step the runs' set-up compiled with ``ipu_train`` (``step``): its target,
    precision, device name and host batch; without one, the backend's, precision ``n/a``, batch 1."""
    from pytest_ipu.measure.run import time_to_train_record

    return time_to_train_record(
        summary,
        setups,
        target=f"{backend.name}:{backend.device}" if step is None else step.target,
        backend=backend.name,
        device=backend.device,
        device_name=_device_name(backend) if step is None else step.device_name,
        precision="n/a" if step is None else step.precision,
        io="host" if step is None else step.io,
        batch_size=1 if step is None or step.training is None else step.training.host_batch,
    )


def _not_timed_training(backend: Backend, config: pytest.Config) -> records.NotTimed:
    from pytest_ipu.repeats import untimed_reason
    from pytest_ipu.results.records import NotTimed

    return NotTimed(
        target=f"{backend.name}:{backend.device}",
        backend=backend.name,
        device=backend.device,
        device_name=_device_name(backend),
        precision="n/a",
        io="host",
        batch_size=1,
        items_per_call=1,
        reason=untimed_reason(config) or "pytest-benchmark disabled itself (its warning says why)",
    )


def _not_timed(
    compiled: CompiledModel, inputs: Sequence[object], items_per_call: int | None, config: pytest.Config
) -> records.NotTimed:
    """The record of a benchmark that ran once untimed, with the reason pytest-benchmark gives."""
    from pytest_ipu.measure.run import batch_size
    from pytest_ipu.measure.run import identity
    from pytest_ipu.repeats import untimed_reason
    from pytest_ipu.results.records import NotTimed

    # pytest-benchmark may also disable itself for reasons of its own (no ``statistics`` module).
    reason = untimed_reason(config) or "pytest-benchmark disabled itself (its warning says why)"
    batch = batch_size(inputs)
    return NotTimed(
        **identity(compiled),
        batch_size=batch,
        items_per_call=batch if items_per_call is None else items_per_call,
        reason=reason,
    )


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
