"""What a backend's ``compile`` is given, read the one way every backend shares: the model's name in
messages, an ONNX model's source (a torch model exported first), and the options (the backend's
defaults overlaid, an unknown name refused, each value checked with one message form).

``base.py`` is the contract (the protocols and the compiled model), imported wherever a backend is
only handled; this is the work behind a compile, and it loads the ONNX exporter, which those
importers (placement, the fixtures, the doctor) never need.
"""

from __future__ import annotations

from collections.abc import Collection
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ipu.backends import onnx_export
from pytest_ipu.errors import CompileError

__all__ = ["CheckedOptions", "OnnxSource", "is_torch_module", "model_label", "model_name", "onnx_source"]


def model_name(model: object) -> str:
    """The model as a message names it: its class (``Sequential``, ``bytes``, ``PosixPath``)."""
    return type(model).__name__


def model_label(model: object) -> str:
    """The model as a message names it where a path says more than its class: a path (``str`` or
    ``Path``) quoted, anything else by its class (``model_name``)."""
    if isinstance(model, (str, Path)):
        return repr(str(model))
    return model_name(model)


def is_torch_module(model: object) -> bool:
    """Whether ``model`` is a torch model (a ``torch.nn.Module``'s ``state_dict`` and ``forward``),
    told without importing torch: an ONNX backend may run where torch is absent."""
    return hasattr(model, "state_dict") and hasattr(model, "forward")


@dataclass(frozen=True)
class OnnxSource:
    """The ONNX model a backend loads, and the export that wrote it where it was a torch model."""

    #: The ONNX model as the runtime takes it: its bytes, or the path of its file.
    model: bytes | str
    #: The export (``onnx_export.export``); ``None`` where the model was given as ONNX.
    exported: onnx_export.ExportedModel | None = None

    def record(self, phases: dict[str, float], info: dict[str, Any]) -> None:
        """Note the export, where there was one, as the compile phase ``export`` and in its facts
        (``export_cached``, ``onnx_sha256``)."""
        if self.exported is not None:
            phases["export"] = self.exported.export_s
            info.update(export_cached=self.exported.cached, onnx_sha256=self.exported.sha256)


def onnx_source(
    backend: str,
    model: object,
    example_inputs: Sequence[object],
    cache_dir: Path,
    options: onnx_export.ExportOptions,
) -> OnnxSource:
    """``model`` as ONNX: a torch model exported with ``options`` (cached under ``cache_dir``), ONNX
    bytes or a path as they are. Anything else is a ``CompileError`` naming ``backend`` and what was
    given."""
    if is_torch_module(model):
        exported = onnx_export.export(model, example_inputs, cache_dir, options)
        return OnnxSource(str(exported.path), exported)
    if isinstance(model, (bytes, str, Path)):
        return OnnxSource(model if isinstance(model, bytes) else str(model))
    raise CompileError(
        f"the {backend} backend needs an ONNX model (bytes or path) or a torch.nn.Module, "
        f"got {model_name(model)}"
    )


class CheckedOptions:
    """One compile's options: the backend's ``defaults`` overlaid with those ``given``, and the checks
    of a value every backend makes.

    An unknown name is refused at once (``CompileError`` naming it, the model and the names allowed).
    Every other refusal is one line, ``<what> <key>=<value> for <model>; <fix>``: ``what`` is how the
    backend names its options (``popart option``; by default ``<backend> backend option``), and
    ``name_model=False`` leaves out `` for <model>``.
    """

    def __init__(
        self,
        backend: str,
        defaults: Mapping[str, object],
        given: Mapping[str, object],
        model: str,
        *,
        what: str | None = None,
        name_model: bool = True,
    ) -> None:
        unknown = sorted(set(given) - set(defaults))
        if unknown:
            raise CompileError(
                f"unknown {backend} backend option(s) {', '.join(map(repr, unknown))} for {model}; "
                f"allowed: {', '.join(defaults)}"
            )
        #: The options, every default filled in; a backend's own checks may resolve values in place.
        self.values: dict[str, object] = {**defaults, **given}
        #: The model as the messages name it.
        self.model = model
        self._what = f"{backend} backend option" if what is None else what
        self._for = f" for {model}" if name_model else ""

    def refuse(self, key: str, fix: str) -> CompileError:
        """The error refusing option ``key``'s value, telling the user to ``fix`` it (``use ...``)."""
        return CompileError(f"{self._what} {key}={self.values[key]!r}{self._for}; {fix}")

    def positive_int(self, key: str) -> int:
        """Option ``key``, which must be an integer of at least 1 (``True`` is no count)."""
        value = self.values[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.refuse(key, "use a positive integer")
        return value

    def non_negative_int(self, key: str) -> int:
        """Option ``key``, which must be an integer of at least 0 (``True`` is no count)."""
        value = self.values[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.refuse(key, "use a non-negative integer")
        return value

    def flag(self, key: str) -> bool:
        """Option ``key``, which must be ``True`` or ``False``."""
        value = self.values[key]
        if not isinstance(value, bool):
            raise self.refuse(key, "use True or False")
        return value

    def one_of(self, key: str, allowed: Collection[object], fix: str) -> object:
        """Option ``key``, which must be in ``allowed``; ``fix`` lists them as the backend writes them."""
        value = self.values[key]
        if value not in allowed:
            raise self.refuse(key, fix)
        return value
