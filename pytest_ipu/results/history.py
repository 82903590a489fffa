"""Saved runs as series across commits: one per benchmark, metric and machine.

pytest-benchmark's storage (``--benchmark-storage``, ``.benchmarks`` by default) keeps every
``--benchmark-autosave`` run as ``<storage>/<machine id>/NNNN_<commit>_<date>.json``, each with
its ``commit_info`` (``id``, ``time``: the commit's ISO time, ``dirty``) and the run's
``datetime``. ``find_runs`` lists the run files of storage folders (machine folders and all) and
of files given by path (or by saved-run id and glob, the ``storage`` rule); ``load`` reads them
(``benchmark_json``, the one reader of the format) and builds the series:

- The machine of a run is pytest-benchmark's machine id, ``<system>-<implementation>-<major.minor>-
  <bits>bit``, from its ``machine_info``. Only the machines asked for are kept (globs allowed);
  by default this machine's, where pytest-benchmark's autosave puts this machine's runs.
- A run without a commit id (``unknown``, ``unversioned``: not in a repository) cannot be placed
  on the commit axis and stays out, with a note.
- Points are ordered by the commit's time (``commit_info.time``; the author's time, then the run's
  own time, where absent), then by the time of the commit's first run: commits made within the
  same second keep the order in which they were measured. All runs of one commit are one point:
  its value is the median of the runs' values, its spread their minimum and maximum.
- A metric is read as ``compare`` reads it (``compare.RECORD_METRICS``, the registry
  ``catalog.METRICS``; pytest-benchmark's own ``time.*`` statistics only for a benchmark that no
  run has a pytest-ipu record of). A benchmark's entry without a record in a run where other runs
  of the benchmark have one is a partial entry (pytest-benchmark saves an interrupted run's
  benchmarks without our records): it stays out of every series, with a note.
- A run recorded from a work tree with uncommitted changes (``commit_info.dirty``) measured its
  commit plus those changes: it stays in, and its point is marked dirty (``Point.dirty``), so that
  a change found there is not blamed on the commit without saying so; a note counts such runs.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import platform
import statistics
import sys
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ipu.results import benchmark_json
from pytest_ipu.results import compare
from pytest_ipu.results import storage
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.records import group_name

#: Commit ids pytest-benchmark writes when the run was not in a repository.
NO_COMMIT = ("", "unknown", "unversioned")


class HistoryError(ValueError):
    """Input that gives no history: the message is one line naming the value, its source and the fix."""


@dataclass(frozen=True)
class Point:
    """One commit of a series: every run's value of the metric, in the order the runs were made."""

    commit: str
    #: The commit's time as the run recorded it (ISO 8601); ``None`` when it did not.
    commit_time: str | None
    values: tuple[float, ...]
    #: The run files, in the order of ``values``.
    files: tuple[str, ...]
    #: Whether each run, in the order of ``values``, was made from a work tree with uncommitted
    #: changes (pytest-benchmark's ``commit_info.dirty``).
    dirty_runs: tuple[bool, ...] = ()

    @property
    def dirty(self) -> bool:
        """Whether any run of the point measured uncommitted changes on top of its commit: the point
        is then not the commit's alone."""
        return any(self.dirty_runs)

    @property
    def value(self) -> float:
        """The median of the runs' values: the point the change points are found on."""
        return float(statistics.median(self.values))

    @property
    def low(self) -> float:
        """The smallest run value (the spread's bottom)."""
        return min(self.values)

    @property
    def high(self) -> float:
        """The largest run value (the spread's top)."""
        return max(self.values)


@dataclass(frozen=True)
class Series:
    """One metric of one benchmark on one machine, commit by commit, oldest first."""

    fullname: str
    name: str
    group: str
    metric: str
    unit: str
    machine: str
    points: tuple[Point, ...]

    @property
    def better(self) -> str:
        """``lower`` or ``higher``: which way the metric improves (its unit says)."""
        return compare.METRIC_BY_NAME[self.metric].better

    @property
    def label(self) -> str:
        """How tables name the series: the benchmark and the metric."""
        return f"{self.name} {self.metric}"


@dataclass(frozen=True)
class History:
    """The series built from the runs, and one line for each run or entry that stayed out and why."""

    series: tuple[Series, ...]
    machines: tuple[str, ...]
    runs: int
    notes: tuple[str, ...]


def this_machine() -> str:
    """This machine's id as pytest-benchmark names its storage folder for runs made here."""
    bits = "64bit" if sys.maxsize > 2**32 else "32bit"
    version = ".".join(platform.python_version_tuple()[:2])
    return f"{platform.system()}-{platform.python_implementation()}-{version}-{bits}"


def machine_id(run: StoredRun) -> str:
    """The run's machine id from its ``machine_info`` (pytest-benchmark's rule); its folder's name
    when the file lacks the fields."""
    info = run.machine_info
    cpu = info.get("cpu")
    bits = cpu.get("bits") if isinstance(cpu, Mapping) else None
    version = str(info.get("python_version", ""))
    fields = (info.get("system"), info.get("python_implementation"), version, bits)
    if not all(fields):
        return run.path.parent.name
    return f"{info['system']}-{info['python_implementation']}-{'.'.join(version.split('.')[:2])}-{bits}bit"


def find_runs(arguments: Sequence[str], storage_uri: str) -> tuple[list[Path], list[Path]]:
    """The run files the arguments name: ``(given, found)``. A folder argument (or none: the
    storage) is a storage whose every ``*.json``, in machine folders and at its top, is ``found``;
    anything else is a file, saved-run id or glob (``storage.resolve``), ``given``. Raises
    ``HistoryError`` (or ``storage.RunLookupError``) for an argument that names nothing."""
    root = storage.storage_path(storage_uri)
    if not arguments:
        if not root.is_dir():
            raise HistoryError(
                f"storage {root}: no such folder: run the benchmarks with --benchmark-autosave to fill it, "
                "or give the storage folder or run files"
            )
        arguments = [str(root)]
    given: list[Path] = []
    found: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            files = sorted(path.glob("*.json")) + sorted(path.glob("*/*.json"))
            if not files:
                raise HistoryError(
                    f"{argument}: a folder with no pytest-benchmark runs (no *.json in it or its machine "
                    "folders): give the --benchmark-storage folder that --benchmark-autosave fills"
                )
            found.extend(files)
        else:
            given.extend(storage.resolve(argument, root))
    # A run named twice (its folder and its file, two overlapping globs) is one run.
    seen: set[Path] = set()
    return _once(given, seen), _once(found, seen)


def _once(paths: Iterable[Path], seen: set[Path]) -> list[Path]:
    """``paths`` without those already ``seen`` (by their resolved path), which it adds to."""
    out = []
    for path in paths:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            out.append(path)
    return out


@dataclass
class _Run:
    run: StoredRun
    machine: str
    commit: str
    commit_time: str | None
    order: tuple[dt.datetime, dt.datetime]
    dirty: bool


def _instant(text: object) -> dt.datetime | None:
    """An ISO 8601 time as an aware datetime (naive: UTC, as pytest-benchmark writes it); ``None``
    when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        # fromisoformat reads "Z" only from Python 3.11.
        moment = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.timezone.utc)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def load(
    given: Iterable[Path],
    found: Iterable[Path] = (),
    machines: Sequence[str] = (),
    metrics: Sequence[str] = (),
) -> History:
    """Read the runs and build the series (the module docstring's rules). A file ``given`` that
    cannot be read raises ``benchmark_json.RunFileError``; one ``found`` in a storage folder is
    left out with a note (a half-written file must not stop the history of the others).
    ``machines``: the machine ids (or globs) to keep, default ``this_machine()``; ``metrics``: the
    metrics to build series of, default every one a benchmark has."""
    unknown = [m for m in metrics if m not in compare.METRIC_BY_NAME]
    if unknown:
        raise HistoryError(
            f"--metric {unknown[0]!r}: no such metric; give one of {', '.join(compare.METRIC_BY_NAME)}"
        )
    notes: list[str] = []
    runs: list[StoredRun] = [benchmark_json.read_run(path) for path in given]
    for path in found:
        try:
            runs.append(benchmark_json.read_run(path))
        except benchmark_json.RunFileError as exc:
            notes.append(f"{exc} (left out)")
    wanted = list(machines) or [this_machine()]
    kept: list[_Run] = []
    others: dict[str, int] = {}
    for run in runs:
        machine = machine_id(run)
        if not any(fnmatch.fnmatchcase(machine, pattern) for pattern in wanted):
            others[machine] = others.get(machine, 0) + 1
            continue
        commit = str(run.commit_info.get("id") or "")
        if commit in NO_COMMIT:
            notes.append(f"{run.path}: no commit id (commit_info.id {commit!r}): left out")
            continue
        ran = _instant(run.datetime) or _EPOCH
        time = run.commit_info.get("time") or run.commit_info.get("author_time")
        when = _instant(time)
        dirty = run.commit_info.get("dirty") is True
        kept.append(_Run(run, machine, commit, time if when is not None else None, (when or ran, ran), dirty))
    if not kept:
        seen = (
            f"; it has runs of {', '.join(f'{m} ({n})' for m, n in sorted(others.items()))}" if others else ""
        )
        raise HistoryError(
            f"no run of machine {' or '.join(wanted)} with a commit id{seen}: pass --machine ID (a glob "
            "such as '*' takes every machine)"
        )
    unclean = sum(r.dirty for r in kept)
    if unclean:
        notes.append(
            f"{unclean} run(s) made with uncommitted changes (commit_info.dirty): their commits are marked "
            "dirty, a change there may be those changes rather than the commit"
        )
    for machine, count in sorted(others.items()):
        notes.append(f"{count} run(s) of machine {machine} left out (--machine {machine} shows them)")
    series = _build(kept, metrics, notes)
    return History(tuple(series), tuple(sorted({r.machine for r in kept})), len(kept), tuple(notes))


def _commit_order(runs: Sequence[_Run]) -> list[str]:
    """The commits by their time, then by their first run's time."""
    first: dict[str, tuple[dt.datetime, dt.datetime]] = {}
    for run in runs:
        first[run.commit] = min(first.get(run.commit, run.order), run.order)
    return sorted(first, key=lambda commit: first[commit])


def _build(runs: list[_Run], metrics: Sequence[str], notes: list[str]) -> list[Series]:
    out: list[Series] = []
    for machine in sorted({r.machine for r in runs}):
        on_machine = sorted((r for r in runs if r.machine == machine), key=lambda r: r.order[1])
        order = {commit: i for i, commit in enumerate(_commit_order(on_machine))}
        entries: dict[str, list[tuple[_Run, StoredBenchmark]]] = {}
        for run in on_machine:
            for bench in run.run.benchmarks:
                entries.setdefault(bench.fullname, []).append((run, bench))
        for fullname, found in entries.items():
            recorded = any(b.record is not None for _, b in found)
            if recorded:
                partial = [r.run.path for r, b in found if b.record is None]
                notes.extend(
                    f"{path}: {fullname}: no pytest-ipu record (a partial entry): left out"
                    for path in partial
                )
                found = [(r, b) for r, b in found if b.record is not None]
            candidates = compare.RECORD_METRICS if recorded else compare.TIME_METRICS
            bench = found[0][1]
            for metric in candidates:
                if metrics and metric.name not in metrics:
                    continue
                alike = _alike(found, metric.name, fullname, notes) if recorded else found
                points = _points(alike, metric, order)
                if points:
                    group = group_name(bench.group, bench.name)
                    out.append(Series(fullname, bench.name, group, metric.name, metric.unit, machine, points))
    return out


def _alike(
    found: Sequence[tuple[_Run, StoredBenchmark]], metric: str, fullname: str, notes: list[str]
) -> Sequence[tuple[_Run, StoredBenchmark]]:
    """The runs whose ``metric`` follows the newest run's definition (``catalog.Metric.definition``:
    a throughput of the median round, or of the window in records before it); the others are left
    out with a note, so that no change point marks a change of definition."""
    known = METRICS.get(metric)
    if known is None or known.fallback is None or not found:
        return found
    newest = known.definition(found[-1][1].record)
    kept = [(r, b) for r, b in found if known.definition(b.record) == newest]
    left = [b for _, b in found if known.definition(b.record) != newest]
    if left:
        notes.append(
            f"{fullname}: {metric}: {len(left)} older run(s) left out: their {metric} is "
            f"{known.definition(left[0].record)}, the newest runs' {newest} (unlike figures)"
        )
    return kept


def _points(
    found: Sequence[tuple[_Run, StoredBenchmark]], metric: compare.CompareMetric, order: Mapping[str, int]
) -> tuple[Point, ...]:
    by_commit: dict[str, list[tuple[_Run, float]]] = {}
    for run, bench in found:
        value = metric.read(bench)
        if value is not None:
            by_commit.setdefault(run.commit, []).append((run, value))
    points = []
    for commit in sorted(by_commit, key=lambda c: order[c]):
        measured = by_commit[commit]
        points.append(
            Point(
                commit,
                measured[0][0].commit_time,
                tuple(v for _, v in measured),
                tuple(str(r.run.path) for r, _ in measured),
                tuple(r.dirty for r, _ in measured),
            )
        )
    return tuple(points)


def describe(history: History) -> dict[str, Any]:
    """What was read, for the JSON output: the machines, the run count and the notes."""
    return {"machines": list(history.machines), "runs": history.runs, "notes": list(history.notes)}
