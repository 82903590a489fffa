"""The lazy registry of built-in backends: names map to ``"module:Class"`` strings plus arguments.

Nothing here imports a runtime. A conftest can add or replace backends through the
``pytest_ipu_make_backend`` hook; this registry is only the built-in default.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import cast

from pytest_ipu.backends.target import Target

if TYPE_CHECKING:
    # Only a type here: the registry is read at start-up (option parsing), the protocol's module
    # loads the records, which a run without benchmarks never needs.
    from pytest_ipu.backends.base import Backend

__all__ = [
    "BUILTIN",
    "BackendEntry",
    "Target",
    "all_candidates",
    "auto_candidates",
    "make_backend",
    "unknown_backend_reason",
    "unknown_target_reason",
]

#: What people type for a device a backend calls otherwise; difflib alone would answer 'cpu' for 'gpu'.
_DEVICE_ALIASES = {"gpu": "cuda", "nvidia": "cuda", "cuda0": "cuda", "host": "cpu"}


@dataclass(frozen=True)
class BackendEntry:
    """A built-in backend: where its class lives, how to construct it, and its candidate devices.

    ``auto`` entries take part in ``--ipu-backend=auto`` on every candidate device that is present.
    """

    factory: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    devices: tuple[str, ...] = ()
    auto: bool = True
    #: Whether the constructor takes ``cache_dir`` (where exported models are kept).
    uses_cache_dir: bool = False
    #: Whether the constructor takes ``intra_op_threads`` and ``inter_op_threads`` (torch's
    #: process-wide thread counts, ``--ipu-torch-threads`` and ``--ipu-torch-interop-threads``).
    uses_threads: bool = False
    #: Devices accepted when named but never candidates: the IPU Model simulator, whose timings are
    #: not hardware timings, must be asked for (``popart:ipu-model``), never found by ``auto``.
    named_only_devices: tuple[str, ...] = ()

    def accepts(self, device_kind: str) -> bool:
        """Whether ``device_kind`` (a device without its ``:N`` index) is one this backend runs on."""
        return device_kind in self.devices or device_kind in self.named_only_devices


BUILTIN: Mapping[str, BackendEntry] = {
    "torch": BackendEntry(
        "pytest_ipu.backends.torch:TorchBackend", {"mode": "eager"}, ("cpu", "cuda"), uses_threads=True
    ),
    # torch.compile is opt-in: compiling a large model takes minutes on a small CPU.
    "torch-compile": BackendEntry(
        "pytest_ipu.backends.torch:TorchBackend",
        {"mode": "compile"},
        ("cpu", "cuda"),
        auto=False,
        uses_threads=True,
    ),
    "onnxruntime": BackendEntry(
        "pytest_ipu.backends.onnxruntime:OrtBackend", {}, ("cpu", "cuda"), uses_cache_dir=True
    ),
    # Graphcore IPUs. Their SDK wheels cannot come from PyPI; where absent they are listed as such.
    "poptorch": BackendEntry(
        "pytest_ipu.backends.ipu.poptorch_training:PopTorchTrainingBackend",
        {},
        ("ipu",),
        named_only_devices=("ipu-model",),
    ),
    "popart": BackendEntry(
        "pytest_ipu.backends.ipu.popart:PopArtBackend",
        {},
        ("ipu",),
        uses_cache_dir=True,
        named_only_devices=("ipu-model",),
    ),
    # TensorRT builds engines per shape and takes minutes for a large model: opt-in.
    "onnxruntime-trt": BackendEntry(
        "pytest_ipu.backends.onnxruntime:OrtBackend",
        {"provider": "tensorrt"},
        ("cuda",),
        auto=False,
        uses_cache_dir=True,
    ),
}


def make_backend(
    target: Target,
    cache_dir: Path | None = None,
    threads: tuple[int | None, int | None] = (None, None),
) -> Backend | None:
    """Construct the built-in backend for ``target``, or ``None`` if the name is not built in.

    ``threads`` is (intra-op, inter-op) thread counts, ``None`` for the runtime's default; only
    backends whose entry ``uses_threads`` (the torch ones) receive it, the others ignore it.
    """
    entry = BUILTIN.get(target.backend)
    if entry is None:
        return None
    module_name, _, class_name = entry.factory.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    kwargs = dict(entry.kwargs)
    if entry.uses_cache_dir:
        kwargs["cache_dir"] = cache_dir
    if entry.uses_threads:
        kwargs["intra_op_threads"], kwargs["inter_op_threads"] = threads
    return cast("Backend", cls(name=target.backend, device=target.device, **kwargs))


def auto_candidates() -> list[Target]:
    """Every (backend, device) pair that ``--ipu-backend=auto`` considers, in registry order."""
    return [Target(name, device) for name, entry in BUILTIN.items() if entry.auto for device in entry.devices]


def all_candidates() -> list[Target]:
    """Every built-in (backend, device) pair, ``auto`` ones first."""
    ordered = sorted(BUILTIN.items(), key=lambda item: not item[1].auto)
    return [Target(name, device) for name, entry in ordered for device in entry.devices]


def unknown_backend_reason(target: Target) -> str:
    """``unknown backend 'troch' (did you mean 'torch'?); built in: torch, torch-compile``."""
    close = difflib.get_close_matches(target.backend, list(BUILTIN), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"unknown backend {target.backend!r}{hint}; built in: {', '.join(BUILTIN)} "
        "(a conftest can add others with the pytest_ipu_make_backend hook)"
    )


def unknown_target_reason(target: Target) -> str | None:
    """Why ``target`` is not a built-in backend on one of its devices, or ``None`` when it is one.

    ``None`` says nothing about this machine: ``torch:cuda`` is known even without a GPU (the test
    then skips with the backend's reason). A device is ``kind`` or ``kind:N`` (``cuda:1``, ``ipu:3``).
    A name or device that is not built in may still come from a conftest's ``pytest_ipu_make_backend``.
    """
    entry = BUILTIN.get(target.backend)
    if entry is None:
        return unknown_backend_reason(target)
    kind = target.device_kind
    if kind is None or entry.accepts(kind):
        return None
    known = (*entry.devices, *entry.named_only_devices)
    alias = _DEVICE_ALIASES.get(kind)
    close = [alias] if alias in known else difflib.get_close_matches(kind, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"unknown device {target.device!r} for backend {target.backend!r}{hint}; "
        f"{target.backend} runs on {', '.join(known)} (each may take an index: {entry.devices[-1]}:1)"
    )
