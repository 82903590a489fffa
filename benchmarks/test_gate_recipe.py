"""The CI recipe of docs/ci.md, run as a team runs it, on a family of twenty benchmarks beside two
CPU hogs on a 2-core machine: how often the job is red for unchanged code, red and naming the
benchmark for a real 10 % regression, never green for a 30 % one, and never green when the load
shifts in the middle of the job; and what the gated job costs against the plain run.

The family and the jobs
-----------------------
``gate_family/`` holds twenty small benchmarks (pure Python, numpy, torch; ten through
pytest-benchmark's own ``benchmark`` fixture, seven plain calls and three ``pedantic``, and ten
through ``ipu_benchmark``). Each episode is one pull request of a throwaway repository: ``main``
holds the family, the pull request's head changes it:

- **unchanged**: a comment only;
- **one 10 % slower**: one benchmark's every call 10 % slower (each episode the next of the twenty);
- **all 30 % slower**: every benchmark's every call 30 % slower;
- **load shift, one 10 % slower**: as "one 10 % slower", with both hogs switched off halfway
  through the job (the runner's neighbours left).

The job is the recipe's workflow as written (``docs/examples/perf-ab-ipu.yml``: its ``run:``
steps, run by bash as a runner runs them, ``benchmarks/workflow_steps.py``; its gate, pairs and
threads as the file sets them), beside two processes spinning on the two cores. What CI reads is
the gate step's exit status (0 green; 1 a FAIL; 3 INCONCLUSIVE; both red) and the benchmarks the
job summary's FAIL lines name. The plain run is ``pytest benchmarks`` with its defaults, as the
team's job runs it without gates, timed once beside the hogs.

Every rate is printed with its count and a 95 % Wilson interval; targets are reported as met or
MISSES, never a failure of ``make bench`` (``--gate-recipe-strict`` or
``PYTEST_IPU_GATE_RECIPE_STRICT=1`` makes a miss fail the test). The study starts no new round of
episodes after ``--gate-recipe-budget`` seconds, once it has one episode of each kind.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

import pytest

from benchmarks import gate_recipe_support as support
from benchmarks.conftest import GATE_RECIPE_BUDGET_S

STRICT_ENV = "PYTEST_IPU_GATE_RECIPE_STRICT"
MAX_ROUNDS = 200
UNCHANGED, ONE, ALL, SHIFT = "unchanged", "one 10% slower", "all 30% slower", "load shift, one 10% slower"
KINDS = (UNCHANGED, ONE, ALL, SHIFT)
#: The 95 % normal quantile of the Wilson intervals.
Z95 = 1.959964


def wilson(hits: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The 95 % Wilson score interval of a rate of ``hits`` in ``n`` (Wilson 1927); (0, 1) for none."""
    if n == 0:
        return (0.0, 1.0)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class Target:
    """A bound on a rate: ``<=`` (at most) or ``>=`` (at least)."""

    what: str
    op: str
    rate: float

    def met(self, hits: int, n: int) -> bool:
        """Whether ``hits`` of ``n`` is within the bound (never with no episode)."""
        if n == 0:
            return False
        return hits / n <= self.rate if self.op == "<=" else hits / n >= self.rate


@dataclass(frozen=True)
class Episode:
    """One job: which kind, which benchmark was slowed (for ``ONE`` and ``SHIFT``), what CI saw."""

    kind: str
    slowed: str | None
    job: support.Job


@dataclass
class Study:
    """Every episode, and the rows of the report with the targets they missed."""

    episodes: list[Episode] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)

    def of(self, kind: str) -> list[Episode]:
        """The episodes of ``kind``."""
        return [e for e in self.episodes if e.kind == kind]

    def row(self, case: str, hits: int, n: int, target: Target) -> None:
        """One row: the case, the rate measured with its interval, the target, met or MISSES."""
        low, high = wilson(hits, n)
        rate = f"{hits}/{n} = {hits / n:.0%}" if n else "0/0"
        cell = f"{target.what} {rate} [95% CI {low:.0%}, {high:.0%}]"
        ok = target.met(hits, n)
        self.rows.append(f"| {case} | {cell} | {target.op} {target.rate:.0%} | {'met' if ok else 'MISSES'} |")
        if not ok:
            self.misses.append(f"{case}: {cell}, target {target.op} {target.rate:.0%}")

    def judge(self, plain_s: float) -> None:
        """The targets of docs/ci.md, each a row."""
        aa = self.of(UNCHANGED)
        self.row(UNCHANGED, sum(e.job.verdict != "PASS" for e in aa), len(aa), Target("red", "<=", 0.05))
        self.row(UNCHANGED, sum(e.job.verdict == "FAIL" for e in aa), len(aa), Target("FAIL", "<=", 0.01))
        one = self.of(ONE)
        named = sum(e.job.verdict == "FAIL" and e.slowed in e.job.failed for e in one)
        self.row(ONE, named, len(one), Target("FAIL naming it", ">=", 0.95))
        others = sum(bool(e.job.failed - {e.slowed}) for e in one)
        self.row(ONE, others, len(one), Target("another benchmark FAILed", "<=", 0.0))
        every = self.of(ALL)
        self.row(ALL, sum(e.job.verdict == "PASS" for e in every), len(every), Target("PASS", "<=", 0.0))
        moved = self.of(SHIFT)
        self.row(SHIFT, sum(e.job.verdict == "PASS" for e in moved), len(moved), Target("PASS", "<=", 0.01))
        bound = 2 * plain_s + 60.0
        over = sum(e.job.seconds > bound for e in self.episodes)
        case = f"time of a gated job (2 x {plain_s:.0f} s + 60 s = {bound:.0f} s)"
        self.row(case, over, len(self.episodes), Target("over", "<=", 0.0))


def _strict(config: pytest.Config) -> bool:
    env = os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    return env or bool(config.getoption("--gate-recipe-strict", default=False))


def test_gate_recipe(
    study_report: dict[str, list[str]],
    self_check_summary: dict[str, str],
    pytestconfig: pytest.Config,
    tmp_path: Path,
) -> None:
    """The recipe's job verdicts on unchanged code, one and every benchmark slower, and a load shift."""
    budget_s = float(pytestconfig.getoption("--gate-recipe-budget", default=GATE_RECIPE_BUDGET_S))
    names = sorted(support.NAMES)
    study = Study()
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    rounds = 0
    with support.hogs() as hogs:
        plain_s = support.plain_run(support.pull_request(tmp_path / "plain", {}, "plain"))
        while rounds < MAX_ROUNDS and (rounds == 0 or time.perf_counter() - started < budget_s):
            for kind in KINDS:
                slowed = names[rounds % len(names)] if kind in (ONE, SHIFT) else None
                slow = {"*": 1.3} if kind == ALL else ({slowed: 1.1} if slowed else {})
                where = tmp_path / f"episode-{len(study.episodes)}"
                workspace = support.pull_request(where, slow, f"{kind} {slowed or ''}".strip())
                typical = statistics.median([e.job.seconds for e in study.episodes] or [4 * plain_s])
                hogs.on()
                job = support.run_job(workspace, where, hogs if kind == SHIFT else None, typical / 2)
                hogs.on()
                assert job.verdict != "ERROR", (
                    f"the recipe's job failed to run ({job.status}):\n{job.output[-3000:]}"
                )
                study.episodes.append(Episode(kind, support.NAMES[slowed] if slowed else None, job))
            rounds += 1
        alive = hogs.alive
    measured_s = time.perf_counter() - started
    study.judge(plain_s)

    title = (
        f"the CI recipe as written, {len(names)} benchmarks, two CPU hogs ({rounds} episode(s) of each kind)"
    )
    jobs = [e.job.seconds for e in study.episodes]
    lines = study_report.setdefault(title, [])
    lines.append(
        f"workflow: {support.WORKFLOW.relative_to(support.WORKFLOW.parents[2])}, its run steps as written"
    )
    lines.append(
        f"plain run (pytest with its defaults, no gates): {plain_s:.0f} s; gated jobs: "
        f"{statistics.median(jobs):.0f} s median ({min(jobs):.0f} to {max(jobs):.0f} s)"
    )
    lines.append(
        f"1-minute load: {load_before:.1f} before, {os.getloadavg()[0]:.1f} after ({os.cpu_count()} CPUs)"
    )
    lines += ["", "| case | measured | target | |", "|---|---|---|---|", *study.rows, ""]
    for e in study.episodes:
        if e.kind != UNCHANGED or e.job.verdict != "PASS":
            named = ", ".join(sorted(e.job.failed)) or "none"
            slowed = f" ({e.slowed})" if e.slowed else ""
            lines.append(
                f"episode {e.kind}{slowed}: {e.job.verdict} in {e.job.seconds:.0f} s ({e.job.counts}); "
                f"FAIL lines: {named}"
            )
            # The undecided benchmarks, one line each, as the job summary names them.
            lines += [
                f"  {line[2:]}" for line in e.job.summary.splitlines() if line.startswith("- INCONCLUSIVE")
            ]
    lines.append(f"measured in {measured_s:.0f} s (budget {budget_s:g} s)")
    lines += [f"MISSES {m}" for m in study.misses]
    total = len(study.rows)
    self_check_summary[title] = (
        f"{total - len(study.misses)} of {total} targets met in {rounds} episode(s) of each kind "
        f"({measured_s:.0f} s)" + (f"; missed: {'; '.join(study.misses)}" if study.misses else "")
    )
    assert alive, "a CPU hog did not run to the end of the study"
    if _strict(pytestconfig) and study.misses:
        pytest.fail("gate recipe targets missed (strict):\n" + "\n".join(study.misses), pytrace=False)
