"""``pytest-ipu compare``'s verdicts: better and worse only on evidence, "same" only when the interval
lies within 1 %, "within noise" when the spread covers the change, "not tested" without a variance
estimate (however small the change); and p-values as ``p<0.001``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_ipu.cli import main as cli
from pytest_ipu.report import ab as ab_report
from pytest_ipu.report import compare as compare_report
from pytest_ipu.results import ab
from pytest_ipu.results import compare
from pytest_ipu.results import decide
from pytest_ipu.results import gates
from pytest_ipu.results.benchmark_json import read_run
from tests.unit.run_files import bench
from tests.unit.run_files import write
from tests.unit.test_compare import repeated


def _line(tmp_path: Path, *sides: Sequence[float], metric: str = "latency.p50") -> compare.Line:
    """The ``metric`` line of batch 4 across runs whose repeats have the median latencies given."""
    paths = [write(tmp_path / f"r{i}.json", repeated(4, p50s, seed=i)) for i, p50s in enumerate(sides)]
    comparison = compare.compare_runs([read_run(p) for p in paths])
    return next(line for line in comparison.lines if line.metric.name == metric)


def test_a_change_inside_the_spread_of_the_repeats_is_within_noise(tmp_path: Path) -> None:
    # Repeats 10 % apart on each side, the sides 5 % apart: the spread covers the change.
    line = _line(tmp_path, [0.0010, 0.0011, 0.0009], [0.00105, 0.001155, 0.000945])
    assert line.ratio(1) == pytest.approx(1.05, rel=0.01)
    assert line.verdict(1) == "within noise"
    p = line.p_value(1)
    assert p is not None
    assert p >= compare.ALPHA
    assert re.fullmatch(r"\+5\.\d% within noise \(p=0\.\d+\)", compare_report.format_change(line, 1))
    # The same change for throughput, the other direction of better: within noise too.
    throughput = _line(tmp_path, [0.0010, 0.0011, 0.0009], [0.00105, 0.001155, 0.000945], metric="throughput")
    assert throughput.verdict(1) == "within noise"


@pytest.mark.parametrize(
    ("factor", "latency", "throughput"),
    [(1.3, "worse", "worse"), (1 / 1.3, "better", "better")],
)
def test_a_change_far_beyond_the_spread_is_better_or_worse(
    tmp_path: Path, factor: float, latency: str, throughput: str
) -> None:
    before = [0.0010, 0.00101, 0.00099]
    after = [v * factor for v in before]
    line = _line(tmp_path, before, after)
    assert line.verdict(1) == latency
    p = line.p_value(1)
    assert p is not None
    assert p < compare.ALPHA
    assert compare_report.format_change(line, 1).endswith(f"% {latency} (p<0.001)")
    assert _line(tmp_path, before, after, metric="throughput").verdict(1) == throughput


def test_without_a_variance_estimate_a_change_is_not_called_worse(tmp_path: Path) -> None:
    # One repeat a side and no runs before: nothing says how much such runs differ.
    line = _line(tmp_path, [0.0010], [0.0015])
    assert line.ratio(1) == pytest.approx(1.5)
    assert line.verdict(1) == "not tested"
    assert line.p_value(1) is None
    assert compare_report.format_change(line, 1) == "+50.0% not tested"
    text = compare_report.render_table(
        compare.compare_runs([read_run(tmp_path / "r0.json"), read_run(tmp_path / "r1.json")])
    )
    assert "+50.0% not tested" in text
    assert "worse" not in text.replace(compare.VERDICT_NOTE, "")


def test_a_metric_measured_once_per_benchmark_is_not_tested_whatever_the_repeats(tmp_path: Path) -> None:
    before = [0.0010, 0.00101, 0.00099]
    a = write(tmp_path / "a.json", repeated(4, before))
    slower_compile = repeated(4, before, seed=1)
    slower_compile["extra_info"]["ipu"]["compile_s"] = 0.75  # the other run's record: 0.5 s
    b = write(tmp_path / "b.json", slower_compile)
    comparison = compare.compare_runs([read_run(a), read_run(b)])
    by = {line.metric.name: line for line in comparison.lines}
    assert by["latency.p50"].verdict(1) == "within noise"
    assert by["compile"].verdict(1) == "not tested"
    assert compare_report.format_change(by["compile"], 1) == "+50.0% not tested"


def test_the_not_tested_note_says_how_to_get_an_estimate(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", bench(2, 0.002, 1000.0))
    b = write(tmp_path / "b.json", bench(2, 0.003, 700.0, seed=1))
    text = compare_report.render_table(compare.compare_runs([read_run(a), read_run(b)]))
    assert "+50.0% not tested" in text
    assert text.splitlines()[-1] == compare.NOT_TESTED_NOTE
    assert "worse" not in text.replace(compare.VERDICT_NOTE, "")


def _inside_band(interval: tuple[float, float] | None) -> bool:
    assert interval is not None
    return interval[0] > 1 - compare.SAME_WITHIN and interval[1] < 1 + compare.SAME_WITHIN


def test_a_change_under_one_percent_with_a_wide_interval_is_not_the_same(tmp_path: Path) -> None:
    # Repeats 10 % apart, the sides 0.5 % apart: the interval spans far more than +/- 1 %.
    line = _line(tmp_path, [0.0010, 0.0011, 0.0009], [0.001005, 0.0011055, 0.0009045])
    assert abs(line.ratio(1) - 1) < compare.SAME_WITHIN  # type: ignore[operator]
    assert not _inside_band(line.interval(1))
    assert line.verdict(1) == "within noise"
    assert re.fullmatch(r"\+0\.5% within noise \(p=0\.\d+\)", compare_report.format_change(line, 1))


def test_a_change_under_one_percent_with_a_tight_interval_is_the_same(tmp_path: Path) -> None:
    # Repeats 0.1 % apart, the sides 0.3 % apart: the interval lies within +/- 1 %.
    before = [0.0010, 0.001001, 0.000999]
    line = _line(tmp_path, before, [v * 1.003 for v in before])
    assert _inside_band(line.interval(1))
    assert line.verdict(1) == "same"
    assert compare_report.format_change(line, 1) == "same"
    # 0.6 % with the same spread: the test finds the change, but all of it is within 1 %: still same.
    significant = _line(tmp_path, before, [v * 1.006 for v in before])
    p = significant.p_value(1)
    assert p is not None
    assert p < compare.ALPHA
    assert _inside_band(significant.interval(1))
    assert significant.verdict(1) == "same"


def test_a_change_under_one_percent_found_by_a_wider_interval_is_better_or_worse(tmp_path: Path) -> None:
    # Repeats 0.2 % apart, the sides 0.9 % apart: a change the test finds, not shown within 1 %.
    before = [0.0010, 0.001002, 0.000998]
    line = _line(tmp_path, before, [v * 1.009 for v in before])
    p = line.p_value(1)
    assert p is not None
    assert p < compare.ALPHA
    assert not _inside_band(line.interval(1))
    assert line.verdict(1) == "worse"
    assert _line(tmp_path, before, [v * 1.009 for v in before], metric="throughput").verdict(1) == "worse"


def test_a_change_under_one_percent_without_a_variance_estimate_is_not_tested(tmp_path: Path) -> None:
    line = _line(tmp_path, [0.0010], [0.001005])
    assert abs(line.ratio(1) - 1) < compare.SAME_WITHIN  # type: ignore[operator]
    assert line.interval(1) is None
    assert line.verdict(1) == "not tested"
    assert compare_report.format_change(line, 1) == "+0.5% not tested"
    text = compare_report.render_table(
        compare.compare_runs([read_run(tmp_path / "r0.json"), read_run(tmp_path / "r1.json")])
    )
    assert "same" not in text.replace(compare.VERDICT_NOTE, "")
    assert text.splitlines()[-1] == compare.NOT_TESTED_NOTE


def test_three_runs_before_it_judge_a_run_by_their_drift(tmp_path: Path) -> None:
    # One repeat each: only the runs before the last give a variance estimate.
    steady = [[0.0010], [0.00101], [0.00099]]
    jumped = _line(tmp_path, *steady, [0.0013])
    assert jumped.verdict(3) == "worse"
    found = jumped.evidence(3)
    assert found is not None
    assert found.source == "run-to-run"
    assert found.baseline == 3
    # The second and third runs have too few before them and one repeat a side: not tested.
    assert jumped.verdict(1) == "not tested"
    assert jumped.verdict(2) == "not tested"
    wobble = _line(tmp_path, *steady, [0.00102])
    assert wobble.verdict(3) == "within noise"


@pytest.mark.parametrize(
    ("p", "text", "cell"),
    [
        (0.0, "p<0.001", "<0.001"),
        (0.000999, "p<0.001", "<0.001"),
        (3.1e-05, "p<0.001", "<0.001"),
        (0.001, "p=0.001", "0.001"),
        (0.0031416, "p=0.0031", "0.0031"),
        (0.41, "p=0.41", "0.41"),
        (1.0, "p=1", "1"),
    ],
)
def test_p_values_are_never_shown_as_zero(p: float, text: str, cell: str) -> None:
    assert decide.format_p(p) == text
    assert decide.format_p_value(p) == cell


def test_gate_lines_show_the_interval_they_were_decided_on_not_a_p(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = [0.0010, 0.00101, 0.00099]
    a = write(tmp_path / "a.json", repeated(4, before))
    b = write(tmp_path / "b.json", repeated(4, [v * 1.3 for v in before], seed=1))
    assert cli.main(["compare", str(a), str(b), "--gate", "latency.p50:+5%"]) == 1
    out = capsys.readouterr().out
    failed = next(line for line in out.splitlines() if line.startswith("test_mlp[torch-cpu-4] latency.p50:"))
    assert ", ratio interval [" in failed
    assert ": FAIL (repeats: " in failed
    assert "p=" not in out
    assert "p<" not in failed
    # The same runs' verdict from the gate runner directly: its interval lies wholly past +5 %.
    verdicts = compare.check_gates(
        compare.compare_runs([read_run(a), read_run(b)]), [gates.parse("latency.p50:+5%")]
    )
    assert verdicts[0].failed
    assert verdicts[0].interval is not None
    assert verdicts[0].interval[0] > 1.05


def test_ab_tables_show_a_tiny_p_as_below_a_thousandth(tmp_path: Path) -> None:
    drift = (1.0, 1.02, 0.99, 1.01)
    base = [
        read_run(write(tmp_path / f"b{i}.json", bench(4, 0.001 * d, 4000.0 / d))) for i, d in enumerate(drift)
    ]
    cand = [
        read_run(write(tmp_path / f"c{i}.json", bench(4, 0.0013 * d, 4000.0 / (1.3 * d))))
        for i, d in enumerate(drift)
    ]
    result = ab.analyse(base, cand, [])
    row = next(line for line in ab_report.render_table(result).splitlines() if line.startswith("latency.p50"))
    assert re.search(r"\]\s+<0\.001\s+\+30\.0% worse$", row), row
