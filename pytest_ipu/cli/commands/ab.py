"""``pytest-ipu ab``: interleaved A/B benchmarking, a baseline and a candidate run alternately (ABBA) on
this machine (``cli/ab.py``) and gated on paired ratios (``results/ab.py``)."""

from __future__ import annotations

import argparse
import math
import sys
import typing
from collections.abc import Sequence
from pathlib import Path

from pytest_ipu.cli import arguments
from pytest_ipu.results import formats

if typing.TYPE_CHECKING:
    from pytest_ipu.cli import ab as ab_runner
    from pytest_ipu.cli.arguments import Subparsers
    from pytest_ipu.results import ab
    from pytest_ipu.results import gates
    from pytest_ipu.results.benchmark_json import StoredRun


def add_parser(subparsers: Subparsers) -> None:
    """Declare ``ab`` and its arguments."""
    parser = subparsers.add_parser(
        "ab",
        help="interleaved A/B benchmarking: run a baseline and a candidate alternately (ABBA) on this "
        "machine and gate on paired ratios; exits 1 when a gate FAILs, 3 when one is INCONCLUSIVE (and none "
        "FAILs), 2 on bad input or a failed run",
        description="Run two sides, each a command prefix that runs pytest or a git revision (git:REV), "
        "alternately in ABBA order, and decide on the paired ratios candidate/baseline (docs/ci.md). "
        "Arguments after '--' go to pytest.",
    )
    parser.add_argument(
        "--baseline",
        required=True,
        metavar="SIDE",
        help="a command prefix that runs pytest (e.g. '/venv-a/bin/python -m pytest') or a git revision "
        "(git:main, git:HEAD~1)",
    )
    parser.add_argument("--candidate", required=True, metavar="SIDE", help="as --baseline")
    _add_budget(parser)
    _add_decision(parser)
    parser.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="passed to pytest")
    parser.set_defaults(func=run)


def _add_budget(parser: argparse.ArgumentParser) -> None:
    """How many pairs, how long, and how the sides run them."""
    parser.add_argument(
        "--pairs",
        type=int,
        default=5,
        metavar="N",
        help="pairs of runs before the first look at the verdicts, from 1 to 1000 (default 5)",
    )
    parser.add_argument(
        "--max-pairs",
        type=int,
        metavar="M",
        help="while a gate is INCONCLUSIVE, add pairs up to M, looking again at about 1.5 times the pairs "
        "each time, each look at Pocock's level for alpha over the looks (default 4 x --pairs; equal to "
        "--pairs: a fixed number)",
    )
    parser.add_argument(
        "--max-time",
        type=float,
        default=1800.0,
        metavar="S",
        help="start no new pair after S seconds (default 1800); a server that does not answer within S "
        "seconds is stopped",
    )
    parser.add_argument(
        "--extra-time",
        type=float,
        default=math.inf,
        metavar="S",
        help="after the first look, start no pair that would end more than S seconds after it, judging "
        "by the last pair (default: no bound but --max-time; with --serve, 60 makes a job cost about two "
        "plain runs plus a minute; undecided benchmarks are then INCONCLUSIVE with the smallest "
        "threshold they decide)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="a fresh interpreter per run, not a fork of one warm process (the default for git sides on "
        "Linux): each run then pays the whole start-up (docs/ci.md)",
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="one pytest per side for the whole job, serving a round per run: the start-up is paid once "
        "per side, not once per run, but a benchmark whose speed depends on its process (the memory "
        "layout of data made at import) gets one draw of it per side, which a gate can read as a change "
        "(docs/ci.md)",
    )


def _add_decision(parser: argparse.ArgumentParser) -> None:
    """The gates, the output, what runs, the level and what is kept."""
    parser.add_argument(
        "--gate",
        action="append",
        default=[],
        metavar="EXPR",
        help="a gate the candidate must pass against the baseline, e.g. 'throughput:-5%%' or "
        "'latency.p99<2ms' (repeatable)",
    )
    parser.add_argument("--format", choices=formats.TABLES, default="table", help="output format")
    parser.add_argument("-k", metavar="EXPR", help="pytest's -k: only the benchmarks matching EXPR")
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        metavar="A",
        help="the chance of a wrong PASS, and of a wrong FAIL, over all looks together (default 0.05)",
    )
    parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="keep every run's JSON and log in DIR (default: removed)"
    )
    parser.add_argument(
        "--strict", action="store_true", help="a benchmark missing from any run makes the exit code 1"
    )
    arguments.add_job(parser)


def _progress(line: str) -> None:
    """A progress line of the job, on stderr as it happens."""
    print(line, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Run the two sides' pairs, print the paired comparison and its gates' verdicts; the exit code of
    the verdicts (``ab.exit_code``), 2 on bad input or a failed run, 130 or 143 when interrupted."""
    # Imported here: the runner and the decision are needed only by this command.
    from pytest_ipu.cli import ab as ab_runner
    from pytest_ipu.results import ab

    most = _most_pairs(args)
    if most is None or not _times_valid(args):
        return 2
    gate_list = arguments.gate_list(args.gate)
    if gate_list is None:
        return 2
    job_alpha = arguments.job_alpha(args.job_alpha)
    if job_alpha is None:
        return 2
    # Pairs are added only while a gate is INCONCLUSIVE: without gates, --pairs is the number.
    schedule = ab.Sequential(args.pairs, most if gate_list else args.pairs, args.alpha, job_alpha)
    settled: dict[str, ab.Settled] = {}
    try:
        plan = _plan(args, schedule.looks)
        decided = _decider(gate_list, schedule, settled) if gate_list else None
        outcome = ab_runner.run(plan, _progress, decided)
    except (ab_runner.SideError, ab_runner.RunFailed) as exc:
        print(f"pytest-ipu: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pytest-ipu: ab interrupted; worktrees and temporary files removed", file=sys.stderr)
        return 130
    except ab_runner.Terminated:
        print("pytest-ipu: ab terminated; worktrees and temporary files removed", file=sys.stderr)
        return 143
    return _report(args, plan, outcome, gate_list, schedule, settled)


def _most_pairs(args: argparse.Namespace) -> int | None:
    """The most pairs the job may run, or ``None`` after printing why ``--pairs`` or ``--max-pairs``
    is out of range."""
    from pytest_ipu.cli import ab as ab_runner

    for flag, value in (("--pairs", args.pairs), ("--max-pairs", args.max_pairs)):
        if value is not None and not ab_runner.MIN_PAIRS <= value <= ab_runner.MAX_PAIRS:
            print(
                f"pytest-ipu: {flag} {value}: out of range; give from {ab_runner.MIN_PAIRS} to "
                f"{ab_runner.MAX_PAIRS} pairs (defaults: --pairs 5, --max-pairs 20)",
                file=sys.stderr,
            )
            return None
    # --max-pairs defaults to 4 times --pairs (20 for the default 5), never below --pairs.
    most: int = args.max_pairs if args.max_pairs is not None else min(ab_runner.MAX_PAIRS, 4 * args.pairs)
    if most < args.pairs:
        print(
            f"pytest-ipu: --max-pairs {most} is below --pairs {args.pairs}: give --max-pairs >= --pairs "
            "(equal: a fixed number of pairs, no sequential looks)",
            file=sys.stderr,
        )
        return None
    return most


def _times_valid(args: argparse.Namespace) -> bool:
    """Whether ``--alpha``, ``--max-time`` and ``--extra-time`` are in range; else ``False`` after
    printing why."""
    if not 0.0 < args.alpha < 0.5:
        print(
            f"pytest-ipu: --alpha {args.alpha:g}: out of range; give a level within (0, 0.5), e.g. 0.05",
            file=sys.stderr,
        )
        return False
    if not args.max_time > 0.0:
        print(
            f"pytest-ipu: --max-time {args.max_time:g}: give a positive number of seconds (default 1800)",
            file=sys.stderr,
        )
        return False
    if not args.extra_time >= 0.0:
        print(
            f"pytest-ipu: --extra-time {args.extra_time:g}: give a number of seconds >= 0 "
            "(default: no bound)",
            file=sys.stderr,
        )
        return False
    return True


def _plan(args: argparse.Namespace, looks: tuple[int, ...]) -> ab_runner.Plan:
    """The runner's plan: both sides resolved from the working directory, and what each run passes."""
    from pytest_ipu.cli import ab as ab_runner

    pytest_args = [*(["-k", args.k] if args.k is not None else []), *args.pytest_args]
    cwd = Path.cwd()
    return ab_runner.Plan(
        ab_runner.resolve_side("baseline", args.baseline, cwd),
        ab_runner.resolve_side("candidate", args.candidate, cwd),
        looks,
        tuple(pytest_args),
        args.keep,
        cwd,
        args.max_time,
        args.extra_time,
        args.serve,
        not args.fresh,
    )


def _decider(
    gate_list: Sequence[gates.Gate], schedule: ab.Sequential, settled: dict[str, ab.Settled]
) -> ab_runner.Decided:
    """The runner's look at the verdicts after each look's pairs: benchmarks decided at a look keep
    that look's verdicts in ``settled``, and later pairs run only the others."""
    from pytest_ipu.cli import ab as ab_runner
    from pytest_ipu.results import ab
    from pytest_ipu.results import decide

    def decided(baseline: Sequence[StoredRun], candidate: Sequence[StoredRun]) -> ab_runner.Look:
        looked = ab.analyse(
            baseline,
            candidate,
            gate_list,
            alpha=schedule.alpha_per_look,
            job_alpha=schedule.job_alpha_per_look,
            settled=settled,
        )
        _progress(f"pytest-ipu ab: after {len(baseline)} pair(s): {decide.summary(looked.verdicts)}")
        settled.update(looked.settle())
        return ab_runner.Look(looked.decided, tuple(settled), looked.undecided())

    return decided


def _report(
    args: argparse.Namespace,
    plan: ab_runner.Plan,
    outcome: ab_runner.Outcome,
    gate_list: Sequence[gates.Gate],
    schedule: ab.Sequential,
    settled: dict[str, ab.Settled],
) -> int:
    """Print the paired comparison of every pair run and its gate lines; the exit code of the verdicts."""
    from pytest_ipu.report import ab as ab_report
    from pytest_ipu.results import ab

    stopped = f"; stopped: {outcome.stopped}" if outcome.stopped else ""
    result = ab.analyse(
        outcome.baseline,
        outcome.candidate,
        gate_list,
        alpha=schedule.alpha_per_look,
        job_alpha=schedule.job_alpha_per_look,
        labels=(plan.baseline.label, plan.candidate.label),
        plan=schedule.describe() + stopped,
        settled=settled,
    )
    print(ab_report.RENDERERS[args.format](result))
    arguments.print_gate_lines(ab.gate_lines(result, verbose=args.verbose), args.format)
    if outcome.directory is not None:
        _progress(f"pytest-ipu ab: runs and logs kept in {outcome.directory}")
    if args.strict and result.missing:
        print(
            f"pytest-ipu: {len(result.missing)} benchmark(s) missing from a run (--strict)", file=sys.stderr
        )
    return ab.exit_code(result, args.strict)
