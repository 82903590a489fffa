"""``pytest-ipu doctor --first-contact DIR``: on a machine with IPUs, what could only be checked on the
hardware, in one JSON file to send back.

The steps are ``STEPS``, in order (their constants: ``UPDATE_CALLS``, ``RUNS``, ``COUPLING_DELAY_S``,
``COUPLING_RULE``). Each runs in a child process of its own through the doctor's machinery
(``doctor.run_child``), one after another, since two at once could contend for the same IPUs, and
records its result or its error; the file is written whole (``results.atomic``). The runs use the
doctor's tiny model (``doctor.run_tiny_model``) and the plugin's own instances (``ThreadInstances``,
``ProcessInstances``); under PopRun the popdist way runs before the plugin's (``backends.ipu.poptorch``).

Documented in docs/ipu.md (section "First contact with real hardware": each step, what it records and
settles) and docs/doctor.md (section "--first-contact DIR: what only IPU hardware can answer").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from datetime import timezone
from pathlib import Path
from typing import Any

from pytest_ipu import __version__
from pytest_ipu import backends
from pytest_ipu.backends.base import Backend
from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.base import WorkerBackend
from pytest_ipu.backends.target import parse_target
from pytest_ipu.backports import zip_strict
from pytest_ipu.cli import doctor
from pytest_ipu.devices import driver_ids
from pytest_ipu.devices import inventory
from pytest_ipu.devices import poprun
from pytest_ipu.placement.instances import InstanceSpec
from pytest_ipu.placement.instances import ProcessInstances
from pytest_ipu.placement.instances import ThreadInstances
from pytest_ipu.processes import describe_error
from pytest_ipu.results import atomic
from pytest_ipu.sdk import import_sdk

#: What the file says it is, and the version of its layout.
KIND = "pytest-ipu first contact"
LAYOUT = 1
#: ``updateData()`` calls timed in the ``gcipuinfo`` step.
UPDATE_CALLS = 20
#: Calls of the compiled tiny model in each run step (the first may include one-time work).
RUNS = 4
#: Rounds of the two instances' concurrent calls in each overlap step.
ROUNDS = 5
#: Device iterations (PopTorch's ``device_iterations``, PopART's ``batches_per_step``) of each call in
#: the overlap steps: one iteration of the tiny model is microseconds, shorter than the skew between
#: the two instances' starts, so a call makes many for the overlap to say something.
ITERATIONS = 1000
#: Largest device size asked of PopART and PopTorch: PopTorch reserves at most 64 IPUs per process.
MAX_DEVICE_IPUS = 64
#: Lines of a failed step's stderr kept in the file (its traceback, the runtime's last log lines).
STDERR_LINES = 40
#: Environment variables PopRun is said to set (reference ``graphcore-sdk-api.md`` section 7.3): their
#: names and values under a real launch are among what the file settles.
POPRUN_ENV_PREFIXES = ("POPDIST_", "POPRUN_", "IPUOF_", "OMPI_COMM_WORLD_", "POPLAR_TARGET_OPTIONS")


class StepError(Exception):
    """A step found what it checks absent or broken; its message is the step's error line."""


@dataclass(frozen=True)
class Step:
    """One thing to check: its name, what it records (one line, also in the file), and the function
    its child process runs (given a scratch directory; returns plain JSON)."""

    name: str
    what: str
    run: Callable[[Path], dict[str, Any]]


# -- the steps, each run in its own child process ----------------------------------------------------


def _answer(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``'s value, or ``{"raised": "Type: message"}``: one answer failing never hides the
    others."""
    try:
        return call(*args)
    except Exception as exc:
        return {"raised": describe_error(exc)}


def _ipus(_: Path) -> dict[str, Any]:
    found = inventory.discover()
    if isinstance(found, str):
        return {"found": False, "reason": found}
    return {"found": True, "inventory": found.as_json()}


def _host(_: Path) -> dict[str, Any]:
    affinity = getattr(os, "sched_getaffinity", None)
    return {
        "platform": platform.platform(),
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": None if affinity is None else len(affinity(0)),
        "memory_bytes": _answer(lambda: os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")),
    }


#: Modules whose versions are read once imported; popart first, before anything could import onnx.
VERSIONED = ("popart", "poptorch", "torch", "numpy", "gcipuinfo", "popdist")
#: Where a module may say its version: an attribute, or a function (PopART's ``versionString``).
VERSION_NAMES = ("__version__", "versionString", "packageHash")


def _version_value(value: object) -> str:
    return str(value() if callable(value) else value)


def _reported_version(name: str) -> dict[str, Any]:
    module = import_sdk(name)
    out: dict[str, Any] = {"file": getattr(module, "__file__", None)}
    for attribute in VERSION_NAMES:
        value = getattr(module, attribute, None)
        if value is not None:
            key = f"{attribute}()" if callable(value) else attribute
            out[key] = _answer(_version_value, value)
    return out


def _versions(_: Path) -> dict[str, Any]:
    rows = doctor.installed(doctor.Machine())
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "python_executable": sys.executable,
        "pytest_ipu": __version__,
        "installed": [dataclasses.asdict(row) for row in rows],
        "imported": {name: _answer(_reported_version, name) for name in VERSIONED},
    }


#: The documented gcipuinfo names (reference section 4.1, "M" for the exact Python spelling).
GCIPUINFO_MODULE_NAMES = ("gcipuinfo", "DiscoverActivePartitionIPUs", "DiscoverAllPartitionIPUs", "IpuPower")
GCIPUINFO_OBJECT_NAMES = (
    "getDevices",
    "getNamedAttributeForAll",
    "getNamedAttributeForDevice",
    "getDevicesAsJSON",
    "updateData",
    "setUpdateMode",
)


def attribute_names(devices: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The exact attribute names ``getDevices()`` returned (every name, sorted, and each device's),
    and for each key the plugin reads (``gcipuinfo_keys``) how many devices listed it: the names a
    later SDK or system can be checked against."""
    names = sorted({str(name) for device in devices for name in device})
    return {
        "names": names,
        "per_device": [sorted(str(name) for name in device) for device in devices],
        "read_by_the_plugin": {key: sum(key in device for device in devices) for key in gcipuinfo_keys()},
        "devices": len(devices),
    }


def gcipuinfo_keys() -> tuple[str, ...]:
    """The ``getDevices()`` keys the plugin reads: ``power.gcipuinfo``'s ``KEY_*`` constants, whose
    spellings are inferred (that module's docstring says from what)."""
    from pytest_ipu.power import gcipuinfo

    return tuple(value for name, value in sorted(vars(gcipuinfo).items()) if name.startswith("KEY_"))


def seconds_summary(values: Sequence[float]) -> dict[str, Any]:
    """``{"calls", "min_s", "median_s", "max_s"}`` of ``values`` (seconds)."""
    return {
        "calls": len(values),
        "min_s": min(values),
        "median_s": statistics.median(values),
        "max_s": max(values),
    }


def _gcipuinfo(_workdir: Path) -> dict[str, Any]:
    module = import_sdk("gcipuinfo")
    start = time.perf_counter()
    info = module.gcipuinfo()
    construct_s = time.perf_counter() - start
    devices = [dict(device) for device in info.getDevices()]
    latencies, returned = [], []
    for _ in range(UPDATE_CALLS):
        start = time.perf_counter()
        ok = info.updateData()
        latencies.append(time.perf_counter() - start)
        returned.append(ok)
    return {
        "devices": devices,
        "attribute_names": attribute_names(devices),
        "devices_after_updates": [dict(device) for device in info.getDevices()],
        "devices_as_json": _answer(info.getDevicesAsJSON) if hasattr(info, "getDevicesAsJSON") else None,
        "module_has": {name: hasattr(module, name) for name in GCIPUINFO_MODULE_NAMES},
        "object_has": {name: hasattr(info, name) for name in GCIPUINFO_OBJECT_NAMES},
        "construct_s": construct_s,
        "update_data": {**seconds_summary(latencies), "returned": returned},
    }


def _converted(device: Any, name: str, convert: Callable[[Any], Any]) -> Any:
    return convert(getattr(device, name))


def _int_list(values: Any) -> list[int]:
    return [int(v) for v in values]


def _popart_device(device: Any) -> dict[str, Any]:
    """A ``DeviceInfo``'s id, size, IPUs and kind as plain JSON (pybind11 lists and enums converted)."""
    return {
        "id": _answer(_converted, device, "id", int),
        "numIpus": _answer(_converted, device, "numIpus", int),
        "driverIds": _answer(_converted, device, "driverIds", _int_list),
        "ipuVersion": _answer(_converted, device, "ipuVersion", str),
        "type": _answer(_converted, device, "type", str),
    }


def _popart_devices(_: Path) -> dict[str, Any]:
    popart = import_sdk("popart")
    manager = popart.DeviceManager()
    by_size: dict[str, Any] = {}
    size = 1
    while size <= MAX_DEVICE_IPUS:
        listed = manager.enumerateDevices(numIpus=size)
        by_size[str(size)] = [_popart_device(d) for d in listed]
        if not listed:
            break
        size *= 2
    # The translation the plugin places and meters by: each multi-IPU device's driverIds mapped
    # through the single IPUs' driver ids to gc-info -l ids, and whatever does not fit.
    return {
        "enumerateDevices": by_size,
        "driver_id_translation": _answer(lambda: driver_ids.read(popart).as_json()),
    }


def _hardware_available(poptorch: Any, ipus: int) -> bool:
    return bool(poptorch.ipuHardwareIsAvailable(ipus))


def _poptorch_devices(_: Path) -> dict[str, Any]:
    poptorch = import_sdk("poptorch")
    available: dict[str, Any] = {}
    size = 1
    while size <= MAX_DEVICE_IPUS:
        available[str(size)] = _answer(_hardware_available, poptorch, size)
        if available[str(size)] is not True:
            break
        size *= 2
    return {
        "version": getattr(poptorch, "__version__", None),
        "ipuHardwareIsAvailable": available,
        "ipuHardwareVersion": _answer(lambda: int(poptorch.ipuHardwareVersion())),
    }


def _popdist(_: Path) -> dict[str, Any]:
    environment = {k: v for k, v in sorted(os.environ.items()) if k.startswith(POPRUN_ENV_PREFIXES)}
    inconsistent: str | None = None
    try:
        instance = poprun.detect()
    except ValueError as exc:  # launched by PopRun, with settings no launch can have: recorded below
        instance, inconsistent = None, str(exc)
    else:
        if instance is None:
            return {"under_poprun": False, "reason": _outside_poprun(), "environment": environment}
    module = import_sdk("popdist")
    getters = {getter: _answer(getattr(module, getter)) for getter in poprun.GETTERS.values()}
    per_replica = getters["getNumIpusPerReplica"]
    if isinstance(per_replica, int):
        getters[f"getDeviceId({per_replica})"] = _answer(lambda: module.getDeviceId(per_replica))
    out: dict[str, Any] = {"under_poprun": True, "getters": getters, "environment": environment}
    if instance is None:
        out["detect_error"] = inconsistent
        return out
    out["instance"] = instance.as_json()
    found = inventory.discover()
    if isinstance(found, str):
        out["device"] = {"raised": found}
    else:
        device = _answer(lambda: poprun.instance_device(found))
        out["device"] = (
            device
            if isinstance(device, dict) or device is None
            else {"device_id": device.device_id, "ipu_ids": list(device.ipu_ids), "note": device.note}
        )
    return out


def _outside_poprun() -> str:
    try:
        import_sdk("popdist")
    except ImportError as exc:
        return f"not under PopRun: popdist is not importable ({describe_error(exc)})"
    return "not under PopRun: popdist.isPopdistEnvSet() is False"


#: Seconds every PopRun instance but the first waits before its first call in the
#: ``poprun_inference_*`` steps: if an instance's calls wait for the others' (a synchronised run),
#: instance 0's first call cannot end before instance 1's first call starts.
COUPLING_DELAY_S = 10.0
#: Calls of the tiny model in each ``poprun_inference_*`` step.
POPRUN_CALLS = 3
#: How to read the ``poprun_inference_*`` steps of a launch's files together.
COUPLING_RULE = (
    "compare the instances' files of one launch (one host, one wall clock): instance 0's first call "
    "ends before instance 1's first call starts, although instance 1 waits coupling_delay_s first: "
    "the instances' calls are independent; it ends only after: each call waits for the other "
    "instances' (a synchronised run, as PopART's popdist::run is in distributed environments)"
)


def _poprun_calls(
    call: Callable[[], Any], instance: poprun.PopRunInstance
) -> tuple[list[dict[str, float]], Any]:
    """``POPRUN_CALLS`` calls, every instance but the first starting ``COUPLING_DELAY_S`` late; each
    call's start and end on the wall clock (comparable across the instances of one host)."""
    if instance.index > 0:
        time.sleep(COUPLING_DELAY_S)
    calls, out = [], None
    for _ in range(POPRUN_CALLS):
        start = time.time()
        out = call()
        calls.append({"start_unix_s": start, "end_unix_s": time.time()})
    return calls, out


def _poprun_inference(workdir: Path, path: str) -> dict[str, Any]:
    """The tiny PopTorch model under PopRun, its options made the ``path`` way: ``plugin`` (the
    ``poptorch:ipu`` backend's: ``Options()``, ``Distributed.disable()``, ``useIpuId`` of PopDist's
    device) or ``popdist`` (``popdist.poptorch.Options``, as Graphcore's PopRun inference benchmark
    makes them). What compiled, what the options said, each call's wall-clock span, the output."""
    instance = poprun.detect()
    if instance is None:
        return {"under_poprun": False, "reason": _outside_poprun()}
    import numpy as np

    model, (one,), expected, what = doctor.tiny_model(parse_target("poptorch:ipu"))
    tensor: Any = one  # a torch tensor: the poptorch target's tiny model is torch's
    # One batch per local replica: the popdist options replicate the model over them.
    inputs = tensor.repeat(instance.replicas_local, 1)
    out: dict[str, Any] = {
        "under_poprun": True,
        "instance": instance.as_json(),
        "path": path,
        "model": what,
        "coupling_delay_s": COUPLING_DELAY_S if instance.index > 0 else 0.0,
        "clock": "time.time() (this host's wall clock)",
        "how_to_read": COUPLING_RULE,
    }
    compile_start = time.time()
    run, close, out["options"] = _poprun_compile(path, workdir, model, inputs, instance)
    out["compile_unix_s"] = {"start": compile_start, "end": time.time()}
    try:
        calls, result = _poprun_calls(run, instance)
    finally:
        close()
    host = np.tile(expected, (instance.replicas_local, 1))
    got = doctor.as_array(result)
    out["calls"] = calls
    out["output_matches_host"] = bool(np.allclose(got, host, rtol=1e-3, atol=1e-3))
    return out


def _poprun_compile(
    path: str, workdir: Path, model: Any, inputs: Any, instance: poprun.PopRunInstance
) -> tuple[Callable[[], Any], Callable[[], Any], dict[str, Any]]:
    """The tiny model compiled the ``path`` way (``_poprun_inference``): its call, its close, and
    what its options said."""
    if path == "plugin":
        compiled = _present("poptorch:ipu", workdir).compile(model, (inputs,), "fp32", {})
        said = {"distributed": "disabled", "info": dict(compiled.info)}
        return (lambda: compiled.run(inputs)), compiled.close, said
    from pytest_ipu.backends.ipu import poptorch_training

    poptorch = import_sdk("poptorch")
    options = poptorch_training.popdist_options(import_sdk("popdist"), instance.ipus_per_replica)
    said = {
        "replication_factor": _answer(lambda: int(options.replication_factor)),
        "process_id": _answer(lambda: int(options.Distributed.processId)),
        "num_processes": _answer(lambda: int(options.Distributed.numProcesses)),
        "ipu_id": _answer(lambda: int(options.ipu_id) if options.exists("ipu_id") else None),
    }
    executor = poptorch.inferenceModel(model, options)
    executor.compile(inputs)
    return (lambda: executor(inputs)), executor.destroy, said


def _present(name: str, workdir: Path) -> Backend:
    """The plugin's own backend for target ``name``; ``StepError`` with its reason when absent."""
    backend = backends.make_backend(parse_target(name), cache_dir=workdir / "cache")
    if backend is None:
        raise StepError(backends.unknown_backend_reason(parse_target(name)))
    availability = backend.availability()
    if not availability.ok:
        raise StepError(availability.reason)
    return backend


def _target_run(name: str) -> Callable[[Path], dict[str, Any]]:
    def run(workdir: Path) -> dict[str, Any]:
        backend = _present(name, workdir)
        ran = doctor.run_tiny_model(backend, parse_target(name), runs=RUNS)
        return {
            "target": name,
            "model": ran.what,
            "device_name": ran.device_name,
            "compile_s": ran.compile_s,
            "phases_s": dict(ran.phases_s),
            "run_s": list(ran.run_s),
            "output_matches_host": ran.matches,
            "output": ran.output,
            "expected": ran.expected,
            "device_latency": None if ran.device_latency is None else dict(ran.device_latency),
            "describe": _answer(backend.describe),
        }

    return run


def overlapped(first: tuple[int, int], second: tuple[int, int]) -> bool:
    """Whether two calls, each ``(start, end)`` on one clock, overlapped: each began before the
    other ended. Decided by the order of the timestamps alone, never by durations."""
    return first[0] < second[1] and second[0] < first[1]


def overlap_report(spans: Sequence[Sequence[tuple[int, int]]]) -> dict[str, Any]:
    """Two instances' calls, round by round: each call's start and end in seconds from the first
    start, and whether the round's two calls overlapped."""
    first, second = spans
    origin = min(start for calls in spans for start, _ in calls)
    pairs = list(zip_strict(first, second))
    flags = [overlapped(a, b) for a, b in pairs]
    rounds = [
        {
            "calls": [{"start_s": (s - origin) * 1e-9, "end_s": (e - origin) * 1e-9} for s, e in pair],
            "overlapped": flag,
        }
        for pair, flag in zip_strict(pairs, flags)
    ]
    together = sum(flags)
    return {"rounds": rounds, "overlapped_rounds": together, "overlapped": together == len(rounds)}


def _many(inputs: Sequence[Any]) -> tuple[Any, ...]:
    """The tiny model's inputs ``ITERATIONS`` times over, stacked on the batch dimension."""
    import numpy as np

    return tuple(
        x.repeat(ITERATIONS, 1) if hasattr(x, "detach") else np.tile(x, (ITERATIONS, 1)) for x in inputs
    )


def ipu_users(pids: Sequence[int]) -> dict[str, Any]:
    """While the instances hold their IPUs: each IPU's ``"user process id"`` as gcipuinfo lists it
    (``None`` where the key is absent), and the IPUs the plugin matches to each process running an
    instance (``GcIpuInfoPowerSource.ipus_used_by``), as it does to meter a PopTorch model on plain
    ``ipu``: whether those pids are the ones gcipuinfo reports (a container's own pid namespace
    would not be), and whether every IPU in use lists one."""
    from pytest_ipu.power.gcipuinfo import KEY_ID
    from pytest_ipu.power.gcipuinfo import KEY_USER_PID
    from pytest_ipu.power.gcipuinfo import GcIpuInfoPowerSource

    def listing() -> dict[str, str | None]:
        devices = import_sdk("gcipuinfo").gcipuinfo().getDevices()
        return {str(d.get(KEY_ID)): d.get(KEY_USER_PID) for d in map(dict, devices)}

    source = GcIpuInfoPowerSource()
    return {
        "process_ids": list(pids),
        "user_process_id": _answer(listing),
        "ipus_by_process": {str(pid): _answer(lambda p=pid: list(source.ipus_used_by((p,)))) for pid in pids},
    }


def _two_rounds(group: ThreadInstances | ProcessInstances, inputs: Sequence[object]) -> dict[str, Any]:
    try:
        group.prepare(inputs)
        for _ in range(ROUNDS):
            group.round()
        return {
            "runner": group.runner,
            "iterations_per_call": ITERATIONS,
            "instances": [info.as_json() for info in group.compiled_info()],
            "clock": "time.perf_counter_ns in each instance, just around its call (CLOCK_MONOTONIC on "
            "Linux: one clock for every process of the host)",
            **overlap_report(group.spans_ns()),
            "ipu_users": ipu_users(group.process_ids()),
        }
    finally:
        group.close()


def _popart_threads(workdir: Path) -> dict[str, Any]:
    target = parse_target("popart:ipu")
    backend = _present("popart:ipu", workdir)
    model, one, _, _ = doctor.tiny_model(target)
    inputs = _many(one)
    compiled: list[CompiledModel] = []
    try:
        for _ in range(2):
            start = time.perf_counter()
            made = backend.compile(model, inputs, "fp32", {"batches_per_step": ITERATIONS})
            compiled.append(dataclasses.replace(made, compile_s=time.perf_counter() - start))
        group = ThreadInstances(compiled)
    except BaseException:
        for model_ in compiled:
            model_.close()
        raise
    return _two_rounds(group, inputs)


def _poptorch_processes(workdir: Path) -> dict[str, Any]:
    target = parse_target("poptorch:ipu")
    backend = _present("poptorch:ipu", workdir)
    if not isinstance(backend, WorkerBackend):
        raise StepError(f"the {target} backend cannot be rebuilt in a worker process")
    model, one, _, _ = doctor.tiny_model(target)
    inputs = _many(one)
    factory = backend.worker_factory()
    options = {"device_iterations": ITERATIONS}
    group = ProcessInstances([InstanceSpec(i, factory, model, inputs, "fp32", options) for i in range(2)])
    return _two_rounds(group, inputs)


STEPS: tuple[Step, ...] = (
    Step("ipus", "the IPUs the plugin finds (gcipuinfo, else PopART, else PopTorch)", _ipus),
    Step("host", "platform, CPUs and memory", _host),
    Step("versions", "Python, pytest-ipu, the SDK and packages, found and as imported", _versions),
    Step("gcipuinfo", "getDevices() verbatim and the latency of updateData()", _gcipuinfo),
    Step("popart_devices", "PopART's DeviceManager().enumerateDevices(numIpus=n)", _popart_devices),
    Step(
        "poptorch_devices", "PopTorch's ipuHardwareIsAvailable(n) and ipuHardwareVersion()", _poptorch_devices
    ),
    Step("popdist", "the popdist getters under PopRun, or why not under PopRun", _popdist),
    Step(
        "popart_run", "a 1-IPU PopART run of a tiny model: compile and call times", _target_run("popart:ipu")
    ),
    Step(
        "poptorch_run",
        "a 1-IPU PopTorch run of a tiny model: compile and call times, getLatency()",
        _target_run("poptorch:ipu"),
    ),
    Step(
        "poptorch_popdist_inference",
        "under PopRun: the tiny PopTorch model with popdist.poptorch.Options, each call's wall-clock span",
        lambda workdir: _poprun_inference(workdir, "popdist"),
    ),
    Step(
        "poptorch_poprun_inference",
        "under PopRun: the tiny model on the plugin's poptorch:ipu (Distributed.disable(), PopDist's device)",
        lambda workdir: _poprun_inference(workdir, "plugin"),
    ),
    Step("popart_threads", "two PopART sessions calling at once from two threads", _popart_threads),
    Step("poptorch_processes", "two PopTorch models calling at once from two processes", _poptorch_processes),
)
BY_NAME: Mapping[str, Step] = {step.name: step for step in STEPS}


def _plain(value: object) -> object:
    """A JSON value for what ``json`` cannot encode: numpy scalars and arrays as numbers and lists,
    anything else as its ``repr``."""
    for method in ("tolist", "item"):
        convert = getattr(value, method, None)
        if callable(convert):
            try:
                return convert()
            except Exception:  # not the conversion it looked like: the repr says what it was
                break
    return repr(value)


def step_main(name: str) -> int:
    """The child process of one step: its result (or error) printed as one JSON line."""
    try:
        with tempfile.TemporaryDirectory(prefix="pytest-ipu-first-contact-step-") as tmp:
            result: dict[str, Any] = {"status": "ok", "result": BY_NAME[name].run(Path(tmp))}
    except StepError as exc:  # absent or refused, and the message says why: no traceback to keep
        result = {"status": "failed", "error": str(exc)}
    except Exception as exc:
        traceback.print_exc()  # to stderr, whose last lines the file keeps for a failed step
        result = {"status": "failed", "error": describe_error(exc)}
    print(doctor.RESULT_PREFIX + json.dumps(result, default=_plain), flush=True)
    return 0


# -- the parent: the steps one after another, then the file ------------------------------------------


def run_step(step: Step, machine: doctor.Machine, timeout_s: float, workdir: Path) -> dict[str, Any]:
    """Run ``step`` in its own child process; its record for the file."""
    child = doctor.run_child(["pytest_ipu.cli.first_contact", "step", step.name], machine, timeout_s, workdir)
    record: dict[str, Any] = {"what": step.what, "wall_s": child.wall_s}
    if child.data is None:
        record.update(status="failed", error=child.failure)
    else:
        record.update(child.data)
    if record.get("status") != "ok":
        record["stderr_tail"] = child.stderr.splitlines()[-STDERR_LINES:]
    return record


def bad_directory(directory: Path) -> str | None:
    """The one-line error for a ``DIR`` the file cannot be written into, else ``None``. A directory
    that does not exist yet is fine where it can be created (it is, when the file is written)."""
    label = f"pytest-ipu: doctor --first-contact {directory}"
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == directory else f"cannot be created: {existing} is a file"
        return f"{label}: {what}, not a directory; give a directory to write the result file into"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        return (
            f"{label}: {existing} is not writable ({exc.strerror or describe_error(exc)}); give a directory "
            "you can write to"
        )
    return None


def file_name(steps: Mapping[str, Mapping[str, Any]], now: datetime, pid: int) -> str:
    """``first-contact-<UTC time>-<pid>.json``; under PopRun ``...-instance-<i>-of-<n>.json``, so the
    instances of one launch never write the same file."""
    name = f"first-contact-{now.strftime('%Y%m%dT%H%M%SZ')}-{pid}"
    instance = steps.get("popdist", {}).get("result", {}).get("instance")
    if instance:
        name += f"-instance-{instance['index']}-of-{instance['count']}"
    return name + ".json"


def main(
    directory: Path,
    timeout_s: float = doctor.DEFAULT_TIMEOUT_S,
    machine: doctor.Machine | None = None,
    only: Sequence[str] | None = None,
) -> int:
    """``pytest-ipu doctor --first-contact DIR``: every step (or the named ones, after ``ipus``), the
    file written into ``directory`` and its path printed. 0 when every step worked, 1 when one
    failed, 2 for bad usage; on a machine without IPUs, one line and 0, nothing written."""
    bad = doctor.bad_timeout(timeout_s) or bad_directory(directory)
    if bad:
        print(bad, file=sys.stderr)
        return 2
    now = datetime.now(timezone.utc)
    steps = _run_steps(machine if machine is not None else doctor.Machine(), timeout_s, only)
    if steps is None:
        return 0
    failed = [name for name, record in steps.items() if record["status"] != "ok"]
    document = {
        "kind": KIND,
        "layout": LAYOUT,
        "pytest_ipu": __version__,
        "created_utc": now.isoformat(),
        "timeout_s": timeout_s,
        "failed_steps": failed,
        "steps": steps,
    }
    path = directory / file_name(steps, now, os.getpid())
    if not _write(directory, path, document):
        return 2
    summary = f"{len(steps) - len(failed)} of {len(steps)} steps worked"
    if failed:
        summary += f"; failed: {', '.join(failed)} (the file says why)"
    print(f"first contact: {summary}; send this file:", file=sys.stderr)
    print(path)
    return 1 if failed else 0


def _run_steps(
    machine: doctor.Machine, timeout_s: float, only: Sequence[str] | None
) -> dict[str, dict[str, Any]] | None:
    """Every step's record (or the named ones', after ``ipus``), with progress on stderr; ``None``
    after printing the one line of a machine without IPUs."""
    steps: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="pytest-ipu-first-contact-") as tmp:
        for step in STEPS:
            if step.name != "ipus" and only is not None and step.name not in only:
                continue
            steps[step.name] = record = run_step(step, machine, timeout_s, Path(tmp))
            found = record.get("result", {})
            if step.name == "ipus" and found.get("found") is False:
                print(f"pytest-ipu doctor --first-contact: no IPU here, nothing written: {found['reason']}")
                return None
            # Progress on stderr: the steps take minutes on an IPU (each compile takes tens of seconds).
            print(
                f"first contact: {step.name}: {record['status']} ({record['wall_s']:.1f} s)", file=sys.stderr
            )
    return steps


def _write(directory: Path, path: Path, document: dict[str, Any]) -> bool:
    """Write ``document`` to ``path`` atomically, ``directory`` made first; ``False`` after printing
    why it could not be written."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        atomic.write_text(path, json.dumps(document, indent=2, default=_plain) + "\n")
    except OSError as exc:
        print(
            f"pytest-ipu: doctor --first-contact {directory}: cannot write {path.name}: "
            f"{describe_error(exc)}",
            file=sys.stderr,
        )
        return False
    return True


def _entry(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_ipu.cli.first_contact", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    step = sub.add_parser("step", help="run one step (the child process of doctor --first-contact)")
    step.add_argument("name", choices=list(BY_NAME))
    args = parser.parse_args(argv)
    return step_main(args.name)


if __name__ == "__main__":
    sys.exit(_entry(sys.argv[1:]))
