"""Benchmarks of pytest-benchmark's own fixture as the gates read them (``results.plain``): the
metrics they have and the reasons for those they lack, pytest-benchmark's names as aliases,
partial entries told from plain ones, and their runs judged by ``compare --gate`` and ``ab``."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from pytest_ipu.cli import main as cli
from pytest_ipu.results import ab
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import decide
from pytest_ipu.results import gates
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.plain import ONE_VALUE
from pytest_ipu.results.plain import PlainBenchmark
from pytest_ipu.results.plain import gated
from pytest_ipu.results.plain import not_gated

GOLDEN = Path(__file__).parent.parent / "golden" / "pytest-benchmark-5.3.1-plain.json"
MS = 1e-3


def test_a_golden_plain_file_reads_as_plain_benchmarks_with_pytest_benchmarks_figures() -> None:
    run = benchmark_json.read_run(GOLDEN)
    document = json.loads(GOLDEN.read_text())
    assert benchmark_json.TOP_LEVEL_KEY not in document  # written without pytest-ipu
    assert [b.name for b in run.benchmarks] == [
        "test_sum",
        "test_fib[10]",
        "test_fib[15]",
        "test_sorted_pedantic",
    ]
    for bench, raw in zip(run.benchmarks, document["benchmarks"]):
        figures = gated(bench, run.machine_info)
        assert isinstance(figures, PlainBenchmark)
        stats = raw["stats"]
        assert figures.value("latency.p50") == stats["median"]
        assert figures.value("latency.min") == stats["min"]
        assert figures.value("latency.mean") == stats["mean"]
        assert figures.value("latency.max") == stats["max"]
        # Calls per second over the median round (pytest-benchmark's own "ops" is over the mean).
        assert figures.value("throughput") == pytest.approx(1.0 / stats["median"])
        assert figures.value("latency.p99") == pytest.approx(float(np.percentile(stats["data"], 99)))
        assert figures.repeat_values("latency.p50") == (stats["median"],)  # one value per run
        assert figures.no_repeats() == ONE_VALUE
        assert figures.device_name == document["machine_info"]["cpu"]["brand_raw"]
        assert figures.value("cpu_time") is None
        assert figures.why_missing("cpu_time") == (
            "a pytest-benchmark benchmark has no cpu_time: pytest-benchmark keeps time statistics only "
            "(measure with ipu_benchmark for it)"
        )


def test_without_per_round_data_p99_is_missing_saying_what_keeps_it() -> None:
    figures = PlainBenchmark({"median": MS, "mean": MS})
    assert figures.value("latency.p99") is None
    assert "--benchmark-save-data" in figures.why_missing("latency.p99")
    assert figures.value("latency.min") is None
    assert figures.why_missing("latency.min") == "pytest-benchmark's statistics have no 'min'"
    assert PlainBenchmark({"median": 0.0}).value("throughput") is None


@pytest.mark.parametrize(
    ("alias", "metric"),
    [
        ("time.median", "latency.p50"),
        ("time.min", "latency.min"),
        ("time.mean", "latency.mean"),
        ("time.max", "latency.max"),
    ],
)
def test_pytest_benchmarks_names_are_aliases_of_the_latency_metrics(alias: str, metric: str) -> None:
    assert gates.parse(f"{alias}:+5%") == gates.parse(f"{metric}:+5%")
    assert gates.parse(f"{alias}<2ms").metric == metric


def test_an_entry_a_pytest_ipu_fixture_began_is_partial_not_plain() -> None:
    extra: dict[str, object] = {benchmark_json.PENDING_KEY: "ipu_benchmark", "n": 3}
    document = {
        "benchmarks": [
            {"name": "test_a", "fullname": "t.py::test_a", "stats": {"median": MS}, "extra_info": extra}
        ]
    }
    (bench,) = benchmark_json.parse_run(document, Path("run.json")).benchmarks
    assert bench.pending == "ipu_benchmark"
    assert gated(bench, {}) is None
    assert not_gated(bench).startswith("is a partial entry (ipu_benchmark began measuring it")
    # The record, once written, replaces the mark.
    benchmark_json.attach(extra, {"schema": 2})
    assert benchmark_json.PENDING_KEY not in extra
    assert extra["n"] == 3
    bad = {"benchmarks": [{"name": "a", "fullname": "a", "extra_info": {benchmark_json.PENDING_KEY: 1}}]}
    with pytest.raises(
        benchmark_json.RunFileError, match=r"'extra_info\.ipu_pending' is 1: it must be a string"
    ):
        benchmark_json.parse_run(bad, Path("run.json"))


def test_compare_of_two_plain_runs_is_inconclusive_naming_the_cause(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["compare", str(GOLDEN), str(GOLDEN), "--gate", "time.median:+5%"]) == 3
    out = capsys.readouterr().out
    assert "gates: 4 checked: 0 PASS, 0 FAIL, 4 INCONCLUSIVE" in out
    assert (
        f"INCONCLUSIVE test_sum: latency.p50: no threshold can be decided ({ONE_VALUE}: "
        f"give {decide.HISTORY_MIN} or more baseline runs)"
    ) in out


def _plain(name: str, median_s: float) -> StoredBenchmark:
    stats = {"min": median_s * 0.9, "median": median_s, "mean": median_s, "max": median_s * 1.2}
    return StoredBenchmark(name, f"t.py::{name}", None, None, stats=stats)


def _run(path: str, *benchmarks: StoredBenchmark) -> StoredRun:
    return StoredRun(Path(path), {}, {}, None, benchmarks)


def test_ab_pairs_and_judges_plain_benchmarks() -> None:
    noise = (1.0, 1.01, 0.99, 1.02, 0.98)
    base = [_run(f"b{i}", _plain("test_x", MS * f), _plain("test_y", MS * f)) for i, f in enumerate(noise)]
    cand = [
        _run(f"c{i}", _plain("test_x", 1.3 * MS * f * g), _plain("test_y", MS * f * g))
        for i, (f, g) in enumerate(zip(noise, (1.0, 1.005, 0.995, 1.0, 1.003)))
    ]
    result = ab.analyse(base, cand, [gates.parse("time.median:+10%")])
    by = {v.benchmark: v for v in result.verdicts}
    assert by["test_x"].outcome == decide.FAIL
    assert by["test_x"].change == pytest.approx(
        math.exp(statistics.fmean(math.log(1.3 * g) for g in (1.0, 1.005, 0.995, 1.0, 1.003))) - 1
    )
    assert by["test_y"].outcome == decide.PASS
    assert result.missing == ()


def test_ab_lists_a_partial_entry_as_missing() -> None:
    partial = StoredBenchmark(
        "test_x", "t.py::test_x", None, None, stats={"median": MS}, pending="ipu_benchmark"
    )
    base = [_run("b0", _plain("test_x", MS)), _run("b1", _plain("test_x", MS))]
    cand = [_run("c0", partial), _run("c1", _plain("test_x", MS))]
    result = ab.analyse(base, cand, [gates.parse("latency.p50:+10%")])
    assert result.missing == (
        "t.py::test_x is a partial entry (ipu_benchmark began measuring it and its test stopped before the "
        "pytest-ipu record was written) in candidate pair 1: not compared",
    )
    assert result.verdicts == ()


def test_compare_names_a_partial_entry_and_gates_only_what_it_can_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(GOLDEN.read_text())
    document["benchmarks"][0]["extra_info"] = {benchmark_json.PENDING_KEY: "ipu_benchmark"}
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps(document))
    assert cli.main(["compare", str(GOLDEN), str(partial), "--gate", "time.median:+5%"]) == 3
    out = capsys.readouterr().out
    assert "missing: test_baseline.py::test_sum: only a partial entry in partial.json: not gated there" in out
    assert "gates: 3 checked: 0 PASS, 0 FAIL, 3 INCONCLUSIVE" in out  # test_sum is not among them
    assert cli.main(["compare", str(GOLDEN), str(partial), "--gate", "time.median:+5%", "--strict"]) == 1
