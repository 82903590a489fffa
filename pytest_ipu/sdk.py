"""Importing the Graphcore SDK's Python modules (poptorch, popart, gcipuinfo, popdist): one rule.

PopTorch 3.4 runs ``import pkg_resources`` in its ``__init__`` (``poptorch/__init__.py:11``), and the
setuptools of the SDK's Python 3.8 (75.3) warns there with a ``DeprecationWarning``. Under
``python -W error``, or a pytest configuration with ``filterwarnings = error`` (a common one, and
this project's own), that warning is raised, the import fails, and every PopTorch benchmark would
be skipped as "poptorch not importable". The SDK's deprecations at import time are not the user's
code to fix, so they are silenced for the import, and only they: any other warning, and every
error, reach the caller as before.
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType


def import_sdk(name: str) -> ModuleType:
    """``import name``, with the ``DeprecationWarning`` and ``PendingDeprecationWarning`` its import
    raises silenced (they would be errors under ``-W error``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        return importlib.import_module(name)
