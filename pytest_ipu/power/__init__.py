"""Power sources by vendor, found through a lazy registry; nothing here imports a vendor library.

``auto`` picks the source that measures a compute device: NVML for ``cuda`` devices, RAPL for the
``cpu``, gcipuinfo for ``ipu`` devices.
"""

from __future__ import annotations

import importlib
import re
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


def make_source(name: str, device: str) -> PowerSource:
    """Construct source ``name`` for the compute ``device`` it should measure."""
    module_name, _, class_name = BUILTIN[name].partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    kind, _, index = device.partition(":")
    kwargs: dict[str, Any] = {}
    if name == "nvml" and kind == "cuda":
        kwargs["devices"] = [int(index) if index else 0]
    elif name == "gcipuinfo" and kind == "ipu" and index:
        kwargs["ipus"] = [int(i) for i in index.split(",")]
    return cast(PowerSource, cls(**kwargs))
