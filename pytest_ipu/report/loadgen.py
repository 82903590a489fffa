"""The LoadGen table: MLPerf LoadGen benchmarks (``ipu_loadgen``), apart from the benchmark tables.

A LoadGen benchmark's "calls" are LoadGen's queries and its verdict is LoadGen's, so the benchmark
table's marks (``^``: items/s far from batch / p50, ``*``: too few rounds) say nothing about it:
``pytest_ipu.report.terminal.tables`` hands its rows here. The terminal and the HTML report show the
same cells (``HEADERS``, ``cells``) and the same lines under the table (``notes``): every INVALID
verdict with LoadGen's reasons, where LoadGen's own logs are, and why no row is an MLPerf submission.

The standard library only, like the other terminal tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath

from pytest_ipu.measure.units import format_number
from pytest_ipu.measure.units import format_value
from pytest_ipu.report.table import Table
from pytest_ipu.report.text import left_out
from pytest_ipu.results.loadgen import LoadgenRecord
from pytest_ipu.results.records import IpuRecord

TITLE = "LoadGen (MLPerf LoadGen's verdict and figures; latency per query, from its scheduled issue)"

#: The table's columns; every one after ``verdict`` is right-aligned (numbers).
HEADERS = (
    "benchmark",
    "target",
    "scenario",
    "verdict",
    "samples/s",
    "Server QPS",
    "p50",
    "p99",
    "host CPU/item",
    "host cores",
    "early stop",
    "probes",
    "MLPerf compliant",
)
#: The columns aligned to the left (text).
TEXT_HEADERS = frozenset(("benchmark", "target", "scenario", "verdict"))

#: Why the search stopped, when it did not converge (``PeakSearch.ended``): the peak is then a bound.
_UNCONVERGED = {
    "probes": "ran its most probes before converging: the true peak may be higher",
    "budget": "ran out of time before converging: the true peak may be higher",
}


def verdict(part: LoadgenRecord) -> str:
    """``VALID``, ``INVALID``, or ``accuracy`` for an accuracy run (LoadGen gives it no verdict)."""
    if part.valid is None:
        return "accuracy"
    return "VALID" if part.valid else "INVALID"


def _target(record: IpuRecord, part: LoadgenRecord) -> str:
    """``popart:ipu x2`` when the batches were spread over two instances; ``[sim]`` for a simulator."""
    count = part.batching.instances
    return record.target + (f" x{count}" if count > 1 else "") + (" [sim]" if record.simulator else "")


def cells(name: str, record: IpuRecord) -> list[str]:
    """One row of the table, in ``HEADERS`` order, for a record with a ``loadgen`` part."""
    part = record.loadgen
    if part is None:
        raise ValueError(f"{name}: the record has no loadgen part; only ipu_loadgen benchmarks have a row")
    qps = part.server_qps
    rate = part.samples_per_s
    early = part.early_stopping_latency_s if part.scenario in ("SingleStream", "MultiStream") else None
    return [
        name,
        _target(record, part),
        part.scenario,
        verdict(part),
        "-" if rate is None else format_number(rate),
        "-" if qps is None else format_number(qps),
        format_value(part.latency("p50"), "s"),
        format_value(part.latency("p99"), "s"),
        # The LoadGen run's host cost (per sample answered; cores over the run); n/m for a record
        # written before it was measured, never a 0.
        "n/m"
        if record.cpu is None or record.cpu.host_per_item_s is None
        else format_value(record.cpu.host_per_item_s, "s"),
        "n/m"
        if record.cpu is None or record.cpu.host_cores is None
        else format_number(record.cpu.host_cores),
        format_value(early, "s"),
        "-" if part.peak is None else str(len(part.peak.probes)),
        "yes" if part.mlperf_compliant else "no",
    ]


def _logs(measured: Sequence[tuple[str, LoadgenRecord]]) -> str:
    """Where LoadGen's logs are: one folder with a sub-folder per benchmark when they share one
    (as they do beside ``--benchmark-json``), else each benchmark's folder."""
    dirs = [part.log_dir for _, part in measured]
    parents = {str(PurePath(d).parent) for d in dirs}
    files = "mlperf_log_summary.txt, mlperf_log_detail.txt"
    if len(parents) == 1 and len(dirs) > 1:
        names = ", ".join(PurePath(d).name for d in dirs)
        return f"LoadGen's logs ({files}): {parents.pop()}/, a folder per benchmark: {names}"
    return f"LoadGen's logs ({files}): " + "; ".join(f"{name}: {part.log_dir}" for name, part in measured)


def _short(reason: str) -> str:
    """A compliance reason without its explanation (what follows its colon): the record has it whole."""
    return reason.split(": ", 1)[0]


def _compliance(measured: Sequence[tuple[str, LoadgenRecord]]) -> list[str]:
    """The footnote of the MLPerf column: no row is a submission; why the rows are not compliant,
    the reasons every such row shares once, then each row's first other reason."""
    lines = [
        "MLPerf compliant = whether the settings and LoadGen's verdict meet MLPerf's rules; no row is an "
        "MLPerf submission (that also needs the accuracy run, MLPerf's compliance tests and its review)"
    ]
    failing = [(name, part.compliance_reasons) for name, part in measured if not part.mlperf_compliant]
    if not failing:
        return lines
    shared = [r for r in failing[0][1] if all(r in reasons for _, reasons in failing)]
    lines.append("not MLPerf-compliant (every reason is in the record's loadgen.compliance_reasons):")
    if shared:
        every = "every row" if len(failing) == len(measured) else 'every "no" row'
        lines.append(f"  {every}: " + "; ".join(_short(r) for r in shared))
    for name, reasons in failing:
        rest = [r for r in reasons if r not in shared]
        if rest:
            more = f" (+{len(rest) - 1} more)" if len(rest) > 1 else ""
            lines.append(f"  {name}: {_short(rest[0])}{more}")
    return lines


def notes(measured: Sequence[tuple[str, IpuRecord]]) -> list[str]:
    """The lines under the table: each INVALID verdict with LoadGen's reasons, a peak search that
    found no VALID rate or did not converge, accuracy scores, LoadGen's errors, the ``xN`` and
    ``[sim]`` marks, where LoadGen's logs are, and the MLPerf footnote. Empty for no LoadGen record."""
    parts = [(name, record.loadgen) for name, record in measured if record.loadgen is not None]
    if not parts:
        return []
    lines: list[str] = []
    for name, part in parts:
        if part.valid is False:
            lines.append(f"INVALID: {name}: " + "; ".join(part.invalid_reasons or ("no reason logged",)))
        peak = part.peak
        if peak is not None and peak.peak_qps is None:
            lines.append(f"no Server QPS: {name}: {part.why_no_server_qps()}")
        elif peak is not None and peak.ended in _UNCONVERGED:
            lines.append(f"peak search: {name}: {_UNCONVERGED[peak.ended]}")
        if part.accuracy is not None:
            lines.append(f"accuracy: {name}: {part.accuracy_name or 'score'} {part.accuracy:g}")
        if part.errors:
            lines.append(f"LoadGen errors: {name}: " + "; ".join(part.errors))
    if any(part.batching.instances > 1 for _, part in parts):
        lines.append(
            "xN = the batches were spread over N instances of the model: the figures are all of them"
        )
    if any(record.simulator for _, record in measured if record.loadgen is not None):
        lines.append("[sim] = a simulator (the IPU Model): its timings are not hardware timings")
    lines.append(
        "Server QPS = the peak search's highest VALID rate (or a VALID Server run's); "
        "early stop = LoadGen's early-stopping estimate of the target percentile"
    )
    lines.append(
        "host CPU/item, host cores = the host's CPU time over the LoadGen run (every thread of this "
        "process, and the instance worker processes), per sample answered and over the run's wall time"
    )
    unmeasured = {
        record.why_missing("host_cores"): None
        for _, record in measured
        if record.loadgen is not None and record.value("host_cores") is None
    }
    lines.extend(f"host n/m = host cost not measured: {why}" for why in unmeasured)
    lines.append(_logs(parts))
    lines.extend(_compliance(parts))
    return lines


#: The columns a LoadGen table narrower than its rows may leave out, the first to go first.
DROP_ORDER = ("probes", "early stop", "host cores", "MLPerf compliant", "target")


def loadgen_lines(measured: Sequence[tuple[str, IpuRecord]], width: int | None = None) -> list[str]:
    """The LoadGen table of ``(name, record)`` pairs and its notes (records without a ``loadgen``
    part are left out); empty when none has one. Wider than ``width`` characters, it leaves out
    columns of ``DROP_ORDER`` and says which (``Table.fitted``)."""
    rows = [cells(name, record) for name, record in measured if record.loadgen is not None]
    if not rows:
        return []
    table, dropped = Table(HEADERS, rows, [h not in TEXT_HEADERS for h in HEADERS]).fitted(width, DROP_ORDER)
    return [TITLE, *table, *notes(measured), *([] if width is None else left_out(dropped, width))]
