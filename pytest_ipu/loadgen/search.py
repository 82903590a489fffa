"""The peak Server QPS: the highest arrival rate that LoadGen calls VALID under the latency bound.

A bisection over ``server_target_qps``, one full LoadGen Server run (a probe) per step, every probe's
verdict kept, within ``max_probes`` and the time ``budget_s``; not LoadGen's own
``FindPeakPerformance``, which runs inside one LoadGen call with no bound on its steps or time and no
verdict per step. The first probe is at half the calibration's capacity estimate, an upper bound of
the throughput (the peak usually lies above half of it).

Documented in docs/loadgen.md (section "The peak Server QPS search").
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from pytest_ipu.results.loadgen import ServerProbe

#: The first probe's share of the capacity estimate.
START_SHARE = 0.5
#: The early-stopping confidence LoadGen uses (early_stopping.cc).
EARLY_STOPPING_CONFIDENCE = 0.99


def early_stopping_queries(percentile: float) -> int:
    """The fewest queries with which LoadGen's early stopping can call a run VALID at ``percentile``
    when no query is over the bound: ``n`` with ``percentile ** n <= 1 - confidence`` (459 at the
    99th percentile). A query over the bound raises it."""
    if not 0 < percentile < 1:
        raise ValueError(f"a percentile must be a fraction in (0, 1), got {percentile!r}")
    return math.ceil(math.log(1 - EARLY_STOPPING_CONFIDENCE) / math.log(percentile))


@dataclass(frozen=True)
class SearchResult:
    """What ``find_peak`` found."""

    peak_qps: float | None
    probes: tuple[ServerProbe, ...]
    ended: str
    lowest_invalid_qps: float | None


def find_peak(
    probe: Callable[[float], ServerProbe],
    *,
    capacity_estimate_qps: float,
    max_probes: int,
    tolerance: float,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> SearchResult:
    """Bisect over the target QPS with ``probe(qps)`` (one LoadGen Server run, its verdict), in at most
    ``max_probes`` probes, until the lowest INVALID rate is within ``tolerance`` above the highest
    VALID one (their defaults are ``ipu_loadgen``'s, in its signature)."""
    if not (capacity_estimate_qps > 0 and math.isfinite(capacity_estimate_qps)):
        raise ValueError(f"the capacity estimate must be a finite QPS > 0, got {capacity_estimate_qps!r}")
    start = clock()
    probes: list[ServerProbe] = []
    valid: float | None = None
    invalid: float | None = None
    qps = capacity_estimate_qps * START_SHARE
    ended = "probes"
    while len(probes) < max_probes:
        if budget_s is not None and probes:
            longest = max(p.elapsed_s for p in probes)
            if clock() - start + longest > budget_s:
                ended = "budget"
                break
        result = probe(qps)
        probes.append(result)
        if result.valid:
            valid = qps if valid is None else max(valid, qps)
        else:
            invalid = qps if invalid is None else min(invalid, qps)
        if valid is not None and invalid is not None and invalid <= valid * (1 + tolerance):
            ended = "converged"
            break
        if valid is None:
            assert invalid is not None
            qps = invalid / 4
        elif invalid is None:
            qps = valid * 2
        else:
            qps = math.sqrt(valid * invalid)
    if valid is None and ended != "budget":
        ended = "no-valid"
    return SearchResult(valid, tuple(probes), ended, invalid)
