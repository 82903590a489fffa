"""LoadGen's own cost: what ``ipu_loadgen`` (LoadGen, its Python callbacks and the batching system under
test) adds to what the model itself takes, on a model whose latency is known.

The model sleeps ``LATENCY_S`` per call whatever the batch, so its true figures are known in advance:
one sample every 5 ms alone, and ``MAX_BATCH`` samples per 5 ms in full batches. It is measured two
ways side by side in one run: alone by ``ipu_benchmark`` (the references, first), then as LoadGen's
system under test. The end of the run prints each comparison against its target:

(a) SingleStream: the p50 query latency LoadGen reports over the model's own p50 at batch 1, target
    <= 1.05, or within 50 us where 5 % of the latency is less than that;
(b) Offline: LoadGen's samples/s over ``ipu_benchmark``'s throughput at the same batch (8), target
    >= 0.95;
(c) Server: the peak QPS search's result over the model's true capacity (instances x batch / the
    latency of a full batch, measured by ``ipu_benchmark``), target within 10 % in at most 10 probes.

The targets are printed, not asserted: they are timing ratios, which a loaded machine moves. What is
asserted holds on any machine: the SUT answered every query LoadGen counted by running the model, the
latencies are not below the sleep (a sleep never returns early), Offline is not faster than full
batches back to back, and the peak is not above 1.5 x what the sleep allows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("mlperf_loadgen")

SECTION = "LoadGen overhead (ipu_loadgen vs the model alone, a 5 ms model)"
#: The model's latency per call, seconds, whatever the batch.
#:
#: ``time.sleep``, not a busy-wait: a device call releases the GIL while the host waits, and so does a
#: sleep. A Python busy-wait holds the GIL, so LoadGen's Python callbacks (issuing a query, answering
#: one) would wait up to the interpreter's 5 ms switch interval for it, and the comparison would
#: measure the GIL rather than LoadGen. A sleep overshoots by tens of microseconds on Linux (timer
#: slack), but both sides of every comparison time the same sleeping call, so the overshoot is in the
#: reference as much as in LoadGen's figure.
LATENCY_S = 0.005
#: Offline's and Server's batch, and the batch of the throughput reference.
MAX_BATCH = 8
#: Samples in the library: rows of zeros (the model never reads them).
SAMPLES = 64
#: Server's latency bound for the peak search: ten full batches. Below capacity, queries arriving at
#: random (LoadGen's Poisson schedule) wait a few batch times at the 99th percentile, a wait that grows
#: as 1 / (1 - load) and reaches the bound only close to capacity; above it the backlog grows without
#: limit: 5 % over capacity, a 2 s probe ends with 160 samples (20 batches, 100 ms) queued, and its
#: later queries pass the bound, so LoadGen calls it INVALID. A tighter bound (25 ms, five batches)
#: stopped the search near 0.88 of capacity: the bound, not the capacity, set the peak.
SERVER_BOUND_S = 0.050
#: Each probe's minimum duration, seconds: long enough for a backlog above capacity to show.
PROBE_S = 2.0
#: The targets.
SINGLE_STREAM_RATIO = 1.05
SINGLE_STREAM_SLACK_S = 50e-6
OFFLINE_RATIO = 0.95
PEAK_TOLERANCE = 0.10
MAX_PROBES = 10


def fixed_latency(x: Any) -> Any:
    """The model: ``LATENCY_S`` per call whatever the batch; its input is its output."""
    time.sleep(LATENCY_S)
    return x


@dataclass(frozen=True)
class Reference:
    """The model alone at one batch size, as ``ipu_benchmark`` measured it."""

    p50_s: float
    items_per_s: float


@pytest.fixture(scope="module")
def references() -> dict[int, Reference]:
    """The model alone by batch size, filled by ``test_model_alone`` (which runs first)."""
    return {}


@pytest.fixture(scope="module")
def samples() -> Any:
    """The library: ``SAMPLES`` rows of zeros."""
    import numpy as np

    return np.zeros((SAMPLES, 4), dtype=np.float32)


def _report(study_report: dict[str, list[str]], line: str) -> None:
    study_report.setdefault(SECTION, []).append(line)


def _reference(references: dict[int, Reference], batch: int) -> Reference:
    """The reference at ``batch``; the test is skipped when ``test_model_alone`` did not measure it
    in this run (a selection with ``-k`` that left it out)."""
    if batch not in references:
        pytest.skip(
            f"no reference at batch {batch}: test_model_alone[batch{batch}] measured nothing in this run "
            "(deselected, or pytest-benchmark disabled)"
        )
    return references[batch]


def _answered_all(lg: Any) -> None:
    """The SUT answered every sample LoadGen counted by running the model (a failed batch fails the
    test inside ``ipu_loadgen``). What LoadGen logs as an error of its own, such as a schedule that
    ran out of queries when the calibration ran slow, is LoadGen's verdict on the run, not this."""
    assert lg.query_count >= 1
    assert lg.batching.batches >= 1
    ran = sum(int(size) * count for size, count in lg.batching.batch_sizes.items())
    assert ran == lg.query_count * lg.samples_per_query


# One repeat, no power sampling: each reference is one measurement, as is the LoadGen run it is read
# against, and a sampling thread would be a cost of its own (the LoadGen runs sample no power either).
@pytest.mark.ipu(power="off", repeats=1)
@pytest.mark.benchmark(group="loadgen-overhead")
@pytest.mark.parametrize("batch", [1, MAX_BATCH], ids=lambda b: f"batch{b}")
def test_model_alone(ipu_benchmark: Any, samples: Any, references: dict[int, Reference], batch: int) -> None:
    """The reference: the model alone, timed by ``ipu_benchmark`` at batch 1 and at ``MAX_BATCH``."""
    record = ipu_benchmark(fixed_latency, (samples[:batch],))
    if not record.timed:
        pytest.skip("pytest-benchmark is disabled: nothing to compare")
    assert record.latency_s.p50 >= LATENCY_S
    references[batch] = Reference(record.latency_s.p50, record.throughput_items_per_s)


@pytest.mark.ipu(power="off")
@pytest.mark.benchmark(group="loadgen-overhead")
def test_single_stream_latency(
    ipu_loadgen: Any, samples: Any, references: dict[int, Reference], study_report: dict[str, list[str]]
) -> None:
    """(a) LoadGen's SingleStream p50 against the model's own p50 at batch 1."""
    own = _reference(references, 1)
    record = ipu_loadgen(fixed_latency, (samples,), scenario="SingleStream")
    if not record.timed:
        pytest.skip("pytest-benchmark is disabled: nothing to compare")
    lg = record.loadgen
    _answered_all(lg)
    p50 = lg.latency_s["p50"]
    assert p50 >= LATENCY_S  # a query's latency includes its sleep
    ratio, added = p50 / own.p50_s, p50 - own.p50_s
    meets = ratio <= SINGLE_STREAM_RATIO or added <= SINGLE_STREAM_SLACK_S
    _report(
        study_report,
        f"LoadGen SingleStream p50 / model's own p50 = {ratio:.3f} ({'meets' if meets else 'MISSES'} "
        f"<= {SINGLE_STREAM_RATIO} or within {SINGLE_STREAM_SLACK_S * 1e6:.0f} us): "
        f"{p50 * 1e3:.3f} ms vs {own.p50_s * 1e3:.3f} ms, added {added * 1e6:+.0f} us; "
        f"{lg.query_count} queries, LoadGen {'VALID' if lg.valid else 'INVALID'}",
    )


@pytest.mark.ipu(power="off")
@pytest.mark.benchmark(group="loadgen-overhead")
def test_offline_throughput(
    ipu_loadgen: Any, samples: Any, references: dict[int, Reference], study_report: dict[str, list[str]]
) -> None:
    """(b) LoadGen's Offline samples/s against ``ipu_benchmark``'s throughput at the same batch."""
    own = _reference(references, MAX_BATCH)
    record = ipu_loadgen(fixed_latency, (samples,), scenario="Offline", max_batch=MAX_BATCH)
    if not record.timed:
        pytest.skip("pytest-benchmark is disabled: nothing to compare")
    lg = record.loadgen
    _answered_all(lg)
    rate = lg.samples_per_s
    assert rate is not None
    assert rate > 0
    # Full batches of MAX_BATCH in LATENCY_S each are the most any batching can do.
    assert rate <= MAX_BATCH / LATENCY_S
    ratio = rate / own.items_per_s
    _report(
        study_report,
        f"LoadGen Offline samples/s / ipu_benchmark's at batch {MAX_BATCH} = {ratio:.3f} "
        f"({'meets' if ratio >= OFFLINE_RATIO else 'MISSES'} >= {OFFLINE_RATIO}): {rate:,.0f}/s vs "
        f"{own.items_per_s:,.0f}/s; mean batch {lg.batching.mean_batch:.2f}, "
        f"LoadGen {'VALID' if lg.valid else 'INVALID'}",
    )


@pytest.mark.ipu(power="off")
@pytest.mark.benchmark(group="loadgen-overhead")
def test_server_peak(
    ipu_loadgen: Any, samples: Any, references: dict[int, Reference], study_report: dict[str, list[str]]
) -> None:
    """(c) The peak Server QPS search against the model's true capacity."""
    full = _reference(references, MAX_BATCH)
    instances = 1  # a plain callable is one instance
    capacity = instances * MAX_BATCH / full.p50_s
    nominal = instances * MAX_BATCH / LATENCY_S
    record = ipu_loadgen(
        fixed_latency,
        (samples,),
        scenario="Server",
        find_peak=True,
        max_batch=MAX_BATCH,
        target_latency=SERVER_BOUND_S,
        min_duration=PROBE_S,
        max_probes=MAX_PROBES,
    )
    if not record.timed:
        pytest.skip("pytest-benchmark is disabled: nothing to compare")
    lg = record.loadgen
    _answered_all(lg)  # the peak's probe (or the last probe, when none was VALID)
    peak = lg.peak
    assert peak is not None
    assert 1 <= len(peak.probes) <= MAX_PROBES
    if peak.peak_qps is not None:
        # The sleep never returns early, so the model answers at most ``nominal`` samples a second
        # on any machine; a rate 1.5 x that builds a backlog of a third of every probe's queries,
        # far past the bound, so LoadGen cannot call it VALID.
        assert peak.peak_qps <= 1.5 * nominal
    found = "none VALID" if peak.peak_qps is None else f"{peak.peak_qps:,.0f} QPS"
    ratio = None if peak.peak_qps is None else peak.peak_qps / capacity
    meets = ratio is not None and abs(ratio - 1) <= PEAK_TOLERANCE
    probes = ", ".join(f"{p.target_qps:,.0f}{'' if p.valid else '!'}" for p in peak.probes)
    _report(
        study_report,
        f"LoadGen Server peak / true capacity = {'n/a' if ratio is None else f'{ratio:.3f}'} "
        f"({'meets' if meets else 'MISSES'} within {PEAK_TOLERANCE:.0%} in <= {MAX_PROBES} probes): "
        f"{found} vs {capacity:,.0f} QPS ({instances} x {MAX_BATCH} / {full.p50_s * 1e3:.3f} ms; "
        f"nominal {nominal:,.0f}); {len(peak.probes)} probes ({probes}; ! = INVALID), ended "
        f"{peak.ended}, {sum(p.elapsed_s for p in peak.probes):.1f} s",
    )
