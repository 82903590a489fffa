"""Per-run state of pytest-ipu: settings, backends, the compile cache and the records measured.

The session is registered as a plugin, so its methods are the hook implementations that need
run state (pytest-benchmark's JSON hooks, the header and the terminal summary). It is made at
every pytest start-up, so what only a benchmark needs (the compile cache, power meters, the JSON
schema, the tables) is imported on first use.
"""

from __future__ import annotations

import warnings
from collections.abc import Generator
from collections.abc import Iterator
from typing import TYPE_CHECKING
from typing import Any

import pytest

from pytest_ipu import __version__
from pytest_ipu import backends
from pytest_ipu import power
from pytest_ipu.backends.base import Availability
from pytest_ipu.backends.base import Backend
from pytest_ipu.backends.target import Target
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import ConfigError
from pytest_ipu.errors import PytestIpuWarning
from pytest_ipu.gating import GateCheck
from pytest_ipu.marker import marker_gates
from pytest_ipu.marker import marker_overrides
from pytest_ipu.marker import placement_request
from pytest_ipu.options import AUTO
from pytest_ipu.options import Settings
from pytest_ipu.placement import poprun
from pytest_ipu.placement.poprun import PopRunInstance
from pytest_ipu.power.base import PowerSource
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.repeats import RepeatScheduler

if TYPE_CHECKING:
    from pytest_ipu.compiling import CompileCache
    from pytest_ipu.power.meter import PowerMeter
    from pytest_ipu.results.gates import Gate
    from pytest_ipu.results.power_blocks import PowerBlock
    from pytest_ipu.results.records import IpuRecord
    from pytest_ipu.results.records import Measured
    from pytest_ipu.results.records import PowerRecord

SESSION_KEY = pytest.StashKey["IpuSession"]()
#: pytest-benchmark's warning for a run without benchmarks, which it does not save (a regular expression).
_NOTHING_SAVED = r"Not saving anything, no benchmarks have been run!"


class IpuSession:
    """State shared by every pytest-ipu fixture and hook of one pytest run.

    An ordinary class, not a dataclass: pytest registers it as a plugin, and plugins must be
    hashable by identity.
    """

    def __init__(
        self, config: pytest.Config, settings: Settings, poprun: PopRunInstance | None = None
    ) -> None:
        self.config = config
        self.settings = settings
        #: This process's place in a PopRun launch, or ``None`` outside PopRun.
        self.poprun = poprun
        #: Every benchmark measured in this run, in order: the one list the terminal tables, the
        #: gates and the JSON are made from.
        self.measured: list[Measured] = []
        #: Every ``ipu_power`` block measured in this run, in order: the JSON's
        #: ``pytest_ipu.power_blocks`` and the terminal's "ipu_power blocks" table.
        self.power_blocks: list[PowerBlock] = []
        self._compiled: CompileCache | None = None
        self._backends: dict[Target, tuple[Backend | None, Availability]] = {}
        self._auto: tuple[list[Target], list[tuple[Target, str]]] | None = None
        self._meters: dict[tuple[str, str], tuple[PowerMeter | None, str]] = {}
        #: The repeats of each benchmark and their interleaved schedule (a plugin of its own).
        self.repeats = RepeatScheduler(settings)
        #: The gates, checked as each benchmark is published (a plugin of its own).
        self.gate_check = GateCheck(settings, self.measured)

    @property
    def compiled(self) -> CompileCache:
        """Models compiled in this run (``ipu_compile``), closed when the run ends."""
        if self._compiled is None:
            from pytest_ipu.compiling import CompileCache

            self._compiled = CompileCache()
        return self._compiled

    # -- backends ---------------------------------------------------------------------------------

    def backend(self, target: Target) -> tuple[Backend | None, Availability]:
        """The backend for ``target`` (made once per run) and whether it can run here."""
        if target not in self._backends:
            made = self.config.hook.pytest_ipu_make_backend(config=self.config, target=target)
            found: Backend | None = made
            availability = (
                made.availability()
                if made is not None
                else Availability.no(backends.unknown_backend_reason(target))
            )
            self._backends[target] = (found, availability)
        return self._backends[target]

    def backend_for(self, name: str, device: str | None) -> Backend:
        """The backend for ``name:device``, made once per run; ``BackendUnavailable`` (the test skips)
        when it cannot run here."""
        target = Target(name, device)
        backend, availability = self.backend(target)
        if backend is None or not availability.ok:
            raise BackendUnavailable(f"pytest-ipu: target {target} is not available: {availability.reason}")
        return backend

    def auto_targets(self) -> tuple[list[Target], list[tuple[Target, str]]]:
        """``--ipu-backend=auto``: the default targets present here, and those absent with the reason."""
        if self._auto is None:
            present, absent = [], []
            for target in backends.auto_candidates():
                _, availability = self.backend(target)
                if availability.ok:
                    present.append(target)
                else:
                    absent.append((target, availability.reason))
            self._auto = (present, absent)
        return self._auto

    def targets_for(self, requested: tuple[Target, ...]) -> list[Target]:
        """Targets to parametrize: as requested, or for ``auto`` every default target present.

        When ``auto`` finds nothing, every candidate is returned, so the tests skip (or fail under
        ``--ipu-missing-sdk=fail``) with the reason instead of silently not existing.
        """
        if requested:
            return list(requested)
        present, absent = self.auto_targets()
        return present or [t for t, _ in absent]

    # -- power ------------------------------------------------------------------------------------

    def power_meter(self, device: str, choice: str) -> tuple[PowerMeter | None, str, str]:
        """The open power meter for compute ``device`` (made once per run) under the test's
        ``--ipu-power`` choice, its source name, and when there is none, the reason."""
        if choice == "off":
            return None, "off", "power measurement is off (--ipu-power=off or the test's marker)"
        name = power.source_for_device(device) if choice == AUTO else choice
        if name is None:
            return None, "none", f"no power source measures device {device!r}"
        key = (name, device)
        if key not in self._meters:
            self._meters[key] = self._open_meter(name, device)
        meter, reason = self._meters[key]
        return meter, name, reason

    def _open_meter(self, name: str, device: str) -> tuple[PowerMeter | None, str]:
        made = self.config.hook.pytest_ipu_make_power_source(config=self.config, name=name, device=device)
        try:
            source: PowerSource = made if made is not None else power.make_source(name, device)
        except Exception as exc:  # a third-party source, or a device string it cannot map
            return None, f"{name} could not be set up for {device!r}: {type(exc).__name__}: {exc}"
        availability = source.availability()
        if not availability.ok:
            return None, f"{name} unavailable: {availability.reason}"
        from pytest_ipu.power.meter import PowerMeter

        meter = PowerMeter(source, hz=self.settings.power_hz, idle_s=self.settings.idle_s)
        try:
            meter.open()
        except PowerSourceError as exc:
            meter.close()
            return None, f"{name} failed to open: {exc}"
        return meter, ""

    # -- results ----------------------------------------------------------------------------------

    def publish(
        self,
        item: pytest.Item,
        extra_info: dict[str, Any],
        record: IpuRecord,
        samples_s: tuple[float, ...],
        group: str,
        gates: tuple[Gate, ...],
    ) -> Measured:
        """Keep a measured benchmark (``ipu_benchmark`` calls this once per benchmark) and give
        pytest-benchmark its JSON form, ``extra_info["ipu"]``, after ``pytest_ipu_update_record``."""
        from pytest_ipu.results import benchmark_json
        from pytest_ipu.results import schema
        from pytest_ipu.results.records import Measured

        measured = Measured(item.nodeid, item.name, group, record, samples_s, gates)
        self.measured.append(measured)
        data = schema.to_json(record)
        if self.poprun is not None:
            data[poprun.KEY] = self.poprun.as_json()
        self.config.hook.pytest_ipu_update_record(config=self.config, item=item, record=data)
        benchmark_json.attach(extra_info, data)
        return measured

    def add_power_block(
        self, test: str, device: str, power: PowerRecord, error: str | None = None
    ) -> PowerBlock:
        """Keep the energy of one ``ipu_power`` block of ``test`` (``ipu_power`` calls this once per
        block, also for a block that raised): numbered from 1 within its test."""
        from pytest_ipu.results.power_blocks import PowerBlock

        index = 1 + sum(1 for b in self.power_blocks if b.test == test)
        block = PowerBlock(test, index, device, power, error)
        self.power_blocks.append(block)
        return block

    def _save_power_blocks_alone(self) -> bool:
        """Write the run's file when it measured ``ipu_power`` blocks and no benchmark: pytest-benchmark
        then saves nothing ("Not saving anything, no benchmarks have been run!") and the blocks would
        be lost. Returns whether it wrote anything.

        The document is made as pytest-benchmark's ``handle_saving`` makes it, through its public
        hooks (machine and commit info, ``pytest_benchmark_generate_json`` with no benchmarks, then
        ``pytest_benchmark_update_json``, which adds the ``pytest_ipu`` section and its blocks), and
        written by its own writers: ``save_json`` for ``--benchmark-json`` (which the plugin moves
        into place whole, ``pytest_ipu.results.atomic.PendingFile``) and its storage for
        ``--benchmark-save`` and ``--benchmark-autosave``. A disabled pytest-benchmark saves
        nothing, and neither does this.
        """
        bench = getattr(self.config, "_benchmarksession", None)
        if bench is None or not self.power_blocks or bench.benchmarks or bench.disabled:
            return False
        save = bench.save or bench.autosave
        if not (save or bench.json):
            return False
        config, hook = self.config, self.config.hook
        machine_info = bench.get_machine_info()
        commit_info = hook.pytest_benchmark_generate_commit_info(config=config)
        hook.pytest_benchmark_update_commit_info(config=config, commit_info=commit_info)

        def document(include_data: bool) -> dict[str, Any]:
            output_json: dict[str, Any] = hook.pytest_benchmark_generate_json(
                config=config,
                benchmarks=[],
                include_data=include_data,
                machine_info=machine_info,
                commit_info=commit_info,
            )
            hook.pytest_benchmark_update_json(config=config, benchmarks=[], output_json=output_json)
            return output_json

        if bench.json:
            bench.save_json(document(True))
        if save:
            bench.storage.save(document(bench.save_data), save)
        return True

    # -- hooks ------------------------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_ipu_make_backend(self, config: pytest.Config, target: Target) -> Backend | None:
        """The built-in registry, consulted after any conftest implementation."""
        return backends.make_backend(
            target,
            self.settings.cache_dir,
            (self.settings.torch_threads, self.settings.torch_interop_threads),
        )

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Check every ``ipu`` marker up front, so a typo stops the run before anything is measured."""
        for item in items:
            try:
                marker_overrides(item)
                placement_request(item)
                marker_gates(item)
            except ConfigError as exc:
                raise pytest.UsageError(f"pytest-ipu: {exc}") from None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        """Once the test's fixtures are torn down, release the compiled models no test can ask for
        again (their model is gone): a sweep that builds a model per parameter must not keep them all.

        Here rather than at ``pytest_runtest_logfinish``: the earlier repeats of a benchmark run the
        test's protocol without logging it, and their models are just as gone.
        """
        try:
            yield
        finally:
            if self._compiled is not None:
                errors = self._compiled.release_unreachable(item.nodeid)
                if errors:
                    warnings.warn(
                        PytestIpuWarning(
                            f"pytest-ipu could not release a compiled model: {'; '.join(errors)}"
                        ),
                        stacklevel=1,
                    )

    def pytest_report_header(self) -> list[str]:
        """One line with the settings pytest-ipu runs with."""
        s = self.settings
        rounds = "auto" if s.rounds is None else s.rounds
        lines = [
            f"pytest-ipu {__version__}: targets={','.join(map(str, s.targets)) or 'auto'} "
            f"precision={s.precision} rounds={rounds} warmup={s.warmup_rounds} "
            f"max-time={s.max_time_s:g}s missing-sdk={s.missing_sdk}"
        ]
        return lines

    def _tables(self) -> list[str]:
        if not self.measured:
            return []  # a run without benchmarks never loads the tables (nor numpy)
        from pytest_ipu.report import terminal as report

        return report.tables([report.Row(m.group, m.name, m.record) for m in self.measured])

    def _target_lines(self) -> list[str]:
        if self._auto is None:
            return []
        present, absent = self._auto
        lines = [f"targets present (auto): {', '.join(map(str, present)) or 'none'}"]
        lines.extend(f"target absent: {t}: {why}" for t, why in absent)
        return lines

    def pytest_benchmark_update_machine_info(
        self, config: pytest.Config, machine_info: dict[str, Any]
    ) -> None:
        """``machine_info["ipu"]``: the plugin version, each backend used as it describes itself, and
        (under ``auto``) the default targets absent here with the reason."""
        from pytest_ipu.results import benchmark_json
        from pytest_ipu.results import schema

        # Keyed like the records' "target" (backend:device), whatever spelling the user asked for.
        used = {
            f"{b.name}:{b.device}": b.describe()
            for _, (b, a) in sorted(self._backends.items(), key=lambda kv: str(kv[0]))
            if b is not None and a.ok
        }
        device_info: dict[str, Any] = {
            "schema": schema.SCHEMA_VERSION,
            "pytest_ipu": __version__,
            "backends": used,
        }
        if self._auto is not None:
            device_info["absent"] = {str(t): why for t, why in self._auto[1]}
        if self.poprun is not None:
            device_info[poprun.KEY] = self.poprun.as_json()
        config.hook.pytest_ipu_update_device_info(config=config, device_info=device_info)
        benchmark_json.update_machine_info(machine_info, device_info)

    def pytest_benchmark_update_json(self, config: pytest.Config, output_json: dict[str, Any]) -> None:
        """The top-level ``pytest_ipu`` section: schema version, plugin version, settings and, when the
        run measured any, the energy of every ``ipu_power`` block (``power_blocks``)."""
        from pytest_ipu.results import benchmark_json
        from pytest_ipu.results import schema

        run_info: dict[str, Any] = {
            "schema": schema.SCHEMA_VERSION,
            "version": __version__,
            "settings": self.settings.as_json(),
        }
        if self.power_blocks:
            # Absent rather than empty: a run without blocks writes the section it always wrote.
            from pytest_ipu.results import power_blocks

            run_info[power_blocks.KEY] = [b.as_json() for b in self.power_blocks]
        benchmark_json.update_json(output_json, run_info)

    def _power_block_lines(self) -> list[str]:
        if not self.power_blocks:
            return []
        from pytest_ipu.report import power_blocks as report

        return report.lines(self.power_blocks)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The pytest-ipu tables, the ``ipu_power`` blocks, and under ``auto`` which targets were found
        and which were not."""
        tables, blocks = self._tables(), self._power_block_lines()
        # A blank line after each table that other lines follow.
        lines = tables + ([""] if tables and blocks and tables[-1] else []) + blocks
        lines += ([""] if blocks and self._auto is not None else []) + self._target_lines()
        if lines:
            terminalreporter.section("pytest-ipu")
            for line in lines:
                terminalreporter.write_line(line)

    @pytest.hookimpl(wrapper=True, specname="pytest_sessionfinish")
    def pytest_sessionfinish_saves_power_blocks(self, session: pytest.Session) -> Generator[None, None, None]:
        """Save the ``ipu_power`` blocks of a run without benchmarks (``_save_power_blocks_alone``)
        before pytest-benchmark's own ``pytest_sessionfinish`` finds nothing to save.

        A wrapper: inside the plugin's (``tryfirst``), which moves ``--benchmark-json`` into place,
        and around pytest-benchmark's, which was registered before this session. A file that cannot
        be written is one line and a failed run, never a reason to skip the rest of the session's end
        (the sources' release among it).
        """
        try:
            saved = self._save_power_blocks_alone()
        except OSError as exc:
            saved = True  # as far as it could: the line below says what is missing
            line = f"pytest-ipu: cannot save the ipu_power blocks: {exc}; free space or pass a writable path"
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(line, red=True)
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        with warnings.catch_warnings():
            if saved:
                # pytest-benchmark's warning would be false: the blocks were saved. Under -W error
                # it would also end the run with a traceback.
                warnings.filterwarnings("ignore", message=_NOTHING_SAVED)
            return (yield)

    def pytest_sessionfinish(self) -> None:
        """Release every compiled model and power source, whatever happened."""
        meters, self._meters = [m for m, _ in self._meters.values() if m is not None], {}
        errors = []
        for meter in meters:
            try:
                meter.close()
            except Exception as exc:
                errors.append(f"power source {meter.source.name}: {exc}")
        if self._compiled is not None:
            errors.extend(self._compiled.close())
        if errors:
            warnings.warn(
                PytestIpuWarning(
                    f"pytest-ipu could not release compiled models or power sources: {'; '.join(errors)}"
                ),
                stacklevel=1,
            )
