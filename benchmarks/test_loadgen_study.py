"""MLPerf LoadGen scenarios: ResNeXt-101 and ResNet-50 inference served as LoadGen's system under test.

For each target that ``--ipu-backend`` selects (as the other inference studies: torch and ONNX
Runtime on the CPU, and CUDA or IPU targets where present), each model is run under LoadGen's
SingleStream (one sample at a time: its latency), Offline (every sample at once: its throughput) and
Server scenarios; Server is the peak QPS search (``find_peak=True``): the highest arrival rate LoadGen
calls VALID under the model's latency bound, in at most 10 probes and the size's time budget.
ResNet-50 is MLPerf's own inference benchmark, so it runs under MLPerf's rules for it
(``mlperf_model="resnet50"``: seeds, percentiles, its 15 ms Server bound); ResNeXt-101 has no MLPerf
benchmark and runs under MLPerf's general rules.

``--loadgen-size`` (``benchmarks/conftest.py``) sizes the study; the test ids name the image size:
``small`` (the default, ``make bench``) runs the same networks at 64 px with short runs and Server
bounds of its own, about two minutes in all on a 2-core CPU; ``full`` runs them at 224 px with
MLPerf's Server bound and percentile. No run here is MLPerf-compliant (they are short), and the
record says why. LoadGen may call a short run INVALID: that is recorded and printed, not a failure.
What must hold is asserted: a record was made, and the system under test answered every query
LoadGen counted by running the model.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from benchmarks.conftest import LoadgenSize
from benchmarks.conftest import loadgen_size
from benchmarks.models import resnet

pytest.importorskip("mlperf_loadgen")

SECTION = "LoadGen study (SingleStream latency, Offline throughput, peak Server QPS)"
#: Samples in the library, each a synthetic image.
SAMPLES = 64
#: Offline's and Server's largest batch (the middle of the ResNeXt-101 study's batch sizes).
MAX_BATCH = 8
#: The peak search's most probes.
MAX_PROBES = 10
#: SingleStream's minimum query count: the fewest with which LoadGen's early stopping can estimate
#: the 90th percentile (its log says "Need to process at least 64 queries"). A 2 s run of a model
#: taking 40 ms a query has fewer, and LoadGen would call it INVALID for that alone.
SINGLE_STREAM_QUERIES = 64
#: Each model: the fixture that builds it, and the MLPerf benchmark whose rules apply (``None``:
#: MLPerf's general rules).
MODELS: dict[str, tuple[str, str | None]] = {
    "resnext101": ("resnext101", None),
    "resnet50": ("loadgen_resnet50", "resnet50"),
}
SCENARIOS = ("SingleStream", "Offline", "Server")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One benchmark per model and scenario, the id naming the image size of ``--loadgen-size``."""
    if "loadgen_model" in metafunc.fixturenames:
        px = loadgen_size(metafunc.config).image
        metafunc.parametrize("loadgen_model", list(MODELS), ids=[f"{m}-{px}px" for m in MODELS])


@pytest.fixture(scope="session")
def loadgen_resnet50() -> torch.nn.Module:
    """ResNet-50 with seeded weights, in eval mode, built once per run."""
    model = resnet.build(seed=0).eval()
    # The architecture is checked before anything runs: another network would be timed under
    # ResNet-50's name.
    assert sum(p.numel() for p in model.parameters()) == resnet.RESNET50_PARAMETERS
    return model


@pytest.fixture(scope="session")
def study_size(request: pytest.FixtureRequest) -> LoadgenSize:
    """The study's sizes for this run."""
    return loadgen_size(request.config)


def images(count: int, pixels: int, seed: int = 0) -> torch.Tensor:
    """``count`` deterministic normalised random images, float32, NCHW, ``pixels`` square."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn((count, 3, pixels, pixels), generator=generator)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f} ms"


@pytest.mark.benchmark(group="loadgen-study")
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_loadgen_study(
    request: pytest.FixtureRequest,
    ipu_backend: Any,
    ipu_compile: Any,
    ipu_loadgen: Any,
    study_size: LoadgenSize,
    study_report: dict[str, list[str]],
    resnext_variant: str,
    loadgen_model: str,
    scenario: str,
) -> None:
    """One model in one LoadGen scenario on one target."""
    fixture, mlperf_model = MODELS[loadgen_model]
    model = request.getfixturevalue(fixture)
    samples = images(SAMPLES, study_size.image)
    batch = 1 if scenario == "SingleStream" else MAX_BATCH
    # A backend that compiles per input shape (PopTorch, PopART, torch-compile) is compiled at the
    # batch the system under test runs, and the SUT pads a shorter batch to it (pad_to). The others
    # (torch eager, ONNX Runtime with its dynamic batch) run whatever batch LoadGen's queries make.
    shaped = ipu_backend.shape_specialized({})
    name = f"resnext101_{resnext_variant}" if loadgen_model == "resnext101" else loadgen_model
    # The key names the image size: an ONNX export is fixed to its images' height and width, and
    # the ResNeXt-101 inference study compiles the same model at 224 px.
    compiled = ipu_compile(model, (samples[:batch],), key=f"{name}_{study_size.image}px", parity=True)
    common: dict[str, Any] = {
        "scenario": scenario,
        "mlperf_model": mlperf_model,
        "min_duration": study_size.min_duration_s,
        "max_batch": batch,
        "pad_to": batch if shaped else None,
    }
    if scenario == "SingleStream":
        common["min_queries"] = SINGLE_STREAM_QUERIES
    if scenario == "Server":
        common.update(
            find_peak=True,
            # The model's bound at this size (conftest.py says why each is what it is); None: MLPerf's.
            target_latency=study_size.server_bound_s[loadgen_model],
            latency_percentile=study_size.server_percentile,
            max_probes=MAX_PROBES,
            search_budget=study_size.search_budget_s,
            search_tolerance=study_size.search_tolerance,
            # No probe runs past the whole budget: a probe needs its minimum of queries, and at a rate
            # far below the model's (a capacity misjudged on a busy machine) that could take minutes.
            # A probe cut short is INVALID, and the budget then ends the search.
            max_duration=study_size.search_budget_s,
        )
    record = ipu_loadgen(compiled, (samples,), **common)
    if not record.timed:
        return
    lg = record.loadgen
    assert lg is not None
    assert lg.scenario == scenario
    assert lg.mlperf_model == mlperf_model
    assert record.batch_size == batch
    # The system under test answered every query LoadGen counted by running the model: every sample
    # in a batch the model ran (a failed batch fails the test inside ipu_loadgen). What LoadGen logs
    # as an error of its own (a schedule that ran out of queries, say) is printed, not failed.
    assert lg.query_count >= 1
    ran = sum(int(size) * count for size, count in lg.batching.batch_sizes.items())
    assert ran == lg.query_count * lg.samples_per_query
    # A Server search's record is its peak's probe (VALID), or its last probe when none was VALID.
    verdict = "VALID" if lg.valid else "INVALID (" + "; ".join(lg.invalid_reasons) + ")"
    where = f"{record.target} {loadgen_model} {study_size.image}px {scenario}"
    if scenario == "SingleStream":
        figures = (
            f"p50 {_ms(lg.latency_s.get('p50'))}, p90 {_ms(lg.latency_s.get('p90'))}, "
            f"early-stopping p90 {_ms(lg.early_stopping_latency_s)}; {lg.query_count} queries"
        )
    elif scenario == "Offline":
        assert lg.samples_per_s is not None
        assert lg.samples_per_s > 0
        figures = f"{lg.samples_per_s:,.1f} samples/s, mean batch {lg.batching.mean_batch:.2f}"
    else:
        peak = lg.peak
        assert peak is not None
        assert 1 <= len(peak.probes) <= MAX_PROBES
        # The calibration's capacity (full batches back to back) is an estimate taken just before
        # the search, on a machine that may be busier or quieter then: it is printed beside the
        # peak, not asserted against it.
        capacity = peak.capacity_estimate_qps
        percentile = float(lg.settings.get("target_latency_percentile", 0.0))
        latency_ns = lg.settings.get("target_latency_ns")
        probes = ", ".join(f"{p.target_qps:,.1f}{'' if p.valid else '!'}" for p in peak.probes)
        found = "no VALID rate" if peak.peak_qps is None else f"peak {peak.peak_qps:,.1f} QPS"
        figures = (
            f"{found} under {_ms(None if latency_ns is None else latency_ns / 1e9)} at p{percentile * 100:g} "
            f"(capacity estimate {capacity:,.1f}); {len(peak.probes)} probes ({probes}; ! = INVALID), "
            f"ended {peak.ended} in {sum(p.elapsed_s for p in peak.probes):.1f} s"
        )
    logged = f"; LoadGen logged: {' | '.join(lg.errors)}" if lg.errors else ""
    study_report.setdefault(SECTION, []).append(f"{where}: {figures}; {verdict}{logged}")
