"""torch -> ONNX export (pytest_ipu.backends.onnx_export): round trips with a dynamic batch, the
content-keyed disk cache (hits, invalidation, corrupt files, atomic writes) and export errors.

Small models only: each export takes about a second. Models exported once are shared per module.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from pytest_ipu.backends import onnx_export
from pytest_ipu.backends.onnx_export import DEFAULT_OPSET
from pytest_ipu.backends.onnx_export import DYNAMO_MIN_OPSET
from pytest_ipu.backends.onnx_export import ExportedModel
from pytest_ipu.backends.onnx_export import ExportError
from pytest_ipu.backends.onnx_export import ExportOptions
from pytest_ipu.results import atomic
from tests.unit.torch_versions import NO_CPU_FP16
from tests.unit.torch_versions import cpu_runs_fp16
from tests.unit.torch_versions import has_dynamo_exporter
from tests.unit.torch_versions import torch_version

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
if onnx_export.exporter(DEFAULT_OPSET) == onnx_export.DYNAMO:
    pytest.importorskip("onnxscript")  # torch.onnx's dynamo exporter needs it; TorchScript's does not

#: The opset of the round trips: the default, or 17 where torch has only its TorchScript exporter,
#: which in torch 2.0 writes opset-17 Reduce ops into opset 18 (ReduceMean's ``axes`` attribute, an
#: input from opset 18 on) and fails the ONNX checker.
OPSET = DEFAULT_OPSET if onnx_export.exporter(DEFAULT_OPSET) == onnx_export.DYNAMO else 17
FP32 = ExportOptions(opset=OPSET)
FP16 = ExportOptions(opset=OPSET, precision="fp16")


#: Whether fp16 models export here: the TorchScript exporter runs the model to trace it, the dynamo
#: exporter does not.
FP16_EXPORTS = onnx_export.exporter(DEFAULT_OPSET) == onnx_export.DYNAMO or cpu_runs_fp16()
needs_cpu_fp16 = pytest.mark.skipif(
    not FP16_EXPORTS,
    reason=f"{NO_CPU_FP16} (the TorchScript exporter runs the fp16 model to trace it)",
)
PRECISIONS = ["fp32", pytest.param("fp16", marks=needs_cpu_fp16)]
#: Largest allowed error relative to the largest reference magnitude, per precision.
REL_TOL = {"fp32": 1e-5, "fp16": 1e-2}


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, stride=2),
            torch.nn.ReLU(),
        )
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


def conv_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return ConvNet().eval()


def transformer_block() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True).eval()


def tiny() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()).eval()


#: (factory, example input shape, another batch size's input shape)
MODELS = {
    "conv": (conv_net, (2, 3, 12, 12), (5, 3, 12, 12)),
    "transformer": (transformer_block, (2, 7, 16), (3, 7, 16)),
}


#: Whether the transformer exports here: torch's TransformerEncoderLayer branches on tensor values,
#: which the TorchScript exporter's tracer warns about (a TracerWarning, an error under this suite's
#: warning filter); the dynamo exporter does not trace.
TRANSFORMER_EXPORTS = onnx_export.exporter(DEFAULT_OPSET) == onnx_export.DYNAMO
MODEL_NAMES = [
    "conv",
    pytest.param(
        "transformer",
        marks=pytest.mark.skipif(
            not TRANSFORMER_EXPORTS,
            reason="needs torch >= 2.5 (the dynamo exporter): tracing torch's TransformerEncoderLayer "
            "warns (TracerWarning), an error under this suite's warning filter",
        ),
    ),
]


def _session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[ExportedModel, Path]]:
    """Each model of MODELS exported in fp32 and fp16 into one shared cache directory."""
    cache = tmp_path_factory.mktemp("onnx-cache")
    out = {}
    for name, (factory, shape, _) in MODELS.items():
        if name == "transformer" and not TRANSFORMER_EXPORTS:
            continue
        for options in (FP32, FP16) if FP16_EXPORTS else (FP32,):
            torch.manual_seed(1)
            out[name, options.precision] = (
                onnx_export.export(factory(), (torch.randn(shape),), cache, options),
                cache,
            )
    return out


# -- round trips --------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_round_trip_at_another_batch_size_matches_torch_eager(exports, name, precision):
    exported, _ = exports[name, precision]
    factory, example_shape, other_shape = MODELS[name]
    assert exported.cached is False
    assert exported.export_s > 0
    assert exported.path.suffix == ".onnx"
    assert exported.path.exists()
    onnx.checker.check_model(str(exported.path))

    session = _session(exported.path)
    (first, *rest) = session.get_inputs()
    assert rest == []
    assert exported.input_names == (first.name,)
    assert first.type == ("tensor(float)" if precision == "fp32" else "tensor(float16)")
    assert isinstance(first.shape[0], str), f"batch dimension is not symbolic: {first.shape}"
    assert first.shape[1:] == list(example_shape[1:])  # only the batch dimension is dynamic

    torch.manual_seed(2)
    x = torch.randn(other_shape)
    with torch.inference_mode():
        expected = factory()(x).numpy()
    dtype = np.float32 if precision == "fp32" else np.float16
    (out,) = session.run(None, {first.name: x.numpy().astype(dtype)})
    assert out.dtype == dtype
    assert out.shape == expected.shape
    rel = np.max(np.abs(out.astype(np.float64) - expected)) / np.max(np.abs(expected))
    assert rel <= REL_TOL[precision]


def test_recorded_sha256_and_metadata_describe_the_file(exports):
    exported, cache = exports["conv", "fp32"]
    meta = json.loads(exported.path.with_suffix(".json").read_text())
    assert meta["sha256"] == exported.sha256 == onnx_export._sha256(exported.path)
    assert (meta["model"], meta["input_names"]) == ("ConvNet", list(exported.input_names))
    assert exported.path.parent == cache


@needs_cpu_fp16
@pytest.mark.skipif(not TRANSFORMER_EXPORTS, reason="needs torch >= 2.5 (the dynamo exporter)")
def test_the_cache_dir_holds_one_onnx_and_one_json_per_export_and_nothing_else(exports):
    (_, cache), *_ = exports.values()
    stems = {exported.path.stem for exported, _ in exports.values()}
    assert len(stems) == len(exports) == 4  # fp32 and fp16 of each model: four keys
    assert _files(cache) == sorted([f"{s}.onnx" for s in stems] + [f"{s}.json" for s in stems])


# -- the cache -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_a_second_export_is_a_cache_hit_without_exporting(exports, monkeypatch, name, precision):
    exported, cache = exports[name, precision]
    factory, _, other_shape = MODELS[name]

    def no_export(*args, **kwargs):
        raise AssertionError("torch.onnx.export was called on a cache hit")

    monkeypatch.setattr(torch.onnx, "export", no_export)
    # Another object with the same content, and another batch size: the same key.
    options = ExportOptions(opset=OPSET, precision=precision)
    again = onnx_export.export(factory(), (torch.randn(other_shape),), cache, options)
    assert again.cached is True
    assert again.export_s == 0.0
    assert (again.path, again.sha256, again.input_names) == (
        exported.path,
        exported.sha256,
        exported.input_names,
    )


def _key(model, *inputs, **options) -> str:
    return onnx_export.cache_key(model, inputs, ExportOptions(**options))


def test_key_is_stable_for_equal_content():
    x = torch.randn(2, 4)
    model = tiny()
    assert _key(model, x) == _key(model, x) == _key(copy.deepcopy(model), x) == _key(tiny(), x.clone())
    assert len(_key(model, x)) == 32


def test_key_ignores_the_batch_size_and_the_input_values():
    model = tiny()
    assert _key(model, torch.randn(2, 4)) == _key(model, torch.randn(64, 4)) == _key(model, torch.zeros(1, 4))


def _with_changed_weight() -> torch.nn.Module:
    model = tiny()
    with torch.no_grad():
        model[0].weight[1, 2] += 1e-6
    return model


@pytest.mark.parametrize(
    ("what", "key"),
    [
        ("a weight", lambda x: _key(_with_changed_weight(), x)),
        ("the opset", lambda x: _key(tiny(), x, opset=17)),
        ("the precision", lambda x: _key(tiny(), x, precision="fp16")),
        ("an input's non-batch shape", lambda x: _key(tiny(), torch.randn(2, 5))),
        ("an input's dtype", lambda x: _key(tiny(), x.double())),
        ("the number of inputs", lambda x: _key(tiny(), x, x)),
        ("a layer's size", lambda x: _key(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()), x)),
        ("a layer's type", lambda x: _key(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()), x)),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_key_changes_with_what_shapes_the_graph(what, key):
    x = torch.randn(2, 4)
    base = _key(tiny(), x)
    assert key(x) != base, f"changing {what} kept the cache key"


def test_key_changes_with_a_buffer_value():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).eval()
    x = torch.randn(2, 4)
    before = _key(model, x)
    model[1].running_mean.fill_(0.5)
    assert _key(model, x) != before


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor(2.0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def test_key_changes_with_a_non_persistent_buffer():
    model, x = Scaled(), torch.randn(2, 4)
    before = _key(model, x)
    model.scale.fill_(3.0)
    assert _key(model, x) != before


# -- corrupt cache files are rebuilt ---------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[ExportedModel, torch.Tensor]:
    """``tiny()`` exported once; tests copy its cache entry rather than export it again."""
    x = torch.randn(3, 4)
    return onnx_export.export(tiny(), (x,), tmp_path_factory.mktemp("tiny")), x


def _truncate_onnx(onnx_path: Path, meta_path: Path) -> None:
    data = onnx_path.read_bytes()
    onnx_path.write_bytes(data[: len(data) // 2])


def _overwrite_onnx(onnx_path: Path, meta_path: Path) -> None:
    onnx_path.write_bytes(b"\0" * onnx_path.stat().st_size)  # same size, other bytes


def _garble_json(onnx_path: Path, meta_path: Path) -> None:
    meta_path.write_text('{"format": 1, "sha2')


def _json_not_an_object(onnx_path: Path, meta_path: Path) -> None:
    meta_path.write_text("[1, 2, 3]")


def _json_of_another_format(onnx_path: Path, meta_path: Path) -> None:
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "format": meta["format"] + 1}))


@pytest.mark.parametrize(
    "corrupt",
    [_truncate_onnx, _overwrite_onnx, _garble_json, _json_not_an_object, _json_of_another_format],
    ids=lambda f: f.__name__.strip("_"),
)
def test_a_corrupt_cache_entry_is_rebuilt(tmp_path, tiny_export, corrupt):
    first, x = tiny_export
    onnx_path, meta_path = tmp_path / first.path.name, tmp_path / first.path.with_suffix(".json").name
    onnx_path.write_bytes(first.path.read_bytes())
    meta_path.write_bytes(first.path.with_suffix(".json").read_bytes())
    assert onnx_export.export(tiny(), (x,), tmp_path).cached is True  # the copy is a valid entry
    corrupt(onnx_path, meta_path)

    rebuilt = onnx_export.export(tiny(), (x,), tmp_path)
    assert rebuilt.cached is False
    assert rebuilt.export_s > 0
    assert (rebuilt.path, rebuilt.sha256) == (onnx_path, first.sha256)  # the export is reproducible
    assert onnx_export._sha256(onnx_path) == rebuilt.sha256
    assert json.loads(meta_path.read_text())["sha256"] == rebuilt.sha256
    onnx.checker.check_model(str(onnx_path))
    (out,) = _session(onnx_path).run(None, {rebuilt.input_names[0]: x.numpy()})
    with torch.inference_mode():
        np.testing.assert_allclose(out, tiny()(x).numpy(), rtol=1e-5, atol=1e-6)
    assert onnx_export.export(tiny(), (x,), tmp_path).cached is True  # and trusted again
    assert _files(tmp_path) == sorted([onnx_path.name, meta_path.name])  # no temporary left behind


# -- atomic writes ---------------------------------------------------------------------------------------


def test_a_failed_write_leaves_neither_the_file_nor_a_temporary(tmp_path, monkeypatch):
    write_bytes = Path.write_bytes

    def write_half_then_fail(self, data):
        write_bytes(self, data[: len(data) // 2])
        raise OSError("No space left on device")

    monkeypatch.setattr(Path, "write_bytes", write_half_then_fail)
    with pytest.raises(onnx_export.CacheDirError) as excinfo:
        onnx_export.export(tiny(), (torch.randn(2, 4),), tmp_path)
    message = str(excinfo.value)
    assert message.startswith(f"--ipu-cache-dir={tmp_path} (writing ")
    assert "No space left on device" in message
    assert "\n" not in message
    assert _files(tmp_path) == []


def _exported_bytes(tiny_export: tuple[ExportedModel, torch.Tensor]) -> bytes:
    return tiny_export[0].path.read_bytes()


def _fail_with(errno_value: int) -> object:
    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(errno_value, os.strerror(errno_value))

    return fail


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("a file", "is not a directory: pass a directory path as --ipu-cache-dir"),
        ("/dev/null", "is not a directory: pass a directory path as --ipu-cache-dir"),
        ("through a file", "is not a directory: pass a directory path as --ipu-cache-dir"),
        ("read-only", "make the directory writable or pass a writable directory as --ipu-cache-dir"),
        ("disk full", "free space on its file system or pass another directory as --ipu-cache-dir"),
        ("entry is a directory", "(the cache keeps files there) or pass another --ipu-cache-dir"),
    ],
)
def test_cache_dir_faults_are_one_line_naming_the_option_and_the_fix(
    tmp_path, monkeypatch, tiny_export, fault, expected
):
    import errno

    monkeypatch.setattr(onnx_export, "_export", lambda *a: _exported_bytes(tiny_export))
    x = tiny_export[1]
    cache = tmp_path / "cache"
    if fault == "a file":
        cache.write_text("not a directory")
    elif fault == "/dev/null":
        cache = Path(os.devnull)
    elif fault == "through a file":
        (tmp_path / "file").write_text("")
        cache = tmp_path / "file" / "cache"
    elif fault == "read-only":  # injected: this suite may run as root, which writes anywhere
        monkeypatch.setattr(atomic, "create_temporary", _fail_with(errno.EROFS))
    elif fault == "disk full":
        monkeypatch.setattr(atomic, "create_temporary", _fail_with(errno.ENOSPC))
    else:
        key = onnx_export.cache_key(tiny(), (x,), ExportOptions())
        (cache / f"{key}.onnx").mkdir(parents=True)
    with pytest.raises(onnx_export.CacheDirError) as excinfo:
        onnx_export.export(tiny(), (x,), cache)
    message = str(excinfo.value)
    assert message.startswith(f"--ipu-cache-dir={cache}")
    assert message.endswith(expected)
    assert "\n" not in message


def test_cache_files_are_0644_even_under_umask_000(tmp_path, monkeypatch, tiny_export):
    monkeypatch.setattr(onnx_export, "_export", lambda *a: _exported_bytes(tiny_export))
    old = os.umask(0)
    try:
        exported = onnx_export.export(tiny(), (tiny_export[1],), tmp_path)
    finally:
        os.umask(old)
    for path in (exported.path, exported.path.with_suffix(".json")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_the_cache_directory_and_those_made_above_it_are_0700_even_under_umask_000(
    tmp_path, monkeypatch, tiny_export
):
    monkeypatch.setattr(onnx_export, "_export", lambda *a: _exported_bytes(tiny_export))
    cache = tmp_path / "made" / "cache"
    old = os.umask(0)
    try:
        onnx_export.export(tiny(), (tiny_export[1],), cache)
    finally:
        os.umask(old)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.parent.stat().st_mode) == 0o700


def test_atomic_writes_never_change_the_process_umask(tmp_path, monkeypatch):
    # The umask is process-wide: a file another thread created while it was 0 would get mode 0666.
    old = os.umask(0o027)
    try:
        monkeypatch.setattr(os, "umask", lambda *a: pytest.fail("the process umask was changed"))
        atomic.write_bytes(tmp_path / "plain", b"x")
        atomic.write_bytes(tmp_path / "exact", b"x", mode=0o644)
    finally:
        monkeypatch.undo()
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o640  # 0666 less the umask
    assert stat.S_IMODE((tmp_path / "exact").stat().st_mode) == 0o644
    assert _files(tmp_path) == ["exact", "plain"]


def _swap_model(cache: Path, tiny_export: tuple[ExportedModel, torch.Tensor]) -> Path:
    """Another model in place of the cached one, with its SHA-256 rewritten in the ``.json``: what
    someone who can write the directory can do. Returns the cached path."""
    exported = onnx_export.export(tiny(), (tiny_export[1],), cache)
    other = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
    swapped = onnx_export.export(other, (tiny_export[1],), cache / "other").path.read_bytes()
    exported.path.write_bytes(swapped)
    meta_path = exported.path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["sha256"] = hashlib.sha256(swapped).hexdigest()
    meta_path.write_text(json.dumps(meta))
    return exported.path


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757], ids=oct)
def test_a_cache_directory_others_can_write_is_refused_not_read(tmp_path, tiny_export, mode):
    cache = tmp_path / "cache"
    _swap_model(cache, tiny_export)
    cache.chmod(mode)
    with pytest.raises(onnx_export.CacheDirError) as excinfo:
        onnx_export.export(tiny(), (tiny_export[1],), cache)
    assert str(excinfo.value) == (
        f"--ipu-cache-dir={cache}: refusing the ONNX export cache: the directory has mode {mode:04o}, "
        f"so other users could replace a cached model; run 'chmod go-w {cache}' or pass a private "
        "directory as --ipu-cache-dir"
    )


def test_a_cache_directory_of_another_user_is_refused(tmp_path, tiny_export, monkeypatch):
    cache = tmp_path / "cache"
    _swap_model(cache, tiny_export)
    owner = cache.stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    with pytest.raises(onnx_export.CacheDirError) as excinfo:
        onnx_export.export(tiny(), (tiny_export[1],), cache)
    message = str(excinfo.value)
    assert message.startswith(f"--ipu-cache-dir={cache}: refusing the ONNX export cache: ")
    assert f"owned by uid {owner}, not by this user (uid {owner + 1})" in message
    assert message.endswith("pass a directory of your own as --ipu-cache-dir")


def test_an_entry_others_can_write_is_exported_again_not_read(tmp_path, tiny_export):
    # Left from before the directory was private: the export replaces it with a file of its own.
    cache = tmp_path / "cache"
    path = _swap_model(cache, tiny_export)
    path.chmod(0o666)
    again = onnx_export.export(tiny(), (tiny_export[1],), cache)
    assert again.cached is False
    assert path.read_bytes() == _exported_bytes(tiny_export)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


# -- Ctrl-C during the export ----------------------------------------------------------------------------


def _interrupt_as_attribute_error(*args: object, **kwargs: object) -> None:
    """What torch does when Ctrl-C lands in its lazy ``import torch._dynamo``: the KeyboardInterrupt
    becomes the context of an AttributeError."""
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        raise AttributeError("module 'torch' has no attribute '_dynamo'") from None


def _interrupt(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("exporter", [_interrupt_as_attribute_error, _interrupt])
@pytest.mark.parametrize("opset", [DEFAULT_OPSET, 11])
def test_ctrl_c_during_the_export_always_interrupts(tmp_path, monkeypatch, exporter, opset):
    monkeypatch.setattr(torch.onnx, "export", exporter)
    with pytest.raises(KeyboardInterrupt):
        onnx_export.export(tiny(), (torch.randn(2, 4),), tmp_path, ExportOptions(opset=opset))
    assert _files(tmp_path) == []


def test_an_exception_merely_raised_while_handling_another_is_still_an_export_error(tmp_path, monkeypatch):
    def fails(*args: object, **kwargs: object) -> None:
        try:
            raise ValueError("inner")
        except ValueError:
            raise AttributeError("outer") from None

    monkeypatch.setattr(torch.onnx, "export", fails)
    with pytest.raises(ExportError, match="AttributeError: outer"):
        onnx_export.export(tiny(), (torch.randn(2, 4),), tmp_path)


@needs_cpu_fp16
def test_fp16_export_into_a_new_directory_leaves_the_callers_model_and_no_temporaries(tmp_path):
    model = tiny().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cache = tmp_path / "new" / "dir"
    first = onnx_export.export(model, (torch.randn(2, 4),), cache, FP16)  # the directory is created
    again = onnx_export.export(model, (torch.randn(5, 4),), cache, FP16)
    assert (first.cached, again.cached) == (False, True)
    assert _files(cache) == sorted([first.path.name, first.path.with_suffix(".json").name])
    # The export worked on a half-precision eval-mode copy.
    assert model.training
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


# -- errors ---------------------------------------------------------------------------------------------


class Raises(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("this model cannot run today")


class DataDependent(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # control flow on a value: torch.export rejects it
            return x + 1
        return x - 1


@pytest.mark.parametrize("model", [Raises(), DataDependent()], ids=lambda m: type(m).__name__)
def test_export_failure_is_an_export_error_naming_the_model(tmp_path, model):
    with pytest.raises(ExportError) as excinfo:
        onnx_export.export(model, (torch.randn(2, 4),), tmp_path / "cache")
    message = str(excinfo.value)
    assert message.startswith(f"torch.onnx.export failed for {type(model).__name__}: ")
    assert len(message) > len(f"torch.onnx.export failed for {type(model).__name__}: ")
    assert "\n" not in message
    assert excinfo.value.__cause__ is not None  # the exporter's exception is kept
    assert not (tmp_path / "cache").exists()  # nothing written


def test_export_error_gives_the_models_own_reason_without_terminal_colours(tmp_path):
    with pytest.raises(ExportError) as excinfo:
        onnx_export.export(Raises(), (torch.randn(2, 4),), tmp_path)
    assert "this model cannot run today" in str(excinfo.value)
    assert "\x1b[" not in str(excinfo.value)


@pytest.mark.parametrize("precision", ["bf16", "fp8", "FP32"])
def test_other_precisions_are_rejected_before_exporting(tmp_path, precision, monkeypatch):
    monkeypatch.setattr(torch.onnx, "export", lambda *a, **k: pytest.fail("exported"))
    with pytest.raises(ExportError) as excinfo:
        onnx_export.export(tiny(), (torch.randn(2, 4),), tmp_path, ExportOptions(precision=precision))
    assert str(excinfo.value) == (
        f"cannot export Sequential in {precision}: ONNX export supports fp32 and fp16"
    )
    assert _files(tmp_path) == []


def test_export_error_is_a_pytest_ipu_error():
    from pytest_ipu.errors import PytestIpuError

    assert issubclass(ExportError, PytestIpuError)


def test_cache_files_get_the_permissions_of_ordinary_files(tmp_path):
    old = os.umask(0o022)
    try:
        with atomic.atomic_path(tmp_path / "model.onnx") as tmp:
            tmp.write_bytes(b"model")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "model.onnx").stat().st_mode) == 0o644


class Masked(torch.nn.Module):
    """A batched input and an unbatched one (a fixed mask), as attention models often take."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(7, 7)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.proj(x) @ mask


def test_only_inputs_with_the_batch_size_get_a_dynamic_leading_dimension(tmp_path):
    import onnxruntime as ort

    model = Masked().eval()
    mask = torch.eye(7)
    exported = onnx_export.export(model, (torch.randn(3, 7), mask), tmp_path)
    session = ort.InferenceSession(str(exported.path), providers=["CPUExecutionProvider"])
    x_shape, mask_shape = (i.shape for i in session.get_inputs())
    assert isinstance(x_shape[0], str)  # symbolic: any batch size
    assert mask_shape == [7, 7]  # static: not a batch
    x = torch.randn(5, 7)
    (out,) = session.run(
        None, {session.get_inputs()[0].name: x.numpy(), session.get_inputs()[1].name: mask.numpy()}
    )
    np.testing.assert_allclose(out, model(x, mask).detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [11, 17, 18])
def test_the_file_has_the_opset_asked_for_and_a_dynamic_batch(tmp_path, opset):
    """Below opset 18 the TorchScript exporter writes it; from 18 up the dynamo exporter does."""
    import onnxruntime as ort

    model = tiny()
    exported = onnx_export.export(model, (torch.randn(2, 4),), tmp_path, ExportOptions(opset=opset))
    assert exported.opset == opset
    session = ort.InferenceSession(str(exported.path), providers=["CPUExecutionProvider"])
    (x_input,) = session.get_inputs()
    assert x_input.name == exported.input_names[0]
    assert isinstance(x_input.shape[0], str)
    x = torch.randn(7, 4)
    (out,) = session.run(None, {x_input.name: x.numpy()})
    np.testing.assert_allclose(out, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


# -- which of torch's exporters ---------------------------------------------------------------------------


def test_the_dynamo_exporter_writes_from_opset_18_where_this_torch_has_it():
    """Checked against torch's version number; the plugin asks torch's functions (torch 2.5 added
    ``dynamo=`` to ``torch.onnx.export``; torch 2.0.1, PopTorch 3.4's, has only TorchScript's)."""
    assert onnx_export.exporter(11) == onnx_export.TORCHSCRIPT  # PopART's opset, on every torch
    assert onnx_export.exporter(DYNAMO_MIN_OPSET - 1) == onnx_export.TORCHSCRIPT
    newest = onnx_export.DYNAMO if has_dynamo_exporter() else onnx_export.TORCHSCRIPT
    assert onnx_export.exporter(DYNAMO_MIN_OPSET) == onnx_export.exporter(DEFAULT_OPSET) == newest


def test_torch_2_0_1_has_no_dynamo_exporter_to_use():
    """What the plugin relies on in PopTorch 3.4's environment, checked on the torch installed there."""
    if torch_version() != (2, 0):
        pytest.skip(f"checks torch 2.0.x itself; this torch is {torch.__version__}")
    assert "dynamo" not in inspect.signature(torch.onnx.export).parameters
    assert not hasattr(torch, "export")


class _Unreachable:
    """Stands for ``torch.export``, which torch 2.0.1 does not have: any use of it fails the test."""

    def __getattr__(self, name: str) -> object:
        pytest.fail(f"torch.export.{name} was reached on a torch without torch.export")


@pytest.mark.parametrize("opset", [11, DEFAULT_OPSET])
def test_a_torch_without_the_dynamo_exporter_is_called_as_torch_2_0_1_is(tmp_path, monkeypatch, opset):
    """torch 2.0.1's ``torch.onnx.export``: no ``dynamo`` (a TypeError if passed), no ``torch.export``;
    every opset is written by the TorchScript exporter, with a dynamic batch."""
    real = torch.onnx.export
    real_torch_export = getattr(torch, "export", None)
    calls = []

    def export_2_0_1(  # torch 2.0.1's parameters, as torch/onnx/utils.py declares them
        model,
        args,
        f,
        export_params=True,
        verbose=False,
        training=None,
        input_names=None,
        output_names=None,
        operator_export_type=None,
        opset_version=None,
        do_constant_folding=True,
        dynamic_axes=None,
        keep_initializers_as_inputs=None,
        custom_opsets=None,
        export_modules_as_functions=False,
    ):
        calls.append(
            {"input_names": input_names, "dynamic_axes": dynamic_axes, "opset_version": opset_version}
        )
        # The torch installed here writes the file, told to trace where it would otherwise use dynamo,
        # with its own torch.export back in place: newer exporters use it internally.
        newer = {"dynamo": False} if "dynamo" in inspect.signature(real).parameters else {}
        with monkeypatch.context() as inside:
            if real_torch_export is not None:
                inside.setattr(torch, "export", real_torch_export)
            real(
                model,
                args,
                f,
                input_names=input_names,
                dynamic_axes=dynamic_axes,
                opset_version=opset_version,
                **newer,
            )

    monkeypatch.setattr(torch.onnx, "export", export_2_0_1)
    monkeypatch.setattr(torch, "export", _Unreachable(), raising=False)
    assert onnx_export.exporter(opset) == onnx_export.TORCHSCRIPT
    model = tiny()
    exported = onnx_export.export(model, (torch.randn(2, 4),), tmp_path, ExportOptions(opset=opset))
    assert calls == [
        {"input_names": ["input_0"], "dynamic_axes": {"input_0": {0: "batch"}}, "opset_version": opset}
    ]
    assert exported.opset == opset
    session = _session(exported.path)
    (x_input,) = session.get_inputs()
    assert isinstance(x_input.shape[0], str)
    x = torch.randn(5, 4)
    (out,) = session.run(None, {x_input.name: x.numpy()})
    np.testing.assert_allclose(out, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
