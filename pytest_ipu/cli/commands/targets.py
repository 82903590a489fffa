"""``pytest-ipu targets``: the built-in backend targets and whether each is present here."""

from __future__ import annotations

import argparse
import typing

if typing.TYPE_CHECKING:
    from pytest_ipu.cli.arguments import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """Declare ``targets``."""
    parser = subparsers.add_parser(
        "targets", help="list the built-in backend targets and whether each is present here"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the targets (``print_targets``); 0."""
    del args  # the command takes no arguments
    return print_targets()


def print_targets() -> int:
    """Every built-in target, present or absent (with the reason); ``*`` marks those that
    ``--ipu-backend=auto`` selects here, by the session's rule: the auto candidates present."""
    # Imported here: the backends' registry is needed only by this command and ``devices``.
    from pytest_ipu import backends
    from pytest_ipu.backends.base import Availability

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
