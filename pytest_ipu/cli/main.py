"""The ``pytest-ipu`` command: ``summary`` of saved runs; ``compare`` of runs (with gates) and their
``report`` (plots and HTML); ``ab``, interleaved A/B runs of two sides decided on paired ratios;
``merge`` of the files of one PopRun or torchrun launch; the ``targets`` and ``devices`` (targets and power
sources) present on this machine, each with the reason when absent; ``doctor``, which also runs a
tiny model on each present target and reads each power source once (``pytest_ipu/cli/doctor.py``),
and with ``--first-contact DIR`` writes one file of what only IPU hardware can answer
(``pytest_ipu/cli/first_contact.py``).

``summary``, ``compare`` and ``report`` take run files the way ``pytest-benchmark compare`` does:
paths, saved-run ids (``0001``) or globs, looked up in ``--storage`` (``results.storage``).

The only module that prints to stdout directly and calls ``sys.exit``. Exit codes: 0 success
(every gate PASS), 1 a gate FAILed (``compare``, ``ab``), 3 a gate was INCONCLUSIVE and none
FAILed (``decide.exit_code``), 2 bad input (an unreadable or foreign file says which file and
why, an id that names no run says where it looked) or, for ``ab``, a side that failed to run; 141
(128 + SIGPIPE, what a shell reports for a command killed by a closed pipe) when the reader of the
output went away (``pytest-ipu compare 0001 0002 | head -1``): the command stops there, quietly.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_ipu import __version__
from pytest_ipu import backends
from pytest_ipu import power
from pytest_ipu.backends.base import Availability
from pytest_ipu.measure import units
from pytest_ipu.placement import poprun
from pytest_ipu.placement import torchrun
from pytest_ipu.report import power_blocks as block_report
from pytest_ipu.report import terminal as report
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import compare
from pytest_ipu.results import family
from pytest_ipu.results import gates
from pytest_ipu.results import launch_merge
from pytest_ipu.results import storage
from pytest_ipu.results.power_blocks import PowerBlock
from pytest_ipu.results.records import group_name

#: The exit code when the output's reader closed the pipe: 128 + SIGPIPE, as a shell reports a
#: command that the signal ended, so ``set -o pipefail`` still sees that the output was cut short.
PIPE_CLOSED = 141

#: The help of a run argument of ``summary``, ``compare`` and ``report``.
RUN_HELP = (
    "a pytest-benchmark JSON file, or a saved run's id ('0001', '0001_abc') or a glob ('*/0001_*') "
    "looked up in --storage, as 'pytest-benchmark compare' takes them"
)


def _run_files(arguments: Sequence[str], storage_uri: str) -> list[Path] | None:
    """The run files the arguments name (paths, saved-run ids, globs); ``None`` after printing the
    one-line error of an argument that names none (or several where one was meant)."""
    try:
        return storage.resolve_all(arguments, storage.storage_path(storage_uri))
    except storage.RunLookupError as exc:
        print(f"pytest-ipu: {exc}", file=sys.stderr)
        return None


def _summary(paths: Sequence[Path]) -> int:
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


def _merge(out: Path, paths: Sequence[Path]) -> int:
    try:
        merged = launch_merge.merge(paths, poprun.IDENTITIES)
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


def _job_alpha(text: str) -> float | None:
    """``--job-alpha``'s level, or ``None`` after printing why it is not one."""
    try:
        return units.parse_level(text)
    except ValueError as exc:
        print(f"pytest-ipu: --job-alpha {text!r}: {exc}", file=sys.stderr)
        return None


def _compare(args: argparse.Namespace, paths: Sequence[Path]) -> int:
    gate_texts, fmt, strict, drift_text = args.gate, args.format, args.strict, args.drift
    if len(paths) < 2:
        got = f"{len(paths)} ({paths[0]})" if paths else "0"
        print(
            f"pytest-ipu: compare needs at least two runs, got {got}: give two or more files or ids, "
            "or a glob that matches several",
            file=sys.stderr,
        )
        return 2
    try:
        gate_list = [gates.parse(text) for text in gate_texts]
    except gates.GateError as exc:
        print(f"pytest-ipu: --gate: {exc}", file=sys.stderr)
        return 2
    try:
        drift = units.parse_share(drift_text)
    except ValueError as exc:
        print(f"pytest-ipu: --drift {drift_text!r}: {exc}", file=sys.stderr)
        return 2
    job_alpha = _job_alpha(args.job_alpha)
    if job_alpha is None:
        return 2
    try:
        runs = [benchmark_json.read_run(path) for path in paths]
    except benchmark_json.RunFileError as exc:
        print(f"pytest-ipu: {exc}", file=sys.stderr)
        return 2
    # Imported here: the table writers are needed only by this command, not at start-up.
    from pytest_ipu.report import compare as compare_report

    comparison = compare.compare_runs(runs)
    print(compare_report.RENDERERS[fmt](comparison))
    verdicts = compare.check_gates(comparison, gate_list, drift=drift, job_alpha=job_alpha)
    lines = compare.gate_lines(gate_list, verdicts, verbose=args.verbose)
    if lines:
        print("\n".join(("", *(f"- {line}" if fmt == "markdown" else line for line in lines))))
    if strict and comparison.missing:
        print(
            f"pytest-ipu: {len(comparison.missing)} benchmark(s) missing from a run (--strict)",
            file=sys.stderr,
        )
    return compare.exit_code(comparison, gate_list, verdicts, strict)


def _ab(args: argparse.Namespace) -> int:
    # Imported here: the runner and the decision are needed only by this command.
    from pytest_ipu.cli import ab as ab_runner
    from pytest_ipu.report import ab as ab_report
    from pytest_ipu.results import ab
    from pytest_ipu.results import decide
    from pytest_ipu.results.benchmark_json import StoredRun

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    for flag, value in (("--pairs", args.pairs), ("--max-pairs", args.max_pairs)):
        if value is not None and not ab_runner.MIN_PAIRS <= value <= ab_runner.MAX_PAIRS:
            print(
                f"pytest-ipu: {flag} {value}: out of range; give from {ab_runner.MIN_PAIRS} to "
                f"{ab_runner.MAX_PAIRS} pairs (defaults: --pairs 5, --max-pairs 20)",
                file=sys.stderr,
            )
            return 2
    # --max-pairs defaults to 4 times --pairs (20 for the default 5), never below --pairs.
    most = args.max_pairs if args.max_pairs is not None else min(ab_runner.MAX_PAIRS, 4 * args.pairs)
    if most < args.pairs:
        print(
            f"pytest-ipu: --max-pairs {most} is below --pairs {args.pairs}: give --max-pairs >= --pairs "
            "(equal: a fixed number of pairs, no sequential looks)",
            file=sys.stderr,
        )
        return 2
    if not 0.0 < args.alpha < 0.5:
        print(
            f"pytest-ipu: --alpha {args.alpha:g}: out of range; give a level within (0, 0.5), e.g. 0.05",
            file=sys.stderr,
        )
        return 2
    if not args.max_time > 0.0:
        print(
            f"pytest-ipu: --max-time {args.max_time:g}: give a positive number of seconds (default 1800)",
            file=sys.stderr,
        )
        return 2
    if not args.extra_time >= 0.0:
        print(
            f"pytest-ipu: --extra-time {args.extra_time:g}: give a number of seconds >= 0 "
            "(default: no bound)",
            file=sys.stderr,
        )
        return 2
    try:
        gate_list = [gates.parse(text) for text in args.gate]
    except gates.GateError as exc:
        print(f"pytest-ipu: --gate: {exc}", file=sys.stderr)
        return 2
    job_alpha = _job_alpha(args.job_alpha)
    if job_alpha is None:
        return 2
    # Pairs are added only while a gate is INCONCLUSIVE: without gates, --pairs is the number.
    schedule = ab.Sequential(args.pairs, most if gate_list else args.pairs, args.alpha, job_alpha)
    pytest_args = [*(["-k", args.k] if args.k is not None else []), *args.pytest_args]
    try:
        cwd = Path.cwd()
        plan = ab_runner.Plan(
            ab_runner.resolve_side("baseline", args.baseline, cwd),
            ab_runner.resolve_side("candidate", args.candidate, cwd),
            schedule.looks,
            tuple(pytest_args),
            args.keep,
            cwd,
            args.max_time,
            args.extra_time,
            args.serve,
        )

        # Benchmarks decided at a look keep that look's verdicts; later pairs run only the others.
        settled: dict[str, ab.Settled] = {}

        def decided(baseline: Sequence[StoredRun], candidate: Sequence[StoredRun]) -> ab_runner.Look:
            looked = ab.analyse(
                baseline,
                candidate,
                gate_list,
                alpha=schedule.alpha_per_look,
                job_alpha=schedule.job_alpha_per_look,
                settled=settled,
            )
            progress(f"pytest-ipu ab: after {len(baseline)} pair(s): {decide.summary(looked.verdicts)}")
            settled.update(looked.settle())
            return ab_runner.Look(looked.decided, tuple(settled), looked.undecided())

        outcome = ab_runner.run(plan, progress, decided if gate_list else None)
    except (ab_runner.SideError, ab_runner.RunFailed) as exc:
        print(f"pytest-ipu: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pytest-ipu: ab interrupted; worktrees and temporary files removed", file=sys.stderr)
        return 130
    except ab_runner.Terminated:
        print("pytest-ipu: ab terminated; worktrees and temporary files removed", file=sys.stderr)
        return 143
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
    lines = ab.gate_lines(result, verbose=args.verbose)
    if lines:
        print("\n".join(("", *(f"- {line}" if args.format == "markdown" else line for line in lines))))
    if outcome.directory is not None:
        progress(f"pytest-ipu ab: runs and logs kept in {outcome.directory}")
    if args.strict and result.missing:
        print(
            f"pytest-ipu: {len(result.missing)} benchmark(s) missing from a run (--strict)", file=sys.stderr
        )
    return ab.exit_code(result, args.strict)


def _history(args: argparse.Namespace) -> int:
    # Imported here: the change point search loads numpy, needed only by this command.
    from pytest_ipu.report import changes as changes_report
    from pytest_ipu.results import changes
    from pytest_ipu.results import history

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


def _targets() -> int:
    """Every built-in target, present or absent (with the reason); ``*`` marks those that
    ``--ipu-backend=auto`` selects here, by the session's rule: the auto candidates present."""
    auto = set(backends.auto_candidates())
    rows = []
    for target in backends.all_candidates():
        backend = backends.make_backend(target)
        availability = (
            backend.availability() if backend else Availability.no(backends.unknown_backend_reason(target))
        )
        rows.append((target, availability))
    selected = [target for target, availability in rows if target in auto and availability.ok]
    for target, availability in rows:
        mark = "*" if target in selected else " "
        print(f"{mark} {target!s:24} {'present' if availability.ok else 'absent: ' + availability.reason}")
    if selected:
        print(f"\n* --ipu-backend=auto (the default) selects: {', '.join(map(str, selected))}")
    else:
        # As the session does: with none present, auto parametrizes every candidate, and each skips.
        candidates = ", ".join(str(t) for t in backends.auto_candidates())
        print(
            f"\n--ipu-backend=auto (the default) finds none of its targets here ({candidates}): "
            "their tests skip with the reasons above"
        )
    return 0


def _devices() -> int:
    print("compute targets:")
    _targets()
    print("\npower sources:")
    for name in power.BUILTIN:
        source = power.make_source(name, "")
        availability = source.availability()
        print(f"{name:24} {'available' if availability.ok else 'unavailable: ' + availability.reason}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pytest-ipu`` console script: the command's exit code, or ``PIPE_CLOSED``
    without a traceback when the reader of its output closed the pipe."""
    try:
        code = _main(argv)
        # Flushed here, inside the handler: else the interpreter's last flush meets the closed pipe.
        sys.stdout.flush()
    except BrokenPipeError:
        # Python's recipe: point stdout at devnull, so that what is still buffered goes nowhere
        # instead of failing again at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return PIPE_CLOSED
    return code


def _add_job(parser: argparse.ArgumentParser) -> None:
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


def _add_storage(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-s",
        "--storage",
        default=storage.DEFAULT_STORAGE,
        metavar="URI",
        help="where saved-run ids and globs are looked up: a folder or file://PATH, as pytest-benchmark's "
        "--storage (default: %(default)s)",
    )


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(
        prog="pytest-ipu", description="pytest-ipu: inspect targets and saved runs"
    )
    parser.add_argument("--version", action="version", version=f"pytest-ipu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    summary = sub.add_parser(
        "summary", help="print the pytest-ipu tables of saved pytest-benchmark JSON files"
    )
    summary.add_argument("files", nargs="+", metavar="RUN", help=RUN_HELP)
    _add_storage(summary)
    merge = sub.add_parser(
        "merge",
        help="merge the JSON files of the instances (ranks) of one PopRun (torchrun) launch into one file",
    )
    merge.add_argument("out", type=Path, metavar="OUT.json")
    merge.add_argument("files", nargs="+", type=Path, metavar="IN.json")
    comparing = sub.add_parser(
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
    comparing.add_argument("files", nargs="+", metavar="RUN", help=RUN_HELP)
    _add_storage(comparing)
    comparing.add_argument(
        "--gate",
        action="append",
        default=[],
        metavar="EXPR",
        help="a gate each later run must pass against the first, e.g. 'throughput:-5%%' or "
        "'latency.p99<2ms' (repeatable; docs/ci.md)",
    )
    comparing.add_argument("--format", choices=compare.FORMATS, default="table", help="output format")
    comparing.add_argument(
        "--drift",
        default="5%",
        metavar="SHARE",
        help="run-to-run drift allowed for when repeats are a gate's only noise estimate (fewer than 3 "
        "runs before it), as --ipu-drift (default 5%%)",
    )
    comparing.add_argument(
        "--strict", action="store_true", help="a benchmark missing from any run makes the exit code 1"
    )
    _add_job(comparing)
    reporting = sub.add_parser(
        "report",
        help="plots (PNG, SVG) and a self-contained HTML page of saved runs; given a storage folder, the "
        "history of every benchmark across commits with its change points",
    )
    reporting.add_argument(
        "files",
        nargs="+",
        metavar="RUN|STORAGE",
        help=RUN_HELP + "; or a pytest-benchmark storage folder (e.g. .benchmarks): its history view",
    )
    _add_storage(reporting)
    reporting.add_argument(
        "--machine",
        action="append",
        default=[],
        metavar="ID",
        help="with a storage folder: the machine id or glob whose runs to draw (repeatable; default: this "
        "machine's)",
    )
    reporting.add_argument(
        "-o", "--output", type=Path, default=Path("report"), metavar="DIR", help="output directory"
    )
    reporting.add_argument(
        "--references",
        type=Path,
        metavar="FILE",
        help="a TOML file of published reference points drawn beside the scaling views of training "
        "benchmarks, never mixed into the measured data (docs/examples/mlperf-resnet50-references.toml)",
    )
    ab_parser = sub.add_parser(
        "ab",
        help="interleaved A/B benchmarking: run a baseline and a candidate alternately (ABBA) on this "
        "machine and gate on paired ratios; exits 1 when a gate FAILs, 3 when one is INCONCLUSIVE (and none "
        "FAILs), 2 on bad input or a failed run",
        description="Run two sides, each a command prefix that runs pytest or a git revision (git:REV), "
        "alternately in ABBA order, and decide on the paired ratios candidate/baseline (docs/ci.md). "
        "Arguments after '--' go to pytest.",
    )
    ab_parser.add_argument(
        "--baseline",
        required=True,
        metavar="SIDE",
        help="a command prefix that runs pytest (e.g. '/venv-a/bin/python -m pytest') or a git revision "
        "(git:main, git:HEAD~1)",
    )
    ab_parser.add_argument("--candidate", required=True, metavar="SIDE", help="as --baseline")
    ab_parser.add_argument(
        "--pairs",
        type=int,
        default=5,
        metavar="N",
        help="pairs of runs before the first look at the verdicts, from 1 to 1000 (default 5)",
    )
    ab_parser.add_argument(
        "--max-pairs",
        type=int,
        metavar="M",
        help="while a gate is INCONCLUSIVE, add pairs up to M, looking again at about 1.5 times the pairs "
        "each time, each look at alpha / looks (default 4 x --pairs; equal to --pairs: a fixed number)",
    )
    ab_parser.add_argument(
        "--max-time",
        type=float,
        default=1800.0,
        metavar="S",
        help="start no new pair after S seconds (default 1800); a server that does not answer within S "
        "seconds is stopped",
    )
    ab_parser.add_argument(
        "--extra-time",
        type=float,
        default=math.inf,
        metavar="S",
        help="after the first look, start no pair that would end more than S seconds after it, judging "
        "by the last pair (default: no bound but --max-time; with --serve, 60 makes a job cost about two "
        "plain runs plus a minute; undecided benchmarks are then INCONCLUSIVE with the smallest "
        "threshold they decide)",
    )
    ab_parser.add_argument(
        "--serve",
        action="store_true",
        help="one pytest per side for the whole job, serving a round per run: the start-up is paid once "
        "per side, not once per run, but a benchmark whose speed depends on its process (the memory "
        "layout of data made at import) gets one draw of it per side, which a gate can read as a change "
        "(docs/ci.md)",
    )
    ab_parser.add_argument(
        "--gate",
        action="append",
        default=[],
        metavar="EXPR",
        help="a gate the candidate must pass against the baseline, e.g. 'throughput:-5%%' or "
        "'latency.p99<2ms' (repeatable)",
    )
    # compare's formats: the same three, without importing the A/B modules for --help.
    ab_parser.add_argument("--format", choices=compare.FORMATS, default="table", help="output format")
    ab_parser.add_argument("-k", metavar="EXPR", help="pytest's -k: only the benchmarks matching EXPR")
    ab_parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        metavar="A",
        help="the chance of a wrong PASS, and of a wrong FAIL, over all looks together (default 0.05)",
    )
    ab_parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="keep every run's JSON and log in DIR (default: removed)"
    )
    ab_parser.add_argument(
        "--strict", action="store_true", help="a benchmark missing from any run makes the exit code 1"
    )
    _add_job(ab_parser)
    ab_parser.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="passed to pytest")
    hist = sub.add_parser(
        "history",
        help="performance across commits from pytest-benchmark's storage: every benchmark's change points, "
        "worst first; with --fail-on-regression, exits 1 when the newest commits start a regression beyond "
        "the threshold, 3 when it cannot tell, 2 on bad input",
        description="Read the runs --benchmark-autosave keeps (a storage folder, default --storage, or run "
        "files), build one series per benchmark and machine ordered by commit, and find the change points of "
        "all series together: every run is evidence, a change must stand out from its series' noise, and "
        "false change points are held to 5%% of those reported (docs/ci.md).",
    )
    hist.add_argument(
        "sources",
        nargs="*",
        metavar="STORAGE|RUN",
        help="a storage folder (machine folders and all), or run files, saved-run ids or globs (default: "
        "--storage)",
    )
    _add_storage(hist)
    hist.add_argument(
        "--format", choices=("table", "markdown", "json"), default="table", help="output format"
    )
    hist.add_argument(
        "--machine",
        action="append",
        default=[],
        metavar="ID",
        help="the machine id (storage folder name, e.g. Linux-CPython-3.11-64bit) or glob whose runs to read "
        "(repeatable; default: this machine's)",
    )
    hist.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME",
        help="a metric to follow, e.g. throughput or time.mean, or 'all' (repeatable; default: each "
        "benchmark's gate metric, throughput for a pytest-ipu record, time.median for a plain benchmark)",
    )
    hist.add_argument(
        "--fail-on-regression",
        metavar="SHARE",
        help="exit 1 when a regression beyond SHARE (e.g. 5%%) starts among the newest --recent commits, 3 "
        "when it cannot tell (too few runs after the change, or too much noise), 2 when the newest run was "
        "left out (unreadable or impossible values), 0 otherwise",
    )
    hist.add_argument(
        "--recent",
        type=int,
        default=10,
        metavar="N",
        help="how many of the newest commits --fail-on-regression looks at (default 10)",
    )
    sub.add_parser("targets", help="list the built-in backend targets and whether each is present here")
    sub.add_parser("devices", help="list compute targets and power sources, each with why it is absent")
    doctor_parser = sub.add_parser(
        "doctor",
        help="check this machine: what is installed, known incompatibilities, and a tiny model run on each "
        "present target and one read of each power source; exits 1 when a present one fails",
        description="Find the runtimes, SDK and libraries installed (nothing imported), state each known "
        "incompatibility in one line with its fix, then compile and run a tiny model on every present "
        "target (the IPU Model included) and read every power source once, each in a child process killed "
        "after --timeout. Exit code 0 when every present target and source worked, 1 when one failed, "
        "2 for bad usage (docs/doctor.md).",
    )
    doctor_parser.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    doctor_parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds each target or power source may take before its probe is killed (default 300)",
    )
    doctor_parser.add_argument(
        "--all", action="store_true", help="also run the opt-in targets (torch-compile, onnxruntime-trt)"
    )
    doctor_parser.add_argument(
        "--first-contact",
        type=Path,
        metavar="DIR",
        help="on a machine with IPUs: run what only IPU hardware can answer (gcipuinfo's listing, the IPU "
        "ids PopART and PopTorch see, 1-IPU runs, two instances at once, popdist under PopRun, versions), "
        "each step in a child process killed after --timeout, and write it all to one JSON file in DIR "
        "to send back (docs/ipu.md); without IPUs it says so in one line and writes nothing",
    )
    args = parser.parse_args(argv)
    if args.command == "merge":
        return _merge(args.out, args.files)
    if args.command == "report" and any(Path(f).is_dir() for f in args.files):
        from pytest_ipu.report import html as html_report  # matplotlib only when a report is asked for

        if not all(Path(f).is_dir() for f in args.files):
            print(
                f"pytest-ipu: report {' '.join(args.files)}: give storage folders (the history view) or run "
                "files (the runs side by side), not both",
                file=sys.stderr,
            )
            return 2
        return html_report.history_main(args.files, args.storage, args.machine, args.output)
    if args.command == "report" and args.machine:
        print(
            f"pytest-ipu: report --machine {args.machine[0]}: --machine picks the runs of a storage folder's "
            "history; give the storage folder (e.g. .benchmarks), or leave --machine out for run files",
            file=sys.stderr,
        )
        return 2
    if args.command in ("summary", "compare", "report"):
        files = _run_files(args.files, args.storage)
        if files is None:
            return 2
        if args.command == "summary":
            return _summary(files)
        if args.command == "compare":
            return _compare(args, files)
        from pytest_ipu.report import html as html_report  # matplotlib only when a report is asked for

        return html_report.main(files, args.output, args.references)
    if args.command == "ab":
        return _ab(args)
    if args.command == "history":
        return _history(args)
    if args.command == "devices":
        return _devices()
    if args.command == "doctor":
        # Imported here: the doctor's probes are needed only by this command.
        if args.first_contact is not None:
            from pytest_ipu.cli import first_contact

            return first_contact.main(args.first_contact, args.timeout)
        from pytest_ipu.cli import doctor

        return doctor.main(args.format, args.timeout, args.all)
    return _targets()


if __name__ == "__main__":
    sys.exit(main())
