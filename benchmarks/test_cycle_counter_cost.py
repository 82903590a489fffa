"""What the IPU's cycle counter costs a call, on the fake PopTorch, and why it is read outside the rounds.

The fake's cost model is stated, not measured on an IPU (``tests/fakes/fake_poptorch.py``): the
counter compiled in (``logCycleCount(True)``) adds ``COUNTER_S`` (1 us) to every call's device
time, for the internal sync and the two timer compute sets around the main program; each
``cycleCount()`` read spends ``READ_S`` (50 us) holding the GIL, for the program that copies the
count to the host (a host-device round trip). Calls take 1 ms of simulated device time here.

Side by side, in interleaved blocks so that the machine's drift falls on all three alike, the median
time of one call of the same small model compiled three ways:

- without the counter (the reference);
- with the counter compiled in, never read in the loop (what every timed round of pytest-ipu pays);
- with the counter, read after every call (what reading in the timed rounds would cost them).

And the wall time of one repeat's counting pass (``run.counting``: three calls, three reads, the
clock), which pytest-ipu spends after the timed rounds instead. The figures are printed; the study
fails only when a figure is missing, never on a slow machine.
"""

from __future__ import annotations

import importlib
import statistics
import time
from collections.abc import Callable
from typing import Any

import pytest

from pytest_ipu.backends.ipu.poptorch import PopTorchBackend
from pytest_ipu.run.counting import count_pass

torch = pytest.importorskip("torch")

#: Calls per block and blocks per variant, interleaved.
BLOCK = 40
BLOCKS = 10
#: Simulated device time of one call.
CALL_S = 0.001
SECTION = "IPU cycle counter cost (fake PopTorch, stated cost model; medians per call)"


def _block(fn: Callable[[], object], calls: int) -> list[float]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(calls):
        start = clock()
        fn()
        out.append((clock() - start) * 1e-9)
    return out


@pytest.mark.benchmark(group="cycle-counter-cost")
def test_cycle_counter_cost(benchmark: Any, study_report: dict[str, list[str]]) -> None:
    """The counter's cost per call, compiled in and read per call, against none; the counting pass."""
    fake = importlib.import_module("tests.fakes.fake_poptorch")
    fake.reset()
    fake.configure(call_s=CALL_S)
    backend = PopTorchBackend(poptorch_module=fake, torch_module=torch)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
    x = torch.randn(4, 16)
    off = backend.compile(model, (x,), "fp32", {"cycle_counter": False})
    on = backend.compile(model, (x,), "fp32", {})
    try:
        args_off, args_on = off.prepare_inputs((x,)), on.prepare_inputs((x,))
        read = on.counters[0].read
        assert read is not None

        def call_off() -> None:
            off.run(*args_off)

        def call_on() -> None:
            on.run(*args_on)

        def call_and_read() -> None:
            on.run(*args_on)
            read()

        variants = {"off": call_off, "on": call_on, "read": call_and_read}
        times: dict[str, list[float]] = {k: [] for k in variants}
        for fn in variants.values():
            _block(fn, BLOCK)  # warm
        for _ in range(BLOCKS):
            for name, fn in variants.items():
                times[name] += _block(fn, BLOCK)
        start = time.perf_counter_ns()
        counted = count_pass(on, args_on)
        pass_s = (time.perf_counter_ns() - start) * 1e-9
    finally:
        off.close()
        on.close()
        fake.reset()
    median = {k: statistics.median(v) for k, v in times.items()}
    compiled_in = median["on"] - median["off"]
    per_read = median["read"] - median["off"]
    cycles = counted["ipu_cycles"].per_call
    assert cycles is not None
    figures = {
        "call_without_counter_s": median["off"],
        "added_by_counter_s": compiled_in,
        "added_by_a_read_per_call_s": per_read,
        "counting_pass_s": pass_s,
        "model_counter_s": fake.COUNTER_S,
        "model_read_s": fake.READ_S,
        "calls_per_variant": BLOCK * BLOCKS,
    }
    benchmark.extra_info["cycle_counter"] = figures
    study_report.setdefault(SECTION, []).append(
        f"call without the counter {median['off'] * 1e6:,.1f} us; counter compiled in "
        f"{compiled_in * 1e6:+,.1f} us/call (model {fake.COUNTER_S * 1e6:g} us); a read after every call "
        f"{per_read * 1e6:+,.1f} us/call = {per_read / median['off'] * 100:+.1f} % (model "
        f"{fake.READ_S * 1e6:g} us); one repeat's counting pass {pass_s * 1e3:,.2f} ms "
        f"({cycles:,.0f} cycles/call); {BLOCK * BLOCKS} calls each, interleaved"
    )
    benchmark.pedantic(lambda: None, rounds=1)
