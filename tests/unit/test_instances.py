"""Concurrent instances (pytest_ipu.placement.instances): threads over fake compiled models whose calls sleep
(sleeping releases the GIL, as a device call does), and worker processes over the runtime-free
backend of tests/fakes/fake_backend.py. Worker tests are few: each starts interpreters.
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ipu.backends.base import CompiledModel
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


class FakeModel:
    """One instance's compiled model: ``run`` sleeps ``delay_s`` and returns (index, prepared inputs)."""

    def __init__(
        self,
        index: int,
        delay_s: float = 0.0,
        fail_on_calls: tuple[int, ...] = (),
        close_error: Exception | None = None,
    ) -> None:
        self.index = index
        self.delay_s = delay_s
        self.fail_on_calls = fail_on_calls
        self.close_error = close_error
        self.calls = 0
        self.closes = 0
        self.prepared: list[tuple[object, ...]] = []
        self.run_threads: set[int] = set()

    def prepare_inputs(self, inputs: Sequence[object]) -> tuple[object, ...]:
        self.prepared.append(tuple(inputs))
        return tuple(("prepared", self.index, x) for x in inputs)

    def run(self, *args: object) -> object:
        self.calls += 1
        self.run_threads.add(threading.get_ident())
        time.sleep(self.delay_s)
        if self.calls in self.fail_on_calls:
            raise ValueError(f"boom on call {self.calls}")
        return (self.index, args)

    def close(self) -> None:
        self.closes += 1
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
    models = [FakeModel(0, delay_s=0.05), FakeModel(1, delay_s=0.05)]
    group = thread_group(models)
    closing(group)
    assert (group.count, group.runner) == (2, "threads")
    group.prepare(["x"])
    walls = []
    for _ in range(3):
        start = time.perf_counter()
        group.round()
        walls.append(time.perf_counter() - start)
    # One after the other would take 0.1 s a round; together, one call's 0.05 s plus the hand-off.
    assert min(walls) < 1.6 * 0.05
    assert [m.calls for m in models] == [3, 3]
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


def test_latencies_are_per_instance_per_round_and_reset(closing):
    models = [FakeModel(0, delay_s=0.02), FakeModel(1, delay_s=0.04)]
    group = thread_group(models)
    closing(group)
    group.prepare([])
    for _ in range(4):
        group.round()
    group.call(0, [])  # not a round: not recorded
    first, second = group.latencies_s()
    assert (len(first), len(second)) == (4, 4)
    assert all(0.02 <= x < 0.2 for x in first)
    assert all(0.04 <= x < 0.2 for x in second)
    assert sorted(first)[2] < sorted(second)[2]  # each instance timed its own calls
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
    group = thread_group(models, timeout_s=10.0)
    try:
        group.prepare([1])
        group.round()
        group.round()
        start = time.perf_counter()
        with pytest.raises(
            InstanceError, match=r"^instance 1 \(fake:dev1\) failed in round 3: ValueError: boom on call 3$"
        ) as info:
            group.round()
        assert time.perf_counter() - start < 5.0
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
    models = [FakeModel(0, delay_s=0.0), FakeModel(1, delay_s=0.5)]
    group = thread_group(models, timeout_s=0.1)
    group.prepare([])
    with pytest.raises(
        InstanceError,
        match=r"^instance 1 \(fake:dev1\) did not finish round 1 within timeout_s=0.1; raise timeout_s",
    ):
        group.round()
    with pytest.raises(RuntimeError, match="unusable since instance 1"):
        group.round()
    group.close()
    assert [m.calls for m in models] == [1, 1]
    assert [m.closes for m in models] == [1, 1]  # closed only after its call had ended
    assert not instance_threads()


def test_ctrl_c_during_a_round_still_lets_close_join_every_thread():
    models = [FakeModel(0, delay_s=0.5), FakeModel(1, delay_s=0.5)]
    group = thread_group(models)
    group.prepare([])
    main = threading.main_thread().ident
    assert main == threading.get_ident()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    # A signal sent to the main thread wakes its blocking wait, as Ctrl-C in a terminal does.
    timer = threading.Timer(0.1, signal.pthread_kill, (main, signal.SIGINT))
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            group.round()
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
    with pytest.raises(RuntimeError, match="unusable since round 1 was interrupted"):
        group.round()
    start = time.perf_counter()
    group.close()
    assert time.perf_counter() - start < 5.0
    assert not instance_threads()
    assert [m.closes for m in models] == [1, 1]


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


def test_workers_compile_in_parallel_then_run_rounds_and_calls(closing):
    start = time.perf_counter()
    group = ProcessInstances([spec(0, compile_s=0.5, run_s=0.05), spec(1, compile_s=0.5, run_s=0.05)])
    started_s = time.perf_counter() - start
    closing(group)
    pids = group.pids
    assert (group.count, group.runner) == (2, "processes")
    assert len(set(pids)) == 2
    assert os.getpid() not in pids
    infos = group.compiled_info()
    # The compiles overlapped in time (the clock is system-wide), and the whole start took less than
    # one compile after the other would (plus interpreter start-up).
    (s0, e0), (s1, e1) = [(i.info["compile_start_ns"], i.info["compile_end_ns"]) for i in infos]
    assert s0 < e1
    assert s1 < e0
    assert started_s < 1.0 + 0.5
    assert [i.target for i in infos] == ["fake:dev0", "fake:dev1"]
    assert [i.info["pid"] for i in infos] == pids
    assert all(0.5 <= i.compile_s < 5.0 for i in infos)  # type: ignore[operator]
    assert infos[0].phases_s == {"sleep": 0.5}
    assert json.loads(json.dumps([i.as_json() for i in infos])) == [i.as_json() for i in infos]

    group.prepare([np.arange(3)])
    walls = []
    for _ in range(3):
        t = time.perf_counter()
        group.round()
        walls.append(time.perf_counter() - t)
    assert min(walls) < 1.6 * 0.05
    latencies = group.latencies_s()
    assert [len(x) for x in latencies] == [3, 3]
    assert all(0.05 <= x < 1.0 for calls in latencies for x in calls)
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


def test_a_compile_failure_names_the_instance_and_stops_every_worker():
    start = time.perf_counter()
    with pytest.raises(
        CompileError,
        match=r"^instance 1 of 2 could not compile Doubler in its worker process: CompileError: fake compile "
        r"of Doubler failed on dev1$",
    ):
        # Instance 0 is still compiling when instance 1 fails: it is stopped, not waited for.
        ProcessInstances([spec(0, compile_s=30.0), spec(1, fail="compile")])
    assert time.perf_counter() - start < 15.0
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
    group = ProcessInstances([spec(0), spec(1)], timeout_s=30.0)
    closing(group)
    pids = group.pids
    group.prepare([np.ones(2)])
    group.round()
    os.kill(pids[1], signal.SIGKILL)  # type: ignore[arg-type]
    start = time.perf_counter()
    with pytest.raises(
        InstanceError,
        match=r"^instance 1 \(fake:dev1\) failed in round 2: its worker process \(pid \d+, exit code -9\)",
    ):
        group.round()
    assert time.perf_counter() - start < 10.0
    group.close()  # the death was reported by the round: close raises nothing
    assert_no_worker_left(pids)


def test_a_worker_closes_its_model_and_exits_when_the_parent_end_of_its_pipe_closes(tmp_path, closing):
    marker = tmp_path / "closed"
    group = ProcessInstances([spec(0, close_marker=str(marker))])
    closing(group)
    worker = group._workers[0]
    # What the worker sees when this process dies: end-of-file on its pipe.
    worker.conn.close()
    worker.process.join(20.0)
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
    from pytest_ipu.placement.instances import _to_host

    assert pickle.loads(pickle.dumps(spec(0))).index == 0
    converted = _to_host({"a": [np.float32(1.0), (np.zeros(2), None)], "b": 3})
    assert converted["b"] == 3
    assert isinstance(converted["a"], list)
    assert isinstance(converted["a"][1], tuple)
    torch = pytest.importorskip("torch")
    out = _to_host((torch.ones(2, dtype=torch.bfloat16), [torch.zeros(1, requires_grad=True)]))
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
