"""The end of a torchrun rank's run: the launch's results merged on rank 0 (step 2 of
``lifecycle.Lifecycle.end_session``), and the launch left once every rank is done
(``Lifecycle.pytest_unconfigure``).

Loaded at the end of a session under torchrun only. The merge itself (``launch``) loads only when
there is something to merge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any

from pytest_ipu.errors import RankError
from pytest_ipu.errors import RanksElsewhere

if TYPE_CHECKING:
    from pytest_ipu.placement.rank_group import RankGroup
    from pytest_ipu.pytest_plugin.session import IpuSession


def finish(state: IpuSession, reporter: Any, say: Callable[[str], None]) -> None:
    """Merge the launch's results on rank 0; a failure is one red line (``say``) and a failed run."""
    if state.ranks_lost or state.merged_json is None:
        # Nothing to merge (``launch.merge`` returns too): the launch module stays unloaded, so a
        # rank that lost its peers reaches its summary before torchrun's SIGTERM for the others.
        return
    from pytest_ipu.pytest_plugin import launch
    from pytest_ipu.results.launch_merge import MergeError

    try:
        launch.merge(state, reporter)
    except (RankError, MergeError, OSError) as exc:
        # Never a merged file from part of the launch.
        state.launch_error = str(exc) if str(exc).startswith("pytest-ipu:") else f"pytest-ipu: {exc}"
        state.ranks_lost = state.ranks_lost or isinstance(exc, RankError)
        state.ranks_elsewhere = isinstance(exc, RanksElsewhere)
        say(state.launch_error)


def leave(state: IpuSession, ranks: RankGroup, status: int, say: Callable[[str], None]) -> None:
    """Leave the launch's process group, after the terminal summary (every rank first waits for the
    others: torchrun stops the whole launch as soon as one rank exits with a failure, and rank 0 may
    still be writing the merged file or its tables then); a rank that does not come is one red line.

    The rank then ends at exit, with the run's exit ``status``, without finalizing the interpreter
    (``rank_group.end_at_exit``), its output flushed first. Tearing gloo's groups down cannot be made
    safe here: a group's destructor holds the GIL while it joins a worker thread that may need the
    GIL to free the tensors of the last collective (a deadlock no timeout ends), and a worker still
    alive when the interpreter finalizes aborts the process (SIGABRT). Ending the process ends those
    threads with it."""
    try:
        if not state.ranks_lost or state.ranks_elsewhere:
            # Every peer is alive (and, when elsewhere, stopping too): a rank that exited now
            # would have torchrun stop the others before they said where they were.
            ranks.barrier("the end of every rank's run")
    except RankError as exc:
        say(str(exc))
    finally:
        # Every rank got past the last barrier (or knows a peer is gone): nothing to wait for.
        from pytest_ipu.placement import rank_group

        rank_group.end_at_exit(status)
