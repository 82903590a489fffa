"""Several independent instances of one compiled model, called concurrently in rounds.

A multi-instance benchmark (say, one model per IPU, all busy at once) makes one synchronous call on
every instance per round and waits for all of them; throughput is then summed over the instances
in one wall-clock window, while latency stays per instance.

Two runners share the ``InstanceGroup`` interface:

- ``ThreadInstances`` calls models compiled in this process from one thread each. That is real
  concurrency for runtimes that release the GIL during a call (PopART ``session.run``, torch and
  ONNX Runtime kernels).
- ``ProcessInstances`` compiles and calls each instance in a worker process of its own, for runtimes
  that hold the GIL for the whole call (PopTorch). Workers are started with ``spawn``, never
  ``fork``: forking a process that has started an SDK's threads can deadlock the child.

Each instance times its own calls (``time.perf_counter_ns`` just around the call), so latencies do
not include the cost of telling the instances to start. A worker process sends its own CPU clock
(``time.process_time_ns``, every thread of it) with every reply, so that the host CPU time of a
benchmark counts the workers as well as this process, without a request of its own. Ctrl-C ends a
round within ``processes.WAIT_SLICE_S`` whenever it comes, its calls still running: every wait is
sliced, and the group is then unusable until ``close``. Importing this module imports no runtime.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import cast

from pytest_ipu.backports import zip_strict
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import CompileError

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from pytest_ipu.backends.base import Backend
    from pytest_ipu.backends.base import CompiledModel

from pytest_ipu.backends.base import HasDeviceLatency
from pytest_ipu.backends.base import InstanceGroup
from pytest_ipu.processes import FAILED
from pytest_ipu.processes import START_METHODS
from pytest_ipu.processes import Worker
from pytest_ipu.processes import WorkerGone
from pytest_ipu.processes import WorkerTimeout
from pytest_ipu.processes import child_requests
from pytest_ipu.processes import describe_error
from pytest_ipu.processes import send_reply
from pytest_ipu.processes import wait_in_slices
from pytest_ipu.results.records import InstanceInfo

__all__ = [
    "InstanceError",
    "InstanceGroup",
    "InstanceInfo",
    "InstanceSpec",
    "ProcessInstances",
    "ThreadInstances",
]


class InstanceError(RuntimeError):
    """One instance of an ``InstanceGroup`` failed (a call, its preparation, its worker, or its close).

    ``index`` is the first failing instance; the instance's own exception, when it was raised in
    this process, is the ``__cause__``.
    """

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


def _durations_s(spans: Sequence[Sequence[tuple[int, int]]]) -> list[list[float]]:
    """Per instance, each call's duration in seconds, from its (start, end) nanoseconds."""
    return [[(end - start) * 1e-9 for start, end in calls] for calls in spans]


def _check_index(index: int, count: int) -> None:
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
        raise IndexError(f"instance index {index!r} is out of range; this group has instances 0..{count - 1}")


def _some_ready(wait: Callable[..., list[Any]], conns: list[Any], found: list[Any], slice_s: float) -> bool:
    """Whether one of ``conns`` is ready within ``slice_s`` (``multiprocessing.connection.wait``);
    those that are, in ``found``."""
    found[:] = wait(conns, timeout=slice_s)
    return bool(found)


def _close_failures(failures: Sequence[tuple[int, str]]) -> InstanceError:
    listed = "; ".join(f"instance {i}: {text}" for i, text in failures)
    return InstanceError(
        f"closing {len(failures)} instance(s) failed, after every instance was released: {listed}",
        failures[0][0],
    )


# -- threads ------------------------------------------------------------------------------------


class _Usable:
    """What both runners share: a group becomes unusable once closed, or broken by a failed round,
    and runs rounds only on prepared inputs."""

    runner = ""
    _broken: str | None = None
    _closed = False
    _prepared = False
    _rounds = 0

    def _start_round(self) -> None:
        self._check_usable("run a round")
        if not self._prepared:
            raise RuntimeError("call prepare(inputs) before round(): the instances have no inputs yet")
        self._rounds += 1

    def _check_usable(self, action: str) -> None:
        if self._closed:
            raise RuntimeError(
                f"cannot {action}: this {self.runner} instance group was closed; build a new one"
            )
        if self._broken is not None:
            raise RuntimeError(
                f"cannot {action}: this {self.runner} instance group is unusable since {self._broken}; "
                "close it and build a new one"
            )


class _Slot:
    """One instance's thread and what it shares with the caller's thread.

    ``go`` and ``done`` are plain locks used as binary semaphores, both held by the caller while
    the thread is idle: releasing ``go`` starts one call and the thread releases ``done`` when it
    has finished. Plain locks are the cheapest hand-off ``threading`` offers (a ``Barrier`` or an
    ``Event`` goes through a ``Condition`` and costs more per round).
    """

    def __init__(self, index: int, compiled: CompiledModel) -> None:
        self.index = index
        self.compiled = compiled
        self.go = threading.Lock()
        self.done = threading.Lock()
        self.go.acquire()
        self.done.acquire()
        self.args: tuple[object, ...] | None = None
        #: Each ``round`` call's (start, end), ``time.perf_counter_ns`` values taken around the call.
        self.spans_ns: list[tuple[int, int]] = []
        self.error: BaseException | None = None
        self.stop = False
        self.thread = threading.Thread(target=self._loop, name=f"pytest-ipu-instance-{index}", daemon=True)

    def _loop(self) -> None:
        clock = time.perf_counter_ns
        run = self.compiled.run
        while True:
            self.go.acquire()
            if self.stop:
                return
            try:
                args = self.args if self.args is not None else ()
                start = clock()
                run(*args)
                end = clock()
                self.spans_ns.append((start, end))
            except BaseException as exc:  # every failure goes back to the caller's thread
                self.error = exc
            finally:
                self.done.release()


class ThreadInstances(_Usable):
    """Instances compiled in this process, each called from a persistent thread of its own.

    ``compiled`` are the instances, already compiled (one per device, say); the group owns them and
    ``close`` closes them. Real concurrency needs a runtime whose call releases the GIL.
    ``timeout_s`` bounds how long ``round`` waits for the instances (``None``: forever);
    ``join_timeout_s`` bounds how long ``close`` waits for a call still running.
    """

    runner = "threads"

    def __init__(
        self,
        compiled: Sequence[CompiledModel],
        *,
        timeout_s: float | None = None,
        join_timeout_s: float = 60.0,
    ) -> None:
        if not compiled:
            raise ValueError("ThreadInstances needs at least one compiled model, got none")
        self.count = len(compiled)
        self._timeout_s = timeout_s
        self._join_timeout_s = join_timeout_s
        self._slots = [_Slot(i, c) for i, c in enumerate(compiled)]
        self._rounds = 0
        self._broken: str | None = None
        self._closed = False
        self._prepared = False
        for slot in self._slots:
            slot.thread.start()

    def prepare(self, inputs: Sequence[object]) -> None:
        """Every instance's ``prepare_inputs(inputs)``, in this thread, kept for ``round``."""
        self._check_usable("prepare inputs")
        self._prepared = False  # until every instance has the new inputs
        for slot in self._slots:
            try:
                slot.args = tuple(slot.compiled.prepare_inputs(tuple(inputs)))
            except Exception as exc:
                raise InstanceError(
                    f"instance {slot.index} ({slot.compiled.target}) could not prepare its inputs: "
                    f"{describe_error(exc)}",
                    slot.index,
                ) from exc
        self._prepared = True

    def round(self) -> None:
        """Start every instance's call, wait for all; ``InstanceError`` for the lowest failing index."""
        self._start_round()
        try:
            for slot in self._slots:
                slot.go.release()
            deadline = None if self._timeout_s is None else time.monotonic() + self._timeout_s
            for slot in self._slots:
                # In slices (``wait_in_slices``): one long wait would defer a Ctrl-C that arrived just
                # before it blocked until the calls ended.
                left_s = None if deadline is None else deadline - time.monotonic()
                if not wait_in_slices(functools.partial(slot.done.acquire, True), left_s):
                    self._broken = (
                        f"instance {slot.index} ({slot.compiled.target}) did not finish round "
                        f"{self._rounds} within timeout_s={self._timeout_s:g}"
                    )
                    raise InstanceError(
                        f"{self._broken}; raise timeout_s if its calls are that slow", slot.index
                    )
        except BaseException:
            # Interrupted (or timed out) with calls in flight: the hand-off locks are out of step.
            if self._broken is None:
                self._broken = f"round {self._rounds} was interrupted"
            raise
        for slot in self._slots:
            error = slot.error
            if error is not None:
                self._broken = (
                    f"instance {slot.index} ({slot.compiled.target}) failed in round {self._rounds}"
                )
                raise InstanceError(f"{self._broken}: {describe_error(error)}", slot.index) from error

    def call(self, index: int, inputs: Sequence[object]) -> object:
        """Instance ``index``'s ``run`` on freshly prepared ``inputs``, in this thread; its failure is an
        ``InstanceError`` but leaves the group usable (no other instance was involved)."""
        _check_index(index, self.count)
        self._check_usable("call an instance")
        compiled = self._slots[index].compiled
        try:
            return compiled.run(*compiled.prepare_inputs(tuple(inputs)))
        except Exception as exc:
            raise InstanceError(
                f"instance {index} ({compiled.target}) failed in a call: {describe_error(exc)}", index
            ) from exc

    def reset_latencies(self) -> None:
        """Forget the call durations recorded so far."""
        for slot in self._slots:
            slot.spans_ns.clear()

    def latencies_s(self) -> list[list[float]]:
        """Per instance, each ``round`` call's duration in seconds, oldest first."""
        return _durations_s(self.spans_ns())

    def spans_ns(self) -> list[list[tuple[int, int]]]:
        """Per instance, each ``round`` call's (start, end) as ``time.perf_counter_ns`` values taken
        just around the call, oldest first: two calls overlapped when each started before the other
        ended."""
        return [list(slot.spans_ns) for slot in self._slots]

    def device_latencies(self) -> list[Mapping[str, object] | None]:
        """Each compiled model's own latency counters for its last call, where it has them."""
        self._check_usable("read device latencies")
        return [
            slot.compiled.device_latency() if isinstance(slot.compiled, HasDeviceLatency) else None
            for slot in self._slots
        ]

    def workers_cpu_ns(self) -> int | None:
        """``None``: the instances run in this process's threads, which its own clock counts."""
        return None

    def process_ids(self) -> tuple[int, ...]:
        """This process: the instances run in its threads."""
        return (os.getpid(),)

    def compiled_info(self) -> list[InstanceInfo]:
        """Each compiled model's target, device, compile time, phases and facts."""
        return [
            InstanceInfo(
                index=slot.index,
                target=slot.compiled.target,
                device=slot.compiled.device,
                device_name=slot.compiled.device_name,
                compile_s=slot.compiled.compile_s,
                phases_s=dict(slot.compiled.phases_s),
                info=dict(slot.compiled.info),
            )
            for slot in self._slots
        ]

    def close(self) -> None:
        """Stop and join every thread, then close every compiled model; failures are raised at the end.

        A model whose call is still running after ``join_timeout_s`` is not closed under it (that
        could crash the runtime); its thread is a daemon and is left to finish, and the failure
        says so.
        """
        if self._closed:
            return
        self._closed = True
        failures: list[tuple[int, str]] = []
        for slot in self._slots:
            slot.stop = True
            # A thread between calls waits on ``go``; one still in a call sees ``stop`` afterwards.
            with contextlib.suppress(RuntimeError):  # already released by an interrupted round
                slot.go.release()
        deadline = time.monotonic() + self._join_timeout_s
        for slot in self._slots:
            slot.thread.join(max(0.0, deadline - time.monotonic()))
        for slot in self._slots:
            if slot.thread.is_alive():
                failures.append(
                    (
                        slot.index,
                        f"its call was still running after join_timeout_s={self._join_timeout_s:g}, so "
                        f"{slot.compiled.target} was left open; raise join_timeout_s",
                    )
                )
                continue
            try:
                slot.compiled.close()
            except Exception as exc:
                failures.append((slot.index, f"{slot.compiled.target} close() raised {describe_error(exc)}"))
        if failures:
            raise _close_failures(failures)


# -- processes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceSpec:
    """How a worker process builds and compiles one instance: ``factory().compile(model,
    example_inputs, precision, options)``.

    Everything is pickled to the worker: ``factory`` must be a picklable zero-argument callable
    (a module-level function, a class, or a ``functools.partial`` of one) returning a ``Backend``,
    and ``model`` must pickle too (a ``torch.nn.Module`` whose class is importable does).
    ``index`` is the instance's position in its group.
    """

    index: int
    factory: Callable[[], Backend]
    model: object
    example_inputs: Sequence[object]
    precision: str
    options: Mapping[str, object] = field(default_factory=dict)


# Requests, parent to worker.
_PREPARE = "prepare"
_ROUND = "round"
_CALL = "call"
_DEVICE_LATENCY = "device_latency"
_CLOSE = "close"
# Replies, worker to parent (a failure's is ``processes.FAILED``).
_OK = "ok"
_UNAVAILABLE = "unavailable"
_CLOSED = "closed"
#: The round request never changes: pickled once, sent as bytes.
_ROUND_BYTES = pickle.dumps((_ROUND,), protocol=pickle.HIGHEST_PROTOCOL)
_CLOSE_BYTES = pickle.dumps((_CLOSE,), protocol=pickle.HIGHEST_PROTOCOL)
#: After ``terminate`` (SIGTERM), or after its pipe closed, how long a worker has before ``kill``.
_TERMINATE_GRACE_S = 5.0


def to_host(value: object) -> object:
    """``value`` with every tensor as a numpy array (tuples, lists and dicts kept), so that the
    parent can unpickle it without the runtime."""
    import numpy

    if isinstance(value, (numpy.ndarray, numpy.generic, int, float, complex, bool, str, bytes)):
        return value
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        return type(value)(to_host(v) for v in value)
    if isinstance(value, dict):
        return {k: to_host(v) for k, v in value.items()}
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
        tensor: Any = value.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":  # numpy has no bfloat16
            tensor = tensor.float()
        return tensor.numpy()
    return numpy.asarray(value)


def _worker_main(conn: Connection, index: int, payload: bytes) -> None:
    """A worker process (a ``processes.Worker``): build and compile instance ``index`` from its
    pickled ``InstanceSpec``, say how that went, then serve the parent's requests until it says
    close or goes away.

    Every failure travels as one line of text (``Type: message``): an exception object might not
    unpickle in the parent.
    """
    compiled: CompiledModel | None = None
    try:
        try:
            spec = pickle.loads(payload)
            backend = spec.factory()
            start = time.perf_counter_ns()
            compiled = backend.compile(spec.model, spec.example_inputs, spec.precision, spec.options)
            compile_s = (time.perf_counter_ns() - start) * 1e-9
            facts = InstanceInfo(
                index=index,
                target=compiled.target,
                device=compiled.device,
                device_name=compiled.device_name,
                compile_s=compile_s,
                phases_s=dict(compiled.phases_s),
                info=dict(compiled.info),
            )
        except BaseException as exc:
            failed = _UNAVAILABLE if isinstance(exc, BackendUnavailable) else FAILED
            send_reply(conn, (failed, describe_error(exc)))
            return
        del spec  # the compiled model has what it needs; the worker's copy of the model can go
        if send_reply(conn, (_OK, facts, time.process_time_ns())):
            compiled = _serve(conn, compiled)
    finally:
        if compiled is not None:
            # The parent is gone (or the model was not closed yet): release the device anyway.
            with contextlib.suppress(Exception):
                compiled.close()


def _serve(conn: Connection, compiled: CompiledModel) -> CompiledModel | None:
    """Answer requests; return the model if it is still open (the parent went away), else ``None``.

    Every answer (but the close report) carries this process's CPU clock, read after the work it
    answers: the parent's difference between two answers is the CPU time this worker spent on the
    second request, the wait for it and the sending of the first answer."""
    clock = time.perf_counter_ns
    cpu_clock = time.process_time_ns
    args: tuple[object, ...] = ()
    for request in child_requests(conn):
        command = request[0]
        try:
            if command == _ROUND:
                start = clock()
                compiled.run(*args)
                end = clock()
                reply: tuple[object, ...] = (_OK, (start, end))
            elif command == _PREPARE:
                args = tuple(compiled.prepare_inputs(tuple(request[1])))
                reply = (_OK, None)
            elif command == _CALL:
                reply = (_OK, to_host(compiled.run(*compiled.prepare_inputs(tuple(request[1])))))
            elif command == _DEVICE_LATENCY:
                measured = compiled.device_latency() if isinstance(compiled, HasDeviceLatency) else None
                reply = (_OK, None if measured is None else dict(measured))
            elif command == _CLOSE:
                try:
                    compiled.close()
                    error = None
                except Exception as exc:
                    error = describe_error(exc)
                send_reply(conn, (_CLOSED, error))
                return None
            else:
                reply = (FAILED, f"unknown request {command!r}")
        except Exception as exc:
            reply = (FAILED, describe_error(exc))
        if not send_reply(conn, (*reply, cpu_clock())):
            return compiled
    return compiled  # the parent is gone


class _InstanceWorker(Worker):
    """The parent's side of one instance's worker process: a ``Worker`` running ``_worker_main``,
    with the instance's index and where the exchange with it stands."""

    def __init__(self, index: int, payload: bytes, context: str) -> None:
        super().__init__(
            _worker_main,
            (index, payload),
            name=f"pytest-ipu-instance-{index}",
            context=context,
            grace_s=_TERMINATE_GRACE_S,
        )
        self.index = index
        #: ``starting`` (compiling), ``ready`` (waiting for a request), ``busy`` (answering one) or
        #: ``gone`` (found dead, already reported).
        self.state = "starting"


def _check_specs(specs: Sequence[InstanceSpec], context: str) -> None:
    """``ValueError`` for no specs, specs out of index order, or a start method other than spawn
    or forkserver."""
    if not specs:
        raise ValueError("ProcessInstances needs at least one InstanceSpec, got none")
    for position, spec in enumerate(specs):
        if spec.index != position:
            raise ValueError(
                f"InstanceSpec at position {position} has index {spec.index}; indexes must be "
                f"0..{len(specs) - 1} in order"
            )
    if context not in START_METHODS:
        raise ValueError(
            f"context={context!r}: worker processes start with {' or '.join(map(repr, START_METHODS))}; "
            "fork copies a process whose runtime threads may hold locks, which can deadlock the child"
        )


def _payload(spec: InstanceSpec, name: str) -> bytes:
    """``spec`` pickled for its worker process; ``CompileError`` where it cannot be."""
    try:
        return pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise CompileError(
            f"instance {spec.index}'s InstanceSpec ({name}) cannot be sent to a "
            f"worker process: {describe_error(exc)}; its factory and model must pickle (module-level "
            "functions and classes, functools.partial, no lambdas or local classes)"
        ) from exc


class ProcessInstances(_Usable):
    """Instances compiled and called in worker processes, one each, for runtimes that hold the GIL.

    The workers start together and compile in parallel; the constructor returns when all are ready
    (or raises, after stopping every worker: ``BackendUnavailable`` when a worker's backend found no
    device, else ``CompileError``, naming the instance). A worker's output goes to this process's
    stdout and stderr. ``start_timeout_s`` bounds the compiles (large IPU models take tens of
    minutes), ``timeout_s`` each later request (``None``: forever) and ``stop_timeout_s`` how long
    ``close`` waits for a worker to close its model and exit before terminating it. ``context`` is
    a ``multiprocessing`` start method: ``spawn`` or ``forkserver``.

    A worker closes its model and exits by itself when this process goes away.
    """

    runner = "processes"

    def __init__(
        self,
        specs: Sequence[InstanceSpec],
        *,
        start_timeout_s: float = 3600.0,
        context: str = "spawn",
        timeout_s: float | None = None,
        stop_timeout_s: float = 30.0,
    ) -> None:
        _check_specs(specs, context)
        self.count = len(specs)
        self._timeout_s = timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._names = [type(spec.model).__name__ for spec in specs]
        self._workers: list[_InstanceWorker] = []
        self._info: list[InstanceInfo] = []
        self._spans_ns: list[list[tuple[int, int]]] = [[] for _ in specs]
        # Each worker's CPU clock at its latest reply (its compile report first), ns.
        self._cpu_ns: list[int | None] = [None for _ in specs]
        self._rounds = 0
        self._broken: str | None = None
        self._closed = False
        self._prepared = False
        payloads = [_payload(spec, self._names[spec.index]) for spec in specs]
        try:
            for spec, payload in zip_strict(specs, payloads):
                # A worker of a group never closed is abandoned: its pipe closed, then it is stopped.
                self._workers.append(_InstanceWorker(spec.index, payload, context))
            self._info = self._wait_ready(start_timeout_s)
        except BaseException:
            self._release()
            raise

    # -- starting ---------------------------------------------------------------------------------

    def _wait_ready(self, timeout_s: float) -> list[InstanceInfo]:
        """Each worker's compile report, in whatever order they come; the first failure raises."""
        from multiprocessing.connection import wait

        info: dict[int, InstanceInfo] = {}
        deadline = time.monotonic() + timeout_s
        while len(info) < self.count:
            pending = [w.conn for w in self._workers if w.index not in info]
            ready: list[Any] = []
            # In slices (``wait_in_slices``), so that Ctrl-C is acted on within one however it fell.
            if not wait_in_slices(
                functools.partial(_some_ready, wait, pending, ready), deadline - time.monotonic()
            ):
                late = ", ".join(str(w.index) for w in self._workers if w.index not in info)
                raise CompileError(
                    f"instance(s) {late} did not finish compiling {self._names[0]} within "
                    f"start_timeout_s={timeout_s:g}; raise start_timeout_s"
                )
            for worker in [w for w in self._workers if w.conn in ready]:
                try:
                    reply = worker.receive(None)
                except WorkerGone:
                    worker.state = "gone"
                    raise CompileError(
                        f"instance {worker.index}'s worker process ({self._describe_exit(worker)}) ended "
                        f"before it had compiled {self._names[worker.index]}; its output above says why"
                    ) from None
                if reply[0] != _OK:
                    error = BackendUnavailable if reply[0] == _UNAVAILABLE else CompileError
                    raise error(
                        f"instance {worker.index} of {self.count} could not compile "
                        f"{self._names[worker.index]} in its worker process: {reply[1]}"
                    )
                worker.state = "ready"
                info[worker.index] = reply[1]
                self._note_cpu(worker.index, reply)
        return [info[i] for i in range(self.count)]

    def _note_cpu(self, index: int, reply: tuple[object, ...]) -> None:
        """Keep the CPU clock a worker's reply carries (a reply that could not be pickled has none:
        the next one's reading then covers both requests)."""
        if len(reply) > 2:
            self._cpu_ns[index] = cast(int, reply[2])

    def _describe_exit(self, worker: _InstanceWorker) -> str:
        """``pid N, exit code C`` once the process has ended (waits up to a second for it)."""
        return worker.exit_status()

    # -- requests ---------------------------------------------------------------------------------

    def _exchange(
        self, workers: Sequence[_InstanceWorker], request: bytes, what: str, fatal: bool
    ) -> list[object]:
        """Send ``request`` to every worker in ``workers``, then collect each reply's value.

        The lowest failing index is raised after every reply was collected. A dead worker, a
        timeout or an interrupt leaves the group unusable, and so does a worker's own failure when
        ``fatal``; otherwise the worker answered and is still in step.
        """
        broken = False
        failures: dict[int, str] = {}
        values: list[object] = [None] * len(workers)
        try:
            broken = self._send_all(workers, request, failures)
            deadline = None if self._timeout_s is None else time.monotonic() + self._timeout_s
            for position, worker in enumerate(workers):
                if worker.state != "busy":
                    continue
                try:
                    reply = worker.receive(None if deadline is None else deadline - time.monotonic())
                except WorkerTimeout:
                    broken = True
                    failures[worker.index] = f"no reply within timeout_s={self._timeout_s:g}; raise timeout_s"
                    continue
                except WorkerGone:
                    worker.state = "gone"
                    broken = True
                    failures[worker.index] = self._gone(worker)
                    continue
                worker.state = "ready"
                self._note_cpu(worker.index, reply)
                if reply[0] == _OK:
                    values[position] = reply[1]
                else:
                    failures[worker.index] = str(reply[1])
        except BaseException:
            self._broken = f"{what} was interrupted"
            raise
        if failures:
            first = min(failures)
            if broken or fatal:
                self._broken = f"instance {first} failed in {what}"
            raise InstanceError(
                f"instance {first} ({self._info[first].target}) failed in {what}: {failures[first]}", first
            )
        return values

    def _send_all(self, workers: Sequence[_InstanceWorker], request: bytes, failures: dict[int, str]) -> bool:
        """Send ``request`` to every worker in ``workers``; whether one had gone (in ``failures``)."""
        broken = False
        for worker in workers:
            try:
                worker.send_bytes(request)
                worker.state = "busy"
            except WorkerGone:
                worker.state = "gone"
                broken = True
                failures[worker.index] = self._gone(worker)
        return broken

    def _gone(self, worker: _InstanceWorker) -> str:
        """Why ``worker`` failed a request: its process ended."""
        return f"its worker process ({self._describe_exit(worker)}) ended; its output above says why"

    def prepare(self, inputs: Sequence[object]) -> None:
        """Send ``inputs`` to every worker, which converts them once (``prepare_inputs``) and keeps them."""
        self._check_usable("prepare inputs")
        self._prepared = False  # until every instance has the new inputs
        request = pickle.dumps((_PREPARE, tuple(inputs)), protocol=pickle.HIGHEST_PROTOCOL)
        self._exchange(self._workers, request, "preparing its inputs", fatal=False)
        self._prepared = True

    def round(self) -> None:
        """Start every worker's call, wait for all; record each call's duration as the worker timed it."""
        self._start_round()
        values = self._exchange(self._workers, _ROUND_BYTES, f"round {self._rounds}", fatal=True)
        for spans, span in zip_strict(self._spans_ns, values):
            spans.append(cast("tuple[int, int]", span))

    def call(self, index: int, inputs: Sequence[object]) -> object:
        """Instance ``index`` called once on ``inputs``; its outputs with tensors as numpy arrays. A
        failing call leaves the group usable; a dead worker does not."""
        _check_index(index, self.count)
        self._check_usable("call an instance")
        request = pickle.dumps((_CALL, tuple(inputs)), protocol=pickle.HIGHEST_PROTOCOL)
        return self._exchange([self._workers[index]], request, "a call", fatal=False)[0]

    def reset_latencies(self) -> None:
        """Forget the call durations recorded so far."""
        for spans in self._spans_ns:
            spans.clear()

    def latencies_s(self) -> list[list[float]]:
        """Per instance, each ``round`` call's duration in seconds (timed in the worker), oldest first."""
        return _durations_s(self._spans_ns)

    def spans_ns(self) -> list[list[tuple[int, int]]]:
        """Per instance, each ``round`` call's (start, end) as the worker's ``time.perf_counter_ns``
        values taken just around the call, oldest first. On Linux that clock is ``CLOCK_MONOTONIC``,
        one clock for every process of the host, so the workers' spans compare: two calls overlapped
        when each started before the other ended."""
        return [list(spans) for spans in self._spans_ns]

    def device_latencies(self) -> list[Mapping[str, object] | None]:
        """Each worker's model's own latency counters for its last call (read in the worker)."""
        self._check_usable("read device latencies")
        request = pickle.dumps((_DEVICE_LATENCY,), protocol=pickle.HIGHEST_PROTOCOL)
        replies = self._exchange(self._workers, request, "reading its device latency", fatal=False)
        return [cast("Mapping[str, object] | None", reply) for reply in replies]

    def workers_cpu_ns(self) -> int | None:
        """The workers' CPU time together, ns, each as its latest reply reported it (every worker has
        reported once it is ready: its compile report carries its clock)."""
        if any(ns is None for ns in self._cpu_ns):
            return None
        return sum(cast(int, ns) for ns in self._cpu_ns)

    def compiled_info(self) -> list[InstanceInfo]:
        """What each worker's compile reported, with ``compile_s`` timed in the worker."""
        return list(self._info)

    @property
    def pids(self) -> list[int | None]:
        """Each worker's process id."""
        return [w.pid for w in self._workers]

    def process_ids(self) -> tuple[int, ...]:
        """Each started worker's process id: the workers run the models."""
        return tuple(pid for pid in self.pids if pid is not None)

    # -- stopping ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Ask every worker to close its model and exit; terminate those that do not within
        ``stop_timeout_s``; close the pipes. Failures are raised once, after every worker is gone."""
        if self._closed:
            return
        failures = self._release()
        if failures:
            raise _close_failures(failures)

    def _release(self) -> list[tuple[int, str]]:
        """Stop every worker and close every pipe; what went wrong, per instance.

        A compiling worker cannot read requests, so it is terminated at once; the others are asked
        to close their model, which releases their device the orderly way.
        """
        self._closed = True
        failures: list[tuple[int, str]] = []
        try:
            for worker in self._workers:
                if worker.state == "starting":
                    worker.process.terminate()
            asked: list[_InstanceWorker] = []
            for worker in self._workers:
                if worker.state in ("ready", "busy") and not worker.conn.closed:
                    try:
                        worker.send_bytes(_CLOSE_BYTES)
                    except WorkerGone:
                        error = self._ended_early(worker)
                        if error is not None:
                            failures.append((worker.index, error))
                    else:
                        asked.append(worker)
            deadline = time.monotonic() + self._stop_timeout_s
            for worker in asked:
                error = self._await_closed(worker, deadline)
                if error is not None:
                    failures.append((worker.index, error))
            for worker in asked:
                worker.process.join(max(0.0, deadline - time.monotonic()))
                if worker.process.is_alive():
                    failures.append(
                        (
                            worker.index,
                            f"its worker process (pid {worker.pid}) did not exit within "
                            f"stop_timeout_s={self._stop_timeout_s:g} and was terminated; raise "
                            "stop_timeout_s",
                        )
                    )
        finally:
            # Whatever happened above (even Ctrl-C), no worker outlives this.
            for worker in self._workers:
                worker.stop()
        return sorted(failures)

    def _ended_early(self, worker: _InstanceWorker) -> str | None:
        """Why a worker that was not known to be gone did not report closing its model (``None`` when
        it exited cleanly after all)."""
        worker.process.join(1.0)
        if worker.process.exitcode == 0:
            return None
        return f"its worker process ({self._describe_exit(worker)}) ended before closing its model"

    def _await_closed(self, worker: _InstanceWorker, deadline: float) -> str | None:
        """Skip replies still in flight until the worker's close report; its close error, if any."""
        while True:
            try:
                reply = worker.receive(deadline - time.monotonic())
            except WorkerTimeout:
                return None  # the join below reports it
            except WorkerGone:
                return self._ended_early(worker)
            if reply[0] == _CLOSED:
                return (
                    None
                    if reply[1] is None
                    else f"{self._info[worker.index].target} close() raised {reply[1]}"
                )
