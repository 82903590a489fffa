"""The torch backend on the CPU, called directly (no pytest plugin machinery)."""

from __future__ import annotations

import types
import warnings
import weakref

import pytest

from pytest_ipu.backends import torch as torch_backend
from pytest_ipu.backends.torch import TorchBackend
from pytest_ipu.errors import CompileError
from tests.unit.torch_versions import NO_CPU_FP16
from tests.unit.torch_versions import cpu_runs_fp16
from tests.unit.torch_versions import needs_torch_compile

torch = pytest.importorskip("torch")


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        # torch 2.0 warns that lazy modules are new whenever one is made; later torches do not.
        warnings.filterwarnings("ignore", "Lazy modules are a new feature", UserWarning)
        lazy = torch.nn.LazyLinear(5)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), lazy)


@pytest.fixture
def model_and_input() -> tuple[torch.nn.Module, torch.Tensor]:
    model = _model()
    x = torch.randn(2, 3, 8, 8)
    model(x)  # materialise the lazy layer
    return model.eval(), x


@pytest.mark.parametrize(
    ("precision", "dtype", "tolerance"),
    [
        ("fp32", "float32", 1e-6),
        ("bf16", "bfloat16", 5e-2),
        pytest.param(
            "fp16", "float16", 5e-3, marks=pytest.mark.skipif(not cpu_runs_fp16(), reason=NO_CPU_FP16)
        ),
    ],
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


def test_bad_precision_and_model_are_errors(model_and_input):
    model, x = model_and_input
    backend = TorchBackend(device="cpu")
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


def _capability_in_build_summary() -> str:
    """The capability line of torch's build summary, which every torch since 1.x prints."""
    (line,) = [x for x in torch.__config__.show().splitlines() if "CPU capability usage:" in x]
    return line.split(":", 1)[1].strip()


def test_describe_reports_the_cpu_capability_torch_dispatches_to():
    info = TorchBackend(device="cpu").describe()
    assert info["cpu_capability"] == _capability_in_build_summary()
    if hasattr(torch.backends, "cpu"):  # torch >= 2.1 says it directly, and the same
        assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


def _without_backends_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in torch 2.0.1: no ``torch.backends.cpu.get_cpu_capability``. (torch.backends forwards
    missing attributes to its submodules, so the attribute is replaced rather than deleted.)"""
    monkeypatch.setattr(torch.backends, "cpu", types.SimpleNamespace(), raising=False)


def test_without_torch_backends_cpu_the_capability_comes_from_the_build_summary(monkeypatch):
    """torch 2.0.1 (PopTorch 3.4's torch) has no torch.backends.cpu."""
    expected = _capability_in_build_summary()
    _without_backends_cpu(monkeypatch)
    assert TorchBackend(device="cpu").describe()["cpu_capability"] == expected


def test_a_torch_that_does_not_say_its_capability_gets_none_recorded(monkeypatch):
    _without_backends_cpu(monkeypatch)
    monkeypatch.setattr(torch.__config__, "show", lambda: "PyTorch built with:\n  - GCC 9.3\n")
    assert "cpu_capability" not in TorchBackend(device="cpu").describe()


def test_torch_compile_is_unavailable_where_torch_refuses_to_compile(monkeypatch):
    """torch 2.0.1 refuses torch.compile on Python 3.11, in these words (torch/_dynamo/eval_frame.py)."""
    import torch._dynamo.eval_frame as eval_frame

    def check() -> None:
        raise RuntimeError("Python 3.11+ not yet supported for torch.compile")

    monkeypatch.setattr(eval_frame, "check_if_dynamo_supported", check)
    availability = TorchBackend(name="torch-compile", device="cpu", mode="compile").availability()
    assert not availability.ok
    assert availability.reason == (
        f"torch {torch.__version__} cannot torch.compile here: Python 3.11+ not yet supported for "
        "torch.compile (torch >= 2.1 compiles on Python 3.11)"
    )
    assert TorchBackend(device="cpu").availability().ok  # eager needs no compiler


def test_torch_compile_is_available_where_torch_compiles():
    availability = TorchBackend(name="torch-compile", device="cpu", mode="compile").availability()
    if not needs_torch_compile.args[0]:
        assert availability.ok, availability.reason
    else:
        assert "cannot torch.compile here" in availability.reason


def test_a_second_interop_count_is_refused_without_asking_torch_again(monkeypatch):
    """torch accepts set_num_interop_threads once per process; torch 2.0 aborts the process on a
    second call, so the backend must not make one."""
    monkeypatch.setattr(torch_backend, "_INTEROP_SET", weakref.WeakSet())
    counts = [torch.get_num_interop_threads()]
    monkeypatch.setattr(torch, "get_num_interop_threads", lambda: counts[-1])
    monkeypatch.setattr(torch, "set_num_interop_threads", counts.append)
    first = counts[0] + 1
    model, x = _model().eval(), torch.randn(2, 3, 8, 8)
    compiled = TorchBackend(device="cpu", inter_op_threads=first).compile(model, (x,), "fp32", {})
    assert compiled.info["threads"]["inter_op"] == first
    with pytest.raises(CompileError) as excinfo:
        TorchBackend(device="cpu", inter_op_threads=first + 1).compile(model, (x,), "fp32", {})
    assert counts[1:] == [first]  # torch was asked once
    assert str(excinfo.value).startswith(
        f"--ipu-torch-interop-threads={first + 1} cannot be applied: torch's inter-op threads are already "
        f"{first} in this process"
    )
    # The count already in effect is still fine, and asks torch nothing.
    TorchBackend(device="cpu", inter_op_threads=first).compile(model, (x,), "fp32", {})
    assert counts[1:] == [first]


def test_default_precision_is_fp32_on_cpu_and_fp16_on_gpu():
    assert TorchBackend(device="cpu").default_precision() == "fp32"
    assert TorchBackend(device="cuda:0").default_precision() == "fp16"


# No warning filter here: the backend keeps torch's internal deprecation warnings out of the compile.
@needs_torch_compile
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
