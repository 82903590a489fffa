"""``pytest-ipu history`` at scale and how accurately it finds changes, measured on this machine.

Scale
-----
- Analysis: one 10,000-commit series (A/A noise with two steps) through ``changepoints.detect``;
  target under 1 s. Timed ``REPEATS`` times, the best and the slowest printed; with the time of a
  100-commit series measured beside it (the analysis is linear in the series' length: a ratio of
  about 100 without overhead).
- Load: a storage of 1,000 saved runs of 50 benchmarks each (pytest-ipu records, as autosave keeps
  them: no per-round data), written here, read by ``history.find_runs`` and ``history.load`` into
  the series of every metric; target "seconds".

Accuracy
--------
The noise is measured, not drawn from a formula: ``NOISE_RUNS`` short real runs on this machine
(each the median of ``ROUNDS`` timed calls of a small numpy sort, as a benchmark's run reports
its median), as relative deviations from their median. Every series is ``LENGTH`` commits of those
deviations resampled with replacement (seeded), times a level of 1, with one of (once with one run
a commit, once with three, whose median is the commit's point as ``history`` makes it):

- nothing (A/A): every change point reported is false;
- a step of 3 %, 5 % or 10 % at a random commit (at least ``EDGE`` from either end);
- a slow drift: 0.25 % a commit over ``DRIFT_COMMITS`` commits (8 % in all), which has no commit
  to name: its change points are counted apart, neither false nor right.

A reported change point within ``NEAR`` commits of the injected step has found it (the first one
that does; any other is false); it is at the right commit when its index is the step's. Printed:
false alarms (false change points over all reported on A/A and step series, with counts), missed
steps per size, the share of found steps at the right commit, and the drift series in which a
change was reported. The targets (at most 5 % false, at most 3 % of 10 % steps missed, at least
90 % at the right commit) are printed beside, MET or MISSED: figures of this machine, never a
failure of ``make bench``.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import gate_accuracy_support as support
from pytest_ipu.measure import changepoints
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.results import history
from pytest_ipu.results import records
from pytest_ipu.results import schema

SECTION = "pytest-ipu history: scale and accuracy"
#: Real runs measured for the noise, and timed calls per run.
NOISE_RUNS = 400
ROUNDS = 50
#: Commits per accuracy series, series per kind, and the closest a step comes to either end.
LENGTH = 60
SERIES = 150
EDGE = 8
#: How far (commits) a change point may be from the step it is counted as finding.
NEAR = 3
STEPS = (0.03, 0.05, 0.10)
#: Runs of each commit: one, as a CI job with autosave makes, and three (a point is their median).
RUNS_PER_COMMIT = (1, 3)
DRIFT_PER_COMMIT = 0.0025
DRIFT_COMMITS = 32
#: The scale study's sizes.
LONG = 10_000
SHORT = 100
#: Timings of each implementation on the long series (alternating, the best kept: the least
#: disturbed by other jobs on the machine).
REPEATS = 3
RUNS = 1_000
BENCHMARKS = 50


def _measured_noise() -> np.ndarray:
    """Relative deviations of ``NOISE_RUNS`` real runs' medians from their median."""
    medians = []
    for _ in range(NOISE_RUNS):
        times = []
        for _ in range(ROUNDS):
            start = time.perf_counter_ns()
            support.sort()
            times.append(time.perf_counter_ns() - start)
        medians.append(statistics.median(times))
    values = np.asarray(medians, dtype=np.float64)
    return values / np.median(values) - 1.0


@dataclass
class _Tally:
    reported: int = 0
    false: int = 0
    steps: int = 0
    found: int = 0
    right: int = 0


def _score(found: list[changepoints.ChangePoint], step_at: int | None, tally: _Tally) -> None:
    tally.reported += len(found)
    hit = None
    if step_at is not None:
        tally.steps += 1
        near = [c for c in found if abs(c.index - step_at) <= NEAR]
        if near:
            hit = min(near, key=lambda c: abs(c.index - step_at))
            tally.found += 1
            tally.right += hit.index == step_at
    tally.false += sum(1 for c in found if c is not hit)


def _commits(rng: np.random.Generator, noise: np.ndarray, runs: int) -> np.ndarray:
    """``LENGTH`` commits of resampled noise around 1: each the median of ``runs`` runs, as
    ``history`` makes one point of a commit's runs."""
    points: np.ndarray = 1.0 + np.median(rng.choice(noise, (LENGTH, runs)), axis=1)
    return points


def _accuracy(noise: np.ndarray, runs: int, lines: list[str]) -> None:
    rng = np.random.default_rng(2026)
    lines.append(f"-- {runs} run(s) a commit (a point is their median):")
    total = _Tally()
    per_step = {}
    for kind in (None, *STEPS):
        tally = _Tally()
        for _ in range(SERIES):
            series = _commits(rng, noise, runs)
            step_at = None
            if kind is not None:
                step_at = int(rng.integers(EDGE, LENGTH - EDGE + 1))
                series[step_at:] *= 1.0 + kind
            _score(changepoints.detect(series), step_at, tally)
        per_step[kind] = tally
        for name in ("reported", "false", "steps", "found", "right"):
            setattr(total, name, getattr(total, name) + getattr(tally, name))
    drifted = 0
    for _ in range(SERIES):
        series = _commits(rng, noise, runs)
        start = int(rng.integers(EDGE, LENGTH - DRIFT_COMMITS))
        ramp = np.clip(np.arange(LENGTH) - start, 0, DRIFT_COMMITS) * DRIFT_PER_COMMIT
        drifted += bool(changepoints.detect(series * (1.0 + ramp)))
    aa = per_step[None]
    false_rate = total.false / total.reported if total.reported else 0.0
    lines.append(
        f"false change points: {total.false} of {total.reported} reported = {false_rate * 100:.1f}% "
        f"(target <= 5%: {'MET' if false_rate <= 0.05 else 'MISSED'}); on A/A series alone: {aa.false} in "
        f"{SERIES} series"
    )
    for step in STEPS:
        t = per_step[step]
        missed = t.steps - t.found
        target = ""
        if step == 0.10:
            target = f" (target <= 3%: {'MET' if missed <= 0.03 * t.steps else 'MISSED'})"
        lines.append(
            f"{step * 100:.0f}% steps: missed {missed} of {t.steps} = {missed / t.steps * 100:.1f}%{target}; "
            f"found at the right commit {t.right} of {t.found}"
        )
    right_rate = total.right / total.found if total.found else 0.0
    lines.append(
        f"found steps at the right commit: {total.right} of {total.found} = {right_rate * 100:.1f}% "
        f"(target >= 90%: {'MET' if right_rate >= 0.90 else 'MISSED'}; within {NEAR} commits counts as found)"
    )
    lines.append(
        f"slow drifts ({DRIFT_PER_COMMIT * 100:g}% a commit over {DRIFT_COMMITS} commits): a change reported "
        f"in {drifted} of {SERIES} series"
    )


def _scale(noise: np.ndarray, lines: list[str]) -> None:
    rng = np.random.default_rng(7)
    long = 1.0 + rng.choice(noise, LONG)
    long[LONG // 3 :] *= 1.10
    long[2 * LONG // 3 :] *= 0.95
    short = long[:SHORT]
    start = time.perf_counter()
    changepoints.detect(short)
    short_s = time.perf_counter() - start
    times: list[float] = []
    found: list[int] = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        found = [c.index for c in changepoints.detect(long)]
        times.append(time.perf_counter() - start)
    long_s = min(times)
    lines.append(
        f"analysis of a {LONG:,}-commit series: {long_s:.3f} s (target < 1 s: "
        f"{'MET' if max(times) < 1.0 else 'MISSED'}; slowest of {REPEATS} {max(times):.3f} s), "
        f"{len(found)} change point(s) at {found} (steps at {LONG // 3} and {2 * LONG // 3}); "
        f"a {SHORT}-commit series "
        f"{short_s * 1000:.1f} ms, ratio {long_s / short_s:.0f}"
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


def _load(tmp_path: Path, lines: list[str]) -> None:
    folder = tmp_path / "storage" / history.this_machine()
    folder.mkdir(parents=True)
    template = _record(0.001)
    rng = np.random.default_rng(3)
    for run in range(RUNS):
        benchmarks = []
        for number in range(BENCHMARKS):
            p50 = 0.001 * (1 + number / 10) * (1 + 0.01 * rng.standard_normal())
            record = json.loads(json.dumps(template))
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
        commit = f"{run:040x}"
        document = {
            "machine_info": {},
            "commit_info": {"id": commit, "time": "2026-01-01T00:00:00+00:00", "dirty": False},
            "datetime": f"2026-01-02T{run // 3600:02d}:{run // 60 % 60:02d}:{run % 60:02d}",
            "benchmarks": benchmarks,
        }
        (folder / f"{run + 1:04d}_{commit[:7]}_x.json").write_text(json.dumps(document))
    size = sum(p.stat().st_size for p in folder.iterdir())
    start = time.perf_counter()
    given, found = history.find_runs([str(tmp_path / "storage")], "unused")
    read = history.load(given, found)
    load_s = time.perf_counter() - start
    assert read.runs == RUNS
    assert all(len(s.points) == RUNS for s in read.series)
    lines.append(
        f"load of {RUNS:,} saved runs x {BENCHMARKS} benchmarks ({size / 1e6:.0f} MB): {load_s:.2f} s into "
        f"{len(read.series)} series of {RUNS} commits ({load_s / RUNS * 1000:.2f} ms a run)"
    )


def test_history_scale_and_accuracy(tmp_path: Path, study_report: dict[str, list[str]]) -> None:
    """Measure and print (the module docstring): analysis and load times, accuracy rates with counts."""
    lines = study_report.setdefault(SECTION, [])
    noise = _measured_noise()
    _scale(noise, lines)
    _load(tmp_path, lines)
    lines.append(
        f"noise: {NOISE_RUNS} real runs (median of {ROUNDS} calls of a numpy sort each), relative spread "
        f"sd {noise.std() * 100:.2f}%, 5-95% {np.percentile(noise, 5) * 100:+.2f}% to "
        f"{np.percentile(noise, 95) * 100:+.2f}%; {SERIES} series of {LENGTH} commits per kind"
    )
    for runs in RUNS_PER_COMMIT:
        _accuracy(noise, runs, lines)
    # The experiment itself worked: every kind of series was analysed.
    assert len(lines) == 3 + 7 * len(RUNS_PER_COMMIT)
