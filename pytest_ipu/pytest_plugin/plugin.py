"""The pytest11 entry point: options, marker and fixtures are declared here, and the run's hooks
registered (``lifecycle.Lifecycle``); no logic.

Every pytest run of a project with pytest-ipu installed loads this module, so it imports only the
glue and what parsing the options needs: no numpy, no runtime. Everything a benchmark needs loads
on first use (``benchmarks/test_startup_cost.py`` measures what the plugin adds to start-up).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import TYPE_CHECKING
from typing import Any

import pytest

from pytest_ipu.placement import TORCHRUN_RUN_ID
from pytest_ipu.pytest_plugin import bench_seam
from pytest_ipu.pytest_plugin import hookspec
from pytest_ipu.pytest_plugin import options
from pytest_ipu.pytest_plugin.fixtures.benchmark import ipu_benchmark
from pytest_ipu.pytest_plugin.fixtures.compile import ipu_backend
from pytest_ipu.pytest_plugin.fixtures.compile import ipu_compile
from pytest_ipu.pytest_plugin.fixtures.compile import ipu_placement
from pytest_ipu.pytest_plugin.fixtures.compile import ipu_settings
from pytest_ipu.pytest_plugin.fixtures.loadgen import ipu_loadgen
from pytest_ipu.pytest_plugin.fixtures.power import ipu_power
from pytest_ipu.pytest_plugin.fixtures.train import ipu_process_group
from pytest_ipu.pytest_plugin.fixtures.train import ipu_time_to_train
from pytest_ipu.pytest_plugin.fixtures.train import ipu_train
from pytest_ipu.pytest_plugin.lifecycle import Lifecycle
from pytest_ipu.pytest_plugin.marker import MARKER_HELP
from pytest_ipu.pytest_plugin.session import JSON_PATH_KEY
from pytest_ipu.pytest_plugin.session import SESSION_KEY
from pytest_ipu.pytest_plugin.session import IpuSession

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_ipu.devices.poprun import PopRunInstance
    from pytest_ipu.placement.torchrun import TorchrunRank
    from pytest_ipu.results.atomic import PendingFile

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


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register the ``pytest_ipu_*`` hook specifications (pytest's one place for them: called as
    this plugin is registered, before any conftest's implementations)."""
    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Add the ``ipu`` option group and its ini keys; keep pytest-benchmark before 5.3 from emptying
    the ``--benchmark-json`` file while the command line is parsed (``bench_seam``)."""
    options.add_options(parser)
    bench_seam.defer_json_open(parser, pluginmanager)


def pytest_load_initial_conftests(parser: pytest.Parser, args: list[str]) -> None:
    """Name the nearest option of a misspelt ``--ipu-*`` one (``options.misspelt_flags``) in the
    line pytest prints under its "unrecognized arguments" error: the command line is complete here
    (addopts and ``PYTEST_ADDOPTS`` included) and not yet parsed, and the line shows only if
    pytest's parse then fails."""
    hint = options.misspelt_flags(args)
    if hint is not None:
        parser.extra_info[options.FLAG_HINT_KEY] = hint


def pytest_configure(config: pytest.Config) -> None:
    """Resolve the settings (a bad value stops the run with a usage error), make the run's state
    and register its hooks (``Lifecycle``)."""
    config.addinivalue_line("markers", MARKER_HELP)
    try:
        # Under PopRun each instance writes its own --benchmark-json file (before pytest-benchmark,
        # whose trylast pytest_configure reads the option).
        instance = _poprun_instance(config.option)
        # Under torchrun likewise each rank (rank 0 also writes the merged file at the given path).
        rank, merged_json = _torchrun_rank(config.option)
    except ValueError as exc:
        raise pytest.UsageError(f"pytest-ipu: {exc}") from None
    if rank is not None and rank.index > 0:
        _quiet_rank(config)
    pending = _pending_json(config)
    session = IpuSession(
        config,
        options.settings_from_config(config),
        poprun=instance,
        torchrun=rank,
        merged_json=merged_json,
        ab_side=options.ab_side(),
    )
    options.warn_unknown_variables(config)
    if session.settings.torch_threads is not None:
        # BLAS and OpenMP threads pinned with torch's, before numpy loads (``blas_threads``).
        from pytest_ipu.pytest_plugin import blas_threads

        blas_threads.pin(session.settings.torch_threads)
    # A bad --ipu-scaling-baseline stops the run before anything is measured (a usage error).
    session.scaling_baseline()
    # So do the run's own gates in a run where pytest-benchmark times nothing (pytest-xdist,
    # --benchmark-disable). Without gates of its own, a run loads the gates' code only when it has
    # something for them (a baseline, a gated benchmark: ``IpuSession.gate_check``); a side of
    # pytest-ipu ab never does: ab gates it.
    if session.settings.gates and not session.ab_side:
        session.gate_check.refuse_untimed(config)
    config.stash[SESSION_KEY] = session
    serve = getattr(config.option, "ipu_serve", None)
    if serve is not None:
        # pytest-ipu ab's rounds in one process (loaded only then: every run reads this hook).
        from pytest_ipu.pytest_plugin import serving

        serving.register(config, serve)
    # Each pytest run (pytester runs many in one process) has its own plugin manager, so the hooks
    # go with the run.
    config.pluginmanager.register(Lifecycle(session, pending), "pytest-ipu-lifecycle")


def _pending_json(config: pytest.Config) -> PendingFile | None:
    """Point pytest-benchmark's ``--benchmark-json`` at a temporary file beside the one asked for,
    to be moved into place whole at the end of the session; ``None`` where there is none to write
    here (no such option, or an xdist worker). A directory given there is a usage error."""
    # pytest-benchmark opens --benchmark-json and writes it in place at the end of the run, so a
    # full disk or an interrupt left it half-written: it writes a temporary file beside it instead,
    # moved into place whole at the end of the session (``lifecycle``; pytest-benchmark's trylast
    # pytest_configure reads the option after this).
    json_path = bench_seam.json_path(config.option)
    pending: PendingFile | None = None
    if json_path is not None:
        if json_path.is_dir():
            # Else pytest-benchmark says "Wrote benchmark data in: DIR" before the move onto it fails.
            raise pytest.UsageError(
                f"pytest-ipu: --benchmark-json={json_path}: is a directory; "
                "pass the path of the JSON file to write"
            )
        config.stash[JSON_PATH_KEY] = json_path
    if json_path is not None and not hasattr(config, "workerinput"):
        from pytest_ipu.results import atomic

        pending = atomic.PendingFile(json_path)
        # Written at the temporary path, printed as the file it becomes.
        bench_seam.set_json_path(config.option, pending.temporary, shown=pending.target)
    else:
        bench_seam.set_json_path(config.option, json_path)
    return pending


def _poprun_instance(option: Any) -> PopRunInstance | None:
    """This PopRun instance (its output files tagged), or ``None`` outside PopRun.

    ``devices.poprun.detect`` asks the ``popdist`` module; where it cannot be imported at all (most
    machines) no process is under PopRun, and the launch's modules stay unloaded.
    """
    if "popdist" not in sys.modules and importlib.util.find_spec("popdist") is None:
        return None
    from pytest_ipu.placement import poprun

    return poprun.configure_json_path(option)


def _torchrun_rank(option: Any) -> tuple[TorchrunRank | None, Path | None]:
    """This torchrun rank (its output files tagged) and the merged file rank 0 writes, or
    ``(None, None)`` outside torchrun, where ``placement.torchrun`` stays unloaded."""
    if TORCHRUN_RUN_ID not in os.environ:
        return None, None
    from pytest_ipu.placement import torchrun

    rank = torchrun.detect()
    return rank, None if rank is None else torchrun.configure_json_path(option, rank)


def _quiet_rank(config: pytest.Config) -> None:
    """A torchrun rank other than 0 prints no header, no tables and no final counts: every rank
    runs the same tests, and rank 0 prints the launch's results, merged. What is left is pytest's
    progress line and whatever went wrong on this rank (its failures, errors and warnings, in full).
    Before the terminal reporter and pytest-benchmark read the options (both configure after this)."""
    option = config.option
    option.no_header = True
    # -qq: no "N passed in ..." line (its counts are rank 0's too).
    option.verbose = min(option.verbose, -2)
    bench_seam.quiet(option)
