"""The pytest side of performance gates: the baseline, the check at the end of the run, the report.

Gates come from ``--ipu-gate`` (and its ini key and environment variable) for every benchmark,
and from ``@pytest.mark.ipu(gate=...)`` for one benchmark, where they replace the run's gates on
the same metric. Relative gates need a baseline: ``--ipu-baseline=PATH``, else the run that
pytest-benchmark's ``--benchmark-compare`` loads (taken through its public
``pytest_benchmark_compare_machine_info`` hook). Without one, the run stops before any test. Given
several baseline runs (``--ipu-baseline`` repeated, or a glob), the last is the baseline and all of
them together measure how much whole runs drift on this machine; from three on, every verdict
states that drift, and metrics without per-round samples are tested against it.

When the benchmarks are done, every gate is checked on every measured benchmark (``decide.check``:
beyond the threshold and significant on the per-round samples). A failure sets the exit code to 1
and gets one line in the summary. A gated benchmark missing from the baseline is reported, never
skipped silently (and fails the run under ``--ipu-baseline-missing=fail``); so is a baseline that
ran on different hardware.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.options import Settings
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import decide
from pytest_ipu.results import gates
from pytest_ipu.results import schema
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun

GATE_KEY = pytest.StashKey["GateCheck"]()
#: How the baseline from pytest-benchmark's storage is named in messages.
COMPARE_SOURCE = "--benchmark-compare"


@dataclass(frozen=True)
class Measured:
    """A benchmark of this run as the gates see it: its record, per-round times and own gates."""

    fullname: str
    name: str
    record: Mapping[str, Any]
    samples_s: tuple[float, ...]
    gates: tuple[gates.Gate, ...] = ()


def effective_gates(run_gates: Sequence[gates.Gate], own: Sequence[gates.Gate]) -> tuple[gates.Gate, ...]:
    """The run's gates, except where the benchmark's own gates name the same metric (theirs win)."""
    mine = {g.metric for g in own}
    return (*(g for g in run_gates if g.metric not in mine), *own)


@dataclass
class GateCheck:
    """Collects what was measured, checks the gates at the end of the run and reports them."""

    settings: Settings
    measured: list[Measured] = field(default_factory=list)
    verdicts: list[decide.Verdict] = field(default_factory=list)
    #: Gated benchmarks the baseline lacks (their relative gates were not checked).
    missing: list[str] = field(default_factory=list)
    #: Other things the reader should know (a baseline from different hardware).
    notes: list[str] = field(default_factory=list)
    baseline: StoredRun | None = None
    #: Every baseline run, the baseline last: with ``decide.HISTORY_MIN`` or more, their spread
    #: decides instead of the per-round samples.
    history: list[StoredRun] = field(default_factory=list)
    _compared: list[Mapping[str, Any]] = field(default_factory=list)
    _marker_relative: bool = False

    def add(self, measured: Measured) -> None:
        """Remember one measured benchmark (``ipu_benchmark`` calls this)."""
        self.measured.append(measured)

    # -- the baseline -------------------------------------------------------------------------------

    def pytest_benchmark_compare_machine_info(self, compared_benchmark: Mapping[str, Any]) -> None:
        """Keep each run pytest-benchmark's ``--benchmark-compare`` loads; the last is the baseline."""
        self._compared.append(compared_benchmark)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Load the baseline once the tests are known; stop the run when relative gates (the run's or
        a benchmark's own) have none."""
        from pytest_ipu.errors import ConfigError
        from pytest_ipu.marker import marker_gates

        try:
            self._marker_relative = any(
                g.kind == "relative" for item in session.items for g in marker_gates(item)
            )
        except ConfigError:
            # pytest calls this even when collection failed: the bad marker is already reported
            # (pytest_collection_modifyitems raised a usage error naming it).
            return
        self._load_baseline()

    def _load_baseline(self) -> None:
        needs = self._marker_relative or any(g.kind == "relative" for g in self.settings.gates)
        if self.settings.baselines:
            try:
                self.history = [benchmark_json.read_run(path) for path in self.settings.baselines]
            except benchmark_json.RunFileError as exc:
                raise pytest.UsageError(f"pytest-ipu: --ipu-baseline: {exc}") from None
        elif self._compared:
            try:
                many = len(self._compared) > 1
                self.history = [
                    benchmark_json.parse_run(
                        data, Path(f"{COMPARE_SOURCE} run {i + 1}" if many else COMPARE_SOURCE)
                    )
                    for i, data in enumerate(self._compared)
                ]
            except benchmark_json.RunFileError as exc:
                raise pytest.UsageError(f"pytest-ipu: the --benchmark-compare run: {exc}") from None
        if self.history:
            self.baseline = self.history[-1]
        if needs and self.baseline is None:
            raise pytest.UsageError(
                "pytest-ipu: relative gates (such as 'throughput:-5%') need a baseline run, and there is "
                "none: pass --ipu-baseline=PATH (a pytest-benchmark JSON file) or --benchmark-compare "
                "with a saved run (--benchmark-save or --benchmark-autosave makes one)"
            )

    # -- the check ----------------------------------------------------------------------------------

    def check(self) -> None:
        """Check every gate on every measured benchmark; fill ``verdicts``, ``missing`` and ``notes``."""
        base = {b.fullname: b for b in self.baseline.benchmarks} if self.baseline is not None else {}
        devices: dict[str, None] = {}
        for m in self.measured:
            chosen = effective_gates(self.settings.gates, m.gates)
            if not chosen:
                continue
            counterpart = base.get(m.fullname)
            relative = [g for g in chosen if g.kind == "relative"]
            if relative and (counterpart is None or counterpart.record is None):
                why = "is not in" if counterpart is None else "has no pytest-ipu record in"
                self.missing.append(
                    f"{m.name} {why} the baseline ({self._baseline_name()}): its relative gates "
                    f"({', '.join(map(str, relative))}) were not checked"
                )
            for gate in chosen:
                if gate.kind == "absolute":
                    self.verdicts.append(decide.check(gate, m.name, m.record))
                elif counterpart is not None and counterpart.record is not None:
                    self.verdicts.append(self._relative(gate, m, counterpart))
            if counterpart is not None and counterpart.record is not None:
                was, now = counterpart.record.device_name, str(m.record.get("device_name"))
                if was != now:
                    devices[f"the baseline ran {m.name} on {was!r}, this run on {now!r}"] = None
        self.notes.extend(f"different hardware: {d}" for d in devices)

    def _relative(self, gate: gates.Gate, m: Measured, counterpart: StoredBenchmark) -> decide.Verdict:
        assert counterpart.record is not None
        return decide.check(
            gate,
            m.name,
            m.record,
            schema.to_json(counterpart.record),
            m.samples_s or None,
            counterpart.samples_s,
            history=self._history_of(m.fullname, gate.metric),
        )

    def _history_of(self, fullname: str, metric: str) -> list[float]:
        """The metric's value for ``fullname`` in every baseline run that has it."""
        values = []
        for run in self.history:
            bench = next((b for b in run.benchmarks if b.fullname == fullname), None)
            if bench is not None and bench.record is not None:
                value = decide.metric_value(schema.to_json(bench.record), metric)
                if value is not None:
                    values.append(value)
        return values

    def _baseline_name(self) -> str:
        if self.baseline is None:
            return "none"
        if len(self.history) > 1:
            return f"{self.baseline.path} (and {len(self.history) - 1} earlier baseline run(s))"
        return str(self.baseline.path)

    @property
    def failed(self) -> bool:
        """Whether a gate failed, or a benchmark is missing from the baseline under ``fail``."""
        return any(not v.passed for v in self.verdicts) or (
            self.settings.baseline_missing == "fail" and bool(self.missing)
        )

    # -- hooks --------------------------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Check the gates once the benchmarks are done; a failure makes the exit code 1."""
        self.check()
        if self.failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """After the tables: one line per failed gate, then the notes; a count of what passed."""
        if not self.verdicts and not self.missing and not self.notes:
            if self.settings.gates and not self.measured:
                # Gates were asked for but had nothing to judge: say so rather than pass in silence.
                terminalreporter.section("pytest-ipu gates")
                terminalreporter.write_line(
                    f"{len(self.settings.gates)} gate(s) given, but no benchmark was measured (benchmarks "
                    "disabled with --benchmark-disable or under xdist, or none selected): nothing checked",
                    yellow=True,
                )
            return
        terminalreporter.section("pytest-ipu gates")
        failed = [v for v in self.verdicts if not v.passed]
        against = f" against {self._baseline_name()}" if self.baseline is not None else ""
        benchmarks = len({v.benchmark for v in self.verdicts})
        terminalreporter.write_line(
            f"{len(self.verdicts)} gate check(s) on {benchmarks} benchmark(s){against}: "
            f"{len(self.verdicts) - len(failed)} passed, {len(failed)} failed"
        )
        for verdict in failed:
            terminalreporter.write_line(f"FAILED {verdict.line()}", red=True)
        policy = "fails the run" if self.settings.baseline_missing == "fail" else "a warning"
        for line in self.missing:
            terminalreporter.write_line(f"MISSING ({policy}) {line}", yellow=True)
        for note in self.notes:
            terminalreporter.write_line(f"NOTE {note}", yellow=True)
