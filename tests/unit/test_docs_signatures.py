"""Every fixture signature the docs state is the one its callable declares, and every call they show
takes only arguments the fixture has.

A fixture's signature is written once, as the ``__call__`` of its callable in
``pytest_ipu/pytest_plugin/fixtures/calls.py``. The pages repeat it: each page that documents a
fixture states it once, in Python's own words. This module reads every ``ipu_<fixture>(...)`` in
docs/*.md and README.md with ``ast`` and compares it with ``inspect.signature``:

- a *signature* is one whose arguments read as a ``def``'s parameters, the first of them the
  fixture's first (``ipu_power(device="cpu", items=0)``): it names every parameter in order, each
  of the code's kind (positional, keyword-only after ``*``, ``**options``) and default, or it ends
  with ``, ...`` and is the signature's start;
- anything else is a *call* (``ipu_compile(model, (x,), parity=True)``): its keywords must be the
  fixture's and its positional arguments must fit. ``...`` first stands for the positional
  arguments (``ipu_compile(..., parity=True)``) and ``name=`` names a keyword
  (``ipu_train(gradient_accumulation=)``).
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import NamedTuple

import pytest

from pytest_ipu.pytest_plugin.fixtures import calls
from pytest_ipu.pytest_plugin.fixtures.common import FixtureCall

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]

#: The callable each fixture returns: every ``FixtureCall`` of ``fixtures.calls`` that names one.
CALLS: dict[str, type[FixtureCall]] = {
    value.fixture: value
    for value in vars(calls).values()
    if isinstance(value, type) and issubclass(value, FixtureCall) and "fixture" in vars(value)
}

#: The pages that document a fixture, and the fixtures whose signature each states (exactly once).
STATED = {
    "fixtures.md": sorted(CALLS),
    "training.md": ["ipu_time_to_train", "ipu_train"],
    "loadgen.md": ["ipu_loadgen"],
    "power.md": ["ipu_power"],
}

_MENTION = re.compile(r"\b(ipu_\w+)\(")
#: A signature's ``, ...`` end: the parameters after those shown are left out.
_MORE = re.compile(r",\s*\.\.\.\s*$")
#: A call's ``name=`` with no value: the keyword named.
_NAMED = re.compile(r"\b(\w+)=\s*(?=,|$)")


class Mention(NamedTuple):
    """One ``ipu_<fixture>(...)`` of a page."""

    page: str
    line: int
    fixture: str
    #: The text between its parentheses.
    arguments: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.fixture}({self.arguments})"


def _mentions() -> list[Mention]:
    found = []
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for match in _MENTION.finditer(text):
            if match.group(1) not in CALLS:
                continue
            line = text.count("\n", 0, match.start()) + 1
            depth = 1
            for end in range(match.end(), len(text)):
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                if depth == 0:
                    break
            else:
                raise AssertionError(f"{path.name}:{line}: {match.group(1)}( is never closed")
            found.append(Mention(path.name, line, match.group(1), text[match.end() : end]))
    return found


class NotLiteral:
    """A documented default that is no Python literal: equal to no default of the code."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def code_parameters(fixture: str) -> list[inspect.Parameter]:
    """The fixture's parameters as its callable's ``__call__`` declares them, less ``self``."""
    return list(inspect.signature(CALLS[fixture].__call__).parameters.values())[1:]


def documented_parameters(arguments: str) -> tuple[list[inspect.Parameter], bool] | None:
    """The parameters ``arguments`` declares read as a ``def``'s, and whether it ends with ``, ...``
    (more left out); ``None`` when it is no parameter list."""
    partial = _MORE.search(arguments) is not None
    source = f"def _({_MORE.sub('', arguments)}):\n    pass\n"
    try:
        function = ast.parse(source).body[0]
    except SyntaxError:
        return None
    assert isinstance(function, ast.FunctionDef)
    args = function.args

    def default(node: ast.expr | None) -> object:
        if node is None:
            return inspect.Parameter.empty
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError):
            return NotLiteral(ast.get_source_segment(source, node) or "?")

    P = inspect.Parameter
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += args.defaults
    parameters = [
        P(a.arg, P.POSITIONAL_ONLY if a in args.posonlyargs else P.POSITIONAL_OR_KEYWORD, default=default(d))
        for a, d in zip(positional, defaults)
    ]
    if args.vararg is not None:
        parameters.append(P(args.vararg.arg, P.VAR_POSITIONAL))
    parameters += [
        P(a.arg, P.KEYWORD_ONLY, default=default(d)) for a, d in zip(args.kwonlyargs, args.kw_defaults)
    ]
    if args.kwarg is not None:
        parameters.append(P(args.kwarg.arg, P.VAR_KEYWORD))
    return parameters, partial


def _spelled(parameter: inspect.Parameter) -> str:
    """``parameter``'s name as a signature writes it: ``name``, ``*args``, ``**options``."""
    P = inspect.Parameter
    stars = "*" if parameter.kind is P.VAR_POSITIONAL else "**" if parameter.kind is P.VAR_KEYWORD else ""
    return f"`{stars}{parameter.name}`"


def _shown(value: object) -> str:
    return "no default" if value is inspect.Parameter.empty else f"default {value!r}"


def differences(
    documented: list[inspect.Parameter], partial: bool, code: list[inspect.Parameter]
) -> list[str]:
    """How the documented parameters (all of them, or the first when ``partial``) differ from the
    code's: names, kinds, defaults (compared by ``repr``, so ``0`` is not ``0.0`` nor ``False``),
    order."""
    found = []
    by_name = {p.name: p for p in code}
    for doc in documented:
        declared = by_name.get(doc.name)
        if declared is None:
            found.append(f"{_spelled(doc)} is no parameter of the code")
            continue
        if doc.kind != declared.kind:
            found.append(
                f"{_spelled(doc)} is {doc.kind.description}; the code's is {declared.kind.description}"
            )
        if repr(doc.default) != repr(declared.default):
            found.append(f"`{doc.name}` has {_shown(doc.default)}; the code's has {_shown(declared.default)}")
    names = [p.name for p in documented]
    if not partial:
        left_out = [_spelled(p) for p in code if p.name not in names]
        if left_out:
            found.append(f"it leaves out {', '.join(left_out)} (end it with `, ...` to show only the start)")
    if not found and names != [p.name for p in code][: len(names)]:
        found.append(f"the order is {names}; the code's is {[p.name for p in code]}")
    return found


def as_signature(parameters: list[inspect.Parameter]) -> str:
    return str(inspect.Signature([p.replace(annotation=p.empty) for p in parameters]))


MENTIONS = _mentions()


def _is_signature(mention: Mention) -> bool:
    parsed = documented_parameters(mention.arguments)
    return (
        parsed is not None
        and bool(parsed[0])
        and parsed[0][0].name == code_parameters(mention.fixture)[0].name
    )


SIGNATURES = [m for m in MENTIONS if _is_signature(m)]
CALLED = [m for m in MENTIONS if not _is_signature(m)]


def test_the_pages_are_read() -> None:
    assert len(SIGNATURES) >= sum(len(f) for f in STATED.values())
    assert len(CALLED) >= 10


@pytest.mark.parametrize(("page", "fixture"), [(p, f) for p, fixtures in STATED.items() for f in fixtures])
def test_each_page_states_the_signature_of_the_fixtures_it_documents_once(page: str, fixture: str) -> None:
    stated = [m for m in SIGNATURES if m.page == page and m.fixture == fixture]
    signature = f"{fixture}{as_signature(code_parameters(fixture))}"
    assert len(stated) == 1, (
        f"docs/{page} states {fixture}'s signature {len(stated)} times, not once: {signature}"
    )


@pytest.mark.parametrize("mention", SIGNATURES, ids=lambda m: f"{m.page}:{m.line}-{m.fixture}")
def test_every_signature_the_docs_state_is_the_callables(mention: Mention) -> None:
    parsed = documented_parameters(mention.arguments)
    assert parsed is not None
    code = code_parameters(mention.fixture)
    found = differences(*parsed, code)
    assert not found, (
        f"{mention}\n  is not {mention.fixture}{as_signature(code)} "
        f"({CALLS[mention.fixture].__qualname__}.__call__):\n  " + "\n  ".join(found)
    )


def call_problem(mention: Mention) -> str | None:
    """Why ``mention``, a call, is no call of its fixture (``None``: it is one)."""
    try:
        call = ast.parse("_(" + _NAMED.sub(r"\1=...", mention.arguments) + ")", mode="eval").body
    except SyntaxError:
        return "is neither the fixture's signature nor a call Python reads"
    assert isinstance(call, ast.Call)
    parameters = code_parameters(mention.fixture)
    keywords = {k.arg: None for k in call.keywords if k.arg is not None}
    leading = call.args[0] if call.args else None
    if any(isinstance(a, ast.Starred) for a in call.args) or (
        isinstance(leading, ast.Constant) and leading.value is Ellipsis
    ):  # any positional arguments: only the keywords are checked
        if any(p.kind is p.VAR_KEYWORD for p in parameters):
            return None
        named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        unknown = sorted(set(keywords) - named)
        return f"got an unexpected keyword argument {unknown[0]!r}" if unknown else None
    try:
        inspect.Signature(parameters).bind_partial(*[None] * len(call.args), **keywords)
    except TypeError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("mention", CALLED, ids=lambda m: f"{m.page}:{m.line}-{m.fixture}")
def test_every_call_the_docs_show_takes_only_arguments_the_fixture_has(mention: Mention) -> None:
    problem = call_problem(mention)
    signature = as_signature(code_parameters(mention.fixture))
    assert problem is None, f"{mention}: {problem}\n  the fixture is {mention.fixture}{signature}"


def test_the_check_tells_a_changed_default_a_missing_and_a_left_out_parameter() -> None:
    """The signature check is no formality: the code's own signature passes, and each change fails."""
    for fixture in CALLS:
        code = code_parameters(fixture)
        parsed = documented_parameters(as_signature(code)[1:-1])
        assert parsed is not None
        assert differences(*parsed, code) == [], fixture
    shown = as_signature(code_parameters("ipu_train"))[1:-1]
    changed = {
        "inputs=1": "inputs=2",
        "precision=None, ": "",
        "**options": "seed=0, **options",
        "example_batch, *, ": "example_batch, ",
        "inputs=1,": "inputs=1.0,",
    }
    for old, new in changed.items():
        parsed = documented_parameters(shown.replace(old, new))
        assert parsed is not None
        assert differences(*parsed, code_parameters("ipu_train")), (old, new)


@pytest.mark.parametrize(
    ("fixture", "arguments", "takes"),
    [
        ("ipu_loadgen", "compiled, (x,), find_peak=True", True),
        ("ipu_loadgen", "compiled, (x,), find_peaks=True", False),
        ("ipu_loadgen", "..., find_peaks=True", False),
        ("ipu_loadgen", "compiled, (x,), scenario", False),  # keyword-only, passed by position
        ("ipu_compile", "..., cycle_counter=True", True),  # a backend's option: **options
        ("ipu_power", "items=", True),
        ("ipu_power", "seconds=", False),
    ],
)
def test_the_check_tells_a_call_with_an_argument_the_fixture_does_not_take(
    fixture: str, arguments: str, takes: bool
) -> None:
    assert (call_problem(Mention("page.md", 1, fixture, arguments)) is None) is takes
