"""The ``pytest-ipu`` command: ``summary`` of saved runs; ``merge`` of the files of one PopRun or torchrun
launch; ``compare`` of runs (with gates) and their ``report``; ``ab``, interleaved A/B runs of two sides;
``history``; the ``targets`` and ``devices`` present here; ``doctor`` (``cli/doctor.py``), with
``--first-contact DIR`` (``cli/first_contact.py``).

Each command is a module of ``cli/commands/`` (its parser and its ``run``); this module builds the
parser from ``commands.PARSERS`` and calls the ``run`` the chosen command's parser set. The commands
print their output; ``main`` returns their exit code, or ``PIPE_CLOSED`` when the output's reader
went away (the command stops there, quietly).

Documented in docs/ci.md (sections "What an INCONCLUSIVE verdict does" for the exit codes, and
"Comparing saved runs" for how runs are named and exit 141).
"""

from __future__ import annotations

import argparse
import os
import sys
import typing
from collections.abc import Sequence

from pytest_ipu import __version__
from pytest_ipu.cli import commands

#: The exit code when the output's reader closed the pipe: 128 + SIGPIPE, as a shell reports a
#: command that the signal ended, so ``set -o pipefail`` still sees that the output was cut short.
PIPE_CLOSED = 141


def build_parser() -> argparse.ArgumentParser:
    """The ``pytest-ipu`` parser: ``--version`` and every command of ``commands.PARSERS``."""
    parser = argparse.ArgumentParser(
        prog="pytest-ipu", description="pytest-ipu: inspect targets and saved runs"
    )
    parser.add_argument("--version", action="version", version=f"pytest-ipu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add_parser in commands.PARSERS:
        add_parser(sub)
    return parser


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    run: typing.Callable[[argparse.Namespace], int] = args.func
    return run(args)


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


if __name__ == "__main__":
    sys.exit(main())
