"""Independent repeats of a benchmark (``--ipu-repeats=K``): which repeat a test's run is, the
interleaved schedule, and the worker processes of ``--ipu-repeat-mode=process``.

``RepeatScheduler`` takes each run of consecutive items of one test function (its parametrized set)
when pytest reaches the first of them and runs their first K - 1 repeats round-robin through pytest's
own test protocol, their passing reports kept out of the terminal's counts. ``ipu_benchmark`` times
every repeat through pytest-benchmark's ``pedantic`` (an earlier repeat's statistics are then left out
of pytest-benchmark's results), keeps each, and on the last run pools them (``run.benchmark.pool``),
publishes the record and checks its gates. A worker process's repeat (one each, ``python -m pytest
NODEID``) is read back from pytest-benchmark's JSON.

Documented in docs/numbers.md (section "Repeats").
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_ipu.errors import ConfigError
from pytest_ipu.pytest_plugin.marker_keywords import marker_overrides
from pytest_ipu.pytest_plugin.options import OPTIONS
from pytest_ipu.pytest_plugin.settings import Settings

if TYPE_CHECKING:
    from pytest_ipu.run.benchmark import Measurement

#: Set in a worker process's environment: measure one repeat, gate nothing.
WORKER_ENV = "PYTEST_IPU_REPEAT_WORKER"
#: How long one worker may run before it is killed (a hang must not hang the run).
WORKER_TIMEOUT_S = 3600.0
#: How long a worker asked to stop (SIGTERM) may take to end its own children and remove its files
#: before it is killed.
WORKER_GRACE_S = 10.0


class RepeatError(RuntimeError):
    """A worker process of ``--ipu-repeat-mode=process`` failed; the message says how."""


@dataclass
class RepeatState:
    """The repeats of one benchmark measured so far, and whether the current run is its last."""

    done: list[Measurement] = field(default_factory=list)
    final: bool = True


@dataclass(frozen=True)
class Slot:
    """Which repeat of a benchmark this run of its test measures.

    ``state`` holds the repeats measured before it; ``index`` numbers this one from 1; ``share`` is
    into how many repeats the budget is split (``run.plan``); ``mode`` is the repeat mode."""

    state: RepeatState
    mode: str
    share: int
    index: int


def slot(scheduler: RepeatScheduler, item: pytest.Item, settings: Settings, *, under_torchrun: bool) -> Slot:
    """This run's repeat of ``item``'s benchmark; in process mode its last run first runs the
    workers that measure the earlier repeats. ``RepeatError`` when they cannot run or failed."""
    count, mode = plan(settings)
    state = scheduler.state(item.nodeid)
    # Into how many repeats the budget is split: a worker is told by its parent; a benchmark
    # whose earlier repeats did not run (skipped, say) is measured once, on the whole budget.
    share = worker_share() or (count if mode == "process" or not state.final or state.done else 1)
    if mode == "process" and count > 1:
        if under_torchrun:
            raise RepeatError(
                "--ipu-repeat-mode=process cannot run under torchrun: its worker processes are not ranks "
                "of the launch; use --ipu-repeat-mode=interleaved (the default)"
            )
        if state.final:
            state.done = run_workers(item, count - 1, settings)
    return Slot(state, mode, share, len(state.done) + 1)


def in_worker() -> bool:
    """Whether this pytest process is a repeat worker of another one."""
    return bool(os.environ.get(WORKER_ENV))


def worker_share() -> int | None:
    """In a worker process, the parent's repeat count (the worker's share of the budget is 1/K);
    ``None`` elsewhere."""
    text = os.environ.get(WORKER_ENV, "")
    return int(text) if text.isdigit() and int(text) > 0 else None


@dataclass(frozen=True)
class Untimed:
    """Why pytest-benchmark times nothing in a run, as its option was given."""

    #: The option as given (``--benchmark-disable``, ``-n 2``, ``--dist=loadfile``).
    option: str
    #: Where it was given: ``the command line``, ``PYTEST_ADDOPTS``, ``addopts in pytest.ini``.
    source: str
    #: What it does, after the option in a message ("turns pytest-benchmark's timing off").
    effect: str
    #: Why nothing is timed, for a ``NotTimed`` record.
    reason: str
    #: What to do to measure (and so to check gates).
    fix: str


def untimed(config: pytest.Config) -> Untimed | None:
    """Why pytest-benchmark times nothing in this run, or ``None`` when it times: its own rules
    (``--benchmark-skip`` unless ``--benchmark-only``; ``--benchmark-disable`` unless
    ``--benchmark-enable``; pytest-xdist, seen on the controller by ``-n``/``--dist`` and in a
    worker by its ``workerinput`` and variable). Read from the options, so it is known at
    configure time, before pytest-benchmark's session exists."""
    option = config.option
    if getattr(option, "benchmark_skip", False) and not getattr(option, "benchmark_only", False):
        return Untimed(
            "--benchmark-skip",
            _where_given(config, "--benchmark-skip"),
            "skips every benchmark",
            "benchmarks are skipped (--benchmark-skip)",
            "run without --benchmark-skip",
        )
    if getattr(option, "benchmark_disable", False) and not getattr(option, "benchmark_enable", False):
        return Untimed(
            "--benchmark-disable",
            _where_given(config, "--benchmark-disable"),
            "turns pytest-benchmark's timing off",
            "benchmarking is disabled (--benchmark-disable); run without it to measure",
            "run without --benchmark-disable (or add --benchmark-enable)",
        )
    workers = getattr(option, "numprocesses", None)
    dist = getattr(option, "dist", "no")
    if workers or dist != "no":
        # -n sets --dist=load; --dist alone runs no worker, yet pytest-benchmark stops timing.
        return Untimed(
            f"-n {workers}" if workers else f"--dist={dist}",
            _where_given(config, "-n", "--numprocesses") if workers else _where_given(config, "--dist"),
            "runs the tests in pytest-xdist workers, where pytest-benchmark times nothing"
            if workers
            else "makes pytest-benchmark time nothing (it stops timing whenever --dist is set, even "
            "without -n)",
            "pytest-benchmark does not time under pytest-xdist (-n); run without -n to measure",
            "run the gated benchmarks without -n" if workers else "run the gated benchmarks without --dist",
        )
    if hasattr(config, "workerinput") or os.environ.get("PYTEST_XDIST_WORKER"):
        return Untimed(
            "PYTEST_XDIST_WORKER",
            "the environment",
            "marks a pytest-xdist worker, where pytest-benchmark times nothing",
            "pytest-benchmark does not time under pytest-xdist (-n); run without -n to measure",
            "run the gated benchmarks without -n",
        )
    return None


def untimed_reason(config: pytest.Config) -> str | None:
    """``untimed``'s reason, for a ``NotTimed`` record; ``None`` when pytest-benchmark times.
    ``ipu_benchmark`` gives it to its record; repeats are not scheduled."""
    found = untimed(config)
    return None if found is None else found.reason


def _where_given(config: pytest.Config, *flags: str) -> str:
    """Where a pytest option among ``flags`` was given, for a message: the command line,
    ``PYTEST_ADDOPTS`` or the ini file's ``addopts`` (``-n2`` and ``--dist=load`` forms included)."""

    def among(args: list[str]) -> bool:
        return any(
            a == f or a.startswith(f"{f}=") or (len(f) == 2 and a.startswith(f)) for a in args for f in flags
        )

    if among([str(a) for a in config.invocation_params.args]):
        return "the command line"
    if among(shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))):
        return "PYTEST_ADDOPTS"
    addopts = config.getini("addopts")
    if among(addopts if isinstance(addopts, list) else shlex.split(str(addopts))):
        return f"addopts in {config.inipath.name}" if config.inipath is not None else "addopts"
    return "a plugin or conftest"


def plan(settings: Settings) -> tuple[int, str]:
    """The repeats and repeat mode these settings (a test's, its marker applied) ask for; one repeat
    in a worker process, whose parent runs the others."""
    if in_worker():
        return 1, "interleaved"
    return settings.repeats, settings.repeat_mode


def item_settings(item: pytest.Item, settings: Settings) -> tuple[int, str]:
    """``plan`` for ``item``: its marker over the run's settings."""
    try:
        overrides = marker_overrides(item)
    except ConfigError:
        return 1, settings.repeat_mode  # reported by collection already
    return plan(dataclasses.replace(settings, **overrides))


class RepeatScheduler:
    """Runs the earlier repeats of interleaved benchmarks round-robin over each parametrized set.

    Each earlier repeat is a run of the test through pytest's own ``pytest_runtest_protocol`` hook
    (setup, call, teardown, and the reports every reporting plugin sees), so nothing here depends
    on how pytest runs a test. Its reports that did not fail are left out of the terminal's counts
    and progress (``hides``): the test has one result, its last run's, unless an earlier repeat
    failed, which is then the test's result (reported at once; the test is not run again). The
    lifecycle's hooks call these methods.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        #: Repeats of each benchmark by node id, filled by ``ipu_benchmark``.
        self.states: dict[str, RepeatState] = {}
        self._sets: dict[str, list[pytest.Item]] = {}
        self._started: set[str] = set()
        #: Tests whose earlier repeat failed: reported, not run again.
        self._failed: set[str] = set()
        #: The node id of the earlier repeat running now, and the reports it made.
        self._running: str | None = None
        self._reports: list[pytest.TestReport] = []

    def state(self, nodeid: str) -> RepeatState:
        """The repeat state of a benchmark (a last run with nothing before it, if never scheduled)."""
        return self.states.setdefault(nodeid, RepeatState())

    def group(self, session: pytest.Session) -> None:
        """Group the benchmarks into parametrized sets: runs of consecutive items of one function."""
        if untimed_reason(session.config) is not None:
            return  # nothing is measured, so there is nothing to repeat
        previous: tuple[object, str] | None = None
        current: list[pytest.Item] = []
        for item in session.items:
            if "ipu_benchmark" not in getattr(item, "fixturenames", ()):
                previous = None
                continue
            repeats, mode = item_settings(item, self.settings)
            if repeats < 2 or mode != "interleaved":
                previous = None
                continue
            key = (item.parent, getattr(item, "originalname", item.name))
            if key != previous:
                current = []
                previous = key
            current.append(item)
            self._sets[item.nodeid] = current

    def before(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        """Before the first item of a parametrized set, its earlier repeats. ``True`` (the test is
        done) for an item whose earlier repeat failed; ``None`` to run it as usual, its last repeat."""
        if self._running is not None:
            return None  # an earlier repeat itself, run by pytest's protocol
        members = self._sets.get(item.nodeid)
        if members is not None and members[0].nodeid not in self._started:
            self._started.add(members[0].nodeid)
            self._earlier_repeats(members)
        if item.nodeid in self._failed:
            _tear_down_towards(item, nextitem)
            return True
        self.state(item.nodeid).final = True
        return None

    def made(self, report: pytest.TestReport) -> None:
        """Keep the reports of the earlier repeat running now (``pytest_runtest_makereport``)."""
        if self._running == report.nodeid:
            self._reports.append(report)

    def hides(self, report: pytest.TestReport) -> bool:
        """Whether ``report`` is of an earlier repeat that did not fail: the terminal counts and
        shows the test's last run only (``pytest_report_teststatus``)."""
        return self._running == report.nodeid and not report.failed

    def _earlier_repeats(self, members: list[pytest.Item]) -> None:
        counts = {m.nodeid: item_settings(m, self.settings)[0] for m in members}
        stopped: set[str] = set()
        for index in range(1, max(counts.values())):
            for member in members:
                if member.session.shouldfail or member.session.shouldstop:
                    return  # -x or --maxfail was reached by an earlier repeat's failure
                if counts[member.nodeid] <= index or member.nodeid in stopped:
                    continue
                state = self.state(member.nodeid)
                state.final = False
                self._running, self._reports = member.nodeid, []
                try:
                    # Teardown keeps what the next item needs. The next run is of this set, maybe
                    # of this very item: naming the parent (every member's) as the next keeps the
                    # module, class and their fixtures, and tears down the item itself, so it is
                    # set up anew.
                    member.ihook.pytest_runtest_protocol(item=member, nextitem=member.parent)
                finally:
                    self._running = None
                if any(r.failed for r in self._reports):
                    self._failed.add(member.nodeid)
                    stopped.add(member.nodeid)
                elif any(r.skipped for r in self._reports) or len(state.done) < index:
                    # Skipped, or a run that measured nothing: its last run says what happens.
                    stopped.add(member.nodeid)


def _tear_down_towards(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Release what pytest's teardown of ``item`` would: the fixtures of the module and class
    ``nextitem`` does not share. ``item`` is done (its earlier repeat failed), so pytest's protocol,
    whose teardown does this, is not run for it; the earlier repeat's teardown kept them for this
    run. Without it the next module's first test errors: "previous item was not torn down properly".

    pytest has no public call for this; its ``SetupState.teardown_exact`` (pytest 7.0 and later) is
    what its own teardown calls. An error of a finalizer is reported as this item's teardown error.
    """
    call = pytest.CallInfo.from_call(
        lambda: item.session._setupstate.teardown_exact(nextitem),
        when="teardown",
        reraise=(pytest.exit.Exception, KeyboardInterrupt),
    )
    if call.excinfo is not None:
        report = item.ihook.pytest_runtest_makereport(item=item, call=call)
        item.ihook.pytest_runtest_logreport(report=report)


# -- process mode -------------------------------------------------------------------------------------


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment variables that give a worker process these settings (no gates, no baselines:
    a worker measures, its parent decides)."""
    data = settings.as_json()
    env: dict[str, str] = {}
    for spec in OPTIONS:
        value = data[spec.field]
        if spec.field in ("gates", "baselines"):
            text = "none"
        elif isinstance(value, list):
            text = ",".join(map(str, value))
        elif spec.field == "idle_s" and value == 0:
            text = "0"
        else:
            text = str(value)
        env[spec.env] = text
    return env


def _ended(returncode: int) -> str:
    """How a worker ended, as its failure says it: ``exited 1``, or the signal that killed it
    (``was killed by SIGKILL (exit -9)``: the out-of-memory killer, a kill) rather than a bare -9."""
    if returncode < 0:
        import signal

        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name} (exit {returncode})"
    return f"exited {returncode}"


def run_workers(item: pytest.Item, count: int, settings: Settings) -> list[Measurement]:
    """Measure ``count`` repeats of ``item`` (the first ``count`` of ``count + 1``), each in a fresh
    ``python -m pytest`` worker process, one after the other; raise ``RepeatError`` naming the
    worker that failed and its output."""
    return list(_workers(item, count, settings))


def _workers(item: pytest.Item, count: int, settings: Settings) -> Iterator[Measurement]:
    """Measure the repeats of ``run_workers``, yielding each as its worker ends."""
    # Only process mode needs these: pytest start-up does not pay for them.
    import tempfile

    from pytest_ipu.results import benchmark_json
    from pytest_ipu.run.benchmark import Measurement

    config = item.config
    _, _, rest = item.nodeid.partition("::")
    target = f"{item.path}::{rest}" if rest else str(item.path)
    env = {**os.environ, **settings_env(settings), WORKER_ENV: str(count + 1), "PYTEST_IPU_REPEATS": "1"}
    with tempfile.TemporaryDirectory(prefix="pytest-ipu-repeat-") as tmp:
        for n in range(count):
            who = f"repeat worker {n + 1} of {item.nodeid}"
            out = Path(tmp) / f"repeat-{n + 1}.json"
            tail = _run_worker(config, target, out, env, who)
            run = benchmark_json.read_run(out)
            mine = [b for b in run.benchmarks if b.record is not None]
            if len(mine) != 1:
                raise RepeatError(f"{who} measured {len(mine)} benchmark(s), expected 1:\n{tail}")
            record = mine[0].record
            assert record is not None
            record = replace(record, repeats=tuple(replace(r, process="worker") for r in record.repeats))
            samples = tuple(mine[0].samples_s or ())
            # A worker's per-call latencies are its round times (several instances: its rounds).
            yield Measurement(record, samples, samples)


def _run_worker(config: pytest.Config, target: str, out: Path, env: dict[str, str], who: str) -> str:
    """Run one worker (``who``) of the test ``target``, its JSON written to ``out``, to its end:
    the last lines of its output. ``RepeatError`` where it ran past ``WORKER_TIMEOUT_S``, failed or
    wrote nothing; the worker is stopped on every path out."""
    import subprocess

    from pytest_ipu.processes import stop_command

    command = [
        sys.executable,
        "-m",
        "pytest",
        target,
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(config.rootpath),
        "--benchmark-json",
        str(out),
        "--benchmark-save-data",
    ]
    if config.inipath is not None:
        command += ["-c", str(config.inipath)]
    worker = subprocess.Popen(
        command,
        cwd=config.invocation_params.dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = worker.communicate(timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stop_command(worker, WORKER_GRACE_S)
        raise RepeatError(f"{who} ran longer than {WORKER_TIMEOUT_S:g} s and was killed") from None
    except BaseException:
        # Ctrl-C, SIGTERM (``RunTerminated``), an error here: the worker ends with this run,
        # asked first so that it removes its own files and children, before its folder goes.
        stop_command(worker, WORKER_GRACE_S)
        raise
    finally:
        for stream in (worker.stdout, worker.stderr):
            if stream is not None:
                stream.close()
    tail = "\n".join((stdout + stderr).strip().splitlines()[-15:])
    if worker.returncode != 0 or not out.exists():
        raise RepeatError(f"{who} {_ended(worker.returncode)}: {' '.join(command)}\n{tail}")
    return tail
