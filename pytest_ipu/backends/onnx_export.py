"""Export a torch model to ONNX with a dynamic batch dimension, cached on disk by content.

The cache key hashes what determines the exported graph: the model's structure (module tree and the
source of each module class's ``forward``), its weights and buffers, the example inputs' dtypes and
non-batch shapes, the export options, and the torch and onnxscript versions. A cache directory that
cannot be written, or is not its owner's alone, is a ``CacheDirError`` naming it, ``--ipu-cache-dir``
and the fix, never a bare ``OSError``. torch, onnx and onnxscript are imported inside the functions
that need them.

Documented in docs/onnx.md (sections "Export": which of torch's exporters writes the file, and "The
export cache": the key, the hash check, the directory's owner and the files' modes).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import io
import json
import logging
import os
import re
import stat
import time
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ipu.backends.runtime_warnings import runtime_internals_quiet
from pytest_ipu.backports import zip_strict
from pytest_ipu.errors import PytestIpuError
from pytest_ipu.results.atomic import atomic_path

#: The opset used unless a caller asks for another (ONNX Runtime reads it; PopART 3.x asks for 11).
DEFAULT_OPSET = 18
#: The lowest opset torch's dynamo exporter writes; below it the TorchScript exporter is used.
DYNAMO_MIN_OPSET = 18
_FORMAT = 2  # bump when the cache layout or the export recipe changes
#: Mode of the cache's files: readable by all, writable by the owner only, whatever the umask.
CACHE_FILE_MODE = 0o644
#: Mode of the cache directory, and of each directory above it that the export creates: its
#: owner's alone, whatever the umask (see ``_check_private``).
CACHE_DIR_MODE = 0o700


class ExportError(PytestIpuError):
    """torch could not export the model; the message names the model and the exporter's reason."""


class CacheDirError(ExportError):
    """The export cache directory (``--ipu-cache-dir``) cannot be written; one line naming it and the fix."""


@dataclass(frozen=True)
class ExportOptions:
    """What shapes the exported file besides the model: opset and precision (``fp32`` or ``fp16``).

    fp16 models are exported from a half-precision copy of the model, so inputs, weights and outputs
    are all fp16 in the graph.
    """

    opset: int = DEFAULT_OPSET
    precision: str = "fp32"


@dataclass(frozen=True)
class ExportedModel:
    """An ONNX file on disk, with how it came to be there."""

    path: Path
    sha256: str
    cached: bool
    export_s: float
    input_names: tuple[str, ...]
    #: The file's default-domain opset. torch's exporter works at opset 18 and converts down; where
    #: that conversion fails it keeps 18, so this can differ from the opset asked for.
    opset: int


def export(
    model: Any,
    example_inputs: Sequence[Any],
    cache_dir: Path,
    options: ExportOptions = ExportOptions(),
) -> ExportedModel:
    """The ONNX export of ``model`` for these kinds of inputs: from the cache, or exported now."""
    if options.precision not in ("fp32", "fp16"):
        raise ExportError(
            f"cannot export {type(model).__name__} in {options.precision}: ONNX export supports fp32 and fp16"
        )
    key = cache_key(model, example_inputs, options)
    onnx_path, meta_path = cache_dir / f"{key}.onnx", cache_dir / f"{key}.json"
    _check_private(cache_dir)
    found = _cached(onnx_path, meta_path)
    if found is not None:
        return found
    start = time.perf_counter_ns()
    data = _export(model, example_inputs, options)
    names, opset = _inputs_and_opset(data)
    digest = hashlib.sha256(data).hexdigest()
    meta = {
        "format": _FORMAT,
        "sha256": digest,
        "model": type(model).__name__,
        "input_names": list(names),
        "opset": opset,
    }
    entry = cache_dir
    try:
        _make_private_dirs(cache_dir)
        entry = onnx_path
        with atomic_path(onnx_path, mode=CACHE_FILE_MODE) as tmp:
            tmp.write_bytes(data)
        entry = meta_path
        with atomic_path(meta_path, mode=CACHE_FILE_MODE) as tmp:
            tmp.write_text(json.dumps(meta, indent=2), encoding="utf-8")
    except OSError as exc:
        raise CacheDirError(_cache_dir_problem(cache_dir, entry, exc)) from exc
    return ExportedModel(onnx_path, digest, False, (time.perf_counter_ns() - start) * 1e-9, names, opset)


def _cache_dir_problem(cache_dir: Path, entry: Path, exc: OSError) -> str:
    """One line: which directory (and entry) of ``--ipu-cache-dir`` failed, why, and what to do."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    where = f"--ipu-cache-dir={cache_dir}"
    if entry != cache_dir:
        where += f" (writing {entry.name})"
    if exc.errno == errno.ENOSPC or exc.errno == errno.EDQUOT:
        fix = "free space on its file system or pass another directory as --ipu-cache-dir"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "make the directory writable or pass a writable directory as --ipu-cache-dir"
    elif isinstance(exc, IsADirectoryError) and entry != cache_dir:
        fix = f"remove the directory {entry} (the cache keeps files there) or pass another --ipu-cache-dir"
    elif isinstance(exc, (FileExistsError, NotADirectoryError)) or exc.errno in (errno.EEXIST, errno.ENOTDIR):
        fix = "it (or a path above it) is not a directory: pass a directory path as --ipu-cache-dir"
    else:
        fix = "pass a writable directory as --ipu-cache-dir"
    return f"{where}: cannot write the ONNX export cache: {reason}; {fix}"


def _make_private_dirs(cache_dir: Path) -> None:
    """Create ``cache_dir`` and the missing directories above it, each of mode ``CACHE_DIR_MODE``
    exactly: set by ``chmod``, since the mode given to ``mkdir`` is narrowed by the umask (and under
    ``umask 000`` ``Path.mkdir(parents=True)`` leaves 0o777 directories)."""
    missing: list[Path] = []
    path = cache_dir
    while not path.is_dir() and path != path.parent:
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(CACHE_DIR_MODE)
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue  # made meanwhile by another process: its mode is checked, not changed
        directory.chmod(CACHE_DIR_MODE)
    _check_private(cache_dir)


def _check_private(cache_dir: Path) -> None:
    """Refuse a cache directory another user could write to (``CacheDirError``), as ssh refuses its
    files: one owned by another user, or writable by its group or by others. The SHA-256 recorded
    beside each model catches a truncated or corrupt file, not a deliberate one: whoever can write the
    directory can replace a model and its recorded hash together, so only its owner may."""
    try:
        info = cache_dir.stat()
    except OSError:
        return  # absent (created private on the first export) or not a directory (refused there)
    if not stat.S_ISDIR(info.st_mode):
        return
    where = f"--ipu-cache-dir={cache_dir}"
    user = os.geteuid()
    if info.st_uid != user:
        raise CacheDirError(
            f"{where}: refusing the ONNX export cache: the directory is owned by uid {info.st_uid}, "
            f"not by this user (uid {user}), so its models are not this user's to trust; "
            "pass a directory of your own as --ipu-cache-dir"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheDirError(
            f"{where}: refusing the ONNX export cache: the directory has mode {mode:04o}, so other "
            f"users could replace a cached model; run 'chmod go-w {cache_dir}' or pass a private "
            "directory as --ipu-cache-dir"
        )


def cache_key(model: Any, example_inputs: Sequence[Any], options: ExportOptions) -> str:
    """SHA-256 over everything that determines the exported graph (see the module docstring)."""
    import torch

    h = hashlib.sha256()

    def add(text: str) -> None:
        h.update(text.encode())
        h.update(b"\0")

    add(
        f"format={_FORMAT} torch={torch.__version__} onnxscript={_version('onnxscript')} "
        f"opset={options.opset} precision={options.precision}"
    )
    add(repr(model))
    for cls in sorted({type(m) for m in model.modules()}, key=lambda c: f"{c.__module__}.{c.__qualname__}"):
        add(f"{cls.__module__}.{cls.__qualname__}")
        with contextlib.suppress(OSError, TypeError):  # classes defined in a REPL have no source
            add(inspect.getsource(cls.forward))
    # Parameters and every buffer, persistent or not: all of them can change what forward computes.
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        t = tensor.detach().cpu().contiguous()
        add(f"{name} {t.dtype} {tuple(t.shape)}")
        # Through uint8: numpy has no bfloat16, and the bytes are what matter.
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    for x in example_inputs:
        t = torch.as_tensor(x)
        add(f"input {t.dtype} {tuple(t.shape[1:])}")  # the batch dimension is dynamic
    return h.hexdigest()[:32]


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _cached(onnx_path: Path, meta_path: Path) -> ExportedModel | None:
    try:
        if not (_owned(onnx_path) and _owned(meta_path)):
            return None  # left from before the directory was private: replaced, never read
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != _FORMAT or _sha256(onnx_path) != meta["sha256"]:
            return None
        return ExportedModel(
            onnx_path, meta["sha256"], True, 0.0, tuple(meta["input_names"]), int(meta["opset"])
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # missing, unreadable or corrupt: export again


def _owned(path: Path) -> bool:
    """Whether ``path`` is this user's and writable by no one else (``OSError`` when absent)."""
    info = path.stat()
    return info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _inputs_and_opset(data: bytes) -> tuple[tuple[str, ...], int]:
    """The graph's input names (initializers excluded) and its default-domain opset."""
    import onnx

    proto = onnx.load_from_string(data)
    weights = {t.name for t in proto.graph.initializer}
    names = tuple(i.name for i in proto.graph.input if i.name not in weights)
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return names, int(opset)


#: The names :func:`exporter` returns.
DYNAMO = "dynamo"
TORCHSCRIPT = "torchscript"


def exporter(opset: int) -> str:
    """Which of torch's exporters writes a file at ``opset``: :data:`DYNAMO` from
    :data:`DYNAMO_MIN_OPSET` up where the installed torch has it (``torch.export``, and a
    ``torch.onnx.export`` that takes ``dynamo=``: torch 2.5 and later), else :data:`TORCHSCRIPT`."""
    import torch.onnx

    if opset < DYNAMO_MIN_OPSET or importlib.util.find_spec("torch.export") is None:
        return TORCHSCRIPT
    return DYNAMO if _accepts_dynamo(torch.onnx.export) else TORCHSCRIPT


def _accepts_dynamo(export_function: Any) -> bool:
    """Whether ``torch.onnx.export`` can be given ``dynamo=``. Asked of the function, not of torch's
    version number: that is what decides whether passing it is a TypeError (it is in torch 2.0.1)."""
    try:
        parameters = inspect.signature(export_function).parameters.values()
    except (TypeError, ValueError):  # no signature to read: assume the oldest form
        return False
    return any(p.name == "dynamo" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _export(model: Any, example_inputs: Sequence[Any], options: ExportOptions) -> bytes:
    """The exported model as bytes: torch's dynamo exporter from opset 18 up, and its TorchScript
    exporter below, which the dynamo exporter cannot write (it converts down, and keeps opset 18
    where the conversion fails) but PopART 3.x needs (it reads opsets 6 to 11). A torch without the
    dynamo exporter (torch 2.0.1) writes every opset with its TorchScript exporter."""
    import torch
    import torch.onnx

    use_dynamo = exporter(options.opset) == DYNAMO
    if use_dynamo:
        # Imported here, outside the ``try`` below: torch imports its exporter's dependencies
        # lazily, and a Ctrl-C landing inside such a lazy import surfaces as an AttributeError
        # that the ``except Exception`` would turn into an ExportError (the run went on).
        with contextlib.suppress(ImportError):
            importlib.import_module("torch._dynamo")
    half = options.precision == "fp16"
    module = _copy_for_export(model, half)
    inputs = tuple(_as_input(torch, x, half) for x in example_inputs)
    # An input is batched when its leading dimension equals the first input's (the batch size);
    # others (a mask, a lookup table) keep their static shape.
    size = inputs[0].shape[0] if inputs and inputs[0].dim() else None
    batched = [bool(t.dim()) and t.shape[0] == size for t in inputs]
    try:
        with _quiet_exporter():
            if not use_dynamo:
                return _export_torchscript(torch, module, inputs, batched, options.opset)
            # Only here: torch.export does not exist in torch 2.0.1, whose exporter is TorchScript's.
            batch = torch.export.Dim("batch")
            dynamic = tuple({0: batch} if b else None for b in batched)
            program = torch.onnx.export(
                module,
                inputs,
                dynamo=True,
                dynamic_shapes=dynamic,
                opset_version=options.opset,
                verbose=False,
            )
            if program is None:  # only when torch.onnx.export is given a file to write
                raise RuntimeError("the exporter returned no ONNX program")
            data: bytes = program.model_proto.SerializeToString()
            return data
    except Exception as exc:
        if _interrupted(exc):
            # Ctrl-C inside the exporter, turned into another exception on the way out (torch's
            # lazy imports do that): the user asked the run to stop, so it stops.
            raise KeyboardInterrupt from exc
        raise ExportError(f"torch.onnx.export failed for {type(model).__name__}: {_reason(exc)}") from exc


def _interrupted(exc: BaseException) -> bool:
    """Whether a ``KeyboardInterrupt`` is anywhere in ``exc``'s cause or context chain."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue  # chains can loop
        seen.add(id(current))
        if isinstance(current, KeyboardInterrupt):
            return True
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False


def _export_torchscript(
    torch: Any, module: Any, inputs: tuple[Any, ...], batched: list[bool], opset: int
) -> bytes:
    names = [f"input_{i}" for i in range(len(inputs))]
    buffer = io.BytesIO()
    # A torch whose export takes ``dynamo`` is told to trace (from torch 2.9 on, dynamo is its
    # default); torch 2.0.1's export has no such argument and raises a TypeError for it.
    choice = {"dynamo": False} if _accepts_dynamo(torch.onnx.export) else {}
    torch.onnx.export(
        module,
        inputs,
        buffer,
        input_names=names,
        dynamic_axes={name: {0: "batch"} for name, b in zip_strict(names, batched) if b},
        opset_version=opset,
        **choice,
    )
    return buffer.getvalue()


def _reason(exc: BaseException) -> str:
    """The root cause, as ``Type: first line``: the exporter wraps the model's own error in
    multi-paragraph advice with terminal colour codes, which says nothing about this model."""
    root = exc
    while root.__cause__ is not None:
        root = root.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(root)).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(root).__name__}: {first}" if first else type(root).__name__


def _copy_for_export(model: Any, half: bool) -> Any:
    import copy

    module = copy.deepcopy(model).eval().cpu()
    return module.half() if half else module.float()


def _as_input(torch: Any, x: Any, half: bool) -> Any:
    t = torch.as_tensor(x).cpu()
    if t.is_floating_point():
        t = t.half() if half else t.float()
    return t


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence the exporter's progress lines and its internal deprecation warnings."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with runtime_internals_quiet(), Path(os.devnull).open("w") as sink, contextlib.redirect_stdout(sink):
            yield
    finally:
        logger.setLevel(level)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
