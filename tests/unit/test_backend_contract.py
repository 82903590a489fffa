"""The contract every built-in backend keeps, one test per promise, each run over the backends it
applies to: torch, onnxruntime, and the IPU backends on the fakes of tests/fakes/ (popart on
fake_popart, poptorch on fake_poptorch). The promises: the defaults a backend reports, options
refused before anything is compiled with one line naming them, something that is no model refused,
and, for the ONNX backends, ONNX bytes and paths compiled without an export and a missing file named.

What is one backend's alone stays in its own test module (test_<backend>_backend.py).
"""

from __future__ import annotations

import contextlib
import importlib
import re
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ipu.backends import onnx_export
from pytest_ipu.backends import parity
from pytest_ipu.backends.ipu.options import MEMORY_PROPORTION_FIX
from pytest_ipu.errors import CompileError
from tests.unit.small_net import eager as _eager
from tests.unit.small_net import inputs as _inputs
from tests.unit.small_net import small_net
from tests.unit.small_net import torchscript_onnx

torch = pytest.importorskip("torch")

#: Every built-in backend under the contract.
BACKENDS = ("torch", "onnxruntime", "popart", "poptorch")
#: The backends that run ONNX models (a torch model is exported first).
ONNX_BACKENDS = ("onnxruntime", "popart")


@dataclass
class Subject:
    """A backend under the contract, a model it compiles, and what it promises of them."""

    backend: Any
    #: A torch model the backend compiles, and example inputs for it.
    model: object
    inputs: tuple[object, ...]
    #: The backend's options, as the unknown-option message lists them.
    allowed: str
    #: Asserts that a refused compile started nothing: no export, no IPU acquired, no executable.
    untouched: Callable[[], None]
    #: The compile phases of an ONNX model given as such (the ONNX backends only).
    onnx_phases: tuple[str, ...] = ()
    #: The compile facts of an ONNX model given as such, where the backend reports fixed ones.
    onnx_info: Mapping[str, object] | None = None


def _run(compiled: Any, x: object) -> list[np.ndarray]:
    return parity.to_arrays(compiled.run(*compiled.prepare_inputs((x,))))


@pytest.fixture
def export_calls(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Nothing under the contract exports unless a test says so: a call of the exporter is recorded
    and fails the test."""
    calls: list[object] = []

    def export(model: object, *args: object, **kwargs: object) -> None:
        calls.append(model)
        pytest.fail("exported")

    monkeypatch.setattr(onnx_export, "export", export)
    return calls


def _torch_subject(request: pytest.FixtureRequest) -> Subject:
    from pytest_ipu.backends.torch import OPTIONS
    from pytest_ipu.backends.torch import TorchBackend

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    # The torch backend holds nothing a refused compile could have started.
    return Subject(
        TorchBackend(device="cpu"), model, (torch.randn(2, 3, 8, 8),), ", ".join(OPTIONS), lambda: None
    )


def _onnxruntime_subject(request: pytest.FixtureRequest) -> Subject:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from pytest_ipu.backends.onnxruntime import OPTIONS
    from pytest_ipu.backends.onnxruntime import OrtBackend

    calls = request.getfixturevalue("export_calls")
    tmp_path = request.getfixturevalue("tmp_path")

    def untouched() -> None:
        assert calls == []

    return Subject(
        OrtBackend(device="cpu", cache_dir=tmp_path),
        small_net(),
        (_inputs(2),),
        ", ".join(OPTIONS),
        untouched,
        onnx_phases=("session", "first_run"),
        onnx_info={"provider": "CPUExecutionProvider"},
    )


def _popart_subject(request: pytest.FixtureRequest) -> Subject:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from pytest_ipu.backends.ipu.popart import OPTIONS
    from pytest_ipu.backends.ipu.popart import PopArtBackend
    from tests.fakes import fake_popart

    calls = request.getfixturevalue("export_calls")
    tmp_path = request.getfixturevalue("tmp_path")
    fake = fake_popart.make_module(ipus=2)

    def untouched() -> None:
        assert calls == []
        assert fake.system.events == []  # no IPU acquired

    return Subject(
        PopArtBackend(device="ipu", cache_dir=tmp_path, popart_module=fake),
        small_net(),
        (_inputs(6),),
        ", ".join(OPTIONS),
        untouched,
        onnx_phases=("session", "weights", "first_run"),
    )


def _poptorch_subject(request: pytest.FixtureRequest) -> Subject:
    from pytest_ipu.backends.ipu.poptorch import OPTIONS
    from pytest_ipu.backends.ipu.poptorch import PopTorchBackend

    fake_poptorch = importlib.import_module("tests.fakes.fake_poptorch")
    monkeypatch = request.getfixturevalue("monkeypatch")
    for var in fake_poptorch.ENVIRONMENT:
        monkeypatch.delenv(var, raising=False)
    fake_poptorch.reset()
    request.addfinalizer(fake_poptorch.reset)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()

    def untouched() -> None:
        assert fake_poptorch.executors == []  # nothing compiled

    backend = PopTorchBackend(poptorch_module=fake_poptorch, torch_module=torch)
    return Subject(backend, model, (torch.randn(8, 8),), ", ".join(OPTIONS), untouched)


_SUBJECTS: Mapping[str, Callable[[pytest.FixtureRequest], Subject]] = {
    "torch": _torch_subject,
    "onnxruntime": _onnxruntime_subject,
    "popart": _popart_subject,
    "poptorch": _poptorch_subject,
}


@pytest.fixture(params=BACKENDS)
def subject(request: pytest.FixtureRequest) -> Subject:
    """The backend named by the parameter, made on its fake where it has one."""
    return _SUBJECTS[request.param](request)


# -- what a backend reports of itself ---------------------------------------------------------------------


def _backend(builtin: str, **kwargs: Any) -> Any:
    """A built-in backend made without its runtime: none of what ``test_defaults`` asks imports one."""
    from pytest_ipu.backends.ipu.popart import PopArtBackend
    from pytest_ipu.backends.ipu.poptorch import PopTorchBackend
    from pytest_ipu.backends.onnxruntime import OrtBackend
    from pytest_ipu.backends.torch import TorchBackend

    classes = {"torch": TorchBackend, "onnxruntime": OrtBackend, "popart": PopArtBackend}
    if builtin == "poptorch":
        return PopTorchBackend(torch_module=torch, **kwargs)
    return classes[builtin](**kwargs)


@pytest.mark.parametrize(
    ("builtin", "kwargs", "facts", "precision", "specialized"),
    [
        ("torch", {"device": "cpu"}, {"name": "torch", "device": "cpu"}, "fp32", False),
        (
            "torch",
            {"name": "torch-compile", "device": "cuda:0", "mode": "compile"},
            {"name": "torch-compile", "device": "cuda:0"},
            "fp16",
            True,
        ),
        *[
            (
                "onnxruntime",
                {"device": device, "provider": provider},
                {"name": "onnxruntime", "device": device or "cpu", "provider": provider_name},
                precision,
                False,  # a dynamic batch: one session for every batch size
            )
            for device, provider, precision, provider_name in [
                (None, None, "fp32", "CPUExecutionProvider"),
                ("cpu", None, "fp32", "CPUExecutionProvider"),
                ("cuda", None, "fp16", "CUDAExecutionProvider"),
                ("cuda:0", "tensorrt", "fp16", "TensorrtExecutionProvider"),
            ]
        ],
        ("popart", {"device": "ipu"}, {"name": "popart", "device": "ipu"}, "fp16", True),
        ("poptorch", {}, {"name": "poptorch", "device": "ipu"}, "fp16", True),
    ],
)
def test_defaults(builtin, kwargs, facts, precision, specialized):
    backend = _backend(builtin, **kwargs)
    assert {key: getattr(backend, key) for key in facts} == facts
    assert backend.default_precision() == precision
    assert backend.shape_specialized({}) is specialized


# -- options and models refused before anything compiles ------------------------------------------------


@pytest.mark.parametrize(
    ("subject", "options", "names"),
    [
        ("torch", {"chanels_last": True}, "'chanels_last'"),
        ("onnxruntime", {"bogus": 1, "threads": 4}, "'bogus', 'threads'"),
        ("popart", {"bogus": 1, "replicas": 4}, "'bogus', 'replicas'"),
        ("poptorch", {"device_iteration": 2}, "'device_iteration'"),
    ],
    indirect=["subject"],
)
def test_unknown_option_names_it_and_the_allowed_ones(subject, options, names):
    with pytest.raises(CompileError) as excinfo:
        subject.backend.compile(subject.model, subject.inputs, "fp32", options)
    name = subject.backend.name
    assert str(excinfo.value) == (
        f"unknown {name} backend option(s) {names} for {type(subject.model).__name__}; "
        f"allowed: {subject.allowed}"
    )
    subject.untouched()


@pytest.mark.parametrize(
    ("subject", "options", "message"),
    [
        pytest.param(
            "torch",
            {"io": "gpu"},
            "torch backend option io='gpu' for Sequential; use 'host' or 'device'",
            id="torch-io",
        ),
        pytest.param(
            "onnxruntime",
            {"graph_optimization_level": "max"},
            "onnxruntime option graph_optimization_level='max'; use one of disabled, basic, extended, all",
            id="onnxruntime-level",
        ),
        pytest.param(
            "onnxruntime",
            {"io": "gpu"},
            "onnxruntime option io='gpu'; use 'host' or 'device'",
            id="onnxruntime-io",
        ),
        pytest.param(
            "onnxruntime",
            {"intra_op_threads": -1},
            "onnxruntime option intra_op_threads=-1; use a non-negative integer",
            id="onnxruntime-negative",
        ),
        pytest.param(
            "onnxruntime",
            {"inter_op_threads": "4"},
            "onnxruntime option inter_op_threads='4'; use a non-negative integer",
            id="onnxruntime-string",
        ),
        pytest.param(
            "onnxruntime",
            {"intra_op_threads": True},
            "onnxruntime option intra_op_threads=True; use a non-negative integer",
            id="onnxruntime-bool",
        ),
        pytest.param(
            "onnxruntime",
            {"inter_op_threads": 2.0},
            "onnxruntime option inter_op_threads=2.0; use a non-negative integer",
            id="onnxruntime-float",
        ),
        pytest.param(
            "onnxruntime",
            {"opset": "18"},
            "onnxruntime option opset='18'; use a non-negative integer",
            id="onnxruntime-opset",
        ),
        pytest.param(
            "popart",
            {"batches_per_step": 0},
            "popart option batches_per_step=0 for SmallNet; use a positive integer",
            id="popart-bps-zero",
        ),
        pytest.param(
            "popart",
            {"replicated_graphs": "2"},
            "popart option replicated_graphs='2' for SmallNet; use a positive integer",
            id="popart-replicas-string",
        ),
        pytest.param(
            "popart",
            {"ipus": True},
            "popart option ipus=True for SmallNet; use a positive integer",
            id="popart-ipus-bool",
        ),
        pytest.param(
            "popart",
            {"opset": 18},
            "popart option opset=18 for SmallNet; PopART 3.x imports ONNX opsets 6 to 11: use an integer in "
            "that range",
            id="popart-opset",
        ),
        pytest.param(
            "popart",
            {"pipelining": 1},
            "popart option pipelining=1 for SmallNet; use True or False",
            id="popart-pipelining-int",
        ),
        pytest.param(
            "popart",
            {"virtual_graph_mode": "sideways"},
            "popart option virtual_graph_mode='sideways' for SmallNet; use None or one of 'off', 'manual', "
            "'auto'",
            id="popart-vgm",
        ),
        pytest.param(
            "popart",
            {"ipus": 2},
            "popart option ipus=2 for SmallNet needs virtual_graph_mode='auto' (or 'manual', with annotated "
            "ops) to split the model over the IPUs",
            id="popart-ipus-without-vgm",
        ),
        pytest.param(
            "popart",
            {"pipelining": True, "virtual_graph_mode": "auto"},
            "popart option pipelining=True for SmallNet needs ipus >= 2 and virtual_graph_mode 'auto' or "
            "'manual' (PopART pipelines over virtual graphs)",
            id="popart-pipelining-one-ipu",
        ),
        pytest.param(
            "popart",
            {"anchors": "every"},
            "popart option anchors='every' for SmallNet; use one of 'all', 'final', 'sum', 'everyn:N' "
            "(everyn's N must divide batches_per_step)",
            id="popart-anchors",
        ),
        pytest.param(
            "popart",
            {"anchors": "everyn:3", "batches_per_step": 4},
            "popart option anchors='everyn:3' for SmallNet; use one of 'all', 'final', 'sum', 'everyn:N' "
            "(everyn's N must divide batches_per_step)",
            id="popart-everyn",
        ),
        pytest.param(
            "popart",
            {"partials_type": "double"},
            "popart option partials_type='double' for SmallNet; use None, 'float' or 'half'",
            id="popart-partials",
        ),
        pytest.param(
            "popart",
            {"cache_path": "/tmp/engines"},
            "popart option cache_path='/tmp/engines' for SmallNet has no effect without "
            "enable_engine_caching=True; pass both",
            id="popart-cache-path",
        ),
        pytest.param(
            "popart",
            {"ipus": 3, "virtual_graph_mode": "auto"},
            "popart options ipus=3 x replicated_graphs=1 = 3 IPUs for SmallNet; PopART acquires a power of "
            "two (1, 2, 4, 8, ...): choose ipus and replicated_graphs whose product is one",
            id="popart-ipus-3",
        ),
        pytest.param(
            "popart",
            {"replicated_graphs": 3},
            "popart options ipus=1 x replicated_graphs=3 = 3 IPUs for SmallNet; PopART acquires a power of "
            "two (1, 2, 4, 8, ...): choose ipus and replicated_graphs whose product is one",
            id="popart-replicas-3",
        ),
        pytest.param(
            "popart",
            {"batches_per_step": 4},
            "the inputs of SmallNet have leading dimension 6, not a multiple of batches_per_step=4 x "
            "replicated_graphs=1 = 4; a PopART call takes micro_batch x batches_per_step x replicated_graphs "
            "items: pass a leading dimension that is a positive multiple of 4",
            id="popart-batch-bps",
        ),
        pytest.param(
            "popart",
            {"batches_per_step": 2, "replicated_graphs": 2},
            "the inputs of SmallNet have leading dimension 6, not a multiple of batches_per_step=2 x "
            "replicated_graphs=2 = 4; a PopART call takes micro_batch x batches_per_step x replicated_graphs "
            "items: pass a leading dimension that is a positive multiple of 4",
            id="popart-batch-replicas",
        ),
        pytest.param(
            "popart",
            {"ipus": 2, "virtual_graph_mode": "auto", "pipelining": True, "batches_per_step": 1},
            "popart option batches_per_step=1 for SmallNet is fewer than the 2 pipeline stages (pipelining "
            "over ipus=2); PopART needs at least one batch per stage to fill the pipeline: pass "
            "batches_per_step=2 or more, or leave it unset",
            id="popart-bps-below-stages",
        ),
        pytest.param(
            "popart",
            {"available_memory_proportion": 1.5},
            f"popart option available_memory_proportion=1.5 for SmallNet; {MEMORY_PROPORTION_FIX}",
            id="popart-memory-above-one",
        ),
        pytest.param(
            "popart",
            {"ipu_model_tiles": 0},
            "popart option ipu_model_tiles=0 for SmallNet; use a positive integer",
            id="popart-model-tiles",
        ),
        pytest.param(
            "popart",
            {"ipu_model_version": "ipu3"},
            "popart option ipu_model_version='ipu3' for SmallNet; use one of 'ipu1', 'ipu2', 'ipu21'",
            id="popart-model-version",
        ),
        pytest.param(
            "poptorch",
            {"device_iterations": 0},
            "poptorch backend option device_iterations=0 for Sequential; use a positive integer",
            id="poptorch-device-iterations",
        ),
        pytest.param(
            "poptorch",
            {"replication_factor": True},
            "poptorch backend option replication_factor=True for Sequential; use a positive integer",
            id="poptorch-replicas-bool",
        ),
        pytest.param(
            "poptorch",
            {"training": "yes"},
            "poptorch backend option training='yes' for Sequential; use True or False",
            id="poptorch-training-string",
        ),
        pytest.param(
            "poptorch",
            {"output_mode": "EveryN"},
            "poptorch backend option output_mode='EveryN' for Sequential; use one of default, all, final, "
            "sum",
            id="poptorch-output-mode",
        ),
        pytest.param(
            "poptorch",
            {"executable_cache_dir": 3},
            "poptorch backend option executable_cache_dir=3 for Sequential; use a directory path or None",
            id="poptorch-cache-dir",
        ),
        pytest.param(
            "poptorch",
            {"available_memory_proportion": 1.5},
            "poptorch backend option available_memory_proportion=1.5 for Sequential; "
            + MEMORY_PROPORTION_FIX,
            id="poptorch-memory-above-one",
        ),
        pytest.param(
            "poptorch",
            {"available_memory_proportion": {"IPU0": -0.5}},
            "poptorch backend option available_memory_proportion={'IPU0': -0.5} for Sequential: 'IPU0' maps "
            "to -0.5, not a number in (0, 1]; " + MEMORY_PROPORTION_FIX,
            id="poptorch-memory-negative",
        ),
        pytest.param(
            "poptorch",
            {"available_memory_proportion": {"IPU1": 0.3}},
            "poptorch backend option available_memory_proportion={'IPU1': 0.3} for Sequential: key 'IPU1' "
            "names no IPU of the model (ipus=1: 'IPU0' ... 'IPU0'); " + MEMORY_PROPORTION_FIX,
            id="poptorch-memory-no-such-ipu",
        ),
        pytest.param(
            "poptorch",
            {"partials_type": "half"},
            "poptorch backend option partials_type='half' for Sequential; use 'fp32', 'fp16' or None",
            id="poptorch-partials",
        ),
        pytest.param(
            "poptorch",
            {"partials_type": "fp16"},
            "poptorch backend option partials_type='fp16' for Sequential needs precision fp16 (got fp32); "
            "use partials_type='fp32' or precision fp16",
            id="poptorch-partials-fp16-in-fp32",
        ),
        pytest.param(
            "poptorch",
            {"random_seed": -1},
            "poptorch backend option random_seed=-1 for Sequential; use a non-negative integer or None",
            id="poptorch-seed",
        ),
    ],
    indirect=["subject"],
)
def test_bad_options_are_compile_errors_naming_them(subject, options, message):
    with pytest.raises(CompileError) as excinfo:
        subject.backend.compile(subject.model, subject.inputs, "fp32", options)
    assert str(excinfo.value) == message
    subject.untouched()


@pytest.mark.parametrize(
    ("subject", "message"),
    [
        ("torch", "the torch backend needs a torch.nn.Module, got int"),
        (
            "onnxruntime",
            "the onnxruntime backend needs an ONNX model (bytes or path) or a torch.nn.Module, got int",
        ),
        ("popart", "the popart backend needs an ONNX model (bytes or path) or a torch.nn.Module, got int"),
        ("poptorch", "the poptorch backend needs a torch.nn.Module, got int"),
    ],
    indirect=["subject"],
)
def test_something_that_is_no_model_is_a_compile_error(subject, message):
    with pytest.raises(CompileError) as excinfo:
        subject.backend.compile(42, subject.inputs, "fp32", {})
    assert str(excinfo.value) == message
    subject.untouched()


# -- ONNX given as such -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _exporting(tmp_path: Path) -> Iterator[list[object]]:
    """Within, the exporter writes the ONNX the test below gives as such (TorchScript's exporter,
    opset 11, which both ONNX backends import), recording the models it exports; after, the refusing
    exporter of ``export_calls`` is back."""
    exported: list[object] = []

    def export(model: Any, example_inputs: Any, cache_dir: Path, options: object = None) -> object:
        exported.append(model)
        path = tmp_path / "exported.onnx"
        path.write_bytes(torchscript_onnx(model, tuple(example_inputs)))
        return onnx_export.ExportedModel(path, "ab" * 32, False, 0.25, ("x",), 11)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(onnx_export, "export", export)
        yield exported


@pytest.mark.parametrize("subject", ONNX_BACKENDS, indirect=True)
@pytest.mark.parametrize("kind", ["bytes", "str", "Path"])
def test_onnx_bytes_and_paths_compile_without_exporting(subject, export_calls, tmp_path, kind):
    x = _inputs(4)
    # The same model through the backend's export: the ONNX given as such must run as it does.
    with _exporting(tmp_path) as exported:
        reference = subject.backend.compile(small_net(), (x,), "fp32", {})
        assert len(exported) == 1
        expected = _run(reference, x)
        reference.close()
    path = tmp_path / "small.onnx"
    path.write_bytes(torchscript_onnx(small_net(), (x,)))
    model = {"bytes": path.read_bytes(), "str": str(path), "Path": path}[kind]
    compiled = subject.backend.compile(model, (x,), "fp32", {})
    try:
        assert tuple(compiled.phases_s) == subject.onnx_phases
        assert "export_cached" not in compiled.info
        if subject.onnx_info is not None:
            assert dict(compiled.info) == subject.onnx_info
        outputs = _run(compiled, x)
        np.testing.assert_array_equal(outputs[0], expected[0])
        np.testing.assert_allclose(outputs[0], _eager(x), rtol=1e-5, atol=1e-6)
    finally:
        compiled.close()
    assert export_calls == []


@pytest.mark.parametrize(
    ("subject", "message"),
    [
        ("onnxruntime", r"^onnxruntime could not create a session for PosixPath: .*missing\.onnx"),
        ("popart", r"^could not read the ONNX model '{missing}': "),
    ],
    indirect=["subject"],
)
def test_a_missing_onnx_file_is_a_compile_error_naming_it(subject, tmp_path, message):
    missing = tmp_path / "missing.onnx"
    with pytest.raises(CompileError, match=message.format(missing=re.escape(str(missing)))):
        subject.backend.compile(missing, subject.inputs, "fp32", {})
    subject.untouched()
