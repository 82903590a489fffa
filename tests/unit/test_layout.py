"""The package's shape holds: layers depend one way, no module imports itself round a cycle (not
even for typing), and every ``pytest_ipu_*`` hook the docs or docstrings name exists.

Read from the source with ``ast``, so a typing-only import counts like any other.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import pytest_ipu
from pytest_ipu import hookspec

PACKAGE = Path(pytest_ipu.__file__).parent
REPO = PACKAGE.parent

#: The layers, lowest first. A module may import from its own layer and the layers below it.
LAYERS: dict[str, int] = {
    # pure core: numbers, statistics, records, schema, gates, placement requests
    "pytest_ipu": 0,
    "pytest_ipu.errors": 0,
    "pytest_ipu.measure.metrics": 0,
    "pytest_ipu.measure.stats": 0,
    "pytest_ipu.measure.timing": 0,
    "pytest_ipu.measure.units": 0,
    "pytest_ipu.results": 0,
    "pytest_ipu.placement.request": 0,
    "pytest_ipu.placement.allocate": 0,
    # adapters: runtimes, power sources, devices, and measuring one benchmark with them
    "pytest_ipu.backends": 1,
    "pytest_ipu.power": 1,
    "pytest_ipu.placement": 1,
    "pytest_ipu.measure.run": 1,
    "pytest_ipu.compiling": 1,
    "pytest_ipu.loadgen": 1,
    # presentation of records (no pytest)
    "pytest_ipu.report": 2,
    # pytest glue and the command
    "pytest_ipu.plugin": 3,
    "pytest_ipu.hookspec": 3,
    "pytest_ipu.options": 3,
    "pytest_ipu.marker": 3,
    "pytest_ipu.session": 3,
    "pytest_ipu.fixtures": 3,
    "pytest_ipu.gating": 3,
    "pytest_ipu.repeats": 3,
    "pytest_ipu.cli": 3,
    "pytest_ipu.doctor": 3,
    "pytest_ipu.ab_runner": 3,
    "pytest_ipu.bench_seam": 3,
}
#: Layers allowed to import pytest.
PYTEST_LAYERS = {3}
#: Below the glue, only this may import pytest: its warnings subclass pytest's warning category.
PYTEST_ALLOWED = {"pytest_ipu.errors"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _layer(module: str) -> int:
    """The layer of the longest prefix of ``module`` in ``LAYERS``."""
    name = module
    while name not in LAYERS:
        name = name.rpartition(".")[0]
    return LAYERS[name]


def _imports(module: str) -> set[str]:
    """Every module ``module`` imports at any level (typing-only included), and the packages a
    submodule import runs (importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__``)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        for name in names:
            while name and name not in MODULES and "." in name:
                name = name.rpartition(".")[0]
            if name in MODULES or name in ("pytest",):
                found.add(name)
                parent = name.rpartition(".")[0]
                while parent in MODULES:
                    found.add(parent)
                    parent = parent.rpartition(".")[0]
    found.discard(module)
    # A package's own __init__ runs before its submodules; that is not an import of the submodule's.
    return {m for m in found if not module.startswith(m + ".")}


def test_every_module_has_a_layer() -> None:
    assert all(_layer(m) >= 0 for m in MODULES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module: str) -> None:
    mine = _layer(module)
    upward = sorted(m for m in _imports(module) if m != "pytest" and _layer(m) > mine)
    assert upward == [], f"{module} (layer {mine}) imports from a higher layer: {upward}"
    if mine not in PYTEST_LAYERS and module not in PYTEST_ALLOWED:
        assert "pytest" not in _imports(module), f"{module} is below the pytest glue but imports pytest"


def test_no_import_cycles() -> None:
    graph = {m: {i for i in _imports(m) if i in MODULES} for m in MODULES}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert cycles == []


def test_every_hook_the_docs_name_exists() -> None:
    """A hook named in docs/, the README or a docstring of the package is a real hook spec."""
    texts = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md", *MODULES.values()]
    named = {
        hook
        for path in texts
        if path.exists()
        for hook in re.findall(r"\bpytest_ipu_[a-z_]*[a-z]\b", path.read_text(encoding="utf-8"))
    }
    specs = {name for name in dir(hookspec) if name.startswith("pytest_ipu_")}
    assert named, "no hook is documented at all"
    assert named <= specs, f"documented but not hook specs: {sorted(named - specs)}"
