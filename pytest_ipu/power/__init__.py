"""Power sources by vendor, found through a lazy registry; nothing here imports a vendor library.

``auto`` picks the source that measures a compute device: NVML for ``cuda`` devices, RAPL for the
``cpu``, gcipuinfo for ``ipu`` devices.

For the power sources, ``ipu:N,M`` names single IPUs by their ``gc-info -l`` (and gcipuinfo) ids,
and ``ipu`` alone every IPU of the partition. A compiled model's device is spelled by its backend,
where ``ipu`` means "any free IPUs" and ``ipu:N`` may name a multi-IPU device: ``metered_device``
turns a model into the IPUs it holds, so that its energy is theirs alone.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from typing import Any
from typing import cast

from pytest_ipu.power.base import PowerSource

#: Built-in sources: name -> ``"module:Class"``.
BUILTIN: dict[str, str] = {
    "nvml": "pytest_ipu.power.nvml:NvmlPowerSource",
    "rapl": "pytest_ipu.power.rapl:RaplPowerSource",
    "gcipuinfo": "pytest_ipu.power.gcipuinfo:GcIpuInfoPowerSource",
}
#: Which source measures which kind of compute device.
FOR_DEVICE_TYPE: dict[str, str] = {"cuda": "nvml", "cpu": "rapl", "host": "rapl", "ipu": "gcipuinfo"}


#: The compute devices a power source can be asked to measure: the CPU (``cpu``; ``host``, the device
#: of plain callables), a CUDA device (``cuda``, ``cuda:N``) and IPUs (``ipu``, ``ipu:N``, ``ipu:N,M``).
_DEVICE = re.compile(r"(?:cpu|host|cuda(?::[0-9]+)?|ipu(?::[0-9]+(?:,[0-9]+)*)?)")
#: Those spellings, as error messages list them.
DEVICE_SPELLINGS = "'cpu', 'host', 'cuda', 'cuda:N', 'ipu', 'ipu:N' or 'ipu:N,M' (N a device index)"


def check_device(device: object) -> str:
    """``device`` when it is a compute device spelled as ``DEVICE_SPELLINGS`` says, else ``ValueError``
    naming the value and the spellings.

    Only the spelling is checked: whether ``cuda:3`` exists here is the power source's to say when
    it opens (NVML names the devices CUDA makes visible), and a source that cannot measure it
    makes the window "not measured" with that reason.
    """
    if not isinstance(device, str) or not _DEVICE.fullmatch(device):
        shown = repr(device) if isinstance(device, str) else f"{device!r} ({type(device).__name__})"
        raise ValueError(f"{shown} is not a compute device: expected {DEVICE_SPELLINGS}, e.g. 'cuda:0'")
    return device


def source_for_device(device: str) -> str | None:
    """The source ``auto`` uses for a compute device (``cuda:1`` -> ``nvml``), or ``None``."""
    return FOR_DEVICE_TYPE.get(device.partition(":")[0])


def ipus_of(device: str) -> list[int] | None:
    """The single IPUs a power device names (``ipu:2,3`` -> ``[2, 3]``); ``None`` for ``ipu`` (every
    IPU of the partition) and for devices that are not IPUs. A conftest's
    ``pytest_ipu_make_power_source`` passes them on as the built-in source does."""
    kind, _, index = device.partition(":")
    if kind != "ipu" or not index:
        return None
    return [int(i) for i in index.split(",")]


def metered_device(device: str, ipu_ids: Sequence[int] | None) -> str | None:
    """The compute device a meter reads for a model compiled on ``device`` holding ``ipu_ids``
    (``CompiledModel.ipu_ids``).

    Any device but IPU hardware is measured as it is. On IPUs it is exactly the single IPUs the
    model holds (``ipu:2,3``), never its device: ``ipu`` would read every IPU of the partition,
    idle boards and other programs' work included, and a backend's ``ipu:N`` may be a multi-IPU
    device's id, which no single-IPU reading carries. ``None`` when the model is on IPUs but which
    ones is unknown (``ipus_of_processes`` may still find them; ``UNKNOWN_IPUS`` says why not).
    """
    if device.partition(":")[0] != "ipu":
        return device
    if not ipu_ids:
        return None
    return "ipu:" + ",".join(str(i) for i in sorted(set(ipu_ids)))


#: Why a model's energy is not measured when it is on IPUs that its backend cannot name and that
#: ``ipus_of_processes`` could not find (``lookup`` says why).
UNKNOWN_IPUS = (
    "which IPUs {target} runs on is unknown (its backend let the SDK choose them, and {lookup}), "
    "so their energy cannot be told apart from the rest of the partition's; pin the device "
    "(target {backend}:ipu:N, N a device id from gc-info -l) to measure it"
)


def ipus_of_processes(
    source: PowerSource | None, pids: Sequence[int], expected: int | None
) -> tuple[tuple[int, ...] | None, str]:
    """The IPUs a model holds, found as those whose user (gcipuinfo's ``"user process id"``) is one
    of ``pids``, the processes running it; else ``None`` and why (``UNKNOWN_IPUS``'s ``lookup``).

    ``source`` is the partition's power source (``None`` where none could be made); only a
    ``ProcessIpus`` source can answer. ``expected`` is how many IPUs the model holds where known
    (``CompiledModel.ipu_count``): a process holding more also holds another model's, and which
    are this one's is then unknown. Never the partition: no IPU found means none.
    """
    from pytest_ipu.power.base import PowerSourceError
    from pytest_ipu.power.base import ProcessIpus

    shown = ", ".join(str(p) for p in pids) or "none"
    if source is None:
        return None, "no power source could be made to list the IPUs' users"
    if not isinstance(source, ProcessIpus):
        return None, f"power source {source.name!r} cannot say which IPUs a process uses"
    try:
        found = tuple(source.ipus_used_by(pids))
    except PowerSourceError as exc:
        return None, f"the IPUs' users could not be listed: {exc}"
    if not found:
        return None, (
            f"{source.name} lists no IPU as used by process {shown} (no IPU's 'user process id' is "
            "that process, or this library does not list the key)"
        )
    if expected is not None and len(found) != expected:
        return None, (
            f"{source.name} lists process {shown} as the user of IPUs {', '.join(map(str, found))}, "
            f"but the model holds {expected}: the process's other IPUs are another model's"
        )
    return found, ""


def make_source(name: str, device: str) -> PowerSource:
    """Construct source ``name`` for the compute ``device`` it should measure."""
    module_name, _, class_name = BUILTIN[name].partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    kind, _, index = device.partition(":")
    kwargs: dict[str, Any] = {}
    if name == "nvml" and kind == "cuda":
        kwargs["devices"] = [int(index) if index else 0]
    elif name == "gcipuinfo":
        kwargs["ipus"] = ipus_of(device)
    return cast(PowerSource, cls(**kwargs))
