"""One side of ``pytest-ipu ab`` served by one long-lived pytest (``--ipu-serve``, ``serve_channel``).

``Server`` starts the side's pytest with the channel's two pipes, waits until it has collected, asks
for one round at a time and stops it. A pytest that cannot serve (one without this pytest-ipu, or an
older one: it exits, refusing the option, before it is ready) is told apart from one that serves
(``ready`` returns ``False``): the caller then runs that side one process per run. Every way out
(``close``, an error, Ctrl-C, SIGTERM) ends the process: the channel is closed (a server reads the
end of its requests and ends its session as any run ends), then ``processes.stop_command``
(SIGTERM, so that it ends its own children; SIGKILL after a grace).
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path

from pytest_ipu.processes import how_ended
from pytest_ipu.processes import stop_command
from pytest_ipu.pytest_plugin import serve_channel

#: How long a server asked to stop has to tear its session down before it is signalled.
STOP_GRACE_S = 60.0


class ServerFailed(RuntimeError):
    """A server ended, broke the channel or did not answer in time: the message says which, in one line."""


class Server:
    """A side's serving pytest: ``command`` (without the option) run in ``cwd`` with ``env``, its
    output in ``log``."""

    def __init__(self, command: Sequence[str], cwd: Path, env: Mapping[str, str], log: Path) -> None:
        self.log = log
        self.process, self.channel, self.command = serve_channel.start(
            lambda fds: [*command, f"{serve_channel.OPTION}={fds}"], cwd, env, log
        )

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.process.pid

    def ready(self, timeout_s: float) -> bool:
        """Whether the server collected and is ready for rounds; ``False`` when it ended first (it
        cannot serve, or its tests do not collect: ``ended`` says how). Raises ``ServerFailed`` when
        it says nothing within ``timeout_s`` seconds."""
        try:
            message = self.channel.receive(timeout_s)
        except serve_channel.ChannelError as exc:
            raise ServerFailed(f"its pytest (pid {self.pid}) was not ready to serve: {exc}") from None
        if message is None:
            self.process.wait()
            return False
        return "ready" in message

    def refused_option(self) -> bool:
        """Whether the pytest that ended before it was ready refused ``--ipu-serve`` itself (an
        older pytest-ipu, or none), rather than failing on the tests."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
        return any(
            "unrecognized arguments" in line and serve_channel.OPTION in line for line in text.splitlines()
        )

    def ended(self) -> str:
        """How the process ended, for a message (``exit 4``, ``killed by SIGKILL``), or ``running``."""
        return how_ended(self.process.poll())

    def round(self, target: Path, skip: Sequence[str], timeout_s: float) -> int:
        """One round: every collected test but ``skip`` (node ids) once, its JSON written to
        ``target``; the number of tests that failed in it. Raises ``ServerFailed``."""
        try:
            self.channel.send({"run": str(target), "skip": list(skip)})
            reply = self.channel.receive(timeout_s)
        except serve_channel.ChannelError as exc:
            raise ServerFailed(f"its pytest (pid {self.pid}) did not answer: {exc}") from None
        if reply is None:
            self.process.wait()
            raise ServerFailed(f"its pytest (pid {self.pid}) ended in the round ({self.ended()})")
        if "error" in reply:
            raise ServerFailed(f"its pytest (pid {self.pid}): {reply['error']}")
        return int(reply.get("failed", 0))

    def ask_to_stop(self) -> None:
        """Say ``stop`` and close the channel: the server ends its session as a run ends (``close``
        then waits for it)."""
        if self.process.poll() is None:
            with contextlib.suppress(serve_channel.ChannelError):  # it is ending already
                self.channel.send({"stop": True})
        self.channel.close()

    def close(self, graceful: bool, grace_s: float) -> None:
        """Stop the server. ``graceful`` (the job is done): ``ask_to_stop``, then ``STOP_GRACE_S``
        seconds to end its session as a run ends; otherwise (an error, Ctrl-C, SIGTERM) at once.
        Then ``stop_command`` (SIGTERM, SIGKILL after ``grace_s``); reaped either way."""
        try:
            if graceful:
                self.ask_to_stop()
                with contextlib.suppress(subprocess.TimeoutExpired):  # signalled below
                    self.process.wait(STOP_GRACE_S)
        finally:
            self.channel.close()
            stop_command(self.process, grace_s)

    def describe(self) -> str:
        """The server's command line, for a message."""
        return shlex.join(self.command)
