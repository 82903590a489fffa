"""Terminal tables (report.terminal): number formatting, grouping, row order, flagged percentiles."""

from __future__ import annotations

import re
from typing import Any

import pytest

from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.report import terminal as report
from pytest_ipu.report.terminal import Row
from pytest_ipu.results.records import IpuRecord


def make_record(**changes: Any) -> IpuRecord:
    unsupported = changes.pop("unsupported", ())
    latency = LatencySummary(
        min_s=0.001,
        p50_s=changes.pop("p50_s", 0.002),
        p90_s=0.003,
        p99_s=changes.pop("p99_s", 0.004),
        max_s=0.005,
        mean_s=0.0025,
        rounds=changes.get("rounds", 200),
        unsupported=unsupported,
    )
    base: dict[str, Any] = {
        "target": "torch:cpu",
        "backend": "torch",
        "device": "cpu",
        "device_name": "Some CPU",
        "precision": "fp32",
        "io": "host",
        "batch_size": 1,
        "items_per_call": 1,
        "rounds": 200,
        "rounds_policy": "auto",
        "warmup_rounds": 2,
        "latency": latency,
        "window_s": 0.8,
        "throughput_items_per_s": 250.0,
        "compile_s": 1.5,
        "compile_cached": False,
        "first_call_s": 0.2,
    }
    base.update(changes)
    return IpuRecord(**base)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (1.36e-3, "1.36 ms"),
        (2.5, "2.5 s"),
        (850e-9, "850 ns"),
        (12.3e-6, "12.3 us"),
        (None, "-"),
        (1.0, "1 s"),
        (1e-3, "1 ms"),
        (1e-6, "1 us"),
        (0.0, "0 ns"),
        (123.456, "123 s"),
        (0.999e-3, "999 us"),
    ],
)
def test_format_seconds(seconds, text):
    assert report.format_seconds(seconds) == text


@pytest.mark.parametrize(("seconds", "text"), [(0.0009996, "1 ms"), (999.6e-9, "1 us"), (0.9996, "1 s")])
def test_format_seconds_rounding_up_to_next_unit(seconds, text):
    assert report.format_seconds(seconds) == text


@pytest.mark.parametrize(
    ("rate", "text"),
    [(2526.4, "2,526"), (1_234_567.8, "1,234,568"), (100.0, "100"), (12.345, "12.3"), (0.5, "0.5")],
)
def test_format_rate(rate, text):
    assert report.format_rate(rate) == text


def _table_lines(lines: list[str], group: str) -> list[str]:
    start = lines.index(f"{group} (latency per call; throughput summed over instances)")
    end = lines.index("", start)
    return lines[start + 1 : end]


def test_one_table_per_group_in_first_seen_order():
    rows = [
        Row("test_b", "test_b[torch-cpu-1]", make_record()),
        Row("test_a", "test_a[torch-cpu-1]", make_record()),
        Row("test_b", "test_b[torch-cpu-8]", make_record(batch_size=8)),
    ]
    lines = report.tables(rows)
    titles = [line for line in lines if line.endswith("(latency per call; throughput summed over instances)")]
    assert titles == [
        "test_b (latency per call; throughput summed over instances)",
        "test_a (latency per call; throughput summed over instances)",
    ]
    # header, rule, one line per row
    assert len(_table_lines(lines, "test_b")) == 2 + 2
    assert len(_table_lines(lines, "test_a")) == 2 + 1
    assert not any(line.startswith("*") for line in lines)


HEADERS = [
    "benchmark",
    "target",
    "precision",
    "batch",
    "rounds",
    "p50",
    "p99",
    "items/s",
    "first call",
    "compile",
    "W",
    "J/item",
    "items/J",
    "parity",
]


def _footnote(lines: list[str]) -> str:
    """The percentile footnote (power footnotes may follow it)."""
    return next(line for line in lines if line.startswith("* "))


def _cells(line: str) -> list[str]:
    """A table line split into its cells: cells are joined by two or more spaces, and hold at most one."""
    return re.split(r" {2,}", line.strip())


def _row_cells(record: IpuRecord) -> dict[str, str]:
    header, _, row = _table_lines(report.tables([Row("g", "g[a]", record)]), "g")
    return dict(zip(_cells(header), _cells(row), strict=True))


def test_header_and_rule():
    lines = report.tables([Row("g", "g[x]", make_record())])
    header, rule, row = _table_lines(lines, "g")
    assert _cells(header) == HEADERS
    assert set(rule) == {"-"}
    assert len(rule) == len(header)
    assert row.split()[:5] == ["[x]", "torch:cpu", "fp32", "1", "200"]


def test_rows_sorted_by_batch_size_then_target():
    rows = [
        Row("g", "g[torch-cuda-8]", make_record(batch_size=8, target="torch:cuda")),
        Row("g", "g[torch-cpu-8]", make_record(batch_size=8, target="torch:cpu")),
        Row("g", "g[torch-cuda-1]", make_record(batch_size=1, target="torch:cuda")),
        Row("g", "g[torch-cpu-32]", make_record(batch_size=32, target="torch:cpu")),
        Row("g", "g[torch-cpu-1]", make_record(batch_size=1, target="torch:cpu")),
    ]
    body = _table_lines(report.tables(rows), "g")[2:]
    assert [line.split()[0] for line in body] == [
        "[torch-cpu-1]",
        "[torch-cuda-1]",
        "[torch-cpu-8]",
        "[torch-cuda-8]",
        "[torch-cpu-32]",
    ]


def test_name_outside_group_is_kept_whole():
    lines = report.tables([Row("custom", "test_x[torch-cpu]", make_record())])
    assert _table_lines(lines, "custom")[2].split()[0] == "test_x[torch-cpu]"


def test_cells_render_record_values():
    record = make_record(
        p50_s=1.36e-3, throughput_items_per_s=2526.4, first_call_s=2.5, compile_s=12.3e-6, compile_cached=True
    )
    cells = _row_cells(record)
    assert cells["p50"] == "1.36 ms"
    assert cells["items/s"] == "2,526"
    assert cells["first call"] == "2.5 s"
    assert cells["compile"] == "12.3 us (cached)"
    assert cells["parity"] == "-"  # not checked


def test_missing_compile_renders_dash():
    assert _row_cells(make_record(compile_s=None))["compile"] == "-"


def _parity(max_rel: float, passed: bool) -> dict[str, Any]:
    return {
        "reference": "torch eager fp32 on cpu",
        "max_abs": 0.5,
        "max_rel": max_rel,
        "tolerance": 1e-3,
        "passed": passed,
    }


@pytest.mark.parametrize(
    ("parity", "text"),
    [
        (None, "-"),
        (_parity(2.4e-7, True), "ok 2.4e-07"),
        (_parity(0.0, True), "ok 0.0e+00"),
        (_parity(0.25, False), "FAIL 2.5e-01"),
        (_parity(float("inf"), False), "FAIL inf"),
    ],
)
def test_parity_cell_says_whether_it_passed_and_the_max_relative_error(parity, text):
    assert _row_cells(make_record(parity=parity))["parity"] == text


def test_flagged_percentile_gets_star_and_footnote():
    rows = [
        Row("g", "g[few]", make_record(rounds=50, p99_s=0.004, unsupported=("p99",))),
        Row("g", "g[many]", make_record(batch_size=2, rounds=200, p99_s=0.004)),
    ]
    lines = report.tables(rows)
    few, many = _table_lines(lines, "g")[2:]
    assert "4 ms*" in few
    assert "*" not in many
    assert _footnote(lines) == (
        "* too few rounds for this percentile (p99 needs >= 100): it is the maximum of the rounds run"
    )


def test_footnote_names_every_flagged_percentile():
    rows = [Row("g", "g[one]", make_record(rounds=1, unsupported=("p50", "p90", "p99")))]
    lines = report.tables(rows)
    row = _table_lines(lines, "g")[2]
    assert row.count("*") == 2  # p50 and p99 columns; p90 has no column
    assert _footnote(lines).startswith(
        "* too few rounds for this percentile (p50 needs >= 2, p99 needs >= 100)"
    )


def test_no_footnote_for_percentile_without_column():
    rows = [Row("g", "g[x]", make_record(rounds=9, unsupported=("p90",)))]
    lines = report.tables(rows)
    assert not any(line.startswith("*") for line in lines)
    assert "*" not in _table_lines(lines, "g")[2]


def test_no_rows_no_lines():
    assert report.tables([]) == []
