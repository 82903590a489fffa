"""``pytest-ipu report``: plots (PNG, SVG) and a self-contained HTML page of saved runs, or, given a
storage folder, the history of every benchmark across commits with its change points."""

from __future__ import annotations

import argparse
import sys
import typing
from pathlib import Path

from pytest_ipu.cli import arguments

if typing.TYPE_CHECKING:
    from pytest_ipu.cli.arguments import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """Declare ``report`` and its arguments."""
    parser = subparsers.add_parser(
        "report",
        help="plots (PNG, SVG) and a self-contained HTML page of saved runs; given a storage folder, the "
        "history of every benchmark across commits with its change points",
    )
    parser.add_argument(
        "files",
        nargs="+",
        metavar="RUN|STORAGE",
        help=arguments.RUN_HELP
        + "; or a pytest-benchmark storage folder (e.g. .benchmarks): its history view",
    )
    arguments.add_storage(parser)
    parser.add_argument(
        "--machine",
        action="append",
        default=[],
        metavar="ID",
        help="with a storage folder: the machine id or glob whose runs to draw (repeatable; default: this "
        "machine's)",
    )
    parser.add_argument(
        "-o", "--output", type=Path, default=Path("report"), metavar="DIR", help="output directory"
    )
    parser.add_argument(
        "--references",
        type=Path,
        metavar="FILE",
        help="a TOML file of published reference points drawn beside the scaling views of training "
        "benchmarks, never mixed into the measured data (docs/examples/mlperf-resnet50-references.toml)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the report of storage folders (their history view) or of run files; 2 on bad input."""
    if any(Path(f).is_dir() for f in args.files):
        return _history_view(args)
    if args.machine:
        print(
            f"pytest-ipu: report --machine {args.machine[0]}: --machine picks the runs of a storage folder's "
            "history; give the storage folder (e.g. .benchmarks), or leave --machine out for run files",
            file=sys.stderr,
        )
        return 2
    files = arguments.run_files(args.files, args.storage)
    if files is None:
        return 2
    from pytest_ipu.report import html as html_report  # matplotlib only when a report is asked for

    return html_report.main(files, args.output, args.references)


def _history_view(args: argparse.Namespace) -> int:
    """The history view of storage folders; 2 when run files are given beside them."""
    from pytest_ipu.report import html as html_report  # matplotlib only when a report is asked for

    if not all(Path(f).is_dir() for f in args.files):
        print(
            f"pytest-ipu: report {' '.join(args.files)}: give storage folders (the history view) or run "
            "files (the runs side by side), not both",
            file=sys.stderr,
        )
        return 2
    return html_report.history_main(args.files, args.storage, args.machine, args.output)
