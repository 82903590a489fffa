"""The reference study as Graphcore ran it: ResNeXt-101 inference on a C2 card, two instances.

A C2 card holds two IPUs. The study ran one inference session per IPU, both at once, in fp16, at
batch sizes 2 to 12, and reported latency, throughput and images per second per watt. Here each
test asks for exactly that placement with the ``ipu`` marker (``instances=2``: two copies of the
model, one per IPU, running concurrently): throughput is summed over the two instances in one wall
window, latency is per call of one instance, and energy covers the IPUs used.

The configuration is that of Graphcore's public ResNeXt-101 inference example (graphcore/examples,
``vision/resnext_inference/popart``) at the versions whose ``--device_iterations`` default is 200
(c0239af, and 2d8b565^, before its removal; docs/ipu.md cites each line): one process (here,
instance) per IPU; convolution and matmul partials in half precision (``--half_partials``, on by
default there); the convolutions' available memory proportion 0.3, or 0.26 when the *global* batch
(``--batch_size``, "across all devices") is 5; and 200 batches per device call
(``--c2-batches-per-step`` changes it, and 1 measures one batch per call and checks parity, which
at 200 batches per call would run the reference model on thousands of images). The batch sizes
here are per instance, as the example's ``--micro_batch_size``: the global batch is twice that, so
it is never 5 and the proportion is 0.3 throughout (the example's launcher, given a global 5 on two
IPUs, would run micro-batches of 2 at 0.26). A call runs ``batch x batches per step`` images: the
table's batch column and latency are per call, its items/s per image.

``test_resnext101_c2_popart`` is the study as published (PopART sessions on an ONNX export, run
from two threads: PopART releases the GIL during a run). ``test_resnext101_c2_poptorch`` is the
PopTorch equivalent (one worker process per instance: PopTorch holds the GIL during a call).
Both skip, with the reason, on a machine without two free IPUs, and run unchanged on one that
has them (see docs/ipu.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.conftest import BATCH_SIZES
from benchmarks.conftest import image_batch

#: A C2 card's IPUs: one instance on each.
INSTANCES = 2
#: Two instances, one IPU each, fp16: the C2 card as the reference study used it.
C2 = {"instances": INSTANCES, "precision": "fp16"}

#: Half-precision partials in each backend's own spelling (the example's ``--half_partials``).
HALF_PARTIALS = {"popart": "half", "poptorch": "fp16"}


def memory_proportion(global_batch: int) -> float:
    """The convolutions' available memory proportion of Graphcore's example (``resnext101.py``):
    0.3, and 0.26 when its global batch, summed over every IPU, is 5."""
    return 0.26 if global_batch == 5 else 0.3


def compile_options(backend: str, batch_size: int, batches_per_step: int) -> dict[str, Any]:
    """The example's configuration in each backend's own option names, for one instance's batch
    (the global batch is that times the card's instances)."""
    steps = "batches_per_step" if backend == "popart" else "device_iterations"
    return {
        steps: batches_per_step,
        "available_memory_proportion": memory_proportion(batch_size * INSTANCES),
        "partials_type": HALF_PARTIALS[backend],
    }


@pytest.fixture
def batches_per_step(request: pytest.FixtureRequest) -> int:
    """``--c2-batches-per-step`` (default: the example's 200)."""
    return int(request.config.getoption("--c2-batches-per-step"))


@pytest.mark.benchmark(group="resnext101-c2")
@pytest.mark.ipu(backend="popart:ipu", **C2)
@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_resnext101_c2_popart(
    ipu_compile: Any,
    ipu_benchmark: Any,
    resnext101: Any,
    resnext_variant: str,
    batch_size: int,
    batches_per_step: int,
) -> None:
    """Two PopART sessions, one per IPU, running concurrently on one batch size."""
    _run(ipu_compile, ipu_benchmark, resnext101, resnext_variant, batch_size, batches_per_step, "popart")


@pytest.mark.benchmark(group="resnext101-c2")
@pytest.mark.ipu(backend="poptorch:ipu", **C2)
@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_resnext101_c2_poptorch(
    ipu_compile: Any,
    ipu_benchmark: Any,
    resnext101: Any,
    resnext_variant: str,
    batch_size: int,
    batches_per_step: int,
) -> None:
    """Two PopTorch models, one per IPU, each in its own worker process, running concurrently."""
    _run(ipu_compile, ipu_benchmark, resnext101, resnext_variant, batch_size, batches_per_step, "poptorch")


def _run(
    ipu_compile: Any, ipu_benchmark: Any, model: Any, variant: str, batch_size: int, steps: int, backend: str
) -> None:
    images = image_batch(batch_size * steps)  # each call feeds `steps` batches to the device
    compiled = ipu_compile(
        model,
        (images,),
        key=f"resnext101_{variant}_{steps}",
        parity=steps == 1,
        **compile_options(backend, batch_size, steps),
    )
    record = ipu_benchmark(compiled, (images,))
    assert record.batch_size == batch_size * steps
    if record.timed:
        assert record.placement is not None
        assert record.placement.instances == 2
        assert record.instances is not None
        assert len(record.instances) == 2
        assert record.throughput_items_per_s > 0
