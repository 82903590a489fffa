"""``ipu_cycles`` on the PopART backend, against the fake PopART 3.4 (tests/fakes/fake_popart.py).

The fake's ``getCycleCount`` raises as PopART's does (the counter off: the SessionOption's message;
before a run: "Must call run before getCycleCount."), and counts a step of the first replica as
``CALL_CYCLES`` plus, per batch of the step, the model's weight elements and the batch's input
elements: deterministic per graph and batch, so the record is asserted exactly.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from pytest_ipu.backends.ipu.popart import PopArtBackend
from tests.fakes import fake_gcipuinfo
from tests.fakes import fake_popart
from tests.unit.small_net import torchscript_onnx as _torchscript_onnx
from tests.unit.test_ipu_cycles import REPEATS
from tests.unit.test_ipu_cycles import repeats
from tests.unit.test_popart_backend import _inputs
from tests.unit.test_popart_backend import _session
from tests.unit.test_popart_backend import small_net

onnx = pytest.importorskip("onnx")


@pytest.fixture(autouse=True)
def gcipuinfo(monkeypatch: pytest.MonkeyPatch) -> None:
    """A C2 card (two IPUs at 1300 MHz) as ``import gcipuinfo`` gives it."""
    monkeypatch.setitem(
        sys.modules, "gcipuinfo", fake_gcipuinfo.FakeGcIpuInfoModule(fake_gcipuinfo.c2_card())
    )


@pytest.fixture(scope="module")
def onnx_bytes() -> bytes:
    return _torchscript_onnx(small_net(), (_inputs(2),))


@pytest.fixture
def fake():
    return fake_popart.make_module(ipus=2)


def expected(model: bytes, batch: int, batches_per_step: int = 1) -> int:
    """The fake's count of one step: its stated model, from the graph and the batch."""
    weights = fake_popart._weight_elements(onnx.load_from_string(model))
    return fake_popart.CALL_CYCLES + batches_per_step * (weights + batch * 3 * 6 * 6)


def test_get_cycle_count_raises_as_popart_does(fake, onnx_bytes):
    x = _inputs(2).numpy()
    compiled = PopArtBackend(device="ipu", popart_module=fake).compile(
        onnx_bytes, (x,), "fp32", {"cycle_counter": False}
    )
    session = _session(fake)
    assert session.options.instrumentWithHardwareCycleCounter is False
    with pytest.raises(
        fake.popart_exception, match="instrumentWithHardwareCycleCounter' must be set to true"
    ):
        session.getCycleCount()
    fixed = session.model_bytes  # the model with its batch fixed, as the backend gave it to PopART
    compiled.close()
    opts = fake.SessionOptions()
    opts.instrumentWithHardwareCycleCounter = True
    device = fake.DeviceManager().acquireAvailableDevice(1)
    dataflow = fake.DataFlow(1, {"y": fake.AnchorReturnType("ALL")})
    fresh = fake.InferenceSession(fixed, dataflow, device, userOptions=opts)
    fresh.prepareDevice()
    with pytest.raises(fake.popart_exception, match="Must call run before getCycleCount"):
        fresh.getCycleCount()
    device.detach()


@pytest.mark.parametrize(("batch", "bps"), [(2, 1), (4, 1), (4, 2)])
def test_every_repeat_records_the_steps_cycles_per_graph_and_batch(fake, onnx_bytes, batch, bps):
    x = _inputs(batch * bps).numpy()
    compiled = PopArtBackend(device="ipu", popart_module=fake).compile(
        onnx_bytes, (x,), "fp32", {"batches_per_step": bps}
    )
    try:
        record = repeats(compiled, (x,)).record
    finally:
        compiled.close()
    assert _session(fake).options.instrumentWithHardwareCycleCounter is True
    cycles = expected(_session(fake).model_bytes, batch, bps)
    assert [r.counts["ipu_cycles"].per_call for r in record.repeats] == [cycles] * REPEATS
    assert record.value("ipu_cycles") == cycles
    count = record.counts["ipu_cycles"]
    assert count.clock_hz == 1.3e9
    assert count.time_s == cycles / 1.3e9
    assert "IPU(s) 0" in (count.clock or "")  # the IPU the session was given, as gc-info numbers it


def test_the_ipu_model_counts_nothing_and_says_why(fake, onnx_bytes):
    x = np.asarray(_inputs(2))
    compiled = PopArtBackend(device="ipu-model", popart_module=fake).compile(onnx_bytes, (x,), "fp32", {})
    try:
        record = repeats(compiled, (x,), n=1).record
    finally:
        compiled.close()
    assert _session(fake).options.instrumentWithHardwareCycleCounter is False
    assert "IPU Model simulator has no hardware cycle counter" in record.why_missing("ipu_cycles")
