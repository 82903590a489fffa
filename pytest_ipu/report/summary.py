"""The report's first screen: each study's headline figures, read off its rows (presentation only).

A *study* here is a group of benchmarks swept over batch sizes (``plots.has_batch_axis``): what a
run is made for, as the ResNeXt-101 sweep is. Its headline is what a reader asks first: the lowest
p50 latency, the highest throughput and the highest items per joule any of its rows reached, each
with the row that reached it, and how many of its rows carry a flag that asks for care (unstable,
contended). Nothing is computed that the rows do not hold: a figure no row measured is "not
measured", with the first reason a row gives.

Benchmarks that say they check pytest-ipu itself (``extra_info["role"]`` is ``SELF_CHECK``: the
harness overheads, the sampler, the gates) are no study:
the report shows them last, folded.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_ipu.backports import remove_prefix
from pytest_ipu.measure import units
from pytest_ipu.report import plots
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import group_name

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
    when no row measured it, ``who`` then saying why."""

    value: float | None
    who: str


@dataclass(frozen=True)
class Headline:
    """A study's headline: its rows, the best of three figures, and the rows flagged for care."""

    group: str
    rows: int
    latency: Best
    throughput: Best
    items_per_j: Best
    flagged: int


def _who(record: IpuRecord, label: str) -> str:
    where = f"{record.target} {record.precision}, batch {record.batch_size}"
    return f"{where} ({label})" if label else where


def headline(runs: Sequence[StoredRun], group: str) -> Headline:
    """The headline of ``group`` over every run's rows of it (each row named by its run's label
    when several runs are given)."""
    labels = plots.run_labels(runs) if len(runs) > 1 else [""] * len(runs)
    rows = [
        (bench.record, labels[index])
        for index, run in enumerate(runs)
        for bench in run.benchmarks
        if bench.record is not None and group_name(bench.group, bench.name) == group
    ]
    fastest = min(rows, key=lambda r: r[0].latency_s.p50)
    busiest = max(rows, key=lambda r: r[0].throughput_items_per_s)
    # items/J as the metric registry reads it (the gates' and compare's owner of the figure).
    per_joule = METRICS["items_per_j"]
    measured = [(v, r, label) for r, label in rows for v in (per_joule.value(r),) if v is not None]
    if measured:
        value, record, label = max(measured, key=lambda m: m[0])
        frugal = Best(value, _who(record, label))
    else:
        reason = remove_prefix(per_joule.why_missing(rows[0][0]), "power not measured: ")
        frugal = Best(None, f"not measured: {reason}")
    return Headline(
        group,
        len(rows),
        Best(fastest[0].latency_s.p50, _who(*fastest)),
        Best(busiest[0].throughput_items_per_s, _who(*busiest)),
        frugal,
        sum(1 for r, _ in rows if CARE_FLAGS.intersection(r.flags)),
    )


def studies(runs: Sequence[StoredRun]) -> list[str]:
    """The groups a summary leads with: those swept over batch sizes that are not self-checks, in
    the report's order."""
    checks = set(self_check_groups(runs))
    return [g for g in plots.report_order(runs) if plots.has_batch_axis(runs, g) and g not in checks]


def section(runs: Sequence[StoredRun], anchors: dict[str, str]) -> str:
    """The summary's HTML: one row per study (``studies``), linked to its section (``anchors``,
    by group); empty when there is none."""
    groups = studies(runs)
    if not groups:
        return ""
    body = []
    for group in groups:
        line = headline(runs, group)
        cells = [
            f'<a href="#{html.escape(anchors.get(group, ""))}">{html.escape(group)}</a>',
            str(line.rows),
            _cell(line.latency, "s"),
            _cell(line.throughput, "items/s"),
            _cell(line.items_per_j, "items/J"),
            html.escape(f"{line.flagged} of {line.rows}" if line.flagged else "none"),
        ]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "study",
            "rows",
            "lowest p50",
            "highest items/s",
            "highest items/J",
            "unstable or contended",
        )
    )
    note = (
        "Each figure is the best one row reached, with that row; the study's own section has every row, "
        "its flags and why a figure was not measured. Rows flagged unstable or contended are to be read "
        "with care: their section says why."
    )
    return (
        f'<table class="summary"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
        f'<p class="sub">{html.escape(note)}</p>'
    )


def _cell(best: Best, unit: str) -> str:
    if best.value is None:
        return html.escape(best.who)
    return f"<strong>{html.escape(units.format_value(best.value, unit))}</strong><br/>{html.escape(best.who)}"
