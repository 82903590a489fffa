"""The PopART backend (pytest_ipu.backends.ipu.popart) against a faithful fake of PopART 3.4
(tests/fakes/fake_popart.py), which runs the ONNX models with onnxruntime on the CPU: outputs against
torch eager, the batch layout, options as the SDK receives them, the error messages, device
acquisition in the 2.x and 3.x behaviours, closing, and the import order popart needs.

The Poplar SDK cannot be installed here; ``test_the_popart_api_the_backend_uses`` also runs against the
real ``popart`` where one is importable (it skips otherwise), in a fresh interpreter that imports
popart before this module imports onnx.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import io
import json
import subprocess
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

from pytest_ipu.backends import onnx_export
from pytest_ipu.backends import parity
from pytest_ipu.backends.ipu.popart import NOT_INSTALLED
from pytest_ipu.backends.ipu.popart import OPTIONS
from pytest_ipu.backends.ipu.popart import PopArtBackend
from pytest_ipu.backports import remove_prefix
from pytest_ipu.backports import zip_strict
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import CompileError
from tests.fakes import fake_popart
from tests.unit.small_net import eager as _eager
from tests.unit.small_net import inputs as _inputs
from tests.unit.small_net import small_net
from tests.unit.small_net import torchscript_onnx as _torchscript_onnx
from tests.unit.torch_versions import NO_CPU_FP16
from tests.unit.torch_versions import cpu_runs_fp16
from tests.unit.torch_versions import torchscript_exporter

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def onnx_bytes() -> bytes:
    """``small_net()`` as fp32 ONNX at opset 11, with a dynamic batch dimension."""
    return _torchscript_onnx(small_net(), (_inputs(2),))


@pytest.fixture
def fake() -> types.ModuleType:
    return fake_popart.make_module(ipus=2)


@pytest.fixture
def backend(fake, tmp_path) -> PopArtBackend:
    return PopArtBackend(device="ipu", cache_dir=tmp_path, popart_module=fake)


@pytest.fixture
def opset11_exporter(monkeypatch):
    """Makes ``onnx_export.export`` produce opset-11 files (as PopART needs), recording its calls."""
    calls = []

    def export(model, example_inputs, cache_dir, options=None):
        options = options or onnx_export.ExportOptions()
        calls.append(options)
        data = _torchscript_onnx(model, example_inputs, options.precision, options.opset)
        cache_dir.mkdir(parents=True, exist_ok=True)
        path = cache_dir / f"{len(calls)}.onnx"
        path.write_bytes(data)
        return onnx_export.ExportedModel(path, "ab" * 32, False, 0.25, ("x",), options.opset)

    monkeypatch.setattr(onnx_export, "export", export)
    return calls


def _run(compiled, *inputs) -> list[np.ndarray]:
    return parity.to_arrays(compiled.run(*compiled.prepare_inputs(inputs)))


def _session(fake):
    """The last session the fake made."""
    return fake.system.sessions[-1]


# -- torch models -----------------------------------------------------------------------------------------


def test_a_torch_model_exported_and_run_equals_torch_eager_in_fp32(backend, fake, opset11_exporter):
    x = _inputs(4)
    compiled = backend.compile(small_net(), (x,), "fp32", {})
    assert (compiled.target, compiled.backend, compiled.device) == ("popart:ipu", "popart", "ipu")
    assert (compiled.precision, compiled.io) == ("fp32", "host")
    assert compiled.device_name == "Graphcore ipu2 (device 0, 1 IPU)"
    assert opset11_exporter == [onnx_export.ExportOptions(opset=11, precision="fp32")]
    (out,) = _run(compiled, x)
    assert out.shape == (4, 5)
    np.testing.assert_allclose(out, _eager(x), rtol=1e-5, atol=1e-6)
    x2 = _inputs(40)[:4]  # other values, same shape: the session's batch is fixed
    np.testing.assert_allclose(_run(compiled, x2)[0], _eager(x2), rtol=1e-5, atol=1e-6)
    compiled.close()


def test_a_torch_model_in_fp16_is_exported_in_fp32_and_converted_as_the_example_does(
    backend, fake, opset11_exporter
):
    x = _inputs(4)
    compiled = backend.compile(small_net(), (x,), "fp16", {})
    # fp32 export, then PopART's converter (Graphcore's ResNeXt example; torch 2.0.1 cannot trace fp16).
    assert opset11_exporter[0].precision == "fp32"
    assert compiled.info["fp16_conversion"] == "GraphTransformer.convertFloatsToHalfs"
    (prepared,) = compiled.prepare_inputs((x,))
    assert prepared.dtype == np.float16
    (out,) = compiled.run(prepared)
    assert out.dtype == np.float16
    check = parity.compare(_eager(x), [out], "fp16", "torch eager fp32 on cpu")
    assert check.passed, check
    assert check.max_rel > 0  # it really ran in half precision
    compiled.close()


def test_the_compile_reports_its_phases_and_facts(backend, opset11_exporter):
    compiled = backend.compile(small_net(), (_inputs(4),), "fp32", {})
    assert list(compiled.phases_s) == ["export", "session", "weights", "first_run"]
    assert compiled.phases_s["export"] == 0.25  # the exporter's own time
    assert all(seconds >= 0 for seconds in compiled.phases_s.values())
    assert dict(compiled.info) == {
        "popart": "3.4.0",
        "device_type": "ipu",
        "simulator": False,
        "ipus": 1,
        "micro_batch": 4,
        "batches_per_step": 1,
        "replicated_graphs": 1,
        "anchors": "all",
        "partials_type": None,
        "export_cached": False,
        "onnx_sha256": "ab" * 32,
        "opset": 11,
        "fp16_conversion": None,
        "engine_cache": None,
        "device_id": 0,
        "batches_per_step_from": "default",
        "available_memory_proportion": None,
        "available_memory_convs": None,
        # the architecture, and the driver version an attached IPU reports (not the architecture)
        "ipu_version": "ipu2",
        "driver_version": fake_popart.DRIVER_VERSION,
        # device 0's driver id, which is not its gc-info -l id (IPU 0 of the fake's 2)
        "driver_ids": [fake_popart.DRIVER_ID_BASE + 1],
    }
    assert compiled.ipu_ids == (0,)  # translated through enumerateDevices(numIpus=1)
    json.dumps(dict(compiled.info))  # plain JSON
    # batches_per_step's default (None) resolves to 1 without pipelining
    assert dict(compiled.options) == {**OPTIONS, "batches_per_step": 1}
    compiled.close()


def test_the_real_export_writes_opset_11_for_popart_and_runs(backend, fake):
    """onnx_export uses torch's TorchScript exporter below opset 18, so PopART gets opset 11."""
    x = _inputs(4)
    compiled = backend.compile(small_net(), (x,), "fp32", {})
    assert compiled.info["opset"] == 11
    np.testing.assert_allclose(_run(compiled, x)[0], _eager(x), rtol=1e-5, atol=1e-6)
    compiled.close()


# -- ONNX models ------------------------------------------------------------------------------------------


def test_the_session_gets_the_model_with_its_batch_fixed_to_the_micro_batch(backend, fake, onnx_bytes):
    import onnx

    compiled = backend.compile(onnx_bytes, (_inputs(8),), "fp32", {"batches_per_step": 2})
    session = _session(fake)
    model = onnx.load_from_string(session.fn_model)
    dims = [[d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in model.graph.input]
    assert dims == [[4, 3, 6, 6]]
    assert [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [4, 5]
    compiled.close()


def test_an_fp32_onnx_model_in_fp16_goes_through_the_graph_transformer(backend, fake, onnx_bytes):
    import onnx

    x = _inputs(4)
    compiled = backend.compile(onnx_bytes, (x,), "fp16", {})
    assert compiled.info["fp16_conversion"] == "GraphTransformer.convertFloatsToHalfs"
    model = onnx.load_from_string(_session(fake).fn_model)
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    assert {t.data_type for t in model.graph.initializer} == {onnx.TensorProto.FLOAT16}
    (out,) = _run(compiled, x)
    check = parity.compare(_eager(x), [out], "fp16", "torch eager fp32 on cpu")
    assert check.passed, check
    assert check.max_rel > 0
    compiled.close()


@pytest.mark.skipif(not cpu_runs_fp16(), reason=NO_CPU_FP16)
def test_an_fp16_onnx_model_asked_for_in_fp32_names_both(backend, fake):
    fp16 = _torchscript_onnx(small_net(), (_inputs(2),), "fp16")
    with pytest.raises(CompileError) as excinfo:
        backend.compile(fp16, (_inputs(2),), "fp32", {})
    assert (
        str(excinfo.value)
        == "the ONNX model bytes is fp16 but precision fp32 was asked for; pass precision='fp16'"
    )


@pytest.mark.skipif(not cpu_runs_fp16(), reason=NO_CPU_FP16)
def test_an_fp16_onnx_model_runs_in_fp16(backend, fake):
    fp16 = _torchscript_onnx(small_net(), (_inputs(2),), "fp16")
    x = _inputs(2)
    compiled = backend.compile(fp16, (x,), "fp16", {})
    assert compiled.info["fp16_conversion"] is None
    assert parity.compare(_eager(x), _run(compiled, x), "fp16", "eager").passed
    compiled.close()


def test_an_onnx_model_at_a_newer_opset_is_refused_before_any_ipu_is_taken(backend, fake):
    newer = _torchscript_onnx(small_net(), (_inputs(2),), opset=13)
    with pytest.raises(CompileError) as excinfo:
        backend.compile(newer, (_inputs(2),), "fp32", {})
    assert str(excinfo.value) == (
        "the ONNX model bytes uses ONNX opset 13, and PopART 3.x imports opsets 6 to 11 only; export it at "
        "opset 11 (torch.onnx.export(..., opset_version=11), with dynamo=False on torch 2.5 and newer)"
    )
    assert fake.system.events == []


def test_a_model_with_two_inputs_and_two_outputs(backend):
    class Two(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(6, 3)

        def forward(self, x, y):
            h = self.a(x)
            return h * y, torch.relu(h)

    torch.manual_seed(3)
    model = Two().eval()
    x, y = torch.randn(4, 6), torch.randn(4, 3)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (x, y),
            f,
            **torchscript_exporter(),
            opset_version=11,
            input_names=["x", "y"],
            output_names=["zz", "aa"],  # sorted differently: outputs keep the model's order
            dynamic_axes={n: {0: "b"} for n in ("x", "y", "zz", "aa")},
        )
    compiled = backend.compile(f.getvalue(), (x, y), "fp32", {"batches_per_step": 2})
    with torch.inference_mode():
        expected = [t.numpy() for t in model(x, y)]
    for got, want in zip_strict(_run(compiled, x, y), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    compiled.close()


# -- batches, replicas and anchors -----------------------------------------------------------------------


def test_inputs_are_laid_out_as_popart_expects_and_outputs_merged_back(backend, fake, onnx_bytes):
    x = _inputs(16)
    opts = {"batches_per_step": 2, "replicated_graphs": 2}
    compiled = backend.compile(onnx_bytes, (x,), "fp32", opts)
    assert (compiled.info["micro_batch"], compiled.info["ipus"]) == (4, 2)
    (prepared,) = compiled.prepare_inputs((x,))
    assert prepared.shape == (2, 2, 4, 3, 6, 6)  # [batches_per_step, replicas, micro_batch, ...]
    assert prepared.flags["C_CONTIGUOUS"]
    (out,) = compiled.run(prepared)
    assert out.shape == (16, 5)
    np.testing.assert_allclose(out, _eager(x), rtol=1e-5, atol=1e-6)
    compiled.close()


@pytest.mark.parametrize(
    ("anchors", "shape", "pick"),
    [
        ("final", (2, 5), lambda e: e[6:8]),  # the last batch only
        ("sum", (2, 5), lambda e: e.reshape(4, 2, 5).sum(axis=0)),
        ("everyn:2", (4, 5), lambda e: e.reshape(4, 2, 5)[1::2].reshape(4, 5)),
        ("ALL", (8, 5), lambda e: e),
    ],
)
def test_anchor_return_types(backend, fake, onnx_bytes, anchors, shape, pick):
    x = _inputs(8)
    compiled = backend.compile(onnx_bytes, (x,), "fp32", {"batches_per_step": 4, "anchors": anchors})
    art = _session(fake).dataflow.art("y")
    expected_id = {"final": "Final", "sum": "Sum", "everyn:2": "EveryN", "ALL": "All"}[anchors]
    assert str(art.id()) == f"AnchorReturnTypeId.{expected_id}"
    (out,) = _run(compiled, x)
    assert out.shape == shape
    np.testing.assert_allclose(out, pick(_eager(x)), rtol=1e-5, atol=1e-5)
    compiled.close()


def test_one_pystepio_serves_every_call_with_the_same_arrays(backend, fake, onnx_bytes, monkeypatch):
    made = []

    class CountingStepIO(fake_popart.PyStepIO):
        def __init__(self, inputs, outputs):
            made.append(1)
            super().__init__(inputs, outputs)

    monkeypatch.setattr(fake, "PyStepIO", CountingStepIO)
    compiled = backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})
    prepared = compiled.prepare_inputs((_inputs(2),))
    first = compiled.run(*prepared)
    assert compiled.run(*prepared) is first  # the anchor arrays, written in place
    assert len(made) == 2  # one for the first run inside compile, one for these arrays
    compiled.run(*compiled.prepare_inputs((_inputs(2),)))
    assert len(made) == 3
    compiled.close()


def test_prepare_inputs_checks_count_and_shape(backend, onnx_bytes):
    compiled = backend.compile(onnx_bytes, (_inputs(4),), "fp32", {})
    with pytest.raises(ValueError, match=r"^the ONNX model takes 1 input\(s\) \(x\), got 2$"):
        compiled.prepare_inputs((_inputs(4), _inputs(4)))
    with pytest.raises(ValueError, match=r"^input 'x' has shape") as excinfo:
        compiled.prepare_inputs((_inputs(2),))
    assert str(excinfo.value) == (
        "input 'x' has shape (2, 3, 6, 6) but the PopART session was compiled for (4, 3, 6, 6); "
        "compile again for other shapes (a session's batch is fixed)"
    )
    (prepared,) = compiled.prepare_inputs((_inputs(4).double().permute(0, 1, 3, 2),))
    assert prepared.dtype == np.float32
    assert prepared.flags["C_CONTIGUOUS"]
    compiled.close()


# -- options as the SDK receives them -------------------------------------------------------------------


def test_options_are_mapped_onto_session_options_and_data_flow(backend, fake, onnx_bytes, tmp_path):
    options = {
        "batches_per_step": 2,
        "replicated_graphs": 2,
        "partials_type": "half",
        "enable_engine_caching": True,
        "cache_path": tmp_path / "engines",
    }
    compiled = backend.compile(onnx_bytes, (_inputs(8),), "fp32", options)
    session = _session(fake)
    so = session.options.as_dict()
    assert so["enableReplicatedGraphs"] is True
    assert so["replicatedGraphCount"] == 2
    assert so["partialsTypeMatMuls"] == "half"
    assert so["convolutionOptions"] == {"partialsType": "half"}
    assert (so["enableEngineCaching"], so["cachePath"]) == (True, str(tmp_path / "engines"))
    assert so["virtualGraphMode"] == fake.VirtualGraphMode.Off
    assert so["enablePipelining"] is False
    assert session.dataflow.batchesPerStep() == 2
    assert session.dataflow.anchors() == ["y"]
    assert session.dataflow.art("y").id() == fake.AnchorReturnTypeId.All
    assert session.device.numIpus == 2
    assert compiled.info["engine_cache"] == str(tmp_path / "engines")
    assert compiled.options["cache_path"] == str(tmp_path / "engines")
    compiled.close()


def test_defaults_leave_the_sdk_defaults(backend, fake, onnx_bytes):
    compiled = backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})
    so = _session(fake).options.as_dict()
    # The one default of ours: the hardware cycle counter, on IPU hardware (the ipu_cycles metric).
    assert so == {
        **fake.SessionOptions().as_dict(),
        "replicatedGraphCount": 1,
        "instrumentWithHardwareCycleCounter": True,
    }
    assert so["cachePath"] == "session_cache"
    assert so["enableEngineCaching"] is False
    compiled.close()


def test_engine_caching_defaults_to_the_cache_dir(backend, fake, onnx_bytes, tmp_path):
    compiled = backend.compile(onnx_bytes, (_inputs(2),), "fp32", {"enable_engine_caching": True})
    assert _session(fake).options.cachePath == str(tmp_path / "popart-engines")
    compiled.close()


def test_popart_cache_dir_in_the_environment_is_reported(backend, onnx_bytes, monkeypatch):
    monkeypatch.setenv("POPART_CACHE_DIR", "/var/cache/popart")
    compiled = backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})
    assert compiled.info["engine_cache"] == "/var/cache/popart"
    compiled.close()


def test_virtual_graphs_and_pipelining_over_two_ipus(backend, fake, onnx_bytes):
    options = {"ipus": 2, "virtual_graph_mode": "Auto", "pipelining": True}
    compiled = backend.compile(onnx_bytes, (_inputs(2),), "fp32", options)
    so = _session(fake).options
    assert (so.virtualGraphMode, so.enablePipelining) == (fake.VirtualGraphMode.Auto, True)
    assert _session(fake).device.numIpus == 2
    assert compiled.options["virtual_graph_mode"] == "auto"
    compiled.close()


def test_pipelining_defaults_batches_per_step_to_the_stages_and_says_so(backend, fake, onnx_bytes):
    # PopART refuses fewer batches per step than pipeline stages; the default is the fewest it takes.
    options = {"ipus": 2, "virtual_graph_mode": "auto", "pipelining": True}
    x = _inputs(4)
    compiled = backend.compile(onnx_bytes, (x,), "fp32", options)
    assert _session(fake).dataflow.batchesPerStep() == 2
    assert (compiled.info["batches_per_step"], compiled.info["micro_batch"]) == (2, 2)
    assert compiled.info["batches_per_step_from"] == "default: the 2 pipeline stages"
    assert compiled.options["batches_per_step"] == 2
    np.testing.assert_allclose(_run(compiled, x)[0], _eager(x), rtol=1e-5, atol=1e-6)
    compiled.close()


def test_manual_pipeline_stages_are_counted_from_the_models_annotations(backend, fake, onnx_bytes):
    builder = fake.Builder(onnx_bytes)
    for tid, stage in (("/conv/Conv_output_0", 0), ("/Relu_output_0", 1), ("y", 2)):
        builder.virtualGraph(tid, min(stage, 1))
        builder.pipelineStage(tid, stage)
    options = {"ipus": 2, "virtual_graph_mode": "manual", "pipelining": True}
    with pytest.raises(CompileError) as excinfo:
        backend.compile(builder.getModelProto(), (_inputs(4),), "fp32", {**options, "batches_per_step": 2})
    assert str(excinfo.value) == (
        "popart option batches_per_step=2 for bytes is fewer than the model's 3 annotated pipeline stages; "
        "PopART needs at least one batch per stage to fill the pipeline: pass batches_per_step=3 or more"
    )
    assert not any(e.startswith("acquire") for e in fake.system.events)
    compiled = backend.compile(
        builder.getModelProto(), (_inputs(3),), "fp32", {**options, "batches_per_step": 3}
    )
    assert _session(fake).dataflow.batchesPerStep() == 3
    compiled.close()


def _conv_memory(model: bytes) -> dict[str, float]:
    """Each Conv node's first output and its ``__available_memory`` attribute (absent: no entry)."""
    import onnx

    graph = onnx.load_from_string(model).graph
    return {
        node.output[0]: a.f
        for node in graph.node
        if node.op_type == "Conv"
        for a in node.attribute
        if a.name == fake_popart.AVAILABLE_MEMORY_ATTRIBUTE
    }


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_available_memory_proportion_is_set_on_every_convolution(backend, fake, onnx_bytes, precision):
    compiled = backend.compile(onnx_bytes, (_inputs(2),), precision, {"available_memory_proportion": 0.3})
    memory = _conv_memory(_session(fake).model_bytes)
    assert list(memory) == ["/conv/Conv_output_0"]
    assert memory["/conv/Conv_output_0"] == pytest.approx(0.3)
    assert (compiled.info["available_memory_proportion"], compiled.info["available_memory_convs"]) == (0.3, 1)
    compiled.close()


def test_without_available_memory_proportion_the_model_is_left_alone(backend, fake, onnx_bytes):
    compiled = backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})
    assert _conv_memory(_session(fake).model_bytes) == {}
    compiled.close()


def test_a_memory_proportion_mapping_gives_a_one_ipu_models_convolutions_ipu0s(backend, fake, onnx_bytes):
    compiled = backend.compile(
        onnx_bytes, (_inputs(2),), "fp32", {"available_memory_proportion": {"IPU0": 0.4}}
    )
    assert _conv_memory(_session(fake).model_bytes) == {"/conv/Conv_output_0": pytest.approx(0.4)}
    assert compiled.info["available_memory_proportion"] == {"IPU0": 0.4}
    assert compiled.options["available_memory_proportion"] == {"IPU0": 0.4}
    compiled.close()


def test_with_manual_virtual_graphs_each_convolution_gets_its_ipus_proportion(backend, fake, onnx_bytes):
    builder = fake.Builder(onnx_bytes)
    for tid, ipu in (("/conv/Conv_output_0", 1), ("y", 0)):
        builder.virtualGraph(tid, ipu)
    options = {
        "ipus": 2,
        "virtual_graph_mode": "manual",
        "available_memory_proportion": {"IPU0": 0.2, "IPU1": 0.6},
    }
    compiled = backend.compile(builder.getModelProto(), (_inputs(2),), "fp32", options)
    assert _conv_memory(_session(fake).model_bytes) == {"/conv/Conv_output_0": pytest.approx(0.6)}
    compiled.close()


def test_a_convolution_popart_places_itself_gets_the_one_proportion_of_every_ipu(backend, fake, onnx_bytes):
    options = {"ipus": 2, "virtual_graph_mode": "auto", "available_memory_proportion": 0.3}
    compiled = backend.compile(onnx_bytes, (_inputs(2),), "fp32", options)
    assert _conv_memory(_session(fake).model_bytes) == {"/conv/Conv_output_0": pytest.approx(0.3)}
    compiled.close()


def test_different_proportions_per_ipu_need_ops_placed_by_the_model(backend, fake, onnx_bytes):
    options = {"ipus": 2, "virtual_graph_mode": "auto", "available_memory_proportion": {"IPU0": 0.3}}
    with pytest.raises(CompileError) as exc:
        backend.compile(onnx_bytes, (_inputs(2),), "fp32", options)
    assert str(exc.value) == (
        "popart option available_memory_proportion={'IPU0': 0.3} for bytes gives the IPUs different "
        "proportions, but convolution '/conv/Conv_output_0' has no IPU annotation (PopART places it itself); "
        "pass one number for every IPU, or annotate the ops with popart.Builder.virtualGraph and use "
        "virtual_graph_mode='manual'"
    )
    assert fake.system.attached_count() == 0


def test_manual_virtual_graphs_use_the_models_annotations(backend, fake, onnx_bytes):
    builder = fake.Builder(onnx_bytes)
    for tid, ipu in (("/conv/Conv_output_0", 0), ("y", 1)):
        builder.virtualGraph(tid, ipu)
    x = _inputs(2)
    compiled = backend.compile(
        builder.getModelProto(), (x,), "fp32", {"ipus": 2, "virtual_graph_mode": "manual"}
    )
    assert _session(fake).options.virtualGraphMode == fake.VirtualGraphMode.Manual
    np.testing.assert_allclose(_run(compiled, x)[0], _eager(x), rtol=1e-5, atol=1e-6)
    compiled.close()


# -- errors -------------------------------------------------------------------------------------------------


@pytest.fixture
def no_export(monkeypatch):
    """Option errors are found before anything is exported."""
    monkeypatch.setattr(onnx_export, "export", lambda *a, **k: pytest.fail("exported"))


@pytest.mark.usefixtures("no_export")
def test_bf16_is_rejected(backend):
    with pytest.raises(CompileError) as excinfo:
        backend.compile(small_net(), (_inputs(2),), "bf16", {})
    assert str(excinfo.value) == (
        "the popart backend runs fp32 or fp16, not bf16 (SmallNet); pass precision='fp16' (the IPU default) "
        "or 'fp32'"
    )


def test_an_onnx_model_with_a_fixed_batch_needs_matching_inputs(backend, fake):
    fixed = _torchscript_onnx(small_net(), (_inputs(2),), dynamic=False)
    with pytest.raises(CompileError) as excinfo:
        backend.compile(fixed, (_inputs(8),), "fp32", {"batches_per_step": 2})
    assert str(excinfo.value) == (
        "the ONNX model bytes fixes input 'x' to batch 2, so a call takes 2 x batches_per_step=2 x "
        "replicated_graphs=1 = 4 items, but the inputs have 8; pass inputs with leading dimension 4"
    )
    x = _inputs(4)
    compiled = backend.compile(fixed, (x,), "fp32", {"batches_per_step": 2})
    np.testing.assert_allclose(_run(compiled, x)[0], _eager(x), rtol=1e-5, atol=1e-6)
    compiled.close()


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            (),
            "the popart backend needs batched example inputs for bytes (leading dimension: micro_batch x "
            "batches_per_step x replicated_graphs items)",
        ),
        ((_inputs(2), _inputs(2)), "the ONNX model bytes takes 1 input(s) (x), got 2 example input(s)"),
        (
            (torch.zeros(2, 3, 6),),
            "input 'x' of the ONNX model bytes has 4 dimension(s) but the example input "
            "has shape (2, 3, 6); pass inputs of the model's rank",
        ),
        (
            (torch.zeros(2, 3, 5, 6),),
            "input 'x' of the ONNX model bytes has shape ('batch', 3, 6, 6) but the "
            "example input has (2, 3, 5, 6) (micro-batch 2); pass inputs of the model's shape",
        ),
        (
            (_inputs(2), torch.zeros(3)),
            "example input 2 of bytes has leading dimension 3 but the first has 2; "
            "PopART feeds every input per batch: give all inputs the same leading dimension",
        ),
    ],
    ids=["none", "count", "rank", "shape", "leading"],
)
def test_inputs_that_do_not_fit_the_model_are_compile_errors(backend, onnx_bytes, inputs, message):
    with pytest.raises(CompileError) as excinfo:
        backend.compile(onnx_bytes, inputs, "fp32", {})
    assert str(excinfo.value) == message


def test_manual_virtual_graphs_without_annotations_are_refused(backend, onnx_bytes):
    with pytest.raises(CompileError) as excinfo:
        backend.compile(onnx_bytes, (_inputs(2),), "fp32", {"ipus": 2, "virtual_graph_mode": "manual"})
    assert str(excinfo.value) == (
        "popart option virtual_graph_mode='manual' needs ops annotated with popart.Builder.virtualGraph, and "
        "the ONNX model bytes has none; use 'auto'"
    )


# -- devices --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sdk", ["3.4", "2.3"])
def test_no_free_ipu_is_backend_unavailable_in_both_sdk_behaviours(onnx_bytes, tmp_path, sdk):
    fake = fake_popart.make_module(ipus=2, sdk=sdk)
    fake.configure(busy={0, 1})  # held by another process
    assert hasattr(fake.DeviceManager(), "tryAcquireAvailableDevice") is (sdk == "3.4")
    backend = PopArtBackend(cache_dir=tmp_path, popart_module=fake)
    with pytest.raises(BackendUnavailable) as excinfo:
        backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})
    assert str(excinfo.value) == (
        "Failed to acquire 1 IPU(s) for bytes: none free (another process holds them, or there are fewer); "
        "gc-monitor shows who uses them"
    )
    assert fake.system.events == ["acquire 1"]


def test_the_two_sdk_behaviours_of_acquire_available_device():
    modern, old = fake_popart.make_module(ipus=1), fake_popart.make_module(ipus=1, sdk="2.3")
    for module in (modern, old):
        module.configure(busy={0})
    assert modern.DeviceManager().tryAcquireAvailableDevice(1) is None
    with pytest.raises(modern.popart_exception, match=r"^Failed to acquire device with 1 IPUs\. Ensure"):
        modern.DeviceManager().acquireAvailableDevice(1)
    assert old.DeviceManager().acquireAvailableDevice(1) is None


def test_an_sdk_error_while_acquiring_is_backend_unavailable(backend, fake, onnx_bytes, monkeypatch):
    def boom(self, **_):
        raise fake.popart_exception("driver error")

    monkeypatch.setattr(type(fake.DeviceManager()), "tryAcquireAvailableDevice", boom)
    with pytest.raises(BackendUnavailable, match=r"^Failed to acquire 1 IPU\(s\) for bytes: driver error$"):
        backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})


def test_a_second_model_waits_for_the_ipu_the_first_holds(onnx_bytes, tmp_path):
    fake = fake_popart.make_module(ipus=1)
    backend = PopArtBackend(cache_dir=tmp_path, popart_module=fake)
    first = backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})
    with pytest.raises(BackendUnavailable, match=r"^Failed to acquire 1 IPU\(s\)"):
        backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})
    first.close()
    second = backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})
    second.close()


def test_a_device_id_is_acquired_by_id(fake, onnx_bytes, tmp_path):
    backend = PopArtBackend(device="ipu:1", cache_dir=tmp_path, popart_module=fake)
    assert backend.availability().ok
    compiled = backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})
    assert compiled.info["device_id"] == 1
    assert "acquire id 1" in fake.system.events
    compiled.close()
    pair = PopArtBackend(device="ipu:2", cache_dir=tmp_path, popart_module=fake)  # the 2-IPU device
    compiled = pair.compile(onnx_bytes, (_inputs(4),), "fp32", {"replicated_graphs": 2})
    assert _session(fake).device.numIpus == 2
    assert compiled.ipu_ids == (0, 1)  # the members of device 2 (driverIds), not an IPU "2"
    compiled.close()


def test_a_model_on_any_free_ipu_names_the_ipu_popart_chose(fake, onnx_bytes, tmp_path):
    fake.configure(busy={0})  # another process holds IPU 0: PopART takes IPU 1
    compiled = PopArtBackend(device="ipu", cache_dir=tmp_path, popart_module=fake).compile(
        onnx_bytes, (_inputs(2),), "fp32", {}
    )
    try:
        assert (compiled.info["device_id"], compiled.ipu_ids) == (1, (1,))
    finally:
        compiled.close()


def test_the_ipus_of_a_device_whose_driver_ids_do_not_translate_stay_unknown(
    fake, onnx_bytes, tmp_path, monkeypatch
):
    # A device naming a driver id no single IPU lists: its IPUs are not guessed (no energy charged
    # to IPUs it may not hold), and the record says why.
    listed = fake_popart.DeviceInfo.driverIds
    monkeypatch.setattr(
        fake_popart.DeviceInfo,
        "driverIds",
        property(lambda self: [12345] if self.isAttached else listed.fget(self)),
    )
    compiled = PopArtBackend(device="ipu", cache_dir=tmp_path, popart_module=fake).compile(
        onnx_bytes, (_inputs(2),), "fp32", {}
    )
    try:
        assert compiled.ipu_ids is None
        assert compiled.info["driver_ids"] == [12345]
        assert compiled.info["ipu_ids_unknown"].startswith(
            "driverIds [12345]: driver id(s) 12345 belong to no single IPU of enumerateDevices(numIpus=1)"
        )
    finally:
        compiled.close()


def test_a_device_id_of_the_wrong_size_names_the_right_ones(fake, onnx_bytes, tmp_path):
    backend = PopArtBackend(device="ipu:0", cache_dir=tmp_path, popart_module=fake)
    with pytest.raises(CompileError) as excinfo:
        backend.compile(onnx_bytes, (_inputs(4),), "fp32", {"replicated_graphs": 2})
    assert str(excinfo.value) == (
        "device ipu:0 is not a 2-IPU device (ipus x replicated_graphs); the 2-IPU device ids here are [2]: "
        "use one of them or device 'ipu'"
    )


def test_a_busy_device_id_is_backend_unavailable(fake, onnx_bytes, tmp_path):
    fake.configure(busy={1})
    backend = PopArtBackend(device="ipu:1", cache_dir=tmp_path, popart_module=fake)
    with pytest.raises(
        BackendUnavailable, match=r"^Failed to acquire 1 IPU\(s\) for bytes \(device id 1\): none"
    ):
        backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})


def test_the_ipu_model_simulator(onnx_bytes, tmp_path):
    fake = fake_popart.make_module(ipus=0)
    backend = PopArtBackend(device="ipu-model", cache_dir=tmp_path, popart_module=fake)
    assert backend.availability().ok  # no hardware needed
    assert backend.simulator
    description = backend.describe()
    assert description["simulator"] is True
    assert description["device_name"] == "IPU Model simulator (simulated timings, not IPU hardware)"
    x = _inputs(4)
    compiled = backend.compile(onnx_bytes, (x,), "fp32", {"replicated_graphs": 2})
    assert compiled.device_name == "IPU Model simulator (2 IPUs; simulated timings, not IPU hardware)"
    assert (compiled.info["simulator"], compiled.info["device_type"]) == (True, "ipu-model")
    assert compiled.ipu_ids is None  # no IPU hardware, no IPU energy
    assert "ipu model 2" in fake.system.events
    assert _session(fake).device.type == fake.DeviceType.IpuModel
    np.testing.assert_allclose(_run(compiled, x)[0], _eager(x), rtol=1e-5, atol=1e-6)
    compiled.close()


def _large_onnx(features: int = 1024) -> bytes:
    """``y = x @ W`` with a float32 ``W`` of ``features``**2 weights (4 MiB at 1024): more than the
    IPU Model's default 4 tiles hold."""
    import onnx
    from onnx import TensorProto
    from onnx import helper
    from onnx import numpy_helper

    weight = numpy_helper.from_array(np.full((features, features), 0.001, np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "large",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", features])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def test_the_ipu_model_has_a_real_ipus_tiles_and_architecture(tmp_path):
    fake = fake_popart.make_module(ipus=0)
    backend = PopArtBackend(device="ipu-model", cache_dir=tmp_path, popart_module=fake)
    x = np.ones((2, 1024), np.float32)
    compiled = backend.compile(_large_onnx(), (x,), "fp32", {})
    device = _session(fake).device
    assert (device.tilesPerIPU, device.ipuVersion) == (1472, "ipu2")
    assert (compiled.info["ipu_model_tiles"], compiled.info["ipu_model_version"]) == (1472, "ipu2")
    assert (compiled.info["ipu_version"], compiled.info["driver_version"]) == ("ipu2", None)
    compiled.close()
    # PopART's own default, 4 tiles, cannot hold this model: the option chooses it to show that.
    with pytest.raises(CompileError, match=r"^PopART ran out of IPU memory compiling bytes: Out of memory"):
        backend.compile(_large_onnx(), (x,), "fp32", {"ipu_model_tiles": 4, "ipu_model_version": "ipu1"})
    assert (_session(fake).device.tilesPerIPU, _session(fake).device.ipuVersion) == (4, "ipu1")


def test_the_device_name_gives_the_architecture_not_the_driver_version(fake, onnx_bytes, tmp_path):
    fake.configure(architecture="ipu1")
    backend = PopArtBackend(device="ipu", cache_dir=tmp_path, popart_module=fake)
    compiled = backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})
    assert compiled.device_name == "Graphcore ipu1 (device 0, 1 IPU)"
    assert (compiled.info["ipu_version"], compiled.info["driver_version"]) == (
        "ipu1",
        fake_popart.DRIVER_VERSION,
    )
    compiled.close()


# -- close ---------------------------------------------------------------------------------------------


def test_close_detaches_once_and_later_runs_raise(backend, fake, onnx_bytes):
    compiled = backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})
    prepared = compiled.prepare_inputs((_inputs(2),))
    assert fake.system.attached_count() == 1
    compiled.close()
    assert fake.system.attached_count() == 0
    assert fake.system.events[-1] == "detach 0"
    compiled.close()  # idempotent
    assert fake.system.events.count("detach 0") == 1
    with pytest.raises(RuntimeError, match=r"^this compiled model was closed"):
        compiled.run(*prepared)


def test_a_detach_failure_is_reported_once_and_the_model_stays_closed(backend, fake, onnx_bytes):
    compiled = backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})
    fake.configure(fail={"detach": "error"})
    with pytest.raises(RuntimeError, match=r"^PopART could not detach the device: fake: failure injected"):
        compiled.close()
    compiled.close()  # nothing left to do
    with pytest.raises(RuntimeError, match="closed"):
        compiled.run(*compiled.prepare_inputs((_inputs(2),)))


@pytest.mark.parametrize(
    ("point", "kind", "message"),
    [
        (
            "prepareDevice",
            "oom",
            "PopART ran out of IPU memory compiling bytes: Out of memory: Cannot fit all variable data onto "
            "one or more tiles (fake: injected); use a smaller batch, partials_type='half', or more IPUs "
            "(ipus with virtual_graph_mode='auto')",
        ),
        (
            "InferenceSession",
            "error",
            "PopART could not compile or run bytes: popart_exception: fake: failure injected at "
            "InferenceSession",
        ),
        (
            "weightsFromHost",
            "error",
            "PopART could not compile or run bytes: popart_exception: fake: failure injected at "
            "weightsFromHost",
        ),
        (
            "run",
            "error",
            "PopART could not compile or run bytes: popart_exception: fake: failure injected at run",
        ),
    ],
)
def test_a_failed_compile_gives_the_ipus_back(backend, fake, onnx_bytes, point, kind, message):
    fake.configure(fail={point: kind})
    with pytest.raises(CompileError) as excinfo:
        backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})
    assert str(excinfo.value) == message
    assert fake.system.attached_count() == 0
    assert fake.system.events[-1] == "detach 0"


# -- availability, description, import order ------------------------------------------------------------


def test_without_popart_the_reason_points_at_the_poplar_sdk(monkeypatch):
    monkeypatch.setitem(sys.modules, "popart", None)  # makes the import fail
    availability = PopArtBackend().availability()
    assert not availability.ok
    assert availability.reason.startswith("popart is not importable (")
    assert availability.reason.endswith(f"); {NOT_INSTALLED}")
    assert "PyPI's 'popart' is an unrelated project" in NOT_INSTALLED
    assert "source <poplar_sdk>/enable" in NOT_INSTALLED
    with pytest.raises(BackendUnavailable, match="Poplar SDK"):
        PopArtBackend().compile(b"", (), "fp16", {})


def test_pypis_unrelated_popart_is_not_taken_for_the_sdk(monkeypatch):
    monkeypatch.setitem(sys.modules, "popart", types.ModuleType("popart"))
    reason = PopArtBackend().availability().reason
    assert reason.startswith("the importable 'popart' module (unknown location) is not Graphcore's PopART")
    assert reason.endswith(NOT_INSTALLED)


@pytest.fixture
def popart_importable(monkeypatch):
    """``import popart`` loads a fresh fake (with the SDK's import check); returns it and the import log."""
    module, log = fake_popart.make_module(ipus=1), []
    monkeypatch.setitem(sys.modules, "popart", None)
    monkeypatch.delitem(sys.modules, "popart")  # absent now, absent again afterwards
    monkeypatch.setattr(sys, "meta_path", [fake_popart.PopartFinder(module, log), *sys.meta_path])
    return module, log


def test_popart_imported_after_onnx_says_what_to_do(popart_importable):
    assert "onnx" in sys.modules
    availability = PopArtBackend().availability()
    assert availability.reason == (
        f"popart cannot be imported: {fake_popart.IMPORT_ERROR} Something in this process imported onnx "
        "first (an ONNX export, onnxruntime or a test module); import popart before anything imports onnx, "
        "e.g. 'import popart' at the top of conftest.py, or run the popart targets in their own pytest run"
    )


class _OnnxStash(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Hands back the very onnx modules that were taken out of ``sys.modules``, logging when."""

    def __init__(self, stash: dict[str, types.ModuleType], log: list[str]) -> None:
        self.stash, self.log = stash, log

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.stash and fullname not in sys.modules:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        self.log.append(spec.name)
        sys.modules.update(self.stash)  # all at once: they were imported together
        return self.stash[spec.name]

    def exec_module(self, module) -> None:
        pass  # already executed, long ago


def test_the_backend_imports_popart_before_onnx(popart_importable, onnx_bytes, tmp_path, monkeypatch):
    module, log = popart_importable
    stash = {n: m for n, m in sys.modules.items() if n == "onnx" or n.startswith("onnx.")}
    for name, mod in stash.items():
        monkeypatch.delitem(sys.modules, name)
        # The import machinery stamps a new spec and loader on a module it hands out: restore them.
        for attr in ("__spec__", "__loader__"):
            monkeypatch.setattr(mod, attr, getattr(mod, attr, None), raising=False)
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path[:1], _OnnxStash(stash, log), *sys.meta_path[1:]])

    backend = PopArtBackend(cache_dir=tmp_path)  # no module given: it imports popart itself
    compiled = backend.compile(onnx_bytes, (_inputs(2),), "fp32", {})
    assert log[:2] == ["popart", "onnx"]
    assert sys.modules["popart"] is module
    compiled.close()


def test_no_ipu_is_unavailable_with_the_reason(tmp_path):
    fake = fake_popart.make_module(ipus=0)
    availability = PopArtBackend(popart_module=fake).availability()
    assert availability.reason == (
        "PopART 3.4.0 finds no IPU (gc-info -l lists them; on a Pod, check the IPUOF_VIPU_API_* partition "
        "settings); device 'ipu-model' runs the IPU Model simulator"
    )


@pytest.mark.parametrize(
    ("device", "reason"),
    [
        ("ipu:7", "there is no IPU device with id 7 (gc-info -l lists the ids; this machine has 2 IPU(s))"),
        (
            "cuda",
            "the popart backend runs on 'ipu', 'ipu:N' (a device id from gc-info -l) or 'ipu-model', "
            "not 'cuda'",
        ),
        (
            "ipu:x",
            "the popart backend runs on 'ipu', 'ipu:N' (a device id from gc-info -l) or 'ipu-model', "
            "not 'ipu:x'",
        ),
    ],
)
def test_devices_that_are_not_there_are_unavailable(fake, device, reason):
    availability = PopArtBackend(device=device, popart_module=fake).availability()
    assert (availability.ok, availability.reason) == (False, reason)


@pytest.mark.parametrize("device", ["ipu", "ipu:0", "ipu:1", "ipu:2"])
def test_devices_that_are_there_are_available(fake, device):
    assert PopArtBackend(device=device, popart_module=fake).availability().ok


def test_availability_never_raises(fake, monkeypatch):
    def broken(self, *a, **k):
        raise fake.popart_exception("no driver")

    monkeypatch.setattr(type(fake.DeviceManager()), "enumerateDevices", broken)
    availability = PopArtBackend(popart_module=fake).availability()
    assert availability.reason == "PopART could not list IPU devices: no driver"


def test_describe_is_plain_json(backend):
    description = backend.describe()
    assert json.loads(json.dumps(description)) == description
    inventory = description.pop("inventory")
    assert (inventory["count"], inventory["source"], inventory["simulator"]) == (2, "popart", False)
    assert description == {
        "backend": "popart",
        "device": "ipu",
        "simulator": False,
        "popart": "3.4.0",
        "ipus": 2,
        "devices": [
            {
                "id": i,
                "numIpus": 1,
                "tilesPerIPU": 1472,
                "ipuVersion": "ipu2",
                # unattached: PopART knows no driver version yet
                "version": "<unknown-ipu-unattached>",
                "type": "DeviceType.Ipu",
                "isAttached": False,
            }
            for i in (0, 1)
        ],
    }


def test_describe_without_popart_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "popart", None)
    description = PopArtBackend().describe()
    assert description["error"].endswith(NOT_INSTALLED)


def test_precision_and_shapes(backend):
    assert backend.default_precision() == "fp16"
    assert backend.shape_specialized({}) is True
    assert (backend.name, backend.device) == ("popart", "ipu")


# -- the fake itself behaves as the SDK does ------------------------------------------------------------


def test_the_fake_refuses_what_popart_refuses(fake, onnx_bytes):
    with pytest.raises(fake.popart_exception, match=r"^Input tensor 'x' must be specified in InputShapeInfo"):
        fake.InferenceSession(
            fnModel=onnx_bytes,
            dataFlow=fake.DataFlow(1, {"y": fake.AnchorReturnType("ALL")}),
            deviceInfo=fake.DeviceManager().createCpuDevice(),
        )
    with pytest.raises(AttributeError):
        fake.SessionOptions().enableReplication = True
    with pytest.raises(TypeError):
        fake.SessionOptions().virtualGraphMode = "Auto"
    with pytest.raises(fake.popart_exception, match=r"^Invalid anchor return type ID supplied: each$"):
        fake.AnchorReturnType("each")
    with pytest.raises(fake.popart_exception, match=r"must be a power of two$"):
        fake.DeviceManager().tryAcquireAvailableDevice(3)
    with pytest.raises(fake.popart_exception, match="not c-contiguous"):
        fake.PyStepIO({"x": np.zeros((4, 3)).T}, {})


def test_the_fake_prepare_device_holds_the_gil_for_its_compile_time(fake):
    """As popart.cpp:2054-2071 binds it: no other thread of the process runs during the compile."""
    import threading
    import time

    fake.configure(compile_s=0.3)
    fixed = _torchscript_onnx(small_net(), (_inputs(2),), dynamic=False)
    session = fake.InferenceSession(
        fnModel=fixed,
        dataFlow=fake.DataFlow(1, ["y"], fake.AnchorReturnType("All")),
        deviceInfo=fake.DeviceManager().tryAcquireAvailableDevice(1),
        userOptions=fake.SessionOptions(),
    )
    ticks: list[int] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            ticks.append(time.monotonic_ns())
            time.sleep(0.001)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        while not ticks:
            time.sleep(0.001)
        session.prepareDevice()
        after = len(ticks)
        while len(ticks) == after:
            time.sleep(0.001)
    finally:
        stop.set()
        ticker.join()
    (span,) = fake.system.compile_spans
    assert span[1] - span[0] == 300_000_000  # the simulated compile time, to its deadline
    assert [t for t in ticks if span[0] < t < span[1]] == []
    assert min(ticks) < span[0]
    assert max(ticks) > span[1]


def test_the_fake_session_lifecycle_checks(fake, onnx_bytes, tmp_path):
    fixed = _torchscript_onnx(small_net(), (_inputs(2),), dynamic=False)
    device = fake.DeviceManager().tryAcquireAvailableDevice(1)
    session = fake.InferenceSession(
        fnModel=fixed,
        dataFlow=fake.DataFlow(1, ["y"], fake.AnchorReturnType("All")),
        deviceInfo=device,
        userOptions=fake.SessionOptions(),
    )
    anchors = session.initAnchorArrays()
    assert {k: v.shape for k, v in anchors.items()} == {"y": (2, 5)}
    stepio = fake.PyStepIO({"x": _inputs(2).numpy()}, anchors)
    with pytest.raises(
        fake.popart_runtime_error,
        match=r"^Devicex::prepare\(\) must be called before Devicex::run\(const IStepIO &\) is called\.$",
    ):
        session.run(stepio)
    session.prepareDevice()
    session.weightsFromHost()
    with pytest.raises(
        fake.popart_runtime_error, match=r"^Unexpected number of input elements for Tensor x\. "
    ):
        session.run(fake.PyStepIO({"x": _inputs(4).numpy()}, anchors))
    with pytest.raises(
        fake.popart_runtime_error, match=r"^Type discrepancy for tensor x\. User provided : FLOAT16"
    ):
        session.run(fake.PyStepIO({"x": _inputs(2).numpy().astype(np.float16)}, anchors))
    session.run(stepio)
    np.testing.assert_allclose(anchors["y"], _eager(_inputs(2)), rtol=1e-5, atol=1e-6)
    device.detach()
    with pytest.raises(fake.popart_runtime_error, match="detached"):
        session.run(stepio)


def _pipelined_session(fake, model: bytes, bps: int, mode: str = "Auto"):
    """A pipelined session over two IPUs (which are given back whatever happens)."""
    options = fake.SessionOptions()
    options.virtualGraphMode = getattr(fake.VirtualGraphMode, mode)
    options.enablePipelining = True
    device = fake.DeviceManager().tryAcquireAvailableDevice(2)
    try:
        return fake.InferenceSession(
            fnModel=model,
            dataFlow=fake.DataFlow(bps, {"y": fake.AnchorReturnType("ALL")}),
            deviceInfo=device,
            userOptions=options,
        )
    finally:
        device.detach()


def test_the_fake_refuses_fewer_batches_per_step_than_pipeline_stages(fake):
    fixed = _torchscript_onnx(small_net(), (_inputs(1),), dynamic=False)
    with pytest.raises(
        fake.popart_exception,
        match=r"^For pipelining, depth \(batchesPerStep\) must equal at least the number of pipeline "
        r"stages \(2\)$",
    ):
        _pipelined_session(fake, fixed, 1)
    assert _pipelined_session(fake, fixed, 2).dataflow.batchesPerStep() == 2
    # Annotated stages count, not IPUs: three stages over two IPUs need three batches per step.
    builder = fake.Builder(fixed)
    for tid, stage in (("/conv/Conv_output_0", 0), ("/Relu_output_0", 1), ("y", 2)):
        builder.virtualGraph(tid, min(stage, 1))
        builder.pipelineStage(tid, stage)
    with pytest.raises(fake.popart_exception, match=r"pipeline stages \(3\)$"):
        _pipelined_session(fake, builder.getModelProto(), 2, "Manual")


def test_the_fake_prints_virtual_graph_modes_as_cpp_does(fake, onnx_bytes):
    fixed = _torchscript_onnx(small_net(), (_inputs(1),), dynamic=False)
    with pytest.raises(
        fake.popart_exception, match=r"not be VirtualGraphMode::Off \(currently VirtualGraphMode::Off\)\.$"
    ):
        _pipelined_session(fake, fixed, 2, "Off")


def test_the_fake_builder_sets_available_memory_as_popart_does(fake, onnx_bytes):
    builder = fake.Builder(onnx_bytes)
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(fake.popart_exception, match=r"^availableMemoryProportion must be in \(0,1\]$"):
            builder.setAvailableMemoryProportion("/conv/Conv_output_0", bad)
    builder.setAvailableMemoryProportion("/conv/Conv_output_0", 0.6)
    builder.setAvailableMemoryProportion({"/conv/Conv_output_0"}, 0.3)  # the set overload; replaces
    assert _conv_memory(builder.getModelProto()) == {"/conv/Conv_output_0": pytest.approx(0.3)}
    import onnx

    (conv,) = [n for n in onnx.load_from_string(builder.getModelProto()).graph.node if n.op_type == "Conv"]
    assert [a.name for a in conv.attribute].count(fake_popart.AVAILABLE_MEMORY_ATTRIBUTE) == 1


def test_the_fake_device_versions_are_the_sdks(fake):
    manager = fake.DeviceManager()
    (listed,) = manager.enumerateDevices(numIpus=2)
    assert (listed.version, listed.ipuVersion) == ("<unknown-ipu-unattached>", "ipu2")
    assert repr(listed) == (
        "Device Type:ipu Connection Type:Always Id:2 Version:<unknown-ipu-unattached> NumIPUs:2 "
        "NumTilesPerIPU:1472 DeviceIds: {65,64}"
    )  # DeviceInfo::toString prints the driver ids, which are not gc-info's 0 and 1
    device = manager.tryAcquireAvailableDevice(1)
    assert (device.version, device.ipuVersion) == (fake_popart.DRIVER_VERSION, "ipu2")
    device.detach()
    model = manager.createIpuModelDevice({"ipuVersion": "ipu21"})
    assert (model.version, model.ipuVersion, model.tilesPerIPU) == ("ipu21", "ipu21", 4)
    assert repr(model).startswith("Device Type:ipu-model ")
    assert manager.createCpuDevice().version == "<unknown-cpu>"
    offline = manager.createOfflineIPUDevice({"numIPUs": 2})
    assert (offline.version, offline.driverIds) == ("<offline-ipu>", [0])
    assert repr(offline).startswith("Device Type:offline-ipu Connection Type:Never ")
    with pytest.raises(fake.popart_exception, match=r"^Cannot attach to offline device$"):
        offline.attach()
    with pytest.raises(fake.popart_exception, match=r"^Cannot detach from offline device$"):
        offline.detach()


def test_the_fake_ipu_model_with_4_tiles_refuses_a_model_too_big_for_it(fake):
    import onnx

    def session(features: int, device):
        model = onnx.load_from_string(_large_onnx(features))
        for vi in (*model.graph.input, *model.graph.output):
            vi.type.tensor_type.shape.dim[0].dim_value = 1
        return fake.InferenceSession(
            fnModel=model.SerializeToString(),
            dataFlow=fake.DataFlow(1, {"y": fake.AnchorReturnType("ALL")}),
            deviceInfo=device,
        )

    manager = fake.DeviceManager()
    with pytest.raises(fake.OutOfMemoryException, match=r"^Out of memory: Cannot fit all variable data"):
        session(1024, manager.createIpuModelDevice({})).prepareDevice()  # 4 MiB of weights, 4 tiles
    session(256, manager.createIpuModelDevice({})).prepareDevice()  # 256 KiB fits
    session(1024, manager.createIpuModelDevice({"tilesPerIPU": 1472})).prepareDevice()


def test_the_fake_rejects_opsets_popart_has_no_tables_for(fake):
    newer = _torchscript_onnx(small_net(), (_inputs(2),), opset=13, dynamic=False)
    with pytest.raises(fake.popart_exception, match=r"version ai\.onnx 13 in opsets"):
        fake.InferenceSession(
            fnModel=newer,
            dataFlow=fake.DataFlow(1, {"y": fake.AnchorReturnType("ALL")}),
            deviceInfo=fake.DeviceManager().createCpuDevice(),
        )


# -- contract: the calls the backend makes, against the fake and (where importable) the real SDK ---------


def check_the_popart_api(popart: types.ModuleType, tmp_path) -> str:
    """The calls the backend makes, checked against ``popart``; returns why the run part was skipped
    ("" when it ran). The caller must have imported popart before anything imported onnx."""
    if not hasattr(popart, "InferenceSession"):
        return f"the importable popart ({getattr(popart, '__file__', '?')}) is not Graphcore's PopART"
    onnx_bytes = _torchscript_onnx(small_net(), (_inputs(2),))
    for name in (
        "DeviceManager",
        "InferenceSession",
        "SessionOptions",
        "DataFlow",
        "AnchorReturnType",
        "PyStepIO",
        "Builder",
    ):
        assert hasattr(popart, name), name
    assert hasattr(popart, "GraphTransformer")
    assert hasattr(popart, "popart_exception")
    for member in ("Off", "Manual", "Auto"):
        assert hasattr(popart.VirtualGraphMode, member)
    manager = popart.DeviceManager()
    assert manager is popart.DeviceManager()  # a singleton
    assert hasattr(manager, "tryAcquireAvailableDevice") or hasattr(manager, "acquireAvailableDevice")
    options = popart.SessionOptions()
    for field in (
        "enableReplicatedGraphs",
        "replicatedGraphCount",
        "virtualGraphMode",
        "enablePipelining",
        "partialsTypeMatMuls",
        "convolutionOptions",
        "enableEngineCaching",
        "cachePath",
    ):
        setattr(options, field, getattr(options, field))
    art = popart.AnchorReturnType("ALL")
    assert art.id() == popart.AnchorReturnTypeId.All
    flow = popart.DataFlow(2, {"y": art})
    assert (flow.batchesPerStep(), flow.anchors(), flow.nAnchors()) == (2, ["y"], 1)
    transformer = popart.GraphTransformer(onnx_bytes)
    transformer.convertFloatsToHalfs()
    assert isinstance(transformer.getModelProto(), bytes)
    builder = popart.Builder(onnx_bytes)
    builder.setAvailableMemoryProportion("/conv/Conv_output_0", 0.3)
    assert b"__available_memory" in builder.getModelProto()
    model = manager.createIpuModelDevice({"numIPUs": "1", "tilesPerIPU": "1472", "ipuVersion": "ipu2"})
    assert (model.tilesPerIPU, model.ipuVersion) == (1472, "ipu2")

    backend = PopArtBackend(cache_dir=tmp_path, popart_module=popart)
    if not backend.availability().ok:
        return f"no IPU to run on: {backend.availability().reason}"
    x = _inputs(2)
    compiled = backend.compile(onnx_bytes, (x,), "fp32", {})
    try:
        np.testing.assert_allclose(_run(compiled, x)[0], _eager(x), rtol=1e-3, atol=1e-4)
    finally:
        compiled.close()
    return ""


#: Runs ``check_the_popart_api`` in a fresh interpreter that imports popart first: this test module
#: imports torch and onnx, after which popart refuses to load (popart/__init__.py.in:5-7).
_CONTRACT_SCRIPT = """
import pathlib, sys
which, tmp, order = sys.argv[1:4]
if which == "fake":
    from tests.fakes import fake_popart
    sys.meta_path.insert(0, fake_popart.PopartFinder(fake_popart.make_module(ipus=1)))
if order == "onnx-first":
    import onnx
try:
    import popart
except ModuleNotFoundError:
    if which != "real":
        raise
    print("SKIP: no popart is importable (enable the Poplar SDK to run this against the real PopART)")
    sys.exit(0)
from tests.unit import test_popart_backend as contract
reason = contract.check_the_popart_api(popart, pathlib.Path(tmp))
print("SKIP: " + reason if reason else "RAN")
"""


def _run_contract(which: str, tmp_path, order: str = "popart-first") -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-c", _CONTRACT_SCRIPT, which, str(tmp_path), order],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize("which", ["fake", "real"])
def test_the_popart_api_the_backend_uses(which, tmp_path):
    # Whether the real popart imports is decided in the fresh interpreter: this process may hold a
    # fake's import hook from another test.
    result = _run_contract(which, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    last = result.stdout.strip().splitlines()[-1]
    if last.startswith("SKIP: "):
        pytest.skip(remove_prefix(last, "SKIP: "))
    assert last == "RAN"


def test_the_contract_subprocess_needs_popart_first(tmp_path):
    # The fake refuses onnx-first exactly as the SDK does, so the subprocess's import order matters.
    result = _run_contract("fake", tmp_path, order="onnx-first")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == f"ImportError: {fake_popart.IMPORT_ERROR}"


def test_the_fake_refuses_popart_after_onnx(popart_importable):
    import onnx  # noqa: F401

    with pytest.raises(ImportError) as excinfo:
        importlib.import_module("popart")
    assert str(excinfo.value) == fake_popart.IMPORT_ERROR


def test_under_poprun_an_instance_acquires_only_the_ipus_popdist_gives_it(onnx_bytes, tmp_path):
    fake_popdist = importlib.import_module("tests.fakes.fake_popdist")
    fake = fake_popart.make_module(ipus=4)
    # Instance 1 of 2 with two local replicas: PopDist's device is the pair {2, 3}, id 5 on 4 IPUs.
    # Instance 0 has not acquired its IPUs yet: any free IPU would be IPU 0, instance 0's.
    fake_popdist.configure(1, 2, replicas_local=2)
    try:
        backend = PopArtBackend(cache_dir=tmp_path, popart_module=fake, popdist_module=fake_popdist)
        assert backend.inventory().placement_inventory().device_ids == (2, 3)
        for options, held in (({}, (2,)), ({"replicated_graphs": 2}, (2, 3))):
            compiled = backend.compile(onnx_bytes, (_inputs(2 * len(held)),), "fp32", options)
            try:
                # The instance's own IPUs, so its energy is theirs alone.
                assert compiled.ipu_ids == held
            finally:
                compiled.close()
        with pytest.raises(CompileError) as excinfo:
            backend.compile(onnx_bytes, (_inputs(4),), "fp32", {"replicated_graphs": 4})
        assert str(excinfo.value) == (
            "bytes needs 4 IPUs (ipus x replicated_graphs), but PopRun instance 1 of 2 has 2 (device 5, IPUs "
            "2, 3: 2 local replica(s) x 1 IPU(s)); launch poprun with --ipus-per-replica and --num-replicas "
            "giving each instance that many"
        )
    finally:
        fake_popdist.reset()
