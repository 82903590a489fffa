"""``pytest-ipu report`` (pytest_ipu.report.html): the files it writes, the page, bad input, atomic writes."""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.backports import remove_prefix
from pytest_ipu.measure.metrics import CpuTime
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.report import html as html_report
from pytest_ipu.report import plots
from pytest_ipu.report import terminal as report
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import schema
from pytest_ipu.results.records import DeviceEnergy
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import PowerRecord

#: The report's figures need matplotlib (the ``report`` extra); without it these tests skip.
requires_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="needs matplotlib (the extra 'report': pip install matplotlib)",
)

pytestmark = requires_matplotlib


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


#: The CPU time of a record's 5 s window of 5,000 items: 4.5 s of it (0.9 of a core), 0.9 ms per item.
CPU = CpuTime(0.0009, 0.0009, 4.5, 4.5, 0.1, host_per_item_s=0.0009, host_cores=0.9)


def _record(target: str, batch_size: int, power: PowerRecord | None, **more: Any) -> dict[str, Any]:
    p50 = 0.001 * batch_size
    return schema.to_json(
        IpuRecord(
            target=target,
            backend=target.partition(":")[0],
            device=target.partition(":")[2],
            device_name="Some CPU",
            precision="fp32",
            io="host",
            batch_size=batch_size,
            items_per_call=batch_size,
            rounds=more.pop("rounds", 200),
            rounds_policy="auto",
            warmup_rounds=2,
            latency_s=LatencySummary(
                p50 / 2, p50, p50, p50 * 2, p50 * 3, p50, 200, more.pop("unsupported", ())
            ),
            window_s=5.0,
            throughput_items_per_s=batch_size / p50,
            compile_s=1.0,
            compile_cached=False,
            first_call_s=0.1,
            power=power,
            cpu=more.pop("cpu", CPU),
            **more,
        )
    )


def _power(items_per_j: float, low: bool = False) -> PowerRecord:
    return PowerRecord(
        measured=True,
        valid=True,
        source="rapl",
        mean_power_w=40.0,
        energy_per_item_j=1 / items_per_j,
        items_per_j=items_per_j,
        warnings=("low confidence: window 1 s < 5 s",) if low else (),
        low_confidence=low,
        devices=(DeviceEnergy("package-0", "package 0", "cpu-package", 1.0, 40.0, None),),
    )


OFF = PowerRecord(measured=False, source="off", reason="power measurement is off (--ipu-power=off)")


def _write_run(path: Path, benchmarks: list[tuple[str | None, str, dict[str, Any] | None]]) -> Path:
    document = {
        "machine_info": {
            "node": "bench-node",
            "cpu": {"brand_raw": "Some CPU", "count": 4},
            "ipu": {"backends": {"torch:cpu": {"device_name": "Some CPU", "torch": "2.13.0"}}},
        },
        "commit_info": {"id": "0123456789abcdef", "branch": "main", "dirty": True},
        "datetime": "2026-11-29T20:31:34+00:00",
        "benchmarks": [
            {
                "group": group,
                "name": name,
                "fullname": f"bench.py::{name}",
                "params": {},
                "stats": {},
                "extra_info": {} if record is None else {"ipu": record},
            }
            for group, name, record in benchmarks
        ],
    }
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def two_groups(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, html_report.ReportFiles]:
    """One report with a measured group over three batch sizes (one point low confidence) and one of a
    single batch size with power off."""
    root = tmp_path_factory.mktemp("report")
    run = _write_run(
        root / "run.json",
        [
            ("measured", "test_a[1]", _record("torch:cpu", 1, _power(2.0, low=True))),
            ("measured", "test_a[4]", _record("torch:cpu", 4, _power(3.0))),
            (
                "measured",
                "test_a[2]",
                _record("onnxruntime:cpu", 2, _power(5.0), rounds=20, unsupported=("p99",)),
            ),
            ("off", "test_b[2]", _record("torch:cpu", 2, OFF)),
            ("plain", "test_plain", None),
        ],
    )
    files = html_report.write_report([benchmark_json.read_run(run)], root / "out")
    return root / "out", files


def test_write_report_writes_the_page_and_a_png_and_svg_per_group_and_view(two_groups) -> None:
    out, files = two_groups
    assert files.html == out / "index.html"
    # The group of one batch size has no batch axis: its table, and no figure.
    expected = {f"measured-{v}{ext}" for v in plots.VIEWS for ext in (".png", ".svg")}
    assert {p.name for p in files.images} == expected
    assert {p.name for p in out.iterdir()} == expected | {"index.html"}
    for path in files.images:
        data = path.read_bytes()
        if path.suffix == ".png":
            assert data.startswith(PNG_SIGNATURE)
        else:
            assert ET.fromstring(data).tag.endswith("svg")


def test_the_page_is_well_formed_self_contained_and_embeds_every_figure(two_groups) -> None:
    out, _ = two_groups
    text = (out / "index.html").read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    # The page is written as well-formed markup, so an XML parser reads all of it.
    root = ET.fromstring(remove_prefix(text, "<!DOCTYPE html>"))
    assert "http://" not in text
    assert "https://" not in text
    assert not re.search(r"""(src|href)=["'](?!data:|#)""", text)
    images = [img.get("src", "") for img in root.iter("img")]
    assert len(images) == 3
    for src in images:
        prefix = "data:image/svg+xml;base64,"
        assert src.startswith(prefix)
        assert ET.fromstring(base64.b64decode(remove_prefix(src, prefix))).tag.endswith("svg")


def test_the_page_has_the_terminal_tables_cells_markers_and_footnotes(two_groups) -> None:
    out, _ = two_groups
    root = ET.fromstring(remove_prefix((out / "index.html").read_text(encoding="utf-8"), "<!DOCTYPE html>"))
    tables = [t for t in root.iter("table") if t.get("class") not in ("facts", "summary", "plain")]
    assert len(tables) == 2
    rows = [[td.text for td in tr.iter("td")][1:] for tr in tables[0].iter("tr")][1:]
    names = [next(tr.iter("td")).text for tr in tables[0].iter("tr") if list(tr.iter("td"))]
    assert all(names)  # the benchmark column: each row's test, by its parameters
    headers = [th.text for th in tables[0].iter("th")]
    assert headers == [
        "benchmark",
        "batch",
        "target",
        "precision",
        "repeats",
        "p50",
        "p99",
        "items/s",
        "host CPU/item",
        "host cores",
        "W",
        "J/item",
        "items/J",
        "flags",
    ]
    # Records written before repeats: one repeat each, and no flags.
    assert rows == [
        ["1", "torch:cpu", "fp32", "1", "1 ms", "2 ms", "1,000", "900 us", "0.9", "~40", "~0.5", "~2", "-"],
        [
            "2",
            "onnxruntime:cpu",
            "fp32",
            "1",
            "2 ms",
            "4 ms*",
            "1,000",
            "900 us",
            "0.9",
            "40",
            "0.2",
            "5",
            "-",
        ],
        ["4", "torch:cpu", "fp32", "1", "4 ms", "8 ms", "1,000", "900 us", "0.9", "40", "0.333", "3", "-"],
    ]
    off = [[td.text for td in tr.iter("td")][1:] for tr in tables[1].iter("tr")][1:]
    assert off == [
        ["2", "torch:cpu", "fp32", "1", "2 ms", "4 ms", "1,000", "900 us", "0.9", "n/m", "n/m", "n/m", "-"]
    ]
    sub = [p.text for p in root.iter("p") if p.get("class") == "sub"]
    assert "No plots against batch size: every row has batch size 2." in sub
    notes = [li.text for ul in root.iter("ul") if ul.get("class") == "notes" for li in ul.iter("li")]
    assert "~ = low confidence: the energy window is shorter than the sensor needs" in notes
    assert "n/m = power not measured: power measurement is off (--ipu-power=off)" in notes
    assert any(n.startswith("* too few rounds for this percentile") for n in notes)
    page = ET.tostring(root, encoding="unicode")
    for fact in ("Some CPU (4 CPUs)", "bench-node", "2026-11-29 20:31 UTC", "0123456789ab on main"):
        assert fact in page
    # The benchmark without a record has its own section, with pytest-benchmark's statistics.
    plain = next(s for s in root.iter("section") if "".join(s.find("h2").itertext()) == "plain")
    assert next(td.text for td in plain.iter("td")) == "test_plain"


def test_the_pages_footnotes_are_the_terminal_tables_footnotes(tmp_path: Path) -> None:
    path = _write_run(
        tmp_path / "run.json",
        [
            ("g", "t[1]", _record("torch:cpu", 1, OFF)),
            ("g", "t[2]", _record("torch:cpu", 2, _power(2.0, low=True))),
        ],
    )
    run = benchmark_json.read_run(path)
    rows = [report.Row("g", b.name, b.record) for b in run.benchmarks if b.record is not None]
    notes = report.footnotes(rows)
    assert notes == [
        "n/m = power not measured: power measurement is off (--ipu-power=off)",
        "~ = low confidence: the energy window is shorter than the sensor needs",
    ]
    table = html_report._table([run], "g")
    assert table.endswith('<ul class="notes">' + "".join(f"<li>{n}</li>" for n in notes) + "</ul>")
    assert report.footnotes([]) == []


def test_a_record_without_host_cost_shows_not_measured_on_the_page_and_why(tmp_path: Path) -> None:
    path = _write_run(tmp_path / "run.json", [("g", "t[1]", _record("torch:cpu", 1, OFF, cpu=None))])
    table = html_report._table([benchmark_json.read_run(path)], "g")
    root = ET.fromstring(f"<div>{table}</div>")
    headers = [th.text for th in root.iter("th")]
    cells = dict(zip(headers, [td.text for td in root.iter("td")]))
    assert (cells["host CPU/item"], cells["host cores"]) == ("n/m", "n/m")
    notes = [li.text or "" for li in root.iter("li")]
    assert any(n.startswith("host n/m = host cost not measured: no CPU time") for n in notes)


def test_multi_run_page_names_the_file_of_every_row(tmp_path: Path) -> None:
    a = _write_run(tmp_path / "a.json", [("g", "t[1]", _record("torch:cpu", 1, OFF))])
    b = _write_run(tmp_path / "b.json", [("g", "t[1]", _record("torch:cpu", 1, OFF))])
    runs = [benchmark_json.read_run(a), benchmark_json.read_run(b)]
    # The page alone, without rendering: the run column and the runs section.
    page = html_report._page(runs, [])
    root = ET.fromstring(remove_prefix(page, "<!DOCTYPE html>"))
    (table,) = [t for t in root.iter("table") if t.get("class") not in ("facts", "summary")]
    assert next(th.text for th in table.iter("th")) == "run"
    assert [tr.findtext("td") for tr in table.iter("tr") if tr.find("td") is not None] == ["a.json", "b.json"]
    assert "run a.json" in page
    assert "run b.json" in page


def test_a_group_of_one_run_among_several_has_no_run_column_and_its_caption_names_the_run(
    tmp_path: Path,
) -> None:
    a = _write_run(tmp_path / "a.json", [("g", "t[1]", _record("torch:cpu", 1, OFF))])
    b = _write_run(tmp_path / "b.json", [("h", "u[1]", _record("torch:cpu", 1, OFF))])
    runs = [benchmark_json.read_run(a), benchmark_json.read_run(b)]
    root = ET.fromstring(f"<div>{html_report._table(runs, 'h')}</div>")
    assert next(th.text for th in root.iter("th")) == "benchmark"
    assert root.findtext("p") == "latency per call; throughput summed over instances; every row from b.json"


def _two_batch_sizes(path: Path) -> Path:
    """A run of one group over batch sizes 1 and 2: a group with a batch axis, so it is plotted."""
    return _write_run(path, [("g", f"t[{b}]", _record("torch:cpu", b, OFF)) for b in (1, 2)])


def test_main_prints_what_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _two_batch_sizes(tmp_path / "run.json")
    assert html_report.main([run], tmp_path / "out") == 0
    out = capsys.readouterr().out.splitlines()
    # Power was off for every row: no items/J figure (a plot of nothing), and the page says so.
    assert out[0] == f"wrote {tmp_path / 'out' / 'index.html'} (1 group(s), 2 figure(s))"
    assert out[1] == f"wrote 4 image(s), PNG and SVG, to {tmp_path / 'out'}"
    page = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert f"Not drawn, nothing measured: {plots.VIEW_TITLES['items_per_j']}" in page


def test_a_run_of_one_batch_size_gets_its_table_and_no_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _write_run(
        tmp_path / "run.json",
        [("g", "t[a]", _record("torch:cpu", 1, OFF)), ("g", "t[b]", _record("onnxruntime:cpu", 1, OFF))],
    )
    assert html_report.main([run], tmp_path / "out") == 0
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {tmp_path / 'out' / 'index.html'} (1 group(s), 0 figure(s))"
    ]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["index.html"]
    page = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    root = ET.fromstring(remove_prefix(page, "<!DOCTYPE html>"))
    assert not list(root.iter("img"))
    assert len([t for t in root.iter("table") if t.get("class") not in ("facts", "summary")]) == 1
    assert "No plots against batch size: every row has batch size 1." in page


def test_the_study_swept_over_batch_sizes_comes_first_on_the_page(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "run.json",
        [
            # A side benchmark of one batch size, seen first and with the most rows.
            *(("side", f"s[{k}]", _record("python:host", 1, OFF)) for k in range(8)),
            *(("small-sweep", f"m[{b}]", _record("torch:cpu", b, OFF)) for b in (1, 2)),
            *(
                ("study", f"r[{t}-{b}]", _record(t, b, OFF))
                for t in ("torch:cpu", "ort:cpu")
                for b in (2, 4, 6)
            ),
        ],
    )
    runs = [benchmark_json.read_run(run)]
    assert plots.report_order(runs) == ["study", "small-sweep", "side"]
    root = ET.fromstring(remove_prefix(html_report._page(runs, []), "<!DOCTYPE html>"))
    headings = [h.text for h in root.iter("h2")]
    assert headings == ["Summary", "study", "small-sweep", "side", "Machine and run"]
    # The page leads with the summary: three figure rows per study swept over batch sizes, the
    # study's first (its name spans its rows).
    summary, study = list(root.iter("table"))[:2]
    assert summary.get("class") == "summary"
    rows = [list(tr.iter("td")) for tr in summary.iter("tr")][1:]
    assert len(rows) == 6
    assert [row[0].findtext("a") for row in rows if len(row) == 5] == ["study", "small-sweep"]
    assert "6 row(s)" in "".join(rows[0][0].itertext())
    titles = ["lowest p50 latency", "highest throughput", "highest items/J"]
    assert [row[-4].text for row in rows[:3]] == titles
    assert "".join(rows[2][-3].itertext()).startswith("not measured: ")
    # Then the study's table: nothing (not the machine's facts) comes between.
    assert study.get("class") not in ("facts", "summary")
    assert len(list(study.iter("tr"))) == 1 + 6


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{not json", "not JSON"),
        ('{"foo": 1}', "not a pytest-benchmark run"),
    ],
)
def test_main_refuses_bad_input_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    assert html_report.main([path], tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pytest-ipu: {path}: {message}")
    assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_main_refuses_a_run_without_pytest_ipu_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write_run(tmp_path / "plain.json", [("g", "test_plain", None)])
    assert html_report.main([path], tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pytest-ipu: {path}: no benchmark carries extra_info['ipu']")
    assert err.endswith("nothing to report\n")
    assert err.count("\n") == 1


def test_main_says_when_the_output_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _write_run(tmp_path / "run.json", [("g", "t[1]", _record("torch:cpu", 1, OFF))])
    blocker = tmp_path / "out"
    blocker.write_text("a file where the directory should be", encoding="utf-8")
    assert html_report.main([run], blocker) == 2
    assert capsys.readouterr().err.startswith(f"pytest-ipu: {blocker}: cannot write: ")


def test_a_failed_figure_leaves_no_page_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    run = _two_batch_sizes(tmp_path / "run.json")
    out = tmp_path / "out"
    out.mkdir()
    (out / "index.html").write_text("the previous report", encoding="utf-8")

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", broken)
    with pytest.raises(OSError, match="No space left"):
        html_report.write_report([benchmark_json.read_run(run)], out)
    assert [p.name for p in out.iterdir()] == ["index.html"]
    assert (out / "index.html").read_text(encoding="utf-8") == "the previous report"


def test_a_failed_page_write_leaves_the_old_page_whole_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _two_batch_sizes(tmp_path / "run.json")
    out = tmp_path / "out"
    out.mkdir()
    (out / "index.html").write_text("the previous report", encoding="utf-8")
    real_replace = Path.replace

    def replace(self: Path, target: Any) -> Path:
        if Path(target).name == "index.html":
            raise OSError(5, "Input/output error")
        return real_replace(self, target)

    monkeypatch.setattr(Path, "replace", replace)
    with pytest.raises(OSError, match="Input/output error"):
        html_report.write_report([benchmark_json.read_run(run)], out)
    assert (out / "index.html").read_text(encoding="utf-8") == "the previous report"
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    assert len(list(out.glob("*.png"))) == 2  # no items/J figure: power was off for every row


def test_write_report_refuses_a_record_that_cannot_be_plotted(tmp_path: Path) -> None:
    # Files are checked when read; this run is made in memory, past the reader, as a plugin would.
    good = schema.from_json(_record("torch:cpu", 2, OFF))
    bad = dataclasses.replace(good, throughput_items_per_s=float("nan"))
    stored = benchmark_json.StoredRun(
        tmp_path / "run.json",
        {},
        {},
        None,
        (benchmark_json.StoredBenchmark("t[2]", "bench.py::t[2]", "g", bad),),
    )
    with pytest.raises(html_report.ReportError, match="batch size 2: the value is nan, not a finite number"):
        html_report.write_report([stored], tmp_path / "out")
    assert not (tmp_path / "out" / "index.html").exists()
