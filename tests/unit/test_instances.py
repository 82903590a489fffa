"""Concurrent instances (pytest_ipu.placement.instances): threads over fake compiled models whose calls sleep
(sleeping releases the GIL, as a device call does), and worker processes over the runtime-free
backend of tests/fakes/fake_backend.py. Worker tests are few: each starts interpreters.

No test here bounds how long anything takes: the suite runs on busy shared machines. Concurrency is
shown by barriers that calls can only pass together, timing by a clock the test drives, and
timeouts by a clock the test moves; the real waits that remain only guard against a hang.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backports import zip_strict
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import CompileError
from pytest_ipu.placement.instances import InstanceError
from pytest_ipu.placement.instances import InstanceInfo
from pytest_ipu.placement.instances import InstanceSpec
from pytest_ipu.placement.instances import ProcessInstances
from pytest_ipu.placement.instances import ThreadInstances

fake_backend = importlib.import_module("tests.fakes.fake_backend")
FakeBackend = fake_backend.FakeBackend
Doubler = fake_backend.Doubler
ROOT = Path(__file__).resolve().parents[2]
#: How long a test waits for something that must happen before it calls it a hang.
HANG_S = 60.0


class ThreadClock:
    """A nanosecond clock per thread that moves only when a fake call advances it: what an instance
    times around a call is then exactly what the call said it took."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __call__(self) -> int:
        return getattr(self._local, "ns", 0)

    def advance(self, seconds: float) -> None:
        self._local.ns = self() + round(seconds * 1e9)


class FakeModel:
    """One instance's compiled model: ``run`` takes ``delay_s`` and returns (index, prepared inputs).

    A call sleeps ``delay_s``, or advances ``clock`` by it (for the calling thread only) when one is
    given. ``meet``: a barrier every call waits at before returning, so that a round can only finish
    when every instance's call was in flight at once. ``hold``: an event every call waits for.
    ``on_call`` runs at the start of every call. ``close`` records whether a call was still running.
    """

    def __init__(
        self,
        index: int,
        delay_s: float = 0.0,
        fail_on_calls: tuple[int, ...] = (),
        close_error: Exception | None = None,
        *,
        clock: ThreadClock | None = None,
        meet: threading.Barrier | None = None,
        hold: threading.Event | None = None,
        on_call: Callable[[], None] | None = None,
    ) -> None:
        self.index = index
        self.delay_s = delay_s
        self.fail_on_calls = fail_on_calls
        self.close_error = close_error
        self.clock = clock
        self.meet = meet
        self.hold = hold
        self.on_call = on_call
        self.calls = 0
        self.closes = 0
        self.running = 0
        self.closed_while_running = False
        self.prepared: list[tuple[object, ...]] = []
        self.run_threads: set[int] = set()

    def prepare_inputs(self, inputs: Sequence[object]) -> tuple[object, ...]:
        self.prepared.append(tuple(inputs))
        return tuple(("prepared", self.index, x) for x in inputs)

    def run(self, *args: object) -> object:
        self.calls += 1
        self.running += 1
        try:
            self.run_threads.add(threading.get_ident())
            if self.on_call is not None:
                self.on_call()
            if self.meet is not None:
                self.meet.wait(timeout=HANG_S)  # BrokenBarrierError if the others never came
            if self.hold is not None and not self.hold.wait(timeout=HANG_S):
                raise TimeoutError(f"instance {self.index}'s call was never released")
            if self.clock is not None:
                self.clock.advance(self.delay_s)
            else:
                time.sleep(self.delay_s)
        finally:
            self.running -= 1
        if self.calls in self.fail_on_calls:
            raise ValueError(f"boom on call {self.calls}")
        return (self.index, args)

    def close(self) -> None:
        self.closes += 1
        self.closed_while_running = self.closed_while_running or self.running > 0
        if self.close_error is not None:
            raise self.close_error

    def compiled(self) -> CompiledModel:
        return CompiledModel(
            target=f"fake:dev{self.index}",
            backend="fake",
            device=f"dev{self.index}",
            device_name="Fake device",
            precision="fp32",
            io="host",
            run=self.run,
            prepare_inputs=self.prepare_inputs,
            close=self.close,
            phases_s={"build": 0.5 + self.index},
            info={"slot": self.index, "tags": ["a", "b"]},
            compile_s=1.25 + self.index,
        )


def thread_group(models: Sequence[FakeModel], **kwargs: Any) -> ThreadInstances:
    return ThreadInstances([m.compiled() for m in models], **kwargs)


def instance_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("pytest-ipu-instance-")}


@pytest.fixture
def closing():
    """Groups to close after the test, whatever happened, so that no thread or worker outlives it."""
    groups: list[Any] = []
    yield groups.append
    for group in groups:
        with contextlib.suppress(InstanceError):  # the test asserted on it already
            group.close()


# -- threads --------------------------------------------------------------------------------------


def test_a_round_calls_every_instance_at_once(closing):
    # Each call waits at a barrier that opens only when both calls have reached it: a round can end
    # only if the two calls were in flight at the same time. Called one after the other, the first
    # call would wait alone until the barrier broke, and the round would raise.
    both = threading.Barrier(2)
    models = [FakeModel(0, meet=both), FakeModel(1, meet=both)]
    group = thread_group(models)
    closing(group)
    assert (group.count, group.runner) == (2, "threads")
    group.prepare(["x"])
    for _ in range(3):
        group.round()
    assert not both.broken
    assert [m.calls for m in models] == [3, 3]
    # Each call's span, timed around it, overlaps the other's of its round: each began before the
    # other ended (they met at the barrier inside both spans).
    spans = group.spans_ns()
    assert [len(x) for x in spans] == [3, 3]
    for (s0, e0), (s1, e1) in zip_strict(*spans):
        assert s0 < e1
        assert s1 < e0
    assert group.latencies_s() == [[(e - s) * 1e-9 for s, e in calls] for calls in spans]
    # One persistent thread per instance, none of them the caller's.
    assert all(len(m.run_threads) == 1 for m in models)
    assert models[0].run_threads != models[1].run_threads
    assert threading.get_ident() not in models[0].run_threads | models[1].run_threads


def test_each_instance_prepares_its_own_inputs_once_and_rounds_use_them(closing):
    models = [FakeModel(0), FakeModel(1)]
    group = thread_group(models)
    closing(group)
    with pytest.raises(RuntimeError, match=r"^call prepare\(inputs\) before round\(\)"):
        group.round()
    group.prepare(["a", "b"])
    group.round()
    group.round()
    assert [m.prepared for m in models] == [[("a", "b")], [("a", "b")]]
    assert group.call(1, ["c"]) == (1, (("prepared", 1, "c"),))
    assert models[1].prepared[-1] == ("c",)
    with pytest.raises(
        IndexError, match=r"^instance index 2 is out of range; this group has instances 0\.\.1$"
    ):
        group.call(2, ["c"])


def test_a_failing_call_is_reported_and_leaves_the_group_usable(closing):
    models = [FakeModel(0, fail_on_calls=(1,)), FakeModel(1)]
    group = thread_group(models)
    closing(group)
    with pytest.raises(
        InstanceError, match=r"^instance 0 \(fake:dev0\) failed in a call: ValueError: boom on call 1$"
    ) as info:
        group.call(0, ["x"])
    assert info.value.index == 0
    group.prepare(["x"])
    group.round()
    assert [m.calls for m in models] == [2, 1]


def test_latencies_are_per_instance_per_round_and_reset(closing, monkeypatch):
    # Each instance's thread reads a clock of its own that only its calls move: a latency is then
    # exactly the call's own duration, however busy the machine is.
    clock = ThreadClock()
    module = sys.modules[ThreadInstances.__module__]
    monkeypatch.setattr(
        module, "time", types.SimpleNamespace(perf_counter_ns=clock, monotonic=time.monotonic)
    )
    models = [FakeModel(0, delay_s=0.02, clock=clock), FakeModel(1, delay_s=0.04, clock=clock)]
    group = thread_group(models)
    closing(group)
    group.prepare([])
    for _ in range(4):
        group.round()
    group.call(0, [])  # not a round: not recorded
    first, second = group.latencies_s()
    # Each instance timed its own calls, just around them, once per round.
    assert first == pytest.approx([0.02] * 4, rel=1e-12)
    assert second == pytest.approx([0.04] * 4, rel=1e-12)
    group.reset_latencies()
    assert group.latencies_s() == [[], []]
    group.round()
    assert [len(x) for x in group.latencies_s()] == [1, 1]


def test_compiled_info_is_plain_json():
    group = thread_group([FakeModel(0), FakeModel(1)])
    try:
        infos = group.compiled_info()
    finally:
        group.close()
    assert infos[1] == InstanceInfo(
        1, "fake:dev1", "dev1", "Fake device", 2.25, {"build": 1.5}, {"slot": 1, "tags": ["a", "b"]}
    )
    data = [info.as_json() for info in infos]
    assert json.loads(json.dumps(data)) == data
    assert data[0] == {
        "index": 0,
        "target": "fake:dev0",
        "device": "dev0",
        "device_name": "Fake device",
        "compile_s": 1.25,
        "phases_s": {"build": 0.5},
        "info": {"slot": 0, "tags": ["a", "b"]},
    }


def test_an_instance_failing_is_raised_with_its_index_without_deadlock():
    models = [
        FakeModel(0, delay_s=0.01),
        FakeModel(1, delay_s=0.01, fail_on_calls=(3,)),
        FakeModel(2, delay_s=0.01),
    ]
    # A round that deadlocked would end in "did not finish round 3 within timeout_s", not this error.
    group = thread_group(models, timeout_s=HANG_S)
    try:
        group.prepare([1])
        group.round()
        group.round()
        with pytest.raises(
            InstanceError, match=r"^instance 1 \(fake:dev1\) failed in round 3: ValueError: boom on call 3$"
        ) as info:
            group.round()
        assert info.value.index == 1
        assert isinstance(info.value.__cause__, ValueError)
        # The others finished their call of that round.
        assert [m.calls for m in models] == [3, 3, 3]
        with pytest.raises(
            RuntimeError,
            match=r"^cannot run a round: this threads instance group is unusable since instance 1 "
            r"\(fake:dev1\) failed in round 3; close it and build a new one$",
        ):
            group.round()
        with pytest.raises(RuntimeError, match="unusable"):
            group.call(0, [1])
    finally:
        group.close()
    assert [m.closes for m in models] == [1, 1, 1]
    assert not instance_threads()


def test_close_joins_every_thread_and_closes_every_model_once_even_when_one_close_fails():
    before = instance_threads()
    assert not before
    models = [FakeModel(0), FakeModel(1, close_error=OSError("device gone")), FakeModel(2)]
    group = thread_group(models)
    threads = instance_threads()
    assert len(threads) == 3
    group.prepare([])
    group.round()
    with pytest.raises(
        InstanceError,
        match=r"^closing 1 instance\(s\) failed, after every instance was released: instance 1: fake:dev1 "
        r"close\(\) raised OSError: device gone$",
    ) as info:
        group.close()
    assert info.value.index == 1
    assert [m.closes for m in models] == [1, 1, 1]
    assert not any(t.is_alive() for t in threads)
    group.close()  # idempotent: nothing is closed twice, nothing raised again
    assert [m.closes for m in models] == [1, 1, 1]
    with pytest.raises(
        RuntimeError, match=r"^cannot run a round: this threads instance group was closed; build a new one$"
    ):
        group.round()


def test_a_round_that_times_out_leaves_the_group_unusable_and_close_waits_for_the_call():
    # Instance 0's call is held until the test releases it, so it is late by construction however
    # short timeout_s is and however busy the machine is; instance 1 answers at once.
    release = threading.Event()
    models = [FakeModel(0, hold=release), FakeModel(1)]
    group = thread_group(models, timeout_s=0.1)
    group.prepare([])
    try:
        with pytest.raises(
            InstanceError,
            match=r"^instance 0 \(fake:dev0\) did not finish round 1 within timeout_s=0.1; raise timeout_s",
        ) as info:
            group.round()
        assert info.value.index == 0
        with pytest.raises(RuntimeError, match="unusable since instance 0"):
            group.round()
        assert models[0].running == 1  # its call is still in flight
    finally:
        # Released while close waits for it (and, if an assert above failed, so that nothing hangs).
        timer = threading.Timer(0.2, release.set)
        timer.start()
        group.close()
        timer.join()
    assert [m.calls for m in models] == [1, 1]
    assert [m.closes for m in models] == [1, 1]
    assert not models[0].closed_while_running  # closed only after its call had ended
    assert not instance_threads()


def round_interrupted_by(group: Any, interrupt: Callable[[], None]) -> None:
    """One round of ``group`` while ``interrupt`` runs in a thread of its own, under Python's own
    SIGINT handler; the round must end in ``KeyboardInterrupt``."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupter = threading.Thread(target=interrupt)
    try:
        interrupter.start()
        with pytest.raises(KeyboardInterrupt):
            group.round()
    finally:
        interrupter.join()
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_during_a_round_still_lets_close_join_every_thread():
    # Both calls are held in flight until Ctrl-C has interrupted the round, so the interrupt always
    # comes while the round waits for them. One signal is enough: it can land just before the main
    # thread blocks in the round's wait (the calls started first), and the wait, in slices, still
    # gives the handler its turn (the test below lands it there on purpose).
    entered = [threading.Event(), threading.Event()]
    release = threading.Event()
    models = [FakeModel(i, hold=release, on_call=entered[i].set) for i in range(2)]
    group = thread_group(models)
    group.prepare([])
    main = threading.main_thread().ident
    assert main is not None
    assert main == threading.get_ident()

    def interrupt() -> None:
        # A signal sent to the main thread, as Ctrl-C in a terminal sends it.
        if all(e.wait(timeout=HANG_S) for e in entered):
            signal.pthread_kill(main, signal.SIGINT)
        else:
            release.set()  # no Ctrl-C: let the round end, and pytest.raises below fail

    try:
        round_interrupted_by(group, interrupt)
    finally:
        release.set()
    with pytest.raises(RuntimeError, match="unusable since round 1 was interrupted"):
        group.round()
    group.close()  # raises InstanceError if a thread was still running after join_timeout_s
    assert not instance_threads()
    assert [m.closes for m in models] == [1, 1]
    assert not any(m.closed_while_running for m in models)


def flag_sigint_here() -> None:
    """Raise SIGINT in this thread, not the main one: CPython's C handler only flags it, and the main
    thread runs its Python handler at its next bytecode; a wait that blocks it is not woken. That is
    what a Ctrl-C arriving just before the main thread blocks does (its last check was already made)."""
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)


def test_ctrl_c_flagged_after_the_calls_started_ends_the_round_without_waiting_for_them() -> None:
    # The call flags Ctrl-C from its own thread once it has started: the main thread, which let the
    # call start, is then in the round's wait or on its way to it. The call is held until the test
    # releases it (its hang guard aside), so a round ended by the interrupt finds it still running;
    # a wait that blocked until the call ended would raise only after the guard let the call end.
    release = threading.Event()
    models = [FakeModel(0, hold=release, on_call=flag_sigint_here)]
    group = thread_group(models)
    group.prepare([])
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            group.round()
        running = models[0].running
    finally:
        signal.signal(signal.SIGINT, previous)
        release.set()
    assert running == 1  # the round ended before its call did
    group.close()
    assert not instance_threads()
    assert models[0].closes == 1
    assert not models[0].closed_while_running


def test_an_empty_group_is_refused():
    with pytest.raises(ValueError, match=r"^ThreadInstances needs at least one compiled model, got none$"):
        ThreadInstances([])


# -- worker processes -----------------------------------------------------------------------------


def spec(index: int, model: object = None, **backend: Any) -> InstanceSpec:
    return InstanceSpec(
        index=index,
        factory=functools.partial(FakeBackend, device=f"dev{index}", **backend),
        model=Doubler() if model is None else model,
        example_inputs=(np.zeros(3),),
        precision="fp32",
    )


def alive(pid: int | None) -> bool:
    assert pid is not None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def assert_no_worker_left(pids: Sequence[int | None]) -> None:
    children = {p.pid for p in multiprocessing.active_children()}
    assert not children.intersection(pids)
    assert not [pid for pid in pids if alive(pid)]


def test_workers_compile_in_parallel_then_run_rounds_and_calls(tmp_path, closing):
    # Each worker ends its compile, and its first three calls, at a barrier between the processes
    # (tests/fakes/fake_backend.py): neither passes it before the other has arrived, so the group
    # can only start, and the rounds only finish, if the workers compile and are called at the same
    # time. One after the other, the first would wait alone until its barrier gave up.
    meet = {"meet_dir": str(tmp_path), "meet_count": 2, "meet_on_calls": (1, 2, 3)}
    group = ProcessInstances(
        [spec(0, compile_s=0.5, run_s=0.05, **meet), spec(1, compile_s=0.5, run_s=0.05, **meet)]
    )
    closing(group)
    pids = group.pids
    assert (group.count, group.runner) == (2, "processes")
    assert len(set(pids)) == 2
    assert os.getpid() not in pids
    infos = group.compiled_info()
    # The compiles overlapped in time (the monotonic clock is system-wide): each began before the
    # other ended.
    (s0, e0), (s1, e1) = [(i.info["compile_start_ns"], i.info["compile_end_ns"]) for i in infos]
    assert s0 < e1
    assert s1 < e0
    assert sorted(p.name for p in tmp_path.glob("compile.*")) == ["compile.dev0", "compile.dev1"]
    assert [i.target for i in infos] == ["fake:dev0", "fake:dev1"]
    assert [i.info["pid"] for i in infos] == pids
    # compile_s was timed in the worker around the whole compile: at least the compile's own span.
    for info, (start, end) in zip_strict(infos, [(s0, e0), (s1, e1)]):
        assert info.compile_s is not None
        assert info.compile_s >= (end - start) * 1e-9 >= 0.5
    assert infos[0].phases_s == {"sleep": 0.5}
    assert json.loads(json.dumps([i.as_json() for i in infos])) == [i.as_json() for i in infos]

    group.prepare([np.arange(3)])
    for _ in range(3):
        group.round()
    for k in (1, 2, 3):  # both workers met in each round's call
        assert sorted(p.name for p in tmp_path.glob(f"call{k}.*")) == [f"call{k}.dev0", f"call{k}.dev1"]
    latencies = group.latencies_s()
    assert [len(x) for x in latencies] == [3, 3]
    # The workers' spans (one clock for every process of the host) overlap round by round: each
    # worker's call began before the other's ended, as their barrier inside both calls demands.
    spans = group.spans_ns()
    for (s0, e0), (s1, e1) in zip_strict(*spans):
        assert s0 < e1
        assert s1 < e0
    assert latencies == [[(e - s) * 1e-9 for s, e in calls] for calls in spans]
    assert all(x >= 0.05 for calls in latencies for x in calls)  # timed around the call's 50 ms sleep
    group.reset_latencies()
    assert group.latencies_s() == [[], []]

    outputs = group.call(1, [np.array([1.0, 2.0])])
    assert isinstance(outputs, tuple)
    assert isinstance(outputs[0], np.ndarray)
    np.testing.assert_array_equal(outputs[0], [2.0, 4.0])
    assert group.latencies_s() == [[], []]

    group.close()
    group.close()
    assert_no_worker_left(pids)
    with pytest.raises(RuntimeError, match=r"^cannot run a round: this processes instance group was closed"):
        group.round()


def test_every_worker_reply_carries_its_cpu_clock_so_the_group_knows_the_workers_cpu_time(closing):
    # Worker 0's calls each spend 20 ms of CPU time; worker 1's almost none. The group's reading is
    # the workers' clocks at their latest replies: the compile report, then every answer.
    group = ProcessInstances([spec(0, burn_cpu_s=0.02), spec(1)])
    closing(group)
    ready = group.workers_cpu_ns()
    assert ready is not None
    assert ready > 0
    group.prepare([np.arange(3)])
    prepared = group.workers_cpu_ns()
    assert prepared is not None
    assert prepared >= ready
    for _ in range(3):
        group.round()
    after = group.workers_cpu_ns()
    assert after is not None
    assert after - prepared >= 3 * 20_000_000
    # A reading asks the workers nothing: it changes only with their replies.
    assert group.workers_cpu_ns() == after
    group.close()


def test_instances_in_threads_have_no_workers_cpu_time_of_their_own(closing):
    group = thread_group([FakeModel(0)])
    closing(group)
    assert group.workers_cpu_ns() is None


def test_a_compile_failure_names_the_instance_and_stops_every_worker(tmp_path):
    compiled = tmp_path / "compiled0"
    with pytest.raises(
        CompileError,
        match=r"^instance 1 of 2 could not compile Doubler in its worker process: CompileError: fake compile "
        r"of Doubler failed on dev1$",
    ):
        # Instance 0 is still compiling when instance 1 fails: it is stopped, not waited for.
        ProcessInstances([spec(0, compile_s=30.0, compiled_marker=str(compiled)), spec(1, fail="compile")])
    # Had the group waited for instance 0, its 30 s compile would have ended and left this file.
    assert not compiled.exists()
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("pytest-ipu-instance-")]


def test_a_worker_without_its_device_raises_backend_unavailable():
    with pytest.raises(
        BackendUnavailable,
        match=r"^instance 0 of 1 could not compile Doubler in its worker process: BackendUnavailable: fake "
        r"device dev0 is busy; free it$",
    ):
        ProcessInstances([spec(0, fail="unavailable")])
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("pytest-ipu-instance-")]


def test_a_failing_call_a_killed_worker_and_a_failing_close_are_reported_and_everything_released(
    tmp_path, closing
):
    marker = tmp_path / "closed0"
    group = ProcessInstances(
        [spec(0, fail_on_calls=(1, 3), close_marker=str(marker), fail="close"), spec(1), spec(2)]
    )
    closing(group)
    pids = group.pids
    # A failing call is reported; the worker answered, so the group stays usable.
    with pytest.raises(
        InstanceError,
        match=r"^instance 0 \(fake:dev0\) failed in a call: ValueError: fake run failed on call 1$",
    ):
        group.call(0, [np.ones(2)])
    group.prepare([np.ones(2)])
    group.round()
    with pytest.raises(
        InstanceError,
        match=r"^instance 0 \(fake:dev0\) failed in round 2: ValueError: fake run failed on call 3$",
    ):
        group.round()
    with pytest.raises(RuntimeError, match=r"unusable since instance 0 failed in round 2; close it"):
        group.round()
    # A worker that dies unnoticed is reported by close, which still releases every other one.
    os.kill(pids[2], signal.SIGKILL)  # type: ignore[arg-type]
    with pytest.raises(
        InstanceError,
        match=r"^closing 2 instance\(s\) failed, after every instance was released: instance 0: "
        r"fake:dev0 close\(\) raised RuntimeError: fake close failed; instance 2: its worker process "
        r"\(pid \d+, exit code -9\) ended before closing its model$",
    ):
        group.close()
    assert marker.read_text() == str(pids[0])  # the model was closed in its worker
    assert_no_worker_left(pids)


def test_a_killed_worker_fails_the_next_round_instead_of_hanging(closing):
    # Were the death not noticed, the round would end in "no reply within timeout_s", not this error.
    group = ProcessInstances([spec(0), spec(1)], timeout_s=HANG_S)
    closing(group)
    pids = group.pids
    group.prepare([np.ones(2)])
    group.round()
    os.kill(pids[1], signal.SIGKILL)  # type: ignore[arg-type]
    with pytest.raises(
        InstanceError,
        match=r"^instance 1 \(fake:dev1\) failed in round 2: its worker process \(pid \d+, exit code -9\)",
    ):
        group.round()
    group.close()  # the death was reported by the round: close raises nothing
    assert_no_worker_left(pids)


def test_ctrl_c_flagged_after_a_workers_call_started_ends_the_round_without_waiting_for_it(
    tmp_path: Path, closing: Callable[[Any], None]
) -> None:
    # The worker's first call waits at a meeting with the test (tests/fakes/fake_backend.py) that
    # the test joins only after the round was interrupted: the call's reply can only come after the
    # round has ended. Ctrl-C is flagged from another thread of this process once the call has
    # arrived at the meeting, so the main thread's wait for the reply is not woken by it.
    meeting = {"meet_dir": str(tmp_path), "meet_count": 2, "meet_on_calls": (1,)}
    (tmp_path / "compile.test").write_text("")  # the meeting at the end of the compile: the test is there
    group = ProcessInstances([spec(0, **meeting)])
    closing(group)
    group.prepare([np.ones(2)])

    def interrupt() -> None:
        arrived = tmp_path / "call1.dev0"
        deadline = time.monotonic() + HANG_S
        while not arrived.exists() and time.monotonic() < deadline:
            time.sleep(0.005)  # polls the worker's arrival; a hang guard bounds it, not the result
        if arrived.exists():  # else no Ctrl-C: the round ends as it does, and pytest.raises fails
            flag_sigint_here()

    try:
        round_interrupted_by(group, interrupt)
    finally:
        (tmp_path / "call1.test").write_text("")  # the test arrives: the call goes on and returns
    with pytest.raises(RuntimeError, match="unusable since round 1 was interrupted"):
        group.round()
    # The call's reply was still to come when the round ended: it comes now.
    assert group._workers[0].receive(HANG_S)[0] == "ok"
    pids = group.pids
    group.close()
    assert_no_worker_left(pids)


def test_a_worker_closes_its_model_and_exits_when_the_parent_end_of_its_pipe_closes(tmp_path, closing):
    marker = tmp_path / "closed"
    group = ProcessInstances([spec(0, close_marker=str(marker))])
    closing(group)
    worker = group._workers[0]
    # What the worker sees when this process dies: end-of-file on its pipe.
    worker.conn.close()
    worker.process.join(HANG_S)
    assert worker.process.exitcode == 0
    assert marker.read_text() == str(group.pids[0])
    group.close()


def test_unusable_specs_are_refused_before_any_worker_starts():
    with pytest.raises(
        ValueError, match=r"^context='fork': worker processes start with 'spawn' or 'forkserver'"
    ):
        ProcessInstances([spec(0)], context="fork")
    with pytest.raises(
        ValueError, match=r"^InstanceSpec at position 0 has index 1; indexes must be 0\.\.0 in order$"
    ):
        ProcessInstances([spec(1)])
    with pytest.raises(
        CompileError, match=r"^instance 0's InstanceSpec \(Doubler\) cannot be sent to a worker process: "
    ):
        ProcessInstances([dataclasses.replace(spec(0), factory=lambda: FakeBackend())])
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("pytest-ipu-instance-")]


def test_specs_pickle_and_outputs_reach_the_parent_as_numpy():
    from pytest_ipu.placement.instances import to_host

    assert pickle.loads(pickle.dumps(spec(0))).index == 0
    converted = to_host({"a": [np.float32(1.0), (np.zeros(2), None)], "b": 3})
    assert converted["b"] == 3
    assert isinstance(converted["a"], list)
    assert isinstance(converted["a"][1], tuple)
    torch = pytest.importorskip("torch")
    out = to_host((torch.ones(2, dtype=torch.bfloat16), [torch.zeros(1, requires_grad=True)]))
    assert out[0].dtype == np.float32
    assert isinstance(out[1][0], np.ndarray)


def test_importing_the_module_imports_no_runtime():
    code = (
        "import sys, pytest_ipu.placement.instances\n"
        "heavy = [m for m in ('torch', 'numpy', 'poptorch', 'popart', 'onnxruntime') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
