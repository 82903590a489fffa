"""Performance gates: a threshold on one metric, parsed from text and checked against records (pure).

Grammar
-------
One expression is used on the command line (``--ipu-gate``, repeatable), in the ini file and in
the marker::

    gate     := metric ":" sign number "%"        relative to the baseline
              | metric ("<" | ">") number unit     absolute bound
    metric   := a name of ``pytest_ipu.results.catalog.METRICS``, the registry of metrics
                (docs/ci.md lists them with their units), or one of its ``ALIASES``
                (pytest-benchmark's ``time.median`` is ``latency.p50``: the gate is on that metric)
    sign     := "+" for a metric that is better lower, "-" for one that is better higher
    number   := digits with an optional fraction and exponent (2, 2.5, .5, 2e-3)

Spaces between the parts are allowed. Examples: ``throughput:-5%`` fails when throughput drops by
more than 5%; ``latency.p99:+10%`` when p99 rises by more than 10%; ``latency.p99<2ms``,
``throughput>2500/s``, ``power<300W``, ``energy_per_item<0.5J`` and ``items_per_j>9.5`` bound the
current value itself.

A relative threshold's sign must be the metric's worse direction (a rise for latency, a drop for
throughput), and the percentage must be more than 0 and less than 1000 (less than 100 for a drop,
since nothing drops by 100% or more). Units: ``s``, ``ms``, ``us`` (or ``µs``) and ``ns`` for
times (latency, compile, first_call); ``/s`` or ``items/s`` for throughput; ``J``, ``mJ`` and
``kJ`` for energy and energy_per_item; ``W``, ``mW`` and ``kW`` for power; ``/J`` or ``items/J``
for items_per_j (the registry of units is ``pytest_ipu.measure.units``). A bare number is
accepted only for throughput and items_per_j, whose unit has no prefixes to confuse; times,
energies and powers need their unit (``latency.p99<2`` is an error). An absolute bound may use
``<`` or ``>`` on any metric; ``<`` needs a bound above 0, since no metric is negative. ``<=``,
``>=`` and ``=`` are not accepted: a bound is strict. A bad expression raises ``GateError`` with
one line: the expression, the bad part and its column (counted from 1), and the fix.

How a gate is decided is in ``pytest_ipu.results.decide``.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from decimal import DecimalException
from typing import Literal
from typing import cast

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


# --- Tokenizer and parser -------------------------------------------------------------------------


_Kind = Literal["name", "number", "op", "colon", "sign", "percent", "slash", "other"]


@dataclass(frozen=True)
class _Token:
    """A piece of the expression: its kind, its text and its 1-based column."""

    kind: _Kind
    text: str
    column: int


_TOKEN = re.compile(
    r"""
    (?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
    |(?P<name>[^\W\d]\w*(?:\.\w+)*)
    |(?P<op><=|>=|==|!=|<|>|=)
    |(?P<colon>:)
    |(?P<sign>[+-])
    |(?P<percent>%)
    |(?P<slash>/)
    |(?P<other>\S)
    """,
    re.VERBOSE,
)


def _tokens(text: str) -> list[_Token]:
    """The tokens of ``text``, whitespace dropped; every character lands in some token."""
    out = []
    pos = 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        match = _TOKEN.match(text, pos)
        # 'other' matches any character that is not a space, so there is always a match.
        assert match is not None
        out.append(_Token(cast(_Kind, match.lastgroup), match.group(), pos + 1))
        pos = match.end()
    return out


class _Parser:
    """Recursive descent over the tokens of one expression; errors name the expression."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.index = 0

    def fail(self, problem: str, fix: str) -> GateError:
        # repr quoting keeps the message on one line whatever the expression holds; a long
        # expression is shown as a window around where parsing stopped, not whole.
        return GateError(f"bad gate {_shown(self.text, self.stop_column())!r}: {problem}; {fix}")

    def stop_column(self) -> int:
        """The 1-based column of the last token read (1 before any), near what ``fail`` names."""
        return self.tokens[self.index - 1].column if self.index > 0 and self.tokens else 1

    def peek(self) -> _Token | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def take(self) -> _Token | None:
        token = self.peek()
        self.index += token is not None
        return token

    def end_column(self) -> int:
        return len(self.text.rstrip()) + 1

    def gate(self) -> Gate:
        first = self.take()
        if first is None:
            raise self.fail("empty expression", "write a gate such as 'throughput:-5%' or 'latency.p99<2ms'")
        if first.kind != "name":
            raise self.fail(
                f"expected a metric name at column {first.column}, got {_quoted(first.text)}",
                f"start with one of: {', '.join(METRICS)}",
            )
        metric = self.metric(first)
        after = self.take()
        if after is None:
            raise self.fail(
                f"missing threshold after {metric!r} at column {self.end_column()}",
                f"write e.g. {self.relative_example(metric)!r} or {self.absolute_example(metric)!r}",
            )
        if after.kind == "colon":
            return self.relative(metric)
        if after.text in ("<", ">"):
            return self.absolute(metric, after)
        if after.kind == "op":
            strict = ">" if ">" in after.text else "<"
            raise self.fail(
                f"comparison {_quoted(after.text)} at column {after.column} is not supported",
                f"use '<' or '>' (a bound is strict): {self.absolute_example(metric, strict)!r}",
            )
        raise self.fail(
            f"expected ':', '<' or '>' after {metric!r} at column {after.column}, got {_quoted(after.text)}",
            f"write e.g. {self.relative_example(metric)!r} or {self.absolute_example(metric)!r}",
        )

    def metric(self, token: _Token) -> str:
        if token.text in METRICS:
            return token.text
        if token.text in ALIASES:
            return ALIASES[token.text]
        close = difflib.get_close_matches(token.text.lower(), list(METRICS), n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        raise self.fail(
            f"unknown metric {_quoted(token.text)} at column {token.column}",
            f"{guess}metrics: {', '.join(METRICS)}",
        )

    @staticmethod
    def relative_example(metric: str, pct: str = "5") -> str:
        sign = "-" if METRICS[metric].better == "higher" else "+"
        return f"{metric}:{sign}{_example_number(pct)}%"

    @staticmethod
    def absolute_example(metric: str, op: str | None = None) -> str:
        op = op or (">" if METRICS[metric].better == "higher" else "<")
        return f"{metric}{op}{units.UNITS[METRICS[metric].unit].example}"

    def relative(self, metric: str) -> Gate:
        better = METRICS[metric].better
        worse = "a drop" if better == "higher" else "a rise"
        sign = self.take()
        if sign is None or sign.kind != "sign":
            column = sign.column if sign is not None else self.end_column()
            shown = sign.text if sign is not None and sign.kind == "number" else "5"
            raise self.fail(
                f"missing sign at column {column}",
                f"{metric} is better {better}, so a regression is {worse}: "
                f"write {self.relative_example(metric, shown)!r}",
            )
        number = self.take()
        if number is None or number.kind != "number":
            got = f", got {_quoted(number.text)}" if number is not None else ""
            column = number.column if number is not None else self.end_column()
            raise self.fail(
                f"expected a percentage at column {column}{got}",
                f"write e.g. {self.relative_example(metric)!r}",
            )
        if (sign.text == "-") != (better == "higher"):
            raise self.fail(
                f"{_quoted(sign.text)} at column {sign.column} would gate an improvement",
                f"{metric} is better {better}, so a regression is {worse}: "
                f"write {self.relative_example(metric, number.text)!r}",
            )
        percent = self.take()
        if percent is None or percent.kind != "percent":
            column = percent.column if percent is not None else self.end_column()
            raise self.fail(
                f"expected '%' after {_quoted(number.text)} at column {column}",
                f"a relative threshold is a percentage: write {self.relative_example(metric, number.text)!r}",
            )
        self.expect_end("'%'")
        limit = _MAX_DROP_PCT if better == "higher" else _MAX_RISE_PCT
        try:
            pct = Decimal(number.text)
            threshold = float(pct.scaleb(-2))
        except DecimalException:  # an exponent beyond what Decimal can scale
            pct, threshold = limit, math.inf
        # The float check catches percentages that round to 0 or to the limit itself.
        if not (0 < pct < limit and 0.0 < threshold < float(limit) / 100.0):
            why = " (nothing drops by 100% or more)" if better == "higher" else ""
            raise self.fail(
                f"threshold {_plain(number.text + '%')} at column {number.column} is out of range",
                f"the percentage must be more than 0 and less than {limit}{why}",
            )
        return Gate(metric, "relative", threshold)

    def absolute(self, metric: str, op: _Token) -> Gate:
        number = self.take()
        if number is None or number.kind != "number":
            got = f", got {_quoted(number.text)}" if number is not None else ""
            column = number.column if number is not None else self.end_column()
            raise self.fail(
                f"expected a number after {_quoted(op.text)} at column {column}{got}",
                f"write e.g. {self.absolute_example(metric, op.text)!r}",
            )
        scale = self.unit(metric, number)
        # Read from the text: Decimal refuses an exponent of hundreds of digits.
        nonzero = any(digit in "123456789" for digit in re.split("[eE]", number.text)[0])
        try:
            bound = float(Decimal(number.text).scaleb(scale))
        except DecimalException:  # an exponent beyond what Decimal can scale: far above or below 1
            bound = math.inf if nonzero and "e-" not in number.text.lower() else 0.0
        if not math.isfinite(bound):
            raise self.fail(
                f"bound {_quoted(number.text)} at column {number.column} is too large",
                f"write e.g. {self.absolute_example(metric, op.text)!r}",
            )
        if op.text == "<" and bound == 0.0:
            example = self.absolute_example(metric, "<")
            # 1e-400 is not 0, but no float holds it: say so, not only that the metric is >= 0.
            tiny = " (it underflows to 0: no float is that small)" if nonzero else ""
            raise self.fail(
                f"bound {_quoted('<' + number.text)} at column {op.column} can never pass{tiny}",
                f"{metric} is never negative: use a bound above 0, e.g. {example!r}",
            )
        return Gate(metric, "absolute", bound, "<" if op.text == "<" else ">")

    def unit(self, metric: str, number: _Token) -> int:
        """The power of ten of the unit after ``number``; the rest of the expression is the unit."""
        unit = METRICS[metric].unit
        spec = units.UNITS[unit]
        rest = self.tokens[self.index :]
        self.index = len(self.tokens)
        if not rest:
            if spec.bare:
                return 0
            raise self.fail(
                f"missing unit after {_quoted(number.text)} at column {self.end_column()}",
                f"{_hint(metric)} (e.g. {self.absolute_example(metric)!r})",
            )
        for token in rest:
            if token.kind == "percent":
                raise self.fail(
                    f"'%' at column {token.column} in an absolute bound",
                    f"for a relative threshold write {self.relative_example(metric, number.text)!r}",
                )
            if token.kind not in ("name", "slash"):
                raise self.fail(
                    f"unexpected {_quoted(token.text)} at column {token.column}",
                    f"write e.g. {self.absolute_example(metric)!r}",
                )
        first = rest[0]
        text = self.text[first.column - 1 : rest[-1].column - 1 + len(rest[-1].text)]
        scale = units.scale(unit, text)
        if scale is not None:
            return scale
        other = units.unit_of(text)
        if other is not None:
            words = units.UNITS[other].words
            raise self.fail(
                f"unit {_quoted(text)} at column {first.column} measures {words}, not {spec.words}",
                _hint(metric),
            )
        raise self.fail(f"unknown unit {_quoted(text)} at column {first.column}", _hint(metric))

    def expect_end(self, after: str) -> None:
        extra = self.take()
        if extra is not None:
            raise self.fail(
                f"unexpected {_quoted(extra.text)} at column {extra.column}",
                f"nothing may follow the {after}",
            )


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
    return _Parser(text).gate()


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
