"""The change point search (``measure.changepoints``): the statistic against its definition, steps
found at the right commit in short and long series with one or several runs a commit, every run
counted, none on pure noise across many series at the stated rate, pooled evidence at a commit,
what a noisy series can see, determinism, the levels and interval of a change, and bad input.
Every series is seeded: each assertion holds for these series, and would fail for a search that
folded runs, ignored noise or tested each series alone."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from pytest_ipu.measure import changepoints
from pytest_ipu.measure.changepoints import Sample


def _noise(n: int, seed: int, sd: float = 0.02) -> np.ndarray:
    return np.exp(np.random.default_rng(seed).normal(0.0, sd, n))


def test_t_is_students_pooled_two_sample_t_of_the_logarithms() -> None:
    x = np.log(_noise(17, seed=3))
    splits = np.arange(3, 15)
    t = changepoints._t(x, 0, 17, splits)
    for split, value in zip(splits, t):
        left, right = x[:split], x[split:]
        pooled = (((left - left.mean()) ** 2).sum() + ((right - right.mean()) ** 2).sum()) / (17 - 2)
        expected = (right.mean() - left.mean()) / math.sqrt(pooled * (1 / len(left) + 1 / len(right)))
        assert value == pytest.approx(expected, rel=1e-9)


def test_a_25_percent_step_at_the_6th_of_10_commits_with_one_run_each_is_found_there() -> None:
    rng = np.random.default_rng(10)
    x = np.concatenate([rng.uniform(0.80, 0.85, 5), rng.uniform(1.04, 1.07, 5)])
    [found] = changepoints.detect(x)
    assert found.index == 5
    assert found.low < found.change < found.high
    assert found.low > 0.2
    assert found.high < 0.35


def test_a_change_at_the_3rd_of_11_commits_with_3_runs_each_is_found_there() -> None:
    rng = np.random.default_rng(11)
    commits = [c for c in range(11) for _ in range(3)]
    x = np.exp(rng.normal(0.0, 0.03, 33)) * np.where(np.asarray(commits) >= 2, 0.75, 1.0)
    [found] = changepoints.detect(x, commits)
    assert found.index == 2


def test_runs_of_one_commit_are_never_split() -> None:
    # Commit 1 holds six runs, the last three at a new level: the change can only start at commit 2.
    commits = [0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2]
    x = [1.0, 1.01, 0.99, 1.0, 1.01, 0.99, 1.5, 1.51, 1.49, 1.5, 1.5, 1.51]
    assert all(c.index in (1, 2) for c in changepoints.detect(x, commits))


@pytest.mark.parametrize(("n", "at"), [(20, 10), (30, 4), (30, 26), (60, 31)])
def test_a_step_is_found_at_its_index(n: int, at: int) -> None:
    x = _noise(n, seed=n + at)
    x[at:] *= 1.10
    [found] = changepoints.detect(x)
    assert found.index == at
    assert found.p_value <= changepoints.FDR
    assert found.change == pytest.approx(0.10, abs=0.03)
    assert found.low < 0.10 < found.high


def test_two_steps_each_found() -> None:
    x = _noise(90, seed=6)
    x[30:] *= 1.10
    x[60:] *= 0.85
    assert [c.index for c in changepoints.detect(x)] == [30, 60]


@pytest.mark.parametrize("at", [100, 127, 1900])
def test_a_long_series_finds_its_step_once_with_the_levels_of_each_side(at: int) -> None:
    x = _noise(2000, seed=at)
    x[at:] *= 1.10
    found = changepoints.detect(x)
    assert [c.index for c in found] == [at]
    # The levels are the geometric means of the whole segments on each side.
    assert found[0].before == pytest.approx(float(np.exp(np.log(x[:at]).mean())))
    assert found[0].after == pytest.approx(float(np.exp(np.log(x[at:]).mean())))


def test_pure_noise_across_many_series_gives_about_the_stated_share_of_false_histories() -> None:
    """40 seeded histories of 50 noise series of 60 runs each: Benjamini-Hochberg over every test
    keeps a false change point out of about 95 % of them; more than 6 of 40 would be a rate of 15 %."""
    false_histories = 0
    for history in range(40):
        samples = [Sample(list(_noise(60, seed=1000 * history + s)), list(range(60))) for s in range(50)]
        found, _ = changepoints.find(samples)
        false_histories += any(found)
    assert false_histories <= 6


def test_a_step_among_many_noise_series_is_found_and_nothing_else() -> None:
    samples = [Sample(list(_noise(30, seed=s)), list(range(30))) for s in range(300)]
    stepped = _noise(30, seed=999)
    stepped[15:] *= 1.15
    samples.append(Sample(list(stepped), list(range(30))))
    found, _ = changepoints.find(samples)
    assert [(s, [c.index for c in f]) for s, f in enumerate(found) if f] == [(300, [15])]


def test_benchmarks_stepping_at_one_commit_are_found_with_the_commits_pooled_evidence() -> None:
    ids = [f"c{c}" for c in range(12)]
    samples = []
    for s in range(12):
        x = _noise(12, seed=40 + s, sd=0.03)
        # One strong step, and eleven of 5 % that a single series of 12 runs seldom shows alone.
        x[6:] *= 0.70 if s == 0 else 0.95
        samples.append(Sample(list(x), list(range(12)), ids))
    alone = [bool(changepoints.find([s])[0][0]) for s in samples[1:]]
    found, _ = changepoints.find(samples)
    assert [(c.index, c.pooled) for c in found[0]] == [(6, False)]
    pooled = [f for f in found[1:] if f and f[0].pooled]
    # Each found with the strong series' commit is found there, and more are found than alone.
    assert pooled
    assert all([c.index for c in f] == [6] for f in pooled)
    assert sum(bool(f) for f in found[1:]) > sum(alone)


def test_a_noisy_series_finds_no_step_and_says_what_step_it_could_see() -> None:
    x = np.exp(np.random.default_rng(7).normal(0.0, 0.5, 30))
    x[15:] *= 1.10
    [found], [noise] = changepoints.find([Sample(list(x), list(range(30)))])
    assert found == []
    assert noise.sd == pytest.approx(0.5, rel=0.3)
    assert noise.smallest_step() > 0.5
    needed = noise.runs_needed(0.10)
    # With the runs it needs, at the noise it has, the same step is found.
    y = np.exp(np.random.default_rng(8).normal(0.0, noise.sd, needed))
    y[needed // 2 :] *= 1.10
    [found], _ = changepoints.find([Sample(list(y), list(range(needed)))])
    [step] = found
    assert abs(step.index - needed // 2) <= needed // 50


def test_smallest_step_and_runs_needed_agree() -> None:
    noise = changepoints.Noise(0.02, 40)
    step = noise.smallest_step(20, 20)
    assert noise.runs_needed(step) in (38, 40, 42)
    assert noise.smallest_step(2, 38) == math.inf


def test_the_same_series_gives_the_same_answer() -> None:
    x = _noise(300, seed=9)
    x[150:] *= 1.10
    first = changepoints.detect(x)
    assert first == changepoints.detect(x)
    assert [c.index for c in first] == [150]


def test_a_series_too_short_to_split_has_none() -> None:
    assert changepoints.detect([1.0, 1.0, 1.0, 2.0, 2.0]) == []
    assert changepoints.detect([]) == []


def test_a_drop_is_a_negative_change() -> None:
    x = _noise(24, seed=2)
    x[12:] *= 0.5
    [found] = changepoints.detect(x)
    assert found.change == pytest.approx(-0.5, abs=0.05)
    assert found.high < 0


@pytest.mark.parametrize(
    ("values", "commits", "message"),
    [
        ([1.0, float("nan")], None, "finite numbers > 0"),
        ([1.0, 0.0], None, "finite numbers > 0"),
        ([1.0, -1.0], None, "finite numbers > 0"),
        ([1.0, 2.0], [0], "same length"),
        ([1.0, 2.0], [1, 0], "numbered from 0"),
    ],
)
def test_bad_input_is_refused(values: list[float], commits: list[int] | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        changepoints.detect(values, commits)


@pytest.mark.parametrize("at", [12, 25, 40])
def test_a_spike_of_the_old_level_just_before_a_step_is_not_taken_as_its_start(at: int) -> None:
    # Benchmark noise with two humps: most runs near the level, one in eight slowed by about 10 %
    # (a busy machine). A slowed run just before a 10 % slowdown looks like the new level's first
    # point; the commit that caused the slowdown is still ``at``.
    rng = np.random.default_rng(at)
    noise = rng.normal(0.0, 0.002, 60) + np.where(rng.random(60) < 0.125, 0.107, 0.0)
    noise[at - 1] = 0.107 + abs(noise[at - 1] % 0.002)
    noise[at] = 0.0
    x = (1.0 + noise) * np.where(np.arange(60) >= at, 1.10, 1.0)
    assert [c.index for c in changepoints.detect(x)] == [at]


def test_a_run_preempted_for_a_time_slice_neither_hides_a_step_nor_makes_one() -> None:
    x = _noise(24, seed=31)
    x[12:] *= 1.5
    # Two calls that took a whole time slice of a busy machine: a hundred times their usual time.
    x[4] *= 100.0
    x[18] *= 100.0
    assert [c.index for c in changepoints.detect(x)] == [12]
    steady = _noise(24, seed=32)
    steady[[3, 15, 16]] *= 80.0
    assert changepoints.detect(steady) == []
    # Those runs, and only those, are left out of the search as disturbed.
    assert list(np.flatnonzero(changepoints.disturbed(np.log(steady)))) == [3, 15, 16]


def test_series_that_step_together_are_placed_at_one_commit_though_one_alone_is_a_commit_late() -> None:
    ids = [f"c{c}" for c in range(20)]
    samples = []
    for s in range(6):
        x = _noise(20, seed=70 + s, sd=0.02)
        x[10:] *= 0.75
        samples.append(Sample(list(x), list(range(20)), ids))
    # The first benchmark's run of the commit that made it faster was slowed by 20 % on a busy
    # machine, nearer the old level than the new: alone, its change shows a commit late.
    late = np.asarray(samples[0].values)
    late[10] *= 1.2
    samples[0] = Sample(list(late), list(range(20)), ids)
    [alone], _ = changepoints.find([samples[0]])
    assert [c.index for c in alone] == [11]
    found, _ = changepoints.find(samples)
    assert [[c.index for c in f] for f in found] == [[10]] * 6


def test_a_change_of_its_own_a_commit_after_an_event_stays_where_its_runs_put_it() -> None:
    ids = [f"c{c}" for c in range(20)]
    samples = []
    for s in range(6):
        x = _noise(20, seed=80 + s, sd=0.02)
        # Five benchmarks 25 % faster at c10; the sixth, by another change, at c11.
        x[10 if s < 5 else 11 :] *= 0.75
        samples.append(Sample(list(x), list(range(20)), ids))
    found, _ = changepoints.find(samples)
    assert [[c.index for c in f] for f in found] == [[10]] * 5 + [[11]]


def _two_humped(commits: int, slow_share: Sequence[float], seed: int) -> tuple[list[float], list[int]]:
    """Three single calls a commit of a benchmark whose calls take about 1 ms or about 13 ms: slow
    with the chance ``slow_share[c]`` at commit ``c``."""
    rng = np.random.default_rng(seed)
    values, numbers = [], []
    for commit in range(commits):
        for _ in range(3):
            slow = rng.random() < slow_share[commit]
            values.append(float((13e-3 if slow else 1.2e-3) * np.exp(rng.normal(0.0, 0.02))))
            numbers.append(commit)
    return values, numbers


def test_a_two_humped_benchmark_slowed_more_often_is_no_change_but_a_step_of_its_code_is() -> None:
    """40 seeded histories of 24 commits: slowed a fifth of the time up to c12 and two fifths from
    then on (a change of the machine's noise, not of the code) gives a change point in few of them;
    the code 50 % slower from c12 in the same noise (every fast call moves) is found at c12 in
    nearly all."""
    noise_changes = steps_found = 0
    for seed in range(40):
        values, commits = _two_humped(24, [1 / 5] * 12 + [2 / 5] * 12, seed)
        noise_changes += bool(changepoints.detect(values, commits))
        values, commits = _two_humped(24, [1 / 5] * 24, seed)
        stepped = [v * (1.5 if c >= 12 else 1.0) for v, c in zip(values, commits)]
        steps_found += [c.index for c in changepoints.detect(stepped, commits)] == [12]
    assert noise_changes <= 4
    assert steps_found >= 36


def test_a_rate_is_judged_on_its_high_side() -> None:
    """The throughputs of the two-humped benchmark above (one over its times): a run slowed is a lower
    rate, so the level of a rate is its high side; read as a time, the slow mode would be the level."""
    noise_changes = steps_found = read_as_time = 0
    for seed in range(40):
        values, commits = _two_humped(24, [1 / 5] * 12 + [2 / 5] * 12, seed)
        rates = [1.0 / v for v in values]
        [found], _ = changepoints.find([Sample(rates, commits, higher_better=True)])
        noise_changes += bool(found)
        [found], _ = changepoints.find([Sample(rates, commits)])
        read_as_time += bool(found)
        values, commits = _two_humped(24, [1 / 5] * 24, seed)
        stepped = [1.0 / (v * (1.5 if c >= 12 else 1.0)) for v, c in zip(values, commits)]
        [found], _ = changepoints.find([Sample(stepped, commits, higher_better=True)])
        steps_found += [c.index for c in found] == [12]
    assert noise_changes <= 4
    assert steps_found >= 36
    assert read_as_time > 2 * noise_changes
