"""What a model's first call returned, checked once before any round is timed.

Two outputs make a benchmark measure nothing while it passes: a generator (or coroutine), whose body
a call does not run at all, so only the creation of the generator would be timed; and NaN or
infinity, a model computing garbage. Both fail the benchmark with one line (docs/numbers.md, "The
first call's output"). The check walks the output once: tuples, lists and dicts of tensors, arrays
and numbers, as deep as ``MAX_DEPTH``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

from pytest_ipu.errors import BenchmarkArgumentError
from pytest_ipu.errors import BenchmarkArgumentTypeError

#: How deeply nested containers of outputs are walked: a model's outputs nest two or three levels.
MAX_DEPTH = 16


def check_first_output(output: object) -> None:
    """Raise ``BenchmarkArgumentTypeError`` for a generator, coroutine or async generator (closed
    first, so it warns of nothing), ``BenchmarkArgumentError`` for an output holding NaN or infinity
    (naming where in the output); return for anything else."""
    lazy = _lazy_kind(output)
    if lazy is not None:
        close = getattr(output, "close", None) or getattr(output, "aclose", None)
        if lazy in ("generator", "coroutine") and callable(close):
            close()
        raise BenchmarkArgumentTypeError(
            f"pytest-ipu: ipu_benchmark: the model's first call returned a {lazy} "
            f"({type(output).__name__}): a call runs none of its body, so only its creation would be "
            "timed; pass a model that computes its result when called (return it, e.g. "
            "list(gen(x)), instead of yielding it)"
        )
    for where, value in _leaves(output, "output", 0):
        if not _finite(value):
            raise BenchmarkArgumentError(
                f"pytest-ipu: ipu_benchmark: the model's first call returned NaN or infinity in {where}: "
                "timing a model that computes non-finite values measures nothing useful; fix the "
                "model or its inputs (check them with ipu_compile(..., parity=True))"
            )


def _lazy_kind(output: object) -> str | None:
    if inspect.isgenerator(output):
        return "generator"
    if inspect.iscoroutine(output):
        return "coroutine"
    if inspect.isasyncgen(output):
        return "async generator"
    if inspect.isawaitable(output):
        return "awaitable"
    return None


def _leaves(value: Any, where: str, depth: int) -> Iterator[tuple[str, Any]]:
    """Every tensor, array or number in ``value`` with where it is (``output[0]['logits']``)."""
    if depth > MAX_DEPTH:
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{where}[{i}]", depth + 1)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, f"{where}[{key!r}]", depth + 1)
    else:
        yield where, value


def _finite(value: Any) -> bool:
    """False for a float, tensor or array holding NaN or infinity; True for anything else (a
    string, None, an object this cannot read: no claim is made about those)."""
    if isinstance(value, bool):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, complex):
        return math.isfinite(value.real) and math.isfinite(value.imag)
    method = getattr(value, "isfinite", None)
    if callable(method) and hasattr(value, "dtype"):
        # torch (any device; the one reduction syncs once, after the first call was timed).
        try:
            return bool(method().all())
        except Exception:  # a tensor type that cannot say: not claimed non-finite
            return True
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        kind = getattr(getattr(value, "dtype", None), "kind", None)
        if kind in ("f", "c"):  # numpy arrays and scalars of floats; integers are always finite
            import numpy as np

            return bool(np.isfinite(value).all())
    return True
