"""``pytest-ipu history``: the change points of every series, the CI verdict on the newest commits,
and their text, markdown and JSON forms.

Each series (``history.Series``) is searched for change points by E-Divisive means
(``measure.changepoints``, seeded: the same storage always gives the same answer). A change point
is named by the first commit of the new level, with the last commit of the old one, the relative
change of the mean level, its 95 % interval and the p-value of the split; it is ``worse`` or
``better`` as the metric's unit says. Where a run of that first commit was made from a work tree
with uncommitted changes (``Point.dirty``), every form says so: the change may be those changes,
not the commit. Change points are listed worst first: regressions before
improvements, each by the size of its change.

The CI verdict (``check``, with a threshold such as ``5%``), per series, in the gates' language:

- FAIL: a regression change point among the newest ``recent`` commits whose whole interval lies
  beyond the threshold;
- INCONCLUSIVE: such a regression whose interval straddles the threshold; or newest commits, too
  few to be a level of their own (fewer than ``MIN_SIZE``), worse than the level before them by
  more than the threshold; or a series too short to search (fewer than ``2 x MIN_SIZE`` commits);
- PASS: otherwise.

The exit code is the gates' (``decide.exit_code``'s constants): 1 on a FAIL, else 3 on an
INCONCLUSIVE verdict, else 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ipu.measure import changepoints
from pytest_ipu.measure import units
from pytest_ipu.results import compare
from pytest_ipu.results import decide
from pytest_ipu.results import history
from pytest_ipu.results.history import History
from pytest_ipu.results.history import Series

#: The version of the JSON form (docs/json-schema.md).
JSON_VERSION = 1
FORMATS = ("table", "markdown", "json")
#: The fewest commits on either side of a change point (``changepoints.MIN_SIZE``).
MIN_SIZE = changepoints.MIN_SIZE
#: How many of the newest commits the CI verdict looks at for a new regression, by default.
RECENT = 10
#: What a change at a dirty commit says after its line.
DIRTY_NOTE = "  DIRTY: run(s) of this commit had uncommitted changes, which may be the cause"
#: How many characters of a commit id are shown.
SHORT = 8


@dataclass(frozen=True)
class Change:
    """A change point of a series, placed on its commits."""

    series: Series
    found: changepoints.ChangePoint

    @property
    def commit(self) -> str:
        """The first commit of the new level."""
        return self.series.points[self.found.index].commit

    @property
    def previous(self) -> str:
        """The last commit of the old level."""
        return self.series.points[self.found.index - 1].commit

    @property
    def dirty(self) -> bool:
        """Whether a run of the first commit of the new level measured uncommitted changes too."""
        return self.series.points[self.found.index].dirty

    @property
    def worse(self) -> bool:
        """Whether the new level is worse, as the metric's unit says which way is better."""
        return (self.found.change > 0) == (self.series.better == "lower")

    @property
    def worsening(self) -> tuple[float, float, float]:
        """The change and its interval as a worsening (positive: worse), whichever way the metric
        improves: ``(change, low, high)``."""
        found = self.found
        if self.series.better == "lower":
            return found.change, found.low, found.high
        return -found.change, -found.high, -found.low

    def line(self) -> str:
        """One line: how much better or worse, the interval, p, the series, the commit, the levels."""
        found = self.found
        unit = self.series.unit
        return (
            f"{'worse' if self.worse else 'better'} {_percent(found.change)} "
            f"[{_percent(found.low)}, {_percent(found.high)}] p={found.p_value:.3g}  "
            f"{self.series.label}  at {self.commit[:SHORT]} (after {self.previous[:SHORT]}): "
            f"{units.format_value(found.before, unit)} -> {units.format_value(found.after, unit)}  "
            f"[{self.series.machine}]{DIRTY_NOTE if self.dirty else ''}"
        )

    def as_json(self) -> dict[str, Any]:
        """The JSON form of the change point (docs/json-schema.md)."""
        found = self.found
        return {
            "benchmark": self.series.fullname,
            "metric": self.series.metric,
            "machine": self.series.machine,
            "commit": self.commit,
            "previous_commit": self.previous,
            "index": found.index,
            "direction": "worse" if self.worse else "better",
            "before": found.before,
            "after": found.after,
            "change": found.change,
            "interval": [_finite(found.low), _finite(found.high)],
            "p_value": found.p_value,
            "dirty": self.dirty,
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _percent(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value * 100:+.1f}%"


def severity(change: Change) -> tuple[bool, float]:
    """The sort key of the worst first: regressions first, then by the size of the change."""
    size = abs(change.found.change)
    return (not change.worse, -(size if math.isfinite(size) else 0.0))


def analyse(found: History, seed: int = 0) -> list[Change]:
    """Every series' change points, worst first."""
    out = [
        Change(series, point)
        for series in found.series
        for point in changepoints.detect([p.value for p in series.points], seed=seed)
    ]
    return sorted(out, key=severity)


@dataclass(frozen=True)
class SeriesVerdict:
    """The CI verdict on the newest commits of one series: PASS, FAIL or INCONCLUSIVE, and why."""

    series: Series
    outcome: str
    reason: str

    def line(self) -> str:
        """One line: the verdict, the series and why."""
        return f"{self.outcome} {self.series.label} [{self.series.machine}]: {self.reason}"

    def as_json(self) -> dict[str, Any]:
        """The JSON form of the verdict."""
        return {
            "benchmark": self.series.fullname,
            "metric": self.series.metric,
            "machine": self.series.machine,
            "outcome": self.outcome,
            "reason": self.reason,
        }


def check(
    found: History, changes: Sequence[Change], threshold: float, recent: int = RECENT
) -> list[SeriesVerdict]:
    """The verdict of every series on its newest ``recent`` commits (the module docstring's rule)."""
    by_series: dict[int, list[Change]] = {}
    for change in changes:
        by_series.setdefault(id(change.series), []).append(change)
    return [_verdict(s, by_series.get(id(s), []), threshold, recent) for s in found.series]


def _verdict(series: Series, changes: Sequence[Change], threshold: float, recent: int) -> SeriesVerdict:
    n = len(series.points)
    limit = f"{threshold * 100:g}%"
    if n < 2 * MIN_SIZE:
        return SeriesVerdict(
            series,
            decide.INCONCLUSIVE,
            f"only {n} commit(s): a change needs {MIN_SIZE} commits on each side; run the benchmarks on "
            "more commits",
        )
    newest = sorted((c for c in changes if c.worse and c.found.index >= n - recent), key=severity)
    for change in newest:
        size, low, high = change.worsening
        where = (
            f"{change.series.metric} {_percent(size)} [{_percent(low)}, {_percent(high)}] "
            f"p={change.found.p_value:.3g} from {change.commit[:SHORT]}"
            f"{' (dirty: its runs had uncommitted changes, which may be the cause)' if change.dirty else ''}"
        )
        if low > threshold:
            return SeriesVerdict(series, decide.FAIL, f"regression {where}, beyond {limit}")
        if high > threshold:
            return SeriesVerdict(
                series,
                decide.INCONCLUSIVE,
                f"regression {where}: its interval straddles {limit}; benchmark more commits to narrow it",
            )
    values = [p.value for p in series.points]
    start = max([c.found.index for c in changes] + [0])
    # The longest such tail first: it says the most about where the newest level began.
    for tail in range(MIN_SIZE - 1, 0, -1):
        level = values[start : n - tail]
        if len(level) < MIN_SIZE:
            continue
        before = sum(level) / len(level)
        after = sum(values[n - tail :]) / tail
        if before == 0:
            continue
        worse = after / before - 1.0 if series.better == "lower" else 1.0 - after / before
        if worse > threshold:
            return SeriesVerdict(
                series,
                decide.INCONCLUSIVE,
                f"the newest {tail} commit(s) from {series.points[n - tail].commit[:SHORT]} are "
                f"{worse * 100:.1f}% worse than the {len(level)} before them, beyond {limit}, but a change "
                f"needs {MIN_SIZE} commits after it: benchmark {MIN_SIZE - tail} more commit(s) to tell",
            )
    return SeriesVerdict(
        series, decide.PASS, f"no regression beyond {limit} in the newest {min(recent, n)} commits"
    )


def exit_code(verdicts: Sequence[SeriesVerdict]) -> int:
    """1 on a FAIL, else 3 on an INCONCLUSIVE verdict, else 0 (the gates' codes)."""
    if any(v.outcome == decide.FAIL for v in verdicts):
        return decide.EXIT_FAIL
    if any(v.outcome == decide.INCONCLUSIVE for v in verdicts):
        return decide.EXIT_INCONCLUSIVE
    return decide.EXIT_PASS


@dataclass(frozen=True)
class Report:
    """What ``pytest-ipu history`` prints: the history read, its change points, and the verdicts
    (none without a threshold)."""

    history: History
    changes: tuple[Change, ...]
    verdicts: tuple[SeriesVerdict, ...] = ()
    threshold: float | None = None


def _summary(report: Report) -> str:
    found = report.history
    commits = max((len(s.points) for s in found.series), default=0)
    return (
        f"{len(report.changes)} change point(s) in {len(found.series)} series of {found.runs} run(s), "
        f"up to {commits} commits, machine {', '.join(found.machines)}"
    )


def _verdict_lines(report: Report) -> list[str]:
    if report.threshold is None:
        return []
    counts = ", ".join(f"{sum(v.outcome == o for v in report.verdicts)} {o}" for o in decide.OUTCOMES)
    return [f"regression check ({report.threshold * 100:g}%): {counts}"] + [
        v.line() for v in report.verdicts if v.outcome != decide.PASS
    ]


def render_table(report: Report) -> str:
    """One line per change point, worst first; the summary, notes and verdicts after."""
    lines = [c.line() for c in report.changes] + [_summary(report)]
    lines += [f"note: {n}" for n in report.history.notes]
    return "\n".join(lines + _verdict_lines(report))


def render_markdown(report: Report) -> str:
    """A markdown table of the change points, worst first, for a CI step summary."""
    header = ["benchmark", "metric", "commit", "change", "interval", "p", "before", "after"]
    rows = [
        [
            c.series.name,
            c.series.metric,
            f"`{c.commit[:SHORT]}`{' dirty' if c.dirty else ''}",
            f"{'worse' if c.worse else 'better'} {_percent(c.found.change)}",
            f"{_percent(c.found.low)} to {_percent(c.found.high)}",
            f"{c.found.p_value:.3g}",
            units.format_value(c.found.before, c.series.unit),
            units.format_value(c.found.after, c.series.unit),
        ]
        for c in report.changes
    ]
    out = compare.markdown_table(header, rows, left=3) if rows else []
    out += ["", _summary(report)]
    extra = [f"note: {n}" for n in report.history.notes] + _verdict_lines(report)
    if extra:
        out += [""] + [f"- {line}" for line in extra]
    return "\n".join(out)


def _series_json(series: Series, changes: Sequence[Change]) -> dict[str, Any]:
    return {
        "benchmark": series.fullname,
        "name": series.name,
        "group": series.group,
        "metric": series.metric,
        "unit": series.unit,
        "better": series.better,
        "machine": series.machine,
        "points": [
            {
                "commit": p.commit,
                "commit_time": p.commit_time,
                "value": p.value,
                "low": p.low,
                "high": p.high,
                "runs": list(p.values),
                "dirty": p.dirty,
            }
            for p in series.points
        ],
        "change_points": [c.as_json() for c in changes if c.series is series],
    }


def render_json(report: Report) -> str:
    """The JSON form (docs/json-schema.md)."""
    document = {
        "history_version": JSON_VERSION,
        **history.describe(report.history),
        "change_points": [c.as_json() for c in report.changes],
        "series": [_series_json(s, report.changes) for s in report.history.series],
        "check": None
        if report.threshold is None
        else {
            "threshold": report.threshold,
            "exit_code": exit_code(report.verdicts),
            "verdicts": [v.as_json() for v in report.verdicts],
        },
    }
    return json.dumps(document, indent=2)


RENDERERS: Mapping[str, Callable[[Report], str]] = {
    "table": render_table,
    "markdown": render_markdown,
    "json": render_json,
}
