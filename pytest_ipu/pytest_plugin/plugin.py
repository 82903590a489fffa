"""The pytest11 entry point: options, marker, hooks and fixtures are wired here; no logic.

Every pytest run of a project with pytest-ipu installed loads this module, so it imports only the
glue and what parsing the options needs: no numpy, no runtime. Everything a benchmark needs loads
on first use (``benchmarks/test_startup_cost.py`` measures what the plugin adds to start-up).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Generator
from typing import TYPE_CHECKING
from typing import Any

import pytest

from pytest_ipu import backends
from pytest_ipu.backends.target import Target
from pytest_ipu.backends.target import parse_target
from pytest_ipu.placement import poprun
from pytest_ipu.placement import torchrun
from pytest_ipu.pytest_plugin import bench_seam
from pytest_ipu.pytest_plugin import hookspec
from pytest_ipu.pytest_plugin import options
from pytest_ipu.pytest_plugin.fixtures.benchmark import ipu_benchmark
from pytest_ipu.pytest_plugin.fixtures.common import FAILED_KEY
from pytest_ipu.pytest_plugin.fixtures.compile import ipu_backend
from pytest_ipu.pytest_plugin.fixtures.compile import ipu_compile
from pytest_ipu.pytest_plugin.fixtures.compile import ipu_placement
from pytest_ipu.pytest_plugin.fixtures.compile import ipu_settings
from pytest_ipu.pytest_plugin.fixtures.loadgen import ipu_loadgen
from pytest_ipu.pytest_plugin.fixtures.power import ipu_power
from pytest_ipu.pytest_plugin.fixtures.train import ipu_process_group
from pytest_ipu.pytest_plugin.fixtures.train import ipu_time_to_train
from pytest_ipu.pytest_plugin.fixtures.train import ipu_train
from pytest_ipu.pytest_plugin.gating import GATE_KEY
from pytest_ipu.pytest_plugin.marker import MARKER_HELP
from pytest_ipu.pytest_plugin.session import JSON_PATH_KEY
from pytest_ipu.pytest_plugin.session import SESSION_KEY
from pytest_ipu.pytest_plugin.session import IpuSession

__all__ = [
    "ipu_backend",
    "ipu_benchmark",
    "ipu_compile",
    "ipu_loadgen",
    "ipu_placement",
    "ipu_power",
    "ipu_process_group",
    "ipu_settings",
    "ipu_time_to_train",
    "ipu_train",
]

if TYPE_CHECKING:
    from pytest_ipu.results.atomic import PendingFile

_PLUGIN_NAME = "pytest-ipu-session"
_GATES_NAME = "pytest-ipu-gates"
_REPEATS_NAME = "pytest-ipu-repeats"
#: The ``--benchmark-json`` file pytest-benchmark writes at a temporary path, moved into place whole.
_JSON_KEY = pytest.StashKey["PendingFile"]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register the ``pytest_ipu_*`` hook specifications."""
    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Add the ``ipu`` option group and its ini keys; keep pytest-benchmark before 5.3 from emptying
    the ``--benchmark-json`` file while the command line is parsed (``bench_seam``)."""
    options.add_options(parser)
    bench_seam.defer_json_open(parser, pluginmanager)


def pytest_configure(config: pytest.Config) -> None:
    """Resolve the settings (a bad value stops the run with a usage error) and start the session."""
    config.addinivalue_line("markers", MARKER_HELP)
    try:
        # Under PopRun each instance writes its own --benchmark-json file (before pytest-benchmark,
        # whose trylast pytest_configure reads the option).
        instance = poprun.configure_json_path(config.option)
        # Under torchrun likewise each rank (rank 0 also writes the merged file at the given path).
        rank = torchrun.detect()
        merged_json = None if rank is None else torchrun.configure_json_path(config.option, rank)
    except ValueError as exc:
        raise pytest.UsageError(f"pytest-ipu: {exc}") from None
    # pytest-benchmark opens --benchmark-json and writes it in place at the end of the run, so a
    # full disk or an interrupt left it half-written: it writes a temporary file beside it instead,
    # moved into place whole by pytest_sessionfinish below (pytest-benchmark's trylast
    # pytest_configure reads the option after this).
    json_path = bench_seam.json_path(config.option)
    if json_path is not None:
        config.stash[JSON_PATH_KEY] = json_path
    if json_path is not None and not hasattr(config, "workerinput"):
        from pytest_ipu.results.atomic import PendingFile

        pending = PendingFile(json_path)
        config.stash[_JSON_KEY] = pending
        json_path = pending.temporary
    bench_seam.set_json_path(config.option, json_path)
    # Saved runs keep their per-round times (pytest-benchmark's --benchmark-save-data, which it
    # leaves off): a run saved today is then as complete as --benchmark-json, for `pytest-benchmark
    # compare --histogram` or any later analysis of the rounds.
    if hasattr(config.option, "benchmark_save_data"):
        config.option.benchmark_save_data = True
    session = IpuSession(
        config, options.settings_from_config(config), poprun=instance, torchrun=rank, merged_json=merged_json
    )
    options.warn_unknown_variables(config)
    # A bad --ipu-scaling-baseline stops the run before anything is measured (a usage error).
    session.scaling_baseline()
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, _PLUGIN_NAME)
    config.stash[GATE_KEY] = session.gate_check
    config.pluginmanager.register(session.gate_check, _GATES_NAME)
    config.pluginmanager.register(session.repeats, _REPEATS_NAME)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, Any, None]:
    """Move pytest-benchmark's ``--benchmark-json`` into place whole, or report one line and leave the
    destination as it was.

    pytest-benchmark writes the file in its own ``pytest_sessionfinish`` wrapper, before the other
    implementations (its session's ``finish`` writes it, 4.0.0 to 5.3 alike). Where its
    writer can be routed (``bench_seam.wrap_json_writer``), the file moves into place as soon as it
    is written (so the line saying so comes before pytest's summary), and a write that fails is
    reported there instead of skipping the gates and the summary. Otherwise the move waits until
    everything else is done (this wrapper is outermost, tryfirst).
    """
    config = session.config
    pending = config.stash.get(_JSON_KEY, None)
    failures: list[OSError] = []
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    wrapped = False
    if pending is not None:

        def save_and_move(save: Callable[[], None]) -> None:
            try:
                save()
                moved = pending.commit()
            except OSError as exc:
                failures.append(exc)
                _json_failed(reporter, pending, exc)
                return
            if moved and reporter is not None:
                # pytest-benchmark named the temporary file it wrote ("Wrote benchmark data in").
                reporter.write_line(f"pytest-ipu: results moved whole into {pending.target}")

        wrapped = bench_seam.wrap_json_writer(config, save_and_move)
    outcome = yield
    if pending is None:
        return
    if not wrapped:
        if outcome.excinfo is not None:
            # The write may have stopped half-way, and nothing here can tell: the destination is kept.
            pending.discard()
            return
        try:
            pending.commit()
        except OSError as exc:
            failures.append(exc)
            _json_failed(reporter, pending, exc)
    if failures and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _json_failed(reporter: Any, pending: PendingFile, error: OSError) -> None:
    """Remove the half-written file and say, in one line, that the results were not written."""
    pending.discard()
    line = (
        f"pytest-ipu: --benchmark-json={pending.target}: cannot write the results: "
        f"{error.strerror or error}; the file was left as it was (free space or pass a writable path)"
    )
    if reporter is not None:
        reporter.write_line(line, red=True)
    else:
        print(line)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """Mark an item whose setup or call failed, for ``ipu_benchmark``'s teardown: such a test never
    reached its benchmark, and pytest-benchmark's "fixture was not used" warning would be wrong."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.when in ("setup", "call") and report.failed:
        item.stash[FAILED_KEY] = True


def pytest_unconfigure(config: pytest.Config) -> None:
    """Forget the session (pytester runs many sessions in one process)."""
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        config.pluginmanager.unregister(session, _PLUGIN_NAME)
        del config.stash[SESSION_KEY]
    gate_check = config.stash.get(GATE_KEY, None)
    if gate_check is not None:
        config.pluginmanager.unregister(gate_check, _GATES_NAME)
        del config.stash[GATE_KEY]
    if session is not None:
        config.pluginmanager.unregister(session.repeats, _REPEATS_NAME)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize tests that use ``ipu_backend`` over their targets (unless they do it themselves)."""
    if "ipu_backend" not in metafunc.fixturenames or _parametrizes(metafunc, "ipu_backend"):
        return
    session = metafunc.config.stash[SESSION_KEY]
    requested = session.settings.targets
    for mark in metafunc.definition.iter_markers("ipu"):
        if "backend" in mark.kwargs:
            try:
                requested = options.parser_for("targets")(mark.kwargs["backend"])
            except ValueError:
                return  # reported with the node id at collection (pytest_collection_modifyitems)
            break
    targets = session.targets_for(requested)
    metafunc.parametrize("ipu_backend", targets, indirect=True, ids=[t.id for t in targets])


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a target whose backend or device nobody provides, before anything runs.

    Here, not at configure time: a conftest below the rootdir (loaded during collection) may add a
    backend through ``pytest_ipu_make_backend``. Not in ``pytest_generate_tests`` either: pytest turns
    an error there into a collection error, not a one-line usage error. Runs after the session's
    marker checks, so a marker's malformed ``backend=`` is reported as such first.
    """
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return
    provided: dict[Target, bool] = {}
    for item in items:
        target = _target_param(item)
        if target is None:
            continue
        reason = backends.unknown_target_reason(target)
        if reason is None:
            continue
        if target not in provided:
            # Only a conftest's implementation can make a target the registry does not know; the
            # session's own (the registry) would build a built-in backend for any device string.
            conftests = config.pluginmanager.subset_hook_caller("pytest_ipu_make_backend", [session])
            provided[target] = conftests(config=config, target=target) is not None
        if not provided[target]:
            raise pytest.UsageError(f"pytest-ipu: {_target_origin(config, item)}: {reason}")


def _target_param(item: pytest.Item) -> Target | None:
    """The ``ipu_backend`` parameter of ``item`` as a target; ``None`` when it has none or it is
    malformed (the fixture reports that, naming the test)."""
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("ipu_backend") if callspec is not None else None
    if isinstance(param, Target):
        return param
    if isinstance(param, str):
        try:
            return parse_target(param)
        except ValueError:
            return None
    return None


def _target_origin(config: pytest.Config, item: pytest.Item) -> str:
    """Where ``item``'s target came from, as the start of a message: its own parametrize, its
    marker, or the ``--ipu-backend`` option (with the option's source)."""
    if _parametrizes(item, "ipu_backend"):
        param = item.callspec.params["ipu_backend"]  # type: ignore[attr-defined]
        return f"{item.nodeid}: invalid value {str(param)!r} for the ipu_backend parameter"
    for mark in item.iter_markers("ipu"):
        if "backend" in mark.kwargs:
            value = mark.kwargs["backend"]
            return f"{item.nodeid}: invalid value {value!r} for @pytest.mark.ipu(backend=...)"
    value, source = options.value_and_source(config, "targets")
    return f"invalid value {value!r} for --ipu-backend from {source}"


def _parametrizes(node: pytest.Item | pytest.Metafunc, name: str) -> bool:
    """Whether ``node`` (a test, or the test being generated) parametrizes ``name`` itself."""
    markers = node.definition.iter_markers if isinstance(node, pytest.Metafunc) else node.iter_markers
    for mark in markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        listed = names if isinstance(names, (list, tuple)) else [n.strip() for n in str(names).split(",")]
        if name in listed:
            return True
    return False
