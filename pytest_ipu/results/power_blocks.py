"""The energy of ``ipu_power`` blocks: one entry per block, kept in the run's top-level section.

A block (``with ipu_power(device) as window: ...``) is measured like a benchmark's timed window and
gives a ``PowerRecord``, but it is no pytest-benchmark benchmark: it has no rounds and no
statistics, and a test may hold several. Its entry therefore lives in the top-level ``pytest_ipu``
section, under ``power_blocks``: ``{"test", "index", "device", "error", "power"}``. Files written
before the list existed have none, and read as a run without blocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from pytest_ipu.results import schema
from pytest_ipu.results import values
from pytest_ipu.results.codec import Coded
from pytest_ipu.results.codec import meta
from pytest_ipu.results.records import PowerRecord

#: The key of the list inside the top-level ``pytest_ipu`` section.
KEY = "power_blocks"
#: How long an exception's message may be in an entry: the first line, cut to this.
MAX_ERROR_CHARS = 200
#: How every bad value's message ends: how to get a good one.
_FIX = "re-run the test to write the file again, or correct the value in the file"


@dataclass(frozen=True)
class PowerBlock(Coded):
    """One ``ipu_power`` block of a test: which test, its place among that test's blocks (from 1),
    the device asked for, the energy of its window (or why there is none), and the exception the
    block raised, if it raised one (the window is then the time until it raised)."""

    test: str
    index: int
    device: str
    power: PowerRecord = field(metadata=meta(after="error"))
    error: str | None = None


def describe_error(error: BaseException) -> str:
    """An exception as an entry keeps it: its type and the first line of its message, cut short."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


#: The voice of every refusal: ``malformed pytest-ipu power block: '<key>' is ...: it must be ...``.
_SOURCE = values.Source("malformed pytest-ipu power block", _FIX)


def block_from_json(data: object, at: str) -> PowerBlock:
    """One entry read back; ``at`` is its dotted path with a trailing dot (``pytest_ipu.power_blocks[0].``).

    Raises ``values.BadValue`` naming the key (a ``schema.SchemaError`` for its power object, which
    the schema's own reader reads with the same checks as a benchmark's: numbers finite and >= 0,
    counts whole).
    """
    data = _SOURCE.mapping(data, at.rstrip("."))
    power = _SOURCE.mapping(data.get("power"), at + "power")
    return PowerBlock(
        test=_SOURCE.text(data.get("test"), at + "test"),
        index=_SOURCE.whole(data.get("index"), at + "index", 1),
        device=_SOURCE.text(data.get("device"), at + "device"),
        # The schema's reader of a record's power object; these entries have the same form.
        power=schema.power_from_json(power, f"{at}power."),
        error=_SOURCE.text_or_none(data.get("error"), at + "error"),
    )


def blocks_from_json(section: Mapping[str, Any], at: str = "pytest_ipu.") -> tuple[PowerBlock, ...]:
    """The blocks of a top-level ``pytest_ipu`` section: none when it has no ``power_blocks`` (a file
    written before the list existed); raises ``values.BadValue`` naming the bad key."""
    entries = section.get(KEY)
    if entries is None:
        return ()
    return tuple(
        block_from_json(entry, f"{at}{KEY}[{i}].") for i, entry in enumerate(_SOURCE.array(entries, at + KEY))
    )
