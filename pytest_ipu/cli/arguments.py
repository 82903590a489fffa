"""What several ``pytest-ipu`` commands share: the run arguments and ``--storage`` of ``summary``,
``compare``, ``report`` and ``history``, the job options of the gating commands, and the one-line
errors of the values they read."""

from __future__ import annotations

import argparse
import sys
import typing
from collections.abc import Sequence
from pathlib import Path

from pytest_ipu.measure import units
from pytest_ipu.results import family
from pytest_ipu.results import gates
from pytest_ipu.results import storage

if typing.TYPE_CHECKING:
    #: What ``ArgumentParser.add_subparsers`` returns: each command adds its parser to it.
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

#: The help of a run argument of ``summary``, ``compare`` and ``report``.
RUN_HELP = (
    "a pytest-benchmark JSON file, or a saved run's id ('0001', '0001_abc') or a glob ('*/0001_*') "
    "looked up in --storage, as 'pytest-benchmark compare' takes them"
)


def error(message: str) -> None:
    """Print one line of bad input to stderr, prefixed as every message of the command is."""
    print(f"pytest-ipu: {message}", file=sys.stderr)


def add_storage(parser: argparse.ArgumentParser) -> None:
    """``-s/--storage``: where a command looks up saved-run ids and globs."""
    parser.add_argument(
        "-s",
        "--storage",
        default=storage.DEFAULT_STORAGE,
        metavar="URI",
        help="where saved-run ids and globs are looked up: a folder or file://PATH, as pytest-benchmark's "
        "--storage (default: %(default)s)",
    )


def add_job(parser: argparse.ArgumentParser) -> None:
    """The options of a command's gates taken as one job: its level for FAIL, and the full listing."""
    parser.add_argument(
        "--job-alpha",
        default=family.level(family.JOB_ALPHA),
        metavar="SHARE",
        help="the job's level for FAIL: unchanged code FAILs some gate of the job at most this often "
        "(Holm's step-down over every gate check; docs/ci.md; default %(default)s)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="list every gate verdict's line, not the one-screen summary (every FAIL, each undecided "
        "benchmark once)",
    )


def run_files(arguments: Sequence[str], storage_uri: str) -> list[Path] | None:
    """The run files the arguments name (paths, saved-run ids, globs); ``None`` after printing the
    one-line error of an argument that names none (or several where one was meant)."""
    try:
        return storage.resolve_all(arguments, storage.storage_path(storage_uri))
    except storage.RunLookupError as exc:
        error(str(exc))
        return None


def job_alpha(text: str) -> float | None:
    """``--job-alpha``'s level, or ``None`` after printing why it is not one."""
    try:
        return units.parse_level(text)
    except ValueError as exc:
        error(f"--job-alpha {text!r}: {exc}")
        return None


def gate_list(texts: Sequence[str]) -> list[gates.Gate] | None:
    """The ``--gate`` expressions parsed, or ``None`` after printing why one is not a gate."""
    try:
        return [gates.parse(text) for text in texts]
    except gates.GateError as exc:
        error(f"--gate: {exc}")
        return None


def print_gate_lines(lines: Sequence[str], fmt: str) -> None:
    """A command's gate verdict lines after its table, as a markdown list in markdown output."""
    if lines:
        print("\n".join(("", *(f"- {line}" if fmt == "markdown" else line for line in lines))))
