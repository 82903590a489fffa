"""The job's verdict: every gate of a CI job as one family, so that unchanged code rarely FAILs it.

Each gate's FAIL is a one-sided test whose p is ``Verdict.p_fail`` (``decide.p_fail``); Holm's
step-down over the job's tests at ``JOB_ALPHA`` keeps a FAIL only where it rejects (it rejects all
that Bonferroni would, and more), else makes it INCONCLUSIVE. ``size`` may exceed the tests at hand:
with ``K`` at least the whole family, the first wrongly rejected test of any part has at most
``K - m0`` rejections before it (``m0`` the tests within their threshold), so its p is at most
``job_alpha / m0``, the step of Holm's own proof; with ``K`` fixed, adding tests never undoes a
rejection. So the in-run gate decides each benchmark as it is published, ``pytest-ipu ab`` each look.

The rule is documented in docs/ci.md (section "The job's verdict").
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from typing import Final

if typing.TYPE_CHECKING:
    from pytest_ipu.results.decide import Verdict

#: The default job-level alpha for FAIL: unchanged code FAILs a job at most this often.
JOB_ALPHA: Final = 0.01
#: How the advice of a FAIL made INCONCLUSIVE by the job's rule begins.
NOT_AT_JOB_LEVEL: Final = "not beyond the threshold at the job's"


def holm(p_values: Sequence[float], alpha: float, size: int = 0) -> list[bool]:
    """Holm's step-down (the module docstring): for each p, whether it is rejected at family-wise
    level ``alpha`` in a family of ``max(size, len(p_values))`` tests."""
    family = max(size, len(p_values))
    rejected = [False] * len(p_values)
    for rank, index in enumerate(sorted(range(len(p_values)), key=lambda i: p_values[i])):
        if p_values[index] > alpha / (family - rank):
            break
        rejected[index] = True
    return rejected


def tested(verdicts: Sequence[Verdict]) -> int:
    """How many of ``verdicts`` are tests of "within the threshold" (they have a ``p_fail``)."""
    return sum(v.p_fail is not None for v in verdicts)


def adjust(verdicts: Sequence[Verdict], alpha: float = JOB_ALPHA, size: int = 0) -> tuple[Verdict, ...]:
    """The job's verdicts (the module docstring's rule): each FAIL whose test Holm does not reject
    at ``alpha`` over a family of ``max(size, tested(verdicts))`` becomes INCONCLUSIVE, naming why;
    every other verdict is returned as it is, in order. Raises ``ValueError`` for ``alpha`` outside
    (0, 0.5)."""
    # Imported here: decide loads numpy, and the command's parser reads this module's default level.
    from pytest_ipu.results import decide

    decide.check_alpha(alpha)
    indices = [i for i, v in enumerate(verdicts) if v.p_fail is not None]
    p_values = [float(verdicts[i].p_fail or 0.0) for i in indices]
    family = max(size, len(p_values))
    rejected = dict(zip(indices, holm(p_values, alpha, family)))
    # The rank of each test, for the step its p had to pass.
    rank = {
        index: r for r, index in enumerate(sorted(indices, key=lambda i: float(verdicts[i].p_fail or 0.0)))
    }
    out = []
    for i, verdict in enumerate(verdicts):
        if not verdict.failed or verdict.p_fail is None or rejected[i]:
            out.append(verdict)
            continue
        step = alpha / (family - rank[i])
        if verdict.p_fail > step:
            holm_said = f"is above Holm's step {step:.2g} ({level(alpha)} / {family - rank[i]})"
        else:
            holm_said = f"is within its Holm step ({step:.2g}), but a smaller p before it was not"
        why = (
            f"{NOT_AT_JOB_LEVEL} {level(alpha)} family-wise level: its one-sided "
            f"p={verdict.p_fail:.2g} of 'within the threshold' {holm_said}, over {family} gate "
            "checks"
        )
        out.append(dataclasses.replace(verdict, outcome=decide.INCONCLUSIVE, advice=why))
    return tuple(out)


def level(alpha: float) -> str:
    """``1%`` for 0.01: a level as a percentage."""
    return f"{alpha * 100:.3g}%"


def describe(alpha: float, family: int) -> str:
    """How the job's verdict was reached, for a summary line."""
    return f"a FAIL is one at the {level(alpha)} family-wise level (Holm over {family} gate check(s))"
