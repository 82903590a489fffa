"""The torch backend on the CPU, called directly (no pytest plugin machinery)."""

from __future__ import annotations

import pytest

from pytest_ipu.backends.torch import TorchBackend
from pytest_ipu.errors import CompileError

torch = pytest.importorskip("torch")


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.LazyLinear(5)
    )


@pytest.fixture
def model_and_input() -> tuple[torch.nn.Module, torch.Tensor]:
    model = _model()
    x = torch.randn(2, 3, 8, 8)
    model(x)  # materialise the lazy layer
    return model.eval(), x


@pytest.mark.parametrize(
    ("precision", "dtype", "tolerance"),
    [("fp32", "float32", 1e-6), ("bf16", "bfloat16", 5e-2), ("fp16", "float16", 5e-3)],
)
@pytest.mark.parametrize("channels_last", [False, True])
def test_eager_outputs_match_the_model_in_every_precision(
    model_and_input, precision, dtype, tolerance, channels_last
):
    model, x = model_and_input
    expected = model(x).detach()
    compiled = TorchBackend(device="cpu").compile(model, (x,), precision, {"channels_last": channels_last})
    out = compiled.run(*compiled.prepare_inputs((x,)))
    assert out.dtype == getattr(torch, dtype)
    assert torch.allclose(out.float(), expected, atol=tolerance, rtol=tolerance)
    assert compiled.precision == precision
    assert compiled.target == "torch:cpu"


def test_the_callers_model_is_never_changed(model_and_input):
    model, x = model_and_input
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    TorchBackend(device="cpu").compile(model, (x,), "bf16", {"channels_last": True})
    assert model.training, "compile must not switch the caller's model to eval mode"
    for name, value in model.state_dict().items():
        assert value.dtype == before[name].dtype
        assert torch.equal(value, before[name])


def test_inputs_are_prepared_once_in_the_compiled_precision(model_and_input):
    model, x = model_and_input
    compiled = TorchBackend(device="cpu").compile(model, (x,), "bf16", {})
    (prepared,) = compiled.prepare_inputs((x.numpy(),))
    assert prepared.dtype == torch.bfloat16
    assert prepared.shape == x.shape


def test_unknown_option_names_it_and_the_allowed_ones(model_and_input):
    model, x = model_and_input
    with pytest.raises(
        CompileError, match=r"unknown torch backend option\(s\) 'chanels_last' for Sequential; allowed: "
    ):
        TorchBackend(device="cpu").compile(model, (x,), "fp32", {"chanels_last": True})


def test_bad_io_and_precision_and_model_are_errors(model_and_input):
    model, x = model_and_input
    backend = TorchBackend(device="cpu")
    with pytest.raises(CompileError, match="io='gpu'"):
        backend.compile(model, (x,), "fp32", {"io": "gpu"})
    with pytest.raises(CompileError, match="unknown precision 'fp8'"):
        backend.compile(model, (x,), "fp8", {})
    with pytest.raises(CompileError, match=r"needs a torch.nn.Module, got function"):
        backend.compile(lambda t: t, (x,), "fp32", {})


def test_availability_explains_missing_devices():
    assert TorchBackend(device="cpu").availability().ok
    bogus = TorchBackend(device="tpu").availability()
    assert not bogus.ok
    assert "tpu" in bogus.reason
    if not torch.cuda.is_available():
        cuda = TorchBackend(device="cuda").availability()
        assert not cuda.ok
        assert "no CUDA device" in cuda.reason


def test_describe_reports_versions_and_threads():
    info = TorchBackend(device="cpu").describe()
    assert info["torch"] == torch.__version__
    assert info["threads"] == torch.get_num_threads()
    assert info["device"] == "cpu"
    assert info["device_name"]


def test_default_precision_is_fp32_on_cpu_and_fp16_on_gpu():
    assert TorchBackend(device="cpu").default_precision() == "fp32"
    assert TorchBackend(device="cuda:0").default_precision() == "fp16"


# No warning filter here: the backend keeps torch's internal deprecation warnings out of the compile.
def test_torch_compile_compiles_inside_compile_and_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval()
    x = torch.randn(4, 16)
    backend = TorchBackend(name="torch-compile", device="cpu", mode="compile")
    assert backend.shape_specialized({})
    compiled = backend.compile(model, (x,), "fp32", {})
    assert compiled.options["mode"] == "compile"
    out = compiled.run(*compiled.prepare_inputs((x,)))
    assert torch.allclose(out, model(x).detach(), atol=1e-5)
    compiled.close()
