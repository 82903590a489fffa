"""``pytest-ipu ab``'s output: ``results.ab``'s result as terminal tables or markdown, one
``table.Table`` per benchmark under the legend, the notes after; or one CSV table of raw values.

The change column is ``pytest-ipu compare``'s verdict (``results.compare.judge``) on the paired
interval and p, worded as ``report.compare.describe`` words it.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence

from pytest_ipu.report import compare as compare_report
from pytest_ipu.report.table import Table
from pytest_ipu.report.table import markdown_legend
from pytest_ipu.report.table import markdown_notes
from pytest_ipu.report.table import raw
from pytest_ipu.results import ab
from pytest_ipu.results import compare
from pytest_ipu.results.ab import ABResult
from pytest_ipu.results.ab import Paired
from pytest_ipu.results.ab import RatioSummary
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.decide import format_p_value


def _change(summary: RatioSummary, metric: str, alpha: float) -> str:
    """``+12.0% worse``, ``-3.1% better``, ``+0.4% within noise``, ``-23.1% not tested``, ``same`` or
    ``-``: ``compare.judge``'s verdict on the paired interval and p (p has its own column)."""
    verdict = compare.judge(summary.interval, summary.p, alpha, METRICS[metric].better)
    return compare_report.describe(summary.ratio, verdict)


def _by_benchmark(result: ABResult) -> dict[str, list[Paired]]:
    out: dict[str, list[Paired]] = {}
    for line in result.lines:
        out.setdefault(line.fullname, []).append(line)
    return out


def table(result: ABResult, lines: Sequence[Paired]) -> Table:
    """One benchmark's table: a row per metric with both sides' medians, the ratio, its interval, p
    and the change (no legend or notes: those are the whole result's)."""
    header = ["metric", "baseline", "candidate", "ratio", ab.confidence(result), "p", "change"]
    rows = []
    for line in lines:
        unit = METRICS[line.metric].unit
        summary = line.summary(result.alpha)
        rows.append(
            [
                line.metric,
                compare_report.format_value(ab.median(line.baseline), unit),
                compare_report.format_value(ab.median(line.candidate), unit),
                "-" if summary.ratio is None else f"{summary.ratio:.3f}",
                "-"
                if summary.interval is None
                else f"[{summary.interval[0]:.3f}, {summary.interval[1]:.3f}]",
                "-" if summary.p is None else format_p_value(summary.p),
                _change(summary, line.metric, result.alpha),
            ]
        )
    return Table(header, rows, [False] + [True] * (len(header) - 1))


def render_table(result: ABResult) -> str:
    """Terminal tables, one per benchmark: aligned columns, one line per metric."""
    out = ab.legend(result)
    for lines in _by_benchmark(result).values():
        out += ["", f"{lines[0].benchmark} ({lines[0].fullname})", *table(result, lines).grid()]
    notes = ab.notes(result)
    return "\n".join(out + ([""] if notes else []) + notes)


def render_markdown(result: ABResult) -> str:
    """GitHub-flavoured markdown: the legend, a table per benchmark (pipes escaped), the notes."""
    out = markdown_legend(ab.legend(result))
    for lines in _by_benchmark(result).values():
        out += ["", f"**{lines[0].benchmark}** (`{lines[0].fullname}`)", ""]
        out += table(result, lines).markdown_grid()
    return "\n".join(out + markdown_notes(ab.notes(result)))


#: The CSV form's columns.
CSV_HEADER = (
    "group",
    "benchmark",
    "fullname",
    "metric",
    "unit",
    "better",
    "pairs",
    "baseline_median",
    "candidate_median",
    "ratio",
    "ci_low",
    "ci_high",
    "p",
    "baseline_values",
    "candidate_values",
)


def render_csv(result: ABResult) -> str:
    """CSV with raw SI values and every pair's values (``;`` between pairs), for scripts."""
    rows = []
    for line in result.lines:
        summary = line.summary(result.alpha)
        low, high = summary.interval if summary.interval is not None else (None, None)
        rows.append(
            [
                line.group,
                line.benchmark,
                line.fullname,
                line.metric,
                METRICS[line.metric].unit,
                METRICS[line.metric].better,
                str(summary.n),
                raw(ab.median(line.baseline)),
                raw(ab.median(line.candidate)),
                raw(summary.ratio),
                raw(low),
                raw(high),
                raw(summary.p),
                ";".join(raw(v) for v in line.baseline),
                ";".join(raw(v) for v in line.candidate),
            ]
        )
    return Table(CSV_HEADER, rows).csv()


RENDERERS: Mapping[str, Callable[[ABResult], str]] = {
    "table": render_table,
    "markdown": render_markdown,
    "csv": render_csv,
}
