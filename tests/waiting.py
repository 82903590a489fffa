"""Waiting in a test for something another thread or process does, with a hang guard.

The bound is there to end a test that would otherwise hang, never to say how fast anything is: it is
generous (a loaded CI machine is slow, not stuck), and it is checked only after the condition, so a
test that was descheduled past the bound still passes if what it waited for happened meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

#: How long a wait lasts before the test calls it a hang, seconds.
HANG_S = 120.0


def wait_for(
    condition: Callable[[], object], what: str, *, hang_s: float = HANG_S, poll_s: float = 0.01
) -> None:
    """Return once ``condition()`` is true; fail the test naming ``what`` was awaited if it is still
    false after ``hang_s``. ``condition`` may itself assert (that a process it waits on still runs)."""
    deadline = time.monotonic() + hang_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll_s)
    # One last look: the wait may have been descheduled past the deadline after it came true.
    if not condition():
        pytest.fail(f"waited {hang_s:g} s for {what} (a hang guard: it never happened)", pytrace=False)
