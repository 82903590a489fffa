"""Silencing the deprecation chatter that runtimes emit about their own internals.

torch's compiler and ONNX exporter call deprecated torch APIs internally and warn about it. Those
warnings say nothing about the user's model or code, and under ``-W error`` (or
``filterwarnings = error``) they would abort a valid compile. They cannot be told apart by module:
torch's pytree deprecation, for one, is attributed to the standard library's ``copyreg``. So every
DeprecationWarning and FutureWarning is ignored, but only for the duration of a runtime's compile
or export call; the timed rounds and everything else keep the user's warning filters.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def runtime_internals_quiet() -> Iterator[None]:
    """Ignore DeprecationWarning and FutureWarning inside a runtime's compile or export call."""
    with warnings.catch_warnings():
        for category in (DeprecationWarning, FutureWarning):
            warnings.simplefilter("ignore", category)
        yield
