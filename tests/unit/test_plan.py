"""The time plan (``run.plan``): the one place a benchmark's budget and cap are computed."""

from __future__ import annotations

import pytest

from pytest_ipu.errors import ConfigError
from pytest_ipu.pytest_plugin.options import resolve_settings
from pytest_ipu.run.plan import RoundsPolicy
from pytest_ipu.run.plan import TimeCap
from pytest_ipu.run.plan import TimeCapError
from pytest_ipu.run.plan import rounds_policy

#: The default cap: three times the budget.
THREE_X = TimeCap(factor=3.0)


def _policy(
    *,
    max_time_s: float = 2.0,
    cap: TimeCap = THREE_X,
    rounds: int | None = None,
    share: int = 1,
    min_window_s: float | None = None,
) -> RoundsPolicy:
    return rounds_policy(
        max_time_s=max_time_s,
        min_rounds=5,
        cap=cap,
        rounds=rounds,
        warmup_rounds=3,
        share=share,
        min_window_s=min_window_s,
    )


def test_a_factor_cap_is_that_multiple_of_the_budget() -> None:
    policy = _policy(cap=TimeCap(factor=2.5))
    assert (policy.max_time_s, policy.cap_s, policy.min_rounds) == (2.0, 5.0, 5)


def test_repeats_share_the_budget_the_fixed_cap_and_the_minimum_rounds() -> None:
    policy = _policy(share=3, cap=TimeCap(factor=None, seconds=9.0))
    assert policy.max_time_s == pytest.approx(2.0 / 3)
    assert policy.cap_s == pytest.approx(3.0)
    assert policy.min_rounds == 2  # 5 / 3 rounded up: three repeats make at least the 5 asked for


def test_a_power_window_lengthens_the_budget_and_a_factor_cap_with_it() -> None:
    policy = _policy(max_time_s=0.1, min_window_s=1.0, cap=TimeCap(factor=3.0))
    assert (policy.max_time_s, policy.cap_s) == (1.0, 3.0)  # lengthened from 0.1 s


def test_a_budget_already_long_enough_is_not_lengthened() -> None:
    assert _policy(min_window_s=1.0).max_time_s == 2.0


def test_fixed_rounds_have_no_cap_and_are_not_lengthened() -> None:
    policy = _policy(rounds=10, max_time_s=0.1, min_window_s=1.0)
    assert (policy.rounds, policy.cap_s, policy.max_time_s) == (10, None, 0.1)


def test_a_fixed_cap_below_the_budget_is_an_error_naming_both() -> None:
    with pytest.raises(
        TimeCapError, match=r"--ipu-max-time-cap=1s is shorter than the time budget 2s it caps"
    ):
        _policy(cap=TimeCap(factor=None, seconds=1.0))


def test_a_fixed_cap_below_the_lengthened_budget_is_an_error_saying_why_it_grew() -> None:
    with pytest.raises(
        TimeCapError, match=r"budget 1s \(lengthened from 0.5s to the power sensor's shortest window\)"
    ):
        _policy(max_time_s=0.5, min_window_s=1.0, cap=TimeCap(factor=None, seconds=0.8))


def test_the_options_refuse_a_cap_below_the_budget_before_any_test() -> None:
    with pytest.raises(ConfigError, match=r"--ipu-max-time-cap=1s is shorter than the time budget 2s"):
        resolve_settings({"ipu_max_time": "2", "ipu_max_time_cap": "1s"}, {}, {})


def test_share_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="share must be >= 1"):
        _policy(share=0)
