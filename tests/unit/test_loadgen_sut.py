"""LoadGen's system under test (pytest_ipu.loadgen.sut) without LoadGen: a fake ``lg`` module records
the answers, and callers that block on events order the workers, so every check is deterministic."""

from __future__ import annotations

import contextlib
import functools
import re
import threading
import time
import typing
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ipu.loadgen.sut import BatchingSut
from pytest_ipu.loadgen.sut import SampleLibrary
from pytest_ipu.loadgen.sut import capacity_qps
from pytest_ipu.loadgen.sut import split_outputs

#: How long a test waits for something that happens at once in a healthy SUT: generous, so that a
#: loaded machine never fails a check; a broken SUT fails it only after this long.
DEADLINE_S = 30.0
#: Samples in the library: row ``i`` of ``X`` is ``[3i, 3i+1, 3i+2]``.
N = 40
X = np.arange(N * 3, dtype=np.float32).reshape(N, 3)

Caller = typing.Callable[[typing.Tuple[object, ...]], object]


class FakeLoadgen:
    """The two calls of ``mlperf_loadgen`` the SUT makes, recording every answer (thread-safe)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        #: Every response, as ``(id, pointer, size)``, in the order answered.
        self.responses: list[tuple[int, int, int]] = []

    def QuerySampleResponse(self, id: int, ptr: int, size: int) -> tuple[int, int, int]:
        """LoadGen's response object, as a tuple."""
        return (id, ptr, size)

    def QuerySamplesComplete(self, responses: list[tuple[int, int, int]]) -> None:
        """LoadGen's "these samples are answered"."""
        with self._cond:
            self.responses.extend(responses)
            self._cond.notify_all()

    def wait_for(self, count: int) -> None:
        """Wait until at least ``count`` samples are answered."""
        with self._cond:
            done = self._cond.wait_for(lambda: len(self.responses) >= count, DEADLINE_S)
        assert done, f"only {len(self.responses)} of {count} samples were answered"

    def ids(self) -> list[int]:
        """The answered sample ids, in order."""
        with self._cond:
            return [r[0] for r in self.responses]


@dataclass
class Query:
    """One of LoadGen's query samples: its response id and its index in the library."""

    id: int
    index: int


def queries(indices: range | list[int], first_id: int = 1000) -> list[Query]:
    """Query samples for ``indices``; ids are distinct from indices, as LoadGen's are."""
    return [Query(first_id + k, i) for k, i in enumerate(indices)]


class Harness:
    """A fake LoadGen and the SUTs made over it; every SUT is closed and every event set at the end,
    so no worker outlives its test."""

    def __init__(self) -> None:
        self.lg = FakeLoadgen()
        self.suts: list[BatchingSut] = []
        self.events: list[threading.Event] = []

    def event(self) -> threading.Event:
        """An event that the test's end sets (releasing any caller still blocked on it)."""
        event = threading.Event()
        self.events.append(event)
        return event

    def sut(self, callers: list[Caller], inputs: tuple[object, ...] = (X,), **options: Any) -> BatchingSut:
        """A started SUT over ``inputs``."""
        options.setdefault("max_batch", 8)
        sut = BatchingSut(self.lg, SampleLibrary(inputs), callers, **options)
        self.suts.append(sut)
        sut.start()
        return sut

    def finish(self) -> None:
        """Release every blocked caller and stop every SUT."""
        for event in self.events:
            event.set()
        for sut in self.suts:
            sut.close()


@pytest.fixture
def harness() -> Iterator[Harness]:
    """A fake LoadGen; the SUTs made with it are stopped at the end of the test."""
    made = Harness()
    yield made
    made.finish()


def recording(
    seen: list[np.ndarray[Any, Any]], result: Callable[[np.ndarray[Any, Any]], object] | None = None
) -> Caller:
    """A caller that keeps each batch's first input and returns ``result(x)`` (the input itself)."""

    def call(batch: tuple[object, ...]) -> object:
        x = np.asarray(batch[0])
        seen.append(x)
        return x if result is None else result(x)

    return call


def assert_each_answered_once(lg: FakeLoadgen, issued: list[Query]) -> None:
    """Every issued sample was answered, and none twice."""
    counts = Counter(lg.ids())
    assert set(counts) == {q.id for q in issued}
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1]


# --- batching ---------------------------------------------------------------------------------------


def test_offline_query_runs_as_full_batches_then_the_rest(harness: Harness) -> None:
    seen: list[np.ndarray[Any, Any]] = []
    sut = harness.sut([recording(seen)], max_batch=8)
    # Offline's one query: 20 samples, in a shuffled order of the library.
    indices = [(7 * i) % N for i in range(20)]
    issued = queries(indices)
    sut.issue(issued)
    harness.lg.wait_for(20)
    assert [len(x) for x in seen] == [8, 8, 4]
    # Each batch is the rows of its samples, in the order issued.
    np.testing.assert_array_equal(np.concatenate(seen), X[indices])
    assert_each_answered_once(harness.lg, issued)
    assert all(ptr == 0 and size == 0 for _, ptr, size in harness.lg.responses)
    stats = sut.stats()
    assert stats.batches == 3
    assert stats.samples == 20
    assert dict(stats.batch_sizes) == {4: 1, 8: 2}
    assert stats.instance_batches == (3,)
    assert stats.mean_batch == pytest.approx(20 / 3)
    assert sut.error is None
    assert sut.unrun == 0


def test_instances_run_batches_at_the_same_time(harness: Harness) -> None:
    # Each caller waits until both have started: if only one worker ran at a time, the barrier
    # would break (after the deadline) and the call would fail.
    both = threading.Barrier(2, timeout=DEADLINE_S)
    ran: list[int] = []

    def caller(instance: int) -> Caller:
        def call(batch: tuple[object, ...]) -> object:
            both.wait()
            ran.append(instance)
            return batch[0]

        return call

    sut = harness.sut([caller(0), caller(1)], max_batch=4)
    issued = queries(range(8))
    sut.issue(issued)
    harness.lg.wait_for(8)
    assert sut.error is None
    assert sorted(ran) == [0, 1]
    assert sut.stats().instance_batches == (1, 1)
    assert_each_answered_once(harness.lg, issued)


def test_a_batch_waits_to_fill_until_flush(harness: Harness) -> None:
    seen: list[np.ndarray[Any, Any]] = []
    # A timeout far longer than the test: only a full batch or flush() releases a batch.
    sut = harness.sut([recording(seen)], max_batch=8, timeout_s=DEADLINE_S * 10)
    full = queries(range(8))
    sut.issue(full)  # a full batch goes at once
    harness.lg.wait_for(8)
    assert [len(x) for x in seen] == [8]
    first = queries(range(8, 11), first_id=2000)
    later = queries(range(11, 13), first_id=3000)
    sut.issue(first)
    sut.issue(later)
    # Five samples queued, none run: the worker waits for the batch to fill.
    with sut._cond:
        assert len(sut._queue) == 5
    assert len(seen) == 1
    assert len(harness.lg.responses) == 8
    sut.flush()
    harness.lg.wait_for(13)
    # Both queries' samples went as one batch once flushed.
    assert [len(x) for x in seen] == [8, 5]
    assert_each_answered_once(harness.lg, full + first + later)


def test_a_batch_that_fills_before_the_timeout_goes_as_one(harness: Harness) -> None:
    seen: list[np.ndarray[Any, Any]] = []
    sut = harness.sut([recording(seen)], max_batch=8, timeout_s=DEADLINE_S * 10)
    issued = queries(range(3)) + queries(range(3, 8), first_id=2000)
    sut.issue(issued[:3])
    sut.issue(issued[3:])
    harness.lg.wait_for(8)
    assert [len(x) for x in seen] == [8]


def test_pad_to_pads_the_call_but_answers_only_the_samples(harness: Harness) -> None:
    seen: list[np.ndarray[Any, Any]] = []
    sut = harness.sut([recording(seen, lambda x: x * 2)], max_batch=4, pad_to=4, keep_outputs=True)
    issued = queries([5, 9, 2])
    sut.issue(issued)
    harness.lg.wait_for(3)
    assert len(seen) == 1
    # The caller sees pad_to rows: the last sample repeated.
    np.testing.assert_array_equal(seen[0], X[[5, 9, 2, 2]])
    assert_each_answered_once(harness.lg, issued)
    assert sorted(sut.outputs) == [2, 5, 9]  # the padding's outputs are dropped
    np.testing.assert_array_equal(np.asarray(sut.outputs[9]), X[9] * 2)
    assert dict(sut.stats().batch_sizes) == {3: 1}  # counted by its samples, not its padding


# --- outputs (accuracy mode) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "first_of", "nbytes"),
    [
        (lambda x: x * 2, lambda out: out, 3 * 4),
        (lambda x: (x[:, :2], x.sum(axis=1)), lambda out: out[0], 2 * 4),
        (lambda x: [x.astype(np.float64), x], lambda out: out[0], 3 * 8),
        (lambda x: {"logits": x[:, 1:], "sum": x.sum(axis=1)}, lambda out: out["logits"], 2 * 4),
    ],
    ids=["array", "tuple", "list", "dict"],
)
def test_keep_outputs_keeps_each_samples_outputs_and_hands_loadgen_its_bytes(
    harness: Harness,
    result: Callable[[np.ndarray[Any, Any]], object],
    first_of: Callable[[Any], Any],
    nbytes: int,
) -> None:
    sut = harness.sut([recording([], result)], max_batch=8, keep_outputs=True)
    indices = [3, 1, 4, 15, 9]
    issued = queries(indices)
    sut.issue(issued)
    harness.lg.wait_for(5)
    assert sorted(sut.outputs) == sorted(indices)
    whole = result(X[indices])
    for row, index in enumerate(indices):
        expected = split_outputs(whole, len(indices))[row]
        kept = sut.outputs[index]
        assert type(kept) is type(expected)
        np.testing.assert_array_equal(np.asarray(first_of(kept)), np.asarray(first_of(expected)))
    for _, ptr, size in harness.lg.responses:
        assert ptr != 0
        assert size == nbytes
    assert_each_answered_once(harness.lg, issued)


def test_without_keep_outputs_nothing_is_kept(harness: Harness) -> None:
    sut = harness.sut([recording([])], max_batch=8)
    sut.issue(queries(range(4)))
    harness.lg.wait_for(4)
    assert sut.outputs == {}
    assert {(ptr, size) for _, ptr, size in harness.lg.responses} == {(0, 0)}


def test_split_outputs_takes_row_j_of_each_output() -> None:
    x = np.arange(6).reshape(3, 2)
    assert [o.tolist() for o in split_outputs(x, 3)] == [[0, 1], [2, 3], [4, 5]]
    pairs = split_outputs((x, x[:, 0]), 2)
    assert isinstance(pairs[1], tuple)
    assert pairs[1][0].tolist() == [2, 3]
    assert pairs[1][1] == 2
    as_list = split_outputs([x, x], 1)
    assert isinstance(as_list[0], list)
    mapped = split_outputs({"a": x, "b": x[:, 1]}, 3)
    assert mapped[2]["b"] == 5
    assert len(split_outputs(x, 2)) == 2  # padding rows beyond ``count`` are not split


# --- failures ---------------------------------------------------------------------------------------


def test_a_caller_that_raises_ends_the_run_answering_every_sample_once(harness: Harness) -> None:
    # The first call blocks until released; the second raises. Which instance makes which call is
    # up to the workers, so each call records its instance.
    first_started = harness.event()
    release_first = harness.event()
    calls: list[int] = []
    lock = threading.Lock()

    def caller(instance: int) -> Caller:
        def call(batch: tuple[object, ...]) -> object:
            with lock:
                calls.append(instance)
                order = len(calls)
            if order == 1:
                first_started.set()
                assert release_first.wait(DEADLINE_S)
                return batch[0]
            raise RuntimeError("boom: the model's second call failed\nsecond line of the message")

        return call

    sut = harness.sut([caller(0), caller(1)], max_batch=4)
    running = queries(range(4))
    sut.issue(running)
    assert first_started.wait(DEADLINE_S)
    failing = queries(range(4, 8), first_id=2000)
    sut.issue(failing)  # the other instance takes it and raises
    harness.lg.wait_for(4)
    assert sut.error is not None
    raiser = calls[1]
    assert raiser != calls[0]
    assert f"instance {raiser} failed on a batch of 4 sample(s)" in sut.error
    assert "indices 4, 5, 6, 7" in sut.error
    assert "RuntimeError: boom: the model's second call failed" in sut.error
    assert "second line" not in sut.error  # one line
    assert isinstance(sut.exception, RuntimeError)
    assert "RuntimeError" in sut.traceback
    # After the failure every sample issued is answered at once, unrun.
    after = queries(range(8, 11), first_id=3000)
    sut.issue(after)
    harness.lg.wait_for(7)
    assert sorted(harness.lg.ids()) == sorted(q.id for q in failing + after)
    assert sut.unrun == 7
    # The batch that was running when the other failed still answers its samples, once.
    release_first.set()
    harness.lg.wait_for(11)
    sut.close()
    assert not any(t.is_alive() for t in sut._threads)
    assert_each_answered_once(harness.lg, running + failing + after)
    assert sut.unrun == 7
    assert sut.stats().batches == 1


def test_samples_queued_behind_a_failing_batch_are_answered_unrun(harness: Harness) -> None:
    def fail(batch: tuple[object, ...]) -> object:
        raise ValueError("bad batch")

    issued = queries(range(10))
    sut = BatchingSut(harness.lg, SampleLibrary((X,)), [fail], max_batch=4)
    harness.suts.append(sut)
    sut.issue(issued)  # queued before the worker starts: the failure finds six still queued
    sut.start()
    harness.lg.wait_for(10)
    assert sut.unrun == 10
    assert sut.error is not None
    assert sut.error.startswith("instance 0 failed on a batch of 4 sample(s) (indices 0, 1, 2, 3)")
    sut.close()
    assert not any(t.is_alive() for t in sut._threads)
    assert_each_answered_once(harness.lg, issued)
    assert sut.stats().batches == 0


def test_a_call_past_the_call_timeout_is_answered_by_the_monitor(harness: Harness) -> None:
    started = harness.event()
    release = harness.event()
    returned = threading.Event()

    def stuck(batch: tuple[object, ...]) -> object:
        started.set()
        assert release.wait(DEADLINE_S)
        returned.set()
        return batch[0]

    sut = harness.sut([stuck], max_batch=4, call_timeout_s=0.2)
    issued = queries(range(3))
    sut.issue(issued)
    assert started.wait(DEADLINE_S)
    harness.lg.wait_for(3)
    assert not returned.is_set()  # answered while the call was still blocked
    assert sut.error is not None
    assert "--ipu-call-timeout" in sut.error
    assert "instance 0 on a batch of 3 sample(s)" in sut.error
    assert sut.exception is None
    assert sut.unrun == 3
    later = queries(range(3, 5), first_id=2000)
    sut.issue(later)
    harness.lg.wait_for(5)
    # The call returns at last: its samples were answered already, and are not answered again.
    release.set()
    sut.close()
    assert not any(t.is_alive() for t in sut._threads)
    assert_each_answered_once(harness.lg, issued + later)
    assert sut.unrun == 5
    assert sut.stats().batches == 0


def test_a_call_within_the_call_timeout_is_left_alone(harness: Harness) -> None:
    sut = harness.sut([recording([])], max_batch=4, call_timeout_s=DEADLINE_S * 10)
    sut.issue(queries(range(6)))
    harness.lg.wait_for(6)
    assert sut.error is None
    assert sut.unrun == 0


class BadQuery:
    """A query sample whose id cannot be read."""

    index = 0

    @property
    def id(self) -> int:
        raise KeyError("no id")


def test_an_exception_inside_issue_never_reaches_loadgen(harness: Harness) -> None:
    sut = BatchingSut(harness.lg, SampleLibrary((X,)), [recording([])], max_batch=4)
    harness.suts.append(sut)
    queued = queries(range(2))
    sut.issue(queued)  # not started: these wait in the queue
    sut.issue([BadQuery()])  # must not raise
    assert sut.error is not None
    assert sut.error.startswith("queueing LoadGen's query failed: KeyError")
    assert isinstance(sut.exception, KeyError)
    # The failure answers what was queued, unrun; a later query too.
    assert sorted(harness.lg.ids()) == [q.id for q in queued]
    sut.issue(None)  # not even iterable: still no exception
    after = queries(range(2, 4), first_id=2000)
    sut.issue(after)
    assert_each_answered_once(harness.lg, queued + after)
    assert sut.unrun == 4


def test_close_answers_what_is_still_queued_and_stops_the_workers(harness: Harness) -> None:
    sut = BatchingSut(
        harness.lg, SampleLibrary((X,)), [recording([])], max_batch=4, timeout_s=DEADLINE_S * 10
    )
    harness.suts.append(sut)
    sut.start()
    issued = queries(range(3))
    sut.issue(issued)  # waits for a full batch that never comes
    sut.close()
    assert not any(t.is_alive() for t in sut._threads)
    assert_each_answered_once(harness.lg, issued)
    assert sut.unrun == 3


def test_a_sut_needs_an_instance() -> None:
    with pytest.raises(ValueError, match="at least one instance"):
        BatchingSut(FakeLoadgen(), SampleLibrary((X,)), [], max_batch=1)


# --- the sample library -----------------------------------------------------------------------------


def test_library_without_inputs_says_how_to_pass_them() -> None:
    with pytest.raises(ValueError, match=r"no inputs: pass the samples as \(x,\)"):
        SampleLibrary(())


def test_library_inputs_must_agree_on_the_sample_count() -> None:
    with pytest.raises(ValueError, match=r"different sample counts \[3, 4\]"):
        SampleLibrary((np.zeros((3, 2)), np.zeros(4)))


@pytest.mark.parametrize(
    "scalar", [5, 2.5, np.float32(1.0), np.array(3.0)], ids=["int", "float", "np-scalar", "0-d"]
)
def test_library_input_without_a_leading_dimension_is_named(scalar: object) -> None:
    with pytest.raises(ValueError, match=rf"input 1 \({type(scalar).__name__}\) has no leading dimension"):
        SampleLibrary((np.zeros((3, 2)), scalar))


def test_library_without_samples_says_so() -> None:
    with pytest.raises(ValueError, match="hold no samples"):
        SampleLibrary((np.zeros((0, 3)),))


def test_library_batch_gathers_the_rows_of_every_input() -> None:
    y = np.arange(N) * 10
    library = SampleLibrary((X, y))
    assert library.count == N
    x_batch, y_batch = library.batch([2, 0, 2, 7])
    np.testing.assert_array_equal(x_batch, X[[2, 0, 2, 7]])
    np.testing.assert_array_equal(y_batch, [20, 0, 20, 70])
    # The samples are in memory already: LoadGen's load and unload have nothing to do.
    library.load([0, 1])
    library.unload([0, 1])


def test_library_batch_gathers_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    x = torch.arange(12.0).reshape(6, 2)
    library = SampleLibrary((x, np.arange(6)))
    xb, yb = library.batch([5, 1])
    assert isinstance(xb, torch.Tensor)
    assert xb.tolist() == [[10.0, 11.0], [2.0, 3.0]]
    assert yb.tolist() == [5, 1]


def test_torch_outputs_are_answered_with_their_bytes_or_without_when_numpy_lacks_the_dtype(
    harness: Harness,
) -> None:
    torch = pytest.importorskip("torch")
    x = torch.arange(12.0).reshape(6, 2)

    def model(dtype: Any) -> Caller:
        return lambda batch: batch[0].to(dtype) * 2

    sut = harness.sut([model(torch.float32)], inputs=(x,), max_batch=4, keep_outputs=True)
    sut.issue(queries(range(3)))
    harness.lg.wait_for(3)
    assert {size for _, _, size in harness.lg.responses} == {2 * 4}
    assert all(ptr != 0 for _, ptr, _ in harness.lg.responses)
    # numpy has no bfloat16: the bytes are the float32 values, and the outputs are kept as they were.
    lg = harness.lg
    before = len(lg.responses)
    bf16 = harness.sut([model(torch.bfloat16)], inputs=(x,), max_batch=4, keep_outputs=True)
    issued = queries(range(3), first_id=5000)
    bf16.issue(issued)
    lg.wait_for(before + 3)
    assert bf16.error is None
    assert all(ptr != 0 and size == 2 * 4 for _, ptr, size in lg.responses[before:])
    assert bf16.outputs[1].tolist() == [4.0, 6.0]
    assert bf16.outputs[1].dtype == torch.bfloat16
    # Outputs that are Python objects have no bytes to log: answered without, and kept.
    before = len(lg.responses)
    objects = harness.sut(
        [lambda batch: np.array([object()] * len(batch[0]), dtype=object)],
        inputs=(x,),
        max_batch=4,
        keep_outputs=True,
    )
    objects.issue(queries(range(3), first_id=6000))
    lg.wait_for(before + 3)
    assert objects.error is None
    assert [(ptr, size) for _, ptr, size in lg.responses[before:]] == [(0, 0)] * 3
    assert len(objects.outputs) == 3


def test_capacity_is_instances_times_batch_over_batch_time() -> None:
    assert capacity_qps(0.01, 8, 2) == pytest.approx(1600.0)
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="finite number of seconds > 0"):
            capacity_qps(bad, 8, 1)


# --- a model whose calls hold the GIL -----------------------------------------------------------------


@pytest.mark.parametrize("own_process", [True, False])
def test_loadgen_issues_queries_while_a_poptorch_call_holds_the_gil(
    harness: Harness, tmp_path: Path, own_process: bool
) -> None:
    """``ipu_compile`` gives a test that uses ``ipu_loadgen`` its PopTorch model in a worker process
    (``own_process``): LoadGen's issue callback then runs during a call that holds the GIL, so some
    query is issued strictly inside a call's span. In the test's own process (``False``, as before)
    no thread runs during a call, and none is."""
    torch = pytest.importorskip("torch")
    from pytest_ipu.backends.base import Grouped
    from pytest_ipu.devices.request import DeviceRequest
    from pytest_ipu.run.compiling import CompileCache
    from tests.unit.slow_poptorch import SlowPopTorch
    from tests.unit.slow_poptorch import read_spans

    def backend_for(name: str, device: str) -> SlowPopTorch:
        return SlowPopTorch(str(tmp_path), 0.1, name, device)

    samples = torch.arange(N * 3, dtype=torch.float32).reshape(N, 3)
    cache = CompileCache()
    compiled = cache.compile(
        backend_for("poptorch", "ipu"),
        torch.nn.Linear(3, 2).eval(),
        (samples[:1],),
        precision="fp32",
        key="linear",
        options={},
        placement=DeviceRequest(),
        user="test",
        parity=False,
        backend_for=backend_for,
        own_process=own_process,
    )
    try:
        if own_process:
            assert isinstance(compiled, Grouped)
            assert compiled.group.runner == "processes"
            callers: list[Caller] = [functools.partial(compiled.group.call, 0)]
        else:
            callers = [lambda batch: compiled.run(*compiled.prepare_inputs(batch))]
        sut = harness.sut(callers, inputs=(samples,), max_batch=1)
        issued = queries(range(8))
        issue_ns = []
        for query in issued:  # this thread is LoadGen's issue thread, a query every few ms
            sut.issue([query])
            issue_ns.append(time.monotonic_ns())
            time.sleep(0.02)
        harness.lg.wait_for(len(issued))
        assert sut.error is None
    finally:
        harness.finish()
        cache.close()
    spans = [span for recorded in read_spans(tmp_path).values() for span in recorded]
    assert len(spans) == 8  # a call per query (max_batch=1)
    during = [t for t in issue_ns if any(start < t < end for start, end in spans)]
    assert bool(during) is own_process, (issue_ns, spans)


@pytest.mark.parametrize(
    "value",
    [np.zeros((8, 4)), np.float64(1.0), {"x": 1}, "ab", b"ab", 3, None, (np.zeros((2, 1)),), [np.ones(2)]],
    ids=lambda v: type(v).__name__,
)
def test_benchmark_inputs_and_loadgen_samples_refuse_the_same_values_naming_them_alike(value: object) -> None:
    from pytest_ipu.errors import BenchmarkArgumentTypeError
    from pytest_ipu.inputs import not_positional
    from pytest_ipu.run.benchmark import check_arguments

    wrong = not_positional(value)
    refusals = []
    with contextlib.suppress(BenchmarkArgumentTypeError):
        check_arguments(lambda *a: None, value)
        refusals.append(None)
    with contextlib.suppress(ValueError):
        SampleLibrary(value)  # type: ignore[arg-type]
        refusals.append(None)
    assert refusals == ([] if wrong else [None, None])
    if wrong is not None:
        with pytest.raises(BenchmarkArgumentTypeError, match=re.escape(f"inputs={wrong.value})")):
            check_arguments(lambda *a: None, value)
        with pytest.raises(ValueError, match=re.escape(f"samples={wrong.value}:")):
            SampleLibrary(value)  # type: ignore[arg-type]
        assert wrong.one_array == hasattr(value, "shape")  # a tensor, an array, a numpy scalar
