"""The report's LoadGen figure: latency against QPS, one figure per target (presentation only).

Each LoadGen Server benchmark with a peak search is a line through its probes: x is the rate
LoadGen scheduled (the rate asked for where it logged none), y the probe's latency at the target
percentile; VALID probes are filled, INVALID ones hollow, the peak is a star, and the latency bound
is a dashed line. SingleStream and MultiStream benchmarks of the same target are single points (their
samples/s against their p99, or p50 where LoadGen gave no p99), and Offline ones a dotted vertical
line at their samples/s: the most the target served with no latency bound.

``charts`` computes what is drawn, without matplotlib (tests read it); ``draw`` renders one chart.
matplotlib is imported inside ``draw`` only, as in ``pytest_ipu.report.plots``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_ipu.backports import remove_suffix
from pytest_ipu.backports import zip_strict
from pytest_ipu.measure import units
from pytest_ipu.report import plots
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.loadgen import LoadgenRecord

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: The figure's view name (file stems: ``loadgen-<target>``).
VIEW = "latency-qps"
TITLE = "latency against QPS (LoadGen)"


@dataclass(frozen=True)
class Probe:
    """One probe of a peak search as drawn: its rate, its latency at the target percentile (seconds,
    ``None`` when LoadGen logged none: not drawn), LoadGen's verdict, and whether it is the peak."""

    qps: float
    latency_s: float | None
    valid: bool
    peak: bool


@dataclass(frozen=True)
class Curve:
    """One Server benchmark's peak search: its probes in ascending rate, its latency bound and peak."""

    label: str
    #: Index of the run (in the order given) it comes from.
    run: int
    probes: tuple[Probe, ...]
    #: The latency bound LoadGen judged the probes by, seconds (``None`` when none was logged).
    bound_s: float | None
    #: The target percentile of ``Probe.latency_s`` (``0.99``), or ``None`` when not logged.
    percentile: float | None
    #: The search's result, the table's Server QPS (``None``: no VALID probe).
    peak_qps: float | None


@dataclass(frozen=True)
class Single:
    """A benchmark of another scenario as one point (SingleStream, MultiStream) or, for Offline, a
    vertical line (``latency_s`` is then ``None``)."""

    label: str
    run: int
    scenario: str
    samples_per_s: float
    latency_s: float | None
    valid: bool | None


@dataclass(frozen=True)
class Chart:
    """One target's figure: its Server searches and the other scenarios' benchmarks beside them."""

    target: str
    curves: tuple[Curve, ...]
    singles: tuple[Single, ...]


def _probes(part: LoadgenRecord) -> tuple[Probe, ...]:
    if part.peak is None:
        return ()
    peak = part.peak.peak_qps
    drawn = [
        Probe(
            qps=p.scheduled_qps if p.scheduled_qps is not None else p.target_qps,
            latency_s=p.latency_s,
            valid=p.valid,
            peak=p.valid and peak is not None and p.target_qps == peak,
        )
        for p in part.peak.probes
    ]
    # The search bisects, so probes run out of order; the line follows the load.
    return tuple(sorted(drawn, key=lambda p: p.qps))


def _bound(part: LoadgenRecord) -> float | None:
    ns = part.settings.get("target_latency_ns")
    return ns / 1e9 if isinstance(ns, (int, float)) and ns > 0 else None


def _percentile(part: LoadgenRecord) -> float | None:
    value = part.settings.get("target_latency_percentile")
    return float(value) if isinstance(value, (int, float)) and 0 < value < 1 else None


def charts(runs: Sequence[StoredRun]) -> list[Chart]:
    """The figures of ``runs``' LoadGen benchmarks: one per target with at least one Server peak
    search, targets in first-seen order; each search a ``Curve`` and each SingleStream, MultiStream
    or Offline performance benchmark of that target a ``Single``. Accuracy runs, and Server runs
    without a search (one rate, its verdict in the table), are not drawn."""
    labels = plots.run_labels(runs)
    curves: dict[str, list[Curve]] = {}
    singles: dict[str, list[Single]] = {}
    for index, run in enumerate(runs):
        for bench in run.benchmarks:
            record = bench.record
            part = None if record is None else record.loadgen
            if record is None or part is None or part.mode != "performance":
                continue
            label = bench.name + f" | {labels[index]}"
            if part.scenario == "Server" and part.peak is not None:
                curve = Curve(
                    label, index, _probes(part), _bound(part), _percentile(part), part.peak.peak_qps
                )
                curves.setdefault(record.target, []).append(curve)
            elif part.scenario != "Server" and part.samples_per_s is not None:
                latency = None if part.scenario == "Offline" else part.latency("p99") or part.latency("p50")
                single = Single(label, index, part.scenario, part.samples_per_s, latency, part.valid)
                singles.setdefault(record.target, []).append(single)
    return [
        _shortened(Chart(target, tuple(found), tuple(singles.get(target, ()))))
        for target, found in curves.items()
    ]


def _shortened(chart: Chart) -> Chart:
    """``chart`` with its legend labels cut to what tells its benchmarks apart: the run's file only
    when the chart has benchmarks of several runs; the test function's name only when they differ
    (else the parameters in its brackets), and the target left out of them (the figure's title)."""
    members: list[Curve | Single] = [*chart.curves, *chart.singles]
    names = [m.label.rpartition(" | ")[0] for m in members]
    several_runs = len({m.run for m in members}) > 1
    functions = {name.partition("[")[0] for name in names}
    target = chart.target.replace(":", "-")

    def short(member: Curve | Single) -> str:
        name, _, run = member.label.rpartition(" | ")
        _, bracket, params = name.partition("[")
        if bracket and len(functions) == 1:
            name = remove_suffix(params, "]").replace(f"-{target}", "").replace(f"{target}-", "")
        return f"{name} | {run}" if several_runs else name

    return Chart(
        chart.target,
        tuple(dataclasses.replace(c, label=short(c)) for c in chart.curves),
        tuple(dataclasses.replace(s, label=short(s)) for s in chart.singles),
    )


def check(chart: Chart) -> None:
    """Raise ``plots.PlotError`` naming the target and benchmark of a rate or latency that is not a
    finite number >= 0 (records made in memory; run files are checked when read)."""
    values = [
        (c.label, name, value)
        for c in chart.curves
        for p in c.probes
        for name, value in (("QPS", p.qps), ("latency", p.latency_s))
    ]
    values += [(c.label, "latency bound", c.bound_s) for c in chart.curves]
    values += [(s.label, "samples/s", s.samples_per_s) for s in chart.singles]
    values += [(s.label, "latency", s.latency_s) for s in chart.singles]
    for label, name, value in values:
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise plots.PlotError(
                f"cannot plot {TITLE} of {chart.target!r}, {label!r}: the {name} is {value!r}, "
                "not a finite number >= 0; correct the record"
            )


def notes(chart: Chart) -> list[str]:
    """The figure's footnotes: what x and y are, the markers, and the other scenarios' marks."""
    percentiles = sorted({c.percentile for c in chart.curves if c.percentile is not None})
    which = ", ".join(f"p{p * 100:g}" for p in percentiles) or "the target percentile"
    lines = [
        f"Server peak search: one point per probe at the QPS LoadGen scheduled, its latency at the target "
        f"percentile ({which}); filled: LoadGen VALID, hollow: INVALID, star: the peak (the table's Server "
        "QPS); dashed: the latency bound"
    ]
    if any(s.latency_s is not None for s in chart.singles):
        lines.append("single points: SingleStream / MultiStream benchmarks at their samples/s and p99")
    if any(s.scenario == "Offline" for s in chart.singles):
        lines.append("dotted vertical line: an Offline benchmark's samples/s, served with no latency bound")
    return lines


def draw(chart: Chart, *, machine: str = "") -> Figure:
    """The figure of one ``chart``: a line per search, the bounds, the other scenarios' marks."""
    check(chart)
    fig, ax = plots.new_figure(f"{chart.target}: {TITLE}", notes(chart), machine)
    latencies = [p.latency_s for c in chart.curves for p in c.probes if p.latency_s is not None]
    latencies += [c.bound_s for c in chart.curves if c.bound_s is not None]
    latencies += [s.latency_s for s in chart.singles if s.latency_s is not None]
    scale, unit = units.axis_scale(latencies, "s")
    for i, curve in enumerate(chart.curves):
        _draw_curve(ax, curve, i, scale)
    bounds = sorted({c.bound_s for c in chart.curves if c.bound_s is not None})
    for bound in bounds:
        # One line per bound, in its search's colour when one search has it, else grey.
        owners = [i for i, c in enumerate(chart.curves) if c.bound_s == bound]
        owner = f" ({chart.curves[owners[0]].label})" if len(owners) == 1 and len(bounds) > 1 else ""
        ax.axhline(
            bound / scale,
            color=plots.PALETTE[owners[0] % len(plots.PALETTE)]
            if len(owners) == 1 and len(bounds) > 1
            else "#555555",
            linestyle="--",
            linewidth=1.1,
            label=f"latency bound {units.format_value(bound, 's')}{owner}",
            zorder=1,
        )
    for j, single in enumerate(chart.singles):
        _draw_single(ax, single, len(chart.curves) + j, scale)
    rates = [p.qps for c in chart.curves for p in c.probes] + [s.samples_per_s for s in chart.singles]
    _axes(ax, rates, [v / scale for v in latencies])
    ax.set_xlabel("load (Server: scheduled queries/s; other scenarios: samples/s)")
    ax.set_ylabel(f"latency ({unit})")
    # Outside the axes, so the legend never covers a point.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8.5)
    return fig


def _draw_curve(ax: Axes, curve: Curve, index: int, scale: float) -> None:
    """One search: a thin line through its probes, filled VALID and hollow INVALID markers, the peak
    as a star with its QPS beside it."""
    color = plots.PALETTE[index % len(plots.PALETTE)]
    marker = plots.MARKERS[index % len(plots.MARKERS)]
    style = plots.LINESTYLES[curve.run % len(plots.LINESTYLES)]
    drawn = [p for p in curve.probes if p.latency_s is not None]
    xs = [p.qps for p in drawn]
    ys = [(p.latency_s or 0.0) / scale for p in drawn]
    ax.plot(xs, ys, color=color, linestyle=style, linewidth=1.2, alpha=0.7, zorder=2)
    for valid in (True, False):
        px = [x for x, p in zip_strict(xs, drawn) if p.valid is valid and not p.peak]
        py = [y for y, p in zip_strict(ys, drawn) if p.valid is valid and not p.peak]
        ax.plot(
            px,
            py,
            linestyle="none",
            marker=marker,
            markersize=7,
            color=color,
            markerfacecolor=color if valid else "white",
            markeredgewidth=1.5,
            label=f"{curve.label}: {'VALID' if valid else 'INVALID'}" if px else None,
            zorder=4,
        )
    for x, y, p in zip_strict(xs, ys, drawn):
        if p.peak and curve.peak_qps is not None:
            ax.plot(
                [x],
                [y],
                linestyle="none",
                marker="*",
                markersize=15,
                color=color,
                markeredgecolor="#222222",
                markeredgewidth=0.8,
                label=f"{curve.label}: peak",
                zorder=5,
            )
            ax.annotate(
                f"peak {units.format_number(curve.peak_qps)} QPS",
                (x, y),
                # Left of the star, level with it: the line comes from below, the bound is above.
                xytext=(-14, 0),
                textcoords="offset points",
                ha="right",
                va="center",
                fontsize=8.5,
                color=color,
            )


def _draw_single(ax: Axes, single: Single, index: int, scale: float) -> None:
    """Another scenario's benchmark: a point, or a dotted vertical line for Offline."""
    color = plots.PALETTE[index % len(plots.PALETTE)]
    # The scenario, unless the benchmark's name already says it.
    label = single.label if single.scenario in single.label else f"{single.label} ({single.scenario})"
    if single.latency_s is None:
        ax.axvline(single.samples_per_s, color=color, linestyle=":", linewidth=1.6, label=label, zorder=1)
        return
    ax.plot(
        [single.samples_per_s],
        [single.latency_s / scale],
        linestyle="none",
        marker=plots.MARKERS[index % len(plots.MARKERS)],
        markersize=8,
        color=color,
        markerfacecolor=color if single.valid is not False else "white",
        markeredgewidth=1.5,
        label=label,
        zorder=4,
    )


def _axes(ax: Axes, xs: Sequence[float], ys: Sequence[float]) -> None:
    """A rate axis from 0; a log latency axis when the latencies span a wide range; light grid."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xlim(0, max(xs, default=1.0) * 1.08 or 1.0)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: units.format_number(v)))
    positive = [y for y in ys if y > 0]
    if positive and max(positive) / min(positive) > plots.LOG_RATIO:
        ax.set_yscale("log")
        ax.set_ylim(min(positive) / 1.6, max(positive) * 1.6)
        # Label the 2s and 5s between decades: a latency axis seldom spans more than two.
        ax.yaxis.set_minor_formatter(
            FuncFormatter(lambda v, _: units.format_number(v) if f"{v:.1e}"[0] in "25" else "")
        )
    else:
        ax.set_ylim(0, max(ys, default=1.0) * 1.15 or 1.0)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: units.format_number(v)))
    ax.grid(True, which="major", color="#dddddd", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
