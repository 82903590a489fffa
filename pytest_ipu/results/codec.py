"""The one codec of the record dataclasses: their plain-JSON form written and read back, driven by
their fields and the fields' types.

A record extends ``Coded`` (``record.as_json()``, ``Record.from_json(data, at)``); ``to_json`` and
``from_json`` serve any dataclass (``measure``'s ``CpuTime`` and ``ContentionRecord``, and ``to_json``
its ``MachineSpeed``: that folder does not import this one). Each field is one JSON key, its name
unless ``meta`` says another, in the order declared. Each value is read by ``values``' readers through
``RECORD`` (which also serves ``records``' older forms and ``schema.from_json``'s cross-checks), so a
bad one raises ``SchemaError`` naming its dotted key (``power.devices[0].energy_j``) and the fix. A
field is ``str``, ``float``, ``int``, ``bool``, a ``Literal`` of strings, ``Any``, another record,
``X | None``, ``tuple[X, ...]`` or ``Mapping[str, X]``, as string annotations that Python 3.8 cannot
evaluate, so ``_parse`` reads them. ``JSON_DERIVED`` properties are written, never read. ``fields_of``
copies a declared part (``records.Identity``) into a record that extends it.

Documented in docs/architecture.md (section "Questions a newcomer asks": how to add a record field).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import operator
import sys
import typing
from collections.abc import Callable
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar
from typing import TypeVar

from pytest_ipu.results import values
from pytest_ipu.results.values import ABSENT


class SchemaError(values.BadValue):
    """A JSON object that is not a pytest-ipu record of a version this code can read."""


#: How every bad value's message ends: how to get a good one.
FIX = "re-run the benchmark to write the record again, or correct the value in the file"
#: A record's JSON, where its values come from: ``malformed pytest-ipu record: '<key>' is ...: it
#: must be ...; <fix>``, each refusal a ``SchemaError`` that says which rule a number broke. Each
#: reader takes the value and its full dotted name (``power.devices[0].energy_j``).
RECORD = values.Source("malformed pytest-ipu record", FIX, explain=True, error=SchemaError)


def fields_of(part: type, obj: object) -> dict[str, Any]:
    """The fields ``part`` (a dataclass) declares, with ``obj``'s values, as keyword arguments for a
    dataclass that extends ``part``: ``IpuRecord(**fields_of(Identity, compiled), batch_size=...)``.
    The other keyword arguments stay checked by mypy; these are checked where ``obj`` was made."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(part)}


def get(data: Mapping[str, Any], key: str, default: Any = ABSENT) -> Any:
    """``data[key]``; ``default`` when absent or null, unless ``default`` is ``ABSENT`` (required)."""
    value = data.get(key, ABSENT)
    return default if (value is ABSENT or value is None) and default is not ABSENT else value


# --- the declaration beside a field -------------------------------------------------------------

if TYPE_CHECKING:
    #: Reads a field from its whole object and the object's dotted path (with its trailing dot).
    Reader = Callable[[Mapping[str, Any], str], Any]


#: What ``meta`` declares of a field; each is optional (``meta``'s docstring says what each means).
META_OPTIONS = frozenset(
    "key old old_from required omit_if after number choices null_ok read write written".split()  # noqa: SIM905 -- one line, not twelve
)


def meta(**options: Any) -> dict[str, Any]:
    """A field's metadata for the codec (``field(metadata=meta(...))``); every part optional.

    ``key``: its JSON key, where not its name. ``old``: what a file that lacks the key (or holds
    null) reads as, where that is not the field's default (a field with neither is required).
    ``old_from``: the same, derived from the object (a flag older files told in a warning).
    ``required``: a ``X | None`` field whose key must be there, null or not, or a field whose
    default an older file never relied on. ``omit_if``: the value written as no key at all (such
    records are written as they were before the field). ``after``: the key it is written after,
    where that is not the field before it (``""``: first). ``number``: ``signed`` (either sign) or
    ``inf`` (+Infinity too). ``choices``: the strings a ``str`` field may hold. ``null_ok`` false: a
    JSON null is refused (an absent key still reads as the default). ``read``: the whole reader, for
    a value checked against its neighbours; ``write``: the JSON of the value, where not its fields'.
    ``written`` false: no key at all (a view's input, whose JSON is what it derives from it).
    """
    # Keyword options, checked by name when the record's module is imported: a misspelt one is a
    # TypeError there, never an option silently ignored.
    unknown = sorted(set(options) - META_OPTIONS)
    if unknown:
        raise TypeError(
            f"meta() got unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(META_OPTIONS))}"
        )
    return {"json": dict(options)}


@dataclasses.dataclass(frozen=True)
class _Type:
    """A field's type, as the codec reads it: ``kind`` is ``str``, ``float``, ``int``, ``bool``,
    ``any``, ``choice`` (``choices``), ``tuple`` or ``map`` (of ``of``), or ``record`` (``cls``)."""

    kind: str
    optional: bool = False
    of: _Type | None = None
    choices: tuple[str, ...] = ()
    cls: type | None = None


_PLAIN = {"str": "str", "float": "float", "int": "int", "bool": "bool", "Any": "any"}
_SEQUENCES = ("tuple", "Tuple", "Sequence")
_MAPPINGS = ("Mapping", "dict", "Dict")


def _split(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets, each part stripped."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char in "[(") - (char in "])")
        if char == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _parse(annotation: str, names: Mapping[str, Any]) -> _Type:
    """A field's annotation (a string, as ``from __future__ import annotations`` leaves it) read in
    the namespace of the module that declared it."""
    parts = _split(annotation, "|")
    kept = [p for p in parts if p != "None"]
    if len(kept) != 1:
        raise TypeError(f"the codec cannot read the type {annotation!r}")
    found = _parse_one(kept[0], names)
    return dataclasses.replace(found, optional=True) if len(kept) < len(parts) else found


def _parse_one(annotation: str, names: Mapping[str, Any]) -> _Type:
    if annotation in _PLAIN:
        return _Type(_PLAIN[annotation])
    if annotation.endswith("]"):
        head, _, inner = annotation[:-1].partition("[")
        args = _split(inner, ",")
        if len(args) == 1 and args[0].startswith("(") and args[0].endswith(")"):
            # Python 3.8 keeps ``tuple[int, ...]`` as ``tuple[(int, ...)]``.
            args = _split(args[0][1:-1], ",")
        if head == "Optional":
            return dataclasses.replace(_parse(args[0], names), optional=True)
        if head == "Literal":
            return _Type("choice", choices=tuple(str(ast.literal_eval(a)) for a in args))
        if head in _SEQUENCES:
            return _Type("tuple", of=_parse(args[0], names))
        if head in _MAPPINGS:
            return _Type("map", of=_parse(args[1], names))
        raise TypeError(f"the codec cannot read the type {annotation!r}")
    named = names.get(annotation)
    if isinstance(named, type) and dataclasses.is_dataclass(named):
        return _Type("record", cls=named)
    if typing.get_origin(named) is typing.Literal:  # an alias: ``Ending = Literal[...]``
        return _Type("choice", choices=tuple(str(a) for a in typing.get_args(named)))
    raise TypeError(f"the codec cannot read the type {annotation!r}")


@dataclasses.dataclass(frozen=True)
class _Field:
    """One field as the codec writes and reads it."""

    name: str
    key: str
    type: _Type
    #: What an absent or null key reads as (``ABSENT``: required), or the factory that makes it.
    fallback: Any
    factory: Callable[[], Any] | None
    required: bool
    old_from: Reader | None
    omit_if: Any
    after: str | None
    number: str
    null_ok: bool
    read: Reader | None
    write: Callable[[Any], Any] | None
    written: bool


#: Each class's fields as the codec sees them, read on its first use.
_FIELDS: dict[type, tuple[_Field, ...]] = {}


def _fields(cls: type) -> tuple[_Field, ...]:
    """The fields of ``cls`` as the codec sees them, read once per class."""
    known = _FIELDS.get(cls)
    if known is not None:
        return known
    out = []
    for f in dataclasses.fields(cls):
        # A field's annotation is read where it was declared (a base class may live elsewhere).
        owner = next(c for c in cls.__mro__ if f.name in vars(c).get("__annotations__", {}))
        names = vars(sys.modules[owner.__module__])
        declared = dict(f.metadata.get("json", {}))
        required = bool(declared.get("required", False))
        fallback, factory = declared.get("old", ABSENT), None
        # A field never written is never read either: its type is the view's own business.
        written = bool(declared.get("written", True))
        found = _parse(str(f.type), names) if written else _Type("any")
        if declared.get("choices"):
            found = dataclasses.replace(found, kind="choice", choices=tuple(declared["choices"]))
        if fallback is ABSENT and not required:
            if f.default is not dataclasses.MISSING:
                fallback = f.default
            elif f.default_factory is not dataclasses.MISSING:
                factory = f.default_factory
        out.append(
            _Field(
                name=f.name,
                key=declared.get("key") or f.name,
                type=found,
                fallback=fallback,
                factory=factory,
                required=required,
                old_from=declared.get("old_from"),
                omit_if=declared.get("omit_if", ABSENT),
                after=declared.get("after"),
                number=declared.get("number", ""),
                null_ok=declared.get("null_ok", True),
                read=declared.get("read"),
                write=declared.get("write"),
                written=written,
            )
        )
    _FIELDS[cls] = tuple(out)
    return _FIELDS[cls]


# --- writing ------------------------------------------------------------------------------------


def to_json(record: object) -> dict[str, Any]:
    """The plain-JSON form of ``record`` (a dataclass): only str, int, float, bool, None, lists and
    objects; a fresh object, mappings and sequences copied."""
    cls = type(record)
    keys: list[tuple[str, Any, str | None]] = []
    for f in _fields(cls):
        value = getattr(record, f.name)
        if not f.written or (f.omit_if is not ABSENT and value == f.omit_if):
            continue
        keys.append((f.key, _write(f.type, value) if f.write is None else f.write(value), f.after))
    for name, after, *key in getattr(cls, "JSON_DERIVED", ()):
        value = operator.attrgetter(name)(record)
        written = _plain(value() if callable(value) else value)
        keys.append((key[0] if key else name.rpartition(".")[2], written, after))
    out: dict[str, Any] = {}
    moved = [(k, v, after) for k, v, after in keys if after is not None]

    def follow(anchor: str) -> None:
        # Whatever is written after this key (and after those, in turn) follows it.
        for k, v, after in moved:
            if after == anchor and k not in out:
                out[k] = v
                follow(k)

    follow("")
    for key, value, after in keys:
        if after is None:
            out[key] = value
            follow(key)
    return out


def _plain(value: Any) -> Any:
    """A derived value as JSON: a tuple as a list, a mapping as an object of string keys."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    return value


def _write(t: _Type, value: Any) -> Any:
    if value is None:
        return None
    if t.kind == "record":
        # A record writes itself (``Coded.as_json``: this codec).
        return value.as_json() if hasattr(value, "as_json") else to_json(value)
    if t.kind == "tuple":
        assert t.of is not None
        return [_write(t.of, v) for v in value]
    if t.kind == "map":
        assert t.of is not None
        return {str(k): _write(t.of, v) for k, v in value.items()}
    if t.kind == "any" and isinstance(value, Mapping):
        return dict(value)
    if t.kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


# --- reading ------------------------------------------------------------------------------------

_T = TypeVar("_T")


def from_json(cls: type[_T], data: Mapping[str, Any], at: str = "") -> _T:
    """``cls`` (a dataclass) read from its plain-JSON form ``data``; ``at`` is the object's own
    dotted path with a trailing dot (``power.``), so that every message names the full key. Raises
    ``SchemaError`` for a missing or impossible value."""
    return cls(**{f.name: _read_field(f, data, at) for f in _fields(cls)})


def _read_field(f: _Field, data: Mapping[str, Any], at: str) -> Any:
    if f.read is not None:
        return f.read(data, at)
    name = at + f.key
    value = data.get(f.key, ABSENT)
    if value is ABSENT or (value is None and f.null_ok):
        if f.old_from is not None:
            return f.old_from(data, at)
        if f.type.optional:
            if value is ABSENT and f.required:
                raise RECORD.refuse(value, name, f"{_want(f.type)} or null")
            return None
        if f.factory is not None:
            return f.factory()
        if f.fallback is not ABSENT:
            # A fresh container for each record read.
            return copy.copy(f.fallback)
    return read_value(f.type, value, name, f.number)


def _want(t: _Type) -> str:
    """What a value of ``t`` must be, as a message says it."""
    return {
        "float": "a number >= 0",
        "int": "a whole number >= 0",
        "str": "a string",
        "bool": "true or false",
    }.get(t.kind, "a value")


def read_value(t: _Type, value: Any, name: str, number: str = "") -> Any:
    """One value of type ``t`` at ``name``, checked."""
    kind = t.kind
    if kind == "float":
        if number == "signed":
            return RECORD.signed(value, name)
        return RECORD.number(value, name, inf=number == "inf")
    if kind == "int":
        return RECORD.whole(value, name)
    if kind == "str":
        return RECORD.text(value, name)
    if kind == "bool":
        return RECORD.flag(value, name)
    if kind == "choice":
        return RECORD.choice(value, name, t.choices)
    if kind == "any":
        return RECORD.free(value, name)
    if kind == "record":
        assert t.cls is not None
        return from_json(t.cls, RECORD.mapping(value, name), name + ".")
    assert t.of is not None
    of = t.of
    if kind == "tuple":
        return tuple(
            read_value(of, v, f"{name}[{i}]", number) for i, v in enumerate(RECORD.array(value, name))
        )
    if of.kind == "any":
        return RECORD.free(value, name)
    found = RECORD.mapping(
        value, name, want="a JSON object of numbers" if of.kind == "float" else "a JSON object"
    )
    return {str(k): read_value(of, v, f"{name}.{k}", number) for k, v in found.items()}


class Written:
    """The base of a dataclass that is written, never read back (a view computed for output): its
    plain-JSON form (``as_json``), the codec's. ``JSON_DERIVED`` names the properties (or methods of
    no argument) written beside the fields, each with the key it follows (``None``: at the end) and,
    third where it differs from the property's name, its JSON key. A name may be a dotted path into
    an input (``series.fullname``, its key ``fullname`` unless a third item says otherwise)."""

    JSON_DERIVED: ClassVar[tuple[tuple[str, str | None] | tuple[str, str | None, str], ...]] = ()

    def as_json(self) -> dict[str, Any]:
        """The plain-JSON form (``to_json``)."""
        return to_json(self)


class Coded(Written):
    """The base of every record dataclass: its plain-JSON form (``as_json``) and its reader
    (``from_json``), both the codec's."""

    @classmethod
    def from_json(cls: type[_T], data: Mapping[str, Any], at: str = "") -> _T:
        """Read back from its plain-JSON form (``from_json``); raises ``SchemaError`` naming the key."""
        return from_json(cls, data, at)
