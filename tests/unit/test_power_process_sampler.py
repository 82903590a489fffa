"""Power sampling in a process of its own (pytest_ipu.power.process_sampler) and the meter's choice of
sampler, against a fake PopTorch whose calls hold the GIL as the real one's do.

Every check is an ordering, never a duration: readings whose timestamps fall strictly inside a call
that held the GIL (the fake records each call's span, tests/fakes/gil.py), readings that bracket a
window, a process that is alive or not. The achieved rates are measured by benchmarks/test_gil.py.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from pytest_ipu import processes
from pytest_ipu.power import meter as meter_module
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.power.gcipuinfo import GcIpuInfoPowerSource
from pytest_ipu.power.meter import PowerMeter
from pytest_ipu.power.meter import reads_in_a_process
from pytest_ipu.power.process_sampler import SamplerProcess
from pytest_ipu.power.process_sampler import SourceSpec
from pytest_ipu.power.process_sampler import clock_offset
from pytest_ipu.power.sampler import PowerSampler
from tests.fakes import fake_gcipuinfo
from tests.fakes.fake_power import FakePowerSource

torch = pytest.importorskip("torch")

from pytest_ipu.backends.ipu.poptorch import PopTorchBackend  # noqa: E402
from tests.fakes import fake_poptorch  # noqa: E402

#: How long one fake PopTorch call holds the GIL: many 10 ms sampling periods.
CALL_S = 0.5
BOARD = "gcipuinfo:board-0340.0004.919062"


@pytest.fixture
def gil_call():
    """One call of a model compiled by the fake PopTorch, holding the GIL for ``CALL_S``: a function
    that makes the call and returns its GIL-holding span (``time.monotonic_ns`` values)."""
    fake_poptorch.reset()
    fake_poptorch.configure(call_s=CALL_S)
    backend = PopTorchBackend(poptorch_module=fake_poptorch, torch_module=torch)
    x = torch.ones(2, 4)
    compiled = backend.compile(torch.nn.Linear(4, 2).eval(), (x,), "fp32", {})
    executor = fake_poptorch.executors[-1]
    args = compiled.prepare_inputs((x,))

    def call() -> tuple[int, int]:
        compiled.run(*args)
        return executor.device_spans[-1]

    yield call
    compiled.close()
    fake_poptorch.reset()


def c2_source() -> GcIpuInfoPowerSource:
    """gcipuinfo over a fake C2 card (board power 110 W), as the plugin tests' conftests make it."""
    module = fake_gcipuinfo.FakeGcIpuInfoModule(fake_gcipuinfo.c2_card(board_power="110.0 W"))
    return GcIpuInfoPowerSource(gcipuinfo_module=module, period_probe_polls=0)


def inside(t_ns: list[int], span: tuple[int, int]) -> list[int]:
    """The timestamps strictly inside ``span``."""
    return [t for t in t_ns if span[0] < t < span[1]]


def alive(pid: int | None) -> bool:
    return pid in {p.pid for p in multiprocessing.active_children()}


# -- the GIL -------------------------------------------------------------------------------------------


def test_ipu_power_is_read_during_a_poptorch_call_that_holds_the_gil(gil_call):
    meter = PowerMeter(c2_source(), hz=100.0, idle_s=0, clock=time.monotonic_ns)
    assert meter.sampled_in_a_process
    meter.open()
    try:
        with meter.sampling() as trace:
            span = gil_call()
        assert trace.error is None
        # A thread of this process could take at most one: a read it began before the call and
        # finished after. The sampler process is not held by this process's GIL.
        assert len(inside(trace.t_ns, span)) >= 2, (span, trace.t_ns)
        assert all(v == {BOARD: 110.0} for v in trace.values)
        assert min(trace.t_ns) < span[0]
        assert max(trace.t_ns) > span[1]
    finally:
        meter.close()


def test_a_sampling_thread_takes_no_reading_during_a_call_that_holds_the_gil(gil_call):
    source = FakePowerSource(clock=time.monotonic_ns)
    source.open()
    with PowerSampler(source, 100.0, clock=time.monotonic_ns):
        span = gil_call()
    assert inside(source.read_started_ns, span) == []
    assert min(source.read_started_ns) < span[0]
    assert max(source.read_started_ns) > span[1]


def test_the_meter_reads_ipu_power_from_a_process_and_the_others_from_a_thread():
    assert reads_in_a_process(c2_source())
    for name in ("nvml", "rapl", "fake"):
        assert not reads_in_a_process(FakePowerSource(name=name))
    assert not PowerMeter(FakePowerSource()).sampled_in_a_process
    assert PowerMeter(FakePowerSource(), in_process=True).sampled_in_a_process
    assert not PowerMeter(c2_source(), in_process=False).sampled_in_a_process


# -- the sampler process -------------------------------------------------------------------------------


def test_readings_come_back_on_the_callers_clock_and_bracket_the_window():
    shifted = 10**15  # a clock whose zero is elsewhere than the monotonic clock's

    def clock() -> int:
        return time.monotonic_ns() + shifted

    assert abs(clock_offset(clock) - shifted) < 1_000_000
    assert clock_offset(time.monotonic_ns) == 0
    process = SamplerProcess(FakePowerSource(watts={"a": 5.0, "b": 7.0}, clock=time.monotonic_ns))
    try:
        assert process.device_ids == ["a", "b"]
        with process.window(200.0, clock=clock) as trace:
            start = clock()
            time.sleep(0.05)
            end = clock()
        assert trace.error is None
        assert min(trace.t_ns) < start < end < max(trace.t_ns)
        assert trace.t_ns == sorted(trace.t_ns)
        assert all(v == {"a": 5.0, "b": 7.0} for v in trace.values)
        # A second window of the same process.
        with process.window(50.0, clock=clock) as again:
            pass
        assert len(again.t_ns) >= 2
        assert again.requested_hz == 50.0
    finally:
        process.close()
    assert not alive(process.pid)
    process.close()  # idempotent


def test_edge_readings_are_taken_by_the_process_when_asked():
    source = FakePowerSource("energy_counter", 10.0, clock=time.monotonic_ns)
    meter = PowerMeter(source, hz=2.0, idle_s=0, clock=time.monotonic_ns, in_process=True)
    meter.open()
    try:
        with meter.sampling() as trace:
            meter.mark()
            start = time.monotonic_ns()
            end = time.monotonic_ns()
            meter.mark()
        # The first reading, two edge readings and the last: the edges lie between the outer ones.
        assert len(inside(trace.t_ns, (min(trace.t_ns), max(trace.t_ns)))) >= 2
        assert any(t <= start for t in trace.t_ns)
        assert any(t >= end for t in trace.t_ns)
        record = meter.result(trace, start, max(end, start + 1), 1, rounds_fixed=True)
        assert record.measured, record.reason
        assert record.valid, record.reason
    finally:
        meter.close()


def test_a_source_that_does_not_pickle_is_refused_naming_it_and_the_fix():
    unpicklable = FakePowerSource(on_read=lambda index: None)
    with pytest.raises(
        PowerSourceError,
        match=r"^fake: the power source \(FakePowerSource\) cannot be sent to its sampler process: .*; "
        r"a source read from a sampler process must pickle before it is opened",
    ):
        SourceSpec.of(unpicklable)
    meter = PowerMeter(unpicklable, idle_s=0, in_process=True)
    with pytest.raises(PowerSourceError, match="cannot be sent to its sampler process"):
        meter.open()
    assert unpicklable.opens == 0  # refused before anything was opened


def test_a_source_that_cannot_open_in_the_process_says_why_and_leaves_no_process():
    before = {p.pid for p in multiprocessing.active_children()}
    with pytest.raises(
        PowerSourceError,
        match=r"^fake: the sampler process could not open the source: PowerSourceError: no such device$",
    ):
        SamplerProcess(FakePowerSource(open_error="no such device"))
    assert {p.pid for p in multiprocessing.active_children()} <= before


def test_a_read_that_fails_in_the_process_makes_the_window_invalid():
    process = SamplerProcess(FakePowerSource(read_error_at=1, persistent=True))
    try:
        with process.window(100.0) as trace:
            pass  # the first reading succeeds; the next one (a thread read or the last) fails
        assert isinstance(trace.error, PowerSourceError)
        assert "fake (sampler process): PowerSourceError: fake: read" in str(trace.error)
        with pytest.raises(PowerSourceError, match="the sampler process failed starting a window"):
            process.window(100.0).start()  # every read fails now, the first one too
    finally:
        process.close()


class Interrupt(KeyboardInterrupt):
    """Ctrl-C, raised where the test says."""


def test_an_interrupted_block_stops_the_window_and_the_process_serves_the_next():
    process = SamplerProcess(FakePowerSource())
    try:
        with pytest.raises(Interrupt), process.window(100.0):
            raise Interrupt
        with process.window(100.0) as trace:
            pass
        assert trace.error is None
        assert len(trace.t_ns) >= 2
    finally:
        process.close()
    assert not alive(process.pid)


def test_an_exchange_interrupted_by_ctrl_c_stops_the_process(monkeypatch):
    process = SamplerProcess(FakePowerSource())
    pid = process.pid
    sampler = process.window(100.0)
    sampler.start()

    def interrupted(conn: object, timeout_s: float | None) -> bool:
        raise Interrupt

    # Ctrl-C during the wait for the reply (the one place a worker's reply is waited for).
    monkeypatch.setattr(processes, "wait_readable", interrupted)
    with pytest.raises(Interrupt):
        sampler.stop()
    assert not alive(pid)
    monkeypatch.undo()
    with pytest.raises(
        PowerSourceError, match=r"cannot serve starting a window: ending a window was interrupted"
    ):
        process.window(100.0).start()
    process.close()


def test_closing_the_meter_stops_its_sampler_process(monkeypatch):
    made: list[SamplerProcess] = []

    class Kept(SamplerProcess):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(meter_module, "SamplerProcess", Kept)
    meter = PowerMeter(c2_source(), hz=100.0, idle_s=0.05)
    meter.open()
    (process,) = made
    assert alive(process.pid)
    assert meter.idle_w == {BOARD: pytest.approx(110.0)}  # measured through the process
    meter.close()
    assert not alive(process.pid)


def test_the_fake_gcipuinfo_module_pickles_as_its_ipus_and_settings():
    import pickle

    module = fake_gcipuinfo.FakeGcIpuInfoModule(fake_gcipuinfo.m2000(), call_latency_s=0.001)
    module.update_ok = False
    module.gcipuinfo()
    copy = pickle.loads(pickle.dumps(module))
    assert isinstance(copy, fake_gcipuinfo.FakeGcIpuInfoModule)
    assert copy.ipus == module.ipus
    assert copy.call_latency_s == 0.001
    assert copy.update_ok is False
    assert copy.events == []  # what the original recorded stays with it


def test_a_killed_sampler_process_is_named_with_its_pid_and_the_fix():
    # Killed between windows (a kill, the out-of-memory killer): the next request finds its pipe
    # broken, which must be one error naming the sampler, its process and the fix, not a bare
    # BrokenPipeError.
    process = SamplerProcess(FakePowerSource())
    pid = process.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    process._worker.process.join()
    try:
        with pytest.raises(PowerSourceError) as raised:
            process.window(100.0).start()
        assert str(raised.value) == (
            f"fake: the sampler process (pid {pid}) ended with exit code -9 before starting a window; "
            "find what ended it (a kill, the out-of-memory killer), or measure without power "
            "(--ipu-power=off)"
        )
        with pytest.raises(
            PowerSourceError, match=rf"cannot serve starting a window: it \(pid {pid}\) ended"
        ):
            process.window(100.0).start()
    finally:
        process.close()
    assert not alive(pid)
