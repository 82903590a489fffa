"""Backends end to end: missing ones, the torch backend, a conftest backend, the hooks, the compile cache.

Runs without torch are in-process; the three runs that import torch are subprocesses.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.backends import BUILTIN
from pytest_ipu.backends import auto_candidates
from tests.plugin.inner import INNER_ADDOPTS
from tests.plugin.inner import assert_usage_error

USES_BACKEND = """
def test_needs_backend(ipu_backend):
    pass
"""

#: How skip reasons list the built-in backends (the registry's names, in its order).
BUILT_IN = ", ".join(BUILTIN)

# -- missing backends --------------------------------------------------------------------------------


#: A conftest that provides one backend, "absent", that is never available here.
ABSENT_CONFTEST = """
from pytest_ipu.backends.base import Availability, NamedBackend


class Absent(NamedBackend):
    def availability(self):
        return Availability.no("its runtime is not installed")


def pytest_ipu_make_backend(config, target):
    return Absent(target.backend, target.device or "dev") if target.backend == "absent" else None
"""


def test_unknown_backend_is_a_usage_error_naming_it_and_the_builtins(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_b=USES_BACKEND)
    result = pytester.runpytest("--ipu-backend=nosuch,troch:cpu")
    assert_usage_error(
        pytester,
        result,
        "invalid value 'nosuch,troch:cpu' for --ipu-backend from the command line: unknown backend "
        f"'nosuch'; built in: {BUILT_IN} (a conftest can add others with the pytest_ipu_make_backend hook)",
    )


def test_unknown_device_of_a_builtin_backend_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_IPU_BACKEND", "torch:gpu")
    pytester.makepyfile(test_b=USES_BACKEND)
    result = pytester.runpytest()
    assert_usage_error(
        pytester,
        result,
        "invalid value 'torch:gpu' for --ipu-backend from environment variable PYTEST_IPU_BACKEND: "
        "unknown device 'gpu' for backend 'torch' (did you mean 'cuda'?); torch runs on cpu, cuda "
        "(each may take an index: cuda:1)",
    )


def test_a_known_target_absent_here_still_skips(pytester: pytest.Pytester) -> None:
    """Indexed and simulator devices are known: what this machine lacks skips with the backend's reason."""
    pytester.makepyfile(test_b=USES_BACKEND)
    result = pytester.runpytest("-rs", "--ipu-backend=poptorch:ipu:3,popart:ipu-model")
    # No Poplar SDK in this environment (its wheels are not on PyPI): both skip, neither is a typo.
    result.assert_outcomes(skipped=2)
    assert "unknown" not in result.stdout.str()


def test_a_conftest_backend_is_no_usage_error_and_skips_with_its_reason(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(ABSENT_CONFTEST)
    pytester.makepyfile(test_b=USES_BACKEND)
    result = pytester.runpytest("-rs", "--ipu-backend=absent:x1")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        ["SKIPPED * pytest-ipu: target absent:x1 is not available: its runtime is not installed"]
    )


@pytest.mark.parametrize("how", ["option", "environment"])
def test_missing_sdk_fail_turns_the_skip_into_an_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    pytester.makeconftest(ABSENT_CONFTEST)
    pytester.makepyfile(test_b=USES_BACKEND)
    args = ["--ipu-backend=absent"]
    if how == "option":
        args.append("--ipu-missing-sdk=fail")
    else:
        monkeypatch.setenv("PYTEST_IPU_MISSING_SDK", "FAIL")
    result = pytester.runpytest(*args)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "E * pytest_ipu.errors.BackendUnavailable: pytest-ipu: target absent is not available: "
            "its runtime is not installed",
            "ERROR test_b.py::test_needs_backend[[]absent] - pytest_ipu.errors.Backend*",
        ]
    )


def test_string_parameter_of_ipu_backend_selects_the_target(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(ABSENT_CONFTEST)
    pytester.makepyfile(
        test_b="""
        import pytest
        from pytest_ipu.backends.target import Target

        @pytest.mark.parametrize("ipu_backend", ["absent:dev", Target("absent", "x2")], indirect=True)
        def test_chosen(ipu_backend):
            pass
        """
    )
    result = pytester.runpytest("-rs", "--ipu-backend=torch:cpu")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED * pytest-ipu: target absent:dev is not available: its runtime*",
            "SKIPPED * pytest-ipu: target absent:x2 is not available: its runtime*",
        ]
    )


def test_unknown_string_parameter_of_ipu_backend_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_b="""
        import pytest

        @pytest.mark.parametrize("ipu_backend", ["torch:cpu", "nosuch:dev"], indirect=True)
        def test_chosen(ipu_backend):
            pass
        """
    )
    result = pytester.runpytest()
    assert_usage_error(
        pytester,
        result,
        "test_b.py::test_chosen[nosuch:dev]: invalid value 'nosuch:dev' for the ipu_backend parameter: "
        f"unknown backend 'nosuch'; built in: {BUILT_IN} "
        "(a conftest can add others with the pytest_ipu_make_backend hook)",
    )


def test_bad_ipu_backend_parameter_is_an_error_naming_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_b="""
        import pytest

        @pytest.mark.parametrize("ipu_backend", ["Bad Name", 3], indirect=True)
        def test_chosen(ipu_backend):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "E * pytest-ipu: test_b.py::test_chosen[[]Bad Name]: ipu_backend parameter: expected a backend "
            "target such as 'torch', 'torch:cpu' or 'torch:cuda:0', got 'Bad Name'",
            "E * pytest-ipu: test_b.py::test_chosen[[]3]: ipu_backend parameter must be a Target or a string "
            "such as 'torch:cpu', got 3",
        ]
    )


# -- a backend from a conftest -----------------------------------------------------------------------

CONFTEST = """
import json
from pathlib import Path

from pytest_ipu.backends.base import Availability
from pytest_ipu.backends.base import CompiledModel

COUNTS = {"compile": 0, "close": 0, "calls": 0}


class MyBackend:
    def __init__(self, name, device):
        self._name = name
        self._device = device or "cpu"

    @property
    def name(self):
        return self._name

    @property
    def device(self):
        return self._device

    def availability(self):
        if self._device == "cpu":
            return Availability.yes()
        return Availability.no(f"{self._name} runs on cpu only, not {self._device!r}")

    def describe(self):
        return {"backend": self._name, "version": "1.2.3", "device": self._device}

    def default_precision(self):
        return "bf16"

    def shape_specialized(self, options):
        return bool(options.get("per_shape"))

    def compile(self, model, example_inputs, precision, options):
        COUNTS["compile"] += 1

        def run(*args):
            COUNTS["calls"] += 1
            return model(*args)

        def close():
            COUNTS["close"] += 1

        return CompiledModel(
            target=f"{self._name}:{self._device}",
            backend=self._name,
            device=self._device,
            device_name="My Device",
            precision=precision,
            io="host",
            run=run,
            prepare_inputs=tuple,
            close=close,
            options=dict(options),
        )


def pytest_ipu_make_backend(config, target):
    if target.backend in ("mine", "torch"):  # replaces the built-in torch backend too
        return MyBackend(target.backend, target.device)
    return None


def pytest_ipu_update_record(config, item, record):
    record["dataset"] = item.name


def pytest_ipu_update_device_info(config, device_info):
    device_info["rack"] = "r1"


def pytest_unconfigure(config):
    Path("counts.json").write_text(json.dumps(COUNTS))
"""

CUSTOM_TESTS = """
import numpy as np
import pytest


def model(x):
    return sum(x)


def other_model(x):
    return max(x)


def test_first(ipu_compile, ipu_benchmark):
    compiled = ipu_compile(model, ([1, 2, 3],))
    assert compiled.compile_cached is False
    assert compiled.precision == "bf16"            # the backend's default_precision under auto
    record = ipu_benchmark(compiled, ([1, 2, 3],))
    assert record.target == "mine:cpu"
    assert record.batch_size == 3


def test_cached(ipu_compile, ipu_benchmark):
    compiled = ipu_compile(model, ([4, 5, 6],))
    assert compiled.compile_cached is True
    ipu_benchmark(compiled, ([4, 5, 6],))


def test_cache_keys(ipu_compile):
    assert ipu_compile(model, ([1],), precision="fp16").compile_cached is False     # another precision
    assert ipu_compile(model, ([1],), flavour="x").compile_cached is False          # another option
    assert ipu_compile(model, ([1],), flavour="x").compile_cached is True
    assert ipu_compile(other_model, ([1],)).compile_cached is False                 # another model
    assert ipu_compile(other_model, ([1],), key="model").compile_cached is False    # an explicit key
    assert ipu_compile(model, ([1],), key="model").compile_cached is True           # ... is the identity
    a3, a5 = np.zeros(3), np.zeros(5)
    assert ipu_compile(model, (a3,), per_shape=True).compile_cached is False
    assert ipu_compile(model, (a5,), per_shape=True).compile_cached is False        # per-shape backend
    assert ipu_compile(model, (np.ones(3),), per_shape=True).compile_cached is True


def test_fails_after_compiling(ipu_compile):
    ipu_compile(lambda x: x, ([1],))
    assert False, "deliberate failure: its compiled model must still be released"


@pytest.mark.ipu(backend="mine:gpu")
def test_gpu(ipu_compile):
    raise AssertionError("never runs: mine:gpu is not available")


@pytest.mark.ipu(backend="torch:cpu")
def test_replaced_builtin(ipu_compile, ipu_benchmark):
    record = ipu_benchmark(ipu_compile(model, ([1, 2],)), ([1, 2],))
    assert record.device_name == "My Device"
"""

# test_first (test_cached reuses it); test_cache_keys: fp16, flavour, other_model, key, two shapes;
# test_fails_after_compiling; test_replaced_builtin (another backend, so another cache entry).
EXPECTED_COMPILES = 1 + 6 + 1 + 1


#: The result of the run with the conftest backend, its JSON, and the backend's counters.
CustomRun = typing.Tuple[pytest.RunResult, typing.Dict[str, Any], typing.Dict[str, int]]


@pytest.fixture
def custom_run(pytester: pytest.Pytester) -> CustomRun:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_custom=CUSTOM_TESTS)
    result = pytester.runpytest(
        "-rs", "--ipu-backend=mine:cpu", "--ipu-rounds=5", "--benchmark-json=out.json"
    )
    data = json.loads((pytester.path / "out.json").read_text())
    counts = json.loads((pytester.path / "counts.json").read_text())
    return result, data, counts


def test_conftest_backend_runs_the_benchmarks(custom_run: CustomRun) -> None:
    result, data, _ = custom_run
    result.assert_outcomes(passed=4, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        ["SKIPPED * pytest-ipu: target mine:gpu is not available: mine runs on cpu only*"]
    )
    records = {b["name"]: b["extra_info"]["ipu"] for b in data["benchmarks"]}
    assert set(records) == {
        "test_first[mine-cpu]",
        "test_cached[mine-cpu]",
        "test_replaced_builtin[torch-cpu]",
    }
    first = records["test_first[mine-cpu]"]
    assert (first["target"], first["backend"], first["device"]) == ("mine:cpu", "mine", "cpu")
    assert (first["device_name"], first["precision"], first["rounds"]) == ("My Device", "bf16", 5)
    assert first["compile_cached"] is False
    assert records["test_cached[mine-cpu]"]["compile_cached"] is True
    assert records["test_replaced_builtin[torch-cpu]"]["target"] == "torch:cpu"
    result.stdout.fnmatch_lines(["[[]mine-cpu] * mine:cpu * bf16 * 3 * 5 *"])


def test_hooks_add_keys_to_the_record_and_the_device_info(custom_run: CustomRun) -> None:
    _, data, _ = custom_run
    for bench in data["benchmarks"]:
        assert bench["extra_info"]["ipu"]["dataset"] == bench["name"]
    info = data["machine_info"]["ipu"]
    assert info["rack"] == "r1"
    assert info["backends"] == {
        "mine:cpu": {"backend": "mine", "version": "1.2.3", "device": "cpu"},
        "torch:cpu": {"backend": "torch", "version": "1.2.3", "device": "cpu"},
    }  # mine:gpu was made but is not available: not listed


def test_compile_cache_and_release_at_session_end(custom_run: CustomRun) -> None:
    _, _, counts = custom_run
    assert counts["compile"] == EXPECTED_COMPILES
    assert counts["close"] == EXPECTED_COMPILES  # every compiled model, also the failed test's


def test_a_failing_close_is_a_warning_and_the_others_are_still_closed(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        CONFTEST.replace(
            '            COUNTS["close"] += 1\n',
            '            COUNTS["close"] += 1\n            if options.get("boom"):\n'
            '                raise RuntimeError("device wedged")\n',
        )
    )
    pytester.makepyfile(
        test_close="""
        def test_two_models(ipu_compile):
            ipu_compile(lambda: 1, (), boom=True)
            ipu_compile(lambda: 2, ())
        """
    )
    # Not with -W error: the warning is the behaviour under test.
    result = pytester.runpytest("--ipu-backend=mine:cpu", "-W", "default")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*PytestIpuWarning: pytest-ipu could not release compiled models or power sources: "
            "mine:cpu: device wedged"
        ]
    )
    assert json.loads((pytester.path / "counts.json").read_text())["close"] == 2


def test_benchmark_disable_runs_once_and_records_nothing(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_off="""
        calls = []

        import pytest

        def test_plain(ipu_benchmark):
            record = ipu_benchmark(lambda: calls.append(1))
            assert calls == [1]
            assert record.timed is False
            assert record.target == "python:host"
            assert "--benchmark-disable" in record.reason
            # No figure exists, and reading one says why instead of giving a zero.
            with pytest.raises(AttributeError, match="not timed"):
                record.throughput_items_per_s

        def test_compiled(ipu_compile, ipu_benchmark):
            record = ipu_benchmark(ipu_compile(len, ([1, 2],)), ([1, 2],), items_per_call=4)
            assert (record.timed, record.target, record.precision) == (False, "mine:cpu", "bf16")
            assert (record.batch_size, record.items_per_call) == (4, 4)  # the declared batch wins
        """
    )
    result = pytester.runpytest("--ipu-backend=mine:cpu", "--benchmark-disable", "--benchmark-json=out.json")
    result.assert_outcomes(passed=2)
    assert json.loads((pytester.path / "counts.json").read_text())["calls"] == 1
    out = pytester.path / "out.json"
    if out.exists():  # pytest-benchmark writes no file when nothing was benchmarked
        assert all("ipu" not in b["extra_info"] for b in json.loads(out.read_text())["benchmarks"])
    assert not any(line.startswith("=") and line.strip("= ") == "pytest-ipu" for line in result.outlines)


def test_same_backend_with_and_without_a_device_in_one_run(pytester: pytest.Pytester) -> None:
    """Regression: machine_info sorted Target objects, and Target('mine') < Target('mine', 'cpu') compared
    None with str: the JSON write crashed with a TypeError (in process: pytester turns such a crash into
    an internal-error result, which the exit code check catches)."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_two="""
        def test_bench(ipu_compile, ipu_benchmark):
            ipu_benchmark(ipu_compile(len, ([1],)), ([1],))
        """
    )
    result = pytester.runpytest("--ipu-backend=mine,mine:cpu", "--ipu-rounds=3", "--benchmark-json=out.json")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=2)
    data = json.loads((pytester.path / "out.json").read_text())
    assert {b["extra_info"]["ipu"]["target"] for b in data["benchmarks"]} == {"mine:cpu"}
    assert "mine:cpu" in data["machine_info"]["ipu"]["backends"]


def test_a_second_in_process_run_benchmarks_its_compiled_model_on_its_backend(
    pytester: pytest.Pytester,
) -> None:
    """Regression (test isolation): the first in-process run loaded the plugin's lazily imported modules,
    pytester dropped them from sys.modules but their packages kept them, and the second run's
    ``ipu_benchmark`` took its compiled model for a plain callable (target ``python:host``)."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_again="""
        def test_compiled(ipu_compile, ipu_benchmark):
            record = ipu_benchmark(ipu_compile(len, ([1, 2],)), ([1, 2],))
            assert record.target == "mine:cpu"
        """
    )
    for _ in range(2):
        result = pytester.runpytest("--ipu-backend=mine:cpu", "--benchmark-disable")
        result.assert_outcomes(passed=1)


# -- the torch backend (subprocesses: they import torch) ---------------------------------------------

TORCH_TESTS = """
from pathlib import Path

import pytest
import torch

from pytest_ipu.errors import CompileError

Path("cuda.txt").write_text(str(torch.cuda.is_available()))


def test_bf16_compile_leaves_the_users_model_alone(ipu_compile):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(2, 8)
    compiled = ipu_compile(model, (x,), precision="bf16")
    assert compiled.precision == "bf16"
    out = compiled.run(*compiled.prepare_inputs((x,)))
    assert out.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model(x).dtype == torch.float32


def test_unknown_compile_option(ipu_compile):
    with pytest.raises(CompileError) as excinfo:
        ipu_compile(torch.nn.Linear(2, 2), (torch.zeros(1, 2),), bogus=1, channel_last=True)
    assert str(excinfo.value) == (
        "unknown torch backend option(s) 'bogus', 'channel_last' for Linear; "
        "allowed: channels_last, io, compile_mode"
    )


def test_auto_finds_the_cpu(ipu_compile, ipu_benchmark):
    x = torch.randn(3, 8)
    ipu_benchmark(ipu_compile(torch.nn.Linear(8, 4), (x,)), (x,))
"""


def _needs_torch() -> None:
    # find_spec, not importorskip: torch is only ever imported by the subprocesses. Imported here, after
    # in-process pytester runs have restored sys.modules, it fails ("SystemError: bad call flags").
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")


def _skip_on_cuda(pytester: pytest.Pytester) -> None:
    """The inner test module wrote whether torch (or onnxruntime, where it is imported) sees CUDA."""
    if (pytester.path / "cuda.txt").read_text() == "True":
        pytest.skip("this machine has a CUDA device: the 'no CUDA device' path cannot be shown")


def test_torch_backend_on_cpu_and_missing_cuda(pytester: pytest.Pytester) -> None:
    _needs_torch()
    pytester.makepyfile(test_torch=TORCH_TESTS)
    result = pytester.runpytest_subprocess("-rs", "--ipu-backend=torch:cpu,torch:cuda", "--ipu-rounds=3")
    _skip_on_cuda(pytester)
    result.assert_outcomes(passed=3, skipped=3)
    reason = (
        "pytest-ipu: target torch:cuda is not available: "
        "no CUDA device: torch.cuda.is_available() is False (torch *, built for CUDA *)"
    )
    result.stdout.fnmatch_lines([f"SKIPPED [[]1] test_torch.py:*: {reason}"] * 3)


AUTO_TESTS = """
from pathlib import Path

import onnxruntime
import torch

cuda = torch.cuda.is_available() or "CUDAExecutionProvider" in onnxruntime.get_available_providers()
Path("cuda.txt").write_text(str(cuda))


def test_auto_finds_the_cpu(ipu_compile, ipu_benchmark):
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    ipu_benchmark(ipu_compile(torch.nn.Linear(8, 4), (x,), parity=True), (x,))
"""


def test_auto_targets_report_what_is_present_and_what_is_not(pytester: pytest.Pytester) -> None:
    """``auto`` runs every default backend present (here the CPU ones: torch and onnxruntime) and says why
    the others (the CUDA ones) are absent."""
    _needs_torch()
    if importlib.util.find_spec("onnxruntime") is None:
        pytest.skip("onnxruntime is not installed")
    pytester.makepyfile(test_auto=AUTO_TESTS)
    cache = pytester.path / "onnx-cache"
    result = pytester.runpytest_subprocess(
        "-v", "--ipu-rounds=3", "--benchmark-json=out.json", f"--ipu-cache-dir={cache}"
    )
    _skip_on_cuda(pytester)
    present = [t for t in auto_candidates() if t.device == "cpu"]
    absent = [t for t in auto_candidates() if t.device != "cpu"]
    assert [t.backend for t in present] == ["torch", "onnxruntime"]
    result.assert_outcomes(passed=len(present))
    result.stdout.fnmatch_lines([f"test_auto.py::test_auto_finds_the_cpu[[]{t.id}] PASSED*" for t in present])
    result.stdout.fnmatch_lines(
        [
            f"targets present (auto): {', '.join(map(str, present))}",
            "target absent: torch:cuda: no CUDA device: torch.cuda.is_available() is False *",
            "target absent: onnxruntime:cuda: onnxruntime * has no CUDAExecutionProvider (it has *); "
            "install onnxruntime-gpu for CUDA and TensorRT",
        ]
    )
    data = json.loads((pytester.path / "out.json").read_text())
    info = data["machine_info"]["ipu"]
    assert list(info["backends"]) == sorted(map(str, present))
    assert set(info["absent"]) == set(map(str, absent))
    assert info["absent"]["torch:cuda"].startswith("no CUDA device: torch.cuda.is_available() is False")
    assert "CUDAExecutionProvider" in info["absent"]["onnxruntime:cuda"]
    assert data["pytest_ipu"]["settings"]["targets"] == "auto"
    records = [b["extra_info"]["ipu"] for b in data["benchmarks"]]
    assert sorted(r["target"] for r in records) == sorted(map(str, present))
    assert all(r["parity"]["passed"] for r in records)
    # The onnxruntime target exported the model into --ipu-cache-dir (and nowhere else).
    assert data["pytest_ipu"]["settings"]["cache_dir"] == str(cache)
    assert len(list(cache.glob("*.onnx"))) == 1


# -- known bugs (one shared torch subprocess) ----------------------------------------------------------

BUGS_TESTS = """
import gc
import json
import weakref
from pathlib import Path

import torch

COPIES = weakref.WeakSet()


class Tracked(torch.nn.Linear):
    # copy.deepcopy restores a module through __setstate__: this sees every copy a backend makes.
    def __setstate__(self, state):
        super().__setstate__(state)
        COPIES.add(self)


def test_close(ipu_backend):
    compiled = ipu_backend.compile(Tracked(8, 4), (torch.zeros(1, 8),), "fp32", {})
    gc.collect()
    copies = len(COPIES)
    compiled.close()
    gc.collect()
    Path("close.json").write_text(json.dumps({"before_close": copies, "after_close": len(COPIES)}))


def test_bench(ipu_compile, ipu_benchmark):
    x = torch.zeros(2, 8)
    ipu_benchmark(ipu_compile(torch.nn.Linear(8, 4), (x,)), (x,))
"""


@pytest.fixture(scope="module")
def torch_default_device_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``--ipu-backend=torch`` (no device: the backend picks cpu), in a subprocess."""
    _needs_torch()
    path = tmp_path_factory.mktemp("torch_default_device")
    (path / "test_bugs.py").write_text(BUGS_TESTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTEST_ADDOPTS"] = INNER_ADDOPTS
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--ipu-backend=torch",
            "--ipu-rounds=3",
            "--benchmark-json=out.json",
        ],
        cwd=path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return path


def test_torch_compile_works_on_one_copy_of_the_model(torch_default_device_run: Path) -> None:
    close = json.loads((torch_default_device_run / "close.json").read_text())
    assert close["before_close"] == 1


def test_torch_close_releases_the_compiled_model(torch_default_device_run: Path) -> None:
    close = json.loads((torch_default_device_run / "close.json").read_text())
    assert close["after_close"] == 0


def test_every_record_target_is_described_in_machine_info(torch_default_device_run: Path) -> None:
    data = json.loads((torch_default_device_run / "out.json").read_text())
    targets = {b["extra_info"]["ipu"]["target"] for b in data["benchmarks"]}
    assert targets == {"torch:cpu"}
    assert targets <= set(data["machine_info"]["ipu"]["backends"])
