"""The end of a torchrun launch, on every rank: each rank's document gathered on rank 0, which
merges them (``results.launch_merge``, shared with PopRun), writes the launch's file and gates the
merged records.

Loaded by ``lifecycle`` at the end of a session under torchrun only.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING
from typing import Any

from pytest_ipu.placement import poprun  # the classes of a launch's processes, checked by the merge
from pytest_ipu.placement import torchrun
from pytest_ipu.pytest_plugin import document
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import launch_merge
from pytest_ipu.results import schema
from pytest_ipu.results.records import Measured
from pytest_ipu.results.records import group_name

if TYPE_CHECKING:
    from pytest_ipu.pytest_plugin.session import IpuSession
    from pytest_ipu.results.decide import Verdict


def merge(state: IpuSession, reporter: Any) -> None:
    """Gather every rank's document on rank 0, which merges them, writes the launch's file and gates
    the merged records.

    Every rank reaches this at the end of its session, also one that measured nothing (its
    document is ``None``: pytest-benchmark wrote no file); a rank that does not within the rank
    timeout is named (``RankError``) and the run fails: no merged file from part of a launch.
    """
    rank = state.torchrun
    merged_json = state.merged_json
    if state.ranks_lost or merged_json is None:
        return  # a rank failed or hangs (each keeps its own file), or there is nowhere to merge to
    group = state.rank_group()
    assert rank is not None
    assert group is not None
    group.barrier("the end of the run (writing the merged results)")
    documents = group.gather(state.launch_document)
    if documents is None or all(d is None for d in documents):
        return  # not rank 0, or no rank measured anything

    lacking = [str(i) for i, d in enumerate(documents) if not isinstance(d, dict)]
    if lacking:
        raise launch_merge.MergeError(
            f"torchrun rank(s) {', '.join(lacking)} of {rank.count} measured no benchmark, so there is "
            f"no merged {merged_json}: every rank must run the same benchmarks"
        )
    named = [
        (torchrun.rank_json_path(merged_json, dataclasses.replace(rank, index=i)), d)
        for i, d in enumerate(documents)
        if isinstance(d, dict)
    ]
    merged = launch_merge.merge_documents(named, poprun.IDENTITIES)
    if state.settings.scaling_baseline is not None:
        from pytest_ipu.results import scaling_baseline

        scaling_baseline.apply(merged, state.scaling_baseline(), str(state.settings.scaling_baseline))
    verdicts = _gate(state, merged)
    if verdicts:
        # The launch's verdicts in the launch's file, as a single run's are in its own: gated
        # before it is written (``compare`` and the report read them from there).
        section = merged.setdefault(benchmark_json.TOP_LEVEL_KEY, {})
        section[benchmark_json.GATES_KEY] = document.gates_json(verdicts)
    benchmark_json.write_document(merged_json, merged)
    state.launch_records = [(b["fullname"], record) for b, record in benchmark_json.ipu_entries(merged)]
    if reporter is not None:
        reporter.write_line(
            f"pytest-ipu: merged {rank.count} torchrun rank(s), {len(benchmark_json.entries(merged))} "
            f"benchmark(s), into {merged_json}"
        )


def _gate(state: IpuSession, merged: dict[str, Any]) -> tuple[Verdict, ...]:
    """The gates, on the launch's merged records: every rank's samples, the slowest rank's latency."""
    own = {m.fullname: m for m in state.measured}
    launch = [
        Measured(
            b["fullname"],
            b["name"],
            group_name(b.get("group"), b["name"]),
            schema.from_json(record),
            own[b["fullname"]].samples_s if b["fullname"] in own else (),
            own[b["fullname"]].gates if b["fullname"] in own else (),
        )
        for b, record in benchmark_json.ipu_entries(merged)
    ]
    return state.gate_check.check_launch(launch)
