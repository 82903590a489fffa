"""Aligned plain-text tables, for every table pytest-ipu prints (the standard library only: the
``ipu_power`` blocks' table is printed by runs that never load the benchmark tables or numpy)."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_ipu.backports import zip_strict


def grid(cells: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    """Aligned text columns: ``cells[0]`` is the header, underlined; a column whose ``right`` is
    true is aligned to the right (numbers), else to the left. Trailing blanks are dropped."""
    widths = [max(len(row[i]) for row in cells) for i in range(len(right))]
    lines: list[str] = []
    for n, row in enumerate(cells):
        text = "  ".join(
            cell.rjust(w) if r else cell.ljust(w) for cell, w, r in zip_strict(row, widths, right)
        ).rstrip()
        lines.append(text)
        if n == 0:
            lines.append("-" * len(text))
    return lines
