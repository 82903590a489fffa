"""The seam to pytest-benchmark: the only module that knows its JSON layout.

We add to it through its public extension points only (``extra_info``, the machine-info and JSON
update hooks), so a file written with pytest-ipu still loads in ``pytest-benchmark compare``.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from pytest_ipu.measure import machine_speed as speed
from pytest_ipu.processes import one_line
from pytest_ipu.results import atomic
from pytest_ipu.results import gates
from pytest_ipu.results import records
from pytest_ipu.results import schema
from pytest_ipu.results import values
from pytest_ipu.results.gates import Gate
from pytest_ipu.results.power_blocks import PowerBlock
from pytest_ipu.results.power_blocks import blocks_from_json

#: Top-level key of the run-wide section pytest-ipu adds to the JSON.
TOP_LEVEL_KEY = "pytest_ipu"
#: The ``extra_info`` key a pytest-ipu fixture sets (to its name) when it begins measuring with
#: pytest-benchmark's fixture; its record replaces it (``attach``). An entry that still has it is
#: partial (the test stopped before the record was written), not a plain pytest-benchmark one.
PENDING_KEY = "ipu_pending"


class RunFileError(ValueError):
    """A file that is not a readable pytest-benchmark JSON run; the message names the file."""


@dataclass(frozen=True)
class StoredBenchmark:
    """One benchmark of a saved run: pytest-benchmark's identity fields and our record, if any."""

    name: str
    fullname: str
    group: str | None
    record: records.IpuRecord | None
    #: pytest-benchmark's per-round times, seconds (``stats.data``): present with ``--benchmark-json``,
    #: and in saved runs only with ``--benchmark-save-data``; ``None`` when absent.
    samples_s: tuple[float, ...] | None = None
    #: The test's parameters (``params``), e.g. ``{"batch_size": 4}``; empty when it has none.
    params: Mapping[str, Any] = field(default_factory=dict)
    #: pytest-benchmark's time statistics of the rounds, seconds (``min``, ``median``, ``mean``,
    #: ``max``, ``stddev``, ``iqr``), as far as the file has them.
    stats: Mapping[str, float] = field(default_factory=dict)
    #: What the benchmark says it is for (``extra_info["role"]``, a string), e.g. ``self-check``
    #: for one that checks pytest-ipu itself; ``None`` when it says nothing.
    role: str | None = None
    #: How many rounds pytest-benchmark timed (``stats.rounds``); ``None`` when the file has none.
    rounds: int | None = None
    #: The pytest-ipu fixture that began measuring this benchmark and never wrote its record
    #: (``PENDING_KEY``): a partial entry; ``None`` for a complete or a plain one.
    pending: str | None = None


@dataclass(frozen=True)
class StoredVerdict:
    """One gate verdict the run recorded (the top-level section's ``gates``): the benchmark, the
    gate as written, PASS, FAIL or INCONCLUSIVE, and the verdict's line with its evidence."""

    benchmark: str
    gate: str
    outcome: str
    line: str


#: The verdicts a recorded gate may have (``decide.OUTCOMES``; not imported: the decision loads numpy).
OUTCOMES = ("PASS", "FAIL", "INCONCLUSIVE")
#: The top-level section's key of the gate verdicts.
GATES_KEY = "gates"
#: The top-level section's key of the run's samples of its machine's speed (``measure.machine_speed``).
MACHINE_SPEED_KEY = "machine_speed"
#: The top-level section's key of each benchmark's own gates (its marker's), by full name: written
#: by a run of ``pytest-ipu ab`` (``options.AB_SIDE_VARIABLE``), which gates on them.
OWN_GATES_KEY = "own_gates"


@dataclass(frozen=True)
class StoredRun:
    """A whole saved run: where it came from, the machine it ran on, its benchmarks, the energy
    of its ``ipu_power`` blocks (none in files written before they were kept), the verdicts of
    its gates (none when it had no gates), its samples of the machine's speed (``None`` in files
    written before they were kept, or without pytest-ipu) and, in a run of ``pytest-ipu ab``, each
    benchmark's own gates by full name (only benchmarks that have some)."""

    path: Path
    machine_info: Mapping[str, Any]
    commit_info: Mapping[str, Any]
    datetime: str | None
    benchmarks: tuple[StoredBenchmark, ...]
    power_blocks: tuple[PowerBlock, ...] = ()
    gates: tuple[StoredVerdict, ...] = ()
    machine_speed: speed.MachineSpeed | None = None
    own_gates: Mapping[str, tuple[Gate, ...]] = field(default_factory=dict)


def attach(extra_info: dict[str, Any], record: Mapping[str, Any]) -> None:
    """Store a record under ``extra_info["ipu"]`` (the dict pytest-benchmark serialises), in place
    of the mark of a measurement begun (``PENDING_KEY``)."""
    extra_info.pop(PENDING_KEY, None)
    extra_info[schema.NAMESPACE] = dict(record)


def update_machine_info(machine_info: dict[str, Any], device_info: Mapping[str, Any]) -> None:
    """Put the run's backend and device inventory under ``machine_info["ipu"]``."""
    machine_info[schema.NAMESPACE] = dict(device_info)


def update_json(output_json: dict[str, Any], run_info: Mapping[str, Any]) -> None:
    """Add pytest-ipu's run-wide section (schema version, settings) at the top level."""
    output_json[TOP_LEVEL_KEY] = dict(run_info)


def drop_round_data(output_json: dict[str, Any]) -> None:
    """Remove pytest-benchmark's per-round times (``stats.data``) from every benchmark that carries a
    pytest-ipu record: its repeats' summaries are what the gates, ``compare``, ``history`` and the
    report read, and the rounds of a fast call are megabytes (a float a line, 100,000 rounds a
    benchmark at most). pytest-benchmark's statistics of the rounds stay; a benchmark without a
    record (pytest-benchmark's own) is left as pytest-benchmark wrote it."""
    for bench in output_json.get("benchmarks") or ():
        extra = bench.get("extra_info") if isinstance(bench, dict) else None
        stats = bench.get("stats") if isinstance(bench, dict) else None
        if isinstance(extra, dict) and schema.NAMESPACE in extra and isinstance(stats, dict):
            stats.pop("data", None)


# -- a document's parts as they stand: for the code that edits or merges documents -----------------


def is_document(data: object) -> bool:
    """Whether ``data`` is a pytest-benchmark document: an object with a ``benchmarks`` list."""
    return isinstance(data, dict) and isinstance(data.get("benchmarks"), list)


def entries(document: Mapping[str, Any]) -> list[Any]:
    """The document's ``benchmarks`` entries as they stand, unchecked (pytest-benchmark's benchmark
    objects in a file it wrote); empty when it has no list (``is_document`` tells)."""
    found = document.get("benchmarks")
    return found if isinstance(found, list) else []


def set_entries(document: dict[str, Any], benchmarks: list[Any]) -> None:
    """Replace the document's ``benchmarks`` entries."""
    document["benchmarks"] = benchmarks


def extra_info(entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """An entry's ``extra_info`` as it stands (``{}`` when it has none); ``None`` when it is not an
    object."""
    found = entry.get("extra_info", {})
    return found if isinstance(found, dict) else None


def ipu_data(entry: object) -> Any:
    """An entry's pytest-ipu record as it stands, unchecked (``extra_info["ipu"]``, read by
    ``schema.from_json``); ``None`` when it has none, or the entry or its ``extra_info`` is not an
    object."""
    extra = extra_info(entry) if isinstance(entry, dict) else None
    return None if extra is None else extra.get(schema.NAMESPACE)


def set_ipu_data(entry: dict[str, Any], record: Mapping[str, Any]) -> None:
    """Put ``record`` under the entry's ``extra_info["ipu"]``, replacing what was there."""
    entry.setdefault("extra_info", {})[schema.NAMESPACE] = record


def ipu_entries(document: Mapping[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The document's entries that carry a pytest-ipu record (an object), each with its record as it
    stands (unchecked: read it with ``schema.from_json``; edits to it edit the document)."""
    out = []
    for entry in entries(document):
        data = ipu_data(entry)
        if isinstance(data, dict):
            out.append((entry, data))
    return out


def machine_info(document: Mapping[str, Any]) -> dict[str, Any] | None:
    """The document's ``machine_info`` as it stands; ``None`` when it has none or it is not an object."""
    found = document.get("machine_info")
    return found if isinstance(found, dict) else None


def ipu_machine_info(document: Mapping[str, Any]) -> dict[str, Any] | None:
    """The document's ``machine_info["ipu"]`` (``update_machine_info``'s) as it stands; ``None`` when
    it has none or it is not an object."""
    machine = machine_info(document)
    found = machine.get(schema.NAMESPACE) if machine is not None else None
    return found if isinstance(found, dict) else None


def own_ipu_machine_info(document: dict[str, Any]) -> dict[str, Any]:
    """The document's ``machine_info["ipu"]``, made an empty object where it is missing or not an
    object (and ``machine_info`` too), for the caller to fill."""
    if machine_info(document) is None:
        document["machine_info"] = {}
    if ipu_machine_info(document) is None:
        document["machine_info"][schema.NAMESPACE] = {}
    found = ipu_machine_info(document)
    assert found is not None  # made just above
    return found


def write_document(path: Path, document: Mapping[str, Any]) -> None:
    """Write ``document`` to ``path`` as pytest-benchmark writes its JSON, atomically: a reader sees
    the old file or the new, never half."""
    atomic.write_text(path, json.dumps(document, indent=4) + "\n")


def load_run(path: Path) -> list[StoredBenchmark]:
    """Read the benchmarks of a pytest-benchmark JSON file; raises ``RunFileError`` on bad input."""
    return list(read_run(path).benchmarks)


def read_run(path: Path) -> StoredRun:
    """Read a pytest-benchmark JSON file whole; raises ``RunFileError`` naming the file and the problem."""
    return parse_run(read_document(path), path)


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path``, which must be a regular file: a FIFO (or a device) would block the
    reader forever or never end. Opened without blocking and checked on the open file itself, so
    what is checked is what is read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a special file"
            raise RunFileError(
                f"{path}: is {kind}, not a regular file; give the JSON file pytest-benchmark wrote"
            )
        with os.fdopen(fd, "rb") as file:
            fd = -1  # the file object closes it
            return file.read()
    finally:
        if fd >= 0:
            os.close(fd)


def read_document(path: Path) -> dict[str, Any]:
    """The parsed JSON of a pytest-benchmark run file, checked to have a ``benchmarks`` list; raises
    ``RunFileError`` naming the file and the problem."""
    try:
        data = json.loads(_read_regular(path).decode("utf-8"))
    except OSError as exc:
        raise RunFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except RecursionError:
        # json's C parser recurses once per level: a file nested thousands deep exhausts the stack.
        raise RunFileError(
            f"{path}: not a pytest-benchmark run: its JSON is nested too deeply to read; "
            "give the JSON file pytest-benchmark wrote"
        ) from None
    except ValueError as exc:  # UnicodeDecodeError and json.JSONDecodeError are ValueErrors
        raise RunFileError(f"{path}: not JSON: {one_line(str(exc))}") from None
    if not is_document(data):
        raise RunFileError(f"{path}: not a pytest-benchmark run (no 'benchmarks' list)")
    assert isinstance(data, dict)  # is_document's
    return data


def parse_run(data: object, path: Path) -> StoredRun:
    """A run from its parsed JSON (``path`` names where it came from, in messages and the result);
    raises ``RunFileError`` naming ``path``, the benchmark, the key and the problem.

    Every number a reader uses is checked here, once for every command and the plugin's baselines:
    per-round times and time statistics must be finite and >= 0, and the record (and each
    ``ipu_power`` block's power object) must pass ``schema``'s checks, so NaN, Infinity or a
    negative time never reaches a table, a gate or a plot.
    """
    try:
        return _run(data, path)
    except values.BadValue as exc:
        raise RunFileError(str(exc)) from None


def _run(data: object, path: Path) -> StoredRun:
    """``parse_run``'s work: its checks raise ``values.BadValue`` where a value is bad."""
    benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benchmarks, list):
        raise RunFileError(f"{path}: not a pytest-benchmark run (no 'benchmarks' list)")
    out = []
    for index, bench in enumerate(benchmarks):
        if not isinstance(bench, dict):
            raise RunFileError(f"{path}: benchmarks[{index}] is not a pytest-benchmark benchmark object")
        out.append(_benchmark(bench, f"{path}: benchmarks[{index}]", path))
    _once_each(out, path)
    assert isinstance(data, dict)  # a list of benchmarks was found in it
    section = _section(data, path)
    return StoredRun(
        path,
        _free(data, "machine_info", values.Source(str(path), _FIX)),
        _free(data, "commit_info", values.Source(str(path), _FIX)),
        str(data["datetime"]) if isinstance(data.get("datetime"), str) else None,
        tuple(out),
        _power_blocks(section, path),
        _verdicts(section, path),
        _machine_speed(section, path),
        _own_gates(section, path),
    )


def _once_each(benchmarks: list[StoredBenchmark], path: Path) -> None:
    """A run holds each benchmark once (pytest-benchmark keeps one result per test): a file with one
    twice (two runs joined by hand) is refused, as every reader would pick a different copy."""
    seen: set[str] = set()
    for bench in benchmarks:
        if bench.fullname in seen:
            raise RunFileError(
                f"{path}: benchmark {bench.fullname!r} is in it twice: a run has one result per "
                f"benchmark; {_FIX}"
            )
        seen.add(bench.fullname)


def _section(data: Mapping[str, Any], path: Path) -> Mapping[str, Any] | None:
    """The top-level section, checked to be an object of a schema version this code reads; ``None``
    when the file has none (written without pytest-ipu)."""
    section = data.get(TOP_LEVEL_KEY)
    if section is None:
        return None
    section = values.Source(str(path), _FIX).mapping(section, TOP_LEVEL_KEY)
    # Absent from sections written before it was stored; a version that is there must be one we read.
    if "schema" in section:
        try:
            schema.read_version(section["schema"], f"run section '{TOP_LEVEL_KEY}'")
        except schema.SchemaError as exc:
            raise RunFileError(f"{path}: {exc}; {_FIX}") from None
    return section


def _verdicts(section: Mapping[str, Any] | None, path: Path) -> tuple[StoredVerdict, ...]:
    """The gate verdicts of the top-level section; none when it has no ``gates`` list."""
    entries = None if section is None else section.get(GATES_KEY)
    if entries is None:
        return ()
    where = f"{path}: '{TOP_LEVEL_KEY}.{GATES_KEY}'"
    out = []
    for index, entry in enumerate(
        values.Source(str(path), _FIX).array(entries, f"{TOP_LEVEL_KEY}.{GATES_KEY}")
    ):
        fields = [
            entry.get(k) if isinstance(entry, dict) else None
            for k in ("benchmark", "gate", "outcome", "line")
        ]
        if not all(isinstance(f, str) for f in fields) or fields[2] not in OUTCOMES:
            raise RunFileError(
                f"{where}[{index}] is not a gate verdict (strings 'benchmark', 'gate', 'line' and an "
                f"'outcome' of {', '.join(OUTCOMES)}); {_FIX}"
            )
        out.append(StoredVerdict(*(str(f) for f in fields)))
    return tuple(out)


def _own_gates(section: Mapping[str, Any] | None, path: Path) -> dict[str, tuple[Gate, ...]]:
    """Each benchmark's own gates, by full name; none when the section has no ``own_gates``."""
    data = None if section is None else section.get(OWN_GATES_KEY)
    if data is None:
        return {}
    key = f"{TOP_LEVEL_KEY}.{OWN_GATES_KEY}"
    source = values.Source(str(path), _FIX)
    out = {}
    for fullname, texts in source.mapping(data, key).items():
        try:
            out[fullname] = tuple(
                gates.parse(source.text(t, f"{key}[{fullname!r}]"))
                for t in source.array(texts, f"{key}[{fullname!r}]")
            )
        except gates.GateError as exc:
            raise RunFileError(f"{path}: '{key}' of {fullname!r}: {exc}; {_FIX}") from None
    return out


def _machine_speed(section: Mapping[str, Any] | None, path: Path) -> speed.MachineSpeed | None:
    """The run's samples of its machine's speed; ``None`` when the section has none."""
    data = None if section is None else section.get(MACHINE_SPEED_KEY)
    if data is None:
        return None
    try:
        return speed.from_json(data, f"'{TOP_LEVEL_KEY}.{MACHINE_SPEED_KEY}'")
    except speed.MachineSpeedError as exc:
        raise RunFileError(f"{path}: {exc}; {_FIX}") from None


def _power_blocks(section: Mapping[str, Any] | None, path: Path) -> tuple[PowerBlock, ...]:
    """The ``ipu_power`` blocks of the top-level section; none when the file has no section (written
    without pytest-ipu) or no list (written before blocks were kept)."""
    if section is None:
        return ()
    try:
        return blocks_from_json(section, f"{TOP_LEVEL_KEY}.")
    except values.BadValue as exc:
        raise RunFileError(f"{path}: {exc}") from None


#: How a bad benchmark field's message ends: where a good one comes from.
_FIX = "give the JSON file pytest-benchmark wrote, or correct the value"


def _benchmark(bench: Mapping[str, Any], where: str, path: Path) -> StoredBenchmark:
    """One benchmark object; ``where`` names it (by index) until its full name is known."""
    # The names group every table and pair benchmarks across runs: they must be strings.
    name, fullname = (values.Source(where, _FIX).text(bench.get(k), k) for k in ("name", "fullname"))
    where = f"{path}: benchmark {fullname!r}"
    src = values.Source(where, _FIX)
    extra = src.mapping(bench.get("extra_info"), "extra_info", null=True)
    info = extra.get(schema.NAMESPACE)
    try:
        record = schema.from_json(info) if info is not None else None
    except schema.SchemaError as exc:
        raise RunFileError(f"{where}: {exc}") from None
    pending = extra.get(PENDING_KEY)
    return StoredBenchmark(
        name,
        fullname,
        src.text_or_none(bench.get("group"), "group"),
        record,
        _samples(bench, src),
        _free(bench, "params", src),
        _time_stats(bench, src),
        src.text_or_none(extra.get("role"), "extra_info.role"),
        _rounds(bench, src),
        None if record is not None else src.text_or_none(pending, f"extra_info.{PENDING_KEY}"),
    )


#: How deeply a free-form value (a test parameter, ``machine_info``, ``commit_info``) may nest:
#: tables, labels and sort keys turn such values into text, which recurses once per level;
#: pytest-benchmark writes them two or three levels deep.
MAX_DEPTH = 32


def _free(data: Mapping[str, Any], key: str, src: values.Source) -> dict[str, Any]:
    """A free-form object of the file (``params``, ``machine_info``, ``commit_info``): ``{}`` when
    absent or null (pytest-benchmark writes null params for a test without any), any JSON (a
    parameter may be NaN) nested at most ``MAX_DEPTH`` levels."""
    return src.free(data.get(key), key, finite=False, depth=MAX_DEPTH)


def _time(value: Any, src: values.Source, key: str) -> float:
    """A time in seconds from the file: a finite number >= 0."""
    return src.number(value, key, problem="a time must be a finite number of seconds >= 0")


def _samples(bench: Mapping[str, Any], src: values.Source) -> tuple[float, ...] | None:
    """pytest-benchmark's per-round times (``stats.data``); ``None`` when the file has none."""
    stats = bench.get("stats")
    data = stats.get("data") if isinstance(stats, dict) else None
    if data is None:
        return None
    if not isinstance(data, list):
        raise src.refuse(data, "stats.data", "a list of times")
    # Hundreds of thousands of rounds in a file: floats that are all times a call can take (the rule
    # of ``_call``) with a finite sum (no NaN, no infinity) are checked whole, at C speed; anything
    # else is checked one by one, for the message.
    if (
        all(type(x) is float for x in data)
        and (not data or (min(data) >= schema.MIN_CALL_S and max(data) <= schema.MAX_CALL_S))
        and math.isfinite(sum(data))
    ):
        return tuple(data) or None
    return tuple(_call(x, src, f"stats.data[{i}]") for i, x in enumerate(data)) or None


def _call(value: Any, src: values.Source, key: str) -> float:
    """The time of timed calls (a round, its min, median, mean or max): ``_time``, and a time a call
    can take (``schema.call_time_problem``: more than 0 s, at most a day)."""
    number = _time(value, src, key)
    problem = schema.call_time_problem(number)
    if problem is not None:
        raise src.refuse(value, key, problem=problem)
    return number


#: The time statistics of pytest-benchmark's ``stats`` that ``StoredBenchmark.stats`` keeps.
TIME_STATS = ("min", "median", "mean", "max", "stddev", "iqr")
#: Those that are times of calls (the others are spreads, 0 for rounds that all took as long).
CALL_STATS = ("min", "median", "mean", "max")


def _rounds(bench: Mapping[str, Any], src: values.Source) -> int | None:
    """pytest-benchmark's round count (``stats.rounds``), a whole number >= 0; ``None`` when absent."""
    stats = bench.get("stats")
    rounds = stats.get("rounds") if isinstance(stats, dict) else None
    return None if rounds is None else src.whole(rounds, "stats.rounds")


def _time_stats(bench: Mapping[str, Any], src: values.Source) -> dict[str, float]:
    stats = src.mapping(bench.get("stats"), "stats", null=True)
    read = {k: _call if k in CALL_STATS else _time for k in TIME_STATS}
    return {k: read[k](stats[k], src, f"stats.{k}") for k in TIME_STATS if stats.get(k) is not None}
