"""The ONNX path end to end: onnxruntime and torch side by side with ``ipu_compile(..., parity=True)``; the
records' compile phases, compile facts and parity; the disk cache under ``--ipu-cache-dir``; a backend whose
outputs are wrong; a missing CUDA provider.

torch and onnxruntime are imported only by the subprocesses (imported in this process after in-process
pytester runs have restored sys.modules, torch fails to load).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
from typing import Any

import pytest

from tests.unit.torch_versions import onnx_export_modules

REFERENCE = "torch eager fp32 on cpu"
FP32_TOLERANCE = 1e-3
TARGETS = ("onnxruntime:cpu", "torch:cpu")
TESTS = ("test_first", "test_again", "test_copy")


def _needs(*modules: str) -> None:
    # find_spec, not importorskip: see the module docstring.
    for module in modules:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")


CONFTEST = """
import torch

from pytest_ipu.backends.base import Availability
from pytest_ipu.backends.base import CompiledModel


class OffByOne:
    # A backend whose compiled model is wrong: every output is 1.0 too big.
    name = "wrong"
    device = "cpu"

    def availability(self):
        return Availability.yes()

    def describe(self):
        return {"backend": "wrong", "device": "cpu"}

    def default_precision(self):
        return "fp32"

    def shape_specialized(self, options):
        return False

    def compile(self, model, example_inputs, precision, options):
        def run(*args):
            with torch.inference_mode():
                return model(*args) + 1.0

        return CompiledModel(
            target="wrong:cpu",
            backend="wrong",
            device="cpu",
            device_name="Off By One",
            precision=precision,
            io="host",
            run=run,
            prepare_inputs=tuple,
            close=lambda: None,
        )


def pytest_ipu_make_backend(config, target):
    return OffByOne() if target.backend == "wrong" else None
"""

TEST_ONNX = """
import copy

import pytest
import torch

torch.manual_seed(0)
MODEL = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()
X = torch.randn(3, 8)


def test_first(ipu_compile, ipu_benchmark):
    compiled = ipu_compile(MODEL, (X,), parity=True)
    assert compiled.compile_cached is False
    assert compiled.parity.passed
    ipu_benchmark(compiled, (X,))


def test_again(ipu_compile, ipu_benchmark):
    compiled = ipu_compile(MODEL, (X,), parity=True)
    assert compiled.compile_cached is True
    ipu_benchmark(compiled, (X,))


def test_copy(ipu_compile, ipu_benchmark):
    # Another object with the same content: not in this run's compile cache, but in the disk cache.
    x = torch.randn(5, 8)
    compiled = ipu_compile(copy.deepcopy(MODEL), (x,), parity=True)
    assert compiled.compile_cached is False
    ipu_benchmark(compiled, (x,))


@pytest.mark.ipu(backend="wrong:cpu")
def test_wrong_outputs(ipu_compile):
    ipu_compile(MODEL, (X,), parity=True)
"""


def _record(data: dict[str, Any], test: str, target: str) -> dict[str, Any]:
    name = f"{test}[{target.replace(':', '-')}]"
    return next(b["extra_info"]["ipu"] for b in data["benchmarks"] if b["name"] == name)


def test_onnxruntime_and_torch_side_by_side_with_parity(pytester: pytest.Pytester) -> None:
    """One run (importing torch takes seconds): the two targets' records, then the wrong backend's test."""
    _needs(*onnx_export_modules())
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_onnx=TEST_ONNX)
    cache = pytester.path / "onnx-cache"
    result = pytester.runpytest_subprocess(
        f"--ipu-backend={','.join(TARGETS)}",
        "--ipu-rounds=5",
        "--ipu-warmup-rounds=0",
        "--benchmark-json=out.json",
        f"--ipu-cache-dir={cache}",
        timeout=300,
    )
    data = json.loads((pytester.path / "out.json").read_text())
    result.assert_outcomes(passed=len(TESTS) * len(TARGETS), failed=1)

    # -- every record passed its parity check, with the error measured --------------------------------
    for test in TESTS:
        for target in TARGETS:
            record = _record(data, test, target)
            assert record["target"] == target
            assert record["precision"] == "fp32"  # auto on a CPU
            parity = record["parity"]
            assert set(parity) == {"reference", "max_abs", "max_rel", "tolerance", "passed"}
            assert (parity["reference"], parity["tolerance"], parity["passed"]) == (
                REFERENCE,
                FP32_TOLERANCE,
                True,
            )
            assert 0 <= parity["max_rel"] <= FP32_TOLERANCE
            assert 0 <= parity["max_abs"] < 1e-4

    # -- the onnxruntime compile: exported once, then from the run's cache, then from the disk cache ---
    first, again, copied = (_record(data, test, "onnxruntime:cpu") for test in TESTS)
    assert set(first["compile_phases_s"]) == {"export", "session", "first_run"}
    assert all(seconds > 0 for seconds in first["compile_phases_s"].values())
    assert first["compile_s"] >= sum(first["compile_phases_s"].values())
    info = first["compile_info"]
    assert (info["provider"], info["export_cached"], info["opset"]) == ("CPUExecutionProvider", False, 18)
    assert re.fullmatch(r"[0-9a-f]{64}", info["onnx_sha256"])
    assert first["compile_cached"] is False

    assert again["compile_cached"] is True  # the same compiled model: its compile is reported again
    assert (again["compile_info"], again["compile_phases_s"]) == (info, first["compile_phases_s"])

    assert copied["compile_cached"] is False  # compiled again in this run ...
    assert copied["compile_info"] == {**info, "export_cached": True}  # ... from the exported file
    assert copied["compile_phases_s"]["export"] == 0.0
    assert copied["batch_size"] == 5  # one exported file serves every batch size

    # -- torch reports no phases of its compile, only the threads in effect ----------------------------
    for test in TESTS:
        torch_record = _record(data, test, "torch:cpu")
        assert torch_record["compile_phases_s"] == {}
        assert set(torch_record["compile_info"]) == {"threads"}

    # -- the exported model is in --ipu-cache-dir, whole -------------------------------------------------
    files = sorted(cache.iterdir())
    assert [f.suffix for f in files] == [".json", ".onnx"]  # one export, no temporary files
    assert files[0].stem == files[1].stem
    assert json.loads(files[0].read_text())["sha256"] == info["onnx_sha256"]
    assert data["pytest_ipu"]["settings"]["cache_dir"] == str(cache)

    # -- machine_info describes onnxruntime ---------------------------------------------------------------
    ort = data["machine_info"]["ipu"]["backends"]["onnxruntime:cpu"]
    assert ort["onnxruntime"] == importlib.metadata.version("onnxruntime")
    assert "CPUExecutionProvider" in ort["providers_available"]
    assert (ort["provider"], ort["device"]) == ("CPUExecutionProvider", "cpu")
    assert set(data["machine_info"]["ipu"]["backends"]) == {*TARGETS, "wrong:cpu"}

    # -- the terminal table has the parity column -------------------------------------------------------
    result.stdout.fnmatch_lines(
        [
            "test_first (latency per call; throughput summed over instances)",
            "benchmark * parity  flags",
            "-----*",
            "[[]onnxruntime-cpu] * onnxruntime:cpu * fp32 * 3 * 5 * ok *e* *",
            "[[]torch-cpu] * torch:cpu * fp32 * 3 * 5 * ok *e* *",
        ]
    )

    # -- a backend whose outputs are off by one fails its parity check, saying by how much ----------------
    result.stdout.fnmatch_lines(
        [
            "E * pytest_ipu.backends.parity.ParityError: wrong:cpu fp32 outputs of Sequential differ from "
            f"{REFERENCE}: max abs error 1, max rel error * > tolerance 0.001",
            "FAILED test_onnx.py::test_wrong_outputs[[]wrong-cpu] - pytest_ipu.backends.pari*",
        ]
    )
    assert not [b for b in data["benchmarks"] if "wrong" in b["name"]]  # it never got to ipu_benchmark


def test_onnxruntime_on_cuda_without_the_cuda_provider_skips_naming_it(pytester: pytest.Pytester) -> None:
    _needs("onnxruntime")
    pytester.makepyfile(
        test_cuda="""
        from pathlib import Path

        import onnxruntime

        Path("providers.json").write_text(__import__("json").dumps(onnxruntime.get_available_providers()))


        def test_needs_backend(ipu_backend):
            pass
        """
    )
    result = pytester.runpytest_subprocess(
        "-rs",
        "--ipu-backend=onnxruntime:cuda",
        f"--ipu-cache-dir={pytester.path / 'onnx-cache'}",
        timeout=120,
    )
    providers = json.loads((pytester.path / "providers.json").read_text())
    if "CUDAExecutionProvider" in providers:
        pytest.skip(
            "this onnxruntime has the CUDAExecutionProvider: the missing-provider path cannot be shown"
        )
    result.assert_outcomes(skipped=1)
    version = importlib.metadata.version("onnxruntime")
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]1] test_cuda.py:*: pytest-ipu: target onnxruntime:cuda is not available: "
            f"onnxruntime {version} has no CUDAExecutionProvider (it has {', '.join(providers)}); "
            "install onnxruntime-gpu for CUDA and TensorRT"
        ]
    )
    assert not (pytester.path / "onnx-cache").exists()
