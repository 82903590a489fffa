"""``pytest-ipu history``: performance across commits from pytest-benchmark's storage, every benchmark's
change points, and with ``--fail-on-regression`` a gate on the newest commits."""

from __future__ import annotations

import argparse
import sys
import typing

from pytest_ipu.cli import arguments
from pytest_ipu.results import formats

if typing.TYPE_CHECKING:
    from pytest_ipu.cli.arguments import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """Declare ``history`` and its arguments."""
    parser = subparsers.add_parser(
        "history",
        help="performance across commits from pytest-benchmark's storage: every benchmark's change points, "
        "worst first; with --fail-on-regression, exits 1 when the newest commits start a regression beyond "
        "the threshold, 3 when it cannot tell, 2 on bad input",
        description="Read the runs --benchmark-autosave keeps (a storage folder, default --storage, or run "
        "files), build one series per benchmark and machine ordered by commit, and find the change points of "
        "all series together: every run is evidence, a change must stand out from its series' noise, and "
        "false change points are held to 5%% of those reported (docs/ci.md).",
    )
    parser.add_argument(
        "sources",
        nargs="*",
        metavar="STORAGE|RUN",
        help="a storage folder (machine folders and all), or run files, saved-run ids or globs (default: "
        "--storage)",
    )
    arguments.add_storage(parser)
    parser.add_argument("--format", choices=formats.HISTORY, default="table", help="output format")
    _add_selection(parser)
    _add_gate(parser)
    parser.set_defaults(func=run)


def _add_selection(parser: argparse.ArgumentParser) -> None:
    """``--machine`` and ``--metric``: which series to read."""
    parser.add_argument(
        "--machine",
        action="append",
        default=[],
        metavar="ID",
        help="the machine id (storage folder name, e.g. Linux-CPython-3.11-64bit) or glob whose runs to read "
        "(repeatable; default: this machine's)",
    )
    parser.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME",
        help="a metric to follow, e.g. throughput or time.mean, or 'all' (repeatable; default: each "
        "benchmark's gate metric, throughput for a pytest-ipu record, time.median for a plain benchmark)",
    )


def _add_gate(parser: argparse.ArgumentParser) -> None:
    """``--fail-on-regression`` and the ``--recent`` commits it judges."""
    parser.add_argument(
        "--fail-on-regression",
        metavar="SHARE",
        help="exit 1 when a regression beyond SHARE (e.g. 5%%) starts among the newest --recent commits, 3 "
        "when it cannot tell (too few runs after the change, or too much noise), 2 when the newest run was "
        "left out (unreadable or impossible values), 0 otherwise",
    )
    parser.add_argument(
        "--recent",
        type=int,
        default=10,
        metavar="N",
        help="how many of the newest commits --fail-on-regression looks at (default 10)",
    )


def run(args: argparse.Namespace) -> int:
    """Print every series' change points; with ``--fail-on-regression`` the exit code of the newest
    commits' verdicts (``changes.exit_code``), 2 on bad input."""
    # Imported here: the change point search loads numpy, needed only by this command.
    from pytest_ipu.measure import units
    from pytest_ipu.report import changes as changes_report
    from pytest_ipu.results import benchmark_json
    from pytest_ipu.results import changes
    from pytest_ipu.results import history
    from pytest_ipu.results import storage

    threshold = None
    if args.fail_on_regression is not None:
        try:
            threshold = units.parse_share(args.fail_on_regression)
        except ValueError as exc:
            print(f"pytest-ipu: --fail-on-regression {args.fail_on_regression!r}: {exc}", file=sys.stderr)
            return 2
    if args.recent < 1:
        print(
            f"pytest-ipu: --recent {args.recent}: give a number of commits >= 1 (default 10)", file=sys.stderr
        )
        return 2
    try:
        given, found = history.find_runs(args.sources, args.storage)
        read = history.load(given, found, args.machine, args.metric)
    except (history.HistoryError, storage.RunLookupError, benchmark_json.RunFileError) as exc:
        print(f"pytest-ipu: {exc}", file=sys.stderr)
        return 2
    newest = read.newest_left_out()
    if threshold is not None and newest:
        # The run a CI job just made is the one to judge: judging the older ones instead would pass it.
        print(
            f"pytest-ipu: --fail-on-regression: the newest run {newest[0].path} was left out "
            f"({newest[0].reason}), so it cannot be judged; correct or remove the file, or run the "
            "benchmarks again",
            file=sys.stderr,
        )
        return 2
    result = changes.report(read, threshold, args.recent)
    print(changes_report.RENDERERS[args.format](result))
    return changes.exit_code(result.verdicts)
