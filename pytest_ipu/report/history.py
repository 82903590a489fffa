"""The history view of ``pytest-ipu report STORAGE``: each benchmark's metric against commit, with
the runs' spread and the change points marked (presentation only).

``drawn`` picks every benchmark's headline series (``HEADLINE``, the history's default) and every
other series with a change point; ``summary_rows`` is the table of change points, newest first.
matplotlib is imported inside ``draw`` only, as ``plots`` does.

Documented in docs/ci.md (section "Reports": the history view).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_ipu.measure import units
from pytest_ipu.report import plots
from pytest_ipu.results import changes as found_changes
from pytest_ipu.results import history as history_series
from pytest_ipu.results.changes import Change
from pytest_ipu.results.changes import Report
from pytest_ipu.results.history import Series

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: The metric drawn for every benchmark, the first of these it has: the history's default series.
HEADLINE = history_series.DEFAULT_METRICS
#: At most this many commit ids label the x axis (evenly thinned beyond).
MAX_TICKS = 24
WORSE_COLOUR = "#c62828"
BETTER_COLOUR = "#1a7f37"
POINT_COLOUR = plots.PALETTE[0]


def drawn(report: Report) -> list[Series]:
    """The series the view draws: each benchmark's headline metric, then the others with a change
    point, in the history's order."""
    changed = {id(c.series) for c in report.changes}
    headline: dict[tuple[str, str], Series] = {}
    for series in report.history.series:
        key = (series.fullname, series.machine)
        if series.metric not in HEADLINE:
            continue
        current = headline.get(key)
        if current is None or HEADLINE.index(series.metric) < HEADLINE.index(current.metric):
            headline[key] = series
    chosen = {id(s) for s in headline.values()} | changed
    return [s for s in report.history.series if id(s) in chosen]


def of(report: Report, series: Series) -> list[Change]:
    """The change points of ``series``, by index."""
    return sorted((c for c in report.changes if c.series is series), key=lambda c: c.found.index)


def summary_rows(report: Report) -> list[tuple[Change, list[str]]]:
    """The summary table's rows, newest change first: commit, benchmark, metric, machine, change,
    interval, p-value, level before and after."""
    newest = sorted(
        report.changes,
        key=lambda c: (-(c.found.index - len(c.series.points)), found_changes.severity(c)),
    )
    rows = []
    for change in newest:
        found = change.found
        unit = change.series.unit
        rows.append(
            (
                change,
                [
                    change.commit[: found_changes.SHORT] + (" (dirty)" if change.dirty else ""),
                    change.series.name,
                    change.series.metric,
                    change.series.machine,
                    f"{'worse' if change.worse else 'better'} {found_changes.percent(found.change)}",
                    f"{found_changes.percent(found.low)} to {found_changes.percent(found.high)}",
                    f"{found.p_value:.3g}",
                    units.format_value(found.before, unit),
                    units.format_value(found.after, unit),
                ],
            )
        )
    return rows


def title(series: Series) -> str:
    """A figure's title: the benchmark and the metric."""
    return f"{series.name}: {series.metric}"


def draw(series: Series, marked: Sequence[Change]) -> Figure:
    """One figure: the series against commit, its spread, its levels and its change points."""
    points = series.points
    factor, unit = units.axis_scale([p.value for p in points], series.unit)
    notes = [
        "one point per commit: the median of its runs, the bar from the smallest to the largest run; "
        "horizontal lines: the level between change points (the geometric mean of its runs, the levels a "
        "change is measured between); dashed: a change point, before the first commit of the new level"
    ]
    if any(p.dirty for p in points):
        notes.append("hollow: a commit with run(s) made from a work tree with uncommitted changes (dirty)")
    fig, ax = plots.new_figure(title(series), notes, machine=series.machine)
    x = list(range(len(points)))
    y = [p.value / factor for p in points]
    below = [(p.value - p.low) / factor for p in points]
    above = [(p.high - p.value) / factor for p in points]
    ax.errorbar(x, y, yerr=[below, above], fmt="o", color=POINT_COLOUR, ms=4, capsize=2, lw=1)
    dirty = [i for i, p in enumerate(points) if p.dirty]
    if dirty:
        # Hollow over the filled point: the commit's level is not the commit's alone.
        ax.plot(dirty, [y[i] for i in dirty], "o", ms=7, mfc="white", mec=POINT_COLOUR, mew=1.5)
    edges = [0, *(c.found.index for c in marked), len(points)]
    # The levels each change is measured between; a series without one, the median of its points.
    levels = [c.found.before / factor for c in marked[:1]] + [c.found.after / factor for c in marked]
    if not levels:
        levels = [statistics.median(y)]
    for (start, end), level in zip(zip(edges[:-1], edges[1:]), levels):
        ax.hlines(level, start - 0.4, end - 0.6, colors="#555555", linewidth=1.2)
    for change in marked:
        colour = WORSE_COLOUR if change.worse else BETTER_COLOUR
        at = change.found.index - 0.5
        ax.axvline(at, color=colour, linestyle="--", linewidth=1.2)
        ax.annotate(
            f"{change.commit[: found_changes.SHORT]} {found_changes.percent(change.found.change)}"
            f"{' dirty' if change.dirty else ''}",
            (at, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12),
            textcoords="offset points",
            color=colour,
            fontsize=8,
        )
    step = max(1, math.ceil(len(points) / MAX_TICKS))
    ticks = x[::step]
    ax.set_xticks(ticks)
    ax.set_xticklabels([points[i].commit[:7] for i in ticks], rotation=60, fontsize=7, family="monospace")
    ax.set_xlabel("commit (oldest left)")
    ax.set_ylabel(f"{series.metric} ({unit})")
    ax.grid(True, axis="y", color="#e6e6e6")
    return fig
