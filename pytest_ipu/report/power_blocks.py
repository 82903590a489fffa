"""The terminal table of ``ipu_power`` blocks (presentation only): one row per block, in the order
measured, after pytest-ipu's benchmark tables and in ``pytest-ipu summary``.

A figure that was not measured is ``n/m`` and the row's note says why; ``?`` marks an invalid
window and ``~`` a low-confidence one, as in the benchmark tables. Never a 0 for an unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence

from pytest_ipu.measure import units
from pytest_ipu.report.table import Table
from pytest_ipu.results.power_blocks import PowerBlock
from pytest_ipu.results.records import PowerRecord

TITLE = "ipu_power blocks (energy of each block's window; W = J / window)"
HEADERS = ("test", "block", "device", "window", "items", "W", "J", "J/item", "items/J", "note")
#: Columns aligned left (text); the others are numbers, aligned right.
_LEFT = {"test", "device", "note"}
LOW_CONFIDENCE_NOTE = "~ = low confidence: the block was shorter than the sensor needs (see the warnings)"


def _figure(power: PowerRecord, value: float | None) -> str:
    if not power.measured:
        return "n/m"
    if not power.valid:
        return "?"
    if value is None:
        return "-"  # measured, but the block set no items: no per-item figure
    return ("~" if power.low_confidence else "") + units.format_number(value)


#: The figures' columns and how each reads a record.
_FIGURES: tuple[Callable[[PowerRecord], float | None], ...] = (
    lambda p: p.mean_power_w,
    lambda p: p.energy_j,
    lambda p: p.energy_per_item_j,
    lambda p: p.items_per_j,
)


def _note(block: PowerBlock) -> str:
    """Why the figures are absent or doubtful, and whether the block raised."""
    power = block.power
    parts = []
    if not power.measured:
        parts.append(f"not measured: {power.reason or 'no reason recorded'}")
    elif not power.valid:
        parts.append(f"invalid: {power.reason or '; '.join(power.warnings) or 'no reason recorded'}")
    if block.error is not None:
        parts.append(f"the block raised {block.error}")
    return "; ".join(parts)


def _row(block: PowerBlock) -> list[str]:
    power = block.power
    return [
        block.test,
        str(block.index),
        block.device,
        units.format_value(power.window_s, "s"),
        str(power.items) if power.items else "-",
        *(_figure(power, read(power)) for read in _FIGURES),
        _note(block),
    ]


def lines(blocks: Sequence[PowerBlock]) -> list[str]:
    """The table of ``blocks`` with its title and the footnote its markers need; empty for none."""
    if not blocks:
        return []
    table = Table(HEADERS, [_row(b) for b in blocks], [header not in _LEFT for header in HEADERS])
    out = [TITLE, *table.grid()]
    if any(b.power.measured and b.power.valid and b.power.low_confidence for b in blocks):
        out.append(LOW_CONFIDENCE_NOTE)
    return out
