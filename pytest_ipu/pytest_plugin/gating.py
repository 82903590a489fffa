"""The pytest side of performance gates: the baseline, the check at the end of the run, the report.

Gates come from ``--ipu-gate`` (and its ini key and environment variable) for every benchmark,
and from ``@pytest.mark.ipu(gate=...)`` for one benchmark, where they replace the run's gates on
the same metric. Relative gates need a baseline: ``--ipu-baseline=PATH``, else the run that
pytest-benchmark's ``--benchmark-compare`` loads (taken through its public
``pytest_benchmark_compare_machine_info`` hook). Without one, the run stops before any test. Given
several baseline runs (``--ipu-baseline`` repeated, or a glob), the last is the baseline and all of
them together measure how much whole runs drift on this machine; from three on, every gate is
tested against that drift.

As each benchmark is measured, its gates are checked by ``decide.GateRunner``, the runner
``pytest-ipu compare`` uses too (``decide.check``: PASS, FAIL or INCONCLUSIVE by where the
interval of the change lies against the threshold). A FAIL fails the benchmark's own test, with
the gate's line in its report, and gets one line in the summary; so does an INCONCLUSIVE verdict
under ``--ipu-inconclusive=fail`` (the default), while ``warn`` lists it in the summary without
failing and ``pass`` counts it as passed (still listed). A gated benchmark missing
from the baseline is reported, never skipped silently (and fails the run under
``--ipu-baseline-missing=fail``); so is a baseline that ran on different hardware.

Gates that checked nothing do not pass: when gates were asked for and benchmarks measured but not
one gate check was made (every gated benchmark missing from the baseline, say), the run fails
with the reason. A baseline run that pytest-ipu did not write whole (no top-level ``pytest_ipu``
section: another tool's file; or no pytest-ipu record in any benchmark: an interrupted run's
partial entry that pytest-benchmark saved) is skipped with a line saying so; when every baseline
run is skipped, relative gates have no baseline and the run stops as without one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest

from pytest_ipu.pytest_plugin.options import Settings

if TYPE_CHECKING:
    from pytest_ipu.results.benchmark_json import StoredRun
    from pytest_ipu.results.decide import GateRunner
    from pytest_ipu.results.decide import Verdict
    from pytest_ipu.results.records import Measured

#: How the baseline from pytest-benchmark's storage is named in messages.
COMPARE_SOURCE = "--benchmark-compare"


class GateCheck:
    """Checks the gates on what the session measured at the end of the run, and reports them.

    It reads the session's list of measured benchmarks (``measured``), the one list the tables and
    the JSON are made from too; the decision is ``decide.GateRunner``'s. The lifecycle's hooks
    call it: ``keep_compared`` and ``load`` before the tests, ``check_item`` as each benchmark is
    published, ``check`` and ``write_summary`` at the end.
    """

    def __init__(self, settings: Settings, measured: list[Measured]) -> None:
        self.settings = settings
        self.measured = measured
        self.verdicts: list[Verdict] = []
        #: Gated benchmarks the baseline lacks (their relative gates were not checked).
        self.missing: list[str] = []
        #: Other things the reader should know (a baseline from different hardware).
        self.notes: list[str] = []
        self.baseline: StoredRun | None = None
        #: Every baseline run, the baseline last: with ``decide.HISTORY_MIN`` or more, their spread
        #: decides instead of the repeats.
        self.history: list[StoredRun] = []
        self._compared: list[Mapping[str, Any]] = []
        #: Baseline runs skipped (partial or not pytest-ipu's), one line each saying which and why.
        self.skipped: list[str] = []
        self._marker_relative = False
        #: Benchmarks already checked (as each was published), by full name.
        self._checked: set[str] = set()
        #: Under torchrun with several ranks: a rank's record is its share of the launch, so gates
        #: are decided only on rank 0, on the merged records (``check_launch``).
        self.deferred = False

    # -- the baseline -------------------------------------------------------------------------------

    def keep_compared(self, compared_benchmark: Mapping[str, Any]) -> None:
        """Keep each run pytest-benchmark's ``--benchmark-compare`` loads; the last is the baseline."""
        self._compared.append(compared_benchmark)

    def load(self, session: pytest.Session) -> None:
        """Load the baseline once the tests are known; stop the run when relative gates (the run's or
        a benchmark's own) have none."""
        from pytest_ipu.errors import ConfigError
        from pytest_ipu.pytest_plugin.marker import marker_gates

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
        from pytest_ipu.pytest_plugin.repeats import in_worker

        if in_worker():
            return  # a repeat worker measures; the process that started it gates

        needs = self._marker_relative or any(g.kind == "relative" for g in self.settings.gates)
        if not needs and not self.settings.baselines and not self._compared:
            return  # nothing to load: the readers (and the schema) are never imported
        from pytest_ipu.results import benchmark_json

        loaded: list[tuple[Mapping[str, Any], StoredRun]] = []
        if self.settings.baselines:
            try:
                for path in self.settings.baselines:
                    data = benchmark_json.read_document(path)
                    loaded.append((data, benchmark_json.parse_run(data, path)))
            except benchmark_json.RunFileError as exc:
                raise pytest.UsageError(f"pytest-ipu: --ipu-baseline: {exc}") from None
        elif self._compared:
            try:
                many = len(self._compared) > 1
                for i, compared in enumerate(self._compared):
                    name = Path(f"{COMPARE_SOURCE} run {i + 1}" if many else COMPARE_SOURCE)
                    loaded.append((compared, benchmark_json.parse_run(compared, name)))
            except benchmark_json.RunFileError as exc:
                raise pytest.UsageError(f"pytest-ipu: the --benchmark-compare run: {exc}") from None
        for document, run in loaded:
            reason = _not_a_baseline(document, run)
            if reason is None:
                self.history.append(run)
            else:
                self.skipped.append(f"baseline {run.path} skipped: {reason}")
        if self.history:
            self.baseline = self.history[-1]
        if needs and self.baseline is None:
            skipped = f" ({'; '.join(self.skipped)})" if self.skipped else ""
            raise pytest.UsageError(
                "pytest-ipu: relative gates (such as 'throughput:-5%') need a baseline run, and there is "
                f"none{skipped}: pass --ipu-baseline=PATH (a pytest-benchmark JSON file) or "
                "--benchmark-compare with a saved run (--benchmark-save or --benchmark-autosave makes one)"
            )

    # -- the check ----------------------------------------------------------------------------------

    def check_item(self, measured: Measured) -> list[str]:
        """Check the gates of one benchmark as soon as it is measured, so that a failing gate fails
        its own test; the lines of the verdicts that fail it (FAIL, and INCONCLUSIVE under
        ``--ipu-inconclusive=fail``), each with its verdict first; empty when none does."""
        self._checked.add(measured.fullname)
        return [self._failure_line(v) for v in self._check([measured]) if self._fails(v)]

    def _fails(self, verdict: Verdict) -> bool:
        """Whether ``verdict`` fails its test and the run: a FAIL always, an INCONCLUSIVE one by policy."""
        return verdict.failed or (verdict.inconclusive and self.settings.inconclusive == "fail")

    def _failure_line(self, verdict: Verdict) -> str:
        if verdict.failed:
            return f"pytest-ipu gate FAILED: {verdict.line()}"
        return (
            f"pytest-ipu gate INCONCLUSIVE (fails under --ipu-inconclusive=fail; 'warn' or 'pass' "
            f"accepts it): {verdict.line()}"
        )

    def check(self) -> None:
        """Check every gate on every measured benchmark not checked yet; fill ``verdicts``,
        ``missing`` and ``notes``."""
        self._check([m for m in self.measured if m.fullname not in self._checked])

    def check_launch(self, merged: list[Measured]) -> tuple[Verdict, ...]:
        """Check the gates on a torchrun launch's merged records (rank 0, once merged)."""
        return self._check(merged, launch=True)

    def _check(self, measured: list[Measured], launch: bool = False) -> tuple[Verdict, ...]:
        from pytest_ipu.pytest_plugin.repeats import in_worker

        if self.deferred and not launch:
            return ()  # a rank's share of a launch: rank 0 checks the merged records
        if in_worker() or (not self.settings.gates and not any(m.gates for m in measured)):
            return ()  # nothing to decide: the decision rule (and numpy) is never loaded
        outcome = self._runner().check(measured)
        self.verdicts.extend(outcome.verdicts)
        self.missing.extend(outcome.missing)
        self.notes.extend(v for v in outcome.notes if v not in self.notes)
        return outcome.verdicts

    def _runner(self) -> GateRunner:
        from pytest_ipu.results.decide import GateRunner

        return GateRunner(
            history=self.history,
            run_gates=self.settings.gates,
            baseline=self.baseline,
            drift=self.settings.drift,
        )

    def _baseline_name(self) -> str:
        return self._runner().baseline_name()

    @property
    def nothing_checked(self) -> bool:
        """Whether gates were asked for and benchmarks measured, yet not one gate check was made."""
        from pytest_ipu.pytest_plugin.repeats import in_worker

        if in_worker() or self.verdicts or not self.measured or self.deferred:
            return False
        return bool(self.settings.gates) or any(m.gates for m in self.measured)

    @property
    def failed(self) -> bool:
        """Whether a gate failed (or was inconclusive under ``--ipu-inconclusive=fail``), a benchmark
        is missing from the baseline under ``fail``, or the gates checked nothing."""
        return (
            any(self._fails(v) for v in self.verdicts)
            or (self.settings.baseline_missing == "fail" and bool(self.missing))
            or self.nothing_checked
        )

    # -- the report ---------------------------------------------------------------------------------

    def write_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """After the tables: one line per failed gate, then the notes; a count of what passed."""
        if not self.verdicts and not self.missing and not self.notes and not self.skipped:
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
        from pytest_ipu.results import decide

        against = f" against {self._baseline_name()}" if self.baseline is not None else ""
        benchmarks = len({v.benchmark for v in self.verdicts})
        counts = ", ".join(f"{sum(v.outcome == o for v in self.verdicts)} {o}" for o in decide.OUTCOMES)
        terminalreporter.write_line(
            f"{len(self.verdicts)} gate check(s) on {benchmarks} benchmark(s){against}: {counts}"
        )
        policy = self.settings.inconclusive
        for verdict in self.verdicts:
            if verdict.failed:
                terminalreporter.write_line(f"FAILED {verdict.line()}", red=True)
            elif verdict.inconclusive and policy == "fail":
                terminalreporter.write_line(f"INCONCLUSIVE (fails the run) {verdict.line()}", red=True)
            elif verdict.inconclusive:
                accepted = "a warning" if policy == "warn" else "accepted as a pass"
                terminalreporter.write_line(
                    f"INCONCLUSIVE ({accepted}: --ipu-inconclusive={policy}) {verdict.line()}", yellow=True
                )
        if self.nothing_checked:
            why = (
                "every gated benchmark is missing from the baseline"
                if self.missing
                else "no gate applied to what was measured"
            )
            terminalreporter.write_line(
                f"FAILED no gate was checked ({why}): gates that check nothing do not pass; give a "
                "baseline that holds these benchmarks (--ipu-baseline or --benchmark-compare)",
                red=True,
            )
        policy = "fails the run" if self.settings.baseline_missing == "fail" else "a warning"
        for line in self.missing:
            terminalreporter.write_line(f"MISSING ({policy}) {line}", yellow=True)
        for note in self.notes:
            terminalreporter.write_line(f"NOTE {note}", yellow=True)
        for line in self.skipped:
            terminalreporter.write_line(f"SKIPPED {line}", yellow=True)


def _not_a_baseline(document: Mapping[str, Any], run: StoredRun) -> str | None:
    """Why a run cannot be a baseline (``None`` when it can): pytest-ipu did not write it, or did not
    finish it (pytest-benchmark saves an interrupted run's benchmarks without our records)."""
    from pytest_ipu.results import benchmark_json

    if benchmark_json.TOP_LEVEL_KEY not in document:
        return (
            f"not written by pytest-ipu (no top-level '{benchmark_json.TOP_LEVEL_KEY}' section); "
            "use a run saved with pytest-ipu active"
        )
    if not any(b.record is not None for b in run.benchmarks):
        return (
            "no benchmark has a pytest-ipu record (extra_info['ipu']): a partial run (interrupted, "
            "or benchmarks disabled); use a complete run"
        )
    return None
