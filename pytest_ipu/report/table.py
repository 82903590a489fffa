"""The one table model of the command line's output: a header, rows of cells, which columns hold
numbers (aligned right), a legend above and notes below, written as aligned text, as GitHub
markdown or as CSV.

``results/`` computes what a command found and hands back its rows, legend and notes as plain
values; the command's module here (``report/compare.py``, ``report/ab.py``, ``report/changes.py``)
turns them into cells and a ``Table``, and the ``Table`` alone decides how each form looks: column
widths and the underline of the text form, the alignment row and escaped pipes of markdown, the
quoting of CSV. Standard library only, like ``report/text.py`` whose ``grid`` lays out the text.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_ipu.report.text import fitted_grid
from pytest_ipu.report.text import grid


@dataclass(frozen=True)
class Table:
    """A table of text cells: ``header`` and each of ``rows`` have one cell per column; a column
    whose ``right`` is true holds numbers and is aligned to the right (``right`` may be shorter than
    the header: the columns it leaves out are aligned left). ``legend`` lines go above the table (what
    its labels stand for), ``notes`` below it (what qualifies its figures)."""

    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    right: Sequence[bool] = ()
    legend: Sequence[str] = ()
    notes: Sequence[str] = ()

    def _right(self) -> list[bool]:
        return [i < len(self.right) and self.right[i] for i in range(len(self.header))]

    def grid(self) -> list[str]:
        """The table alone as aligned text lines: the header, its underline, a line per row; none for
        a table of no columns (its legend and notes alone, as the gates' summary is)."""
        return grid([self.header, *self.rows], self._right()) if self.header else []

    def fitted(self, width: int | None, drop: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
        """``grid``, narrowed to ``width`` characters by leaving out columns that ``drop`` names
        (``text.fitted_grid``'s rule); the lines and the headers left out."""
        return fitted_grid([self.header, *self.rows], self._right(), width, drop)

    def markdown_grid(self) -> list[str]:
        """The table alone as markdown lines: the header, the alignment row (numbers right), a line
        per row; a ``|`` inside a cell escaped."""

        def line(cells: Sequence[str]) -> str:
            return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

        rule = "|" + "|".join("---:" if r else "---" for r in self._right()) + "|"
        return [line(self.header), rule, *(line(r) for r in self.rows)]

    def text(self) -> str:
        """The terminal form: the legend, the aligned table, the notes, each on its own lines."""
        return "\n".join([*self.legend, *self.grid(), *self.notes])

    def markdown(self) -> str:
        """The markdown form: the legend (one line each), the table, the notes as a list below it."""
        return "\n".join([*markdown_legend(self.legend), *self.markdown_grid(), *markdown_notes(self.notes)])

    def csv(self) -> str:
        """The CSV form, for spreadsheets and scripts: the header and the rows, no legend or notes
        (a CSV table's cells carry raw values that need none)."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(self.header)
        writer.writerows(self.rows)
        return buffer.getvalue().rstrip("\n")


def markdown_legend(legend: Sequence[str]) -> list[str]:
    """Legend lines for markdown: each ends in two spaces, markdown's line break, so they stay lines
    rather than one paragraph."""
    return [f"{line}  " for line in legend]


def markdown_notes(notes: Sequence[str]) -> list[str]:
    """Notes for markdown: a blank line, then a list item each; nothing without notes."""
    return ["", *(f"- {note}" for note in notes)] if notes else []


def raw(value: float | None) -> str:
    """A number in a CSV cell: its full ``repr`` (raw SI, no scaling or rounding), empty when absent."""
    return "" if value is None else repr(float(value))
