"""The IPU's own cycle counter, as both IPU backends offer it: one option, one rule, one counter.

A read is a device round trip (PopART's ``getCycleCount`` runs ``cycleCountTensorToHost``). PopART
reads only when asked, so its counter is on by default, read in ``run.benchmark``'s untimed counting
pass (``COUNTING_PASS``). PopTorch asks PopART for the count at the end of every run (``Compiler::run``
in ``popart_compiler/source/Compiler.cpp``, 3.x), so its counter is off by default and a model compiled
with ``cycle_counter=True`` says so in its record (``IN_EVERY_CALL``). The IPU Model has no hardware
counter (PopTorch: "You must run the model on IPU hardware"): a simulated model never compiles it in.

Documented in docs/numbers.md (section "IPU cycles (ipu_cycles)") and docs/options.md (section "The
IPU's cycle counter").
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence

from pytest_ipu.backends.base import CallCounter
from pytest_ipu.devices.ipu_clock import read_clock
from pytest_ipu.errors import CompileError
from pytest_ipu.results.counts import COUNTING_PASS

#: The backend option that compiles the counter in (both IPU backends).
OPTION = "cycle_counter"
#: Its default per backend: on where the reads stay out of the timed rounds.
POPART_DEFAULT = True
POPTORCH_DEFAULT = False
#: The metric the count feeds (``results.catalog``).
METRIC = "ipu_cycles"
#: How a PopTorch model's count is read (the record's ``method``).
IN_EVERY_CALL = (
    "read by PopTorch at the end of every call, timed rounds included (a device round trip each); "
    "the count taken in the counting pass"
)

#: Why a simulated model has no count.
SIMULATOR = "the IPU Model simulator has no hardware cycle counter (cycle counts are IPU hardware only)"
#: Why a PopTorch model has none by default.
POPTORCH_OFF = (
    "the cycle counter is off (the poptorch backend option cycle_counter=False, its default: PopTorch "
    "reads the counter at the end of every call, which would put a device round trip in every timed "
    "round; pass cycle_counter=True to count)"
)


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
    read: Callable[[], int],
    enabled: bool,
    simulator: bool,
    backend: str,
    ipu_ids: Sequence[int] | None,
    *,
    in_every_call: bool = False,
) -> CallCounter:
    """The compiled model's ``CallCounter``: ``read`` gives the last call's count where the counter
    was compiled in (``wanted``); otherwise no reader, and the reason. ``in_every_call``: the SDK
    itself reads the counter in every call (PopTorch), which the record's method says. The clock
    is read from gcipuinfo for ``ipu_ids`` (``None``: the IPUs are not known, and every IPU listed
    must agree)."""
    if simulator:
        return CallCounter(METRIC, None, SIMULATOR)
    if not enabled:
        if in_every_call:
            return CallCounter(METRIC, None, POPTORCH_OFF)
        return CallCounter(
            METRIC, None, f"the cycle counter is off (the {backend} backend option {OPTION}=False)"
        )
    ids = None if ipu_ids is None else tuple(ipu_ids)
    method = IN_EVERY_CALL if in_every_call else COUNTING_PASS
    return CallCounter(METRIC, read, None, lambda: read_clock(ids), method)
