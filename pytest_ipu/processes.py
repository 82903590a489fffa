"""Ending a child process on every path: the one way the instance workers and the power sampler
process are stopped when asking them to exit did not work."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

__all__ = ["stop_process"]


def stop_process(process: BaseProcess, grace_s: float) -> None:
    """Terminate ``process`` if it still runs, kill it if it outlives ``grace_s`` seconds, and reap it
    either way (a child left unreaped is a zombie until the parent exits)."""
    if process.is_alive():
        process.terminate()
        process.join(grace_s)
    if process.is_alive():
        process.kill()
    process.join()
