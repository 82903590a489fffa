"""The terminal's training tables: time to train, and the merged launch of a torchrun run.

``time_to_train_lines`` lists each time-to-train benchmark's olympic average with its runs and
spread (the main table shows its runs as rounds). ``launch_lines`` is what rank 0 of a torchrun
launch prints once it has merged every rank's results: the launch's samples/s over the common
window beside the sum of the ranks' own rates, the slowest rank's step latency, the global batch,
and the scaling efficiency against ``--ipu-scaling-baseline``.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from pytest_ipu.measure.units import format_number
from pytest_ipu.measure.units import format_value
from pytest_ipu.report.table import Table
from pytest_ipu.results.records import IpuRecord


def _rate(value: float) -> str:
    """Three significant figures (``10.8``), whole with separators from 1,000 (``43,436``)."""
    return format_number(value)


def time_to_train_lines(measured: Sequence[tuple[str, IpuRecord]]) -> list[str]:
    """The "time to train" table of ``(name, record)`` pairs (records without the part are left out)."""
    rows = []
    for name, record in measured:
        ttt = record.time_to_train
        if ttt is None:
            continue
        reached = sum(r.reached for r in ttt.runs)
        sign = ">=" if ttt.higher_is_better else "<="
        speedup = "-"
        if record.scaling is not None and record.scaling.time_to_train_speedup is not None:
            speedup = f"{record.scaling.time_to_train_speedup:.2f}x"
        rows.append(
            [
                name,
                f"{ttt.quality} {sign} {ttt.quality_target:g}",
                str(ttt.processes),
                f"{reached}/{len(ttt.runs)}",
                format_value(ttt.olympic_s, "s"),
                f"{format_value(ttt.min_s, 's')}..{format_value(ttt.max_s, 's')}",
                "-" if ttt.cv is None else f"{ttt.cv:.1%}",
                _rate(record.throughput_items_per_s),
                speedup,
            ]
        )
    if not rows:
        return []
    header = ["benchmark", "target", "procs", "reached", "olympic", "min..max", "cv", "samples/s", "speed-up"]
    return [
        "time to train (MLPerf timing: set-up untimed, training and evaluation timed to the target)",
        *Table(header, rows, [False, False, *[True] * (len(header) - 2)]).grid(),
        "olympic = mean of the runs left once the fastest and slowest are dropped (3 runs or more); "
        "every run's seed and quality curve are in the record",
    ]


def launch_lines(
    count: int, nodes: int, path: str, merged: Sequence[tuple[str, Mapping[str, Any]]]
) -> list[str]:
    """Rank 0's table of a torchrun launch's merged records (JSON ``extra_info["ipu"]`` objects)."""
    rows = []
    for name, record in merged:
        training = record.get("training") or {}
        scaling = record.get("scaling") or {}
        rate = float(record["throughput_items_per_s"])
        summed = record.get("sum_of_ranks_items_per_s")
        rows.append(
            [
                name,
                _rate(rate),
                "-" if summed is None else _rate(float(summed)),
                format_value(float(record["latency_s"]["p50"]), "s"),
                str(training.get("global_batch", "-")),
                "-"
                if not scaling
                else f"{float(scaling['efficiency']):.1%} vs {scaling['baseline_processes']}",
                "-"
                if scaling.get("time_to_train_speedup") is None
                else f"{scaling['time_to_train_speedup']:.2f}x",
            ]
        )
    if not rows:
        return []
    header = ["benchmark", "samples/s", "sum of ranks", "slowest p50", "global batch", "eff", "ttt speed-up"]
    return [
        f"torchrun launch: {count} rank(s) on {nodes} node(s), merged into {path}",
        *Table(header, rows, [False, *[True] * (len(header) - 1)]).grid(),
        "samples/s = every rank's samples over the common window (the windows open and close at barriers); "
        "eff = samples/s / (N/N0 x the baseline's), ttt speed-up = the baseline's olympic time to train / "
        "this launch's (--ipu-scaling-baseline)",
    ]
