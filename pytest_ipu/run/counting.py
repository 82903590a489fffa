"""A repeat's counting pass: the counts a device keeps of each call's work, read outside the timed rounds.

After a repeat's timed rounds (and its energy window), ``COUNTING_CALLS`` more calls, untimed, each
followed by a read of every counter; the repeat's count is their median (``counts.measured``), and the
clock is read once, after the pass. Where the SDK reads the counter in every call (PopTorch,
``backends.ipu.cycles``), the record's ``method`` says so. A counter that is off gives its reason, a
read that raises the SDK's message: nothing here is ever a zero.

Documented in docs/numbers.md (section "IPU cycles (ipu_cycles)").
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
