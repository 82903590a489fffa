"""The one module that touches pytest-benchmark beyond its public hooks and its ``benchmark`` fixture.

pytest-ipu composes with pytest-benchmark 4.0.0 (the last release for Python 3.8, the Poplar SDK
3.4's Python) and every 5.x. Everything it needs that is not public, and how each version is
bridged (``tests/unit/test_bench_seam.py`` fails if another module of ``pytest_ipu`` names any of it):

=====================================  ========================  ===================  ==============
need                                   4.0.0 - 5.1               5.2                  5.3 and later
=====================================  ========================  ===================  ==============
``--benchmark-json``'s value           an open file: argparse's  as 4.0.0             a ``Path``
                                       ``FileType('wb')``, which
                                       empties the file while
                                       the command line is parsed
``pedantic(teardown=...)``             absent                    present              present
=====================================  ========================  ===================  ==============

The same on every version: the session object (``config._benchmarksession``: ``save``,
``autosave``, ``json``, ``disabled``, ``benchmarks``, ``compare``, ``get_machine_info``,
``save_json``, ``handle_saving``, ``storage.save``, ``storage.query``, ``save_data``; the file
storage's ``get``, ``_next_num`` and ``logger``, and ``pytest_benchmark.utils.safe_dumps``), the
fixture's ``has_error`` (a raise inside ``pedantic`` sets it, and such a benchmark is left out of
the JSON), its ``skipped`` (set, it silences the "fixture was not used" warning), and the rounds'
times (``stats.stats.data``).

How the differences are bridged:

- ``--benchmark-json`` before 5.3: ``defer_json_open`` replaces the option's argparse type before the
  command line is parsed, so the value stays a path and the file is not touched; ``set_json_path``
  then hands pytest-benchmark a ``_JsonFile``, which opens the path only when pytest-benchmark writes
  (``with self.json as fh``), so the JSON goes through pytest-ipu's temporary file and is moved into
  place whole, as on 5.3. ``json_path`` reads the value as a path on every version.
- ``teardown`` before 5.2: ``Timer.pedantic`` runs it at the start of the next round's setup and
  after the last round: the same point between rounds, after pytest-benchmark's bookkeeping of the
  round, where 5.2 calls it.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import BinaryIO
from typing import TypeVar
from typing import cast

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


# -- the session ------------------------------------------------------------------------------------


def wrap_json_writer(config: pytest.Config, after: Callable[[Callable[[], None]], None]) -> bool:
    """Route pytest-benchmark's ``--benchmark-json`` write through ``after``: it gets a function
    that writes the file and calls it itself (to move the file into place, or report a failure).
    Returns whether pytest-benchmark has such a writer (``save_json``) to route."""
    bench = getattr(config, "_benchmarksession", None)
    save_json = getattr(bench, "save_json", None)
    if not callable(save_json):
        return False

    def routed(output_json: Any) -> None:
        after(lambda: save_json(output_json))

    bench.save_json = routed  # type: ignore[union-attr]
    return True


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


def route_storage(config: pytest.Config, write: Callable[[Path, bytes], bool]) -> bool:
    """Route the file storage's writer (``--benchmark-save``/``-autosave``: ``storage.save``) through
    ``write``, which writes the file whole or not at all and returns whether it did: pytest-benchmark
    opens the run's ``NNNN_name.json`` in place, so a full disk or an interrupt left it truncated, a
    run that later readers call "not JSON". The same name, content and log line as pytest-benchmark's
    own ``FileStorage.save`` (4.0.0 to 5.x). Returns whether there was a file storage to route
    (elasticsearch's is left as it is)."""
    bench = getattr(config, "_benchmarksession", None)
    storage = getattr(bench, "storage", None)
    if type(storage).__name__ != "FileStorage":
        return False
    from pytest_benchmark.utils import safe_dumps

    def save(output_json: Any, save: str) -> None:
        target = Path(storage.get(f"{storage._next_num}_{save}.json"))  # type: ignore[union-attr]
        text: str = safe_dumps(output_json, ensure_ascii=True, indent=4)  # type: ignore[no-untyped-call]
        if write(target, text.encode()):
            storage.logger.info(f"Saved benchmark data in: {target}")  # type: ignore[union-attr]

    storage.save = save  # type: ignore[union-attr]
    return True


def saved_runs_compared(config: pytest.Config) -> list[Path]:
    """The saved runs ``--benchmark-compare`` chose from, oldest first, when it was given without a
    run (pytest-benchmark then compares against the newest, the last of them); empty when it named
    a run, was not given, or the storage is not a folder (elasticsearch). The same query as
    pytest-benchmark's ``storage.load()``: this machine's folder, ``NNNN_*.json``, sorted by name."""
    bench = getattr(config, "_benchmarksession", None)
    storage = getattr(bench, "storage", None)
    # Only the file storage is a folder of runs (elasticsearch's ``query`` takes no glob).
    if getattr(bench, "compare", None) is not True or type(storage).__name__ != "FileStorage":
        return []
    return [Path(p) for p in storage.query("[0-9][0-9][0-9][0-9]_")]  # type: ignore[union-attr]


def save_without_benchmarks(config: pytest.Config) -> bool:
    """Save the run's file as pytest-benchmark would, for a run that measured no benchmark (it then
    saves nothing): ``--benchmark-json`` through its writer, ``--benchmark-save``/``-autosave``
    through its storage. Returns whether anything was to be saved.

    The document is made as pytest-benchmark's ``handle_saving`` makes it, through its public hooks
    (machine and commit info, ``pytest_benchmark_generate_json`` with no benchmarks, then
    ``pytest_benchmark_update_json``, where plugins add their sections). A disabled pytest-benchmark
    saves nothing, and neither does this; nor does a session that has benchmarks (it saves them).
    """
    bench = getattr(config, "_benchmarksession", None)
    if bench is None or bench.benchmarks or bench.disabled:
        return False
    save = bench.save or bench.autosave
    if not (save or bench.json):
        return False
    hook = config.hook
    machine_info = bench.get_machine_info()
    commit_info = hook.pytest_benchmark_generate_commit_info(config=config)
    hook.pytest_benchmark_update_commit_info(config=config, commit_info=commit_info)

    def document(include_data: bool) -> dict[str, Any]:
        output_json: dict[str, Any] = hook.pytest_benchmark_generate_json(
            config=config,
            benchmarks=[],
            include_data=include_data,
            machine_info=machine_info,
            commit_info=commit_info,
        )
        hook.pytest_benchmark_update_json(config=config, benchmarks=[], output_json=output_json)
        return output_json

    if bench.json:
        bench.save_json(document(True))
    if save:
        bench.storage.save(document(bench.save_data), save)
    return True


# -- the fixture ------------------------------------------------------------------------------------


def forget(config: pytest.Config, benchmark: Any) -> None:
    """Leave a timed run of the fixture out of pytest-benchmark's results: an earlier repeat of a
    benchmark, timed by the same ``pedantic`` as the last one and pooled into its record, but not a
    benchmark of its own in pytest-benchmark's table and JSON (which keep the last repeat's rounds)."""
    stats = getattr(benchmark, "stats", None)
    kept = getattr(getattr(config, "_benchmarksession", None), "benchmarks", None)
    if stats is None or kept is None:
        return
    for i, entry in enumerate(kept):
        if entry is stats:
            del kept[i]
            return


#: The attribute of pytest-benchmark's fixture naming the pytest-ipu fixture that measures with it,
#: and whether that call is still running.
_MEASURING = "_pytest_ipu_measuring"

# The bound as a string: collections.abc.Callable cannot be subscripted at run time before Python 3.9.
_F = TypeVar("_F", bound="Callable[..., Any]")


def one_per_test(benchmark: Any, caller: str, test: str, measure: _F) -> _F:
    """``measure`` (the callable fixture ``caller`` returns), failing a second use of ``benchmark``
    in ``test`` with one line in pytest-ipu's words.

    pytest-ipu measures one benchmark per test: its record is the test's result, its gates fail the
    test, and pytest-benchmark keeps one result per test (a second ``pedantic`` is its bare
    "FixtureAlreadyUsed ... pedantic mode", which the user never called). A second call, after the
    first or inside the model the first is measuring, is refused before it measures anything.
    """

    @functools.wraps(measure)
    def once(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        first, running = getattr(benchmark, _MEASURING, (None, False))
        if first is None and getattr(benchmark, "_mode", None):
            first = "pytest-benchmark's benchmark"  # the plain fixture, used by the test itself
        if first is not None:
            when = f"inside the model {first}(...) is measuring" if running else f"after {first}(...)"
            pytest.fail(
                f"pytest-ipu: {caller}(...) called {when} in {test}: pytest-ipu measures one benchmark "
                "per test; measure each model in a test of its own (e.g. with @pytest.mark.parametrize "
                "over the models)",
                pytrace=False,
            )
        setattr(benchmark, _MEASURING, (caller, True))
        try:
            return measure(*args, **kwargs)
        finally:
            setattr(benchmark, _MEASURING, (caller, False))

    return cast("_F", once)


def mark_used(benchmark: Any) -> None:
    """Tell pytest-benchmark its fixture was not forgotten (else it warns "Benchmark fixture was not
    used at all in this test!") when the test measured without it or failed before it."""
    benchmark.skipped = True


class Timer:
    """pytest-benchmark's ``benchmark`` fixture as pytest-ipu's timed loop uses it
    (``measure.timing.PedanticBenchmark``), the same on every version."""

    def __init__(self, fixture: Any) -> None:
        self._fixture = fixture
        self._takes_teardown = "teardown" in inspect.signature(fixture.pedantic).parameters

    @property
    def round_times(self) -> tuple[float, ...]:
        """The seconds of each timed round pytest-benchmark kept, in order."""
        return tuple(self._fixture.stats.stats.data)

    def rounds_ended_early(self) -> None:
        """The rounds were ended on purpose, by a raise from ``setup``: pytest-benchmark counted it
        as an error (``has_error``) and would leave the benchmark out of its JSON; keep it."""
        self._fixture.has_error = False

    def pedantic(
        self,
        target: Callable[..., object],
        args: Sequence[object] = (),
        kwargs: dict[str, object] | None = None,
        setup: Callable[[], object] | None = None,
        teardown: Callable[..., object] | None = None,
        rounds: int = 1,
        warmup_rounds: int = 0,
        iterations: int = 1,
    ) -> object:
        """``benchmark.pedantic`` with ``teardown`` on every version (before 5.2, run at the start of
        the next round's ``setup`` and after the last round, as 5.2 runs it between rounds)."""
        plain = {"args": args, "kwargs": kwargs, "rounds": rounds, "warmup_rounds": warmup_rounds}
        if teardown is None or self._takes_teardown:
            more = {} if teardown is None else {"teardown": teardown}
            return self._fixture.pedantic(target, setup=setup, iterations=iterations, **plain, **more)
        ran = [False]  # a round (or warm-up round) ran whose teardown is still to come

        def teardown_then_setup() -> object:
            if ran[0]:
                ran[0] = False
                teardown(*args, **(kwargs or {}))
            given = setup() if setup is not None else None
            ran[0] = True
            return given

        result = self._fixture.pedantic(target, setup=teardown_then_setup, iterations=iterations, **plain)
        # pytest-benchmark 5.2 calls no teardown when disabled (the target ran once, untimed).
        if ran[0] and self._fixture.enabled:
            teardown(*args, **(kwargs or {}))
        return result
