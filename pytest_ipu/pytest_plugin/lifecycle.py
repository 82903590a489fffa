"""Every hook pytest-ipu implements after start-up, in the order pytest calls them, and the end of
the session as one ordered sequence.

``plugin.pytest_configure`` registers one ``Lifecycle`` per run. Its hooks are thin: the state is
``session.IpuSession``'s, the decisions are the gates' (``gating``), the repeats' (``repeats``) and the
records' (``pytest_ipu.results``). ``end_session`` is the session's end, one function calling its steps
in order: save (pytest-benchmark writes in its own ``pytest_sessionfinish`` wrapper, before any plain
implementation, through the writer ``pytest_sessionstart`` routed: ``saving``), merge (``launch_end``,
``launch``), gates and the exit code of a failed gate, merge or save, release. What a hook does only
when a run has something for it is a module of its own, loaded then (``saving``, ``launch_end``,
``launch``, ``backend_params``, ``terminal_section``, ``document``).

Documented in docs/architecture.md (sections "Questions a newcomer asks": where are the hooks, where
does the session end; and "Start-up cost") and docs/ci.md (section "Interrupted runs are never saved").
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from collections.abc import Generator
from collections.abc import Iterator
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest

import pytest_ipu
from pytest_ipu.errors import ConfigError
from pytest_ipu.errors import PytestIpuWarning
from pytest_ipu.pytest_plugin import bench_seam
from pytest_ipu.pytest_plugin.fixtures.common import FAILED_KEY
from pytest_ipu.pytest_plugin.marker import MARKER
from pytest_ipu.pytest_plugin.marker import has_marker_gates
from pytest_ipu.pytest_plugin.session import IpuSession

if TYPE_CHECKING:
    # The saving and the results' files load when a run has something for them (every
    # pytest run registers these hooks: benchmarks/test_startup_cost.py).
    from pytest_ipu.pytest_plugin.saving import RunSaving
    from pytest_ipu.results.atomic import PendingFile


class RunTerminated(KeyboardInterrupt):
    """SIGTERM, raised as pytest's Ctrl-C is: the run stops as interrupted, and every teardown and
    ``finally`` on the way out runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by signal {signum} (SIGTERM)")


class Lifecycle:
    """The hooks of one pytest run, registered as one plugin (an ordinary class: plugins must be
    hashable by identity)."""

    def __init__(self, session: IpuSession, pending_json: PendingFile | None) -> None:
        self.session = session
        #: The ``--benchmark-json`` file pytest-benchmark writes at a temporary path, moved into
        #: place whole (``None`` without the option, and in a pytest-xdist worker).
        self.pending_json = pending_json
        #: The run's saving (``saving``), made on first use.
        self._saving: RunSaving | None = None
        #: The pytest session, from its start: its exit status is the run's, also in ``pytest_unconfigure``.
        self._pytest_session: pytest.Session | None = None
        #: SIGTERM's handler for the run (``pytest_sessionstart`` to ``pytest_unconfigure``).
        self._sigterm = contextlib.ExitStack()

    def saving(self) -> RunSaving:
        """Step 1 of ``end_session``, the run's files saved whole (``saving.RunSaving``), made on first
        use: by a run with ``--benchmark-json`` or a saved run, an interrupt, or ``ipu_power`` blocks
        to save. Until then nothing was interrupted and nothing failed to save.

        A method, not a property: pytest before 8 reads every attribute of a registered plugin while
        looking for fixtures, which would make it at start-up."""
        if self._saving is None:
            from pytest_ipu.pytest_plugin.saving import RunSaving

            self._saving = RunSaving(self.session, self.pending_json, self._say)
        return self._saving

    # -- collection -------------------------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize tests that use ``ipu_backend`` over their targets (unless they do it themselves:
        ``backend_params``)."""
        if "ipu_backend" not in metafunc.fixturenames:
            return
        from pytest_ipu.pytest_plugin import backend_params

        backend_params.parametrize(metafunc, self.session)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Check every ``ipu`` marker, then refuse a target whose backend or device nobody provides,
        so a typo stops the run before anything is measured.

        ``trylast``: after pytest's own ``-k``/``-m`` selection and any plugin's reordering. Here,
        not at configure time: a conftest below the rootdir (loaded during collection) may add a
        backend through ``pytest_ipu_make_backend``. Not in ``pytest_generate_tests`` either:
        pytest turns an error there into a collection error, not a one-line usage error.
        """
        for item in items:
            if item.get_closest_marker(MARKER) is None:
                continue  # nothing to check (and the marker's parsers stay unloaded)
            from pytest_ipu.pytest_plugin.marker_keywords import marker_gates
            from pytest_ipu.pytest_plugin.marker_keywords import marker_overrides
            from pytest_ipu.pytest_plugin.marker_keywords import placement_request

            try:
                marker_overrides(item)
                placement_request(item)
                marker_gates(item)
            except ConfigError as exc:
                raise pytest.UsageError(f"pytest-ipu: {exc}") from None
        # A run that names no target and runs no test on one has none to refuse (and loads no
        # target code).
        requested = self.session.settings.targets
        on_targets = ("ipu_backend" in getattr(getattr(i, "callspec", None), "params", ()) for i in items)
        if requested or any(on_targets):
            from pytest_ipu.pytest_plugin import backend_params

            backend_params.refuse_unprovided(config, requested, items)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Count the deselected benchmarks, a reason the gates may name for checking nothing (only the
        run's own gates do, which made the gate check at configure time)."""
        gate_check = self.session.gate_check_made
        if gate_check is not None:
            gate_check.deselected(items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The tests are known: load the gates' baseline (a relative gate without one stops the run)
        and group the interleaved repeats into parametrized sets. A run with no gate, baseline or
        gated benchmark loads no gate code, and one without benchmarks no repeat code."""
        state = self.session
        settings = state.settings
        if state.ab_side:
            # pytest-ipu ab gates this run on its pairs: the benchmarks' own gates go into the
            # document for it (``document.update_json``), and nothing is checked here.
            if any(has_marker_gates(item) for item in session.items):
                from pytest_ipu.pytest_plugin.marker_keywords import marker_gates

                state.own_gates = {item.nodeid: own for item in session.items if (own := marker_gates(item))}
        elif (
            settings.gates
            or settings.baselines
            or state.gate_check_made is not None  # --benchmark-compare's runs, kept
            or any(has_marker_gates(item) for item in session.items)
        ):
            state.gate_check.load(session)
        if any("ipu_benchmark" in getattr(item, "fixturenames", ()) for item in session.items):
            state.repeats.group(session)

    def pytest_benchmark_compare_machine_info(self, compared_benchmark: Mapping[str, Any]) -> None:
        """Keep each run pytest-benchmark's ``--benchmark-compare`` loads; the last is the gates'
        baseline."""
        self.session.gate_check.keep_compared(compared_benchmark)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """A pytest-xdist worker is done (on the controller): its gated benchmarks, run untimed, fail
        the run at its end (``gating``). pytest-xdist's hook, optional: it may not be installed."""
        if not self.session.ab_side:
            self.session.gate_check.worker_finished(getattr(node, "workeroutput", None))

    # -- each test --------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        """Before the first item of a parametrized set, its earlier interleaved repeats; ``True``
        (done) for an item whose earlier repeat failed. ``tryfirst``: before pytest runs the item."""
        repeats = self.session.repeats_made
        return None if repeats is None else repeats.before(item, nextitem)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Gate a test timed by pytest-benchmark's own fixture once its call passed (a failing gate
        fails the call's report: ``gating``). Mark an item whose setup or call failed, for
        ``ipu_benchmark``'s teardown: such a test never reached its benchmark, and pytest-benchmark's
        "fixture was not used" warning would be wrong. Keep the reports of an earlier repeat, which
        decide whether the test runs again. A benchmark whose test failed before its record was
        made is left out of the saved results."""
        report = yield
        # Before the gate: a test its gate fails was measured whole, and its entry stays.
        benchmark = getattr(item, "funcargs", {}).get("benchmark")
        if report.when in ("call", "teardown") and report.failed and benchmark is not None:
            from pytest_ipu.pytest_plugin.bench_seam import fixture as bench_fixture

            bench_fixture.leave_out_unfinished(benchmark)
        gate_check = self.session.gate_check_made
        if gate_check is not None:
            gate_check.check_plain(item, report)
        if report.when in ("setup", "call") and report.failed:
            item.stash[FAILED_KEY] = True
        repeats = self.session.repeats_made
        if repeats is not None:
            repeats.made(report)
        if gate_check is not None:
            gate_check.ran(report)
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        """Mark an item whose call was interrupted (Ctrl-C, ``pytest.exit``) as failed, like one whose
        call raised: its benchmark never finished, and pytest-benchmark's "fixture was not used"
        warning, raised as the session ends, would be wrong (and an error under ``-W error``).

        Before a benchmark's call, a sample of the machine's speed when one is due
        (``machine_speed``): what the gates tell a level shift of the machine by; and, once a run,
        whether BLAS and OpenMP threads are pinned (``blas_threads``: the summary warns if not)."""
        if "benchmark" in getattr(item, "fixturenames", ()):
            from pytest_ipu.pytest_plugin.repeats import in_worker

            if not in_worker():  # the process that started a repeat worker samples, gates and warns
                self.session.speed().between()
                if not self.session.blas_checked:
                    from pytest_ipu.pytest_plugin import blas_threads

                    self.session.blas_checked = True
                    self.session.blas_notice = blas_threads.notice()
        try:
            return (yield)
        except (KeyboardInterrupt, pytest.exit.Exception):
            item.stash[FAILED_KEY] = True
            raise

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        """An earlier repeat that did not fail is neither counted nor shown: the test's result is its
        last run's. ``tryfirst``: before pytest's own answer ("passed")."""
        repeats = self.session.repeats_made
        return ("", "", "") if repeats is not None and repeats.hides(report) else None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        """Once the test's fixtures are torn down, release the compiled models no test can ask for
        again (their model is gone): a sweep that builds a model per parameter must not keep them all.
        An earlier repeat's teardown goes through here too."""
        try:
            yield
        finally:
            errors = self.session.release_unreachable(item.nodeid)
            if errors:
                warnings.warn(
                    PytestIpuWarning(f"pytest-ipu could not release a compiled model: {'; '.join(errors)}"),
                    stacklevel=1,
                )

    # -- pytest-benchmark's document --------------------------------------------------------------

    def pytest_benchmark_update_machine_info(
        self, config: pytest.Config, machine_info: dict[str, Any]
    ) -> None:
        """``machine_info["ipu"]``: the plugin version, each backend used as it describes itself, and
        (under ``auto``) the default targets absent here with the reason (``document``)."""
        from pytest_ipu.pytest_plugin import document

        document.update_machine_info(self.session, config, machine_info)

    def pytest_benchmark_update_json(self, output_json: dict[str, Any]) -> None:
        """The top-level ``pytest_ipu`` section: schema version, plugin version, settings and, when the
        run measured any, the energy of every ``ipu_power`` block (``power_blocks``) and, when it had
        gates, every gate's verdict (``gates``) (``document``)."""
        from pytest_ipu.pytest_plugin import document

        document.update_json(self.session, output_json)

    # -- the session's end ------------------------------------------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Route pytest-benchmark's saving (step 1 of ``end_session``): its session exists from here
        (its ``pytest_configure`` runs last), and it saves in its own ``pytest_sessionfinish`` wrapper,
        before ``end_session`` could."""
        self._pytest_session = session
        config = session.config
        # SIGTERM (a cancelled CI job, a kill) unwinds the run as Ctrl-C does: fixtures tear down,
        # repeat workers and instance processes are stopped, files are left whole.
        from pytest_ipu.processes import sigterm_raises

        self._sigterm.enter_context(sigterm_raises(RunTerminated))
        if self.pending_json is not None:
            self.saving().route_json(config)
        bench_seam.route_saving(config, self._save_instead, self._saving_interrupted)
        bench_seam.route_storage(config, self._write_saved_run)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """The run was interrupted (Ctrl-C, or ``pytest.exit``), wherever it was, maybe inside a
        benchmark; pytest calls this before the session's end. Its results are not saved
        (``_save_instead``) and its gates are not failed for what it did not reach.

        A stop the run asks for itself after a failure is not an interrupt: ``-x``, ``--stepwise``, a
        lost torchrun rank (``session.shouldstop``, which pytest raises as ``Session.Interrupted``,
        reported here too). Such a run ends as failed where it failed, every benchmark it ran was
        measured whole, and it is saved like any run with a failing test (the gates name what the
        baseline then lacks)."""
        if isinstance(excinfo.value, pytest.Session.Interrupted):
            return
        saving = self.saving()
        saving.interrupted = True
        saving.how = _how_stopped(excinfo.value)
        gate_check = self.session.gate_check_made
        if gate_check is not None:
            gate_check.interrupted = True

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """The session's end (``end_session``). A plain implementation, no ordering markers: pluggy
        runs every plain implementation after each wrapper's first half (pytest-benchmark's, which
        saves the results) and before their second halves (the terminal reporter's, which prints
        the summary)."""
        self.end_session(session)

    def end_session(self, session: pytest.Session) -> None:
        """Save, merge, gate and release, in this order; a failure of any of them fails the run
        (exit code 1), never skips the steps after it."""
        state = self.session
        try:
            if self.pending_json is not None:
                self.saving().finish()
            if state.torchrun is not None:
                # After pytest-benchmark saved this rank's file, on every rank: also on one that
                # measured nothing, which pytest-benchmark never asks for its document.
                from pytest_ipu.pytest_plugin import launch_end

                launch_end.finish(state, self._reporter(), self._say)
            gate_check = state.gate_check_made
            if gate_check is not None:
                gate_check.check()
            gates_failed = gate_check is not None and gate_check.failed
            save_failed = self._saving is not None and self._saving.failed
            failed = save_failed or state.launch_error is not None or gates_failed
            if failed and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        finally:
            self._release()

    def _save_instead(self, has_benchmarks: bool) -> bool:
        """In place of pytest-benchmark's saving (``bench_seam.route_saving``): whether it must not
        save (``RunSaving.save_instead``). A run not interrupted that has benchmarks, or nothing of
        pytest-ipu's to save, is pytest-benchmark's to save as it does."""
        if self._saving is None and (has_benchmarks or not self.session.power_blocks):
            return False
        return self.saving().save_instead(has_benchmarks)

    def _saving_interrupted(self, exc: KeyboardInterrupt) -> None:
        """Ctrl-C or SIGTERM (``RunTerminated``) while pytest-benchmark saved the results: the run ends
        as interrupted, with one line instead of a traceback (``RunSaving.interrupted_while_saving``)."""
        self.saving().interrupted_while_saving(self._pytest_session, _how_stopped(exc))

    def _write_saved_run(self, next_name: Callable[[], Path], data: bytes) -> Path | None:
        """pytest-benchmark's storage writer, routed (``RunSaving.write_saved_run``): the run's file
        written whole or not at all, under a name no other run has."""
        return self.saving().write_saved_run(next_name, data)

    def _release(self) -> None:
        """Release every compiled model and power source, whatever happened (a warning says what
        could not be)."""
        errors = self.session.release()
        if errors:
            warnings.warn(
                PytestIpuWarning(
                    f"pytest-ipu could not release compiled models or power sources: {'; '.join(errors)}"
                ),
                stacklevel=1,
            )

    # -- the terminal -----------------------------------------------------------------------------

    def pytest_report_header(self) -> list[str]:
        """One line with the settings pytest-ipu runs with."""
        s = self.session.settings
        rounds = "auto" if s.rounds is None else s.rounds
        return [
            f"pytest-ipu {pytest_ipu.__version__}: targets={','.join(map(str, s.targets)) or 'auto'} "
            f"precision={s.precision} rounds={rounds} warmup={s.warmup_rounds} "
            f"max-time={s.max_time_s:g}s missing-sdk={s.missing_sdk}"
        ]

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> Iterator[None]:
        """The pytest-ipu tables, the ``ipu_power`` blocks and (under ``auto``) which targets were
        found; after pytest-benchmark's table, the gates.

        A wrapper around the other summaries (pytest-benchmark's table among them), ``trylast`` so
        that it is the innermost wrapper: inside pytest's own, whose first half prints the failures
        and whose second half the short test summary.
        """
        state = self.session
        if state.blas_notice is not None:
            terminalreporter.write_line(state.blas_notice, yellow=True)
        # A run with nothing to show loads no report module (every plain pytest run ends here).
        if state.measured or state.power_blocks or state.auto is not None:
            from pytest_ipu.pytest_plugin import terminal_section

            terminal_section.write(terminalreporter, state)
        try:
            return (yield)
        finally:
            gate_check = self.session.gate_check_made
            if gate_check is not None:
                gate_check.write_summary(terminalreporter)

    def pytest_unconfigure(self) -> None:
        """Leave a torchrun launch's process group, after the terminal summary (every rank first
        waits for the others: torchrun stops the whole launch as soon as one rank exits with a
        failure, and rank 0 may still be writing the merged file or its tables then). Also what a
        session that ended early left: a temporary results file, open meters and models."""
        state = self.session
        self._sigterm.close()
        if self.pending_json is not None:
            # Left only when pytest-benchmark's save raised: maybe half-written, the destination is kept.
            self.pending_json.discard()
        state.release()
        ranks = state.ranks
        if ranks is None:
            return
        from pytest_ipu.pytest_plugin import launch_end

        status = self._pytest_session.exitstatus if self._pytest_session is not None else 0
        launch_end.leave(state, ranks, int(status), self._say)

    def _reporter(self) -> Any:
        return self.session.config.pluginmanager.get_plugin("terminalreporter")

    def _say(self, line: str) -> None:
        """One red line on the terminal (printed when there is no terminal reporter)."""
        reporter = self._reporter()
        if reporter is not None:
            if self.session.config.get_terminal_writer().width_of_current_line:
                # Under -q (and on a torchrun rank other than 0) pytest's progress line is still
                # open here (pytest ends it after this hook): the message gets a line of its own.
                reporter.write_line("")
            reporter.write_line(line, red=True)
        else:
            print(line)


def _how_stopped(exc: BaseException) -> str:
    """How an interrupted run stopped, as its "not saved" line begins: ``terminated (SIGTERM)`` for a
    SIGTERM (``RunTerminated``), else ``interrupted`` (Ctrl-C, ``pytest.exit``)."""
    return "terminated (SIGTERM)" if isinstance(exc, RunTerminated) else "interrupted"
