"""How much the rest of the machine competed for the CPU during a benchmark's timed window.

Linux only, from ``/proc`` (proc(5)). A snapshot at each edge of the window takes ``/proc/stat``'s
``cpu`` line, in USER_HZ ticks over the online CPUs (only its first eight columns make the total:
``guest`` and ``guest_nice`` are already in ``user`` and ``nice``; kernels before 2.6.11 print no
``steal``, before 2.5.41 nothing after ``idle``), the online CPUs (its ``cpuN`` lines), this process's
and every live descendant's ``utime + stime`` (``/proc/<pid>/stat`` fields 14, 15; descendants through
``/proc/<pid>/task/<tid>/children``) plus ``cutime + cstime`` (16, 17: children waited for), and
``/proc/loadavg``'s 1-minute load. Busy ticks are the total less idle, iowait and steal. The shares
are ratios of ticks (``SC_CLK_TCK`` only says how long one is), right within a few ticks
(``/proc/stat`` samples whole ticks, the kernel scales ``utime``/``stime`` to the precise runtime),
clamped into 0..1. Nothing raises out of ``ContentionProbe.start``/``stop``. No pytest here.

Documented in docs/numbers.md (section "Contention (contention)").
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: Where Linux mounts procfs.
DEFAULT_PROC = Path("/proc")

#: Share of the machine's CPU time taken by other processes above which a window is "contended".
DEFAULT_THRESHOLD = 0.10

# Columns of the aggregate ``cpu`` line, in the kernel's order (fs/proc/stat.c).
_IDLE, _IOWAIT, _STEAL = 3, 4, 7
# Only user..steal make the total: guest and guest_nice are already counted in user and nice.
_TOTAL_COLUMNS = 8
# user nice system idle: every kernel with /proc/stat prints at least these.
_MIN_COLUMNS = 4

# Field numbers of /proc/<pid>/stat (1-based, as proc(5) numbers them) after the comm field; the
# first field after ``(comm)`` is field 3 (state).
_FIRST_FIELD_AFTER_COMM = 3
_UTIME, _STIME, _CUTIME, _CSTIME = 14, 15, 16, 17

#: USER_HZ on every mainstream Linux architecture, used where ``sysconf`` cannot say.
_FALLBACK_CLK_TCK = 100

#: Reason given when a window spans no whole tick of ``/proc/stat``.
SHORT_WINDOW_PREFIX = "window too short for /proc/stat's"


class _Unreadable(Exception):
    """A counter could not be read or parsed; the message is the record's ``reason``."""


def clock_ticks_per_second() -> int:
    """USER_HZ, the unit of ``/proc/stat`` and ``/proc/<pid>/stat`` times (100 almost everywhere)."""
    try:
        value = os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):
        # No sysconf (Windows) or no such name: the numbers are unreadable there anyway, this only
        # words the short-window reason.
        return _FALLBACK_CLK_TCK
    return value if value > 0 else _FALLBACK_CLK_TCK


def short_window_reason() -> str:
    """The reason a record gives when its window spanned no tick, e.g. ``... 10 ms ticks``."""
    tick_ms = 1000.0 / clock_ticks_per_second()
    return f"{SHORT_WINDOW_PREFIX} {tick_ms:g} ms ticks"


@dataclass(frozen=True)
class ContentionRecord:
    """CPU contention over one timed window (or several, merged).

    Shares are fractions of the whole machine's CPU time over the window (all online CPUs
    together), 0..1. ``readable=False`` means the counters could not be read and every number is
    ``None``; a readable record may still lack shares (``reason`` says why), e.g. for a window
    shorter than one tick.
    """

    #: False when the CPU counters (`/proc`) could not be read: every figure is then `None`.
    readable: bool
    #: Why something is missing; "" when all is there.
    reason: str = ""
    #: The windows the shares cover, seconds.
    window_s: float | None = None
    #: Online CPUs.
    cpus: int | None = None
    #: Share of the machine's CPU time used by other processes, 0..1.
    others_share: float | None = None
    #: Share used by this process and its workers.
    own_share: float | None = None
    #: None where the kernel reports no steal.
    steal_share: float | None = None
    #: One-minute load average at the end of the window.
    load_avg_1m: float | None = None
    #: The `--ipu-contended` threshold, as a fraction.
    threshold: float = DEFAULT_THRESHOLD
    #: others_share > threshold; merged, true if any window's was.
    contended: bool = False
    #: Merged records only: the highest other processes' share among the windows that were contended,
    #: the figure that set ``contended`` (``others_share`` is the average over all windows).
    flagged_share: float | None = None
    #: Merged records only: which window (repeat, from 1) had ``flagged_share``.
    flagged_repeat: int | None = None


@dataclass(frozen=True)
class _Snapshot:
    """The counters at one edge of the window."""

    at_s: float
    cpu: tuple[int, ...]
    cpus: int
    own_ticks: int
    children_visible: bool
    load_avg_1m: float | None


def _read(path: Path) -> str:
    """Read a procfs file (ASCII; a comm may hold other bytes, which must not fail the read)."""
    return path.read_text(encoding="ascii", errors="replace")


def _parse_proc_stat(text: str, path: Path) -> tuple[tuple[int, ...], int]:
    """The aggregate ``cpu`` columns and the number of ``cpuN`` lines of ``/proc/stat``."""
    aggregate: tuple[int, ...] | None = None
    cpus = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name == "cpu":
            try:
                aggregate = tuple(int(column) for column in rest.split())
            except ValueError as exc:
                raise _Unreadable(f"cannot parse the cpu line of {path}: {line!r}") from exc
        elif name.startswith("cpu") and name[3:].isdigit():
            cpus += 1
    if aggregate is None:
        raise _Unreadable(f"{path} has no aggregate cpu line")
    if len(aggregate) < _MIN_COLUMNS:
        raise _Unreadable(f"the cpu line of {path} has {len(aggregate)} columns, expected at least 4")
    if cpus == 0:
        raise _Unreadable(f"{path} lists no cpuN lines")
    return aggregate, cpus


def _pid_stat_fields(text: str) -> list[str]:
    """Fields 3.. of a ``/proc/<pid>/stat`` line.

    The comm (field 2) is in parentheses and may itself hold spaces and ')', so the line is split
    at the last ')'; nothing after the comm can contain one.
    """
    head, paren, rest = text.rpartition(")")
    if not paren or "(" not in head:
        raise ValueError("no (comm) field")
    return rest.split()


def _stat_field(fields_after_comm: list[str], number: int) -> int:
    """Field ``number`` (1-based, as proc(5) numbers them) as an int."""
    return int(fields_after_comm[number - _FIRST_FIELD_AFTER_COMM])


def _read_pid_stat(path: Path) -> list[str]:
    """Fields 3.. of one process's stat file (``OSError``/``ValueError`` when gone or garbled)."""
    return _pid_stat_fields(_read(path))


def _children(proc: Path, pid: int) -> tuple[list[int], bool]:
    """Direct children of ``pid`` over all its threads, and whether any ``children`` file existed.

    ``/proc/<pid>/task/<tid>/children`` (Linux 3.5+, CONFIG_PROC_CHILDREN) lists the children each
    thread started; a worker forked from a non-main thread only appears under that thread's file.
    """
    found: list[int] = []
    visible = False
    try:
        tids = sorted(entry.name for entry in (proc / str(pid) / "task").iterdir())
    except OSError:
        # The process vanished between reads: it has no children to add.
        return found, False
    for tid in tids:
        try:
            text = _read(proc / str(pid) / "task" / tid / "children")
        except OSError:
            continue
        visible = True
        for token in text.split():
            if token.isdigit():
                found.append(int(token))
    return found, visible


def _own_ticks(proc: Path, pid: int) -> tuple[int, bool]:
    """utime+stime+cutime+cstime of ``pid`` plus utime+stime+cutime+cstime of its live descendants.

    A live descendant's cutime/cstime hold its own reaped children (a worker's subprocesses), which
    are this job's time too; once the descendant itself is reaped the kernel folds all of that into
    its parent's cutime/cstime, so nothing is counted twice within one snapshot. A descendant whose
    stat file vanishes or is garbled mid-read is skipped: it was exiting, and its time reappears in
    its parent's cutime once reaped.

    Returns the ticks and whether child lists were visible at all (if not, only ``pid`` counted).
    """
    root = proc / str(pid) / "stat"
    try:
        root_fields = _read_pid_stat(root)
    except OSError as exc:
        raise _Unreadable(f"{root} is not readable: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise _Unreadable(f"cannot parse {root}: {exc}") from exc
    try:
        total = sum(_stat_field(root_fields, n) for n in (_UTIME, _STIME, _CUTIME, _CSTIME))
    except (ValueError, IndexError) as exc:
        raise _Unreadable(f"cannot parse {root}: {exc}") from exc

    pending, visible = _children(proc, pid)
    seen = {pid}
    while pending:
        child = pending.pop()
        # A pid reused while we walk could point back up the tree; visit each pid once.
        if child in seen:
            continue
        seen.add(child)
        try:
            child_fields = _read_pid_stat(proc / str(child) / "stat")
            total += sum(_stat_field(child_fields, n) for n in (_UTIME, _STIME, _CUTIME, _CSTIME))
        except (OSError, ValueError, IndexError):
            continue
        grandchildren, _ = _children(proc, child)
        pending.extend(grandchildren)
    return total, visible


def _load_avg_1m(proc: Path) -> float | None:
    """The first number of ``/proc/loadavg``, ``None`` if it cannot be read."""
    try:
        return float(_read(proc / "loadavg").split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _snapshot(proc: Path, pid: int, clock: Callable[[], float]) -> _Snapshot:
    """Read every counter once; ``_Unreadable`` when the essential ones are missing."""
    stat_path = proc / "stat"
    try:
        stat_text = _read(stat_path)
    except OSError as exc:
        raise _Unreadable(f"{stat_path} is not readable here (not Linux?)") from exc
    # The clock and the process times are read right after /proc/stat: the walk over descendants
    # takes microseconds, far below one 10 ms tick, so the edges line up to tick resolution.
    at_s = clock()
    own, visible = _own_ticks(proc, pid)
    cpu, cpus = _parse_proc_stat(stat_text, stat_path)
    return _Snapshot(
        at_s=at_s,
        cpu=cpu,
        cpus=cpus,
        own_ticks=own,
        children_visible=visible,
        load_avg_1m=_load_avg_1m(proc),
    )


class ContentionProbe:
    """Snapshots /proc at the window's edges.

    ``proc`` is the procfs root (a fake tree in tests), ``clock`` a monotonic clock in seconds and
    ``pid`` the process whose own time is subtracted (default: this one). The files read are always
    ``proc/<pid>/...``, so a fake tree needs a directory named after the pid it is given.
    """

    def __init__(
        self,
        threshold: float = DEFAULT_THRESHOLD,
        proc: Path = DEFAULT_PROC,
        clock: Callable[[], float] = time.perf_counter,
        pid: int | None = None,
    ) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold is a share of the machine's CPU time, 0..1, not {threshold}")
        self.threshold = threshold
        self.proc = Path(proc)
        self.clock = clock
        self.pid = os.getpid() if pid is None else pid
        self._start: _Snapshot | None = None
        self._start_error: str | None = "stop() called without start()"

    def start(self) -> None:
        """Take the first snapshot; never raises (an unreadable /proc is remembered for ``stop``)."""
        self._start = None
        try:
            self._start = _snapshot(self.proc, self.pid, self.clock)
            self._start_error = None
        except _Unreadable as exc:
            self._start_error = str(exc)
        except (OSError, ValueError, IndexError) as exc:  # belt and braces: start() must not raise
            self._start_error = f"cannot read {self.proc}: {exc}"

    def stop(self) -> ContentionRecord:
        """Take the second snapshot and return the window's record; never raises."""
        start, error = self._start, self._start_error
        # One stop per start: a second stop() without a new start() must not reuse an old edge.
        self._start, self._start_error = None, "stop() called without start()"
        if start is None:
            return self._unreadable(error or "no start snapshot")
        try:
            end = _snapshot(self.proc, self.pid, self.clock)
        except _Unreadable as exc:
            return self._unreadable(str(exc))
        except (OSError, ValueError, IndexError) as exc:
            return self._unreadable(f"cannot read {self.proc}: {exc}")
        return self._record(start, end)

    def _unreadable(self, reason: str) -> ContentionRecord:
        """A record with no numbers, only why."""
        return ContentionRecord(readable=False, reason=reason, threshold=self.threshold)

    def _partly_unreadable(self, end: _Snapshot) -> list[str]:
        """What the snapshot ``end`` could not read, each with what the record lacks for it."""
        reasons: list[str] = []
        if not end.children_visible:
            reasons.append(
                f"{self.proc}/{self.pid}/task/*/children is missing: own time counts this process only"
            )
        if end.load_avg_1m is None:
            reasons.append(f"{self.proc}/loadavg is not readable")
        return reasons

    def _record(self, start: _Snapshot, end: _Snapshot) -> ContentionRecord:
        """The shares between two snapshots."""
        reasons = self._partly_unreadable(end)
        window_s = max(0.0, end.at_s - start.at_s)
        # Counters only grow; a CPU going offline mid-window can still shrink the sums, so clamp.
        total_delta = max(0, _total(end.cpu) - _total(start.cpu))
        busy_delta = max(0, _busy(end.cpu) - _busy(start.cpu))
        # A descendant that vanished unreaped (reparented away) takes its ticks with it: clamp at 0.
        own_delta = max(0, end.own_ticks - start.own_ticks)
        has_steal = len(start.cpu) > _STEAL and len(end.cpu) > _STEAL

        if total_delta == 0:
            # No tick elapsed: any share would be 0/0. Say so rather than report "uncontended".
            reasons.insert(0, short_window_reason())
            return ContentionRecord(
                readable=True,
                reason="; ".join(reasons),
                window_s=window_s,
                cpus=end.cpus,
                load_avg_1m=end.load_avg_1m,
                threshold=self.threshold,
            )

        others_share = min(1.0, max(0, busy_delta - own_delta) / total_delta)
        own_share = min(1.0, own_delta / total_delta)
        steal_share: float | None = None
        if has_steal:
            steal_delta = max(0, end.cpu[_STEAL] - start.cpu[_STEAL])
            steal_share = min(1.0, steal_delta / total_delta)
        return ContentionRecord(
            readable=True,
            reason="; ".join(reasons),
            window_s=window_s,
            cpus=end.cpus,
            others_share=others_share,
            own_share=own_share,
            steal_share=steal_share,
            load_avg_1m=end.load_avg_1m,
            threshold=self.threshold,
            contended=others_share > self.threshold,
        )


def _column(cpu: tuple[int, ...], index: int) -> int:
    """Column ``index`` of a ``/proc/stat`` cpu line, in ticks."""
    # Old kernels stop after idle (or before steal): a missing column counted nothing.
    return cpu[index] if index < len(cpu) else 0


def _total(cpu: tuple[int, ...]) -> int:
    """Every tick of a ``/proc/stat`` cpu line."""
    return sum(cpu[:_TOTAL_COLUMNS])


def _busy(cpu: tuple[int, ...]) -> int:
    """The busy ticks of a ``/proc/stat`` cpu line: all but idle, I/O wait and steal."""
    return _total(cpu) - _column(cpu, _IDLE) - _column(cpu, _IOWAIT) - _column(cpu, _STEAL)


def _weighted(
    records: Sequence[ContentionRecord], share: Callable[[ContentionRecord], float | None]
) -> float | None:
    """Mean of ``share`` over the records that have it, weighted by window length."""
    weight = 0.0
    acc = 0.0
    for record in records:
        value = share(record)
        if value is None or record.window_s is None or record.window_s <= 0:
            continue
        weight += record.window_s
        acc += value * record.window_s
    return acc / weight if weight > 0 else None


def merge(records: Sequence[ContentionRecord]) -> ContentionRecord:
    """Several windows (repeats of one benchmark) into one record.

    Shares are averaged weighted by ``window_s`` over the windows that have them (a window too short
    to judge adds nothing); the load average is the max; ``contended`` if any window was, with that
    window's share and number in ``flagged_share`` and ``flagged_repeat`` (the highest); readable
    only if all were, otherwise the first unreadable window's reason and no numbers; ``cpus`` and
    ``threshold`` from the first window; ``window_s`` the sum.
    """
    if not records:
        return ContentionRecord(readable=False, reason="no windows were measured")
    first = records[0]
    for record in records:
        if not record.readable:
            return ContentionRecord(readable=False, reason=record.reason, threshold=first.threshold)

    others_share = _weighted(records, lambda r: r.others_share)
    own_share = _weighted(records, lambda r: r.own_share)
    steal_share = _weighted(records, lambda r: r.steal_share)
    loads = [r.load_avg_1m for r in records if r.load_avg_1m is not None]
    windows = [r.window_s for r in records if r.window_s is not None]

    reasons: list[str] = []
    for record in records:
        for reason in record.reason.split("; ") if record.reason else ():
            # Short windows among judged ones only lose their weight; say so only if none was judged.
            if reason.startswith(SHORT_WINDOW_PREFIX) and others_share is not None:
                continue
            if reason not in reasons:
                reasons.append(reason)
    # The window that set the flag: the average alone can sit below the threshold.
    flagged = [
        (r.others_share, i) for i, r in enumerate(records, 1) if r.contended and r.others_share is not None
    ]
    flagged_share, flagged_repeat = max(flagged) if flagged else (None, None)
    return ContentionRecord(
        readable=True,
        reason="; ".join(reasons),
        window_s=sum(windows) if windows else None,
        cpus=first.cpus,
        others_share=others_share,
        own_share=own_share,
        steal_share=steal_share,
        load_avg_1m=max(loads) if loads else None,
        threshold=first.threshold,
        contended=any(r.contended for r in records),
        flagged_share=flagged_share,
        flagged_repeat=flagged_repeat,
    )
