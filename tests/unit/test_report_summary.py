"""The report's summary (pytest_ipu.report.summary): each study's best figures with the row that
reached them, what was not measured and why, and the self-checks kept out of it and folded last."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_ipu.backports import remove_prefix
from pytest_ipu.report import html as html_report
from pytest_ipu.report import summary
from pytest_ipu.results import benchmark_json
from pytest_ipu.results.benchmark_json import RunFileError
from tests.unit.test_html_report import OFF
from tests.unit.test_html_report import _power
from tests.unit.test_html_report import _record
from tests.unit.test_html_report import _write_run


def _with_role(path: Path, role: object, names: set[str]) -> Path:
    document = json.loads(path.read_text(encoding="utf-8"))
    for bench in document["benchmarks"]:
        if bench["name"] in names:
            bench["extra_info"]["role"] = role
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_the_headline_is_the_best_row_of_each_figure(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "run.json",
        [
            ("study", "s[cpu-2]", _record("torch:cpu", 2, _power(2.0))),
            ("study", "s[cpu-4]", _record("torch:cpu", 4, _power(3.0))),
            ("study", "s[ort-2]", _record("onnxruntime:cpu", 2, OFF)),
        ],
    )
    line = summary.headline([benchmark_json.read_run(run)], "study")
    assert line.rows == 3
    # _record's p50 is 1 ms per item of batch, its throughput batch / p50: batch 2 is the fastest call.
    assert line.latency.value == pytest.approx(0.002)
    assert "batch 2" in line.latency.who
    assert line.items_per_j.value == pytest.approx(3.0)
    assert line.items_per_j.who.startswith("torch:cpu")
    assert "batch 4" in line.items_per_j.who


def test_a_figure_no_row_measured_says_why(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "run.json", [("study", f"s[{b}]", _record("torch:cpu", b, OFF)) for b in (1, 2)]
    )
    line = summary.headline([benchmark_json.read_run(run)], "study")
    assert line.items_per_j.value is None
    assert line.items_per_j.who.startswith("not measured: ")


def test_self_checks_stay_out_of_the_summary_and_are_folded_last(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "run.json",
        [
            *(("study", f"s[{b}]", _record("torch:cpu", b, OFF)) for b in (1, 2)),
            *(("overhead", f"o[{b}]", _record("torch:cpu", b, OFF)) for b in (1, 2, 4)),
        ],
    )
    _with_role(run, summary.SELF_CHECK, {"o[1]", "o[2]", "o[4]"})
    runs = [benchmark_json.read_run(run)]
    assert summary.self_check_groups(runs) == ["overhead"]
    assert summary.studies(runs) == ["study"]
    root = ET.fromstring(remove_prefix(html_report._page(runs, []), "<!DOCTYPE html>"))
    main = next(root.iter("main"))
    sections = [s.get("id") for s in main if s.tag == "section"]
    # The self-checks' group has the most rows, yet the study leads and the self-checks come last,
    # before only the machine's facts.
    assert sections == ["summary", "group-2-study", "self-checks", "machine"]
    folded = next(s for s in root.iter("section") if s.get("id") == "self-checks")
    assert [h.text for h in folded.iter("h2")][1:] == ["overhead"]
    assert folded.find("details") is not None


def test_a_role_that_is_not_a_string_is_refused(tmp_path: Path) -> None:
    run = _write_run(tmp_path / "run.json", [("g", "t[1]", _record("torch:cpu", 1, OFF))])
    _with_role(run, 3, {"t[1]"})
    with pytest.raises(RunFileError, match=r"extra_info\.role"):
        benchmark_json.read_run(run)
