"""The report's first screen: each study's headline figures, read off its rows (presentation only).

A study is a group swept over batch sizes (``plots.has_batch_axis``) or one that measured a time to
train. Nothing is computed that the rows do not hold: each figure is read through the metric registry
(``catalog.METRICS``), and one that no row measured is "not measured", with the first reason a row
gives. The published references beside it are ``pytest_ipu.results.references``'; a benchmark whose
``extra_info["role"]`` is ``SELF_CHECK`` is no study (shown last, folded).

Documented in docs/ci.md (section "Reports") and docs/json-schema.md (section
"benchmarks[].extra_info["role"]").
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_ipu.backports import remove_prefix
from pytest_ipu.measure import units
from pytest_ipu.report import compare as compare_report
from pytest_ipu.report import plots
from pytest_ipu.results import compare
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import group_name
from pytest_ipu.results.references import Reference

#: The ``extra_info["role"]`` of a benchmark that checks pytest-ipu itself (``StoredBenchmark.role``;
#: the project's own benchmarks/ set it on their self-checks).
SELF_CHECK = "self-check"
#: The record flags counted as "read with care" in a headline.
CARE_FLAGS = plots.UNSTEADY_FLAGS


def is_self_check(bench: StoredBenchmark) -> bool:
    """Whether the benchmark says it checks pytest-ipu itself (``SELF_CHECK``)."""
    return bench.role == SELF_CHECK


def self_check_groups(runs: Sequence[StoredRun]) -> list[str]:
    """The groups every benchmark of which is a self-check, in first-seen order."""
    roles: dict[str, bool] = {}
    for run in runs:
        for bench in run.benchmarks:
            name = group_name(bench.group, bench.name)
            roles[name] = roles.get(name, True) and is_self_check(bench)
    return [g for g, checks in roles.items() if checks]


@dataclass(frozen=True)
class Best:
    """One headline figure: the value (SI units) and the row that reached it; ``value`` ``None``
    when no row measured it, ``who`` then saying why. ``run`` (the run's index) and ``name`` (the
    benchmark's) say where the value was read, for a comparison across runs."""

    value: float | None
    who: str
    run: int | None = None
    name: str | None = None


@dataclass(frozen=True)
class Figure:
    """One headline figure of a study: the metric (``catalog.METRICS``'s name), how the summary
    names it, the best row's value, and the published references the study names for it."""

    metric: str
    title: str
    best: Best
    references: tuple[Reference, ...] = ()

    def ratio(self, reference: Reference) -> float | None:
        """The measured figure over the published one; ``None`` when nothing was measured."""
        return None if self.best.value is None else self.best.value / reference.value


#: The figures of a study swept over batch sizes: (metric, title, whether the lowest is the best).
SWEEP_FIGURES = (
    ("latency.p50", "lowest p50 latency", True),
    ("throughput", "highest throughput", False),
    ("items_per_j", "highest items/J", False),
)
#: The figures of a study that measured a time to train.
TRAINING_FIGURES = (("time_to_train", "lowest time to train", True),)


@dataclass(frozen=True)
class Headline:
    """A study's headline: its rows, its figures (best row and references each), the rows flagged
    for care."""

    group: str
    rows: int
    figures: tuple[Figure, ...]
    flagged: int

    def figure(self, metric: str) -> Figure:
        """The figure of ``metric`` (``KeyError`` when the study has none)."""
        for figure in self.figures:
            if figure.metric == metric:
                return figure
        raise KeyError(metric)

    @property
    def latency(self) -> Best:
        """The lowest p50 latency."""
        return self.figure("latency.p50").best

    @property
    def throughput(self) -> Best:
        """The highest throughput."""
        return self.figure("throughput").best

    @property
    def items_per_j(self) -> Best:
        """The highest items per joule."""
        return self.figure("items_per_j").best


def _who(record: IpuRecord, label: str) -> str:
    where = f"{record.target} {record.precision}, batch {record.batch_size}"
    if record.time_to_train is not None:
        where += f", {record.time_to_train.processes} process(es)"
    return f"{where} ({label})" if label else where


def _is_training(records: Sequence[IpuRecord]) -> bool:
    return any(r.time_to_train is not None for r in records)


def _best(
    rows: Sequence[tuple[int, StoredBenchmark, IpuRecord]], labels: Sequence[str], metric: str, lowest: bool
) -> Best:
    read = METRICS[metric]
    measured = [
        (value, index, bench, record)
        for index, bench, record in rows
        for value in (read.value(record),)
        if value is not None and math.isfinite(value)
    ]
    if not measured:
        reason = remove_prefix(read.why_missing(rows[0][2]), "power not measured: ")
        return Best(None, f"not measured: {reason}")
    pick = min if lowest else max
    value, index, bench, record = pick(measured, key=lambda m: m[0])
    return Best(value, _who(record, labels[index]), index, bench.name)


def headline(runs: Sequence[StoredRun], group: str, published: Sequence[Reference] = ()) -> Headline:
    """The headline of ``group`` over every run's rows of it (each row named by its run's label
    when several runs are given), with the references of ``published`` the study names."""
    labels = plots.run_labels(runs) if len(runs) > 1 else [""] * len(runs)
    rows = [
        (index, bench, bench.record)
        for index, run in enumerate(runs)
        for bench in run.benchmarks
        if bench.record is not None and group_name(bench.group, bench.name) == group
    ]
    names = {text for _, bench, _ in rows for text in (bench.name, bench.group, group) if text}
    named = [r for r in published if r.matches(*names)]
    kinds = TRAINING_FIGURES if _is_training([r for _, _, r in rows]) else SWEEP_FIGURES
    figures = tuple(
        Figure(
            metric, title, _best(rows, labels, metric, lowest), tuple(r for r in named if r.metric == metric)
        )
        for metric, title, lowest in kinds
    )
    return Headline(group, len(rows), figures, sum(1 for _, _, r in rows if CARE_FLAGS.intersection(r.flags)))


def studies(runs: Sequence[StoredRun]) -> list[str]:
    """The groups a summary leads with, none a self-check: those swept over batch sizes in the
    report's order, then those that measured a time to train."""
    checks = set(self_check_groups(runs))
    order = [g for g in plots.report_order(runs) if g not in checks]
    records: dict[str, list[IpuRecord]] = {}
    for run in runs:
        for bench in run.benchmarks:
            if bench.record is not None:
                records.setdefault(group_name(bench.group, bench.name), []).append(bench.record)
    swept = [g for g in order if plots.has_batch_axis(runs, g) and not _is_training(records.get(g, []))]
    trained = [g for g in order if _is_training(records.get(g, []))]
    return swept + trained


def used(runs: Sequence[StoredRun], published: Sequence[Reference]) -> set[int]:
    """The indexes of the references of ``published`` the summary shows beside a figure."""
    return {
        r.index for g in studies(runs) for f in headline(runs, g, published).figures for r in f.references
    }


#: The note under the summary: what its figures are, and that a published one is not measured here.
NOTE = (
    "Each figure is the best one row reached, with that row; the study's own section has every row, "
    "its flags and why a figure was not measured. Rows flagged unstable or contended are to be read "
    "with care: their section says why. Published figures are reference values measured elsewhere, "
    "on the hardware their label names, with their source; never measured here. The ratio is the "
    "measured figure over the published one."
)


def section(runs: Sequence[StoredRun], anchors: dict[str, str], published: Sequence[Reference] = ()) -> str:
    """The summary's HTML: for each study (``studies``), linked to its section (``anchors``, by
    group), one row per headline figure with the published references the study names and the
    measured figure's ratio to each; empty when there is no study."""
    groups = studies(runs)
    if not groups:
        return ""
    labels = plots.run_labels(runs)
    lines = compare.compare_runs(runs).lines if len(runs) > 1 else ()
    found = [headline(runs, group, published) for group in groups]
    held = {(line.group, f.metric): _line(lines, line.group, f) for line in found for f in line.figures}
    # A later run gets a column when it holds some figure's row as the first run does: runs of other
    # benchmarks (make bench's training runs beside its inference run) have no change to show.
    later = [
        index
        for index in range(1, len(runs))
        if any(line is not None and line.ratio(index) is not None for line in held.values())
    ]
    body = []
    for line in found:
        group = line.group
        care = f"{line.flagged} of {line.rows} rows unstable or contended" if line.flagged else ""
        study = (
            f'<a href="#{html.escape(anchors.get(group, ""))}">{html.escape(group)}</a>'
            f'<br/><span class="sub">{line.rows} row(s){html.escape("; " + care if care else "")}</span>'
        )
        for number, figure in enumerate(line.figures):
            unit = METRICS[figure.metric].unit
            cells = [] if number else [f'<td rowspan="{len(line.figures)}">{study}</td>']
            cells += [
                f"<td>{html.escape(figure.title)}</td>",
                f"<td>{_cell(figure.best, unit)}</td>",
                f"<td>{_published(figure, unit)}</td>",
                f'<td class="num">{_ratios(figure)}</td>',
            ]
            cells += [f"<td>{_change(held[(group, figure.metric)], index)}</td>" for index in later]
            body.append("<tr>" + "".join(cells) + "</tr>")
    headers = ["study", "figure", "measured (best row)", "published reference", "measured / published"]
    headers += [html.escape(f"{labels[index]} vs {labels[0]}") for index in later]
    numeric = ' class="num"'
    head = "".join(f"<th{numeric if h.startswith('measured /') else ''}>{h}</th>" for h in headers)
    note = NOTE
    if later:
        note += " " + CHANGE_NOTE
    elif len(runs) > 1:
        note += " " + UNPAIRED_NOTE
    return (
        f'<table class="summary"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
        f'<p class="sub">{html.escape(note)}</p>'
    )


#: The note when several runs are given and none holds a figure's row as the first run does.
UNPAIRED_NOTE = (
    "No change is shown: no later run has the benchmark that holds a figure as the first run has it "
    "(pytest-ipu compare pairs benchmarks by their full name)."
)


#: The note under the summary's change columns (several runs).
CHANGE_NOTE = (
    "Each later run's column: the change of the row that holds the figure (named under it) against "
    "the first run, its interval and the verdict, as pytest-ipu compare judges them: "
    + compare.VERDICT_NOTE
    + "."
)


def _line(lines: Sequence[compare.Line], group: str, figure: Figure) -> compare.Line | None:
    """``pytest-ipu compare``'s line of the benchmark that holds ``figure``: its group, name and
    metric, and the figure's value in the run that reached it."""
    best = figure.best
    if best.run is None:
        return None
    return next(
        (
            line
            for line in lines
            if line.group == group
            and line.name == best.name
            and line.metric.name == figure.metric
            and line.values[best.run] == best.value
        ),
        None,
    )


def _change(line: compare.Line | None, index: int) -> str:
    if line is None:
        return "-"
    if line.ratio(index) is None:
        return '<span class="sub">not measured in both runs</span>'
    interval = compare_report.format_interval(line, index)
    extra = f'<br/><span class="source">{html.escape(interval)}</span>' if interval else ""
    return f"<strong>{html.escape(compare_report.format_change(line, index))}</strong>{extra}"


def _cell(best: Best, unit: str) -> str:
    if best.value is None:
        return html.escape(best.who)
    return f"<strong>{html.escape(units.format_value(best.value, unit))}</strong><br/>{html.escape(best.who)}"


def _published(figure: Figure, unit: str) -> str:
    if not figure.references:
        return '<span class="sub">none named</span>'
    return "<br/>".join(
        f"<strong>{html.escape(units.format_value(r.value, unit))}</strong> published: "
        f"{html.escape(r.label)} ({r.devices} device(s))<br/>"
        f'<span class="source">source: {html.escape(r.source)}</span>'
        for r in figure.references
    )


def _ratios(figure: Figure) -> str:
    # One line per reference, level with its value in the published column (which takes two lines).
    parts = []
    for reference in figure.references:
        ratio = figure.ratio(reference)
        parts.append("-" if ratio is None else f"{units.format_number(ratio)}\u00d7")
    return "<br/><br/>".join(parts) if parts else "-"
