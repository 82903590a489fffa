"""The call timeout (--ipu-call-timeout) ends a benchmark whose model hangs, naming the call.

Each run is a subprocess with a hang guard (``timeout=120``): without the timeout enforced the inner
run would never end. No elapsed time is asserted: the failure line itself proves the order of
events (the model blocked, the watchdog fired, the test failed, the next test ran).
"""

from __future__ import annotations

import pytest

HANGS = """
import threading
import time

CALLS = [0]


def blocks_on(n, wait):
    def model(*args):
        CALLS[0] += 1
        if CALLS[0] == n:
            wait()
    return model


def test_hangs_in_round_20(ipu_benchmark):
    # Call 1 is the first call, 2-3 the warm-up calls: call 23 is timed round 20.
    ipu_benchmark(blocks_on(23, threading.Event().wait), (), rounds=50, warmup_rounds=2)


def test_sleeps_on_its_first_call(ipu_benchmark):
    CALLS[0] = 0
    ipu_benchmark(blocks_on(1, lambda: time.sleep(3600)), ())


def test_runs_after_the_hangs(ipu_benchmark):
    assert ipu_benchmark(lambda: None, (), rounds=3).rounds == 3
"""


def test_a_hanging_model_fails_its_test_naming_the_round_and_the_run_goes_on(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_hangs=HANGS)
    result = pytester.runpytest_subprocess("--ipu-call-timeout=1s", timeout=120)
    result.assert_outcomes(failed=2, passed=1)
    # The failure report is the one line, right under the test's header.
    result.stdout.fnmatch_lines(
        [
            "*_ test_hangs_in_round_20 _*",
            "pytest-ipu: timed round 20 of repeat 1 was still running after the call timeout of 1s "
            "(--ipu-call-timeout, or the ipu marker's call_timeout=): the model hangs or its calls are "
            "slower than that; if they really are, raise it, e.g. --ipu-call-timeout=30min",
            "*_ test_sleeps_on_its_first_call _*",
            "pytest-ipu: the first call of repeat 1 was still running after the call timeout of 1s*",
        ]
    )


def test_the_marker_sets_one_tests_timeout_and_repeats_are_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_marked="""
        import threading
        import pytest

        CALLS = [0]

        def model():
            CALLS[0] += 1
            if CALLS[0] == 6:  # repeat 1: calls 1-4 (first call + 3 rounds); repeat 2: call 5 first
                threading.Event().wait()

        @pytest.mark.ipu(call_timeout="1s", repeats=2)
        def test_hangs_in_the_second_repeat(ipu_benchmark):
            ipu_benchmark(model, (), rounds=3, warmup_rounds=0)
        """
    )
    result = pytester.runpytest_subprocess("--ipu-repeats=2", timeout=120)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ test_hangs_in_the_second_repeat _*",
            "pytest-ipu: timed round 1 of repeat 2 was still running after the call timeout of 1s*",
        ]
    )


def test_a_slow_but_progressing_benchmark_is_not_interrupted(pytester: pytest.Pytester) -> None:
    # Twelve calls of 0.3 s take longer than the 2 s timeout together, but each call finishes well
    # within it (a loaded machine delays a sleep's wake-up by milliseconds, not by 1.7 s). A call
    # outlasts the watchdog's look every 0.2 s, so some looks see no progress: a watchdog that timed
    # the whole block instead of the running call would fire.
    pytester.makepyfile(
        test_slow="""
        import time

        def test_slow(ipu_benchmark):
            assert ipu_benchmark(lambda: time.sleep(0.3), (), rounds=10, warmup_rounds=1).rounds == 10
        """
    )
    result = pytester.runpytest_subprocess("--ipu-call-timeout=2s", timeout=120)
    result.assert_outcomes(passed=1)
