"""Every plugin test's inner pytest runs get the same, isolated options (see ``inner``)."""

from __future__ import annotations

import sys
import types
from typing import Any

# numpy and SciPy's special functions are imported here, before any in-process (pytester) run: the
# plugin loads them only on first use (SciPy with the first gate decided), inside such a run, and
# pytester then drops the modules the run imported; a second import of numpy < 2 warns "The NumPy
# module was reloaded", which -W error makes a failure, and one of numpy's extension modules that
# SciPy loads (numpy.fft's) refuses to load twice in a process.
import numpy  # noqa: F401
import pytest
import scipy.special  # noqa: F401

from pytest_ipu.pytest_plugin import blas_threads
from pytest_ipu.pytest_plugin import machine_speed
from tests.fakes.machine_speed import steady_probe
from tests.plugin.inner import INNER_ADDOPTS
from tests.plugin.inner import XDIST_VARIABLES

#: This project's top-level packages: pure Python, so importing their modules afresh is safe (unlike
#: numpy's extension modules, above).
OWN_PACKAGES = ("pytest_ipu", "tests")


def rebind_submodules() -> None:
    """Make this project's packages name the submodules ``sys.modules`` holds, and none it dropped.

    An in-process run (pytester) restores ``sys.modules`` when it ends, dropping what it imported,
    but not the attributes those imports set on packages loaded before it. A later run's lazy
    ``from pytest_ipu.pytest_plugin.fixtures import benchmark_run`` then takes the dropped module from
    its package without importing it, while ``pytest_ipu.backends.base`` is imported afresh: the old
    module's ``isinstance(model, CompiledModel)`` is false for the new class, and a compiled model
    is benchmarked as a plain callable (``python:host``).
    """
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] not in OWN_PACKAGES:
            continue
        for attr, value in list(getattr(module, "__dict__", {}).items()):
            if not isinstance(value, types.ModuleType) or value.__name__ != f"{name}.{attr}":
                continue
            current = sys.modules.get(value.__name__)
            if current is None:
                delattr(module, attr)  # the next import of it loads it afresh, as it would in a new process
            elif current is not value:
                setattr(module, attr, current)


@pytest.fixture(autouse=True)
def _fresh_submodules(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before the test: what the previous test's pytester dropped at its teardown. After each
    # in-process run: what that run dropped, for a second run in the same test. Patched on the class,
    # not by asking for ``pytester``: that would make one (a temporary directory, a chdir) for every
    # test, even those that start no inner run.
    rebind_submodules()
    inline_run = pytest.Pytester.inline_run

    def inline_run_then_rebind(self: pytest.Pytester, *args: Any, **kwargs: Any) -> pytest.HookRecorder:
        try:
            return inline_run(self, *args, **kwargs)
        finally:
            rebind_submodules()

    monkeypatch.setattr(pytest.Pytester, "inline_run", inline_run_then_rebind)


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's ``pytester``, its inner runs with this suite's options (``INNER_ADDOPTS``).

    ``pytest.Pytester``'s constructor deletes ``PYTEST_ADDOPTS`` (to discard the outer run's options),
    after ``_inner_run_options`` set it: set again here, once pytester exists, every inner run gets it
    (``runpytest``, ``inline_run``, ``runpytest_subprocess`` and ``popen`` all read the environment). A
    test, or a fixture that asks for ``pytester``, that sets its own ``PYTEST_ADDOPTS`` does so later,
    and its own stands.
    """
    monkeypatch.setenv("PYTEST_ADDOPTS", INNER_ADDOPTS)
    return pytester


@pytest.fixture(autouse=True)
def _inner_run_options(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in XDIST_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    # For the runs a test starts itself (subprocess, with this environment); ``pytester`` (above) sets
    # it again for the runs it starts.
    monkeypatch.setenv("PYTEST_ADDOPTS", INNER_ADDOPTS)
    # One repeat unless a test asks for more: most plugin tests check what one measurement gives
    # (tests/plugin/test_repeats.py covers repeats).
    monkeypatch.setenv("PYTEST_IPU_REPEATS", "1")
    # A steady machine: the inner runs' verdicts must not depend on how busy this one is between
    # runs (tests/plugin/test_machine_speed_plugin.py samples the real one).
    monkeypatch.setattr(machine_speed, "new_probe", steady_probe)
    # BLAS and OpenMP threads pinned as docs/ci.md asks of a CI job (a run warns where they are not:
    # tests/plugin/test_blas_threads_plugin.py).
    for name in blas_threads.VARIABLES:
        monkeypatch.setenv(name, "1")
