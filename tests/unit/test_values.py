"""The typed readers of values (``results.values``): each returns the value typed or raises
``BadValue``, one line naming the value, where it came from and the fix, in its source's voice."""

from __future__ import annotations

import math

import pytest

from pytest_ipu.results import values

FILE = values.Source("run.json: benchmark 'test_a'", "correct the value")
CALL = values.Source("ipu_loadgen", call=True)


def _refusal(read: object, *args: object, **kwargs: object) -> values.BadValue:
    with pytest.raises(values.BadValue) as caught:
        read(*args, **kwargs)  # type: ignore[operator]
    assert "\n" not in str(caught.value)
    return caught.value


def test_each_voice_names_the_value_its_source_and_what_it_must_be() -> None:
    assert str(_refusal(FILE.whole, -1, "stats.rounds")) == (
        "run.json: benchmark 'test_a': 'stats.rounds' is -1: it must be a whole number >= 0; "
        "correct the value"
    )
    assert (
        str(_refusal(CALL.whole, 0, "max_batch", 1)) == "ipu_loadgen(max_batch=0): pass a whole number >= 1"
    )
    assert str(_refusal(values.integer, "0", 1, 100)) == "expected an integer from 1 to 100"
    # A rule's own words replace what it must be, in every voice.
    bad = _refusal(FILE.number, -1.0, "stats.min", problem="a time must be >= 0")
    assert (
        str(bad)
        == "run.json: benchmark 'test_a': 'stats.min' is -1.0: a time must be >= 0; correct the value"
    )
    assert (bad.value, bad.key, bad.source) == (-1.0, "stats.min", FILE)


@pytest.mark.parametrize("value", [True, "1", 1.0, -1, 2**53 + 1, None])
def test_a_whole_number_is_an_int_in_range_and_never_a_bool(value: object) -> None:
    assert _refusal(FILE.whole, value, "n").want == "a whole number >= 0"


@pytest.mark.parametrize("value", [True, "1", math.nan, math.inf, -0.5, 10**400, [1]])
def test_a_number_is_finite_and_at_least_zero(value: object) -> None:
    _refusal(FILE.number, value, "x")


def test_readers_return_their_values_typed() -> None:
    assert FILE.number(3, "x") == 3.0
    assert isinstance(FILE.number(3, "x"), float)
    assert FILE.whole(2**53, "n") == 2**53
    assert FILE.text("a", "k") == "a"
    assert FILE.text_or_none(None, "k") is None
    assert FILE.mapping(None, "k", null=True) == {}
    assert FILE.flag(False, "k") is False
    assert CALL.fraction(0.5, "p", "0.99") == 0.5
    assert values.choice(" Warn ", ("warn", "fail")) == "warn"
    assert values.integer(" 7 ", 1, 10) == 7


def test_a_positive_number_refuses_zero() -> None:
    assert _refusal(CALL.number, 0, "target_qps", positive=True).want == "a finite number > 0"


def test_flags_are_spelt_as_their_writer_spells_them() -> None:
    assert _refusal(CALL.flag, 1, "mlperf").want == "True or False"
    assert _refusal(FILE.flag, 1, "measured").want == "true or false"


def test_a_duration_is_seconds_or_text_with_its_unit() -> None:
    assert CALL.seconds(2, "d") == 2.0
    assert CALL.seconds("15 ms", "d") == pytest.approx(0.015)
    assert CALL.seconds(0, "d", zero=True) == 0.0
    assert "finite and > 0" in str(_refusal(CALL.seconds, 0, "d"))
    assert "unknown unit 'min'" in str(_refusal(CALL.seconds, "3 min", "d"))
    assert "'15 ms'" in str(_refusal(CALL.seconds, [15], "d"))


def test_a_choice_and_an_integer_name_what_is_allowed() -> None:
    assert str(_refusal(values.choice, "skip", ("warn", "fail"))) == "expected one of warn, fail"
    assert _refusal(values.integer, True, 0, 1).value is True


def test_a_long_value_is_shown_short() -> None:
    assert values.show("x" * 100) == f"{'x' * 100!r}"[:40] + "... (102 characters)"
    assert values.show({"a": 1}) == "an object"
    assert values.show([1]) == "a list"


def test_a_logs_values_of_another_type_read_as_absent() -> None:
    log = {"n": 3, "b": True, "s": "3"}
    assert values.logged_number(log, "n") == 3.0
    assert values.logged_number(log, "b") is None
    assert values.logged_number(log, "s") is None
    assert values.logged_number(log, "absent") is None
    assert values.logged_flag(log, "b") is True
    assert values.logged_flag(log, "n") is None


def test_a_free_form_object_is_any_json_within_its_limits() -> None:
    assert FILE.free(None, "params") == {}
    assert "is nan: it must be a finite number" in str(_refusal(FILE.free, {"a": [math.nan]}, "params"))
    assert len(FILE.free({"a": [math.nan]}, "params", finite=False)["a"]) == 1
    deep = {"a": {"b": {"c": 1}}}
    assert FILE.free(deep, "params", depth=3) == deep
    assert str(_refusal(FILE.free, deep, "params", depth=2)).startswith(
        "run.json: benchmark 'test_a': 'params.a.b.c' is 1: it nests deeper than 2 levels"
    )
    assert "'params' is a list: it must be a JSON object or null" in str(_refusal(FILE.free, [], "params"))


def test_a_record_source_says_which_rule_a_number_broke() -> None:
    record = values.Source("record", "fix", explain=True)
    assert _refusal(record.number, "1", "x").want == "a number >= 0"
    assert _refusal(record.number, -1, "x").want == ">= 0 (a time, rate, energy or share is never negative)"
    assert _refusal(record.number, 10**400, "x").problem == "it is too large: it must be a finite number >= 0"
    assert record.number(math.inf, "x", inf=True) == math.inf
    assert _refusal(record.whole, -1, "n").want == ">= 0 (a count is never negative)"
    assert _refusal(record.signed, 10**400, "loss").want == "a finite number"
    assert record.signed(-2, "loss") == -2.0
    assert record.choice("b", "mode", ("a", "b")) == "b"
    assert str(_refusal(record.choice, "c", "mode", ("a", "b"))) == (
        "record: 'mode' is 'c': it must be one of 'a', 'b'; fix"
    )
    assert record.array((1, 2), "ids") == [1, 2]
    assert values.show(values.ABSENT) == "missing"
