"""How many more measurements an INCONCLUSIVE verdict's advice names (``decide._Evidence.needed``):
found by bisection over the count, the same count as the loop over every count it replaces."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest

from pytest_ipu.measure import stats
from pytest_ipu.results import decide


@pytest.fixture(autouse=True)
def memoised_quantiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """``stats.t_isf`` memoised: the reference loop asks for up to a thousand quantiles a case."""
    monkeypatch.setattr(stats, "t_isf", functools.lru_cache(maxsize=None)(stats.t_isf))


def _above(x: float) -> float:
    """The next float above ``x`` (``math.nextafter`` is Python 3.9's)."""
    return float(np.nextafter(x, np.inf))


def _loop(evidence: decide._Evidence, gap: float) -> int | None:
    """The count by the loop over every count from ``n + 1`` to ``ADVICE_MAX`` (the reference), with
    each count's half-width written out."""
    if evidence.n < 1 or evidence.scale <= 0.0:
        return None
    for k in range(evidence.n + 1, decide.ADVICE_MAX + 1):
        if evidence.one_run:
            sd = evidence.scale / math.sqrt(1.0 + 1.0 / evidence.n)
            reach = stats.t_isf(evidence.alpha, k - 1) * sd * math.sqrt(1.0 + 1.0 / k)
        else:
            df = evidence.df + k - evidence.n
            reach = stats.t_isf(evidence.alpha, df) * evidence.scale * math.sqrt(evidence.n / k)
        if reach < gap:
            return k
    return None


def _cases() -> list[tuple[decide._Evidence, float]]:
    """Evidence of each kind over counts, spreads and levels, each with gaps from wide (the next
    count decides) to narrow (no count up to ``ADVICE_MAX`` does), and gaps exactly at a count's
    half-width (that count does not decide: the interval must fall below the gap)."""
    cases = []
    for one_run, n, scale, alpha in itertools.product(
        (True, False), (1, 2, 3, 10, 999), (0.003, 0.05, 0.4), (0.01, 0.05)
    ):
        if one_run and n < decide.HISTORY_MIN:
            continue
        # The repeat test's degrees of freedom: n a side (2n - 2), or n against one repeat (n - 1).
        for df in (n - 1, 2 * n - 2) if not one_run else (n - 1,):
            if df < 1:
                continue
            evidence = decide._Evidence(scale, df, alpha, n, one_run)
            gaps = [scale * f for f in (10.0, 2.0, 1.0, 0.5, 0.2, 0.1, 0.07, 0.05, 0.03, 0.01)]
            gaps += [evidence.reach(k) for k in (n + 1, n + 2, 2 * n + 1, decide.ADVICE_MAX) if k > n]
            gaps += [_above(g) for g in gaps[-2:]]
            cases += [(evidence, g) for g in gaps]
    return cases


def test_the_bisection_names_the_count_the_loop_over_every_count_names() -> None:
    cases = _cases()
    found = [(e, g, e.needed(g), _loop(e, g)) for e, g in cases]
    assert [(e, g, got) for e, g, got, want in found if got != want] == []
    # The grid reaches every kind of answer: the next count, a count far above, and none at all.
    answers = [got for _, _, got, _ in found]
    assert None in answers
    assert any(got is not None and got == e.n + 1 for e, _, got, _ in found)
    assert any(got is not None and got > 2 * e.n + 10 for e, _, got, _ in found)


def test_a_gap_exactly_at_a_counts_half_width_needs_one_more() -> None:
    evidence = decide._Evidence(0.05, 4, decide.ALPHA, 5, False)
    assert evidence.needed(evidence.reach(12)) == 13
    assert evidence.needed(_above(evidence.reach(12))) == 12


def test_the_half_width_falls_with_every_count() -> None:
    """What the bisection rests on: more measurements never widen the interval."""
    for one_run in (True, False):
        evidence = decide._Evidence(0.05, 2, decide.ALPHA, 3, one_run)
        widths = [evidence.reach(k) for k in range(4, decide.ADVICE_MAX + 1)]
        assert all(a > b for a, b in zip(widths, widths[1:]))


def test_no_count_without_a_spread_or_past_the_most_the_advice_counts() -> None:
    assert decide._Evidence(0.0, 4, decide.ALPHA, 3, False).needed(0.01) is None
    assert decide._Evidence(0.05, 4, decide.ALPHA, 0, False).needed(0.01) is None
    full = decide._Evidence(0.05, decide.ADVICE_MAX - 1, decide.ALPHA, decide.ADVICE_MAX, True)
    assert full.needed(1.0) is None  # no count above ADVICE_MAX is named
