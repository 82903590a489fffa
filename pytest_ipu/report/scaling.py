"""The scaling views of ``pytest-ipu report``: training benchmarks across runs on different device counts.

A *study* is one training benchmark (a record with a ``training`` or ``time_to_train`` part) in every
run given, matched by its ``fullname`` without the file path, unless one run holds two benchmarks
that only their paths tell apart: those keep their whole ``fullname``. A view is drawn when its x
axis has two device counts or more (measured or published). A published reference never enters the
ideal line; one that matches no study is listed all the same, saying so. The tables stand with or
without figures (matplotlib missing); matplotlib is imported inside the drawing functions only.

Documented in docs/training.md (section "Report").
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_ipu.backports import zip_strict
from pytest_ipu.measure import units
from pytest_ipu.report import plots
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import group_name
from pytest_ipu.results.references import Reference

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: The two views of a study, in the order the page shows them.
THROUGHPUT = "scaling-throughput"
TIME_TO_TRAIN = "scaling-time-to-train"
VIEWS = (THROUGHPUT, TIME_TO_TRAIN)

#: The reference metric each view draws.
VIEW_METRIC: Mapping[str, str] = {THROUGHPUT: "throughput", TIME_TO_TRAIN: "time_to_train"}
VIEW_TITLES: Mapping[str, str] = {
    THROUGHPUT: "samples/s vs devices",
    TIME_TO_TRAIN: "time to train vs devices",
}

#: Fewest distinct device counts (measured and published) a view needs to be drawn.
MIN_DEVICE_COUNTS = 2

#: Measured points in the palette's first colour; published ones in its second, with markers of
#: their own, so that the two never read as one series (in greyscale the markers still differ).
MEASURED_COLOR = plots.PALETTE[0]
PUBLISHED_COLOR = plots.PALETTE[1]
IDEAL_COLOR = "#7F7F7F"
PUBLISHED_MARKERS = ("*", "D", "P", "X", "h", "v", "^", "<", ">", "p")

#: The mark of an efficiency that is the record's own (its ``scaling`` part), in figures and tables.
OWN_MARK = "\u2020"

REFERENCES_TITLE = "Published reference points (not measured here)"
NO_MATCH = "no measured benchmark matches"


class ScalingError(ValueError):
    """A record whose numbers cannot be put on a scaling view (not finite); the message names it."""


@dataclass(frozen=True)
class Point:
    """One record of a study: the run it comes from, its device count and what it measured."""

    #: Index of the run (in the order given) and how the page names it.
    run: int
    run_label: str
    #: The x axis: processes x replicas (``training``), else ``time_to_train.processes``.
    devices: int
    #: Samples per second over the global batch.
    throughput: float
    #: Samples one step of the whole launch consumes; `None` for a time-to-train record.
    global_batch: int | None
    #: The scaling efficiency shown beside the point; `None` when the ideal's base is 0 samples/s.
    efficiency: float | None
    #: True when ``efficiency`` is the record's own (``scaling.efficiency``), not computed here.
    own_efficiency: bool
    #: The record's own baseline: its file and processes (only with ``own_efficiency``).
    own_baseline: tuple[str, int] | None
    #: The olympic time to train, seconds, and the fastest and slowest run; `None` without one.
    time_to_train_s: float | None
    time_to_train_min_s: float | None
    time_to_train_max_s: float | None


@dataclass(frozen=True)
class Study:
    """One training benchmark across the runs: its points, the ideal line's base, its references."""

    #: The benchmark as the page names it: ``fullname`` without its file path.
    title: str
    #: Its pytest-benchmark names and groups, which references are matched against.
    names: tuple[str, ...]
    #: Every record, by device count, then run.
    points: tuple[Point, ...]
    #: The point whose throughput the ideal line scales: the first run at the smallest N.
    base: Point
    #: The published references whose ``benchmark`` is part of a name or group of the study.
    references: tuple[Reference, ...]

    def ideal(self) -> tuple[tuple[int, float], ...]:
        """The ideal line at each measured device count N: (N / N_min) x throughput(N_min)."""
        counts = sorted({p.devices for p in self.points})
        return tuple((n, n / self.base.devices * self.base.throughput) for n in counts)

    def timed(self) -> tuple[Point, ...]:
        """The points with a time to train."""
        return tuple(p for p in self.points if p.time_to_train_s is not None)

    def published(self, view: str) -> tuple[Reference, ...]:
        """The references a view draws: those of its metric."""
        return tuple(r for r in self.references if r.metric == VIEW_METRIC[view])

    def views(self) -> tuple[str, ...]:
        """The views worth drawing: a view with fewer than two device counts says nothing its
        table does not. The time-to-train view needs a measured time to train."""
        out = []
        for view in VIEWS:
            measured = self.points if view == THROUGHPUT else self.timed()
            counts = {p.devices for p in measured} | {r.devices for r in self.published(view)}
            if measured and len(counts) >= MIN_DEVICE_COUNTS:
                out.append(view)
        return tuple(out)


def devices(record: IpuRecord) -> int | None:
    """The devices a training record ran on; `None` for a record that is not about training."""
    if record.training is not None:
        return record.training.devices
    if record.time_to_train is not None:
        return record.time_to_train.processes
    return None


def _short(fullname: str) -> str:
    """``fullname`` without its file path (``tests/x.py::test_t[a]`` -> ``test_t[a]``)."""
    return fullname.partition("::")[2] or fullname


def studies(runs: Sequence[StoredRun], references: Sequence[Reference] = ()) -> list[Study]:
    """The training benchmarks of ``runs``, each with its points and matching ``references``, in
    first-seen order. Raises ``ScalingError`` for a number that cannot be drawn."""
    labels = plots.run_labels(runs)
    found = [
        (index, bench, bench.record)
        for index, run in enumerate(runs)
        for bench in run.benchmarks
        if bench.record is not None and devices(bench.record) is not None
    ]
    out = []
    for title, entries in _by_title(found).items():
        for index, _, record in entries:
            _check(title, labels[index], record)
        raw = sorted(
            ((index, record, devices(record) or 0) for index, _, record in entries),
            key=lambda item: (item[2], item[0]),
        )
        base_index, base_record, n_min = raw[0]
        base_throughput = base_record.throughput_items_per_s
        points = tuple(
            _point(index, labels[index], record, n, n_min, base_throughput) for index, record, n in raw
        )
        names = tuple(
            dict.fromkeys(
                text
                for _, bench, _ in entries
                for text in (bench.name, bench.group, group_name(bench.group, bench.name))
                if text
            )
        )
        # A time-to-train figure goes only where a time to train was measured: beside a training
        # step's samples/s it would compare different things. Such a reference is listed apart.
        timed = any(p.time_to_train_s is not None for p in points)
        matched = _matching(references, names, timed)
        base = next(p for p in points if p.run == base_index and p.devices == n_min)
        out.append(Study(title, names, points, base, matched))
    return out


def _by_title(
    found: Sequence[tuple[int, StoredBenchmark, IpuRecord]],
) -> dict[str, list[tuple[int, StoredBenchmark, IpuRecord]]]:
    """The ``found`` benchmarks (run index, benchmark, record) by study title: the short name,
    or the whole fullname where two benchmarks of one run share a short name."""
    # A short name two benchmarks of one run share is ambiguous: those keep their whole fullname.
    seen: dict[tuple[int, str], set[str]] = {}
    for index, bench, _ in found:
        seen.setdefault((index, _short(bench.fullname)), set()).add(bench.fullname)
    ambiguous = {short for (_, short), fulls in seen.items() if len(fulls) > 1}
    members: dict[str, list[tuple[int, StoredBenchmark, IpuRecord]]] = {}
    for index, bench, record in found:
        short = _short(bench.fullname)
        members.setdefault(bench.fullname if short in ambiguous else short, []).append((index, bench, record))
    return members


def _matching(references: Sequence[Reference], names: Sequence[str], timed: bool) -> tuple[Reference, ...]:
    """The ``references`` of a study known by ``names`` that a scaling view draws; a time to
    train only where the study measured one (``timed``)."""
    # Only the metrics a scaling view draws: a latency or items/J figure is the summary's.
    return tuple(
        r
        for r in references
        if r.metric in VIEW_METRIC.values() and r.matches(*names) and (r.metric == "throughput" or timed)
    )


def unmatched(references: Sequence[Reference], found: Sequence[Study]) -> list[Reference]:
    """The references drawn with no study (no name matches, or no study it matches measured its
    metric): listed on the page all the same, never silently dropped."""
    used = {r.index for s in found for r in s.references}
    return [r for r in references if r.index not in used]


def why_unmatched(reference: Reference, found: Sequence[Study]) -> str:
    """Why ``reference`` is drawn with no study, for its table row."""
    named = [s.title for s in found if reference.matches(*s.names)]
    if not named:
        return f"{NO_MATCH} {reference.benchmark!r}"
    return f"not drawn: {', '.join(named)} measured no {reference.metric.replace('_', ' ')}"


def _check(title: str, run: str, record: IpuRecord) -> None:
    ttt = record.time_to_train
    numbers = [("samples/s", record.throughput_items_per_s)]
    if ttt is not None:
        numbers += [("time to train", ttt.olympic_s), ("fastest run", ttt.min_s), ("slowest run", ttt.max_s)]
    for name, value in numbers:
        if not (math.isfinite(value) and value >= 0):
            raise ScalingError(
                f"cannot draw the scaling of {title!r} in {run}: its {name} is {value!r}, "
                "not a finite number >= 0; correct the record"
            )


def _point(index: int, label: str, record: IpuRecord, n: int, n_min: int, base: float) -> Point:
    own = record.scaling
    if own is not None:
        efficiency: float | None = own.efficiency
    else:
        ideal = n / n_min * base
        efficiency = record.throughput_items_per_s / ideal if ideal > 0 else None
    ttt = record.time_to_train
    return Point(
        run=index,
        run_label=label,
        devices=n,
        throughput=record.throughput_items_per_s,
        global_batch=record.training.global_batch if record.training is not None else None,
        efficiency=efficiency,
        own_efficiency=own is not None,
        own_baseline=(own.baseline_file, own.baseline_processes) if own is not None else None,
        time_to_train_s=ttt.olympic_s if ttt is not None else None,
        time_to_train_min_s=ttt.min_s if ttt is not None else None,
        time_to_train_max_s=ttt.max_s if ttt is not None else None,
    )


# --- text ------------------------------------------------------------------------------------------


#: Efficiencies outside these bounds are marked suspicious (``SUSPECT_MARK``): above 105 %, the
#: base ran slower than it should; below 30 %, the processes mostly waited for each other or for cores.
SUSPECT_HIGH = 1.05
SUSPECT_LOW = 0.30
SUSPECT_MARK = "!"


def suspect(point: Point) -> bool:
    """Whether the point's efficiency is past what scaling on real hardware gives (``SUSPECT_*``)."""
    return point.efficiency is not None and not SUSPECT_LOW <= point.efficiency <= SUSPECT_HIGH


def efficiency_text(point: Point) -> str:
    """``90%``, or ``80% †`` for the record's own efficiency, ``125% !`` for a suspicious one;
    ``-`` when there is none."""
    if point.efficiency is None:
        return "-"
    marks = (f" {OWN_MARK}" if point.own_efficiency else "") + (f" {SUSPECT_MARK}" if suspect(point) else "")
    return f"{point.efficiency:.0%}{marks}"


def duration(seconds: float) -> str:
    """A time to train for reading: ``12.3 s``, ``28.3 min``, ``1.5 h`` (smaller times as ``ms``)."""
    if seconds < 60:
        return units.format_value(seconds, "s")
    if seconds < 3600:
        return f"{units.format_number(seconds / 60)} min"
    return f"{units.format_number(seconds / 3600)} h"


def efficiency_notes(study: Study) -> list[str]:
    """Where the efficiencies of a study come from: computed here, the records' own, or both."""
    notes = []
    base = study.base
    if any(not p.own_efficiency for p in study.points):
        notes.append(
            "efficiency = samples/s(N) / ((N / N_min) x samples/s(N_min)), computed here against "
            f"{base.run_label} at N_min = {base.devices}; the ideal line is (N / N_min) x "
            f"{units.format_number(base.throughput)} samples/s"
        )
    own = dict.fromkeys(p.own_baseline for p in study.points if p.own_baseline is not None)
    if own:
        against = ", ".join(f"{file} ({n} process(es))" for file, n in own)
        notes.append(
            f"{OWN_MARK} the record's own efficiency (its scaling part, --ipu-scaling-baseline), "
            f"against its baseline run {against}"
        )
    odd = [p for p in study.points if suspect(p)]
    if odd:
        shown = ", ".join(f"{p.run_label} {efficiency_text(p)}" for p in odd)
        notes.append(
            f"{SUSPECT_MARK} suspicious efficiency ({shown}): above {SUSPECT_HIGH:.0%} the base run was "
            f"slower than it should be (contended, or fewer cores than it needed); below {SUSPECT_LOW:.0%} "
            "the processes shared cores or waited on each other: read the runs' flags before the figure"
        )
    return notes


def efficiency_source(study: Study) -> str:
    """Which efficiencies a study's figure prints: computed here, the records' own, or both."""
    base = study.base
    computed = f"computed here against {base.run_label} at N_min = {base.devices}"
    own = [p for p in study.points if p.own_efficiency]
    if not own:
        return f"Efficiency beside each point: {computed}"
    if len(own) == len(study.points):
        return f"Efficiency beside each point: the record's own (its scaling part, marked {OWN_MARK})"
    return (
        f"Efficiency beside each point: the record's own where marked {OWN_MARK} (its scaling part), "
        f"else {computed}"
    )


# --- figures ---------------------------------------------------------------------------------------


def draw(study: Study, view: str, *, machine: str = "") -> Figure:
    """The figure of one view of ``study``: measured points, the ideal line (samples/s), and the
    published references of the view's metric in their own colour and markers."""

    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; expected one of {', '.join(VIEWS)}")
    notes = (
        efficiency_notes(study)
        if view == THROUGHPUT
        else ["point: olympic average of the kept runs; bar: fastest to slowest run that reached the target"]
    )
    if study.published(view):
        notes.append("published points are not measured here: the report lists each with its source")
    fig, ax = plots.new_figure(f"{study.title}: {VIEW_TITLES[view]}", notes, machine)

    if view == THROUGHPUT:
        values = _draw_throughput(ax, study)
        scale, unit = 1.0, "samples/s"
        ax.set_ylabel("throughput (samples/s)")
    else:
        # One unit for measured and published times alike, so that both read on one axis.
        times = [p.time_to_train_s or 0.0 for p in study.timed()] + [r.value for r in study.published(view)]
        scale, unit = _time_scale(times)
        values = _draw_time_to_train(ax, study, scale)
        ax.set_ylabel(f"time to train ({unit})")
    published = study.published(view)
    values.extend(_draw_published(ax, published, scale))
    measured = study.points if view == THROUGHPUT else study.timed()
    _axes(ax, [p.devices for p in measured] + [r.devices for r in published], values)
    # The section text says how devices are counted: processes x replicas, or a time to train's processes.
    ax.set_xlabel("devices")
    _legend(ax)
    return fig


def _draw_published(ax: Axes, published: Sequence[Reference], scale: float) -> list[float]:
    """Draw the ``published`` points of a view (their values divided by ``scale``) in their own
    colour and markers; the values drawn."""
    values = []
    for i, ref in enumerate(published):
        ax.plot(
            [ref.devices],
            [ref.value / scale],
            linestyle="none",
            marker=PUBLISHED_MARKERS[i % len(PUBLISHED_MARKERS)],
            markersize=10 if PUBLISHED_MARKERS[i % len(PUBLISHED_MARKERS)] == "*" else 7,
            color=PUBLISHED_COLOR,
            markerfacecolor="white",
            markeredgewidth=1.6,
            label=f"published: {ref.label}",
            zorder=5,
        )
        values.append(ref.value / scale)
    return values


def _legend(ax: Axes) -> None:
    """The figure's legend, beside the axes: measured first, the ideal, then the published points
    (in the order they were drawn, an error-bar container would come after every plain line)."""
    handles, texts = ax.get_legend_handles_labels()
    order = sorted(
        range(len(texts)), key=lambda i: (texts[i].startswith("published"), texts[i].startswith("ideal"))
    )
    ax.legend(
        [handles[i] for i in order],
        [texts[i] for i in order],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
        fontsize=8.5,
    )


def _draw_throughput(ax: Axes, study: Study) -> list[float]:
    """Measured samples/s (a line through them when each device count has one run), the ideal line
    and each point's efficiency beside it; returns the y values drawn."""
    points = study.points
    one_each = len({p.devices for p in points}) == len(points)
    ax.plot(
        [p.devices for p in points],
        [p.throughput for p in points],
        color=MEASURED_COLOR,
        linestyle="-" if one_each else "none",
        linewidth=1.8,
        marker="o",
        markersize=6,
        label="measured (one point per run)",
        zorder=4,
    )
    ideal = study.ideal()
    ax.plot(
        [n for n, _ in ideal],
        [v for _, v in ideal],
        color=IDEAL_COLOR,
        linestyle="--",
        linewidth=1.3,
        label=f"ideal: (N / {study.base.devices}) x samples/s at N = {study.base.devices}",
        zorder=3,
    )
    for p in points:
        ax.annotate(
            efficiency_text(p),
            (p.devices, p.throughput),
            xytext=(7, -12),
            textcoords="offset points",
            fontsize=8.5,
            color=MEASURED_COLOR,
        )
    return [p.throughput for p in points] + [v for _, v in ideal]


def _draw_time_to_train(ax: Axes, study: Study, scale: float) -> list[float]:
    """Measured olympic times with a bar from the fastest to the slowest run; returns the y drawn."""
    timed = study.timed()
    ys = [(p.time_to_train_s or 0.0) / scale for p in timed]
    lows = [(p.time_to_train_min_s or 0.0) / scale for p in timed]
    highs = [(p.time_to_train_max_s or 0.0) / scale for p in timed]
    one_each = len({p.devices for p in timed}) == len(timed)
    ax.errorbar(
        [p.devices for p in timed],
        ys,
        yerr=[
            [max(y - lo, 0.0) for y, lo in zip_strict(ys, lows)],
            [max(hi - y, 0.0) for y, hi in zip_strict(ys, highs)],
        ],
        color=MEASURED_COLOR,
        linestyle="-" if one_each else "none",
        linewidth=1.8,
        marker="o",
        markersize=6,
        capsize=4,
        label="measured: olympic average (bar: fastest to slowest run)",
        zorder=4,
    )
    return ys + lows + highs


def _time_scale(seconds: Sequence[float]) -> tuple[float, str]:
    """One unit for a time-to-train axis: s (or ms), min or h, by the middle of the values."""
    positive = [v for v in seconds if v > 0]
    middle = math.sqrt(min(positive) * max(positive)) if positive else 1.0
    if middle >= 3600:
        return 3600.0, "h"
    if middle >= 60:
        return 60.0, "min"
    return units.axis_scale(positive, "s")


def _axes(ax: Axes, xs: Sequence[int], ys: Sequence[float]) -> None:
    """Device ticks at every count drawn (log 2 when they span a wide range), a log y axis when the
    values do, light grid."""
    from matplotlib.ticker import FixedLocator
    from matplotlib.ticker import FuncFormatter
    from matplotlib.ticker import NullLocator

    counts = sorted(set(xs))
    if counts[-1] / counts[0] >= plots.LOG_X_RATIO:
        ax.set_xscale("log", base=2)
        ax.set_xlim(counts[0] / 1.4, counts[-1] * 1.4)
    else:
        pad = max((counts[-1] - counts[0]) * 0.08, 0.5)
        ax.set_xlim(counts[0] - pad, counts[-1] + pad)
    ax.xaxis.set_major_locator(FixedLocator(counts))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    positive = [y for y in ys if y > 0]
    if positive and max(positive) / min(positive) > plots.LOG_RATIO:
        ax.set_yscale("log")
        ax.set_ylim(min(positive) / 1.6, max(positive) * 1.6)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: units.format_number(v)))
        ax.yaxis.set_minor_formatter(
            FuncFormatter(lambda v, _: units.format_number(v) if f"{v:.1e}"[0] in "25" else "")
        )
    else:
        ax.set_ylim(0, max(ys, default=1.0) * 1.15 or 1.0)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: units.format_number(v)))
    ax.grid(True, which="major", color="#dddddd", linewidth=0.8)
    ax.grid(True, which="minor", axis="y", color="#eeeeee", linewidth=0.5)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


# --- the page's section ----------------------------------------------------------------------------


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[str], css: str = "") -> str:
    attrs = [' class="num"' if h in numeric else "" for h in headers]
    head = "".join(f"<th{a}>{_e(h)}</th>" for a, h in zip_strict(attrs, headers))
    body = "".join(
        "<tr>" + "".join(f"<td{a}>{_e(c)}</td>" for a, c in zip_strict(attrs, row)) + "</tr>" for row in rows
    )
    klass = f' class="{css}"' if css else ""
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def measured_table(study: Study, notes: bool = True) -> str:
    """The study's measured points, one row per run: devices, samples/s, the ideal, the efficiency
    and, for time-to-train benchmarks, the olympic time and the fastest to slowest run; ``notes``:
    where the efficiencies come from, below it (left out where the figure above says it)."""
    ideal = dict(study.ideal())
    timed = bool(study.timed())
    headers = ["run", "devices", "global batch", "samples/s", "ideal samples/s", "efficiency"]
    if timed:
        headers += ["time to train", "fastest..slowest"]
    rows = []
    for p in study.points:
        row = [
            p.run_label,
            str(p.devices),
            "-" if p.global_batch is None else str(p.global_batch),
            units.format_number(p.throughput),
            units.format_number(ideal[p.devices]),
            efficiency_text(p),
        ]
        if timed:
            low, high = p.time_to_train_min_s, p.time_to_train_max_s
            row += [
                "-" if p.time_to_train_s is None else duration(p.time_to_train_s),
                "-" if low is None or high is None else f"{duration(low)}..{duration(high)}",
            ]
        rows.append(row)
    numeric = set(headers) - {"run"}
    items = "".join(f"<li>{_e(n)}</li>" for n in efficiency_notes(study)) if notes else ""
    return _table(headers, rows, numeric, "scaling-measured") + (
        f'<ul class="notes">{items}</ul>' if items else ""
    )


def references_table(refs: Sequence[Reference], shown: Mapping[int, str]) -> str:
    """The published references, never measured here: label, devices, metric, value as published,
    source, and where each is drawn (``shown``, by reference index)."""
    headers = ["published", "devices", "metric", "value", "source", "shown"]
    rows = [[r.label, str(r.devices), r.metric, r.written, r.source, shown.get(r.index, "")] for r in refs]
    return f"<h4>{_e(REFERENCES_TITLE)}</h4>" + _table(headers, rows, {"devices", "value"}, "references")


def section(
    found: Sequence[Study],
    loose: Sequence[Reference],
    figures: Mapping[tuple[int, str], tuple[str, bytes]] | None,
) -> str:
    """The page's "Scaling" section body: each study's figures, its measured table and its
    published references, then the references that match nothing.

    ``figures`` maps (study index, view) to the figure's file stem and SVG bytes; ``None`` when no
    figure could be drawn here (matplotlib missing): the tables are shown and the page says why.
    """
    parts = [
        '<p class="sub">Training benchmarks across the runs given. Devices: processes x replicas '
        "(time to train: processes). One point per run: runs at the same device count are all shown, "
        "never averaged.</p>"
    ]
    if figures is None:
        parts.append(
            '<p class="sub">No scaling figures: they need matplotlib (pytest-ipu\'s extra '
            "'report': pip install matplotlib).</p>"
        )
    for index, study in enumerate(found):
        parts.append(f"<h3>{_e(study.title)}</h3>")
        drawn = {
            view: figures[(index, view)] for view in study.views() if figures and (index, view) in figures
        }
        if not study.views():
            counts = ", ".join(str(n) for n in sorted({p.devices for p in study.points}))
            parts.append(f'<p class="sub">No scaling figure: every run has {_e(counts)} device(s).</p>')
        images = [_figure_html(study, view, stem, svg) for view, (stem, svg) in drawn.items()]
        if images:
            parts.append(f'<div class="figures">{"".join(images)}</div>')
        parts.append(measured_table(study, notes=THROUGHPUT not in drawn))
        if study.references:
            parts.append(references_table(study.references, _where_drawn(study, drawn)))
    if loose:
        shown = {r.index: why_unmatched(r, found) for r in loose}
        parts.append(references_table(loose, shown))
    return "".join(parts)


def _figure_html(study: Study, view: str, stem: str, svg: bytes) -> str:
    """One figure of ``study`` in the page: its SVG inline, captioned with its files (and, for
    throughput, where its efficiency baseline comes from)."""
    import base64

    data = base64.b64encode(svg).decode("ascii")
    alt = f"{study.title}: {VIEW_TITLES[view]}"
    caption = f"{stem}.png, {stem}.svg"
    if view == THROUGHPUT:
        own = [n for n in efficiency_notes(study) if n.startswith(OWN_MARK)]
        caption = ". ".join([efficiency_source(study), *own, caption])
    return (
        f'<figure><img alt="{_e(alt)}" src="data:image/svg+xml;base64,{data}"/>'
        f"<figcaption>{_e(caption)}</figcaption></figure>"
    )


def _where_drawn(study: Study, drawn: Mapping[str, object]) -> dict[int, str]:
    """Where each of ``study``'s references is drawn (``drawn``: its views with a figure), or why not."""
    shown = {}
    for ref in study.references:
        view = THROUGHPUT if ref.metric == "throughput" else TIME_TO_TRAIN
        if view in drawn:
            shown[ref.index] = f"drawn in the {VIEW_TITLES[view]} figure"
        elif view == TIME_TO_TRAIN and not study.timed():
            shown[ref.index] = "not drawn: this benchmark has no time to train measured"
        else:
            shown[ref.index] = "not drawn: no figure"
    return shown
