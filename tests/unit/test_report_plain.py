"""Benchmarks of pytest-benchmark's own ``benchmark`` fixture alone (no pytest-ipu record) on the
report page: shown with pytest-benchmark's statistics, never dropped."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.backports import remove_prefix
from pytest_ipu.report import html as html_report
from pytest_ipu.report import summary
from pytest_ipu.results import benchmark_json
from pytest_ipu.results.benchmark_json import RunFileError
from tests.unit.test_html_report import OFF
from tests.unit.test_html_report import _record
from tests.unit.test_html_report import _write_run

STATS = {"min": 0.002, "median": 0.0025, "mean": 0.003, "max": 0.009, "stddev": 0.0004, "rounds": 41}


def _with(path: Path, changes: dict[str, dict[str, Any]]) -> Path:
    """``path``'s run with each named benchmark's JSON updated by ``changes[name]``."""
    document = json.loads(path.read_text(encoding="utf-8"))
    for bench in document["benchmarks"]:
        for key, value in changes.get(bench["name"], {}).items():
            bench[key] = value
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _root(runs: list[benchmark_json.StoredRun]) -> ET.Element:
    return ET.fromstring(remove_prefix(html_report._page(runs, []), "<!DOCTYPE html>"))


def _section(root: ET.Element, title: str) -> ET.Element:
    return next(s for s in root.iter("section") if (s.find("h2") is not None and s.find("h2").text == title))  # type: ignore[union-attr]


def test_a_benchmark_without_a_record_is_shown_with_pytest_benchmarks_statistics(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "run.json",
        [
            *(("study", f"s[{b}]", _record("torch:cpu", b, OFF)) for b in (1, 2)),
            ("sort", "test_sort[list]", None),
            ("sort", "test_sort[array]", None),
        ],
    )
    _with(run, {"test_sort[list]": {"stats": STATS}, "test_sort[array]": {"stats": {"min": 0.001}}})
    runs = [benchmark_json.read_run(run)]
    assert runs[0].benchmarks[2].rounds == 41
    root = _root(runs)
    section = _section(root, "sort")
    (table,) = [t for t in section.iter("table") if t.get("class") == "plain"]
    assert ["".join(th.itertext()) for th in table.iter("th")] == [
        "benchmark",
        "min",
        "median",
        "mean",
        "stddev",
        "rounds",
    ]
    rows = [[td.text for td in tr.iter("td")] for tr in table.iter("tr")][1:]
    assert rows == [
        ["test_sort[list]", "2 ms", "2.5 ms", "3 ms", "400 us", "41"],
        ["test_sort[array]", "1 ms", "-", "-", "-", "-"],
    ]
    notes = ["".join(li.itertext()) for ul in section.iter("ul") for li in ul]
    assert notes == ["- = not in the run file (pytest-benchmark wrote no such statistic)"]
    # After the groups with records, in the page's list of contents too.
    sections = [s.get("id") for s in next(root.iter("main")) if s.tag == "section"]
    assert sections.index("group-2-sort") > sections.index("group-1-study")
    assert "not shown" not in "".join(root.itertext())


def test_a_self_check_without_a_record_is_folded_with_the_self_checks(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "run.json",
        [
            *(("study", f"s[{b}]", _record("torch:cpu", b, OFF)) for b in (1, 2)),
            ("startup", "test_startup", None),
        ],
    )
    _with(run, {"test_startup": {"stats": STATS, "extra_info": {"role": summary.SELF_CHECK}}})
    runs = [benchmark_json.read_run(run)]
    root = _root(runs)
    folded = next(s for s in root.iter("section") if s.get("id") == "self-checks")
    assert [h.text for h in folded.iter("h2")] == ["Self-checks", "startup"]
    assert "test_startup" in [td.text for td in folded.iter("td")]


def test_several_runs_name_the_run_of_each_row(tmp_path: Path) -> None:
    paths = [
        _with(
            _write_run(
                tmp_path / f"{n}.json", [("g", "t[1]", _record("torch:cpu", 1, OFF)), ("p", "test_p", None)]
            ),
            {"test_p": {"stats": {**STATS, "min": 0.001 * (n + 1)}}},
        )
        for n in range(2)
    ]
    root = _root([benchmark_json.read_run(p) for p in paths])
    (table,) = [t for t in _section(root, "p").iter("table") if t.get("class") == "plain"]
    rows = [[td.text for td in tr.iter("td")][:3] for tr in table.iter("tr")][1:]
    assert rows == [["0.json", "test_p", "1 ms"], ["1.json", "test_p", "2 ms"]]


@pytest.mark.parametrize("rounds", [-1, 2.5, True, "41"])
def test_a_round_count_that_is_not_a_whole_number_is_refused(tmp_path: Path, rounds: object) -> None:
    run = _with(
        _write_run(tmp_path / "run.json", [("p", "test_p", None)]), {"test_p": {"stats": {"rounds": rounds}}}
    )
    with pytest.raises(RunFileError, match=r"'stats\.rounds' is .*: it must be a whole number >= 0"):
        benchmark_json.read_run(run)
