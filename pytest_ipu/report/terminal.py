"""Terminal tables of pytest-ipu records: one per group, rows sorted by batch size (presentation only).

Cells are formatted by the units registry (``pytest_ipu.measure.units``); markers in cells (``*``,
``^``, ``n/m``, ``?``, ``~``, ``xN``, ``[sim]``) come from the records' fields, and ``footnotes`` explains
those a set of rows uses. Each table is followed by the footnotes of its own rows, so that a mark is
explained right under the table that shows it (the HTML report puts the same lines under its tables).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_ipu.measure import stats
from pytest_ipu.measure import units
from pytest_ipu.report.loadgen import loadgen_lines
from pytest_ipu.report.table import Table
from pytest_ipu.report.text import left_out
from pytest_ipu.report.training import time_to_train_lines
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.records import BudgetRecord
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import ParityRecord
from pytest_ipu.results.records import PowerRecord
from pytest_ipu.results.records import StabilityRecord

if TYPE_CHECKING:
    from pytest_ipu.measure.contention import ContentionRecord


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


#: The energy scope column's header: what the energy figures cover (``PowerRecord.scope``).
ENERGY_OF = "energy of"


def _energy_of(row: Row) -> str:
    """What the energy covers, compactly: ``ipus 0,1`` (each IPU read on its own), ``board 2-3 (3
    idle)`` (a board's one reading, with the IPUs in it the benchmark did not use), or the devices'
    scope (``gpu``, ``cpu-package+dram``); ``n/m`` where nothing was measured."""
    power = row.record.power
    if power is None or not power.measured or power.scope is None:
        return "n/m"
    ipus = sorted({i for d in power.devices for i in d.ipus})
    if not ipus:
        return power.scope
    unused = sorted({i for d in power.devices for i in d.unused_ipus})
    shared = f" ({_id_ranges(unused)} idle)" if unused else ""
    return f"{power.scope} {_id_ranges(ipus)}{shared}"


def _id_ranges(ids: Sequence[int]) -> str:
    """``0-3,6`` for ids 0, 1, 2, 3, 6 (ascending): a Pod's IPUs stay short."""
    parts: list[str] = []
    for _, run in itertools.groupby(enumerate(ids), key=lambda pair: pair[1] - pair[0]):
        block = [i for _, i in run]
        parts.append(str(block[0]) if len(block) == 1 else f"{block[0]}-{block[-1]}")
    return ",".join(parts)


#: The host cost columns' headers (docs/numbers.md, host cost): the host CPU time per item and the
#: host cores kept busy, every process of the benchmark counted.
HOST_PER_ITEM = "host CPU/item"
HOST_CORES = "host cores"


def _host(metric: str, unit: str | None) -> Callable[[Row], str]:
    """A host cost cell: the metric's value (with its display unit, or a bare number for
    ``unit=None``); ``n/m`` where the record has none (a footnote says why), never a 0."""

    def render(row: Row) -> str:
        value = METRICS[metric].value(row.record)
        if value is None:
            return "n/m"
        return units.format_number(value) if unit is None else units.format_value(value, unit)

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
    Column(
        "items/s",
        lambda r: units.format_number(r.record.throughput_items_per_s) + ("^" if apart(r.record) else ""),
    ),
    Column(HOST_PER_ITEM, _host("host_cpu_per_item", "s")),
    Column(HOST_CORES, _host("host_cores", None)),
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
    Column(ENERGY_OF, _energy_of, right=False),
    Column("parity", lambda r: _parity(r.record.parity)),
    Column("flags", lambda r: ",".join(r.record.flags) or "-", right=False),
)


#: The columns a table narrower than its rows may leave out, the first to go first (after any of
#: them that has nothing to show: ``Table.fitted``). The benchmark, its target and batch,
#: p50, p99 and items/s always stay: they are what a row is read for. The flags go last: the
#: footnotes under the table name each flagged benchmark and why, so nothing is lost.
DROP_ORDER: tuple[str, ...] = (
    HOST_CORES,
    "first call",
    "compile",
    "items/J",
    ENERGY_OF,
    "parity",
    "precision",
    "rounds",
    HOST_PER_ITEM,
    "J/item",
    "W",
    "repeats",
    "flags",
)

#: How far items/s may be from batch / p50 (either way, as a ratio) before the table marks it.
APART = 0.25


def median_rate(record: IpuRecord) -> float | None:
    """What throughput would be if every round took the median call: items per round / p50."""
    count = len(record.instances) if record.instances else 1
    p50 = record.latency_s.p50
    return record.items_per_call * count / p50 if p50 > 0 else None


def apart(record: IpuRecord) -> bool:
    """Whether items/s and batch / p50 differ by more than ``APART``: the table then marks items/s
    with ``^`` and a footnote reconciles the two (docs/numbers.md, "Why items/s is not batch / p50")."""
    if record.time_to_train is not None or (record.training is not None and record.training.processes > 1):
        # A run's "call" is a whole training run; and a data-parallel record's rate is one rank's or,
        # merged, every rank's over its rounds, which no per-call figure of the record predicts.
        return False
    rate = median_rate(record)
    if rate is None or record.throughput_items_per_s <= 0:
        return False
    ratio = record.throughput_items_per_s / rate
    return not (1 - APART) <= ratio <= 1 + APART


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


def tables(rows: Sequence[Row], columns: Sequence[Column] = COLUMNS, width: int | None = None) -> list[str]:
    """Render one table per group (groups in first-seen order), each followed by the ``footnotes`` of
    its own rows and a blank line (a table wider than ``width`` characters leaves out columns of
    ``DROP_ORDER`` and says which, ``Table.fitted``); then the time-to-train table
    (``training.time_to_train_lines``) and the LoadGen table (``loadgen.loadgen_lines``) of the
    rows those belong to, in no group table.

    A footnote that two tables need is printed under each: a table and the lines that explain its
    marks stay together, however many other tables the run printed between them.
    """
    # A time-to-train benchmark's "calls" are whole runs: it has a table of its own, after the others
    # (named by its group where two share a name: the same benchmark in two runs).
    runs = [r for r in rows if r.record.time_to_train is not None]
    # A LoadGen benchmark's queries, verdict and MLPerf compliance are LoadGen's: the marks of this
    # table (^, *) say nothing about them, so they have a table of their own too.
    queried = [r for r in rows if r.record.loadgen is not None]
    rows = [r for r in rows if r.record.time_to_train is None and r.record.loadgen is None]
    lines: list[str] = []
    order = list(dict.fromkeys(r.group for r in rows))
    by_group = {g: sorted((r for r in rows if r.group == g), key=sort_key) for g in order}
    for group, members in by_group.items():
        found = Table(
            [c.header for c in columns],
            [[c.render(r) for c in columns] for r in members],
            [c.right for c in columns],
        )
        lines.append(f"{group} (latency per call; throughput summed over instances)")
        table, dropped = found.fitted(width, DROP_ORDER)
        lines.extend(table)
        lines.extend(footnotes(members, columns))
        if width is not None:
            lines.extend(left_out(dropped, width))
        lines.append("")
    if runs:
        shared = len({r.name for r in runs}) < len(runs)
        lines += [*time_to_train_lines([(r.group if shared else r.name, r.record) for r in runs]), ""]
    if queried:
        lines += [*loadgen_lines([(_loadgen_name(r, queried), r.record) for r in queried], width), ""]
    return lines


def _loadgen_name(row: Row, rows: Sequence[Row]) -> str:
    """How the LoadGen table names a row: its test name; with what its group adds (the run's file in
    a summary of several runs) where two rows share a name."""
    if sum(r.name == row.name for r in rows) < 2:
        return row.name
    function = row.name.partition("[")[0]
    if row.group.startswith(function):
        return f"{row.name}{row.group[len(function) :]}"
    return f"{row.name} ({row.group})"


def footnotes(rows: Sequence[Row], columns: Sequence[Column] = COLUMNS) -> list[str]:
    """The lines that explain the markers ``tables`` puts in these rows' cells: percentiles too few
    rounds support (``*``, for the percentile columns among ``columns``), concurrent instances
    (``xN``), simulators (``[sim]``), items/s far from batch / p50 (``^``), power not measured,
    invalid or of low confidence (``n/m``, ``?``, ``~``) and the host cost's workers or absence
    (for the host cost columns among ``columns``); then each flag with the figure that raised it,
    and how close the windows came to their time budget. Empty when no row needs one."""
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
    lines.extend(_apart_notes(rows))
    lines.extend(_emulated_fp16_notes(rows))
    lines.extend(_power_notes(rows))
    if HOST_PER_ITEM in headers or HOST_CORES in headers:
        lines.extend(_host_notes(rows))
    lines.extend(_flag_notes(rows))
    lines.extend(_budget_note(rows))
    return lines


def _apart_notes(rows: Sequence[Row]) -> list[str]:
    """For each row whose items/s is marked ``^``: the mean round that throughput follows, against
    the median call p50 is, and the tail that pulls them apart."""
    marked = [r for r in rows if apart(r.record)]
    if not marked:
        return []
    lines = [
        "^ = items/s is more than a quarter away from batch / p50: it counts every round's time "
        "(the mean round), p50 only the middle call (docs/numbers.md, why items/s is not batch / p50)"
    ]
    for row in marked:
        record = row.record
        round_s = record.window_s / record.rounds if record.rounds else None
        mean = units.format_value(round_s, "s") if round_s is not None else "n/a"
        lines.append(
            f"  {_who(row, rows)}: mean round {mean}, p50 {units.format_value(record.latency_s.p50, 's')}, "
            f"p99 {units.format_value(record.latency_s.p99, 's')}; batch / p50 would give "
            f"{units.format_number(median_rate(record) or 0.0)} items/s"
        )
    return lines


#: The backends whose CPU device runs torch's own CPU kernels.
TORCH_BACKENDS = ("torch", "torch-compile")


def _emulated_fp16_notes(rows: Sequence[Row]) -> list[str]:
    """One line for the rows that ran fp16 on a CPU through torch: nothing else in the table says
    why they are so slow (most CPUs have no fp16 arithmetic, so torch emulates it)."""
    names = [
        _who(r, rows)
        for r in rows
        if r.record.precision == "fp16" and r.record.device == "cpu" and r.record.backend in TORCH_BACKENDS
    ]
    if not names:
        return []
    return [
        f"fp16 on the CPU: {', '.join(names)}: torch emulates fp16 matrix products and convolutions on "
        "CPUs without fp16 arithmetic (most), far slower than fp32; --ipu-precision=bf16 (on a CPU with "
        "bf16 instructions) or --ipu-precision=fp32 measures what the CPU runs natively"
    ]


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
        f"farthest from it: {_who(row, rows)} at {worst:.2f}"
    ]


def _who(row: Row, rows: Sequence[Row]) -> str:
    """How a footnote names a row: by its parameters under its own table; with its group as well
    when the footnotes cover rows of several groups."""
    if all(r.group == row.group for r in rows):
        return _name(row)
    return f"{row.group} {_name(row)}"


def _flag_notes(rows: Sequence[Row]) -> list[str]:
    """One line per flagged benchmark and flag, with the figure that raised it; one line per
    distinct reason the contention could not be measured."""
    lines: list[str] = []
    unreadable: dict[str, None] = {}
    for row in rows:
        record, name = row.record, _who(row, rows)
        stability, contention, budget = record.stability, record.contention, record.budget
        if stability is not None and stability.unstable:
            lines.append(f"unstable: {name}: {_spread(stability)}, above {stability.threshold * 100:g}%")
        if contention is not None and contention.contended and contention.others_share is not None:
            used = _others_used(contention, contention.others_share)
            lines.append(
                f"contended: {name}: other processes used {used}, above "
                f"{contention.threshold * 100:g}%{_load(contention)}{_threads_hint(record)}"
            )
        if record.off_cpu and record.cpu is not None and record.cpu.off_cpu_share is not None:
            lines.append(
                f"off-cpu: {name}: the thread running the rounds was off the CPU "
                f"{record.cpu.off_cpu_share * 100:.0f}% of the windows' wall time (descheduled, or "
                f"waiting); CPU time per round {units.format_value(record.cpu.process_s, 's')}, "
                f"wall p50 {units.format_value(record.latency_s.p50, 's')}"
            )
        if contention is not None and not contention.readable:
            unreadable[f"contention not measured: {contention.reason}"] = None
        if budget is not None and budget.budget_s is not None:
            lines.extend(_budget_notes(name, budget, budget.budget_s))
    return lines + list(unreadable)


def _spread(stability: StabilityRecord) -> str:
    """The spread that made a benchmark unstable: between its repeats, else between its rounds."""
    if stability.cv is not None:
        return f"throughput varied {stability.cv * 100:.1f}% (cv) between {stability.repeats} repeats"
    spread = (stability.round_spread or 0.0) * 100
    return f"round times spread {spread:.1f}% (IQR / median), one repeat"


def _others_used(contention: ContentionRecord, others_share: float) -> str:
    """The machine's CPU other processes used, in the window that raised the flag where one did."""
    others = others_share * 100
    if contention.flagged_share is not None and contention.flagged_repeat is not None:
        # The flag is set by one window; the average over all of them may be below it.
        return (
            f"{contention.flagged_share * 100:.0f}% of the machine's CPU during repeat "
            f"{contention.flagged_repeat} ({others:.0f}% over all the windows)"
        )
    return f"{others:.0f}% of the machine's CPU during the windows"


def _load(contention: ContentionRecord) -> str:
    """The load average beside a contention note, where it was read."""
    return "" if contention.load_avg_1m is None else f", load average {contention.load_avg_1m:.2f}"


def _budget_notes(name: str, budget: BudgetRecord, budget_s: float) -> list[str]:
    """The notes of a window that strayed from its ``budget_s``: capped, past it for the minimum
    rounds, or short of it at the round limit."""
    lines = []
    window = units.format_value(budget.window_s, "s")
    of = f"of a {units.format_value(budget_s, 's')} budget"
    if budget.capped:
        cap = units.format_value(budget.cap_s or 0.0, "s")
        lines.append(f"capped: {name}: the hard cap ({cap}) ended the rounds: {window} {of}")
    if budget.min_rounds_past_budget:
        lines.append(f"over-budget: {name}: the minimum rounds took {window} {of}")
    if budget.rounds_limited:
        lines.append(f"rounds-limit: {name}: the most rounds planned filled {window} {of}")
    return lines


def _host_notes(rows: Sequence[Row]) -> list[str]:
    """What the host cost columns count, where a row's instances ran in worker processes, and one
    line per distinct reason a row has no host cost (``n/m`` in those columns)."""
    notes: dict[str, None] = {}
    for row in rows:
        cpu = row.record.cpu
        if cpu is not None and cpu.workers:
            notes[
                f"{HOST_PER_ITEM}, {HOST_CORES} of {_who(row, rows)}: this process and its {cpu.workers} "
                "instance worker processes together"
            ] = None
        metric = METRICS["host_cores"]
        if metric.value(row.record) is None:
            notes[f"host n/m = host cost not measured: {metric.why_missing(row.record)}"] = None
    return list(notes)


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
        if power.scope == "board":
            notes[
                "board = the energy is whole boards' readings (a C2 card reports one for its two IPUs), "
                "the IPUs named idle included: the benchmark did not use them, no other program did"
            ] = None
    return list(notes)
