"""Compiling a test's model: the run's compile cache, placement, exclusive devices and parity.

``CompileCache.compile`` is what ``ipu_compile`` does, without pytest: it compiles a model once per
run for each backend, precision, set of options and placement (and, for backends that specialise on
shapes, input shapes), times the compile (never inside a timed window), places several instances
when the marker asks, and checks outputs against torch eager fp32 on request. A backend that holds
its devices exclusively (``PlacedBackend.exclusive_device``, an IPU) first has the run's other cached
models on such devices closed, except those of the current test.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ipu.backends.base import Backend
from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.base import PlacedBackend
from pytest_ipu.errors import PytestIpuWarning
from pytest_ipu.placement import plan as placed
from pytest_ipu.placement.request import DeviceRequest


@dataclass
class _Entry:
    compiled: CompiledModel
    # Holding the model keeps its id() from being reused by another object while cached.
    model: object
    # Holds its devices exclusively while open (an IPU executable stays attached).
    exclusive: bool
    # The test that last asked for it: a test's own models are never evicted under it.
    user: str


class CompileCache:
    """Every model compiled in one run, closed when the run ends (``close``) or, for exclusive
    devices, when another test's model needs them."""

    def __init__(self) -> None:
        self._entries: dict[tuple[Any, ...], _Entry] = {}

    def compile(
        self,
        backend: Backend,
        model: object,
        example_inputs: Sequence[object],
        *,
        precision: str,
        key: object,
        options: dict[str, object],
        placement: DeviceRequest,
        user: str,
        parity: bool,
        backend_for: placed.BackendFor,
    ) -> CompiledModel:
        """The compiled model for these arguments, from the cache (``compile_cached`` true) or
        compiled now (``compile_s`` measured here). Raises ``BackendUnavailable`` when the devices
        are missing or taken, ``CompileError`` when the backend refuses, and ``ParityError`` when
        ``parity`` is asked and the outputs differ beyond the precision's tolerance."""
        cache_key: tuple[Any, ...] = (
            backend.name,
            backend.device,
            key if key is not None else id(model),
            precision,
            tuple(sorted((k, repr(v)) for k, v in options.items())),
            _signature(example_inputs) if backend.shape_specialized(options) else None,
            placement,
        )
        exclusive = isinstance(backend, PlacedBackend) and backend.exclusive_device
        entry = self._entries.get(cache_key)
        if entry is not None:
            entry.user = user
            compiled = dataclasses.replace(entry.compiled, compile_cached=True)
        else:
            if exclusive:
                self.release_exclusive(user)
            start = time.perf_counter_ns()
            if placed.is_trivial(placement):
                compiled = backend.compile(model, example_inputs, precision, options)
            else:
                the_plan = placed.plan(backend, placement, options, backend_for)
                compiled = placed.compile_plan(the_plan, model, example_inputs, precision, options)
            compiled = dataclasses.replace(compiled, compile_s=(time.perf_counter_ns() - start) * 1e-9)
            entry = self._entries[cache_key] = _Entry(compiled, model, exclusive, user)
        if parity and compiled.parity is None:
            compiled = dataclasses.replace(compiled, parity=_check_parity(compiled, model, example_inputs))
            entry.compiled = dataclasses.replace(entry.compiled, parity=compiled.parity)
        if parity and compiled.parity is not None and not compiled.parity.passed:
            from pytest_ipu.backends.parity import ParityError

            p = compiled.parity
            raise ParityError(
                f"{compiled.target} {compiled.precision} outputs of {type(model).__name__} differ from "
                f"{p.reference}: max abs error {p.max_abs:.3g}, max rel error {p.max_rel:.3g} "
                f"> tolerance {p.tolerance:g}"
            )
        return compiled

    def release_exclusive(self, user: str = "") -> None:
        """Close every cached model that holds its devices exclusively, before another is compiled.

        An IPU runs one executable at a time and a session keeps its IPUs attached until closed, so
        a second batch size (or backend) could never acquire them while the first stays cached. Only
        one exclusive model lives at a time; a test that needs an evicted one again recompiles it
        (the SDK's executable caches make that quick). Models the test ``user`` itself is using
        stay open: closing them under it would break the test, while a second model that cannot get
        the IPUs skips it with "Failed to acquire", which is the truth. A close that fails is
        reported as a warning.
        """
        evicted = [k for k, e in self._entries.items() if e.exclusive and (not user or e.user != user)]
        errors = _close_all([self._entries.pop(k) for k in evicted])
        if errors:
            warnings.warn(
                PytestIpuWarning(f"pytest-ipu could not release a compiled model: {'; '.join(errors)}"),
                stacklevel=2,
            )

    def close(self) -> list[str]:
        """Close every cached model, whatever the others do; one message per failure."""
        entries, self._entries = list(self._entries.values()), {}
        return _close_all(entries)


def _close_all(entries: Sequence[_Entry]) -> list[str]:
    errors = []
    for entry in entries:
        try:
            entry.compiled.close()
        except Exception as exc:
            errors.append(f"{entry.compiled.target}: {exc}")
    return errors


def _signature(inputs: Sequence[object]) -> tuple[tuple[Any, ...], ...]:
    return tuple((tuple(getattr(x, "shape", ())), str(getattr(x, "dtype", type(x).__name__))) for x in inputs)


def _check_parity(compiled: CompiledModel, model: object, example_inputs: Sequence[object]) -> Any:
    """Run the compiled model and the eager fp32 CPU reference on the example inputs and compare."""
    from pytest_ipu.backends.parity import compare
    from pytest_ipu.backends.torch import eager_reference

    reference = eager_reference(model, example_inputs)
    if compiled.group is not None:
        # Every instance is the same compiled model; the first one's outputs stand for all.
        actual = compiled.group.call(0, tuple(example_inputs))
    else:
        actual = compiled.run(*compiled.prepare_inputs(tuple(example_inputs)))
    return compare(reference, actual, compiled.precision, "torch eager fp32 on cpu")
