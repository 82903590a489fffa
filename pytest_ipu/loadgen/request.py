"""An ``ipu_loadgen`` call's arguments, checked: each bad one is a one-line ``ValueError`` naming the
argument, its value and the fix, raised before anything runs."""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

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


def build(keywords: Mapping[str, object]) -> LoadgenRequest:
    """The checked request from ``ipu_loadgen``'s keyword arguments, each read by name (their one
    list, with their defaults, is the fixture's signature, ``Loadgen.__call__``); ``ValueError``
    with one line for the first bad argument."""
    k = keywords
    find_peak = k["find_peak"]
    name, mode = _scenario(k)
    target_qps = None if k["target_qps"] is None else _rate("target_qps", k["target_qps"])
    if name == "Server" and mode == "performance" and not find_peak and target_qps is None:
        raise ValueError(
            "ipu_loadgen(scenario='Server'): pass target_qps=... (the arrival rate), or find_peak=True to "
            "search for the highest VALID one"
        )
    percentile = (
        None
        if k["latency_percentile"] is None
        else _fraction("latency_percentile", k["latency_percentile"], "0.99")
    )
    per_query = _whole_or_none(k, "samples_per_query")
    if per_query is not None and name != "MultiStream":
        raise ValueError(
            f"ipu_loadgen(samples_per_query={per_query}): only MultiStream has queries of several samples"
        )
    mlperf_model = k["mlperf_model"]
    if mlperf_model is not None and not (isinstance(mlperf_model, str) and mlperf_model.strip()):
        raise ValueError(
            f"ipu_loadgen(mlperf_model={mlperf_model!r}): name an MLPerf benchmark, e.g. 'resnet50'"
        )
    accuracy, accuracy_name = _accuracy(k["accuracy"], k["accuracy_name"], mode)
    run = RunSettings(
        scenario=name,  # type: ignore[arg-type]  # checked by scenario_name
        mode=mode,
        mlperf_model=mlperf_model.strip() if isinstance(mlperf_model, str) else None,
        mlperf=bool(k["mlperf"]),
        min_duration_s=_seconds_or_none(k, "min_duration"),
        min_query_count=_whole_or_none(k, "min_queries"),
        max_duration_s=_seconds_or_none(k, "max_duration"),
        target_qps=target_qps,
        target_latency_s=_seconds_or_none(k, "target_latency"),
        latency_percentile=percentile,
        samples_per_query=per_query,
        performance_sample_count=_whole_or_none(k, "performance_samples"),
    )
    default_batch = (per_query or 8) if name == "MultiStream" else DEFAULT_MAX_BATCH[name]
    batch = default_batch if k["max_batch"] is None else _whole("max_batch", k["max_batch"])
    padded = _whole_or_none(k, "pad_to")
    if padded is not None and padded < batch:
        raise ValueError(
            f"ipu_loadgen(pad_to={padded}): a model compiled for batches of {padded} cannot run "
            f"max_batch={batch}; pass max_batch={padded} or less"
        )
    return LoadgenRequest(
        run=run,
        max_batch=batch,
        timeout_s=_seconds("batch_timeout", k["batch_timeout"], zero=True),
        pad_to=padded,
        find_peak=bool(find_peak),
        max_probes=_whole("max_probes", k["max_probes"]),
        search_budget_s=_seconds_or_none(k, "search_budget"),
        search_tolerance=_fraction("search_tolerance", k["search_tolerance"], "0.05"),
        accuracy=accuracy,
        accuracy_name=accuracy_name,
    )


def _scenario(k: Mapping[str, object]) -> tuple[str, Literal["performance", "accuracy"]]:
    """The scenario's name and the mode, once the scenario, the mode, the flags and the peak search
    agree."""
    scenario, mode, find_peak = k["scenario"], k["mode"], k["find_peak"]
    try:
        name = scenario_name(scenario)
    except ValueError as exc:
        raise ValueError(f"ipu_loadgen(scenario={scenario!r}): {exc}") from None
    if mode not in ("performance", "accuracy"):
        raise ValueError(f"ipu_loadgen(mode={mode!r}): choose 'performance' or 'accuracy'")
    for flag in ("find_peak", "mlperf"):
        if not isinstance(k[flag], bool):
            raise ValueError(f"ipu_loadgen({flag}={k[flag]!r}): pass True or False")
    if find_peak and name != "Server":
        raise ValueError(f"ipu_loadgen(find_peak=True): the peak QPS search is a Server search, not {name}")
    if find_peak and mode != "performance":
        raise ValueError("ipu_loadgen(find_peak=True): the peak QPS search runs in performance mode")
    return name, mode


def _accuracy(
    accuracy: object, accuracy_name: object, mode: str
) -> tuple[Callable[[dict[int, object]], float] | None, str]:
    """The accuracy score's callable and its name, checked with the mode it needs."""
    if accuracy is not None and not callable(accuracy):
        raise ValueError(f"ipu_loadgen(accuracy={accuracy!r}): pass a callable accuracy(outputs) -> float")
    if accuracy is not None and mode != "accuracy":
        raise ValueError(
            "ipu_loadgen(accuracy=...): scoring needs mode='accuracy', which runs every sample once"
        )
    if not isinstance(accuracy_name, str) or not accuracy_name:
        raise ValueError(f"ipu_loadgen(accuracy_name={accuracy_name!r}): pass the score's name, e.g. 'top1'")
    return accuracy, accuracy_name


def _whole_or_none(keywords: Mapping[str, object], name: str) -> int | None:
    value = keywords[name]
    return None if value is None else _whole(name, value)


def _seconds_or_none(keywords: Mapping[str, object], name: str) -> float | None:
    value = keywords[name]
    return None if value is None else _seconds(name, value)


def _fraction(name: str, value: object, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"ipu_loadgen({name}={value!r}): pass a fraction in (0, 1), e.g. {example}")
    return float(value)


__all__ = ["SCENARIOS", "LoadgenRequest", "build"]
