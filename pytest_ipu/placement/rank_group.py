"""The process group of a torchrun launch: opened once per run, lock-step timing, and leaving it.

``RankGroup`` opens the process group once per run (``env://``: torchrun's rendezvous store),
with two groups: the default one for the benchmarks' own collectives (gloo on the CPU, NCCL for
CUDA tensors where torch has it) and a gloo group of pytest-ipu's own, for barriers that name the
ranks that did not arrive (``monitored_barrier``), the agreement on round counts and the gathering
of every rank's results. torch is imported only here, and only under torchrun. Which rank this
process is, is ``placement.torchrun``'s (read at every start-up; this module loads when a launch
has ranks).
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import gc
import importlib
import os
import re
import sys
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING
from typing import Any

from pytest_ipu.processes import error_text

if TYPE_CHECKING:
    from pytest_ipu.placement.torchrun import TorchrunRank

#: The longest ``RankGroup.close`` waits for the process group's teardown, seconds.
CLOSE_WAIT_S = 30.0


@dataclass(frozen=True)
class ProcessGroup:
    """What ``ipu_process_group`` gives a test: its place in the launch and the group to train over.

    Outside torchrun: rank 0 of 1, ``distributed`` false, ``group`` and ``backend`` ``None``.
    """

    #: This process's rank (torchrun's ``RANK``).
    rank: int = 0
    #: Processes in the launch (``WORLD_SIZE``).
    world_size: int = 1
    #: This process's rank on its node (``LOCAL_RANK``): the CUDA device index to use.
    local_rank: int = 0
    #: This process's node (``GROUP_RANK``).
    node: int = 0
    #: The default group's backend (``gloo``, ``cpu:gloo,cuda:nccl``); ``None`` outside torchrun.
    backend: str | None = None
    #: The torch.distributed group (the default one), for DistributedDataParallel; ``None`` outside.
    group: Any = None

    @property
    def distributed(self) -> bool:
        """True under torchrun (even with one rank: the group exists and collectives work)."""
        return self.group is not None


class ScopedRanks:
    """A ``RankGroup`` whose barriers name the test they are in: ``the first call of repeat 1 in
    test_step[torch-cpu]``, so that ranks in different tests see that they are."""

    def __init__(self, group: RankGroup, where: str) -> None:
        self._group = group
        self._where = where

    def barrier(self, what: str) -> None:
        """``RankGroup.barrier`` at ``what`` in this test."""
        self._group.barrier(f"{what} in {self._where}")

    def agree_max(self, value: float) -> float:
        """``RankGroup.agree_max``."""
        return self._group.agree_max(value)

    def total(self, value: float) -> float:
        """``RankGroup.total``."""
        return self._group.total(value)


class RankGroup:
    """The process group of a torchrun launch, opened once per run and closed at its end.

    ``backend`` is the default group's (``gloo``, or ``cpu:gloo,cuda:nccl`` when torch has CUDA
    and NCCL); ``group`` is that group, for the benchmarks' collectives (DistributedDataParallel),
    ``None`` once closed. ``timeout_s`` bounds every wait for another rank (``--ipu-rank-timeout``).
    """

    def __init__(self, rank: TorchrunRank, timeout_s: float, torch: ModuleType | None = None) -> None:
        self.rank = rank
        self.timeout_s = timeout_s
        self._torch = torch or importlib.import_module("torch")
        self._dist: Any = importlib.import_module("torch.distributed")
        cuda = bool(self._torch.cuda.is_available()) and bool(self._dist.is_nccl_available())
        self.backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"
        if cuda and rank.local_index < self._torch.cuda.device_count():
            # torchrun's convention: each rank of a node uses the GPU of its local rank, so a target's
            # plain `cuda` (the current device) is a different GPU on each rank, and NCCL maps them.
            self._torch.cuda.set_device(rank.local_index)
        timeout = datetime.timedelta(seconds=timeout_s)
        self._dist.init_process_group(backend=self.backend, init_method="env://", timeout=timeout)
        # pytest-ipu's own waits go through a gloo group: monitored_barrier names the missing ranks
        # (gloo only), and they never queue behind the benchmarks' NCCL work.
        self._control = self._dist.new_group(backend="gloo", timeout=timeout)
        self.group: Any = self._dist.group.WORLD
        #: The thread that destroys the groups (``close``); ``None`` until then.
        self._closing: threading.Thread | None = None

    def barrier(self, what: str) -> None:
        """Wait until every rank reaches ``what``; ``RankError`` naming the ranks that did not within
        the timeout (or that failed), so one rank's hang ends the run instead of stalling it."""
        from pytest_ipu.errors import RankError

        try:
            self._dist.monitored_barrier(
                group=self._control,
                timeout=datetime.timedelta(seconds=self.timeout_s),
                wait_all_ranks=True,
            )
        except RuntimeError as exc:
            # gloo's message names the ranks ("Ranks 1 failed to pass monitoredBarrier") on rank 0;
            # the other ranks learn only that rank 0 did not answer.
            detail = error_text(exc)
            named = re.search(r"Ranks? ([\d, ]+?) failed to pass", detail)
            who = f"rank(s) {named[1]}" if named else "other rank(s)"
            raise RankError(
                f"pytest-ipu: rank {self.rank.index} of {self.rank.count} (torchrun): {who} did not reach "
                f"{what} within --ipu-rank-timeout={self.timeout_s:g}s ({detail}); the run stops here, see "
                "those ranks' output for why"
            ) from None
        # Every rank arrived at a barrier, but collectives match by order, not by name: a rank that
        # skipped a benchmark is at another one. Each says where it is, and all must agree.
        places: list[object] = [None] * self.rank.count
        try:
            self._dist.all_gather_object(places, what, group=self._control)
        except RuntimeError as exc:
            raise self._lost(f"the check that every rank is at {what}", exc) from None
        elsewhere = [f"rank {i} at {p}" for i, p in enumerate(places) if p != what]
        if elsewhere:
            from pytest_ipu.errors import RanksElsewhere

            raise RanksElsewhere(
                f"pytest-ipu: rank {self.rank.index} of {self.rank.count} (torchrun) is at {what}, but "
                f"{'; '.join(elsewhere)}: every rank must run the same benchmarks in the same order (one "
                "skipped or deselected on some ranks only, say); the run stops here"
            )

    def at(self, where: str) -> ScopedRanks:
        """This group, its waits named as being in ``where`` (a test), for ``run.benchmark.Lockstep``."""
        return ScopedRanks(self, where)

    def agree_max(self, value: float) -> float:
        """The largest ``value`` of all ranks (every rank gets the same number)."""
        return self._reduce(value, "MAX", "the agreement on a round-time estimate")

    def total(self, value: float) -> float:
        """The sum of ``value`` over every rank."""
        return self._reduce(value, "SUM", "the sum of the ranks' samples")

    def _reduce(self, value: float, op: str, what: str) -> float:
        tensor = self._torch.tensor([float(value)], dtype=self._torch.float64)
        try:
            self._dist.all_reduce(tensor, op=getattr(self._dist.ReduceOp, op), group=self._control)
        except RuntimeError as exc:
            raise self._lost(what, exc) from None
        return float(tensor.item())

    def gather(self, document: object) -> list[object] | None:
        """Every rank's ``document`` on rank 0, in rank order; ``None`` on the other ranks."""
        out: list[object] | None = [None] * self.rank.count if self.rank.index == 0 else None
        try:
            self._dist.gather_object(document, out, dst=0, group=self._control)
        except RuntimeError as exc:
            raise self._lost("the gathering of every rank's results", exc) from None
        return out

    def _lost(self, what: str, exc: RuntimeError) -> Exception:
        """A collective that failed (a peer gone, or the timeout): gloo does not say which rank."""
        from pytest_ipu.errors import RankError

        detail = error_text(exc)
        return RankError(
            f"pytest-ipu: rank {self.rank.index} of {self.rank.count} (torchrun): {what} failed ({detail}); "
            "another rank stopped or hangs: see the ranks' output for which and why"
        )

    @property
    def close_wait_s(self) -> float:
        """The longest ``close`` waits for the groups' teardown: ``CLOSE_WAIT_S``, or the rank timeout
        when that is shorter."""
        return min(self.timeout_s, CLOSE_WAIT_S)

    def close(self) -> bool:
        """Leave the launch: destroy pytest-ipu's control group, then the default group (and any group
        a test made), so that gloo's worker threads have ended before the interpreter does. Returns
        whether that finished within ``close_wait_s``; idempotent.

        A gloo worker thread can still hold the tensors of the last collective (the barrier's
        ``all_gather_object``) when the collective has returned; if it lets go of them while the
        interpreter finalizes, torch takes the GIL to free their Python objects and Python 3.8 ends
        the thread inside a C++ destructor: ``std::terminate``, a SIGABRT at exit. Destroying a group
        joins its workers, but only once nothing else holds it, so this rank's own references go
        first: the compiled training steps were closed (they let go of DistributedDataParallel),
        and the cycles those leave are collected here.

        The teardown runs in a daemon thread, waited for at most the bound: a rank that is done
        must end even when tearing the group down waits on a peer that already exited, or torchrun's
        agents would wait for it at their own exit. When it does not finish in time the caller ends
        the process with ``end_at_exit``: the interpreter must not finalize while the thread runs.
        """
        if self._closing is not None:
            return not self._closing.is_alive()
        # Handed to the thread and emptied there, so that the last reference to each group goes, and
        # its destructor (which joins the group's threads) runs, in the bounded thread.
        groups = [self._control]
        self._control = None
        self.group = None
        gc.collect()
        self._closing = threading.Thread(
            target=_destroy_groups,
            args=(self._dist, groups),
            name="pytest-ipu-process-group-close",
            daemon=True,
        )
        self._closing.start()
        self._closing.join(timeout=self.close_wait_s)
        return not self._closing.is_alive()


def _destroy_groups(dist: Any, groups: list[Any]) -> None:
    """Destroy ``groups`` (emptying the list: none survives in it) and then the default group, with
    every group left. A group a test destroyed itself is gone already."""
    while groups:
        # torch's "Invalid process group specified": destroyed already.
        with contextlib.suppress(RuntimeError, ValueError):
            dist.destroy_process_group(groups.pop())
    if dist.is_initialized():
        dist.destroy_process_group()


def end_at_exit(status: int) -> None:
    """End the process with ``status`` once Python's exit handlers have run, without finalizing the
    interpreter (``os._exit``): for a rank whose process group did not close in time (``close``),
    whose teardown thread would abort the process if it finished during finalization."""

    def end() -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)

    atexit.register(end)
