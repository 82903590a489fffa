"""The one worker protocol (pytest_ipu.processes.Worker): a spawned child answering requests over a pipe,
its timeouts, its end, and how it is stopped or abandoned. No test bounds how long anything takes:
a timeout is shown on a request the child never answers, at a timeout of 0."""

from __future__ import annotations

import gc
import os
import signal

import pytest

from pytest_ipu.processes import FAILED
from pytest_ipu.processes import Worker
from pytest_ipu.processes import WorkerGone
from pytest_ipu.processes import WorkerTimeout
from tests.fakes.echo_worker import serve

#: How long a test waits for something that must happen before it calls it a hang.
HANG_S = 60.0


def alive(pid: int | None) -> bool:
    assert pid is not None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def worker():
    """A started echo worker, stopped after the test whatever happened."""
    started = Worker(serve, ("hello",), name="pytest-ipu-test-worker")
    yield started
    started.stop()


def test_a_worker_answers_requests_in_a_process_of_its_own_and_stops(worker):
    assert worker.receive(HANG_S) == ("ready", "hello", worker.pid)
    assert worker.pid != os.getpid()
    assert worker.request(("echo", [1, 2]), HANG_S) == ("ok", [1, 2], worker.pid)
    worker.stop()
    worker.stop()  # idempotent
    assert not alive(worker.pid)
    with pytest.raises(WorkerGone):
        worker.send(("echo", 3))


def test_a_request_without_an_answer_times_out_and_the_worker_still_serves(worker):
    worker.receive(HANG_S)
    with pytest.raises(WorkerTimeout):
        worker.request(("silent",), 0.0)
    assert worker.request(("echo", "after"), HANG_S) == ("ok", "after", worker.pid)


def test_a_reply_that_does_not_pickle_comes_back_as_a_failure_naming_why(worker):
    worker.receive(HANG_S)
    status, text = worker.request(("unpicklable",), HANG_S)
    assert status == FAILED
    assert text.startswith("its reply could not be pickled: ")
    assert "\n" not in text


def test_a_worker_that_ended_reads_as_gone(worker):
    worker.receive(HANG_S)
    worker.send(("exit",))
    with pytest.raises(WorkerGone):
        worker.receive(HANG_S)
    assert worker.exit_status() == f"pid {worker.pid}, exit code 0"


def test_ctrl_c_reaches_the_parent_alone(worker):
    # SIGINT sent to the child is ignored: it still answers, in order, after it.
    worker.receive(HANG_S)
    os.kill(worker.pid, signal.SIGINT)  # type: ignore[arg-type]
    assert worker.request(("echo", 1), HANG_S) == ("ok", 1, worker.pid)


def test_a_worker_never_stopped_is_abandoned_its_pipe_closed_and_it_exits_by_itself():
    worker = Worker(serve, ("bye",), name="pytest-ipu-test-worker")
    worker.receive(HANG_S)
    process = worker.process
    del worker
    gc.collect()
    # Abandoned (garbage): its pipe was closed, which the child reads as its parent gone: it
    # returned by itself (exit code 0), it was not terminated.
    assert process.exitcode == 0


def test_fork_is_refused_before_anything_starts():
    with pytest.raises(
        ValueError, match=r"^context='fork': a Worker starts with 'spawn' or 'forkserver'; fork "
    ):
        Worker(serve, ("no",), name="pytest-ipu-test-worker", context="fork")
