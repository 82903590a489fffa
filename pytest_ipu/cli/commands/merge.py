"""``pytest-ipu merge``: the JSON files of the instances (ranks) of one PopRun (torchrun) launch merged
into one file."""

from __future__ import annotations

import argparse
import sys
import typing
from pathlib import Path

if typing.TYPE_CHECKING:
    from pytest_ipu.cli.arguments import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """Declare ``merge`` and its arguments."""
    parser = subparsers.add_parser(
        "merge",
        help="merge the JSON files of the instances (ranks) of one PopRun (torchrun) launch into one file",
    )
    parser.add_argument("out", type=Path, metavar="OUT.json")
    parser.add_argument("files", nargs="+", type=Path, metavar="IN.json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the merge of ``args.files`` to ``args.out`` atomically; 2 when they do not merge or the
    file cannot be written."""
    # Imported here: the launchers and the merge are needed only by this command.
    from pytest_ipu.placement import poprun
    from pytest_ipu.placement import torchrun
    from pytest_ipu.results import benchmark_json
    from pytest_ipu.results import launch_merge

    out: Path = args.out
    try:
        merged = launch_merge.merge(args.files, poprun.IDENTITIES)
        launch_merge.write_atomic(out, merged)
    except launch_merge.MergeError as exc:
        print(f"pytest-ipu: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"pytest-ipu: {out}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 2
    ipu_info = benchmark_json.ipu_machine_info(merged) or {}  # the merge writes it
    launcher, what = (
        (poprun.KEY, "PopRun instance(s)") if poprun.KEY in ipu_info else (torchrun.KEY, "torchrun rank(s)")
    )
    print(
        f"merged {ipu_info[launcher]['count']} {what}, {len(benchmark_json.entries(merged))} benchmark(s), "
        f"into {out}"
    )
    return 0
