"""``pytest-ipu doctor``: what is installed, which known incompatibilities hold, and whether each
compute target and power source actually works here, for the first run on a new machine.

What is installed is found without importing anything (``importlib.metadata``, else
``importlib.util.find_spec``; the SDK from ``POPLAR_SDK_ENABLED``, the variable Graphcore's example
READMEs check to tell whether an SDK is enabled). Each probe, and PopART's device enumerations, run
in a fresh child of this interpreter (``python -m pytest_ipu.cli.doctor probe ...``) that is killed
with its process group at its time limit; ``first_contact`` runs its steps through the same
``run_child``.

Documented in docs/doctor.md (its four steps, at the top, and section "The incompatibilities it
checks").
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any
from typing import Literal

from pytest_ipu import __version__
from pytest_ipu import backends
from pytest_ipu import power
from pytest_ipu.backends.base import Backend
from pytest_ipu.backends.base import HasDeviceLatency
from pytest_ipu.backends.target import Target
from pytest_ipu.backends.target import parse_target
from pytest_ipu.backports import remove_prefix
from pytest_ipu.processes import describe_error
from pytest_ipu.report.table import Table
from pytest_ipu.results.codec import Coded
from pytest_ipu.results.codec import Written
from pytest_ipu.results.codec import meta
from pytest_ipu.sdk import import_sdk

#: The status of one probe: ran and gave the right output; not present here (with the reason);
#: present but broken; present but not run (an opt-in target, whose compile takes minutes).
Status = Literal["works", "absent", "FAILED", "not run"]

#: Seconds one probe (a target's compile and run, or a power source's read) may take before its
#: process is killed. A real IPU compiles even a tiny model in tens of seconds; the IPU Model too.
DEFAULT_TIMEOUT_S = 300.0
#: The line a probe process prints its result on (its other output is the runtime's own logging).
RESULT_PREFIX = "PYTEST_IPU_DOCTOR_RESULT="
#: Where an NVIDIA driver shows itself without any library: the kernel module's procfs directory.
NVIDIA_PROC = Path("/proc/driver/nvidia")

#: torch version PopTorch 3.3 and 3.4 are built against and assert at import
#: (poptorch c2a8b177 ``CMakeLists.txt:30`` ``set(TORCH_VERSION 2.0.1)``, ``python/__init__.py:20-23``).
POPTORCH_TORCH = {"3.3": "2.0.1", "3.4": "2.0.1"}
#: numpy PopART 3.4 runs with (popart d2f20d78 ``requirements/run.txt``: ``numpy==1.22.3`` for Python >= 3.8).
POPART_NUMPY = "1.22.3"


@dataclass(frozen=True)
class Installed:
    """One thing the doctor looked for: its version (``None`` when absent) and a one-line detail."""

    name: str
    version: str | None
    detail: str = ""


@dataclass(frozen=True)
class Check:
    """One probed target or power source: its status and a one-line detail (the reason or the result)."""

    kind: Literal["target", "power"]
    name: str
    status: Status
    detail: str
    #: Facts the probe process reported (plain JSON): whether onnx was imported before it started.
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Finding(Written):
    """A known incompatibility that holds here: what is wrong, and what fixes it (its JSON, with the
    line the doctor prints)."""

    JSON_DERIVED = (("line", None),)

    problem: str
    fix: str

    def line(self) -> str:
        """The one line the doctor prints: ``problem; fix: ...``."""
        return f"{self.problem}; fix: {self.fix}"


@dataclass(frozen=True)
class DeviceListing(Coded):
    """PopART's device listing as the doctor read it: ``status`` ``works`` (``table`` is
    ``DeviceTable.as_json()`` and ``lines`` its text), ``absent`` or ``FAILED`` (``detail`` says why)."""

    status: Status
    detail: str
    table: Mapping[str, Any] = field(default_factory=dict)
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Report(Written):
    """Everything the doctor found; ``exit_code`` is 0 when no present target or source failed. Its
    JSON (``--format json``) opens with the version of pytest-ipu that made it."""

    JSON_DERIVED = (("pytest_ipu", ""), ("ipu_present", "findings"), ("exit_code", None))

    installed: tuple[Installed, ...]
    checks: tuple[Check, ...]
    findings: tuple[Finding, ...]
    #: PopART's two enumerations and their driver-id translation; ``None`` where not read.
    devices: DeviceListing | None = field(default=None, metadata=meta(key="ipu_devices"))

    @property
    def pytest_ipu(self) -> str:
        """The version of pytest-ipu that made the report."""
        return __version__

    @property
    def exit_code(self) -> int:
        """1 when a present target or power source failed, else 0."""
        return 1 if any(c.status == "FAILED" for c in self.checks) else 0

    @property
    def ipu_present(self) -> bool:
        """Whether a target on IPU hardware (not the IPU Model simulator) works."""
        return any(
            c.kind == "target" and _on_ipu_hardware(c.name) and c.status == "works" for c in self.checks
        )


@dataclass(frozen=True)
class Machine:
    """What the doctor reads of the machine, injectable for tests: the environment variables (the
    probe processes get them too), how to find a program on ``PATH`` and where the NVIDIA driver
    shows itself."""

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    which: Callable[[str], str | None] = shutil.which
    nvidia_proc: Path = NVIDIA_PROC


# -- 1. what is installed ---------------------------------------------------------------------------

#: (label, distribution, importable module): looked up in the metadata first, then on the path.
PACKAGES: tuple[tuple[str, str, str], ...] = (
    ("pytest-ipu", "pytest-ipu", "pytest_ipu"),
    ("pytest", "pytest", "pytest"),
    ("pytest-benchmark", "pytest-benchmark", "pytest_benchmark"),
    ("torch", "torch", "torch"),
    ("numpy", "numpy", "numpy"),
    ("onnx", "onnx", "onnx"),
    ("onnxruntime", "onnxruntime", "onnxruntime"),
    ("onnxruntime-gpu", "onnxruntime-gpu", ""),
    ("popart", "popart", "popart"),
    ("poptorch", "poptorch", "poptorch"),
    ("popdist", "popdist", "popdist"),
    ("gcipuinfo", "gcipuinfo", "gcipuinfo"),
    ("nvidia-ml-py", "nvidia-ml-py", "pynvml"),
    # The `loadgen` extra: ipu_loadgen and docs/loadgen.md need it.
    ("mlcommons-loadgen", "mlcommons-loadgen", "mlperf_loadgen"),
)


def _dist_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _module_location(module: str) -> str | None:
    """Where ``module`` would be imported from, without importing it; ``None`` when it is not found."""
    loaded = sys.modules.get(module)
    if loaded is not None:
        return str(getattr(loaded, "__file__", None) or "already imported")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a broken parent package, or a module without a spec
        return None
    if spec is None:
        return None
    return str(spec.origin or (list(spec.submodule_search_locations or []) or ["namespace package"])[0])


def _torch_build(location: str | None) -> str:
    """``CUDA 12.1 build``, ``ROCm ... build`` or ``CPU-only build``, read from the text of
    ``torch/version.py`` (generated at build time), so that torch is not imported."""
    if location is None:
        return ""
    try:
        text = (Path(location).parent / "version.py").read_text(encoding="utf-8")
    except OSError:
        return "build unknown (torch/version.py unreadable)"

    def field_of(name: str) -> str | None:
        match = re.search(rf"^{name}\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
        return match.group(1) if match else None

    cuda, hip = field_of("cuda"), field_of("hip")
    if cuda:
        return f"CUDA {cuda} build"
    if hip:
        return f"ROCm (HIP {hip}) build"
    return "CPU-only build"


def installed(machine: Machine) -> list[Installed]:
    """Python, the OS, the Poplar SDK, ``gc-info`` and each package of ``PACKAGES``; nothing imported."""
    env = machine.environ
    rows = [
        Installed(
            "Python", platform.python_version(), f"{platform.python_implementation()} {sys.executable}"
        ),
        Installed("OS", platform.platform(), platform.machine()),
    ]
    sdk = env.get("POPLAR_SDK_ENABLED")
    sdk_version = re.search(r"\d+\.\d+\.\d+", sdk or "")
    rows.append(
        Installed(
            "Poplar SDK",
            sdk_version.group(0) if sdk_version else ("enabled" if sdk else None),
            f"POPLAR_SDK_ENABLED={sdk}" if sdk else "not enabled: POPLAR_SDK_ENABLED is unset",
        )
    )
    gc_info = machine.which("gc-info")
    rows.append(Installed("gc-info", "on PATH" if gc_info else None, gc_info or "not on PATH"))
    for label, distribution, module in PACKAGES:
        version = _dist_version(distribution)
        location = _module_location(module) if module else None
        detail = ""
        if label == "torch" and (version or location):
            detail = _torch_build(location)
        if version is None and location is not None:
            # The SDK puts popart (and may put others) on PYTHONPATH without package metadata.
            version, detail = "present", f"no package metadata; found at {location}"
        rows.append(Installed(label, version, detail))
    return rows


def _version_of(rows: Sequence[Installed], name: str) -> str | None:
    return next((r.version for r in rows if r.name == name), None)


# -- 2. probes, each in its own process ---------------------------------------------------------------


def probe_names(include_opt_in: bool) -> list[tuple[Literal["target", "power"], str, bool]]:
    """Every built-in target (IPU Model included) and power source, as ``(kind, name, run)``;
    ``run`` is false for opt-in targets unless ``include_opt_in``."""
    names: list[tuple[Literal["target", "power"], str, bool]] = []
    for backend, entry in backends.BUILTIN.items():
        for device in (*entry.devices, *entry.named_only_devices):
            names.append(("target", f"{backend}:{device}", entry.auto or include_opt_in))
    names.extend(("power", name, True) for name in power.BUILTIN)
    return names


def _child_env(machine: Machine) -> dict[str, str]:
    """The probe's environment: the machine's, with this pytest-ipu importable (appended to
    ``PYTHONPATH``, after whatever the SDK's enable script put there)."""
    env = dict(machine.environ)
    here = str(Path(__file__).resolve().parent.parent)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([*parts, here] if here not in parts else parts)
    return env


@dataclass(frozen=True)
class ChildResult:
    """What one child process of the doctor reported: the JSON of its result line, or, when it gave
    none (it was killed at its time limit, crashed or exited early), the one-line reason; its stderr
    either way, and how long it ran."""

    data: Mapping[str, Any] | None
    failure: str
    stderr: str
    wall_s: float


def run_child(module_args: Sequence[str], machine: Machine, timeout_s: float, workdir: Path) -> ChildResult:
    """``python -m <module_args>`` in a child process of this interpreter, in a session of its own,
    killed with its whole process group (any helper or worker process it started) after
    ``timeout_s``; its result is the last line of its stdout that starts with ``RESULT_PREFIX``."""
    command = [sys.executable, "-m", *module_args]
    start = time.perf_counter()
    # A fresh session: on a timeout the whole group goes, with any helper process the runtime started.
    with subprocess.Popen(
        command,
        cwd=workdir,  # not the caller's directory, whose files could shadow the runtimes' modules
        env=_child_env(machine),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            return ChildResult(
                None,
                f"did not finish within {timeout_s:g} s and was killed; a device that never frees, or a "
                "compile that slow: rerun with a larger --timeout, or check the device with gc-monitor",
                stderr,
                time.perf_counter() - start,
            )
    wall_s = time.perf_counter() - start
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return ChildResult(json.loads(remove_prefix(line, RESULT_PREFIX)), "", stderr, wall_s)
    last = next((ln.strip() for ln in reversed(stderr.splitlines()) if ln.strip()), "no output")
    return ChildResult(None, f"its process exited with code {proc.returncode}: {last}", stderr, wall_s)


def run_probe(
    kind: Literal["target", "power"], name: str, machine: Machine, timeout_s: float, workdir: Path
) -> Check:
    """Run one probe in a child process, killed (with its process group) after ``timeout_s``."""
    child = run_child(["pytest_ipu.cli.doctor", "probe", kind, name], machine, timeout_s, workdir)
    if child.data is None:
        return Check(kind, name, "FAILED", child.failure)
    data = child.data
    return Check(kind, name, data["status"], data["detail"], data.get("facts", {}))


def probe_all(
    machine: Machine, timeout_s: float, include_opt_in: bool = False, only: Sequence[str] | None = None
) -> list[Check]:
    """Every target and power source (or those named in ``only``), one after another: two probes at
    once could contend for the same IPUs."""
    checks = []
    with tempfile.TemporaryDirectory(prefix="pytest-ipu-doctor-") as tmp:
        for kind, name, run in probe_names(include_opt_in):
            if only is not None and name not in only:
                continue
            if run:
                checks.append(run_probe(kind, name, machine, timeout_s, Path(tmp)))
            else:
                checks.append(
                    Check(kind, name, "not run", "opt-in target (compiling takes minutes): --all runs it")
                )
    return checks


#: The name ``only`` gives to the IPU device listing (``diagnose``).
DEVICES = "ipu-devices"


def read_devices(machine: Machine, timeout_s: float) -> DeviceListing:
    """PopART's two enumerations and their translation, read in a child process (``devices_main``)
    killed after ``timeout_s``, as a probe is: popart may wait for a driver."""
    with tempfile.TemporaryDirectory(prefix="pytest-ipu-doctor-") as tmp:
        child = run_child(["pytest_ipu.cli.doctor", "devices"], machine, timeout_s, Path(tmp))
    if child.data is None:
        return DeviceListing("FAILED", child.failure)
    data = child.data
    return DeviceListing(data["status"], data["detail"], data.get("table", {}), tuple(data.get("lines", ())))


def devices_main() -> int:
    """The listing process: ``DeviceTable`` of ``import popart``, printed as one JSON line."""
    from pytest_ipu.devices import driver_ids

    try:
        popart = import_sdk("popart")
    except Exception as exc:
        result: dict[str, object] = {
            "status": "absent",
            "detail": f"popart is not importable: {describe_error(exc)}",
        }
    else:
        try:
            table = driver_ids.read(popart)
        except Exception as exc:
            traceback.print_exc()
            result = {"status": "FAILED", "detail": f"enumerateDevices failed: {describe_error(exc)}"}
        else:
            result = {
                "status": "works",
                "detail": f"{len(table.singles)} single-IPU and {len(table.multis)} multi-IPU device(s), "
                f"{len(table.mismatches)} mismatch(es)",
                "table": table.as_json(),
                "lines": table.lines(),
            }
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


# -- the probe process's side --------------------------------------------------------------------------


def tiny_onnx_model() -> bytes:
    """A one-node ONNX model, ``y = x + x`` on float ``[batch, 4]`` at opset 11, encoded by hand so
    that runtimes without torch (nor the onnx package) can still be tried.

    Protocol-buffer wire format of ``onnx.proto``'s ``ModelProto``: ir_version 6 (opset 11's),
    opset_import, graph (node ``Add``, input ``x``, output ``y``).
    """

    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def num(field_no: int, n: int) -> bytes:
        return varint(field_no << 3) + varint(n)

    def sub(field_no: int, payload: bytes | str) -> bytes:
        data = payload.encode() if isinstance(payload, str) else payload
        return varint(field_no << 3 | 2) + varint(len(data)) + data

    dims = sub(1, sub(2, "batch")) + sub(1, num(1, 4))  # TensorShapeProto.dim: dim_param, dim_value
    tensor_type = sub(1, num(1, 1) + sub(2, dims))  # TypeProto.tensor_type: elem_type FLOAT, shape

    def value_info(name: str) -> bytes:
        return sub(1, name) + sub(2, tensor_type)

    node = sub(1, "x") + sub(1, "x") + sub(2, "y") + sub(4, "Add")
    graph = sub(1, node) + sub(2, "doctor") + sub(11, value_info("x")) + sub(12, value_info("y"))
    return num(1, 6) + sub(2, "pytest-ipu doctor") + sub(7, graph) + sub(8, sub(1, "") + num(2, 11))


def as_array(out: object) -> Any:
    """A model's first output as a float32 numpy array (torch tensors brought to the host)."""
    import numpy as np

    while isinstance(out, (list, tuple)):
        out = out[0]
    if hasattr(out, "detach"):
        out = out.detach().cpu().float().numpy()
    return np.asarray(out, dtype=np.float32)


def tiny_model(target: Target) -> tuple[object, tuple[object, ...], Any, str]:
    """``(model, inputs, expected output, description)``: a torch ``Linear(4, 2)`` where torch is
    installed (the ONNX targets then go through the plugin's exporter, as users' models do), else
    the hand-encoded ONNX model. The expected output is computed on the host."""
    import numpy as np

    x = np.linspace(-1.0, 1.0, 8, dtype=np.float32).reshape(2, 4)
    if importlib.util.find_spec("torch") is not None or target.backend == "poptorch":
        torch = importlib.import_module("torch")
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2).eval()
        inputs = torch.from_numpy(x)
        with torch.no_grad():
            expected = model(inputs).numpy()
        return model, (inputs,), expected, "a torch Linear(4, 2)"
    return tiny_onnx_model(), (x,), x + x, "a one-node ONNX model (x + x)"


#: The module each built-in backend runs on: installed but failing to import, its targets have FAILED.
RUNTIMES: Mapping[str, str] = {
    "torch": "torch",
    "torch-compile": "torch",
    "onnxruntime": "onnxruntime",
    "onnxruntime-trt": "onnxruntime",
    "poptorch": "poptorch",
    "popart": "popart",
}


def _unavailable_status(target: Target) -> Status:
    """``FAILED`` when the target's runtime is installed but fails to import (PopTorch with the wrong
    torch, popart after onnx, an SDK built for another Python): present, but broken. Else ``absent``."""
    runtime = RUNTIMES.get(target.backend)
    if runtime is None or _module_location(runtime) is None:
        return "absent"
    try:
        import_sdk(runtime)
    except Exception:  # whatever the import raises, the backend's reason already says it
        return "FAILED"
    return "absent"


@dataclass(frozen=True)
class TinyRun:
    """The tiny model compiled once on a target and called ``len(run_s)`` times, each timed on the
    host around the call alone (``time.perf_counter``), and whether its last output was the host's."""

    what: str
    device_name: str
    compile_s: float
    run_s: tuple[float, ...]
    output: list[Any]
    expected: list[Any]
    matches: bool
    phases_s: Mapping[str, float]
    #: The device's own latency counters for the last call (PopTorch's ``getLatency`` and the
    #: others, ``HasDeviceLatency``); ``None`` for a model without them.
    device_latency: Mapping[str, object] | None


def run_tiny_model(backend: Backend, target: Target, runs: int = 1) -> TinyRun:
    """Compile the doctor's tiny model with ``backend`` (present: its ``availability`` said so) in
    fp32, call it ``runs`` times on prepared inputs, read the device's latency counters, close it."""
    import numpy as np

    model, inputs, expected, what = tiny_model(target)
    start = time.perf_counter()
    compiled = backend.compile(model, inputs, "fp32", {})
    compile_s = time.perf_counter() - start
    run_s: list[float] = []
    try:
        args = compiled.prepare_inputs(inputs)
        out: object = None
        for _ in range(runs):
            start = time.perf_counter()
            out = compiled.run(*args)
            run_s.append(time.perf_counter() - start)
        got = as_array(out)
        latency = compiled.device_latency() if isinstance(compiled, HasDeviceLatency) else None
    finally:
        compiled.close()
    matches = got.shape == expected.shape and bool(np.allclose(got, expected, rtol=1e-2, atol=1e-3))
    return TinyRun(
        what,
        compiled.device_name,
        compile_s,
        tuple(run_s),
        got.tolist(),
        expected.tolist(),
        matches,
        dict(compiled.phases_s),
        None if latency is None else dict(latency),
    )


def _probe_target(name: str, workdir: Path) -> dict[str, object]:
    target = parse_target(name)
    backend = backends.make_backend(target, cache_dir=workdir / "cache")
    if backend is None:
        return {"status": "absent", "detail": backends.unknown_backend_reason(target)}
    availability = backend.availability()
    if not availability.ok:
        return {"status": _unavailable_status(target), "detail": availability.reason}
    ran = run_tiny_model(backend, target)
    if not ran.matches:
        return {
            "status": "FAILED",
            "detail": f"ran {ran.what} on {ran.device_name}, but its output {ran.output} differs from "
            f"the host's {ran.expected}",
        }
    return {"status": "works", "detail": f"compiled and ran {ran.what} on {ran.device_name}"}


def _probe_power(name: str) -> dict[str, object]:
    source = power.make_source(name, "")
    availability = source.availability()
    if not availability.ok:
        return {"status": "absent", "detail": availability.reason}
    devices = source.open()
    try:
        reading = source.read()
    finally:
        source.close()
    unit = "J since open" if source.kind == "energy_counter" else "W"
    values = ", ".join(f"{d.name} {reading[d.id]:.3g} {unit}" for d in devices if d.id in reading)
    return {
        "status": "works",
        "detail": f"read {len(reading)} of {len(devices)} device(s) once ({source.kind}): {values}",
    }


def probe_main(kind: str, name: str) -> int:
    """The probe process: one target or power source, its result printed as one JSON line."""
    # Before anything of the probe runs: whether something (a sitecustomize, a .pth file) imported
    # onnx at start-up, after which ``import popart`` fails.
    facts: dict[str, object] = {"onnx_imported_first": "onnx" in sys.modules}
    try:
        with tempfile.TemporaryDirectory(prefix="pytest-ipu-probe-") as tmp:
            result = _probe_target(name, Path(tmp)) if kind == "target" else _probe_power(name)
    except Exception as exc:
        traceback.print_exc()  # to stderr, which the doctor does not show: the one line is enough
        result = {"status": "FAILED", "detail": describe_error(exc)}
    result["facts"] = facts
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


# -- 3. findings -----------------------------------------------------------------------------------------


def _major_minor(version: str | None) -> str | None:
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return f"{match.group(1)}.{match.group(2)}" if match else None


def findings(
    rows: Sequence[Installed],
    checks: Sequence[Check],
    machine: Machine,
    devices: DeviceListing | None = None,
) -> list[Finding]:
    """The known incompatibilities that hold, each with its fix."""
    return [
        *_listing_findings(devices),
        *_version_findings(rows),
        *_sdk_findings(rows, checks, machine),
        *_environment_findings(rows, machine),
    ]


def _listing_findings(devices: DeviceListing | None) -> list[Finding]:
    """PopART's device listing disagreeing with gcipuinfo's, one finding per mismatch."""
    return [
        Finding(
            f"PopART's device listing: {mismatch}",
            "the IPUs of such a device stay unknown (its energy is not measured, and placement cannot use "
            "it); send the file of `pytest-ipu doctor --first-contact DIR`, which records both enumerations",
        )
        for mismatch in (devices.table.get("mismatches", ()) if devices is not None else ())
    ]


def _version_findings(rows: Sequence[Installed]) -> list[Finding]:
    """Versions installed that cannot work together: poptorch's torch, PopART's numpy."""
    found: list[Finding] = []
    torch = _version_of(rows, "torch")
    poptorch = _version_of(rows, "poptorch")
    popart = _version_of(rows, "popart")
    numpy = _version_of(rows, "numpy")
    needed = POPTORCH_TORCH.get(_major_minor(poptorch) or "")
    if poptorch and needed and not (torch or "").startswith(needed):
        found.append(
            Finding(
                f"poptorch {poptorch} needs torch=={needed} exactly (it asserts so at import) but torch "
                f"{torch or 'is not installed'}{' is installed' if torch else ''}",
                f"pip install torch=={needed} in this environment (poptorch's own requirement; its wheel "
                "names the CPU build from download.pytorch.org/whl/cpu)",
            )
        )
    if popart and numpy and int((_major_minor(numpy) or "0.0").split(".")[0]) >= 2:
        found.append(
            Finding(
                f"PopART 3.4 is built for numpy 1.x (it pins numpy=={POPART_NUMPY}) but numpy {numpy} is "
                "installed",
                f"pip install numpy=={POPART_NUMPY} (or another 1.x) in the popart targets' environment",
            )
        )
    return found


def _sdk_findings(rows: Sequence[Installed], checks: Sequence[Check], machine: Machine) -> list[Finding]:
    """The Poplar SDK's own conditions: popart imported after onnx, and its Python 3.8 wheels."""
    found: list[Finding] = []
    popart = _version_of(rows, "popart")
    poptorch = _version_of(rows, "poptorch")
    env = machine.environ
    if popart and any(c.facts.get("onnx_imported_first") for c in checks):
        found.append(
            Finding(
                "onnx was imported before popart at start-up (a sitecustomize or .pth file imports it), and "
                "popart refuses to be imported after onnx",
                "remove that start-up import of onnx; in tests, 'import popart' first thing in conftest.py",
            )
        )
    sdk_signs = env.get("POPLAR_SDK_ENABLED") or popart or poptorch or machine.which("gc-info")
    sdk_python_works = any(
        c.kind == "target" and c.name.split(":")[0] in ("popart", "poptorch") and c.status == "works"
        for c in checks
    )
    if sdk_signs and sys.version_info[:2] != (3, 8) and not sdk_python_works:
        found.append(
            Finding(
                f"the Poplar SDK 3.4 Python wheels (poptorch, popart) are built for CPython 3.8 only, and "
                f"this is Python {platform.python_version()}: the SDK's modules cannot load here, so no IPU "
                "target can run in this interpreter",
                "make the environment on the SDK's Python 3.8 (Ubuntu 20.04's python3.8): python3.8 -m venv "
                "venv, then the SDK's wheels and pytest-ipu into it (docs/ipu.md, Install)",
            )
        )
    return found


def _environment_findings(rows: Sequence[Installed], machine: Machine) -> list[Finding]:
    """What the environment gets wrong around the runtimes: mpirun's variables, two onnxruntime
    packages, a visible GPU without the library that reads its energy."""
    found: list[Finding] = []
    env = machine.environ
    ompi = {k: env[k] for k in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK") if k in env}
    if ompi:
        shown = " ".join(f"{k}={v}" for k, v in ompi.items())
        found.append(
            Finding(
                f"{shown} is set: this runs under mpirun or PopRun, where a plain poptorch.Options() "
                "joins one distributed replicated graph across processes",
                "run pytest-ipu doctor outside mpirun/poprun (PopRun launches go through pytest-ipu's "
                "PopRun support, docs/ipu.md)",
            )
        )
    if _version_of(rows, "onnxruntime") and _version_of(rows, "onnxruntime-gpu"):
        found.append(
            Finding(
                "onnxruntime and onnxruntime-gpu are both installed; they share the onnxruntime module, so "
                "whichever was installed last is the one imported",
                "pip uninstall -y onnxruntime onnxruntime-gpu, then install the one you need "
                "(onnxruntime-gpu for CUDA)",
            )
        )
    gpu_visible = machine.which("nvidia-smi") or machine.nvidia_proc.exists()
    if gpu_visible and not _version_of(rows, "nvidia-ml-py"):
        found.append(
            Finding(
                "an NVIDIA GPU is visible (nvidia-smi or /proc/driver/nvidia) but nvidia-ml-py is not "
                "installed, so GPU energy is not measured",
                "pip install 'pytest-ipu[nvidia]' (nvidia-ml-py)",
            )
        )
    return found


# -- the report -------------------------------------------------------------------------------------------


def diagnose(
    machine: Machine,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    include_opt_in: bool = False,
    only: Sequence[str] | None = None,
) -> Report:
    """Find what is installed, probe every target and power source (or those named in ``only``), and
    check the incompatibilities."""
    rows = installed(machine)
    checks = probe_all(machine, timeout_s, include_opt_in, only)
    devices = None
    if _version_of(rows, "popart") and (only is None or DEVICES in only):
        devices = read_devices(machine, timeout_s)
    return Report(tuple(rows), tuple(checks), tuple(findings(rows, checks, machine, devices)), devices)


def _on_ipu_hardware(target: str) -> bool:
    return parse_target(target).device_kind == "ipu"


def ipu_line(report: Report) -> str:
    """Whether IPU hardware works here; if not, which ``ipu`` targets say why (in the table)."""
    if report.ipu_present:
        return "IPU: present, and a model ran on it"
    names = [c.name for c in report.checks if c.kind == "target" and _on_ipu_hardware(c.name)]
    why = f" ({' and '.join(names)} say why above)" if names else ""
    return f"IPU: no IPU is present or usable here{why}"


def render(report: Report) -> str:
    """The text report: installed, the table of targets and power sources, the IPU line, the findings."""
    lines = ["installed:"]
    width = max(len(i.name) for i in report.installed)
    for item in report.installed:
        version = item.version or "absent"
        lines.append(f"  {item.name:{width}}  {version}{'  (' + item.detail + ')' if item.detail else ''}")
    # "status" padded to 8, wider than every status word ("not run"): the column keeps one width
    # whichever statuses this machine has.
    checks = Table(
        ["target / power source", "status  ", "detail"], [[c.name, c.status, c.detail] for c in report.checks]
    )
    lines += ["", *checks.grid()]
    if report.devices is not None:
        lines += [
            "",
            f"IPU devices (PopART's enumerateDevices; driverIds -> gc-info -l ids): {report.devices.detail}",
        ]
        lines += [f"  {line}" for line in report.devices.lines]
    lines += ["", ipu_line(report), ""]
    if report.findings:
        lines.append("incompatibilities:")
        lines.extend(f"- {f.line()}" for f in report.findings)
    else:
        lines.append("incompatibilities: none of the known ones holds here")
    failed = [c.name for c in report.checks if c.status == "FAILED"]
    lines.append(
        f"\nFAILED: {', '.join(failed)}" if failed else "\nevery present target and power source works"
    )
    return "\n".join(lines)


#: The longest ``--timeout``: a day, as the plugin's longest duration (``--ipu-call-timeout``).
MAX_TIMEOUT_S = 86_400.0


def bad_timeout(timeout_s: float) -> str | None:
    """The one-line error for a ``--timeout`` that is not a positive number of seconds up to a day
    (the plugin's longest duration), else ``None``: 1e308 or inf would overflow the probe's wait."""
    if 0 < timeout_s <= MAX_TIMEOUT_S:
        return None
    return (
        f"pytest-ipu: doctor --timeout {timeout_s:g}: not a positive number of seconds up to "
        f"{MAX_TIMEOUT_S:g}; give e.g. 300"
    )


def main(fmt: str = "table", timeout_s: float = DEFAULT_TIMEOUT_S, include_opt_in: bool = False) -> int:
    """``pytest-ipu doctor``: print the report; 0 when every present target and source worked, 1 when
    one failed, 2 for a time limit that is not a positive number of seconds."""
    bad = bad_timeout(timeout_s)
    if bad:
        print(bad, file=sys.stderr)
        return 2
    report = diagnose(Machine(), timeout_s, include_opt_in)
    print(json.dumps(report.as_json(), indent=2) if fmt == "json" else render(report))
    return report.exit_code


def _probe_entry(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_ipu.cli.doctor", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    probe = sub.add_parser("probe", help="probe one target or power source (the doctor's child process)")
    probe.add_argument("kind", choices=("target", "power"))
    probe.add_argument("name")
    sub.add_parser("devices", help="read PopART's device listing (the doctor's child process)")
    args = parser.parse_args(argv)
    if args.command == "devices":
        return devices_main()
    return probe_main(args.kind, args.name)


if __name__ == "__main__":
    sys.exit(_probe_entry(sys.argv[1:]))
