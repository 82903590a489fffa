"""LoadGen's query sample library and the batching system under test.

``SampleLibrary`` holds the user's inputs, already in memory (LoadGen's load and unload calls have
nothing to do): sample ``i`` is row ``i`` of every input, and a batch is those rows gathered
(``x[[i, j, ...]]``, which numpy and torch both understand). ``BatchingSut`` is LoadGen's system under
test: its callbacks only queue samples; one worker thread per instance runs the batches, whatever the
scenario. Every callback catches everything (an exception escaping into LoadGen's C++ would end the
process), and each sample is answered exactly once (after a failed batch, at once, without running the
model).

Documented in docs/loadgen.md (section "The batching system under test").
"""

from __future__ import annotations

import math
import threading
import time
import traceback
from collections import Counter
from collections import deque
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from pytest_ipu.backports import zip_strict
from pytest_ipu.inputs import not_positional

#: Seconds between the call-timeout monitor's looks at the workers, at most.
_POLL_S = 0.5


class SampleLibrary:
    """The user's samples: row ``i`` of every input is sample ``i``.

    Raises ``ValueError`` naming the input when one has no leading dimension, the inputs disagree on
    the sample count, or there are none.
    """

    def __init__(self, inputs: Sequence[object]) -> None:
        wrong = not_positional(inputs)
        if wrong is not None:
            raise ValueError(
                f"samples={wrong.value}: the samples are a tuple of inputs"
                + (", not one tensor or array; pass (x,)" if wrong.one_array else "; pass (x,) or (x, y)")
            )
        if not inputs:
            raise ValueError("no inputs: pass the samples as (x,) or (x, y), each with one row per sample")
        counts = []
        for position, value in enumerate(inputs):
            try:
                counts.append(len(value))  # type: ignore[arg-type]
            except TypeError:
                raise ValueError(
                    f"input {position} ({type(value).__name__}) has no leading dimension of samples; "
                    "pass tensors or arrays with one row per sample"
                ) from None
        if len(set(counts)) != 1:
            raise ValueError(
                f"the inputs have different sample counts {counts}; every input needs one row per sample"
            )
        if counts[0] < 1:
            raise ValueError("the inputs hold no samples (their leading dimension is 0)")
        self.inputs = tuple(inputs)
        #: How many samples.
        self.count = counts[0]

    def batch(self, indices: Sequence[int]) -> tuple[object, ...]:
        """The samples ``indices`` as one batch of every input, in that order."""
        rows = list(indices)
        return tuple(value[rows] for value in self.inputs)  # type: ignore[index]

    # LoadGen's load/unload callbacks: the samples are in memory already.
    def load(self, indices: Sequence[int]) -> None:
        """LoadGen's "load these samples" (nothing to do: they are in memory)."""

    def unload(self, indices: Sequence[int]) -> None:
        """LoadGen's "unload these samples" (nothing to do)."""


def split_outputs(outputs: object, count: int) -> list[object]:
    """One batch's outputs as ``count`` per-sample outputs: row ``j`` of a tensor or array, of each
    member of a tuple or list, of each value of a mapping."""
    if isinstance(outputs, Mapping):
        return [{k: v[j] for k, v in outputs.items()} for j in range(count)]
    if isinstance(outputs, (tuple, list)):
        return [type(outputs)(o[j] for o in outputs) for j in range(count)]
    return [outputs[j] for j in range(count)]  # type: ignore[index]


def _as_bytes_array(output: object) -> Any:
    """A sample's first output as a contiguous numpy array (LoadGen's accuracy log copies its bytes),
    or ``None`` when it is not array-like."""
    import numpy as np

    from pytest_ipu.placement.instances import to_host

    first = output
    while isinstance(first, (tuple, list)) and first:
        first = first[0]
    if isinstance(first, Mapping):
        first = next(iter(first.values()), None)
    try:
        # A tensor to a numpy array on the host (torch's bfloat16, which numpy lacks, as float32).
        array = np.ascontiguousarray(to_host(first))
    except (TypeError, ValueError, RuntimeError):
        array = None
    # Not numbers (Python objects' bytes are pointers): no bytes for LoadGen's accuracy log, but the
    # sample is still answered (an exception here would leave it unanswered and LoadGen waiting for
    # ever) and its outputs are kept for the score.
    return None if array is None or array.dtype.hasobject else array


@dataclass
class _Sample:
    #: LoadGen's response id.
    id: int
    #: Its sample's index in the library.
    index: int
    #: When it was queued (``time.perf_counter``).
    queued: float


@dataclass
class _Slot:
    """One worker: its instance and the batch it is running."""

    index: int
    call: Callable[[tuple[object, ...]], object]
    busy_since: float | None = None
    batch: list[_Sample] = field(default_factory=list)
    batches: int = 0


@dataclass(frozen=True)
class SutStats:
    """What the system under test did: the batches it ran and how they were spread."""

    #: Batches run, every instance together.
    batches: int
    #: Samples answered with the model's outputs.
    samples: int
    #: How many batches had each size (samples, before padding).
    batch_sizes: Mapping[int, int]
    #: Batches run by each instance, in instance order.
    instance_batches: tuple[int, ...]

    @property
    def mean_batch(self) -> float | None:
        """Samples per batch, on average; ``None`` when no batch ran."""
        return None if self.batches == 0 else self.samples / self.batches


class BatchingSut:
    """LoadGen's system under test over ``callers`` (one per instance: ``call(batch) -> outputs``).

    ``lg`` is the ``mlperf_loadgen`` module. ``max_batch`` caps a batch; ``timeout_s`` is how long a
    worker waits for a batch to fill after its first sample was queued; ``pad_to`` pads a shorter
    batch by repeating its last sample (a model compiled for one batch size), the padding's outputs
    dropped; ``keep_outputs`` keeps each sample's outputs (accuracy mode) and hands LoadGen the
    bytes of its first output for the accuracy log. ``call_timeout_s`` ends the run when a batch
    runs longer (``None``: never). ``start`` the workers before LoadGen's test, ``close`` after it.
    """

    def __init__(
        self,
        lg: Any,
        library: SampleLibrary,
        callers: Sequence[Callable[[tuple[object, ...]], object]],
        *,
        max_batch: int,
        timeout_s: float = 0.0,
        pad_to: int | None = None,
        keep_outputs: bool = False,
        call_timeout_s: float | None = None,
    ) -> None:
        if not callers:
            raise ValueError("a system under test needs at least one instance to call")
        self._lg = lg
        self.library = library
        self.max_batch = max_batch
        self.timeout_s = timeout_s
        self.pad_to = pad_to
        self.keep_outputs = keep_outputs
        self.call_timeout_s = call_timeout_s
        #: Each sample's outputs by its index, when ``keep_outputs``.
        self.outputs: dict[int, object] = {}
        #: When ``keep_outputs`` (accuracy mode, where LoadGen times nothing): each answered sample's
        #: time from LoadGen's issue callback to its answer, seconds, and the first issue and last
        #: answer (``time.perf_counter``).
        self.answer_latencies_s: list[float] = []
        self.span: tuple[float, float] | None = None
        #: The first failure, one line; ``None`` while every batch has run.
        self.error: str | None = None
        #: The exception behind ``error`` (``None`` for a call timeout), for the traceback.
        self.exception: BaseException | None = None
        #: Samples answered without running the model, after a failure.
        self.unrun = 0
        #: The traceback of ``exception``, as text (a worker thread's is otherwise lost).
        self.traceback = ""
        self._slots = [_Slot(i, call) for i, call in enumerate(callers)]
        self._queue: deque[_Sample] = deque()
        self._cond = threading.Condition()
        self._answered: set[int] = set()
        self._answer_lock = threading.Lock()
        self._sizes: Counter[int] = Counter()
        self._flushing = False
        self._closing = False
        self._threads: list[threading.Thread] = []

    # --- LoadGen's callbacks ----------------------------------------------------------------------

    def issue(self, query_samples: Sequence[Any]) -> None:
        """LoadGen's ``issue_queries``: queue the samples (answered at once after a failure)."""
        try:
            now = time.perf_counter()
            samples = [_Sample(int(q.id), int(q.index), now) for q in query_samples]
            with self._cond:
                if self.error is None:
                    self._queue.extend(samples)
                    self._cond.notify_all()
                    return
            self._answer_unrun(samples)
        except BaseException as exc:  # never into LoadGen's C++: it would end the process
            self._fail(f"queueing LoadGen's query failed: {_describe(exc)}", exc)

    def flush(self) -> None:
        """LoadGen's ``flush_queries``: no more samples are coming soon, so batches stop waiting."""
        with self._cond:
            self._flushing = True
            self._cond.notify_all()

    # --- life cycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start one worker per instance, and the call-timeout monitor when there is a timeout."""
        for slot in self._slots:
            thread = threading.Thread(
                target=self._work, args=(slot,), name=f"pytest-ipu-loadgen-{slot.index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        if self.call_timeout_s is not None:
            monitor = threading.Thread(target=self._monitor, name="pytest-ipu-loadgen-watch", daemon=True)
            monitor.start()
            self._threads.append(monitor)

    def close(self, wait_s: float = 5.0) -> None:
        """Stop the workers (each finishes its batch); a worker stuck in a call is left, as a daemon
        thread, after ``wait_s``. Samples still queued are answered unrun."""
        with self._cond:
            self._closing = True
            left = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        if left:
            self._answer_unrun(left)
        deadline = time.monotonic() + wait_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def stats(self) -> SutStats:
        """The batches run so far."""
        with self._answer_lock:
            sizes = dict(sorted(self._sizes.items()))
        return SutStats(
            batches=sum(sizes.values()),
            samples=sum(size * n for size, n in sizes.items()),
            batch_sizes=sizes,
            instance_batches=tuple(s.batches for s in self._slots),
        )

    # --- the workers ------------------------------------------------------------------------------

    def _take(self) -> list[_Sample] | None:
        """The next batch, or ``None`` when closing with nothing queued."""
        with self._cond:
            while not self._queue:
                if self._closing:
                    return None
                self._cond.wait()
            if self.timeout_s > 0:
                deadline = self._queue[0].queued + self.timeout_s
                while (
                    0 < len(self._queue) < self.max_batch
                    and not (self._flushing or self._closing)
                    and (remaining := deadline - time.perf_counter()) > 0
                ):
                    self._cond.wait(remaining)
                if not self._queue:  # another worker took them while this one waited
                    return []
            return [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]

    def _work(self, slot: _Slot) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            if not batch:
                continue
            if self.error is not None:
                self._answer_unrun(batch)
                continue
            self._run(slot, batch)

    def _run(self, slot: _Slot, batch: list[_Sample]) -> None:
        indices = [s.index for s in batch]
        if self.pad_to is not None and len(indices) < self.pad_to:
            indices += [indices[-1]] * (self.pad_to - len(indices))
        slot.batch = batch
        slot.busy_since = time.monotonic()
        try:
            outputs = slot.call(self.library.batch(indices))
            kept = split_outputs(outputs, len(batch)) if self.keep_outputs else None
        except BaseException as exc:
            slot.busy_since = None
            self._fail(
                f"instance {slot.index} failed on a batch of {len(batch)} sample(s) "
                f"(indices {_some(indices[: len(batch)])}): {_describe(exc)}",
                exc,
            )
            self._answer_unrun(batch)
            return
        slot.busy_since = None
        slot.batches += 1
        self._answer(batch, kept)

    def _monitor(self) -> None:
        assert self.call_timeout_s is not None
        poll = min(_POLL_S, self.call_timeout_s / 10)
        while not self._closing and self.error is None:
            time.sleep(poll)
            now = time.monotonic()
            for slot in self._slots:
                since = slot.busy_since
                if since is not None and now - since > self.call_timeout_s:
                    self._fail(
                        f"a call of instance {slot.index} on a batch of {len(slot.batch)} sample(s) was "
                        f"still running after {self.call_timeout_s:g} s (--ipu-call-timeout); raise the "
                        "timeout if the model is this slow",
                        None,
                    )
                    self._answer_unrun(list(slot.batch))
                    return

    # --- answers ----------------------------------------------------------------------------------

    def _fail(self, message: str, exc: BaseException | None) -> None:
        """Record the first failure; every sample queued from now on is answered unrun."""
        with self._cond:
            if self.error is None:
                self.error = message
                self.exception = exc
                if exc is not None:
                    # Kept as text too: the traceback of a worker thread is otherwise lost.
                    self.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            left = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        if left:
            self._answer_unrun(left)

    def _claim(self, samples: Sequence[_Sample]) -> list[_Sample]:
        """The samples not answered yet, now marked answered: each is answered exactly once."""
        with self._answer_lock:
            fresh = [s for s in samples if s.id not in self._answered]
            self._answered.update(s.id for s in fresh)
        return fresh

    def _answer_unrun(self, samples: Sequence[_Sample]) -> None:
        fresh = self._claim(samples)
        if not fresh:
            return
        with self._answer_lock:
            self.unrun += len(fresh)
        self._respond([self._lg.QuerySampleResponse(s.id, 0, 0) for s in fresh])

    def _answer(self, batch: list[_Sample], kept: list[object] | None) -> None:
        fresh = self._claim(batch)
        if not fresh:  # the call timeout answered them while the call ran
            return
        with self._answer_lock:
            self._sizes[len(batch)] += 1
        if kept is None:
            self._respond([self._lg.QuerySampleResponse(s.id, 0, 0) for s in fresh])
            return
        done = time.perf_counter()
        with self._answer_lock:
            self.answer_latencies_s.extend(done - s.queued for s in fresh)
            first = min(s.queued for s in fresh)
            self.span = (first, done) if self.span is None else (min(self.span[0], first), done)
        arrays = []
        responses = []
        by_id = {s.id: out for s, out in zip_strict(batch, kept)}
        for sample in fresh:
            output = by_id[sample.id]
            self.outputs[sample.index] = output
            data = _as_bytes_array(output)
            arrays.append(data)  # alive until LoadGen has copied the bytes
            if data is None:
                responses.append(self._lg.QuerySampleResponse(sample.id, 0, 0))
            else:
                responses.append(self._lg.QuerySampleResponse(sample.id, data.ctypes.data, data.nbytes))
        self._respond(responses)

    def _respond(self, responses: list[Any]) -> None:
        try:
            self._lg.QuerySamplesComplete(responses)
        except BaseException as exc:  # pragma: no cover - LoadGen's own failure
            with self._cond:
                if self.error is None:
                    self.error = f"LoadGen refused the answers: {_describe(exc)}"
                    self.exception = exc


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _some(values: Sequence[int], most: int = 8) -> str:
    shown = ", ".join(str(v) for v in values[:most])
    return f"{shown}, ..." if len(values) > most else shown


def capacity_qps(batch_s: float, batch: int, instances: int) -> float:
    """The most samples per second ``instances`` instances can answer when each call of a batch of
    ``batch`` takes ``batch_s`` seconds: an upper bound of any scenario's throughput."""
    if not (batch_s > 0 and math.isfinite(batch_s)):
        raise ValueError(f"a batch's time must be a finite number of seconds > 0, got {batch_s!r}")
    return instances * batch / batch_s
