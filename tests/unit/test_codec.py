"""The record codec (``results.codec``): a dataclass's fields and their types drive its JSON both
ways; what differs is declared beside the field. The records themselves are pinned by
test_schema.py, the golden files and the readers' fuzz test; these tests pin the codec's rules."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Literal

import pytest

from pytest_ipu.results import codec
from pytest_ipu.results import values
from pytest_ipu.results.codec import Coded
from pytest_ipu.results.codec import SchemaError
from pytest_ipu.results.codec import meta


@dataclass(frozen=True)
class Inner(Coded):
    """A part held by ``Outer``."""

    name: str
    ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Outer(Coded):
    """Every kind of field the codec reads, with the declarations it knows."""

    count: int
    seconds: float
    mode: Literal["a", "b"]
    parts: tuple[Inner, ...]
    grid: tuple[tuple[int, ...], ...] | None
    times: Mapping[str, float]
    facts: Mapping[str, Any]
    loss: float = field(metadata=meta(number="signed"))
    source: str = field(metadata=meta(old="", key="from"))
    kind: str = field(default="x", metadata=meta(choices=("x", "y")))
    inner: Inner | None = None
    first: bool = field(default=False, metadata=meta(omit_if=False, after=""))
    late: float | None = field(default=None, metadata=meta(omit_if=None, after="count"))
    kept: float | None = field(default=None, metadata=meta(required=True))
    never_null: Mapping[str, float] = field(default_factory=dict, metadata=meta(null_ok=False))

    JSON_DERIVED = (("double", "seconds"), ("last", None))

    @property
    def double(self) -> float:
        """Written after ``seconds``, never read."""
        return 2 * self.seconds

    @property
    def last(self) -> tuple[str, ...]:
        """Written at the end, as a list."""
        return ("end",)


def _outer(**changes: Any) -> Outer:
    values: dict[str, Any] = dict(
        count=3,
        seconds=0.5,
        mode="b",
        parts=(Inner("p", (1, 2)),),
        grid=((0,), (1, 2)),
        times={"build": 1.5},
        facts={"nested": {"list": [1, "two", None]}},
        loss=-0.25,
        source="here",
    )
    values.update(changes)
    return Outer(**values)


def test_a_record_is_its_fields_in_order_with_declared_keys_and_derived_values() -> None:
    data = _outer(first=True, late=2.0).as_json()
    assert list(data) == [
        "first",
        "count",
        "late",
        "seconds",
        "double",
        "mode",
        "parts",
        "grid",
        "times",
        "facts",
        "loss",
        "from",
        "kind",
        "inner",
        "kept",
        "never_null",
        "last",
    ]
    assert data["parts"] == [{"name": "p", "ids": [1, 2]}]
    assert data["grid"] == [[0], [1, 2]]
    assert (data["double"], data["last"]) == (1.0, ["end"])


def test_a_key_declared_omitted_is_absent_at_that_value() -> None:
    data = _outer().as_json()
    assert "first" not in data
    assert "late" not in data
    assert data["kept"] is None


class Opaque:
    """A value of a type the codec cannot read: a view's input that is never written."""

    kind = "opaque"


@dataclass(frozen=True)
class View(codec.Written):
    """A view computed for output: an input not written, keys derived under another name, by a
    method, as an object of string keys, and by a dotted path into an input (its last part the key)."""

    JSON_DERIVED = (("by_id", "", "names_by_id"), ("source.kind", "name"), ("summary", None))

    name: str
    source: Opaque = field(metadata=meta(written=False))
    ids: tuple[int, ...] = field(default=(), metadata=meta(key="listed"))

    @property
    def by_id(self) -> dict[int, str]:
        """Each id with the view's name."""
        return {i: self.name for i in self.ids}

    def summary(self) -> str:
        """A method of no argument, written as its value."""
        return f"{self.name}: {len(self.ids)}"


def test_a_view_writes_what_it_derives_and_not_its_inputs() -> None:
    data = View("v", Opaque(), (2, 1)).as_json()
    assert data == {
        "names_by_id": {"2": "v", "1": "v"},
        "name": "v",
        "kind": "opaque",
        "listed": [2, 1],
        "summary": "v: 2",
    }
    assert list(data) == ["names_by_id", "name", "kind", "listed", "summary"]
    assert not hasattr(View, "from_json")


def test_a_record_reads_back_as_it_was_written() -> None:
    for record in (_outer(), _outer(first=True, late=2.0, kept=1.0, inner=Inner("i"), grid=None)):
        assert Outer.from_json(json.loads(json.dumps(record.as_json()))) == record


def test_an_older_file_reads_with_the_declared_defaults() -> None:
    data = _outer().as_json()
    for key in ("from", "kind", "inner", "never_null", "first", "late"):
        data.pop(key, None)
    data["kind"] = None
    back = Outer.from_json(data)
    assert (back.source, back.kind, back.inner, back.never_null) == ("", "x", None, {})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("count", -1, "'at.count' is -1: it must be >= 0 (a count is never negative)"),
        ("count", True, "'at.count' is True: it must be a whole number >= 0"),
        ("seconds", float("inf"), "'at.seconds' is inf: it must be a finite number >= 0"),
        ("loss", "low", "'at.loss' is 'low': it must be a finite number"),
        (
            "loss",
            -(10**400),
            "(402 characters): it must be a finite number",
        ),
        (
            "count",
            2**53 + 1,
            "'at.count' is 9007199254740993: it is too large: a count is at most 9007199254740992",
        ),
        ("seconds", 10**400, "(401 characters): it is too large: it must be a finite number >= 0"),
        (
            "seconds",
            -0.5,
            "'at.seconds' is -0.5: it must be >= 0 (a time, rate, energy or share is never negative)",
        ),
        ("mode", "c", "'at.mode' is 'c': it must be one of 'a', 'b'"),
        ("kind", "z", "'at.kind' is 'z': it must be one of 'x', 'y'"),
        ("parts", [3], "'at.parts[0]' is 3: it must be a JSON object"),
        ("parts", [{"name": 1}], "'at.parts[0].name' is 1: it must be a string"),
        ("grid", [[0, -2]], "'at.grid[0][1]' is -2: it must be >= 0"),
        ("times", {"a": "b"}, "'at.times.a' is 'b': it must be a number >= 0"),
        ("times", [], "'at.times' is a list: it must be a JSON object of numbers"),
        ("facts", {"a": [float("nan")]}, "'at.facts.a[0]' is nan: it must be a finite number"),
        ("never_null", None, "'at.never_null' is None: it must be a JSON object of numbers"),
        ("kept", values.ABSENT, "'at.kept' is missing: it must be a number >= 0 or null"),
        ("mode", values.ABSENT, "'at.mode' is missing: it must be one of 'a', 'b'"),
    ],
)
def test_a_bad_value_is_refused_naming_its_full_key(key: str, value: Any, message: str) -> None:
    data = json.loads(json.dumps(_outer().as_json()))
    if value is values.ABSENT:
        del data[key]
    else:
        data[key] = value
    with pytest.raises(SchemaError) as caught:
        Outer.from_json(data, "at.")
    # The record's refusals are the readers' of every file: a reader of files catches them as such.
    assert isinstance(caught.value, values.BadValue)
    assert message in str(caught.value)
    assert str(caught.value).startswith("malformed pytest-ipu record: ")
    assert "\n" not in str(caught.value)


def test_python_3_8_annotations_read_as_the_newer_ones() -> None:
    """Python 3.8 keeps a subscript's tuple in parentheses (``tuple[(int, ...)]``) in its string
    annotations: the codec reads both spellings alike."""
    names = {"Inner": Inner}
    for newer, older in (
        ("tuple[int, ...]", "tuple[(int, ...)]"),
        ("Literal['a', 'b']", "Literal[('a', 'b')]"),
        ("Mapping[str, Inner] | None", "Mapping[(str, Inner)] | None"),
        ("tuple[tuple[int, ...], ...]", "tuple[(tuple[(int, ...)], ...)]"),
    ):
        assert codec._parse(newer, names) == codec._parse(older, names)


def test_a_type_the_codec_cannot_read_is_named() -> None:
    with pytest.raises(TypeError, match="cannot read the type 'set\\[int\\]'"):
        codec._parse("set[int]", {})


def test_a_misspelt_field_option_is_refused_where_it_is_declared() -> None:
    assert codec.meta(old=0.0, omit_if=None) == {"json": {"old": 0.0, "omit_if": None}}
    with pytest.raises(TypeError, match="unknown option\\(s\\) olf; known: after, choices"):
        codec.meta(olf=0.0)
