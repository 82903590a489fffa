"""CPU contention from /proc: shares between two snapshots of a fake /proc tree, and merging."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_ipu.measure.contention import ContentionProbe
from pytest_ipu.measure.contention import ContentionRecord
from pytest_ipu.measure.contention import merge
from pytest_ipu.measure.contention import short_window_reason
from pytest_ipu.results import codec
from pytest_ipu.results import schema

PID = 4242

# user nice system idle iowait irq softirq steal guest guest_nice
BASE = (1000, 10, 500, 8000, 100, 5, 7, 0, 0, 0)


def cpu_line(columns: Sequence[int]) -> str:
    return "cpu  " + " ".join(str(c) for c in columns)


class FakeClock:
    """Seconds that move only when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeProc:
    """A hand-written /proc tree: /proc/stat, /proc/loadavg and /proc/<pid>/{stat,task/*/children}."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def stat(self, columns: Sequence[int], cpus: int = 4) -> None:
        lines = [cpu_line(columns)]
        # Per-CPU lines carry their own numbers; only their count matters to the probe.
        lines += [f"cpu{n} 1 2 3 4 5 6 7 8 0 0" for n in range(cpus)]
        lines += ["intr 12345 0 0", "ctxt 999", "btime 1700000000", "processes 77", "procs_running 2"]
        (self.root / "stat").write_text("\n".join(lines) + "\n")

    def loadavg(self, one: float = 0.5) -> None:
        (self.root / "loadavg").write_text(f"{one:.2f} 0.40 0.30 2/345 6789\n")

    def process(
        self,
        pid: int,
        utime: int,
        stime: int,
        cutime: int = 0,
        cstime: int = 0,
        *,
        comm: str = "python",
        children: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        """Write /proc/<pid>/stat and one children file per thread (default: the main thread, none)."""
        fields = [str(n) for n in range(3, 53)]  # placeholder values for fields 3..52
        fields[0] = "R"
        fields[14 - 3] = str(utime)
        fields[15 - 3] = str(stime)
        fields[16 - 3] = str(cutime)
        fields[17 - 3] = str(cstime)
        directory = self.root / str(pid)
        directory.mkdir(exist_ok=True)
        (directory / "stat").write_text(f"{pid} ({comm}) " + " ".join(fields) + "\n")
        threads = {pid: ()} if children is None else children
        task = directory / "task"
        if task.exists():
            for old in task.iterdir():
                (old / "children").unlink(missing_ok=True)
                old.rmdir()
        for tid, kids in threads.items():
            (task / str(tid)).mkdir(parents=True)
            # The kernel writes each child followed by a space.
            (task / str(tid) / "children").write_text("".join(f"{k} " for k in kids))

    def vanish(self, pid: int) -> None:
        directory = self.root / str(pid)
        for path in sorted(directory.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        directory.rmdir()


def shifted(base: Sequence[int], **deltas: int) -> tuple[int, ...]:
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
    out = list(base)
    for name, delta in deltas.items():
        out[names.index(name)] += delta
    return tuple(out)


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    fake = FakeProc(tmp_path / "proc")
    fake.stat(BASE)
    fake.loadavg(0.5)
    fake.process(PID, utime=200, stime=100)
    return fake


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def probe(proc: FakeProc, clock: FakeClock, threshold: float = 0.10) -> ContentionProbe:
    return ContentionProbe(threshold=threshold, proc=proc.root, clock=clock, pid=PID)


def test_others_share_is_busy_minus_own_over_total(proc: FakeProc, clock: FakeClock) -> None:
    p = probe(proc, clock)
    p.start()
    # 400 ticks over 4 CPUs: 300 busy (user 200 + system 100), 100 idle; we used 100 of them.
    proc.stat(shifted(BASE, user=200, system=100, idle=100))
    proc.process(PID, utime=260, stime=140)
    proc.loadavg(3.25)
    clock.now += 1.0
    record = p.stop()

    assert record == ContentionRecord(
        readable=True,
        reason="",
        window_s=1.0,
        cpus=4,
        others_share=0.5,
        own_share=0.25,
        steal_share=0.0,
        load_avg_1m=3.25,
        threshold=0.10,
        contended=True,
    )


def test_iowait_counts_as_idle(proc: FakeProc, clock: FakeClock) -> None:
    p = probe(proc, clock)
    p.start()
    proc.stat(shifted(BASE, user=100, iowait=200, idle=100))
    record = p.stop()
    assert record.others_share == pytest.approx(100 / 400)
    assert record.own_share == 0.0


def test_guest_columns_are_not_counted_twice(proc: FakeProc, clock: FakeClock) -> None:
    p = probe(proc, clock)
    p.start()
    # guest time is already inside user/nice; a large guest delta must change nothing.
    proc.stat(shifted(BASE, user=200, system=100, idle=100, guest=150, guest_nice=40))
    proc.process(PID, utime=260, stime=140)
    record = p.stop()
    assert record.others_share == 0.5
    assert record.own_share == 0.25


def test_steal_is_in_the_total_but_not_busy(proc: FakeProc, clock: FakeClock) -> None:
    p = probe(proc, clock)
    p.start()
    proc.stat(shifted(BASE, user=200, system=60, idle=100, steal=40))
    proc.process(PID, utime=260, stime=100)
    record = p.stop()
    # total 400, busy 260, own 60: others 200/400; steal 40/400.
    assert record.others_share == 0.5
    assert record.own_share == pytest.approx(0.15)
    assert record.steal_share == pytest.approx(0.1)


@pytest.mark.parametrize("columns", [7, 4])
def test_kernel_without_steal_column(proc: FakeProc, clock: FakeClock, columns: int) -> None:
    proc.stat(BASE[:columns])
    p = probe(proc, clock)
    p.start()
    proc.stat(shifted(BASE, user=200, system=100, idle=100)[:columns])
    proc.process(PID, utime=260, stime=140)
    record = p.stop()
    assert record.readable
    assert record.steal_share is None
    assert record.others_share == 0.5
    assert record.reason == ""


def test_comm_with_spaces_and_parentheses(proc: FakeProc, clock: FakeClock) -> None:
    proc.process(PID, utime=200, stime=100, comm="evil) (name) 1 2 3")
    p = probe(proc, clock)
    p.start()
    proc.stat(shifted(BASE, user=200, system=100, idle=100))
    proc.process(PID, utime=260, stime=140, comm="evil) (name) 1 2 3")
    record = p.stop()
    assert record.own_share == 0.25
    assert record.others_share == 0.5


def test_cutime_and_cstime_of_waited_children_count(proc: FakeProc, clock: FakeClock) -> None:
    p = probe(proc, clock)
    p.start()
    proc.stat(shifted(BASE, user=300, system=100))
    # Self used 20 ticks; children that exited and were waited for used 50 + 30.
    proc.process(PID, utime=210, stime=110, cutime=50, cstime=30)
    record = p.stop()
    assert record.own_share == 100 / 400
    assert record.others_share == 300 / 400


def test_descendants_appearing_during_the_window_count(proc: FakeProc, clock: FakeClock) -> None:
    p = probe(proc, clock)
    p.start()
    proc.stat(shifted(BASE, user=300, system=100))
    # A worker started during the window, listed under a non-main thread; it has a grandchild.
    proc.process(PID, utime=210, stime=100, children={PID: [], PID + 1: [5000]})
    proc.process(5000, utime=30, stime=10, children={5000: [5001]})
    proc.process(5001, utime=25, stime=5, cutime=20)
    record = p.stop()
    own = 10 + 40 + 30 + 20
    assert record.own_share == own / 400
    assert record.others_share == (400 - own) / 400


def test_descendant_reaped_during_the_window_moves_into_cutime(proc: FakeProc, clock: FakeClock) -> None:
    proc.process(PID, utime=200, stime=100, children={PID: [5000]})
    proc.process(5000, utime=40, stime=10)
    p = probe(proc, clock)
    p.start()
    proc.stat(shifted(BASE, user=300, system=100))
    # The worker ran 30 more ticks (50 -> 80 in all), exited, and we waited for it.
    proc.vanish(5000)
    proc.process(PID, utime=210, stime=100, cutime=60, cstime=20)
    record = p.stop()
    assert record.own_share == (10 + 30) / 400


def test_descendant_vanishing_unreaped_never_makes_own_time_negative(
    proc: FakeProc, clock: FakeClock
) -> None:
    proc.process(PID, utime=200, stime=100, children={PID: [5000]})
    proc.process(5000, utime=400, stime=100)
    p = probe(proc, clock)
    p.start()
    proc.stat(shifted(BASE, user=200, system=100, idle=100))
    # Reparented away (or reaped elsewhere): its 500 ticks leave our sum.
    proc.vanish(5000)
    proc.process(PID, utime=210, stime=100)
    record = p.stop()
    assert record.own_share == 0.0
    assert record.others_share == 300 / 400


def test_listed_child_without_a_stat_file_is_skipped(proc: FakeProc, clock: FakeClock) -> None:
    p = probe(proc, clock)
    p.start()
    proc.stat(shifted(BASE, user=200, system=100, idle=100))
    proc.process(PID, utime=260, stime=140, children={PID: [5000, 5001]})
    # 5000 exited between the children read and its stat read; 5001 has a garbled stat.
    (proc.root / "5001").mkdir()
    (proc.root / "5001" / "stat").write_text("5001 no comm here\n")
    record = p.stop()
    assert record.readable
    assert record.own_share == 0.25


def test_others_share_is_clamped_at_zero(proc: FakeProc, clock: FakeClock) -> None:
    p = probe(proc, clock)
    p.start()
    # Per-process times are precise, /proc/stat is tick-sampled: own may exceed busy a little.
    proc.stat(shifted(BASE, user=100, idle=300))
    proc.process(PID, utime=310, stime=100)
    record = p.stop()
    assert record.others_share == 0.0
    assert record.own_share == 110 / 400
    assert not record.contended


@pytest.mark.parametrize(("threshold", "contended"), [(0.10, True), (0.5, False), (0.6, False)])
def test_contended_is_strictly_above_threshold(
    proc: FakeProc, clock: FakeClock, threshold: float, contended: bool
) -> None:
    p = probe(proc, clock, threshold=threshold)
    p.start()
    proc.stat(shifted(BASE, user=200, system=100, idle=100))
    proc.process(PID, utime=260, stime=140)
    record = p.stop()
    assert record.others_share == 0.5
    assert record.threshold == threshold
    assert record.contended is contended


def test_threshold_outside_zero_to_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="threshold"):
        ContentionProbe(threshold=1.5, proc=tmp_path)


def test_zero_tick_window_cannot_be_judged(proc: FakeProc, clock: FakeClock) -> None:
    p = probe(proc, clock)
    p.start()
    clock.now += 0.004
    record = p.stop()
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    assert record.reason == f"window too short for /proc/stat's {tick_ms:g} ms ticks"
    assert record.reason == short_window_reason()
    assert record.readable
    assert record.others_share is None
    assert record.own_share is None
    assert record.steal_share is None
    assert not record.contended
    assert record.window_s == pytest.approx(0.004)
    assert record.cpus == 4
    assert record.load_avg_1m == 0.5


def test_nonexistent_proc_is_unreadable(tmp_path: Path, clock: FakeClock) -> None:
    missing = tmp_path / "no-proc"
    p = ContentionProbe(proc=missing, clock=clock, pid=PID)
    p.start()
    record = p.stop()
    assert record == ContentionRecord(
        readable=False, reason=f"{missing}/stat is not readable here (not Linux?)", threshold=0.10
    )


def test_proc_disappearing_before_stop_is_unreadable(proc: FakeProc, clock: FakeClock) -> None:
    p = probe(proc, clock)
    p.start()
    (proc.root / "stat").unlink()
    record = p.stop()
    assert not record.readable
    assert "is not readable here" in record.reason
    assert record.others_share is None
    assert record.window_s is None
    assert record.cpus is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("cpu  1 2 x 4\ncpu0 1 2 3 4\n", "cannot parse the cpu line"),
        ("cpu  1 2 3\ncpu0 1 2 3 4\n", "columns"),
        ("cpu0 1 2 3 4\n", "no aggregate cpu line"),
        ("cpu  1 2 3 4\n", "no cpuN lines"),
    ],
)
def test_garbled_proc_stat_is_unreadable(proc: FakeProc, clock: FakeClock, text: str, fragment: str) -> None:
    (proc.root / "stat").write_text(text)
    p = probe(proc, clock)
    p.start()
    record = p.stop()
    assert not record.readable
    assert fragment in record.reason
    assert record.cpus is None


def test_missing_own_stat_is_unreadable(proc: FakeProc, clock: FakeClock) -> None:
    p = ContentionProbe(proc=proc.root, clock=clock, pid=PID + 7)
    p.start()
    record = p.stop()
    assert not record.readable
    assert f"{PID + 7}/stat is not readable" in record.reason


def test_garbled_own_stat_is_unreadable(proc: FakeProc, clock: FakeClock) -> None:
    (proc.root / str(PID) / "stat").write_text(f"{PID} (python) R 1 2\n")
    p = probe(proc, clock)
    p.start()
    record = p.stop()
    assert not record.readable
    assert "cannot parse" in record.reason


def test_stop_needs_a_start_each_time(proc: FakeProc, clock: FakeClock) -> None:
    p = probe(proc, clock)
    assert p.stop() == ContentionRecord(readable=False, reason="stop() called without start()")
    p.start()
    proc.stat(shifted(BASE, user=400))
    assert p.stop().readable
    assert not p.stop().readable


def test_missing_children_files_are_noted_not_fatal(proc: FakeProc, clock: FakeClock) -> None:
    p = probe(proc, clock)
    p.start()
    proc.stat(shifted(BASE, user=200, system=100, idle=100))
    proc.process(PID, utime=260, stime=140)
    (proc.root / str(PID) / "task" / str(PID) / "children").unlink()
    record = p.stop()
    assert record.readable
    assert record.others_share == 0.5
    assert "children is missing" in record.reason


def test_missing_loadavg_is_noted_not_fatal(proc: FakeProc, clock: FakeClock) -> None:
    p = probe(proc, clock)
    p.start()
    proc.stat(shifted(BASE, user=200, system=100, idle=100))
    (proc.root / "loadavg").unlink()
    record = p.stop()
    assert record.readable
    assert record.load_avg_1m is None
    assert record.others_share is not None
    assert "loadavg" in record.reason


def rec(window_s: float, others: float | None, **kw: object) -> ContentionRecord:
    fields: dict[str, object] = {
        "readable": True,
        "window_s": window_s,
        "cpus": 4,
        "others_share": others,
        "own_share": 0.25,
        "steal_share": 0.0,
        "load_avg_1m": 1.0,
        "contended": others is not None and others > 0.10,
    }
    fields.update(kw)
    return ContentionRecord(**fields)  # type: ignore[arg-type]


def test_merge_weights_shares_by_window() -> None:
    merged = merge(
        [
            rec(1.0, 0.02, own_share=0.8, steal_share=0.04, load_avg_1m=2.0, cpus=8),
            rec(3.0, 0.06, own_share=0.4, steal_share=None, load_avg_1m=5.0, cpus=16),
        ]
    )
    assert merged.readable
    assert merged.reason == ""
    assert merged.window_s == 4.0
    assert merged.others_share == pytest.approx((0.02 * 1 + 0.06 * 3) / 4)
    assert merged.own_share == pytest.approx((0.8 * 1 + 0.4 * 3) / 4)
    # Only the window that reported steal counts for steal.
    assert merged.steal_share == pytest.approx(0.04)
    assert merged.load_avg_1m == 5.0
    assert merged.cpus == 8
    assert not merged.contended


def test_merge_is_contended_if_any_window_was() -> None:
    merged = merge([rec(10.0, 0.0), rec(0.1, 0.9)])
    assert merged.others_share == pytest.approx(0.09 / 10.1)
    assert merged.contended


def test_merge_skips_windows_too_short_to_judge() -> None:
    short = rec(0.001, None, own_share=None, steal_share=None, reason=short_window_reason())
    merged = merge([short, rec(2.0, 0.3)])
    assert merged.others_share == pytest.approx(0.3)
    assert merged.reason == ""
    only_short = merge([short, short])
    assert only_short.readable
    assert only_short.others_share is None
    assert only_short.reason == short_window_reason()


def test_merge_with_an_unreadable_window_is_unreadable() -> None:
    merged = merge(
        [
            rec(1.0, 0.5),
            ContentionRecord(readable=False, reason="first"),
            ContentionRecord(readable=False, reason="second"),
        ]
    )
    assert merged == ContentionRecord(readable=False, reason="first")


def test_merge_of_nothing_is_unreadable() -> None:
    merged = merge([])
    assert not merged.readable
    assert merged.reason


def _read(data: Mapping[str, object]) -> ContentionRecord:
    return codec.from_json(ContentionRecord, data, "contention.")


@pytest.mark.parametrize(
    "record",
    [
        rec(1.5, 0.25, reason="loadavg is not readable", threshold=0.2),
        ContentionRecord(readable=False, reason="/proc/stat is not readable here (not Linux?)"),
        ContentionRecord(readable=True, reason=short_window_reason(), window_s=0.001, cpus=2),
        merge([rec(1.0, 0.3), rec(1.0, 0.01)]),
    ],
)
def test_json_round_trip(record: ContentionRecord) -> None:
    data = codec.to_json(record)
    assert set(data) == {
        "readable",
        "reason",
        "window_s",
        "cpus",
        "others_share",
        "own_share",
        "steal_share",
        "load_avg_1m",
        "threshold",
        "contended",
        "flagged_share",
        "flagged_repeat",
    }
    assert _read(json.loads(json.dumps(data))) == record


def test_reading_tolerates_missing_optional_keys() -> None:
    assert _read({"readable": False}) == ContentionRecord(readable=False)
    assert _read({"readable": True, "others_share": 0, "cpus": 2}) == ContentionRecord(
        readable=True, others_share=0.0, cpus=2
    )


@pytest.mark.parametrize(
    "data",
    [{}, {"readable": "yes"}, {"readable": True, "others_share": "0.5"}, {"readable": True, "cpus": 2.5}],
)
def test_reading_rejects_wrong_kinds(data: dict[str, object]) -> None:
    with pytest.raises(schema.SchemaError):
        _read(data)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the real /proc")
def test_real_proc() -> None:
    p = ContentionProbe()
    p.start()
    sum(range(10_000))
    record = p.stop()
    assert record.readable, record.reason
    assert record.cpus is not None
    assert record.cpus >= 1
    assert record.window_s is not None
    if record.others_share is not None:
        assert 0.0 <= record.others_share <= 1.0
        # Others' share is what the machine's busy time leaves after ours: together at most all of it.
        assert record.own_share is not None
        assert record.others_share + record.own_share <= 1.0 + 1e-9


def test_merge_keeps_the_window_that_set_the_flag() -> None:
    """The flag is set by one window while ``others_share`` averages them all (7 % against a 10 %
    threshold, say): the merged record names the figure and the repeat that set it."""
    merged = merge([rec(10.0, 0.05), rec(1.0, 0.30), rec(1.0, 0.20), rec(10.0, 0.02)])
    assert merged.contended
    assert merged.others_share is not None
    assert merged.others_share < 0.10
    assert merged.flagged_share == pytest.approx(0.30)
    assert merged.flagged_repeat == 2
    calm = merge([rec(1.0, 0.01), rec(1.0, 0.02)])
    assert (calm.flagged_share, calm.flagged_repeat) == (None, None)
