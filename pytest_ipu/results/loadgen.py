"""The record's ``loadgen`` part: one MLPerf LoadGen run (or peak Server QPS search) as measured.

Written under ``extra_info["ipu"]["loadgen"]`` only by LoadGen benchmarks (``ipu_loadgen``), absent
from every other record; docs/json-schema.md lists its keys. Latencies are LoadGen's own, in
seconds: from a query's scheduled issue to the answer of its last sample.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from pytest_ipu.results.codec import Coded
from pytest_ipu.results.codec import meta

#: LoadGen's scenarios.
SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")


@dataclass(frozen=True)
class BatchingRecord(Coded):
    """How the batching system under test ran the queries' samples."""

    #: The most samples in one call.
    max_batch: int
    #: How long a batch waited to fill after its first sample was queued, seconds.
    timeout_s: float
    #: The batch size a shorter batch was padded to (a model compiled for one size), or `None`.
    pad_to: int | None
    #: Instances of the compiled model the batches were spread over.
    instances: int
    #: Batches run, all instances together.
    batches: int
    #: Samples per batch on average (`None` when no batch ran).
    mean_batch: float | None
    #: How many batches had each size (the size, as a string, to its count).
    batch_sizes: Mapping[str, int]
    #: Batches run by each instance, in instance order.
    instance_batches: tuple[int, ...] = field(metadata=meta(old=()))


@dataclass(frozen=True)
class ServerProbe(Coded):
    """One Server run of the peak QPS search, with LoadGen's verdict on it."""

    #: The arrival rate asked for (LoadGen's `server_target_qps`), queries per second.
    target_qps: float
    #: LoadGen's verdict.
    valid: bool
    #: The rate LoadGen scheduled, queries per second.
    scheduled_qps: float | None
    #: Samples completed per second.
    completed_qps: float | None
    #: The latency at the target percentile, seconds.
    latency_s: float | None
    #: Why it was INVALID (empty when VALID).
    reasons: tuple[str, ...] = field(metadata=meta(old=()))
    #: The probe's wall time, LoadGen's set-up included, seconds.
    elapsed_s: float


@dataclass(frozen=True)
class PeakSearch(Coded):
    """The search for the highest Server QPS that LoadGen calls VALID under the latency bound."""

    #: The highest target QPS a probe found VALID; `None` when none was.
    peak_qps: float | None
    #: Every probe, in the order run.
    probes: tuple[ServerProbe, ...] = field(metadata=meta(old=()))
    #: The most probes the search could run.
    max_probes: int
    #: Its time budget, seconds (`None`: none).
    budget_s: float | None
    #: The search stops when the lowest INVALID QPS is within this fraction above the peak.
    tolerance: float
    #: Why it stopped: `converged`, `probes` (the most probes ran), `budget` (time ran out) or
    #: `no-valid` (not even the lowest probe was VALID).
    ended: str = field(metadata=meta(choices=("converged", "probes", "budget", "no-valid")))
    #: The starting point: the capacity the calibration estimated (an estimate, not a result), QPS.
    capacity_estimate_qps: float
    #: The lowest target QPS a probe found INVALID, when one did.
    lowest_invalid_qps: float | None


@dataclass(frozen=True)
class LoadgenFigures(Coded):
    """LoadGen's verdict and figures for one run, as its detail log gives them, declared once: the
    log's reading (``loadgen.detail_log.LogResult``) and the record (``LoadgenRecord``) extend it."""

    #: LoadGen's version (`6.0.17 @ d6147c7eb7`).
    version: str
    #: LoadGen's verdict: true VALID, false INVALID, `None` in accuracy mode.
    valid: bool | None
    #: Each condition LoadGen checked (`min_duration_met`, `min_queries_met`, `perf_constraints_met`,
    #: `early_stopping_met`).
    checks: Mapping[str, bool]
    #: LoadGen's early-stopping text.
    early_stopping: str = field(metadata=meta(old=""))
    #: SingleStream / MultiStream: LoadGen's early-stopping estimate of the target percentile, seconds.
    early_stopping_latency_s: float | None
    #: Queries completed (accuracy mode: the queries LoadGen generated, all of which it issues).
    query_count: int
    #: Samples per query.
    samples_per_query: int
    #: Samples completed per second (Offline's result; Server's completed rate; SingleStream's query
    #: rate); `None` for MultiStream, whose result is a latency.
    samples_per_s: float | None
    #: Server: the rate LoadGen scheduled, queries per second.
    scheduled_qps: float | None
    #: LoadGen's query latencies, seconds: `min`, `mean`, `max`, `p50`, `p90`, `p95`, `p97`, `p99`, `p99.9`.
    latency_s: Mapping[str, float] = field(metadata=meta(old={}))
    #: Texts LoadGen logged as errors (written last in a record's JSON).
    errors: tuple[str, ...] = field(metadata=meta(old=(), after="peak"))


@dataclass(frozen=True)
class LoadgenRecord(LoadgenFigures):
    """One LoadGen benchmark: its scenario, LoadGen's verdict and figures, and MLPerf compliance.

    With a peak search the figures are those of the peak's probe (the highest VALID one), or of the
    last probe when none was VALID; ``peak`` holds every probe.
    """

    #: `SingleStream`, `MultiStream`, `Server` or `Offline`.
    scenario: str = field(metadata=meta(choices=SCENARIOS, after=""))
    #: `performance` or `accuracy`.
    mode: str = field(metadata=meta(choices=("performance", "accuracy"), after="scenario"))
    #: The effective settings LoadGen logged (`min_duration_ms`, `target_qps`, `target_latency_ns`...).
    settings: Mapping[str, Any] = field(metadata=meta(old={}, after="version"))
    #: Why INVALID, one line per failed check then LoadGen's advice; empty when VALID.
    invalid_reasons: tuple[str, ...] = field(metadata=meta(old=(), after="valid"))
    #: The MLPerf benchmark whose rules applied (`resnet50`), or `None` (the general rules).
    mlperf_model: str | None
    #: True only when the settings and the verdict meet MLPerf's rules (still not a submission).
    mlperf_compliant: bool
    #: Every reason the run is not compliant.
    compliance_reasons: tuple[str, ...] = field(metadata=meta(old=()))
    #: How the samples were batched.
    batching: BatchingRecord
    #: Where LoadGen's own log files were kept (`mlperf_log_detail.txt`, `mlperf_log_summary.txt`...).
    log_dir: str
    #: The calibration's estimates, untimed by LoadGen (`batch_1_s`, `batch_max_s`,
    #: `capacity_estimate_qps`): they sized LoadGen's schedule, and are estimates, not results.
    calibration: Mapping[str, float] = field(default_factory=dict)
    #: Accuracy mode: the score the benchmark's `accuracy` callable gave the outputs.
    accuracy: float | None = field(default=None, metadata=meta(number="signed"))
    #: The score's name (`accuracy_name`, such as `top1`), with `accuracy`.
    accuracy_name: str | None = None
    #: The peak Server QPS search, when one ran.
    peak: PeakSearch | None = None

    #: Written for readers of the file (gates read it from the typed record), after the key named.
    JSON_DERIVED = (("server_qps", "scheduled_qps"),)

    @property
    def server_qps(self) -> float | None:
        """The Server QPS this benchmark can claim: the peak search's result, or a VALID Server run's
        scheduled rate; ``None`` otherwise (not Server, INVALID, or no VALID probe)."""
        if self.scenario != "Server":
            return None
        if self.peak is not None:
            return self.peak.peak_qps
        return self.scheduled_qps if self.valid else None

    def latency(self, name: str) -> float | None:
        """A latency figure (``p99``, ``mean``...), seconds, or ``None`` when LoadGen gave none."""
        return self.latency_s.get(name)

    def why_no_server_qps(self) -> str:
        """Why ``server_qps`` is ``None``, as a gate's message says it."""
        if self.scenario != "Server":
            article = "an" if self.scenario == "Offline" else "a"
            return f"{article} {self.scenario} run has no Server QPS (loadgen.server_qps is for Server runs)"
        if self.peak is not None:
            if not self.peak.probes:
                return "the peak search ran no probe"
            lowest = min(p.target_qps for p in self.peak.probes)
            return (
                "the peak search found no QPS that LoadGen calls VALID "
                f"({len(self.peak.probes)} probe(s), the lowest at {lowest:g} QPS)"
            )
        return "LoadGen called the Server run INVALID: " + "; ".join(self.invalid_reasons)
