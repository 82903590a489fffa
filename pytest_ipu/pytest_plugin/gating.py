"""The pytest side of performance gates: the baseline, the check at the end of the run, the report.

The baseline is ``--ipu-baseline``, else the run pytest-benchmark's ``--benchmark-compare`` loads (taken
through its public ``pytest_benchmark_compare_machine_info`` hook). As each benchmark is measured its
gates are checked by ``decide.GateRunner``, the runner ``pytest-ipu compare`` uses too; a benchmark of
pytest-benchmark's own fixture by ``check_plain``, once its test's call passed. Under pytest-xdist the
controller does not collect: its workers name their markers' gated benchmarks (``workeroutput``) and
the controller fails the run at its end. A run that times nothing is told by ``repeats.untimed``; an
interrupted run (``interrupted``) is not judged on what it did not reach.

Documented in docs/ci.md (sections "The baseline", "Nothing switches a gate off in silence", "Several
baseline runs", "What an INCONCLUSIVE verdict does" and "A plain pytest-benchmark suite").
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest

from pytest_ipu.pytest_plugin.settings import Settings

if TYPE_CHECKING:
    from pytest_ipu.measure.machine_speed import MachineSpeed
    from pytest_ipu.pytest_plugin.repeats import Untimed
    from pytest_ipu.results.benchmark_json import StoredRun
    from pytest_ipu.results.decide import GateRunner
    from pytest_ipu.results.decide import Verdict
    from pytest_ipu.results.gated import Candidate
    from pytest_ipu.results.gates import Gate
    from pytest_ipu.results.records import Measured

#: How the baseline from pytest-benchmark's storage is named in messages.
COMPARE_SOURCE = "--benchmark-compare"
#: The key of a pytest-xdist worker's ``workeroutput`` that names its markers' gated benchmarks,
#: which it ran untimed; the controller fails the run with them.
UNTIMED_GATED_KEY = "pytest-ipu untimed gated benchmarks"


class GateCheck:
    """Checks the gates on what the session measured at the end of the run, and reports them.

    It reads the session's list of measured benchmarks (``measured``), the one list the tables and
    the JSON are made from too; the decision is ``decide.GateRunner``'s. The plugin and the
    lifecycle's hooks call it: ``refuse_untimed``, ``keep_compared`` and ``load`` before the tests,
    ``check_item`` as each benchmark is published (``check_plain`` once the call of a test timed by
    pytest-benchmark's own fixture is reported), ``check`` and ``write_summary`` at the end. A
    run with no gate, baseline or gated benchmark never makes one (``IpuSession.gate_check``).
    """

    def __init__(self, settings: Settings, measured: list[Measured]) -> None:
        self.settings = settings
        self.measured = measured
        #: Each gate's verdict by its own rule, in the order checked (``verdicts``: the job's).
        self.gate_verdicts: list[Verdict] = []
        #: The gates of each selected gated benchmark, by node id, once collected: how many gate
        #: checks the job plans (the family's size for ``family.adjust``).
        self._planned: dict[str, tuple[Gate, ...]] = {}
        #: Gated benchmarks the baseline lacks (their relative gates were not checked).
        self.missing: list[str] = []
        #: Other things the reader should know (a baseline from different hardware).
        self.notes: list[str] = []
        self.baseline: StoredRun | None = None
        #: Every baseline run, the baseline last: with ``decide.HISTORY_MIN`` or more, their spread
        #: decides instead of the repeats.
        self.history: list[StoredRun] = []
        self._compared: list[Mapping[str, Any]] = []
        #: Baseline runs skipped (partial or not pytest-ipu's), one line each saying which and why.
        self.skipped: list[str] = []
        self._marker_relative = False
        #: Benchmarks already checked (as each was published), by full name.
        self._checked: set[str] = set()
        #: The benchmarks of pytest-benchmark's own fixture that were gated, by node id.
        self._plain: list[str] = []
        #: Under torchrun with several ranks: a rank's record is its share of the launch, so gates
        #: are decided only on rank 0, on the merged records (``check_launch``).
        self.deferred = False
        #: Why pytest-benchmark times nothing in this run (``None``: it times), from ``configure``.
        self.untimed: Untimed | None = None
        #: The selected benchmarks that gates apply to (the run's gates, or their marker's), by
        #: node id, each with how it ended ("" until a report says).
        self._gated: dict[str, str] = {}
        #: How many benchmarks were deselected (``-k``, ``-m``, ...).
        self._deselected = 0
        #: On a pytest-xdist controller: the gated benchmarks its workers ran untimed.
        self._untimed_gated: set[str] = set()
        #: In a pytest-xdist worker: its ``workeroutput`` and its benchmarks with marker gates.
        self._worker_marked: tuple[dict[str, Any], list[str]] | None = None
        #: Set when the run was interrupted (Ctrl-C, ``pytest.exit``): what it did not reach is not a
        #: reason to fail its gates.
        self.interrupted = False
        #: Whether this run runs tests (``False`` under ``--collect-only``: no gate is asked to check).
        self._runs_tests = True
        #: This run's samples of its machine's speed so far (``IpuSession`` sets it): what a level
        #: shift since the baselines' time is told by (``results.level_shift``).
        self.machine_speed: Callable[[], MachineSpeed | None] = lambda: None

    # -- benchmarks that are not timed ----------------------------------------------------------------

    def configure(self, config: pytest.Config) -> None:
        """Read how the run times (``untimed``) and whether it runs tests, as it was configured."""
        from pytest_ipu.pytest_plugin.repeats import untimed

        self.untimed = untimed(config)
        self._runs_tests = not config.getoption("collectonly", False)

    def refuse_untimed(self, config: pytest.Config) -> None:
        """At configure time: when pytest-benchmark will time nothing, refuse the run's gates, which
        could check nothing, before any test runs (a usage error naming the option and the fix)."""
        from pytest_ipu.pytest_plugin import options
        from pytest_ipu.pytest_plugin.repeats import in_worker

        if self.untimed is None or not self.settings.gates or not self._runs_tests:
            return
        if in_worker() or hasattr(config, "workerinput"):
            return  # the process that started this one decides (a pytest-xdist controller refused)
        value, source = options.value_and_source(config, "gates")
        raise pytest.UsageError(
            _untimed_message(f"--ipu-gate {value!r} from {source}", self.untimed)
            + ", or pass --ipu-gate=none to run them untimed, without gates"
        )

    def deselected(self, items: list[pytest.Item]) -> None:
        """Count the benchmarks among ``items``, deselected: a reason why no gate was checked."""
        self._deselected += sum(1 for item in items if _is_benchmark(item))

    def ran(self, report: pytest.TestReport) -> None:
        """Keep how a gated benchmark ended (a failure over a skip over a pass)."""
        if report.nodeid not in self._gated:
            return
        # Another plugin's outcome (pytest-rerunfailures' "rerun") ranks below a pass.
        rank = {"passed": 1, "skipped": 2, "failed": 3}
        if rank.get(report.outcome, 0) > rank.get(self._gated[report.nodeid], 0):
            self._gated[report.nodeid] = report.outcome

    def worker_finished(self, workeroutput: Mapping[str, Any] | None) -> None:
        """A pytest-xdist worker is done (on the controller): keep the gated benchmarks it ran untimed."""
        self._untimed_gated.update((workeroutput or {}).get(UNTIMED_GATED_KEY, ()))

    def _refuse_untimed_markers(self, config: pytest.Config, marked: list[str]) -> None:
        """Benchmarks with gates of their marker, in a run that times nothing: a usage error before
        any test; in a pytest-xdist worker, named to the controller, which fails the run at its end
        (a worker cannot stop the run with one message)."""
        from pytest_ipu.pytest_plugin.repeats import in_worker

        if not marked or self.untimed is None or in_worker() or not self._runs_tests:
            return
        workeroutput = getattr(config, "workeroutput", None)
        if isinstance(workeroutput, dict):
            # Named at the end (``check``), and only those that were not measured: pytest-benchmark
            # before 5 still times the rounds in a worker, whose own gates then decide them.
            self._worker_marked = (workeroutput, list(marked))
            return
        more = f" (and {len(marked) - 1} more gated benchmark(s))" if len(marked) > 1 else ""
        raise pytest.UsageError(
            _untimed_message(f"{marked[0]}: @pytest.mark.ipu(gate=...){more}", self.untimed)
            + ", or deselect the gated benchmarks (-k) to run the others untimed"
        )

    # -- the baseline -------------------------------------------------------------------------------

    def keep_compared(self, compared_benchmark: Mapping[str, Any]) -> None:
        """Keep each run pytest-benchmark's ``--benchmark-compare`` loads; the last is the baseline."""
        self._compared.append(compared_benchmark)

    def load(self, session: pytest.Session) -> None:
        """Once the tests are known: note which are gated benchmarks; refuse their markers' gates in
        a run that times nothing; load the baseline, and stop the run when relative gates (the
        run's or a benchmark's own) have none."""
        from pytest_ipu.errors import ConfigError
        from pytest_ipu.pytest_plugin.marker_keywords import marker_gates

        try:
            marked = {item.nodeid: marker_gates(item) for item in session.items}
        except ConfigError:
            # pytest calls this even when collection failed: the bad marker is already reported
            # (pytest_collection_modifyitems raised a usage error naming it).
            return
        self._marker_relative = any(g.kind == "relative" for gates in marked.values() for g in gates)
        self._gated = {
            item.nodeid: ""
            for item in session.items
            if _is_benchmark(item) and (self.settings.gates or marked[item.nodeid])
        }
        self._planned = {nodeid: marked[nodeid] for nodeid in self._gated}
        if self.untimed is not None:
            self._refuse_untimed_markers(session.config, [n for n in self._gated if marked[n]])
            return  # nothing will be measured: no baseline is needed
        self._load_baseline(session.config)

    def _load_baseline(self, config: pytest.Config) -> None:
        from pytest_ipu.pytest_plugin.repeats import in_worker

        if in_worker():
            return  # a repeat worker measures; the process that started it gates

        needs = self._marker_relative or any(g.kind == "relative" for g in self.settings.gates)
        if not needs and not self.settings.baselines and not self._compared:
            return  # nothing to load: the readers (and the schema) are never imported
        from pytest_ipu.results import benchmark_json

        loaded: list[StoredRun] = []
        if self.settings.baselines:
            try:
                for path in self.settings.baselines:
                    loaded.append(benchmark_json.read_run(path))
            except benchmark_json.RunFileError as exc:
                raise pytest.UsageError(f"pytest-ipu: --ipu-baseline: {exc}") from None
        elif self._compared:
            try:
                many = len(self._compared) > 1
                for i, compared in enumerate(self._compared):
                    name = Path(f"{COMPARE_SOURCE} run {i + 1}" if many else COMPARE_SOURCE)
                    loaded.append(benchmark_json.parse_run(compared, name))
            except benchmark_json.RunFileError as exc:
                raise pytest.UsageError(f"pytest-ipu: the --benchmark-compare run: {exc}") from None
        for run in loaded:
            reason = _not_a_baseline(run)
            if reason is None:
                self.history.append(run)
                self.skipped.extend(_partial_entries(run))
            else:
                self.skipped.append(f"baseline {run.path} skipped: {reason}")
        if self._compared and not self.settings.baselines and not self.history:
            self._newest_complete_saved(config)
        if self.history:
            self.baseline = self.history[-1]
        if needs and self.baseline is None:
            skipped = f" ({'; '.join(self.skipped)})" if self.skipped else ""
            raise pytest.UsageError(
                "pytest-ipu: relative gates (such as 'throughput:-5%') need a baseline run, and there is "
                f"none{skipped}: pass --ipu-baseline=PATH (a pytest-benchmark JSON file) or "
                "--benchmark-compare with a saved run (--benchmark-save or --benchmark-autosave makes one)"
            )

    def _newest_complete_saved(self, config: pytest.Config) -> None:
        """``--benchmark-compare`` without a run loaded the newest saved run, which cannot be a
        baseline (a partial run): take the newest saved run before it that can, with a note."""
        from pytest_ipu.pytest_plugin.bench_seam import runs
        from pytest_ipu.results import benchmark_json

        saved = runs.saved_runs_compared(config)
        for path in reversed(saved[:-1]):
            try:
                run = benchmark_json.read_run(path)
            except benchmark_json.RunFileError as exc:
                self.skipped.append(f"baseline {path} skipped: {exc}")
                continue
            if _not_a_baseline(run) is None:
                self.history.append(run)
                self.skipped.extend(_partial_entries(run))
                self.notes.append(
                    f"{COMPARE_SOURCE}: the newest saved run, {saved[-1]}, is partial; the gates compare "
                    f"against {path}, the newest complete one (pytest-benchmark's table shows the "
                    "partial one)"
                )
                return

    # -- the check ----------------------------------------------------------------------------------

    def check_plain(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """Once a gated test's call passed: gate what pytest-benchmark measured of its own
        ``benchmark`` fixture (plain calls or ``pedantic``; ``plain.PlainBenchmark``) as an
        ``ipu_benchmark`` is gated, and make the report a failure with the lines of the verdicts
        that fail it. A test that a pytest-ipu fixture measured is gated as it publishes its record
        (``check_item``); one that failed is not judged on numbers it did not finish."""
        if report.when != "call" or not report.passed or item.nodeid not in self._gated:
            return
        if item.nodeid in self._checked:
            return
        from pytest_ipu.pytest_plugin.bench_seam.fixture import plain_result

        result = plain_result(item)
        if result is None:
            return
        from pytest_ipu.pytest_plugin.marker_keywords import marker_gates
        from pytest_ipu.results.plain import PlainBenchmark
        from pytest_ipu.results.plain import PlainMeasured

        stats, samples_s = result
        measured = PlainMeasured(item.nodeid, item.name, PlainBenchmark(stats, samples_s), marker_gates(item))
        self._checked.add(item.nodeid)
        self._plain.append(item.nodeid)
        failed = [self._failure_line(v) for v in self._check([measured]) if self._fails(v)]
        if failed:
            report.outcome = "failed"
            report.longrepr = "\n".join(failed)

    def check_item(self, measured: Measured) -> list[str]:
        """Check the gates of one benchmark as soon as it is measured, so that a failing gate fails
        its own test; the lines of the verdicts that fail it (FAIL, and INCONCLUSIVE under
        ``--ipu-inconclusive=fail``), each with its verdict first; empty when none does.

        A FAIL fails the test only when it is already beyond the threshold at the job's level
        (``verdicts``: Holm's step-down over the verdicts so far, in a family of every gate check
        the run plans). Later benchmarks can only add to those FAILs, never undo one; a FAIL they
        add is the job's at the end (the summary's line, the run's exit status)."""
        self._checked.add(measured.fullname)
        new = self._check([measured])
        if not new:
            return []
        return [self._failure_line(v) for v in self.verdicts[-len(new) :] if self._fails(v)]

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        """The job's verdicts (``family.adjust``): each gate's verdict, except that a FAIL not
        beyond the threshold at the job's family-wise level (``--ipu-job-alpha``) is INCONCLUSIVE.
        The family is every gate check the run planned when its tests were collected, or the
        checks made if more."""
        if not self.gate_verdicts:
            return ()
        from pytest_ipu.results import family

        return family.adjust(self.gate_verdicts, self.settings.job_alpha, size=self._family_size())

    def _family_size(self) -> int:
        """How many gate checks the run plans: each selected gated benchmark's effective gates."""
        from pytest_ipu.results.decide import effective_gates

        return sum(len(effective_gates(self.settings.gates, own)) for own in self._planned.values())

    def _fails(self, verdict: Verdict) -> bool:
        """Whether ``verdict`` fails its test and the run: a FAIL always, an INCONCLUSIVE one by policy."""
        return verdict.failed or (verdict.inconclusive and self.settings.inconclusive == "fail")

    def _failure_line(self, verdict: Verdict) -> str:
        if verdict.failed:
            return f"pytest-ipu gate FAILED: {verdict.line()}"
        return (
            f"pytest-ipu gate INCONCLUSIVE (fails under --ipu-inconclusive=fail; 'warn' or 'pass' "
            f"accepts it): {verdict.line()}"
        )

    def check(self) -> None:
        """Check every gate on every measured benchmark not checked yet; fill ``verdicts``,
        ``missing`` and ``notes``. In a pytest-xdist worker, name to the controller the benchmarks
        with gates of their marker that ran untimed."""
        if self._worker_marked is not None:
            workeroutput, marked = self._worker_marked
            measured = {m.fullname for m in self.measured}
            # Every worker collects every test: name only those this one ran.
            workeroutput[UNTIMED_GATED_KEY] = [n for n in marked if self._gated.get(n) and n not in measured]
        self._check([m for m in self.measured if m.fullname not in self._checked])

    def check_launch(self, merged: list[Measured]) -> tuple[Verdict, ...]:
        """Check the gates on a torchrun launch's merged records (rank 0, once merged): the job's
        verdicts on them."""
        new = self._check(merged, launch=True)
        return self.verdicts[-len(new) :] if new else ()

    def _check(self, measured: Sequence[Candidate], launch: bool = False) -> tuple[Verdict, ...]:
        from pytest_ipu.pytest_plugin.repeats import in_worker

        if self.deferred and not launch:
            return ()  # a rank's share of a launch: rank 0 checks the merged records
        if in_worker() or (not self.settings.gates and not any(m.gates for m in measured)):
            return ()  # nothing to decide: the decision rule (and numpy) is never loaded
        from pytest_ipu.results import level_shift

        outcome = level_shift.check(self._runner(), measured, self.machine_speed())
        self.gate_verdicts.extend(outcome.verdicts)
        self.missing.extend(outcome.missing)
        for note in outcome.notes:
            if note.startswith(level_shift.NOTE_PREFIX):
                # The machine's level as the newest samples have it, once.
                self.notes[:] = [n for n in self.notes if not n.startswith(level_shift.NOTE_PREFIX)]
            if note not in self.notes:
                self.notes.append(note)
        return outcome.verdicts

    def _runner(self) -> GateRunner:
        from pytest_ipu.results.decide import GateRunner

        return GateRunner(
            history=self.history,
            run_gates=self.settings.gates,
            baseline=self.baseline,
            drift=self.settings.drift,
        )

    def _baseline_name(self) -> str:
        return self._runner().baseline_name()

    @property
    def nothing_checked(self) -> bool:
        """Whether gates were asked for, yet not one gate check was made (the run fails)."""
        return self._unchecked() is not None

    def _unchecked(self) -> str | None:
        """Why gates were asked for (the run's, or a selected benchmark's marker) and not one gate
        check was made, as the summary's line; ``None`` when a gate was checked or none was asked."""
        from pytest_ipu.pytest_plugin.repeats import in_worker

        if in_worker() or self.gate_verdicts or self.deferred or self.interrupted or not self._runs_tests:
            return None
        if self._plain or any(self.settings.gates or m.gates for m in self.measured):
            why = (
                "every gated benchmark is missing from the baseline"
                if self.missing
                else "no gate applied to what was measured"
            )
            return (
                f"no gate was checked ({why}): gates that check nothing do not pass; give a baseline "
                "that holds these benchmarks (--ipu-baseline or --benchmark-compare)"
            )
        untimed = self.untimed
        if self._untimed_gated and untimed is not None:
            return (
                f"no gate was checked: {len(self._untimed_gated)} benchmark(s) with gates "
                f"(@pytest.mark.ipu(gate=...)) ran untimed: {untimed.option} (from {untimed.source}) "
                f"{untimed.effect}; {untimed.fix}"
            )
        if self._gated:
            ended = list(self._gated.values())
            if all(o == "skipped" for o in ended):
                return (
                    f"no gate was checked: every gated benchmark was skipped ({len(ended)}); run them "
                    "where they are not skipped (-rs says why), or remove their gates"
                )
            words = {"failed": "failed", "skipped": "skipped", "passed": "passed unmeasured", "": "not run"}
            counts = ", ".join(f"{ended.count(o)} {word}" for o, word in words.items() if o in ended)
            return (
                f"no gate was checked: no gated benchmark was measured ({counts}); gates that check "
                "nothing do not pass"
            )
        if self.settings.gates:
            where = f"{self._deselected} deselected" if self._deselected else "none collected"
            gates = "; ".join(map(str, self.settings.gates))
            return (
                f"no gate was checked: gates given ({gates}) but no benchmark was selected ({where}); "
                "select the gated benchmarks, or pass --ipu-gate=none to run without gates"
            )
        return None

    @property
    def failed(self) -> bool:
        """Whether a gate failed the job (or was inconclusive under ``--ipu-inconclusive=fail``), a
        benchmark is missing from the baseline under ``fail``, or the gates checked nothing."""
        return (
            any(self._fails(v) for v in self.verdicts)
            or (self.settings.baseline_missing == "fail" and bool(self.missing))
            or self.nothing_checked
        )

    # -- the report ---------------------------------------------------------------------------------

    def write_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """After the tables, the job's summary on one screen (``report.gate_summary``): the counts
        and the job's rule, every FAIL, each undecided benchmark once (pytest's ``-v`` lists every
        verdict), then the notes. Gates that checked nothing are one red line saying why."""
        verdicts, unchecked, policy = self.verdicts, self._unchecked(), self.settings.inconclusive
        if not verdicts and not self.missing and not self.notes and not self.skipped and not unchecked:
            return  # nothing to say: the decision rule (and numpy) is never loaded
        from pytest_ipu.report import gate_summary
        from pytest_ipu.report import text

        gates = gate_summary.RunGates(
            verdicts,
            bool(self.measured),
            self._baseline_name() if self.baseline is not None and (verdicts or self.measured) else "",
            self.settings.job_alpha,
            self._family_size() if verdicts else 0,
            policy,
            self.settings.baseline_missing,
            unchecked,
            self.missing,
            self.notes,
            self.skipped,
        )
        terminalreporter.section("pytest-ipu gates")
        summary = gate_summary.table(gates, verbose=terminalreporter.config.getoption("verbose", 0) > 0)
        width = text.terminal_width()
        for line, markup in [
            *((line, {}) for line in summary.legend),
            *((line, {gate_summary.tone(line, policy): True}) for line in summary.notes),
        ]:
            # Fitted to a terminal's width (whole lines in a log: ``text.terminal_width``).
            for part in text.wrap([line], width):
                terminalreporter.write_line(part, **markup)


def _is_benchmark(item: pytest.Item) -> bool:
    """Whether ``item`` is a benchmark: it uses pytest-benchmark's ``benchmark`` fixture, as every
    pytest-ipu benchmark fixture does (pytest-benchmark's own rule for what to skip and disable)."""
    return "benchmark" in getattr(item, "fixturenames", ())


def _untimed_message(gates: str, untimed: Untimed) -> str:
    """``gates`` (what they are and where they come from) would check nothing: the option that stops
    pytest-benchmark's timing, where it was given, and the fix."""
    option = f"{untimed.option} (from {untimed.source})"
    return f"pytest-ipu: {gates} would check nothing: {option} {untimed.effect}; {untimed.fix}"


def _not_a_baseline(run: StoredRun) -> str | None:
    """Why a run cannot be a baseline (``None`` when it can): not one of its benchmarks can be read by
    a gate (``plain.gated``: each is a partial entry, or has no statistics). A run written without
    pytest-ipu is a baseline for its plain pytest-benchmark benchmarks."""
    from pytest_ipu.results import plain

    if not any(plain.gated(b, run.machine_info) is not None for b in run.benchmarks):
        return (
            "no benchmark in it can be gated (each is a partial entry of a test stopped before its "
            "pytest-ipu record was written, or has no pytest-benchmark statistics); use a complete run"
        )
    return None


def _partial_entries(run: StoredRun) -> list[str]:
    """One line for each entry of a baseline run that no gate reads (``plain.not_gated``)."""
    from pytest_ipu.results import plain

    return [
        f"baseline {run.path}: {b.fullname} {plain.not_gated(b)}: not a baseline for it"
        for b in run.benchmarks
        if plain.gated(b, run.machine_info) is None
    ]
