"""An ``ipu_loadgen`` call's arguments, checked: each bad one is a one-line ``ValueError`` naming the
argument, its value and the fix, raised before anything runs."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from pytest_ipu.loadgen.search import MAX_PROBES
from pytest_ipu.loadgen.search import TOLERANCE
from pytest_ipu.loadgen.settings import SCENARIOS
from pytest_ipu.loadgen.settings import RunSettings
from pytest_ipu.loadgen.settings import scenario_name
from pytest_ipu.measure import units

#: The batch a scenario's samples are gathered into when ``max_batch`` is not given: SingleStream
#: answers each sample alone; MultiStream a query's samples together; Server and Offline take up
#: to 8 (the middle of the C2 study's batch sizes).
DEFAULT_MAX_BATCH = {"SingleStream": 1, "Server": 8, "Offline": 8}


@dataclass(frozen=True)
class LoadgenRequest:
    """What to run: LoadGen's settings, how to batch, whether to search, how to score accuracy."""

    run: RunSettings
    max_batch: int
    timeout_s: float
    pad_to: int | None
    find_peak: bool
    max_probes: int
    search_budget_s: float | None
    search_tolerance: float
    accuracy: Callable[[dict[int, object]], float] | None
    accuracy_name: str


def _seconds(name: str, value: object, *, zero: bool = False) -> float:
    """A duration given as seconds (a number) or as text with a unit (``"15 ms"``)."""
    if isinstance(value, str):
        try:
            seconds = units.parse(value, "s")
        except units.UnitError as exc:
            raise ValueError(f"ipu_loadgen({name}={value!r}): {exc}") from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ValueError(f"ipu_loadgen({name}={value!r}): pass seconds as a number or text such as '15 ms'")
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        least = ">= 0" if zero else "> 0"
        raise ValueError(f"ipu_loadgen({name}={value!r}): a duration must be finite and {least}")
    return seconds


def _whole(name: str, value: object, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"ipu_loadgen({name}={value!r}): {name} must be a whole number >= {least}")
    return value


def _rate(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and value > 0)
    ):
        raise ValueError(
            f"ipu_loadgen({name}={value!r}): {name} must be a finite number > 0 (queries per second)"
        )
    return float(value)


def build(
    *,
    scenario: object = "SingleStream",
    mode: object = "performance",
    target_qps: object = None,
    target_latency: object = None,
    latency_percentile: object = None,
    samples_per_query: object = None,
    min_duration: object = None,
    min_queries: object = None,
    max_duration: object = None,
    max_batch: object = None,
    batch_timeout: object = 0.0,
    pad_to: object = None,
    find_peak: object = False,
    max_probes: object = MAX_PROBES,
    search_budget: object = None,
    search_tolerance: object = TOLERANCE,
    mlperf: object = False,
    mlperf_model: object = None,
    accuracy: object = None,
    accuracy_name: object = "accuracy",
    performance_samples: object = None,
) -> LoadgenRequest:
    """The checked request from ``ipu_loadgen``'s keyword arguments (their defaults are these);
    ``ValueError`` with one line for the first bad argument."""
    try:
        name = scenario_name(scenario)
    except ValueError as exc:
        raise ValueError(f"ipu_loadgen(scenario={scenario!r}): {exc}") from None
    if mode not in ("performance", "accuracy"):
        raise ValueError(f"ipu_loadgen(mode={mode!r}): choose 'performance' or 'accuracy'")
    for flag, value in (("find_peak", find_peak), ("mlperf", mlperf)):
        if not isinstance(value, bool):
            raise ValueError(f"ipu_loadgen({flag}={value!r}): pass True or False")
    if find_peak and name != "Server":
        raise ValueError(f"ipu_loadgen(find_peak=True): the peak QPS search is a Server search, not {name}")
    if find_peak and mode != "performance":
        raise ValueError("ipu_loadgen(find_peak=True): the peak QPS search runs in performance mode")
    if target_qps is not None:
        target_qps = _rate("target_qps", target_qps)
    if name == "Server" and mode == "performance" and not find_peak and target_qps is None:
        raise ValueError(
            "ipu_loadgen(scenario='Server'): pass target_qps=... (the arrival rate), or find_peak=True to "
            "search for the highest VALID one"
        )
    percentile = None
    if latency_percentile is not None:
        if (
            isinstance(latency_percentile, bool)
            or not isinstance(latency_percentile, (int, float))
            or not 0 < latency_percentile < 1
        ):
            raise ValueError(
                f"ipu_loadgen(latency_percentile={latency_percentile!r}): pass a fraction in (0, 1), "
                "e.g. 0.99"
            )
        percentile = float(latency_percentile)
    per_query = None if samples_per_query is None else _whole("samples_per_query", samples_per_query)
    if per_query is not None and name != "MultiStream":
        raise ValueError(
            f"ipu_loadgen(samples_per_query={per_query}): only MultiStream has queries of several samples"
        )
    if mlperf_model is not None and not (isinstance(mlperf_model, str) and mlperf_model.strip()):
        raise ValueError(
            f"ipu_loadgen(mlperf_model={mlperf_model!r}): name an MLPerf benchmark, e.g. 'resnet50'"
        )
    if accuracy is not None and not callable(accuracy):
        raise ValueError(f"ipu_loadgen(accuracy={accuracy!r}): pass a callable accuracy(outputs) -> float")
    if accuracy is not None and mode != "accuracy":
        raise ValueError(
            "ipu_loadgen(accuracy=...): scoring needs mode='accuracy', which runs every sample once"
        )
    if not isinstance(accuracy_name, str) or not accuracy_name:
        raise ValueError(f"ipu_loadgen(accuracy_name={accuracy_name!r}): pass the score's name, e.g. 'top1'")
    run = RunSettings(
        scenario=name,  # type: ignore[arg-type]  # checked by scenario_name
        mode=mode,
        mlperf_model=mlperf_model.strip() if isinstance(mlperf_model, str) else None,
        mlperf=bool(mlperf),
        min_duration_s=None if min_duration is None else _seconds("min_duration", min_duration),
        min_query_count=None if min_queries is None else _whole("min_queries", min_queries),
        max_duration_s=None if max_duration is None else _seconds("max_duration", max_duration),
        target_qps=target_qps,
        target_latency_s=None if target_latency is None else _seconds("target_latency", target_latency),
        latency_percentile=percentile,
        samples_per_query=per_query,
        performance_sample_count=(
            None if performance_samples is None else _whole("performance_samples", performance_samples)
        ),
    )
    default_batch = (per_query or 8) if name == "MultiStream" else DEFAULT_MAX_BATCH[name]
    batch = default_batch if max_batch is None else _whole("max_batch", max_batch)
    padded = None if pad_to is None else _whole("pad_to", pad_to)
    if padded is not None and padded < batch:
        raise ValueError(
            f"ipu_loadgen(pad_to={padded}): a model compiled for batches of {padded} cannot run "
            f"max_batch={batch}; pass max_batch={padded} or less"
        )
    return LoadgenRequest(
        run=run,
        max_batch=batch,
        timeout_s=_seconds("batch_timeout", batch_timeout, zero=True),
        pad_to=padded,
        find_peak=bool(find_peak),
        max_probes=_whole("max_probes", max_probes),
        search_budget_s=None if search_budget is None else _seconds("search_budget", search_budget),
        search_tolerance=_fraction("search_tolerance", search_tolerance),
        accuracy=accuracy,
        accuracy_name=accuracy_name,
    )


def _fraction(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"ipu_loadgen({name}={value!r}): pass a fraction in (0, 1), e.g. 0.05")
    return float(value)


__all__ = ["SCENARIOS", "LoadgenRequest", "build"]
