"""Option resolution (pytest_ipu.pytest_plugin.options, option_values): precedence, exact error messages,
parsers, names."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pytest_ipu.backends.target import Target
from pytest_ipu.errors import ConfigError
from pytest_ipu.pytest_plugin import option_values
from pytest_ipu.pytest_plugin import options
from pytest_ipu.pytest_plugin.settings import Settings

# (ini key, CLI value, env value, ini value, settings field, parsed CLI, parsed env, parsed ini, default)
PRECEDENCE = [
    ("ipu_rounds", "3", "7", "9", "rounds", 3, 7, 9, None),
    ("ipu_warmup_rounds", "0", "4", "6", "warmup_rounds", 0, 4, 6, 2),
    ("ipu_min_rounds", "1", "20", "30", "min_rounds", 1, 20, 30, 5),
    ("ipu_max_time", "500ms", "3s", "10", "max_time_s", 0.5, 3.0, 10.0, 2.0),
    ("ipu_precision", "fp16", "BF16", "fp32", "precision", "fp16", "bf16", "fp32", "auto"),
    ("ipu_missing_sdk", "fail", "skip", "fail", "missing_sdk", "fail", "skip", "fail", "skip"),
    (
        "ipu_backend",
        "torch:cpu",
        "torch:cuda:1",
        "torch",
        "targets",
        (Target("torch", "cpu"),),
        (Target("torch", "cuda:1"),),
        (Target("torch"),),
        (),
    ),
    (
        "ipu_cache_dir",
        "/cli/cache",
        "/env/cache",
        "ini-cache",
        "cache_dir",
        Path("/cli/cache"),
        Path("/env/cache"),
        Path("ini-cache"),
        Path.home() / ".cache" / "pytest-ipu",
    ),
]


def _env(key: str) -> str:
    return "PYTEST_" + key.upper()


@pytest.mark.parametrize(
    ("key", "cli", "env", "ini", "field", "from_cli", "from_env", "from_ini", "default"), PRECEDENCE
)
def test_precedence_cli_env_ini_default(key, cli, env, ini, field, from_cli, from_env, from_ini, default):
    environ = {_env(key): env}
    resolve = options.resolve_settings
    assert getattr(resolve({key: cli}, {key: ini}, environ), field) == from_cli
    assert getattr(resolve({key: None}, {key: ini}, environ), field) == from_env
    assert getattr(resolve({}, {key: ini}, {}), field) == from_ini
    assert getattr(resolve({key: None}, {key: None}, {}), field) == default
    assert getattr(resolve({}, {key: ""}, {}), field) == default


def test_precedence_is_per_option():
    s = options.resolve_settings(
        {"ipu_rounds": "3"},
        {"ipu_rounds": "9", "ipu_warmup_rounds": "6", "ipu_max_time": "1s"},
        {"PYTEST_IPU_WARMUP_ROUNDS": "4"},
    )
    assert (s.rounds, s.warmup_rounds, s.max_time_s, s.min_rounds) == (3, 4, 1.0, 5)


def test_cli_auto_overrides_env_count():
    s = options.resolve_settings({"ipu_rounds": "auto"}, {}, {"PYTEST_IPU_ROUNDS": "7"})
    assert s.rounds is None


def test_defaults_resolve_to_settings_defaults():
    assert options.resolve_settings({}, {}, {}) == Settings()


@pytest.mark.parametrize("spec", options.OPTIONS, ids=lambda spec: spec.flag)
def test_each_default_parses_to_the_settings_default(spec):
    """A run that sets an option nowhere takes Settings' default without parsing the option's (no
    parser loads at start-up): the two must agree, and the option's default must parse."""
    assert option_values.parser_for(spec.field)(spec.default) == getattr(Settings(), spec.field)


def test_unrelated_environment_is_ignored():
    s = options.resolve_settings({}, {}, {"PYTEST_IPU_ROUND": "0", "IPU_ROUNDS": "0", "PATH": "/bin"})
    assert s == Settings()


BAD_VALUES = [
    (
        {},
        {"PYTEST_IPU_ROUNDS": "0"},
        {},
        "invalid value '0' for --ipu-rounds from environment variable PYTEST_IPU_ROUNDS: "
        "expected 'auto' or an integer from 1 to 1000000",
    ),
    (
        {"ipu_rounds": "many"},
        {},
        {},
        "invalid value 'many' for --ipu-rounds from the command line: "
        "expected 'auto' or an integer from 1 to 1000000",
    ),
    (
        {"ipu_warmup_rounds": "-1"},
        {},
        {},
        "invalid value '-1' for --ipu-warmup-rounds from the command line: "
        "expected an integer from 0 to 100000",
    ),
    (
        {},
        {},
        {"ipu_min_rounds": "0"},
        "invalid value '0' for --ipu-min-rounds from ini key ipu_min_rounds in /proj/pytest.ini: "
        "expected an integer from 1 to 100000",
    ),
    (
        {},
        {},
        {"ipu_max_time": "abc"},
        "invalid value 'abc' for --ipu-max-time from ini key ipu_max_time in /proj/pytest.ini: "
        "expected a positive duration such as '2', '2s' or '500ms', at most a day (86400s)",
    ),
    (
        {"ipu_precision": "fp64"},
        {},
        {},
        "invalid value 'fp64' for --ipu-precision from the command line: "
        "expected one of auto, fp32, fp16, bf16",
    ),
    (
        {},
        {"PYTEST_IPU_MISSING_SDK": "ignore"},
        {},
        "invalid value 'ignore' for --ipu-missing-sdk from environment variable PYTEST_IPU_MISSING_SDK: "
        "expected one of skip, fail",
    ),
    (
        {"ipu_backend": "Torch"},
        {},
        {},
        "invalid value 'Torch' for --ipu-backend from the command line: "
        "expected a backend target such as 'torch', 'torch:cpu' or 'torch:cuda:0', got 'Torch'",
    ),
    (
        {},
        {"PYTEST_IPU_BACKEND": ","},
        {},
        "invalid value ',' for --ipu-backend from environment variable PYTEST_IPU_BACKEND: "
        "expected 'auto' or targets such as 'torch:cpu,torch:cuda'",
    ),
]


@pytest.mark.parametrize(("cli", "environ", "ini", "message"), BAD_VALUES)
def test_bad_values_give_exact_one_line_errors(cli, environ, ini, message):
    with pytest.raises(ConfigError) as info:
        options.resolve_settings(cli, ini, environ, ini_path="/proj/pytest.ini")
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_ini_error_without_path_says_the_ini_file():
    with pytest.raises(ConfigError) as info:
        options.resolve_settings({}, {"ipu_rounds": "0"}, {})
    assert str(info.value) == (
        "invalid value '0' for --ipu-rounds from ini key ipu_rounds in the ini file: "
        "expected 'auto' or an integer from 1 to 1000000"
    )


def test_bad_env_value_is_reported_even_when_ini_is_fine():
    with pytest.raises(ConfigError, match="from environment variable PYTEST_IPU_MIN_ROUNDS"):
        options.resolve_settings({}, {"ipu_min_rounds": "3"}, {"PYTEST_IPU_MIN_ROUNDS": "x"})


def test_cli_hides_a_bad_env_value():
    s = options.resolve_settings({"ipu_min_rounds": "3"}, {}, {"PYTEST_IPU_MIN_ROUNDS": "x"})
    assert s.min_rounds == 3


def test_an_unset_option_is_not_parsed(monkeypatch):
    """The default is Settings' own (``test_each_default_parses_to_the_settings_default``): a run that
    sets nothing loads no parser."""
    broken = tuple(
        dataclasses.replace(spec, default="0") if spec.field == "rounds" else spec for spec in options.OPTIONS
    )
    monkeypatch.setattr(options, "OPTIONS", broken)
    assert options.resolve_settings({}, {}, {}).rounds is None


# -- parsers --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2", 2.0), ("2s", 2.0), ("500ms", 0.5), (" 0.5 ", 0.5), ("2S", 2.0), ("1.5s", 1.5), (3, 3.0)],
)
def test_parse_seconds(text, seconds):
    assert option_values.parse_seconds(text) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize(
    "text", ["0", "-1", "abc", "inf", "infs", "nan", "", "s", "ms", "0ms", "-5ms", "1e400"]
)
def test_parse_seconds_rejects(text):
    with pytest.raises(
        ValueError, match="expected a positive duration such as '2', '2s' or '500ms', at most a day"
    ):
        option_values.parse_seconds(text)


@pytest.mark.parametrize(("text", "rounds"), [("auto", None), ("AUTO", None), (" 10 ", 10), (1, 1)])
def test_parse_rounds(text, rounds):
    assert option_values.parse_rounds(text) == rounds


@pytest.mark.parametrize("text", ["0", "-3", "1.5", "", "ten", True])
def test_parse_rounds_rejects(text):
    with pytest.raises(ValueError, match="expected 'auto' or an integer from 1 to 1000000"):
        option_values.parse_rounds(text)


def test_parse_targets_auto_is_empty():
    assert option_values.parse_targets("auto") == ()
    assert option_values.parse_targets(" Auto ") == ()


def test_parse_targets_list():
    assert option_values.parse_targets("torch:cpu,torch:cuda:0") == (
        Target("torch", "cpu"),
        Target("torch", "cuda:0"),
    )


def test_parse_targets_deduplicates_keeping_order():
    got = option_values.parse_targets("torch:cuda, torch:cpu ,torch:cuda,,torch:cpu")
    assert got == (Target("torch", "cuda"), Target("torch", "cpu"))


@pytest.mark.parametrize("text", ["Torch", ":cpu", "torch:CPU", "torch:cuda:x", "torch:cpu,Torch", "to rch"])
def test_parse_targets_rejects_bad_target(text):
    with pytest.raises(ValueError, match="expected a backend target such as"):
        option_values.parse_targets(text)


@pytest.mark.parametrize("text", [",", "", " , ,"])
def test_parse_targets_rejects_empty_list(text):
    with pytest.raises(ValueError, match="expected 'auto' or targets such as 'torch:cpu,torch:cuda'"):
        option_values.parse_targets(text)


def test_parse_targets_rejects_empty_device():
    with pytest.raises(ValueError, match="expected a backend target such as"):
        option_values.parse_targets("torch:")


def test_parse_dir_expands_the_home_directory():
    assert option_values.parse_dir(" ~/models ") == Path.home() / "models"
    assert option_values.parse_dir("rel/dir") == Path("rel/dir")


@pytest.mark.parametrize("text", ["", "   "])
def test_parse_dir_rejects_empty(text):
    with pytest.raises(ValueError, match="expected a directory path"):
        option_values.parse_dir(text)


def test_cache_dir_default_is_under_the_home_directory_not_the_working_directory():
    assert Settings().cache_dir == Path.home() / ".cache" / "pytest-ipu"
    assert Settings().cache_dir.is_absolute()


# -- Settings.as_json -----------------------------------------------------------------------------


def test_as_json_of_auto_settings():
    out = Settings().as_json()
    assert json.loads(json.dumps(out)) == out
    assert out["targets"] == "auto"
    assert out["rounds"] == "auto"
    assert out["precision"] == "auto"
    assert set(out) == {f.name for f in dataclasses.fields(Settings)}


def test_as_json_of_explicit_settings():
    s = Settings(targets=(Target("torch", "cpu"), Target("torch", "cuda:1")), rounds=10, max_time_s=0.5)
    out = s.as_json()
    assert json.loads(json.dumps(out)) == out
    assert out["targets"] == ["torch:cpu", "torch:cuda:1"]
    assert out["rounds"] == 10
    assert out["max_time_s"] == 0.5


def test_as_json_writes_the_cache_dir_as_a_string():
    out = Settings(cache_dir=Path("/tmp/onnx")).as_json()
    assert out["cache_dir"] == "/tmp/onnx"
    assert json.loads(json.dumps(out)) == out


# -- option names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", options.OPTIONS, ids=lambda s: s.flag)
def test_option_names_derive_from_flag(spec):
    assert spec.flag.startswith("--ipu-")
    stem = spec.flag[len("--ipu-") :]
    assert spec.ini == "ipu_" + stem.replace("-", "_")
    assert spec.env == "PYTEST_IPU_" + stem.replace("-", "_").upper()
    assert spec.ini.startswith("ipu_")
    assert spec.env.startswith("PYTEST_IPU_")


def test_options_cover_every_setting_once():
    fields = [spec.field for spec in options.OPTIONS]
    assert sorted(fields) == sorted(f.name for f in dataclasses.fields(Settings))
    assert sorted(option_values.PARSERS) == sorted(fields)
    assert len({spec.flag for spec in options.OPTIONS}) == len(options.OPTIONS)
    assert len({spec.env for spec in options.OPTIONS}) == len(options.OPTIONS)


def test_warmup_rounds_names():
    spec = next(s for s in options.OPTIONS if s.field == "warmup_rounds")
    assert (spec.flag, spec.ini, spec.env) == (
        "--ipu-warmup-rounds",
        "ipu_warmup_rounds",
        "PYTEST_IPU_WARMUP_ROUNDS",
    )


def test_min_rounds_limit_is_the_auto_plans_cap():
    from pytest_ipu.measure import timing

    assert option_values.MAX_MIN_ROUNDS == timing.MAX_AUTO_ROUNDS


@pytest.mark.parametrize(
    ("field", "largest", "past"),
    [
        ("rounds", "1000000", "1000001"),
        ("warmup_rounds", "100000", "100001"),
        ("min_rounds", "100000", "100001"),
        ("max_time_s", "86400s", "86401s"),
        ("idle_s", "86400", "86401"),
        ("power_hz", "10000", "10001"),
    ],
)
def test_upper_limits_are_inclusive(field, largest, past):
    parse = option_values.parser_for(field)
    assert parse(largest) > 0
    with pytest.raises(ValueError, match="expected"):
        parse(past)


def test_power_hz_below_a_tenth_of_a_hertz_is_refused():
    assert option_values.parse_hz("0.1") == pytest.approx(0.1)
    with pytest.raises(ValueError, match=r"from 0\.1 to 10000"):
        option_values.parse_hz("1e-300")


@pytest.mark.parametrize("field", ["gates", "baselines"])
def test_an_empty_item_of_a_repeated_option_is_refused(field):
    with pytest.raises(ValueError, match="got an empty value"):
        option_values.parser_for(field)([""])
    # `none` and an unset environment variable still mean none; `;;` in one string is a separator.
    assert option_values.parser_for(field)(["none"]) == ()
    assert option_values.parser_for(field)("none;;none") == ()


def test_unknown_pytest_ipu_variables_name_the_closest_option():
    messages = options.unknown_variables(
        {
            "PYTEST_IPU_ROUND": "3",
            "PYTEST_IPU_ROUNDS": "3",
            "PYTEST_IPU_REPEAT_WORKER": "1",
            "PYTEST_IPU_GATE_ACCURACY_STRICT": "1",
            "PYTEST_ADDOPTS": "-q",
        }
    )
    assert messages == [
        "pytest-ipu: unknown environment variable PYTEST_IPU_ROUND is ignored; "
        "did you mean PYTEST_IPU_ROUNDS?"
    ]


def test_non_option_variables_are_the_projects_own():
    from pytest_ipu.pytest_plugin import repeats

    assert repeats.WORKER_ENV in options.NON_OPTION_VARIABLES
    assert not options.NON_OPTION_VARIABLES & {spec.env for spec in options.OPTIONS}


def test_a_misspelt_option_is_named_with_its_nearest_option():
    hint = options.misspelt_flags(["-q", "--ipu-backnd=torch:cpu", "--ipu-rounds=3", "--IPU-ROUND", "x.py"])
    assert hint == "did you mean --ipu-backend (for --ipu-backnd); --ipu-rounds (for --IPU-ROUND)?"
    # Every option of pytest-ipu, and every other plugin's option, is left alone.
    assert options.misspelt_flags([spec.flag for spec in options.OPTIONS] + ["--benchmark-jsn"]) is None
