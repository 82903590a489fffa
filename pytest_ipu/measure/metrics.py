"""Numbers from numbers: latency summaries and throughput (pure; seconds in, SI units out)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LatencySummary:
    """Per-round latency in seconds: one synchronous call of one model instance on one batch.

    ``unsupported`` names the percentiles (``"p99"``) that the round count cannot support: they are
    still reported, but they are really the maximum of too few samples.
    """

    #: Fastest round, seconds.
    min: float
    #: Median round (linear interpolation between closest ranks, as numpy's default), seconds.
    p50: float
    #: 90th percentile of the rounds, seconds.
    p90: float
    #: 99th percentile of the rounds, seconds; with fewer than 100 rounds it is their maximum (listed in
    #: `unsupported`).
    p99: float
    #: Slowest round, seconds.
    max: float
    #: Mean round, seconds.
    mean: float
    #: Rounds summarised.
    rounds: int
    #: Percentiles the round count cannot support (`p90` needs 10 rounds, `p99` 100): reported all the same,
    #: marked `*` in the table.
    unsupported: tuple[str, ...] = ()


def summarize_latency(samples_s: Sequence[float]) -> LatencySummary:
    """Summarize per-round latencies (seconds); raises ``ValueError`` on an empty or negative sample."""
    # numpy (under stats) loads on the first summary, not when pytest starts.
    from pytest_ipu.measure import stats

    if not samples_s:
        raise ValueError("no latency samples to summarize")
    if min(samples_s) < 0:
        raise ValueError(f"latency samples must be >= 0 s, got {min(samples_s)}")
    n = len(samples_s)
    p50, p90, p99 = (stats.percentile(samples_s, q) for q in stats.PERCENTILES)
    return LatencySummary(
        min=float(min(samples_s)),
        p50=p50,
        p90=p90,
        p99=p99,
        max=float(max(samples_s)),
        # fsum is exact; the clamp keeps rounding of the division from leaving [min, max].
        mean=min(max(math.fsum(samples_s) / n, float(min(samples_s))), float(max(samples_s))),
        rounds=n,
        unsupported=tuple(f"p{q}" for q in stats.PERCENTILES if not stats.is_supported(q, n)),
    )


def throughput(items: float, window_s: float) -> float:
    """Items completed per second of wall time over a timed window."""
    if items < 0:
        raise ValueError(f"items must be >= 0, got {items}")
    if not window_s > 0:
        raise ValueError(f"the timed window must last > 0 s, got {window_s}")
    return items / window_s
