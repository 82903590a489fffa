"""A repeat's counting pass: the counts a device keeps of each call's work, read outside the timed rounds.

A read of the IPU's cycle counter runs a program of its own that copies the count to the host
(PopART's ``cycleCountTensorToHost``): a device round trip. Read after every timed round it would
land in the next round's time, so the counts are read in a pass of their own: after a repeat's
timed rounds (and its energy window), ``COUNTING_CALLS`` more calls, untimed, each followed by a
read of every counter. Every read is kept; the repeat's count is their median
(``counts.measured``), and a count that repeats exactly gives the same number every time. The
clock the count ticks at is read once, after the pass (it can drop under load).

Where the SDK itself reads the counter in every call (PopTorch), the timed rounds hold those reads
and the record's ``method`` says so (``backends.ipu.cycles``). A counter that is off gives its
reason; one whose read raises gives the SDK's message; a model that keeps none gives nothing (the
metric's reason then says so). Nothing here is ever a zero.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_ipu.backends.base import CallCounter
from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.measure.timing import CallWatch
from pytest_ipu.processes import error_text
from pytest_ipu.results import counts
from pytest_ipu.results.counts import CountRecord

#: Untimed calls of a counting pass, each followed by a read: enough to show whether a count
#: repeats exactly within the repeat, few enough to cost little beside the timed rounds.
COUNTING_CALLS = 3


def count_pass(
    compiled: CompiledModel,
    args: Sequence[object],
    *,
    calls: int = COUNTING_CALLS,
    watch: CallWatch | None = None,
    skip: str | None = None,
) -> dict[str, CountRecord]:
    """Every counter of ``compiled`` read after each of ``calls`` untimed calls on the prepared
    ``args``, by metric; a counter that is off, or fails, as its reason. ``skip`` makes no calls
    and gives every live counter that reason (a lock-step launch, whose ranks must all call)."""
    out: dict[str, CountRecord] = {}
    live: list[CallCounter] = []
    for counter in compiled.counters:
        if counter.read is None:
            out[counter.metric] = counts.not_counted(counter.reason or "the counter is off")
        elif skip is not None:
            out[counter.metric] = counts.not_counted(skip)
        else:
            live.append(counter)
    if not live:
        return out
    reads: dict[str, list[int]] = {c.metric: [] for c in live}
    failed: dict[str, str] = {}
    if watch is not None:
        watch.enter("counting call {n}")
    for _ in range(calls):
        compiled.run(*args)
        if watch is not None:
            watch.done += 1
        for counter in live:
            if counter.metric in failed or counter.read is None:
                continue
            try:
                reads[counter.metric].append(int(counter.read()))
            except Exception as exc:
                message = error_text(exc)
                failed[counter.metric] = f"reading the counter raised {type(exc).__name__}: {message}"
    for counter in live:
        if counter.metric in failed:
            out[counter.metric] = counts.not_counted(failed[counter.metric])
            continue
        hz, where = counter.clock() if counter.clock is not None else (None, "no clock for this count")
        out[counter.metric] = counts.measured(reads[counter.metric], counter.method, hz, where)
    return out
