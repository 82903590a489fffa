"""What counts as a sequence of positional inputs (``ipu_benchmark``'s ``inputs``, ``ipu_loadgen``'s
samples): the one check, so that both refuse the same values and name them the same way.

A tensor or array is itself a sequence (of its rows): taken as the inputs it would be one input per
row, a wrong benchmark rather than an error (and ``not tensor`` raises torch's "Boolean value of
Tensor"). A string, bytes or a mapping are sequences or collections of the wrong kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class NotPositional(NamedTuple):
    """A value that is not a sequence of positional inputs, as an error names it."""

    #: ``Tensor of shape (8, 4)``, ``dict object``.
    value: str
    #: Whether it is one tensor or array (the fix is then ``(x,)``).
    one_array: bool


def not_positional(inputs: object) -> NotPositional | None:
    """``None`` when ``inputs`` is a sequence of positional inputs (a tuple, list or other sequence
    that is not a string, bytes or mapping); otherwise how to name it."""
    if hasattr(inputs, "shape") and not isinstance(inputs, (list, tuple)):
        return NotPositional(f"{type(inputs).__name__} of shape {tuple(getattr(inputs, 'shape', ()))}", True)
    if isinstance(inputs, (str, bytes, dict)) or not isinstance(inputs, Sequence):
        return NotPositional(f"{type(inputs).__name__} object", False)
    return None
