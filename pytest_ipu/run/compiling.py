"""Compiling a test's model: the run's compile cache, placement, exclusive devices and parity.

``CompileCache.compile`` is what ``ipu_compile`` does, without pytest. A backend that holds its devices
exclusively (``PlacedBackend.exclusive_device``, an IPU) first has the run's other cached models on
such devices closed, except those of the current test. An entry keyed by the model object itself (no
``key=``) holds that model only through a weak reference: once nothing else references it, the entry
can never be hit and is released (its compiled model closed) at the end of the test
(``release_unreachable``) or before another test's compile, never under the test that may still run
it; holding the model strongly, as the cache once did, kept every model of a sweep and its compiled
copy until the run ended. A backend whose compiled model references the caller's model (rather than a
copy, as the built-in ones make) keeps it alive, and so its entry.

Documented in docs/fixtures.md (section "ipu_compile").
"""

from __future__ import annotations

import dataclasses
import gc
import time
import warnings
import weakref
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any
from typing import NoReturn

from pytest_ipu.backends.base import Backend
from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.base import Grouped
from pytest_ipu.backends.base import PlacedBackend
from pytest_ipu.devices.request import DeviceRequest
from pytest_ipu.errors import PytestIpuWarning
from pytest_ipu.placement import plan as placed

if TYPE_CHECKING:
    from pytest_ipu.results.records import ParityRecord


@dataclass
class _Entry:
    compiled: CompiledModel
    # The model of an entry keyed by its identity (``None`` for an explicit ``key=``): a weak reference,
    # so the cache alone never keeps a model (and its id) alive. A model that cannot be weakly
    # referenced is held strongly, as its id must not be reused while the entry answers for it.
    model: Callable[[], object | None] | None
    # Holds its devices exclusively while open (an IPU executable stays attached).
    exclusive: bool
    # The test that last asked for it: a test's own models are never evicted under it.
    user: str
    # A full garbage collection at the end of a test found the model still referenced elsewhere (a
    # module-level or fixture model): no further collection is spent on this entry's account.
    outlived_gc: bool = False

    def unreachable(self) -> bool:
        """Whether no call can hit this entry again: its identity-keyed model is gone."""
        return self.model is not None and self.model() is None


class CompileCache:
    """Every model compiled in one run, closed when the run ends (``close``) or, for exclusive
    devices, when another test's model needs them."""

    def __init__(self) -> None:
        self._entries: dict[tuple[Any, ...], _Entry] = {}
        # Stale entries taken out of the index while their test may still use their compiled model.
        self._retired: list[_Entry] = []

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
        own_process: bool = False,
    ) -> CompiledModel:
        """The compiled model for these arguments, from the cache (``compile_cached`` true) or
        compiled now (``compile_s`` measured here). Raises ``BackendUnavailable`` when the devices
        are missing or taken, ``CompileError`` when the backend refuses, and ``ParityError`` when
        ``parity`` is asked and the outputs differ beyond the precision's tolerance.

        ``own_process``: a model on a backend whose calls hold the GIL runs in a worker process even
        as one instance (``placement.plan.runner``), so that the caller's threads run during its calls."""
        how = placed.runner(backend, placement.instances, own_process)
        cache_key = _cache_key(backend, model, example_inputs, precision, key, options, placement, how)
        exclusive = isinstance(backend, PlacedBackend) and backend.exclusive_device
        # Other tests' entries whose model died go first: their memory (and devices) may be what this
        # compile needs. This test's own stay open until it ends: it may still be running a compiled
        # model whose model was a temporary (``ipu_compile(Net(), x)``).
        self._release(self._pop_unreachable(keep_user=user))
        entry = self._hit(cache_key, model)
        if entry is not None:
            entry.user = user
            compiled = dataclasses.replace(entry.compiled, compile_cached=True)
        else:
            if exclusive:
                self.release_exclusive(user)
            compiled = _compile_now(
                backend, model, example_inputs, precision, options, placement, how, backend_for, own_process
            )
            held = None if key is not None else _reference(model)
            entry = self._entries[cache_key] = _Entry(compiled, held, exclusive, user)
        if parity and compiled.parity is None:
            compiled = dataclasses.replace(compiled, parity=_check_parity(compiled, model, example_inputs))
            entry.compiled = dataclasses.replace(entry.compiled, parity=compiled.parity)
        if parity and compiled.parity is not None and not compiled.parity.passed:
            _parity_failed(compiled, compiled.parity, model)
        return compiled

    def _hit(self, cache_key: tuple[Any, ...], model: object) -> _Entry | None:
        """The cached entry of ``cache_key`` for ``model``; ``None`` where there is none, or only a
        stale one (retired here)."""
        entry = self._entries.get(cache_key)
        if entry is not None and entry.model is not None and entry.model() is not model:
            # A dead model's id reused by this new object: the entry is stale, never a hit. It is this
            # test's own (the others' went above), so it is closed when the test ends, not now.
            self._retired.append(self._entries.pop(cache_key))
            return None
        return entry

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
        self._release([self._entries.pop(k) for k in evicted], stacklevel=3)

    def release_unreachable(self, user: str) -> list[str]:
        """At the end of test ``user``: close and drop every entry whose model is gone; one message per
        failure to close.

        A model the test built and let go is normally freed by reference counting as the test
        returns. One caught in a reference cycle waits for the garbage collector, so when an entry
        the test used still has its model, one full collection decides; an entry whose model
        survives it is referenced elsewhere (module-level or fixture model) and never costs another.
        """
        suspects = [
            e for e in self._entries.values() if e.user == user and not e.outlived_gc and e.model is not None
        ]
        if any(not e.unreachable() for e in suspects):
            gc.collect()
            for entry in suspects:
                entry.outlived_gc = not entry.unreachable()
        retired, self._retired = self._retired, []
        return _close_all(retired + self._pop_unreachable())

    def _pop_unreachable(self, keep_user: str | None = None) -> list[_Entry]:
        """Take out every entry whose model is gone, except those of the test ``keep_user``."""
        dead = [k for k, e in self._entries.items() if e.unreachable() and e.user != keep_user]
        return [self._entries.pop(k) for k in dead]

    def _release(self, entries: Sequence[_Entry], stacklevel: int = 3) -> None:
        """Close ``entries``; a close that fails is reported as a warning, not raised."""
        errors = _close_all(entries)
        if errors:
            warnings.warn(
                PytestIpuWarning(f"pytest-ipu could not release a compiled model: {'; '.join(errors)}"),
                stacklevel=stacklevel,
            )

    def close(self) -> list[str]:
        """Close every cached model, whatever the others do; one message per failure."""
        entries, self._entries = self._retired + list(self._entries.values()), {}
        self._retired = []
        return _close_all(entries)


def _reference(model: object) -> Callable[[], object | None]:
    """A weak reference to ``model`` or, for objects that have none (a list, a builtin), a strong one."""
    try:
        return weakref.ref(model)
    except TypeError:
        return lambda: model


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
    if isinstance(compiled, Grouped):
        # Every instance is the same compiled model; the first one's outputs stand for all.
        actual = compiled.group.call(0, tuple(example_inputs))
    else:
        actual = compiled.run(*compiled.prepare_inputs(tuple(example_inputs)))
    return compare(reference, actual, compiled.precision, "torch eager fp32 on cpu")


def _compile_now(
    backend: Backend,
    model: object,
    example_inputs: Sequence[object],
    precision: str,
    options: dict[str, object],
    placement: DeviceRequest,
    how: str,
    backend_for: placed.BackendFor,
    own_process: bool,
) -> CompiledModel:
    """Compile ``model`` now, on the backend itself (one inline instance) or by its placement
    plan, with the time it took (``compile_s``)."""
    start = time.perf_counter_ns()
    if placed.is_trivial(placement) and how == "inline":
        compiled = backend.compile(model, example_inputs, precision, options)
    else:
        the_plan = placed.plan(backend, placement, options, backend_for, own_process=own_process)
        compiled = placed.compile_plan(the_plan, model, example_inputs, precision, options)
    return dataclasses.replace(compiled, compile_s=(time.perf_counter_ns() - start) * 1e-9)


def _cache_key(
    backend: Backend,
    model: object,
    example_inputs: Sequence[object],
    precision: str,
    key: object,
    options: dict[str, object],
    placement: DeviceRequest,
    how: str,
) -> tuple[Any, ...]:
    """The cache's key of a compile: what makes two compiles give the same model."""
    return (
        backend.name,
        backend.device,
        # Tagged, so that an explicit key can never equal another model's id.
        ("key", key) if key is not None else ("id", id(model)),
        precision,
        tuple(sorted((k, repr(v)) for k, v in options.items())),
        _signature(example_inputs) if backend.shape_specialized(options) else None,
        placement,
        how,
    )


def _parity_failed(compiled: CompiledModel, p: ParityRecord, model: object) -> NoReturn:
    """Raise ``ParityError`` for ``compiled``'s outputs, which differ from the reference's (``p``)
    beyond the precision's tolerance."""
    from pytest_ipu.backends.parity import ParityError

    raise ParityError(
        f"{compiled.target} {compiled.precision} outputs of {type(model).__name__} differ from "
        f"{p.reference}: max abs error {p.max_abs:.3g}, max rel error {p.max_rel:.3g} "
        f"> tolerance {p.tolerance:g}"
    )
