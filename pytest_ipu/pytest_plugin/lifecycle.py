"""Every hook pytest-ipu implements after start-up, in the order pytest calls them, and the end of
the session as one ordered sequence.

``plugin.pytest_configure`` registers one ``Lifecycle`` per run. Its hooks are thin: the state
is ``session.IpuSession``'s, the decisions are the gates' (``gating``), the repeats' (``repeats``)
and the records' (``pytest_ipu.results``).

The end of a session is ``end_session``, one function calling its steps in order:

1. save: pytest-benchmark writes ``--benchmark-json`` (and ``--benchmark-save``) in its own
   ``pytest_sessionfinish`` wrapper, before any plain implementation runs. ``pytest_sessionstart``
   routed that writer, so the file lands at a temporary path and is moved into place whole as
   soon as it is written, and a run that measured only ``ipu_power`` blocks (where
   pytest-benchmark would save nothing) is saved through the same writers. An interrupted run
   (``pytest_keyboard_interrupt``: Ctrl-C, ``pytest.exit``) saves nothing: the files keep the last
   complete run, which a later ``--benchmark-compare`` picks;
2. merge: under torchrun, every rank's document gathered on rank 0 and merged into one file,
   gated there (``launch``);
3. gates: every gate not checked yet, and the exit code of a failed gate, merge or save;
4. release: the power meters and compiled models.

Then pytest's terminal reporter calls ``pytest_terminal_summary`` (the tables, the ``ipu_power``
blocks, the targets; after pytest-benchmark's table, the gates), and ``pytest_unconfigure``
leaves the torchrun launch once every rank is done.
"""

from __future__ import annotations

import contextlib
import errno
import os
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
from pytest_ipu.pytest_plugin import options
from pytest_ipu.pytest_plugin.fixtures.common import FAILED_KEY
from pytest_ipu.pytest_plugin.marker import MARKER
from pytest_ipu.pytest_plugin.marker import has_marker_gates
from pytest_ipu.pytest_plugin.session import IpuSession

if TYPE_CHECKING:
    # The backends and the launches' merging load when a run has something for them (every
    # pytest run registers these hooks: benchmarks/test_startup_cost.py).
    from pytest_ipu.backends.target import Target
    from pytest_ipu.placement.rank_group import RankGroup
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
        #: Whether pytest-benchmark's writer was routed (``pytest_sessionstart``): the file then
        #: moves into place as soon as it is written.
        self._json_routed = False
        #: What could not be saved (the results file, the ``ipu_power`` blocks): the run fails.
        self._save_failed = False
        #: Whether the run was interrupted (``pytest_keyboard_interrupt``): nothing is saved.
        self._interrupted = False
        #: Whether the ``--benchmark-json`` file was moved into place, whole.
        self._json_written = False
        #: The pytest session, from its start: its exit status is the run's, also in ``pytest_unconfigure``.
        self._pytest_session: pytest.Session | None = None
        #: SIGTERM's handler for the run (``pytest_sessionstart`` to ``pytest_unconfigure``).
        self._sigterm = contextlib.ExitStack()

    # -- collection -------------------------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize tests that use ``ipu_backend`` over their targets (unless they do it themselves)."""
        if "ipu_backend" not in metafunc.fixturenames or _parametrizes(metafunc, "ipu_backend"):
            return
        requested = self.session.settings.targets
        for mark in metafunc.definition.iter_markers("ipu"):
            if "backend" in mark.kwargs:
                from pytest_ipu.pytest_plugin.option_values import parse_targets

                try:
                    requested = parse_targets(mark.kwargs["backend"])
                except ValueError:
                    return  # reported with the node id at collection (pytest_collection_modifyitems)
                break
        targets = self.session.targets_for(requested)
        metafunc.parametrize("ipu_backend", targets, indirect=True, ids=[t.id for t in targets])

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
        provided: dict[Target, bool] = {}

        def unprovided(target: Target) -> str | None:
            """Why nobody provides ``target``, or None when the registry or a conftest does."""
            from pytest_ipu import backends  # only when a target is named: not at every start-up

            reason = backends.unknown_target_reason(target)
            if reason is None:
                return None
            if target not in provided:
                # Only a conftest's implementation can make a target the registry does not know.
                provided[target] = (
                    config.hook.pytest_ipu_make_backend(config=config, target=target) is not None
                )
            return None if provided[target] else reason

        # The option's own targets, whatever the tests use: a typo in --ipu-backend is a usage error
        # even in a suite of plain callables that never asks for ``ipu_backend``.
        for requested in self.session.settings.targets:
            reason = unprovided(requested)
            if reason is not None:
                value, source = options.value_and_source(config, "targets")
                raise pytest.UsageError(
                    f"pytest-ipu: invalid value {value!r} for --ipu-backend from {source}: {reason}"
                )
        for item in items:
            target = _target_param(item)
            if target is None:
                continue
            reason = unprovided(target)
            if reason is not None:
                raise pytest.UsageError(f"pytest-ipu: {_target_origin(config, item)}: {reason}")

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
        if (
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
        """Mark an item whose setup or call failed, for ``ipu_benchmark``'s teardown: such a test
        never reached its benchmark, and pytest-benchmark's "fixture was not used" warning would be
        wrong. Keep the reports of an earlier repeat, which decide whether the test runs again."""
        report = yield
        if report.when in ("setup", "call") and report.failed:
            item.stash[FAILED_KEY] = True
        repeats, gate_check = self.session.repeats_made, self.session.gate_check_made
        if repeats is not None:
            repeats.made(report)
        if gate_check is not None:
            gate_check.ran(report)
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        """Mark an item whose call was interrupted (Ctrl-C, ``pytest.exit``) as failed, like one whose
        call raised: its benchmark never finished, and pytest-benchmark's "fixture was not used"
        warning, raised as the session ends, would be wrong (and an error under ``-W error``)."""
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
            self._json_routed = bench_seam.wrap_json_writer(config, self._save_and_move)
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
        self._interrupted = True
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
            self._finish_save()
            if state.torchrun is not None:
                # After pytest-benchmark saved this rank's file, on every rank: also on one that
                # measured nothing, which pytest-benchmark never asks for its document.
                self._finish_launch()
            gate_check = state.gate_check_made
            if gate_check is not None:
                gate_check.check()
            gates_failed = gate_check is not None and gate_check.failed
            failed = self._save_failed or state.launch_error is not None or gates_failed
            if failed and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        finally:
            self._release()

    def _save_and_move(self, save: Callable[[], None]) -> None:
        """pytest-benchmark's ``--benchmark-json`` writer, routed: write the temporary file, move it
        into place whole, or report one line and leave the destination as it was (also when Ctrl-C
        or SIGTERM comes in the middle: the run then ends as interrupted, without a traceback)."""
        pending = self.pending_json
        assert pending is not None
        try:
            # pytest-benchmark's "Wrote benchmark data in: ..." already names the target
            # (``bench_seam.set_json_path``), so nothing more is said here.
            save()
            pending.commit()
        except OSError as exc:
            self._json_failed(exc)
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM in the middle: whatever was written goes (``_saving_interrupted``).
            pending.discard()
            raise
        self._json_written = True

    def _write_saved_run(self, target: Path, data: bytes) -> bool:
        """pytest-benchmark's storage writer, routed (``--benchmark-save``/``-autosave``): the run's
        file written whole or not at all; a failure is one line and a failed run, and the storage
        keeps what it had."""
        from pytest_ipu.results import atomic

        try:
            if target.exists():  # as pytest-benchmark's own writer, which asserts it
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
            atomic.write_bytes(target, data)
        except OSError as exc:
            self._save_failed = True
            self._say(
                f"pytest-ipu: cannot save the run into the benchmark storage as {target}: "
                f"{exc.strerror or exc}; nothing was saved there (free space, or pass a writable "
                "--benchmark-storage)"
            )
            return False
        return True

    def _saving_interrupted(self, exc: KeyboardInterrupt) -> None:
        """Ctrl-C or SIGTERM (``RunTerminated``) while pytest-benchmark saved the results: the run ends
        as interrupted, with one line saying what was written whole and what was not (instead of a
        traceback); a file being written is left as it was, its temporary file removed."""
        if self.pending_json is not None and not self._json_written:
            self.pending_json.discard()
        self._interrupted = True
        gate_check = self.session.gate_check_made
        if gate_check is not None:
            gate_check.interrupted = True
        if self._pytest_session is not None:
            self._pytest_session.exitstatus = pytest.ExitCode.INTERRUPTED
        self._say_not_saved("terminated (SIGTERM)" if isinstance(exc, RunTerminated) else "interrupted")

    def _finish_save(self) -> None:
        """Where pytest-benchmark's writer could not be routed, move what it wrote into place now
        (an interrupted run's file is removed: it is never a complete run)."""
        pending = self.pending_json
        if pending is None or self._json_routed:
            return
        if self._interrupted:
            pending.discard()
            return
        try:
            pending.commit()
        except OSError as exc:
            self._json_failed(exc)

    def _json_failed(self, error: OSError) -> None:
        """Remove the half-written file and say, in one line, that the results were not written."""
        pending = self.pending_json
        assert pending is not None
        pending.discard()
        self._save_failed = True
        self._say(
            f"pytest-ipu: --benchmark-json={pending.target}: cannot write the results: "
            f"{error.strerror or error}; the file was left as it was (free space or pass a writable path)"
        )

    def _save_instead(self, has_benchmarks: bool) -> bool:
        """In place of pytest-benchmark's saving (``bench_seam.route_saving``): whether it must not
        save. An interrupted run saves nothing, so that neither ``--benchmark-json`` nor the storage
        of ``--benchmark-save``/``--benchmark-autosave`` gets a partial run (one line says so); a
        run that measured only ``ipu_power`` blocks is saved here."""
        if self._interrupted:
            self._say_not_saved()
            return True
        return not has_benchmarks and self._save_power_blocks_alone()

    def _say_not_saved(self, how: str = "interrupted") -> None:
        """One line: an interrupted run's results were not saved, and what keeps the last complete run
        (``how`` it stopped: ``interrupted``, ``terminated (SIGTERM)``)."""
        option = self.session.config.option
        kept = []
        head = "results not saved, "
        if self.pending_json is not None:
            target = self.pending_json.target
            if self._json_written:  # stopped while saving, after the file was moved into place
                state, head = "was written whole", ""
            else:
                state = "keeps the previous complete run" if target.exists() else "was not written"
            kept.append(f"{target} {state}")
        if getattr(option, "benchmark_save", None) or getattr(option, "benchmark_autosave", False):
            storage = getattr(option, "benchmark_storage", None) or "the benchmark storage"
            kept.append(f"no run was saved into {storage}")
        reporter = self._reporter()
        if kept and reporter is not None:
            # A line of its own: an interrupt leaves the progress line (-q's dots) unfinished.
            reporter.write_line("")
            reporter.write_line(f"pytest-ipu: {how}: {head}{'; '.join(kept)}", yellow=True)

    def _save_power_blocks_alone(self) -> bool:
        """Save the run's file when it measured ``ipu_power`` blocks and no benchmark (pytest-benchmark
        would save nothing, "Not saving anything, no benchmarks have been run!", and the blocks would
        be lost): through pytest-benchmark's hooks and writers (``bench_seam``), the JSON moved into
        place whole like any run's. Returns whether it saved (or tried to) in pytest-benchmark's place.
        A file that cannot be written is one line and a failed run."""
        if not self.session.power_blocks:
            return False
        try:
            return bench_seam.save_without_benchmarks(self.session.config)
        except OSError as exc:
            self._save_failed = True
            self._say(
                f"pytest-ipu: cannot save the ipu_power blocks: {exc}; free space or pass a writable path"
            )
            return True  # as far as it could: the line says what is missing

    def _finish_launch(self) -> None:
        """Merge the launch's results on rank 0; a failure is one red line and a failed run."""
        state = self.session
        if state.ranks_lost or state.merged_json is None:
            # Nothing to merge (``launch.merge`` returns too): the launch module stays unloaded, so a
            # rank that lost its peers reaches its summary before torchrun's SIGTERM for the others.
            return
        from pytest_ipu.errors import RankError
        from pytest_ipu.errors import RanksElsewhere
        from pytest_ipu.placement import poprun
        from pytest_ipu.pytest_plugin import launch

        try:
            launch.merge(state, self._reporter())
        except (RankError, poprun.MergeError, OSError) as exc:
            # Never a merged file from part of the launch.
            state.launch_error = str(exc) if str(exc).startswith("pytest-ipu:") else f"pytest-ipu: {exc}"
            state.ranks_lost = state.ranks_lost or isinstance(exc, RankError)
            state.ranks_elsewhere = isinstance(exc, RanksElsewhere)
            self._say(state.launch_error)

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
        # A run with nothing to show loads no report module (every plain pytest run ends here).
        if state.measured or state.power_blocks or state.auto is not None:
            from pytest_ipu.report import text

            width = text.terminal_width()
            lines = text.wrap(_summary_lines(state, width), width)
            if lines:
                terminalreporter.section("pytest-ipu")
                for line in lines:
                    terminalreporter.write_line(line)
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
        from pytest_ipu.errors import RankError

        try:
            if not state.ranks_lost or state.ranks_elsewhere:
                # Every peer is alive (and, when elsewhere, stopping too): a rank that exited now
                # would have torchrun stop the others before they said where they were.
                ranks.barrier("the end of every rank's run")
        except RankError as exc:
            self._say(str(exc))
        finally:
            self._leave(ranks)

    def _leave(self, ranks: RankGroup) -> None:
        """Leave the launch: the rank ends at exit, with the run's exit status, without finalizing
        the interpreter (``rank_group.end_at_exit``), its output flushed first. Tearing gloo's groups
        down cannot be made safe here: a group's destructor holds the GIL while it joins a worker
        thread that may need the GIL to free the tensors of the last collective (a deadlock no
        timeout ends), and a worker still alive when the interpreter finalizes aborts the process
        (SIGABRT). Ending the process ends those threads with it."""
        del ranks  # every rank got past the last barrier (or knows a peer is gone): nothing to wait for
        from pytest_ipu.placement import rank_group

        status = self._pytest_session.exitstatus if self._pytest_session is not None else 0
        rank_group.end_at_exit(int(status))

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


# -- the summary --------------------------------------------------------------------------------------


def _summary_lines(state: IpuSession, width: int | None = None) -> list[str]:
    """The pytest-ipu section: the tables (and a torchrun launch's), the ``ipu_power`` blocks, and
    under ``auto`` which targets were found and which were not; tables fitted to ``width``. Nothing
    on a torchrun rank other than 0: rank 0 prints the launch's, merged."""
    if state.torchrun is not None and state.torchrun.index > 0:
        return []
    tables: list[str] = []
    if state.measured:  # a run without benchmarks never loads the tables (nor numpy)
        from pytest_ipu.report import terminal as report
        from pytest_ipu.report import training

        tables = report.tables([report.Row(m.group, m.name, m.record) for m in state.measured], width=width)
        if state.launch_records and state.torchrun is not None:
            tables += training.launch_lines(
                state.torchrun.count, state.torchrun.nodes, str(state.merged_json), state.launch_records
            )
    blocks: list[str] = []
    if state.power_blocks:
        from pytest_ipu.report import power_blocks as report_blocks

        blocks = report_blocks.lines(state.power_blocks)
    targets: list[str] = []
    if state.auto is not None:
        present, absent = state.auto
        targets = [f"targets present (auto): {', '.join(map(str, present)) or 'none'}"]
        targets.extend(f"target absent: {t}: {why}" for t, why in absent)
    # A blank line after each table that other lines follow.
    lines = tables + ([""] if tables and blocks and tables[-1] else []) + blocks
    return lines + ([""] if blocks and state.auto is not None else []) + targets


# -- targets ------------------------------------------------------------------------------------------


def _target_param(item: pytest.Item) -> Target | None:
    """The ``ipu_backend`` parameter of ``item`` as a target; ``None`` when it has none or it is
    malformed (the fixture reports that, naming the test)."""
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("ipu_backend") if callspec is not None else None
    if param is None:
        return None
    from pytest_ipu.backends.target import Target
    from pytest_ipu.backends.target import parse_target

    if isinstance(param, Target):
        return param
    if isinstance(param, str):
        try:
            return parse_target(param)
        except ValueError:
            return None
    return None


def _target_origin(config: pytest.Config, item: pytest.Item) -> str:
    """Where ``item``'s target came from, as the start of a message: its own parametrize, its
    marker, or the ``--ipu-backend`` option (with the option's source)."""
    if _parametrizes(item, "ipu_backend"):
        param = item.callspec.params["ipu_backend"]  # type: ignore[attr-defined]
        return f"{item.nodeid}: invalid value {str(param)!r} for the ipu_backend parameter"
    for mark in item.iter_markers("ipu"):
        if "backend" in mark.kwargs:
            value = mark.kwargs["backend"]
            return f"{item.nodeid}: invalid value {value!r} for @pytest.mark.ipu(backend=...)"
    value, source = options.value_and_source(config, "targets")
    return f"invalid value {value!r} for --ipu-backend from {source}"


def _parametrizes(node: pytest.Item | pytest.Metafunc, name: str) -> bool:
    """Whether ``node`` (a test, or the test being generated) parametrizes ``name`` itself."""
    markers = node.definition.iter_markers if isinstance(node, pytest.Metafunc) else node.iter_markers
    for mark in markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        listed = names if isinstance(names, (list, tuple)) else [n.strip() for n in str(names).split(",")]
        if name in listed:
            return True
    return False
