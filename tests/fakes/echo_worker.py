"""The child of the ``pytest_ipu.processes.Worker`` tests: it answers each request by its first item.

``("echo", value)`` is answered ``("ok", value, pid)``; ``("silent",)`` gets no answer;
``("unpicklable",)`` is answered with something that does not pickle; ``("exit",)`` ends the child.
Imported by reference in the spawned child, so it imports nothing heavy.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pytest_ipu.processes import child_requests
from pytest_ipu.processes import send_reply

if TYPE_CHECKING:
    from multiprocessing.connection import Connection


def serve(conn: Connection, greeting: str) -> None:
    """Say ``greeting``, then answer requests until told to exit or the parent goes away."""
    send_reply(conn, ("ready", greeting, os.getpid()))
    for request in child_requests(conn):
        if request[0] == "echo":
            send_reply(conn, ("ok", request[1], os.getpid()))
        elif request[0] == "unpicklable":
            send_reply(conn, ("ok", lambda: None))
        elif request[0] == "exit":
            return
