"""Typed readers of values someone wrote (an option, a keyword argument, a file's key, a log's), and
``BadValue``, their one refusal: a ``ValueError`` on one line naming the value, where it came from
and the fix, in its ``Source``'s voice: a file's key (``<file>: 'stats.rounds' is -1: it must be a
whole number >= 0; <fix>``), a call's keyword argument (``ipu_loadgen(max_batch=0): pass a whole
number >= 1``) or an option's value (``expected an integer from 1 to 100``: the options name the rest).
What a value must be (``want``) is a noun phrase, so that one reader serves every voice. A record's
JSON (``codec.RECORD``) is a file's voice whose refusals explain which rule a value broke, and are
``codec.SchemaError`` errors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: The largest whole number read: a float holds every count up to it exactly, so that a table, sort
#: key or ratio that converts a count to a float never overflows or rounds it.
MAX_WHOLE = 2**53
#: A key that is not in its object (told apart from JSON null).
ABSENT: Any = object()


def show(value: object) -> str:
    """A value as a message shows it: on one line and short, containers by their kind."""
    if value is ABSENT:
        return "missing"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


class BadValue(ValueError):
    """A value a reader refused: ``value``, what it must be (``want``, a noun phrase) or what is wrong
    with it (``problem``, a clause, where a rule says more than what it must be), its ``key`` (empty
    for an option's value) and its ``source``, which words the one-line message."""

    def __init__(
        self, value: object, want: str, key: str = "", source: Source | None = None, problem: str = ""
    ) -> None:
        self.value, self.want, self.key, self.problem = value, want, key, problem
        self.source = OPTION if source is None else source
        super().__init__(self.source.message(self))


@dataclass(frozen=True)
class Source:
    """Where values come from, as a refusal names it (``name``: a file and the object in it, or the
    function whose keyword arguments they are when ``call``), and ``fix``, how to put a bad one right
    (the end of a file's messages; a call's message is its own fix). Where ``explain``, a refusal of a
    number says which rule it broke (not a number, too large, not finite, negative: why it never is).
    Its methods read one value each, ``key`` naming it, and raise ``error``, a ``BadValue``."""

    name: str = ""
    fix: str = ""
    call: bool = False
    explain: bool = False
    error: type[BadValue] = BadValue

    def message(self, bad: BadValue) -> str:
        """The one line that refuses ``bad.value`` of ``bad.key``, in this source's voice (a value of no
        key, an option's or a whole document's, in the problem's own words or as what it must be)."""
        if self.call:
            return f"{self.name}({bad.key}={bad.value!r}): {bad.problem or 'pass ' + bad.want}"
        if not bad.key:
            return bad.problem or f"expected {bad.want}"
        head = f"{self.name}: " if self.name else ""
        # repr: a key may be the file's own text, and the message stays on one line.
        reason = bad.problem or f"it must be {bad.want}"
        return f"{head}{bad.key!r} is {show(bad.value)}: {reason}" + (f"; {self.fix}" if self.fix else "")

    def refuse(self, value: object, key: str, want: str = "", problem: str = "") -> BadValue:
        """The refusal of ``value`` of ``key``, which must be ``want`` (or has ``problem``)."""
        return self.error(value, want, key, self, problem)

    def text(self, value: object, key: str) -> str:
        """A string."""
        if not isinstance(value, str):
            raise self.refuse(value, key, "a string")
        return value

    def text_or_none(self, value: object, key: str) -> str | None:
        """A string or ``None``."""
        if value is not None and not isinstance(value, str):
            raise self.refuse(value, key, "a string or null")
        return value

    def mapping(
        self, value: object, key: str, *, null: bool = False, want: str = "a JSON object"
    ) -> dict[str, Any]:
        """A JSON object (``want`` says which); ``{}`` for null where ``null`` allows it."""
        if value is None and null:
            return {}
        if not isinstance(value, dict):
            raise self.refuse(value, key, f"{want} or null" if null else want)
        return value

    def array(self, value: object, key: str) -> list[Any]:
        """A JSON list (a tuple, as a record's field holds one, reads as its list)."""
        if isinstance(value, tuple):
            return list(value)
        if not isinstance(value, list):
            raise self.refuse(value, key, "a list")
        return value

    def free(self, value: object, key: str, *, finite: bool = True, depth: int = 0) -> dict[str, Any]:
        """A free-form JSON object, ``{}`` for null: any JSON, nested at most ``depth`` levels where
        given, but NaN or Infinity where ``finite`` (no reader could use them)."""
        found = self.mapping(value, key, null=True)
        # Walked with a stack, not recursion: the nesting is as deep as the file makes it.
        stack: list[tuple[str, Any, int]] = [(key, found, 0)]
        while stack:
            at, item, level = stack.pop()
            if depth and level > depth:
                raise self.refuse(item, at, problem=f"it nests deeper than {depth} levels")
            if finite and isinstance(item, float) and not math.isfinite(item):
                raise self.refuse(item, at, "a finite number")
            if isinstance(item, dict):
                stack.extend((f"{at}.{k}", v, level + 1) for k, v in item.items())
            elif isinstance(item, list):
                stack.extend((f"{at}[{i}]", v, level + 1) for i, v in enumerate(item))
        return dict(found)

    def choice(self, value: object, key: str, choices: Sequence[str]) -> str:
        """One of the strings ``choices``, exactly."""
        if not isinstance(value, str) or value not in choices:
            raise self.refuse(value, key, f"one of {', '.join(repr(c) for c in choices)}")
        return value

    def flag(self, value: object, key: str) -> bool:
        """``True`` or ``False`` (spelt as a call's or a JSON file's writer spells them)."""
        if not isinstance(value, bool):
            raise self.refuse(value, key, "True or False" if self.call else "true or false")
        return value

    def whole(self, value: object, key: str, least: int = 0) -> int:
        """A whole number from ``least`` to ``MAX_WHOLE`` (``True`` is no number)."""
        want = f"a whole number >= {least}"
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.refuse(value, key, want)
        if self.explain and value < 0:
            raise self.refuse(value, key, ">= 0 (a count is never negative)")
        if self.explain and value > MAX_WHOLE:
            raise self.refuse(value, key, problem=f"it is too large: a count is at most {MAX_WHOLE}")
        if not least <= value <= MAX_WHOLE:
            raise self.refuse(value, key, want)
        return value

    def number(
        self,
        value: object,
        key: str,
        *,
        positive: bool = False,
        inf: bool = False,
        note: str = "",
        problem: str = "",
    ) -> float:
        """A finite number >= 0 (> 0 where ``positive``; +Infinity too where ``inf``), as a float;
        ``note`` ends what it must be (its unit, say), or ``problem`` says it in a rule's own words."""
        want = f"a finite number {'>' if positive else '>='} 0{note}"
        number = _float(value)
        if number is None:
            raise self.refuse(value, key, want.replace("finite ", "") if self.explain else want, problem)
        if self.explain and isinstance(value, int) and math.isinf(number):
            raise self.refuse(value, key, want, problem or f"it is too large: it must be {want}")
        if math.isnan(number) or (math.isinf(number) and not (inf and number > 0)):
            raise self.refuse(value, key, want, problem)
        if self.explain and number < 0:
            raise self.refuse(value, key, ">= 0 (a time, rate, energy or share is never negative)", problem)
        if number < 0 or (positive and number == 0):
            raise self.refuse(value, key, want, problem)
        return number

    def signed(self, value: object, key: str) -> float:
        """A finite number of either sign (a loss may be negative), as a float."""
        number = _float(value)
        if number is None or not math.isfinite(number):
            raise self.refuse(value, key, "a finite number")
        return number

    def fraction(self, value: object, key: str, example: str) -> float:
        """A number strictly between 0 and 1."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise self.refuse(value, key, f"a fraction in (0, 1), e.g. {example}")
        return float(value)

    def seconds(self, value: object, key: str, *, zero: bool = False) -> float:
        """A duration: seconds as a number, or text with its unit (``"15 ms"``); finite and > 0
        (>= 0 where ``zero``)."""
        if isinstance(value, str):
            from pytest_ipu.measure import units

            try:
                seconds = units.parse(value, "s")
            except units.UnitError as exc:
                raise self.refuse(value, key, f"a duration such as '15 ms' ({exc})") from None
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            seconds = float(value)
        else:
            raise self.refuse(value, key, "a duration as seconds (a number) or text such as '15 ms'")
        if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
            raise self.refuse(value, key, f"a duration that is finite and {'>=' if zero else '>'} 0")
        return seconds


def _float(value: object) -> float | None:
    """A JSON number as a float (infinite where a whole number is too large for one); ``None`` for
    anything else (``True`` is no number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:  # a whole number of hundreds of digits
        return math.inf


#: An option's value: its flag, the value and where it was set are the options' to name.
OPTION = Source()


def integer(value: object, least: int, most: int) -> int:
    """An option's integer from ``least`` to ``most``, from its text (``True`` is no integer)."""
    try:
        number = None if isinstance(value, bool) else int(str(value).strip())
    except ValueError:
        number = None
    if number is None or not least <= number <= most:
        raise BadValue(value, f"an integer from {least} to {most}")
    return number


def choice(value: object, choices: Sequence[str]) -> str:
    """An option's word among ``choices``, from its text, whatever its case."""
    text = str(value).strip().lower()
    if text not in choices:
        raise BadValue(value, f"one of {', '.join(choices)}")
    return text


def logged_number(log: Mapping[str, Any], key: str) -> float | None:
    """The number a program logged under ``key``, as a float; ``None`` for anything else (a log's
    key of another type reads as absent, and what needs it says so)."""
    value = log.get(key)
    return None if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)


def logged_flag(log: Mapping[str, Any], key: str) -> bool | None:
    """The flag a program logged under ``key``; ``None`` for anything else (as ``logged_number``)."""
    value = log.get(key)
    return value if isinstance(value, bool) else None
