"""``pytest-ipu compare``: pairing, ratios and their direction, ordering, one row per metric, notes,
formats, exit codes."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.cli import main as cli
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.report import compare as compare_report
from pytest_ipu.results import codec
from pytest_ipu.results import compare
from pytest_ipu.results import decide
from pytest_ipu.results import gates
from pytest_ipu.results import schema
from pytest_ipu.results.benchmark_json import read_run
from pytest_ipu.results.records import RepeatRecord
from tests.unit.run_files import bench
from tests.unit.run_files import write

#: Three repeats a little apart (1 % sd), geometric mean 1: the spread a change is judged against.
SPREAD = (1.0, 1.01, 1 / 1.01)


def repeated(batch: int, p50s: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """A benchmark whose record has one repeat per median latency in ``p50s`` (``batch`` items a
    call at that latency), its own figures their geometric means, as ``pool`` makes them."""
    centre = math.prod(p50s) ** (1 / len(p50s))
    entry = bench(batch, centre, batch / centre, seed=seed)
    entry["extra_info"]["ipu"]["repeats"] = [
        RepeatRecord(
            i + 1, 40, 40 * p, LatencySummary(p * 0.9, p, p * 1.1, p * 1.2, p * 1.3, p, 40), batch / p
        ).as_json()
        for i, p in enumerate(p50s)
    ]
    return entry


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    def at(batch: int, p50: float, seed: int = 0) -> dict[str, Any]:
        return repeated(batch, [p50 * f for f in SPREAD], seed=seed)

    a = write(tmp_path / "a.json", at(10, 0.010), at(2, 0.002), at(4, 0.004))
    b = write(tmp_path / "b.json", at(2, 0.002, seed=1), at(10, 0.013, seed=1), at(4, 0.004, seed=1))
    return a, b


def test_pairs_by_name_sorts_by_batch_and_marks_direction(runs: tuple[Path, Path]) -> None:
    comparison = compare.compare_runs([read_run(p) for p in runs])
    names = list(dict.fromkeys(line.name for line in comparison.lines))
    assert names == ["test_mlp[torch-cpu-2]", "test_mlp[torch-cpu-4]", "test_mlp[torch-cpu-10]"]
    by = {(line.name, line.metric.name): line for line in comparison.lines}
    slower = by[("test_mlp[torch-cpu-10]", "latency.p50")]
    assert slower.values == pytest.approx((0.010, 0.013))
    assert slower.ratio(1) == pytest.approx(1.3)
    assert slower.verdict(1) == "worse"
    assert compare_report.format_change(slower, 1) == "+30.0% worse (p<0.001)"
    lower_throughput = by[("test_mlp[torch-cpu-10]", "throughput")]
    assert lower_throughput.verdict(1) == "worse"  # better higher: a drop is worse
    # Unchanged, but three repeats 1 % apart cannot show it within 1 %: the interval is wider.
    unchanged = by[("test_mlp[torch-cpu-2]", "throughput")]
    interval = unchanged.interval(1)
    assert interval is not None
    assert interval[0] < 1 - compare.SAME_WITHIN
    assert interval[1] > 1 + compare.SAME_WITHIN
    assert unchanged.verdict(1) == "within noise"
    assert comparison.missing == ()
    assert comparison.hardware == ()


def test_missing_benchmarks_and_other_hardware_are_noted(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", bench(2, 0.002, 1000.0), bench(4, 0.004, 1000.0))
    b = write(tmp_path / "b.json", bench(2, 0.002, 1000.0), cpu="EPYC")
    comparison = compare.compare_runs([read_run(a), read_run(b)])
    assert comparison.missing == ("tests/test_mlp.py::test_mlp[torch-cpu-4]: not in b.json",)
    assert comparison.hardware == ("b.json ran on different hardware from a.json: cpu 'Xeon' vs 'EPYC'",)
    text = compare_report.render_table(comparison)
    assert "missing: tests/test_mlp.py::test_mlp[torch-cpu-4]: not in b.json" in text
    assert "hardware: b.json ran on different hardware" in text


def test_markdown_and_csv(runs: tuple[Path, Path]) -> None:
    comparison = compare.compare_runs([read_run(p) for p in runs])
    markdown = compare_report.render_markdown(comparison).splitlines()
    assert markdown[0] == "| group | benchmark | metric | a.json | b.json | b.json vs a.json |"
    assert markdown[1] == "|---|---|---|---:|---:|---:|"
    assert (
        "| mlp | test_mlp[torch-cpu-10] | latency.p50 | 10 ms | 13 ms | +30.0% worse (p<0.001) |" in markdown
    )
    rows = list(csv.reader(io.StringIO(compare_report.render_csv(comparison))))
    assert rows[0] == [
        "group",
        "benchmark",
        "metric",
        "unit",
        "better",
        "a.json",
        "b.json",
        "b.json/a.json",
        "b.json verdict",
        "b.json p",
    ]
    row = next(r for r in rows if r[1] == "test_mlp[torch-cpu-10]" and r[2] == "latency.p50")
    assert (row[3], row[4]) == ("s", "lower")
    assert (float(row[5]), float(row[6])) == pytest.approx((0.010, 0.013))
    assert float(row[7]) == pytest.approx(1.3)
    assert row[8] == "worse"
    assert 0.0 <= float(row[9]) < 0.001  # the raw p: CSV is for scripts
    unchanged = next(r for r in rows if r[1] == "test_mlp[torch-cpu-2]" and r[2] == "latency.p50")
    assert unchanged[8] == "within noise"  # its interval is wider than +/- 1 %: not shown the same


def test_long_file_names_become_numbered_columns_with_a_legend(tmp_path: Path) -> None:
    a = write(tmp_path / ("a" * 30 + ".json"), bench(2, 0.002, 1000.0))
    b = write(tmp_path / "b.json", bench(2, 0.002, 1000.0))
    text = compare_report.render_table(compare.compare_runs([read_run(a), read_run(b)]))
    assert text.splitlines()[0] == f"#1 = {a}"
    assert " #2 vs #1" in text


def test_cli_exit_codes(runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = map(str, runs)
    assert cli.main(["compare", a, b]) == 0
    # +50 %: the 30 % slower benchmark and the unchanged ones all clearly within: 0, one summary line.
    assert cli.main(["compare", a, b, "--gate", "latency.p50:+50%"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("\ngates: 3 checked: 3 PASS, 0 FAIL, 0 INCONCLUSIVE")
    # +10 %: the 30 % slower one FAILs (1), and is the one line listed under the summary.
    assert cli.main(["compare", a, b, "--gate", "latency.p50:+10%", "--format", "markdown"]) == 1
    out = capsys.readouterr().out
    tail = out.rstrip().splitlines()[-2:]
    assert tail[0] == "- gates: 3 checked: 2 PASS, 1 FAIL, 0 INCONCLUSIVE"
    assert tail[1].startswith(
        "- test_mlp[torch-cpu-10] latency.p50: 10 ms -> 13 ms (+30.0%, threshold +10%), "
    )
    assert ": FAIL (repeats: 3 current vs 3 baseline repeats" in tail[1]
    assert ": PASS (" not in out  # the passes are counted, not listed
    # +25 %: the 30 % is within the 5 % drift allowance of it: INCONCLUSIVE (3), with what to do.
    assert cli.main(["compare", a, b, "--gate", "latency.p50:+25%"]) == 3
    out = capsys.readouterr().out
    tail = out.rstrip().splitlines()[-2:]
    assert tail[0] == "gates: 3 checked: 2 PASS, 0 FAIL, 1 INCONCLUSIVE"
    # The undecided benchmark once, with the cause and the smallest threshold it decides.
    assert tail[1].startswith("INCONCLUSIVE test_mlp[torch-cpu-10]: latency.p50: spread ")
    assert ", 5% drift allowance: smallest threshold this evidence decides: +" in tail[1]
    # --verbose: the verdict's own line, with what would decide it.
    assert cli.main(["compare", a, b, "--gate", "latency.p50:+25%", "--verbose"]) == 3
    tail = capsys.readouterr().out.rstrip().splitlines()[-2:]
    assert tail[1].startswith("test_mlp[torch-cpu-10] latency.p50: 10 ms -> 13 ms (+30.0%, threshold +25%)")
    assert tail[1].endswith("give 3 or more baseline runs, whose drift is measured")
    # --drift narrows the allowance: at 1 % the repeats show the 30 % beyond +25 % for this gate
    # alone (p=0.011 of "within"), not at the job's 1 % family-wise level over its 3 gate checks.
    narrow = ["compare", a, b, "--gate", "latency.p50:+25%", "--drift", "1%"]
    assert cli.main([*narrow, "--verbose"]) == 3
    out = capsys.readouterr().out
    assert "widened by the 1% run-to-run drift allowance" in out
    assert "not beyond the threshold at the job's 1% family-wise level: its one-sided p=0.011 of" in out
    # At a 5 % job level Holm's first step is 5 % / 3 = 0.0167: a FAIL of the job.
    assert cli.main([*narrow, "--job-alpha", "5%"]) == 1
    assert "bad" not in capsys.readouterr().err
    assert cli.main([*narrow, "--job-alpha", "50%"]) == 2
    assert "--job-alpha '50%': expected a level such as '1%'" in capsys.readouterr().err
    assert cli.main(["compare", a, b, "--gate", "latency.p50<11ms"]) == 1  # b's 13 ms breaks the bound
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compare", "A"], "pytest-ipu: compare needs at least two runs, got 1 (A)"),
        (["compare", "A", "MISSING"], "pytest-ipu: MISSING: no such file, and not a saved-run id or glob of"),
        (
            ["compare", "A", "FOREIGN"],
            "pytest-ipu: FOREIGN: not a pytest-benchmark run (no 'benchmarks' list)",
        ),
        (["compare", "A", "A", "--gate", "speed:-5%"], "pytest-ipu: --gate: bad gate 'speed:-5%'"),
        (
            ["compare", "A", "A", "--drift", "0"],
            "pytest-ipu: --drift '0': expected a share such as '5%' or '0.05', above 0 and at most 100%",
        ),
    ],
)
def test_cli_bad_input_exits_2_naming_the_file(
    runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    (tmp_path / "foreign.json").write_text('{"results": []}')
    paths = {
        "A": str(runs[0]),
        "MISSING": str(tmp_path / "missing.json"),
        "FOREIGN": str(tmp_path / "foreign.json"),
    }
    argv = [paths.get(a, a) for a in argv]
    for key in ("MISSING", "FOREIGN", "A"):
        message = message.replace(key, paths[key])
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert err.count("\n") == 1


def test_strict_makes_a_missing_benchmark_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path / "a.json", bench(2, 0.002, 1000.0), bench(4, 0.004, 1000.0))
    b = write(tmp_path / "b.json", bench(2, 0.002, 1000.0))
    assert cli.main(["compare", str(a), str(b)]) == 0
    assert cli.main(["compare", str(a), str(b), "--strict"]) == 1
    assert "1 benchmark(s) missing from a run (--strict)" in capsys.readouterr().err
    # One repeat a side: the gate is INCONCLUSIVE (3), and --strict still fails the missing benchmark.
    gate = ["--gate", "latency.p50:+5%"]
    assert cli.main(["compare", str(a), str(b), *gate]) == 3
    assert cli.main(["compare", str(a), str(b), *gate, "--strict"]) == 1


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (0.013, "s", "13 ms"),
        (2526.4, "items/s", "2,526 items/s"),
        (0.5211, "J", "521 mJ"),
        (366.8, "W", "367 W"),
        (9.588, "items/J", "9.59 items/J"),
        (None, "s", "-"),
        (math.nan, "W", "-"),
    ],
)
def test_values_are_shown_by_the_units_registry(value, unit, text) -> None:
    assert compare_report.format_value(value, unit) == text


def test_four_runs_gate_the_last_one_against_the_drift_of_the_runs_before_it(tmp_path: Path) -> None:
    paths = [
        write(tmp_path / f"r{i}.json", bench(2, 0.002 * f, 1000.0 / f, seed=i))
        for i, f in enumerate((1.0, 1.01, 0.99, 1.0))
    ]
    comparison = compare.compare_runs([read_run(p) for p in paths])
    verdicts = compare.check_gates(
        comparison, [gates.parse("first_call:+50%"), gates.parse("latency.p50:+5%")]
    )
    # Only the last run is judged, with r0, r1 and r2 as its history: every metric by their spread,
    # against their geometric mean.
    by = {(v.benchmark, v.gate.metric): v for v in verdicts}
    name = "test_mlp[torch-cpu-2]"
    assert set(by) == {(name, "first_call"), (name, "latency.p50")}
    for metric in ("first_call", "latency.p50"):
        verdict = by[(name, metric)]
        assert verdict.method.startswith("run-to-run: 3 baseline runs (geometric mean; ")
        assert verdict.interval is not None
        assert verdict.outcome == decide.PASS
    per_run = by[(name, "latency.p50")]
    assert "spread 1.0% sd between runs" in per_run.method
    assert per_run.baseline == pytest.approx(0.002 * (1.0 * 1.01 * 0.99) ** (1 / 3))
    assert compare.gate_lines([gates.parse("latency.p50:+5%")], verdicts) == [
        "gates: 2 checked: 2 PASS, 0 FAIL, 0 INCONCLUSIVE"
    ]
    assert compare.exit_code(comparison, [gates.parse("latency.p50:+5%")], verdicts, strict=False) == 0


def test_noise_among_the_earlier_runs_is_their_spread_not_a_verdict(tmp_path: Path) -> None:
    # The earlier runs differ by 30 % among themselves (a noisy main branch); the last run is within
    # them. Judging each earlier run against the first would FAIL r1; the last run's gate has only
    # the history's spread to weigh, which is too wide to decide +5 %: INCONCLUSIVE, never FAIL.
    paths = [
        write(tmp_path / f"r{i}.json", bench(2, 0.002 * f, 1000.0 / f, seed=i))
        for i, f in enumerate((1.0, 1.3, 1.0, 1.3, 1.1))
    ]
    comparison = compare.compare_runs([read_run(p) for p in paths])
    (verdict,) = compare.check_gates(comparison, [gates.parse("latency.p50:+5%")])
    assert verdict.benchmark == "test_mlp[torch-cpu-2]"
    assert verdict.method.startswith("run-to-run: 4 baseline runs")
    assert verdict.outcome == decide.INCONCLUSIVE


def test_two_or_three_runs_without_repeats_are_inconclusive_naming_the_cause(tmp_path: Path) -> None:
    paths = [write(tmp_path / f"r{i}.json", bench(2, 0.002, 1000.0, seed=i)) for i in range(3)]
    comparison = compare.compare_runs([read_run(p) for p in paths])
    (verdict,) = compare.check_gates(comparison, [gates.parse("latency.p50:+5%")])
    assert verdict.outcome == decide.INCONCLUSIVE
    assert verdict.method == "no variance estimate"
    assert verdict.advice == "one repeat on each side: use --ipu-repeats=3 or 3 or more baseline runs"


def test_gates_that_check_nothing_fail_with_the_reason(tmp_path: Path) -> None:
    # As pytest-ipu ab does: a gate given and no benchmark to check it on guards nothing.
    from pytest_ipu.results import benchmark_json
    from pytest_ipu.results import gates

    first = benchmark_json.read_run(write(tmp_path / "a.json", bench(2, 0.01, 200.0)))
    other = benchmark_json.read_run(write(tmp_path / "b.json", bench(4, 0.01, 200.0)))
    comparison = compare.compare_runs([first, other])
    gate_list = [gates.parse("throughput:-5%")]
    verdicts = compare.check_gates(comparison, gate_list)
    assert verdicts == []
    assert compare.gate_lines(gate_list, verdicts) == [compare.NOTHING_CHECKED]
    assert compare.exit_code(comparison, gate_list, verdicts, strict=False) == 1
    assert compare.exit_code(comparison, [], verdicts, strict=False) == 0


def _plain(entry: dict[str, Any]) -> dict[str, Any]:
    """The benchmark as plain pytest-benchmark writes it: no pytest-ipu record."""
    return {k: v for k, v in entry.items() if k != "extra_info"}


def _metric_rows(comparison: compare.Comparison) -> dict[str, list[str]]:
    """Each benchmark's metric names, in the order of the table's rows."""
    out: dict[str, list[str]] = {}
    for line in comparison.lines:
        out.setdefault(line.name, []).append(line.metric.name)
    return out


def test_one_row_per_metric_time_statistics_only_without_a_record(tmp_path: Path) -> None:
    a = write(
        tmp_path / "a.json", bench(2, 0.002, 1000.0), _plain(bench(4, 0.004, 1000.0)), bench(8, 0.008, 1000.0)
    )
    b = write(
        tmp_path / "b.json",
        bench(2, 0.002, 1000.0, seed=1),
        _plain(bench(4, 0.004, 1000.0, seed=1)),
        _plain(bench(8, 0.008, 1000.0, seed=1)),  # the record is lost in this run only
    )
    comparison = compare.compare_runs([read_run(a), read_run(b)])
    rows = _metric_rows(comparison)
    time_rows = ["time.min", "time.median", "time.mean", "time.max"]
    # One row per registry metric the record has a value for, in the registry's order; the records
    # measured no power, so they have no energy figures to show.
    record = read_run(a).benchmarks[0].record
    assert record is not None
    record_rows = [name for name in schema.METRICS if record.value(name) is not None]
    latency = [f"latency.{k}" for k in ("min", "p50", "p90", "p99", "max", "mean")]
    assert record_rows[: len(latency) + 3] == [*latency, "throughput", "compile", "first_call"]
    assert "energy" not in record_rows
    # With a record in every run: its figures only, each once; pytest-benchmark's repeat its latency.
    assert rows["test_mlp[torch-cpu-2]"] == record_rows
    # A plain pytest-benchmark benchmark: its time statistics are all it has.
    assert rows["test_mlp[torch-cpu-4]"] == time_rows
    # A record in one run only: the time statistics too, the only figures both runs have.
    assert rows["test_mlp[torch-cpu-8]"] == time_rows + record_rows
    for render in (compare_report.render_table, compare_report.render_markdown):
        text = render(comparison)
        for name, metrics in rows.items():
            for metric in metrics:
                hits = [row for row in text.splitlines() if name in row and f" {metric} " in row]
                assert len(hits) == 1, (render.__name__, name, metric, hits)
    csv_rows = list(csv.reader(io.StringIO(compare_report.render_csv(comparison))))[1:]
    assert [(r[1], r[2]) for r in csv_rows] == [(n, m) for n, ms in rows.items() for m in ms]


def test_the_time_statistics_of_plain_files_are_compared(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", _plain(bench(4, 0.004, 1000.0)))
    b = write(tmp_path / "b.json", _plain(bench(4, 0.006, 1000.0, seed=1)))
    comparison = compare.compare_runs([read_run(a), read_run(b)])
    median = next(line for line in comparison.lines if line.metric.name == "time.median")
    assert median.values == (0.004, 0.006)
    # One value a side, no runs before it: no variance estimate, so no verdict beyond the change.
    assert compare_report.format_change(median, 1) == "+50.0% not tested"


def _host_bound(batch: int, cores: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """A benchmark whose repeats kept ``cores`` host cores busy over 0.4 s windows of 40 calls."""
    from pytest_ipu.measure.metrics import CpuTime

    p50 = 0.01
    entry = repeated(batch, [p50] * len(cores), seed=seed)
    record = entry["extra_info"]["ipu"]

    def cpu(c: float) -> CpuTime:
        total = c * 0.4
        return CpuTime(
            total / 40, 0.001, total, 0.04, 0.9, host_per_item_s=total / (40 * batch), host_cores=c
        )

    for each, c in zip(record["repeats"], cores):
        each["cpu"] = codec.to_json(cpu(c))
    record["cpu"] = codec.to_json(cpu(math.prod(cores) ** (1 / len(cores))))
    return entry


def test_compare_reads_the_host_cost_and_gates_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The candidate's calls keep twice the host cores busy, at the same latency: a host-side change
    # that the wall-time figures do not show.
    a = write(tmp_path / "a.json", _host_bound(4, [1.0 * f for f in SPREAD]))
    b = write(tmp_path / "b.json", _host_bound(4, [2.0 * f for f in SPREAD], seed=1))
    comparison = compare.compare_runs([read_run(a), read_run(b)])
    by = {line.metric.name: line for line in comparison.lines}
    assert by["host_cores"].values == pytest.approx((1.0, 2.0))
    assert by["host_cores"].verdict(1) == "worse"
    assert by["host_cpu_per_item"].ratio(1) == pytest.approx(2.0)
    assert by["latency.p50"].verdict(1) == "same"
    text = compare_report.render_table(comparison)
    assert any(" host_cores " in row and "+100.0% worse" in row for row in text.splitlines())
    assert cli.main(["compare", str(a), str(b), "--gate", "host_cores:+10%"]) == 1
    out = capsys.readouterr().out
    assert (
        out.rstrip()
        .splitlines()[-1]
        .startswith("test_mlp[torch-cpu-4] host_cores: 1 cores -> 2 cores (+100.0%, threshold +10%)")
    )
    assert cli.main(["compare", str(a), str(b), "--gate", "host_cpu_per_item<20ms"]) == 0
    capsys.readouterr()


def test_a_throughput_gate_compares_only_like_figures(tmp_path: Path) -> None:
    # The baseline predates the median round's throughput (only the window's); the run has both.
    base = tmp_path / "base.json"
    now = tmp_path / "now.json"
    write(base, bench(1, 1e-3, 1000.0))
    entry = bench(1, 1e-3, 900.0)
    entry["extra_info"]["ipu"]["median_throughput_items_per_s"] = 1000.0
    write(now, entry)
    runs = [read_run(base), read_run(now)]
    (verdict,) = compare.check_gates(compare.compare_runs(runs), [gates.parse("throughput:-5%")])
    assert verdict.outcome == "INCONCLUSIVE"
    assert verdict.method == "unlike figures"
    assert (
        "throughput is median_throughput_items_per_s in some records, throughput_items_per_s in others"
        in (verdict.advice)
    )
    (latency,) = compare.check_gates(compare.compare_runs(runs), [gates.parse("latency.p50:+5%")])
    assert latency.method != "unlike figures"  # other metrics are alike

    # The table leaves the unlike figure out, naming it, rather than show a change of definition.
    table = compare.compare_runs(runs)
    (line,) = [ln for ln in table.lines if ln.metric.name == "throughput"]
    assert line.values == (1000.0, None)  # the baseline's window figure; the unlike one left out
    assert any(
        "throughput in now.json is median_throughput_items_per_s, in base.json" in m for m in table.missing
    )
