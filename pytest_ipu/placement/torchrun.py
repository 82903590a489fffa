"""torchrun: one pytest run per rank, a process group for the benchmarks, and lock-step timing.

``torchrun --nproc-per-node=N [--nnodes=M --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT] -m pytest
...`` starts N x M copies of the pytest run. Each learns who it is from the environment torchrun
sets for its workers (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``GROUP_RANK``, ``TORCHELASTIC_RUN_ID``, ``MASTER_ADDR``, ``MASTER_PORT``); ``detect`` reads them
into a ``TorchrunRank``.

``RankGroup`` opens the process group once per run (``env://``: torchrun's rendezvous store),
with two groups: the default one for the benchmarks' own collectives (gloo on the CPU, NCCL for
CUDA tensors where torch has it) and a gloo group of pytest-ipu's own, for barriers that name the
ranks that did not arrive (``monitored_barrier``), the agreement on round counts and the gathering
of every rank's results. torch is imported only here, and only under torchrun.

Every rank writes its own ``--benchmark-json`` file (``rank_json_path``); rank 0 also writes the
merged document of the launch (``placement.poprun.merge``, shared with PopRun) to the given path.
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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pytest_ipu.placement import outputs

#: The longest ``RankGroup.close`` waits for the process group's teardown, seconds.
CLOSE_WAIT_S = 30.0

#: Where a rank's ``as_json()`` goes: ``machine_info["ipu"][KEY]`` and each record's ``KEY``.
KEY = "torchrun"

#: The variables torchrun sets for every worker that ``detect`` needs, and the field each gives.
_VARIABLES: Mapping[str, str] = {
    "index": "RANK",
    "count": "WORLD_SIZE",
    "local_index": "LOCAL_RANK",
    "local_count": "LOCAL_WORLD_SIZE",
    "node": "GROUP_RANK",
}


@dataclass(frozen=True)
class TorchrunRank:
    """This process's place in a torchrun launch: rank ``index`` of ``count`` (the world size),
    ``local_index`` of the ``local_count`` ranks on its node, and the node (torchrun's group rank)."""

    index: int
    count: int
    local_index: int
    local_count: int
    node: int
    run_id: str = ""

    @property
    def nodes(self) -> int:
        """Nodes of the launch, when every node runs the same number of ranks (torchrun's rule)."""
        return self.count // self.local_count

    def as_json(self) -> dict[str, Any]:
        """Plain JSON for ``machine_info["ipu"]["torchrun"]`` and each record's ``"torchrun"``."""
        return {
            "index": self.index,
            "count": self.count,
            "local_index": self.local_index,
            "local_count": self.local_count,
            "node": self.node,
            "run_id": self.run_id,
        }


def detect(environ: Mapping[str, str] | None = None) -> TorchrunRank | None:
    """This process's ``TorchrunRank``, or ``None`` when torchrun did not start it.

    A process is under torchrun when ``TORCHELASTIC_RUN_ID`` is set (torchrun's agent sets it for
    its workers, and a user's shell does not). Raises ``ValueError`` naming the variable and its
    value when one is missing or not a number, or when the rank is not below the world size.
    """
    env = os.environ if environ is None else environ
    if "TORCHELASTIC_RUN_ID" not in env:
        return None
    values: dict[str, int] = {}
    for field, name in _VARIABLES.items():
        text = env.get(name)
        try:
            values[field] = int(text if text is not None else "")
        except ValueError:
            raise ValueError(
                f"{name}={text!r} in the environment: torchrun sets it to a whole number for every worker; "
                "start pytest as `torchrun ... -m pytest`, not by hand with TORCHELASTIC_RUN_ID set"
            ) from None
    rank = TorchrunRank(run_id=env["TORCHELASTIC_RUN_ID"], **values)
    if not (0 <= rank.index < rank.count and 0 <= rank.local_index < rank.local_count <= rank.count):
        raise ValueError(
            f"RANK={rank.index}, WORLD_SIZE={rank.count}, LOCAL_RANK={rank.local_index}, "
            f"LOCAL_WORLD_SIZE={rank.local_count}: not one rank of a launch; start pytest with torchrun"
        )
    return rank


def rank_json_path(path: Path, rank: TorchrunRank) -> Path:
    """``results/run.json`` -> ``results/run.rank-0-of-2.json``: one file per rank (unchanged when
    ``path`` already names this rank)."""
    return outputs.tagged(path, _tag(rank))


def configure_json_path(option: Any, rank: TorchrunRank) -> Path | None:
    """Give this rank its own output files; the path the merged document goes to (``None``
    without ``--benchmark-json``). The saved-run names (``--benchmark-save``/``-autosave``) gain
    ``.rank-R-of-N`` so ranks saving into one storage never pick the same file."""
    return outputs.tag_outputs(option, _tag(rank))


def _tag(rank: TorchrunRank) -> str:
    return f".rank-{rank.index}-of-{rank.count}"


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
            detail = " ".join(str(exc).split())
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
            raise RankError(
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

        detail = " ".join(str(exc).split())
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
