"""Fitting printed tables and lines to a terminal's width: columns left out in their order and
said, lines broken at spaces, and no limit at all for output to a file or pipe."""

from __future__ import annotations

import io

import pytest

from pytest_ipu.report import terminal as report
from pytest_ipu.report import text
from pytest_ipu.report.terminal import Row
from tests.unit.test_report import make_record

CELLS = [
    ["name", "p50", "W", "extra", "flags"],
    ["bench_a", "1 ms", "n/m", "12345678", "-"],
    ["bench_b", "2 ms", "n/m", "87654321", "unstable"],
]
RIGHT = [False, True, True, True, False]


def test_no_width_keeps_every_column() -> None:
    lines, dropped = text.fitted_grid(CELLS, RIGHT, None, ["W", "extra"])
    assert dropped == ()
    assert lines == text.grid(CELLS, RIGHT)


def test_a_column_with_nothing_to_show_goes_first_then_the_order() -> None:
    full = len(text.grid(CELLS, RIGHT)[0])
    lines, dropped = text.fitted_grid(CELLS, RIGHT, full - 1, ["extra", "W"])
    # "W" holds only n/m: it goes before "extra", though the order names "extra" first.
    assert dropped == ("W",)
    assert all(len(line) <= full - 1 for line in lines)
    lines, dropped = text.fitted_grid(CELLS, RIGHT, 30, ["extra", "W"])
    assert dropped == ("W", "extra")
    assert "extra" not in lines[0]
    assert "flags" in lines[0]


def test_columns_outside_the_order_always_stay() -> None:
    lines, dropped = text.fitted_grid(CELLS, RIGHT, 10, ["W"])
    assert dropped == ("W",)
    assert lines[0].split() == ["name", "p50", "extra", "flags"]


def test_wrap_breaks_long_lines_at_spaces_and_indents() -> None:
    line = "note: " + " ".join(["word"] * 30)
    out = text.wrap([line, "short"], 40)
    assert all(len(part) <= 40 for part in out)
    assert out[-1] == "short"
    assert out[1].startswith("  ")
    assert not out[0].startswith(" ")
    assert " ".join(part.strip() for part in out[:-1]) == line
    assert text.wrap([line], None) == [line]


def test_left_out_names_the_columns() -> None:
    assert text.left_out((), 80) == []
    (line,) = text.left_out(("W", "J/item"), 200)
    assert "W, J/item" in line
    assert "200" in line


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_terminal_width_only_for_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "97")
    assert text.terminal_width(_Stream(True)) == 97
    assert text.terminal_width(_Stream(False)) is None
    monkeypatch.setenv("COLUMNS", "10")
    assert text.terminal_width(_Stream(True)) == text.MIN_WIDTH


def test_tables_fit_the_width_and_say_what_went() -> None:
    rows = [Row("g", f"test_something_long[case-{n}]", make_record()) for n in range(3)]
    wide = report.tables(rows)
    assert max(map(len, wide)) > 100
    narrow = report.tables(rows, width=100)
    table = [line for line in narrow if line.startswith(("benchmark", "test_something", "---"))]
    assert table
    assert all(len(line) <= 100 for line in table)
    notes = [line for line in narrow if line.startswith("left out to fit 100 characters")]
    assert len(notes) == 1
    for header in ("p50", "p99", "items/s"):
        assert header in table[0]
