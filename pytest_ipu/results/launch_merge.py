"""The merge of a launch's files: one pytest-benchmark document from every PopRun instance's (or
torchrun rank's) own.

Every process of a launch writes its own ``--benchmark-json`` file (``placement.outputs`` names
them; ``placement.poprun`` and ``placement.torchrun`` say which process this is). ``merge`` (the
``pytest-ipu merge`` command) joins the files of one launch, and ``merge_documents`` the documents
rank 0 of a torchrun launch gathered, into one document whose records aggregate the processes' as
``AGGREGATION`` says. Documents are read and written through ``benchmark_json``, the module that
knows their layout; which classes a launch's processes say who they are with is the caller's
(``placement.poprun.IDENTITIES``), as those live in the layers above this one.
"""

from __future__ import annotations

import copy
import json
import math
import typing
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ipu.backports import zip_strict

# This module reads and writes result files: its modules (the schema and its readers) are imported
# by the functions that need them, so importing it (as placement's launch modules do) costs nothing.

#: Where an instance's ``as_json()`` goes: ``machine_info["ipu"][KEY]`` and each record's ``KEY``.
KEY = "poprun"
#: Where a torchrun rank's ``as_json()`` goes: ``machine_info["ipu"][TORCHRUN_KEY]`` and each record's.
TORCHRUN_KEY = "torchrun"

#: The class each launcher's processes say which they are with, by the launcher's key (``KEY``,
#: ``TORCHRUN_KEY``): built from a file's section (``cls(**section)``), it raises ``TypeError``
#: or ``ValueError`` for one that no process of a launch can have.
Identities = typing.Mapping[str, typing.Callable[..., object]]

#: Record fields that must agree across instances for their benchmarks to be one benchmark.
_SAME_ACROSS_INSTANCES = ("target", "precision", "batch_size", "items_per_call")

#: How the merged record's numbers were made; stored with it so no reader has to guess.
AGGREGATION: Mapping[str, str] = {
    "throughput_items_per_s": (
        "every instance's items over the launch's window (window_s): PopRun's instances are not "
        "synchronised, so each repeat's window runs from the first instance's opening to the last "
        "one's closing (their wall-clock edges, start_unix_s); sum_of_instances_items_per_s is the "
        "sum of the instances' own rates, which overstates the launch's rate as far as their windows "
        "do not overlap (window_overlap)"
    ),
    "window_s": (
        "the launch's window: per repeat, the span from the earliest instance window's opening to the "
        "latest one's closing, summed over the repeats (window_rule: 'common span'); for files without "
        "the window edges, the longest instance window per repeat, as Graphcore's PopRun inference "
        "benchmark takes the longest elapsed time per step (window_rule: 'longest window')"
    ),
    "window_overlap": (
        "the share of the launch's window in which every instance's window was open (1: they ran "
        "side by side throughout); null without the window edges"
    ),
    "rounds": "the timed rounds of all instances together",
    "median_throughput_items_per_s": (
        "not kept: each instance's median round is its own, so the throughput metric of a launch reads "
        "its window's figure (throughput_items_per_s)"
    ),
    "latency_s": (
        "per statistic, the worst (largest) value of any instance; each instance's own summary is in "
        "its record under poprun.instances"
    ),
    "latency_worst_instance_p50_s": "the largest p50 latency of any instance",
    "latency_worst_instance_p99_s": "the largest p99 latency of any instance",
    "cpu": (
        "per figure, the largest value of any instance (each a process of its own), but for the host "
        "cost: host_cores is the sum over instances (the cores the launch kept busy, as far as the "
        "windows overlap) and host_per_item_s every instance's CPU time over every instance's items; "
        "null unless every instance has one"
    ),
    "counts": (
        "per count, where any instance did not count it, the first such instance's reason; a count "
        "read over windows (host_instructions) every instance's total over every instance's calls "
        "(each counted its own processes); a count read call by call (ipu_cycles) instance 0's"
    ),
    "power": "not merged (instances may share a power source); see each instance's record",
    "stats": "pytest-benchmark's stats of this benchmark are instance 0's, not merged",
    "other fields": "instance 0's",
}


#: torchrun's merged records: the ranks' windows are aligned by barriers (``placement.torchrun``), so
#: the launch's rate is every rank's samples over the common window.
TORCHRUN_AGGREGATION: Mapping[str, str] = {
    **AGGREGATION,
    "throughput_items_per_s": (
        "every rank's items over the common window (the longest rank window); the ranks' timed windows "
        "open and close at barriers, so they are one window; sum_of_ranks_items_per_s is the sum of the "
        "ranks' own rates, for comparison"
    ),
    "latency_s": (
        "per statistic, the slowest rank's value; each rank's own summary is in its record under "
        "torchrun.instances"
    ),
    "time_to_train": (
        "rank 0's: the ranks train in step and each rank's record already counts every rank's samples "
        "(its throughput is the launch's, not summed again)"
    ),
}


class MergeError(ValueError):
    """Files that cannot be merged; the one-line message names the file and the problem."""


@dataclass(frozen=True)
class _Run:
    path: Path
    data: dict[str, Any]
    identity: dict[str, Any]
    benchmarks: dict[str, dict[str, Any]]
    #: The launcher that wrote it: ``poprun`` or ``torchrun`` (the key of its identity).
    kind: str = KEY

    @property
    def index(self) -> int:
        return int(self.identity["index"])

    @property
    def count(self) -> int:
        return int(self.identity["count"])


def merge(paths: Sequence[Path], identities: Identities) -> dict[str, Any]:
    """Merge the per-instance pytest-benchmark JSON files of one PopRun launch into one document.

    The files must hold every instance of one launch exactly once, with the same benchmarks.
    Benchmarks pair by ``fullname``; for each, ``extra_info["ipu"]`` sums the instances'
    throughputs and takes the worst latency, as ``AGGREGATION`` (stored with it) says, and keeps
    each instance's record under ``poprun.instances``. Everything else, including pytest-benchmark's
    ``stats``, is instance 0's. ``identities`` checks each file's instance (``Identities``). Raises
    ``MergeError`` naming the file and the problem.
    """
    if not paths:
        raise MergeError("no input files; pass the JSON file of every instance of the PopRun launch")
    return merge_documents([(Path(p), _load(Path(p))) for p in paths], identities)


def merge_documents(
    documents: Sequence[tuple[Path, dict[str, Any]]], identities: Identities
) -> dict[str, Any]:
    """``merge`` of documents already read (each with the path it is known by): what rank 0 of a
    torchrun launch does with the documents it gathered. The files of a torchrun launch (each rank's
    ``machine_info["ipu"]["torchrun"]``) merge the same way, with ``TORCHRUN_AGGREGATION``."""
    from pytest_ipu.results import benchmark_json

    if not documents:
        raise MergeError("no input files; pass the JSON file of every instance of the launch")
    runs = [_parse(path, data, identities) for path, data in documents]
    ordered = _check_launch(runs)
    kind = ordered[0].kind
    first = ordered[0]
    merged = copy.deepcopy(first.data)
    benchmarks = [_merged_entry(bench, ordered, kind) for bench in benchmark_json.entries(first.data)]
    benchmark_json.set_entries(merged, benchmarks)
    ipu_info = benchmark_json.own_ipu_machine_info(merged)
    ipu_info[kind] = {
        "merged": True,
        "count": first.count,
        "files": [str(run.path) for run in ordered],
        "hosts": [_host(run.data) for run in ordered],
        "instances": [run.identity for run in ordered],
        "machine_info": "instance 0's; each instance's host is under hosts",
        "stats": AGGREGATION["stats"],
    }
    if kind != KEY:
        ipu_info[kind]["nodes"] = len({run.identity.get("node") for run in ordered})
    return merged


def _merged_entry(bench: dict[str, Any], ordered: list[_Run], kind: str) -> dict[str, Any]:
    """The launch's entry of the benchmark ``bench`` (instance 0's entry): every instance's
    pytest-ipu record merged into one (``_merge_records``), where they have one; ``MergeError``
    where only some do, or one cannot be combined."""
    from pytest_ipu.results import benchmark_json

    fullname = bench["fullname"]
    out = copy.deepcopy(bench)
    records = [benchmark_json.ipu_data(run.benchmarks[fullname]) for run in ordered]
    present = [r is not None for r in records]
    if any(present):
        if not all(present):
            lacking = ordered[present.index(False)]
            raise MergeError(
                f"{lacking.path}: benchmark {fullname!r} has no extra_info['ipu'] record, while "
                f"{ordered[present.index(True)].path} has one; merge files of one launch"
            )
        try:
            benchmark_json.set_ipu_data(out, _merge_records(fullname, ordered, records, kind))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, MergeError):
                raise
            # A field the record reader tolerates but the merge cannot combine (a latency
            # statistic that is not a number, a non-string unsupported percentile): one line.
            raise MergeError(
                f"{', '.join(str(r.path) for r in ordered)}: benchmark {fullname!r}: malformed "
                f"extra_info['ipu'] record ({type(exc).__name__}: {exc}); pass the files pytest-ipu "
                "wrote, unedited"
            ) from None
    return out


def _host(data: Mapping[str, Any]) -> object:
    from pytest_ipu.results import benchmark_json

    machine = benchmark_json.machine_info(data)
    return machine.get("node") if machine is not None else None


def _load(path: Path) -> dict[str, Any]:
    from pytest_ipu.results import benchmark_json

    try:
        return benchmark_json.read_document(path)
    except benchmark_json.RunFileError as exc:
        raise MergeError(str(exc)) from None


def _parse(path: Path, data: dict[str, Any], identities: Identities) -> _Run:
    from pytest_ipu.results import benchmark_json
    from pytest_ipu.results import schema

    if not benchmark_json.is_document(data):
        raise MergeError(f"{path}: not a pytest-benchmark document (no benchmarks list)")
    kind, identity = _identity(path, data, identities)
    benchmarks: dict[str, dict[str, Any]] = {}
    for position, bench in enumerate(benchmark_json.entries(data)):
        if not isinstance(bench, dict) or not isinstance(bench.get("fullname"), str):
            raise MergeError(f"{path}: benchmarks[{position}] is not a pytest-benchmark benchmark object")
        if benchmark_json.extra_info(bench) is None:
            raise MergeError(f"{path}: benchmark {bench['fullname']!r}: extra_info is not an object")
        if bench["fullname"] in benchmarks:
            raise MergeError(f"{path}: benchmark {bench['fullname']!r} appears twice; pass unmerged files")
        record = benchmark_json.ipu_data(bench)
        if record is not None:
            try:  # every check of a record, its latency percentiles among them
                schema.from_json(record)
            except schema.SchemaError as exc:
                raise MergeError(f"{path}: benchmark {bench['fullname']!r}: {exc}") from None
            if isinstance(record.get(kind), dict) and record[kind].get("merged"):
                raise MergeError(
                    f"{path}: benchmark {bench['fullname']!r} is already merged; pass unmerged files"
                )
        benchmarks[bench["fullname"]] = bench
    return _Run(path, data, identity, benchmarks, kind)


def _identity(path: Path, data: dict[str, Any], identities: Identities) -> tuple[str, dict[str, Any]]:
    """The launcher (``poprun`` or ``torchrun``) and the instance's or rank's ``as_json()``: from
    ``machine_info["ipu"][launcher]``, else its records; checked by the launcher's class in
    ``identities``."""
    from pytest_ipu.results import benchmark_json

    ipu_info = benchmark_json.ipu_machine_info(data)
    if isinstance(ipu_info, dict) and ipu_info.get(TORCHRUN_KEY) is not None:
        found = ipu_info[TORCHRUN_KEY]
        if not isinstance(found, dict):
            raise MergeError(f"{path}: machine_info['ipu']['torchrun'] is not an object")
        if found.get("merged"):
            raise MergeError(f"{path}: already a merged file; pass the files of the ranks")
        try:
            identities[TORCHRUN_KEY](**found)
        except (TypeError, ValueError) as exc:
            raise MergeError(f"{path}: malformed machine_info['ipu']['torchrun']: {exc}") from None
        return TORCHRUN_KEY, dict(found)
    found = ipu_info.get(KEY) if isinstance(ipu_info, dict) else None
    if found is None:
        from_records = {
            json.dumps(r[KEY], sort_keys=True) for _, r in benchmark_json.ipu_entries(data) if KEY in r
        }
        if len(from_records) > 1:
            raise MergeError(f"{path}: its records name different PopRun instances; pass unmerged files")
        found = json.loads(from_records.pop()) if from_records else None
    if found is None:
        raise MergeError(
            f"{path}: not written by a PopRun instance or torchrun rank of pytest-ipu (no "
            "machine_info['ipu']['poprun'] or ['torchrun'] section); pass the files pytest-ipu wrote under "
            "poprun or torchrun"
        )
    if not isinstance(found, dict):
        raise MergeError(f"{path}: machine_info['ipu']['poprun'] is not an object")
    if found.get("merged"):
        raise MergeError(f"{path}: already a merged file; pass the files of the instances")
    try:
        identities[KEY](**found)
    except (TypeError, ValueError) as exc:
        raise MergeError(f"{path}: malformed machine_info['ipu']['poprun']: {exc}") from None
    return KEY, dict(found)


def _check_launch(runs: list[_Run]) -> list[_Run]:
    """The runs in instance order, after checking they are every instance of one launch once."""
    first = runs[0]
    noun = "rank" if first.kind != KEY else "instance"
    launcher = "PopRun" if first.kind == KEY else "torchrun"
    seen: dict[int, _Run] = {}
    for run in runs:
        if run.kind != first.kind:
            raise MergeError(
                f"{run.path}: written under {run.kind}, but {first.path} under {first.kind}: not one launch; "
                "merge files of one launch"
            )
        if run.count != first.count:
            raise MergeError(
                f"{run.path}: written by {noun} {run.index} of {run.count}, but {first.path} by "
                f"{noun} {first.index} of {first.count}: not one {launcher} launch; merge files of one launch"
            )
        if run.index in seen:
            raise MergeError(
                f"{run.path}: {noun} {run.index} of {run.count} again (also {seen[run.index].path}); "
                f"pass each {noun}'s file once"
            )
        seen[run.index] = run
    missing = [i for i in range(first.count) if i not in seen]
    if missing:
        raise MergeError(
            f"{', '.join(str(r.path) for r in runs)}: {noun}(s) {', '.join(map(str, missing))} of "
            f"{first.count} missing; pass the JSON file of every {noun}"
        )
    ordered = [seen[i] for i in range(first.count)]
    names = list(ordered[0].benchmarks)
    for run in ordered[1:]:
        for fullname in names:
            if fullname not in run.benchmarks:
                raise MergeError(
                    f"{run.path}: has no benchmark {fullname!r}, which {ordered[0].path} has; every "
                    f"{noun} must run the same benchmarks"
                )
        extra = [name for name in run.benchmarks if name not in ordered[0].benchmarks]
        if extra:
            raise MergeError(
                f"{run.path}: benchmark {extra[0]!r} is not in {ordered[0].path}; every {noun} must run "
                "the same benchmarks"
            )
    return ordered


def _merge_records(
    fullname: str, runs: list[_Run], records: list[dict[str, Any]], kind: str = KEY
) -> dict[str, Any]:
    """One benchmark's records of every instance (or rank) as the launch's record, each instance's
    own kept under ``kind``."""
    _check_same(fullname, runs, records)
    first = records[0]
    merged = copy.deepcopy(first)
    rates = math.fsum(float(r["throughput_items_per_s"]) for r in records)
    merged["window_s"] = max(float(r["window_s"]) for r in records)
    # Every instance's items, recovered from its rate and window: the numerator of every launch figure.
    items = math.fsum(float(r["throughput_items_per_s"]) * float(r["window_s"]) for r in records)
    launch: LaunchWindow | None = None
    if first.get("time_to_train") is not None:
        # Every rank's time-to-train record already counts the samples of every rank.
        merged["throughput_items_per_s"] = float(first["throughput_items_per_s"])
    elif kind == KEY:
        launch = launch_window(records)
        merged["window_s"] = launch.seconds
        merged["throughput_items_per_s"] = items / launch.seconds if launch.seconds > 0 else rates
        merged["sum_of_instances_items_per_s"] = rates
    else:
        merged["throughput_items_per_s"] = items / merged["window_s"] if merged["window_s"] > 0 else rates
        merged["sum_of_ranks_items_per_s"] = rates
    # Each instance's median round is its own: a launch's rate is its window's figure alone.
    merged.pop("median_throughput_items_per_s", None)
    for repeat in merged.get("repeats") or ():
        if isinstance(repeat, dict):
            repeat.pop("median_throughput_items_per_s", None)
    merged["rounds"] = sum(int(r["rounds"]) for r in records)
    stats = [stat for stat in first["latency_s"] if all(stat in r["latency_s"] for r in records)]
    merged["latency_s"] = {stat: max(float(r["latency_s"][stat]) for r in records) for stat in stats}
    merged["latency_unsupported"] = sorted({p for r in records for p in r.get("latency_unsupported", [])})
    merged["latency_worst_instance_p50_s"] = merged["latency_s"]["p50"]
    merged["latency_worst_instance_p99_s"] = merged["latency_s"]["p99"]
    merged["cpu"] = _merged_cpu(records, items)
    counts = _merged_counts(records)
    merged.pop("counts", None)
    if counts:
        merged["counts"] = counts
    merged["power"] = None
    merged[kind] = {
        "merged": True,
        "count": len(records),
        "aggregation": dict(AGGREGATION if kind == KEY else TORCHRUN_AGGREGATION),
        "instances": [copy.deepcopy(r) for r in records],
    }
    if launch is not None:
        merged[kind].update(window_rule=launch.rule, window_overlap=launch.overlap)
    return merged


def _check_same(fullname: str, runs: Sequence[_Run], records: Sequence[Mapping[str, Any]]) -> None:
    """``MergeError`` where an instance's record of ``fullname`` differs from the first's in what
    every instance of one launch shares (``_SAME_ACROSS_INSTANCES``)."""
    first = records[0]
    for run, record in zip_strict(runs[1:], records[1:]):
        for key in _SAME_ACROSS_INSTANCES:
            if record.get(key) != first.get(key):
                raise MergeError(
                    f"{run.path}: benchmark {fullname!r} has {key}={record.get(key)!r} but {runs[0].path} "
                    f"has {key}={first.get(key)!r}: not the same benchmark; merge files of one launch"
                )


@dataclass(frozen=True)
class LaunchWindow:
    """The window of a launch whose instances time their own windows, unsynchronised."""

    #: The launch's window, seconds, summed over the repeats.
    seconds: float
    #: ``"common span"`` (from the windows' wall-clock edges) or ``"longest window"`` (without them).
    rule: str
    #: The share of ``seconds`` in which every instance's window was open; ``None`` without the edges.
    overlap: float | None


def launch_window(records: Sequence[Mapping[str, Any]]) -> LaunchWindow:
    """The launch's window over the instances' ``records`` (``AGGREGATION["window_s"]``).

    Repeat ``r`` of every instance pairs with repeat ``r`` of the others (they run the same
    benchmarks in the same order). With every repeat's wall-clock opening (``start_unix_s``), the
    launch's window per repeat is the span from the earliest opening to the latest closing: items
    done while another instance had not started, or had finished, are not credited to a window in
    which all of them ran, so the rate never exceeds what the launch delivered. Without the edges
    (files from before they were recorded), it is the longest instance window per repeat.
    """
    repeats = [list(r.get("repeats") or []) for r in records]
    if len({len(reps) for reps in repeats}) != 1 or not repeats[0]:
        # No pairing of repeats: the longest instance window, the whole of each.
        return LaunchWindow(max(float(r["window_s"]) for r in records), "longest window", None)
    starts = [[rep.get("start_unix_s") for rep in reps] for reps in repeats]
    if all(isinstance(t, (int, float)) and not isinstance(t, bool) for ts in starts for t in ts):
        span = common = 0.0
        for at in zip(*(zip(ts, reps) for ts, reps in zip(starts, repeats))):
            opened = [float(t) for t, _ in at]
            closed = [float(t) + float(rep["window_s"]) for t, rep in at]
            span += max(closed) - min(opened)
            common += max(0.0, min(closed) - max(opened))
        return LaunchWindow(span, "common span", common / span if span > 0 else None)
    longest = math.fsum(max(float(rep["window_s"]) for rep in at) for at in zip(*repeats))
    return LaunchWindow(longest, "longest window", None)


#: The host cost's keys of a record's ``cpu``: a launch's is every instance's together, not the largest.
_HOST_COST = ("host_per_item_s", "host_cores")


def _merged_cpu(records: Sequence[Mapping[str, Any]], items: float) -> dict[str, Any] | None:
    """A launch's ``cpu`` (``AGGREGATION``): the largest of any instance per figure, but the host cost
    of every instance together; ``None`` unless every instance has one, and the host cost ``None``
    unless every instance has it (an instance written before it). ``items``: every instance's together."""
    cpus = [r["cpu"] for r in records if isinstance(r.get("cpu"), dict)]
    if len(cpus) != len(records):
        return None
    merged: dict[str, Any] = {
        # A figure an instance has null (a LoadGen run has no per-round figures) is null for the launch.
        key: None
        if any(c.get(key) is None for c in cpus)
        else max(int(c[key]) for c in cpus)
        if key == "workers"
        else max(float(c[key]) for c in cpus)
        for key in cpus[0]
        if key not in _HOST_COST
    }
    if all(c.get(key) is not None for c in cpus for key in _HOST_COST):
        total_s = math.fsum(float(c["process_total_s"]) for c in cpus)
        from pytest_ipu.measure import metrics  # merging only: not at every pytest start-up

        merged["host_per_item_s"] = metrics.host_per_item(total_s, items)
        merged["host_cores"] = math.fsum(float(c["host_cores"]) for c in cpus)
    else:
        merged.update(dict.fromkeys(_HOST_COST))
    return merged


def _merged_counts(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A launch's ``counts`` (``AGGREGATION``), by name: the first instance's that did not count
    where any did not (an instance without the count says so); a count read over windows, every
    instance's total over every instance's calls; one read call by call, instance 0's."""
    from pytest_ipu.results import counts  # merging only: not at every pytest start-up

    names = dict.fromkeys(n for r in records if isinstance(r.get("counts"), dict) for n in r["counts"])
    merged: dict[str, Any] = {}
    for name in names:
        found = [r["counts"].get(name) if isinstance(r.get("counts"), dict) else None for r in records]
        lacking = next((i for i, p in enumerate(found) if not isinstance(p, dict)), None)
        if lacking is not None:
            merged[name] = counts.not_counted(f"instance {lacking} of the launch kept no {name}").as_json()
            continue
        parts: list[dict[str, Any]] = [p for p in found if isinstance(p, dict)]
        missing = next((p for p in parts if p.get("per_call") is None), None)
        if missing is not None:
            merged[name] = dict(missing)
        elif all(p.get("total") is not None and p.get("calls") is not None for p in parts):
            scopes = list(dict.fromkeys(str(p.get("scope")) for p in parts))
            merged[name] = counts.over_window(
                sum(int(p["total"]) for p in parts),
                sum(int(p["calls"]) for p in parts),
                str(parts[0].get("method")),
                f"{len(parts)} instances, each {scopes[0]}" if len(scopes) == 1 else "; ".join(scopes),
            ).as_json()
        else:
            merged[name] = dict(parts[0])
    return merged


def write_atomic(path: Path, document: Mapping[str, Any]) -> None:
    """Write ``document`` as JSON to ``path`` so that readers see the old file or the new, never half.

    Raises ``MergeError`` when ``path`` is one of the files ``document`` was merged from (as
    ``merge`` lists them under ``machine_info["ipu"]["poprun"]["files"]``): writing over an input
    would lose an instance's own results.
    """
    from pytest_ipu.results import benchmark_json

    for name in _merged_from(document):
        if _same_file(path, Path(name)):
            raise MergeError(
                f"{path}: is also an input file ({name}); refusing to write over an input: pass an "
                "output path that is not one of the files being merged"
            )
    benchmark_json.write_document(path, document)


def _merged_from(document: Mapping[str, Any]) -> list[str]:
    from pytest_ipu.results import benchmark_json

    ipu_info = benchmark_json.ipu_machine_info(document)
    section = None
    if isinstance(ipu_info, dict):
        section = ipu_info.get(KEY) if ipu_info.get(KEY) is not None else ipu_info.get(TORCHRUN_KEY)
    files = section.get("files") if isinstance(section, dict) else None
    return [f for f in files if isinstance(f, str)] if isinstance(files, list) else []


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same inode when both exist (links, ``./``), else the same
    absolute path."""
    try:
        return a.samefile(b)
    except OSError:
        return a.resolve() == b.resolve()
