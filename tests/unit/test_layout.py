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
from pytest_ipu.pytest_plugin import hookspec

PACKAGE = Path(pytest_ipu.__file__).parent
REPO = PACKAGE.parent

#: The layers, lowest first. A module may import from its own layer and the layers below it.
LAYERS: dict[str, int] = {
    # pure core: numbers, statistics, records, schema, gates, device requests and allocation
    "pytest_ipu": 0,
    "pytest_ipu.errors": 0,
    "pytest_ipu.backports": 0,
    "pytest_ipu.sdk": 0,
    "pytest_ipu.processes": 0,
    "pytest_ipu.inputs": 0,
    "pytest_ipu.measure": 0,
    "pytest_ipu.results": 0,
    "pytest_ipu.devices.request": 0,
    "pytest_ipu.devices.allocate": 0,
    # adapters: devices present, runtimes, power sources, placement, LoadGen, and the pipeline
    # measuring one benchmark with them (run/)
    "pytest_ipu.devices": 1,
    "pytest_ipu.backends": 1,
    "pytest_ipu.power": 1,
    "pytest_ipu.placement": 1,
    "pytest_ipu.loadgen": 1,
    "pytest_ipu.run": 1,
    # presentation of records (no pytest)
    "pytest_ipu.report": 2,
    # pytest glue and the command
    "pytest_ipu.pytest_plugin": 3,
    "pytest_ipu.cli": 3,
}
#: At most this many modules directly under pytest_ipu/ (the rest live in the folders).
MAX_TOP_LEVEL_MODULES = 6
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


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk of ``graph`` meets, each as the path round it."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_no_import_cycles() -> None:
    graph = {m: {i for i in _imports(m) if i in MODULES} for m in MODULES}
    assert _cycles(graph) == []


def _folder(module: str) -> str:
    """``pytest_ipu.run.benchmark`` -> ``run``; a module directly under the package is its own."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_folder_imports_a_folder_that_imports_it_back() -> None:
    """The folders form a DAG: a cycle among them (even through a third) is a layer drawn wrongly."""
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        mine = _folder(module)
        graph.setdefault(mine, set()).update(_folder(m) for m in _imports(module) if m in MODULES)
    for folder, targets in graph.items():
        targets.discard(folder)
    cycles = _cycles(graph)
    assert cycles == [], f"folders importing each other round a cycle: {cycles}"


#: The parts of a pytest-benchmark run document that only the format's owners index.
DOCUMENT_KEYS = frozenset({"benchmarks", "extra_info", "machine_info"})
#: The format's owners: its one reader and writer, and the package that names pytest-benchmark's
#: internals (its fixture's and session's objects). A module or package, with what is inside it.
DOCUMENT_OWNERS = ("pytest_ipu.results.benchmark_json", "pytest_ipu.pytest_plugin.bench_seam")
#: Modules allowed to index one of those keys anyway, each with the reason (none at present).
DOCUMENT_KEY_EXCEPTIONS: dict[str, str] = {}


def _document_indexing(module: str) -> list[str]:
    """Where ``module`` indexes a run document's ``DOCUMENT_KEYS``: ``x["benchmarks"]``, or
    ``x.get("extra_info")`` (also ``setdefault`` and ``pop``), as ``module:line key``."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        key: ast.AST | None = None
        if isinstance(node, ast.Subscript):
            key = node.slice
            if not isinstance(key, ast.Constant):
                key = getattr(key, "value", key)  # Python 3.8 wraps it in ast.Index
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "setdefault", "pop")
            and node.args
        ):
            key = node.args[0]
        if isinstance(key, ast.Constant) and key.value in DOCUMENT_KEYS:
            found.append(f"{module}:{node.lineno} {key.value}")
    return found


def _owns_the_format(module: str) -> bool:
    return any(module == owner or module.startswith(owner + ".") for owner in DOCUMENT_OWNERS)


def test_only_the_formats_owners_index_a_run_document() -> None:
    """A run document's ``benchmarks``, ``extra_info`` and ``machine_info`` are read and written
    through ``results.benchmark_json`` (docs/architecture.md): no other module indexes them."""
    found = [
        hit
        for module in sorted(MODULES)
        if not _owns_the_format(module) and module not in DOCUMENT_KEY_EXCEPTIONS
        for hit in _document_indexing(module)
    ]
    assert found == [], "index a run document outside results/benchmark_json.py (use its accessors)"
    assert all(m in MODULES for m in DOCUMENT_KEY_EXCEPTIONS), "an exception names a module that is gone"
    # The scan sees what it looks for: the format's reader indexes every one of the keys.
    seen = {hit.rpartition(" ")[2] for hit in _document_indexing("pytest_ipu.results.benchmark_json")}
    assert seen == DOCUMENT_KEYS


def test_few_modules_directly_under_the_package() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{len(top)} modules directly under pytest_ipu/: {top}"


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


def _architecture_tree() -> set[str]:
    """The modules docs/architecture.md's tree names, each with its folder (``results/gates.py``).

    A line whose first word is ``name/`` opens a folder: at the tree's first indent a folder of the
    package, deeper a folder inside the one open; every ``*.py`` named after it, on its line or the
    lines that follow, is in it. Names before any folder are directly under the package."""
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = page.index("```\npytest_ipu/")
    tree = page[start : page.index("```\n", start + 4)].splitlines()[2:]
    top = min(len(line) - len(line.lstrip()) for line in tree if line.strip())
    folder: list[str] = []
    named: set[str] = set()
    for line in tree:
        first = line.split()[0] if line.strip() else ""
        if re.fullmatch(r"[a-z_0-9]+/", first):
            depth = len(line) - len(line.lstrip())
            folder = [first] if depth == top else [*folder[:1], first]
        for name in re.findall(r"\b([a-z_0-9]+\.py)\b", line):
            named.add("".join(folder) + name)
    return named - {p for p in named if p.endswith(("__init__.py", "__main__.py"))}


def test_the_architecture_page_names_every_module_in_its_folder_and_only_those() -> None:
    """docs/architecture.md's tree lists every module of the package in its own folder, and no module
    that is gone or that lives elsewhere."""
    named = _architecture_tree()
    present = {
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if p.name not in {"__init__.py", "__main__.py"}
    }
    assert sorted(present - named) == [], (
        "modules missing from docs/architecture.md's tree (or in another folder)"
    )
    assert sorted(named - present) == [], "docs/architecture.md's tree names modules that do not exist there"


def test_the_repositorys_pytest_options_leave_pytest_benchmark_timing() -> None:
    """pyproject's addopts apply to the benchmarks too (make bench, a user's pytest in this checkout):
    pytest-benchmark stops timing under any --dist or -n, so those belong to the Makefile's suite run."""
    from pytest_ipu.backports import toml

    addopts = toml.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"][
        "ini_options"
    ]["addopts"]
    xdist = [opt for opt in addopts if opt.startswith(("--dist", "-n", "--numprocesses"))]
    assert xdist == [], f"pyproject's addopts would stop pytest-benchmark timing the benchmarks: {xdist}"
