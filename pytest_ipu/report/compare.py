"""``pytest-ipu compare``'s output: ``results.compare``'s comparison as a terminal table, markdown (for
CI step summaries) or CSV, each a ``table.Table``.

Values are shown by the units registry (``pytest_ipu.measure.units``), scaled for reading; the CSV
keeps raw SI values. Each later run's change against the first is shown with its verdict and p;
the notes under the table are ``results.compare.notes``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Mapping

from pytest_ipu.backports import zip_strict
from pytest_ipu.measure import units
from pytest_ipu.report.table import Table
from pytest_ipu.report.table import raw
from pytest_ipu.results import compare
from pytest_ipu.results import decide
from pytest_ipu.results.compare import Comparison
from pytest_ipu.results.compare import Line


def format_value(value: float | None, unit: str) -> str:
    """A value in its unit, scaled for reading (``1.36 ms``, ``2,526 items/s``); ``-`` when absent."""
    if value is None or math.isnan(value):
        return "-"
    return units.format_value(value, unit)


def format_change(line: Line, index: int) -> str:
    """``+12.0% worse (p<0.001)``, ``-3.1% better (p=0.0042)``, ``+2.0% within noise (p=0.41)``,
    ``+50.4% not tested``, ``same`` or ``-``."""
    ratio = line.ratio(index)
    return describe(ratio, line.verdict(index), None if ratio is None else line.p_value(index))


def describe(ratio: float | None, verdict: str, p: float | None = None) -> str:
    """A change and its verdict in a cell: ``same`` alone (its interval lies within the band, so the
    figure adds nothing), else the change in percent, the verdict and, when given, p; ``-`` without
    a ratio."""
    if ratio is None:
        return "-"
    if verdict == compare.SAME:
        return compare.SAME
    tested = "" if p is None else f" ({decide.format_p(p)})"
    return f"{(ratio - 1) * 100:+.1f}% {verdict}{tested}"


def format_interval(line: Line, index: int) -> str:
    """``99% interval +1.2%..+9.8%`` of run ``index``'s change; empty without a variance estimate."""
    found = line.interval(index)
    if found is None:
        return ""
    low, high = ((bound - 1) * 100 for bound in found)
    return f"{1 - compare.ALPHA:.0%} interval {low:+.1f}%..{high:+.1f}%"


#: Run files with names longer than this are shown by their saved-run number (``0001``) when
#: pytest-benchmark's storage named them, else as ``#1``, ``#2``..., with a legend.
MAX_LABEL = 24


def run_labels(comparison: Comparison) -> list[str]:
    """Column labels for the runs: their file names when short and distinct, else their saved-run
    numbers when all have one and they are distinct, else ``#1``, ``#2``..."""
    names = [run.path.name for run in comparison.runs]
    if len(set(names)) == len(names) and all(len(n) <= MAX_LABEL for n in names):
        return names
    numbers = [_run_number(name) for name in names]
    if all(numbers) and len(set(numbers)) == len(numbers):
        return [n for n in numbers if n]
    return [f"#{i + 1}" for i in range(len(names))]


def _run_number(name: str) -> str | None:
    """``0003`` of pytest-benchmark's ``0003_<commit>_<date>.json``; ``None`` for another name."""
    head = name.split("_", 1)[0]
    return head if len(head) == 4 and head.isdigit() and name.endswith(".json") else None


def _legend(comparison: Comparison) -> list[str]:
    """What each run's label stands for, when the labels are not the file names themselves."""
    labels = run_labels(comparison)
    if labels == [run.path.name for run in comparison.runs]:
        return []
    return [f"{label} = {run.path}" for label, run in zip_strict(labels, comparison.runs)]


#: The columns before the runs' values: names, aligned left.
_NAMES = 3


def table(comparison: Comparison) -> Table:
    """The comparison for reading: one row per benchmark and metric, each run's value and each later
    run's change against the first, the legend of the run labels and the notes."""
    names = run_labels(comparison)
    header = ["group", "benchmark", "metric", *names]
    header += [f"{name} vs {names[0]}" for name in names[1:]]
    rows = []
    for line in comparison.lines:
        values = [format_value(v, line.metric.unit) for v in line.values]
        changes = [format_change(line, i) for i in range(1, len(line.values))]
        rows.append([line.group, line.name, line.metric.name, *values, *changes])
    right = [False] * _NAMES + [True] * (len(header) - _NAMES)
    return Table(header, rows, right, legend=_legend(comparison), notes=compare.notes(comparison))


def render_table(comparison: Comparison) -> str:
    """The terminal table: aligned columns, one line per benchmark and metric."""
    return table(comparison).text()


def render_markdown(comparison: Comparison) -> str:
    """A GitHub-flavoured markdown table (pipes escaped), with the notes as a list below it."""
    return table(comparison).markdown()


def render_csv(comparison: Comparison) -> str:
    """CSV with raw SI values (no scaling), the ratios, each later run's verdict and its p (raw, empty
    without a variance estimate), for spreadsheets and scripts."""
    names = [run.path.name for run in comparison.runs]
    later = names[1:]
    header = [
        "group",
        "benchmark",
        "metric",
        "unit",
        "better",
        *names,
        *[f"{n}/{names[0]}" for n in later],
        *[f"{n} verdict" for n in later],
        *[f"{n} p" for n in later],
    ]
    rows = []
    for line in comparison.lines:
        indices = range(1, len(line.values))
        rows.append(
            [
                line.group,
                line.name,
                line.metric.name,
                line.metric.unit,
                line.metric.better,
                *(raw(v) for v in line.values),
                *(raw(line.ratio(i)) for i in indices),
                *(line.verdict(i) for i in indices),
                *(raw(line.p_value(i)) for i in indices),
            ]
        )
    return Table(header, rows).csv()


RENDERERS: Mapping[str, Callable[[Comparison], str]] = {
    "table": render_table,
    "markdown": render_markdown,
    "csv": render_csv,
}
