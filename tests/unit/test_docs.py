"""The documentation names everything a user can set or read: options, fixtures, keywords, JSON keys."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from pytest_ipu import backends
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.pytest_plugin import plugin
from pytest_ipu.pytest_plugin.fixtures import calls
from pytest_ipu.pytest_plugin.fixtures.common import FixtureCall
from pytest_ipu.pytest_plugin.marker_keywords import KEYWORDS
from pytest_ipu.pytest_plugin.options import OPTIONS
from pytest_ipu.results import records
from pytest_ipu.results import schema

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _read(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("spec", OPTIONS, ids=lambda s: s.flag)
def test_every_option_is_documented_with_its_ini_key_env_var_and_default(spec):
    row = next(
        (line for line in _read("options.md").splitlines() if line.startswith(f"| `{spec.flag}")), None
    )
    assert row is not None, f"{spec.flag} has no row in docs/options.md"
    assert f"`{spec.ini}`" in row
    assert f"`{spec.env}`" in row
    assert f"`{spec.default}`" in row


def test_every_marker_keyword_and_builtin_backend_is_documented():
    # The marker section itself names every keyword the unknown-keyword error lists.
    marker = _read("options.md").split("## Marker", 1)[1].split("\n## ", 1)[0]
    for keyword in KEYWORDS:
        assert f"`{keyword}`" in marker, f"docs/options.md's marker section omits `{keyword}`"
    for name in backends.BUILTIN:
        assert f"`{name}`" in _read("options.md")


# Every fixture the plugin registers: a new one without its section fails here.
@pytest.mark.parametrize("fixture", sorted(plugin.__all__))
def test_every_fixture_has_a_section(fixture):
    assert f"## `{fixture}`" in _read("fixtures.md")


def _fixture_calls() -> list[type[FixtureCall]]:
    """The callables the fixtures return (each names its fixture): every ``FixtureCall`` of
    ``fixtures.calls``."""
    found = [
        value
        for value in vars(calls).values()
        if isinstance(value, type) and issubclass(value, FixtureCall) and "fixture" in vars(value)
    ]
    return sorted(found, key=lambda c: c.fixture)


def _as_called(call: type[FixtureCall]) -> str:
    """``call``'s signature as a user writes the call: ``ipu_x(a, b=1, *, c=None)``."""
    signature = inspect.signature(call.__call__)
    shown = [p.replace(annotation=p.empty) for p in list(signature.parameters.values())[1:]]
    text = str(signature.replace(parameters=shown, return_annotation=signature.empty))
    return call.fixture + text.replace("'", '"')


def _first_call(text: str, name: str) -> str | None:
    """The first ``name(...)`` in ``text``, to its closing parenthesis."""
    start = text.find(f"{name}(")
    if start < 0:
        return None
    depth = 0
    for end in range(start + len(name), len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            return text[start : end + 1]
    return None


def test_the_plugin_registers_a_fixture_for_every_callable():
    assert {c.fixture for c in _fixture_calls()} <= set(plugin.__all__)
    assert len(_fixture_calls()) == 6


@pytest.mark.parametrize("call", _fixture_calls(), ids=lambda c: c.fixture)
def test_each_fixtures_section_shows_its_signature_as_the_callable_declares_it(call):
    """A section's first call of its fixture is the signature, whole, or its start then ``...``
    (``ipu_loadgen``'s keywords are docs/loadgen.md's table, checked in test_loadgen_request.py)."""
    section = _read("fixtures.md").split(f"## `{call.fixture}`", 1)[1].split("\n## ", 1)[0]
    shown = _first_call(section, call.fixture)
    assert shown is not None, f"docs/fixtures.md's {call.fixture} section shows no call"
    expected = _as_called(call)
    if shown.endswith(", ...)"):
        assert expected.startswith(shown[: -len("...)")]), (shown, expected)
    else:
        assert shown == expected


def test_every_record_key_is_in_the_schema_page():
    record = records.IpuRecord(
        target="t:d",
        backend="t",
        device="d",
        device_name="n",
        precision="fp32",
        io="host",
        batch_size=1,
        items_per_call=1,
        rounds=1,
        rounds_policy="fixed",
        warmup_rounds=0,
        latency_s=LatencySummary(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1),
        window_s=1.0,
        throughput_items_per_s=1.0,
        compile_s=None,
        compile_cached=False,
        first_call_s=1.0,
    )
    page = _read("json-schema.md")
    for key in schema.to_json(record):
        assert f'"{key}"' in page, f"extra_info['ipu'][{key!r}] is not shown in docs/json-schema.md"
    numbers = _read("numbers.md")
    for key in ("latency_s", "throughput_items_per_s", "compile_s", "first_call_s", "latency_unsupported"):
        assert key in numbers, f"{key} is not defined in docs/numbers.md"


def test_the_readme_says_how_to_tell_a_local_torch_from_a_cpu_build():
    """The CPU-torch line uses an external index; where it is unreachable, the README says the usual
    index's torch may be a CPU build and how to check (doctor names the build)."""
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    assert "Where that index cannot be reached" in readme
    assert "pytest-ipu doctor` says which build is installed" in readme
    assert "CPU-only build" in readme


def test_the_readme_is_short_enough_to_read_in_two_minutes():
    """The README is what it is, the two commands, a first benchmark, the CI recipe and the docs:
    everything else lives in docs/ (at most 6,000 characters)."""
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    assert len(readme) <= 6000, f"README.md has {len(readme)} characters; move detail to docs/"


def test_every_link_of_the_readme_to_docs_names_a_page_and_heading_that_exist():
    """A newcomer's links lead somewhere: each docs/ page the README links exists, and each
    #anchor is one of its headings (GitHub's slugs: lower case, spaces to hyphens, punctuation
    dropped)."""
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)", readme)
    assert links, "the README links no docs page"
    for page, anchor in links:
        path = DOCS.parent / page
        assert path.exists(), f"README links {page}, which does not exist"
        if anchor and path.suffix == ".md":
            slugs = {
                re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                for line in path.read_text(encoding="utf-8").splitlines()
                if line.startswith("#")
            }
            assert anchor in slugs, f"README links {page}#{anchor}: no such heading"
