"""Compiling a model at a device placement: the marker's request, the backend's inventory, and one
compiled copy per instance, run concurrently as one ``CompiledModel``.

``allocate`` decides which IPU ids each instance gets; this module turns that into backends and options
(a device id per instance, replicas and pipeline stages in the backend's own option names), compiles
every instance and groups them. A backend says how through the ``PlacedBackend`` protocol of
``pytest_ipu.backends.base`` (and ``WorkerBackend`` for worker processes); one that is not runs its
instances side by side on its one device.

Documented in docs/fixtures.md (section "Placement: ipus, replicas, stages, instances") and
docs/architecture.md (section "Questions a newcomer asks": where do I add a backend).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
import typing
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_ipu.backends.base import Backend
from pytest_ipu.backends.base import CallCounter
from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.base import GroupedModel
from pytest_ipu.backends.base import InstanceGroup
from pytest_ipu.backends.base import PlacedBackend
from pytest_ipu.backends.base import WorkerBackend
from pytest_ipu.devices.allocate import PlacementError
from pytest_ipu.devices.allocate import allocate
from pytest_ipu.devices.request import DeviceRequest
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import CompileError
from pytest_ipu.errors import UnplaceableError
from pytest_ipu.results.records import PlacementRecord

if typing.TYPE_CHECKING:
    from pytest_ipu.devices.inventory import IpuInventory
    from pytest_ipu.placement.instances import InstanceSpec

#: A function giving the backend for a target spelled ``name:device`` (the run's backend cache).
BackendFor = typing.Callable[[str, str], Backend]


@dataclass(frozen=True)
class InstancePlan:
    """One instance as it will be compiled: its backend, its device and its extra options."""

    index: int
    backend: Backend
    device: str
    ipu_ids: tuple[int, ...]
    options: Mapping[str, object]


@dataclass(frozen=True)
class Plan:
    """Every instance of a placed model, and the placement as the record keeps it.

    ``ipu_ids`` are the single IPUs every instance holds together on IPU hardware (``None`` on a
    simulator or a backend without IPUs): the model's ``CompiledModel.ipu_ids``, what its energy is
    measured on, rather than its device (``ipu``, every IPU of the partition).
    """

    instances: tuple[InstancePlan, ...]
    placement: PlacementRecord
    ipu_ids: tuple[int, ...] | None = None


def is_trivial(request: DeviceRequest) -> bool:
    """One instance, one IPU, no replicas or stages: the backend's own device, no placement step."""
    return request.instances == 1 and request.ipus_per_instance == 1


def runner(backend: Backend, instances: int, own_process: bool = False) -> str:
    """How ``instances`` instances of a model on ``backend`` run: ``processes``, ``threads`` or ``inline``.

    A backend whose calls hold the GIL (``concurrency`` ``"processes"``: PopTorch) runs several
    instances in worker processes, and one too when the caller asks for ``own_process``: a caller
    whose own threads must keep running during every call (LoadGen's callbacks). Otherwise several
    instances run in threads of this process and one runs inline.
    """
    concurrency = backend.concurrency if isinstance(backend, PlacedBackend) else "threads"
    if concurrency == "processes" and (instances > 1 or own_process):
        return "processes"
    return "threads" if instances > 1 else "inline"


def plan(
    backend: Backend,
    request: DeviceRequest,
    options: Mapping[str, object],
    backend_for: BackendFor,
    *,
    own_process: bool = False,
) -> Plan:
    """Where each instance of ``request`` runs on ``backend``, with the options that place it there,
    and how (``runner``; ``own_process`` as it says).

    Raises ``CompileError`` for a request the backend cannot express (replicas on a CPU, a pinned
    device id with a placement, options that contradict the marker) and ``BackendUnavailable``
    (the test skips) when this machine has too few devices, naming what was asked and what exists.
    """
    how = runner(backend, request.instances, own_process)
    base = functools.partial(
        PlacementRecord,
        request.instances,
        request.ipus_per_instance,
        request.replicas,
        request.stages,
        how,
    )
    if how == "processes" and is_trivial(request):
        # One instance on the backend's own device, as in this process: only where it runs moves.
        only = InstancePlan(0, backend, backend.device, (), {})
        return Plan((only,), base(shared_device=False, devices=(backend.device,)))
    if not isinstance(backend, PlacedBackend):
        return _plan_shared(backend, request, base)
    inventory = backend.inventory()
    if isinstance(inventory, str):
        raise BackendUnavailable(f"cannot place the model on {backend.name}:{backend.device}: {inventory}")
    device = backend.device
    if ":" in device and not inventory.simulator:
        raise UnplaceableError(
            f"target {backend.name}:{device} pins one device id, but the ipu marker's placement "
            f"(instances={request.instances}, replicas={request.replicas}, stages={request.stages}) chooses "
            f"the IPUs itself; use target {backend.name}:{device.partition(':')[0]}"
        )
    extra = _agreed_options(backend, request, options)
    if inventory.simulator:
        # The IPU Model simulates each instance on the host: no ids to allocate, nothing shared.
        plans = tuple(InstancePlan(i, backend, device, (), extra) for i in range(request.instances))
        return Plan(plans, base(shared_device=False, devices=(device,) * request.instances, simulator=True))
    return _plan_allocated(backend, request, inventory, extra, base, backend_for)


def _plan_shared(backend: Backend, request: DeviceRequest, base: Callable[..., PlacementRecord]) -> Plan:
    """Every instance on the one device of a backend that cannot place models (not an IPU
    backend): instances only, ``UnplaceableError`` for replicas or stages."""
    if request.replicas > 1 or request.stages > 1:
        raise UnplaceableError(
            f"replicas={request.replicas} and stages={request.stages} place one model over several IPUs, "
            f"but target {backend.name}:{backend.device} is not an IPU backend; use a poptorch or popart "
            "target, or ask for instances= only"
        )
    plans = tuple(InstancePlan(i, backend, backend.device, (), {}) for i in range(request.instances))
    return Plan(plans, base(shared_device=True, devices=(backend.device,) * request.instances))


def _plan_allocated(
    backend: PlacedBackend,
    request: DeviceRequest,
    inventory: IpuInventory,
    extra: dict[str, object],
    base: Callable[..., PlacementRecord],
    backend_for: BackendFor,
) -> Plan:
    """Each instance on IPUs of its own, allocated from ``inventory``; ``BackendUnavailable``
    where this machine has too few."""
    device = backend.device
    try:
        placed = allocate(inventory.placement_inventory(), request)
    except PlacementError as exc:
        raise BackendUnavailable(f"placement on {backend.name}:{device}: {exc}") from None
    plans_list = []
    for instance in placed.instances:
        ids = instance.ipu_ids
        device_id = ids[0] if len(ids) == 1 else inventory.multi_device_id(ids)
        instance_device = f"{device}:{device_id}"
        plans_list.append(
            InstancePlan(
                instance.index, backend_for(backend.name, instance_device), instance_device, ids, extra
            )
        )
    return Plan(
        tuple(plans_list),
        base(
            shared_device=False,
            devices=tuple(p.device for p in plans_list),
            ipu_ids=tuple(i.ipu_ids for i in placed.instances),
            inventory=inventory.as_json(),
        ),
        # Every IPU the instances took, a multi-IPU device's members included: the meter reads these.
        tuple(sorted(placed.ipu_ids)),
    )


def _agreed_options(
    backend: PlacedBackend, request: DeviceRequest, options: Mapping[str, object]
) -> dict[str, object]:
    """The backend options that place each instance (``_placement_options``); ``UnplaceableError``
    where ``options`` (ipu_compile's) set one of them to another value."""
    extra = _placement_options(backend, request)
    for key, value in extra.items():
        if key in options and options[key] != value:
            raise UnplaceableError(
                f"ipu_compile option {key}={options[key]!r} contradicts the ipu marker's placement "
                f"(replicas={request.replicas}, stages={request.stages} means {key}={value!r}); "
                f"set it in one place only"
            )
    return extra


def _placement_options(backend: PlacedBackend, request: DeviceRequest) -> dict[str, object]:
    if request.replicas == 1 and request.stages == 1:
        return {}
    return dict(backend.placement_options(request.replicas, request.stages))


def compile_plan(
    the_plan: Plan,
    model: object,
    example_inputs: Sequence[object],
    precision: str,
    options: Mapping[str, object],
) -> CompiledModel:
    """Compile every instance of ``the_plan``; an inline instance is returned as it is, others as a group.

    Several instances compile in this process one after the other (runner ``threads``) or in
    parallel in worker processes (``processes``, also for one instance: a group of one). Whatever
    fails, every instance compiled so far is closed before the error propagates.
    """
    # Imported here: a run without placements never needs threads or worker processes.
    from pytest_ipu.placement import instances

    plans = the_plan.instances
    first = plans[0]
    how = the_plan.placement.runner
    if how == "inline":
        compiled = first.backend.compile(model, example_inputs, precision, {**options, **first.options})
        return _with_placement(compiled, the_plan)
    group: InstanceGroup
    # Worker processes keep their counters to themselves: a group of them reads none.
    counters: tuple[CallCounter, ...] = ()
    start = time.perf_counter_ns()
    if how == "processes":
        group = instances.ProcessInstances(_process_specs(plans, model, example_inputs, precision, options))
    else:
        compiled_list = _compile_each(plans, model, example_inputs, precision, options)
        group = instances.ThreadInstances(compiled_list)
        counters = group_counters(compiled_list)
    wall_s = (time.perf_counter_ns() - start) * 1e-9
    return _grouped_model(the_plan, group, precision, options, counters, wall_s)


def _grouped_model(
    the_plan: Plan,
    group: InstanceGroup,
    precision: str,
    options: Mapping[str, object],
    counters: tuple[CallCounter, ...],
    wall_s: float,
) -> GroupedModel:
    """The compiled model of a ``group`` of instances, compiled in ``wall_s``: a call is one
    round of every instance, on the inputs the group prepared."""
    first = the_plan.instances[0]
    infos = group.compiled_info()
    head = infos[0]

    def prepare(inputs: Sequence[object]) -> tuple[object, ...]:
        group.prepare(inputs)
        return ()

    def run(*_: object) -> object:
        group.round()
        return None

    return GroupedModel(
        target=f"{first.backend.name}:{_base_device(first.device)}",
        backend=first.backend.name,
        device=_base_device(first.device),
        device_name=head.device_name,
        precision=precision,
        io="host",
        run=run,
        prepare_inputs=prepare,
        close=group.close,
        options=dict(options),
        phases_s={"instances_wall": wall_s},
        info={"instances": [info.as_json() for info in infos]},
        placement=the_plan.placement,
        group=group,
        simulator=the_plan.placement.simulator,
        ipu_ids=the_plan.ipu_ids,
        counters=counters,
    )


def _process_specs(
    plans: Sequence[InstancePlan],
    model: object,
    example_inputs: Sequence[object],
    precision: str,
    options: Mapping[str, object],
) -> list[InstanceSpec]:
    """What each worker process needs to rebuild its backend and compile its instance."""
    from pytest_ipu.placement import instances

    specs = []
    for p in plans:
        if not isinstance(p.backend, WorkerBackend):
            raise CompileError(
                f"{p.backend.name} runs instances in worker processes but has no worker_factory() to "
                "rebuild itself there"
            )
        specs.append(
            instances.InstanceSpec(
                index=p.index,
                factory=p.backend.worker_factory(),
                model=model,
                example_inputs=tuple(example_inputs),
                precision=precision,
                options={**options, **p.options},
            )
        )
    return specs


def _compile_each(
    plans: Sequence[InstancePlan],
    model: object,
    example_inputs: Sequence[object],
    precision: str,
    options: Mapping[str, object],
) -> list[CompiledModel]:
    """Every instance compiled in this process, one after the other, each with its own compile
    time; whatever fails, those compiled so far are closed before the error propagates."""
    compiled_list: list[CompiledModel] = []
    try:
        for p in plans:
            began = time.perf_counter_ns()
            one = p.backend.compile(model, example_inputs, precision, {**options, **p.options})
            # Timed here: ThreadInstances reports each instance's own compile time.
            compiled_list.append(dataclasses.replace(one, compile_s=(time.perf_counter_ns() - began) * 1e-9))
    except BaseException:
        for done in compiled_list:
            with contextlib.suppress(Exception):  # the compile error is the one to report
                done.close()
        raise
    return compiled_list


def group_counters(compiled: Sequence[CompiledModel]) -> tuple[CallCounter, ...]:
    """The counters of a group of instances in this process's threads, one per metric the instances
    count: a read is every instance's count of its last call, which must be one count (the instances
    run one compiled graph on one batch; counts that differ raise, naming them, and the record says
    so). An instance whose counter is off makes the group's off, with its reason. The clock is the
    instances' one clock, or none where their IPUs report different ones."""
    out = []
    for counter in compiled[0].counters:
        mine = [next((c for c in one.counters if c.metric == counter.metric), None) for one in compiled]
        off = next(((i, c) for i, c in enumerate(mine) if c is None or c.read is None), None)
        if off is not None:
            index, which = off
            reason = "it keeps no such count" if which is None else which.reason or "the counter is off"
            out.append(CallCounter(counter.metric, None, f"instance {index}: {reason}"))
            continue
        live = [c for c in mine if c is not None]
        out.append(CallCounter(counter.metric, _read_all(live), None, _clock_of_all(live), counter.method))
    return tuple(out)


def _read_all(counters: Sequence[CallCounter]) -> Callable[[], int]:
    def read() -> int:
        counts = [c.read() for c in counters if c.read is not None]
        if len(set(counts)) != 1:
            shown = ", ".join(f"instance {i}: {n:,}" for i, n in enumerate(counts))
            raise ValueError(f"the instances counted differently ({shown}): no one count per call")
        return counts[0]

    return read


def _clock_of_all(counters: Sequence[CallCounter]) -> Callable[[], tuple[float | None, str]]:
    def clock() -> tuple[float | None, str]:
        read = [c.clock() if c.clock is not None else (None, "no clock") for c in counters]
        clocks = {hz for hz, _ in read}
        where = "; ".join(f"instance {i}: {w}" for i, (_, w) in enumerate(read))
        if len(clocks) != 1:
            return None, f"no one clock for the instances ({where})"
        return next(iter(clocks)), where

    return clock


def _with_placement(compiled: CompiledModel, the_plan: Plan) -> CompiledModel:
    simulator = compiled.simulator or the_plan.placement.simulator
    # The placement's IPUs, which the instance was pinned to; the backend's own answer otherwise.
    ipu_ids = compiled.ipu_ids if the_plan.ipu_ids is None else the_plan.ipu_ids
    return dataclasses.replace(compiled, placement=the_plan.placement, simulator=simulator, ipu_ids=ipu_ids)


def _base_device(device: str) -> str:
    """``ipu:3`` -> ``ipu``: a group spans several devices of one kind (which IPUs, ``Plan.ipu_ids``)."""
    return device.partition(":")[0] if device.startswith("ipu:") else device
