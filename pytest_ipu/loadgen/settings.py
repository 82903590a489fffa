"""A LoadGen run's settings, LoadGen's ``TestSettings`` made from them, and MLPerf's rules.

Every run starts from MLPerf's own configuration, the ``mlperf.conf`` that LoadGen carries inside
it (``TestSettings.FromConfig('', model, scenario, 0)``): its random seeds, latency percentiles,
Server latency bound and MultiStream query size for the named benchmark (``mlperf_model``, such as
``resnet50``; another name gets MLPerf's general rules). Its minimum durations (600 s) and query
counts are kept only when asked (``mlperf=True``); otherwise a run is short (``SHORT_DURATION_S``)
and its record says it is not compliant. Whatever the caller passes overrides both.

``rules`` reads the same configuration into ``Rules``, and ``compliance`` judges a run's effective
settings and LoadGen's verdict against them: the record's ``mlperf_compliant`` and its reasons.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Literal

#: LoadGen's scenarios, as it names them.
SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
Scenario = Literal["SingleStream", "MultiStream", "Server", "Offline"]
#: LoadGen's test modes: performance (timed) or accuracy (every sample once, outputs logged).
Mode = Literal["performance", "accuracy"]
#: The minimum duration of a run that does not ask for MLPerf's (``mlperf=False``), seconds.
SHORT_DURATION_S = 2.0
#: The model name under which ``mlperf.conf``'s general rules (its ``*`` lines) apply alone.
GENERAL_MODEL = "pytest-ipu-unnamed"


@dataclass(frozen=True)
class RunSettings:
    """What a LoadGen run was asked for; ``None`` leaves a value to MLPerf's configuration (or, for
    the expected latency and QPS, to the calibration)."""

    #: SingleStream, MultiStream, Server or Offline.
    scenario: Scenario
    #: `performance` or `accuracy`.
    mode: Mode = "performance"
    #: The MLPerf benchmark whose rules apply (`resnet50`, `bert`...); `None`: MLPerf's general rules.
    mlperf_model: str | None = None
    #: True: MLPerf's minimum durations and query counts (600 s and more); false: short runs.
    mlperf: bool = False
    #: Minimum run time, seconds.
    min_duration_s: float | None = None
    #: Minimum query count (Offline: minimum sample count).
    min_query_count: int | None = None
    #: Maximum run time, seconds (`None`: no limit).
    max_duration_s: float | None = None
    #: Server: the arrival rate, queries per second. Offline: the expected samples per second.
    target_qps: float | None = None
    #: Server: the latency bound, seconds.
    target_latency_s: float | None = None
    #: The latency percentile the result is judged at (0.9, 0.99...).
    latency_percentile: float | None = None
    #: MultiStream: samples per query.
    samples_per_query: int | None = None
    #: SingleStream / MultiStream: the expected query latency, seconds (sizes LoadGen's schedule).
    expected_latency_s: float | None = None
    #: How many samples LoadGen loads for the performance run.
    performance_sample_count: int | None = None


@dataclass(frozen=True)
class Rules:
    """MLPerf's rules for one benchmark and scenario, as LoadGen's ``mlperf.conf`` states them."""

    #: The benchmark judged against (`GENERAL_MODEL` when none was named).
    model: str
    scenario: str
    min_duration_s: float
    min_query_count: int
    #: Server's latency bound, seconds.
    target_latency_s: float
    #: The latency percentile of the scenario.
    latency_percentile: float
    #: MultiStream's samples per query.
    samples_per_query: int
    #: Samples to load for the performance run (0: no rule).
    performance_sample_count: int


def _configured(lg: Any, model: str, scenario: str, mode: str) -> Any:
    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, scenario)
    settings.mode = lg.TestMode.AccuracyOnly if mode == "accuracy" else lg.TestMode.PerformanceOnly
    # conf_type 0: LoadGen's built-in mlperf.conf only, no user.conf (1 reads it once per process).
    status = settings.FromConfig("", model, scenario, 0)
    if status != 0:
        raise RuntimeError(f"LoadGen could not read its mlperf.conf for {model} {scenario} (status {status})")
    return settings


def rules(lg: Any, model: str | None, scenario: str) -> Rules:
    """MLPerf's rules for ``model`` (``None``: the general rules) in ``scenario``."""
    name = model or GENERAL_MODEL
    s = _configured(lg, name, scenario, "performance")
    return Rules(
        model=name,
        scenario=scenario,
        min_duration_s=s.min_duration_ms / 1000,
        min_query_count=int(s.min_query_count),
        target_latency_s=s.server_target_latency_ns / 1e9,
        latency_percentile=_percentile_of(s, scenario),
        samples_per_query=int(s.multi_stream_samples_per_query),
        performance_sample_count=int(s.performance_sample_count_override),
    )


def _percentile_of(s: Any, scenario: str) -> float:
    if scenario == "SingleStream":
        return float(s.single_stream_target_latency_percentile)
    if scenario == "MultiStream":
        return float(s.multi_stream_target_latency_percentile)
    return float(s.server_target_latency_percentile)


def make_test_settings(lg: Any, run: RunSettings, *, samples: int) -> Any:
    """LoadGen's ``TestSettings`` for ``run`` over a library of ``samples`` samples."""
    s = _configured(lg, run.mlperf_model or GENERAL_MODEL, run.scenario, run.mode)
    if not run.mlperf:
        s.min_duration_ms = round(SHORT_DURATION_S * 1000)
        # Short runs stop at the duration: one query (Offline: one sample) is enough to start.
        s.min_query_count = 1
    if run.min_duration_s is not None:
        s.min_duration_ms = round(run.min_duration_s * 1000)
    if run.min_query_count is not None:
        s.min_query_count = run.min_query_count
    if run.max_duration_s is not None:
        s.max_duration_ms = round(run.max_duration_s * 1000)
    if run.target_qps is not None:
        if run.scenario == "Offline":
            s.offline_expected_qps = run.target_qps
        else:
            s.server_target_qps = run.target_qps
    if run.target_latency_s is not None:
        s.server_target_latency_ns = round(run.target_latency_s * 1e9)
    if run.latency_percentile is not None:
        s.single_stream_target_latency_percentile = run.latency_percentile
        s.multi_stream_target_latency_percentile = run.latency_percentile
        s.server_target_latency_percentile = run.latency_percentile
    if run.samples_per_query is not None:
        s.multi_stream_samples_per_query = run.samples_per_query
    if run.expected_latency_s is not None:
        ns = max(1, round(run.expected_latency_s * 1e9))
        s.single_stream_expected_latency_ns = ns
        s.multi_stream_expected_latency_ns = ns
    # LoadGen loads this many samples for the performance run; a library holds no more.
    wanted = run.performance_sample_count or s.performance_sample_count_override or samples
    s.performance_sample_count_override = min(int(wanted), samples)
    return s


def compliance(
    effective: dict[str, Any], rule: Rules, *, mode: str, valid: bool | None, named: bool
) -> tuple[bool, tuple[str, ...]]:
    """Whether a run meets MLPerf's rules, and every reason it does not.

    ``effective`` is the run's effective settings as LoadGen logged them (``detail_log``); ``named``
    says whether an MLPerf benchmark was named (``mlperf_model``). A compliant run is only that: a
    submission also needs the accuracy run, MLPerf's compliance tests and its review.
    """
    reasons: list[str] = []
    if not named:
        reasons.append("no MLPerf benchmark named (mlperf_model=...): judged by MLPerf's general rules")
    if mode != "performance":
        reasons.append("an accuracy run has no performance result; MLPerf judges the performance run")
    elif valid is not True:
        reasons.append("LoadGen called the run INVALID")
    duration_s = effective.get("min_duration_ms", 0) / 1000
    if duration_s < rule.min_duration_s:
        reasons.append(f"minimum duration {duration_s:g} s < MLPerf's {rule.min_duration_s:g} s")
    queries = effective.get("min_query_count", 0)
    if queries < rule.min_query_count:
        reasons.append(f"minimum query count {queries} < MLPerf's {rule.min_query_count}")
    if rule.scenario == "Server":
        bound = effective.get("target_latency_ns", 0) / 1e9
        if bound > rule.target_latency_s * (1 + 1e-9) or bound <= 0:
            reasons.append(f"latency bound {_ms(bound)} > MLPerf's {_ms(rule.target_latency_s)}")
    if rule.scenario in ("SingleStream", "MultiStream", "Server"):
        percentile = effective.get("target_latency_percentile", 0.0)
        if percentile + 1e-12 < rule.latency_percentile:
            reasons.append(
                f"latency percentile {percentile:g} < MLPerf's {rule.latency_percentile:g} "
                f"for {rule.scenario}"
            )
    if rule.scenario == "MultiStream":
        per_query = effective.get("samples_per_query", 0)
        if per_query != rule.samples_per_query:
            reasons.append(
                f"{per_query} samples per query, MLPerf's MultiStream has {rule.samples_per_query}"
            )
    loaded = effective.get("performance_sample_count", 0)
    if rule.performance_sample_count and loaded < rule.performance_sample_count:
        reasons.append(
            f"performance sample count {loaded} < MLPerf's {rule.performance_sample_count} for {rule.model}"
        )
    return not reasons, tuple(reasons)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:g} ms"


def scenario_name(value: object, names: Sequence[str] = SCENARIOS) -> str:
    """``value`` as one of LoadGen's scenario names, matched without regard to case; raises
    ``ValueError`` naming the choices."""
    if isinstance(value, str):
        for name in names:
            if value.lower().replace("_", "").replace("-", "") == name.lower():
                return name
    raise ValueError(f"{value!r} is not a LoadGen scenario; choose one of {', '.join(names)}")
