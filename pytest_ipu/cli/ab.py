"""Running ``pytest-ipu ab``: the two sides, alternately, in ABBA order, one pytest process per run.

``resolve_side`` reads a side: ``git:REV`` must name a commit (``git rev-parse --verify REV^{commit}``);
anything else is split like a shell line (``shlex``) and is a command when its first word is an
executable (a path to an executable file, or a name on ``PATH``), a git revision when it is a single
word that resolves to a commit; both at once, or neither, is an error. A git side runs from a detached
worktree. ``share`` is each run's part of the time budget. A side runs as a fresh process per run, as
forks of one warm process (``ab_fork``) or by one serving pytest (``Plan.serve``, ``ab_server``).
Worktrees and temporary files are removed on every path. Nothing here prints: progress lines go to a
callback (the command writes them to stderr).

Documented in docs/ci.md (sections "Interleaved A/B on one runner: pytest-ipu ab" and "One process
per side: --serve").
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import typing
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Literal

from pytest_ipu.backports import remove_prefix
from pytest_ipu.cli import ab_fork
from pytest_ipu.cli import ab_server
from pytest_ipu.processes import sigterm_raises
from pytest_ipu.processes import stop_command
from pytest_ipu.results import benchmark_json
from pytest_ipu.results.benchmark_json import StoredRun

#: Bounds of ``--pairs``: at least one pair; past a thousand it is a typo, not a plan.
MIN_PAIRS = 1
MAX_PAIRS = 1000
#: Lines of a failed run's output quoted in its error.
TAIL_LINES = 20
#: The environment variable of ``--ipu-repeats``, set to 1 unless the caller chose otherwise.
REPEATS_ENV = "PYTEST_IPU_REPEATS"
#: The environment variable of ``--ipu-max-time``, set to the run's share of the budget (``share``)
#: unless the caller chose one.
MAX_TIME_ENV = "PYTEST_IPU_MAX_TIME"
#: Python's hash seed: one for both sides of a forked job (``ab_fork``), the caller's if set.
HASH_SEED_ENV = "PYTHONHASHSEED"
#: A benchmark's time budget in one plain run: pytest-ipu's default ``--ipu-max-time``
#: (``Settings.max_time_s``, 2 s) and pytest-benchmark's default ``--benchmark-max-time`` (1 s, its
#: ``pytest_addoption``). The runs of ``ab`` share them: see ``share``.
IPU_MAX_TIME_S = 2.0
BENCHMARK_MAX_TIME_S = 1.0
#: How many times shorter than its even share of those budgets each run measures. What spreads a
#: benchmark's runs is the process it runs in, not how many rounds the run times, so shorter runs
#: lose nothing a pair can see and leave time for more pairs: A/A of the recipe study's twenty
#: benchmarks beside two CPU hogs, 10 pairs, three jobs each alternately, the median benchmark
#: spread 1.8 to 2.5 % between pairs at a quarter of the share against 2.2 to 4.3 % at the whole,
#: and a job took 32 s against 49 s (2026-12-07).
SHORTER = 4

Role = Literal["baseline", "candidate"]
Progress = typing.Callable[[str], None]


class SideError(ValueError):
    """Bad input to ``pytest-ipu ab``: one line naming the value, where it came from, and the fix."""


class RunFailed(RuntimeError):
    """A side's pytest run failed: the message names the side, the pair, the command and its output."""


@dataclass(frozen=True)
class Side:
    """One side of the comparison: a command prefix, or a commit checked out in a worktree."""

    role: Role
    spec: str
    kind: Literal["command", "git"]
    prefix: tuple[str, ...] = ()
    commit: str | None = None

    @property
    def label(self) -> str:
        """How tables and messages name the side: its text, and the commit a revision resolved to."""
        return self.spec if self.commit is None else f"{self.spec} ({self.commit[:12]})"


def _git(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run git quietly; ``FileNotFoundError`` when git is not installed."""
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )


def _commit(revision: str, cwd: Path) -> str | None:
    """The commit ``revision`` names in the repository of ``cwd``; ``None`` when it names none (or
    there is no repository, or no git)."""
    if not revision or revision.startswith("-"):  # never let a revision pass as a git option
        return None
    try:
        found = _git(["rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"], cwd)
    except OSError:
        return None
    return found.stdout.strip() if found.returncode == 0 and found.stdout.strip() else None


def _is_executable(word: str) -> bool:
    if os.sep in word or (os.altsep and os.altsep in word):
        path = Path(word)
        return path.is_file() and os.access(path, os.X_OK)
    return shutil.which(word) is not None


def resolve_side(role: Role, spec: str, cwd: Path) -> Side:
    """Read ``--baseline`` or ``--candidate`` by the rule of the module docstring; raises
    ``SideError`` with one line naming the value, its option and the fix."""
    option = f"--{role}"
    if spec.startswith("git:"):
        revision = remove_prefix(spec, "git:")
        commit = _commit(revision, cwd)
        if commit is None:
            raise SideError(
                f"{option} {spec!r}: {revision!r} is not a commit of the git repository at {cwd} "
                f"(git rev-parse --verify {revision}^{{commit}} failed); give an existing branch, tag or "
                "commit, e.g. git:HEAD~1 (in a CI checkout, fetch with fetch-depth 0)"
            )
        return Side(role, spec, "git", commit=commit)
    try:
        words = shlex.split(spec)
    except ValueError as exc:
        raise SideError(f"{option} {spec!r}: cannot split into words ({exc}); balance the quotes") from None
    if not words:
        raise SideError(
            f"{option} {spec!r}: empty; give a command that runs pytest ('python -m pytest') or git:REV"
        )
    command = _is_executable(words[0])
    commit = _commit(words[0], cwd) if len(words) == 1 else None
    if command and commit is not None:
        raise SideError(
            f"{option} {spec!r}: both an executable on PATH and a git revision ({commit[:12]}); write "
            f"git:{spec} for the revision, or the command's path ({shutil.which(words[0])}) for the command"
        )
    if commit is not None:
        return Side(role, spec, "git", commit=commit)
    if command:
        return Side(role, spec, "command", prefix=tuple(words))
    raise SideError(
        f"{option} {spec!r}: {words[0]!r} is neither an executable (a path or a name on PATH) nor a git "
        f"revision of {cwd}; give a command that runs pytest, e.g. '{sys.executable} -m pytest', or git:REV"
    )


def abba_order(pairs: int) -> list[tuple[int, Role]]:
    """The runs in order: pair 1 runs the baseline then the candidate, pair 2 the candidate then the
    baseline, and so on, alternating (A B, B A, A B, ...); pairs count from 1."""
    order: list[tuple[int, Role]] = []
    for pair in range(1, pairs + 1):
        first: Role = "baseline" if pair % 2 == 1 else "candidate"
        second: Role = "candidate" if first == "baseline" else "baseline"
        order += [(pair, first), (pair, second)]
    return order


@dataclass(frozen=True)
class Plan:
    """What to run: both sides, the pair counts after which to look at the verdicts (``looks``, the
    last is the most pairs; one count: a fixed number), the time after which no new pair starts
    (``max_time_s``), the pytest arguments, where files go."""

    baseline: Side
    candidate: Side
    looks: tuple[int, ...] = (5,)
    pytest_args: tuple[str, ...] = ()
    keep: Path | None = None
    cwd: Path = field(default_factory=Path.cwd)
    max_time_s: float = math.inf
    #: The time after the first look within which the later pairs must end (``run``).
    extra_time_s: float = math.inf
    #: Whether each side is one pytest serving a round per run (``ab_server``), not one per run.
    serve: bool = False
    #: Whether git sides run as forks of one warm process (``ab_fork``), not a fresh interpreter
    #: per run (``serve`` takes precedence).
    fork: bool = True

    def __post_init__(self) -> None:
        for pairs in (self.looks[0], self.looks[-1]):
            if not MIN_PAIRS <= pairs <= MAX_PAIRS:
                raise SideError(
                    f"--pairs {pairs}: out of range; give from {MIN_PAIRS} to {MAX_PAIRS} pairs "
                    "(5 is the default)"
                )

    @property
    def pairs(self) -> int:
        """The most pairs this plan runs."""
        return self.looks[-1]


@dataclass(frozen=True)
class Outcome:
    """The runs of both sides, in pair order, and where their files are (``None`` once removed)."""

    baseline: tuple[StoredRun, ...]
    candidate: tuple[StoredRun, ...]
    directory: Path | None
    #: Why the runs stopped where they did (empty for a fixed number of pairs run to the end).
    stopped: str = ""


@dataclass(frozen=True)
class _Prepared:
    """A side ready to run: its command prefix, its working directory, its extra environment."""

    side: Side
    prefix: tuple[str, ...]
    cwd: Path
    pythonpath: Path | None = None

    def written(self, pytest_args: Sequence[str]) -> list[str]:
        """What the caller wrote for this side's runs: its own command (a command side's prefix) and
        the job's pytest arguments; an option in either is the caller's choice (``_chosen``)."""
        return [*self.prefix, *pytest_args]


class Terminated(BaseException):
    """SIGTERM (a cancelled CI job), raised so that ``finally`` blocks still remove the worktrees."""


def _sigterm_unwinds() -> contextlib.AbstractContextManager[None]:
    """Turn SIGTERM into ``Terminated`` while the runs go on, so that cleanup runs."""
    return sigterm_raises(lambda signum: Terminated(f"terminated by signal {signum}"))


def _toplevel(cwd: Path) -> Path:
    found = _git(["rev-parse", "--show-toplevel"], cwd)
    if found.returncode != 0:
        raise SideError(f"git sides need a git repository, and {cwd} is not in one: {found.stderr.strip()}")
    return Path(found.stdout.strip())


@contextlib.contextmanager
def _worktree(side: Side, scratch: Path, cwd: Path, progress: Progress) -> Iterator[_Prepared]:
    """Check the side's commit out into a detached worktree under ``scratch``; remove it on exit."""
    assert side.commit is not None
    top = _toplevel(cwd)
    path = scratch / f"worktree-{side.role}"
    added = _git(["worktree", "add", "--detach", str(path), side.commit], top)
    if added.returncode != 0:
        raise SideError(f"--{side.role} {side.spec!r}: git worktree add failed: {added.stderr.strip()}")
    try:
        # The same place in the worktree as the working directory in the repository, so that the
        # pytest arguments' relative paths mean the same on both sides.
        here = path / cwd.resolve().relative_to(top.resolve())
        if not here.is_dir():
            raise SideError(
                f"--{side.role} {side.spec!r}: {here.relative_to(path)} does not exist at "
                f"{side.commit[:12]}; run pytest-ipu ab from a directory that both revisions have"
            )
        yield _Prepared(side, (sys.executable, "-m", "pytest"), here, path)
    finally:
        removed = _git(["worktree", "remove", "--force", str(path)], top)
        if removed.returncode != 0:
            # Whatever git could not remove goes by hand; prune then drops git's record of it.
            shutil.rmtree(path, ignore_errors=True)
            _git(["worktree", "prune"], top)
            progress(f"pytest-ipu ab: removed worktree {path} by hand: {removed.stderr.strip()}")


def share(pairs: int) -> tuple[str, str]:
    """Each run's time budget per benchmark, as the values of ``--ipu-max-time`` and
    ``--benchmark-max-time``: a plain run's budgets divided by twice the pairs before the first look,
    and by ``SHORTER``. The pairs are the repeats, so the runs of both sides together, up to the
    first look, measure each benchmark a quarter as long as one plain run does: a job that decides
    at its first look costs less than one plain run plus the runs' start-ups, and later pairs only
    measure the benchmarks still undecided. Shorter runs and more of them: what spreads a
    benchmark's runs is mostly the process it runs in, which only more runs average out (the floor
    is each tool's minimum rounds)."""
    divisor = 2 * pairs * SHORTER
    return f"{IPU_MAX_TIME_S / divisor:.3g}s", f"{BENCHMARK_MAX_TIME_S / divisor:.3g}"


def _chosen(option: str, variable: str | None, pytest_args: Sequence[str]) -> bool:
    """Whether the caller chose ``option`` (in ``pytest_args``: the side's command and the pytest
    arguments, or ``PYTEST_ADDOPTS``) or set ``variable`` (an empty one counts as unset, as the
    plugin reads it)."""
    if variable is not None and os.environ.get(variable, "").strip():
        return True
    words = [*pytest_args, *shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))]
    return any(w == option or w.startswith(f"{option}=") for w in words)


def budget_args(pairs: int, pytest_args: Sequence[str]) -> list[str]:
    """pytest-benchmark's share of the budget (``share``) as an argument, unless the caller chose
    ``--benchmark-max-time``."""
    if _chosen("--benchmark-max-time", None, pytest_args):
        return []
    return [f"--benchmark-max-time={share(pairs)[1]}"]


def _environment(prepared: _Prepared, pytest_args: Sequence[str], pairs: int = 1) -> dict[str, str]:
    from pytest_ipu.pytest_plugin.options import AB_SIDE_VARIABLE

    env = dict(os.environ)
    env[AB_SIDE_VARIABLE] = "1"  # ab gates the runs: each writes its benchmarks' own gates for it
    words = prepared.written(pytest_args)
    if not _chosen("--ipu-repeats", REPEATS_ENV, words):
        env[REPEATS_ENV] = "1"  # the pairs are the repeats
    if not _chosen("--ipu-max-time", MAX_TIME_ENV, words):
        env[MAX_TIME_ENV] = share(pairs)[0]  # and they share one run's budget
    if prepared.pythonpath is not None:
        rest = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(prepared.pythonpath) + (os.pathsep + rest if rest else "")
    return env


def _tail_lines(log: Path) -> list[str]:
    """The last ``TAIL_LINES`` lines of ``log`` up to its last one not blank; raises ``OSError``."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    return lines[-TAIL_LINES:]


def _tail(log: Path) -> str:
    try:
        lines = _tail_lines(log)
    except OSError as exc:
        return f"    (cannot read {log}: {exc.strerror or exc})"
    return "\n".join(f"    {line}" for line in lines) or "    (no output)"


#: What pytest's exit codes other than 0 and 1 usually mean, for the error.
_EXIT_HINTS = {
    2: "interrupted",
    3: "internal error",
    4: "usage error: check the pytest arguments",
    5: "no tests were collected: check -k and the paths",
}


def _run_args(
    prepared: _Prepared, pair: int, directory: Path, pytest_args: Sequence[str], pairs: int
) -> tuple[Path, Path, list[str]]:
    """One run's files and pytest arguments after the side's command: its JSON, its log, and the
    arguments that measure each benchmark for its share of a plain run's budget over ``pairs``
    (``share``), unless the side's command or the pytest arguments chose it."""
    role = prepared.side.role
    out = directory / f"pair{pair}-{role}.json"
    log = directory / f"pair{pair}-{role}.log"
    out.unlink(missing_ok=True)  # a file left by an earlier run must not pass for this one's
    argv = [
        *pytest_args,
        *budget_args(pairs, prepared.written(pytest_args)),
        "-p",
        "no:cacheprovider",
        f"--benchmark-json={out}",
        "-q",
    ]
    return out, log, argv


def _run_one(
    prepared: _Prepared, pair: int, directory: Path, pytest_args: Sequence[str], pairs: int = 1
) -> tuple[Path, Path, int, list[str]]:
    """One pytest run of one side in a fresh process (``_run_args``): its JSON, its log, its exit
    code and its command."""
    out, log, argv = _run_args(prepared, pair, directory, pytest_args, pairs)
    command = [*prepared.prefix, *argv]
    with log.open("w", encoding="utf-8") as sink:
        run = subprocess.Popen(
            command,
            cwd=prepared.cwd,
            env=_environment(prepared, pytest_args, pairs),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        try:
            returncode = run.wait()
        except BaseException:
            # Ctrl-C or SIGTERM to ab alone (a CI runner signals one process): the side is asked to
            # stop first, so that its pytest ends its own workers and samplers and removes its files,
            # then killed if it does not, and reaped either way (subprocess.run would SIGKILL it at
            # once, orphaning its children, and leave it unreaped after a Ctrl-C).
            stop_command(run, SIDE_GRACE_S)
            raise
    return out, log, returncode, command


#: How long a side asked to stop (SIGTERM) has to end before it is killed.
SIDE_GRACE_S = 10.0


@dataclass(frozen=True)
class Look:
    """What a look at the verdicts found: whether every verdict is decided (``done``: no more
    pairs), the benchmarks whose gates are all decided (``settled``, pytest node ids: later pairs do
    not run them) and those still open (``undecided``)."""

    done: bool
    settled: tuple[str, ...] = ()
    undecided: tuple[str, ...] = ()

    def deselect(self) -> list[str]:
        """pytest arguments that leave the settled benchmarks out of later runs: ``--deselect`` of
        each, since the user's paths and ``-k`` still choose the rest (node ids as pytest-benchmark
        saves them, relative to pytest's rootdir, are what ``--deselect`` reads). ``--deselect``
        matches by prefix: a settled id that begins an open one (``test_a`` of ``test_ab``) is run
        on, and its later pairs are not read."""
        kept = [n for n in self.settled if not any(u != n and u.startswith(n) for u in self.undecided)]
        return [f"--deselect={n}" for n in kept]


#: Asked at each look with the runs so far (baseline, candidate): what the look decided.
Decided = typing.Callable[[typing.Sequence[StoredRun], typing.Sequence[StoredRun]], Look]


class _PerRun:
    """A side run one pytest process per run (``_run_one``): the default, and a side that cannot
    serve rounds under ``Plan.serve``."""

    def __init__(
        self, prepared: _Prepared, directory: Path, pytest_args: Sequence[str], keep: bool, pairs: int
    ):
        self.prepared = prepared
        self.directory = directory
        self.pytest_args = tuple(pytest_args)
        self.keep = keep
        self.pairs = pairs

    @property
    def side(self) -> Side:
        """The side it runs."""
        return self.prepared.side

    def run(self, pair: int, look: Look | None, progress: Progress) -> StoredRun:
        """One run of the side in ``pair``, without the benchmarks ``look`` settled; raises
        ``RunFailed``."""
        side = self.prepared.side
        narrowed = look.deselect() if look is not None else []
        out, log, code, command = _run_one(
            self.prepared, pair, self.directory, (*self.pytest_args, *narrowed), self.pairs
        )
        return _checked(side, pair, (out, log, code), shlex.join(command), self.keep, progress)


def _checked(
    side: Side, pair: int, ran: tuple[Path, Path, int], command: str, keep: bool, progress: Progress
) -> StoredRun:
    """A run's JSON read back, once its exit code and its file say it measured (``ran``: its JSON,
    its log and its exit code); raises ``RunFailed`` naming the side, the pair, ``command`` and the
    end of its output."""
    out, log, code = ran
    role, directory = side.role, out.parent
    if code not in (0, 1) or not out.exists():
        why = f"exit {code}" + (f", {_EXIT_HINTS[code]}" if code in _EXIT_HINTS else "")
        # A full disk fails the run's write of its JSON, and of its log (Python then exits
        # 120, its output unflushed): say that, not what a run that measured nothing hears.
        unwritable = None if out.exists() else _unwritable(directory)
        if unwritable is not None:
            why += (
                f", no JSON written: {directory} cannot be written ({unwritable}); free space "
                "there or pass --keep on another disk"
            )
        elif code in (0, 1):
            why += " but no JSON written: did a test use ipu_benchmark?"
        raise RunFailed(
            f"the {role} side ({side.label}) failed in pair {pair} ({why}): {command}\n"
            f"  last lines of its output{_where(log, keep)}:\n{_tail(log)}"
        )
    if code == 1:
        progress(f"pytest-ipu ab: pair {pair} {role}: some tests failed (exit 1); log: {log}")
    return _read(out, side, pair)


def _where(log: Path, keep: bool) -> str:
    # Without --keep the log is removed on the way out: then its path would lead nowhere.
    return f" ({log})" if keep else " (--keep DIR keeps the whole log)"


def _read(out: Path, side: Side, pair: int) -> StoredRun:
    try:
        return benchmark_json.read_run(out)
    except benchmark_json.RunFileError as exc:
        raise RunFailed(f"the {side.role} side ({side.label}) in pair {pair}: {exc}") from None


class _Served:
    """A side served by one long-lived pytest (``ab_server.Server``): a round per run."""

    def __init__(self, server: ab_server.Server, side: Side, directory: Path, keep: bool, timeout_s: float):
        self.server = server
        self.side = side
        self.directory = directory
        self.keep = keep
        self.timeout_s = timeout_s

    def run(self, pair: int, look: Look | None, progress: Progress) -> StoredRun:
        """The side's round of ``pair``, without the benchmarks ``look`` settled; raises ``RunFailed``
        (the server is then stopped by the caller's cleanup)."""
        out = self.directory / f"pair{pair}-{self.side.role}.json"
        out.unlink(missing_ok=True)  # a file left by an earlier job must not pass for this round's
        try:
            failed = self.server.round(out, look.settled if look is not None else (), self.timeout_s)
        except ab_server.ServerFailed as exc:
            raise RunFailed(
                f"the {self.side.role} side ({self.side.label}) failed in pair {pair}: {exc} "
                f"({_timeout_hint(self.timeout_s)}): {self.server.describe()}\n"
                f"  last lines of its output{_where(self.server.log, self.keep)}:\n{_tail(self.server.log)}"
            ) from None
        if failed:
            role, log = self.side.role, self.server.log
            progress(f"pytest-ipu ab: pair {pair} {role}: {failed} test(s) failed; log: {log}")
        return _read(out, self.side, pair)


class _Forked:
    """A side whose runs are forks of the job's forker (``ab_fork.Forker``): a fresh child per run,
    the start-up paid once for both sides."""

    def __init__(self, forker: ab_fork.Forker, prepared: _Prepared, plan: Plan, directory: Path, seed: str):
        self.forker = forker
        self.prepared = prepared
        self.plan = plan
        self.directory = directory
        self.seed = seed

    @property
    def side(self) -> Side:
        """The side it runs."""
        return self.prepared.side

    def request(self, argv: Sequence[str], log: Path) -> dict[str, typing.Any]:
        """The forker's request for a run of this side with ``argv``, its output to ``log``."""
        env = _environment(self.prepared, self.plan.pytest_args, self.plan.looks[0])
        env[HASH_SEED_ENV] = self.seed
        return ab_fork.run_request(argv, self.prepared.cwd, env, log)

    def run(self, pair: int, look: Look | None, progress: Progress) -> StoredRun:
        """One run of the side in ``pair``, without the benchmarks ``look`` settled, in a fresh
        child of the forker; raises ``RunFailed``."""
        narrowed = look.deselect() if look is not None else []
        pytest_args = (*self.plan.pytest_args, *narrowed)
        out, log, argv = _run_args(self.prepared, pair, self.directory, pytest_args, self.plan.looks[0])
        argv += ab_fork.REWRITE_WARNING
        command = f"{shlex.join([*self.prepared.prefix, *argv])} (a fork of {self.forker.describe()})"
        try:
            # The first pair teaches the forker what a run imports once it measures and reports.
            code = self.forker.run(self.request(argv, log), self.plan.max_time_s, learn=pair == 1)
        except ab_fork.ForkFailed as exc:
            raise RunFailed(
                f"the {self.side.role} side ({self.side.label}) failed in pair {pair}: {exc} "
                f"({_timeout_hint(self.plan.max_time_s)}): {command}"
            ) from None
        return _checked(self.side, pair, (out, log, code), command, self.plan.keep is not None, progress)


def _forked(
    prepared: dict[Role, _Prepared],
    plan: Plan,
    scratch: Path,
    directory: Path,
    stack: contextlib.ExitStack,
    progress: Progress,
) -> dict[Role, _Forked] | None:
    """Both sides' runners as forks of one forker, warmed by collecting each side once; ``None``,
    after one line saying why, where the sides cannot fork (a command side, not Linux, a forker that
    fails to start or whose imports started threads): then every run is a fresh process."""
    if any(p.side.kind != "git" for p in prepared.values()):
        return None  # a command is its own interpreter, started afresh for each run
    if not sys.platform.startswith("linux"):
        progress(f"pytest-ipu ab: one fresh pytest per run: forked runs need Linux, not {sys.platform}")
        return None
    # One hash seed for both sides: the forker's, which its children keep.
    seed = os.environ.get(HASH_SEED_ENV, "").strip() or str(random.SystemRandom().randrange(1, 2**32))
    home = scratch / "forker"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env[HASH_SEED_ENV] = seed
    forker = ab_fork.Forker(sys.executable, home, env, directory / "forker.log")
    stack.push(_fork_closer(forker))
    runners = {role: _Forked(forker, ready, plan, directory, seed) for role, ready in prepared.items()}
    try:
        # The candidate's collection teaches the forker most of what a run imports; the first pair
        # teaches it the rest, the baseline's included (``_Forked.run``).
        argv = [*plan.pytest_args, "--collect-only", "-q", "-p", "no:cacheprovider", *ab_fork.REWRITE_WARNING]
        log = directory / "collect-candidate.log"
        warmed = forker.warm(runners["candidate"].request(argv, log), plan.max_time_s)
    except ab_fork.ForkFailed as exc:
        progress(f"pytest-ipu ab: one fresh pytest per run: the forker failed ({exc})")
        return None
    if int(warmed["threads"]) > 1:
        progress(
            f"pytest-ipu ab: one fresh pytest per run: the forker has {warmed['threads']} threads, and a "
            "fork would hold their locks"
        )
        return None
    refused = f" ({warmed['refused']})" if warmed.get("refused") else ""
    progress(
        f"pytest-ipu ab: each run a fork of one process that imported {warmed['preloaded']} module(s) "
        f"once{refused}"
    )
    return runners


def _fork_closer(forker: ab_fork.Forker) -> typing.Callable[..., bool]:
    """An exit callback that stops the forker: once its last child has ended when the block ended
    without an exception, at once (its running child with it) otherwise."""

    def close(kind: type[BaseException] | None, *_: object) -> bool:
        forker.close(graceful=kind is None, grace_s=SIDE_GRACE_S)
        return False

    return close


def _timeout_hint(timeout_s: float) -> str:
    return f"no answer is waited for past --max-time, {timeout_s:g} s"


def _serve(
    prepared: dict[Role, _Prepared],
    plan: Plan,
    directory: Path,
    stack: contextlib.ExitStack,
    progress: Progress,
) -> dict[Role, _PerRun | _Served]:
    """Each side's runner under ``Plan.serve``: a server started for each (both start at once, then
    each is waited for until it has collected), or one process per run for a side whose pytest
    cannot serve (one line says so). Every server is stopped on the way out (``stack``): gracefully once the
    job is done, at once on an error, Ctrl-C or SIGTERM."""
    pytest_args = tuple(plan.pytest_args)
    keep = plan.keep is not None
    timeout = plan.max_time_s
    servers: dict[Role, ab_server.Server] = {}
    stack.push(_closer(servers))
    for role, ready in prepared.items():
        command = [
            *ready.prefix,
            *pytest_args,
            *budget_args(plan.looks[0], ready.written(pytest_args)),
            "-p",
            "no:cacheprovider",
            "-q",
        ]
        env = _environment(ready, pytest_args, plan.looks[0])
        server = ab_server.Server(command, ready.cwd, env, directory / f"{role}-server.log")
        servers[role] = server
    runners: dict[Role, _PerRun | _Served] = {}
    for role, server in servers.items():
        side = prepared[role].side
        if server.ready(timeout):
            runners[role] = _Served(server, side, directory, keep, timeout)
            continue
        progress(
            f"pytest-ipu ab: the {role} side ({side.label}) cannot serve rounds ({_why_not_served(server)}): "
            "one pytest per run"
        )
        runners[role] = _PerRun(prepared[role], directory, pytest_args, keep, plan.looks[0])
    return runners


def _why_not_served(server: ab_server.Server) -> str:
    """Why a side's server never became ready, in a few words; its log is removed when it says no
    more than that (pytest's usage error, or nothing at all), else named."""
    refused = server.refused_option()
    try:
        empty = not _tail_lines(server.log)
    except OSError:
        empty = True
    if refused or empty:
        server.log.unlink(missing_ok=True)
        where = ""
    else:
        where = f"; log: {server.log}"
    return (
        "it does not know --ipu-serve: an older pytest-ipu, or none"
        if refused
        else f"its pytest ended before it was ready ({server.ended()}{where})"
    )


def _closer(servers: Mapping[Role, ab_server.Server]) -> typing.Callable[..., bool]:
    """An exit callback that stops ``servers``: gracefully when the block ended without an exception
    (both asked to stop first, so that they end their sessions at the same time), at once otherwise."""

    def close(kind: type[BaseException] | None, *_: object) -> bool:
        graceful = kind is None
        try:
            if graceful:
                for server in servers.values():
                    server.ask_to_stop()
        finally:
            # Each is stopped even when stopping another raises (a second Ctrl-C).
            with contextlib.ExitStack() as closing:
                for server in servers.values():
                    closing.callback(server.close, graceful=graceful, grace_s=SIDE_GRACE_S)
        return False

    return close


def run(plan: Plan, progress: Progress, decided: Decided | None = None) -> Outcome:
    """Run both sides in ABBA order, pair after pair, and read their JSON back: up to the first of
    ``plan.looks`` where ``decided`` says every verdict is decided (without it, all the pairs),
    starting no pair once ``plan.max_time_s`` has passed, nor one that would end past
    ``plan.extra_time_s`` after the first look, less the time the sides took to start (kept for them
    to stop). After a look, later pairs run only the benchmarks it
    left undecided. Each side is one pytest serving a round per run (``ab_server``), or one pytest
    per run where it cannot serve.

    Raises ``SideError`` for a side that cannot be set up, ``RunFailed`` for a run that exits with
    a code other than 0 and 1 or writes no JSON, and for a server that ends or does not answer.
    Worktrees, servers and the temporary directory (everything when ``plan.keep`` is ``None``;
    with ``keep``, the JSON and logs stay there) are removed on every path.
    """
    with contextlib.ExitStack() as stack:
        stack.enter_context(_sigterm_unwinds())
        scratch = Path(tempfile.mkdtemp(prefix="pytest-ipu-ab-"))
        stack.callback(shutil.rmtree, scratch, True)
        directory = _runs_directory(plan, scratch)
        prepared: dict[Role, _Prepared] = {}
        for side in (plan.baseline, plan.candidate):
            if side.kind == "git":
                prepared[side.role] = stack.enter_context(_worktree(side, scratch, plan.cwd, progress))
            else:
                prepared[side.role] = _Prepared(side, side.prefix, plan.cwd)
        starting = time.monotonic()
        runners: Mapping[Role, _Runner] | None = None
        if plan.serve:
            runners = _serve(prepared, plan, directory, stack, progress)
        elif plan.fork:
            runners = _forked(prepared, plan, scratch, directory, stack, progress)
        if runners is None:
            runners = {
                role: _PerRun(ready, directory, plan.pytest_args, plan.keep is not None, plan.looks[0])
                for role, ready in prepared.items()
            }
        started = time.monotonic()
        # Kept back, after the last pair, for the sides to stop: about as long as they took to start
        # (a session's end tears down what its start set up).
        clock = _Clock(started, started - starting, started)
        runs, stopped = _pairs(plan, runners, decided, progress, clock)
        return Outcome(
            tuple(runs["baseline"]), tuple(runs["candidate"]), directory if plan.keep else None, stopped
        )


#: What runs a side's runs: one of the three ways.
_Runner = typing.Union[_PerRun, _Served, _Forked]


def _runs_directory(plan: Plan, scratch: Path) -> Path:
    """Where the runs' JSON and logs go: ``plan.keep`` made absolute and created, else in ``scratch``."""
    if plan.keep is not None:
        # Absolute: the runs' working directories differ (a worktree), the files' place must not.
        directory = (plan.cwd / plan.keep).resolve()
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SideError(f"--keep {str(directory)!r}: cannot create: {exc.strerror or exc}") from None
    else:
        directory = scratch / "runs"
        directory.mkdir()
    return directory


@dataclass
class _Clock:
    """The job's time between pairs: when the pairs started, how long the sides are given to stop,
    when the last pair started and how long it took, and when the first look was."""

    started: float
    stopping_s: float
    pair_started: float
    last_pair_s: float = 0.0
    first_look_at: float | None = None

    def pair_done(self) -> float:
        """Note that a pair has ended; the time now."""
        now = time.monotonic()
        self.last_pair_s, self.pair_started = now - self.pair_started, now
        return now

    def stop_reason(self, plan: Plan, done: int, now: float) -> str:
        """Why no new pair starts after ``done`` pairs, judged at ``now``; empty when one may."""
        if done == plan.looks[0]:
            self.first_look_at = now
        if now - self.started > plan.max_time_s:
            return f"--max-time {plan.max_time_s:g}s reached after {done} pair(s): no new pair started"
        # The last pair measured at least what the next one will: were it as long, would the
        # job, its sides stopped, pass its time after the first look?
        ends = now + self.last_pair_s + self.stopping_s - (self.first_look_at or now)
        if self.first_look_at is not None and ends > plan.extra_time_s:
            return (
                f"--extra-time {plan.extra_time_s:g}s after the first look: another pair would end "
                f"past it (the last took {self.last_pair_s:.0f} s, and {self.stopping_s:.0f} s are kept "
                f"for the sides to stop); stopped after {done} pair(s)"
            )
        return ""


def _pairs(
    plan: Plan,
    runners: Mapping[Role, _Runner],
    decided: Decided | None,
    progress: Progress,
    clock: _Clock,
) -> tuple[dict[Role, list[StoredRun]], str]:
    """Run the pairs in ABBA order, looking at the verdicts and the clock before each pair after the
    first; every side's runs, and why the job stopped (empty when it ran its fixed pairs)."""
    runs: dict[Role, list[StoredRun]] = {"baseline": [], "candidate": []}
    order = abba_order(plan.pairs)
    stopped = ""
    look: Look | None = None
    for count, (pair, role) in enumerate(order, start=1):
        if count % 2 == 1 and pair > 1:
            # The first run of a pair: first, did the last look decide, or has time run out?
            done = pair - 1
            now = clock.pair_done()
            if done in plan.looks and decided is not None:
                look = decided(runs["baseline"], runs["candidate"])
                stopped = _after_look(plan, look, done, progress)
                if stopped:
                    break
            stopped = clock.stop_reason(plan, done, now)
            if stopped:
                break
        of = f"/{len(order)}" if len(plan.looks) == 1 else f" (of at most {len(order)})"
        progress(f"pytest-ipu ab: run {count}{of}: pair {pair} {role}: {runners[role].side.label}")
        runs[role].append(runners[role].run(pair, look, progress))
    if not stopped and len(plan.looks) > 1:
        stopped = f"the most pairs ({plan.pairs}, --max-pairs) run"
    return runs, stopped


def _after_look(plan: Plan, look: Look, done: int, progress: Progress) -> str:
    """Why the job stops after the look at ``done`` pairs (every gate decided); empty when it goes on,
    after saying how many benchmarks the look settled."""
    if look.done:
        return f"every gate decided after {done} pair(s) (looks at {_counts(plan.looks)})"
    if look.settled:
        progress(
            f"pytest-ipu ab: after {done} pair(s): {len(look.settled)} benchmark(s) decided, "
            f"{len(look.undecided)} still measured"
        )
    return ""


#: What ``_unwritable`` writes to see whether a run's files fit: more than a small run's JSON.
_PROBE_BYTES = 1 << 20


def _unwritable(directory: Path) -> str | None:
    """Why ``directory`` cannot take a run's files (a full disk, a quota, a read-only file system),
    found by writing, syncing and removing a probe of ``_PROBE_BYTES``; ``None`` when it can."""
    probe = directory / f".pytest-ipu-ab-probe-{os.getpid()}"
    try:
        with probe.open("wb") as out:
            out.write(b"\0" * _PROBE_BYTES)
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


def _counts(looks: Sequence[int]) -> str:
    return ", ".join(map(str, looks))
