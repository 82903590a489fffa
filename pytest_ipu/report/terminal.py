"""Terminal tables of pytest-ipu records: one per group, rows sorted by batch size (presentation only)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ipu.measure import stats
from pytest_ipu.results.records import IpuRecord


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


def format_seconds(seconds: float | None) -> str:
    """``0.00136`` -> ``1.36 ms``: three significant figures in the unit that suits the value."""
    if seconds is None:
        return "-"
    if abs(seconds) >= 999.5:
        return f"{seconds:,.0f} s"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        # Compare after rounding, so 0.9996 s reads '1 s', not '1e+03 ms'.
        if abs(float(f"{seconds / scale:.3g}")) >= 1:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_rate(per_s: float) -> str:
    """Items per second with thousands separators: ``2526.4`` -> ``2,526``."""
    return f"{per_s:,.0f}" if per_s >= 100 else f"{per_s:.3g}"


def _percentile(key: str) -> Callable[[Row], str]:
    def render(row: Row) -> str:
        text = format_seconds(getattr(row.record.latency, f"{key}_s"))
        return f"{text}*" if key in row.record.latency.unsupported else text

    return render


def _name(row: Row) -> str:
    # Inside a group the test function is the same; the parameters tell the rows apart.
    name = row.name
    return name[name.index("[") :] if "[" in name and name.startswith(row.group) else name


COLUMNS: tuple[Column, ...] = (
    Column("benchmark", _name, right=False),
    Column("target", lambda r: _target(r.record), right=False),
    Column("precision", lambda r: r.record.precision, right=False),
    Column("batch", lambda r: str(r.record.batch_size)),
    Column("rounds", lambda r: str(r.record.rounds)),
    Column("p50", _percentile("p50")),
    Column("p99", _percentile("p99")),
    Column("items/s", lambda r: format_rate(r.record.throughput_items_per_s)),
    Column("first call", lambda r: format_seconds(r.record.first_call_s)),
    Column(
        "compile",
        lambda r: format_seconds(r.record.compile_s) + (" (cached)" if r.record.compile_cached else ""),
    ),
    Column("W", lambda r: _power(r.record.power, "mean_power_w", "{:.3g}")),
    Column("J/item", lambda r: _power(r.record.power, "energy_per_item_j", "{:.3g}")),
    Column("items/J", lambda r: _power(r.record.power, "items_per_j", "{:.3g}")),
    Column("parity", lambda r: _parity(r.record.parity)),
)


def _target(record: IpuRecord) -> str:
    """``popart:ipu x2`` for two concurrent instances; ``[sim]`` marks a simulator (see footnote)."""
    count = len(record.instances) if record.instances else 1
    text = record.target + (f" x{count}" if count > 1 else "")
    return text + (" [sim]" if record.simulator else "")


def _power(power: Mapping[str, Any] | None, key: str, fmt: str) -> str:
    """A power figure; ``n/m`` (not measured, see the footnote), ``?`` marks an invalid window,
    ``~`` a low-confidence one. Never a 0 in place of an unknown."""
    if not power or not power.get("measured"):
        return "n/m"
    value = power.get(key)
    if value is None or not power.get("valid"):
        return "?"
    low = any(str(w).startswith("low confidence") for w in power.get("warnings", []))
    return ("~" if low else "") + fmt.format(value)


def _parity(parity: Mapping[str, Any] | None) -> str:
    """``-`` when not checked, else whether it passed and the max relative error."""
    if parity is None:
        return "-"
    return f"{'ok' if parity.get('passed') else 'FAIL'} {float(parity['max_rel']):.1e}"


def sort_key(row: Row) -> tuple[int, str, str]:
    """Batch size first, so that backends sit side by side at each batch size."""
    return (row.record.batch_size, row.record.target, row.name)


def tables(rows: Sequence[Row], columns: Sequence[Column] = COLUMNS) -> list[str]:
    """Render one table per group (groups in first-seen order), with a footnote for flagged percentiles."""
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
    headers = {c.header for c in columns}
    flagged = sorted(
        p
        for p in set(itertools.chain.from_iterable(r.record.latency.unsupported for r in rows))
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
    return lines


def _power_notes(rows: Sequence[Row]) -> list[str]:
    """One line per distinct reason power was not measured, was invalid, or is of low confidence."""
    notes: dict[str, None] = {}
    for row in rows:
        power = row.record.power or {}
        if not power.get("measured"):
            notes[f"n/m = power not measured: {power.get('reason') or 'no power record'}"] = None
        elif not power.get("valid"):
            why = power.get("reason") or "; ".join(power.get("warnings", []))
            notes[f"? = power window invalid ({row.record.target}): {why}"] = None
        for warning in power.get("warnings", []):
            if str(warning).startswith("low confidence"):
                notes["~ = low confidence: the energy window is shorter than the sensor needs"] = None
    return list(notes)
