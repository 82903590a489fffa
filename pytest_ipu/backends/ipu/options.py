"""Option checks the PopART and PopTorch backends share: one rule, one message, each SDK's form after.

``available_memory_proportion`` (``None``, a number in (0, 1] for every IPU, or a mapping of some of
``'IPU0'`` ... ``'IPU<ipus-1>'``, the IPUs of one replica) is checked here before anything compiles;
``memory_proportions`` gives one per-IPU table, which each backend converts to its SDK's form
(PopTorch's ``Options.setAvailableMemoryProportion`` per IPU, PopART's
``Builder.setAvailableMemoryProportion`` per operation output).

Documented in docs/ipu.md (section "Targets and options").
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Mapping
from typing import Dict

from pytest_ipu.errors import CompileError

__all__ = ["MEMORY_PROPORTION_FIX", "MemoryProportions", "memory_proportions", "plain_memory_proportion"]

#: The proportion per IPU index (0 for ``'IPU0'``); IPUs absent keep the SDK's default.
MemoryProportions = Dict[int, float]

#: What a refused ``available_memory_proportion`` is told to use.
MEMORY_PROPORTION_FIX = (
    "use a number in (0, 1] for every IPU (Graphcore's ResNeXt-101 example uses 0.3), a mapping of "
    "IPUs to such numbers ({'IPU0': 0.3, 'IPU1': 0.5}), or None for the SDK's default"
)

_IPU_KEY = re.compile(r"IPU(\d+)")


def memory_proportions(value: object, ipus: int, source: str, label: str) -> MemoryProportions | None:
    """``value`` as ``{ipu index: proportion}``, or ``None`` when unset (the SDK's default).

    ``ipus`` is the IPUs of one replica (a mapping's keys run ``'IPU0'`` ... ``'IPU<ipus-1>'``);
    ``source`` names where the value came from (``"popart option"``) and ``label`` the model, for
    the one-line ``CompileError`` a bad value raises.
    """
    if value is None:
        return None

    def refuse(detail: str = "") -> CompileError:
        return CompileError(
            f"{source} available_memory_proportion={value!r} for {label}{detail}; {MEMORY_PROPORTION_FIX}"
        )

    if isinstance(value, Mapping):
        table: MemoryProportions = {}
        for key, proportion in value.items():
            match = _IPU_KEY.fullmatch(key) if isinstance(key, str) else None
            if match is None or int(match.group(1)) >= ipus:
                raise refuse(
                    f": key {key!r} names no IPU of the model (ipus={ipus}: 'IPU0' ... 'IPU{ipus - 1}')"
                )
            number = _proportion(proportion)
            if number is None:
                raise refuse(f": {key!r} maps to {proportion!r}, not a number in (0, 1]")
            table[int(match.group(1))] = number
        return table
    number = _proportion(value)
    if number is None:
        raise refuse()
    return {ipu: number for ipu in range(ipus)}


def plain_memory_proportion(value: object) -> object:
    """The option as a plain JSON value for records: a number as given, a mapping's values as floats."""
    if isinstance(value, Mapping):
        return {str(key): float(proportion) for key, proportion in value.items()}
    return value


def _proportion(value: object) -> float | None:
    """``value`` as a float when it is a number in (0, 1], else ``None``."""
    # numbers.Real takes numpy's scalars too; bool is an int but never a proportion; NaN fails the range.
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return None
    number = float(value)
    return number if 0 < number <= 1 else None
