"""One LoadGen benchmark from a checked request to the record's ``loadgen`` part: calibrate, run the
scenario (or the peak Server QPS search), score accuracy, judge MLPerf compliance.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_ipu.errors import LoadgenError
from pytest_ipu.loadgen import detail_log
from pytest_ipu.loadgen import runner
from pytest_ipu.loadgen import search
from pytest_ipu.loadgen.request import LoadgenRequest
from pytest_ipu.loadgen.settings import SHORT_DURATION_S
from pytest_ipu.loadgen.settings import Rules
from pytest_ipu.loadgen.settings import RunSettings
from pytest_ipu.loadgen.settings import compliance
from pytest_ipu.loadgen.settings import rules
from pytest_ipu.loadgen.sut import SampleLibrary
from pytest_ipu.power.meter import PowerMeter
from pytest_ipu.power.meter import not_measured
from pytest_ipu.results.codec import fields_of
from pytest_ipu.results.loadgen import BatchingRecord
from pytest_ipu.results.loadgen import LoadgenFigures
from pytest_ipu.results.loadgen import LoadgenRecord
from pytest_ipu.results.loadgen import PeakSearch
from pytest_ipu.results.loadgen import ServerProbe
from pytest_ipu.results.records import PowerRecord


def log_dir_name(nodename: str) -> str:
    """A test's name as a directory name: ``test_x[torch:cpu-8]`` -> ``test_x-torch-cpu-8``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", nodename).strip("-.") or "loadgen"


@dataclass(frozen=True)
class Measured:
    """A LoadGen benchmark as measured: its part of the record, and what the record's other fields
    are made from."""

    part: LoadgenRecord
    calibration: runner.Calibration
    #: The LoadGen run the record's figures are of (a search: its peak's probe).
    outcome: runner.Outcome
    #: The energy of the LoadGen run, or why it was not measured.
    power: PowerRecord


def percentile_name(fraction: object) -> str | None:
    """A latency percentile as the record names it (0.99 -> ``p99``, 0.999 -> ``p99.9``), or
    ``None`` for one LoadGen does not report."""
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool):
        return None
    for name, text in detail_log.PERCENTILES.items():
        if abs(float(text) / 100 - fraction) < 1e-9:
            return name
    return None


def _probe_of(outcome: runner.Outcome, qps: float) -> ServerProbe:
    result = outcome.result
    at = percentile_name(result.effective.get("target_latency_percentile"))
    return ServerProbe(
        target_qps=qps,
        valid=bool(result.valid),
        scheduled_qps=result.scheduled_qps,
        completed_qps=result.samples_per_s,
        latency_s=None if at is None else result.latency_s.get(at),
        reasons=detail_log.invalid_reasons(result),
        elapsed_s=outcome.elapsed_s,
    )


def run_scenario(
    lg: Any,
    request: LoadgenRequest,
    library: SampleLibrary,
    callers: Sequence[runner.Caller],
    *,
    log_dir: Path,
    call_timeout_s: float | None,
    meter: PowerMeter | None = None,
    unmeasured: tuple[str, str] = ("none", "no power meter"),
    workers: tuple[runner.WorkersClock, int] | None = None,
) -> Measured:
    """Run the request and describe it. ``log_dir`` is emptied first: its files are this run's.

    With a ``meter`` the LoadGen run is an energy window (its items: the samples LoadGen counted);
    a peak search is not, its probes being many runs at different rates (``unmeasured`` otherwise
    says why there is no energy figure). ``workers`` is the clock and count of the instance worker
    processes the callers run in, whose CPU time the host cost counts (``runner.run_test``)."""
    if log_dir.exists():
        shutil.rmtree(log_dir, ignore_errors=True)
    calibration = runner.calibrate(callers, library, max_batch=request.max_batch, pad_to=request.pad_to)
    asked = request.run
    rule = rules(lg, asked.mlperf_model, asked.scenario)
    duration_s = asked.min_duration_s or (rule.min_duration_s if asked.mlperf else SHORT_DURATION_S)
    run = runner.expected(asked, calibration, duration_s)

    def one(settings: Any, where: Path, metered: PowerMeter | None = None) -> runner.Outcome:
        return runner.run_test(
            lg,
            settings,
            library,
            callers,
            max_batch=request.max_batch,
            timeout_s=request.timeout_s,
            pad_to=request.pad_to,
            call_timeout_s=call_timeout_s,
            log_dir=where,
            meter=metered,
            workers=workers,
        )

    peak: PeakSearch | None = None
    if request.find_peak:
        percentile = run.latency_percentile or rule.latency_percentile
        peak, outcome = _search_peak(one, run, percentile, request, calibration.capacity_qps, log_dir)
    else:
        outcome = one(run, log_dir, meter)
    power = _power(outcome, meter, unmeasured, searched=request.find_peak)
    part = _loadgen_record(request, run, rule, library, outcome, calibration, len(callers), log_dir, peak)
    return Measured(part, calibration, outcome, power)


def _loadgen_record(
    request: LoadgenRequest,
    run: RunSettings,
    rule: Rules,
    library: SampleLibrary,
    outcome: runner.Outcome,
    calibration: runner.Calibration,
    instances: int,
    log_dir: Path,
    peak: PeakSearch | None,
) -> LoadgenRecord:
    """The record's LoadGen part: LoadGen's figures and settings, MLPerf compliance by ``rule``,
    the batching of the ``instances``, the calibration, the accuracy score and the peak search."""
    result = outcome.result
    score = _score(request, library, outcome)
    compliant, reasons = compliance(
        dict(result.effective), rule, mode=run.mode, valid=result.valid, named=run.mlperf_model is not None
    )
    stats = outcome.stats
    return LoadgenRecord(
        **fields_of(LoadgenFigures, result),
        scenario=run.scenario,
        mode=run.mode,
        settings=dict(result.effective),
        invalid_reasons=detail_log.invalid_reasons(result),
        mlperf_model=run.mlperf_model,
        mlperf_compliant=compliant,
        compliance_reasons=reasons,
        batching=BatchingRecord(
            max_batch=request.max_batch,
            timeout_s=request.timeout_s,
            pad_to=request.pad_to,
            instances=instances,
            batches=stats.batches,
            mean_batch=stats.mean_batch,
            batch_sizes={str(k): v for k, v in stats.batch_sizes.items()},
            instance_batches=stats.instance_batches,
        ),
        log_dir=str(log_dir),
        calibration=calibration.as_json(),
        accuracy=score,
        accuracy_name=request.accuracy_name if score is not None else None,
        peak=peak,
    )


def _search_peak(
    one: Callable[[RunSettings, Path], runner.Outcome],
    run: RunSettings,
    percentile: float,
    request: LoadgenRequest,
    capacity_qps: float,
    log_dir: Path,
) -> tuple[PeakSearch, runner.Outcome]:
    """Search the peak QPS with probes of ``run`` at different rates (``one`` runs a probe, its logs
    in a folder of ``log_dir`` of its own); the search's record and the probe whose figures the
    record shows: the peak's, or the last probe's when none was VALID."""
    outcomes: dict[float, runner.Outcome] = {}
    # Each probe runs long enough for early stopping to pass with a few queries over the bound.
    least = 2 * search.early_stopping_queries(percentile)
    probe_run = replace(run, min_query_count=max(run.min_query_count or 0, least))

    def probe(qps: float) -> ServerProbe:
        where = log_dir / f"probe-{len(outcomes) + 1:02d}-{qps:.6g}-qps"
        outcome = one(replace(probe_run, target_qps=qps), where)
        outcomes[qps] = outcome
        return _probe_of(outcome, qps)

    found = search.find_peak(
        probe,
        capacity_estimate_qps=capacity_qps,
        max_probes=request.max_probes,
        tolerance=request.search_tolerance,
        budget_s=request.search_budget_s,
    )
    if not found.probes:
        raise LoadgenError("pytest-ipu: the peak QPS search ran no probe: its time budget is too short")
    peak = PeakSearch(
        peak_qps=found.peak_qps,
        probes=found.probes,
        max_probes=request.max_probes,
        budget_s=request.search_budget_s,
        tolerance=request.search_tolerance,
        ended=found.ended,
        capacity_estimate_qps=capacity_qps,
        lowest_invalid_qps=found.lowest_invalid_qps,
    )
    shown_qps = found.peak_qps if found.peak_qps is not None else found.probes[-1].target_qps
    return peak, outcomes[shown_qps]


def _score(request: LoadgenRequest, library: SampleLibrary, outcome: runner.Outcome) -> float | None:
    """The accuracy score of the run's outputs, where the request scores them; every sample must
    have been answered, and the score must be a number."""
    if request.accuracy is None:
        return None
    missing = library.count - len(outcome.outputs)
    if missing:
        raise LoadgenError(
            f"pytest-ipu: the accuracy run answered {len(outcome.outputs)} of {library.count} samples; "
            "every sample needs an output to be scored"
        )
    value = request.accuracy(outcome.outputs)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LoadgenError(
            f"pytest-ipu: ipu_loadgen(accuracy=...) returned {value!r}; it must return the score as a number"
        )
    return float(value)


def _power(
    outcome: runner.Outcome, meter: PowerMeter | None, unmeasured: tuple[str, str], *, searched: bool
) -> PowerRecord:
    """The energy of the run's window over the samples LoadGen counted, or why there is none."""
    if searched:
        return not_measured(
            unmeasured[0] if meter is None else meter.source.name,
            "a peak QPS search is many runs at different rates: measure a Server run at the peak for energy",
        )
    if meter is None or outcome.energy is None:
        return not_measured(*unmeasured)
    trace, start_ns, end_ns = outcome.energy
    items = outcome.result.query_count * outcome.result.samples_per_query
    # LoadGen decides the run's length; nothing about it was fixed by rounds that could be raised.
    return meter.result(trace, start_ns, end_ns, items, rounds_fixed=True)
