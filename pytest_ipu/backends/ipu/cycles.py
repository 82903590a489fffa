"""The IPU's own cycle counter, as both IPU backends offer it: one option, one rule, one counter.

PopTorch compiles the counter in with ``Options().logCycleCount(True)`` and reads it with
``PoplarExecutor.cycleCount()``; PopART with ``SessionOptions.instrumentWithHardwareCycleCounter =
True`` and ``Session.getCycleCount()``. Both count the cycles of the last call's main program on
tile 0 of the first replica (a property of the compiled graph), and a read runs a program of its
own that copies the count to the host: a device round trip, which is why ``run.benchmark`` reads
it only in an untimed counting pass. The counter in the graph adds a sync and two compute sets
to every call, timed or not (docs/numbers.md says what that costs).

It is on by default on IPU hardware (the backend option ``cycle_counter``); the IPU Model has no
hardware counter (PopTorch: "You must run the model on IPU hardware"), so a simulated model never
compiles it in, and its record says so.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence

from pytest_ipu.backends.base import CallCounter
from pytest_ipu.devices.ipu_clock import read_clock
from pytest_ipu.errors import CompileError

#: The backend option that compiles the counter in (both IPU backends), and its default.
OPTION = "cycle_counter"
DEFAULT = True
#: The metric the count feeds (``results.catalog``).
METRIC = "ipu_cycles"

#: Why a simulated model has no count.
SIMULATOR = "the IPU Model simulator has no hardware cycle counter (cycle counts are IPU hardware only)"


def check(value: object, backend: str, label: str) -> bool:
    """The option's value, which must be ``True`` or ``False``; ``CompileError`` naming it otherwise."""
    if not isinstance(value, bool):
        raise CompileError(
            f"{backend} backend option {OPTION}={value!r} for {label}; use True (count the IPU's cycles "
            "per call) or False (compile without the counter)"
        )
    return value


def wanted(enabled: bool, simulator: bool) -> bool:
    """Whether the counter is compiled in: asked for, on IPU hardware."""
    return enabled and not simulator


def counter(
    read: Callable[[], int], enabled: bool, simulator: bool, backend: str, ipu_ids: Sequence[int] | None
) -> CallCounter:
    """The compiled model's ``CallCounter``: ``read`` gives the last call's count where the counter
    was compiled in (``wanted``); otherwise no reader, and the reason. The clock is read from
    gcipuinfo for ``ipu_ids`` (``None``: the IPUs are not known, and every IPU listed must agree)."""
    if simulator:
        return CallCounter(METRIC, None, SIMULATOR)
    if not enabled:
        return CallCounter(
            METRIC, None, f"the cycle counter is off (the {backend} backend option {OPTION}=False)"
        )
    ids = None if ipu_ids is None else tuple(ipu_ids)
    return CallCounter(METRIC, read, None, lambda: read_clock(ids))
