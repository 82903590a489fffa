"""The pytest11 entry point: options, marker, hooks and fixtures are wired here; no logic.

Every pytest run of a project with pytest-ipu installed loads this module, so it imports only the
glue and what parsing the options needs: no numpy, no runtime. Everything a benchmark needs loads
on first use (``benchmarks/test_startup_cost.py`` measures what the plugin adds to start-up).
"""

from __future__ import annotations

import pytest

from pytest_ipu import hookspec
from pytest_ipu import options
from pytest_ipu.fixtures import ipu_backend
from pytest_ipu.fixtures import ipu_benchmark
from pytest_ipu.fixtures import ipu_compile
from pytest_ipu.fixtures import ipu_placement
from pytest_ipu.fixtures import ipu_power
from pytest_ipu.fixtures import ipu_settings
from pytest_ipu.gating import GATE_KEY
from pytest_ipu.marker import MARKER_HELP
from pytest_ipu.placement import poprun
from pytest_ipu.session import SESSION_KEY
from pytest_ipu.session import IpuSession

__all__ = ["ipu_backend", "ipu_benchmark", "ipu_compile", "ipu_placement", "ipu_power", "ipu_settings"]

_PLUGIN_NAME = "pytest-ipu-session"
_GATES_NAME = "pytest-ipu-gates"
_REPEATS_NAME = "pytest-ipu-repeats"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register the ``pytest_ipu_*`` hook specifications."""
    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the ``ipu`` option group and its ini keys."""
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    """Resolve the settings (a bad value stops the run with a usage error) and start the session."""
    config.addinivalue_line("markers", MARKER_HELP)
    try:
        # Under PopRun each instance writes its own --benchmark-json file (before pytest-benchmark,
        # whose trylast pytest_configure reads the option).
        instance = poprun.configure_json_path(config.option)
    except ValueError as exc:
        raise pytest.UsageError(f"pytest-ipu: {exc}") from None
    session = IpuSession(config, options.settings_from_config(config), poprun=instance)
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, _PLUGIN_NAME)
    config.stash[GATE_KEY] = session.gate_check
    config.pluginmanager.register(session.gate_check, _GATES_NAME)
    config.pluginmanager.register(session.repeats, _REPEATS_NAME)


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


def _parametrizes(metafunc: pytest.Metafunc, name: str) -> bool:
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        listed = names if isinstance(names, (list, tuple)) else [n.strip() for n in str(names).split(",")]
        if name in listed:
            return True
    return False
