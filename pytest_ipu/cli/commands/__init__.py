"""The subcommands of ``pytest-ipu``, one module each: its ``add_parser(subparsers)`` declares the
command's arguments and sets its ``run(args) -> int`` as the parser's ``func`` (``set_defaults``).

``PARSERS`` is the one list ``cli/main.py`` builds the command from, in the order ``--help`` lists
them: a new command is a module here and a line in it. A command's heavy imports stay inside its
``run``, so that ``pytest-ipu --help`` imports none of them.
"""

from __future__ import annotations

import typing

from pytest_ipu.cli.commands import ab
from pytest_ipu.cli.commands import compare
from pytest_ipu.cli.commands import devices
from pytest_ipu.cli.commands import doctor
from pytest_ipu.cli.commands import history
from pytest_ipu.cli.commands import merge
from pytest_ipu.cli.commands import report
from pytest_ipu.cli.commands import summary
from pytest_ipu.cli.commands import targets

if typing.TYPE_CHECKING:
    from pytest_ipu.cli.arguments import Subparsers

#: Each command's ``add_parser``, in the order ``pytest-ipu --help`` lists them.
PARSERS: tuple[typing.Callable[[Subparsers], None], ...] = (
    summary.add_parser,
    merge.add_parser,
    compare.add_parser,
    report.add_parser,
    ab.add_parser,
    history.add_parser,
    targets.add_parser,
    devices.add_parser,
    doctor.add_parser,
)
