"""The gates' section of a pytest run as a ``Table`` of no columns: its legend the counts and the
job's rule, its notes every FAIL, each undecided benchmark once (``results.job_summary``), the gates
that checked nothing, missing benchmarks, notes and skipped baselines; ``tone`` colours each note."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_ipu.report.table import Table
from pytest_ipu.results import decide
from pytest_ipu.results import family
from pytest_ipu.results import job_summary

#: What an INCONCLUSIVE verdict does under each ``--ipu-inconclusive`` policy.
UNDECIDED = {
    "fail": "fails the run",
    "warn": "a warning: --ipu-inconclusive=warn",
    "pass": "accepted as a pass: --ipu-inconclusive=pass",
}


@dataclass(frozen=True)
class RunGates:
    """What a run's gates found, and the options that say what it means (``--ipu-job-alpha`` over the
    ``planned`` gate checks, ``--ipu-inconclusive``, ``--ipu-baseline-missing``)."""

    verdicts: Sequence[decide.Verdict]
    measured: bool
    against: str
    job_alpha: float
    planned: int
    inconclusive: str
    baseline_missing: str
    unchecked: str | None = None
    missing: Sequence[str] = ()
    notes: Sequence[str] = ()
    skipped: Sequence[str] = ()


def table(gates: RunGates, verbose: bool = False) -> Table:
    """The summary of ``gates``; ``verbose`` (pytest's ``-v``) lists every verdict that is not a PASS."""
    verdicts, legend = gates.verdicts, []
    if verdicts or gates.measured:
        against = f" against {gates.against}" if gates.against else ""
        counts = ", ".join(f"{sum(v.outcome == o for v in verdicts)} {o}" for o in decide.OUTCOMES)
        legend.append(
            f"{len(verdicts)} gate check(s) on {len({v.benchmark for v in verdicts})} benchmark(s){against}: "
            f"{counts}"
        )
    notes = []
    if verdicts:
        job = family.describe(gates.job_alpha, max(gates.planned, family.tested(verdicts)))
        undecided = UNDECIDED[gates.inconclusive]
        legend.append(f"job: {job}; INCONCLUSIVE {undecided}")
        notes = job_summary.lines(
            verdicts,
            verbose=verbose,
            unfold="pytest -v lists them",
            label=f"INCONCLUSIVE ({undecided})",
            failed_label="FAILED",
        )
    if gates.unchecked:
        notes.append(f"FAILED {gates.unchecked}")
    policy = "fails the run" if gates.baseline_missing == "fail" else "a warning"
    notes.extend(f"MISSING ({policy}) {line}" for line in gates.missing)
    notes.extend(f"NOTE {note}" for note in gates.notes)
    notes.extend(f"SKIPPED {line}" for line in gates.skipped)
    return Table((), (), legend=legend, notes=notes)


def tone(line: str, inconclusive: str) -> str:
    """How a terminal shows a note of the summary: ``red`` for what fails the run (a FAIL, and an
    undecided benchmark or the fold of them under ``--ipu-inconclusive=fail``), else ``yellow``."""
    verdict = line.startswith(("INCONCLUSIVE", "and "))
    return "red" if line.startswith("FAILED") or (verdict and inconclusive == "fail") else "yellow"
