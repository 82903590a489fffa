"""``pytest-ipu summary``: the pytest-ipu tables of saved pytest-benchmark JSON files."""

from __future__ import annotations

import argparse
import sys
import typing
from collections.abc import Sequence
from pathlib import Path

from pytest_ipu.cli import arguments

if typing.TYPE_CHECKING:
    from pytest_ipu.cli.arguments import Subparsers
    from pytest_ipu.results.power_blocks import PowerBlock


def add_parser(subparsers: Subparsers) -> None:
    """Declare ``summary`` and its arguments."""
    parser = subparsers.add_parser(
        "summary", help="print the pytest-ipu tables of saved pytest-benchmark JSON files"
    )
    parser.add_argument("files", nargs="+", metavar="RUN", help=arguments.RUN_HELP)
    arguments.add_storage(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the tables of the runs ``args.files`` name; 2 when one cannot be found or read."""
    files = arguments.run_files(args.files, args.storage)
    if files is None:
        return 2
    return _summary(files)


def _summary(paths: Sequence[Path]) -> int:
    """Print the tables of the runs at ``paths``; 2 when one cannot be read."""
    # Imported here: the tables load numpy, needed only by this command.
    from pytest_ipu.report import power_blocks as block_report
    from pytest_ipu.report import terminal as report
    from pytest_ipu.results import benchmark_json
    from pytest_ipu.results.records import group_name

    rows = []
    blocks: list[PowerBlock] = []
    for path in paths:
        try:
            run = benchmark_json.read_run(path)
        except benchmark_json.RunFileError as exc:
            print(f"pytest-ipu: {exc}", file=sys.stderr)
            return 2
        stored = run.benchmarks
        blocks.extend(run.power_blocks)
        for bench in stored:
            if bench.record is not None:
                group = group_name(bench.group, bench.name)
                rows.append(
                    report.Row(
                        f"{group} ({path.name})" if len(paths) > 1 else group, bench.name, bench.record
                    )
                )
        if not any(b.record for b in stored) and not run.power_blocks:
            print(f"pytest-ipu: {path}: no benchmark carries extra_info['ipu']", file=sys.stderr)
    gap = [""] if rows and blocks else []
    print("\n".join(report.tables(rows) + gap + block_report.lines(blocks)))
    return 0
