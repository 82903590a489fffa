"""Terminal tables of pytest-ipu records: one per group, rows sorted by batch size (presentation only).

Cells are formatted by the units registry (``pytest_ipu.measure.units``); markers in cells (``*``,
``n/m``, ``?``, ``~``, ``xN``, ``[sim]``) come from the records' fields, and ``footnotes`` explains
those a set of rows uses (the HTML report shows the same lines under its tables).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_ipu.measure import stats
from pytest_ipu.measure import units
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import ParityRecord
from pytest_ipu.results.records import PowerRecord


@dataclass(frozen=True)
class Row:
    """One benchmark in a table: its group, its test name and what it measured."""

    group: str
    name: str
    record: IpuRecord


@dataclass(frozen=True)
class Column:
    """A table column: header, how to render a row, and whether to right-align."""

    header: str
    render: Callable[[Row], str]
    right: bool = True


def _percentile(key: str) -> Callable[[Row], str]:
    def render(row: Row) -> str:
        text = units.format_value(getattr(row.record.latency_s, key), "s")
        return f"{text}*" if key in row.record.latency_s.unsupported else text

    return render


def _name(row: Row) -> str:
    # Inside a group the test function is the same; the parameters tell the rows apart.
    name = row.name
    return name[name.index("[") :] if "[" in name and name.startswith(row.group) else name


def _power(read: Callable[[PowerRecord], float | None]) -> Callable[[Row], str]:
    """A power figure's cell: ``n/m`` (not measured, see the footnote), ``?`` marks an invalid
    window, ``~`` a low-confidence one. Never a 0 in place of an unknown."""

    def render(row: Row) -> str:
        power = row.record.power
        if power is None or not power.measured:
            return "n/m"
        value = read(power)
        if value is None or not power.valid:
            return "?"
        return ("~" if power.low_confidence else "") + units.format_number(value)

    return render


COLUMNS: tuple[Column, ...] = (
    Column("benchmark", _name, right=False),
    Column("target", lambda r: _target(r.record), right=False),
    Column("precision", lambda r: r.record.precision, right=False),
    Column("batch", lambda r: str(r.record.batch_size)),
    Column("rounds", lambda r: str(r.record.rounds)),
    Column("repeats", lambda r: _repeats(r.record)),
    Column("p50", _percentile("p50")),
    Column("p99", _percentile("p99")),
    Column("items/s", lambda r: units.format_number(r.record.throughput_items_per_s)),
    Column("first call", lambda r: units.format_value(r.record.first_call_s, "s")),
    Column(
        "compile",
        lambda r: (
            units.format_value(r.record.compile_s, "s") + (" (cached)" if r.record.compile_cached else "")
        ),
    ),
    Column("W", _power(lambda p: p.mean_power_w)),
    Column("J/item", _power(lambda p: p.energy_per_item_j)),
    Column("items/J", _power(lambda p: p.items_per_j)),
    Column("parity", lambda r: _parity(r.record.parity)),
    Column("flags", lambda r: ",".join(r.record.flags) or "-", right=False),
)


def _repeats(record: IpuRecord) -> str:
    """``3 cv 1.2%``: the repeats and the spread of their throughputs; ``1`` for one repeat."""
    stability = record.stability
    count = len(record.repeats) or 1
    if stability is None or stability.cv is None:
        return str(count)
    return f"{count} cv {stability.cv * 100:.1f}%"


def _target(record: IpuRecord) -> str:
    """``popart:ipu x2`` for two concurrent instances; ``[sim]`` marks a simulator (see footnote)."""
    count = len(record.instances) if record.instances else 1
    text = record.target + (f" x{count}" if count > 1 else "")
    return text + (" [sim]" if record.simulator else "")


def _parity(parity: ParityRecord | None) -> str:
    """``-`` when not checked, else whether it passed and the max relative error."""
    if parity is None:
        return "-"
    return f"{'ok' if parity.passed else 'FAIL'} {parity.max_rel:.1e}"


def sort_key(row: Row) -> tuple[int, str, str]:
    """Batch size first, so that backends sit side by side at each batch size."""
    return (row.record.batch_size, row.record.target, row.name)


def tables(rows: Sequence[Row], columns: Sequence[Column] = COLUMNS) -> list[str]:
    """Render one table per group (groups in first-seen order), then the ``footnotes`` of all rows."""
    lines: list[str] = []
    order = list(dict.fromkeys(r.group for r in rows))
    by_group = {g: sorted((r for r in rows if r.group == g), key=sort_key) for g in order}
    for group, members in by_group.items():
        cells = [[c.header for c in columns]] + [[c.render(r) for c in columns] for r in members]
        widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
        lines.append(f"{group} (latency per call; throughput summed over instances)")
        for n, row in enumerate(cells):
            text = "  ".join(
                cell.rjust(w) if col.right else cell.ljust(w)
                for cell, w, col in zip(row, widths, columns, strict=True)
            )
            lines.append(text.rstrip())
            if n == 0:
                lines.append("-" * len(text.rstrip()))
        lines.append("")
    lines.extend(footnotes(rows, columns))
    return lines


def footnotes(rows: Sequence[Row], columns: Sequence[Column] = COLUMNS) -> list[str]:
    """The lines that explain the markers ``tables`` puts in these rows' cells: percentiles too few
    rounds support (``*``, for the percentile columns among ``columns``), concurrent instances
    (``xN``), simulators (``[sim]``) and power not measured, invalid or of low confidence
    (``n/m``, ``?``, ``~``). Empty when no row needs one."""
    lines: list[str] = []
    headers = {c.header for c in columns}
    flagged = sorted(
        p
        for p in set(itertools.chain.from_iterable(r.record.latency_s.unsupported for r in rows))
        if p in headers
    )
    if flagged:
        needs = ", ".join(f"{p} needs >= {stats.min_samples_for(float(p[1:]))}" for p in flagged)
        lines.append(f"* too few rounds for this percentile ({needs}): it is the maximum of the rounds run")
    if any(r.record.instances for r in rows):
        lines.append(
            "xN = N instances running concurrently: items/s is summed over them, p50/p99 are per call of "
            "one instance"
        )
    if any(r.record.simulator for r in rows):
        lines.append("[sim] = a simulator (the IPU Model): its timings are not hardware timings")
    lines.extend(_power_notes(rows))
    lines.extend(_flag_notes(rows))
    lines.extend(_budget_note(rows))
    return lines


def _threads_hint(record: IpuRecord) -> str:
    """For a contended torch benchmark on torch's default threads: the option that helps."""
    threads = record.compile_info.get("threads")
    if not isinstance(threads, dict):
        return ""
    requested = threads.get("requested", {})
    intra = threads.get("intra_op")
    if not isinstance(requested, dict) or requested.get("intra_op") != "auto" or not isinstance(intra, int):
        return ""
    if intra < 2:
        return ""
    return (
        f"; torch ran {intra} intra-op threads, which wait on each other when others take the CPU: "
        "--ipu-torch-threads=1 avoids it"
    )


def _budget_note(rows: Sequence[Row]) -> list[str]:
    """How close the auto-round benchmarks came to their time budgets: the range of window / budget
    and the one farthest from 1."""
    ratios = [
        (r.record.budget.ratio, r)
        for r in rows
        if r.record.budget is not None and r.record.budget.ratio is not None
    ]
    if not ratios:
        return []
    low, high = min(x for x, _ in ratios), max(x for x, _ in ratios)
    worst, row = max(ratios, key=lambda item: abs(math.log(item[0])) if item[0] > 0 else math.inf)
    return [
        f"time budget: {len(ratios)} auto-round benchmark(s), window / budget {low:.2f} to {high:.2f}; "
        f"farthest from it: {row.group} {_name(row)} at {worst:.2f}"
    ]


def _flag_notes(rows: Sequence[Row]) -> list[str]:
    """One line per flagged benchmark and flag, with the figure that raised it; one line per
    distinct reason the contention could not be measured."""
    lines: list[str] = []
    unreadable: dict[str, None] = {}
    for row in rows:
        record, name = row.record, _name(row)
        stability, contention, budget = record.stability, record.contention, record.budget
        if stability is not None and stability.unstable:
            if stability.cv is not None:
                figure = (
                    f"throughput varied {stability.cv * 100:.1f}% (cv) between {stability.repeats} repeats"
                )
            else:
                spread = (stability.round_spread or 0.0) * 100
                figure = f"round times spread {spread:.1f}% (IQR / median), one repeat"
            lines.append(f"unstable: {row.group} {name}: {figure}, above {stability.threshold * 100:g}%")
        if contention is not None and contention.contended and contention.others_share is not None:
            load = "" if contention.load_avg_1m is None else f", load average {contention.load_avg_1m:.2f}"
            others = contention.others_share * 100
            lines.append(
                f"contended: {row.group} {name}: other processes used {others:.0f}% of the machine's CPU "
                f"during the windows, above {contention.threshold * 100:g}%{load}{_threads_hint(record)}"
            )
        if contention is not None and not contention.readable:
            unreadable[f"contention not measured: {contention.reason}"] = None
        if budget is not None and budget.budget_s is not None:
            window = units.format_value(budget.window_s, "s")
            of = f"of a {units.format_value(budget.budget_s, 's')} budget"
            if budget.capped:
                cap = units.format_value(budget.cap_s or 0.0, "s")
                lines.append(
                    f"capped: {row.group} {name}: the hard cap ({cap}) ended the rounds: {window} {of}"
                )
            if budget.min_rounds_past_budget:
                lines.append(f"over-budget: {row.group} {name}: the minimum rounds took {window} {of}")
            if budget.rounds_limited:
                lines.append(
                    f"rounds-limit: {row.group} {name}: the most rounds planned filled {window} {of}"
                )
    return lines + list(unreadable)


def _power_notes(rows: Sequence[Row]) -> list[str]:
    """One line per distinct reason power was not measured, was invalid, or is of low confidence."""
    notes: dict[str, None] = {}
    for row in rows:
        power = row.record.power
        if power is None or not power.measured:
            reason = power.reason if power is not None else ""
            notes[f"n/m = power not measured: {reason or 'no power record'}"] = None
            continue
        if not power.valid:
            why = power.reason or "; ".join(power.warnings)
            notes[f"? = power window invalid ({row.record.target}): {why}"] = None
        if power.low_confidence:
            notes["~ = low confidence: the energy window is shorter than the sensor needs"] = None
    return list(notes)
