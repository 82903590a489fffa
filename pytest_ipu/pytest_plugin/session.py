"""Per-run state of pytest-ipu: settings, backends, the compile cache and the records measured.

The session is registered as a plugin, so its methods are the hook implementations that need
run state (pytest-benchmark's JSON hooks, the header and the terminal summary). It is made at
every pytest start-up, so what only a benchmark needs (the compile cache, power meters, the JSON
schema, the tables) is imported on first use.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Generator
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest

from pytest_ipu import __version__
from pytest_ipu import backends
from pytest_ipu import power
from pytest_ipu.backends.base import Availability
from pytest_ipu.backends.base import Backend
from pytest_ipu.backends.target import Target
from pytest_ipu.devices.poprun import PopRunInstance
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import ConfigError
from pytest_ipu.errors import PytestIpuWarning
from pytest_ipu.placement import poprun
from pytest_ipu.placement import torchrun
from pytest_ipu.placement.torchrun import TorchrunRank
from pytest_ipu.power.base import PowerSource
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.pytest_plugin.gating import GateCheck
from pytest_ipu.pytest_plugin.marker import marker_gates
from pytest_ipu.pytest_plugin.marker import marker_overrides
from pytest_ipu.pytest_plugin.marker import placement_request
from pytest_ipu.pytest_plugin.options import AUTO
from pytest_ipu.pytest_plugin.options import Settings
from pytest_ipu.pytest_plugin.repeats import RepeatScheduler

if TYPE_CHECKING:
    from pytest_ipu.placement.torchrun import RankGroup
    from pytest_ipu.placement.torchrun import ScopedRanks
    from pytest_ipu.power.meter import PowerMeter
    from pytest_ipu.results.gates import Gate
    from pytest_ipu.results.power_blocks import PowerBlock
    from pytest_ipu.results.records import IpuRecord
    from pytest_ipu.results.records import Measured
    from pytest_ipu.results.records import PowerRecord
    from pytest_ipu.run.compiling import CompileCache

SESSION_KEY = pytest.StashKey["IpuSession"]()
#: The ``--benchmark-json`` path this process writes (tagged under PopRun and torchrun), as given:
#: pytest-benchmark is handed a temporary path beside it. LoadGen's logs are kept beside this one.
JSON_PATH_KEY = pytest.StashKey[Path]()
#: pytest-benchmark's warning for a run without benchmarks, which it does not save (a regular expression).
_NOTHING_SAVED = r"Not saving anything, no benchmarks have been run!"


class IpuSession:
    """State shared by every pytest-ipu fixture and hook of one pytest run.

    An ordinary class, not a dataclass: pytest registers it as a plugin, and plugins must be
    hashable by identity.
    """

    def __init__(
        self,
        config: pytest.Config,
        settings: Settings,
        poprun: PopRunInstance | None = None,
        torchrun: TorchrunRank | None = None,
        merged_json: Path | None = None,
    ) -> None:
        self.config = config
        self.settings = settings
        #: This process's place in a PopRun launch, or ``None`` outside PopRun.
        self.poprun = poprun
        #: This process's place in a torchrun launch, or ``None`` outside torchrun.
        self.torchrun = torchrun
        #: Where rank 0 writes the merged document of a torchrun launch (the ``--benchmark-json``
        #: given; each rank's own file is beside it).
        self.merged_json = merged_json
        #: The merged records of the launch, by fullname (rank 0, once merged): its terminal table.
        self.launch_records: list[tuple[str, dict[str, Any]]] = []
        self._ranks: RankGroup | None = None
        #: Why the launch's results could not be merged (a rank missing, say): the run fails.
        self.launch_error: str | None = None
        #: Set when a rank failed or hangs (a ``RankError``): no rank waits for the others again.
        self.ranks_lost = False
        #: This rank's pytest-benchmark document, kept for the merge (``None``: nothing measured).
        self._launch_document: dict[str, Any] | None = None
        self._scaling_baseline: dict[str, IpuRecord] | None = None
        #: Every benchmark measured in this run, in order: the one list the terminal tables, the
        #: gates and the JSON are made from.
        self.measured: list[Measured] = []
        self._loadgen_logs: Path | None = None
        #: Every ``ipu_power`` block measured in this run, in order: the JSON's
        #: ``pytest_ipu.power_blocks`` and the terminal's "ipu_power blocks" table.
        self.power_blocks: list[PowerBlock] = []
        self._compiled: CompileCache | None = None
        self._backends: dict[Target, tuple[Backend | None, Availability]] = {}
        self._auto: tuple[list[Target], list[tuple[Target, str]]] | None = None
        self._meters: dict[tuple[str, str], tuple[PowerMeter | None, str]] = {}
        #: The repeats of each benchmark and their interleaved schedule (a plugin of its own).
        self.repeats = RepeatScheduler(settings)
        #: The gates, checked as each benchmark is published (a plugin of its own); under torchrun
        #: with several ranks, on rank 0 against the merged records.
        self.gate_check = GateCheck(settings, self.measured)
        self.gate_check.deferred = torchrun is not None and torchrun.count > 1

    @property
    def compiled(self) -> CompileCache:
        """Models compiled in this run (``ipu_compile``), closed when the run ends."""
        if self._compiled is None:
            from pytest_ipu.run.compiling import CompileCache

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

    # -- torchrun ---------------------------------------------------------------------------------

    def rank_group(self) -> RankGroup | None:
        """The torchrun launch's process group, opened on first use; ``None`` outside torchrun."""
        if self.torchrun is None:
            return None
        if self._ranks is None:
            from pytest_ipu.placement.torchrun import RankGroup

            self._ranks = RankGroup(self.torchrun, self.settings.rank_timeout_s)
        return self._ranks

    def lockstep(self, where: str) -> ScopedRanks | None:
        """The group to time the benchmarks of ``where`` (a test) in step with: the launch's, when it
        has more than one rank."""
        if self.torchrun is None or self.torchrun.count < 2:
            return None
        group = self.rank_group()
        return None if group is None else group.at(where)

    def loadgen_log_root(self) -> Path:
        """Where LoadGen benchmarks keep their log files when the run writes no ``--benchmark-json``
        (beside which they go otherwise): a directory of this run's own, made on first use and kept."""
        if self._loadgen_logs is None:
            import tempfile

            self._loadgen_logs = Path(tempfile.mkdtemp(prefix="pytest-ipu-loadgen-"))
        return self._loadgen_logs

    def scaling_baseline(self) -> dict[str, IpuRecord]:
        """The ``--ipu-scaling-baseline`` run's training records by fullname (read once; empty without
        the option). A bad file is a usage error naming it."""
        path = self.settings.scaling_baseline
        if path is None:
            return {}
        if self._scaling_baseline is None:
            from pytest_ipu.results import scaling_baseline

            try:
                self._scaling_baseline = scaling_baseline.load(path)
            except scaling_baseline.BaselineError as exc:
                raise pytest.UsageError(f"pytest-ipu: {exc}") from None
        return self._scaling_baseline

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

        if self.torchrun is None and self.settings.scaling_baseline is not None:
            # One process measured the whole launch: its record is the launch's, scaled here. Under
            # torchrun only the merged record is (rank 0, ``pytest_benchmark_update_json``).
            from pytest_ipu.results import scaling_baseline

            part = scaling_baseline.against(
                record, self.scaling_baseline().get(item.nodeid), str(self.settings.scaling_baseline)
            )
            if part is not None:
                record = dataclasses.replace(record, scaling=part)
        measured = Measured(item.nodeid, item.name, group, record, samples_s, gates)
        self.measured.append(measured)
        data = schema.to_json(record)
        if self.poprun is not None:
            data[poprun.KEY] = self.poprun.as_json()
        if self.torchrun is not None:
            data[torchrun.KEY] = self.torchrun.as_json()
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

        ``bench_seam.save_without_benchmarks`` writes it as pytest-benchmark would, through its
        hooks (``pytest_benchmark_update_json`` adds the ``pytest_ipu`` section and its blocks) and
        its own writers (``--benchmark-json`` moved into place whole like any run's).
        """
        from pytest_ipu.pytest_plugin import bench_seam

        return bool(self.power_blocks) and bench_seam.save_without_benchmarks(self.config)

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
        from pytest_ipu.report import training

        lines = report.tables([report.Row(m.group, m.name, m.record) for m in self.measured])
        if self.launch_records and self.torchrun is not None:
            lines += training.launch_lines(
                self.torchrun.count, self.torchrun.nodes, str(self.merged_json), self.launch_records
            )
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
        if self.torchrun is not None:
            device_info[torchrun.KEY] = self.torchrun.as_json()
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
        if self.torchrun is not None:
            import json

            # Kept for the merge at the end of the session (``_finish_launch``), as pytest-benchmark
            # writes it (parameters such as a Target become their str()).
            self._launch_document = json.loads(json.dumps(output_json, default=str))

    def _finish_launch(self) -> None:
        """Merge the launch's results on rank 0; a failure is one red line and a failed run."""
        from pytest_ipu.errors import RankError

        try:
            self._merge_launch(self._launch_document)
        except (RankError, poprun.MergeError, OSError) as exc:
            # Never a merged file from part of the launch.
            self.launch_error = str(exc) if str(exc).startswith("pytest-ipu:") else f"pytest-ipu: {exc}"
            self.ranks_lost = self.ranks_lost or isinstance(exc, RankError)
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(self.launch_error, red=True)

    def _merge_launch(self, document: dict[str, Any] | None) -> None:
        """Gather every rank's document on rank 0, which merges them and writes the launch's file.

        Every rank reaches this at the end of its session, also one that measured nothing (its
        document is ``None``: pytest-benchmark wrote no file); a rank that does not within the rank
        timeout is named (``RankError``) and the run fails: no merged file from part of a launch.
        """
        import json

        from pytest_ipu.results import atomic

        rank = self.torchrun
        if self.ranks_lost or self.merged_json is None:
            return  # a rank failed or hangs (each keeps its own file), or there is nowhere to merge to
        group = self.rank_group()
        assert rank is not None
        assert group is not None
        group.barrier("the end of the run (writing the merged results)")
        documents = group.gather(document)
        if documents is None or all(d is None for d in documents):
            return  # not rank 0, or no rank measured anything
        lacking = [str(i) for i, d in enumerate(documents) if not isinstance(d, dict)]
        if lacking:
            raise poprun.MergeError(
                f"torchrun rank(s) {', '.join(lacking)} of {rank.count} measured no benchmark, so there is "
                f"no merged {self.merged_json}: every rank must run the same benchmarks"
            )
        named = [
            (torchrun.rank_json_path(self.merged_json, dataclasses.replace(rank, index=i)), d)
            for i, d in enumerate(documents)
            if isinstance(d, dict)
        ]
        merged = poprun.merge_documents(named)
        if self.settings.scaling_baseline is not None:
            from pytest_ipu.results import scaling_baseline

            scaling_baseline.apply(merged, self.scaling_baseline(), str(self.settings.scaling_baseline))
        atomic.write_text(self.merged_json, json.dumps(merged, indent=4) + "\n")
        self._gate_launch(merged)
        self.launch_records = [
            (b["fullname"], b["extra_info"]["ipu"])
            for b in merged["benchmarks"]
            if isinstance(b.get("extra_info", {}).get("ipu"), dict)
        ]
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"pytest-ipu: merged {rank.count} torchrun rank(s), {len(merged['benchmarks'])} "
                f"benchmark(s), into {self.merged_json}"
            )

    def _gate_launch(self, merged: dict[str, Any]) -> None:
        """The gates, on the launch's merged records: every rank's samples, the slowest rank's latency."""
        from pytest_ipu.results import schema
        from pytest_ipu.results.records import Measured
        from pytest_ipu.results.records import group_name

        own = {m.fullname: m for m in self.measured}
        launch = [
            Measured(
                b["fullname"],
                b["name"],
                group_name(b.get("group"), b["name"]),
                schema.from_json(b["extra_info"][schema.NAMESPACE]),
                own[b["fullname"]].samples_s if b["fullname"] in own else (),
                own[b["fullname"]].gates if b["fullname"] in own else (),
            )
            for b in merged["benchmarks"]
            if isinstance(b.get("extra_info", {}).get(schema.NAMESPACE), dict)
        ]
        self.gate_check.check_launch(launch)

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
            result = yield
        if self.torchrun is not None:
            # After pytest-benchmark saved this rank's file, on every rank: also on one that
            # measured nothing, which pytest-benchmark never asks for its document.
            self._finish_launch()
        failed = self.launch_error is not None or (self.gate_check.deferred and self.gate_check.failed)
        if failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return result

    def pytest_unconfigure(self) -> None:
        """Leave a torchrun launch's process group, after every hook that could use it.

        Every rank first waits for the others to finish: torchrun stops the whole launch as soon as
        one rank exits with a failure, and rank 0 may still be writing the merged file then.
        """
        if self._ranks is None:
            return
        from pytest_ipu.errors import RankError

        try:
            if not self.ranks_lost:
                self._ranks.barrier("the end of every rank's run")
        except RankError as exc:
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(str(exc), red=True)
        finally:
            self._ranks.close()

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
