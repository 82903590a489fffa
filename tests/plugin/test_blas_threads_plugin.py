"""BLAS and OpenMP threads of a benchmark: pinned with ``--ipu-torch-threads``, else named in one
warning line of the summary on a machine of more than one core (``pytest_plugin.blas_threads``)."""

from __future__ import annotations

import os

import pytest

from pytest_ipu.pytest_plugin import blas_threads

BENCH = f"""
import os


def test_one(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=3, warmup_rounds=0)


def test_two(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=3, warmup_rounds=0)
    print("threads:", "/".join(os.environ.get(name, "unset") for name in {blas_threads.VARIABLES!r}))
"""

SHOW = ("--ipu-power=off",)
#: How the warning line starts.
WARNING = "pytest-ipu: WARNING "


def _unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in blas_threads.VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_unset_variables_on_several_cores_are_named_once(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _unset(monkeypatch)
    monkeypatch.setenv("MKL_NUM_THREADS", "1")  # the job set this one
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    pytester.makepyfile(test_blas=BENCH)
    result = pytester.runpytest(*SHOW)
    result.assert_outcomes(passed=2)  # a line, not a Python warning: the inner runs make those errors
    result.stdout.fnmatch_lines(
        [
            "pytest-ipu: WARNING OMP_NUM_THREADS, OPENBLAS_NUM_THREADS unset: numpy's BLAS and OpenMP code "
            "start one thread per core (4 here)*"
        ]
    )
    assert result.stdout.str().count(WARNING) == 1  # once, for two benchmarks
    assert "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1" in result.stdout.str()


def test_one_core_or_pinned_variables_give_no_warning(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_blas=BENCH)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    # tests/plugin/conftest.py pins them: no warning, on any machine.
    assert WARNING not in pytester.runpytest(*SHOW).stdout.str()
    _unset(monkeypatch)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert WARNING not in pytester.runpytest(*SHOW).stdout.str()


def test_torch_threads_pin_the_unset_variables_before_numpy_loads(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _unset(monkeypatch)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")  # the job's own value stays
    pytester.makepyfile(test_blas=BENCH)
    # A fresh process: numpy is not loaded before pytest-ipu's configure, as in a job's run.
    result = pytester.runpytest_subprocess("-s", "--ipu-power=off", "--ipu-torch-threads=2")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*threads: 2/2/3"])
    assert WARNING not in result.stdout.str()


def test_pinning_never_changes_a_set_variable_and_waits_for_no_loaded_numpy() -> None:
    env = {"OMP_NUM_THREADS": "4"}
    assert blas_threads.pin(1, env, loaded={}) == ["OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"]
    assert env == {"OMP_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    # numpy already loaded read the variables as they were: setting them now would claim a pin.
    late: dict[str, str] = {}
    assert blas_threads.pin(1, late, loaded={"numpy": object()}) == []
    assert late == {}
