"""Performance gates: a threshold on one metric, parsed from text and checked against records (pure).

One expression for the command line (``--ipu-gate``, repeatable), the ini file and the marker::

    gate     := metric ":" sign number "%"        relative to the baseline
              | metric ("<" | ">") number unit     absolute bound
    metric   := a name of ``pytest_ipu.results.catalog.METRICS``, the registry of metrics, or one
                of its ``ALIASES`` (``time.median`` is ``latency.p50``: the gate is on that metric)
    sign     := "+" for a metric that is better lower, "-" for one that is better higher
    number   := digits with an optional fraction and exponent (2, 2.5, .5, 2e-3)

Spaces between the parts are allowed. A percentage is above 0 and below 1000 (below 100 for a drop).
The unit is read by ``pytest_ipu.measure.units``: a bare number only where the unit has no prefixes
to confuse (its ``bare``). ``<`` needs a bound above 0, since no metric is negative; ``<=``, ``>=``
and ``=`` are refused: a bound is strict. Each form is one anchored regular expression (``_RELATIVE``,
``_ABSOLUTE``) whose parts after the separator are optional, so that ``GateError``'s one line can name
the first part missing or wrong, its column (counted from 1) and the fix. ``decide`` decides a gate.

Documented in docs/ci.md (section "Gate expressions", with the metrics and their units).
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from decimal import DecimalException
from typing import Literal

from pytest_ipu.measure import units
from pytest_ipu.results.catalog import ALIASES
from pytest_ipu.results.catalog import METRICS


class GateError(ValueError):
    """A gate expression that does not parse or does not make sense; the message is one line."""


#: Percentages a relative threshold must stay under: a rise may be large, a drop stays under 100%.
_MAX_RISE_PCT = Decimal(1000)
_MAX_DROP_PCT = Decimal(100)


def _hint(metric: str) -> str:
    """``latency.p99 is in seconds: use s, ms, us or ns`` (what to write for the metric's unit)."""
    return f"{metric} is in {units.hint(METRICS[metric].unit)}"


@dataclass(frozen=True)
class Gate:
    """One gate on one metric: a relative threshold against a baseline, or an absolute bound.

    ``threshold`` is, for a relative gate, the allowed fractional change in the metric's worse
    direction (0.05 for ``throughput:-5%`` and for ``latency.p99:+5%``); for an absolute gate, the
    bound in SI units (0.002 for ``latency.p99<2ms``). ``op`` is the absolute gate's comparison
    (``None`` for a relative gate). ``str(gate)`` is the canonical expression, which ``parse`` reads
    back to an equal gate. Raises ``GateError`` for an inconsistent combination.
    """

    metric: str
    kind: Literal["relative", "absolute"]
    threshold: float
    op: Literal["<", ">"] | None = None

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise GateError(
                f"invalid gate: unknown metric {_quoted(self.metric)}; metrics: {', '.join(METRICS)}"
            )
        if not math.isfinite(self.threshold):
            raise GateError(f"invalid gate on {self.metric}: threshold {self.threshold} is not finite")
        if self.kind == "relative":
            limit = 1.0 if METRICS[self.metric].better == "higher" else 10.0
            if self.op is not None:
                raise GateError(f"invalid gate on {self.metric}: a relative gate has no comparison")
            if not 0.0 < self.threshold < limit:
                raise GateError(
                    f"invalid gate on {self.metric}: a relative threshold must be within (0, {limit:g}), "
                    f"got {self.threshold}"
                )
        elif self.kind == "absolute":
            if self.op not in ("<", ">"):
                raise GateError(f"invalid gate on {self.metric}: an absolute gate needs '<' or '>'")
            if self.threshold < 0 or (self.op == "<" and self.threshold == 0):
                raise GateError(
                    f"invalid gate on {self.metric}: bound {self.op} {self.threshold} can never pass"
                )
        else:
            raise GateError(f"invalid gate on {self.metric}: kind must be 'relative' or 'absolute'")

    def __str__(self) -> str:
        if self.kind == "relative":
            sign = "-" if METRICS[self.metric].better == "higher" else "+"
            return f"{self.metric}:{sign}{units.decimal_text(units.float_decimal(self.threshold).scaleb(2))}%"
        number, unit = units.exact_text(self.threshold, METRICS[self.metric].unit)
        return f"{self.metric}{self.op}{number}{unit}"


# --- The two forms and their messages ---------------------------------------------------------------

_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_NAME = r"[^\W\d]\w*(?:\.\w+)*"

# The two forms, anchored at the start. Every part after the separator is optional, so that a
# message can name the first part missing in the order a reader writes them; what follows the match
# is the rest (nothing for a relative threshold, the unit for an absolute bound).
_RELATIVE = re.compile(
    rf" *(?P<metric>{_NAME}) *(?P<colon>:) *(?P<sign>[+-])? *(?P<number>{_NUMBER})? *(?P<percent>%)? *"
)
_ABSOLUTE = re.compile(rf" *(?P<metric>{_NAME}) *(?P<op>[<>=!]=|[<>=]) *(?P<number>{_NUMBER})? *")
_METRIC_NAME = re.compile(_NAME)
#: What a unit may be made of: names, slashes and spaces (``items/s``, ``ms``).
_UNIT = re.compile(rf"(?:{_NAME}|/| )*")
#: The part of an expression a message names when it is not what was expected: a number, a name,
#: a two-character comparison, or one character.
_PIECE = re.compile(rf"{_NUMBER}|{_NAME}|[<>=!]=|\S")


def _fail(text: str, column: int, problem: str, fix: str) -> GateError:
    """The one-line error for ``text``: the expression, what is wrong at ``column`` and the fix."""
    # repr quoting keeps the message on one line whatever the expression holds; a long expression
    # is shown as a window around the column the message names, not whole.
    return GateError(f"bad gate {_shown(text, column)!r}: {problem}; {fix}")


def _next(text: str, pos: int) -> tuple[str | None, int]:
    """The part of ``text`` that starts at the first non-space at or after ``pos``, and its 1-based
    column; ``None`` and the column just past the expression's last character at the end."""
    start = len(text) - len(text[pos:].lstrip(" "))
    piece = _PIECE.match(text, start)
    if piece is None:
        return None, len(text.rstrip(" ")) + 1
    return piece.group(), start + 1


def _relative_example(metric: str, pct: str = "5") -> str:
    sign = "-" if METRICS[metric].better == "higher" else "+"
    return f"{metric}:{sign}{_example_number(pct)}%"


def _absolute_example(metric: str, op: str | None = None) -> str:
    op = op or (">" if METRICS[metric].better == "higher" else "<")
    return f"{metric}{op}{units.UNITS[METRICS[metric].unit].example}"


def _metric(text: str, name: str, column: int) -> str:
    """The catalog's name for ``name`` (an alias resolved); ``GateError`` for an unknown one."""
    if name in METRICS:
        return name
    if name in ALIASES:
        return ALIASES[name]
    close = difflib.get_close_matches(name.lower(), list(METRICS), n=1)
    guess = f"did you mean {close[0]!r}? " if close else ""
    raise _fail(
        text,
        column,
        f"unknown metric {_quoted(name)} at column {column}",
        f"{guess}metrics: {', '.join(METRICS)}",
    )


def _neither_form(text: str) -> GateError:
    """Why ``text``, which matches neither form, is no gate: no metric, or no separator after it."""
    first, column = _next(text, 0)
    if first is None:
        return _fail(
            text, 1, "empty expression", "write a gate such as 'throughput:-5%' or 'latency.p99<2ms'"
        )
    name = _METRIC_NAME.match(text, column - 1)
    if name is None:
        return _fail(
            text,
            column,
            f"expected a metric name at column {column}, got {_quoted(first)}",
            f"start with one of: {', '.join(METRICS)}",
        )
    metric = _metric(text, name.group(), column)
    after, at = _next(text, name.end())
    example = f"write e.g. {_relative_example(metric)!r} or {_absolute_example(metric)!r}"
    if after is None:
        return _fail(text, at, f"missing threshold after {metric!r} at column {at}", example)
    return _fail(
        text, at, f"expected ':', '<' or '>' after {metric!r} at column {at}, got {_quoted(after)}", example
    )


def _relative(text: str, metric: str, match: re.Match[str]) -> Gate:
    """The relative gate of a ``metric:+N%`` match; ``GateError`` for its first wrong part."""
    better = METRICS[metric].better
    regression = (
        f"{metric} is better {better}, so a regression is {'a drop' if better == 'higher' else 'a rise'}"
    )
    sign, number = match.group("sign"), match.group("number")
    if sign is None:
        _, column = _next(text, match.end("colon"))
        example = _relative_example(metric, number or "5")
        raise _fail(text, column, f"missing sign at column {column}", f"{regression}: write {example!r}")
    if number is None:
        got, column = _next(text, match.end("sign"))
        shown = f", got {_quoted(got)}" if got is not None else ""
        raise _fail(
            text,
            column,
            f"expected a percentage at column {column}{shown}",
            f"write e.g. {_relative_example(metric)!r}",
        )
    if (sign == "-") != (better == "higher"):
        column = match.start("sign") + 1
        raise _fail(
            text,
            column,
            f"{_quoted(sign)} at column {column} would gate an improvement",
            f"{regression}: write {_relative_example(metric, number)!r}",
        )
    if match.group("percent") is None:
        _, column = _next(text, match.end("number"))
        raise _fail(
            text,
            column,
            f"expected '%' after {_quoted(number)} at column {column}",
            f"a relative threshold is a percentage: write {_relative_example(metric, number)!r}",
        )
    extra, column = _next(text, match.end())
    if extra is not None:
        raise _fail(
            text, column, f"unexpected {_quoted(extra)} at column {column}", "nothing may follow the '%'"
        )
    return Gate(metric, "relative", _percentage(text, metric, number, match.start("number") + 1))


def _percentage(text: str, metric: str, number: str, column: int) -> float:
    """``number`` percent as a fraction; ``GateError`` when it is out of the metric's range."""
    better = METRICS[metric].better
    limit = _MAX_DROP_PCT if better == "higher" else _MAX_RISE_PCT
    try:
        pct = Decimal(number)
        threshold = float(pct.scaleb(-2))
    except DecimalException:  # an exponent beyond what Decimal can scale
        pct, threshold = limit, math.inf
    # The float check catches percentages that round to 0 or to the limit itself.
    if not (0 < pct < limit and 0.0 < threshold < float(limit) / 100.0):
        why = " (nothing drops by 100% or more)" if better == "higher" else ""
        raise _fail(
            text,
            column,
            f"threshold {_plain(number + '%')} at column {column} is out of range",
            f"the percentage must be more than 0 and less than {limit}{why}",
        )
    return threshold


def _absolute(text: str, metric: str, match: re.Match[str]) -> Gate:
    """The absolute gate of a ``metric<N unit`` match; ``GateError`` for its first wrong part."""
    op, op_column = match.group("op"), match.start("op") + 1
    if op not in ("<", ">"):
        strict = ">" if ">" in op else "<"
        raise _fail(
            text,
            op_column,
            f"comparison {_quoted(op)} at column {op_column} is not supported",
            f"use '<' or '>' (a bound is strict): {_absolute_example(metric, strict)!r}",
        )
    number = match.group("number")
    if number is None:
        got, column = _next(text, match.end("op"))
        shown = f", got {_quoted(got)}" if got is not None else ""
        raise _fail(
            text,
            column,
            f"expected a number after {_quoted(op)} at column {column}{shown}",
            f"write e.g. {_absolute_example(metric, op)!r}",
        )
    scale = _unit_scale(text, metric, number, match.end())
    column = match.start("number") + 1
    # Read from the text: Decimal refuses an exponent of hundreds of digits.
    nonzero = any(digit in "123456789" for digit in re.split("[eE]", number)[0])
    try:
        bound = float(Decimal(number).scaleb(scale))
    except DecimalException:  # an exponent beyond what Decimal can scale: far above or below 1
        bound = math.inf if nonzero and "e-" not in number.lower() else 0.0
    if not math.isfinite(bound):
        raise _fail(
            text,
            column,
            f"bound {_quoted(number)} at column {column} is too large",
            f"write e.g. {_absolute_example(metric, op)!r}",
        )
    if op == "<" and bound == 0.0:
        # 1e-400 is not 0, but no float holds it: say so, not only that the metric is >= 0.
        tiny = " (it underflows to 0: no float is that small)" if nonzero else ""
        raise _fail(
            text,
            op_column,
            f"bound {_quoted('<' + number)} at column {op_column} can never pass{tiny}",
            f"{metric} is never negative: use a bound above 0, e.g. {_absolute_example(metric, '<')!r}",
        )
    return Gate(metric, "absolute", bound, "<" if op == "<" else ">")


def _unit_scale(text: str, metric: str, number: str, start: int) -> int:
    """The power of ten of the unit written from ``start`` to the end of ``text`` (after ``number``)."""
    unit = METRICS[metric].unit
    spec = units.UNITS[unit]
    if not text[start:].strip(" "):
        if spec.bare:
            return 0
        column = len(text.rstrip(" ")) + 1
        raise _fail(
            text,
            column,
            f"missing unit after {_quoted(number)} at column {column}",
            f"{_hint(metric)} (e.g. {_absolute_example(metric)!r})",
        )
    unit_part = _UNIT.match(text, start)
    assert unit_part is not None  # it matches the empty string anywhere
    bad, column = _next(text, unit_part.end())
    if bad == "%":
        raise _fail(
            text,
            column,
            f"'%' at column {column} in an absolute bound",
            f"for a relative threshold write {_relative_example(metric, number)!r}",
        )
    if bad is not None:
        raise _fail(
            text,
            column,
            f"unexpected {_quoted(bad)} at column {column}",
            f"write e.g. {_absolute_example(metric)!r}",
        )
    written = text[start:].rstrip(" ")
    scale = units.scale(unit, written)
    if scale is not None:
        return scale
    other = units.unit_of(written)
    column = start + 1
    if other is not None:
        words = units.UNITS[other].words
        raise _fail(
            text,
            column,
            f"unit {_quoted(written)} at column {column} measures {words}, not {spec.words}",
            _hint(metric),
        )
    raise _fail(text, column, f"unknown unit {_quoted(written)} at column {column}", _hint(metric))


def parse(text: str) -> Gate:
    """The gate an expression describes (see the module docstring for the grammar).

    Raises ``GateError`` with one line naming the expression, the bad part and its column
    (1-based), and how to fix it.
    """
    if not isinstance(text, str):
        raise GateError(f"bad gate {_plain(repr(text))}: a gate is text, got {type(text).__name__}")
    for column, char in enumerate(text, 1):
        # A newline or tab inside an expression (``loadgen.p99<1\nms``) is a pasting accident, not
        # a space between a number and its unit.
        if char.isspace() and char != " ":
            raise GateError(
                f"bad gate {_shown(text, column)!r}: {char!r} at column {column}; a gate is one line: "
                "separate its parts with spaces only"
            )
    match = _RELATIVE.match(text) or _ABSOLUTE.match(text)
    if match is None:
        raise _neither_form(text)
    metric = _metric(text, match.group("metric"), match.start("metric") + 1)
    if match.re is _RELATIVE:
        return _relative(text, metric, match)
    return _absolute(text, metric, match)


#: The most of an expression a message echoes: a window around the bad column.
_ECHO = 60


def _shown(text: str, column: int) -> str:
    """``text``, or where it is long, the ``_ECHO`` characters around ``column`` marked as cut."""
    if len(text) <= _ECHO:
        return text
    start = max(0, min(column - 1 - _ECHO // 2, len(text) - _ECHO))
    return (
        ("..." if start else "") + text[start : start + _ECHO] + ("..." if start + _ECHO < len(text) else "")
    )


#: The most characters of one part of an expression (a name, a number, a unit) a message echoes.
_PART = 30


def _quoted(text: str) -> str:
    """``repr(text)``; for a part longer than ``_PART``, its first ``_PART`` characters quoted,
    marked as cut and followed by its length, so that no message grows with the expression."""
    if len(text) <= _PART:
        return repr(text)
    return f"{text[:_PART]!r}... ({len(text)} characters)"


def _plain(text: str) -> str:
    """``text`` as it is, or where it is longer than ``_PART``, ``_quoted``."""
    return text if len(text) <= _PART else _quoted(text)


def _example_number(text: str) -> str:
    """The number a fix's example repeats from the expression: ``text``, or ``5`` where it is too
    long to echo."""
    return text if len(text) <= _PART else "5"
