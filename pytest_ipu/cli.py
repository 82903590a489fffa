"""The ``pytest-ipu`` command: ``summary`` of saved runs; ``merge`` of the files of one PopRun launch; the
``targets`` and ``devices`` (targets and power sources) present on this machine, each with the reason
when absent.

The only module that prints to stdout directly and calls ``sys.exit``. Exit codes: 0 success,
2 bad input (an unreadable or foreign file says which file and why).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_ipu import __version__
from pytest_ipu import backends
from pytest_ipu import benchmark_json
from pytest_ipu import poprun
from pytest_ipu import power
from pytest_ipu import report
from pytest_ipu.backends.base import Availability


def _summary(paths: Sequence[Path]) -> int:
    rows = []
    for path in paths:
        try:
            stored = benchmark_json.load_run(path)
        except benchmark_json.RunFileError as exc:
            print(f"pytest-ipu: {exc}", file=sys.stderr)
            return 2
        for bench in stored:
            if bench.record is not None:
                group = bench.group or bench.name.partition("[")[0]
                rows.append(
                    report.Row(
                        f"{group} ({path.name})" if len(paths) > 1 else group, bench.name, bench.record
                    )
                )
        if not any(b.record for b in stored):
            print(f"pytest-ipu: {path}: no benchmark carries extra_info['ipu']", file=sys.stderr)
    print("\n".join(report.tables(rows)))
    return 0


def _merge(out: Path, paths: Sequence[Path]) -> int:
    try:
        merged = poprun.merge(paths)
        poprun.write_atomic(out, merged)
    except poprun.MergeError as exc:
        print(f"pytest-ipu: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"pytest-ipu: {out}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 2
    count = merged["machine_info"]["ipu"][poprun.KEY]["count"]
    print(f"merged {count} PopRun instance(s), {len(merged['benchmarks'])} benchmark(s), into {out}")
    return 0


def _targets() -> int:
    for target in backends.all_candidates():
        backend = backends.make_backend(target)
        availability = (
            backend.availability() if backend else Availability.no(backends.unknown_backend_reason(target))
        )
        print(f"{target!s:24} {'present' if availability.ok else 'absent: ' + availability.reason}")
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
    """Entry point of the ``pytest-ipu`` console script."""
    parser = argparse.ArgumentParser(
        prog="pytest-ipu", description="pytest-ipu: inspect targets and saved runs"
    )
    parser.add_argument("--version", action="version", version=f"pytest-ipu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    summary = sub.add_parser(
        "summary", help="print the pytest-ipu tables of saved pytest-benchmark JSON files"
    )
    summary.add_argument("files", nargs="+", type=Path, metavar="RUN.json")
    merge = sub.add_parser(
        "merge",
        help="merge the JSON files of the instances of one PopRun launch into one pytest-benchmark file",
    )
    merge.add_argument("out", type=Path, metavar="OUT.json")
    merge.add_argument("files", nargs="+", type=Path, metavar="IN.json")
    sub.add_parser("targets", help="list the built-in backend targets and whether each is present here")
    sub.add_parser("devices", help="list compute targets and power sources, each with why it is absent")
    args = parser.parse_args(argv)
    if args.command == "summary":
        return _summary(args.files)
    if args.command == "merge":
        return _merge(args.out, args.files)
    if args.command == "devices":
        return _devices()
    return _targets()


if __name__ == "__main__":
    sys.exit(main())
