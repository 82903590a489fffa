"""Per-run state of pytest-ipu: settings, backends, power meters, the compile cache, the torchrun
launch and what was measured.

No hooks: the fixtures and ``lifecycle`` (the hooks) read and fill it. It is made at every
pytest start-up, so what only a benchmark needs is a module of its own, made on first use: the
backends (``run_backends``), the power meters (``meters``), the compile cache, the repeats, the
gates; and a measured benchmark is handed over by ``fixtures.publish``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest

if TYPE_CHECKING:
    # Loaded by the methods that use them: the backends, power sources and launch descriptions
    # are a benchmark's, not every pytest run's.
    from pytest_ipu.backends.base import Availability
    from pytest_ipu.backends.base import Backend
    from pytest_ipu.backends.target import Target
    from pytest_ipu.devices.poprun import PopRunInstance
    from pytest_ipu.measure.machine_speed import MachineSpeed
    from pytest_ipu.placement.rank_group import RankGroup
    from pytest_ipu.placement.rank_group import ScopedRanks
    from pytest_ipu.placement.torchrun import TorchrunRank
    from pytest_ipu.pytest_plugin.gating import GateCheck
    from pytest_ipu.pytest_plugin.machine_speed import RunSpeed
    from pytest_ipu.pytest_plugin.meters import RunMeters
    from pytest_ipu.pytest_plugin.repeats import RepeatScheduler
    from pytest_ipu.pytest_plugin.run_backends import RunBackends
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
        ab_side: bool = False,
    ) -> None:
        self.config = config
        self.settings = settings
        #: Whether this run is one side of ``pytest-ipu ab`` (``options.AB_SIDE_VARIABLE``): ab
        #: gates the runs on their pairs, so this one checks no gate and writes ``own_gates`` into
        #: its document instead.
        self.ab_side = ab_side
        #: Under ``ab_side``: each collected benchmark's own gates (its marker's), by node id, for
        #: the document (``benchmark_json.OWN_GATES_KEY``); only benchmarks that have some.
        self.own_gates: dict[str, tuple[Gate, ...]] = {}
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
        self._run_backends: RunBackends | None = None
        self._meters: RunMeters | None = None
        self._repeats: RepeatScheduler | None = None
        self._gate_check: GateCheck | None = None
        self._speed: RunSpeed | None = None
        #: Whether the first benchmark looked at the BLAS and OpenMP threads (``blas_threads``), and
        #: the line the terminal summary then prints (``None``: nothing to say).
        self.blas_checked = False
        self.blas_notice: str | None = None

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
            gate_check.machine_speed = self._speed_so_far
            self._gate_check = gate_check
        return self._gate_check

    @property
    def gate_check_made(self) -> GateCheck | None:
        """The gate check when one was made (``None``: the run has no gate, baseline or gated
        benchmark, and a hook has nothing to tell it or ask it)."""
        return self._gate_check

    def speed(self) -> RunSpeed:
        """The run's samples of its machine's speed, made by the first benchmark or document
        (``machine_speed``)."""
        if self._speed is None:
            from pytest_ipu.pytest_plugin.machine_speed import RunSpeed

            self._speed = RunSpeed()
        return self._speed

    def _speed_so_far(self) -> MachineSpeed | None:
        """The samples of the machine's speed taken so far (``None``: none yet)."""
        return None if self._speed is None else self._speed.current()

    @property
    def compiled(self) -> CompileCache:
        """Models compiled in this run (``ipu_compile``), closed when the run ends."""
        if self._compiled is None:
            from pytest_ipu.run.compiling import CompileCache

            self._compiled = CompileCache()
        return self._compiled

    # -- backends and power meters: made by the first test that needs them -------------------------

    @property
    def run_backends(self) -> RunBackends:
        """The run's backends, one per target, made on first use (``run_backends``)."""
        if self._run_backends is None:
            from pytest_ipu.pytest_plugin.run_backends import RunBackends

            self._run_backends = RunBackends(self.config, self.settings)
        return self._run_backends

    @property
    def backends(self) -> dict[Target, tuple[Backend | None, Availability]]:
        """Every target asked for, its backend and whether it runs here (empty: none was asked for)."""
        return {} if self._run_backends is None else self._run_backends.backends

    @property
    def auto(self) -> tuple[list[Target], list[tuple[Target, str]]] | None:
        """Under ``--ipu-backend=auto``, once asked: the default targets present, and those absent
        with the reason (``None``: not asked)."""
        return None if self._run_backends is None else self._run_backends.auto

    @property
    def meters(self) -> RunMeters:
        """The run's power meters, opened on first use and closed by ``release`` (``meters``)."""
        if self._meters is None:
            from pytest_ipu.pytest_plugin.meters import RunMeters

            self._meters = RunMeters(self.config, self.settings)
        return self._meters

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
        errors = [] if self._meters is None else self._meters.close()
        compiled, self._compiled = self._compiled, None
        if compiled is not None:
            errors.extend(compiled.close())
        return errors
