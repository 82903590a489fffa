"""An ``ipu_loadgen`` call's arguments, checked: each bad one is a one-line ``ValueError`` naming the
argument, its value and the fix, raised before anything runs (a value alone: ``values.BadValue``)."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from typing import Literal
from typing import TypeVar

from pytest_ipu.loadgen.settings import SCENARIOS
from pytest_ipu.loadgen.settings import RunSettings
from pytest_ipu.loadgen.settings import scenario_name
from pytest_ipu.results import values

_T = TypeVar("_T")

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


#: The voice of every refusal: ``ipu_loadgen(max_batch=0): pass a whole number >= 1``.
_CALL = values.Source("ipu_loadgen", call=True)


def build(keywords: Mapping[str, object]) -> LoadgenRequest:
    """The checked request from ``ipu_loadgen``'s keyword arguments, each read by name (their one
    list, with their defaults, is the fixture's signature, ``Loadgen.__call__``); ``ValueError``
    with one line for the first bad argument."""
    k = keywords
    find_peak = k["find_peak"]
    name, mode = _scenario(k)
    target_qps = _or_none(_CALL.number, k, "target_qps", positive=True, note=" (queries per second)")
    if name == "Server" and mode == "performance" and not find_peak and target_qps is None:
        raise ValueError(
            "ipu_loadgen(scenario='Server'): pass target_qps=... (the arrival rate), or find_peak=True to "
            "search for the highest VALID one"
        )
    percentile = _or_none(_CALL.fraction, k, "latency_percentile", "0.99")
    per_query = _or_none(_CALL.whole, k, "samples_per_query", 1)
    if per_query is not None and name != "MultiStream":
        raise ValueError(
            f"ipu_loadgen(samples_per_query={per_query}): only MultiStream has queries of several samples"
        )
    mlperf_model = k["mlperf_model"]
    if mlperf_model is not None and not (isinstance(mlperf_model, str) and mlperf_model.strip()):
        raise _CALL.refuse(mlperf_model, "mlperf_model", "an MLPerf benchmark's name, e.g. 'resnet50'")
    accuracy, accuracy_name = _accuracy(k["accuracy"], k["accuracy_name"], mode)
    run = RunSettings(
        scenario=name,  # type: ignore[arg-type]  # checked by scenario_name
        mode=mode,
        mlperf_model=mlperf_model.strip() if isinstance(mlperf_model, str) else None,
        mlperf=bool(k["mlperf"]),
        min_duration_s=_or_none(_CALL.seconds, k, "min_duration"),
        min_query_count=_or_none(_CALL.whole, k, "min_queries", 1),
        max_duration_s=_or_none(_CALL.seconds, k, "max_duration"),
        target_qps=target_qps,
        target_latency_s=_or_none(_CALL.seconds, k, "target_latency"),
        latency_percentile=percentile,
        samples_per_query=per_query,
        performance_sample_count=_or_none(_CALL.whole, k, "performance_samples", 1),
    )
    default_batch = (per_query or 8) if name == "MultiStream" else DEFAULT_MAX_BATCH[name]
    batch = default_batch if k["max_batch"] is None else _CALL.whole(k["max_batch"], "max_batch", 1)
    padded = _or_none(_CALL.whole, k, "pad_to", 1)
    if padded is not None and padded < batch:
        raise ValueError(
            f"ipu_loadgen(pad_to={padded}): a model compiled for batches of {padded} cannot run "
            f"max_batch={batch}; pass max_batch={padded} or less"
        )
    return LoadgenRequest(
        run=run,
        max_batch=batch,
        timeout_s=_CALL.seconds(k["batch_timeout"], "batch_timeout", zero=True),
        pad_to=padded,
        find_peak=bool(find_peak),
        max_probes=_CALL.whole(k["max_probes"], "max_probes", 1),
        search_budget_s=_or_none(_CALL.seconds, k, "search_budget"),
        search_tolerance=_CALL.fraction(k["search_tolerance"], "search_tolerance", "0.05"),
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
        raise _CALL.refuse(mode, "mode", "'performance' or 'accuracy'")
    for flag in ("find_peak", "mlperf"):
        _CALL.flag(k[flag], flag)
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
        raise _CALL.refuse(accuracy, "accuracy", "a callable accuracy(outputs) -> float")
    if accuracy is not None and mode != "accuracy":
        raise ValueError(
            "ipu_loadgen(accuracy=...): scoring needs mode='accuracy', which runs every sample once"
        )
    if not isinstance(accuracy_name, str) or not accuracy_name:
        raise _CALL.refuse(accuracy_name, "accuracy_name", "the score's name, e.g. 'top1'")
    return accuracy, accuracy_name


def _or_none(
    read: Callable[..., _T], keywords: Mapping[str, object], name: str, *args: Any, **kw: Any
) -> _T | None:
    """The keyword ``name`` read by ``read`` (a ``Source`` reader), or ``None`` when it is."""
    value = keywords[name]
    return None if value is None else read(value, name, *args, **kw)


__all__ = ["SCENARIOS", "LoadgenRequest", "build"]
