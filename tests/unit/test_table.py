"""The table model every command's table goes through: its text, markdown and CSV forms."""

from __future__ import annotations

import csv
import io

from pytest_ipu.report import ab as ab_report
from pytest_ipu.report import changes as changes_report
from pytest_ipu.report import compare as compare_report
from pytest_ipu.report.table import Table
from pytest_ipu.report.table import raw
from pytest_ipu.results import ab
from pytest_ipu.results import changes
from pytest_ipu.results import compare

TABLE = Table(
    header=["name", "value"],
    rows=[["a|b", "1.5 ms"], ["long name", "12 ms"]],
    right=[False, True],
    legend=["a|b = the first"],
    notes=["missing: c"],
)


def test_text_aligns_names_left_and_numbers_right_under_an_underlined_header() -> None:
    assert TABLE.text().splitlines() == [
        "a|b = the first",
        "name        value",
        "-----------------",
        "a|b        1.5 ms",
        "long name   12 ms",
        "missing: c",
    ]


def test_markdown_escapes_pipes_aligns_numbers_right_and_lists_the_notes() -> None:
    assert TABLE.markdown().splitlines() == [
        "a|b = the first  ",
        "| name | value |",
        "|---|---:|",
        "| a\\|b | 1.5 ms |",
        "| long name | 12 ms |",
        "",
        "- missing: c",
    ]


def test_csv_quotes_what_needs_it_and_leaves_legend_and_notes_out() -> None:
    table = Table(["name", "values"], [["a,b", "1.0;2.0"], ['say "x"', raw(None)]])
    text = table.csv()
    assert not text.endswith("\n")
    assert list(csv.reader(io.StringIO(text))) == [["name", "values"], ["a,b", "1.0;2.0"], ['say "x"', ""]]


def test_columns_right_leaves_out_are_aligned_left() -> None:
    table = Table(["a", "b"], [["x", "yy"]], right=[True])
    assert table.grid() == ["a  b", "----", "x  yy"]
    assert table.markdown_grid()[1] == "|---:|---|"


def test_a_table_without_notes_or_legend_is_the_grid_alone() -> None:
    table = Table(["a"], [["1"]])
    assert table.text().splitlines() == table.grid()
    assert table.markdown().splitlines() == table.markdown_grid()


def test_raw_keeps_the_full_number() -> None:
    assert raw(0.1 + 0.2) == "0.30000000000000004"
    assert raw(3) == "3.0"


def test_every_format_a_command_offers_has_a_writer() -> None:
    assert tuple(compare_report.RENDERERS) == compare.FORMATS
    assert tuple(ab_report.RENDERERS) == ab.FORMATS
    assert tuple(changes_report.RENDERERS) == changes.FORMATS
