"""Plots of saved runs (pytest_ipu.report.plots): series extraction, notes, and what a drawn figure shows."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.measure.contention import ContentionRecord
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.report import plots
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.records import DeviceEnergy
from pytest_ipu.results.records import InstanceRecord
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import PowerRecord
from pytest_ipu.results.records import StabilityRecord

#: The report's figures need matplotlib (the ``report`` extra); without it these tests skip.
requires_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="needs matplotlib (the extra 'report': pip install matplotlib)",
)


LOW = "low confidence: window 1.2 s < 5 s (rapl)"


def power(
    items_per_j: float | None = 2.0,
    *,
    measured: bool = True,
    valid: bool = True,
    low: bool = False,
    **more: Any,
) -> PowerRecord:
    """A power record as the meter makes it (with the fields the plots read)."""
    if not measured:
        return PowerRecord(
            measured=False, source="off", reason=more.get("reason", "power measurement is off")
        )
    return PowerRecord(
        measured=True,
        valid=valid,
        source="rapl",
        devices=(DeviceEnergy("package-0", "package 0", "cpu-package", 1.0, 50.0, None),),
        mean_power_w=50.0,
        energy_per_item_j=None if items_per_j is None else 1 / items_per_j,
        items_per_j=items_per_j,
        warnings=(LOW,) if low else (),
        low_confidence=low,
        reason=more.get("reason", ""),
    )


def record(
    target: str = "torch:cpu",
    batch_size: int = 1,
    *,
    precision: str = "fp32",
    p50_s: float = 0.002,
    power: PowerRecord | None = None,
    simulator: bool = False,
    instances: int = 1,
    rounds: int = 200,
) -> IpuRecord:
    """A record whose throughput follows from its p50 (batch / p50), so values are easy to predict."""
    return IpuRecord(
        target=target,
        backend=target.partition(":")[0],
        device=target.partition(":")[2],
        device_name="GC200" if target.endswith(":ipu") else "Some CPU",
        precision=precision,
        io="host",
        batch_size=batch_size,
        items_per_call=batch_size,
        rounds=rounds,
        rounds_policy="auto",
        warmup_rounds=2,
        latency_s=LatencySummary(
            p50_s / 2,
            p50_s,
            p50_s * 1.2,
            p50_s * 1.5,
            p50_s * 2,
            p50_s,
            rounds,
            ("p99",) if rounds < 100 else (),
        ),
        window_s=1.0,
        throughput_items_per_s=instances * batch_size / p50_s,
        compile_s=1.0,
        compile_cached=False,
        first_call_s=0.1,
        power=power,
        simulator=simulator,
        instances=tuple(_instance(i, target) for i in range(instances)) if instances > 1 else None,
    )


def _instance(index: int, target: str) -> InstanceRecord:
    lat = LatencySummary(0.001, 0.002, 0.002, 0.002, 0.003, 0.002, 200)
    return InstanceRecord(
        index, target, target.partition(":")[2], "GC200", 1.0, {}, {}, calls=200, latency_s=lat
    )


def bench(
    rec: IpuRecord | None, group: str | None = "g", name: str = "test_model", **params: Any
) -> StoredBenchmark:
    return StoredBenchmark(
        name=f"{name}[{rec.batch_size if rec else 0}]",
        fullname=f"bench.py::{name}",
        group=group,
        record=rec,
        params={"batch_size": rec.batch_size if rec else 0, **params},
    )


def run(*benchmarks: StoredBenchmark, path: str = "run.json") -> StoredRun:
    return StoredRun(
        Path(path),
        {"cpu": {"brand_raw": "Some CPU", "count": 8}},
        {},
        "2026-11-29T20:31:34.6+00:00",
        tuple(benchmarks),
    )


def test_one_series_per_target_and_precision_sorted_by_batch_size() -> None:
    r = run(
        bench(record("torch:cpu", 8, p50_s=0.008)),
        bench(record("onnxruntime:cpu", 2, p50_s=0.001)),
        bench(record("torch:cpu", 2, p50_s=0.002)),
        bench(record("torch:cpu", 4, precision="bf16")),
        bench(record("torch:cpu", 4, p50_s=0.004)),
        bench(record("torch:cpu", 1), group="other"),
    )
    series = plots.series_for([r], "g", "latency")
    assert [s.label for s in series] == ["onnxruntime:cpu fp32", "torch:cpu bf16", "torch:cpu fp32"]
    cpu = series[2]
    assert cpu.batch_sizes == (2, 4, 8)
    assert cpu.values == (0.002, 0.004, 0.008)
    assert cpu.upper == pytest.approx((0.003, 0.006, 0.012))
    throughput = plots.series_for([r], "g", "throughput")[2]
    assert throughput.values == pytest.approx((1000.0, 1000.0, 1000.0))
    assert [s.label for s in plots.series_for([r], "other", "latency")] == ["torch:cpu fp32"]


def test_groups_fall_back_to_the_test_name_and_skip_benchmarks_without_records() -> None:
    r = run(bench(record()), bench(record(), group=None, name="test_plain"), bench(None, group="empty"))
    assert plots.groups([r]) == ["g", "test_plain"]
    assert len(plots.series_for([r], "test_plain", "throughput")) == 1


def test_a_group_has_a_batch_axis_only_with_two_batch_sizes_or_more() -> None:
    r = run(
        bench(record("torch:cpu", 1), group="one"),
        bench(record("onnxruntime:cpu", 1), group="one"),
        bench(record("torch:cpu", 2), group="two"),
        bench(record("torch:cpu", 8), group="two"),
    )
    assert plots.batch_sizes([r], "one") == [1]
    assert not plots.has_batch_axis([r], "one")  # two targets, but one batch size: nothing to plot against
    assert plots.batch_sizes([r], "two") == [2, 8]
    assert plots.has_batch_axis([r], "two")
    # The batch sizes of all runs count: two runs of one batch size each, but not the same one.
    a = run(bench(record("torch:cpu", 1), group="x"), path="a.json")
    b = run(bench(record("torch:cpu", 4), group="x"), path="b.json")
    assert plots.has_batch_axis([a, b], "x")
    assert not plots.has_batch_axis([a], "x")


def test_report_order_puts_groups_with_a_batch_axis_first_by_their_number_of_records() -> None:
    side = [bench(record("python:host", 1), group="side", name=f"t{i}") for i in range(5)]
    small = [bench(record("torch:cpu", b), group="small") for b in (1, 2)]
    tie = [bench(record("torch:cpu", b), group="tie") for b in (4, 8)]
    study = [bench(record(t, b), group="study") for t in ("torch:cpu", "onnxruntime:cpu") for b in (2, 4)]
    late = [bench(record("python:host", 1), group="late")]
    r = run(*side, *small, *tie, *study, *late)
    assert plots.groups([r]) == ["side", "small", "tie", "study", "late"]
    # The study (4 records) first; two groups of 2 in the order seen; the groups of one batch size last.
    assert plots.report_order([r]) == ["study", "small", "tie", "side", "late"]
    # Records of every run count: "tie" has as many as "study" now, and was seen first.
    again = run(*tie, path="again.json")
    assert plots.report_order([r, again]) == ["tie", "study", "small", "side", "late"]


def test_colors_and_markers_follow_the_backend_across_views_groups_and_runs() -> None:
    a = run(bench(record("torch:cpu", 1)), bench(record("popart:ipu", 1), group="h"), path="a/run.json")
    b = run(bench(record("torch:cpu", 1)), bench(record("popart:ipu", 1)), path="b/run.json")
    styles = {
        (s.target, s.run, view, group): (s.color, s.marker, s.linestyle)
        for group in ("g", "h")
        for view in plots.VIEWS
        for s in plots.series_for([a, b], group, view)
    }
    for target in ("torch:cpu", "popart:ipu"):
        colors = {(c, m) for (t, _, _, _), (c, m, _) in styles.items() if t == target}
        assert len(colors) == 1, target
    assert styles[("torch:cpu", 0, "latency", "g")][2] != styles[("torch:cpu", 1, "latency", "g")][2]
    assert styles[("popart:ipu", 0, "latency", "h")][:2] == styles[("popart:ipu", 1, "throughput", "g")][:2]


def test_several_runs_give_one_series_per_run_and_target_named_by_file() -> None:
    a = run(bench(record("torch:cpu", 1)), path="x/a.json")
    b = run(bench(record("torch:cpu", 1)), path="x/b.json")
    series = plots.series_for([a, b], "g", "throughput")
    assert [s.label for s in series] == ["torch:cpu fp32 | a.json", "torch:cpu fp32 | b.json"]
    assert [s.run for s in series] == [0, 1]
    assert {s.backend_label for s in series} == {"torch:cpu fp32"}


def test_run_labels_use_more_of_the_path_when_file_names_repeat() -> None:
    a, b = run(path="x/run.json"), run(path="y/run.json")
    assert plots.run_labels([a, b]) == ["x/run.json", "y/run.json"]
    assert plots.run_labels([a, a]) == ["#1 x/run.json", "#2 x/run.json"]


def test_energy_points_are_none_unless_measured_and_valid_with_the_reason() -> None:
    r = run(
        bench(record(batch_size=1, power=power(4.0))),
        bench(record(batch_size=2, power=power(measured=False, reason="no RAPL here"))),
        bench(record(batch_size=4, power=power(valid=False, reason="counter reset"))),
        bench(record(batch_size=8, power=None)),
        bench(record(batch_size=16, power=power(5.0, low=True))),
    )
    (series,) = plots.series_for([r], "g", "items_per_j")
    assert series.values == (4.0, None, None, None, 5.0)
    assert series.hollow == (False, False, False, False, True)
    assert series.reasons == (
        None,
        "energy not measured: no RAPL here",
        "energy invalid (torch:cpu): counter reset",
        "energy not measured: no power record",
        None,
    )
    assert series.sources == ("rapl (cpu-package)",)


def test_hollow_points_follow_the_low_confidence_flag() -> None:
    flagged = power(3.0, low=True)
    worded = dataclasses.replace(flagged, low_confidence=False)  # the warning's words alone flag nothing
    r = run(bench(record(batch_size=1, power=flagged)), bench(record(batch_size=2, power=worded)))
    (series,) = plots.series_for([r], "g", "items_per_j")
    assert series.hollow == (True, False)


def test_simulator_and_instances_are_in_the_label() -> None:
    r = run(
        bench(record("poptorch:ipu", 1, precision="fp16", simulator=True)),
        bench(record("popart:ipu", 1, precision="fp16", instances=4)),
    )
    labels = [s.label for s in plots.series_for([r], "g", "latency")]
    assert labels == ["popart:ipu x4 fp16", "poptorch:ipu fp16 [sim] simulated timings"]
    notes = plots.notes_for("throughput", plots.series_for([r], "g", "throughput"))
    assert plots.INSTANCES_NOTE in notes
    assert plots.SIM_NOTE in notes


def test_benchmarks_that_share_a_backend_and_batch_size_are_told_apart_by_their_parameters() -> None:
    r = run(
        bench(record("python:host", 1, precision="n/a", p50_s=1e-7), workload="noop"),
        bench(record("python:host", 1, precision="n/a", p50_s=1e-3), workload="1ms"),
    )
    series = plots.series_for([r], "g", "latency")
    assert [s.label for s in series] == ["python:host (workload=1ms)", "python:host (workload=noop)"]
    assert [s.values for s in series] == [(1e-3,), (1e-7,)]


def test_unknown_view_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown view 'power'"):
        plots.series_for([run(bench(record()))], "g", "power")


def test_notes_explain_low_confidence_flagged_p99_and_missing_points() -> None:
    r = run(
        bench(record(batch_size=1, power=power(3.0, low=True), rounds=20)),
        bench(record(batch_size=2, power=power(measured=False, reason="rapl unavailable"))),
    )
    energy = plots.notes_for("items_per_j", plots.series_for([r], "g", "items_per_j"))
    assert plots.LOW_CONFIDENCE_NOTE in energy
    assert "not shown for torch:cpu fp32: energy not measured: rapl unavailable" in energy
    assert any("measured by rapl (cpu-package)" in n for n in energy)
    latency = plots.notes_for("latency", plots.series_for([r], "g", "latency"))
    assert any("fewer than 100 rounds" in n for n in latency)


def _texts(fig: Any) -> list[str]:
    return [t.get_text() for t in fig.texts] + [t.get_text() for ax in fig.axes for t in ax.texts]


@requires_matplotlib
def test_energy_view_with_nothing_measured_says_so_in_the_plot_body() -> None:
    r = run(
        bench(record(batch_size=1, power=power(measured=False, reason="power measurement is off"))),
        bench(record(batch_size=2, power=power(measured=False, reason="power measurement is off"))),
    )
    series = plots.series_for([r], "g", "items_per_j")
    assert plots.LOW_CONFIDENCE_NOTE not in plots.notes_for("items_per_j", series)
    fig = plots.draw("items_per_j", "g", series, plots.notes_for("items_per_j", series))
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.texts] == ["energy not measured: power measurement is off"]
    # No zero line, no empty legend: only the words.
    assert all(len(line.get_xdata()) == 0 or all(y != y for y in line.get_ydata()) for line in ax.lines)
    assert ax.get_legend() is None


@requires_matplotlib
def test_low_confidence_points_are_drawn_hollow_and_explained() -> None:
    r = run(
        bench(record(batch_size=1, power=power(3.0))), bench(record(batch_size=2, power=power(4.0, low=True)))
    )
    series = plots.series_for([r], "g", "items_per_j")
    notes = plots.notes_for("items_per_j", series)
    fig = plots.draw("items_per_j", "g", series, notes, machine="Some CPU")
    (ax,) = fig.axes
    hollow = [line for line in ax.lines if line.get_markerfacecolor() == "white" and len(line.get_xdata())]
    assert [list(line.get_xdata()) for line in hollow] == [[2]]
    assert any(plots.LOW_CONFIDENCE_NOTE in text for text in _texts(fig))
    assert "low confidence" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert ax.get_title(loc="left") == "Some CPU"


@requires_matplotlib
def test_latency_figure_has_units_batch_ticks_and_a_log_axis_when_the_range_is_wide() -> None:
    r = run(bench(record(batch_size=1, p50_s=1e-4)), bench(record(batch_size=64, p50_s=0.05)))
    series = plots.series_for([r], "g", "latency")
    fig = plots.draw("latency", "g", series, [])
    (ax,) = fig.axes
    assert ax.get_yscale() == "log"
    assert ax.get_ylabel() == "latency per call (ms)"
    assert list(ax.get_xticks()) == [1, 64]
    assert ax.get_xlabel().startswith("batch size")
    narrow = plots.draw(
        "throughput", "g", plots.series_for([run(bench(record(batch_size=2)))], "g", "throughput"), []
    )
    assert narrow.axes[0].get_yscale() == "linear"
    assert narrow.axes[0].get_ylim()[0] == 0


def test_machine_label_names_the_cpu_and_the_accelerators_of_the_group() -> None:
    r = run(bench(record("popart:ipu", 1)), bench(record("torch:cpu", 1), group="h"))
    assert plots.machine_label([r], "g") == "Some CPU (8 CPUs) + GC200"
    assert plots.machine_label([r], "h") == "Some CPU (8 CPUs)"


def test_format_date() -> None:
    assert plots.format_date("2026-11-29T20:31:34.629662+00:00") == "2026-11-29 20:31 UTC"
    assert plots.format_date("yesterday") == "yesterday"
    assert plots.format_date(None) == "unknown date"


def test_importing_the_report_modules_does_not_import_matplotlib(tmp_path: Path) -> None:
    code = "import sys, pytest_ipu.report.plots, pytest_ipu.report.html\nprint('matplotlib' in sys.modules)\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert proc.stdout.strip() == "False"


@pytest.mark.parametrize("p50", [float("nan"), float("inf"), -0.002])
def test_draw_refuses_a_value_that_is_not_a_finite_number_at_least_zero(p50: float) -> None:
    # Run files are checked when read; a record made in memory must still not reach matplotlib,
    # which would draw NaN as a silent gap.
    stored = run(bench(record("torch:cpu", 4, p50_s=p50)))
    series = plots.series_for([stored], "g", "latency")
    with pytest.raises(plots.PlotError) as info:
        plots.draw("latency", "g", series, [])
    message = str(info.value)
    assert "'g'" in message
    assert "batch size 4" in message
    assert repr(p50) in message
    assert "\n" not in message


def _contended() -> ContentionRecord:
    return ContentionRecord(readable=True, window_s=1.0, others_share=0.5, threshold=0.1, contended=True)


@pytest.mark.parametrize(
    "flagged",
    [
        {"stability": StabilityRecord(3, "interleaved", 0.2, 0.01, 0.05, True)},
        {"contention": _contended()},
    ],
    ids=["unstable", "contended"],
)
def test_points_of_unsteady_records_are_hollow_in_every_view_with_a_note(flagged: dict[str, Any]) -> None:
    steady = record("torch:cpu", 2)
    shaky = dataclasses.replace(record("torch:cpu", 4, power=power()), **flagged)
    assert plots.UNSTEADY_FLAGS.intersection(shaky.flags)
    r = run(bench(steady), bench(shaky))
    for view in plots.VIEWS:
        (line,) = plots.series_for([r], "g", view)
        assert line.hollow == (False, True), view
        assert line.unsteady == (False, True), view
        assert plots.UNSTEADY_NOTE in plots.notes_for(view, [line])
        assert plots.LOW_CONFIDENCE_NOTE not in plots.notes_for(view, [line])


def test_steady_records_have_no_hollow_note() -> None:
    (line,) = plots.series_for([run(bench(record("torch:cpu", 2)))], "g", "throughput")
    assert line.hollow == (False,)
    assert plots.UNSTEADY_NOTE not in plots.notes_for("throughput", [line])
