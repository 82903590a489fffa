"""The job's verdict (``results.family``): Holm's step-down over the FAIL tests of every gate of a
job, checked by seeded simulations of the decision rule on normal noise (no timing)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_ipu.results import decide
from pytest_ipu.results import family
from pytest_ipu.results import gates
from pytest_ipu.results.decide import Verdict

GATE = gates.parse("latency.p50:+5%")
#: Baseline runs per benchmark in the simulations, as the in-run gate's run-to-run test takes them.
RUNS = 10


def test_the_fail_side_p_is_below_alpha_exactly_when_the_gate_fails() -> None:
    for gate in (GATE, gates.parse("throughput:-5%")):
        sign = decide.orient(gate)
        for shift in (0.0, 0.03, 0.06, 0.08, 0.12, 0.3):
            for scale in (0.005, 0.02):
                judged = decide.judge(gate, sign * shift, scale, 9, decide.ALPHA)
                assert judged.p_fail is not None
                assert (judged.outcome == decide.FAIL) == (judged.p_fail < decide.ALPHA), (gate, shift, scale)
                assert judged.p_fail == pytest.approx(decide.p_fail(gate, sign * shift, scale, 9))


def test_the_fail_side_p_of_an_absolute_gate_matches_its_verdict() -> None:
    bound = gates.parse("latency.p50<2ms")
    for centre in (1.5e-3, 1.95e-3, 2.1e-3, 3e-3):
        logs = [math.log(centre * f) for f in (0.98, 1.0, 1.02)]
        judged = decide.judge_bound(bound, logs, decide.ALPHA)
        assert judged.p_fail is not None
        assert (judged.outcome == decide.FAIL) == (judged.p_fail <= decide.ALPHA), centre


def test_holm_steps_down_and_stops_at_the_first_p_past_its_step() -> None:
    # Steps at alpha 0.05 over 4: 0.0125, 0.0167, 0.025, 0.05; 0.02 is past the second: stop there.
    assert family.holm([0.3, 0.001, 0.04, 0.02], 0.05) == [False, True, False, False]
    assert family.holm([0.3, 0.001, 0.04, 0.015], 0.05) == [False, True, False, True]
    assert family.holm([0.03, 0.001, 0.02, 0.015], 0.05) == [True, True, True, True]
    # A larger family (tests not at hand) makes each step stricter.
    assert family.holm([0.001, 0.015], 0.05, size=40) == [True, False]
    assert family.holm([], 0.01) == []


def test_adding_tests_to_a_fixed_family_never_undoes_a_rejection() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        p = list(rng.uniform(0, 0.002, 30) ** rng.uniform(0.5, 2.0))
        part = rng.integers(1, 30)
        early = family.holm(p[:part], 0.01, size=30)
        late = family.holm(p, 0.01, size=30)
        assert all(late[i] for i in range(part) if early[i])


def _verdict(name: str, p: float | None, outcome: decide.Outcome | None = None) -> Verdict:
    if outcome is None:
        outcome = decide.FAIL if p is not None and p < decide.ALPHA else decide.INCONCLUSIVE
    return Verdict(
        GATE, name, outcome, 1.0, 1.1, 0.1, (1.06, 1.14), "run-to-run", "", p, "spread 2.0% between runs"
    )


def test_a_fail_beyond_the_gate_only_is_inconclusive_naming_why() -> None:
    verdicts = [_verdict("test_slow", 0.003), *(_verdict(f"test_{i}", 0.5) for i in range(99))]
    adjusted = family.adjust(verdicts, 0.01)
    assert adjusted[0].outcome == decide.INCONCLUSIVE
    assert adjusted[0].advice.startswith("not beyond the threshold at the job's 1% family-wise level")
    assert "over 100 gate checks" in adjusted[0].advice
    assert adjusted[1:] == tuple(verdicts[1:])
    # Alone in its job it is beyond the job's level too: a FAIL.
    assert family.adjust(verdicts[:1], 0.01)[0].outcome == decide.FAIL


def test_a_fail_that_is_no_test_stays_a_fail() -> None:
    missing = Verdict(GATE, "t", decide.FAIL, 1.0, None, None, None, "no value in the current record: x")
    assert family.adjust([missing, *(_verdict(f"t{i}", 0.2) for i in range(50))], 0.01)[0].failed


def _simulated_jobs(jobs: int, benchmarks: int, truth: float, seed: int) -> tuple[int, int]:
    """``jobs`` jobs of ``benchmarks`` benchmarks, each gated by ``GATE`` against ``RUNS`` baseline
    runs with normal run-to-run noise (3 % sd on the log scale) and a true change of ``truth`` (log
    scale): how many jobs some gate FAILs by the gate's own rule, and by the job's rule."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, 0.03, (jobs, benchmarks, RUNS))
    now = rng.normal(truth, 0.03, (jobs, benchmarks))
    shift = now - base.mean(axis=2)
    scale = base.std(axis=2, ddof=1) * math.sqrt(1.0 + 1.0 / RUNS)
    gate_red = job_red = 0
    for j in range(jobs):
        verdicts = [
            _verdict(f"test_{b}", decide.p_fail(GATE, float(shift[j, b]), float(scale[j, b]), RUNS - 1))
            for b in range(benchmarks)
        ]
        gate_red += any(v.failed for v in verdicts)
        job_red += any(v.failed for v in family.adjust(verdicts, family.JOB_ALPHA))
    return gate_red, job_red


def test_unchanged_code_fails_a_job_of_100_benchmarks_at_most_1_percent() -> None:
    # The worst case of "within the threshold": every benchmark exactly 5 % slower, at its gate's
    # threshold. Each gate alone FAILs it 5 % of the time, so nearly every job would be red.
    jobs = 1000
    gate_red, job_red = _simulated_jobs(jobs, 100, math.log1p(0.05), seed=11)
    assert gate_red > 0.9 * jobs
    # Holm keeps it at 1 %: allow three binomial standard deviations over 1,000 jobs.
    assert job_red <= jobs * (0.01 + 3 * math.sqrt(0.01 * 0.99 / jobs))
    # Unchanged code itself (no change at all) is far inside.
    _, unchanged = _simulated_jobs(300, 100, 0.0, seed=12)
    assert unchanged <= 3


def test_a_clear_regression_in_one_of_20_still_fails_naming_it() -> None:
    rng = np.random.default_rng(5)
    verdicts = []
    for b in range(20):
        name = f"test_bench[{b}]"
        base = rng.normal(0.0, 0.01, RUNS)
        now = rng.normal(math.log(1.3) if b == 13 else 0.0, 0.01)
        shift = now - float(base.mean())
        scale = float(base.std(ddof=1)) * math.sqrt(1.0 + 1.0 / RUNS)
        judged = decide.judge(GATE, shift, scale, RUNS - 1, decide.ALPHA)
        verdicts.append(judged.verdict(GATE, name, 1e-3, 1e-3 * math.exp(shift), "run-to-run"))
    adjusted = family.adjust(verdicts, family.JOB_ALPHA)
    assert [v.benchmark for v in adjusted if v.failed] == ["test_bench[13]"]
    assert all(v.passed for v in adjusted if v.benchmark != "test_bench[13]")
    assert adjusted[13].line().startswith("test_bench[13] latency.p50: ")


def test_the_level_must_be_a_level() -> None:
    with pytest.raises(ValueError, match="alpha must be within"):
        family.adjust([], 0.5)
