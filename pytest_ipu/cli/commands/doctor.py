"""``pytest-ipu doctor``: what is installed, known incompatibilities, and a tiny model run on each present
target and one read of each power source (``cli/doctor.py``); with ``--first-contact DIR``, what only
IPU hardware can answer (``cli/first_contact.py``)."""

from __future__ import annotations

import argparse
import typing
from pathlib import Path

if typing.TYPE_CHECKING:
    from pytest_ipu.cli.arguments import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """Declare ``doctor`` and its arguments."""
    parser = subparsers.add_parser(
        "doctor",
        help="check this machine: what is installed, known incompatibilities, and a tiny model run on each "
        "present target and one read of each power source; exits 1 when a present one fails",
        description="Find the runtimes, SDK and libraries installed (nothing imported), state each known "
        "incompatibility in one line with its fix, then compile and run a tiny model on every present "
        "target (the IPU Model included) and read every power source once, each in a child process killed "
        "after --timeout. Exit code 0 when every present target and source worked, 1 when one failed, "
        "2 for bad usage (docs/doctor.md).",
    )
    parser.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds each target or power source may take before its probe is killed (default 300)",
    )
    parser.add_argument(
        "--all", action="store_true", help="also run the opt-in targets (torch-compile, onnxruntime-trt)"
    )
    parser.add_argument(
        "--first-contact",
        type=Path,
        metavar="DIR",
        help="on a machine with IPUs: run what only IPU hardware can answer (gcipuinfo's listing, the IPU "
        "ids PopART and PopTorch see, 1-IPU runs, two instances at once, popdist under PopRun, versions), "
        "each step in a child process killed after --timeout, and write it all to one JSON file in DIR "
        "to send back (docs/ipu.md); without IPUs it says so in one line and writes nothing",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the doctor, or the first contact when ``--first-contact`` is given; their exit code."""
    # Imported here: the doctor's probes are needed only by this command.
    if args.first_contact is not None:
        from pytest_ipu.cli import first_contact

        return first_contact.main(args.first_contact, args.timeout)
    from pytest_ipu.cli import doctor

    return doctor.main(args.format, args.timeout, args.all)
