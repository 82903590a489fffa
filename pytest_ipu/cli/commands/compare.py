"""``pytest-ipu compare``: saved runs side by side, each later run's change against the first, and the
gates each later run must pass."""

from __future__ import annotations

import argparse
import sys
import typing
from collections.abc import Sequence

from pytest_ipu.cli import arguments
from pytest_ipu.results import formats

if typing.TYPE_CHECKING:
    from pytest_ipu.cli.arguments import Subparsers
    from pytest_ipu.results import gates
    from pytest_ipu.results.benchmark_json import StoredRun


def add_parser(subparsers: Subparsers) -> None:
    """Declare ``compare`` and its arguments."""
    parser = subparsers.add_parser(
        "compare",
        help="saved runs side by side, one row per metric with each later run's change against the first "
        "and its verdict; exits 1 when a gate FAILs, 3 when one is INCONCLUSIVE (and none FAILs), 2 on "
        "bad input",
        description="Saved runs side by side: one row per metric, each later run's change against the first "
        "and its verdict: 'same' (its 99% interval lies within +/-1%), else 'better' or 'worse' (a t test "
        "of no change gives p < 0.01 on the spread of the repeats, or of 3 or more runs before it), "
        "'within noise' (it does not), 'not tested' (no variance estimate). Runs are files, or "
        "pytest-benchmark's saved-run ids and globs ('0001', '0001_abc', 'Linux-*/*') looked up in "
        "--storage, as 'pytest-benchmark compare' takes them (docs/ci.md).",
    )
    parser.add_argument("files", nargs="+", metavar="RUN", help=arguments.RUN_HELP)
    arguments.add_storage(parser)
    parser.add_argument(
        "--gate",
        action="append",
        default=[],
        metavar="EXPR",
        help="a gate each later run must pass against the first, e.g. 'throughput:-5%%' or "
        "'latency.p99<2ms' (repeatable; docs/ci.md)",
    )
    parser.add_argument("--format", choices=formats.TABLES, default="table", help="output format")
    parser.add_argument(
        "--drift",
        default="5%",
        metavar="SHARE",
        help="run-to-run drift allowed for when repeats are a gate's only noise estimate (fewer than 3 "
        "runs before it), as --ipu-drift (default 5%%)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="a benchmark missing from any run makes the exit code 1"
    )
    arguments.add_job(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the comparison of the runs ``args.files`` name and their gates' verdicts; the exit code of
    the verdicts (``compare.exit_code``), or 2 on bad input."""
    # Imported here: reading and comparing runs loads numpy, needed only by this command.
    from pytest_ipu.results import benchmark_json

    paths = arguments.run_files(args.files, args.storage)
    if paths is None:
        return 2
    if len(paths) < 2:
        got = f"{len(paths)} ({paths[0]})" if paths else "0"
        print(
            f"pytest-ipu: compare needs at least two runs, got {got}: give two or more files or ids, "
            "or a glob that matches several",
            file=sys.stderr,
        )
        return 2
    options = _options(args)
    if options is None:
        return 2
    try:
        runs = [benchmark_json.read_run(path) for path in paths]
    except benchmark_json.RunFileError as exc:
        print(f"pytest-ipu: {exc}", file=sys.stderr)
        return 2
    return _report(args, runs, *options)


def _options(args: argparse.Namespace) -> tuple[list[gates.Gate], float, float] | None:
    """The gates, the drift and the job's level, or ``None`` after printing why one is not valid."""
    from pytest_ipu.measure import units

    gate_list = arguments.gate_list(args.gate)
    if gate_list is None:
        return None
    try:
        drift = units.parse_share(args.drift)
    except ValueError as exc:
        print(f"pytest-ipu: --drift {args.drift!r}: {exc}", file=sys.stderr)
        return None
    job_alpha = arguments.job_alpha(args.job_alpha)
    if job_alpha is None:
        return None
    return gate_list, drift, job_alpha


def _report(
    args: argparse.Namespace,
    runs: Sequence[StoredRun],
    gate_list: list[gates.Gate],
    drift: float,
    job_alpha: float,
) -> int:
    """Print the table and the gate lines; the exit code of the verdicts."""
    # Imported here: the table writers are needed only by this command, not at start-up.
    from pytest_ipu.report import compare as compare_report
    from pytest_ipu.results import compare

    comparison = compare.compare_runs(runs)
    print(compare_report.RENDERERS[args.format](comparison))
    verdicts = compare.check_gates(comparison, gate_list, drift=drift, job_alpha=job_alpha)
    arguments.print_gate_lines(compare.gate_lines(gate_list, verdicts, verbose=args.verbose), args.format)
    if args.strict and comparison.missing:
        print(
            f"pytest-ipu: {len(comparison.missing)} benchmark(s) missing from a run (--strict)",
            file=sys.stderr,
        )
    return compare.exit_code(comparison, gate_list, verdicts, args.strict)
