"""Saved runs as series across commits: one per benchmark, metric and machine.

``find_runs`` lists the run files of storage folders and of files given by path, id or glob (the
``storage`` rule); ``load`` reads them through ``benchmark_json`` (the one reader of the format) and
builds the series. A metric is read as ``compare`` reads it (``compare.RECORD_METRICS``, the registry
``catalog.METRICS``): by default ``DEFAULT_METRICS``, ``metrics`` names others (``ALL``: every one).
A value no measurement can have is left out by the readers' one rule (``schema.call_time_problem``,
``impossible``). What stayed out is kept as ``History.left_out`` beside each machine's newest run
(``History.newest``), so that a CI check can tell that the run it must judge is not in the series; a
run with uncommitted changes marks its point (``Point.dirty``).

The rules are documented in docs/ci.md (section "History across commits: pytest-ipu history", its
"The series" paragraph).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fnmatch
import math
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
from pytest_ipu.results import schema
from pytest_ipu.results import storage
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.records import group_name

#: Commit ids pytest-benchmark writes when the run was not in a repository.
NO_COMMIT = ("", "unknown", "unversioned")
#: The metric a benchmark's series follows by default, the first it has: the one a gate reads.
DEFAULT_METRICS = ("throughput", "time.median")
#: The ``metrics`` value that keeps every metric.
ALL = "all"


class HistoryError(ValueError):
    """Input that gives no history: the message is one line naming the value, its source and the fix."""


@dataclass(frozen=True)
class LeftOut:
    """A run file, or a benchmark's entry in it, that stayed out of every series, and why."""

    path: Path
    reason: str


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
        """The median of the runs' values: the commit's value as tables and figures show it."""
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
    #: Other metrics of the benchmark holding the same numbers at every run (folded into this one).
    same: tuple[str, ...] = ()

    @property
    def better(self) -> str:
        """``lower`` or ``higher``: which way the metric improves (its unit says)."""
        return compare.METRIC_BY_NAME[self.metric].better

    @property
    def metrics(self) -> str:
        """The metric, and those folded into it (``time.min=time.median``)."""
        return "=".join((self.metric, *self.same))

    @property
    def label(self) -> str:
        """How tables name the series: the benchmark and the metric."""
        return f"{self.name} {self.metrics}"

    @property
    def runs(self) -> int:
        """The runs of every commit."""
        return sum(len(p.values) for p in self.points)


@dataclass(frozen=True)
class History:
    """The series built from the runs, and one line for each run or entry that stayed out and why."""

    series: tuple[Series, ...]
    machines: tuple[str, ...]
    runs: int
    notes: tuple[str, ...]
    #: The runs and entries left out, with why (also among ``notes``).
    left_out: tuple[LeftOut, ...] = ()
    #: Each machine's newest run file, read or not (a file that could not be read counts for the
    #: machine of its storage folder, or for every machine outside one).
    newest: Mapping[str, Path] = dataclasses.field(default_factory=dict)

    def newest_left_out(self) -> list[LeftOut]:
        """What stayed out of a machine's newest run: the run itself, or entries of it."""
        newest = set(self.newest.values())
        return [e for e in self.left_out if e.path in newest]


def impossible(value: float, unit: str) -> str | None:
    """Why ``value`` of a metric in ``unit`` cannot be a point of a series (``None`` when it can): not
    a finite number; a time that no timed call can take, by the rule every reader of saved runs
    applies (``schema.call_time_problem``); any other metric 0 or below (a series compares ratios)."""
    if not math.isfinite(value):
        return "not a finite number"
    if unit == "s":
        return schema.call_time_problem(value)
    if value <= 0:
        return "a series compares ratios, so it must be > 0"
    return None


def newness(path: Path) -> tuple[int, float]:
    """How new a run file is: pytest-benchmark's run counter (the ``NNNN`` its autosave names start
    with; -1 without one), then the file's modification time."""
    head = path.name.split("_", 1)[0]
    try:
        mtime = path.stat().st_mtime
    except OSError:
        mtime = 0.0
    return (int(head) if head.isdigit() else -1, mtime)


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
    metrics to build series of, default each benchmark's ``DEFAULT_METRICS`` one, ``ALL`` every one."""
    unknown = [m for m in metrics if m != ALL and m not in compare.METRIC_BY_NAME]
    if unknown:
        raise HistoryError(
            f"--metric {unknown[0]!r}: no such metric; give one of {', '.join(compare.METRIC_BY_NAME)}, "
            f"or {ALL}"
        )
    wanted = list(machines) or [this_machine()]
    got = _Gathered()
    runs: list[StoredRun] = [benchmark_json.read_run(path) for path in given]
    runs.extend(_read_found(found, wanted, got))
    kept = _keep(runs, wanted, got)
    notes, left_out = got.notes, got.left_out
    if not kept:
        raise HistoryError(_nothing_kept(wanted, got.others, left_out))
    unclean = sum(r.dirty for r in kept)
    if unclean:
        notes.append(
            f"{unclean} run(s) made with uncommitted changes (commit_info.dirty): their commits are marked "
            "dirty, a change there may be those changes rather than the commit"
        )
    for machine, count in sorted(got.others.items()):
        notes.append(f"{count} run(s) of machine {machine} left out (--machine {machine} shows them)")
    series = _build(kept, metrics, notes, left_out)
    newest = {machine: max([*paths, *got.unplaced], key=newness) for machine, paths in got.candidates.items()}
    return History(
        tuple(series),
        tuple(sorted({r.machine for r in kept})),
        len(kept),
        tuple(notes),
        tuple(left_out),
        newest,
    )


@dataclass
class _Gathered:
    """What ``load`` gathers beside the runs it keeps, as it reads and sorts them."""

    notes: list[str] = dataclasses.field(default_factory=list)
    left_out: list[LeftOut] = dataclasses.field(default_factory=list)
    #: The runs of the machines asked for, read or not: each machine's newest is the one a CI check
    #: judges. A file that cannot be read is its folder's machine's, where the storage names one.
    candidates: dict[str, list[Path]] = dataclasses.field(default_factory=dict)
    #: The files that could not be read and sit outside a machine's folder.
    unplaced: list[Path] = dataclasses.field(default_factory=list)
    #: How many runs of each machine not asked for were left out.
    others: dict[str, int] = dataclasses.field(default_factory=dict)


def _read_found(found: Iterable[Path], wanted: Sequence[str], got: _Gathered) -> list[StoredRun]:
    """The runs of the files ``found`` in a storage folder; one that cannot be read is left out
    with a note (a half-written file must not stop the history of the others)."""
    runs: list[StoredRun] = []
    for path in found:
        try:
            runs.append(benchmark_json.read_run(path))
        except benchmark_json.RunFileError as exc:
            got.notes.append(f"{exc} (left out)")
            message = str(exc)
            prefix = f"{path}: "
            got.left_out.append(
                LeftOut(path, message[len(prefix) :] if message.startswith(prefix) else message)
            )
            if not _is_machine_folder(path):
                got.unplaced.append(path)
            elif _wanted(path.parent.name, wanted):
                got.candidates.setdefault(path.parent.name, []).append(path)
    return runs


def _keep(runs: Sequence[StoredRun], wanted: Sequence[str], got: _Gathered) -> list[_Run]:
    """The runs of the ``wanted`` machines that name their commit, with their commit's time and
    the run's own; the others counted or noted in ``got``."""
    kept: list[_Run] = []
    for run in runs:
        machine = machine_id(run)
        if not _wanted(machine, wanted):
            got.others[machine] = got.others.get(machine, 0) + 1
            continue
        got.candidates.setdefault(machine, []).append(run.path)
        commit = str(run.commit_info.get("id") or "")
        if commit in NO_COMMIT:
            reason = f"no commit id (commit_info.id {commit!r}): it was made outside a git repository"
            got.notes.append(f"{run.path}: {reason}: left out")
            got.left_out.append(LeftOut(run.path, reason))
            continue
        ran = _instant(run.datetime) or _EPOCH
        time = run.commit_info.get("time") or run.commit_info.get("author_time")
        when = _instant(time)
        dirty = run.commit_info.get("dirty") is True
        kept.append(_Run(run, machine, commit, time if when is not None else None, (when or ran, ran), dirty))
    return kept


def _wanted(machine: str, wanted: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(machine, pattern) for pattern in wanted)


def _is_machine_folder(path: Path) -> bool:
    """Whether ``path`` lies in a folder named as pytest-benchmark names a machine's runs."""
    return path.parent.name.count("-") >= 3 and path.parent.name.endswith("bit")


def _nothing_kept(wanted: Sequence[str], others: Mapping[str, int], left_out: Sequence[LeftOut]) -> str:
    """Why no run is left to build a history of: the causes, most telling first, and the fix."""
    machines = " or ".join(wanted)
    seen = f"; it has runs of {', '.join(f'{m} ({n})' for m, n in sorted(others.items()))}" if others else ""
    if left_out:
        first = left_out[0]
        more = f" (and {len(left_out) - 1} more)" if len(left_out) > 1 else ""
        return (
            f"no run of machine {machines} to build a history of: {len(left_out)} run(s) left out, such as "
            f"{first.path}: {first.reason}{more}{seen}; correct or remove those files"
        )
    return (
        f"no run of machine {machines} with a commit id{seen}: pass --machine ID (a glob such as '*' takes "
        "every machine)"
    )


def _commit_order(runs: Sequence[_Run]) -> list[str]:
    """The commits by their time, then by their first run's time."""
    first: dict[str, tuple[dt.datetime, dt.datetime]] = {}
    for run in runs:
        first[run.commit] = min(first.get(run.commit, run.order), run.order)
    return sorted(first, key=lambda commit: first[commit])


def _build(
    runs: list[_Run], metrics: Sequence[str], notes: list[str], left_out: list[LeftOut]
) -> list[Series]:
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
                for path in partial:
                    reason = f"{fullname}: no pytest-ipu record (a partial entry)"
                    notes.append(f"{path}: {reason}: left out")
                    left_out.append(LeftOut(path, reason))
                found = [(r, b) for r, b in found if b.record is not None]
            candidates = compare.RECORD_METRICS if recorded else compare.TIME_METRICS
            bench = found[0][1]
            group = group_name(bench.group, bench.name)
            built: list[tuple[compare.CompareMetric, tuple[Point, ...]]] = []
            for metric in _chosen(candidates, metrics):
                alike = _alike(found, metric.name, fullname, notes) if recorded else found
                points = _points(fullname, alike, metric, order, notes, left_out)
                if points:
                    built.append((metric, points))
                    if not metrics:
                        break  # the default: the first metric the benchmark has
            out += _folded(fullname, bench.name, group, machine, built)
    return out


def _chosen(
    candidates: Sequence[compare.CompareMetric], metrics: Sequence[str]
) -> list[compare.CompareMetric]:
    """The metrics to follow of those a benchmark may have: the ones asked for, every one, or by
    default the first of ``DEFAULT_METRICS`` (then the first it has, when it has none of them)."""
    if ALL in metrics:
        return list(candidates)
    if metrics:
        return [m for m in candidates if m.name in metrics]
    first = [m for name in DEFAULT_METRICS for m in candidates if m.name == name]
    return first + [m for m in candidates if m not in first]


def _folded(
    fullname: str,
    name: str,
    group: str,
    machine: str,
    built: Sequence[tuple[compare.CompareMetric, tuple[Point, ...]]],
) -> list[Series]:
    """One series per distinct set of numbers: metrics holding the same values at every run are one."""
    out: list[Series] = []
    for metric, points in built:
        key = [(p.commit, p.values) for p in points]
        for number, series in enumerate(out):
            if series.unit == metric.unit and [(p.commit, p.values) for p in series.points] == key:
                out[number] = dataclasses.replace(series, same=(*series.same, metric.name))
                break
        else:
            out.append(Series(fullname, name, group, metric.name, metric.unit, machine, points))
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
    fullname: str,
    found: Sequence[tuple[_Run, StoredBenchmark]],
    metric: compare.CompareMetric,
    order: Mapping[str, int],
    notes: list[str],
    left_out: list[LeftOut],
) -> tuple[Point, ...]:
    by_commit: dict[str, list[tuple[_Run, float]]] = {}
    for run, bench in found:
        value = metric.read(bench)
        if value is None:
            continue
        problem = impossible(value, metric.unit)
        if problem is not None:
            reason = f"{fullname}: {metric.name} is {value:g}: {problem}"
            notes.append(f"{run.run.path}: {reason}: left out")
            left_out.append(LeftOut(run.run.path, reason))
            continue
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
