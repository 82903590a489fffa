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


class PytestIpuWarning(pytest.PytestWarning):
    """Base class of every warning pytest-ipu emits."""
