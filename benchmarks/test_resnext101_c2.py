"""The reference study as Graphcore ran it: ResNeXt-101 inference on a C2 card, two instances.

A C2 card holds two IPUs. The study ran one inference session per IPU, both at once, in fp16, at
batch sizes 2 to 12, and reported latency, throughput and images per second per watt. Here each
test asks for exactly that placement with the ``ipu`` marker (``instances=2``: two copies of the
model, one per IPU, running concurrently): throughput is summed over the two instances in one wall
window, latency is per call of one instance, and energy covers the IPUs used.

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

#: Two instances, one IPU each, fp16: the C2 card as the reference study used it.
C2 = {"instances": 2, "precision": "fp16"}


@pytest.mark.benchmark(group="resnext101-c2")
@pytest.mark.ipu(backend="popart:ipu", **C2)
@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_resnext101_c2_popart(
    ipu_compile: Any, ipu_benchmark: Any, resnext101: Any, resnext_variant: str, batch_size: int
) -> None:
    """Two PopART sessions, one per IPU, running concurrently on one batch size."""
    _run(ipu_compile, ipu_benchmark, resnext101, resnext_variant, batch_size)


@pytest.mark.benchmark(group="resnext101-c2")
@pytest.mark.ipu(backend="poptorch:ipu", **C2)
@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_resnext101_c2_poptorch(
    ipu_compile: Any, ipu_benchmark: Any, resnext101: Any, resnext_variant: str, batch_size: int
) -> None:
    """Two PopTorch models, one per IPU, each in its own worker process, running concurrently."""
    _run(ipu_compile, ipu_benchmark, resnext101, resnext_variant, batch_size)


def _run(ipu_compile: Any, ipu_benchmark: Any, model: Any, variant: str, batch_size: int) -> None:
    images = image_batch(batch_size)
    compiled = ipu_compile(model, (images,), key=f"resnext101_{variant}", parity=True)
    record = ipu_benchmark(compiled, (images,))
    if record is not None:
        assert record.batch_size == batch_size
        assert record.placement is not None
        assert record.placement.instances == 2
        assert record.instances is not None
        assert len(record.instances) == 2
        assert record.throughput_items_per_s > 0
