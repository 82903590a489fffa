"""``pytest-ipu history``'s output: ``results.changes``' report as text (one line per event, each
change point under it, worst first), as a markdown ``table.Table`` for a CI step summary, or as JSON
(``results.changes.document``, docs/json-schema.md). The summary, notes and verdict lines follow the
change points in the text and markdown forms.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from collections.abc import Mapping

from pytest_ipu.measure import units
from pytest_ipu.report.table import Table
from pytest_ipu.report.table import markdown_notes
from pytest_ipu.results import changes
from pytest_ipu.results.changes import Report


def render_table(report: Report) -> str:
    """One line per event (a commit's change points, each under it), worst first; the summary, notes
    and verdicts after."""
    lines = [line for event in changes.events(report.changes) for line in event.lines()]
    lines += [changes.summary(report)]
    return "\n".join(lines + changes.notes(report) + changes.verdict_lines(report))


#: The markdown table's columns: the first three are names, the rest figures.
HEADER = ("benchmark", "metric", "commit", "change", "interval", "p", "before", "after")


def table(report: Report) -> Table:
    """The change points as a table, worst first: a row per change point with its interval, p and
    the levels before and after (no legend or notes: the summary and notes follow it)."""
    rows = [
        [
            c.series.name,
            c.series.metrics,
            f"`{c.commit[: changes.SHORT]}`{' dirty' if c.dirty else ''}",
            f"{'worse' if c.worse else 'better'} {changes.percent(c.found.change)}",
            f"{changes.percent(c.found.low)} to {changes.percent(c.found.high)}",
            f"{c.found.p_value:.3g}{' (pooled)' if c.found.pooled else ''}",
            units.format_value(c.found.before, c.series.unit),
            units.format_value(c.found.after, c.series.unit),
        ]
        for event in changes.events(report.changes)
        for c in event.changes
    ]
    return Table(HEADER, rows, [False] * 3 + [True] * (len(HEADER) - 3))


def render_markdown(report: Report) -> str:
    """A markdown table of the change points, worst first, for a CI step summary; the summary, notes
    and verdicts below it."""
    found = table(report)
    out = found.markdown_grid() if found.rows else []
    out += ["", changes.summary(report)]
    out += markdown_notes(changes.notes(report) + changes.verdict_lines(report))
    return "\n".join(out)


def render_json(report: Report) -> str:
    """The JSON form (docs/json-schema.md)."""
    return json.dumps(changes.document(report), indent=2)


RENDERERS: Mapping[str, Callable[[Report], str]] = {
    "table": render_table,
    "markdown": render_markdown,
    "json": render_json,
}
