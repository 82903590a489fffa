"""Both sides of ``pytest-ipu ab`` run as forks of one warm process (the default for git sides on Linux).

``Forker`` starts the *forker*, which imports ahead what the runs import from outside either side's
tree, then forks one child per run: the child takes its side's directory, ``sys.path`` head and
environment, reseeds the generators and runs ``pytest.main`` as ``python -m pytest`` would. The
forker never forks with a thread running (a thread's locks would stay held in the child forever): a
module is imported ahead only once a throwaway child imported it without starting one, and what
every run would ask alike (the CPU, ``_remember_cpu_info``; a side's commit,
``bench_seam.commit_info``) is asked once in such a child. Once its session has finished, and not
before, each run freezes every object out of the collector's sight (``gc.freeze``,
``_FreezeAtEnd``), so that pytest's closing full collections walk nothing.

The protocol is ``serve_channel``'s (a JSON object per line): ``{"warm": RUN}``, answered
``{"exit": CODE, "preloaded": K, "threads": N, "refused": WHY}``; then ``{"run": RUN, "learn":
BOOL}`` per run, answered the same (``learn``) or ``{"exit": CODE}``; the end of the requests stops
it. A ``RUN`` is ``{"argv", "cwd", "env", "log"}`` (``env``'s ``PYTHONPATH`` goes on ``sys.path`` as
at start-up: the forker runs without one). SIGTERM stops the forker and its running child. This
module is the forker's program too (``python -m pytest_ipu.cli.ab_fork R,W``): it imports nothing heavy.

Documented in docs/ci.md (section "Interleaved A/B on one runner: pytest-ipu ab", paragraph "Forked runs").
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_ipu.pytest_plugin import bench_seam
from pytest_ipu.pytest_plugin import serve_channel

#: What every forked run adds to its pytest arguments: pytest rewrites the asserts of its plugins'
#: modules as it imports them, and warns of each it finds imported already. Imported ahead, they
#: keep plain asserts (which only words a failing assert inside a plugin differently), and the
#: warning would stand in every run, or fail it where warnings are errors.
REWRITE_WARNING = ("-W", "ignore::pytest.PytestAssertRewriteWarning")
#: How long a child asked to stop (SIGTERM, when the forker is stopped) has before SIGKILL.
CHILD_GRACE_S = 10.0


class ForkFailed(RuntimeError):
    """The forker ended, broke the channel or did not answer in time: the message says which."""


def run_request(argv: Sequence[str], cwd: Path, env: Mapping[str, str], log: Path) -> dict[str, Any]:
    """One run as the forker reads it (the module docstring's ``RUN``)."""
    return {"argv": list(argv), "cwd": str(cwd), "env": dict(env), "log": str(log)}


class Forker:
    """The parent's end: the forker started with ``python`` in ``cwd`` (an empty directory: its own
    ``sys.path`` head must hold nothing of either side) with ``env``, its own output in ``log``."""

    def __init__(self, python: str, cwd: Path, env: Mapping[str, str], log: Path) -> None:
        self.log = log
        self.process, self.channel, self.command = serve_channel.start(
            lambda fds: [python, "-m", __name__, fds], cwd, env, log
        )

    def _ask(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        try:
            self.channel.send(message)
            reply = self.channel.receive(timeout_s)
        except serve_channel.ChannelError as exc:
            raise ForkFailed(f"the forker (pid {self.process.pid}) did not answer: {exc}") from None
        if reply is None:
            self.process.wait()
            raise ForkFailed(
                f"the forker (pid {self.process.pid}) ended ({self.ended()}); its log: {self.log}"
            )
        if "error" in reply:
            raise ForkFailed(f"the forker (pid {self.process.pid}): {reply['error']}")
        return reply

    def warm(self, run: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        """Run ``run`` (collecting the tests, say) in a child and import ahead what it imported from
        outside the sides' trees, where importing it starts no thread; the reply: the forker's
        ``threads`` (1 where it can fork), the modules ``preloaded`` so far, what was ``refused``
        (empty, or why) and the child's ``exit``. Raises ``ForkFailed``."""
        return self._ask({"warm": dict(run)}, timeout_s)

    def run(self, run: Mapping[str, Any], timeout_s: float, learn: bool = False) -> int:
        """One run in a fresh child; its exit code (negative: the signal that ended it). With
        ``learn``, what the run imported is then imported ahead as ``warm`` does (the first runs:
        modules a run imports only once it measures or reports). Raises ``ForkFailed``."""
        return int(self._ask({"run": dict(run), "learn": learn}, timeout_s)["exit"])

    def ended(self) -> str:
        """How the forker ended, for a message, or ``running``."""
        from pytest_ipu.processes import how_ended

        return how_ended(self.process.poll())

    def describe(self) -> str:
        """The forker, for a message."""
        return f"the forker, pid {self.process.pid}, log {self.log}"

    def close(self, graceful: bool, grace_s: float) -> None:
        """Stop the forker. ``graceful`` (the job is done): the end of its requests, and ``grace_s``
        to end; otherwise (an error, Ctrl-C, SIGTERM) at once. Then SIGTERM (it stops its running
        child too) and SIGKILL after ``grace_s``; reaped either way."""
        from pytest_ipu.processes import stop_command

        self.channel.close()
        if graceful:
            with contextlib.suppress(subprocess.TimeoutExpired):  # it is signalled below
                self.process.wait(grace_s)
        stop_command(self.process, grace_s)


# The forker's side: everything below runs in the process ``Forker`` starts.


class _Stop(BaseException):
    """SIGTERM in the forker: unwind, stopping the child."""


def _threads() -> int:
    """The forker's threads (the kernel's count, which sees threads a library started in C too)."""
    try:
        return sum(1 for _ in Path("/proc/self/task").iterdir())
    except OSError:
        import threading

        return threading.active_count()


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + os.sep)


def _plugin_packages() -> set[str]:
    """The top-level packages of the installed pytest plugins (entry points ``pytest11``): wherever
    their files are (an editable install), the runs of both sides import the same ones."""
    from importlib import metadata

    found = metadata.entry_points()
    # Python 3.10+ selects by group; 3.8 and 3.9 give a mapping of groups.
    group = found.select(group="pytest11") if hasattr(found, "select") else found.get("pytest11", ())
    return {entry.value.split(":")[0].split(".")[0] for entry in group}


def _held(top: str, roots: Sequence[str]) -> bool:
    """Whether a folder of ``roots`` holds a top-level module or package ``top``: a run started
    there imports that one, whatever the forker would have imported."""
    return any(Path(r, top).exists() or Path(r, f"{top}.py").exists() for r in roots)


def _outside(roots: Sequence[str]) -> list[str]:
    """The modules imported so far that may be imported ahead: each file under the interpreter's
    own library folders (the standard library, site-packages) or of an installed pytest plugin's
    package, and neither under nor named by a module of ``roots`` (the sides' trees), with every
    module of its top-level package so."""
    import sysconfig

    libraries = {
        os.path.realpath(p)
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        for p in [sysconfig.get_paths().get(key)]
        if p
    }
    trees = [os.path.realpath(r) for r in roots]
    plugins = _plugin_packages()

    def allowed(file: str, top: str) -> bool:
        real = os.path.realpath(file)
        installed = top in plugins or any(_under(real, t) for t in libraries)
        return installed and not any(_under(real, t) for t in trees)

    refused = {"__main__", "__mp_main__", "conftest"}
    kept: set[str] = set()  # tops looked at and not held by roots (torch alone has 1,000 modules)
    names: list[str] = []
    for name, module in list(sys.modules.items()):
        top = name.split(".")[0]
        if top in refused or (top not in kept and _held(top, roots)):
            refused.add(top)
            continue
        kept.add(top)
        file = getattr(module, "__file__", None)
        # A package without a file (a namespace package) is where its folders are. A relative
        # "file" is no place on disk (torch.ops says "_ops.py"): the module is its package's.
        places = [file] if isinstance(file, str) else list(getattr(module, "__path__", None) or ())
        places = [p for p in places if isinstance(p, str) and Path(p).is_absolute()]
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        nowhere = not places and origin not in ("built-in", "frozen", None)
        if nowhere or not all(allowed(p, top) for p in places):
            refused.add(top)
            continue
        names.append(name)
    return [n for n in names if n.split(".")[0] not in refused]


def _child(request: Mapping[str, Any], modules_file: str | None, commit: Mapping[str, Any] | None) -> None:
    """The forked child: become the side's run (its commit ``commit``, where the forker asked),
    run pytest, leave by ``os._exit`` (never returning into the forker's loop)."""
    code = 3
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        out = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        os.chdir(request["cwd"])
        sys.path[:1] = _path_head(request["cwd"], request["env"].get("PYTHONPATH", ""))
        os.environ.clear()
        os.environ.update(request["env"])
        _reseed()
        if commit is not None:
            bench_seam.remember_commit_info(commit)
        import pytest

        code = int(pytest.main(list(request["argv"]), plugins=[_FreezeAtEnd()]))
        if modules_file is not None:
            head = _path_head(request["cwd"], request["env"].get("PYTHONPATH", ""))
            # Its own threads too: one, once it has imported all of them, and no probe is needed.
            listed = {"names": _outside(head), "threads": _threads()}
            Path(modules_file).write_text(json.dumps(listed), encoding="utf-8")
        _leave()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class _FreezeAtEnd:
    """A forked run's plugin: once the session has finished (every benchmark measured and written),
    freeze every object out of the garbage collector's sight, so that pytest's full collections as
    it ends (``unraisableexception``'s) walk nothing (the module docstring)."""

    @staticmethod
    def pytest_sessionfinish() -> None:
        """Freeze (before or after the other plugins' ends of the session: what they make then is
        young, and cheap to collect)."""
        gc.freeze()


def _path_head(cwd: str, pythonpath: str) -> list[str]:
    """What ``python -m pytest`` started in ``cwd`` with ``pythonpath`` puts before the interpreter's
    own entries of ``sys.path``: the directory, then each entry made absolute against it."""
    return [cwd, *(str(Path(cwd, entry)) for entry in pythonpath.split(os.pathsep) if entry)]


def _reseed() -> None:
    """Fresh seeds, as a fresh process would have, for the generators imported ahead."""
    import random

    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.seed()


def _leave() -> None:
    """What an interpreter does on its way out, which ``os._exit`` skips: wait for the threads that
    are not daemons, then run the exit handlers (pytest's removal of its temporary directories' locks)."""
    import atexit
    import threading

    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()


def _fork(
    request: Mapping[str, Any],
    modules_file: str | None,
    stopping: list[int],
    commits: dict[str, dict[str, Any] | None],
) -> int:
    """Fork a child for ``request`` and wait for it; its exit code (negative: its signal).
    ``commits``: the sides' commits asked so far, by directory (``_commit``)."""
    commit = _commit(request, stopping, commits)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(request, modules_file, commit)
    return _reap(pid, stopping)


def _commit(
    request: Mapping[str, Any], stopping: list[int], commits: dict[str, dict[str, Any] | None]
) -> dict[str, Any] | None:
    """The commit of ``request``'s side as pytest-benchmark finds it there, asked in a throwaway
    child the first time (in the side's directory, with its environment); ``None`` until
    pytest-benchmark is imported ahead, or where the child gave no answer (the runs ask then)."""
    cwd = request["cwd"]
    if cwd not in commits and "pytest_benchmark.utils" in sys.modules:

        def ask() -> Any:
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(request["env"])
            return bench_seam.commit_info()

        commits[cwd] = _ask(ask, stopping)
    return commits.get(cwd)


def _reap(pid: int, stopping: list[int]) -> int:
    """Wait for the child ``pid`` (listed in ``stopping`` meanwhile, for SIGTERM to stop it); its
    exit code (negative: the signal that ended it)."""
    stopping.append(pid)
    _, status = os.waitpid(pid, 0)
    # Only once reaped: SIGTERM meanwhile (``_Stop``) leaves it listed, for ``_stop_child``.
    stopping.remove(pid)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _preload(names: Sequence[str]) -> None:
    """Import ``names`` in order (one that fails to import is left to the runs)."""
    import importlib

    for name in names:
        # Whatever one module raises, the runs import it themselves; SIGTERM (``_Stop``) still stops.
        with contextlib.suppress(Exception, SystemExit):
            importlib.import_module(name)


def _stop_child(stopping: Sequence[int]) -> None:
    import time

    for pid in stopping:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + CHILD_GRACE_S
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break  # reaped already: SIGTERM came between ``_reap``'s wait and its unlisting
            time.sleep(0.05)
        else:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


def _probe(names: Sequence[str], stopping: list[int]) -> int:
    """The threads a child has after importing ``names`` (at most 255): imports that start a
    thread are found in a throwaway child, never in the forker."""
    pid = os.fork()
    if pid == 0:
        threads = 255
        try:
            _preload(names)
            threads = min(_threads(), 255)
        finally:
            os._exit(threads)
    return _reap(pid, stopping)


def _remember_cpu_info(stopping: list[int]) -> None:
    """Once py-cpuinfo is imported ahead: ask it for the CPU in a throwaway child (its probes start
    processes, and may start threads, which the forker must never have), and make every later run's
    ``cpuinfo.get_cpu_info()`` return a copy of that answer. The runs are the forker's children, on
    its CPU; what the answer holds of the moment (the clock's current speed) is the forker's."""
    cpuinfo: Any = sys.modules.get("cpuinfo")
    # Asked already (this function's own answer is in place)?
    if cpuinfo is None or getattr(cpuinfo.get_cpu_info, "__module__", None) == __name__:
        return
    remembered = _ask(cpuinfo.get_cpu_info, stopping)
    if remembered is None:
        return  # no answer: the runs ask py-cpuinfo themselves

    def get_cpu_info() -> dict[str, Any]:
        return copy.deepcopy(remembered)

    cpuinfo.get_cpu_info = get_cpu_info


def _ask(question: Callable[[], Any], stopping: list[int]) -> dict[str, Any] | None:
    """``question()``'s answer, a JSON object, asked in a throwaway child; ``None`` where the child
    gave none (it raised, or answered something else)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        answer = b""
        with contextlib.suppress(BaseException):
            answer = json.dumps(question()).encode()
        with contextlib.suppress(BaseException), os.fdopen(write, "wb") as out:
            out.write(answer)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answered:
        answer = answered.read()
    _reap(pid, stopping)
    try:
        got = json.loads(answer)
    except ValueError:
        return None
    return got if isinstance(got, dict) else None


def _learn(
    request: Mapping[str, Any], stopping: list[int], own: int, commits: dict[str, dict[str, Any] | None]
) -> dict[str, Any]:
    """Run ``request`` in a child that lists what it imported, then import ahead what may be (where
    a throwaway child finds that importing it starts no thread); the reply: the child's ``exit``,
    the modules ``preloaded`` so far (beyond the forker's ``own``), and the forker's ``threads``."""
    listed = Path(request["log"]).parent / f"forker-modules-{os.getpid()}.json"
    code = _fork(request, str(listed), stopping, commits)
    try:
        found = json.loads(listed.read_text(encoding="utf-8"))
        listed.unlink()
        names = [n for n in found["names"] if n not in sys.modules]
        threads = int(found["threads"])
    except (OSError, ValueError, KeyError, TypeError):
        names, threads = [], 1
    refused = ""
    if names:
        # The child ran with them all imported: with no thread left at its end, importing them
        # starts none (or none that lasts); otherwise a throwaway child finds out.
        if threads > 1:
            threads = _probe(names, stopping)
        if threads == 1:
            _preload(names)
            _remember_cpu_info(stopping)
        else:
            refused = f"{len(names)} module(s) not imported ahead: importing them started a thread"
    return {"exit": code, "preloaded": len(sys.modules) - own, "threads": _threads(), "refused": refused}


def _serve(channel: serve_channel.Channel) -> None:
    stopping: list[int] = []
    commits: dict[str, dict[str, Any] | None] = {}
    own = len(sys.modules)  # the forker's own: what it imports ahead comes on top
    try:
        while True:
            message = channel.receive()
            if message is None or "stop" in message:
                return
            request = message.get("warm") or message.get("run")
            if request is None:
                channel.send({"error": f"not a request: {message}"})
            elif _threads() > 1:
                channel.send({"error": f"it has {_threads()} threads and cannot fork safely"})
            elif "warm" in message or message.get("learn"):
                channel.send(_learn(request, stopping, own, commits))
            else:
                channel.send({"exit": _fork(request, None, stopping, commits)})
    finally:
        _stop_child(stopping)


def main(argv: Sequence[str]) -> int:
    """The forker's program: serve the channel ``argv[0]`` (``R,W``) until its end or SIGTERM."""
    # A Ctrl-C at the terminal reaches the whole process group: the runs stop on it, and the forker
    # waits to be stopped by the parent (the end of its requests, or SIGTERM).
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise _Stop()

    signal.signal(signal.SIGTERM, stop)
    in_fd, out_fd = serve_channel.parse_fds(argv[0])
    channel = serve_channel.Channel(in_fd, out_fd)
    with contextlib.suppress(_Stop, serve_channel.ChannelError):
        import pytest  # noqa: F401 -- every run imports it: once, here

        _serve(channel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
