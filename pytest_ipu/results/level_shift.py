"""A stored-baseline gate never turns a level shift of the machine into a verdict.

This module compares the candidate run's samples of its machine's speed (``measure.machine_speed``)
with its baselines', by the gates' own evidence rule (``decide.evidence``) on the shift
``log(level now / level then)`` (positive when the machine ran slower now), and takes back the
verdicts the shift could explain: a verdict's interval is moved by the largest shift the samples
allow (the far end of the shift's interval, less the drift allowance). Absolute gates, INCONCLUSIVE
verdicts and gates on exact counts are never touched.

The rule is documented in docs/ci.md (section "Level shifts of the machine"); the samples in
docs/json-schema.md (section "machine_speed").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import replace

from pytest_ipu.measure import stats
from pytest_ipu.measure.machine_speed import MachineSpeed
from pytest_ipu.results import decide
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.gated import Candidate

#: How a note about the machine's level starts (the in-run gate keeps only the newest such note).
NOTE_PREFIX = "machine level: "


@dataclass(frozen=True)
class LevelShift:
    """The machine's level now against the baselines', on the log scale (positive: slower now)."""

    #: ``log(level now / level at the baselines' time)``.
    shift: float
    #: The ``1 - 2 alpha`` interval of ``shift``.
    low: float
    high: float
    #: The part of a shift the gates already allow for (the drift allowance, on the log scale; 0
    #: when the baselines' own runs give the spread).
    allowance: float
    #: The reference workload's level now and at the baselines' time, seconds.
    now_s: float
    then_s: float
    #: Baseline runs that had samples.
    runs: int
    #: How the shift was estimated, for the verdict's line.
    method: str
    #: The mean 1-minute load average now and at the baselines' time (``None`` where not read).
    load_now: float | None = None
    load_then: float | None = None

    @property
    def slower(self) -> bool:
        """Whether the machine ran slower now, beyond what the gates allow for."""
        return self.low > self.allowance

    @property
    def faster(self) -> bool:
        """Whether the machine ran faster now, beyond what the gates allow for."""
        return self.high < -self.allowance

    @property
    def moved(self) -> bool:
        """Whether the machine's level moved between the baselines' time and now."""
        return self.slower or self.faster

    def describe(self) -> str:
        """``this runner ran 12.0% slower than at the baselines' time (reference workload ...)``."""
        change = math.expm1(self.shift)
        way = "slower" if change > 0 else "faster"
        size = abs(change) if change > 0 else abs(math.expm1(-self.shift))
        low, high = math.expm1(self.low) * 100, math.expm1(self.high) * 100
        load = ""
        if self.load_now is not None and self.load_then is not None:
            load = f"; 1-minute load {self.load_now:.2g} now, {self.load_then:.2g} then"
        return (
            f"this runner ran {size * 100:.1f}% {way} than at the baselines' time (reference workload "
            f"{self.now_s * 1e3:.3g} ms now against {self.then_s * 1e3:.3g} ms over {self.runs} baseline "
            f"run(s), time change interval [{low:+.1f}%, {high:+.1f}%], {self.method}{load})"
        )


def estimate(
    current: MachineSpeed | None,
    baselines: Sequence[StoredRun],
    alpha: float = decide.ALPHA,
    drift: float = decide.DRIFT,
) -> LevelShift | None:
    """The shift of the machine's level from ``baselines``' time to ``current``'s (the module
    docstring's rule); ``None`` when either side has no samples of the same workload."""
    if current is None or not current.log_levels():
        return None
    runs = [
        run.machine_speed
        for run in baselines
        if run.machine_speed is not None
        and run.machine_speed.workload == current.workload
        and run.machine_speed.log_levels()
    ]
    if not runs:
        return None
    now = current.level_s()
    assert now is not None  # it has levels
    history = [level for level in (run.level_s() for run in runs) if level is not None]
    samples_now = [math.exp(x) for x in current.log_levels()]
    samples_then = [math.exp(x) for run in runs for x in run.log_levels()]
    if len(history) >= decide.HISTORY_MIN:
        found = decide.evidence(now, (), (), history)
        allowance = 0.0
    else:
        found = decide.evidence(now, samples_now, samples_then)
        allowance = math.log1p(drift)
    if found is None:
        return None
    reach = stats.t_isf(alpha, found.df) * found.scale
    method = _method(found, drift)
    loads_then = [load for load in (run.load_avg_1m() for run in runs) if load is not None]
    return LevelShift(
        shift=found.shift,
        low=found.shift - reach,
        high=found.shift + reach,
        allowance=allowance,
        now_s=now,
        then_s=math.exp(math.fsum(math.log(h) for h in history) / len(history)),
        runs=len(runs),
        method=f"{method}, alpha {alpha:.3g}",
        load_now=current.load_avg_1m(),
        load_then=math.fsum(loads_then) / len(loads_then) if loads_then else None,
    )


def _method(found: decide.Evidence, drift: float) -> str:
    """How the shift was estimated: from the baseline runs' spread, or from the samples on both
    sides beyond the ``drift`` allowance."""
    if found.source == "run-to-run":
        return f"{found.baseline} baseline runs' spread {found.spread * 100:.1f}% sd, df {found.df}"
    return (
        f"{found.current} samples now vs {found.baseline} then, spread {found.spread * 100:.1f}% sd, "
        f"df {found.df}, beyond the {drift * 100:g}% drift allowance"
    )


def judge(verdict: decide.Verdict, shift: LevelShift | None) -> decide.Verdict:
    """``verdict`` as the machine's move leaves it: INCONCLUSIVE, naming the shift, where the move
    could explain it (the module docstring's rule); unchanged otherwise."""
    if shift is None or not shift.moved or verdict.gate.kind != "relative" or verdict.interval is None:
        return verdict
    if METRICS[verdict.gate.metric].exact:
        return verdict  # a count of the program's own work: the machine's speed does not move it
    sign, m = decide.orient(verdict.gate), decide.margin(verdict.gate)
    ends = sorted(sign * math.log(r) if r > 0 else -sign * math.inf for r in verdict.interval)
    low, high = ends[0], ends[1]  # the change's interval, worse positive
    if verdict.failed and shift.slower:
        explained = low - (shift.high - shift.allowance) <= m
    elif verdict.passed and shift.faster:
        explained = high + (-shift.low - shift.allowance) >= m
    else:
        return verdict
    if not explained:
        return verdict
    advice = (
        f"{verdict.outcome} on the benchmark's figures, but {shift.describe()}: a change this size "
        "may be the machine's, not the code's; compare base and candidate in one job (pytest-ipu ab), "
        "or gate against baselines measured in the machine's present state"
    )
    # No longer a FAIL test: the job's family-wise rule (``family``) does not count it.
    return replace(verdict, outcome=decide.INCONCLUSIVE, advice=advice, p_fail=None)


def note(
    current: MachineSpeed | None, baselines: Sequence[StoredRun], shift: LevelShift | None
) -> str | None:
    """The note a gate's report gives about the machine's level: the shift when it moved, or why
    none could be looked for; ``None`` when it is steady (or nothing was sampled now)."""
    if current is None or not baselines:
        return None
    if shift is None:
        return (
            f"{NOTE_PREFIX}no baseline run holds samples of the machine's speed (files written before "
            "they were kept, or without pytest-ipu): a level shift of the machine cannot be told from a "
            "change of the code; save new baselines"
        )
    return f"{NOTE_PREFIX}{shift.describe()}" if shift.moved else None


def check(
    runner: decide.GateRunner, measured: Sequence[Candidate], current: MachineSpeed | None
) -> decide.GateOutcome:
    """``runner.check(measured)``, then each verdict as the machine's level leaves it (``judge``),
    ``current`` being this run's samples, the runner's history the baselines."""
    outcome = runner.check(measured)
    if not outcome.verdicts:
        return outcome
    shift = estimate(current, runner.history, runner.alpha, runner.drift)
    said = note(current, runner.history, shift)
    return replace(
        outcome,
        verdicts=tuple(judge(v, shift) for v in outcome.verdicts),
        notes=outcome.notes if said is None else (*outcome.notes, said),
    )
