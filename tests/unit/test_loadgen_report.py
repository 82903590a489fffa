"""LoadGen benchmarks in the reports: their own terminal table (report.loadgen, split off by
report.terminal.tables), the HTML page's LoadGen section, and the latency-against-QPS figure
(report.loadgen_plot) whose points come from a Server search's probes."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.cli import main as cli
from pytest_ipu.measure.metrics import run_cpu_time
from pytest_ipu.report import html as html_report
from pytest_ipu.report import loadgen as loadgen_report
from pytest_ipu.report import loadgen_plot
from pytest_ipu.report import plots
from pytest_ipu.report import terminal as report
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import schema
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.loadgen import BatchingRecord
from pytest_ipu.results.loadgen import LoadgenRecord
from pytest_ipu.results.loadgen import PeakSearch
from pytest_ipu.results.loadgen import ServerProbe
from pytest_ipu.results.records import IpuRecord
from tests.unit.run_files import bench
from tests.unit.run_files import record
from tests.unit.run_files import write

requires_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="needs matplotlib (the extra 'report': pip install matplotlib)",
)

LATENCY = {"min": 0.001, "mean": 0.003, "max": 0.009, "p50": 0.0025, "p90": 0.004, "p99": 0.006}
NOT_COMPLIANT = (
    "no MLPerf benchmark named (mlperf_model=...): judged by MLPerf's general rules",
    "minimum duration 1 s < MLPerf's 600 s",
)
TOO_SLOW = (
    "latency bound not met at the target percentile",
    "LoadGen: Reduce target QPS to improve latency.",
)


def probe(target: float, latency: float, valid: bool, scheduled: float | None = None) -> ServerProbe:
    return ServerProbe(
        target_qps=target,
        valid=valid,
        scheduled_qps=scheduled,
        completed_qps=target,
        latency_s=latency,
        reasons=() if valid else TOO_SLOW,
        elapsed_s=1.0,
    )


#: A search's probes in the order run (bisection): the peak is the highest VALID target, 300.
PROBES = (
    probe(200.0, 0.010, True, scheduled=204.0),
    probe(400.0, 0.090, False, scheduled=None),
    probe(300.0, 0.030, True, scheduled=306.0),
    probe(350.0, 0.070, False, scheduled=355.0),
)


def part(scenario: str = "SingleStream", **changes: Any) -> LoadgenRecord:
    """A LoadgenRecord: VALID, not compliant, with the fields of ``scenario``; ``changes`` override."""
    fields: dict[str, Any] = {
        "scenario": scenario,
        "mode": "performance",
        "version": "6.0.17 @ d6147c7eb7",
        "settings": {
            "min_duration_ms": 1000,
            "target_latency_ns": 50_000_000 if scenario == "Server" else 0,
            "target_latency_percentile": 0.99 if scenario == "Server" else 0.9,
        },
        "valid": True,
        "invalid_reasons": (),
        "checks": {"min_duration_met": True},
        "early_stopping": "",
        "early_stopping_latency_s": 0.0045 if scenario in ("SingleStream", "MultiStream") else None,
        "query_count": 500,
        "samples_per_query": 1,
        "samples_per_s": 400.0,
        "scheduled_qps": 306.0 if scenario == "Server" else None,
        "latency_s": LATENCY,
        "mlperf_model": None,
        "mlperf_compliant": False,
        "compliance_reasons": NOT_COMPLIANT,
        "batching": BatchingRecord(8, 0.0, None, 1, 100, 5.0, {"5": 100}, (100,)),
        "log_dir": f"/runs/latest.loadgen/test_{scenario.lower()}",
        "errors": (),
    }
    fields.update(changes)
    return LoadgenRecord(**fields)


def search(probes: tuple[ServerProbe, ...] = PROBES, peak: float | None = 300.0) -> PeakSearch:
    return PeakSearch(peak, probes, 10, None, 0.05, "converged", 400.0, 350.0 if peak else 200.0)


def ipu(lg: LoadgenRecord, target: str = "torch:cpu") -> IpuRecord:
    """The IpuRecord of a LoadGen benchmark, as the schema reads it back."""
    data = record(lg.batching.max_batch, LATENCY["p50"], lg.samples_per_s or 1.0, loadgen=lg)
    return schema.from_json({**data, "target": target})


def _lines_of(lines: list[str], title: str) -> list[str]:
    start = lines.index(title)
    return lines[start : lines.index("", start)]


def _row(lines: list[str], name: str) -> list[str]:
    return next(line for line in lines if line.startswith(name + " ")).split()


# --- the terminal table ----------------------------------------------------------------------------


def test_loadgen_rows_leave_the_benchmark_table_for_a_loadgen_table() -> None:
    server = part("Server", peak=search())
    rows = [
        report.Row("test_mlp", "test_mlp[4]", dataclasses.replace(ipu(part()), loadgen=None)),
        # 0.3 s of host CPU time over a 0.5 s LoadGen run that answered 200 samples.
        report.Row(
            "test_srv",
            "test_srv",
            dataclasses.replace(ipu(server), cpu=run_cpu_time(300_000_000, 0, 0, 0.5, 200)),
        ),
        # A record written before LoadGen runs measured their host cost.
        report.Row("test_ss", "test_ss", ipu(part())),
    ]
    lines = report.tables(rows)
    # The plain benchmark keeps its table; the LoadGen ones have none of the benchmark tables.
    assert "test_mlp (latency per call; throughput summed over instances)" in lines
    assert not any(line.startswith(("test_srv (latency", "test_ss (latency")) for line in lines)
    table = _lines_of(lines, loadgen_report.TITLE)
    assert table[1].split() == [
        "benchmark",
        "target",
        "scenario",
        "verdict",
        "samples/s",
        "Server",
        "QPS",
        "p50",
        "p99",
        "host",
        "CPU/item",
        "host",
        "cores",
        "early",
        "stop",
        "probes",
        "MLPerf",
        "compliant",
    ]
    assert _row(table, "test_srv") == [
        "test_srv",
        "torch:cpu",
        "Server",
        "VALID",
        "400",
        "300",
        "2.5",
        "ms",
        "6",
        "ms",
        "1.5",
        "ms",
        "0.6",
        "-",
        "4",
        "no",
    ]
    assert _row(table, "test_ss") == [
        "test_ss",
        "torch:cpu",
        "SingleStream",
        "VALID",
        "400",
        "-",
        "2.5",
        "ms",
        "6",
        "ms",
        "n/m",
        "n/m",
        "4.5",
        "ms",
        "-",
        "no",
    ]
    assert (
        "host n/m = host cost not measured: no CPU time: a LoadGen record written before LoadGen runs "
        "measured their host cost"
    ) in table
    # The benchmark table's marks are not explained under the LoadGen table: it uses none.
    assert not any(line.startswith(("^ = ", "* ")) for line in table)


def test_an_invalid_run_has_its_verdict_and_reasons_and_no_server_qps() -> None:
    invalid = part("Server", valid=False, invalid_reasons=TOO_SLOW, scheduled_qps=900.0)
    table = report.tables([report.Row("test_srv", "test_srv", ipu(invalid))])
    cells = _row(table, "test_srv")
    assert cells[3:6] == ["INVALID", "400", "-"]
    assert f"INVALID: test_srv: {'; '.join(TOO_SLOW)}" in table


def test_a_search_without_a_valid_probe_says_why_it_has_no_server_qps() -> None:
    probes = tuple(probe(q, 0.2, False, scheduled=q) for q in (100.0, 50.0))
    lg = part("Server", valid=False, invalid_reasons=TOO_SLOW, peak=search(probes, peak=None))
    lines = loadgen_report.loadgen_lines([("test_srv", ipu(lg))])
    assert _row(lines, "test_srv")[3:6] == ["INVALID", "400", "-"]
    assert any(
        line.startswith("no Server QPS: test_srv: the peak search found no QPS")
        and "the lowest at 50 QPS" in line
        for line in lines
    )


def test_an_accuracy_run_shows_accuracy_for_its_verdict_and_its_score() -> None:
    lg = part(mode="accuracy", valid=None, accuracy=0.875, accuracy_name="top1")
    lines = loadgen_report.loadgen_lines([("test_acc", ipu(lg))])
    assert _row(lines, "test_acc")[3] == "accuracy"
    assert "accuracy: test_acc: top1 0.875" in lines


def test_notes_say_where_the_logs_are_and_why_no_row_is_compliant() -> None:
    compliant = part(mlperf_compliant=True, compliance_reasons=(), log_dir="/runs/latest.loadgen/test_ok")
    bound = "latency bound 50 ms > MLPerf's 10 ms"
    server = part("Server", compliance_reasons=(*NOT_COMPLIANT, bound))
    lines = loadgen_report.loadgen_lines(
        [("test_ok", ipu(compliant)), ("test_server", ipu(server)), ("test_ss", ipu(part()))]
    )
    assert [_row(lines, n)[-1] for n in ("test_ok", "test_server", "test_ss")] == ["yes", "no", "no"]
    logs = next(line for line in lines if line.startswith("LoadGen's logs"))
    assert "/runs/latest.loadgen/" in logs
    assert all(name in logs for name in ("test_ok", "test_server", "test_singlestream"))
    assert any("no row is an MLPerf submission" in line for line in lines)
    # The reasons every failing row shares are said once, without their explanation; then each
    # row's own.
    assert (
        '  every "no" row: no MLPerf benchmark named (mlperf_model=...); minimum duration 1 s < '
        in "\n".join(lines)
    )
    assert f"  test_server: {bound}" in lines
    assert not any(line.startswith("  test_ss:") or line.startswith("  test_ok:") for line in lines)


def test_logs_in_different_folders_are_named_one_by_one() -> None:
    a, b = part(log_dir="/a/x"), part(log_dir="/b/y")
    lines = loadgen_report.notes([("test_a", ipu(a)), ("test_b", ipu(b))])
    assert any(line.endswith("test_a: /a/x; test_b: /b/y") for line in lines)


def test_two_runs_of_one_benchmark_are_told_apart_by_their_group() -> None:
    rows = [
        report.Row("test_ss (a.json)", "test_ss", ipu(part())),
        report.Row("test_ss (b.json)", "test_ss", ipu(part(samples_per_s=800.0))),
    ]
    table = _lines_of(report.tables(rows), loadgen_report.TITLE)
    assert _row(table, "test_ss (a.json)")[5] == "400"
    assert _row(table, "test_ss (b.json)")[5] == "800"


def test_summary_prints_the_loadgen_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write(
        tmp_path / "run.json",
        _stored_bench("test_srv", part("Server", peak=search())),
        bench(2, 0.002, 1000.0),
    )
    assert cli.main(["summary", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert _row(_lines_of(out, loadgen_report.TITLE), "test_srv")[3:6] == ["VALID", "400", "300"]
    assert "mlp (latency per call; throughput summed over instances)" in out


# --- the figure's data -----------------------------------------------------------------------------


def _stored_bench(name: str, lg: LoadgenRecord, target: str = "torch:cpu") -> dict[str, Any]:
    return {
        "group": None,
        "name": name,
        "fullname": f"bench.py::{name}",
        "params": {},
        "stats": {},
        "extra_info": {"ipu": schema.to_json(ipu(lg, target))},
    }


def _run(*benchmarks: tuple[str, LoadgenRecord, str], path: str = "run.json") -> StoredRun:
    return StoredRun(
        Path(path),
        {"cpu": {"brand_raw": "Some CPU", "count": 8}},
        {},
        "2026-11-29T20:31:34+00:00",
        tuple(StoredBenchmark(n, f"bench.py::{n}", None, ipu(lg, t)) for n, lg, t in benchmarks),
    )


def test_a_searchs_points_are_its_probes_in_rate_order_at_the_scheduled_rate() -> None:
    runs = [_run(("test_srv", part("Server", peak=search()), "torch:cpu"))]
    (chart,) = loadgen_plot.charts(runs)
    assert chart.target == "torch:cpu"
    (curve,) = chart.curves
    # Scheduled where LoadGen logged it, the target rate where it did not (400).
    assert [(p.qps, p.latency_s, p.valid) for p in curve.probes] == [
        (204.0, 0.010, True),
        (306.0, 0.030, True),
        (355.0, 0.070, False),
        (400.0, 0.090, False),
    ]
    assert [p.peak for p in curve.probes] == [False, True, False, False]
    assert curve.bound_s == pytest.approx(0.05)
    assert curve.percentile == 0.99
    assert curve.peak_qps == 300.0


def test_other_scenarios_of_the_target_are_single_points_and_offline_a_line() -> None:
    runs = [
        _run(
            ("test_srv", part("Server", peak=search()), "torch:cpu"),
            ("test_ss", part(), "torch:cpu"),
            ("test_off", part("Offline", samples_per_s=900.0), "torch:cpu"),
            ("test_other", part(), "onnxruntime:cpu"),
            ("test_acc", part(mode="accuracy", valid=None), "torch:cpu"),
            ("test_one_rate", part("Server"), "torch:cpu"),
        )
    ]
    (chart,) = loadgen_plot.charts(runs)  # onnxruntime:cpu has no search: no figure
    assert [(s.label, s.scenario, s.samples_per_s, s.latency_s) for s in chart.singles] == [
        ("test_ss", "SingleStream", 400.0, LATENCY["p99"]),
        ("test_off", "Offline", 900.0, None),
    ]
    assert [c.label for c in chart.curves] == ["test_srv"]


def test_no_search_no_chart_and_several_runs_are_named() -> None:
    assert loadgen_plot.charts([_run(("test_ss", part(), "torch:cpu"))]) == []
    runs = [
        _run(("test_srv", part("Server", peak=search()), "torch:cpu"), path="a/run.json"),
        _run(("test_srv", part("Server", peak=search()), "torch:cpu"), path="b/other.json"),
    ]
    (chart,) = loadgen_plot.charts(runs)
    assert [(c.label, c.run) for c in chart.curves] == [
        ("test_srv | run.json", 0),
        ("test_srv | other.json", 1),
    ]


def test_labels_keep_what_tells_the_benchmarks_apart() -> None:
    # One test function parametrized over models and the target: its parameters, less the target
    # (the figure's title); the run's file only when the figure holds more than one run.
    study = "test_study[resnet50-64px-torch-cpu-{}]"
    one = [
        _run(
            (study.format("Server"), part("Server", peak=search()), "torch:cpu"),
            (study.format("SingleStream"), part(), "torch:cpu"),
        ),
        _run(("test_ss", part(), "onnxruntime:cpu"), path="other.json"),  # another target's figure
    ]
    (chart,) = loadgen_plot.charts(one)
    assert [c.label for c in chart.curves] == ["resnet50-64px-Server"]
    assert [s.label for s in chart.singles] == ["resnet50-64px-SingleStream"]
    mixed = [
        _run((study.format("Server"), part("Server", peak=search()), "torch:cpu")),
        _run(("test_srv", part("Server", peak=search()), "torch:cpu"), path="b/new.json"),
    ]
    (chart,) = loadgen_plot.charts(mixed)
    assert [c.label for c in chart.curves] == [f"{study.format('Server')} | run.json", "test_srv | new.json"]


def test_a_probe_that_cannot_be_plotted_is_refused_by_name() -> None:
    # Made in memory: a run file with it would be refused when read.
    bad = (probe(200.0, float("nan"), True, scheduled=204.0),)
    good = _run(("test_srv", part("Server", peak=search()), "torch:cpu"))
    record = dataclasses.replace(ipu(part()), loadgen=part("Server", peak=search(bad, peak=200.0)))
    runs = [dataclasses.replace(good, benchmarks=(dataclasses.replace(good.benchmarks[0], record=record),))]
    (chart,) = loadgen_plot.charts(runs)
    with pytest.raises(plots.PlotError, match="'test_srv': the latency is nan"):
        loadgen_plot.check(chart)


# --- the HTML page and its figure ------------------------------------------------------------------


@requires_matplotlib
def test_the_page_has_a_loadgen_section_with_its_table_and_figure(tmp_path: Path) -> None:
    invalid = part(valid=False, invalid_reasons=("min duration not met",), log_dir="/runs/x/test_bad")
    path = write(
        tmp_path / "run.json",
        _stored_bench("test_srv", part("Server", peak=search())),
        _stored_bench("test_bad", invalid),
        bench(2, 0.002, 1000.0),
        bench(4, 0.003, 1300.0),
    )
    files = html_report.write_report([benchmark_json.read_run(path)], tmp_path / "out")
    png = tmp_path / "out" / "loadgen-torch-cpu.png"
    assert png in files.images
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert (tmp_path / "out" / "loadgen-torch-cpu.svg") in files.images
    page = files.html.read_text(encoding="utf-8")
    section = page[
        page.index('<section id="loadgen">') : page.index("</section>", page.index('id="loadgen"'))
    ]
    assert "<h2>LoadGen</h2>" in section
    assert "<td>test_srv</td>" in section
    assert "<td>test_bad</td>" in section
    assert "<td>INVALID</td>" in section
    assert "INVALID: test_bad: min duration not met" in section
    assert '<td class="num">300</td>' in section  # the Server QPS: the search's peak
    assert "loadgen-torch-cpu.png" in section
    assert "data:image/svg+xml;base64," in section
    # The plain benchmarks keep their group; the LoadGen ones are not in one.
    assert "<h2>mlp</h2>" in page
    assert "<h2>test_srv</h2>" not in page
    assert "<h2>test_bad</h2>" not in page


@requires_matplotlib
def test_the_loadgen_figure_names_the_hardware_of_every_run_not_of_the_last_group_drawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The batch sweep ran on the CPU, the LoadGen benchmark on an IPU: the sweep's figures name the
    # CPU alone, and the LoadGen figure must still name the IPU its points were measured on.
    served = _stored_bench("test_srv", part("Server", peak=search()), target="poptorch:ipu")
    served["extra_info"]["ipu"].update(device="ipu", device_name="GC200 IPU")
    path = write(tmp_path / "run.json", served, bench(2, 0.002, 1000.0), bench(4, 0.003, 1300.0))
    runs = [benchmark_json.read_run(path)]
    drawn: list[str] = []
    real = loadgen_plot.draw

    def draw(chart: loadgen_plot.Chart, *, machine: str = "") -> Any:
        drawn.append(machine)
        return real(chart, machine=machine)

    monkeypatch.setattr(loadgen_plot, "draw", draw)
    html_report.write_report(runs, tmp_path / "out")
    assert "GC200 IPU" not in plots.machine_label(runs, "mlp")
    assert drawn == [plots.machine_label(runs)]
    assert "GC200 IPU" in drawn[0]


@requires_matplotlib
def test_a_run_without_loadgen_records_has_no_loadgen_section(tmp_path: Path) -> None:
    path = write(tmp_path / "run.json", bench(2, 0.002, 1000.0), bench(4, 0.003, 1300.0))
    files = html_report.write_report([benchmark_json.read_run(path)], tmp_path / "out")
    page = files.html.read_text(encoding="utf-8")
    assert 'id="loadgen"' not in page
    assert "LoadGen" not in page
    assert not any(p.name.startswith("loadgen-") for p in files.images)


def test_a_loadgen_only_run_without_a_search_has_its_table_and_no_figure(tmp_path: Path) -> None:
    path = write(tmp_path / "run.json", _stored_bench("test_ss", part()))
    files = html_report.write_report([benchmark_json.read_run(path)], tmp_path / "out")
    page = files.html.read_text(encoding="utf-8")
    assert '<section id="loadgen">' in page
    assert "<td>test_ss</td>" in page
    assert "No figure of latency against QPS" in page
    assert files.images == ()


def test_the_groups_leave_out_loadgen_benchmarks() -> None:
    runs = [_run(("test_srv", part("Server", peak=search()), "torch:cpu"))]
    assert plots.groups(runs) == ["test_srv"]
    assert plots.groups(html_report.generic(runs)) == []
    assert dataclasses.replace(runs[0], benchmarks=()) == html_report.generic(runs)[0]
