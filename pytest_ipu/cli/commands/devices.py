"""``pytest-ipu devices``: the compute targets and the power sources, each with why it is absent."""

from __future__ import annotations

import argparse
import typing

from pytest_ipu.cli.commands import targets

if typing.TYPE_CHECKING:
    from pytest_ipu.cli.arguments import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """Declare ``devices``."""
    parser = subparsers.add_parser(
        "devices", help="list compute targets and power sources, each with why it is absent"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the targets as ``targets`` does, then each built-in power source; 0."""
    # Imported here: the power sources are needed only by this command.
    from pytest_ipu import power

    del args  # the command takes no arguments
    print("compute targets:")
    targets.print_targets()
    print("\npower sources:")
    for name in power.BUILTIN:
        source = power.make_source(name, "")
        availability = source.availability()
        print(f"{name:24} {'available' if availability.ok else 'unavailable: ' + availability.reason}")
    return 0
