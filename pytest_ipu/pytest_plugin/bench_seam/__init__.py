"""The one package that touches pytest-benchmark beyond its public hooks and its ``benchmark`` fixture.

pytest-ipu composes with pytest-benchmark 4.0.0 (the last release for Python 3.8, the Poplar SDK
3.4's Python) and every 5.x. What it needs that is not public, and how each version is bridged
(``tests/unit/test_bench_seam.py`` fails if a module outside this package names any of it):

=====================================  ========================  ===================  ==============
need                                   4.0.0 - 5.1               5.2                  5.3 and later
=====================================  ========================  ===================  ==============
``--benchmark-json``'s value           an open file: argparse's  as 4.0.0             a ``Path``
                                       ``FileType('wb')``, which
                                       empties the file while
                                       the command line is parsed
``pedantic(teardown=...)``             absent                    present              present
=====================================  ========================  ===================  ==============

The same on every version: ``pytest_benchmark.utils.get_commit_info`` (four to seven ``git``
processes, asked when the options are added, for autosave's name, and again for the JSON), which
``pytest_benchmark.plugin`` and ``utils.get_tag`` call by their module's name; the session object
(``config._benchmarksession``: ``save``, ``autosave``, ``json``, ``disabled``, ``benchmarks``,
``compare``, ``get_machine_info``, ``save_json``, ``handle_saving``, ``storage.save``,
``storage.query``, ``save_data``; the file storage's ``get``, ``_next_num`` and ``logger``, and
``pytest_benchmark.utils.safe_dumps``), the fixture's ``has_error`` (a raise inside ``pedantic``
sets it, and such a benchmark is left out of the JSON), its ``skipped`` (set, it silences the
"fixture was not used" warning), and the rounds' times (``stats.stats.data``).

Bridged: before 5.3, ``defer_json_open`` replaces ``--benchmark-json``'s argparse type before the
command line is parsed (the value stays a path, the file untouched) and ``set_json_path`` hands
pytest-benchmark a ``_JsonFile`` that opens the path only when it writes (``with self.json as fh``),
so the JSON goes through pytest-ipu's temporary file and is moved into place whole, as on 5.3;
``json_path`` reads the value as a path on every version. Before 5.2, ``fixture.Timer.pedantic`` runs
``teardown`` at the start of the next round's setup and after the last round: after pytest-benchmark's
bookkeeping of the round, where 5.2 calls it.

This module is what a run needs from its start (the option and the routing of the saving);
``fixture`` is loaded by the first benchmark, ``runs`` by a run that writes or compares files.
Documented in docs/architecture.md (section "Architecture: where things are", paragraph
"pytest-benchmark 4.0.0 to 5.x").
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from typing import BinaryIO

import pytest

#: pytest-benchmark's option whose value changed from an open file to a path in 5.3.
_JSON_OPTION = "--benchmark-json"


def _version() -> tuple[int, ...]:
    from importlib import metadata

    text = metadata.version("pytest-benchmark")
    parts: list[int] = []
    for part in text.split("."):
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def json_option_is_file() -> bool:
    """Whether the installed pytest-benchmark opens ``--benchmark-json`` itself (before 5.3)."""
    return _version() < (5, 3)


# -- --benchmark-json -------------------------------------------------------------------------------


def defer_json_open(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Keep pytest-benchmark (< 5.3) from opening ``--benchmark-json`` while the command line is
    parsed: its argparse ``FileType('wb')`` would empty the file before any test ran, so an
    interrupted or failed run would lose the previous results. Call from ``pytest_addoption``; the
    option may be added after this plugin's (entry points load in no set order), so until it is
    there a helper plugin waits for pytest-benchmark's registration."""
    if _defer(parser):
        return

    class _WhenRegistered:
        @staticmethod
        def pytest_plugin_registered(plugin: object) -> None:
            _defer(parser)

    pluginmanager.register(_WhenRegistered(), "pytest-ipu-defer-benchmark-json")


def _defer(parser: pytest.Parser) -> bool:
    """Replace the argparse type of ``--benchmark-json`` by a plain string, if the option exists yet.

    ``Argument.attrs()`` is the mapping the option's argparse argument is built from (pytest 8: the
    keywords it was added with; pytest 9: the argparse action's own attributes), so a change there
    applies to every parse after it. pytest's ``Parser`` keeps its groups in ``_groups`` (private;
    ``getgroup`` would create a group that is not there).
    """
    for group in getattr(parser, "_groups", ()):
        for argument in group.options:
            if _JSON_OPTION in argument.names():
                attrs = argument.attrs()
                if isinstance(attrs.get("type"), argparse.FileType):
                    attrs["type"] = str
                return True
    return False


class _JsonFile:
    """What pytest-benchmark before 5.3 writes ``--benchmark-json`` through (``with self.json as
    fh: fh.write(...)``): the file at ``path``, opened only then (and ``os.fspath``'s path). ``str()``
    is ``shown`` where given, which pytest-benchmark prints ("Wrote benchmark data in: ...")."""

    def __init__(self, path: Path, shown: Path | None = None) -> None:
        self.path = path
        self.name = str(path if shown is None else shown)
        self._handle: BinaryIO | None = None

    def __enter__(self) -> BinaryIO:
        self._handle = self.path.open("wb")
        return self._handle

    def __exit__(self, *_: object) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __str__(self) -> str:
        return self.name

    def __fspath__(self) -> str:
        # The file written, not the one shown: whatever opens this by path (a plugin wrapping
        # save_json, as the suite's full-disk test does) writes the temporary, never the target.
        return str(self.path)


def quiet(option: Any) -> None:
    """Leave pytest-benchmark's table and its progress lines out (its ``--benchmark-quiet``, on every
    version from 4.0.0; ``--benchmark-verbose`` still wins). Call it before pytest-benchmark's
    ``trylast`` pytest_configure, which reads the option."""
    option.benchmark_quiet = True


def json_path(option: Any) -> Path | None:
    """``--benchmark-json`` as a path, whatever the installed pytest-benchmark made of it; ``None``
    without it. A value that is an open file (the deferral above did not apply) is closed: the file
    is written through ``set_json_path`` instead."""
    value = getattr(option, "benchmark_json", None)
    if value is None:
        return None
    if isinstance(value, (_JsonFile, _ShownPath)):
        return value.path
    if hasattr(value, "write") and hasattr(value, "name"):
        value.close()
        return Path(value.name)
    return Path(value)


class _ShownPath(os.PathLike):  # type: ignore[type-arg]  # os.PathLike is generic only from 3.9
    """What pytest-benchmark from 5.3 writes ``--benchmark-json`` through (``open(self.json)``):
    opened at ``path`` (``os.fspath``) but printed as ``shown`` ("Wrote benchmark data in: ..."),
    so that a run writing a temporary file names the file the user asked for, not the temporary."""

    def __init__(self, path: Path, shown: Path) -> None:
        self.path = path
        self.shown = shown

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.shown)

    def __repr__(self) -> str:
        return f"_ShownPath({str(self.path)!r}, shown={str(self.shown)!r})"


def set_json_path(option: Any, path: Path | None, shown: Path | None = None) -> None:
    """Make pytest-benchmark write its ``--benchmark-json`` document to ``path``, in the form the
    installed version reads (a path, or before 5.3 a file opened on first write); where ``shown``
    is given (the file ``path`` is renamed onto once written whole), pytest-benchmark's line
    "Wrote benchmark data in: ..." names it rather than ``path``."""
    if path is None:
        option.benchmark_json = None
    elif json_option_is_file():
        option.benchmark_json = _JsonFile(path, shown)
    elif shown is not None:
        option.benchmark_json = _ShownPath(path, shown)
    else:
        option.benchmark_json = path


# -- the commit ------------------------------------------------------------------------------------


def commit_info() -> dict[str, Any] | None:
    """pytest-benchmark's commit information for the working directory (its project, commit, times,
    branch, and whether the tree is dirty), as its runs there write it; ``None`` where
    pytest-benchmark is not imported yet."""
    utils: Any = sys.modules.get("pytest_benchmark.utils")
    if utils is None:
        return None
    answer: dict[str, Any] = utils.get_commit_info(None)
    return answer


def remember_commit_info(answer: Mapping[str, Any]) -> None:
    """Make this process's pytest-benchmark answer every later question of the commit with a copy of
    ``answer`` (``commit_info`` in this directory), its ``project`` the name asked for where one is
    (``--benchmark-project-name``), as pytest-benchmark itself names it. ``pytest-ipu ab`` asks once
    a side, not twice a run: the ``git`` processes cost a forked run a tenth of its time on a busy
    runner, and a side's commit does not change while the job runs."""
    utils: Any = sys.modules.get("pytest_benchmark.utils")
    plugin: Any = sys.modules.get("pytest_benchmark.plugin")
    if utils is None or plugin is None:
        return
    remembered = dict(answer)

    def get_commit_info(project_name: str | None = None) -> dict[str, Any]:
        info = dict(remembered)
        if project_name:
            info["project"] = project_name
        return info

    utils.get_commit_info = get_commit_info
    plugin.get_commit_info = get_commit_info


# -- the session ------------------------------------------------------------------------------------


def route_saving(
    config: pytest.Config,
    instead: Callable[[bool], bool],
    interrupted: Callable[[KeyboardInterrupt], None],
) -> None:
    """Route pytest-benchmark's saving (``--benchmark-json``, ``--benchmark-save``/``-autosave``):
    ``instead`` is called in its place with whether pytest-benchmark has benchmarks to save and, if
    it returns true (it saved the run itself, or the run must not be saved), pytest-benchmark's own
    saving is skipped, and with it its warning "Not saving anything, no benchmarks have been run!",
    which would then be false (and under ``-W error`` end the run). A Ctrl-C (or SIGTERM raised as
    one) during the saving stops it, the files not yet written are not, and ``interrupted`` is
    called with it: it would otherwise end the session's end with a traceback."""
    bench = getattr(config, "_benchmarksession", None)
    handle_saving = getattr(bench, "handle_saving", None)
    if not callable(handle_saving):
        return

    def routed() -> None:
        if not instead(bool(bench.benchmarks)):  # type: ignore[union-attr]
            try:
                handle_saving()
            except KeyboardInterrupt as exc:
                interrupted(exc)

    bench.handle_saving = routed  # type: ignore[union-attr]


def route_storage(config: pytest.Config, write: Callable[[Callable[[], Path], bytes], Path | None]) -> bool:
    """Route the file storage's writer (``--benchmark-save``/``-autosave``: ``storage.save``) through
    ``write``, which writes the file whole or not at all under a name no other file has, asking
    ``next_name`` again when the name it was given was taken meanwhile, and returns the path it
    wrote or ``None``: pytest-benchmark opens the run's ``NNNN_name.json`` in place, so a full disk
    or an interrupt left it truncated, a run that later readers call "not JSON". The same names,
    content and log line as pytest-benchmark's own ``FileStorage.save`` (4.0.0 to 5.x). Returns
    whether there was a file storage to route (elasticsearch's is left as it is)."""
    bench = getattr(config, "_benchmarksession", None)
    storage = getattr(bench, "storage", None)
    if type(storage).__name__ != "FileStorage":
        return False
    from pytest_benchmark.utils import safe_dumps

    def save(output_json: Any, save: str) -> None:
        def next_name() -> Path:
            # The number after the storage's highest, asked afresh: a run saving beside this one
            # may have taken the last one.
            return Path(storage.get(f"{storage._next_num}_{save}.json"))  # type: ignore[union-attr]

        text: str = safe_dumps(output_json, ensure_ascii=True, indent=4)  # type: ignore[no-untyped-call]
        target = write(next_name, text.encode())
        if target is not None:
            storage.logger.info(f"Saved benchmark data in: {target}")  # type: ignore[union-attr]

    storage.save = save  # type: ignore[union-attr]
    return True
