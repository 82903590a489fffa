"""Child processes: the one worker protocol, and the one way a child is stopped.

``Worker`` is a child process started with ``spawn`` (or ``forkserver``) that answers requests over
a pipe: the instances' worker processes (``pytest_ipu.placement.instances``) and the power sampler
processes (``pytest_ipu.power.process_sampler``) are each one. The parent sends a pickled request
and waits for the reply with a timeout (``WorkerTimeout``), in slices (``wait_readable``) so that
Ctrl-C is never left waiting for a reply; a child that ended reads as ``WorkerGone``.
``Worker.stop`` ends the child on every path (``stop_process``: SIGTERM, SIGKILL after a grace
period, reaped either way); a worker that was never stopped is abandoned when it is
garbage or at interpreter exit: its pipe is closed, which tells the child to release what it holds
and exit, and it is stopped if it has not within the grace period. The child's side is
``child_requests`` (each request until the parent goes away) and ``send_reply``; it ignores SIGINT, so
that Ctrl-C reaches the parent alone, which then stops its workers in order. Fork is never used:
forking a process that has started an SDK's threads can deadlock the child.

``stop_command`` is ``stop_process`` for a command (the repeat workers); ``sigterm_raises`` turns
SIGTERM into an exception, so that the ``finally`` blocks that stop the children run when this
process is terminated. Importing this module imports neither ``multiprocessing`` nor ``pickle``.
"""

from __future__ import annotations

import contextlib
import select
import signal
import time
from collections.abc import Callable
from collections.abc import Iterator
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    import subprocess
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

__all__ = [
    "FAILED",
    "START_METHODS",
    "WAIT_SLICE_S",
    "Worker",
    "WorkerGone",
    "WorkerTimeout",
    "child_requests",
    "describe_error",
    "error_text",
    "one_line",
    "send_reply",
    "sigterm_raises",
    "stop_command",
    "stop_process",
    "wait_in_slices",
    "wait_readable",
]


def one_line(text: str) -> str:
    """``text`` on one line: every run of whitespace, newlines included, becomes one space. The one
    place a message is made one line (errors, notes, what crosses a worker's pipe)."""
    return " ".join(text.split())


def error_text(exc: BaseException) -> str:
    """An exception's message on one line; its type's name where the message is empty."""
    return one_line(str(exc)) or type(exc).__name__


def describe_error(exc: BaseException) -> str:
    """``Type: message`` on one line (the type alone for an empty message): how a failure crosses a
    pipe (an exception object might not unpickle in the parent) and how messages name it."""
    text = one_line(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


#: Start methods that give a child a fresh interpreter (``fork`` would copy the SDK's threads' locks).
START_METHODS = ("spawn", "forkserver")
#: The first item of a reply that reports a failure; its second is the failure as one line of text.
FAILED = "failed"
#: After ``terminate`` (SIGTERM), how long before ``kill`` (SIGKILL), by default.
GRACE_S = 5.0
#: The longest a wait for a child (or a thread) blocks before it returns to the interpreter. CPython
#: runs a signal's handler (Ctrl-C's KeyboardInterrupt) only between bytecodes of the main thread, and
#: a blocking call is woken only by a signal that arrives during it: one that arrives just before the
#: call blocks, or that another thread took, would wait for the child's answer, perhaps forever.
WAIT_SLICE_S = 0.05


class WorkerGone(Exception):
    """The worker process ended (killed, crashed, or it exited): its pipe is closed."""


class WorkerTimeout(Exception):
    """The worker process did not answer in time."""


class Worker:
    """The parent's side of one child process that answers requests over a pipe.

    ``target(conn, *args)`` runs in the child, started with ``context`` (``spawn`` or
    ``forkserver``), SIGINT ignored; ``conn`` is its end of the pipe, closed when ``target`` returns.
    ``daemon`` children are terminated by ``multiprocessing`` at exit (they cannot start children
    of their own). ``grace_s`` is how long a child has to exit after its pipe closed, and after
    SIGTERM, before it is killed. Everything sent is pickled.
    """

    def __init__(
        self,
        target: Callable[..., None],
        args: tuple[object, ...],
        *,
        name: str,
        context: str = "spawn",
        daemon: bool = False,
        grace_s: float = GRACE_S,
    ) -> None:
        import multiprocessing
        import multiprocessing.util

        if context not in START_METHODS:
            raise ValueError(
                f"context={context!r}: a Worker starts with {' or '.join(map(repr, START_METHODS))}; fork "
                "copies a process whose runtime threads may hold locks, which can deadlock the child"
            )
        # Literal names: each start method's own context type has ``Process``.
        mp = (
            multiprocessing.get_context("forkserver")
            if context == "forkserver"
            else multiprocessing.get_context("spawn")
        )
        self.conn, child_end = mp.Pipe()
        self.process: BaseProcess = mp.Process(
            target=_child_main, args=(target, child_end, *args), name=name, daemon=daemon
        )
        self._grace_s = grace_s
        self._stopped = False
        # Registered before the child starts, and run by multiprocessing's own exit handler before it
        # joins children: a worker that was never stopped cannot make the interpreter wait forever.
        self._finalizer = multiprocessing.util.Finalize(
            self, _abandon, args=(self.process, self.conn, grace_s), exitpriority=100
        )
        try:
            self.process.start()
        except BaseException:
            self.conn.close()
            self._finalizer.cancel()
            raise
        finally:
            child_end.close()  # only the child may hold its end: its exit must read as end-of-file here
        #: The child's process id, kept once it is stopped.
        self.pid: int | None = self.process.pid

    def send(self, message: tuple[object, ...]) -> None:
        """Send ``message`` (pickled); ``WorkerGone`` when the child has ended."""
        import pickle

        self.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def send_bytes(self, data: bytes) -> None:
        """Send a message pickled already (a request sent often is pickled once)."""
        try:
            self.conn.send_bytes(data)
        except OSError:  # BrokenPipeError, ConnectionResetError: the child is gone
            raise WorkerGone from None

    def receive(self, timeout_s: float | None) -> tuple[Any, ...]:
        """The child's next reply; ``WorkerTimeout`` when none comes within ``timeout_s`` seconds
        (``None``: wait for it), ``WorkerGone`` when the child has ended."""
        try:
            if not wait_readable(self.conn, timeout_s):
                raise WorkerTimeout
            reply: tuple[Any, ...] = self.conn.recv()
        except (EOFError, OSError):
            raise WorkerGone from None
        return reply

    def request(self, message: tuple[object, ...], timeout_s: float | None) -> tuple[Any, ...]:
        """``send`` then ``receive``: the child's reply to ``message``."""
        self.send(message)
        return self.receive(timeout_s)

    def exit_status(self) -> str:
        """``pid N, exit code C`` once the child has ended (waits up to a second for it)."""
        self.process.join(1.0)
        code = self.process.exitcode
        return f"pid {self.pid}, {'still running' if code is None else f'exit code {code}'}"

    def stop(self) -> None:
        """End the child whatever state it is in (``stop_process``) and close the pipe; idempotent.
        Interrupted (Ctrl-C), it can be called again, and the worker is still abandoned at exit."""
        if self._stopped:
            return
        try:
            stop_process(self.process, self._grace_s)
        finally:
            self.conn.close()
        self._stopped = True
        self._finalizer.cancel()
        self.process.close()  # the child is reaped: release its sentinel


def wait_in_slices(ready: Callable[[float], bool], timeout_s: float | None) -> bool:
    """Whether ``ready(slice_s)``, one wait of at most ``slice_s`` seconds, came true within
    ``timeout_s`` seconds (``None``: wait until it does). Each wait lasts at most ``WAIT_SLICE_S``,
    so that Ctrl-C's handler runs within one slice however its signal fell; a ``timeout_s`` of 0 or
    less still asks ``ready`` once, without blocking."""
    if timeout_s is None:
        while not ready(WAIT_SLICE_S):
            pass
        return True
    deadline = time.monotonic() + timeout_s
    while True:
        left_s = deadline - time.monotonic()
        if ready(max(0.0, min(WAIT_SLICE_S, left_s))):
            return True
        if left_s <= 0:
            return False


def wait_readable(conn: Connection, timeout_s: float | None) -> bool:
    """Whether ``conn`` has something to read (a message, or its end) within ``timeout_s`` seconds
    (``None``: wait until it has), waiting in slices (``wait_in_slices``); ``OSError`` when ``conn``
    is closed."""
    poller = select.poll()  # unlike select.select, not limited to descriptors below 1024
    poller.register(conn.fileno(), select.POLLIN)
    return wait_in_slices(lambda slice_s: bool(poller.poll(slice_s * 1000.0)), timeout_s)


def _abandon(process: BaseProcess, conn: Connection, grace_s: float) -> None:
    """Last resort for a worker that was never stopped (at exit, or when it is garbage): close the
    pipe, which makes the child release what it holds and exit, then stop it if it has not."""
    conn.close()
    process.join(grace_s)
    stop_process(process, grace_s)


def _child_main(target: Callable[..., None], conn: Connection, *args: object) -> None:
    """The child: ``target(conn, *args)`` with SIGINT ignored (Ctrl-C reaches the parent alone, which
    then stops its workers in order), the pipe closed whatever happens."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        target(conn, *args)
    finally:
        conn.close()


def child_requests(conn: Connection) -> Iterator[tuple[Any, ...]]:
    """In the child: each request the parent sends, until it goes away (end-of-file on the pipe)."""
    while True:
        try:
            request: tuple[Any, ...] = conn.recv()
        except (EOFError, OSError):
            return
        yield request


def send_reply(conn: Connection, message: tuple[object, ...]) -> bool:
    """In the child: send ``message`` (or, if it does not pickle, a failure saying so); ``False``
    when the parent is gone."""
    import pickle

    try:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        data = pickle.dumps((FAILED, f"its reply could not be pickled: {describe_error(exc)}"))
    try:
        conn.send_bytes(data)
    except (OSError, EOFError):
        return False
    return True


def stop_process(process: BaseProcess, grace_s: float) -> None:
    """Terminate ``process`` if it still runs, kill it if it outlives ``grace_s`` seconds, and reap it
    either way (a child left unreaped is a zombie until the parent exits): the one way a worker is
    stopped (``Worker.stop`` and its abandonment)."""
    if process.is_alive():
        process.terminate()
        process.join(grace_s)
    if process.is_alive():
        process.kill()
    process.join()


def how_ended(returncode: int | None) -> str:
    """How a command ended, for a message: ``exit 4``, ``killed by SIGKILL``, or ``running`` while
    ``returncode`` is ``None`` (``Popen.poll()``'s)."""
    if returncode is None:
        return "running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit {returncode}"


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
