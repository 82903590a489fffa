"""The onnxruntime backend (pytest_ipu.backends.onnxruntime) called directly: on the CPU end to end (torch
models through the export cache, ONNX bytes and paths, host and device IO), its option and precision
errors, and availability against a fake onnxruntime module.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

from pytest_ipu.backends import onnx_export
from pytest_ipu.backends import parity
from pytest_ipu.backends.host import cpu_name
from pytest_ipu.backends.onnxruntime import OrtBackend
from pytest_ipu.errors import CompileError
from tests.unit.small_net import eager as _eager
from tests.unit.small_net import inputs as _inputs
from tests.unit.small_net import small_net
from tests.unit.torch_versions import has_dynamo_exporter
from tests.unit.torch_versions import onnx_export_modules

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
for _module in onnx_export_modules():
    pytest.importorskip(_module)
if not has_dynamo_exporter():
    pytest.skip(
        "needs torch >= 2.5: these tests export at ONNX Runtime's default opset 18 and at 20, which only "
        "torch's dynamo exporter writes correctly (torch 2.0's TorchScript exporter keeps opset 17's Reduce "
        "ops; its exports at opset 17 and 11 are tested in test_onnx_export.py)",
        allow_module_level=True,
    )


def _run(compiled, x) -> list[np.ndarray]:
    return parity.to_arrays(compiled.run(*compiled.prepare_inputs((x,))))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ort-cache")


@pytest.fixture(scope="module")
def backend(cache: Path) -> OrtBackend:
    return OrtBackend(device="cpu", cache_dir=cache)


@pytest.fixture(scope="module")
def first_compile(backend: OrtBackend):
    """The first compile of ``small_net()`` in this module: it exports."""
    compiled = backend.compile(small_net(), (_inputs(2),), "fp32", {})
    yield compiled
    compiled.close()


def _onnx_path(cache: Path, compiled) -> Path:
    """The cached ONNX file a compile of a torch model used (found by its SHA-256)."""
    return next(p for p in cache.glob("*.onnx") if onnx_export._sha256(p) == compiled.info["onnx_sha256"])


@pytest.fixture(scope="module")
def onnx_file(first_compile, cache: Path) -> Path:
    return _onnx_path(cache, first_compile)


# -- end to end on the CPU --------------------------------------------------------------------------------


def test_a_torch_model_compiles_and_matches_torch_eager(first_compile):
    compiled = first_compile
    assert (compiled.target, compiled.backend, compiled.device) == ("onnxruntime:cpu", "onnxruntime", "cpu")
    assert (compiled.precision, compiled.io, compiled.device_name) == ("fp32", "host", cpu_name())
    assert dict(compiled.options) == {
        "graph_optimization_level": "all",
        "intra_op_threads": 0,
        "inter_op_threads": 0,
        "io": "host",
        "opset": onnx_export.DEFAULT_OPSET,
    }
    for batch in (2, 5, 1):  # the example's batch size, and others: one session serves every batch
        x = _inputs(batch)
        (out,) = _run(compiled, x)
        assert out.shape == (batch, 5)
        np.testing.assert_allclose(out, _eager(x), rtol=1e-5, atol=1e-6)


def test_inputs_are_prepared_as_contiguous_arrays_of_the_models_dtype(first_compile):
    x = _inputs(2).permute(0, 1, 3, 2).double()  # float64 and not contiguous, as a torch tensor
    (prepared,) = first_compile.prepare_inputs((x,))
    assert isinstance(prepared, np.ndarray)
    assert prepared.dtype == np.float32
    assert prepared.flags["C_CONTIGUOUS"]


def test_the_compile_reports_its_phases_and_the_export(first_compile, cache):
    assert set(first_compile.phases_s) == {"export", "session", "first_run"}
    assert all(seconds > 0 for seconds in first_compile.phases_s.values())
    info = dict(first_compile.info)
    assert set(info) == {"provider", "export_cached", "onnx_sha256", "opset"}
    assert (info["provider"], info["export_cached"], info["opset"]) == (
        "CPUExecutionProvider",
        False,
        onnx_export.DEFAULT_OPSET,
    )
    assert _onnx_path(cache, first_compile).stem == onnx_export.cache_key(
        small_net(), (_inputs(2),), onnx_export.ExportOptions()
    )


def test_compiling_the_same_model_again_takes_the_export_from_the_disk_cache(
    first_compile, backend, monkeypatch
):
    monkeypatch.setattr(torch.onnx, "export", lambda *a, **k: pytest.fail("exported again"))
    compiled = backend.compile(small_net(), (_inputs(3),), "fp32", {})
    assert compiled.info["export_cached"] is True
    assert compiled.info["onnx_sha256"] == first_compile.info["onnx_sha256"]
    assert compiled.phases_s["export"] == 0.0
    assert set(compiled.phases_s) == {"export", "session", "first_run"}


def test_device_io_binds_inputs_once_and_gives_the_same_outputs_as_host_io(first_compile, backend):
    compiled = backend.compile(small_net(), (_inputs(2),), "fp32", {"io": "device"})
    assert compiled.io == "device"
    for batch in (2, 7):
        x = _inputs(batch)
        prepared = compiled.prepare_inputs((x,))
        assert all(isinstance(v, ort.OrtValue) for v in prepared)  # in device memory, bound already
        result = compiled.run(*prepared)
        assert hasattr(result, "copy_outputs_to_cpu")  # outputs stay on the device
        device_out = parity.to_arrays(result)
        host_out = _run(first_compile, x)
        assert [a.shape for a in device_out] == [(batch, 5)]
        np.testing.assert_array_equal(device_out[0], host_out[0])
    compiled.close()


def test_fp16_compiles_an_fp16_export(backend):
    compiled = backend.compile(small_net(), (_inputs(2),), "fp16", {})
    assert compiled.precision == "fp16"
    (prepared,) = compiled.prepare_inputs((_inputs(3),))
    assert prepared.dtype == np.float16
    out = compiled.run(prepared)
    assert out[0].dtype == np.float16
    check = parity.compare(_eager(_inputs(3)), out, "fp16", "torch eager fp32 on cpu")
    assert check.passed, check
    assert check.max_rel > 0  # it really ran in half precision
    compiled.close()


def _file_opset(path: Path) -> int:
    return {o.domain: o.version for o in onnx.load(str(path)).opset_import}[""]


def test_session_options_and_opset_are_applied(backend, cache):
    options = {
        "graph_optimization_level": "disabled",
        "intra_op_threads": 1,
        "inter_op_threads": 1,
        "opset": 20,
    }
    compiled = backend.compile(small_net(), (_inputs(2),), "fp32", options)
    assert {k: compiled.options[k] for k in options} == options
    assert (compiled.info["opset"], compiled.info["export_cached"]) == (
        20,
        False,
    )  # another opset: another export
    assert _file_opset(_onnx_path(cache, compiled)) == 20
    x = _inputs(2)
    np.testing.assert_allclose(_run(compiled, x)[0], _eager(x), rtol=1e-5, atol=1e-6)
    compiled.close()


def test_the_reported_opset_is_the_exported_files(backend, cache):
    compiled = backend.compile(small_net(), (_inputs(2),), "fp32", {"opset": 17})
    try:
        assert compiled.info["opset"] == _file_opset(_onnx_path(cache, compiled))
    finally:
        compiled.close()


def test_prepare_inputs_checks_the_number_of_inputs(first_compile):
    with pytest.raises(ValueError, match=r"^the ONNX model takes 1 input\(s\) \(\w+\), got 2$"):
        first_compile.prepare_inputs((_inputs(2), _inputs(2)))


# -- errors ---------------------------------------------------------------------------------------------


@pytest.fixture
def no_export(monkeypatch):
    """Option errors are found before anything is exported."""
    monkeypatch.setattr(onnx_export, "export", lambda *a, **k: pytest.fail("exported"))


@pytest.mark.usefixtures("no_export")
def test_bf16_is_rejected_for_torch_models(backend):
    with pytest.raises(CompileError) as excinfo:
        backend.compile(small_net(), (_inputs(2),), "bf16", {})
    assert str(excinfo.value) == "the onnxruntime backend runs fp32 or fp16 exports, not bf16 (SmallNet)"


@pytest.mark.parametrize(("asked", "model"), [("fp16", "fp32"), ("bf16", "fp32"), ("fp32", "fp16")])
def test_a_precision_other_than_the_onnx_models_names_both(backend, first_compile, cache, asked, model):
    made_by = first_compile if model == "fp32" else backend.compile(small_net(), (_inputs(2),), "fp16", {})
    onnx_path = _onnx_path(cache, made_by)
    with pytest.raises(CompileError) as excinfo:
        backend.compile(onnx_path.read_bytes(), (_inputs(2),), asked, {})
    assert str(excinfo.value) == (
        f"the ONNX model bytes takes {model} inputs but precision {asked} was asked for; "
        f"pass precision={model!r}"
    )


def test_bytes_that_are_no_onnx_model_are_a_compile_error(backend):
    with pytest.raises(CompileError, match=r"^onnxruntime could not create a session for bytes: "):
        backend.compile(b"not an onnx model", (_inputs(2),), "fp32", {})


def test_a_first_run_failure_is_a_compile_error(backend, onnx_file):
    with pytest.raises(CompileError, match=r"^onnxruntime failed on the first run of bytes: "):
        backend.compile(onnx_file.read_bytes(), (torch.zeros(2, 3, 6),), "fp32", {})  # wrong rank


def test_an_unknown_provider_is_a_value_error():
    with pytest.raises(ValueError, match=r"provider must be one of cpu, cuda, tensorrt, got 'rocm'"):
        OrtBackend(device="cuda", provider="rocm")


# -- close --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("io", ["host", "device"])
def test_a_closed_model_raises_runtime_error(backend, io):
    compiled = backend.compile(small_net(), (_inputs(2),), "fp32", {"io": io})
    x = _inputs(2)
    prepared = compiled.prepare_inputs((x,))
    compiled.close()
    with pytest.raises(RuntimeError, match="closed"):
        compiled.run(*prepared)


def test_close_releases_the_session(backend):
    compiled = backend.compile(small_net(), (_inputs(2),), "fp32", {})
    compiled.close()
    with pytest.raises(Exception):  # noqa: B017, PT011 - see test_a_closed_model_raises_runtime_error
        compiled.run(*compiled.prepare_inputs((_inputs(2),)))


# -- availability and description --------------------------------------------------------------------------


def fake_ort(*providers: str, version: str = "1.99.0") -> types.SimpleNamespace:
    """Imitates what availability() and describe() use of an onnxruntime module."""
    return types.SimpleNamespace(__version__=version, get_available_providers=lambda: list(providers))


CPU_ONLY = fake_ort("AzureExecutionProvider", "CPUExecutionProvider")
GPU = fake_ort("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")


@pytest.mark.parametrize(
    ("device", "provider", "provider_name"),
    [("cuda", None, "CUDAExecutionProvider"), ("cuda:1", "tensorrt", "TensorrtExecutionProvider")],
)
def test_a_gpu_provider_missing_from_the_build_is_unavailable_naming_it_and_the_fix(
    device, provider, provider_name
):
    backend = OrtBackend(device=device, provider=provider, ort_module=CPU_ONLY)
    availability = backend.availability()
    assert not availability.ok
    assert availability.reason == (
        f"onnxruntime 1.99.0 has no {provider_name} (it has AzureExecutionProvider, CPUExecutionProvider); "
        "install onnxruntime-gpu for CUDA and TensorRT"
    )


@pytest.mark.parametrize(
    ("device", "provider"), [("cpu", None), ("cuda", None), ("cuda:3", "cuda"), ("cuda", "tensorrt")]
)
def test_providers_in_the_build_are_available(device, provider):
    assert OrtBackend(device=device, provider=provider, ort_module=GPU).availability().ok


@pytest.mark.parametrize(
    ("device", "provider", "reason"),
    [
        ("cpu", "tensorrt", "the TensorrtExecutionProvider runs on cuda[:N], not 'cpu'"),
        ("cpu", "cuda", "the CUDAExecutionProvider runs on cuda[:N], not 'cpu'"),
        ("cuda", "cpu", "the CPUExecutionProvider runs on cpu, not 'cuda'"),
        ("ipu", None, "the CUDAExecutionProvider runs on cuda[:N], not 'ipu'"),
    ],
)
def test_a_device_the_provider_does_not_run_on_is_unavailable(device, provider, reason):
    availability = OrtBackend(device=device, provider=provider, ort_module=GPU).availability()
    assert (availability.ok, availability.reason) == (False, reason)


def test_without_onnxruntime_the_backend_is_unavailable_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes the import fail
    availability = OrtBackend(device="cpu").availability()
    assert not availability.ok
    assert availability.reason.startswith("onnxruntime is not installed (")
    assert availability.reason.endswith("); install it with: pip install onnxruntime")


def test_the_real_onnxruntime_on_the_cpu():
    backend = OrtBackend(device="cpu")
    assert backend.availability().ok
    assert backend.describe() == {
        "backend": "onnxruntime",
        "onnxruntime": ort.__version__,
        "providers_available": ort.get_available_providers(),
        "provider": "CPUExecutionProvider",
        "device": "cpu",
        "device_name": cpu_name(),
    }


def test_describe_a_gpu_target():
    backend = OrtBackend(name="onnxruntime-trt", device="cuda:1", provider="tensorrt", ort_module=GPU)
    assert backend.describe() == {
        "backend": "onnxruntime-trt",
        "onnxruntime": "1.99.0",
        "providers_available": ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
        "provider": "TensorrtExecutionProvider",
        "device": "cuda:1",
        "device_name": "CUDA device 1",
    }
