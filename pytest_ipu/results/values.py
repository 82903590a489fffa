"""Typed readers of values someone wrote (an option, a keyword argument, a file's key, a log's), and
``BadValue``, their one refusal: a ``ValueError`` on one line naming the value, where it came from
and the fix, in its ``Source``'s voice: a file's key (``<file>: 'stats.rounds' is -1: it must be a
whole number >= 0; <fix>``), a call's keyword argument (``ipu_loadgen(max_batch=0): pass a whole
number >= 1``) or an option's value (``expected an integer from 1 to 100``: the options name the rest).
What a value must be (``want``) is a noun phrase, so that one reader serves every voice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: The largest whole number read: a float holds every count up to it exactly.
MAX_WHOLE = 2**53


def show(value: object) -> str:
    """A value as a message shows it: on one line and short, containers by their kind."""
    if isinstance(value, dict):
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
    (the end of a file's messages; a call's message is its own fix). Its methods read one value each,
    ``key`` naming it, and raise ``BadValue``."""

    name: str = ""
    fix: str = ""
    call: bool = False

    def message(self, bad: BadValue) -> str:
        """The one line that refuses ``bad.value`` of ``bad.key``, in this source's voice."""
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
        return BadValue(value, want, key, self, problem)

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

    def mapping(self, value: object, key: str, *, null: bool = False) -> dict[str, Any]:
        """A JSON object; ``{}`` for null where ``null`` allows it."""
        if value is None and null:
            return {}
        if not isinstance(value, dict):
            raise self.refuse(value, key, "a JSON object or null" if null else "a JSON object")
        return value

    def flag(self, value: object, key: str) -> bool:
        """``True`` or ``False`` (spelt as a call's or a JSON file's writer spells them)."""
        if not isinstance(value, bool):
            raise self.refuse(value, key, "True or False" if self.call else "true or false")
        return value

    def whole(self, value: object, key: str, least: int = 0) -> int:
        """A whole number from ``least`` to ``MAX_WHOLE`` (``True`` is no number)."""
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_WHOLE:
            raise self.refuse(value, key, f"a whole number >= {least}")
        return value

    def number(
        self, value: object, key: str, *, positive: bool = False, note: str = "", problem: str = ""
    ) -> float:
        """A finite number >= 0 (> 0 where ``positive``), as a float; ``note`` ends what it must be
        (its unit, say), or ``problem`` says it in a rule's own words."""
        if not isinstance(value, bool) and isinstance(value, (int, float)):
            try:
                number = float(value)
            except OverflowError:  # a whole number of hundreds of digits
                number = math.inf
            if math.isfinite(number) and (number > 0 if positive else number >= 0):
                return number
        raise self.refuse(value, key, f"a finite number {'>' if positive else '>='} 0{note}", problem)

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
