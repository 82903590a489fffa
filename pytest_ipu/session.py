"""Per-run state of pytest-ipu: settings, backends, the compile cache and the records measured.

The session is registered as a plugin, so its methods are the hook implementations that need
run state (pytest-benchmark's JSON hooks, the header and the terminal summary). It is made at
every pytest start-up, so what only a benchmark needs (the compile cache, power meters, the JSON
schema, the tables) is imported on first use.
"""

from __future__ import annotations

import warnings
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
    from pytest_ipu.results.records import IpuRecord
    from pytest_ipu.results.records import Measured

SESSION_KEY = pytest.StashKey["IpuSession"]()


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
        """The top-level ``pytest_ipu`` section: schema version, plugin version and settings."""
        from pytest_ipu.results import benchmark_json
        from pytest_ipu.results import schema

        run_info = {
            "schema": schema.SCHEMA_VERSION,
            "version": __version__,
            "settings": self.settings.as_json(),
        }
        benchmark_json.update_json(output_json, run_info)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The pytest-ipu tables, and under ``auto`` which targets were found and which were not."""
        lines = self._tables() + self._target_lines()
        if lines:
            terminalreporter.section("pytest-ipu")
            for line in lines:
                terminalreporter.write_line(line)

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
