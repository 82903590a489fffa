"""``pytest-ipu history``: the change points of every series, the CI verdict on the newest commit,
and what to say beside them; ``report/changes.py`` writes their text, markdown and JSON forms.

The series (``history.Series``) are searched together by ``measure.changepoints.find``, seeded
nowhere: the same storage always gives the same answer. Change points of one commit and direction
are one ``Event``; ``blind_spots`` and ``unseen`` say what the history cannot see (``MIN_RUNS`` runs a
side; ``STEP`` unless ``--fail-on-regression`` asks another); ``check`` gives each series its verdict
on the newest ``recent`` commits, with the gates' exit codes (``decide``'s constants), and the command
refuses (exit 2) a history whose newest run was left out (``History.newest_left_out``).

Documented in docs/ci.md (section "History across commits: pytest-ipu history"); the JSON form in
docs/json-schema.md (section "pytest-ipu history --format=json").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from pytest_ipu.measure import changepoints
from pytest_ipu.measure import units
from pytest_ipu.measure.changepoints import Noise
from pytest_ipu.results import decide
from pytest_ipu.results import formats
from pytest_ipu.results import history
from pytest_ipu.results.codec import Written
from pytest_ipu.results.codec import meta
from pytest_ipu.results.history import History
from pytest_ipu.results.history import Series

#: The version of the JSON form (docs/json-schema.md).
JSON_VERSION = 1
FORMATS = formats.HISTORY
#: The fewest runs on either side of a change point (``changepoints.MIN_RUNS``).
MIN_RUNS = changepoints.MIN_RUNS
#: How many of the newest commits the CI verdict looks at for a new regression, by default.
RECENT = 10
#: The step whose visibility each series is judged on when no threshold is given.
STEP = 0.10
#: What a change at a dirty commit says after its line.
DIRTY_NOTE = "  DIRTY: run(s) of this commit had uncommitted changes, which may be the cause"
#: How many characters of a commit id are shown.
SHORT = 8
#: How many benchmark names an event's line lists before "and N more".
LISTED = 12


@dataclass(frozen=True)
class Change(Written):
    """A change point of a series, placed on its commits. Its JSON (docs/json-schema.md) is what it
    derives from both."""

    JSON_DERIVED = (
        ("series.fullname", None, "benchmark"),
        ("series.metric", None),
        ("series.same", None, "same_metrics"),
        ("series.machine", None),
        ("commit", None),
        ("previous", None, "previous_commit"),
        ("found.index", None),
        ("direction", None),
        ("found.before", None),
        ("found.after", None),
        ("found.change", None),
        ("interval", None),
        ("found.p_value", None),
        ("found.pooled", None),
        ("dirty", None),
    )

    series: Series = field(metadata=meta(written=False))
    found: changepoints.ChangePoint = field(metadata=meta(written=False))

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
    def direction(self) -> str:
        """``worse`` or ``better``."""
        return "worse" if self.worse else "better"

    @property
    def interval(self) -> tuple[float | None, float | None]:
        """The 95 % interval of the change; ``None`` for a bound that is not finite (JSON has none)."""
        return _finite(self.found.low), _finite(self.found.high)

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
            f"{self.direction} {percent(found.change)} "
            f"[{percent(found.low)}, {percent(found.high)}] p={found.p_value:.3g}"
            f"{' (pooled)' if found.pooled else ''}  "
            f"{self.series.label}  at {self.commit[:SHORT]} (after {self.previous[:SHORT]}): "
            f"{units.format_value(found.before, unit)} -> {units.format_value(found.after, unit)}  "
            f"[{self.series.machine}]{DIRTY_NOTE if self.dirty else ''}"
        )


@dataclass(frozen=True)
class Event:
    """The change points of one commit, machine and direction: one event of the history."""

    changes: tuple[Change, ...]

    @property
    def commit(self) -> str:
        """The commit every change of the event starts at."""
        return self.changes[0].commit

    @property
    def worse(self) -> bool:
        """Whether the event made its benchmarks worse."""
        return self.changes[0].worse

    def lines(self) -> list[str]:
        """One line for a single change; for several, a heading line and each change's line under it."""
        if len(self.changes) == 1:
            return [self.changes[0].line()]
        sizes = sorted(abs(c.found.change) * 100 for c in self.changes)
        timed = all(c.series.unit in ("s", "items/s") for c in self.changes)
        word = ("slower" if self.worse else "faster") if timed else self.changes[0].direction
        names = sorted(c.series.name for c in self.changes)
        listed = ", ".join(names[:LISTED]) + (
            f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
        )
        head = (
            f"{self.commit[:SHORT]}: {len(self.changes)} benchmarks {sizes[0]:.1f} to {sizes[-1]:.1f}% "
            f"{word} ({listed})"
        )
        return [head] + [f"  {c.line()}" for c in self.changes]


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def percent(value: float) -> str:
    """A relative change in percent with its sign (``+12.3%``); ``-`` when it is not finite."""
    return "-" if not math.isfinite(value) else f"{value * 100:+.1f}%"


def severity(change: Change) -> tuple[bool, float]:
    """The sort key of the worst first: regressions first, then by the size of the change."""
    size = abs(change.found.change)
    return (not change.worse, -(size if math.isfinite(size) else 0.0))


def samples(found: History) -> list[changepoints.Sample]:
    """Each series as the change point search reads it: every run, with its commit's number."""
    return [
        changepoints.Sample(
            [v for p in series.points for v in p.values],
            [i for i, p in enumerate(series.points) for _ in p.values],
            [p.commit for p in series.points],
            higher_better=series.better == "higher",
        )
        for series in found.series
    ]


def analyse(found: History) -> tuple[list[Change], list[Noise]]:
    """Every series' change points, worst first, and what each series can see."""
    points, noises = changepoints.find(samples(found))
    out = [Change(series, point) for series, each in zip(found.series, points) for point in each]
    return sorted(out, key=severity), noises


def events(changes: Sequence[Change]) -> list[Event]:
    """The change points grouped by commit, machine and direction, worst first."""
    grouped: dict[tuple[str, str, bool], list[Change]] = {}
    for change in sorted(changes, key=severity):
        grouped.setdefault((change.commit, change.series.machine, change.worse), []).append(change)
    return sorted((Event(tuple(g)) for g in grouped.values()), key=lambda e: severity(e.changes[0]))


def blind_spots(found: History) -> str | None:
    """Which first and newest commits cannot start a change with the runs at hand, and the runs that
    would judge them (of the series with the most commits); ``None`` when every commit can."""
    if not found.series:
        return None
    series = max(found.series, key=lambda s: (len(s.points), s.runs))
    counts = [len(p.values) for p in series.points]
    if sum(counts) < 2 * MIN_RUNS:
        return None
    # A change can start at commit c when MIN_RUNS runs lie before it and MIN_RUNS from it on.
    before = [sum(counts[:c]) for c in range(len(counts))]
    first = [c for c in range(1, len(counts)) if before[c] < MIN_RUNS]
    last = [c for c in range(1, len(counts)) if sum(counts) - before[c] < MIN_RUNS and c not in first]
    ids = series.points
    parts = []
    if first:
        parts.append(
            f"at {', '.join(ids[c].commit[:SHORT] for c in first)} (fewer than {MIN_RUNS} runs before "
            f"it; {MIN_RUNS - counts[0]} more run(s) of {ids[0].commit[:SHORT]} would judge "
            f"{ids[1].commit[:SHORT]})"
        )
    if last:
        parts.append(
            f"at {', '.join(ids[c].commit[:SHORT] for c in last)} (fewer than {MIN_RUNS} runs from it "
            f"on; {MIN_RUNS - counts[-1]} more run(s) of {ids[-1].commit[:SHORT]} would judge it)"
        )
    if not parts:
        return None
    return f"blind spots: a change {' or '.join(parts)} cannot be found"


def unseen(found: History, noises: Sequence[Noise], step: float) -> str | None:
    """One line naming each series whose noise and runs cannot show a relative ``step``, with its
    run-to-run noise, the smallest step it can show, and the runs a step of that size needs;
    ``None`` when every series can."""
    named = []
    for series, noise in zip(found.series, noises):
        smallest = noise.smallest_step()
        if smallest <= step:
            continue
        shown = "none" if not math.isfinite(smallest) else f"{smallest * 100:.0f}%"
        noisy = f"noise {noise.sd * 100:.1f}%, " if math.isfinite(noise.sd) else ""
        named.append(f"{series.label} ({noisy}smallest {shown}, needs {noise.runs_needed(step):,} runs)")
    if not named:
        return None
    return (
        f"cannot see a {step * 100:g}% step, {len(named)} series (run-to-run noise, the smallest step "
        f"their runs can show, the runs a {step * 100:g}% step needs): {'; '.join(named)}"
    )


@dataclass(frozen=True)
class SeriesVerdict(Written):
    """The CI verdict on the newest commits of one series: PASS, FAIL or INCONCLUSIVE, and why. Its
    JSON names the series first."""

    JSON_DERIVED = (
        ("series.fullname", "", "benchmark"),
        ("series.metric", "benchmark"),
        ("series.machine", "metric"),
    )

    series: Series = field(metadata=meta(written=False))
    outcome: str
    reason: str

    def line(self) -> str:
        """One line: the verdict, the series and why."""
        return f"{self.outcome} {self.series.label} [{self.series.machine}]: {self.reason}"


def check(
    found: History,
    changes: Sequence[Change],
    noises: Sequence[Noise],
    threshold: float,
    recent: int = RECENT,
) -> list[SeriesVerdict]:
    """The verdict of every series on its newest ``recent`` commits (the module docstring's rule); a
    series the newest run has no value of is not judged (``absent``)."""
    by_series: dict[int, list[Change]] = {}
    for change in changes:
        by_series.setdefault(id(change.series), []).append(change)
    skipped = {id(s) for s in absent(found)}
    return [
        _verdict(s, by_series.get(id(s), []), noise, threshold, recent)
        for s, noise in zip(found.series, noises)
        if id(s) not in skipped
    ]


def absent(found: History) -> list[Series]:
    """The series without a value from their machine's newest run (a benchmark it did not measure):
    the check cannot judge the newest run on them."""
    out = []
    for series in found.series:
        newest = found.newest.get(series.machine)
        if newest is not None and (not series.points or str(newest) not in series.points[-1].files):
            out.append(series)
    return out


def _verdict(
    series: Series, changes: Sequence[Change], noise: Noise, threshold: float, recent: int
) -> SeriesVerdict:
    """The check's verdict on one series: too few runs; a regression beyond ``threshold`` at one of
    the ``recent`` newest commits; too noisy to tell; newest commits worse but too few runs to be a
    change; or none."""
    n = len(series.points)
    limit = f"{threshold * 100:g}%"
    if series.runs < 2 * MIN_RUNS:
        return SeriesVerdict(
            series,
            decide.INCONCLUSIVE,
            f"only {series.runs} run(s): a change needs {MIN_RUNS} runs on each side; run the benchmarks "
            "more times (--benchmark-autosave each time)",
        )
    found = _newest_regression(series, changes, threshold, recent)
    if found is not None:
        return found
    counts = [len(p.values) for p in series.points]
    start = max([c.found.index for c in changes] + [0])
    # The newest commits that cannot start a change of their own: fewer than MIN_RUNS runs in all.
    tail = 0
    while tail < n and sum(counts[n - tail - 1 :]) < MIN_RUNS:
        tail += 1
    level = [math.log(v) for p in series.points[start : n - tail] for v in p.values]
    # What the newest commits can show is judged on the noise of the level they would leave.
    spread = statistics.stdev(level) if len(level) > 1 else math.nan
    seen = changepoints.Noise(spread, len(level), noise.tests)
    smallest = seen.smallest_step(max(len(level), MIN_RUNS), MIN_RUNS)
    if smallest > threshold:
        shown = f"{smallest * 100:.0f}%" if math.isfinite(smallest) else "none"
        return SeriesVerdict(
            series,
            decide.INCONCLUSIVE,
            f"too noisy to judge a {limit} regression: run-to-run noise {spread * 100:.1f}%, the smallest "
            f"step a change at its newest commits can show is {shown}; a {limit} step needs "
            f"{seen.runs_needed(threshold):,} runs",
        )
    if tail and len(level) >= MIN_RUNS:
        unfinished = _unfinished_step(series, level, tail, sum(counts[n - tail :]), threshold)
        if unfinished is not None:
            return unfinished
    return SeriesVerdict(
        series, decide.PASS, f"no regression beyond {limit} in the newest {min(recent, n)} commits"
    )


def _newest_regression(
    series: Series, changes: Sequence[Change], threshold: float, recent: int
) -> SeriesVerdict | None:
    """The verdict on the worst regression at one of the ``recent`` newest commits that reaches
    ``threshold``: FAIL where its interval is beyond it, INCONCLUSIVE where it straddles it."""
    n = len(series.points)
    limit = f"{threshold * 100:g}%"
    newest = sorted((c for c in changes if c.worse and c.found.index >= n - recent), key=severity)
    for change in newest:
        size, low, high = change.worsening
        where = (
            f"{change.series.metrics} {percent(size)} [{percent(low)}, {percent(high)}] "
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
    return None


def _unfinished_step(
    series: Series, level: Sequence[float], tail: int, runs: int, threshold: float
) -> SeriesVerdict | None:
    """INCONCLUSIVE where the newest ``tail`` commits (``runs`` runs, too few to start a change)
    are worse than the ``level`` (log values) before them beyond ``threshold``; else ``None``."""
    n = len(series.points)
    limit = f"{threshold * 100:g}%"
    newer = [math.log(v) for p in series.points[n - tail :] for v in p.values]
    shift = sum(newer) / len(newer) - sum(level) / len(level)
    worse = math.expm1(shift) if series.better == "lower" else -math.expm1(shift)
    if worse <= threshold:
        return None
    first = series.points[n - tail]
    return SeriesVerdict(
        series,
        decide.INCONCLUSIVE,
        f"the newest {tail} commit(s) from {first.commit[:SHORT]} are {worse * 100:.1f}% worse than "
        f"the {len(level)} run(s) before them, beyond {limit}, but a change needs {MIN_RUNS} runs "
        f"after it: run the benchmarks {MIN_RUNS - runs} more time(s) to tell",
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
    """What ``pytest-ipu history`` prints: the history read, its change points, what each series
    can see, and the verdicts (none without a threshold)."""

    history: History
    changes: tuple[Change, ...]
    verdicts: tuple[SeriesVerdict, ...] = ()
    threshold: float | None = None
    noises: tuple[Noise, ...] = ()

    @property
    def step(self) -> float:
        """The step each series' visibility is judged on: the threshold, else ``STEP``."""
        return STEP if self.threshold is None else self.threshold


def report(found: History, threshold: float | None = None, recent: int = RECENT) -> Report:
    """The whole analysis of a history: change points, noise, and the verdicts with a threshold."""
    found_changes, noises = analyse(found)
    verdicts = check(found, found_changes, noises, threshold, recent) if threshold is not None else []
    return Report(found, tuple(found_changes), tuple(verdicts), threshold, tuple(noises))


def summary(report: Report) -> str:
    """The line under the change points: how many, in how many series, runs and commits, of which
    machines, at what false discovery rate."""
    found = report.history
    commits = max((len(s.points) for s in found.series), default=0)
    return (
        f"{len(report.changes)} change point(s) at {len({c.commit for c in report.changes})} commit(s) in "
        f"{len(found.series)} series of {found.runs} run(s), up to {commits} commits, machine "
        f"{', '.join(found.machines)} (false discovery rate {changepoints.FDR * 100:g}% over all "
        "series)"
    )


def notes(report: Report) -> list[str]:
    """The notes after the change points: the history's own, its blind spots, and the series that
    cannot show a step of the size asked."""
    blind = blind_spots(report.history)
    return (
        [f"note: {n}" for n in report.history.notes]
        + ([f"note: {blind}"] if blind else [])
        + [f"note: {line}" for line in [unseen(report.history, report.noises, report.step)] if line]
    )


def verdict_lines(report: Report) -> list[str]:
    """The regression check's lines (none without a threshold): the counts of each outcome, the
    series not judged, and each verdict that is not a PASS."""
    if report.threshold is None:
        return []
    counts = ", ".join(f"{sum(v.outcome == o for v in report.verdicts)} {o}" for o in decide.OUTCOMES)
    missing = absent(report.history)
    lines = [f"regression check ({report.threshold * 100:g}%): {counts}"]
    if missing:
        lines[0] += f"; {len(missing)} series not judged"
        lines.append(
            f"not judged: {len(missing)} series the newest run of their machine did not measure "
            f"({', '.join(str(report.history.newest[m]) for m in sorted({s.machine for s in missing}))}): "
            + ", ".join(s.label for s in missing[:LISTED])
            + (f" and {len(missing) - LISTED} more" if len(missing) > LISTED else "")
        )
    return lines + [v.line() for v in report.verdicts if v.outcome != decide.PASS]


def _series_json(
    series: Series, changes: Sequence[Change], noise: Noise | None, step: float
) -> dict[str, Any]:
    smallest = noise.smallest_step() if noise else math.nan
    return {
        "benchmark": series.fullname,
        "name": series.name,
        "group": series.group,
        "metric": series.metric,
        "same_metrics": list(series.same),
        "noise": None
        if noise is None
        else {
            "sd": _finite(noise.sd),
            "smallest_step": _finite(smallest),
            "step": step,
            "runs_needed": noise.runs_needed(step),
        },
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


def document(report: Report) -> dict[str, Any]:
    """The JSON form's document (docs/json-schema.md)."""
    return {
        "history_version": JSON_VERSION,
        **history.describe(report.history),
        "change_points": [c.as_json() for c in report.changes],
        "events": [
            {
                "commit": e.commit,
                "direction": e.changes[0].direction,
                "benchmarks": [c.series.fullname for c in e.changes],
            }
            for e in events(report.changes)
        ],
        "blind_spots": blind_spots(report.history),
        "series": [
            _series_json(s, report.changes, n, report.step)
            for s, n in zip(report.history.series, report.noises or [None] * len(report.history.series))
        ],
        "check": None
        if report.threshold is None
        else {
            "threshold": report.threshold,
            "exit_code": exit_code(report.verdicts),
            "verdicts": [v.as_json() for v in report.verdicts],
        },
    }
