"""Plots of saved runs: latency, throughput and items per joule against batch size (presentation only).

One figure per view of each group with a batch axis (``has_batch_axis``: two batch sizes or more), a
line per backend (target x precision, plus the concurrent instances and I/O mode where not the
default) and per run; colours and markers follow the backend and line styles the run, alike in every
view and group. matplotlib is imported inside the drawing functions only (importing this module, and
the ``pytest-ipu`` command, must not pay for it or need it); figures are ``matplotlib.figure.Figure``
on an Agg canvas, never ``pyplot``, so no GUI backend is selected and no global registry holds them.

Documented in docs/ci.md (section "Reports").
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING
from typing import Any

from pytest_ipu.backports import zip_strict
from pytest_ipu.measure import stats
from pytest_ipu.measure import units
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import group_name

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: The three views, in the order a report shows them.
VIEWS = ("latency", "throughput", "items_per_j")

#: What each view plots, for titles and y-axis labels.
VIEW_TITLES: Mapping[str, str] = {
    "latency": "latency per call",
    "throughput": "throughput",
    "items_per_j": "energy efficiency",
}

#: The Okabe-Ito palette without its yellow (unreadable on white): distinguishable with the common
#: forms of colour blindness, and the markers below tell lines apart in greyscale print too.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#7F7F7F")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h", "<", ">")
#: One per run of a multi-run report: the first run solid, then dashed, dotted, dash-dotted.
LINESTYLES = ("-", "--", ":", "-.")

#: Fewest distinct batch sizes a group needs for plots against batch size (``has_batch_axis``).
MIN_BATCH_SIZES = 2

#: Above this ratio of the largest to the smallest value the y axis is logarithmic: on a linear axis
#: the small values would sit flat on the floor.
LOG_RATIO = 20.0
#: Above this ratio of the largest to the smallest batch size the x axis is logarithmic (base 2), so
#: that the doubling batch sizes of a typical sweep are evenly spaced.
LOG_X_RATIO = 16.0

LOW_CONFIDENCE_NOTE = (
    "hollow markers: low confidence, the energy window is shorter than the power sensor needs"
)
#: The record flags that make a point hollow in every view: the figure rests on rounds that varied
#: beyond the threshold or on a machine that other processes kept busy (docs/numbers.md, flags).
UNSTEADY_FLAGS = frozenset({"unstable", "contended"})
UNSTEADY_NOTE = "hollow markers: the record is flagged unstable or contended (see its table's flags)"
SIM_NOTE = "[sim] simulated timings: a simulator (the IPU Model), not hardware timings"
INSTANCES_NOTE = (
    "xN = N instances running concurrently: items/s is summed over them, latency is per call of one instance"
)


class PlotError(ValueError):
    """Numbers that cannot be plotted (NaN, Infinity, negative); the message names the point."""


@dataclass(frozen=True)
class Series:
    """One line of a plot: a backend of one run, its points in ascending batch size, values in SI units.

    ``values`` hold p50 latency (seconds), throughput (items/s) or items per joule, by view; ``None``
    where there is no number (power not measured or invalid), with the reason in ``reasons``.
    ``upper`` holds the p99 latency of each point (latency view only); ``upper_flagged`` marks a p99
    that too few rounds support (it is then the maximum of the rounds run). ``hollow`` marks a
    point whose record is flagged unstable or contended (``UNSTEADY_FLAGS``), or a low-confidence
    energy figure; ``unsteady`` the first of those alone.
    """

    label: str
    batch_sizes: tuple[int, ...]
    values: tuple[float | None, ...]
    upper: tuple[float | None, ...] = ()
    upper_flagged: tuple[bool, ...] = ()
    hollow: tuple[bool, ...] = ()
    unsteady: tuple[bool, ...] = ()
    reasons: tuple[str | None, ...] = ()
    color: str = PALETTE[0]
    marker: str = MARKERS[0]
    linestyle: str = LINESTYLES[0]
    target: str = ""
    precision: str = ""
    instances: int = 1
    simulator: bool = False
    #: Index of the run (in the order given) the points come from.
    run: int = 0
    #: The run's file, as the legend names it in a multi-run report; empty for a single run.
    run_label: str = ""
    #: The label without the run: the same for one backend's lines of different runs.
    backend_label: str = ""
    #: Power sources and scopes of the measured points, e.g. ``rapl (cpu-package)``.
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Backend:
    """What makes two benchmarks of one group the same line, apart from the run."""

    target: str
    precision: str
    instances: int
    simulator: bool
    io: str
    #: The test's other parameters, only when the fields above leave two benchmarks of a group at
    #: the same batch size (e.g. a workload parameter); empty otherwise.
    variant: str


@dataclass(frozen=True)
class _Point:
    """One record with the run it comes from, its group and the line it belongs to."""

    run: int
    group: str
    backend: _Backend
    record: IpuRecord


def groups(runs: Sequence[StoredRun]) -> list[str]:
    """The groups that hold at least one pytest-ipu record, in first-seen order over the runs."""
    seen: dict[str, None] = {}
    for run in runs:
        for bench in run.benchmarks:
            if bench.record is not None:
                seen[group_name(bench.group, bench.name)] = None
    return list(seen)


def batch_sizes(runs: Sequence[StoredRun], group: str) -> list[int]:
    """The distinct batch sizes of a group's records over all ``runs``, ascending."""
    return sorted(
        {
            bench.record.batch_size
            for run in runs
            for bench in run.benchmarks
            if bench.record is not None and group_name(bench.group, bench.name) == group
        }
    )


def has_batch_axis(runs: Sequence[StoredRun], group: str) -> bool:
    """Whether a group's records span at least ``MIN_BATCH_SIZES`` batch sizes: only then does a plot
    against batch size say more than the group's table (one point per line says nothing a row does
    not)."""
    return len(batch_sizes(runs, group)) >= MIN_BATCH_SIZES


def report_order(runs: Sequence[StoredRun]) -> list[str]:
    """The groups in the order a report shows them: the groups with a batch axis first, the one with
    the most records first (ties in first-seen order), then the others in first-seen order.

    The study a run is about (a model swept over batch sizes on every target) is then what a reader
    sees first, ahead of the side benchmarks of fixed size that a run may print before it.
    """
    seen = groups(runs)
    counts = dict.fromkeys(seen, 0)
    for run in runs:
        for bench in run.benchmarks:
            if bench.record is not None:
                counts[group_name(bench.group, bench.name)] += 1
    swept = [g for g in seen if has_batch_axis(runs, g)]
    # sorted() is stable: groups with as many records keep their first-seen order.
    return sorted(swept, key=lambda g: -counts[g]) + [g for g in seen if g not in swept]


def run_labels(runs: Sequence[StoredRun]) -> list[str]:
    """How legends and tables name each run: its file name, or more of its path when names repeat."""
    names = [run.path.name for run in runs]
    if len(set(names)) == len(names):
        return names
    paths = [str(run.path) for run in runs]
    if len(set(paths)) == len(paths):
        return paths
    return [f"#{i + 1} {path}" for i, path in enumerate(paths)]


def _variant(bench: StoredBenchmark) -> str:
    # The batch size is the x axis, and objects pytest-benchmark could not serialise say nothing useful.
    return ", ".join(
        f"{key}={value}"
        for key, value in bench.params.items()
        if key != "batch_size" and not str(value).startswith("UNSERIALIZABLE")
    ) or bench.name.partition("[")[2].rstrip("]")


def _points(runs: Sequence[StoredRun]) -> list[_Point]:
    """Every record of every run with the backend it belongs to, variants split only where needed."""
    raw: list[tuple[int, str, StoredBenchmark, IpuRecord]] = [
        (index, group_name(bench.group, bench.name), bench, bench.record)
        for index, run in enumerate(runs)
        for bench in run.benchmarks
        if bench.record is not None
    ]

    def base(record: IpuRecord) -> _Backend:
        count = len(record.instances) if record.instances else 1
        return _Backend(record.target, record.precision, count, record.simulator, record.io, "")

    # A group where one backend of one run has two benchmarks at one batch size would draw a zigzag:
    # those groups tell their benchmarks apart by the remaining test parameters.
    seen: set[tuple[int, str, _Backend, int]] = set()
    split: set[str] = set()
    for index, group, _, record in raw:
        key = (index, group, base(record), record.batch_size)
        if key in seen:
            split.add(group)
        seen.add(key)
    out = []
    for index, group, bench, record in raw:
        backend = base(record)
        if group in split:
            backend = dataclasses.replace(backend, variant=_variant(bench))
        out.append(_Point(index, group, backend, record))
    return out


def _backend_label(backend: _Backend) -> str:
    parts = [backend.target + (f" x{backend.instances}" if backend.instances > 1 else "")]
    if backend.precision not in ("", "n/a"):
        parts.append(backend.precision)
    if backend.io != "host":
        parts.append(f"io={backend.io}")
    if backend.variant:
        parts.append(f"({backend.variant})")
    if backend.simulator:
        parts.append("[sim] simulated timings")
    return " ".join(parts)


def _energy(record: IpuRecord) -> tuple[float | None, bool, str | None, str | None]:
    """Items per joule, whether it is of low confidence, why it is missing, and its source."""
    power = record.power
    if power is None or not power.measured:
        reason = power.reason if power is not None else ""
        return None, False, f"energy not measured: {reason or 'no power record'}", None
    value = power.items_per_j
    if not power.valid or value is None:
        why = power.reason or "; ".join(power.warnings)
        return None, False, f"energy invalid ({record.target}): {why or 'no reason given'}", None
    scopes = sorted({d.scope for d in power.devices if d.scope})
    source = (power.source or "unknown source") + (f" ({', '.join(scopes)})" if scopes else "")
    return value, power.low_confidence, None, source


@dataclass
class _Values:
    """One line's points of a view (``_view_values``), by batch size: the value, the upper whisker
    (latency's p99) and whether it is flagged, hollow (unsteady or low-confidence), unsteady, why
    there is no value, and the energy figures' sources."""

    values: list[float | None] = dataclasses.field(default_factory=list)
    upper: list[float | None] = dataclasses.field(default_factory=list)
    flagged: list[bool] = dataclasses.field(default_factory=list)
    hollow: list[bool] = dataclasses.field(default_factory=list)
    unsteady: list[bool] = dataclasses.field(default_factory=list)
    reasons: list[str | None] = dataclasses.field(default_factory=list)
    sources: dict[str, None] = dataclasses.field(default_factory=dict)


def _view_values(records: Sequence[IpuRecord], view: str) -> _Values:
    """The points of ``view`` of one line's ``records``."""
    got = _Values()
    for record in records:
        shaky = bool(UNSTEADY_FLAGS.intersection(record.flags))
        got.unsteady.append(shaky)
        if view == "latency":
            got.values.append(record.latency_s.p50)
            got.upper.append(record.latency_s.p99)
            got.flagged.append("p99" in record.latency_s.unsupported)
            got.hollow.append(shaky)
            got.reasons.append(None)
        elif view == "throughput":
            got.values.append(record.throughput_items_per_s)
            got.hollow.append(shaky)
            got.reasons.append(None)
        else:
            value, low, reason, source = _energy(record)
            got.values.append(value)
            got.hollow.append(low or shaky)
            got.reasons.append(reason)
            if source:
                got.sources[source] = None
    return got


def series_for(runs: Sequence[StoredRun], group: str, view: str) -> list[Series]:
    """The lines of one group's plot of ``view``, sorted by backend then run, points by batch size.

    Colours and markers come from the backend's place among all backends of all ``runs``, so they
    agree across the three views and across groups.
    """
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; expected one of {', '.join(VIEWS)}")
    points = _points(runs)
    backends = sorted({p.backend for p in points}, key=_backend_sort_key)
    style = {b: i for i, b in enumerate(backends)}
    labels = run_labels(runs)
    lines: dict[tuple[_Backend, int], list[IpuRecord]] = {}
    for point in points:
        if point.group == group:
            lines.setdefault((point.backend, point.run), []).append(point.record)
    out = []
    for (backend, run), records in sorted(
        lines.items(), key=lambda item: (_backend_sort_key(item[0][0]), item[0][1])
    ):
        records.sort(key=lambda r: r.batch_size)
        got = _view_values(records, view)
        label = _backend_label(backend)
        index = style[backend]
        out.append(
            Series(
                label=label + (f" | {labels[run]}" if len(runs) > 1 else ""),
                batch_sizes=tuple(r.batch_size for r in records),
                values=tuple(got.values),
                upper=tuple(got.upper),
                upper_flagged=tuple(got.flagged),
                hollow=tuple(got.hollow),
                unsteady=tuple(got.unsteady),
                reasons=tuple(got.reasons),
                color=PALETTE[index % len(PALETTE)],
                marker=MARKERS[index % len(MARKERS)],
                linestyle=LINESTYLES[run % len(LINESTYLES)],
                target=backend.target,
                precision=backend.precision,
                instances=backend.instances,
                simulator=backend.simulator,
                run=run,
                run_label=labels[run] if len(runs) > 1 else "",
                backend_label=label,
                sources=tuple(got.sources),
            )
        )
    return out


def has_values(series: Sequence[Series]) -> bool:
    """Whether any line of a view has a number to draw (energy, say, may be measured nowhere)."""
    return any(v is not None for s in series for v in s.values)


def _backend_sort_key(backend: _Backend) -> tuple[str, str, int, bool, str, str]:
    return (
        backend.target,
        backend.precision,
        backend.instances,
        backend.simulator,
        backend.io,
        backend.variant,
    )


def notes_for(view: str, series: Sequence[Series]) -> list[str]:
    """The footnotes a view's figure needs: flagged p99s, instances, simulators, energy caveats."""
    notes: list[str] = []
    if view == "latency":
        notes.append("line: p50 per call; band and whiskers: p50 to p99")
        if any(any(s.upper_flagged) for s in series):
            notes.append(
                f"open circle: p99 of fewer than {stats.min_samples_for(99.0)} rounds, "
                "which is the maximum of the rounds run"
            )
    if view == "items_per_j":
        notes.append("items/J = items/s per W: the energy of the measured devices over the timed window")
        sources = dict.fromkeys(src for s in series for src in s.sources)
        if sources:
            notes.append(f"measured by {'; '.join(sources)}; idle power is not subtracted")
        if any(_low_confidence(s) for s in series):
            notes.append(LOW_CONFIDENCE_NOTE)
        # With no point at all the body of the plot says why; otherwise name what is left out.
        if any(v is not None for s in series for v in s.values):
            missing: dict[str, list[str]] = {}
            for s in series:
                for value, reason in zip_strict(s.values, s.reasons):
                    if value is None and reason:
                        missing.setdefault(reason, [])
                        if s.label not in missing[reason]:
                            missing[reason].append(s.label)
            for reason, labels in missing.items():
                notes.append(f"not shown for {', '.join(labels)}: {reason}")
    if any(any(s.unsteady) for s in series):
        notes.append(UNSTEADY_NOTE)
    if any(s.instances > 1 for s in series):
        notes.append(INSTANCES_NOTE)
    if any(s.simulator for s in series):
        notes.append(SIM_NOTE)
    return notes


def machine_label(runs: Sequence[StoredRun], group: str | None = None) -> str:
    """The hardware a plot's numbers come from: the CPU and any accelerator (of ``group`` when given)."""
    labels: dict[str, None] = {}
    for run in runs:
        cpu = run.machine_info.get("cpu")
        brand = cpu.get("brand_raw") if isinstance(cpu, Mapping) else None
        count = cpu.get("count") if isinstance(cpu, Mapping) else None
        parts = [str(brand or run.machine_info.get("processor") or "unknown CPU")]
        if isinstance(count, int):
            parts[0] += f" ({count} CPUs)"
        accelerators = dict.fromkeys(
            f"{b.record.device_name} [sim]" if b.record.simulator else b.record.device_name
            for b in run.benchmarks
            if b.record is not None
            and b.record.device not in ("cpu", "host")
            and (group is None or group_name(b.group, b.name) == group)
        )
        parts.extend(accelerators)
        labels[" + ".join(parts)] = None
    return "; ".join(labels)


def format_date(value: str | None) -> str:
    """A run's ISO timestamp as ``2026-11-29 20:31 UTC``; the text as given when it is not ISO."""
    if not value:
        return "unknown date"
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return value
    offset = when.utcoffset()
    zone = "" if offset is None else " UTC" if not offset else when.strftime(" UTC%z")
    return when.strftime("%Y-%m-%d %H:%M") + zone


def _wide(values: Sequence[float]) -> bool:
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) > LOG_RATIO


def check_plottable(view: str, group: str, series: Sequence[Series]) -> None:
    """Raise ``PlotError`` naming the group, line and batch size of a value that is not a finite
    number >= 0. Run files are checked when read (``benchmark_json.parse_run``), so this guards
    records made in memory: matplotlib would draw NaN as a gap and Infinity as a broken axis
    without a word, and a log axis cannot hold a negative value."""
    for s in series:
        for name, numbers in (("batch size", s.batch_sizes), ("value", s.values), ("p99", s.upper)):
            for i, value in enumerate(numbers):
                if value is not None and not (math.isfinite(value) and value >= 0):
                    batch = s.batch_sizes[i] if i < len(s.batch_sizes) else "?"
                    raise PlotError(
                        f"cannot plot {group!r} ({VIEW_TITLES[view]}), line {s.label!r}, batch size "
                        f"{batch}: the {name} is {value!r}, not a finite number >= 0; correct the record"
                    )


def new_figure(title: str, notes: Sequence[str], machine: str = "") -> tuple[Figure, Axes]:
    """A report figure and its axes: ``title`` in bold, ``machine`` under it, and ``notes`` (wrapped)
    in a strip under the axes: the figure grows by it, so the plot does not shrink as notes are
    added."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    note_lines = [line for note in notes for line in textwrap.wrap(note, 120, subsequent_indent="  ")]
    note_height = 0.17 * len(note_lines) + (0.12 if note_lines else 0.0)
    width, height = 10.0, 5.2 + note_height
    fig = Figure(figsize=(width, height), dpi=150, layout="constrained")
    FigureCanvasAgg(fig)
    engine = fig.get_layout_engine()
    if isinstance(engine, ConstrainedLayoutEngine) and note_lines:
        engine.set(rect=(0.0, note_height / height, 1.0, 1.0 - note_height / height))
    ax = fig.add_subplot()
    fig.suptitle(title, x=0.01, ha="left", fontweight="bold")
    if machine:
        ax.set_title(machine, loc="left", fontsize=9, color="#555555")
    if note_lines:
        fig.text(
            0.01,
            (note_height - 0.06) / height,
            "\n".join(note_lines),
            ha="left",
            va="top",
            fontsize=7.5,
            color="#444444",
            linespacing=1.45,
        )
    return fig, ax


def draw(
    view: str, group: str, series: Sequence[Series], notes: Sequence[str], *, machine: str = ""
) -> Figure:
    """One figure of ``view`` for ``group``: a line per series against batch size, ``notes`` below.

    ``machine`` (the CPU and accelerators) is shown under the title. For the energy view with no
    measured point at all the plot body says why, in words, instead of showing an empty or zero axis.
    """
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; expected one of {', '.join(VIEWS)}")
    check_plottable(view, group, series)
    fig, ax = new_figure(f"{group}: {VIEW_TITLES[view]} vs batch size", notes, machine)

    batch_sizes = sorted({b for s in series for b in s.batch_sizes})
    present = [v for s in series for v in (*s.values, *s.upper) if v is not None]
    if view == "latency":
        scale, unit = units.axis_scale(present, "s")
        ax.set_ylabel(f"latency per call ({unit})")
    elif view == "throughput":
        scale = 1.0
        ax.set_ylabel("throughput (items/s)")
    else:
        scale = 1.0
        ax.set_ylabel("items per joule (= items/s per W)")

    handles = [_draw_series(ax, view, s, scale) for s in series]
    handles.extend(_key_handles(view, series))
    _batch_axis(ax, batch_sizes)

    scaled = [v / scale for v in present]
    if not scaled:
        _no_data(ax, view, series)
    else:
        _value_axis(ax, scaled)

    ax.grid(True, which="major", color="#dddddd", linewidth=0.8)
    ax.grid(True, which="minor", axis="y", color="#eeeeee", linewidth=0.5)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if handles and scaled:
        # Outside the axes, so the legend never covers a point.
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8.5)
    return fig


def _value_axis(ax: Axes, scaled: Sequence[float]) -> None:
    """The value axis of the ``scaled`` values: logarithmic where they span a wide range (the 2s
    and 5s labelled too within few decades), else linear from 0."""
    from matplotlib.ticker import FuncFormatter

    if _wide(scaled):
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: units.format_number(v)))
        # Label the 2s and 5s between decades too when the range spans few decades.
        decades = math.log10(max(scaled) / min(v for v in scaled if v > 0))
        if decades < 3:
            ax.yaxis.set_minor_formatter(
                FuncFormatter(lambda v, _: units.format_number(v) if f"{v:.1e}"[0] in "25" else "")
            )
    else:
        ax.set_ylim(0, max(scaled) * 1.12)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: units.format_number(v)))


def _key_handles(view: str, series: Sequence[Series]) -> list[Any]:
    """The legend's entries beside the series: the latency band, and the markers of flagged and
    hollow points, each where some point has it."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = []
    if view == "latency" and any(v is not None for s in series for v in s.upper):
        handles.append(Patch(facecolor="#888888", alpha=0.25, label="p50 to p99"))
    if any(any(s.upper_flagged) for s in series):
        handles.append(
            Line2D(
                [],
                [],
                color="#555555",
                marker="o",
                markersize=4.5,
                markerfacecolor="white",
                linestyle="none",
                label="p99 = max (too few rounds)",
            )
        )
    if any(any(s.hollow) for s in series):
        handles.append(
            Line2D(
                [],
                [],
                color="#555555",
                marker="o",
                markerfacecolor="white",
                linestyle="none",
                label=_hollow_label(series),
            )
        )
    return handles


def _batch_axis(ax: Axes, batch_sizes: Sequence[int]) -> None:
    """The x axis: the batch sizes as its ticks, on a log scale where they span a wide range."""
    from matplotlib.ticker import FixedLocator
    from matplotlib.ticker import FuncFormatter
    from matplotlib.ticker import NullLocator

    ax.set_xlabel("batch size (items per call)")
    if not batch_sizes:
        return
    if batch_sizes[0] > 0 and batch_sizes[-1] / batch_sizes[0] >= LOG_X_RATIO:
        ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(batch_sizes))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    if len(batch_sizes) == 1:
        ax.set_xlim(batch_sizes[0] * 0.5, batch_sizes[0] * 1.5)
    elif ax.get_xscale() == "log":
        ax.set_xlim(batch_sizes[0] / 1.3, batch_sizes[-1] * 1.3)
    else:
        pad = (batch_sizes[-1] - batch_sizes[0]) * 0.05
        ax.set_xlim(batch_sizes[0] - pad, batch_sizes[-1] + pad)


def _low_confidence(s: Series) -> bool:
    """Whether a point of ``s`` is hollow for its energy window alone, not for its flags."""
    unsteady = s.unsteady or (False,) * len(s.hollow)
    return any(h and not u for h, u in zip_strict(s.hollow, unsteady))


def _hollow_label(series: Sequence[Series]) -> str:
    """The legend entry of the hollow markers: what made the points of these lines hollow."""
    unsteady = any(any(s.unsteady) for s in series)
    low = any(_low_confidence(s) for s in series)
    if unsteady and low:
        return "unstable, contended or low confidence"
    return "unstable or contended" if unsteady else "low confidence"


def _draw_series(ax: Axes, view: str, s: Series, scale: float) -> Any:
    """Draw one series; return its legend handle (the line, with a filled marker)."""
    xs = list(s.batch_sizes)
    # NaN breaks the line where a value is missing, instead of joining across the gap.
    ys = [math.nan if v is None else v / scale for v in s.values]
    hollow = [bool(h) for h in s.hollow] or [False] * len(xs)
    solid = [i for i, h in enumerate(hollow) if not h]
    (line,) = ax.plot(
        xs,
        ys,
        color=s.color,
        linestyle=s.linestyle,
        linewidth=1.8,
        marker=s.marker,
        markersize=6,
        markevery=solid,
        label=textwrap.fill(s.label, 42, subsequent_indent="  "),
        zorder=3,
    )
    hx = [x for x, h in zip_strict(xs, hollow) if h]
    hy = [y for y, h in zip_strict(ys, hollow) if h]
    if hx:
        ax.plot(
            hx,
            hy,
            linestyle="none",
            marker=s.marker,
            markersize=6,
            markerfacecolor="white",
            markeredgecolor=s.color,
            markeredgewidth=1.5,
            zorder=4,
        )
    if view == "latency" and s.upper:
        _draw_band(ax, s, xs, ys, scale)
    return line


def _draw_band(ax: Axes, s: Series, xs: Sequence[float], ys: Sequence[float], scale: float) -> None:
    """Draw the latency band of ``s`` from its points (``xs``, ``ys``) up to its p99, each whisker
    ending in a tick, or an open circle where the p99 is only the maximum of too few rounds."""
    up = [math.nan if v is None else v / scale for v in s.upper]
    # A band reads well along a line; the whiskers also show it where a line has one point.
    if len(xs) > 1:
        ax.fill_between(xs, ys, up, color=s.color, alpha=0.12, linewidth=0, zorder=1)
    ax.vlines(xs, ys, up, color=s.color, linewidth=1.1, alpha=0.8, zorder=2)
    flags = list(s.upper_flagged) or [False] * len(xs)
    # A supported p99 ends its whisker in a tick; one that is only the maximum of too few
    # rounds in an open circle (the table's ``*``).
    for flagged in (False, True):
        px = [x for x, f in zip_strict(xs, flags) if f is flagged]
        py = [y for y, f in zip_strict(up, flags) if f is flagged]
        if px:
            ax.plot(
                px,
                py,
                linestyle="none",
                color=s.color,
                zorder=2,
                markeredgewidth=1.3,
                marker="o" if flagged else "_",
                markersize=4.5 if flagged else 10,
                markerfacecolor="white" if flagged else s.color,
            )


def _no_data(ax: Axes, view: str, series: Sequence[Series]) -> None:
    """Say in the plot body why there is nothing to draw, rather than show an empty or zero axis."""
    reasons: dict[str, list[str]] = {}
    for s in series:
        for reason in dict.fromkeys(r for r in s.reasons if r):
            # One backend's lines of several runs share the reason: name the backend once.
            names = reasons.setdefault(reason, [])
            if (s.backend_label or s.label) not in names:
                names.append(s.backend_label or s.label)
    if view == "items_per_j" and len(reasons) == 1:
        text = textwrap.fill(next(iter(reasons)), 70)
    elif view == "items_per_j" and reasons:
        # Different reasons for different backends: say which is which.
        text = "\n".join(
            textwrap.fill(f"{reason} ({', '.join(labels)})", 70, subsequent_indent="    ")
            for reason, labels in reasons.items()
        )
    elif view == "items_per_j":
        text = "energy not measured: no pytest-ipu record in this group"
    else:
        text = "no data"
    ax.text(
        0.5,
        0.5,
        text,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=11,
        color="#333333",
        bbox={"boxstyle": "round,pad=0.8", "facecolor": "#f6f6f6", "edgecolor": "#cccccc"},
    )
    ax.set_yticks([])
