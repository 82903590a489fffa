"""Block for a while without releasing the GIL, as a C++ binding that keeps it does.

PopTorch's ``poptorch_core.execute`` holds the GIL for a whole device run, and PopART's
``InferenceSession.prepareDevice`` for a whole compile (``shared/reference/graphcore-sdk-api.md``
section 7.2): no other Python thread of the process runs meanwhile. ``time.sleep`` releases the GIL,
so a fake that slept would hide exactly that. ``hold_gil`` blocks in one C call made through
``ctypes.PyDLL``, which, unlike ``ctypes.CDLL``, keeps the GIL for the duration of the call.

On Linux the call is libc's ``clock_nanosleep`` on ``CLOCK_MONOTONIC`` (the clock of
``time.monotonic_ns``) until an absolute deadline, so the returned span ends exactly where the hold
is known to have lasted: no thread can have run between the deadline and a clock read taken after
the call returns, because none was taken. A signal that wakes the call early (``EINTR``) only
repeats it, to the same deadline. Elsewhere it is ``nanosleep`` (POSIX) or kernel32's ``Sleep``.
"""

from __future__ import annotations

import ctypes
import errno
import sys
import time
from typing import Any

_NS = 1_000_000_000
#: ``CLOCK_MONOTONIC`` and ``TIMER_ABSTIME`` as Linux's <time.h> defines them.
_CLOCK_MONOTONIC = 1
_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _libc_function(name: str) -> Any:
    try:
        # The symbols of the running process, libc's among them; PyDLL: called with the GIL held.
        return getattr(ctypes.PyDLL(None), name)
    except (AttributeError, OSError):
        return None


_CLOCK_NANOSLEEP = _libc_function("clock_nanosleep") if sys.platform.startswith("linux") else None
_NANOSLEEP = None if sys.platform == "win32" else _libc_function("nanosleep")


def hold_gil(seconds: float) -> tuple[int, int]:
    """Block for ``seconds`` with the GIL held; the span as ``time.monotonic_ns`` values.

    The GIL is held from just after the first value (one bytecode later) to at least the second.
    ``ValueError`` for a negative or non-finite duration; 0 returns at once (an empty span).
    """
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"hold_gil(seconds={seconds!r}): a duration is a finite number of seconds >= 0")
    start = time.monotonic_ns()
    deadline = start + round(seconds * _NS)
    if seconds == 0:
        return start, start
    if _CLOCK_NANOSLEEP is not None:
        until = _Timespec(deadline // _NS, deadline % _NS)
        while _CLOCK_NANOSLEEP(_CLOCK_MONOTONIC, _TIMER_ABSTIME, ctypes.byref(until), None) == errno.EINTR:
            pass
        return start, deadline
    if _NANOSLEEP is not None:  # pragma: no cover - POSIX systems other than Linux
        ns = deadline - start
        request, left = _Timespec(ns // _NS, ns % _NS), _Timespec(0, 0)
        while _NANOSLEEP(ctypes.byref(request), ctypes.byref(left)) != 0 and (left.tv_sec or left.tv_nsec):
            request = _Timespec(left.tv_sec, left.tv_nsec)
        return start, time.monotonic_ns()
    ctypes.PyDLL("kernel32").Sleep(ctypes.c_uint32(max(1, round(seconds * 1000))))  # pragma: no cover
    return start, time.monotonic_ns()  # pragma: no cover
