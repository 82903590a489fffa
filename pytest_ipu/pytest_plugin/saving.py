"""Step 1 of the session's end (``lifecycle.Lifecycle.end_session``): the run's files, saved whole.

pytest-benchmark writes ``--benchmark-json`` (and ``--benchmark-save``) in its own
``pytest_sessionfinish`` wrapper; ``Lifecycle.pytest_sessionstart`` routes its writers here
(``bench_seam``), so that the JSON lands at a temporary path and is moved into place whole as soon
as it is written, a run that measured only ``ipu_power`` blocks is saved through the same writers,
and an interrupted run saves nothing (the files keep the last complete run).

Made on first use (``Lifecycle.saving()``): by a run with ``--benchmark-json`` or a saved run, an
interrupt, or ``ipu_power`` blocks to save in pytest-benchmark's place. A run with none of these
leaves pytest-benchmark's saving as it is and never loads this module.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest

from pytest_ipu.pytest_plugin.bench_seam import runs

if TYPE_CHECKING:
    from pytest_ipu.pytest_plugin.session import IpuSession
    from pytest_ipu.results.atomic import PendingFile


#: How many names ``RunSaving.write_saved_run`` tries when runs saving at the same moment take them.
MAX_NAME_TRIES = 100


def _fix(error: OSError, writable: str) -> str:
    """The fix a failed write's line names: ``writable`` (a writable place), after "free space" only
    where the file system was full (a read-only one or a permission is not cured by space)."""
    return (
        f"free space, or {writable}" if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else writable
    )


class RunSaving:
    """What the run saved and how: the ``--benchmark-json`` file pytest-benchmark writes at a temporary
    path and that is moved into place whole, the storage's saved run, and whether the run was
    interrupted (then nothing is saved) or a file could not be written (then the run fails)."""

    def __init__(
        self, session: IpuSession, pending_json: PendingFile | None, say: Callable[[str], None]
    ) -> None:
        self.session = session
        #: The ``--benchmark-json`` file pytest-benchmark writes at a temporary path, moved into
        #: place whole (``None`` without the option, and in a pytest-xdist worker).
        self.pending_json = pending_json
        #: One red line on the terminal (``Lifecycle``'s).
        self._say = say
        #: Whether pytest-benchmark's writer was routed (``route_json``): the file then moves into
        #: place as soon as it is written.
        self._json_routed = False
        #: What could not be saved (the results file, the ``ipu_power`` blocks): the run fails.
        self.failed = False
        #: Whether the run was interrupted (``Lifecycle.pytest_keyboard_interrupt``): nothing is saved.
        self.interrupted = False
        #: Whether the ``--benchmark-json`` file was moved into place, whole.
        self._json_written = False
        #: How an interrupted run stopped, as its "not saved" line begins: ``interrupted`` (Ctrl-C,
        #: ``pytest.exit``) or ``terminated (SIGTERM)``.
        self.how = "interrupted"

    def route_json(self, config: pytest.Config) -> None:
        """Route pytest-benchmark's ``--benchmark-json`` writer through ``_save_and_move`` (at the
        session's start: pytest-benchmark's session exists from there)."""
        self._json_routed = runs.wrap_json_writer(config, self._save_and_move)

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
            # Ctrl-C or SIGTERM in the middle: whatever was written goes (``interrupted_while_saving``).
            pending.discard()
            raise
        self._json_written = True

    def write_saved_run(self, next_name: Callable[[], Path], data: bytes) -> Path | None:
        """pytest-benchmark's storage writer, routed (``--benchmark-save``/``-autosave``): the run's file
        written whole or not at all, under the name ``next_name`` gives, or the next one where a run
        saving into the same storage at the same moment took it (the kernel claims the name:
        ``atomic.write_new``). Returns the path written; a failure is one line and a failed run
        (``None``), and the storage keeps what it had."""
        from pytest_ipu.results import atomic

        target = next_name()
        try:
            for _ in range(MAX_NAME_TRIES):
                try:
                    atomic.write_new(target, data)
                    return target
                except FileExistsError:
                    target = next_name()
                except FileNotFoundError:
                    if target.parent.is_dir():
                        raise
                    # pytest-benchmark ignores why it could not make the folder; making it here
                    # names the cause (a read-only file system, a permission) instead of ENOENT.
                    target.parent.mkdir(parents=True, exist_ok=True)
            reason = f"{MAX_NAME_TRIES} names up to {target.name} were taken by runs saving at the same time"
            fix = "save again"
        except OSError as exc:
            reason = str(exc.strerror or exc)
            fix = _fix(exc, "pass a writable --benchmark-storage")
        self.failed = True
        self._say(
            f"pytest-ipu: cannot save the run into the benchmark storage as {target}: {reason}; "
            f"nothing was saved there ({fix})"
        )
        return None

    def interrupted_while_saving(self, pytest_session: pytest.Session | None, how: str) -> None:
        """Ctrl-C or SIGTERM while pytest-benchmark saved the results: the run ends as interrupted,
        with one line saying what was written whole and what was not (instead of a traceback); a
        file being written is left as it was, its temporary file removed. ``how`` it stopped:
        ``interrupted``, ``terminated (SIGTERM)``."""
        if self.pending_json is not None and not self._json_written:
            self.pending_json.discard()
        self.interrupted = True
        gate_check = self.session.gate_check_made
        if gate_check is not None:
            gate_check.interrupted = True
        if pytest_session is not None:
            pytest_session.exitstatus = pytest.ExitCode.INTERRUPTED
        self._say_not_saved(how)

    def finish(self) -> None:
        """Where pytest-benchmark's writer could not be routed, move what it wrote into place now
        (an interrupted run's file is removed: it is never a complete run)."""
        pending = self.pending_json
        if pending is None or self._json_routed:
            return
        if self.interrupted:
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
        self.failed = True
        self._say(
            f"pytest-ipu: --benchmark-json={pending.target}: cannot write the results: "
            f"{error.strerror or error}; the file was left as it was ({_fix(error, 'pass a writable path')})"
        )

    def save_instead(self, has_benchmarks: bool) -> bool:
        """In place of pytest-benchmark's saving (``bench_seam.route_saving``): whether it must not
        save. An interrupted run saves nothing, so that neither ``--benchmark-json`` nor the storage
        of ``--benchmark-save``/``--benchmark-autosave`` gets a partial run (one line says so); a
        run that measured only ``ipu_power`` blocks is saved here."""
        if self.interrupted:
            self._say_not_saved(self.how)
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
        reporter: Any = self.session.config.pluginmanager.get_plugin("terminalreporter")
        if kept and reporter is not None:
            # A line of its own: an interrupt leaves the progress line (-q's dots) unfinished.
            reporter.write_line("")
            reporter.write_line(f"pytest-ipu: {how}: {head}{'; '.join(kept)}", yellow=True)

    def _save_power_blocks_alone(self) -> bool:
        """Save the run's file when it measured ``ipu_power`` blocks and no benchmark (pytest-benchmark
        would save nothing, "Not saving anything, no benchmarks have been run!", and the blocks would
        be lost): through pytest-benchmark's hooks and writers (``bench_seam.runs``), the JSON moved into
        place whole like any run's. Returns whether it saved (or tried to) in pytest-benchmark's place.
        A file that cannot be written is one line and a failed run."""
        if not self.session.power_blocks:
            return False
        try:
            return runs.save_without_benchmarks(self.session.config)
        except OSError as exc:
            self.failed = True
            self._say(
                f"pytest-ipu: cannot save the ipu_power blocks: {exc}; free space or pass a writable path"
            )
            return True  # as far as it could: the line says what is missing
