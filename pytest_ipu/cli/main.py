"""The ``pytest-ipu`` command: ``summary`` of saved runs; ``compare`` of runs (with gates) and their
``report`` (plots and HTML); ``ab``, interleaved A/B runs of two sides decided on paired ratios;
``merge`` of the files of one PopRun or torchrun launch; the ``targets`` and ``devices`` (targets and power
sources) present on this machine, each with the reason when absent; ``doctor``, which also runs a
tiny model on each present target and reads each power source once (``pytest_ipu/cli/doctor.py``),
and with ``--first-contact DIR`` writes one file of what only IPU hardware can answer
(``pytest_ipu/cli/first_contact.py``).

Each command is a module of ``cli/commands/`` (its parser and its ``run``); this module builds the
parser from ``commands.PARSERS`` and calls the ``run`` the chosen command's parser set.

``summary``, ``compare`` and ``report`` take run files the way ``pytest-benchmark compare`` does:
paths, saved-run ids (``0001``) or globs, looked up in ``--storage`` (``results.storage``).

The commands print their output; ``main`` returns their exit code. Exit codes: 0 success
(every gate PASS), 1 a gate FAILed (``compare``, ``ab``), 3 a gate was INCONCLUSIVE and none
FAILed (``decide.exit_code``), 2 bad input (an unreadable or foreign file says which file and
why, an id that names no run says where it looked) or, for ``ab``, a side that failed to run; 141
(128 + SIGPIPE, what a shell reports for a command killed by a closed pipe) when the reader of the
output went away (``pytest-ipu compare 0001 0002 | head -1``): the command stops there, quietly.
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
