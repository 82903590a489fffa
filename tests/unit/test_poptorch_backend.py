"""The PopTorch backend (pytest_ipu.backends.ipu.poptorch) called directly, against the PopTorch 3.4 fake in
tests/fakes/fake_poptorch.py (real torch models, run on the CPU), plus one contract test that runs the
same checks on a real PopTorch when one is installed (it skips here).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import sys
from pathlib import Path

import pytest

from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.ipu.poptorch import OPTIONS
from pytest_ipu.backends.ipu.poptorch import PopTorchBackend
from pytest_ipu.backends.ipu.poptorch import device_latency
from pytest_ipu.errors import BackendUnavailable
from pytest_ipu.errors import CompileError
from tests.unit.torch_versions import NO_CPU_FP16
from tests.unit.torch_versions import cpu_runs_fp16

torch = pytest.importorskip("torch")
fake_poptorch = importlib.import_module("tests.fakes.fake_poptorch")
fake_popdist = importlib.import_module("tests.fakes.fake_popdist")


@pytest.fixture(autouse=True)
def fake(monkeypatch: pytest.MonkeyPatch):
    """A fresh fake machine (4 Mk2 IPUs, all free) and no PopTorch environment variables."""
    for var in fake_poptorch.ENVIRONMENT:
        monkeypatch.delenv(var, raising=False)
    fake_poptorch.reset()
    fake_popdist.reset()
    yield fake_poptorch
    fake_poptorch.reset()
    fake_popdist.reset()


def make_backend(device: str | None = None) -> PopTorchBackend:
    return PopTorchBackend(device=device, poptorch_module=fake_poptorch, torch_module=torch)


def mlp(layers: int = 3) -> torch.nn.Sequential:
    torch.manual_seed(0)
    mods: list[torch.nn.Module] = [torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)]
    mods += [torch.nn.Identity() for _ in range(max(0, layers - 3))]
    return torch.nn.Sequential(*mods[: max(layers, 3)]).eval()


def batch(n: int = 8) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(n, 8)


class WithLoss(torch.nn.Module):
    """A training model in PopTorch's style: the loss is computed in forward and returned last."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.fc(x)
        return out, torch.nn.functional.mse_loss(out, target)


# -- availability and description ---------------------------------------------------------------


def test_without_poptorch_the_reason_says_it_ships_in_the_sdk(monkeypatch):
    monkeypatch.setitem(sys.modules, "poptorch", None)
    backend = PopTorchBackend(poptorch_module=None)
    availability = backend.availability()
    assert not availability.ok
    reason = availability.reason
    assert reason.startswith("poptorch is not importable (")
    assert "ships as a wheel inside Graphcore's Poplar SDK and is not on PyPI" in reason
    assert "PyPI packages with similar names are unrelated" in reason
    assert "`source <sdk>/enable`" in reason
    assert "`pip install <sdk>/poptorch-*.whl`" in reason
    assert "\n" not in reason
    # describe() never raises, even without poptorch.
    assert backend.describe()["poptorch"] is None


def test_a_poptorch_built_for_another_torch_is_reported(monkeypatch, tmp_path):
    # The real wheel asserts at import that torch is the version it was built against.
    package = tmp_path / "poptorch"
    package.mkdir()
    (package / "__init__.py").write_text(
        "raise AssertionError('This version of PopTorch only works with torch==2.0.1 but the version "
        "installed is 9.9')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "poptorch", raising=False)
    availability = PopTorchBackend().availability()
    assert not availability.ok
    assert availability.reason.startswith(
        "poptorch failed to import (This version of PopTorch only works with torch==2.0.1"
    )
    assert "need torch 2.0.1 exactly" in availability.reason


def test_poptorch_is_imported_by_name_when_not_injected(monkeypatch):
    monkeypatch.setitem(sys.modules, "poptorch", fake_poptorch)
    backend = PopTorchBackend()
    assert backend.availability().ok
    compiled = backend.compile(mlp(), (batch(),), "fp32", {})
    try:
        assert compiled.run(*compiled.prepare_inputs((batch(),))).shape == (8, 4)
    finally:
        compiled.close()


def test_availability_with_ipus_without_ipus_and_for_other_devices(fake, monkeypatch):
    assert make_backend().availability().ok
    assert make_backend("ipu:3").availability().ok
    bad = make_backend("cuda:0").availability()
    assert (
        bad.reason
        == "the poptorch backend runs on 'ipu', 'ipu:N' (N: a device id from gc-info -l) or 'ipu-model' "
        "(the IPU Model simulator), not 'cuda:0'"
    )
    fake.configure(ipus=0)
    none = make_backend().availability()
    assert not none.ok
    assert none.reason == (
        "no IPU: poptorch.ipuHardwareIsAvailable() is False (poptorch 3.4.0-fake); "
        "`gc-info -l` lists the IPUs this machine can see"
    )
    fake.configure(ipus=4)
    monkeypatch.setenv("POPTORCH_IPU_MODEL", "1")
    model = make_backend().availability()
    assert not model.ok
    assert "POPTORCH_IPU_MODEL is set, which makes PopTorch report no hardware" in model.reason


def test_describe_is_plain_json_with_versions_and_ipu_facts(fake, monkeypatch):
    # Only PopTorch here: no gcipuinfo or popart for the inventory to find first.
    monkeypatch.setitem(sys.modules, "gcipuinfo", None)
    monkeypatch.setitem(sys.modules, "popart", None)
    info = make_backend().describe()
    assert json.loads(json.dumps(info)) == info
    inventory = info.pop("inventory")
    assert (inventory["count"], inventory["source"], inventory["simulator"]) == (4, "poptorch", False)
    assert info.pop("simulator") is False
    assert info == {
        "backend": "poptorch",
        "device": "ipu",
        "poptorch": "3.4.0-fake",
        "sdk": "3.4.0",
        "ipu_hardware_available": True,
        "ipu_version": 2,
        "ipu_generation": "Mk2/Bow (ipu2)",
        "largest_device_ipus": 4,
    }
    fake.configure(ipus=16, version=21)
    info = make_backend().describe()
    assert (info["ipu_generation"], info["largest_device_ipus"]) == ("C600 (ipu21)", 16)
    fake.configure(ipus=0)
    info = make_backend().describe()
    assert info["ipu_hardware_available"] is False
    assert info["ipu_version"] is None
    assert info["largest_device_ipus"] is None


# -- compile and run ----------------------------------------------------------------------------


def test_fp32_outputs_equal_torch_eager():
    model, x = mlp(), batch()
    with torch.no_grad():
        expected = model(x)
    compiled = make_backend().compile(model, (x,), "fp32", {})
    try:
        (prepared,) = compiled.prepare_inputs((x.numpy(),))
        out = compiled.run(prepared)
        assert out.dtype == torch.float32
        assert torch.equal(out, expected)
        assert (compiled.target, compiled.backend, compiled.device) == ("poptorch:ipu", "poptorch", "ipu")
        assert compiled.device_name == "Graphcore IPU Mk2/Bow (ipu2)"
        assert (compiled.precision, compiled.io) == ("fp32", "host")
    finally:
        compiled.close()


def test_device_iterations_and_replicas_split_the_batch_and_return_every_result():
    model, x = mlp(), batch(16)
    with torch.no_grad():
        expected = model(x)
    compiled = make_backend().compile(model, (x,), "fp32", {"device_iterations": 4, "replication_factor": 2})
    try:
        out = compiled.run(*compiled.prepare_inputs((x,)))
        assert out.shape == (16, 4)
        assert torch.allclose(out, expected, atol=1e-6)
    finally:
        compiled.close()


@pytest.mark.skipif(not cpu_runs_fp16(), reason=f"{NO_CPU_FP16} (the fake runs the fp16 model on the CPU)")
def test_fp16_is_close_to_eager_and_the_callers_model_is_untouched():
    model, x = mlp(), batch()
    model.train()  # compile must not switch the caller's model to eval either
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        expected = model.eval()(x)
    model.train()
    compiled = make_backend().compile(model, (x,), "fp16", {})
    try:
        (prepared,) = compiled.prepare_inputs((x,))
        assert prepared.dtype == torch.float16
        out = compiled.run(prepared)
        assert out.dtype == torch.float16
        assert torch.allclose(out.float(), expected, atol=1e-2, rtol=1e-2)
    finally:
        compiled.close()
    assert model.training
    for name, value in model.state_dict().items():
        assert value.dtype == torch.float32
        assert torch.equal(value, before[name])
    assert fake_poptorch.executors[-1].model is not model


def test_compile_happens_inside_compile_and_attaches():
    compiled = make_backend().compile(mlp(), (batch(),), "fp32", {})
    try:
        executor = fake_poptorch.executors[-1]
        assert executor.isCompiled()
        assert executor.isAttachedToDevice()
        assert fake_poptorch.busy_ipus() == {0}
        assert compiled.phases_s["graph_compilation"] >= 0
    finally:
        compiled.close()


def test_after_an_executable_cache_hit_the_compile_time_is_unknown_with_the_reason(tmp_path):
    # PopTorch's compilationTime() is None when the executable came from its cache: nothing was
    # compiled, so PopTorch timed nothing. The record says so; it never shows a compile of 0 s.
    options = {"executable_cache_dir": str(tmp_path / "cache")}
    first = make_backend().compile(mlp(), (batch(),), "fp32", options)
    first.close()
    assert first.phases_s["graph_compilation"] >= 0
    assert "graph_compilation_unknown" not in first.info
    assert len(list((tmp_path / "cache").iterdir())) == 1  # the fake's cached executable
    second = make_backend().compile(mlp(), (batch(),), "fp32", options)
    try:
        assert fake_poptorch.executors[-1].compilationTime() is None
        assert "graph_compilation" not in second.phases_s
        assert second.info["graph_compilation_unknown"] == (
            "compilationTime() returned None: PopTorch times only a compilation it watched, and none ran "
            "(the executable came from PopTorch's executable cache)"
        )
    finally:
        second.close()
    # Another graph (another batch shape) is not in the cache: compiled, and timed.
    third = make_backend().compile(mlp(), (batch(16),), "fp32", options)
    third.close()
    assert "graph_compilation" in third.phases_s


def test_before_poptorch_3_3_there_is_no_compilation_time_and_the_record_says_so():
    fake_poptorch.configure(sdk="3.2")
    compiled = make_backend().compile(mlp(), (batch(),), "fp32", {})
    try:
        assert not hasattr(fake_poptorch.executors[-1], "compilationTime")
        assert "graph_compilation" not in compiled.phases_s
        assert compiled.info["graph_compilation_unknown"] == (
            "this PopTorch has no compilationTime() (it exists from PopTorch 3.3 on)"
        )
    finally:
        compiled.close()


def test_the_fake_compilation_time_raises_as_poptorchs_does():
    executor = fake_poptorch.inferenceModel(mlp())
    with pytest.raises(fake_poptorch.Error) as raised:
        executor.compilationTime()
    assert raised.value.message == "Please compile the model before obtaining compilation time."


# -- options ------------------------------------------------------------------------------------


@pytest.mark.skipif(not cpu_runs_fp16(), reason=f"{NO_CPU_FP16} (the fake runs the fp16 model on the CPU)")
def test_default_options_are_mapped_and_reported():
    compiled = make_backend().compile(mlp(), (batch(),), "fp16", {})
    try:
        used = fake_poptorch.executors[-1].options
        assert used.device_iterations == 1
        assert used.replication_factor == 1
        assert used.Training.gradient_accumulation == 1
        assert used.output_mode == fake_poptorch.OutputMode.All  # PopTorch's inference default
        assert not used.exists("random_seed")
        assert not used.exists("ipu_id")
        assert "partialsTypeMatMuls" not in used._Popart.options
        assert compiled.options == dict(OPTIONS)
        info = compiled.info
        assert json.loads(json.dumps(info)) == info
        assert {k: info[k] for k in ("ipus_requested", "ipus_reserved", "replication_factor")} == {
            "ipus_requested": 1,
            "ipus_reserved": 1,
            "replication_factor": 1,
        }
        assert info["output_mode"] == "all"
        assert info["executable_cache_dir"] is None
        assert info["executable_cache_hit"] is None
        assert info["training"] is False
    finally:
        compiled.close()


@pytest.mark.skipif(not cpu_runs_fp16(), reason=f"{NO_CPU_FP16} (the fake runs the fp16 model on the CPU)")
def test_every_option_is_mapped_onto_poptorch_options(tmp_path: Path):
    # ipu:5 is the second 2-IPU device of a 4-IPU machine (gc-info numbering: 0-3 single IPUs, 4 and 5
    # the pairs, 6 all four).
    options = {
        "device_iterations": 2,
        "replication_factor": 2,
        "output_mode": "sum",
        "executable_cache_dir": tmp_path,
        "available_memory_proportion": 0.3,
        "partials_type": "fp16",
        "random_seed": 7,
    }
    compiled = make_backend("ipu:5").compile(mlp(), (batch(),), "fp16", options)
    try:
        executor = fake_poptorch.executors[-1]
        used = executor.options
        assert used.device_iterations == 2
        assert used.replication_factor == 2
        assert used.output_mode == fake_poptorch.OutputMode.Sum
        assert used._Popart.options["cachePath"] == str(tmp_path)
        assert used._Popart.options["enableEngineCaching"] is True
        assert used._Popart.options["partialsTypeMatMuls"] == "half"
        assert used._Popart.options["convolutionOptions"] == {"partialsType": "half"}
        assert used.available_memory_proportion == {0: 0.3}
        assert used.random_seed == 7
        assert used.ipu_id == 5
        assert fake_poptorch.busy_ipus() == {2, 3}
        # The Options object the backend passed is frozen by the wrapping, as PopTorch's is.
        with pytest.raises(AttributeError, match=r"^Can't modify frozen Options$"):
            fake_poptorch.options_passed[-1].deviceIterations(4)
        info = compiled.info
        assert info["ipu_id"] == 5
        assert info["ipus_requested"] == 2
        assert info["device_iterations"] == 2
        assert info["micro_batches_per_call"] == 4
        assert info["output_mode"] == "sum"
        assert info["executable_cache_dir"] == str(tmp_path)
        assert compiled.options["executable_cache_dir"] == str(tmp_path)
        assert json.loads(json.dumps(dict(compiled.options))) == dict(compiled.options)
        out = compiled.run(*compiled.prepare_inputs((batch(),)))
        assert out.shape == (4, 4)  # Sum: one micro-batch of 2 per replica, summed over iterations
    finally:
        compiled.close()


def test_the_poptorch_cache_dir_variable_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("POPTORCH_CACHE_DIR", str(tmp_path))
    compiled = make_backend().compile(mlp(), (batch(),), "fp32", {})
    try:
        assert compiled.info["executable_cache_dir"] == str(tmp_path)
    finally:
        compiled.close()


def test_a_memory_proportion_mapping_is_passed_through():
    compiled = make_backend().compile(
        mlp(), (batch(),), "fp32", {"available_memory_proportion": {"IPU0": 0.25}}
    )
    try:
        assert fake_poptorch.executors[-1].options.available_memory_proportion == {0: 0.25}
    finally:
        compiled.close()


def test_a_memory_proportion_is_set_for_every_ipu_of_the_model_as_the_sdk_does():
    # Options.setAvailableMemoryProportion({"IPU0": p, "IPU1": p}): one entry per IPU the model uses.
    compiled = make_backend().compile(
        mlp(), (batch(),), "fp32", {"available_memory_proportion": 0.3, "ipus": 2, "device_iterations": 2}
    )
    try:
        assert fake_poptorch.executors[-1].options.available_memory_proportion == {0: 0.3, 1: 0.3}
        assert compiled.options["available_memory_proportion"] == 0.3
    finally:
        compiled.close()


def test_the_fake_refuses_a_memory_proportion_outside_0_1_at_compile_as_popart_does():
    for proportion in (0.0, 1.5, -1.0):
        options = fake_poptorch.Options().setAvailableMemoryProportion(
            {"IPU0": proportion}
        )  # stored unchecked
        with pytest.raises(fake_poptorch.Error) as exc:
            fake_poptorch.inferenceModel(mlp(), options).compile(batch())
        assert exc.value.message == "availableMemoryProportion must be in (0,1]"
        assert exc.value.type == "popart_exception"
    # Only the IPUs the model uses get the proportion: IPU3 of a one-IPU model is never applied.
    unused = fake_poptorch.Options().setAvailableMemoryProportion({"IPU0": 1.0, "IPU3": 7.0})
    fake_poptorch.inferenceModel(mlp(), unused).compile(batch())
    assert fake_poptorch.busy_ipus() == {0}


def test_without_the_backends_check_the_fake_still_fails_the_compile(monkeypatch):
    import pytest_ipu.backends.ipu.poptorch as backend_module

    # The shared check passes 2.0 on as it would a valid proportion.
    monkeypatch.setattr(backend_module, "memory_proportions", lambda value, ipus, source, label: {0: value})
    with pytest.raises(CompileError) as exc:
        make_backend().compile(mlp(), (batch(),), "fp32", {"available_memory_proportion": 2.0})
    assert str(exc.value) == (
        "PopTorch could not compile Sequential for poptorch:ipu: availableMemoryProportion must be in (0,1]"
    )
    assert fake_poptorch.busy_ipus() == set()


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_precisions_other_than_fp32_and_fp16_are_rejected(precision):
    with pytest.raises(CompileError) as exc:
        make_backend().compile(mlp(), (batch(),), precision, {})
    assert str(exc.value) == (
        f"precision {precision!r} is not supported by the poptorch backend (Sequential); use fp16 "
        "(model.half(), the IPU default) or fp32"
    )


# -- PopTorch's rules, checked before compiling --------------------------------------------------


def test_the_batch_rule_names_the_input_the_product_and_a_batch_that_works():
    with pytest.raises(CompileError) as exc:
        make_backend().compile(mlp(), (batch(6),), "fp32", {"device_iterations": 2, "replication_factor": 2})
    assert str(exc.value) == (
        "input 0 of Sequential has leading dimension 6, not a multiple of device_iterations (2) x "
        "replication_factor (2) x gradient_accumulation (1) = 4, which each call's batch is split into; pass "
        "a batch of 8 (or another multiple) or change those options"
    )
    assert fake_poptorch.executors == []  # rejected before anything was wrapped


def test_the_fake_enforces_the_same_batch_rule_with_poptorchs_text():
    executor = fake_poptorch.inferenceModel(mlp(), fake_poptorch.Options().deviceIterations(4))
    with pytest.raises(AssertionError) as exc:
        executor.compile(batch(6))
    assert str(exc.value) == (
        "Invalid batch dimension: In the input torch.Size([6, 8]), the batch dimension (6) must be a "
        "multiple of Options.deviceIterations(4) * (Options.replicationFactor(1) / "
        "Options.inputReplicaGrouping.input_group_size(1)) * Options.Training.gradientAccumulation(1) = 4 "
        "because it is used to calculate the batch size which will be executed on the device in any given "
        "iteration. For a full explanation see the batching semantics page of the documentation."
    )


def test_ipus_times_replicas_must_be_a_power_of_two():
    with pytest.raises(CompileError) as exc:
        make_backend().compile(mlp(), (batch(6),), "fp32", {"replication_factor": 3})
    assert str(exc.value) == (
        "Sequential needs ipus (1) x replication_factor (3) = 3 IPUs, but PopTorch reserves a power of 2 per "
        "process; make the product a power of 2, or pass auto_round_num_ipus=True to reserve 4 (1 idle)"
    )


def test_auto_round_reserves_the_next_power_of_two():
    compiled = make_backend().compile(
        mlp(), (batch(6),), "fp32", {"replication_factor": 3, "auto_round_num_ipus": True}
    )
    try:
        assert fake_poptorch.executors[-1].options.auto_round_num_ipus is True
        assert fake_poptorch.busy_ipus() == {0, 1, 2, 3}
        assert (compiled.info["ipus_requested"], compiled.info["ipus_reserved"]) == (3, 4)
    finally:
        compiled.close()


def test_more_than_64_ipus_per_process_are_rejected():
    with pytest.raises(CompileError) as exc:
        make_backend().compile(
            mlp(), (batch(128),), "fp32", {"replication_factor": 128, "auto_round_num_ipus": True}
        )
    assert str(exc.value) == (
        "Sequential needs ipus (1) x replication_factor (128) = 128 IPUs, more than the 64 PopTorch reserves "
        "per process; use fewer, or run several processes with PopRun"
    )


def test_the_fake_enforces_the_ipu_rules_with_poptorchs_text():
    model = torch.nn.Sequential(*(torch.nn.Linear(8, 8) for _ in range(3)))
    for i, layer in enumerate(model):
        fake_poptorch.BeginBlock(layer, ipu_id=i)
    with pytest.raises(fake_poptorch.Error) as exc:
        fake_poptorch.inferenceModel(model, fake_poptorch.Options().deviceIterations(3)).compile(batch(3))
    assert exc.value.message == (
        "The model specifies the use of 3 IPUs, however PopTorch must reserve a minimum of 4 in order to "
        "allow the model to run, because PopTorch must reserve a power of 2 or maximum of 64 IPUs per "
        "process. Please reconfigure your model to use a different number of IPUs or set "
        "poptorch.Options().autoRoundNumIPUs(True)."
    )
    with pytest.raises(fake_poptorch.Error, match=r"Too many IPUs requested \(128\)"):
        fake_poptorch.inferenceModel(mlp(), fake_poptorch.Options().replicationFactor(128)).compile(
            batch(128)
        )


def test_gradient_accumulation_is_for_training_only():
    with pytest.raises(CompileError) as exc:
        make_backend().compile(mlp(), (batch(),), "fp32", {"gradient_accumulation": 2})
    assert str(exc.value) == (
        "poptorch backend option gradient_accumulation=2 for Sequential applies to training only (PopTorch's "
        "inferenceModel needs 1); pass training=True, or raise device_iterations"
    )


# -- placement over several IPUs ----------------------------------------------------------------


def test_ipus_splits_a_sequential_into_pipeline_stages():
    model = mlp()
    compiled = make_backend().compile(model, (batch(),), "fp32", {"ipus": 2, "device_iterations": 2})
    try:
        assert fake_poptorch.busy_ipus() == {0, 1}
        placed = fake_poptorch.executors[-1].model
        hooks = {
            i: [
                h.ipu_id for h in layer._forward_pre_hooks.values() if isinstance(h, fake_poptorch._BlockHook)
            ]
            for i, layer in enumerate(placed)
        }
        assert hooks == {0: [0], 1: [], 2: [1]}
        assert all(not layer._forward_pre_hooks for layer in model)  # the caller's model has no blocks
        assert compiled.info["ipus_per_replica"] == 2
        with torch.no_grad():
            assert torch.allclose(
                compiled.run(*compiled.prepare_inputs((batch(),))), model(batch()), atol=1e-6
            )
    finally:
        compiled.close()


def test_pipelined_inference_needs_a_device_iteration_per_stage():
    with pytest.raises(CompileError) as exc:
        make_backend().compile(mlp(), (batch(),), "fp32", {"ipus": 2})
    assert str(exc.value) == (
        "poptorch backend option device_iterations=1 for Sequential is below its 2 pipeline stages (ipus=2; "
        "PopTorch needs one device iteration per stage for inference); pass device_iterations=2 or more"
    )
    assert fake_poptorch.executors == []  # refused before anything was wrapped


def test_a_pipelined_placement_is_checked_the_same_way():
    # The ipu marker's stages= reach the backend as its placement options.
    options = make_backend().placement_options(replicas=1, stages=4)
    with pytest.raises(CompileError, match=r"device_iterations=3 for Sequential is below its 4 pipeline"):
        make_backend().compile(mlp(4), (batch(12),), "fp32", {**options, "device_iterations": 3})


def _blocks(stages: int) -> torch.nn.Sequential:
    model = torch.nn.Sequential(*(torch.nn.Linear(8, 8) for _ in range(stages)))
    for i, layer in enumerate(model):
        fake_poptorch.BeginBlock(layer, ipu_id=i)
    return model


def test_the_fake_enforces_poptorchs_pipelining_rules_with_its_text_and_source():
    with pytest.raises(fake_poptorch.Error) as exc:
        fake_poptorch.inferenceModel(_blocks(2), fake_poptorch.Options()).compile(batch(2))
    assert str(exc.value) == (
        "In popart_compiler/source/Compiler.cpp:700: 'poptorch_cpp_error': "
        "poptorch.Options().deviceIterations must be greater than or equal to the number of pipeline "
        "stages (2) when using PopTorch.PipelinedExecution."
    )
    training = fake_poptorch.Options()
    training.Training.gradientAccumulation(2)
    with pytest.raises(fake_poptorch.Error) as exc:
        fake_poptorch.trainingModel(_blocks(2), training).compile(batch(2))
    assert str(exc.value).startswith("In popart_compiler/source/Compiler.cpp:690: 'poptorch_cpp_error': ")
    assert exc.value.message == (
        "poptorch.Options().Training.gradientAccumulation must be greater than or equal to the number of "
        "pipeline stages (3) when using poptorch.PipelinedExecution. Please note that a model with 2 "
        "pipeline stages in PopTorch will have an additional 1 stages when training."
    )
    assert fake_poptorch.busy_ipus() == set()


def test_ipus_needs_a_sequential():
    with pytest.raises(CompileError) as exc:
        make_backend().compile(
            WithLoss(),
            (batch(), torch.zeros(8, 1)),
            "fp32",
            {"ipus": 2, "device_iterations": 2, "training": False},
        )
    assert str(exc.value) == (
        "ipus=2 splits a torch.nn.Sequential's layers over 2 IPUs, but WithLoss is not a Sequential of at "
        "least 2 layers; annotate its layers with poptorch.BeginBlock(layer, ipu_id=i) yourself and pass "
        "ipus=1"
    )


# -- training -----------------------------------------------------------------------------------


def test_training_wraps_with_training_model_and_leaves_the_caller_alone():
    model = WithLoss()
    before = model.fc.weight.detach().clone()
    x, target = batch(8), torch.zeros(8, 1)
    compiled = make_backend().compile(
        model, (x, target), "fp32", {"training": True, "gradient_accumulation": 2, "device_iterations": 2}
    )
    try:
        executor = fake_poptorch.executors[-1]
        assert executor.training
        assert executor.options.Training.gradient_accumulation == 2
        assert executor.options.output_mode == fake_poptorch.OutputMode.Final  # PopTorch's training default
        out, _loss = compiled.run(*compiled.prepare_inputs((x, target)))
        assert out.shape == (2, 1)  # Final: the last micro-batch
        assert not torch.equal(executor.model.fc.weight, before)  # the device copy trained
        assert compiled.info["training"] is True
        assert compiled.info["output_mode"] == "final"
    finally:
        compiled.close()
    assert torch.equal(model.fc.weight, before)


def test_pipelined_training_needs_accumulation_over_forward_and_backward_stages():
    with pytest.raises(CompileError) as exc:
        make_backend().compile(
            mlp(), (batch(),), "fp32", {"training": True, "ipus": 2, "gradient_accumulation": 2}
        )
    assert str(exc.value) == (
        "poptorch backend option gradient_accumulation=2 for Sequential is below its 3 pipeline stages "
        "(ipus=2 forward and 1 backward when training; PopTorch needs one micro-batch per stage); pass "
        "gradient_accumulation=3 or more"
    )


# -- IPUs that cannot be had, and compile failures ------------------------------------------------


def test_ipus_held_by_another_model_make_the_backend_unavailable(fake):
    fake.configure(ipus=1)
    first = make_backend().compile(mlp(), (batch(),), "fp32", {})
    try:
        with pytest.raises(BackendUnavailable) as exc:
            make_backend().compile(mlp(), (batch(),), "fp32", {})
        assert str(exc.value) == (
            "PopTorch could not get IPUs for Sequential on poptorch:ipu: Failed to acquire 1 IPU(s); free "
            "them (gc-monitor shows which processes hold IPUs) or set POPTORCH_WAIT_FOR_IPU=1 to wait for "
            "them"
        )
        assert fake.busy_ipus() == {0}  # the failed one holds nothing
    finally:
        first.close()
    second = make_backend().compile(mlp(), (batch(),), "fp32", {})
    second.close()


def test_more_replicas_than_the_machine_has_is_unavailable_with_the_sdk_reason(fake):
    fake.configure(ipus=1)
    with pytest.raises(
        BackendUnavailable,
        match=re.escape(
            "Failed to acquire 2 IPU(s) No device found on the system with 2 IPUs: the configuration "
            "needs changing"
        ),
    ):
        make_backend().compile(mlp(), (batch(),), "fp32", {"replication_factor": 2})


def test_a_missing_device_id_is_unavailable(fake):
    with pytest.raises(BackendUnavailable, match=re.escape("Failed to acquire device Id 9")):
        make_backend("ipu:9").compile(mlp(), (batch(),), "fp32", {})


class Broken(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("unsupported operation in forward")


def test_compile_errors_name_the_model_and_the_reason(fake):
    with pytest.raises(CompileError) as exc:
        make_backend().compile(Broken(), (batch(),), "fp32", {})
    assert (
        str(exc.value)
        == "PopTorch could not compile Broken for poptorch:ipu: unsupported operation in forward"
    )
    assert fake.busy_ipus() == set()
    with pytest.raises(CompileError, match=r"^the poptorch backend needs a torch\.nn\.Module, got function$"):
        make_backend().compile(lambda x: x, (batch(),), "fp32", {})
    with pytest.raises(
        CompileError,
        match=r"^the poptorch backend runs on 'ipu', 'ipu:N' .*not 'gpu' \(compiling Sequential\)$",
    ):
        make_backend("gpu").compile(mlp(), (batch(),), "fp32", {})


# -- close and latency --------------------------------------------------------------------------


def test_close_detaches_and_destroys_once_and_later_runs_fail(fake):
    compiled = make_backend().compile(mlp(), (batch(),), "fp32", {})
    executor = fake.executors[-1]
    compiled.close()
    assert not executor.isCompiled()
    assert not executor.isAttachedToDevice()
    assert fake.busy_ipus() == set()
    compiled.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        compiled.run(*compiled.prepare_inputs((batch(),)))
    assert device_latency(compiled) is None


def test_close_destroys_even_when_detaching_fails(fake, monkeypatch):
    compiled = make_backend().compile(mlp(), (batch(),), "fp32", {})
    executor = fake.executors[-1]

    def fail() -> None:
        raise fake.createPoptorchError("Device is not attached")

    monkeypatch.setattr(executor, "detachFromDevice", fail)
    with pytest.raises(fake.Error, match="Device is not attached"):
        compiled.close()
    assert not executor.isCompiled()
    assert fake.busy_ipus() == set()
    compiled.close()


def test_close_after_the_model_was_detached_by_hand(fake):
    compiled = make_backend().compile(mlp(), (batch(),), "fp32", {})
    executor = fake.executors[-1]
    executor.detachFromDevice()
    with pytest.raises(fake.Error, match=r"^'poptorch_py_error': Device is not attached$"):
        executor.detachFromDevice()
    compiled.close()
    assert not executor.isCompiled()


def test_a_run_after_detach_reattaches_as_poptorch_does(fake):
    compiled = make_backend().compile(mlp(), (batch(),), "fp32", {})
    try:
        fake.executors[-1].detachFromDevice()
        assert fake.busy_ipus() == set()
        compiled.run(*compiled.prepare_inputs((batch(),)))
        assert fake.busy_ipus() == {0}
    finally:
        compiled.close()


def test_device_latency_reads_poptorchs_counters(fake):
    fake.configure(iteration_s=0.004)
    compiled = make_backend().compile(mlp(), (batch(),), "fp32", {"device_iterations": 4})
    try:
        assert device_latency(compiled) is None  # compiled, not run yet: no output tick
        compiled.run(*compiled.prepare_inputs((batch(),)))
        latency = device_latency(compiled)
        assert latency is not None
        assert json.loads(json.dumps(latency)) == latency
        assert set(latency) == {
            "round_trip",
            "host_to_ipu",
            "compute",
            "ipu_to_host",
            "samples",
            "resolution_s",
            "source",
        }
        assert latency["samples"] == 4  # output mode all: one per micro-batch
        assert latency["resolution_s"] == 0.001
        for key in ("round_trip", "host_to_ipu", "compute", "ipu_to_host"):
            assert set(latency[key]) == {"min_s", "max_s", "avg_s"}
            assert latency[key]["min_s"] <= latency[key]["avg_s"] <= latency[key]["max_s"]
        assert latency["round_trip"]["avg_s"] == pytest.approx(0.004, abs=0.0011)
        # The ipu_compile fixture hands out dataclasses.replace copies: they share the run callable.
        copy = dataclasses.replace(compiled, compile_s=1.0)
        assert device_latency(copy) == latency
    finally:
        compiled.close()


def test_device_latency_of_other_models_is_none():
    other = CompiledModel(
        target="python:host",
        backend="python",
        device="host",
        device_name="cpu",
        precision="n/a",
        io="host",
        run=tuple,
        prepare_inputs=tuple,
        close=lambda: None,
    )
    assert device_latency(other) is None
    assert device_latency(dataclasses.replace(other, run=lambda: None)) is None


def test_the_fakes_perf_counters_have_poptorchs_shapes(fake):
    executor = fake.inferenceModel(mlp(), fake.Options().deviceIterations(2).replicationFactor(2))
    empty = {"input": [[]], "input_complete": [[]], "output": [[]], "output_complete": [[]]}
    assert executor.getPerfCounters() == empty
    assert executor.getLatency() == (0.0, 0.0, 0.0)
    executor(batch())  # lazy compile on the first call
    counters = executor.getPerfCounters()
    assert [len(counters[k][0]) for k in ("input", "input_complete", "output", "output_complete")] == [
        4,
        4,
        4,
        4,
    ]
    assert all(round(t * 1000, 6) == int(round(t * 1000, 6)) for t in counters["input"][0])  # whole ms
    with pytest.raises(fake.Error, match="Cycle count logging is disabled"):
        executor.cycleCount()
    executor.destroy()
    assert executor.getPerfCounters() == empty
    executor.destroy()  # nothing happens the second time


# -- the same contract on the fake and, where installed, on real PopTorch -------------------------


@pytest.fixture(params=["fake", "real"])
def any_backend(request: pytest.FixtureRequest) -> PopTorchBackend:
    if request.param == "fake":
        return make_backend()
    poptorch = pytest.importorskip("poptorch")
    backend = PopTorchBackend(poptorch_module=poptorch, torch_module=torch)
    availability = backend.availability()
    if not availability.ok:
        pytest.skip(availability.reason)
    return backend


def test_contract(any_backend):
    model, x = mlp(), batch()
    with torch.no_grad():
        expected = model(x)
    compiled = any_backend.compile(model, (x,), "fp32", {"device_iterations": 2})
    try:
        assert json.loads(json.dumps(dict(compiled.info))) == dict(compiled.info)
        assert compiled.info["device_iterations"] == 2
        out = compiled.run(*compiled.prepare_inputs((x,)))
        assert torch.allclose(out, expected, atol=1e-3, rtol=1e-3)
        latency = device_latency(compiled)
        assert latency is not None
        assert latency["samples"] == 2
        with pytest.raises(CompileError, match="not a multiple of device_iterations"):
            any_backend.compile(model, (batch(7),), "fp32", {"device_iterations": 2})
    finally:
        compiled.close()
    compiled.close()
    with pytest.raises(RuntimeError, match="closed"):
        compiled.run(*compiled.prepare_inputs((x,)))
    assert json.loads(json.dumps(any_backend.describe())) == any_backend.describe()


# -- mpirun and PopRun: independent models, each instance on its own IPUs ------------------------


def _launched_by_mpi(monkeypatch: pytest.MonkeyPatch, rank: int = 1, size: int = 2) -> None:
    """What mpirun and PopRun set in every process they start (OpenMPI's variables)."""
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", str(size))
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", str(rank))


def test_the_fake_reads_openmpis_variables_and_disable_ignores_them(monkeypatch):
    _launched_by_mpi(monkeypatch)
    distributed = fake_poptorch.Options().Distributed
    assert (distributed.numProcesses, distributed.processId) == (2, 1)
    assert distributed.ipuof_configs == {}
    assert distributed.disable() is distributed
    assert (distributed.numProcesses, distributed.processId) == (1, 0)
    monkeypatch.setenv("MY_COUNT", "4")
    monkeypatch.setenv("MY_ID", "3")
    distributed.setEnvVarNames("MY_COUNT", "MY_ID")
    assert (distributed.numProcesses, distributed.processId) == (4, 3)


def test_the_fake_refuses_a_distributed_compile_on_a_machine_without_ipu_over_fabric(monkeypatch):
    _launched_by_mpi(monkeypatch)
    with pytest.raises(fake_poptorch.Error) as exc:
        fake_poptorch.inferenceModel(mlp(), fake_poptorch.Options()).compile(batch())
    assert exc.value.message == (
        "fake_poptorch: process 1 of 2 compiles one replica of a distributed replicated graph "
        "(enableDistributedReplicatedGraphs, globalReplicationFactor 2), which needs IPU-over-fabric and a "
        "device configured by PopDist; this machine has neither. Call Options().Distributed.disable() for "
        "an independent model"
    )
    assert fake_poptorch.busy_ipus() == set()
    with pytest.raises(fake_poptorch.Error) as exc:
        fake_poptorch.inferenceModel(mlp(), fake_poptorch.Options().useIpuModel(True)).compile(batch())
    assert exc.value.type == "popart_exception"
    assert exc.value.message.startswith(
        "Only IPU Hardware devices supported with distributed replicated graphs. Unsupported device type "
        "Device Type:ipu-model "
    )
    independent = fake_poptorch.Options()
    independent.Distributed.disable()
    fake_poptorch.inferenceModel(mlp(), independent).compile(batch())
    assert fake_poptorch.busy_ipus() == {0}


@pytest.mark.parametrize(
    ("device", "options"),
    [
        ("ipu", {}),
        ("ipu:1", {}),
        ("ipu-model", {}),
        ("ipu", {"training": True}),
    ],
)
def test_under_mpirun_every_compile_is_one_independent_process(monkeypatch, device, options):
    _launched_by_mpi(monkeypatch)
    model, inputs = (WithLoss(), (batch(), torch.zeros(8, 1))) if options else (mlp(), (batch(),))
    compiled = make_backend(device).compile(model, inputs, "fp32", options)
    try:
        distributed = fake_poptorch.executors[-1].options.Distributed
        assert (distributed.numProcesses, distributed.processId) == (1, 0)
        compiled.run(*compiled.prepare_inputs(inputs))
    finally:
        compiled.close()


def _under_poprun(index: int, count: int = 2, **settings: int) -> PopTorchBackend:
    fake_popdist.configure(index, count, **settings)
    return PopTorchBackend(poptorch_module=fake_poptorch, torch_module=torch, popdist_module=fake_popdist)


def test_under_poprun_each_instance_compiles_on_the_device_popdist_gives_it(monkeypatch):
    ids = []
    for index in (0, 1):
        _launched_by_mpi(monkeypatch, rank=index)
        compiled = _under_poprun(index).compile(mlp(), (batch(),), "fp32", {})
        try:
            ids.append(fake_poptorch.executors[-1].options.ipu_id)
            assert compiled.info["ipu_id"] == ids[-1]
            assert fake_poptorch.busy_ipus() == {ids[-1]}
            assert compiled.ipu_ids == (ids[-1],)  # its energy: this instance's IPU alone
            assert fake_poptorch.executors[-1].options.Distributed.numProcesses == 1
        finally:
            compiled.close()
    assert ids == [0, 1]


def test_under_poprun_a_model_takes_its_share_of_the_instances_ipus():
    # Instance 1 of 2, two local replicas: PopDist's device is the pair {2, 3}, id 5 on 4 IPUs.
    backend = _under_poprun(1, replicas_local=2)
    for options, ipu_id, busy in (({}, 2, {2}), ({"replication_factor": 2}, 5, {2, 3})):
        compiled = backend.compile(mlp(), (batch(),), "fp32", options)
        try:
            assert (fake_poptorch.executors[-1].options.ipu_id, fake_poptorch.busy_ipus()) == (ipu_id, busy)
            assert compiled.ipu_ids == tuple(sorted(busy))  # device 5's members, not IPU "5"
        finally:
            compiled.close()
    with pytest.raises(CompileError) as exc:
        backend.compile(mlp(), (batch(),), "fp32", {"replication_factor": 4})
    assert str(exc.value) == (
        "Sequential needs 4 IPUs (ipus x replication_factor, a power of two), but PopRun instance 1 of 2 has "
        "2 (device 5, IPUs 2, 3: 2 local replica(s) x 1 IPU(s)); launch poprun with --ipus-per-replica and "
        "--num-replicas giving each instance that many"
    )


def test_a_model_names_its_ipus_where_it_was_given_a_device_and_none_where_poptorch_chose():
    # Pinned: a single IPU, and the pair {2, 3} (device 5 on 4 IPUs, gc-info -l's numbering).
    for device, options, held in (("ipu:1", {}, (1,)), ("ipu:5", {"replication_factor": 2}, (2, 3))):
        compiled = make_backend(device).compile(mlp(), (batch(),), "fp32", options)
        try:
            assert (compiled.ipu_ids, tuple(sorted(fake_poptorch.busy_ipus()))) == (held, held)
        finally:
            compiled.close()
    # Plain ipu outside PopRun: PopTorch takes any free IPUs and does not say which.
    fake_poptorch.configure(ipus=4)
    compiled = make_backend("ipu").compile(mlp(), (batch(),), "fp32", {})
    try:
        assert compiled.ipu_ids is None
    finally:
        compiled.close()


def test_placed_instances_under_poprun_stay_on_their_instances_ipus():
    from pytest_ipu.devices.request import parse_request
    from pytest_ipu.placement import plan as placed

    request = parse_request({"instances": 2}, "test")
    devices = []
    for index in (0, 1):
        backend = _under_poprun(index, replicas_local=2)
        plan = placed.plan(backend, request, {}, lambda name, device: PopTorchBackend(name, device))
        devices.append([p.device for p in plan.instances])
        assert plan.placement.as_json()["inventory"]["notes"][-1].startswith(f"PopRun instance {index} of 2:")
    assert devices == [["ipu:0", "ipu:1"], ["ipu:2", "ipu:3"]]


def test_the_worker_factory_carries_popdist_by_name():
    import pickle

    backend = PopTorchBackend(
        device="ipu:2", poptorch_module=fake_poptorch, torch_module=torch, popdist_module=fake_popdist
    )
    rebuilt = pickle.loads(pickle.dumps(backend.worker_factory()))()
    assert rebuilt._popdist is fake_popdist


# -- instances in worker processes ----------------------------------------------------------------


def test_poptorch_instances_run_in_worker_processes():
    # A call holds the GIL, so the instance groups must use processes, not threads.
    assert PopTorchBackend.concurrency == "processes"


def test_two_instances_calls_overlap_although_each_holds_the_gil(tmp_path):
    """Placed as ``ipu_compile`` places ``instances=2``: in some round, each instance's call starts
    before the other's ends. Two threads of one process could not: each call holds the GIL."""
    from pytest_ipu.devices.request import DeviceRequest
    from pytest_ipu.placement import plan as placed
    from tests.unit.slow_poptorch import SlowPopTorch
    from tests.unit.slow_poptorch import read_spans

    def backend_for(name: str, device: str) -> SlowPopTorch:
        return SlowPopTorch(str(tmp_path), 0.2, name, device)

    backend = backend_for("poptorch", "ipu")
    the_plan = placed.plan(backend, DeviceRequest(instances=2), {}, backend_for)
    assert the_plan.placement.runner == "processes"
    x = batch()
    compiled = placed.compile_plan(the_plan, mlp(), (x,), "fp32", {})
    try:
        compiled.prepare_inputs((x,))
        for _ in range(3):
            compiled.run()
    finally:
        compiled.close()
    spans = list(read_spans(tmp_path).values())
    assert [len(s) for s in spans] == [3, 3]  # one file per instance
    overlapping = [a[0] < b[1] and b[0] < a[1] for a, b in zip(*spans)]
    assert any(overlapping), spans


def test_the_worker_factory_pickles_and_rebuilds_the_backend_with_the_same_modules(fake):
    import pickle

    factory = make_backend("ipu:1").worker_factory()
    rebuilt = pickle.loads(pickle.dumps(factory))()
    assert isinstance(rebuilt, PopTorchBackend)
    assert (rebuilt.name, rebuilt.device) == ("poptorch", "ipu:1")
    # It compiles through the very fake module the original was given.
    compiled = rebuilt.compile(mlp(), (batch(),), "fp32", {})
    try:
        assert len(fake.executors) == 1
        assert fake.busy_ipus() == {1}
    finally:
        compiled.close()


def test_the_worker_factory_of_a_backend_that_imports_poptorch_itself_imports_it_by_name(monkeypatch):
    import pickle

    factory = pickle.loads(pickle.dumps(PopTorchBackend(name="pt", device="ipu").worker_factory()))
    monkeypatch.setitem(sys.modules, "poptorch", fake_poptorch)
    rebuilt = factory()
    assert (rebuilt.name, rebuilt.device) == ("pt", "ipu")
    assert rebuilt.describe()["poptorch"] == "3.4.0-fake"


def test_the_worker_factory_refuses_a_module_that_cannot_be_imported_by_its_name():
    import types

    stray = types.ModuleType("stray_poptorch")
    with pytest.raises(
        ValueError,
        match=r"^the poptorch module 'stray_poptorch' given to the poptorch backend cannot be imported by "
        r"its name \(No module named 'stray_poptorch'\), so worker processes cannot rebuild the backend; "
        r"pass a module that is importable as its __name__$",
    ):
        PopTorchBackend(poptorch_module=stray, torch_module=torch).worker_factory()
    impostor = types.ModuleType("json")
    with pytest.raises(
        ValueError, match=r"^the torch module 'json' given to the poptorch backend is not the module"
    ):
        PopTorchBackend(poptorch_module=fake_poptorch, torch_module=impostor).worker_factory()


def test_two_instances_compile_and_run_in_worker_processes_on_two_ipus(monkeypatch):
    import multiprocessing

    import numpy as np

    # Started by mpirun or PopRun: the workers inherit OpenMPI's variables, and each must still
    # compile an independent model (the fake refuses a distributed one).
    _launched_by_mpi(monkeypatch)

    from pytest_ipu.placement.instances import InstanceSpec
    from pytest_ipu.placement.instances import ProcessInstances

    model, x = mlp(), batch()
    with torch.no_grad():
        expected = model(x).numpy()
    specs = [
        InstanceSpec(i, make_backend(f"ipu:{i}").worker_factory(), model, (x,), "fp32", {}) for i in range(2)
    ]
    group = ProcessInstances(specs)
    pids = group.pids
    try:
        infos = group.compiled_info()
        assert [i.target for i in infos] == ["poptorch:ipu:0", "poptorch:ipu:1"]
        assert [i.info["ipu_id"] for i in infos] == [0, 1]
        assert all(i.compile_s is not None and i.compile_s > 0 for i in infos)
        group.prepare((x,))
        for _ in range(3):
            group.round()
        assert [len(calls) for calls in group.latencies_s()] == [3, 3]
        out = group.call(1, (x,))
        assert isinstance(out, np.ndarray)
        np.testing.assert_allclose(out, expected, atol=1e-5)
    finally:
        group.close()
    assert not {p.pid for p in multiprocessing.active_children()}.intersection(pids)
