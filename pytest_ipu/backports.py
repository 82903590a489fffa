"""What the standard library gained after Python 3.8, written once for the Pythons that lack it.

pytest-ipu runs on CPython 3.8 (the Poplar SDK 3.4's Python) to 3.13. Each function here is named
for what it does and says which Python has it built in; the code calls these, never the newer
built-in, so one implementation runs (and is tested) on every supported Python. ruff's py38 target
catches newer syntax and mypy's lowest ``python_version`` (3.10) newer library calls from 3.11 on;
the rest (``zip(strict=True)``, ``str.removeprefix``, ...) only the suite run on 3.8 catches.

Pure: the standard library only (and ``tomli`` below 3.11, declared with an environment marker).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable
from collections.abc import Iterator
from typing import TYPE_CHECKING
from typing import Any
from typing import TypeVar
from typing import overload

if TYPE_CHECKING:
    # The TOML parser: the standard library's ``tomllib`` (3.11), else ``tomli``, its origin.
    if sys.version_info >= (3, 11):
        import tomllib as _toml
    else:
        import tomli as _toml
    toml = _toml


def __getattr__(name: str) -> Any:
    # ``toml`` is imported when first asked for (``from pytest_ipu.backports import toml``): every
    # pytest run imports this module, few read TOML (benchmarks/test_startup_cost.py).
    if name != "toml":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if sys.version_info >= (3, 11):
        import tomllib as found
    else:
        import tomli as found
    globals()["toml"] = found
    return found


_A = TypeVar("_A")
_B = TypeVar("_B")
_C = TypeVar("_C")
_D = TypeVar("_D")


@overload
def zip_strict(a: Iterable[_A], /) -> Iterator[tuple[_A]]: ...
@overload
def zip_strict(a: Iterable[_A], b: Iterable[_B], /) -> Iterator[tuple[_A, _B]]: ...
@overload
def zip_strict(a: Iterable[_A], b: Iterable[_B], c: Iterable[_C], /) -> Iterator[tuple[_A, _B, _C]]: ...
@overload
def zip_strict(
    a: Iterable[_A], b: Iterable[_B], c: Iterable[_C], d: Iterable[_D], /
) -> Iterator[tuple[_A, _B, _C, _D]]: ...
def zip_strict(*iterables: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """``zip(*iterables, strict=True)`` (Python 3.10): the items side by side, and ``ValueError``
    when one iterable ends before the others, so a length mismatch is never cut silently."""
    missing = object()
    for items in itertools.zip_longest(*iterables, fillvalue=missing):
        if any(item is missing for item in items):
            raise ValueError("zip_strict: the iterables differ in length")
        yield items


def remove_prefix(text: str, prefix: str) -> str:
    """``text.removeprefix(prefix)`` (Python 3.9): ``text`` without ``prefix`` where it starts with it."""
    return text[len(prefix) :] if prefix and text.startswith(prefix) else text


def remove_suffix(text: str, suffix: str) -> str:
    """``text.removesuffix(suffix)`` (Python 3.9): ``text`` without ``suffix`` where it ends with it."""
    return text[: -len(suffix)] if suffix and text.endswith(suffix) else text
