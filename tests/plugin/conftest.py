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
