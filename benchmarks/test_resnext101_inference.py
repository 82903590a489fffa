"""ResNeXt-101 inference: latency and throughput against batch size, on every backend present.

The reference study ran ResNeXt-101 on a Graphcore C2 card, fp16, batch sizes 2 to 12. This study
runs the same model and batch sizes on each target that ``--ipu-backend`` selects (``auto``: every
default backend present: torch and ONNX Runtime, on the CPU and on a CUDA GPU where there is one),
precision ``auto`` (fp32 on CPUs, fp16 on accelerators). Every target's outputs are checked against
torch eager fp32 before it is timed.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.conftest import BATCH_SIZES
from benchmarks.conftest import image_batch


# The budget fits the slowest call: batch 12 on a 2-core CPU takes about 1.2 s, and the window of
# each of the 3 repeats lands within half a call of its share of the budget, so a share of 8/3 s
# keeps the window within a quarter of the budget.
@pytest.mark.ipu(max_time="8s")
@pytest.mark.benchmark(group="resnext101-inference")
@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_resnext101_inference(
    ipu_compile: Any, ipu_benchmark: Any, resnext101: Any, resnext_variant: str, batch_size: int
) -> None:
    """One batch size on one target: compile (cached per target), warm up, time the rounds."""
    images = image_batch(batch_size)
    # parity: every target's outputs must match torch eager fp32 within its precision's tolerance.
    compiled = ipu_compile(resnext101, (images,), key=f"resnext101_{resnext_variant}", parity=True)
    record = ipu_benchmark(compiled, (images,))
    if record is not None:
        assert record.batch_size == batch_size
        assert record.throughput_items_per_s > 0
