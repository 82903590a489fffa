"""``pytest-ipu compare``: saved runs side by side, every metric with its ratio to the first run.

Benchmarks are paired by pytest's full name (``fullname``) across the runs; the first run is the
baseline. For each pair: pytest-benchmark's time statistics, the latency percentiles, throughput,
compile and first-call time and the energy figures, each with the ratio later/first and whether
that is better or worse (each metric knows its better direction). Rows are grouped by benchmark
group and sorted by the test's parameters (batch size first), so backends sit side by side.

Output as a terminal table, markdown (for CI step summaries) or CSV; values are shown by the units
registry (``pytest_ipu.measure.units``), the CSV keeps raw SI values.

``--gate`` expressions (see ``gates``) are checked by the same runner as the plugin's gates
(``decide.GateRunner``): every later run against the first, and every run before it (the first
included) is its history. So with four or more files, a later run has ``decide.HISTORY_MIN`` (3)
or more runs before it, and its gates are decided by the run-to-run test against their drift
(docs/ci.md). With two or three files there is too little history: the spread between each
record's repeats decides, or with one repeat a side the threshold alone.
A failing gate makes the exit code 1, bad input 2.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ipu.measure import units
from pytest_ipu.results import decide
from pytest_ipu.results import gates
from pytest_ipu.results import schema
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.records import Measured
from pytest_ipu.results.records import group_name

#: A change smaller than this (relative) is shown as "same": timer noise, not a difference.
SAME_WITHIN = 0.01
FORMATS = ("table", "markdown", "csv")


@dataclass(frozen=True)
class CompareMetric:
    """A number every benchmark may have: its name, unit and how to read it."""

    name: str
    unit: str
    read: Callable[[StoredBenchmark], float | None]

    @property
    def better(self) -> units.Better:
        """``lower`` or ``higher``, as the unit has it."""
        return units.UNITS[self.unit].better


def _time_stat(key: str) -> Callable[[StoredBenchmark], float | None]:
    return lambda bench: bench.stats.get(key)


def _record_metric(name: str) -> Callable[[StoredBenchmark], float | None]:
    return lambda bench: None if bench.record is None else bench.record.value(name)


METRICS: tuple[CompareMetric, ...] = (
    *(CompareMetric(f"time.{k}", "s", _time_stat(k)) for k in ("min", "median", "mean", "max")),
    *(CompareMetric(m.name, m.unit, _record_metric(m.name)) for m in schema.METRICS.values()),
)


@dataclass(frozen=True)
class Line:
    """One metric of one benchmark across the runs, with each later run's ratio to the first."""

    group: str
    name: str
    metric: CompareMetric
    values: tuple[float | None, ...]

    def ratio(self, index: int) -> float | None:
        """Run ``index``'s value over the first run's; ``None`` when either is missing or zero."""
        first, value = self.values[0], self.values[index]
        if first is None or value is None or first == 0:
            return None
        return value / first

    def verdict(self, index: int) -> str:
        """``better``, ``worse`` or ``same`` (within 1 %) for run ``index`` against the first."""
        ratio = self.ratio(index)
        if ratio is None:
            return ""
        if abs(ratio - 1) < SAME_WITHIN:
            return "same"
        worse = ratio > 1 if self.metric.better == "lower" else ratio < 1
        return "worse" if worse else "better"


@dataclass(frozen=True)
class Comparison:
    """Every line, the benchmarks not in every run, and what differs about the machines."""

    runs: tuple[StoredRun, ...]
    lines: tuple[Line, ...]
    missing: tuple[str, ...]
    hardware: tuple[str, ...]


def compare_runs(runs: Sequence[StoredRun]) -> Comparison:
    """Pair the runs' benchmarks by full name and collect every metric that any run has."""
    if len(runs) < 2:
        raise ValueError(f"compare needs at least two runs, got {len(runs)}")
    by_run = [{b.fullname: b for b in run.benchmarks} for run in runs]
    order: dict[str, StoredBenchmark] = {}
    for mapping in by_run:
        for fullname, bench in mapping.items():
            order.setdefault(fullname, bench)
    missing = []
    for fullname in order:
        absent = [runs[i].path.name for i, mapping in enumerate(by_run) if fullname not in mapping]
        if absent:
            missing.append(f"{fullname}: not in {', '.join(absent)}")
    groups = list(dict.fromkeys(group_name(b.group, b.name) for b in order.values()))
    lines = []
    for group in groups:
        members = sorted((b for b in order.values() if group_name(b.group, b.name) == group), key=_sort_key)
        for bench in members:
            present = [mapping.get(bench.fullname) for mapping in by_run]
            for metric in METRICS:
                values = tuple(None if b is None else metric.read(b) for b in present)
                if any(v is not None for v in values):
                    lines.append(Line(group, bench.name, metric, values))
    return Comparison(tuple(runs), tuple(lines), tuple(missing), tuple(hardware_differences(runs)))


def _sort_key(bench: StoredBenchmark) -> tuple[Any, ...]:
    """Batch size first (from the record, else a ``batch_size`` parameter), then the other
    parameters (numbers before text), then the target and the name."""
    batch = bench.record.batch_size if bench.record is not None else bench.params.get("batch_size")
    # Numbers are compared as they are: float() of a parameter of hundreds of digits overflows, and
    # int and float compare exactly; NaN sorts anywhere but never raises.
    params = tuple(
        (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v))
        for k, v in sorted(bench.params.items())
        if k != "batch_size"
    )
    batch_key = (0, batch) if isinstance(batch, (int, float)) and not isinstance(batch, bool) else (1, 0)
    target = bench.record.target if bench.record is not None else ""
    return (batch_key, params, target, bench.name)


def machine_summary(machine_info: Mapping[str, Any]) -> dict[str, str]:
    """What identifies the hardware of a run: the CPU, and each accelerator target's device name."""
    out: dict[str, str] = {}
    cpu = machine_info.get("cpu")
    if isinstance(cpu, Mapping) and cpu.get("brand_raw"):
        out["cpu"] = str(cpu["brand_raw"])
    ipu = machine_info.get(schema.NAMESPACE)
    backends = ipu.get("backends") if isinstance(ipu, Mapping) else None
    if isinstance(backends, Mapping):
        for target, described in sorted(backends.items()):
            if isinstance(described, Mapping) and described.get("device_name"):
                out[str(target)] = str(described["device_name"])
    return out


def hardware_differences(runs: Sequence[StoredRun]) -> list[str]:
    """One line per later run whose hardware differs from the first run's (by CPU or device name)."""
    first = machine_summary(runs[0].machine_info)
    notes = []
    for run in runs[1:]:
        other = machine_summary(run.machine_info)
        diffs = [
            f"{key} {first[key]!r} vs {other[key]!r}"
            for key in sorted(set(first) & set(other))
            if first[key] != other[key]
        ]
        if diffs:
            notes.append(
                f"{run.path.name} ran on different hardware from {runs[0].path.name}: {'; '.join(diffs)}"
            )
    return notes


def check_gates(comparison: Comparison, gate_list: Sequence[gates.Gate]) -> list[decide.Verdict]:
    """Every gate on every benchmark with a record, each later run against the first run, with the
    runs before it as its history (the module docstring has the rule); ``decide.GateRunner`` decides.

    Benchmarks missing from the first run and runs on other hardware are in the comparison's
    ``missing`` and ``hardware`` notes.
    """
    runs = comparison.runs
    verdicts: list[decide.Verdict] = []
    for index, run in enumerate(runs[1:], start=1):
        runner = decide.GateRunner(history=runs[:index], run_gates=gate_list, baseline=runs[0])
        measured = [
            Measured(
                bench.fullname,
                bench.name if len(runs) == 2 else f"{bench.name} ({run.path.name})",
                group_name(bench.group, bench.name),
                bench.record,
                bench.samples_s or (),
            )
            for bench in run.benchmarks
            if bench.record is not None
        ]
        verdicts.extend(runner.check(measured).verdicts)
    return verdicts


#: The gates' summary when gates were given and no benchmark could be checked: a failure, as in
#: ``pytest-ipu ab`` (``ab.gate_lines``), since a gate that checked nothing guards nothing.
NOTHING_CHECKED = (
    "gates: nothing was checked: no benchmark with a pytest-ipu record is in both the first run and "
    "a later one (compare runs of the same benchmarks)"
)


def gate_lines(gate_list: Sequence[gates.Gate], verdicts: Sequence[decide.Verdict]) -> list[str]:
    """The gates' summary line, then each failed verdict's line; empty when no gate was given."""
    if not gate_list:
        return []
    if not verdicts:
        return [NOTHING_CHECKED]
    failed = [v for v in verdicts if not v.passed]
    return [f"gates: {len(verdicts)} checked, {len(failed)} failed", *(v.line() for v in failed)]


def exit_code(
    comparison: Comparison, gate_list: Sequence[gates.Gate], verdicts: Sequence[decide.Verdict], strict: bool
) -> int:
    """0 when every gate passed; 1 when one failed, when gates were given but none was checked, or
    (``strict``) when a benchmark is missing from a run."""
    if any(not v.passed for v in verdicts) or (gate_list and not verdicts):
        return 1
    return 1 if strict and comparison.missing else 0


# -- rendering ------------------------------------------------------------------------------------


def format_value(value: float | None, unit: str) -> str:
    """A value in its unit, scaled for reading (``1.36 ms``, ``2,526 items/s``); ``-`` when absent."""
    if value is None or math.isnan(value):
        return "-"
    return units.format_value(value, unit)


def format_change(line: Line, index: int) -> str:
    """``+12.0% worse``, ``-3.1% better``, ``same`` or ``-``."""
    ratio = line.ratio(index)
    if ratio is None:
        return "-"
    verdict = line.verdict(index)
    return "same" if verdict == "same" else f"{(ratio - 1) * 100:+.1f}% {verdict}"


#: Run files with names longer than this are shown as ``#1``, ``#2``... with a legend.
MAX_LABEL = 24


def run_labels(comparison: Comparison) -> list[str]:
    """Column labels for the runs: their file names when short and distinct, else ``#1``, ``#2``..."""
    names = [run.path.name for run in comparison.runs]
    if len(set(names)) == len(names) and all(len(n) <= MAX_LABEL for n in names):
        return names
    return [f"#{i + 1}" for i in range(len(names))]


def _legend(comparison: Comparison) -> list[str]:
    labels = run_labels(comparison)
    if labels == [run.path.name for run in comparison.runs]:
        return []
    return [f"{label} = {run.path}" for label, run in zip(labels, comparison.runs, strict=True)]


def _cells(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    names = run_labels(comparison)
    header = ["group", "benchmark", "metric", *names]
    header += [f"{name} vs {names[0]}" for name in names[1:]]
    rows = []
    for line in comparison.lines:
        values = [format_value(v, line.metric.unit) for v in line.values]
        changes = [format_change(line, i) for i in range(1, len(line.values))]
        rows.append([line.group, line.name, line.metric.name, *values, *changes])
    return header, rows


def render_table(comparison: Comparison) -> str:
    """The terminal table: aligned columns, one line per benchmark and metric."""
    header, rows = _cells(comparison)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = [False, False, False] + [True] * (len(header) - 3)
    out = []
    for n, row in enumerate([header, *rows]):
        out.append(
            "  ".join(
                c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right, strict=True)
            ).rstrip()
        )
        if n == 0:
            out.append("-" * len(out[0]))
    return "\n".join(_legend(comparison) + out + _notes(comparison))


def render_markdown(comparison: Comparison) -> str:
    """A GitHub-flavoured markdown table (pipes escaped), with the notes as a list below it."""
    header, rows = _cells(comparison)
    out = [f"{line}  " for line in _legend(comparison)]  # two spaces: a markdown line break
    out += markdown_table(header, rows, left=3)
    notes = _notes(comparison)
    if notes:
        out += [""] + [f"- {n}" for n in notes]
    return "\n".join(out)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int) -> list[str]:
    """A markdown table's lines: the first ``left`` columns aligned left, the numbers right; a ``|``
    inside a cell escaped."""

    def row(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    rule = "|" + "|".join("---" if i < left else "---:" for i in range(len(header))) + "|"
    return [row(header), rule, *(row(r) for r in rows)]


def render_csv(comparison: Comparison) -> str:
    """CSV with raw SI values (no scaling) and the ratios as numbers, for spreadsheets and scripts."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    names = [run.path.name for run in comparison.runs]
    writer.writerow(
        ["group", "benchmark", "metric", "unit", "better", *names, *[f"{n}/{names[0]}" for n in names[1:]]]
    )
    for line in comparison.lines:
        ratios = [line.ratio(i) for i in range(1, len(line.values))]
        writer.writerow(
            [
                line.group,
                line.name,
                line.metric.name,
                line.metric.unit,
                line.metric.better,
                *("" if v is None else repr(float(v)) for v in line.values),
                *("" if r is None else repr(r) for r in ratios),
            ]
        )
    return buffer.getvalue().rstrip("\n")


def _notes(comparison: Comparison) -> list[str]:
    notes = [f"missing: {m}" for m in comparison.missing]
    notes += [f"hardware: {h}" for h in comparison.hardware]
    return notes


RENDERERS: Mapping[str, Callable[[Comparison], str]] = {
    "table": render_table,
    "markdown": render_markdown,
    "csv": render_csv,
}
