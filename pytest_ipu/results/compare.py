"""``pytest-ipu compare``: saved runs side by side, every metric with its ratio to the first run.

Benchmarks pair by ``fullname``, rows grouped and sorted so that backends sit side by side. Each later
run's change gets a verdict (``Line.verdict``, by ``judge``: ``not tested``, ``same``, ``better`` /
``worse``, ``within noise``, decided in that order) from the gates' variance estimate
(``decide.evidence``), its two-sided ``1 - ALPHA`` interval (``Line.interval``) against the
``SAME_WITHIN`` band; ``pytest-ipu ab``'s change column uses the same ``judge``. ``--gate`` runs
``decide.GateRunner`` with the last run as the candidate and every run before it as its history, all
verdicts one job (``family``, ``job_summary``). This module finds the comparison and its ``notes``;
``report/compare.py`` writes it as a terminal table, markdown or CSV.

The rule is documented in docs/ci.md (section "Comparing saved runs").
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from pytest_ipu.measure import units
from pytest_ipu.results import decide
from pytest_ipu.results import family
from pytest_ipu.results import formats
from pytest_ipu.results import gates
from pytest_ipu.results import job_summary
from pytest_ipu.results import level_shift
from pytest_ipu.results import schema
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.gated import Candidate
from pytest_ipu.results.plain import PlainBenchmark
from pytest_ipu.results.plain import PlainMeasured
from pytest_ipu.results.plain import cpu_name
from pytest_ipu.results.plain import gated
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import Measured
from pytest_ipu.results.records import group_name

#: The band of "same": a change whose whole interval lies within +/- this (relative) is too small to
#: matter (the module docstring's rule).
SAME_WITHIN = 0.01
#: Significance level of the verdicts' test of "no change": the gates' default level.
ALPHA = 0.01
FORMATS = formats.TABLES

#: The verdict words, in the order the module docstring defines them.
SAME = "same"
BETTER = "better"
WORSE = "worse"
WITHIN_NOISE = "within noise"
NOT_TESTED = "not tested"


@dataclass(frozen=True)
class CompareMetric:
    """A number every benchmark may have: its name, unit, how to read it, and how to read its value
    in each independent repeat (the evidence of a change)."""

    name: str
    unit: str
    read: Callable[[StoredBenchmark], float | None]
    read_repeats: Callable[[StoredBenchmark], tuple[float, ...]]

    @property
    def better(self) -> units.Better:
        """``lower`` or ``higher``, as the unit has it."""
        return units.UNITS[self.unit].better


def _time_stat(key: str) -> Callable[[StoredBenchmark], float | None]:
    return lambda bench: bench.stats.get(key)


def _time_stat_repeats(key: str) -> Callable[[StoredBenchmark], tuple[float, ...]]:
    # pytest-benchmark's statistics are of one run: one value, as a record before repeats is.
    return lambda bench: () if bench.stats.get(key) is None else (bench.stats[key],)


def _record_metric(name: str) -> Callable[[StoredBenchmark], float | None]:
    return lambda bench: None if bench.record is None else bench.record.value(name)


def _record_repeats(name: str) -> Callable[[StoredBenchmark], tuple[float, ...]]:
    return lambda bench: () if bench.record is None else bench.record.repeat_values(name)


#: pytest-benchmark's time statistics: shown only for a benchmark that some run has without a record.
TIME_METRICS: tuple[CompareMetric, ...] = tuple(
    CompareMetric(f"time.{k}", "s", _time_stat(k), _time_stat_repeats(k))
    for k in ("min", "median", "mean", "max")
)
#: The metrics of a pytest-ipu record (``catalog.METRICS``).
RECORD_METRICS: tuple[CompareMetric, ...] = tuple(
    CompareMetric(m.name, m.unit, _record_metric(m.name), _record_repeats(m.name))
    for m in schema.METRICS.values()
)
METRICS: tuple[CompareMetric, ...] = (*TIME_METRICS, *RECORD_METRICS)
#: Every metric by name (``time.*`` and the registry's), as ``pytest-ipu history --metric`` names them.
METRIC_BY_NAME: Mapping[str, CompareMetric] = {m.name: m for m in METRICS}


@dataclass(frozen=True)
class Line:
    """One metric of one benchmark across the runs, with each later run's ratio to the first and
    the verdict on it; ``repeats`` holds each run's repeat values (empty where the run lacks it)."""

    group: str
    name: str
    metric: CompareMetric
    values: tuple[float | None, ...]
    repeats: tuple[tuple[float, ...], ...] = ()
    #: Each run's evidence once found: its cell, its p, the CSV and the notes under the table all ask.
    _found: dict[int, decide.Evidence | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def ratio(self, index: int) -> float | None:
        """Run ``index``'s value over the first run's; ``None`` when either is missing or zero."""
        first, value = self.values[0], self.values[index]
        if first is None or value is None or first == 0:
            return None
        return value / first

    def evidence(self, index: int) -> decide.Evidence | None:
        """The variance estimate of run ``index``'s change, as a gate would have it: the runs before
        it (the first included) as its history, else both sides' repeats; ``None`` when there is none."""
        if index not in self._found:
            value = self.values[index]
            found = None
            if value is not None and self.values[0] is not None:
                history = [v for v in self.values[:index] if v is not None]
                found = decide.evidence(value, self._repeats(index), self._repeats(0), history)
            self._found[index] = found
        return self._found[index]

    def _repeats(self, index: int) -> tuple[float, ...]:
        return self.repeats[index] if self.repeats else ()

    def p_value(self, index: int) -> float | None:
        """The two-sided p of "no change" for run ``index``; ``None`` without a variance estimate."""
        found = self.evidence(index)
        return None if found is None else found.p_change()

    def interval(self, index: int) -> tuple[float, float] | None:
        """The two-sided ``1 - ALPHA`` interval of run ``index``'s change as a ratio (of the same
        evidence and test as ``verdict``); ``None`` without a variance estimate."""
        found = self.evidence(index)
        return None if found is None else found.interval(ALPHA)

    def verdict(self, index: int) -> str:
        """Run ``index`` against the first: ``same``, ``better``, ``worse``, ``within noise`` or ``not
        tested`` (``judge``, the module docstring's rule); empty when there is no ratio to judge."""
        if self.ratio(index) is None:
            return ""
        found = self.evidence(index)
        if found is None:
            return NOT_TESTED
        return judge(found.interval(ALPHA), found.p_change(), ALPHA, self.metric.better)


def judge(interval: tuple[float, float] | None, p: float | None, alpha: float, better: units.Better) -> str:
    """The verdict on a change (the module docstring's rule) from its two-sided ``1 - alpha``
    interval as a ratio and the two-sided p of "no change" of the same test; both ``None`` without
    a variance estimate. ``better`` is the metric's direction. The one owner of the verdicts of
    ``pytest-ipu compare`` and of ``pytest-ipu ab``'s change column."""
    if interval is None or p is None:
        return NOT_TESTED
    low, high = interval
    if low > 1.0 - SAME_WITHIN and high < 1.0 + SAME_WITHIN:
        return SAME
    if p >= alpha:
        return WITHIN_NOISE
    # The interval is exp(shift -+ half): its geometric centre is the change the test measured (with
    # three or more runs before it, against their geometric mean), and says which way it went.
    rose = low * high > 1.0
    worse = rose if better == "lower" else not rose
    return WORSE if worse else BETTER


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
        partial = [
            runs[i].path.name
            for i, mapping in enumerate(by_run)
            if fullname in mapping and mapping[fullname].pending is not None
        ]
        if partial:
            # No gate reads such an entry (plain.gated): said here, once, not left out in silence.
            missing.append(f"{fullname}: only a partial entry in {', '.join(partial)}: not gated there")
    groups = list(dict.fromkeys(group_name(b.group, b.name) for b in order.values()))
    lines = []
    for group in groups:
        members = sorted((b for b in order.values() if group_name(b.group, b.name) == group), key=_sort_key)
        for bench in members:
            present = [mapping.get(bench.fullname) for mapping in by_run]
            # A record's latency figures are the same rounds as pytest-benchmark's time statistics:
            # those are shown only where some run has no record, as the only figures it has.
            plain = any(b is not None and b.record is None for b in present)
            for metric in METRICS if plain else RECORD_METRICS:
                values = tuple(None if b is None else metric.read(b) for b in present)
                values = _alike(values, present, metric.name, [r.path.name for r in runs], missing)
                if any(v is not None for v in values):
                    repeats = tuple(() if b is None else metric.read_repeats(b) for b in present)
                    lines.append(Line(group, bench.name, metric, values, repeats))
    return Comparison(tuple(runs), tuple(lines), tuple(missing), tuple(hardware_differences(runs)))


def _alike(
    values: tuple[float | None, ...],
    present: Sequence[StoredBenchmark | None],
    metric: str,
    names: Sequence[str],
    missing: list[str],
) -> tuple[float | None, ...]:
    """``values`` with those of another definition of ``metric`` than the first run's
    (``catalog.Metric.unlike``: a throughput of the window against one of the median round) left
    out, each with a line in ``missing``: unlike figures are never compared."""
    known = schema.METRICS.get(metric)
    first = present[0].record if present and present[0] is not None else None
    if known is None or known.fallback is None or first is None:
        return values
    kept = list(values)
    for i, bench in enumerate(present[1:], start=1):
        if bench is not None and bench.record is not None and known.unlike(first, bench.record):
            kept[i] = None
            missing.append(
                f"{bench.fullname}: {metric} in {names[i]} is {known.definition(bench.record)}, in "
                f"{names[0]} {known.definition(first)}: unlike figures, not compared"
            )
    return tuple(kept)


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
    cpu = cpu_name(machine_info)
    if cpu is not None:
        out["cpu"] = cpu
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


def check_gates(
    comparison: Comparison,
    gate_list: Sequence[gates.Gate],
    drift: float = decide.DRIFT,
    job_alpha: float = family.JOB_ALPHA,
) -> list[decide.Verdict]:
    """Every gate on every benchmark of the last run that a gate can read (``plain.gated``: a
    pytest-ipu record, or pytest-benchmark's statistics of a plain benchmark), against the runs
    before it as its history (the module docstring has the rule); ``decide.GateRunner`` decides,
    with the run-to-run drift allowance ``drift``; then the job's rule over all of them
    (``family.adjust`` at ``job_alpha``: a FAIL not beyond the threshold at the job's family-wise
    level is INCONCLUSIVE).

    Benchmarks missing from a run and runs on other hardware are in the comparison's ``missing`` and
    ``hardware`` notes.
    """
    *history, last = comparison.runs
    runner = decide.GateRunner(history=history, run_gates=gate_list, drift=drift)
    measured: list[Candidate] = []
    for bench in last.benchmarks:
        figures = gated(bench, last.machine_info)
        if isinstance(figures, IpuRecord):
            group = group_name(bench.group, bench.name)
            measured.append(Measured(bench.fullname, bench.name, group, figures, bench.samples_s or ()))
        elif isinstance(figures, PlainBenchmark):
            measured.append(PlainMeasured(bench.fullname, bench.name, figures))
    outcome = level_shift.check(runner, measured, last.machine_speed)
    return list(family.adjust(outcome.verdicts, job_alpha))


#: The gates' summary when gates were given and no benchmark could be checked: a failure, as in
#: ``pytest-ipu ab`` (``ab.gate_lines``), since a gate that checked nothing guards nothing.
NOTHING_CHECKED = (
    "gates: nothing was checked: no benchmark of the last run is in the runs before it with figures "
    "a gate can read (compare runs of the same benchmarks)"
)


def gate_lines(
    gate_list: Sequence[gates.Gate], verdicts: Sequence[decide.Verdict], verbose: bool = False
) -> list[str]:
    """The gates' summary line, then ``job_summary.lines``: every FAIL, each undecided benchmark
    once, the rest folded (``verbose``: the line of each verdict that is not a PASS); empty when no
    gate was given."""
    if not gate_list:
        return []
    if not verdicts:
        return [NOTHING_CHECKED]
    return [decide.summary(verdicts), *job_summary.lines(verdicts, verbose=verbose)]


def exit_code(
    comparison: Comparison, gate_list: Sequence[gates.Gate], verdicts: Sequence[decide.Verdict], strict: bool
) -> int:
    """``decide.exit_code``: 0 every gate PASS, 1 one FAIL (or gates given but none checked), 3 one
    INCONCLUSIVE and none FAIL; with ``strict``, a benchmark missing from a run is 1 (a failure,
    whatever the verdicts)."""
    if strict and comparison.missing:
        return decide.EXIT_FAIL
    return decide.exit_code(verdicts, bool(gate_list))


# -- what the output says beside the figures ---------------------------------------------------


#: The note under a table that has verdicts: what decides them.
VERDICT_NOTE = (
    f"verdicts: same when the {1 - ALPHA:.0%} interval of the change lies within +/-{SAME_WITHIN:.0%}; "
    f"else better/worse when a two-sided t test of no change gives p < {ALPHA:g} (the spread of 3 or more "
    "runs before it, else of both sides' repeats); within noise otherwise"
)
#: The note when some change had no variance estimate.
NOT_TESTED_NOTE = (
    f"{NOT_TESTED}: no variance estimate (one repeat a side and fewer than {decide.HISTORY_MIN} runs before "
    f"it, or a metric measured once per benchmark): use --ipu-repeats, or compare {decide.HISTORY_MIN + 1} "
    "or more runs"
)


def notes(comparison: Comparison) -> list[str]:
    """The notes under a comparison's table: benchmarks missing from a run, hardware that differs,
    what decides the verdicts and, where a change had no variance estimate, why and what to do."""
    found = [f"missing: {m}" for m in comparison.missing]
    found += [f"hardware: {h}" for h in comparison.hardware]
    verdicts = {line.verdict(i) for line in comparison.lines for i in range(1, len(line.values))}
    # "same" is a claim of the interval too: the note says what backs it.
    if verdicts - {""}:
        found.append(VERDICT_NOTE)
    if NOT_TESTED in verdicts:
        found.append(NOT_TESTED_NOTE)
    return found
