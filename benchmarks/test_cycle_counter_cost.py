"""What the IPU's cycle counter costs a call, on the SDK fakes, and where each backend pays for its reads.

The fakes' cost model is stated, not measured on an IPU (``tests/fakes``): the counter compiled in
adds ``COUNTER_S`` (1 us) to every call, for the internal sync and the two timer compute sets around
the main program; a read of the count spends ``READ_S`` (50 us) holding the GIL, for the program
that copies the count to the host (a host-device round trip). PopTorch reads the count at the end
of every call (``Compiler::run``), so its calls hold the read; PopART reads only when asked
(``getCycleCount``), which pytest-ipu does in its untimed counting pass.

Side by side, in interleaved blocks so that the machine's drift falls on all variants alike, the
median time of one call of one small model:

- PopTorch (1 ms of simulated device time a call), without and with ``cycle_counter``: what every
  timed round of a PopTorch model with the counter pays;
- PopART (an ONNX matmul, run by onnxruntime), without the counter, with it, and with it read after
  every call: what the counting pass keeps out of the timed rounds;

and the wall time of one repeat's counting pass (``run.counting``: three calls, three reads, the
clock). The figures are printed; the study fails only when a figure is missing, never on a slow
machine.
"""

from __future__ import annotations

import importlib
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.ipu.popart import PopArtBackend
from pytest_ipu.backends.ipu.poptorch import PopTorchBackend
from pytest_ipu.run.counting import count_pass

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

#: Calls per block and blocks per variant, interleaved.
BLOCK = 40
BLOCKS = 10
#: Simulated device time of one PopTorch call.
CALL_S = 0.001
SECTION = "IPU cycle counter cost (SDK fakes, stated cost model; medians per call)"


def _block(fn: Callable[[], object], calls: int) -> list[float]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(calls):
        start = clock()
        fn()
        out.append((clock() - start) * 1e-9)
    return out


def _medians(variants: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Each variant's median call, the variants' blocks interleaved."""
    times: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():
        _block(fn, BLOCK)  # warm
    for _ in range(BLOCKS):
        for name, fn in variants.items():
            times[name] += _block(fn, BLOCK)
    return {k: statistics.median(v) for k, v in times.items()}


def _caller(compiled: CompiledModel, inputs: tuple[object, ...]) -> Callable[[], object]:
    args = compiled.prepare_inputs(inputs)
    return lambda: compiled.run(*args)


def _matmul_onnx() -> bytes:
    """y = relu(x W): a [4, 16] input, a [16, 4] weight, opset 11."""
    from onnx import TensorProto
    from onnx import helper
    from onnx import numpy_helper

    weight = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32), "W"
    )
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 6
    return bytes(model.SerializeToString())


@pytest.mark.benchmark(group="cycle-counter-cost")
def test_cycle_counter_cost(benchmark: Any, study_report: dict[str, list[str]]) -> None:
    """The counter's cost per call on both backends, and one repeat's counting pass."""
    poptorch = importlib.import_module("tests.fakes.fake_poptorch")
    fake_popart = importlib.import_module("tests.fakes.fake_popart")
    poptorch.reset()
    poptorch.configure(call_s=CALL_S)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
    x = torch.randn(4, 16)
    torch_backend = PopTorchBackend(poptorch_module=poptorch, torch_module=torch)
    popart = fake_popart.make_module(ipus=2)
    popart_backend = PopArtBackend(popart_module=popart)
    onnx_model, x_np = _matmul_onnx(), x.numpy()
    compiled = {
        "poptorch off": torch_backend.compile(model, (x,), "fp32", {}),
        "poptorch on": torch_backend.compile(model, (x,), "fp32", {"cycle_counter": True}),
    }
    try:
        pt = _medians({k: _caller(c, (x,)) for k, c in compiled.items()})
        compiled["popart off"] = popart_backend.compile(onnx_model, (x_np,), "fp32", {"cycle_counter": False})
        compiled["popart on"] = popart_backend.compile(onnx_model, (x_np,), "fp32", {})
        read = compiled["popart on"].counters[0].read
        assert read is not None
        on = _caller(compiled["popart on"], (x_np,))

        def call_and_read() -> None:
            on()
            read()

        pa = _medians({"off": _caller(compiled["popart off"], (x_np,)), "on": on, "read": call_and_read})
        start = time.perf_counter_ns()
        counted = count_pass(compiled["popart on"], compiled["popart on"].prepare_inputs((x_np,)))
        pass_s = (time.perf_counter_ns() - start) * 1e-9
    finally:
        for c in compiled.values():
            c.close()
        poptorch.reset()
    cycles = counted["ipu_cycles"].per_call
    assert cycles is not None
    poptorch_added = pt["poptorch on"] - pt["poptorch off"]
    figures = {
        "poptorch_call_s": pt["poptorch off"],
        "poptorch_added_by_counter_and_read_s": poptorch_added,
        "popart_call_s": pa["off"],
        "popart_added_by_counter_s": pa["on"] - pa["off"],
        "popart_added_by_a_read_per_call_s": pa["read"] - pa["off"],
        "popart_counting_pass_s": pass_s,
        "model_counter_s": poptorch.COUNTER_S,
        "model_read_s": poptorch.READ_S,
        "calls_per_variant": BLOCK * BLOCKS,
    }
    benchmark.extra_info["cycle_counter"] = figures
    us = 1e6
    pt_model = (poptorch.COUNTER_S + poptorch.READ_S) * us
    study_report.setdefault(SECTION, []).append(
        f"PopTorch: call {pt['poptorch off'] * us:,.1f} us, counter on {poptorch_added * us:+,.1f} us/call "
        f"({poptorch_added / pt['poptorch off'] * 100:+.1f} %; model {pt_model:g} us: counter and read, "
        "both in the call)"
    )
    added, per_read = (pa["on"] - pa["off"]) * us, (pa["read"] - pa["off"]) * us
    pa_model = (fake_popart.COUNTER_S + fake_popart.READ_S) * us
    study_report[SECTION].append(
        f"PopART: call {pa['off'] * us:,.1f} us, counter on {added:+,.1f} us/call (model "
        f"{fake_popart.COUNTER_S * us:g} us), a read after every call {per_read:+,.1f} us/call (model "
        f"{pa_model:g} us), one repeat's counting pass {pass_s * 1e3:,.2f} ms ({cycles:,.0f} cycles/call); "
        f"{BLOCK * BLOCKS} calls a variant, interleaved"
    )
    benchmark.pedantic(lambda: None, rounds=1)
