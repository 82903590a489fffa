"""pytest-benchmark's ``benchmark`` fixture as pytest-ipu uses it: one benchmark per test, an
earlier repeat left out of its results, its "not used" warning silenced, and its ``pedantic`` loop
with ``teardown`` on every version (``Timer``).

Loaded by the first test that uses a pytest-ipu fixture that measures. The versions it bridges are
the package's table (``bench_seam``).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any

import pytest


def forget(config: pytest.Config, benchmark: Any) -> None:
    """Leave a timed run of the fixture out of pytest-benchmark's results: an earlier repeat of a
    benchmark, timed by the same ``pedantic`` as the last one and pooled into its record, but not a
    benchmark of its own in pytest-benchmark's table and JSON (which keep the last repeat's rounds)."""
    stats = getattr(benchmark, "stats", None)
    kept = getattr(getattr(config, "_benchmarksession", None), "benchmarks", None)
    if stats is None or kept is None:
        return
    for i, entry in enumerate(kept):
        if entry is stats:
            del kept[i]
            return


#: The attribute of pytest-benchmark's fixture naming the pytest-ipu fixture that measures with it,
#: and whether that call is still running.
_MEASURING = "_pytest_ipu_measuring"


@contextlib.contextmanager
def one_per_test(benchmark: Any, caller: str, test: str) -> Iterator[None]:
    """Around a call of ``caller`` (a fixture that measures with ``benchmark``) in ``test``: a second
    use of ``benchmark`` fails with one line in pytest-ipu's words.

    pytest-ipu measures one benchmark per test: its record is the test's result, its gates fail the
    test, and pytest-benchmark keeps one result per test (a second ``pedantic`` is its bare
    "FixtureAlreadyUsed ... pedantic mode", which the user never called). A second call, after the
    first or inside the model the first is measuring, is refused before it measures anything.
    """
    __tracebackhide__ = True
    first, running = getattr(benchmark, _MEASURING, (None, False))
    if first is None and getattr(benchmark, "_mode", None):
        first = "pytest-benchmark's benchmark"  # the plain fixture, used by the test itself
    if first is not None:
        when = f"inside the model {first}(...) is measuring" if running else f"after {first}(...)"
        pytest.fail(
            f"pytest-ipu: {caller}(...) called {when} in {test}: pytest-ipu measures one benchmark "
            "per test; measure each model in a test of its own (e.g. with @pytest.mark.parametrize "
            "over the models)",
            pytrace=False,
        )
    setattr(benchmark, _MEASURING, (caller, True))
    from pytest_ipu.results.benchmark_json import PENDING_KEY

    # Replaced by the record once measured: an entry that keeps it is partial, not a plain one.
    benchmark.extra_info[PENDING_KEY] = caller
    try:
        yield
    finally:
        setattr(benchmark, _MEASURING, (caller, False))


def leave_out_unfinished(benchmark: Any) -> None:
    """Leave ``benchmark`` out of pytest-benchmark's results when its test failed and it has no
    pytest-ipu record (``extra_info["ipu"]``): a power sampler that died or a timeout after the
    rounds, a second benchmark refused, a plain ``benchmark`` whose test then failed.
    pytest-benchmark leaves out a benchmark whose timed call raised (``has_error``), but keeps one
    that failed after its rounds, and its times would be read as a measurement by every later
    comparison. A benchmark with its record (failed by a gate, or by an assertion after the call)
    was measured whole by pytest-ipu and is kept."""
    from pytest_ipu.results.schema import NAMESPACE

    if NAMESPACE not in (getattr(benchmark, "extra_info", None) or {}):
        benchmark.has_error = True


def never_called(item: pytest.Item, benchmark: Any, caller: str) -> None:
    """After a test that asked for ``caller`` (a fixture that measures) and never called it: say so in
    pytest-ipu's words, a ``PytestIpuWarning`` naming the test and the fixture, in place of
    pytest-benchmark's "Benchmark fixture was not used at all in this test!", which names a fixture
    the test never asked for."""
    from pytest_ipu.errors import PytestIpuWarning

    # Called, used by the test itself, or a skipped test (pytest-benchmark sets ``skipped``).
    if getattr(benchmark, _MEASURING, None) is not None or getattr(benchmark, "_mode", None):
        return
    if getattr(benchmark, "skipped", False):
        return
    mark_used(benchmark)
    item.warn(
        PytestIpuWarning(
            f"pytest-ipu: {item.name} asked for {caller} and never called it: nothing was measured; "
            f"call {caller}(...) in the test, or drop the fixture from it"
        )
    )


def mark_used(benchmark: Any) -> None:
    """Tell pytest-benchmark its fixture was not forgotten (else it warns "Benchmark fixture was not
    used at all in this test!") when the test measured without it or failed before it."""
    benchmark.skipped = True


class Timer:
    """pytest-benchmark's ``benchmark`` fixture as pytest-ipu's timed loop uses it
    (``measure.timing.PedanticBenchmark``), the same on every version."""

    def __init__(self, fixture: Any) -> None:
        self._fixture = fixture
        self._takes_teardown = "teardown" in inspect.signature(fixture.pedantic).parameters

    @property
    def round_times(self) -> tuple[float, ...]:
        """The seconds of each timed round pytest-benchmark kept, in order."""
        return tuple(self._fixture.stats.stats.data)

    def rounds_ended_early(self) -> None:
        """The rounds were ended on purpose, by a raise from ``setup``: pytest-benchmark counted it
        as an error (``has_error``) and would leave the benchmark out of its JSON; keep it."""
        self._fixture.has_error = False

    def pedantic(
        self,
        target: Callable[..., object],
        args: Sequence[object] = (),
        kwargs: dict[str, object] | None = None,
        setup: Callable[[], object] | None = None,
        teardown: Callable[..., object] | None = None,
        rounds: int = 1,
        warmup_rounds: int = 0,
        iterations: int = 1,
    ) -> object:
        """``benchmark.pedantic`` with ``teardown`` on every version (before 5.2, run at the start of
        the next round's ``setup`` and after the last round, as 5.2 runs it between rounds)."""
        plain = {"args": args, "kwargs": kwargs, "rounds": rounds, "warmup_rounds": warmup_rounds}
        if teardown is None or self._takes_teardown:
            more = {} if teardown is None else {"teardown": teardown}
            return self._fixture.pedantic(target, setup=setup, iterations=iterations, **plain, **more)
        ran = [False]  # a round (or warm-up round) ran whose teardown is still to come

        def teardown_then_setup() -> object:
            if ran[0]:
                ran[0] = False
                teardown(*args, **(kwargs or {}))
            given = setup() if setup is not None else None
            ran[0] = True
            return given

        result = self._fixture.pedantic(target, setup=teardown_then_setup, iterations=iterations, **plain)
        # pytest-benchmark 5.2 calls no teardown when disabled (the target ran once, untimed).
        if ran[0] and self._fixture.enabled:
            teardown(*args, **(kwargs or {}))
        return result


def plain_result(item: pytest.Item) -> tuple[dict[str, float], tuple[float, ...]] | None:
    """pytest-benchmark's time statistics (``benchmark_json.TIME_STATS``, seconds) and per-round
    times of the test's own use of its ``benchmark`` fixture (plain calls or ``pedantic``); ``None``
    when the test did not time with it, a pytest-ipu fixture measured with it (its record is the
    test's result), or the timed function raised (pytest-benchmark leaves it out of its JSON)."""
    funcargs = getattr(item, "funcargs", None)
    fixture = funcargs.get("benchmark") if isinstance(funcargs, dict) else None
    if fixture is None or getattr(fixture, _MEASURING, None) is not None:
        return None
    if getattr(fixture, "has_error", False) or not getattr(fixture, "enabled", True):
        return None
    stats = getattr(getattr(fixture, "stats", None), "stats", None)
    data = getattr(stats, "data", None)
    if not data:
        return None
    from pytest_ipu.results.benchmark_json import TIME_STATS

    return {k: float(getattr(stats, k)) for k in TIME_STATS}, tuple(float(x) for x in data)
