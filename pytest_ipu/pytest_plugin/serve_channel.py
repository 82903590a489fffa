"""The channel between ``pytest-ipu ab`` and a pytest that serves rounds (``--ipu-serve=R,W``: two
inherited pipe descriptors, ``R`` to read requests from and ``W`` to write replies to; stdin and stdout
stay pytest's own). Each message is one line of JSON:

1. the server, once it has collected: ``{"ready": N}`` (N tests collected);
2. ``ab``: ``{"run": FILE, "skip": [node ids]}``; the server runs every collected test once, in
   collection order, but those of ``skip``, writes the round's pytest-benchmark JSON to ``FILE`` and
   replies ``{"done": FILE, "failed": K}`` (K tests failed), or ``{"error": TEXT}`` when it could not
   write the file;
3. ``ab``: ``{"stop": true}``, or the end of the requests (``ab`` closed its end, or died): the server
   ends its session as any pytest run ends, and exits.

Loaded by ``ab`` and by a serving pytest only. Documented in docs/ci.md (section "One process per side:
--serve").
"""

from __future__ import annotations

import json
import os
import select
import time
from typing import TYPE_CHECKING
from typing import Any
from typing import Dict
from typing import cast

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from collections.abc import Mapping
    from pathlib import Path

#: The pytest option that makes a run serve rounds (``pytest_plugin.serving``).
OPTION = "--ipu-serve"

Message = Dict[str, Any]


class ChannelError(RuntimeError):
    """The other end closed the channel, sent what is not a message, or did not answer in time."""


def parse_fds(text: str) -> tuple[int, int]:
    """``--ipu-serve``'s value ``R,W`` as two descriptors; raises ``ValueError`` naming the value."""
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(
            f"{OPTION}={text!r}: give two pipe descriptors 'R,W' (the option is for pytest-ipu ab, "
            "which passes them)"
        )
    return int(parts[0]), int(parts[1])


class Channel:
    """One end of the channel: messages written to ``out_fd``, read from ``in_fd`` (both owned)."""

    def __init__(self, in_fd: int, out_fd: int) -> None:
        self.in_fd = in_fd
        self.out_fd = out_fd
        self._buffer = b""

    def send(self, message: Message) -> None:
        """Write ``message`` as one line; ``ChannelError`` when the other end is gone."""
        if self.out_fd < 0:
            raise ChannelError("the channel is closed")
        data = (json.dumps(message) + "\n").encode()
        try:
            while data:
                data = data[os.write(self.out_fd, data) :]
        except OSError as exc:  # BrokenPipeError: the reader is gone
            raise ChannelError(f"the other end is gone ({exc.strerror or exc})") from None

    def receive(self, timeout_s: float | None = None) -> Message | None:
        """The next message; ``None`` at the end of the channel (the other end closed it). Raises
        ``ChannelError`` after ``timeout_s`` seconds without a whole message, or on a line that is
        not a JSON object."""
        if self.in_fd < 0:
            return None
        finite = timeout_s is not None and timeout_s < float("inf")
        deadline = time.monotonic() + timeout_s if finite and timeout_s is not None else None
        while b"\n" not in self._buffer:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.in_fd], [], [], left)[0]:
                    raise ChannelError(f"no answer in {timeout_s:g} s")
            chunk = os.read(self.in_fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(line.decode())
        except ValueError:
            raise ChannelError(f"not a message: {line[:200]!r}") from None
        if not isinstance(message, dict):
            raise ChannelError(f"not a message: {line[:200]!r}")
        return cast(Message, message)

    def close(self) -> None:
        """Close both descriptors (the other end then reads the end of the channel); once: a
        descriptor's number is reused by the next file opened."""
        fds, self.in_fd, self.out_fd = (self.in_fd, self.out_fd), -1, -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)


def start(
    command: Callable[[str], list[str]], cwd: Path, env: Mapping[str, str], log: Path
) -> tuple[subprocess.Popen[bytes], Channel, list[str]]:
    """Start the process ``command("R,W")`` (given the pipe descriptors it is to read requests from
    and write replies to) in ``cwd`` with ``env``, its output in ``log``: the process, the parent's
    end of the channel, and the command line. The child's ends are closed here once it has them,
    so that each side reads the end of the channel as soon as the other is gone."""
    import subprocess

    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    line = command(f"{requests_r},{replies_w}")
    try:
        with log.open("w", encoding="utf-8") as sink:
            process = subprocess.Popen(
                line,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                pass_fds=(requests_r, replies_w),
            )
    except BaseException:
        for fd in (requests_r, requests_w, replies_r, replies_w):
            os.close(fd)
        raise
    os.close(requests_r)
    os.close(replies_w)
    return process, Channel(replies_r, requests_w), line
