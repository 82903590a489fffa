"""One LoadGen test, from settings to result: calibrate, build LoadGen's settings, run the system under
test, read LoadGen's verdict. LoadGen's log files are kept in the run's log directory.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
import typing
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from pathlib import Path
from typing import Any
from typing import NoReturn

from pytest_ipu.errors import LoadgenError
from pytest_ipu.loadgen import detail_log
from pytest_ipu.loadgen.settings import RunSettings
from pytest_ipu.loadgen.settings import make_test_settings
from pytest_ipu.loadgen.sut import BatchingSut
from pytest_ipu.loadgen.sut import SampleLibrary
from pytest_ipu.loadgen.sut import SutStats
from pytest_ipu.loadgen.sut import capacity_qps
from pytest_ipu.measure import metrics
from pytest_ipu.measure.metrics import CpuTime
from pytest_ipu.power.meter import PowerMeter
from pytest_ipu.results.codec import Written
from pytest_ipu.results.codec import meta

#: Calls of each calibration batch after a warm-up one; their median is the estimate.
CALIBRATION_CALLS = 3
#: Offline's expected QPS is the capacity estimate times this: LoadGen sizes Offline's one query as
#: expected QPS x minimum duration, and a query the model finishes early leaves the duration unmet.
OFFLINE_HEADROOM = 1.5
#: SingleStream's and MultiStream's expected latency is the calibration's divided by this.
LATENCY_HEADROOM = 4.0
#: The most queries (Offline: samples) LoadGen is asked to generate for one run.
MAX_GENERATED = 1_000_000

Caller = typing.Callable[[typing.Tuple[object, ...]], object]
#: The CPU time, ns, that the instance worker processes serving the callers have used together, as
#: their latest replies reported it (``InstanceGroup.workers_cpu_ns``).
WorkersClock = typing.Callable[[], int]
#: Where a failed run keeps the model's traceback, in its log directory.
ERROR_FILE = "sut_error.txt"


def load_loadgen() -> Any:
    """``mlperf_loadgen``, or ``ImportError`` naming the extra that installs it."""
    try:
        import mlperf_loadgen
    except ImportError as exc:
        raise ImportError(
            "MLPerf LoadGen is not installed: pip install 'pytest-ipu[loadgen]' (mlcommons-loadgen)"
        ) from exc
    return mlperf_loadgen


@dataclass(frozen=True)
class Calibration(Written):
    """Untimed estimates that size LoadGen's schedule (not results): the median time of a call on one
    sample and on a full batch, and the capacity they imply. Its JSON is the record's
    ``loadgen.calibration``: the two times and the capacity."""

    JSON_DERIVED = (("capacity_qps", None, "capacity_estimate_qps"),)

    batch_1_s: float
    batch_max_s: float
    max_batch: int = field(metadata=meta(written=False))
    instances: int = field(metadata=meta(written=False))
    #: The first call's wall time (lazy initialisation included), seconds.
    first_call_s: float = field(metadata=meta(written=False))

    @property
    def capacity_qps(self) -> float:
        """Samples per second all instances answer at full batches: an estimate, an upper bound."""
        return capacity_qps(self.batch_max_s, self.max_batch, self.instances)


def _median_call(call: Caller, batch: tuple[object, ...]) -> tuple[float, float]:
    """The first call's time (a warm-up: lazy initialisation, first-touch allocation) and the median
    of the next ones."""
    start = time.perf_counter()
    call(batch)
    first = time.perf_counter() - start
    times = []
    for _ in range(CALIBRATION_CALLS):
        start = time.perf_counter()
        call(batch)
        times.append(time.perf_counter() - start)
    return first, max(statistics.median(times), 1e-9)


#: Why a first call on a batch size may fail: the compiled shape is another.
_PAD_TO_HINT = (
    "; a model compiled for one batch size (PopTorch, PopART) needs ipu_loadgen(pad_to=<that size>)"
)


def calibrate(
    callers: Sequence[Caller], library: SampleLibrary, *, max_batch: int, pad_to: int | None
) -> Calibration:
    """Time the first instance on one sample and on a full batch (padded as the SUT pads).

    A failing call raises ``LoadgenError`` naming the batch size. Where it was the model's first call
    on that batch size and there is no ``pad_to``, it says that a model compiled for one batch size
    needs it (PopTorch and PopART run no other shape); where calls on that batch size had passed, it
    says so instead: the model failed, not the batch size."""
    one = [0] * (pad_to or 1)
    full = [i % library.count for i in range(max(max_batch, pad_to or 0))]
    rows = len(one)
    passed = [0]  # calls on a batch of ``rows`` samples that returned

    def counted(batch: tuple[object, ...]) -> object:
        result = callers[0](batch)
        passed[0] += 1
        return result

    try:
        first, batch_1 = _median_call(counted, library.batch(one))
        if len(full) == len(one):
            batch_max = batch_1
        else:
            rows, passed[0] = len(full), 0
            batch_max = _median_call(counted, library.batch(full))[1]
    except Exception as exc:
        hint = ""
        if passed[0]:
            hint = f"; {passed[0]} earlier call(s) on this batch size passed: the batch size is not the cause"
        elif pad_to is None:
            hint = _PAD_TO_HINT
        raise LoadgenError(
            f"pytest-ipu: ipu_loadgen's calibration call on a batch of {rows} sample(s) failed: "
            f"{type(exc).__name__}: {_first_line(exc)}{hint}"
        ) from exc
    return Calibration(batch_1, batch_max, max_batch, len(callers), first)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def expected(run: RunSettings, calibration: Calibration, duration_s: float) -> RunSettings:
    """``run`` with the expectations LoadGen sizes its schedule by, where the caller left them: the
    expected query latency (SingleStream, MultiStream) and Offline's expected QPS, for a run of at
    least ``duration_s``.

    LoadGen generates SingleStream's and MultiStream's queries for the duration at the expected
    latency (with some spare), and ends the run INVALID when they run out: the calibration's
    latency is divided by ``LATENCY_HEADROOM``, so a machine busy while calibrating and quiet after
    does not run out. Both are bounded so that LoadGen never generates more than ``MAX_GENERATED``
    queries or samples for a model that answers in microseconds.
    """
    least_s = duration_s / MAX_GENERATED
    if run.scenario in ("SingleStream", "MultiStream") and run.expected_latency_s is None:
        per_query = (run.samples_per_query or 8) if run.scenario == "MultiStream" else 1
        calls = math.ceil(per_query / calibration.max_batch / calibration.instances)
        latency = calibration.batch_1_s if per_query == 1 else calibration.batch_max_s * calls
        return replace(run, expected_latency_s=max(latency / LATENCY_HEADROOM, least_s))
    if run.scenario == "Offline" and run.target_qps is None:
        qps = min(calibration.capacity_qps * OFFLINE_HEADROOM, 1 / least_s)
        return replace(run, target_qps=qps)
    return run


@dataclass(frozen=True)
class Outcome:
    """One LoadGen test as run: LoadGen's result, what the SUT did, where the logs are."""

    result: detail_log.LogResult
    stats: SutStats
    log_dir: Path
    elapsed_s: float
    #: Each sample's outputs by index (accuracy mode only).
    outputs: dict[int, object]
    #: The power meter's trace and the run's edges on its clock (ns), when a meter sampled the run.
    energy: tuple[Any, int, int] | None = None
    #: Accuracy mode: each sample's time from LoadGen's issue callback to its answer, seconds, and
    #: the time from the first issue to the last answer (LoadGen times nothing in accuracy mode).
    answered_s: tuple[float, ...] = ()
    answered_window_s: float | None = None
    #: The run's host cost: the CPU time of this process and of the instance workers over the
    #: LoadGen run, per sample the system under test answered; `None` where it answered none.
    cpu: CpuTime | None = None


def run_test(
    lg: Any,
    run: RunSettings,
    library: SampleLibrary,
    callers: Sequence[Caller],
    *,
    max_batch: int,
    timeout_s: float,
    pad_to: int | None,
    call_timeout_s: float | None,
    log_dir: Path,
    meter: PowerMeter | None = None,
    workers: tuple[WorkersClock, int] | None = None,
) -> Outcome:
    """Run one LoadGen test of ``run`` over ``library`` on ``callers`` and read its verdict.

    Raises ``LoadgenError`` when the system under test failed (a batch raised or ran past the call
    timeout): LoadGen was let finish by answering every remaining sample unrun, and its logs are
    kept. Everything LoadGen was given (its SUT, its QSL, the workers) is released on every path.
    With a ``meter`` the run is sampled, and ``Outcome.energy`` has the trace and the run's edges
    (LoadGen's performance phase, its own set-up of a few milliseconds included).

    ``Outcome.cpu`` is the run's host cost: this process's CPU time (every thread: LoadGen's, the
    batching workers', the model's) and, where the callers are instances in worker processes,
    ``workers``' (their clock and how many), over the same edges, per sample answered. The clocks
    are read once at each edge, inside the wall-clock marks, never while the system under test runs.
    """
    settings = make_test_settings(lg, run, samples=library.count)
    logging = _log_settings(lg, log_dir)
    sut = BatchingSut(
        lg,
        library,
        callers,
        max_batch=max_batch,
        timeout_s=timeout_s,
        pad_to=pad_to,
        keep_outputs=run.mode == "accuracy",
        call_timeout_s=call_timeout_s,
    )
    sut.start()
    try:
        edges = _drive(lg, sut, library, settings, logging, meter, workers)
    finally:
        sut.close()
    return _outcome(sut, run, log_dir, edges, workers)


def _outcome(
    sut: BatchingSut,
    run: RunSettings,
    log_dir: Path,
    edges: _Edges,
    workers: tuple[WorkersClock, int] | None,
) -> Outcome:
    """The run's outcome: LoadGen's verdict from its detail log, the system under test's figures and
    the host cost; ``LoadgenError`` where the system under test failed or the log does not read."""
    if sut.error is not None:
        _fail(sut, run, log_dir)
    try:
        result = detail_log.parse(log_dir / "mlperf_log_detail.txt", mode=run.mode)
    except detail_log.LogError as exc:
        raise LoadgenError(f"pytest-ipu: {exc}") from None
    span = None if sut.span is None else sut.span[1] - sut.span[0]
    stats = sut.stats()
    cpu = _host_cost(edges.cpu_start, edges.cpu_end, workers, edges.elapsed, stats.samples)
    return Outcome(
        result,
        stats,
        log_dir,
        edges.elapsed,
        sut.outputs,
        edges.energy,
        tuple(sut.answer_latencies_s),
        span,
        cpu,
    )


@dataclass(frozen=True)
class _Edges:
    """What the clocks read at the LoadGen run's edges (``_drive``)."""

    #: The run's wall-clock time, seconds.
    elapsed: float
    #: This process's and the workers' CPU clocks at each edge (``_host_clocks``).
    cpu_start: tuple[int, int]
    cpu_end: tuple[int, int]
    #: The meter's trace and the run's edges on its clock; ``None`` without a meter.
    energy: tuple[Any, int, int] | None


def _drive(
    lg: Any,
    sut: BatchingSut,
    library: SampleLibrary,
    settings: Any,
    logging: Any,
    meter: PowerMeter | None,
    workers: tuple[WorkersClock, int] | None,
) -> _Edges:
    """Give LoadGen the system under test and the sample library, run its test, and release both
    on every path; the clocks are read at the run's edges, inside the energy window's marks."""
    handles: list[tuple[Callable[[Any], None], Any]] = []
    try:
        handles.append((lg.DestroySUT, lg.ConstructSUT(sut.issue, sut.flush)))
        in_memory = settings.performance_sample_count_override
        qsl = lg.ConstructQSL(library.count, in_memory, library.load, library.unload)
        handles.append((lg.DestroyQSL, qsl))
        with contextlib.ExitStack() as sampling:
            trace = None if meter is None else sampling.enter_context(meter.sampling())
            if meter is not None:
                meter.mark()
                start_ns = meter.clock()
            start = time.perf_counter()
            cpu_start = _host_clocks(workers)
            lg.StartTestWithLogSettings(handles[0][1], handles[1][1], settings, logging)
            cpu_end = _host_clocks(workers)
            elapsed = time.perf_counter() - start
            if meter is not None:
                end_ns = meter.clock()
                meter.mark()
    finally:
        for destroy, handle in reversed(handles):
            with contextlib.suppress(Exception):
                destroy(handle)
    energy = None if meter is None else (trace, start_ns, end_ns)
    return _Edges(elapsed, cpu_start, cpu_end, energy)


def _log_settings(lg: Any, log_dir: Path) -> Any:
    """LoadGen's log settings: its logs in ``log_dir`` (made here), no summary on stdout, no trace."""
    log_dir.mkdir(parents=True, exist_ok=True)  # LoadGen aborts the process when it is missing
    logging = lg.LogSettings()
    logging.log_output.outdir = str(log_dir)
    logging.log_output.copy_summary_to_stdout = False
    logging.enable_trace = False
    return logging


def _fail(sut: BatchingSut, run: RunSettings, log_dir: Path) -> NoReturn:
    """Raise the ``LoadgenError`` of a system under test that failed, its traceback kept beside
    LoadGen's logs."""
    kept = ""
    if sut.traceback:
        # The model's traceback, from a worker thread, is kept beside LoadGen's logs.
        (log_dir / ERROR_FILE).write_text(sut.traceback, encoding="utf-8")
        kept = f" (the traceback: {ERROR_FILE})"
    raise LoadgenError(
        f"pytest-ipu: LoadGen's {run.scenario} run failed: {sut.error}. The run was ended by answering "
        f"its remaining {sut.unrun} sample(s) unrun; LoadGen's logs are in {log_dir}{kept}"
    ) from sut.exception


def _host_cost(
    start: tuple[int, int],
    end: tuple[int, int],
    workers: tuple[WorkersClock, int] | None,
    elapsed: float,
    samples: int,
) -> metrics.CpuTime | None:
    """The run's host cost from the clocks at its edges (``_host_clocks``); ``None`` for a run that
    answered no sample or took no time."""
    if samples <= 0 or elapsed <= 0:
        return None
    workers_count = 0 if workers is None else workers[1]
    return metrics.run_cpu_time(end[0] - start[0], end[1] - start[1], workers_count, elapsed, samples)


def _host_clocks(workers: tuple[WorkersClock, int] | None) -> tuple[int, int]:
    """This process's CPU clock (every thread) and the workers' (0 without workers), ns."""
    return time.process_time_ns(), 0 if workers is None else workers[0]()
