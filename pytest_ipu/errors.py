"""The one exception family and the one warning family of pytest-ipu.

Every message names the offending value, where it came from, and what would fix it.
"""

from __future__ import annotations

import pytest


class PytestIpuError(Exception):
    """Base class of every error pytest-ipu raises."""


class ConfigError(PytestIpuError):
    """A bad option, ini, environment or marker value; turned into a pytest usage error."""


class BackendUnavailable(PytestIpuError):
    """The selected backend, its runtime or its device is not present on this machine."""


class CompileError(PytestIpuError):
    """A backend could not prepare a model with the requested options."""


class UnplaceableError(CompileError):
    """The test's ``ipu`` marker asks for a placement its target cannot express (replicas on a CPU,
    a pinned device id): the test's configuration is at fault, not the model, so it fails that test
    with one line naming the fix."""


class PytestIpuWarning(pytest.PytestWarning):
    """Base class of every warning pytest-ipu emits."""


class BenchmarkArgumentError(PytestIpuError, ValueError):
    """A bad argument to ``ipu_benchmark`` (a count below its minimum, say): one test's mistake, so
    it fails that test with one line, never the run."""


class BenchmarkArgumentTypeError(BenchmarkArgumentError, TypeError):
    """An ``ipu_benchmark`` argument of the wrong type (a string or float count, a tensor passed
    as the inputs sequence)."""


class CallTimeout(PytestIpuError):
    """A call of a benchmark's model was still running at the call timeout (``--ipu-call-timeout``).

    Raised in the main thread by the watchdog's signal handler (``pytest_ipu.measure.timing``),
    wherever the call was blocked; it fails the benchmark's test.
    """


class NonFiniteLoss(PytestIpuError):
    """A training step's loss was NaN or infinite: the message names the step (counted from 1, the
    untimed first call included) and the value. It fails the benchmark, whatever was timed."""


class LoadgenError(PytestIpuError):
    """A LoadGen benchmark could not give a result: its system under test failed (a batch raised or
    ran past the call timeout) or LoadGen logged no verdict. The message names the cause and where
    LoadGen's logs are; the run was ended without losing a query, so LoadGen returned."""


class RankError(PytestIpuError):
    """Another process of a distributed launch failed or did not arrive in time; the message names
    the rank(s) and what they were awaited for."""


class RanksElsewhere(RankError):
    """Every rank of a launch arrived at a barrier, but not all at the same place (one skipped a
    benchmark, say). Unlike a lost rank, every peer is alive and found the same: each can still wait
    for the others at the end of its run, so that each says where it was before the launch stops."""
