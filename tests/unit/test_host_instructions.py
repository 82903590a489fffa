"""The host's user-space instructions per call (pytest_ipu.measure.instructions and its use in
pytest_ipu.run.benchmark): the perf_event_attr struct, every errno path through an injected system
call, the record and the gates that read it, and the real counter where the kernel has it."""

from __future__ import annotations

import errno
import os
import struct
import threading
from collections.abc import Sequence
from dataclasses import replace

import pytest

from pytest_ipu.backends.host import wrap_callable
from pytest_ipu.measure import instructions
from pytest_ipu.results import counts
from pytest_ipu.results import decide
from pytest_ipu.results import gates
from pytest_ipu.results import schema
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import RepeatRecord
from pytest_ipu.run.benchmark import Measurement
from pytest_ipu.run.benchmark import RepeatContext
from pytest_ipu.run.benchmark import measure
from pytest_ipu.run.benchmark import pool
from pytest_ipu.run.plan import RoundsPolicy
from tests.fakes.fake_pedantic import RecordingBenchmark

# --- the struct -------------------------------------------------------------------------------------


def test_the_attr_is_perf_event_attr_version_0_counting_user_space_instructions() -> None:
    attr = instructions.attr_bytes()
    assert len(attr) == instructions.ATTR_SIZE == 64
    # linux/perf_event.h: __u32 type, __u32 size, __u64 config, sample_period, sample_type,
    # read_format, then the flags word at byte 40, __u32 wakeup_events, __u32 bp_type, __u64 config1.
    type_, size, config = struct.unpack_from("=IIQ", attr, 0)
    assert (type_, size, config) == (0, 64, 1)  # PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS
    assert struct.unpack_from("=QQQ", attr, 16) == (0, 0, 0)  # no sampling, plain 8-byte read
    (flags,) = struct.unpack_from("=Q", attr, 40)
    bits = {name: bool(flags >> bit & 1) for name, bit in (
        ("disabled", 0), ("inherit", 1), ("pinned", 2), ("exclusive", 3), ("exclude_user", 4),
        ("exclude_kernel", 5), ("exclude_hv", 6),
    )}  # fmt: skip
    assert bits == {
        "disabled": True,
        "inherit": True,
        "pinned": False,
        "exclusive": False,
        "exclude_user": False,
        "exclude_kernel": True,
        "exclude_hv": True,
    }
    assert flags >> 7 == 0
    assert struct.unpack_from("=IIQ", attr, 48) == (0, 0, 0)


def test_the_system_call_numbers_are_linuxs_and_another_machine_is_named() -> None:
    assert instructions.SYSCALL_NUMBERS == {"x86_64": 298, "aarch64": 241}
    if os.uname().sysname == "Linux":
        with pytest.raises(instructions.CounterUnavailable, match=r"this machine \(riscv64\)"):
            instructions.system_call("riscv64")


# --- the errno paths, through an injected system call ------------------------------------------------


def _failing(code: int, after: int = 0) -> tuple[instructions.Syscall, list[int]]:
    """A system call that opens ``after`` counters (real descriptors: pipe ends) and then fails."""
    opened: list[int] = []

    def call(attr: bytes, pid: int, cpu: int, group_fd: int, flags: int) -> tuple[int, int]:
        assert (cpu, group_fd, flags) == (-1, -1, 0)  # this thread on any CPU, no group
        if len(opened) < after:
            read_end, write_end = os.pipe()
            os.close(write_end)
            opened.append(read_end)
            return read_end, 0
        return -1, code

    return call, opened


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (errno.ENOENT, "ENOENT (errno 2): the kernel has no hardware instructions event here (a VM"),
        (errno.EACCES, "perf_event_paranoid above 2"),
        (errno.EPERM, "seccomp filter"),
        (errno.ENOSYS, "no perf_event_open"),
        (errno.EOPNOTSUPP, "does not support this counter"),
        (errno.EBUSY, f"(errno {errno.EBUSY}): {os.strerror(errno.EBUSY)}"),
    ],
)
def test_a_counter_that_cannot_open_says_the_errno_and_what_it_means(code: int, says: str) -> None:
    call, _ = _failing(code)
    counter = instructions.InstructionCounter([os.getpid()], syscall=call, tasks=lambda pid: [pid])
    with pytest.raises(instructions.CounterUnavailable) as info:
        counter.open()
    assert says in str(info.value)
    assert str(info.value).startswith(f"perf_event_open failed with {errno.errorcode[code]} ")
    assert info.value.code == code


def test_a_failure_on_a_later_thread_closes_the_counters_already_open() -> None:
    call, opened = _failing(errno.EMFILE, after=2)
    counter = instructions.InstructionCounter([1], syscall=call, tasks=lambda pid: [10, 11, 12])
    with pytest.raises(instructions.CounterUnavailable, match="too many open files"):
        counter.open()
    assert len(opened) == 2
    for fd in opened:
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(fd)


def test_a_thread_that_exits_before_its_counter_is_skipped_and_no_thread_at_all_is_unavailable() -> None:
    seen: list[int] = []

    def call(attr: bytes, pid: int, cpu: int, group_fd: int, flags: int) -> tuple[int, int]:
        seen.append(pid)
        if pid == 11:
            return -1, errno.ESRCH
        read_end, write_end = os.pipe()
        os.close(write_end)
        return read_end, 0

    with instructions.InstructionCounter([1, 2], syscall=call, tasks=lambda p: [p * 10, p * 10 + 1]) as c:
        c.open()
        assert seen == [10, 11, 20, 21]  # every thread of every process, in order
        assert c.opened_threads == 3
    assert c.opened_threads == 3  # kept for the record after close
    gone = instructions.InstructionCounter([1], syscall=lambda *a: (-1, errno.ESRCH), tasks=lambda p: [p])
    with pytest.raises(instructions.CounterUnavailable, match="ESRCH"):
        gone.open()


def _pipe_end() -> int:
    """A real descriptor of this process (a pipe's read end), which ``close`` may close."""
    read_end, write_end = os.pipe()
    os.close(write_end)
    return read_end


def test_enable_zeroes_then_starts_and_read_stops_then_sums_every_threads_counter() -> None:
    fds = [_pipe_end() for _ in range(3)]
    opened = iter(fds)
    log: list[tuple[str, int]] = []
    names = {
        instructions.IOC_RESET: "reset",
        instructions.IOC_ENABLE: "enable",
        instructions.IOC_DISABLE: "disable",
    }
    counts = {fd: (i + 1) * 1000 for i, fd in enumerate(fds)}

    def read_count(fd: int) -> int:
        log.append(("read", fd))
        return counts[fd]

    with instructions.InstructionCounter(
        [7],
        syscall=lambda *a: (next(opened), 0),
        tasks=lambda p: [1, 2, 3],
        control=lambda fd, request: log.append((names[request], fd)),
        read_count=read_count,
    ) as counter:
        counter.open()
        counter.enable()
        assert log == [(step, fd) for fd in fds for step in ("reset", "enable")]
        log.clear()
        assert counter.read() == 6000
        # Every counter stops before any is read: the sum is of one stretch.
        assert log == [("disable", fd) for fd in fds] + [("read", fd) for fd in fds]
    for fd in fds:  # closed with the counter
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(fd)


def test_a_window_count_is_per_call_and_pools_every_repeats_calls() -> None:
    one = counts.over_window(12_000, 4, counts.TIMED_WINDOW, instructions.scope(1, 2))
    assert (one.per_call, one.method, one.reason, one.scope) == (
        3000.0,
        "timed window",
        None,
        "1 process, 2 threads",
    )
    assert (one.reads, one.clock_hz, one.time_s) == ((), None, None)
    two = counts.over_window(30_000, 6, counts.TIMED_WINDOW, instructions.scope(3, 5))
    pooled = counts.pool([one, two])
    # Every call of every window: not the median of the repeats' figures (3000 and 5000).
    assert (pooled.total, pooled.calls, pooled.per_call) == (42_000, 10, 4200.0)
    assert pooled.scope == "1 process, 2 threads; 3 processes, 5 threads"
    missing = counts.not_counted("the hardware counter is not available: perf_event_open failed with ENOENT")
    # A figure of some repeats would stand for all of them: the first that was not counted says why.
    assert counts.pool([one, missing, two]) == counts.not_counted(f"repeat 2: {missing.reason}")
    with pytest.raises(ValueError, match="at least one call"):
        counts.over_window(1, 0, counts.TIMED_WINDOW)
    # Written with its total, calls and scope; a count read call by call is written without them.
    assert {"total": 12_000, "calls": 4, "scope": "1 process, 2 threads"}.items() <= one.as_json().items()
    assert not {"total", "calls", "scope"} & set(
        counts.measured((5,), counts.COUNTING_PASS, None, None).as_json()
    )


# --- the record ----------------------------------------------------------------------------------------


class CallCounter:
    """An instruction counter that counts ``per_call`` instructions for every call of the model made
    between its ``enable`` and its ``read``, and logs when it is used."""

    def __init__(self, log: list[str], per_call: int, pids: Sequence[int]) -> None:
        self.log = log
        self.per_call = per_call
        self.pids = tuple(pids)
        self.opened_threads = 4
        self.start = 0

    def open(self) -> None:
        self.log.append("open")

    def enable(self) -> None:
        self.log.append("enable")
        self.start = self.log.count("call")

    def read(self) -> int:
        self.log.append("read")
        return (self.log.count("call") - self.start) * self.per_call

    def close(self) -> None:
        self.log.append("close")

    def __enter__(self) -> CallCounter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _measure(log: list[str], rounds: int = 5, index: int = 1) -> Measurement:
    timer = RecordingBenchmark()
    return measure(
        wrap_callable(lambda: log.append("call")),
        (),
        items_per_call=2,
        policy=RoundsPolicy(warmup_rounds=2, rounds=rounds, max_time_s=1.0, min_rounds=1),
        timer=timer,
        round_times_s=lambda: timer.times_s,
        meter=None,
        context=RepeatContext(index=index),
    )


def test_a_repeat_counts_the_timed_window_only_and_records_instructions_per_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log: list[str] = []
    monkeypatch.setattr(instructions, "InstructionCounter", lambda pids: CallCounter(log, 1000, pids))
    record = _measure(log, rounds=5).record
    # The first call and two warm-up calls before the counter opens; the five timed calls inside.
    assert log == ["call", "call", "call", "open", "enable", *["call"] * 5, "read", "close"]
    counted = record.counts["host_instructions"]
    assert (counted.reason, counted.total, counted.calls, counted.per_call) == (None, 5000, 5, 1000.0)
    assert (counted.method, counted.scope) == ("timed window", "1 process, 4 threads")
    assert record.repeats[0].counts["host_instructions"] == counted
    assert record.value("host_instructions") == 1000.0
    assert record.repeat_values("host_instructions") == (1000.0,)
    # Written and read back whole, in the record and in its repeat.
    back = schema.from_json(schema.to_json(record))
    assert back.counts["host_instructions"] == counted
    assert back.repeats[0].counts["host_instructions"] == counted


def test_where_the_counter_cannot_open_the_record_says_why_and_nothing_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class NoPmu:
        def __init__(self, pids: Sequence[int]) -> None:
            self.pids = tuple(pids)

        def open(self) -> None:
            raise instructions.CounterUnavailable(instructions.explain(errno.ENOENT), errno.ENOENT)

    monkeypatch.setattr(instructions, "InstructionCounter", NoPmu)
    log: list[str] = []
    record = _measure(log).record
    assert log.count("call") == 1 + 2 + 5
    counted = record.counts["host_instructions"]
    assert (counted.per_call, counted.total) == (None, None)
    assert counted.reason is not None
    assert counted.reason.startswith(
        "the hardware counter is not available: perf_event_open failed with ENOENT"
    )
    assert "ENOENT (errno 2)" in counted.reason
    assert record.value("host_instructions") is None
    assert record.why_missing("host_instructions") == f"host_instructions not counted: {counted.reason}"
    written = schema.to_json(record)
    assert "not available" in written["counts"]["host_instructions"]["reason"]
    assert schema.from_json(written).counts["host_instructions"] == counted
    # A gate on it cannot tell, says so, and does not pass.
    verdict = decide.check(gates.parse("host_instructions:+1%"), "t", record, record)
    assert verdict.outcome == decide.FAIL
    assert "not available: perf_event_open failed with ENOENT" in verdict.method


def test_pooled_repeats_count_every_repeats_window(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    monkeypatch.setattr(instructions, "InstructionCounter", lambda pids: CallCounter(log, 1000, pids))
    first = _measure(log, rounds=4)
    second = _measure(log, rounds=6, index=2)
    record = pool([first, second], "interleaved", 0.05).record
    assert record.counts["host_instructions"] == counts.over_window(
        10_000, 10, counts.TIMED_WINDOW, "1 process, 4 threads"
    )
    assert record.repeat_values("host_instructions") == (1000.0, 1000.0)


def _instruction_record(per_call: Sequence[float]) -> IpuRecord:
    """A record whose repeats counted ``per_call`` instructions per call each."""
    from tests.unit.test_schema import make_record

    base = make_record()
    repeats = tuple(
        RepeatRecord(
            i + 1,
            10,
            0.5,
            base.latency_s,
            20.0,
            counts={"host_instructions": counts.over_window(int(n * 10), 10, counts.TIMED_WINDOW)},
        )
        for i, n in enumerate(per_call)
    )
    return replace(base, repeats=repeats, counts=counts.pool_counts([r.counts for r in repeats]))


def test_a_one_percent_instructions_gate_reads_the_counts_like_any_metric() -> None:
    gate = gates.parse("host_instructions:+1%")
    assert METRICS["host_instructions"].per_repeat
    # Not a count that repeats exactly (the exact rule is the IPU cycles'): the spread decides.
    assert not METRICS["host_instructions"].exact
    assert gate.metric == "host_instructions"
    baseline = _instruction_record([1_000_000.0] * 3)
    same = _instruction_record([1_000_000.0, 1_000_100.0, 999_900.0])
    more = _instruction_record([1_050_000.0, 1_050_100.0, 1_049_900.0])
    # Counts of three repeats that agree to 0.01 %: with no run-to-run drift allowed (--ipu-drift=0,
    # or the drift of three baseline runs measured that small) a 5 % rise fails and noise passes.
    assert decide.check(gate, "t", more, baseline, drift=0.0).outcome == decide.FAIL
    assert decide.check(gate, "t", same, baseline, drift=0.0).outcome == decide.PASS
    # The default allowance is wall time's (5 %): a 1 % gate then says it cannot tell, and does not pass.
    assert decide.check(gate, "t", same, baseline).outcome == decide.INCONCLUSIVE
    bound = gates.parse("host_instructions<2M")
    assert decide.check(bound, "t", same).outcome == decide.PASS


# --- the kernel's counters --------------------------------------------------------------------------


def _work(n: int) -> int:
    return sum(i * i for i in range(n))


def _software(call: instructions.Syscall) -> instructions.Syscall:
    """The same counter as a software event (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK: the ns a
    thread ran), which kernels without a PMU have: the descriptors, inheritance, ioctl and read of
    the real path, with only the event changed."""

    def software(attr: bytes, pid: int, cpu: int, group_fd: int, flags: int) -> tuple[int, int]:
        changed = bytearray(attr)
        struct.pack_into("=I", changed, 0, 1)
        struct.pack_into("=Q", changed, 8, 0)
        return call(bytes(changed), pid, cpu, group_fd, flags)

    return software


def _real_call() -> instructions.Syscall:
    try:
        return instructions.system_call()
    except instructions.CounterUnavailable as exc:
        pytest.skip(str(exc))


def test_the_kernels_counter_path_counts_this_process_and_the_threads_it_starts() -> None:
    counter = instructions.InstructionCounter([os.getpid()], syscall=_software(_real_call()))
    try:
        counter.open()
    except instructions.CounterUnavailable as exc:
        pytest.skip(f"no software perf event here either: {exc}")
    with counter:
        assert counter.opened_threads >= 1
        counter.enable()
        done = threading.Event()

        def run() -> None:
            _work(300_000)
            done.set()

        worker = threading.Thread(target=run)
        worker.start()  # started after the counters opened: counted through inheritance
        worker.join()
        total = counter.read()
        assert done.is_set()
        assert total > 0
        assert counter.read() == total  # stopped: a second read adds nothing


def test_the_hardware_counter_counts_more_instructions_for_more_work_where_the_kernel_has_it() -> None:
    counter = instructions.InstructionCounter([os.getpid()], syscall=_real_call())
    try:
        counter.open()
    except instructions.CounterUnavailable as exc:
        pytest.skip(f"the hardware instructions counter is not available here: {exc}")
    with counter:
        counter.enable()
        _work(10_000)
        small = counter.read()
        counter.enable()
        _work(100_000)
        large = counter.read()
    assert 0 < small < large


def test_a_record_written_with_its_own_host_instructions_object_reads_them_as_a_count() -> None:
    """Files written before the host's instructions joined ``counts`` keep a ``host_instructions``
    object in the record and each repeat: it reads as ``counts["host_instructions"]``, gated as
    before, and is written back in ``counts``."""
    from tests.unit.test_schema import make_record

    base = make_record()
    one = RepeatRecord(1, base.rounds, base.window_s, base.latency_s, base.throughput_items_per_s)
    written = schema.to_json(replace(base, repeats=(one,)))
    counted = {
        "available": True,
        "per_call": 1_250_000.0,
        "total": 12_500_000,
        "calls": 10,
        "read": "window",
        "processes": 1,
        "threads": 3,
        "reason": "",
    }
    unavailable = {
        "available": False,
        "per_call": None,
        "total": None,
        "calls": 0,
        "read": "window",
        "processes": 0,
        "threads": 0,
        "reason": "perf_event_open failed with ENOENT (errno 2): no hardware instructions event here",
    }
    old = {
        **written,
        "host_instructions": counted,
        "repeats": [{**written["repeats"][0], "host_instructions": counted}],
    }
    record = schema.from_json(old)
    assert record.counts["host_instructions"] == counts.over_window(
        12_500_000, 10, counts.TIMED_WINDOW, "1 process, 3 threads"
    )
    assert record.value("host_instructions") == 1_250_000.0
    assert record.repeat_values("host_instructions") == (1_250_000.0,)
    again = schema.to_json(record)
    assert "host_instructions" not in again
    assert again["counts"]["host_instructions"]["per_call"] == 1_250_000.0
    missing = schema.from_json({**written, "host_instructions": unavailable})
    assert missing.value("host_instructions") is None
    assert missing.why_missing("host_instructions") == (
        f"host_instructions not counted: the hardware counter is not available: {unavailable['reason']}"
    )
