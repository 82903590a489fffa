"""The units registry (pytest_ipu.measure.units): parsing, display, exact text, axis scales, directions."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.measure import units
from pytest_ipu.measure.units import UnitError
from pytest_ipu.results.schema import METRICS

UNIT_NAMES = list(units.UNITS)


# --- display --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (1.36e-3, "1.36 ms"),
        (2.5, "2.5 s"),
        (850e-9, "850 ns"),
        (12.3e-6, "12.3 us"),
        (None, "-"),
        (1.0, "1 s"),
        (1e-3, "1 ms"),
        (1e-6, "1 us"),
        (0.0, "0 s"),
        (123.456, "123 s"),
        (0.999e-3, "999 us"),
        (1234.5, "1,234 s"),
        (999.4, "999 s"),
        (999.5, "1,000 s"),
    ],
)
def test_seconds_in_three_figures(seconds, text):
    assert units.format_value(seconds, "s") == text


@pytest.mark.parametrize(("seconds", "text"), [(0.0009996, "1 ms"), (999.6e-9, "1 us"), (0.9996, "1 s")])
def test_rounding_up_moves_to_the_next_unit(seconds, text):
    assert units.format_value(seconds, "s") == text


@pytest.mark.parametrize(
    ("rate", "text"),
    [
        (2526.4, "2,526"),
        (1_234_567.8, "1,234,568"),
        (100.0, "100"),
        (12.345, "12.3"),
        (0.5, "0.5"),
        (999.6, "1,000"),
    ],
)
def test_numbers_get_thousands_separators_from_1000(rate, text):
    assert units.format_number(rate) == text
    assert units.format_value(rate, "items/s") == f"{text} items/s"


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (2.45e-3, "s", "2.45 ms"),
        (2.0004e-3, "s", "2 ms"),
        (0.99996, "s", "1 s"),
        (1.95e-3, "s", "1.95 ms"),
        (2526.4, "items/s", "2,526 items/s"),
        (2301.9, "items/s", "2,302 items/s"),
        (12.25, "items/J", "12.25 items/J"),
        (10.0, "J", "10 J"),
        (0.5211, "J", "521.1 mJ"),
        (1500.0, "J", "1.5 kJ"),
        (366.8, "W", "366.8 W"),
        (0.0, "J", "0 J"),
        (math.inf, "s", "inf s"),
        (math.nan, "J", "nan J"),
    ],
)
def test_four_figures_as_gate_verdicts_show_them(value, unit, text):
    assert units.format_value(value, unit, 4) == text


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0.002, 0.004], (1e-3, "ms")),
        ([1.5, 2.0], (1.0, "s")),
        ([2e-7, 9e-7], (1e-9, "ns")),
        ([3e-6, 5e-5], (1e-6, "us")),
        ([], (1.0, "s")),
        ([0.0], (1.0, "s")),
        ([1e-4, 1e-2], (1e-3, "ms")),  # the geometric middle, 1 ms
    ],
)
def test_an_axis_takes_the_unit_of_its_middle(values, expected):
    assert units.axis_scale(values, "s") == expected


def test_rates_have_one_axis_unit():
    assert units.axis_scale([10.0, 5000.0], "items/s") == (1.0, "items/s")


# --- parsing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "unit", "value"),
    [
        ("2ms", "s", 0.002),
        ("2 ms", "s", 0.002),
        (" 250 us ", "s", 250e-6),
        ("3\u00b5s", "s", 3e-6),
        ("1.5s", "s", 1.5),
        (".5s", "s", 0.5),
        ("2e1s", "s", 20.0),
        ("1,234 s", "s", 1234.0),
        ("2500/s", "items/s", 2500.0),
        ("2,526 items/s", "items/s", 2526.0),
        ("2500", "items/s", 2500.0),
        ("0.3kW", "W", 300.0),
        ("500mW", "W", 0.5),
        ("500 mJ", "J", 0.5),
        ("9.5", "items/J", 9.5),
        ("9.5 items/J", "items/J", 9.5),
    ],
)
def test_parse_reads_a_number_and_its_unit(text, unit, value):
    assert units.parse(text, unit) == value


@pytest.mark.parametrize(
    ("text", "unit", "message"),
    [
        ("2", "s", "'2': missing unit after '2'; seconds: use s, ms, us or ns"),
        ("2xs", "s", "'2xs': unknown unit 'xs'; seconds: use s, ms, us or ns"),
        ("2W", "s", "'2W': unit 'W' measures watts, not seconds; seconds: use s, ms, us or ns"),
        (
            "9.5J",
            "items/J",
            "'9.5J': unit 'J' measures joules, not items per joule; items per joule: use /J or",
        ),
        ("fast", "s", "'fast' is not a number with a unit; seconds: use s, ms, us or ns"),
        ("1,23 s", "s", "'1,23 s': unknown unit ',23 s'; seconds: use s, ms, us or ns"),
        ("1e999999999999s", "s", "'1e999999999999s': the number is too large"),
    ],
)
def test_parse_errors_say_what_was_expected(text, unit, message):
    with pytest.raises(UnitError) as info:
        units.parse(text, unit)
    assert str(info.value).startswith(message)
    assert isinstance(info.value, ValueError)


def test_scale_and_unit_of_know_every_accepted_text():
    assert units.scale("s", "us") == -6
    assert units.scale("s", "W") is None
    assert units.unit_of("kJ") == "J"
    assert units.unit_of("lightyears") is None
    assert units.hint("items/s") == "items per second: use /s or items/s, or no unit"


# --- round trips ----------------------------------------------------------------------------------

non_negative = st.floats(min_value=0.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(UNIT_NAMES), non_negative, st.booleans())
@example("s", 5e-324, True)
@example("J", 1.7976931348623157e308, True)
@example("items/J", 0.0, True)
def test_exact_text_parses_back_to_the_same_float(unit, value, short):
    number, shown = units.exact_text(value, unit, short=short)
    assert units.parse(f"{number}{shown}", unit) == value
    assert units.parse(f"{number} {shown}", unit) == value


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(UNIT_NAMES), st.floats(min_value=1e-250, max_value=1e250), st.sampled_from([3, 4]))
@example("s", 999.5, 3)
@example("s", 0.9996, 3)
@example("items/s", 999.96, 4)
@example("J", 1e250, 3)
def test_displayed_values_parse_back_within_their_rounding(unit, value, digits):
    text = units.format_value(value, unit, digits)
    back = units.parse(text, unit)
    # Rounded to ``digits`` significant figures, or to a whole number from 1,000 on: off by half a
    # unit in the last place shown at most.
    assert back == pytest.approx(value, rel=0.5 * 10.0 ** (1 - digits) * 1.000001)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=-1e12, max_value=1e12), st.sampled_from([3, 4]))
def test_format_number_shows_the_digits_asked_or_a_whole_number(value, digits):
    text = units.format_number(value, digits)
    if abs(float(f"{value:.{digits}g}")) >= 1000:
        assert text == f"{value:,.0f}"
    else:
        assert text == f"{value:.{digits}g}"
        assert len(text.lstrip("-").split("e")[0].replace(".", "").lstrip("0")) <= digits


# --- directions and metrics -----------------------------------------------------------------------


def test_every_metric_has_a_unit_of_the_registry_and_its_direction():
    for metric in METRICS.values():
        assert metric.unit in units.UNITS
        assert metric.better == units.UNITS[metric.unit].better
    assert {u: units.UNITS[u].better for u in units.UNITS} == {
        "s": "lower",
        "items/s": "higher",
        "J": "lower",
        "W": "lower",
        "items/J": "higher",
        "cores": "lower",
        "instructions": "lower",
        "cycles": "lower",
    }


def test_the_registry_imports_nothing_heavy():
    # ``pytest --help`` loads the gate grammar and with it this module: it must stay the standard library.
    code = (
        "import sys, pytest_ipu.measure.units\n"
        "heavy = [m for m in ('numpy', 'torch', 'matplotlib', 'pytest') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
