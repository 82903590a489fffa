"""Per-run state of pytest-ipu: settings, backends, power meters, the compile cache, the torchrun
launch and what was measured.

No hooks: the fixtures and ``lifecycle`` (the hooks) read and fill it. It is made at every
pytest start-up, so what only a benchmark needs (the compile cache, power meters, the JSON
schema) is imported on first use.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest

from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.pytest_plugin.settings import AUTO

if TYPE_CHECKING:
    # Loaded by the methods that use them: the backends, power sources and launch descriptions
    # are a benchmark's, not every pytest run's.
    from pytest_ipu.backends.base import Availability
    from pytest_ipu.backends.base import Backend
    from pytest_ipu.backends.base import CompiledModel
    from pytest_ipu.backends.target import Target
    from pytest_ipu.devices.poprun import PopRunInstance
    from pytest_ipu.placement.rank_group import RankGroup
    from pytest_ipu.placement.rank_group import ScopedRanks
    from pytest_ipu.placement.torchrun import TorchrunRank
    from pytest_ipu.power.base import PowerSource
    from pytest_ipu.power.meter import PowerMeter
    from pytest_ipu.pytest_plugin.gating import GateCheck
    from pytest_ipu.pytest_plugin.repeats import RepeatScheduler
    from pytest_ipu.pytest_plugin.settings import Settings
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

    An ordinary class: it holds open resources (meters, compiled models, a process group) that
    ``release`` and ``lifecycle`` close, not values to compare.
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
        self.ranks: RankGroup | None = None
        #: Why the launch's results could not be merged (a rank missing, say): the run fails.
        self.launch_error: str | None = None
        #: Set when a rank failed or hangs (a ``RankError``): no rank waits for the others again.
        self.ranks_lost = False
        #: Set with ``ranks_lost`` when every rank is alive but was elsewhere (``RanksElsewhere``):
        #: each still waits for the others at the end, so that none exits (and torchrun stops the
        #: rest) before every rank has said where it was.
        self.ranks_elsewhere = False
        #: This rank's pytest-benchmark document, kept for the merge (``None``: nothing measured).
        self.launch_document: dict[str, Any] | None = None
        self._scaling_baseline: dict[str, IpuRecord] | None = None
        #: Every benchmark measured in this run, in order: the one list the terminal tables, the
        #: gates and the JSON are made from.
        self.measured: list[Measured] = []
        self._loadgen_logs: Path | None = None
        #: Every ``ipu_power`` block measured in this run, in order: the JSON's
        #: ``pytest_ipu.power_blocks`` and the terminal's "ipu_power blocks" table.
        self.power_blocks: list[PowerBlock] = []
        self._compiled: CompileCache | None = None
        self.backends: dict[Target, tuple[Backend | None, Availability]] = {}
        self.auto: tuple[list[Target], list[tuple[Target, str]]] | None = None
        self._meters: dict[tuple[str, str], tuple[PowerMeter | None, str]] = {}
        self._repeats: RepeatScheduler | None = None
        self._gate_check: GateCheck | None = None

    # -- repeats and gates: made when a run has something for them ---------------------------------

    @property
    def repeats(self) -> RepeatScheduler:
        """The repeats of each benchmark and their interleaved schedule, made on first use: by the
        collection of a benchmark, or by ``ipu_benchmark``."""
        if self._repeats is None:
            from pytest_ipu.pytest_plugin.repeats import RepeatScheduler

            self._repeats = RepeatScheduler(self.settings)
        return self._repeats

    @property
    def repeats_made(self) -> RepeatScheduler | None:
        """The repeat scheduler when one was made (``None``: nothing was repeated, and a hook has
        nothing to ask it)."""
        return self._repeats

    @property
    def gate_check(self) -> GateCheck:
        """The gates, checked as each benchmark is published; under torchrun with several ranks, on
        rank 0 against the merged records. Made on first use, reading at once how the run times
        (``GateCheck.configure``): at configure time for the run's own gates (refused there when
        nothing is timed), once collected for a baseline or a gated benchmark, else by the first
        benchmark published."""
        if self._gate_check is None:
            from pytest_ipu.pytest_plugin.gating import GateCheck

            gate_check = GateCheck(self.settings, self.measured)
            gate_check.deferred = self.torchrun is not None and self.torchrun.count > 1
            gate_check.configure(self.config)
            self._gate_check = gate_check
        return self._gate_check

    @property
    def gate_check_made(self) -> GateCheck | None:
        """The gate check when one was made (``None``: the run has no gate, baseline or gated
        benchmark, and a hook has nothing to tell it or ask it)."""
        return self._gate_check

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
        if target not in self.backends:
            from pytest_ipu import backends
            from pytest_ipu.backends.base import Availability

            # A conftest's implementation first; the built-in registry answers last.
            made = self.config.hook.pytest_ipu_make_backend(config=self.config, target=target)
            if made is None:
                made = backends.make_backend(
                    target,
                    self.settings.cache_dir,
                    (self.settings.torch_threads, self.settings.torch_interop_threads),
                )
            found: Backend | None = made
            availability = (
                made.availability()
                if made is not None
                else Availability.no(backends.unknown_backend_reason(target))
            )
            self.backends[target] = (found, availability)
        return self.backends[target]

    def backend_for(self, name: str, device: str | None) -> Backend:
        """The backend for ``name:device``, made once per run; ``BackendUnavailable`` (the test skips)
        when it cannot run here."""
        from pytest_ipu.backends.target import Target

        target = Target(name, device)
        backend, availability = self.backend(target)
        if backend is None or not availability.ok:
            raise BackendUnavailable(f"pytest-ipu: target {target} is not available: {availability.reason}")
        return backend

    def auto_targets(self) -> tuple[list[Target], list[tuple[Target, str]]]:
        """``--ipu-backend=auto``: the default targets present here, and those absent with the reason."""
        if self.auto is None:
            from pytest_ipu import backends

            present, absent = [], []
            for target in backends.auto_candidates():
                _, availability = self.backend(target)
                if availability.ok:
                    present.append(target)
                else:
                    absent.append((target, availability.reason))
            self.auto = (present, absent)
        return self.auto

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

    def model_meter(self, compiled: CompiledModel, choice: str) -> tuple[PowerMeter | None, str, str]:
        """``power_meter`` for what a compiled model runs on: on IPU hardware exactly the IPUs it
        holds (``power.metered_device``), never the partition. When its backend cannot say which,
        those gcipuinfo names the processes running it as user of (``power.ipus_of_processes``);
        when none is found, no meter, and the reason."""
        from pytest_ipu import power

        device = power.metered_device(compiled.device, compiled.ipu_ids)
        if device is not None or choice == "off":
            return self.power_meter(device or compiled.device, choice)
        name = power.source_for_device(compiled.device) if choice == AUTO else choice
        # The backend let the SDK choose: the IPUs gcipuinfo names the model's processes as user of.
        found, lookup = power.ipus_of_processes(
            None if name is None else self._partition_source(name, compiled.device),
            _model_processes(compiled),
            compiled.ipu_count,
        )
        device = power.metered_device(compiled.device, found)
        if device is not None:
            return self.power_meter(device, choice)
        reason = power.UNKNOWN_IPUS.format(target=compiled.target, backend=compiled.backend, lookup=lookup)
        return None, name or "none", reason

    def _partition_source(self, name: str, device: str) -> PowerSource | None:
        """Source ``name`` for every IPU of ``device``'s partition, as a conftest or the registry makes
        it: asked which IPUs processes use, never opened (nothing is metered on it)."""
        from pytest_ipu import power

        partition = device.partition(":")[0]
        made = self.config.hook.pytest_ipu_make_power_source(config=self.config, name=name, device=partition)
        try:
            source: PowerSource = made if made is not None else power.make_source(name, partition)
        except Exception:  # an unknown name, or a device it cannot map: then no source says
            return None
        return source

    def power_meter(self, device: str, choice: str) -> tuple[PowerMeter | None, str, str]:
        """The open power meter for compute ``device`` (made once per run) under the test's
        ``--ipu-power`` choice, its source name, and when there is none, the reason."""
        if choice == "off":
            return None, "off", "power measurement is off (--ipu-power=off or the test's marker)"
        from pytest_ipu import power

        name = power.source_for_device(device) if choice == AUTO else choice
        if name is None:
            return None, "none", f"no power source measures device {device!r}"
        key = (name, device)
        if key not in self._meters:
            self._meters[key] = self._open_meter(name, device)
        meter, reason = self._meters[key]
        return meter, name, reason

    def _open_meter(self, name: str, device: str) -> tuple[PowerMeter | None, str]:
        from pytest_ipu import power
        from pytest_ipu.power.base import PowerSourceError

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
        if self.ranks is None:
            from pytest_ipu.placement.rank_group import RankGroup

            self.ranks = RankGroup(self.torchrun, self.settings.rank_timeout_s)
        return self.ranks

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
        from pytest_ipu.placement import poprun
        from pytest_ipu.placement import torchrun
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
            from pytest_ipu.placement import poprun

            data[poprun.KEY] = self.poprun.as_json()
        if self.torchrun is not None:
            from pytest_ipu.placement import torchrun

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

    # -- release ----------------------------------------------------------------------------------

    def release_unreachable(self, nodeid: str) -> list[str]:
        """Release the compiled models no test can ask for again (their model is gone) once
        ``nodeid``'s fixtures are torn down; what could not be released, one line each."""
        return [] if self._compiled is None else self._compiled.release_unreachable(nodeid)

    def release(self) -> list[str]:
        """Close every power meter and compiled model (once; later calls find nothing open); what
        could not be closed, one line each."""
        meters, self._meters = [m for m, _ in self._meters.values() if m is not None], {}
        errors = []
        for meter in meters:
            try:
                meter.close()
            except Exception as exc:
                errors.append(f"power source {meter.source.name}: {exc}")
        compiled, self._compiled = self._compiled, None
        if compiled is not None:
            errors.extend(compiled.close())
        return errors


def _model_processes(compiled: CompiledModel) -> tuple[int, ...]:
    """The processes whose calls run ``compiled``: a group's (its workers', or this process for
    threads), else this process."""
    from pytest_ipu.backends.base import Grouped

    if isinstance(compiled, Grouped):
        return compiled.group.process_ids()
    return (os.getpid(),)
