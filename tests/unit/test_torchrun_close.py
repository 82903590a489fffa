"""Leaving a torchrun launch (``RankGroup.close``) with a real one-rank gloo group in this process:
the groups' threads have ended when it returns, a closed training step no longer holds
DistributedDataParallel (which holds the default group), a teardown that hangs keeps the close
bounded, and ``end_at_exit`` ends a process with its status and without finalizing Python.

A gloo thread still running while the interpreter finalizes is what aborted ranks at exit
(``terminate called without an active exception``): it freed a collective's tensors then."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.backends.base import TrainingRequest
from pytest_ipu.backends.torch import TorchBackend
from pytest_ipu.placement import rank_group
from pytest_ipu.placement.rank_group import RankGroup
from pytest_ipu.placement.torchrun import TorchrunRank

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("this torch has no gloo process groups", allow_module_level=True)

#: Where Linux lists this process's threads (the gloo ones are not Python's, threading cannot see them).
TASKS = Path("/proc/self/task")


def _threads() -> set[str]:
    return {task.name for task in TASKS.iterdir()}


def _open_one_rank(monkeypatch: pytest.MonkeyPatch) -> RankGroup:
    """The group of a launch of one rank, as torchrun's environment describes it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for name, value in (
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", str(port)),
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
    ):
        monkeypatch.setenv(name, value)
    return RankGroup(TorchrunRank(index=0, count=1, local_index=0, local_count=1, node=0), timeout_s=120.0)


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[RankGroup]]:
    """Where a test keeps the groups it opens: closed, and torch.distributed left uninitialized,
    whatever the test did."""
    groups: list[RankGroup] = []
    try:
        yield groups
    finally:
        monkeypatch.undo()  # a test's stand-in for torch's destroy_process_group goes first
        for group in groups:
            group.close()
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.fixture
def one_rank(monkeypatch: pytest.MonkeyPatch, opened: list[RankGroup]) -> RankGroup:
    """A launch of one rank with its group opened."""
    opened.append(_open_one_rank(monkeypatch))
    return opened[-1]


@pytest.mark.skipif(not TASKS.is_dir(), reason="counts threads in /proc/self/task (Linux)")
def test_close_ends_the_threads_of_both_groups(
    monkeypatch: pytest.MonkeyPatch, opened: list[RankGroup]
) -> None:
    before = _threads()
    opened.append(_open_one_rank(monkeypatch))
    group = opened[-1]
    # What a run's end does: the control group's barrier (all_gather_object after it), the gather.
    group.barrier("the end of every rank's run")
    assert group.gather({"rank": 0}) == [{"rank": 0}]
    started = _threads() - before
    assert started  # gloo's workers and the store's
    assert group.close()
    # Joined, not just told to stop: not one is left to free a tensor while Python finalizes.
    assert _threads() & started == set()
    assert group.group is None
    assert not dist.is_initialized()
    assert group.close()  # once only; it says again that it finished


def test_a_closed_training_step_lets_go_of_distributed_data_parallel(
    one_rank: RankGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrappers: list[weakref.ref[Any]] = []
    ddp = torch.nn.parallel.DistributedDataParallel
    original = ddp.__init__

    def recorded(self: Any, *args: Any, **kwargs: Any) -> None:
        wrappers.append(weakref.ref(self))
        original(self, *args, **kwargs)

    monkeypatch.setattr(ddp, "__init__", recorded)
    x = torch.randn(8, 4)
    y = (x[:, 0] > 0).long()
    request = TrainingRequest(
        loss=torch.nn.functional.cross_entropy,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        gradient_accumulation=2,
        process_group=one_rank.group,
        processes=1,
    )
    step = TorchBackend(device="cpu").compile_training(torch.nn.Linear(4, 2), (x, y), "fp32", {}, request)
    del request
    step.run(*step.prepare_inputs((x, y)))
    assert len(wrappers) == 1
    assert wrappers[0]() is not None
    step.close()
    gc.collect()
    # The step itself is kept (a test's stash holds it to the end of the run), its model is not.
    assert wrappers[0]() is None
    with pytest.raises(RuntimeError, match="this training step was closed"):
        step.run(*step.prepare_inputs((x, y)))
    with pytest.raises(RuntimeError, match="this training step was closed"):
        step.evaluate(x)


def test_a_teardown_that_hangs_leaves_the_close_bounded(
    one_rank: RankGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    destroy = dist.destroy_process_group
    destroyed: list[str] = []

    def hangs(group: object = None) -> None:
        release.wait()  # a peer gone, say; until the test lets it go
        destroyed.append("the default group" if group is None else "a group")
        destroy(group)

    monkeypatch.setattr(dist, "destroy_process_group", hangs)
    one_rank.timeout_s = 0.05  # the bound: the close waits no longer than the rank timeout
    assert one_rank.close_wait_s == 0.05
    assert not one_rank.close()  # returned while the teardown still waits
    assert not one_rank.close()  # and says so again, without a second teardown
    assert destroyed == []
    release.set()
    for thread in threading.enumerate():
        if thread.name == "pytest-ipu-process-group-close":
            thread.join()
    assert one_rank.close()
    # The control group first, then the default group.
    assert destroyed == ["a group", "the default group"]
    assert not dist.is_initialized()


def test_end_at_exit_ends_with_the_status_after_the_output() -> None:
    script = (
        "import sys\n"
        "from pytest_ipu.placement import rank_group\n"
        "rank_group.end_at_exit(3)\n"
        "print('the last line', end='')\n"  # still buffered at exit: end_at_exit flushes it
        "sys.exit(0)\n"
    )
    # The package this test imported, wherever it was imported from.
    env = {**os.environ, "PYTHONPATH": str(Path(rank_group.__file__).resolve().parents[2])}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert (result.returncode, result.stdout) == (3, "the last line"), result.stderr
