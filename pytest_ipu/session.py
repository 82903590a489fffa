"""Per-run state of pytest-ipu: settings, backends, the compile cache and the records measured.

The session is registered as a plugin, so its methods are the hook implementations that need
run state (pytest-benchmark's JSON hooks, the header and the terminal summary).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import pytest

from pytest_ipu import __version__
from pytest_ipu import backends
from pytest_ipu import power
from pytest_ipu.backends.base import Availability
from pytest_ipu.backends.base import Backend
from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.target import Target
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import ConfigError
from pytest_ipu.errors import PytestIpuWarning
from pytest_ipu.marker import marker_gates
from pytest_ipu.marker import marker_overrides
from pytest_ipu.marker import placement_request
from pytest_ipu.options import AUTO
from pytest_ipu.options import Settings
from pytest_ipu.placement import poprun
from pytest_ipu.placement.poprun import PopRunInstance
from pytest_ipu.power.base import PowerSource
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.power.meter import PowerMeter
from pytest_ipu.report import terminal as report
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import schema

SESSION_KEY = pytest.StashKey["IpuSession"]()


@dataclass
class _CacheEntry:
    compiled: CompiledModel
    # Holding the model keeps its id() from being reused by another object while cached.
    model: object
    # Holds its devices exclusively while open (an IPU executable stays attached).
    exclusive: bool = False
    # The test that last asked for it: a test's own models are never evicted under it.
    user: str = ""


@dataclass
class IpuSession:
    """State shared by every pytest-ipu fixture and hook of one pytest run."""

    config: pytest.Config
    settings: Settings
    #: This process's place in a PopRun launch, or ``None`` outside PopRun.
    poprun: PopRunInstance | None = None
    _backends: dict[Target, tuple[Backend | None, Availability]] = field(default_factory=dict)
    _compiled: dict[tuple[Any, ...], _CacheEntry] = field(default_factory=dict)
    _rows: list[report.Row] = field(default_factory=list)
    _auto: tuple[list[Target], list[tuple[Target, str]]] | None = None
    _meters: dict[tuple[str, str], tuple[PowerMeter | None, str]] = field(default_factory=dict)

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
        meter = PowerMeter(source, hz=self.settings.power_hz, idle_s=self.settings.idle_s)
        try:
            meter.open()
        except PowerSourceError as exc:
            meter.close()
            return None, f"{name} failed to open: {exc}"
        return meter, ""

    # -- compile cache ----------------------------------------------------------------------------

    def cached(self, key: tuple[Any, ...], user: str = "") -> CompiledModel | None:
        """A model compiled earlier in this run under ``key``, if any; ``user`` (a node id) now uses it."""
        entry = self._compiled.get(key)
        if entry is None:
            return None
        entry.user = user
        return entry.compiled

    def remember(
        self,
        key: tuple[Any, ...],
        compiled: CompiledModel,
        model: object,
        exclusive: bool = False,
        user: str = "",
    ) -> None:
        """Keep a compiled model for later tests; it is closed when the run ends, or (``exclusive``)
        when another test's model needs exclusive devices (``release_exclusive``)."""
        self._compiled[key] = _CacheEntry(compiled, model, exclusive, user)

    def release_exclusive(self, user: str = "") -> None:
        """Close every cached model that holds its devices exclusively, before another is compiled.

        An IPU runs one executable at a time and a session keeps its IPUs attached until closed, so
        a second batch size (or backend) could never acquire them while the first stays cached. Only
        one exclusive model lives at a time; a test that needs an evicted one again recompiles it
        (the SDK's executable caches make that quick). Models the test ``user`` itself is using
        stay open: closing them under it would break the test, while a second model that cannot get
        the IPUs skips it with "Failed to acquire", which is the truth. A close that fails is
        reported as a warning.
        """
        evicted = {k: e for k, e in self._compiled.items() if e.exclusive and (not user or e.user != user)}
        for key in evicted:
            del self._compiled[key]
        errors = _close_all(evicted.values())
        if errors:
            warnings.warn(
                PytestIpuWarning(f"pytest-ipu could not release a compiled model: {'; '.join(errors)}"),
                stacklevel=2,
            )

    def add_row(self, row: report.Row) -> None:
        """Record a measured benchmark for the terminal summary."""
        self._rows.append(row)

    # -- hooks ------------------------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_ipu_make_backend(self, config: pytest.Config, target: Target) -> Backend | None:
        """The built-in registry, consulted after any conftest implementation."""
        return backends.make_backend(target, self.settings.cache_dir)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Check every ``ipu`` marker up front, so a typo stops the run before anything is measured."""
        for item in items:
            try:
                marker_overrides(item)
                placement_request(item)
                marker_gates(item)
            except ConfigError as exc:
                raise pytest.UsageError(f"pytest-ipu: {exc}") from None

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
        run_info = {
            "schema": schema.SCHEMA_VERSION,
            "version": __version__,
            "settings": self.settings.as_json(),
        }
        benchmark_json.update_json(output_json, run_info)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The pytest-ipu tables, and under ``auto`` which targets were found and which were not."""
        lines = (report.tables(self._rows) if self._rows else []) + self._target_lines()
        if lines:
            terminalreporter.section("pytest-ipu")
            for line in lines:
                terminalreporter.write_line(line)

    def pytest_sessionfinish(self) -> None:
        """Release every compiled model and power source, whatever happened."""
        entries, self._compiled = list(self._compiled.values()), {}
        meters, self._meters = [m for m, _ in self._meters.values() if m is not None], {}
        errors = []
        for meter in meters:
            try:
                meter.close()
            except Exception as exc:
                errors.append(f"power source {meter.source.name}: {exc}")
        errors.extend(_close_all(entries))
        if errors:
            warnings.warn(
                PytestIpuWarning(
                    f"pytest-ipu could not release compiled models or power sources: {'; '.join(errors)}"
                ),
                stacklevel=1,
            )


def _close_all(entries: Iterable[_CacheEntry]) -> list[str]:
    """Close every entry's compiled model, whatever the others do; one message per failure."""
    errors = []
    for entry in entries:
        try:
            entry.compiled.close()
        except Exception as exc:
            errors.append(f"{entry.compiled.target}: {exc}")
    return errors
