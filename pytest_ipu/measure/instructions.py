"""The user-space instructions the host's CPUs retired for a benchmark: Linux's hardware counter
(``perf_event_open``, ``PERF_TYPE_HARDWARE`` / ``PERF_COUNT_HW_INSTRUCTIONS``), called through
ctypes.

``InstructionCounter`` opens one inheriting counter on every thread of every process it is given (a
counter's ``inherit`` misses threads already running) and sums them; where it cannot, ``open`` raises
``CounterUnavailable`` with the errno and what it means. The record keeps the count as any count per
call (``results.counts``), built by ``run.benchmark.host_instructions``. No kept Python library fits:
``py-perf-event`` ships wheels for Python 3.10 and later only (the Poplar SDK runs 3.8), ``cirron``
compiles C at import time and counts the calling thread only, and ``python-papi`` needs the PAPI
library built; the call is one system call and a 64-byte struct. ctypes and fcntl are imported by
the functions that use them, so importing this module loads neither.

Documented in docs/numbers.md (section "Host instructions (host_instructions)").
"""

from __future__ import annotations

import contextlib
import errno as errnos
import os
import pathlib
import platform
import sys
import typing
from collections.abc import Callable
from collections.abc import Sequence

#: The metric, and the name of the count in a record's ``counts``, these counters feed.
METRIC = "host_instructions"

#: ``perf_event_open``'s system call number on each machine Linux names (``platform.machine()``).
SYSCALL_NUMBERS = {"x86_64": 298, "aarch64": 241}

#: ``perf_event_attr.type``: a generalised hardware event.
PERF_TYPE_HARDWARE = 0
#: ``perf_event_attr.config`` of ``PERF_TYPE_HARDWARE``: retired instructions.
PERF_COUNT_HW_INSTRUCTIONS = 1
#: ``PERF_ATTR_SIZE_VER0``: the first version of the struct, every field this module sets.
ATTR_SIZE = 64
#: The bits of ``perf_event_attr``'s flags word this module sets (``linux/perf_event.h``).
FLAG_DISABLED = 1 << 0
FLAG_INHERIT = 1 << 1
FLAG_EXCLUDE_KERNEL = 1 << 5
FLAG_EXCLUDE_HV = 1 << 6
#: ``ioctl`` requests on a counter's file descriptor: ``_IO('$', 0)``, ``_IO('$', 1)``, ``_IO('$', 3)``.
IOC_ENABLE = 0x2400
IOC_DISABLE = 0x2401
IOC_RESET = 0x2403

#: What each errno of ``perf_event_open`` means for this counter, as the record says it.
ERRNO_MEANINGS = {
    errnos.ENOENT: "the kernel has no hardware instructions event here (a VM without a virtual PMU, "
    "or a CPU whose PMU Linux does not drive)",
    errnos.ENODEV: "this CPU has no instructions counter",
    errnos.EOPNOTSUPP: "the CPU's PMU does not support this counter",
    errnos.EACCES: "the kernel forbids user-space counting (/proc/sys/kernel/perf_event_paranoid above 2 "
    "needs CAP_PERFMON)",
    errnos.EPERM: "perf_event_open is not permitted (a container's seccomp filter, or "
    "/proc/sys/kernel/perf_event_paranoid)",
    errnos.ENOSYS: "the kernel has no perf_event_open (built without perf events, or a seccomp filter)",
    errnos.ESRCH: "a process to count exited before its counter opened",
    errnos.EMFILE: "too many open files for one counter per thread",
    errnos.EINVAL: "the kernel rejected the counter's attributes",
}


class CounterUnavailable(Exception):
    """The instructions counter cannot be opened here; ``str()`` says why (the errno and what it
    means), ``code`` is the errno (``None`` where no system call was made)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def scope(processes: int, threads: int) -> str:
    """What a count of these counters covers, as the record's count says it (``1 process,
    3 threads``): the processes counted and the threads given a counter of their own."""
    return (
        f"{processes} process{'' if processes == 1 else 'es'}, {threads} thread{'' if threads == 1 else 's'}"
    )


def attr_bytes() -> bytes:
    """The ``perf_event_attr`` this module opens (``PERF_ATTR_SIZE_VER0``, native byte order):
    user-space retired instructions, disabled until enabled, inherited by new threads."""
    import struct

    flags = FLAG_DISABLED | FLAG_INHERIT | FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV
    # type, size, config, sample_period, sample_type, read_format, flags, wakeup_events, bp_type, config1
    return struct.pack(
        "=IIQQQQQIIQ", PERF_TYPE_HARDWARE, ATTR_SIZE, PERF_COUNT_HW_INSTRUCTIONS, 0, 0, 0, flags, 0, 0, 0
    )


#: ``perf_event_open(attr, pid, cpu, group_fd, flags)``: the new descriptor, or -1 and the errno.
Syscall = typing.Callable[[bytes, int, int, int, int], typing.Tuple[int, int]]


def system_call(machine: str | None = None) -> Syscall:
    """The real ``perf_event_open`` through libc's ``syscall``; raises ``CounterUnavailable`` where
    there is none (not Linux, or a machine with no known system call number)."""
    machine = machine if machine is not None else platform.machine()
    if not platform.system() == "Linux":
        raise CounterUnavailable(f"perf_event_open is Linux's; this is {platform.system()}")
    number = SYSCALL_NUMBERS.get(machine)
    if number is None:
        raise CounterUnavailable(
            f"no perf_event_open system call number known for this machine ({machine}); "
            f"known: {', '.join(sorted(SYSCALL_NUMBERS))}"
        )
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def call(attr: bytes, pid: int, cpu: int, group_fd: int, flags: int) -> tuple[int, int]:
        buf = ctypes.create_string_buffer(attr, len(attr))
        # syscall(2) reads every argument as a long; the kernel takes pid, cpu and group_fd as int.
        fd = libc.syscall(
            ctypes.c_long(number),
            buf,
            ctypes.c_long(pid),
            ctypes.c_long(cpu),
            ctypes.c_long(group_fd),
            ctypes.c_ulong(flags),
        )
        return int(fd), ctypes.get_errno() if fd < 0 else 0

    return call


def explain(code: int) -> str:
    """``perf_event_open`` failed with ``code``: its name, number and what it means for the counter."""
    name = errnos.errorcode.get(code, "errno")
    meaning = ERRNO_MEANINGS.get(code, os.strerror(code))
    return f"perf_event_open failed with {name} (errno {code}): {meaning}"


def threads_of(pid: int) -> list[int]:
    """The thread ids of process ``pid`` (``/proc/<pid>/task``); empty once it has exited."""
    try:
        return sorted(int(t.name) for t in pathlib.Path(f"/proc/{pid}/task").iterdir())
    except (FileNotFoundError, ProcessLookupError):
        return []


class InstructionCounter:
    """User-space instructions of every thread of ``pids`` (and the threads they start later), from
    ``enable`` to ``read``; one counter per thread, opened by ``open``.

    ``syscall`` opens one counter (``system_call()``'s by default), ``tasks`` lists a process's
    threads (``threads_of``), ``control`` is ``fcntl.ioctl`` and ``read_count`` reads a descriptor's
    count: tests inject them. Use it as a context manager: ``close`` releases every descriptor.
    """

    def __init__(
        self,
        pids: Sequence[int],
        *,
        syscall: Syscall | None = None,
        tasks: Callable[[int], Sequence[int]] = threads_of,
        control: Callable[[int, int], object] | None = None,
        read_count: Callable[[int], int] | None = None,
    ) -> None:
        self.pids = tuple(dict.fromkeys(pids))
        self._syscall = syscall
        self._tasks = tasks
        self._control = control
        self._read_count = read_count
        self._fds: list[int] = []
        self._opened = 0

    @property
    def opened_threads(self) -> int:
        """Threads given a counter of their own by ``open`` (the count stays after ``close``)."""
        return self._opened

    def open(self) -> None:
        """Open a disabled counter on every thread of every process; raises ``CounterUnavailable``
        naming the errno and its meaning (every counter opened so far is closed first). A thread
        that exits between the listing and its counter is skipped: it runs nothing more."""
        syscall = self._syscall if self._syscall is not None else system_call()
        attr = attr_bytes()
        for pid in self.pids:
            for tid in self._tasks(pid):
                fd, code = syscall(attr, tid, -1, -1, 0)
                if fd >= 0:
                    self._fds.append(fd)
                    continue
                if code == errnos.ESRCH:
                    continue
                self.close()
                raise CounterUnavailable(explain(code), code)
        if not self._fds:
            raise CounterUnavailable(explain(errnos.ESRCH), errnos.ESRCH)
        self._opened = len(self._fds)

    def enable(self) -> None:
        """Zero and start every counter (two ``ioctl`` calls each)."""
        control = self._ioctl()
        for fd in self._fds:
            control(fd, IOC_RESET)
            control(fd, IOC_ENABLE)

    def read(self) -> int:
        """Stop every counter and return their sum: the instructions since ``enable``."""
        control = self._ioctl()
        for fd in self._fds:
            control(fd, IOC_DISABLE)
        reader = self._read_count if self._read_count is not None else _read_count
        return sum(reader(fd) for fd in self._fds)

    def close(self) -> None:
        """Close every descriptor (idempotent)."""
        fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> InstructionCounter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _ioctl(self) -> Callable[[int, int], object]:
        if self._control is not None:
            return self._control
        import fcntl

        return lambda fd, request: fcntl.ioctl(fd, request, 0)


def _read_count(fd: int) -> int:
    """A counter's value: ``read`` gives 8 bytes, native order (no ``read_format`` asked)."""
    data = os.read(fd, 8)
    if len(data) != 8:
        raise OSError(f"a perf counter's read gave {len(data)} bytes, not 8")
    return int.from_bytes(data, sys.byteorder)
