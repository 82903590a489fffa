"""The compile cache releases what can never be hit again (issue 12), and keeps what can.

An entry keyed by a model object (no ``key=``) whose model nobody references any more is closed and
dropped when its test ends, so that a sweep building a model per parameter does not keep them all;
a module-level or fixture model keeps its entry (later tests and the repeats hit it), an explicit
``key=`` keeps its entry for the run, and a new object under a dead model's id is never a hit.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Mapping
from collections.abc import Sequence

import pytest

# torch is imported here, before the in-process (pytester) run below imports it: pytester drops the
# modules a run imported, and torch imported a second time in one process fails to register its
# operator libraries again ("Only a single TORCH_LIBRARY ..."), breaking every later torch test.
import torch  # noqa: F401

from pytest_ipu.backends.base import Availability
from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.devices.request import DeviceRequest
from pytest_ipu.run import compiling
from pytest_ipu.run.compiling import CompileCache


class _Model:
    """A callable model that, like a torch module, can be weakly referenced."""

    def __init__(self, value: int) -> None:
        self.value = value
        self.me: object = None

    def __call__(self) -> int:
        return self.value


class _Backend:
    """A backend that, like the built-in ones, keeps a copy of the model, never the caller's object."""

    concurrency = "threads"

    def __init__(self, exclusive: bool = False, failing_close: bool = False) -> None:
        self.exclusive_device = exclusive
        self.failing_close = failing_close
        self.closed: list[int] = []

    @property
    def name(self) -> str:
        return "fake"

    @property
    def device(self) -> str:
        return "cpu"

    def availability(self) -> Availability:
        return Availability.yes()

    def describe(self) -> dict[str, object]:
        return {"backend": "fake"}

    def default_precision(self) -> str:
        return "fp32"

    def shape_specialized(self, options: Mapping[str, object]) -> bool:
        return False

    def inventory(self) -> str:
        return "no IPUs"

    def placement_options(self, replicas: int, stages: int) -> dict[str, object]:
        return {}

    def compile(
        self, model: object, example_inputs: Sequence[object], precision: str, options: Mapping[str, object]
    ) -> CompiledModel:
        value = model() if callable(model) else 0  # the "copy": what the model computes, not the model

        def close() -> None:
            self.closed.append(value)
            if self.failing_close:
                raise RuntimeError("device wedged")

        return CompiledModel(
            target="fake:cpu",
            backend="fake",
            device="cpu",
            device_name="Fake",
            precision=precision,
            io="host",
            run=lambda: value,
            prepare_inputs=tuple,
            close=close,
        )


def _compile(
    cache: CompileCache, backend: _Backend, model: object, user: str, key: object = None
) -> CompiledModel:
    def no_backend_for(name: str, device: str | None) -> object:
        raise AssertionError("a trivial placement needs no other backend")

    return cache.compile(
        backend,  # structurally a Backend (and a PlacedBackend)
        model,
        (),
        precision="fp32",
        key=key,
        options={},
        placement=DeviceRequest(),
        user=user,
        parity=False,
        backend_for=no_backend_for,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("exclusive", [False, True], ids=["shared-device", "exclusive-device"])
def test_an_entry_whose_model_is_gone_is_closed_and_dropped_at_the_end_of_its_test(exclusive: bool) -> None:
    backend, cache = _Backend(exclusive=exclusive), CompileCache()
    model = _Model(1)
    compiled = weakref.ref(_compile(cache, backend, model, "t.py::a"))
    del model
    assert cache.release_unreachable("t.py::a") == []
    assert backend.closed == [1]  # released means closed: an IPU's devices are detached too
    gc.collect()
    assert compiled() is None


def test_an_entry_whose_model_is_alive_is_kept_and_hit_by_later_tests() -> None:
    backend, cache = _Backend(), CompileCache()
    model = _Model(1)  # module-level or fixture model: referenced beyond the test
    assert _compile(cache, backend, model, "t.py::a").compile_cached is False
    assert cache.release_unreachable("t.py::a") == []
    assert cache.release_unreachable("t.py::a") == []  # a second end of test (a repeat) changes nothing
    assert _compile(cache, backend, model, "t.py::b").compile_cached is True
    assert backend.closed == []


def test_an_entry_with_an_explicit_key_is_kept_for_the_run() -> None:
    backend, cache = _Backend(), CompileCache()
    compiled = weakref.ref(_compile(cache, backend, _Model(1), "t.py::a", key="mlp"))
    assert cache.release_unreachable("t.py::a") == []
    gc.collect()
    assert compiled() is not None
    assert _compile(cache, backend, _Model(2), "t.py::b", key="mlp").compile_cached is True
    assert cache.close() == []
    assert backend.closed == [1]


def test_a_model_in_a_reference_cycle_is_released_at_the_end_of_its_test() -> None:
    backend, cache = _Backend(), CompileCache()
    gc.disable()  # only the release's own collection may free the cycle
    try:
        model = _Model(1)
        model.me = model
        _compile(cache, backend, model, "t.py::a")
        del model
        assert cache.release_unreachable("t.py::a") == []
    finally:
        gc.enable()
    assert backend.closed == [1]


def test_a_new_object_under_a_dead_models_id_is_not_a_cache_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every object gets the same id here, as a new model may get the address of one just freed.
    monkeypatch.setattr(compiling, "id", lambda obj: 4242, raising=False)
    backend, cache = _Backend(), CompileCache()
    model = _Model(1)
    _compile(cache, backend, model, "t.py::a")
    del model  # and no end of test in between: the next compile must not be fooled either
    compiled = _compile(cache, backend, _Model(2), "t.py::b")
    assert compiled.compile_cached is False
    assert compiled.run() == 2
    assert backend.closed == [1]


def test_a_test_keeps_running_what_it_compiled_from_temporaries(monkeypatch: pytest.MonkeyPatch) -> None:
    # ``ipu_compile(Net(), x)`` twice in one test: the first model is gone before the second compile
    # (here even under the same id), yet the test still runs the first compiled model.
    monkeypatch.setattr(compiling, "id", lambda obj: 4242, raising=False)
    backend, cache = _Backend(), CompileCache()
    first = _compile(cache, backend, _Model(1), "t.py::a")
    second = _compile(cache, backend, _Model(2), "t.py::a")
    assert (second.compile_cached, second.run()) == (False, 2)
    assert backend.closed == []  # not closed under the test
    assert first.run() == 1
    assert cache.release_unreachable("t.py::a") == []
    assert sorted(backend.closed) == [1, 2]  # both, once the test is over


def test_a_failing_close_on_release_is_returned_not_raised() -> None:
    backend, cache = _Backend(failing_close=True), CompileCache()
    _compile(cache, backend, _Model(1), "t.py::a")
    assert cache.release_unreachable("t.py::a") == ["fake:cpu: device wedged"]
    assert cache.close() == []  # it was dropped: the run's end does not close it twice


INNER_TESTS = """
import gc
import weakref

import pytest
import torch

REFS = {}
SHARED = torch.nn.Linear(8, 8)  # module-level: alive for the whole run
X = torch.randn(2, 8)
HITS = []


def test_builds_its_own_model(ipu_compile, ipu_benchmark):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    compiled = ipu_compile(model, (X,))
    ipu_benchmark(compiled, (X,), rounds=2, warmup_rounds=1)
    REFS["model"], REFS["compiled"] = weakref.ref(model), weakref.ref(compiled)


def test_its_entry_was_released_when_it_ended():
    gc.collect()
    assert REFS["model"]() is None
    assert REFS["compiled"]() is None, "the cache still holds the dropped model's compiled model"


def test_shared_first(ipu_compile):
    assert ipu_compile(SHARED, (X,)).compile_cached is False


def test_shared_second(ipu_compile):
    assert ipu_compile(SHARED, (X,)).compile_cached is True


def test_keyed_first(ipu_compile):
    REFS["keyed"] = weakref.ref(ipu_compile(torch.nn.Linear(8, 8), (X,), key="linear"))


def test_keyed_second(ipu_compile):
    gc.collect()
    assert REFS["keyed"]() is not None
    assert ipu_compile(torch.nn.Linear(8, 8), (X,), key="linear").compile_cached is True


@pytest.fixture(scope="module")
def fixture_model():
    return torch.nn.Linear(8, 8)


@pytest.mark.parametrize("n", [1, 2])
def test_repeats_hit_a_fixture_model(ipu_compile, ipu_benchmark, fixture_model, n):
    x = torch.randn(n, 8)
    compiled = ipu_compile(fixture_model, (x,))
    HITS.append(compiled.compile_cached)
    ipu_benchmark(compiled, (x,), rounds=2, warmup_rounds=1)


def test_every_run_after_the_first_was_a_hit():
    assert HITS == [False] + [True] * 5  # 2 parameters x 3 repeats, one compile
"""


def test_the_plugin_releases_dropped_models_and_keeps_shared_and_keyed_ones(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_IPU_REPEATS", "3")  # the repeats must still hit a shared model
    pytester.makepyfile(test_release=INNER_TESTS)
    result = pytester.runpytest("--ipu-backend=torch:cpu", "--ipu-torch-threads=1")
    result.assert_outcomes(passed=9)


FAILING_CLOSE_CONFTEST = """
from pytest_ipu.backends.base import Availability, CompiledModel, NamedBackend


class Wedged(NamedBackend):
    def availability(self):
        return Availability.yes()

    def describe(self):
        return {"backend": self.name, "device": self.device}

    def default_precision(self):
        return "fp32"

    def shape_specialized(self, options):
        return False

    def compile(self, model, example_inputs, precision, options):
        def close():
            raise RuntimeError("device wedged")

        return CompiledModel(
            target="wedged:cpu", backend="wedged", device="cpu", device_name="Wedged", precision=precision,
            io="host", run=lambda: 1, prepare_inputs=tuple, close=close,
        )


def pytest_ipu_make_backend(config, target):
    if target.backend == "wedged":
        return Wedged(target.backend, target.device)
    return None
"""


def test_a_failing_close_when_a_test_ends_is_a_warning(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAILING_CLOSE_CONFTEST)
    pytester.makepyfile(
        test_wedged="""
        class Model:
            def __call__(self):
                return 1


        def test_compiles_its_own_model(ipu_compile):
            ipu_compile(Model(), ())
        """
    )
    # Not with -W error: the warning is the behaviour under test.
    result = pytester.runpytest("--ipu-backend=wedged:cpu", "-W", "default")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        ["*PytestIpuWarning: pytest-ipu could not release a compiled model: wedged:cpu: device wedged"]
    )
