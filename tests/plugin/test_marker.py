"""``@pytest.mark.ipu(...)`` end to end: validation at collection, overrides, and target selection.

In-process runs: nothing here imports a deep-learning runtime (the targets are names no backend knows,
so collection never makes a backend).
"""

from __future__ import annotations

import pytest

from pytest_ipu.pytest_plugin.marker_keywords import KEYWORDS
from tests.plugin.inner import SENTINEL_TEST
from tests.plugin.inner import assert_usage_error

DURATION = "expected a positive duration such as '2', '2s' or '500ms', at most a day (86400s)"

ALLOWED = ", ".join(KEYWORDS)


def _marked(decorator: str) -> str:
    return f"import pytest\n\n\n{decorator}\ndef test_a(ipu_settings):\n    pass\n"


def test_unknown_keyword_names_the_test_and_the_closest_keyword(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m=_marked("@pytest.mark.ipu(round=5)"), test_sentinel=SENTINEL_TEST)
    result = pytester.runpytest()
    assert_usage_error(
        pytester,
        result,
        f"test_m.py::test_a: @pytest.mark.ipu got unknown keyword 'round' (did you mean 'rounds'?); "
        f"allowed: {ALLOWED}",
    )


def test_unknown_keyword_without_a_close_match_gives_no_hint(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m=_marked("@pytest.mark.ipu(colour='red')"))
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.errlines[0] == (
        "ERROR: pytest-ipu: test_m.py::test_a: @pytest.mark.ipu got unknown keyword 'colour'; "
        f"allowed: {ALLOWED}"
    )


def test_unknown_keyword_is_an_error_even_if_the_test_uses_no_ipu_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="""
        import pytest

        class TestGroup:
            pytestmark = pytest.mark.ipu(max_tme="1s")

            def test_b(self):
                pass
        """
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.errlines[0].startswith(
        "ERROR: pytest-ipu: test_m.py::TestGroup::test_b: @pytest.mark.ipu got unknown keyword 'max_tme' "
        "(did you mean 'max_time'?)"
    )


def test_positional_arguments_are_rejected(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m=_marked("@pytest.mark.ipu(5)"), test_sentinel=SENTINEL_TEST)
    result = pytester.runpytest()
    assert_usage_error(
        pytester, result, "test_m.py::test_a: @pytest.mark.ipu takes keywords only, got positional (5,)"
    )


@pytest.mark.parametrize(
    ("keyword", "value", "allowed"),
    [
        ("rounds", "0", "expected 'auto' or an integer from 1 to 1000000"),
        ("warmup_rounds", "-2", "expected an integer from 0 to 100000"),
        ("min_rounds", "'many'", "expected an integer from 1 to 100000"),
        ("max_time", "'soon'", DURATION),
        ("precision", "'fp64'", "expected one of auto, fp32, fp16, bf16"),
        (
            "backend",
            "'Torch:CPU'",
            "expected a backend target such as 'torch', 'torch:cpu' or 'torch:cuda:0', got 'Torch:CPU'",
        ),
    ],
)
def test_bad_value_names_the_test_and_the_keyword(
    pytester: pytest.Pytester, keyword: str, value: str, allowed: str
) -> None:
    # The test also uses ipu_backend: it is parametrized over the command line's target, unless the bad
    # value is backend= itself (then it is not parametrized, and the error still names it).
    nodeid = "test_m.py::test_a" if keyword == "backend" else "test_m.py::test_a[mine-cpu]"
    pytester.makepyfile(
        test_m=f"import pytest\n\n\n@pytest.mark.ipu({keyword}={value})\n"
        "def test_a(ipu_settings, ipu_backend):\n    pass\n",
        test_sentinel=SENTINEL_TEST,
    )
    result = pytester.runpytest("--ipu-backend=mine:cpu")
    assert_usage_error(
        pytester,
        result,
        f"{nodeid}: invalid value {value} for @pytest.mark.ipu({keyword}=...): {allowed}",
    )


def test_marker_values_override_the_command_line_inside_ipu_settings(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="""
        import pytest

        @pytest.mark.ipu(rounds=3, precision="BF16", max_time="100ms", warmup_rounds=0, min_rounds=2)
        def test_marked(ipu_settings):
            assert (ipu_settings.rounds, ipu_settings.precision) == (3, "bf16")
            assert ipu_settings.max_time_s == 0.1
            assert (ipu_settings.warmup_rounds, ipu_settings.min_rounds) == (0, 2)
            assert ipu_settings.missing_sdk == "fail"      # not in the marker: the command line's

        @pytest.mark.ipu(rounds="auto")
        def test_auto(ipu_settings):
            assert ipu_settings.rounds is None

        def test_unmarked(ipu_settings):
            assert (ipu_settings.rounds, ipu_settings.precision, ipu_settings.warmup_rounds) == (9, "fp16", 4)
            assert ipu_settings.max_time_s == 2.0
        """
    )
    result = pytester.runpytest(
        "--ipu-rounds=9", "--ipu-precision=fp16", "--ipu-warmup-rounds=4", "--ipu-missing-sdk=fail"
    )
    result.assert_outcomes(passed=3)


def test_closest_marker_wins_keyword_by_keyword(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="""
        import pytest

        pytestmark = pytest.mark.ipu(rounds=4, precision="fp16", min_rounds=7)

        @pytest.mark.ipu(rounds=5, warmup_rounds=1)
        class TestGroup:
            @pytest.mark.ipu(rounds=6)
            def test_method(self, ipu_settings):
                assert ipu_settings.rounds == 6              # method beats class and module
                assert ipu_settings.warmup_rounds == 1       # class
                assert ipu_settings.precision == "fp16"      # module
                assert ipu_settings.min_rounds == 7          # module

            def test_other(self, ipu_settings):
                assert (ipu_settings.rounds, ipu_settings.warmup_rounds) == (5, 1)

        def test_module_level(ipu_settings):
            assert (ipu_settings.rounds, ipu_settings.warmup_rounds) == (4, 3)
        """
    )
    result = pytester.runpytest("--ipu-rounds=100", "--ipu-warmup-rounds=3")
    result.assert_outcomes(passed=3)


BACKEND_TESTS = """
import pytest
from pytest_ipu.backends.target import Target

def test_default(ipu_backend):
    pass

@pytest.mark.ipu(backend="mine:b")
def test_only_b(ipu_settings, ipu_backend):
    assert ipu_settings.targets == (Target("mine", "b"),)

@pytest.mark.ipu(backend="other:x1, other:x2")
def test_others(ipu_backend):
    pass

@pytest.mark.ipu(backend="mine:b")
class TestClass:
    @pytest.mark.ipu(backend="mine:a")
    def test_closest(self, ipu_backend):
        pass

def test_no_backend_fixture(ipu_settings):
    pass
"""


#: Provides the backends "mine" and "other" on any device, none available (an unknown name would be a
#: usage error; these tests are about where the targets go).
BACKEND_CONFTEST = """
from pytest_ipu.backends.base import Availability, NamedBackend


class Elsewhere(NamedBackend):
    def availability(self):
        return Availability.no("provided by the conftest, not available here")


def pytest_ipu_make_backend(config, target):
    return Elsewhere(target.backend, target.device) if target.backend in ("mine", "other") else None
"""


def test_marker_backend_restricts_parametrization(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(BACKEND_CONFTEST)
    pytester.makepyfile(test_m=BACKEND_TESTS)
    result = pytester.runpytest("--collect-only", "-q", "--ipu-backend=mine:a,mine:b")
    assert result.ret == pytest.ExitCode.OK
    collected = [line for line in result.outlines if line.startswith("test_m.py::")]
    assert collected == [
        "test_m.py::test_default[mine-a]",
        "test_m.py::test_default[mine-b]",
        "test_m.py::test_only_b[mine-b]",
        "test_m.py::test_others[other-x1]",
        "test_m.py::test_others[other-x2]",
        "test_m.py::TestClass::test_closest[mine-a]",
        "test_m.py::test_no_backend_fixture",
    ]


def test_marker_backend_reaches_the_backend_fixture(pytester: pytest.Pytester) -> None:
    """Each parametrized target is the one the fixture looks for (none is available: each skips naming it)."""
    pytester.makeconftest(BACKEND_CONFTEST)
    pytester.makepyfile(test_m=BACKEND_TESTS)
    result = pytester.runpytest("-rs", "--ipu-backend=mine:a,mine:b")
    result.assert_outcomes(passed=1, skipped=6)
    for target in ("mine:a", "mine:b", "other:x1", "other:x2"):
        result.stdout.fnmatch_lines(
            [f"SKIPPED * pytest-ipu: target {target} is not available: provided by the conftest, *"]
        )


def test_marker_rounds_reach_ipu_benchmark(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="""
        import pytest

        @pytest.mark.ipu(rounds=7, warmup_rounds=0)
        def test_marked(ipu_benchmark):
            record = ipu_benchmark(lambda: None)
            assert (record.rounds, record.rounds_policy, record.warmup_rounds) == (7, "fixed", 0)
            assert record.latency_s.rounds == 7

        @pytest.mark.ipu(rounds=7)
        def test_argument_beats_marker(ipu_benchmark):
            record = ipu_benchmark(lambda: None, rounds=4, warmup_rounds=1)
            assert (record.rounds, record.warmup_rounds) == (4, 1)

        @pytest.mark.ipu(rounds="auto", max_time="20ms", min_rounds=3)
        def test_auto_beats_fixed_command_line(ipu_benchmark):
            record = ipu_benchmark(lambda: None)
            assert record.rounds_policy == "auto"
            assert record.rounds >= 3
        """
    )
    result = pytester.runpytest("--ipu-rounds=9", "--ipu-warmup-rounds=2")
    result.assert_outcomes(passed=3)


@pytest.mark.parametrize(
    ("decorator", "message"),
    [
        (
            "@pytest.mark.ipu(ipus=3)",
            "test_m.py::test_a: @pytest.mark.ipu: invalid ipus=3: stages x replicas is 1 x 1 = 1 IPU per "
            "instance; write ipus=1 or leave ipus out",
        ),
        (
            "@pytest.mark.ipu(replicas=3)",
            "test_m.py::test_a: @pytest.mark.ipu: invalid stages=1, replicas=3: 3 IPUs per instance is not a "
            "power of two, the only sizes multi-IPU devices come in; make stages x replicas a power of two: "
            "write replicas=2 or replicas=4",
        ),
        (
            "@pytest.mark.ipu(instances=0)",
            "test_m.py::test_a: @pytest.mark.ipu: invalid instances=0: expected a positive int; write "
            "instances=1 or more",
        ),
        (
            "@pytest.mark.ipu(stages='2')",
            "test_m.py::test_a: @pytest.mark.ipu: invalid stages='2': expected a positive int, got str; "
            "write a number such as stages=1",
        ),
    ],
)
def test_bad_placement_stops_the_run_at_collection(
    pytester: pytest.Pytester, decorator: str, message: str
) -> None:
    pytester.makepyfile(test_m=_marked(decorator), test_sentinel=SENTINEL_TEST)
    result = pytester.runpytest()
    assert_usage_error(pytester, result, message)


def test_placement_keywords_combine_across_markers_closest_wins(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="""
        import pytest

        pytestmark = pytest.mark.ipu(instances=4, replicas=2)

        @pytest.mark.ipu(instances=2)
        def test_a(request):
            from pytest_ipu.pytest_plugin.marker_keywords import placement_request
            r = placement_request(request.node)
            assert (r.instances, r.replicas, r.ipus_per_instance) == (2, 2, 2)
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
