"""Option values from the command line, the environment and the ini file, end to end (in-process runs).

A bad value from any source stops the run with exit code 4 and one line on stderr naming the value, the
option, the source and what is allowed; precedence is command line > environment > ini > default.
"""

from __future__ import annotations

import pytest

from pytest_ipu import __version__
from pytest_ipu.pytest_plugin.options import OPTIONS
from tests.plugin.inner import SENTINEL_TEST
from tests.plugin.inner import assert_usage_error

DURATION = "expected a positive duration such as '2', '2s' or '500ms', at most a day (86400s)"

# (flag, bad value, what the message says is allowed)
BAD_VALUES = [
    ("--ipu-rounds", "0", "expected 'auto' or an integer from 1 to 1000000"),
    ("--ipu-rounds", "ten", "expected 'auto' or an integer from 1 to 1000000"),
    ("--ipu-warmup-rounds", "-1", "expected an integer from 0 to 100000"),
    ("--ipu-min-rounds", "0", "expected an integer from 1 to 100000"),
    ("--ipu-max-time", "0", DURATION),
    ("--ipu-max-time", "fast", DURATION),
    ("--ipu-precision", "fp8", "expected one of auto, fp32, fp16, bf16"),
    ("--ipu-missing-sdk", "ignore", "expected one of skip, fail"),
    (
        "--ipu-backend",
        "Torch",
        "expected a backend target such as 'torch', 'torch:cpu' or 'torch:cuda:0', got 'Torch'",
    ),
    ("--ipu-backend", ",", "expected 'auto' or targets such as 'torch:cpu,torch:cuda'"),
    (
        "--ipu-backend",
        "torch:",
        "expected a backend target such as 'torch', 'torch:cpu' or 'torch:cuda:0', got 'torch:'",
    ),
]
IDS = [f"{flag}={value}" for flag, value, _ in BAD_VALUES]
SPECS = {spec.flag: spec for spec in OPTIONS}


def _header(result: pytest.RunResult) -> str:
    lines = [line for line in result.outlines if line.startswith(f"pytest-ipu {__version__}: ")]
    assert len(lines) == 1, result.outlines
    return lines[0]


@pytest.mark.parametrize(("flag", "value", "allowed"), BAD_VALUES, ids=IDS)
def test_bad_value_on_the_command_line(
    pytester: pytest.Pytester, flag: str, value: str, allowed: str
) -> None:
    pytester.makepyfile(SENTINEL_TEST)
    result = pytester.runpytest(f"{flag}={value}")
    assert_usage_error(
        pytester, result, f"invalid value {value!r} for {flag} from the command line: {allowed}"
    )


@pytest.mark.parametrize(("flag", "value", "allowed"), BAD_VALUES, ids=IDS)
def test_bad_value_from_the_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, flag: str, value: str, allowed: str
) -> None:
    env = SPECS[flag].env
    monkeypatch.setenv(env, value)
    pytester.makepyfile(SENTINEL_TEST)
    result = pytester.runpytest()
    assert_usage_error(
        pytester, result, f"invalid value {value!r} for {flag} from environment variable {env}: {allowed}"
    )


@pytest.mark.parametrize(("flag", "value", "allowed"), BAD_VALUES, ids=IDS)
def test_bad_value_from_the_ini_file(pytester: pytest.Pytester, flag: str, value: str, allowed: str) -> None:
    key = SPECS[flag].ini
    inifile = pytester.makeini(f"[pytest]\n{key} = {value}\n")
    pytester.makepyfile(SENTINEL_TEST)
    result = pytester.runpytest()
    assert_usage_error(
        pytester, result, f"invalid value {value!r} for {flag} from ini key {key} in {inifile}: {allowed}"
    )


def test_bad_value_from_pyproject_toml_names_that_file(pytester: pytest.Pytester) -> None:
    toml = pytester.makepyprojecttoml('[tool.pytest.ini_options]\nipu_precision = "fp64"\n')
    pytester.makepyfile(SENTINEL_TEST)
    result = pytester.runpytest()
    assert_usage_error(
        pytester,
        result,
        f"invalid value 'fp64' for --ipu-precision from ini key ipu_precision in {toml}: "
        "expected one of auto, fp32, fp16, bf16",
    )


def test_documented_example_message_is_exact(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_IPU_ROUNDS", "0")
    pytester.makepyfile(SENTINEL_TEST)
    result = pytester.runpytest()
    assert result.ret == 4
    assert result.stderr.str().strip() == (
        "ERROR: pytest-ipu: invalid value '0' for --ipu-rounds from environment variable "
        "PYTEST_IPU_ROUNDS: expected 'auto' or an integer from 1 to 1000000"
    )


# (command-line value, environment value, ini value, rounds in the header)
PRECEDENCE = [
    ("9", "8", "7", "9"),
    (None, "8", "7", "8"),
    (None, None, "7", "7"),
    (None, None, None, "auto"),
    ("9", None, "7", "9"),
]


@pytest.mark.parametrize(("cli", "env", "ini", "shown"), PRECEDENCE)
def test_precedence_in_the_report_header(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    cli: str | None,
    env: str | None,
    ini: str | None,
    shown: str,
) -> None:
    if env is not None:
        monkeypatch.setenv("PYTEST_IPU_ROUNDS", env)
    if ini is not None:
        pytester.makeini(f"[pytest]\nipu_rounds = {ini}\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest(*([f"--ipu-rounds={cli}"] if cli is not None else []))
    assert result.ret == pytest.ExitCode.OK
    assert f" rounds={shown} " in _header(result)


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_environment_variable_counts_as_unset(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, empty: str
) -> None:
    monkeypatch.setenv("PYTEST_IPU_ROUNDS", empty)
    monkeypatch.setenv("PYTEST_IPU_PRECISION", empty)
    pytester.makeini("[pytest]\nipu_rounds = 7\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.OK
    assert " precision=auto rounds=7 " in _header(result)


# A conftest that provides the made-up backends these tests name: an unknown --ipu-backend is a
# usage error, so a name nobody provides would stop the run before the settings are shown.
_PROVIDES_MINE_AND_OTHER = """
def pytest_ipu_make_backend(config, target):
    if target.backend in ("mine", "other"):
        return object()
    return None
"""


def test_header_shows_every_setting_from_its_own_source(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_IPU_WARMUP_ROUNDS", "4")
    monkeypatch.setenv("PYTEST_IPU_PRECISION", "BF16")
    pytester.makeini("[pytest]\nipu_max_time = 500ms\nipu_warmup_rounds = 6\nipu_missing_sdk = fail\n")
    pytester.makeconftest(_PROVIDES_MINE_AND_OTHER)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("--ipu-rounds=3", "--ipu-backend=mine:cpu,other")
    assert result.ret == pytest.ExitCode.OK
    assert _header(result) == (
        f"pytest-ipu {__version__}: targets=mine:cpu,other precision=bf16 rounds=3 warmup=4 "
        "max-time=0.5s missing-sdk=fail"
    )


def test_default_header(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest()
    assert _header(result) == (
        f"pytest-ipu {__version__}: targets=auto precision=auto rounds=auto warmup=2 "
        "max-time=2s missing-sdk=skip"
    )


def test_a_higher_source_hides_a_bad_lower_one(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the value that wins is parsed: a bad env value under a good CLI value is no error."""
    monkeypatch.setenv("PYTEST_IPU_ROUNDS", "0")
    monkeypatch.setenv("PYTEST_IPU_MAX_TIME", "1s")
    pytester.makeini("[pytest]\nipu_max_time = never\n")
    pytester.makepyfile(SENTINEL_TEST)
    result = pytester.runpytest("--ipu-rounds=2")
    result.assert_outcomes(passed=1)
    assert " rounds=2 " in _header(result)
    assert " max-time=1s " in _header(result)


def test_ipu_settings_sees_the_resolved_values(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_IPU_MIN_ROUNDS", "11")
    pytester.makeini("[pytest]\nipu_min_rounds = 12\nipu_max_time = 250ms\nipu_rounds = 40\n")
    pytester.makeconftest(_PROVIDES_MINE_AND_OTHER)
    pytester.makepyfile(
        """
        from pytest_ipu.pytest_plugin.settings import Settings
        from pytest_ipu.backends.target import Target

        def test_settings(ipu_settings):
            assert isinstance(ipu_settings, Settings)
            assert ipu_settings.targets == (Target("mine", "cpu"), Target("torch", "cuda", ))
            assert ipu_settings.rounds is None            # 'auto' on the command line beats the ini's 40
            assert ipu_settings.min_rounds == 11           # environment beats ini
            assert ipu_settings.max_time_s == 0.25         # ini
            assert ipu_settings.warmup_rounds == 2         # default
            assert ipu_settings.precision == "fp16"
            assert ipu_settings.missing_sdk == "skip"
        """
    )
    result = pytester.runpytest(
        "--ipu-backend= mine:cpu, torch:cuda ,mine:cpu", "--ipu-rounds=AUTO", "--ipu-precision=fp16"
    )
    result.assert_outcomes(passed=1)


def test_an_unknown_pytest_ipu_variable_is_a_warning_naming_the_closest_option(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_IPU_ROUND", "3")
    monkeypatch.setenv("PYTEST_IPU_REPEAT_WORKER", "")  # the project's own: never warned about
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("-W", "default::pytest_ipu.errors.PytestIpuWarning")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*PytestIpuWarning: pytest-ipu: unknown environment variable PYTEST_IPU_ROUND is ignored; "
            "did you mean PYTEST_IPU_ROUNDS?"
        ]
    )
    assert "PYTEST_IPU_REPEAT_WORKER" not in result.stdout.str()


def test_where_warnings_are_errors_an_unknown_variable_is_one_usage_error_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # -W error makes the warning an error: no traceback, one line, exit 4.
    monkeypatch.setenv("PYTEST_IPU_ROUND", "3")
    pytester.makepyfile(SENTINEL_TEST)
    result = pytester.runpytest("-W", "error")
    assert_usage_error(
        pytester,
        result,
        "unknown environment variable PYTEST_IPU_ROUND is ignored; did you mean PYTEST_IPU_ROUNDS?",
    )


#: pytest 7.4 (the floor) with pluggy 1.4 or later warns as its usage error leaves an old-style
#: hook wrapper; the in-process run would turn that warning into an internal error.
USAGE_ERROR_WARNING = "ignore:A plugin raised an exception during an old-style hookwrapper teardown"


@pytest.mark.filterwarnings(USAGE_ERROR_WARNING)
@pytest.mark.parametrize("via", ["command line", "PYTEST_ADDOPTS"])
def test_a_misspelt_option_keeps_pytests_error_and_names_the_nearest_option(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    pytester.makepyfile(SENTINEL_TEST)
    args = ["--ipu-backnd=torch:cpu", "--ipu_max_time=1s"]
    if via == "PYTEST_ADDOPTS":
        monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(args))
        args = []
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    # pytest's own error first, then pytest-ipu's one line, the last.
    assert any("error: unrecognized arguments: --ipu-backnd=torch:cpu --ipu_max_time=1s" in e for e in errors)
    assert (
        errors[-1]
        == "  tip: did you mean --ipu-backend (for --ipu-backnd); --ipu-max-time (for --ipu_max_time)?"
    )
    assert not (pytester.path / "ran.txt").exists()


@pytest.mark.filterwarnings(USAGE_ERROR_WARNING)
def test_another_plugins_options_get_no_hint(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SENTINEL_TEST)
    result = pytester.runpytest("--benchmark-jsn=out.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unrecognized arguments: --benchmark-jsn=out.json" in result.stderr.str()
    assert "did you mean" not in result.stderr.str()
