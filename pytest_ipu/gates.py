"""Performance gates: a threshold on one metric, parsed from text and checked against records (pure).

Grammar
-------
One expression is used on the command line (``--ipu-gate``, repeatable), in the ini file and in
the marker::

    gate     := metric ":" sign number "%"        relative to the baseline
              | metric ("<" | ">") number unit     absolute bound
    metric   := a name of ``schema.METRICS``: latency.min, latency.p50, latency.p90, latency.p99,
                latency.max, latency.mean, throughput, compile, first_call, energy, power,
                energy_per_item, items_per_j
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
for items_per_j. A bare number is accepted only for throughput and items_per_j, whose unit has
no prefixes to confuse; times, energies and powers need their unit (``latency.p99<2`` is an
error). An absolute bound may use ``<`` or ``>`` on any metric; ``<`` needs a bound above 0,
since no metric is negative. ``<=``, ``>=`` and ``=`` are not accepted: a bound is strict. A bad
expression raises ``GateError`` with one line: the expression, the bad part and its column
(counted from 1), and the fix.

Decision rule
-------------
A relative gate (``latency.p99:+10%``, ``throughput:-5%``) fails only when both hold:

1. the observed change of the gated metric, ``current / baseline - 1`` from the two records, is
   beyond the threshold in the metric's worse direction: a rise of more than 10% for
   ``latency.p99:+10%``, a drop of more than 5% for ``throughput:-5%``; and
2. the change is significantly *beyond the threshold* on pytest-benchmark's per-round times: a
   one-sided Mann-Whitney U test (normal approximation with tie and continuity corrections) of
   the hypothesis that the current round times are larger than the baseline's grown by the
   allowed amount (x 1.10 for ``latency.p99:+10%``; x 1/0.95 for ``throughput:-5%``) gives
   p < alpha (0.01 by default). Throughput is tested on the round times too: it regresses when
   rounds take longer.

Why against the threshold and not against "no change": the rounds of one run share its machine
state (clock frequency, neighbours, caches), so two runs of the same code differ by a few percent
as a whole, and a test against no change finds that difference significant, however small. Tested
against the threshold, a run-to-run drift has to exceed the allowed change clearly before the
gate fails. ``benchmarks/test_gate_accuracy.py`` measures the false alarms and detections this
gives, side by side with pytest-benchmark's check; docs/ci.md has the figures and their limits.

The test compares whole distributions of round times, so a change confined to the slowest rounds
(a p99 that grows while the bulk stays put) may be beyond the threshold yet not significant; the
bootstrap interval below shows how far the statistic itself moved.

Each verdict also reports a (1 - alpha) confidence interval, 99% by default, of the ratio current
/ baseline of the gated statistic of the round times: the median for throughput (the ratio of
throughputs, baseline median time / current median time), the percentile itself for
latency.p50, p90 and p99, the minimum and maximum for latency.min and latency.max, the mean for
latency.mean. The interval is a percentile bootstrap of 2000 resamples of both samples, seeded
(``numpy.random.default_rng(0)``), so the same runs always give the same interval.

Energy, power, compile and first-call times are measured once per benchmark, not per round, and a
baseline saved without ``--benchmark-save-data`` keeps no round times: such a gate decides on the
threshold alone, and its verdict's method says so. When the baseline record lacks the metric (the
baseline measured no power, say), the gate cannot compare and passes, saying so.

Given three or more baseline runs (``history``), the verdict also states how much the gated metric
differs between them and the smallest change that drift lets a run-to-run test see; and a gate
that has no per-round samples to test is decided by that run-to-run test instead of the threshold
alone: a one-sided t test of this run's value (log scale) against the baseline runs' mean moved by
the threshold, their spread as the noise, ``k - 1`` degrees of freedom, p < alpha.

An absolute gate (``latency.p99<2ms``, ``throughput>2500/s``) fails when the current value is not
strictly within the bound. A value the current record lacks fails any gate, with the reason the
record gives (for power, the reason it was not measured).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from decimal import DecimalException
from typing import Any
from typing import Literal
from typing import cast

import numpy as np

from pytest_ipu import stats
from pytest_ipu.schema import METRICS


class GateError(ValueError):
    """A gate expression that does not parse or does not make sense; the message is one line."""


@dataclass(frozen=True)
class _Unit:
    """How the values of one kind of metric are written: accepted units and display scales."""

    #: How the hint names the unit ("seconds").
    words: str
    #: Accepted unit text -> power of ten of its scale to SI.
    accepted: Mapping[str, int]
    #: The accepted units the hint lists, in order.
    listed: tuple[str, ...]
    #: Whether a bare number is accepted (the unit has no prefixes to mistake).
    bare: bool
    #: A bound to show in examples of a fix.
    example: str
    #: Display units from the smallest scale up: (text, power of ten); a bare unit is "".
    display: tuple[tuple[str, int], ...]


_UNITS: Mapping[str, _Unit] = {
    "s": _Unit(
        "seconds",
        {"s": 0, "ms": -3, "us": -6, "\u00b5s": -6, "\u03bcs": -6, "ns": -9},
        ("s", "ms", "us", "ns"),
        False,
        "2ms",
        (("ns", -9), ("us", -6), ("ms", -3), ("s", 0)),
    ),
    "items/s": _Unit(
        "items per second", {"/s": 0, "items/s": 0}, ("/s", "items/s"), True, "2500/s", (("/s", 0),)
    ),
    "J": _Unit(
        "joules",
        {"J": 0, "mJ": -3, "kJ": 3},
        ("J", "mJ", "kJ"),
        False,
        "0.5J",
        (("mJ", -3), ("J", 0), ("kJ", 3)),
    ),
    "W": _Unit(
        "watts",
        {"W": 0, "mW": -3, "kW": 3},
        ("W", "mW", "kW"),
        False,
        "300W",
        (("mW", -3), ("W", 0), ("kW", 3)),
    ),
    "items/J": _Unit("items per joule", {"/J": 0, "items/J": 0}, ("/J", "items/J"), True, "9.5", (("", 0),)),
}

#: How a line names the units that expressions write in short.
_UNIT_NAMES: Mapping[str, str] = {"/s": "items/s", "": "items/J"}

#: Percentages a relative threshold must stay under: a rise may be large, a drop stays under 100%.
_MAX_RISE_PCT = Decimal(1000)
_MAX_DROP_PCT = Decimal(100)


def _hint(metric: str) -> str:
    """``latency.p99 is in seconds: use s, ms, us or ns`` (what to write for the metric's unit)."""
    unit = _UNITS[METRICS[metric].unit]
    *head, last = unit.listed
    listed = f"{', '.join(head)} or {last}" if head else last
    return f"{metric} is in {unit.words}: use {listed}" + (", or no unit" if unit.bare else "")


def _decimal_text(value: Decimal) -> str:
    """Shortest plain text of a decimal: ``2``, ``0.25``; exponent form only for extreme magnitudes."""
    value = value.normalize()
    if value.is_zero():
        return "0"
    if -7 <= value.adjusted() <= 15:
        return format(value, "f")
    return format(value, "e")


def _float_decimal(value: float) -> Decimal:
    """The shortest decimal that reads back as ``value`` (``repr``), so text round-trips exactly."""
    return Decimal(repr(abs(value)))


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
            raise GateError(f"invalid gate: unknown metric {self.metric!r}; metrics: {', '.join(METRICS)}")
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
            return f"{self.metric}:{sign}{_decimal_text(_float_decimal(self.threshold).scaleb(2))}%"
        number, unit = _exact_bound(self.threshold, METRICS[self.metric].unit)
        return f"{self.metric}{self.op}{number}{unit}"


def _exact_bound(value: float, unit: str) -> tuple[str, str]:
    """A bound as exact text in a suitable unit: ``0.002`` s -> ``("2", "ms")``.

    The unit is the largest display unit not above the value (the smallest one for tiny values).
    Decimal scaling is exact, so the text parses back to the same float.
    """
    spec = _UNITS[unit]
    exact = _float_decimal(value)
    text, power = spec.display[0]
    for candidate, candidate_power in spec.display:
        if exact >= Decimal(1).scaleb(candidate_power):
            text, power = candidate, candidate_power
    return _decimal_text(exact.scaleb(-power)), text


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
        # repr quoting keeps the message on one line whatever the expression holds.
        return GateError(f"bad gate {self.text!r}: {problem}; {fix}")

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
                f"expected a metric name at column {first.column}, got {first.text!r}",
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
                f"comparison {after.text!r} at column {after.column} is not supported",
                f"use '<' or '>' (a bound is strict): {self.absolute_example(metric, strict)!r}",
            )
        raise self.fail(
            f"expected ':', '<' or '>' after {metric!r} at column {after.column}, got {after.text!r}",
            f"write e.g. {self.relative_example(metric)!r} or {self.absolute_example(metric)!r}",
        )

    def metric(self, token: _Token) -> str:
        if token.text in METRICS:
            return token.text
        close = difflib.get_close_matches(token.text.lower(), list(METRICS), n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        raise self.fail(
            f"unknown metric {token.text!r} at column {token.column}",
            f"{guess}metrics: {', '.join(METRICS)}",
        )

    @staticmethod
    def relative_example(metric: str, pct: str = "5") -> str:
        sign = "-" if METRICS[metric].better == "higher" else "+"
        return f"{metric}:{sign}{pct}%"

    @staticmethod
    def absolute_example(metric: str, op: str | None = None) -> str:
        op = op or (">" if METRICS[metric].better == "higher" else "<")
        return f"{metric}{op}{_UNITS[METRICS[metric].unit].example}"

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
            got = f", got {number.text!r}" if number is not None else ""
            column = number.column if number is not None else self.end_column()
            raise self.fail(
                f"expected a percentage at column {column}{got}",
                f"write e.g. {self.relative_example(metric)!r}",
            )
        if (sign.text == "-") != (better == "higher"):
            raise self.fail(
                f"{sign.text!r} at column {sign.column} would gate an improvement",
                f"{metric} is better {better}, so a regression is {worse}: "
                f"write {self.relative_example(metric, number.text)!r}",
            )
        percent = self.take()
        if percent is None or percent.kind != "percent":
            column = percent.column if percent is not None else self.end_column()
            raise self.fail(
                f"expected '%' after {number.text!r} at column {column}",
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
                f"threshold {number.text}% at column {number.column} is out of range",
                f"the percentage must be more than 0 and less than {limit}{why}",
            )
        return Gate(metric, "relative", threshold)

    def absolute(self, metric: str, op: _Token) -> Gate:
        number = self.take()
        if number is None or number.kind != "number":
            got = f", got {number.text!r}" if number is not None else ""
            column = number.column if number is not None else self.end_column()
            raise self.fail(
                f"expected a number after {op.text!r} at column {column}{got}",
                f"write e.g. {self.absolute_example(metric, op.text)!r}",
            )
        scale = self.unit(metric, number)
        try:
            bound = float(Decimal(number.text).scaleb(scale))
        except DecimalException:  # an exponent beyond what Decimal can scale
            bound = math.inf
        if not math.isfinite(bound):
            raise self.fail(
                f"bound {number.text!r} at column {number.column} is too large",
                f"write e.g. {self.absolute_example(metric, op.text)!r}",
            )
        if op.text == "<" and bound == 0.0:
            example = self.absolute_example(metric, "<")
            raise self.fail(
                f"bound '<{number.text}' at column {op.column} can never pass",
                f"{metric} is never negative: use a bound above 0, e.g. {example!r}",
            )
        return Gate(metric, "absolute", bound, "<" if op.text == "<" else ">")

    def unit(self, metric: str, number: _Token) -> int:
        """The power of ten of the unit after ``number``; the rest of the expression is the unit."""
        spec = _UNITS[METRICS[metric].unit]
        rest = self.tokens[self.index :]
        self.index = len(self.tokens)
        if not rest:
            if spec.bare:
                return 0
            raise self.fail(
                f"missing unit after {number.text!r} at column {self.end_column()}",
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
                    f"unexpected {token.text!r} at column {token.column}",
                    f"write e.g. {self.absolute_example(metric)!r}",
                )
        first = rest[0]
        text = self.text[first.column - 1 : rest[-1].column - 1 + len(rest[-1].text)]
        if text in spec.accepted:
            return spec.accepted[text]
        other = next((name for name, u in _UNITS.items() if text in u.accepted), None)
        if other is not None:
            raise self.fail(
                f"unit {text!r} at column {first.column} measures {_UNITS[other].words}, not {spec.words}",
                _hint(metric),
            )
        raise self.fail(f"unknown unit {text!r} at column {first.column}", _hint(metric))

    def expect_end(self, after: str) -> None:
        extra = self.take()
        if extra is not None:
            raise self.fail(
                f"unexpected {extra.text!r} at column {extra.column}",
                f"nothing may follow the {after}",
            )


def parse(text: str) -> Gate:
    """The gate an expression describes (see the module docstring for the grammar).

    Raises ``GateError`` with one line naming the expression, the bad part and its column
    (1-based), and how to fix it.
    """
    if not isinstance(text, str):
        raise GateError(f"bad gate {text!r}: a gate is text, got {type(text).__name__}")
    return _Parser(text).gate()


# --- Values in records ----------------------------------------------------------------------------


def metric_value(record: Mapping[str, Any], metric: str) -> float | None:
    """The value of ``metric`` in a record JSON (``extra_info["ipu"]``), or ``None`` when absent.

    ``None`` covers a missing key, a null (power not measured, compile time of a plain callable)
    and anything that is not a number. Raises ``KeyError`` for a name that is not a metric.
    """
    node: Any = record
    for key in METRICS[metric].path:
        if not isinstance(node, Mapping) or node.get(key) is None:
            return None
        node = node[key]
    if isinstance(node, bool) or not isinstance(node, int | float):
        return None
    return float(node)


def _missing_reason(record: Mapping[str, Any], metric: str) -> str:
    """Why ``metric`` has no value in ``record``, as specific as the record allows."""
    path = METRICS[metric].path
    if path[0] == "power":
        power = record.get("power")
        if isinstance(power, Mapping) and power.get("reason"):
            return f"power not measured: {power['reason']}"
        if not isinstance(power, Mapping):
            return "power not measured (the record has no power section)"
    if metric == "compile" and "compile_s" in record:
        return "no compile time (the benchmarked object was not a compiled model)"
    return f"the record has no value at {'.'.join(path)}"


def _human(value: float, unit: str) -> str:
    """``0.00245`` s -> ``2.45 ms``: four significant figures in a unit that suits the value."""
    if not math.isfinite(value):
        return f"{value} {unit}"
    if unit in ("items/s", "items/J"):
        return f"{value:,.0f} {unit}" if abs(value) >= 1000 else f"{value:.4g} {unit}"
    display = _UNITS[unit].display
    scaled, name = value / 10.0 ** display[0][1], display[0][0]
    for text, power in display:
        # Compare after rounding, so 0.99996 s reads '1 s' rather than '1000 ms'.
        if abs(float(f"{value / 10.0**power:.4g}")) >= 1:
            scaled, name = value / 10.0**power, text
    return f"{scaled:.4g} {name}"


# --- Verdicts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """The outcome of one gate on one benchmark, with the numbers it was decided on.

    ``baseline`` is ``None`` for an absolute gate; ``current`` is ``None`` when the current record
    lacks the metric (the gate then fails and ``method`` says why). ``change`` is ``current /
    baseline - 1`` for a relative gate. ``p_value`` (one-sided Mann-Whitney U) and ``interval``
    (bootstrap confidence interval of the ratio current / baseline of the gated statistic) are set
    when per-round samples were used. ``method`` says how the verdict was reached, including when it
    rests on the threshold alone.
    """

    gate: Gate
    benchmark: str
    passed: bool
    baseline: float | None
    current: float | None
    change: float | None
    p_value: float | None
    interval: tuple[float, float] | None
    method: str

    def line(self) -> str:
        """One line for a list of results: benchmark, metric, values, change, threshold, evidence, verdict."""
        unit = METRICS[self.gate.metric].unit
        current = "no value" if self.current is None else _human(self.current, unit)
        head = f"{self.benchmark} {self.gate.metric}: "
        if self.gate.kind == "absolute":
            # The bound exactly as the gate has it: rounding it could show '2 ms, bound < 2 ms: FAIL'.
            number, shown = _exact_bound(self.gate.threshold, unit)
            bound = f"bound {self.gate.op} {number} {_UNIT_NAMES.get(shown, shown)}"
            return f"{head}{current}, {bound}: {self._outcome()} ({self.method})"
        baseline = "no value" if self.baseline is None else _human(self.baseline, unit)
        sign = "-" if METRICS[self.gate.metric].better == "higher" else "+"
        limit = f"threshold {sign}{_decimal_text(_float_decimal(self.gate.threshold).scaleb(2))}%"
        change = "" if self.change is None else f"{_percent(self.change)}, "
        parts = [f"{head}{baseline} -> {current} ({change}{limit})"]
        if self.p_value is not None:
            parts.append(f"p={self.p_value:.2g}")
        if self.interval is not None:
            parts.append(f"ratio CI [{self.interval[0]:.3f}, {self.interval[1]:.3f}]")
        return f"{', '.join(parts)}: {self._outcome()} ({self.method})"

    def _outcome(self) -> str:
        if not self.passed:
            return "FAIL"
        if self.gate.kind == "relative" and self.baseline is None:
            return "not compared"
        if self.change is not None and _beyond(self.gate, self.change):
            return "pass, not significant"
        return "pass"


def _percent(change: float) -> str:
    """``0.1667`` -> ``+16.7%``."""
    return f"{change * 100:+.1f}%"


def _beyond(gate: Gate, change: float) -> bool:
    """Whether a relative change is past the gate's threshold in the metric's worse direction."""
    if METRICS[gate.metric].better == "higher":
        return change < -gate.threshold
    return change > gate.threshold


#: How each metric with per-round samples is computed from them, for the bootstrap interval:
#: a percentile, or the mean. Throughput is items per unit time, so its ratio is the inverse of
#: the ratio of median round times (``check`` swaps the samples).
_SAMPLE_STATISTIC: Mapping[str, float | Callable[[stats.FloatArray], float]] = {
    "latency.min": 0.0,
    "latency.p50": 50.0,
    "latency.p90": 90.0,
    "latency.p99": 99.0,
    "latency.max": 100.0,
    "latency.mean": np.mean,
    "throughput": 50.0,
}

#: Resamples of the bootstrap interval a verdict reports.
BOOTSTRAP_RESAMPLES = 2000


def check(
    gate: Gate,
    benchmark: str,
    current: Mapping[str, Any],
    baseline: Mapping[str, Any] | None = None,
    current_samples_s: Sequence[float] | None = None,
    baseline_samples_s: Sequence[float] | None = None,
    *,
    alpha: float = 0.01,
    history: Sequence[float] | None = None,
) -> Verdict:
    """Decide one gate for one benchmark by the rule of the module docstring.

    ``current`` and ``baseline`` are record JSON objects (``extra_info["ipu"]``); the samples are
    pytest-benchmark's per-round times in seconds (``None`` or empty when not saved). ``history``
    holds the gated metric's value in every baseline run (the baseline's own included); with
    ``HISTORY_MIN`` or more of them the verdict states their drift, and where there are no per-round
    samples to test, a run-to-run test against that drift decides instead of the threshold alone. Raises
    ``ValueError`` for a relative gate without a baseline record (callers decide what a missing
    baseline means) and for ``alpha`` outside (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")
    value = metric_value(current, gate.metric)
    if gate.kind == "absolute":
        if value is None:
            reason = f"no value in the current record: {_missing_reason(current, gate.metric)}"
            return Verdict(gate, benchmark, False, None, None, None, None, None, reason)
        passed = value < gate.threshold if gate.op == "<" else value > gate.threshold
        return Verdict(gate, benchmark, passed, None, value, None, None, None, "absolute bound")
    if baseline is None:
        raise ValueError(f"relative gate {gate} on {benchmark}: no baseline record to compare with")
    before = metric_value(baseline, gate.metric)
    if value is None:
        reason = f"no value in the current record: {_missing_reason(current, gate.metric)}"
        return Verdict(gate, benchmark, False, before, None, None, None, None, reason)
    if before is None:
        reason = f"no value in the baseline: {_missing_reason(baseline, gate.metric)}"
        return Verdict(gate, benchmark, True, None, value, None, None, None, reason)
    usable = [h for h in history or () if h > 0 and math.isfinite(h)]
    runs = len(usable) >= HISTORY_MIN and value > 0
    change = _relative_change(before, value)
    beyond = _beyond(gate, change)
    statistic = _SAMPLE_STATISTIC.get(gate.metric)
    no_samples = (
        baseline_samples_s is None
        or len(baseline_samples_s) == 0
        or current_samples_s is None
        or len(current_samples_s) == 0
    )
    if runs and (statistic is None or no_samples):
        # Nothing per round to test: the spread of whole baseline runs is the best evidence there is.
        return _check_history(gate, benchmark, value, usable, alpha)
    drift = f"; {_drift(gate, usable, alpha)}" if runs else ""
    if statistic is None:
        method = f"threshold only: {gate.metric} is measured once per benchmark, not per round"
    elif baseline_samples_s is None or len(baseline_samples_s) == 0:
        method = "threshold only: no per-round samples in the baseline (save it with --benchmark-save-data)"
    elif current_samples_s is None or len(current_samples_s) == 0:
        method = "threshold only: no per-round samples in the current run"
    else:
        # Both throughput and latency regress when round times grow. The test is against the
        # threshold, not against no change: are the current round times larger than the baseline's
        # grown by the allowed amount? Per-round samples of one run share its machine state, so a
        # test against no change calls any run-to-run drift significant (docs/ci.md measures this).
        allowed = _allowed_time_factor(gate)
        scaled = [t * allowed for t in baseline_samples_s]
        _, p = stats.mann_whitney_u(current_samples_s, scaled, alternative="greater")
        top, bottom = current_samples_s, baseline_samples_s
        if gate.metric == "throughput":
            top, bottom = bottom, top
        interval = stats.bootstrap_ratio_ci(
            top, bottom, statistic, confidence=1.0 - alpha, resamples=BOOTSTRAP_RESAMPLES, seed=0
        )
        method = (
            f"one-sided Mann-Whitney U of per-round times against the baseline's x {allowed:.4g} "
            f"(n={len(current_samples_s)} current vs {len(baseline_samples_s)} baseline, alpha {alpha:g}), "
            f"bootstrap {(1.0 - alpha) * 100:g}% CI of the ratio{drift}"
        )
        return Verdict(
            gate, benchmark, not (beyond and p < alpha), before, value, change, p, interval, method
        )
    return Verdict(gate, benchmark, not beyond, before, value, change, None, None, method + drift)


#: Fewest baseline runs from which the run-to-run spread is estimated.
HISTORY_MIN = 3


def _spread(gate: Gate, history: Sequence[float], alpha: float) -> tuple[float, float, float, float]:
    """Of the baseline runs' log values: mean, sd, the scale of a new run's deviation, and the
    smallest change (as a ratio) the run-to-run test could call beyond the threshold."""
    logs = np.log(np.asarray(history, dtype=np.float64))
    k = len(logs)
    centre, spread = float(np.mean(logs)), float(np.std(logs, ddof=1))
    scale = spread * math.sqrt(1.0 + 1.0 / k)
    critical = stats.t_isf(alpha, k - 1) * scale
    if METRICS[gate.metric].better == "higher":
        detectable = math.exp(-(math.log(1.0 - gate.threshold) - critical))
    else:
        detectable = math.exp(math.log1p(gate.threshold) + critical)
    return centre, spread, scale, detectable


def _drift(gate: Gate, history: Sequence[float], alpha: float) -> str:
    """What the baseline runs say about this machine's run-to-run drift, as a caution."""
    _, spread, _, detectable = _spread(gate, history, alpha)
    return (
        f"{len(history)} baseline runs differ by {spread * 100:.1f}% sd between runs: a change under "
        f"{_percent(detectable - 1.0)} is within this machine's drift"
    )


def _check_history(
    gate: Gate, benchmark: str, value: float, history: Sequence[float], alpha: float
) -> Verdict:
    """The run-to-run test, for metrics without per-round samples: is this run's value beyond the
    threshold, judged by how much the baseline runs themselves spread?

    On log values (ratios become differences): the one-sided t statistic of this run, as a new
    observation, against the baseline runs' mean moved by the threshold,
    ``(log(value) - mean - log(1 + t)) / (sd * sqrt(1 + 1/k))`` with ``k - 1`` degrees of freedom
    (mirrored for better-higher metrics). ``method`` states the spread and the smallest change it
    lets the gate detect.
    """
    centre, spread, scale, detectable = _spread(gate, history, alpha)
    baseline = math.exp(centre)
    change = value / baseline - 1.0
    beyond = _beyond(gate, change)
    if METRICS[gate.metric].better == "higher":
        excess = centre + math.log(1.0 - gate.threshold) - math.log(value)
    else:
        excess = math.log(value) - centre - math.log1p(gate.threshold)
    # Identical baseline runs leave no spread: then only the sign of the excess can decide.
    p = (0.0 if excess > 0 else 1.0) if scale == 0.0 else stats.t_sf(excess / scale, len(history) - 1)
    method = (
        f"run-to-run: one-sided t test against {len(history)} baseline runs (geometric mean; spread "
        f"{spread * 100:.1f}% sd between runs, alpha {alpha:g}); changes under {_percent(detectable - 1.0)} "
        "cannot fail here"
    )
    return Verdict(gate, benchmark, not (beyond and p < alpha), baseline, value, change, p, None, method)


def _allowed_time_factor(gate: Gate) -> float:
    """How much longer rounds may take before ``gate`` is crossed: ``1 + t`` for a time metric,
    ``1 / (1 - t)`` for throughput (5 % less throughput is 5.26 % longer rounds)."""
    if METRICS[gate.metric].better == "higher":
        return 1.0 / (1.0 - gate.threshold)
    return 1.0 + gate.threshold


def _relative_change(before: float, after: float) -> float:
    """``after / before - 1``; from a baseline of 0 any rise is infinite (metrics are never negative)."""
    if before == 0.0:
        return 0.0 if after == 0.0 else math.copysign(math.inf, after)
    return after / before - 1.0
