"""Units of the reported numbers: one registry for reading a number with its unit, showing a value
in a unit that suits it, and which direction of a quantity is better.

Records hold SI values; scaling happens only here, as a value is parsed or displayed.
``parse("2 ms", "s")`` is ``0.002`` (a number, with an optional exponent and thousands separators, and
an accepted unit text, ``UNITS[unit].accepted``; the gate grammar reads its bounds' units with
``scale``). ``format_value(0.00136, "s")`` is ``1.36 ms``: 3 significant figures by default, in the
largest display unit that keeps the rounded value at 1 or more, thousands separators from 1,000 on;
``format_number`` is the same without a unit (cells under a unit header, axis ticks).
``exact_text(0.002, "s")`` is ``("2", "ms")``, the shortest decimal that reads back as the same float
(gate expressions and bounds must not be rounded); ``axis_scale`` picks one unit for a whole axis;
``parse_share("5%")`` is ``0.05``, a share within (0, 1]; ``UNITS[unit].better`` says whether less or
more is better. Pure and light (the standard library only): ``pytest --help`` loads the gate grammar,
and with it this module.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from decimal import DecimalException
from typing import Literal

#: Which way a quantity improves.
Better = Literal["lower", "higher"]


class UnitError(ValueError):
    """Text that is not a number in the expected unit; the message says what was expected."""


@dataclass(frozen=True)
class Unit:
    """How values of one unit are written and read, and which way they are better."""

    #: The SI unit, as metrics name it: ``s``, ``items/s``, ``J``, ``W``, ``items/J``.
    name: str
    #: How messages name it ("seconds").
    words: str
    better: Better
    #: Accepted unit text -> power of ten of its scale to SI.
    accepted: Mapping[str, int]
    #: The accepted units a hint lists, in order.
    listed: tuple[str, ...]
    #: Whether a bare number is accepted (the unit has no prefixes to mistake).
    bare: bool
    #: A bound to show in examples of a fix.
    example: str
    #: Display units for people, from the smallest scale up: (text, power of ten).
    display: tuple[tuple[str, int], ...]
    #: Display units as gate expressions write them, from the smallest scale up (``/s``; ``""``
    #: for a bare number).
    short: tuple[tuple[str, int], ...]


_TIME = (("ns", -9), ("us", -6), ("ms", -3), ("s", 0))
_ENERGY = (("mJ", -3), ("J", 0), ("kJ", 3))
_POWER = (("mW", -3), ("W", 0), ("kW", 3))

UNITS: Mapping[str, Unit] = {
    u.name: u
    for u in (
        Unit(
            "s",
            "seconds",
            "lower",
            {"s": 0, "ms": -3, "us": -6, "\u00b5s": -6, "\u03bcs": -6, "ns": -9},
            ("s", "ms", "us", "ns"),
            False,
            "2ms",
            _TIME,
            _TIME,
        ),
        Unit(
            "items/s",
            "items per second",
            "higher",
            {"/s": 0, "items/s": 0},
            ("/s", "items/s"),
            True,
            "2500/s",
            (("items/s", 0),),
            (("/s", 0),),
        ),
        Unit(
            "J",
            "joules",
            "lower",
            {"J": 0, "mJ": -3, "kJ": 3},
            ("J", "mJ", "kJ"),
            False,
            "0.5J",
            _ENERGY,
            _ENERGY,
        ),
        Unit(
            "W",
            "watts",
            "lower",
            {"W": 0, "mW": -3, "kW": 3},
            ("W", "mW", "kW"),
            False,
            "300W",
            _POWER,
            _POWER,
        ),
        Unit(
            "items/J",
            "items per joule",
            "higher",
            {"/J": 0, "items/J": 0},
            ("/J", "items/J"),
            True,
            "9.5",
            (("items/J", 0),),
            (("", 0),),
        ),
        # CPU cores kept busy: CPU time over wall time (docs/numbers.md, host cost). Fewer cores for
        # the same work is better.
        Unit(
            "cores",
            "CPU cores",
            "lower",
            {"cores": 0},
            ("cores",),
            True,
            "2",
            (("cores", 0),),
            (("", 0),),
        ),
        # User-space instructions the host retired (docs/numbers.md, host instructions): fewer for
        # the same work is better. A bare count, or with a decimal prefix.
        Unit(
            "instructions",
            "instructions",
            "lower",
            {
                "instructions": 0,
                "k": 3,
                "M": 6,
                "G": 9,
                "k instructions": 3,
                "M instructions": 6,
                "G instructions": 9,
            },
            ("instructions", "k", "M", "G"),
            True,
            "2.5M",
            (("instructions", 0), ("k instructions", 3), ("M instructions", 6), ("G instructions", 9)),
            (("", 0), ("k", 3), ("M", 6), ("G", 9)),
        ),
        # Device cycles a call takes (the IPU's own cycle counter): fewer is better. Counts are
        # shown with their thousands (``1,330,000 cycles``), never scaled to a prefix.
        Unit(
            "cycles",
            "device cycles",
            "lower",
            {"cycles": 0},
            ("cycles",),
            True,
            "1.5e6",
            (("cycles", 0),),
            (("", 0),),
        ),
    )
}


def _ten(power: int) -> float:
    """``10 ** power`` as the nearest float (``1e-3``, not ``10.0 ** -3`` with its own rounding)."""
    return float(f"1e{power}")


# --- Parsing --------------------------------------------------------------------------------------


def scale(unit: str, text: str) -> int | None:
    """The power of ten of unit text ``text`` in ``unit`` (``scale("s", "ms") == -3``); ``None`` when
    ``unit`` does not accept it. Raises ``KeyError`` for an unknown unit."""
    return UNITS[unit].accepted.get(text)


def unit_of(text: str) -> str | None:
    """The unit that accepts ``text`` (``unit_of("mW") == "W"``), or ``None``."""
    return next((name for name, u in UNITS.items() if text in u.accepted), None)


def hint(unit: str) -> str:
    """``seconds: use s, ms, us or ns``: what to write for ``unit``, for messages."""
    spec = UNITS[unit]
    *head, last = spec.listed
    listed = f"{', '.join(head)} or {last}" if head else last
    return f"{spec.words}: use {listed}" + (", or no unit" if spec.bare else "")


_QUANTITY = re.compile(
    r"""\s*
    (?P<number>[+-]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?
              |[+-]?\.[0-9]+(?:[eE][+-]?[0-9]+)?)
    \s*(?P<unit>.*?)\s*""",
    re.VERBOSE,
)


def parse(text: str, unit: str) -> float:
    """The SI value of a number with its unit: ``parse("2 ms", "s") == 0.002``,
    ``parse("2,526 items/s", "items/s") == 2526.0``.

    The number may have an exponent and thousands separators; the unit is any text ``UNITS[unit]``
    accepts (none for a unit that takes a bare number). Decimal scaling is exact, so
    ``parse("".join(exact_text(v, unit)), unit) == v``. Raises ``UnitError`` naming the text and
    what was expected.
    """
    spec = UNITS[unit]
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise UnitError(f"{text!r} is not a number with a unit; {hint(unit)}")
    written = match["unit"]
    power = 0 if not written and spec.bare else spec.accepted.get(written)
    if power is None:
        other = unit_of(written)
        problem = (
            f"unit {written!r} measures {UNITS[other].words}, not {spec.words}"
            if other is not None
            else f"missing unit after {match['number']!r}"
            if not written
            else f"unknown unit {written!r}"
        )
        raise UnitError(f"{text!r}: {problem}; {hint(unit)}")
    try:
        value = float(Decimal(match["number"].replace(",", "")).scaleb(power))
    except DecimalException:  # an exponent beyond what Decimal can scale
        value = math.inf
    if not math.isfinite(value):
        raise UnitError(f"{text!r}: the number is too large")
    return value


# --- Exact text -----------------------------------------------------------------------------------


def decimal_text(value: Decimal) -> str:
    """Shortest plain text of a decimal: ``2``, ``0.25``; exponent form only for extreme magnitudes."""
    value = value.normalize()
    if value.is_zero():
        return "0"
    if -7 <= value.adjusted() <= 15:
        return format(value, "f")
    return format(value, "e")


def float_decimal(value: float) -> Decimal:
    """The shortest decimal that reads back as ``abs(value)`` (``repr``), so text round-trips exactly."""
    return Decimal(repr(abs(value)))


def _zero_unit(names: Sequence[tuple[str, int]]) -> tuple[str, int]:
    """The display unit of 0: the unit itself (power 0; ``0 J``), where the scale's smallest unit
    (``0 mJ``) would suggest a value rounded away."""
    return next((entry for entry in names if entry[1] == 0), names[0])


def exact_text(value: float, unit: str, *, short: bool = True) -> tuple[str, str]:
    """A non-negative value as exact text in a suitable display unit: ``0.002`` s -> ``("2", "ms")``.

    The unit is the largest display unit not above the value (the smallest one for tiny values, the
    unit itself for 0: ``energy>0J`` reads back as ``0J``, not ``0mJ``); ``short`` names it as gate
    expressions do (``/s``, and ``""`` for items per joule), else as people read it (``items/s``,
    ``items/J``). Decimal scaling is exact, so the text parses back to the same float.
    """
    spec = UNITS[unit]
    exact = float_decimal(value)
    names = spec.short if short else spec.display
    text, power = _zero_unit(names) if exact == 0 else names[0]
    for candidate, candidate_power in names:
        if exact >= Decimal(1).scaleb(candidate_power):
            text, power = candidate, candidate_power
    return decimal_text(exact.scaleb(-power)), text


# --- Display --------------------------------------------------------------------------------------


def format_number(value: float, digits: int = 3) -> str:
    """A number for reading: ``digits`` significant figures, or whole with thousands separators
    once it rounds to 1,000 or more (``2,526``; ``12.3``; ``0.5``)."""
    if math.isfinite(value) and abs(float(f"{value:.{digits}g}")) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def format_value(value: float | None, unit: str, digits: int = 3) -> str:
    """``0.00136`` s -> ``1.36 ms``: ``format_number`` in the largest display unit in which the
    rounded value is at least 1 (the smallest unit below that); ``-`` for ``None``.

    Rounding comes first, so 0.9996 s reads ``1 s``, not ``1e+03 ms``. Rates have one display unit:
    ``2,526 items/s``. A value that is not finite is shown as it is (``inf s``).
    """
    if value is None:
        return "-"
    spec = UNITS[unit]
    if not math.isfinite(value):
        return f"{value} {spec.name}"
    name, power = _zero_unit(spec.display) if value == 0 else spec.display[0]
    for text, candidate in spec.display:
        if abs(float(f"{value / _ten(candidate):.{digits}g}")) >= 1:
            name, power = text, candidate
    return f"{format_number(value / _ten(power), digits)} {name}"


def axis_scale(values: Iterable[float], unit: str) -> tuple[float, str]:
    """One display unit for an axis of values: the largest not above the geometric middle of their
    positive range (the unit itself when none is positive). Returns the divisor and its text."""
    positive = [v for v in values if v > 0]
    middle = math.sqrt(min(positive) * max(positive)) if positive else 1.0
    spec = UNITS[unit]
    name, power = spec.display[0]
    for text, candidate in spec.display:
        if middle >= _ten(candidate):
            name, power = text, candidate
    return _ten(power), name


def parse_share(value: object) -> float:
    """A share such as ``5%`` or ``0.05``, within (0, 1]."""
    text = str(value).strip()
    try:
        share = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        share = -1.0
    if not 0.0 < share <= 1.0:
        raise ValueError("expected a share such as '5%' or '0.05', above 0 and at most 100%")
    return share


def parse_level(value: object) -> float:
    """A test's level (a chance of a wrong verdict) such as ``1%`` or ``0.01``, within (0, 0.5)."""
    try:
        level = parse_share(value)
    except ValueError:
        level = 1.0
    if not level < 0.5:
        raise ValueError("expected a level such as '1%' or '0.01', above 0 and below 50%")
    return level
