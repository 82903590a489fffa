"""Counts of each call's work (the IPU's cycles, the host's user-space instructions), as a record
keeps them.

``CountRecord`` is one repeat's reading under ``counts[metric]``, or why there is none; ``pool`` joins
the repeats'; ``catalog.counted`` declares the metric a count feeds. A count is read call by call (the
device's cycles: ``run.counting``; instances in threads through ``placement.plan.group_counters``) or
once over the timed window (the host's instructions: ``measure.instructions``, kept by ``over_window``).

Documented in docs/numbers.md (sections "IPU cycles (ipu_cycles)" and "Host instructions
(host_instructions)") and docs/architecture.md (section "Questions a newcomer asks").
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field

from pytest_ipu.results.codec import Coded
from pytest_ipu.results.codec import meta

#: How ``run.benchmark`` reads a device's count: untimed calls after the timed rounds (and outside
#: the energy window), the count read after each, so a read's device round trip never lands in a
#: timed round.
COUNTING_PASS = "counting pass"
#: How ``run.benchmark`` reads the host's instructions: counters started just before the timed window
#: opens and read just after it closes, none read inside a round; the count is the window's.
TIMED_WINDOW = "timed window"


@dataclass(frozen=True)
class CountRecord(Coded):
    """One repeat's count of a call's work, or why it has none; with a clock, the device time the
    count means."""

    #: The count per call: the median of `reads`; `None` when nothing was counted (`reason`).
    per_call: float | None
    #: Why nothing was counted (the counter off, and why); `None` when counted.
    reason: str | None = None
    #: How the count was read (`counting pass`); `None` when nothing was.
    method: str | None = None
    #: Each counted call's count, in the order read.
    reads: tuple[int, ...] = ()
    #: The clock the count ticks at, Hz; `None` where it could not be read (`clock` says why).
    clock_hz: float | None = None
    #: Where the clock was read (`gcipuinfo 'clock' of IPU 0: 1330MHz`), or why it was not.
    clock: str | None = None
    #: The count over the window of `calls`, where it was read once over a window (`timed window`:
    #: `per_call` is `total / calls`); `None` (absent from the JSON) for a count read call by call.
    total: int | None = field(default=None, metadata=meta(omit_if=None))
    #: The calls of that window (timed rounds); `None` (absent) for a count read call by call.
    calls: int | None = field(default=None, metadata=meta(omit_if=None))
    #: What was counted where it is more than one device (the host's instructions: `1 process,
    #: 3 threads`); `None` (absent) otherwise.
    scope: str | None = field(default=None, metadata=meta(omit_if=None))

    #: Written for readers of the file, after the key named: derived (`per_call` / `clock_hz`), never read.
    JSON_DERIVED = (("time_s", "clock"),)

    @property
    def time_s(self) -> float | None:
        """The device time the count means at the clock, seconds per call; ``None`` without both."""
        if self.per_call is None or self.clock_hz is None or self.clock_hz <= 0:
            return None
        return self.per_call / self.clock_hz


def measured(reads: Sequence[int], method: str, clock_hz: float | None, clock: str | None) -> CountRecord:
    """A repeat's count from its reads (at least one): their median per call."""
    if not reads:
        raise ValueError("a count needs at least one read")
    return CountRecord(float(statistics.median(reads)), None, method, tuple(reads), clock_hz, clock)


def over_window(total: int, calls: int, method: str, scope: str | None = None) -> CountRecord:
    """A repeat's count read once over a window of ``calls`` calls: ``total / calls`` per call, no
    single reads and no clock. Raises ``ValueError`` for no calls or a negative count."""
    if calls < 1:
        raise ValueError(f"a count per call needs at least one call, got {calls}")
    if total < 0:
        raise ValueError(f"a count must be >= 0, got {total}")
    return CountRecord(total / calls, None, method, total=total, calls=calls, scope=scope)


def not_counted(reason: str) -> CountRecord:
    """A repeat with no count, because of ``reason``."""
    return CountRecord(None, reason)


def pool(parts: Sequence[CountRecord]) -> CountRecord:
    """The repeats' readings of one count joined: the median of every read (of the repeats' counts,
    where a repeat kept no single reads), where every repeat counted (a median of some repeats would
    stand for all of them); else no count, with the reason
    (every repeat's, or the first that lacks it, named). Counts read over windows (``over_window``)
    pool as every repeat's total over every repeat's calls. The clock is the repeats' one clock;
    where they read different clocks there is none."""
    if not parts:
        raise ValueError("no repeats to pool")
    missing = [(i, p.reason or "not counted") for i, p in enumerate(parts, 1) if p.per_call is None]
    if missing:
        index, reason = missing[0]
        # One reason for every repeat is the record's; otherwise the first repeat that lacks it says.
        alike = len(missing) == len(parts) and len({r for _, r in missing}) == 1
        return not_counted(reason if alike else f"repeat {index}: {reason}")
    methods = {p.method for p in parts}
    method = parts[-1].method if len(methods) == 1 else ", ".join(sorted(str(m) for m in methods))
    scopes = {p.scope for p in parts}
    scope = parts[-1].scope if len(scopes) == 1 else "; ".join(sorted(str(x) for x in scopes))
    windows = [(p.total, p.calls) for p in parts if p.total is not None and p.calls is not None]
    if len(windows) == len(parts):
        # Every call of every window together: the repeats' figure as one longer window's.
        return over_window(sum(t for t, _ in windows), sum(c for _, c in windows), str(method), scope)
    reads = tuple(r for p in parts for r in p.reads)
    clocks = {p.clock_hz for p in parts}
    if len(clocks) == 1:
        clock_hz, clock = parts[-1].clock_hz, parts[-1].clock
    else:
        shown = ", ".join("none" if c is None else f"{c / 1e6:g} MHz" for c in sorted(clocks, key=str))
        clock_hz, clock = None, f"the repeats read different clocks ({shown}): no one device time"
    # Every read where each repeat kept its reads; else the repeats' own counts (a count a repeat
    # took without single reads, over its window, say).
    kept = all(p.reads for p in parts)
    values = reads if kept else tuple(float(p.per_call) for p in parts if p.per_call is not None)
    return CountRecord(float(statistics.median(values)), None, method, reads if kept else (), clock_hz, clock)


def pool_counts(repeats: Sequence[Mapping[str, CountRecord]]) -> dict[str, CountRecord]:
    """Every count of the repeats pooled by name (``pool``); a count some repeat lacks is not
    counted there."""
    names = dict.fromkeys(name for counts in repeats for name in counts)
    return {
        name: pool([c.get(name) or not_counted("this repeat did not read it") for c in repeats])
        for name in names
    }
