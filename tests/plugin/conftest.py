"""Every plugin test's inner pytest runs get the same, isolated options (see ``inner``)."""

from __future__ import annotations

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


@pytest.fixture(autouse=True)
def _inner_run_options(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in XDIST_VARIABLES:
        monkeypatch.delenv(name, raising=False)
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
