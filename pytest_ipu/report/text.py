"""Aligned plain text: the column layout ``table.Table``'s text form is written with (``grid``,
``fitted_grid``), and fitting lines to a terminal's width (the standard library only: the
``ipu_power`` blocks' table is printed by runs that never load the benchmark tables or numpy)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from typing import TextIO

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


#: Cells that say a row has nothing to show in a column: a column of only these can go first.
PLACEHOLDERS = frozenset({"", "-", "n/m"})


def fitted_grid(
    cells: Sequence[Sequence[str]], right: Sequence[bool], width: int | None, drop: Sequence[str]
) -> tuple[list[str], tuple[str, ...]]:
    """``grid``, with columns left out until its lines fit ``width`` characters (``None``: no
    limit). Only the columns whose headers ``drop`` names may go: first those whose every row is a
    placeholder (``-``, ``n/m``), then the others in ``drop``'s order. Returns the lines and the
    headers left out, in the order they went (``left_out`` says so under the table)."""
    headers = list(cells[0])
    keep = list(range(len(headers)))
    widths = [max(len(row[i]) for row in cells) for i in keep]
    empty = [all(row[i] in PLACEHOLDERS for row in cells[1:]) for i in keep]
    order = [h for h in drop if h in headers and empty[headers.index(h)]]
    order += [h for h in drop if h in headers and h not in order]
    dropped: list[str] = []
    for header in order:
        if width is None or sum(widths[i] for i in keep) + 2 * (len(keep) - 1) <= width:
            break
        keep.remove(headers.index(header))
        dropped.append(header)
    kept = [[row[i] for i in keep] for row in cells]
    return grid(kept, [right[i] for i in keep]), tuple(dropped)


def left_out(dropped: Sequence[str], width: int) -> list[str]:
    """The line under a table that ``fitted_grid`` narrowed: which columns went, and where they are."""
    if not dropped:
        return []
    return wrap(
        [
            f"left out to fit {width} characters: {', '.join(dropped)} (every column is in the JSON "
            "and in pytest-ipu report; a wider terminal shows them)"
        ],
        width,
    )


def wrap(lines: Sequence[str], width: int | None) -> list[str]:
    """``lines`` with each one longer than ``width`` broken at spaces, its continuations indented by
    two; ``None``: unchanged. A table line that still does not fit has no spaces worth breaking
    at and is only broken where a word is too long for the width."""
    if width is None:
        return list(lines)
    import textwrap

    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" ")) + 2)
        out.extend(
            textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False, drop_whitespace=True)
            or [line]
        )
    return out


#: The narrowest width output is fitted to (pytest's own floor for its terminal width).
MIN_WIDTH = 40


def terminal_width(stream: TextIO | None = None) -> int | None:
    """The width to fit printed tables and lines to: the terminal's (``COLUMNS`` when set, as
    pytest's own width does), at least ``MIN_WIDTH``, when ``stream`` (standard output) is a
    terminal; ``None`` when it is a file or a pipe: a log, like a CI job's, keeps every column and
    whole lines, for whoever scrolls or greps it."""
    out = sys.stdout if stream is None else stream
    try:
        tty = out.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return None
    return max(MIN_WIDTH, shutil.get_terminal_size().columns) if tty else None
