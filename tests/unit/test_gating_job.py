"""The in-run gate decides each benchmark's test as it is published, with the job in mind
(``GateCheck``): a FAIL fails its test when it is beyond the threshold at the job's level over the
verdicts so far, in the family of gate checks planned at collection; later benchmarks can make an
earlier FAIL the job's, never undo one. The gate runner is replaced by verdicts given in order."""

from __future__ import annotations

import types
from collections.abc import Sequence

from pytest_ipu.pytest_plugin.gating import GateCheck
from pytest_ipu.pytest_plugin.settings import Settings
from pytest_ipu.results import decide
from pytest_ipu.results import gates
from pytest_ipu.results.decide import Verdict

GATE = gates.parse("latency.p50:+5%")


def _fail(name: str, p: float) -> Verdict:
    return Verdict(GATE, name, decide.FAIL, 1.0, 1.2, 0.2, (1.06, 1.3), "run-to-run", "", p, "spread")


def _gate_check(planned: int, verdicts: Sequence[Verdict]) -> GateCheck:
    """A run of ``planned`` gated benchmarks (one gate each), whose gates decide ``verdicts`` in order."""
    check = GateCheck(Settings(gates=(GATE,), inconclusive="warn", job_alpha=0.01), [])
    check._planned = {f"t.py::test_{i}": () for i in range(planned)}
    given = iter(verdicts)

    def decided(measured: object, launch: bool = False) -> tuple[Verdict, ...]:
        verdict = next(given)
        check.gate_verdicts.append(verdict)
        return (verdict,)

    check._check = decided  # type: ignore[method-assign]
    return check


def _publish(check: GateCheck, name: str) -> list[str]:
    return check.check_item(types.SimpleNamespace(fullname=name))  # type: ignore[arg-type]


def test_a_fail_of_the_gate_only_does_not_fail_its_test_in_a_large_job() -> None:
    check = _gate_check(100, [_fail("test_0", 0.003), _fail("test_1", 1e-7)])
    # p=0.003 is past Holm's first step over the 100 planned checks (0.01 / 100): not the job's.
    assert _publish(check, "test_0") == []
    assert _publish(check, "test_1")[0].startswith("pytest-ipu gate FAILED: test_1 latency.p50")
    assert [v.outcome for v in check.verdicts] == [decide.INCONCLUSIVE, decide.FAIL]
    assert "family-wise level" in check.verdicts[0].advice
    assert check.failed  # the job FAILs, on test_1


def test_a_later_benchmark_can_make_an_earlier_fail_the_jobs() -> None:
    check = _gate_check(2, [_fail("test_0", 0.008), _fail("test_1", 0.001)])
    # Alone so far, 0.008 is past Holm's first step over the 2 planned checks (0.005): its test passes.
    assert _publish(check, "test_0") == []
    # With 0.001 first (0.005), 0.008 meets the second step (0.01): both are the job's FAILs.
    assert len(_publish(check, "test_1")) == 1
    assert [v.outcome for v in check.verdicts] == [decide.FAIL, decide.FAIL]
    assert check.failed
