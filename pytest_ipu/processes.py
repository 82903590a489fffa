"""Ending a child process on every path: the one way the instance workers, the power sampler
process and the repeat workers are stopped when asking them to exit did not work; and SIGTERM turned
into an exception, so that the ``finally`` blocks that stop them run when this process is terminated."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from collections.abc import Iterator
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    import subprocess
    from multiprocessing.process import BaseProcess

__all__ = ["sigterm_raises", "stop_command", "stop_process"]


def stop_process(process: BaseProcess, grace_s: float) -> None:
    """Terminate ``process`` if it still runs, kill it if it outlives ``grace_s`` seconds, and reap it
    either way (a child left unreaped is a zombie until the parent exits)."""
    if process.is_alive():
        process.terminate()
        process.join(grace_s)
    if process.is_alive():
        process.kill()
    process.join()


def stop_command(process: subprocess.Popen[Any], grace_s: float) -> None:
    """``stop_process`` for a command (``subprocess.Popen``): SIGTERM first, so that it can end its own
    children and remove its files, SIGKILL after ``grace_s`` seconds; reaped either way."""
    import subprocess  # only the callers that run commands pay for it

    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait()


@contextlib.contextmanager
def sigterm_raises(exception: Callable[[int], BaseException]) -> Iterator[None]:
    """While the block runs, SIGTERM raises ``exception(signum)`` in the main thread, so that every
    ``finally`` on the way out runs (a cancelled CI job, a ``kill``); the previous handler is back
    afterwards. Only the main thread can set a handler: elsewhere SIGTERM keeps what it had."""

    def handler(signum: int, frame: Any) -> None:
        # Once is enough: a second SIGTERM must not cut the cleanup short (SIGKILL still can).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise exception(signum)

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
