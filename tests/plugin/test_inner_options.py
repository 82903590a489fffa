"""The inner runs that pytester starts get this suite's options (``INNER_ADDOPTS``, see conftest)."""

from __future__ import annotations

import os

import pytest

from tests.plugin.inner import INNER_ADDOPTS

#: One test that reports the plugins its run loaded, one that warns. A DeprecationWarning: an
#: in-process run keeps this process's warning filters (``error``, from the project's configuration)
#: under its own, but pytest shows DeprecationWarnings unless -W says otherwise, so only the inner
#: run's own -W error fails this test, in-process as in a subprocess.
INNER = """
import warnings

def test_plugins(pytestconfig):
    assert not pytestconfig.pluginmanager.has_plugin("hypothesispytest")
    assert not pytestconfig.pluginmanager.has_plugin("cacheprovider")

def test_warning():
    warnings.warn(DeprecationWarning("an inner warning"))
"""


def test_pytester_leaves_the_inner_options_in_the_environment(pytester: pytest.Pytester) -> None:
    # pytest.Pytester's constructor deletes PYTEST_ADDOPTS; popen, like every run, reads os.environ.
    assert os.environ.get("PYTEST_ADDOPTS") == INNER_ADDOPTS


@pytest.mark.parametrize("run", ["runpytest", "runpytest_subprocess"])
def test_an_inner_run_has_warnings_as_errors_and_neither_hypothesis_nor_the_cache(
    pytester: pytest.Pytester, run: str
) -> None:
    pytester.makepyfile(INNER)
    result = getattr(pytester, run)()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED *::test_warning*"])
    result.stdout.fnmatch_lines(["E   *DeprecationWarning: an inner warning"])


def test_an_inline_run_has_the_inner_options_too(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(INNER)
    passed, skipped, failed = pytester.inline_run().listoutcomes()
    assert [r.nodeid.rpartition("::")[2] for r in passed] == ["test_plugins"]
    assert not skipped
    assert [r.nodeid.rpartition("::")[2] for r in failed] == ["test_warning"]
    assert "DeprecationWarning: an inner warning" in failed[0].longreprtext


def test_a_tests_own_pytest_addopts_stands(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Set after pytester exists, as tests that choose their own options do: none of this suite's.
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest")
    pytester.makepyfile(
        """
        def test_cache_is_loaded(pytestconfig):
            assert pytestconfig.pluginmanager.has_plugin("cacheprovider")
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)
