"""``pytest-ipu history`` at scale and how accurately it finds changes, measured on this machine.

Scale
-----
- Read and judge: storages of 3,000 and 10,000 saved runs (2 benchmarks each, pytest-ipu records
  as autosave keeps them, three runs a commit), written here, then ``history.find_runs``,
  ``history.load`` and ``changes.report`` with a 5 % check, files read included; targets under
  5 s and under 15 s.
- Analysis alone: one 10,000-run series with two steps through ``changepoints.detect``.

Accuracy
--------
The noise is measured, not drawn from a formula, with two CPU hogs spinning beside the measuring
process (``support.cpu_hog``, as other jobs on a shared runner): ``NOISE_RUNS`` real runs of a small
numpy sort, in two shapes, as relative deviations from their median:

- ``median of 50 calls``: each run the median of ``ROUNDS`` timed calls, as a benchmark's run
  reports it;
- ``single call``: each run one call, as a ``pedantic`` benchmark of one round reports it (skewed,
  with the large spread of a microbenchmark on a busy machine).

For each shape, and with one and with three runs a commit, ``HISTORIES`` histories are analysed
whole (every series of a history together, as ``pytest-ipu history`` does). Each history holds
series of ``LENGTH`` commits of that noise resampled with replacement (seeded), times a level of 1:

- ``AA`` series with no change: every change point reported is false;
- ``PER_STEP`` series with a step of 3 %, 5 % or 10 % at a random commit (at least ``EDGE`` commits
  from either end);
- a family of ``FAMILY`` related series that step together by 10 % at one commit, each with its own
  level (real-shaped: many benchmarks moved by one commit);
- ``PER_STEP`` slow drifts: 0.25 % a commit over ``DRIFT_COMMITS`` commits (8 % in all), which has
  no commit to name: their change points are counted apart, neither false nor right.

A change point within ``NEAR`` commits of the injected step has found it (the nearest; any other is
false); it is at the right commit when it names the step's commit. Printed for each shape and runs
a commit, with 95 % Wilson intervals: false change points per series (A/A and stepped series),
missed steps per size (10 % steps: all, and those the history said its noise could show), found
steps at the right commit, and drift series with a change. The targets (false change points at
most 5 % of series, 10 % steps missed at most 3 %, at least 90 % at the right commit) are printed
beside, "meets" or "MISSES": figures of this machine, never a failure of ``make bench``.
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import gate_accuracy_support as support
from pytest_ipu.measure import changepoints
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.report import changes as changes_report
from pytest_ipu.results import changes
from pytest_ipu.results import history
from pytest_ipu.results import records
from pytest_ipu.results import schema

SECTION = "pytest-ipu history: scale and accuracy"
#: Real runs measured for each noise shape, and timed calls per run of the "median" shape.
NOISE_RUNS = 400
ROUNDS = 50
#: Commits per accuracy series, histories per shape and runs a commit, and the closest a step comes
#: to either end.
LENGTH = 40
HISTORIES = 4
EDGE = 4
#: Series of each kind in one history.
AA = 30
PER_STEP = 10
FAMILY = 12
#: How far (commits) a change point may be from the step it is counted as finding.
NEAR = 3
STEPS = (0.03, 0.05, 0.10)
RUNS_PER_COMMIT = (1, 3)
DRIFT_PER_COMMIT = 0.0025
DRIFT_COMMITS = 32
#: The scale study's storages (runs), benchmarks a run, runs a commit, and their targets (seconds).
SCALE = ((3_000, 5.0), (10_000, 15.0))
BENCHMARKS = 2
RUNS_A_COMMIT = 3
LONG = 10_000
#: The targets.
FALSE_TARGET = 0.05
MISSED_TARGET = 0.03
RIGHT_TARGET = 0.90


def _measured_noise(rounds: int) -> np.ndarray:
    """Relative deviations of ``NOISE_RUNS`` real runs (each the median of ``rounds`` calls) from
    their median."""
    medians = []
    for _ in range(NOISE_RUNS):
        times = []
        for _ in range(rounds):
            start = time.perf_counter_ns()
            support.sort()
            times.append(time.perf_counter_ns() - start)
        medians.append(statistics.median(times))
    values = np.asarray(medians, dtype=np.float64)
    return values / np.median(values) - 1.0


def _wilson(hits: int, total: int) -> str:
    """``hits / total`` as a percentage with its 95 % Wilson interval."""
    if total == 0:
        return "- (none)"
    z = 1.959964
    p = hits / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    low, high = max(0.0, centre - half) * 100, min(1.0, centre + half) * 100
    return f"{hits} of {total} = {p * 100:.1f}% [{low:.1f}, {high:.1f}]"


@dataclass
class _Tally:
    series: int = 0
    false: int = 0
    steps: dict[float, int] = field(default_factory=dict)
    found: dict[float, int] = field(default_factory=dict)
    visible: int = 0
    visible_found: int = 0
    right: int = 0
    drifts: int = 0


@dataclass
class _Planted:
    sample: changepoints.Sample
    step: float | None
    at: int | None
    drift: bool = False


def _series(
    rng: np.random.Generator, noise: np.ndarray, runs: int, level: float
) -> tuple[np.ndarray, list[int]]:
    values = level * (1.0 + rng.choice(noise, LENGTH * runs))
    return values, [c for c in range(LENGTH) for _ in range(runs)]


def _history(rng: np.random.Generator, noise: np.ndarray, runs: int) -> list[_Planted]:
    ids = [f"c{c}" for c in range(LENGTH)]
    planted = []

    def add(
        values: np.ndarray, commits: list[int], step: float | None, at: int | None, drift: bool = False
    ) -> None:
        planted.append(_Planted(changepoints.Sample(list(values), commits, ids), step, at, drift))

    for _ in range(AA):
        add(*_series(rng, noise, runs, 1.0), None, None)
    for step in STEPS:
        for _ in range(PER_STEP):
            values, commits = _series(rng, noise, runs, 1.0)
            at = int(rng.integers(EDGE, LENGTH - EDGE + 1))
            values[at * runs :] *= 1.0 + step
            add(values, commits, step, at)
    at = int(rng.integers(EDGE, LENGTH - EDGE + 1))
    for member in range(FAMILY):
        values, commits = _series(rng, noise, runs, 1.0 + member / 4)
        values[at * runs :] *= 0.90
        add(values, commits, 0.10, at)
    for _ in range(PER_STEP):
        values, commits = _series(rng, noise, runs, 1.0)
        start = int(rng.integers(EDGE, LENGTH - DRIFT_COMMITS + 1)) if LENGTH > DRIFT_COMMITS + EDGE else 0
        ramp = np.clip(np.arange(LENGTH) - start, 0, DRIFT_COMMITS) * DRIFT_PER_COMMIT
        add(values * np.repeat(1.0 + ramp, runs), commits, None, None, drift=True)
    return planted


def _score(
    planted: Sequence[_Planted],
    found: Sequence[list[changepoints.ChangePoint]],
    noises: Sequence[changepoints.Noise],
    runs: int,
    tally: _Tally,
) -> None:
    for plant, points, noise in zip(planted, found, noises):
        if plant.drift:
            tally.drifts += bool(points)
            continue
        tally.series += 1
        hit = None
        if plant.step is not None and plant.at is not None:
            at = plant.at
            tally.steps[plant.step] = tally.steps.get(plant.step, 0) + 1
            near = [c for c in points if abs(c.index - at) <= NEAR]
            if near:
                hit = min(near, key=lambda c: abs(c.index - at))
                tally.found[plant.step] = tally.found.get(plant.step, 0) + 1
                tally.right += hit.index == at
            if (
                plant.step == 0.10
                and noise.smallest_step(plant.at * runs, (LENGTH - plant.at) * runs) <= 0.10
            ):
                tally.visible += 1
                tally.visible_found += hit is not None
        tally.false += sum(1 for c in points if c is not hit)


def _accuracy(noise: np.ndarray, shape: str, runs: int, lines: list[str]) -> None:
    rng = np.random.default_rng(2026 + runs)
    tally = _Tally()
    for _ in range(HISTORIES):
        planted = _history(rng, noise, runs)
        points, noises = changepoints.find([p.sample for p in planted])
        _score(planted, points, noises, runs, tally)
    lines.append(
        f"-- {shape}, {runs} run(s) a commit ({HISTORIES} histories of "
        f"{AA + 3 * PER_STEP + FAMILY + PER_STEP} series, {LENGTH} commits):"
    )
    false_rate = tally.false / tally.series
    lines.append(
        f"false change points per series: {_wilson(tally.false, tally.series)} "
        f"(target <= {FALSE_TARGET:.0%}: {'meets' if false_rate <= FALSE_TARGET else 'MISSES'})"
    )
    for step in STEPS:
        total, found = tally.steps.get(step, 0), tally.found.get(step, 0)
        target = ""
        if step == 0.10:
            missed = (total - found) / total if total else 1.0
            target = (
                f" (target <= {MISSED_TARGET:.0%}: {'meets' if missed <= MISSED_TARGET else 'MISSES'}); "
                "of those its "
                f"noise could show: missed {_wilson(tally.visible - tally.visible_found, tally.visible)}"
            )
        lines.append(f"{step * 100:.0f}% steps missed: {_wilson(total - found, total)}{target}")
    found_all = sum(tally.found.values())
    right_rate = tally.right / found_all if found_all else 0.0
    lines.append(
        f"found steps at the right commit: {_wilson(tally.right, found_all)} (target >= {RIGHT_TARGET:.0%}: "
        f"{'meets' if right_rate >= RIGHT_TARGET else 'MISSES'}; within {NEAR} commits counts as found)"
    )
    lines.append(
        f"slow drifts ({DRIFT_PER_COMMIT * 100:g}% a commit over {DRIFT_COMMITS} commits): a change "
        "reported in "
        f"{tally.drifts} of {HISTORIES * PER_STEP} series"
    )


def _record(p50: float) -> dict[str, Any]:
    lat = LatencySummary(p50 * 0.9, p50, p50 * 1.1, p50 * 1.2, p50 * 1.3, p50, 40)
    return schema.to_json(
        records.IpuRecord(
            target="torch:cpu",
            backend="torch",
            device="cpu",
            device_name="Some CPU",
            precision="fp32",
            io="host",
            batch_size=4,
            items_per_call=4,
            rounds=40,
            rounds_policy="fixed",
            warmup_rounds=1,
            latency_s=lat,
            window_s=1.0,
            throughput_items_per_s=4 / p50,
            compile_s=0.5,
            compile_cached=False,
            first_call_s=0.1,
        )
    )


def _storage(root: Path, runs: int) -> Path:
    folder = root / history.this_machine()
    folder.mkdir(parents=True)
    template = _record(0.001)
    rng = np.random.default_rng(3)
    for run in range(runs):
        benchmarks = []
        for number in range(BENCHMARKS):
            p50 = 0.001 * (1 + number / 10) * (1 + 0.01 * rng.standard_normal())
            record = dict(template)
            record["latency_s"] = {
                k: v * p50 / 0.001 if isinstance(v, float) else v for k, v in template["latency_s"].items()
            }
            record["throughput_items_per_s"] = 4 / p50
            benchmarks.append(
                {
                    "group": "g",
                    "name": f"test_b[{number}]",
                    "fullname": f"test_b.py::test_b[{number}]",
                    "params": None,
                    "stats": {"min": p50 * 0.9, "median": p50, "mean": p50, "max": p50 * 1.1},
                    "extra_info": {"ipu": record},
                }
            )
        commit = f"{run // RUNS_A_COMMIT:040x}"
        document = {
            "machine_info": {},
            "commit_info": {"id": commit, "time": f"2026-01-01T00:00:{run // RUNS_A_COMMIT % 60:02d}+00:00"},
            "datetime": f"2026-01-02T{run // 3600:02d}:{run // 60 % 60:02d}:{run % 60:02d}",
            "benchmarks": benchmarks,
        }
        (folder / f"{run + 1:05d}_{commit[:7]}_x.json").write_text(json.dumps(document))
    return root


def _scale(tmp_path: Path, lines: list[str]) -> None:
    for runs, target in SCALE:
        root = _storage(tmp_path / f"storage-{runs}", runs)
        start = time.perf_counter()
        given, found = history.find_runs([str(root)], "unused")
        read = history.load(given, found)
        result = changes.report(read, 0.05)
        changes_report.render_table(result)
        took = time.perf_counter() - start
        assert read.runs == runs
        lines.append(
            f"read and judge {runs:,} saved runs ({BENCHMARKS} benchmarks each, {RUNS_A_COMMIT} a commit), "
            "files "
            f"read included: {took:.2f} s (target < {target:g} s: {'meets' if took < target else 'MISSES'}); "
            f"{len(result.changes)} change point(s) in {len(read.series)} series"
        )
    rng = np.random.default_rng(7)
    long = np.exp(0.01 * rng.standard_normal(LONG))
    long[LONG // 3 :] *= 1.10
    long[2 * LONG // 3 :] *= 0.95
    start = time.perf_counter()
    found_at = [c.index for c in changepoints.detect(long)]
    lines.append(
        f"analysis of one {LONG:,}-run series: {time.perf_counter() - start:.3f} s, change point(s) at "
        f"{found_at} "
        f"(steps at {LONG // 3} and {2 * LONG // 3})"
    )


def test_history_scale_and_accuracy(tmp_path: Path, study_report: dict[str, list[str]]) -> None:
    """Measure and print (the module docstring): read and analysis times, accuracy rates with their
    intervals."""
    lines = study_report.setdefault(SECTION, [])
    _scale(tmp_path, lines)
    with contextlib.ExitStack() as stack:
        hogs = [stack.enter_context(support.cpu_hog()) for _ in range(2)]
        shapes = {
            f"median of {ROUNDS} calls": _measured_noise(ROUNDS),
            "single call": _measured_noise(1),
        }
    lines += [hog.line() for hog in hogs]
    for shape, noise in shapes.items():
        lines.append(
            f"noise, {shape}: {NOISE_RUNS} real runs of a numpy sort beside two CPU hogs, relative spread sd "
            f"{noise.std() * 100:.2f}%, 5-95% {np.percentile(noise, 5) * 100:+.2f}% to "
            f"{np.percentile(noise, 95) * 100:+.2f}%"
        )
        for runs in RUNS_PER_COMMIT:
            _accuracy(noise, shape, runs, lines)
    # The experiment itself worked: every kind of history was analysed.
    assert len(lines) == len(SCALE) + 1 + 2 + 2 * (1 + 7 * len(RUNS_PER_COMMIT))
