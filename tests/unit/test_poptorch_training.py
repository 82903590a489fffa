"""Training steps on PopTorch (``PopTorchTrainingBackend.compile_training``, backends.ipu.poptorch_training)
against the PopTorch 3.4 fake in tests/fakes/fake_poptorch.py, which really trains the model on the CPU,
and the PopDist fake in tests/fakes/fake_popdist.py for PopRun launches.
"""

from __future__ import annotations

import importlib
import math
import re
import sys
import weakref

import pytest

from pytest_ipu.backends.base import TrainingBackend
from pytest_ipu.backends.base import TrainingRequest
from pytest_ipu.backends.ipu import poptorch_training
from pytest_ipu.backends.ipu.poptorch_training import PopTorchTrainingBackend
from pytest_ipu.errors import CompileError
from pytest_ipu.errors import NonFiniteLoss
from tests.unit.torch_versions import cpu_runs_fp16

torch = pytest.importorskip("torch")
fake_poptorch = importlib.import_module("tests.fakes.fake_poptorch")
fake_popdist = importlib.import_module("tests.fakes.fake_popdist")


@pytest.fixture(autouse=True)
def fake(monkeypatch: pytest.MonkeyPatch):
    """A fresh fake machine (4 Mk2 IPUs, all free), outside PopRun, with no PopTorch or MPI variables."""
    for var in fake_poptorch.ENVIRONMENT:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(poptorch_training, "_POPDIST_INITIALISED", weakref.WeakSet())
    fake_poptorch.reset()
    fake_popdist.reset()
    yield fake_poptorch
    fake_poptorch.reset()
    fake_popdist.reset()


def make_backend(device: str | None = None, popdist: object = None) -> PopTorchTrainingBackend:
    return PopTorchTrainingBackend(
        device=device, poptorch_module=fake_poptorch, torch_module=torch, popdist_module=popdist
    )


def classifier() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 3)


def problem(n: int = 16, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """A linearly separable 3-class problem: the label is the arg-max of a fixed linear map."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    truth = torch.tensor([[2.0, -1.0, 0.5], [-1.0, 2.0, 0.0], [0.5, 0.0, -2.0], [1.0, 1.0, 1.0]])
    return x, (x @ truth).argmax(dim=1)


def request(lr: float = 0.5, accumulation: int = 1, **kwargs: object) -> TrainingRequest:
    return TrainingRequest(
        loss=torch.nn.functional.cross_entropy,
        optimizer=lambda params: torch.optim.SGD(params, lr=lr),
        gradient_accumulation=accumulation,
        **kwargs,  # type: ignore[arg-type]
    )


def compile_step(batch=None, options=None, precision="fp32", backend=None, **req):
    batch = problem() if batch is None else batch
    return (backend or make_backend()).compile_training(
        classifier(), batch, precision, options or {}, request(**req)
    )


def test_the_backend_is_a_training_backend():
    assert isinstance(make_backend(), TrainingBackend)


def test_the_loss_falls_over_twenty_steps_and_the_callers_model_stays_untrained():
    model = classifier()
    before = model.weight.detach().clone()
    x, y = problem()
    step = make_backend().compile_training(model, (x, y), "fp32", {}, request())
    try:
        executor = fake_poptorch.executors[-1]
        assert executor.training
        assert executor.isCompiled()
        assert fake_poptorch.options_passed[-1]._is_frozen  # PopTorch froze the options it was given
        losses = [step(x, y) for _ in range(20)]
    finally:
        step.close()
    assert all(isinstance(loss, float) and math.isfinite(loss) for loss in losses)
    assert losses[-1] < 0.5 * losses[0]
    info = step.training
    assert info is not None
    assert (info.losses.steps, info.losses.first, info.losses.last) == (20, losses[0], losses[-1])
    assert torch.equal(model.weight, before)
    assert fake_poptorch.busy_ipus() == set()


def test_the_global_batch_composition_is_in_training_info():
    x, y = problem(16)
    step = compile_step((x, y), {"replication_factor": 2, "device_iterations": 2}, accumulation=2)
    try:
        info = step.training
        assert info is not None
        assert (info.micro_batch, info.gradient_accumulation, info.replicas, info.device_iterations) == (
            2,
            2,
            2,
            2,
        )
        assert (info.processes, info.host_batch, info.optimizer, info.amp, info.mode) == (
            1,
            16,
            "SGD",
            False,
            "poptorch",
        )
        used = fake_poptorch.executors[-1].options
        assert (used.replication_factor, used.device_iterations, used.Training.gradient_accumulation) == (
            2,
            2,
            2,
        )
        assert used.output_mode == fake_poptorch.OutputMode.All
        assert used.Distributed.numProcesses == 1
        assert fake_poptorch.busy_ipus() == {0, 1}  # one IPU per replica
        assert step.info["micro_batches_per_call"] == 8
        assert step.info["training"] is True
        assert step.options["gradient_accumulation"] == 2
    finally:
        step.close()


def test_a_calls_loss_is_the_mean_over_all_its_micro_batches():
    # With a learning rate of 0 the weights never move, so every micro-batch's loss is the initial
    # model's: their mean over equal micro-batches is the loss of the whole host batch.
    x, y = problem(16)
    expected = float(torch.nn.functional.cross_entropy(classifier()(x), y).detach())
    step = compile_step((x, y), {"replication_factor": 2, "device_iterations": 2}, lr=0.0, accumulation=2)
    try:
        assert step(x, y) == pytest.approx(expected, rel=1e-5)
    finally:
        step.close()


def test_a_nan_loss_raises_naming_its_step():
    x, y = problem()
    step = compile_step((x, y))
    try:
        step(x, y)
        poisoned = x.clone()
        poisoned[0, 0] = float("nan")
        with pytest.raises(NonFiniteLoss) as exc:
            step(poisoned, y)
    finally:
        step.close()
    assert str(exc.value) == (
        "pytest-ipu: training step 2 of Linear on poptorch:ipu: the loss is nan; nothing after it can be "
        "trusted: lower the learning rate, check the batch for NaN, or train in fp32"
    )


def test_a_diverging_learning_rate_raises_non_finite_loss():
    x, y = problem()
    step = make_backend().compile_training(
        classifier(),
        (x, y.float().unsqueeze(1).expand(-1, 3).contiguous()),
        "fp32",
        {},
        TrainingRequest(
            loss=torch.nn.functional.mse_loss, optimizer=lambda params: torch.optim.SGD(params, lr=1e30)
        ),
    )
    target = y.float().unsqueeze(1).expand(-1, 3).contiguous()
    diverged = None
    try:
        for _ in range(20):
            try:
                step(x, target)
            except NonFiniteLoss as exc:
                diverged = exc
                break
    finally:
        step.close()
    assert diverged is not None
    assert re.match(
        r"pytest-ipu: training step \d+ of Linear on poptorch:ipu: the loss is (nan|inf)", str(diverged)
    )


def test_a_batch_that_does_not_split_is_one_line_naming_the_numbers_and_the_fix():
    with pytest.raises(CompileError) as exc:
        compile_step(problem(10), {"replication_factor": 2}, accumulation=2)
    assert str(exc.value) == (
        "Linear: the batch of 10 samples does not split into gradient_accumulation (2) x replication_factor "
        "(2) x device_iterations (1) = 4 equal micro-batches; pass a batch of 12 samples (or another "
        "multiple of 4) or change those numbers"
    )
    assert fake_poptorch.executors == []
    assert fake_poptorch.busy_ipus() == set()


def test_batch_elements_must_agree_on_their_samples():
    x, y = problem(8)
    with pytest.raises(CompileError) as exc:
        compile_step((x, y[:4]))
    assert str(exc.value) == (
        "Linear: batch element 1 has 4 samples, but element 0 has 8; every input and target needs one row "
        "per sample"
    )


def test_the_fake_refuses_a_batch_that_breaks_poptorchs_rule():
    opts = fake_poptorch.Options().deviceIterations(2)
    opts.Training.gradientAccumulation(2)
    executor = fake_poptorch.trainingModel(torch.nn.Linear(4, 1), opts)
    with pytest.raises(AssertionError, match=re.escape("the batch dimension (6) must be a multiple of")):
        executor.compile(torch.ones(6, 4))
    with pytest.raises(AttributeError, match="Can't modify frozen Options"):
        opts.deviceIterations(1)


def pipeline() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def test_pipelined_training_needs_gradient_accumulation_over_its_stages():
    with pytest.raises(CompileError) as exc:
        make_backend().compile_training(pipeline(), problem(), "fp32", {"ipus": 2}, request(accumulation=2))
    assert str(exc.value) == (
        "Sequential: gradient_accumulation=2 is below the 3 pipeline stages of ipus=2 (2 forward and 1 "
        "backward when training; PopTorch needs a micro-batch in every stage); pass "
        "gradient_accumulation=3 or more"
    )
    x, y = problem(12)
    step = make_backend().compile_training(pipeline(), (x, y), "fp32", {"ipus": 2}, request(accumulation=3))
    try:
        assert fake_poptorch.busy_ipus() == {0, 1}
        assert math.isfinite(step(x, y))
        assert step.training is not None
        assert step.training.micro_batch == 4
    finally:
        step.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"training": True},
            "unknown poptorch backend option(s) 'training' for Linear; allowed: device_iterations, "
            "replication_factor, executable_cache_dir, available_memory_proportion, partials_type, "
            "random_seed, ipus, auto_round_num_ipus",
        ),
        (
            {"device_iterations": 0},
            "poptorch backend option device_iterations=0 for Linear; use a positive integer",
        ),
    ],
)
def test_bad_options_are_named(options, message):
    with pytest.raises(CompileError) as exc:
        compile_step(options=options)
    assert str(exc.value) == message


def test_bad_requests_are_named():
    with pytest.raises(
        CompileError, match=r"^Linear: inputs=2 of a batch of 2 element\(s\) leaves no targets"
    ):
        compile_step(inputs=2)
    with pytest.raises(CompileError) as exc:
        compile_step(processes=2)
    assert str(exc.value) == (
        "Linear: PopTorch cannot average gradients over a torch.distributed process group (2 processes); "
        "launch the data-parallel run with poprun (PopDist), not torchrun, or train in one process"
    )
    with pytest.raises(CompileError) as exc:
        compile_step(precision="bf16")
    assert str(exc.value).startswith("precision 'bf16' is not supported by the poptorch backend (Linear)")


def test_a_loss_that_is_not_a_scalar_fails_the_compile():
    x, y = problem()
    with pytest.raises(CompileError) as exc:
        make_backend().compile_training(
            classifier(),
            (x, y),
            "fp32",
            {},
            TrainingRequest(
                loss=lambda out, target: torch.nn.functional.cross_entropy(out, target, reduction="none"),
                optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
            ),
        )
    assert str(exc.value) == (
        "PopTorch could not compile Linear for poptorch:ipu: the loss of Linear has shape (16,), not a "
        "scalar; reduce it (mean or sum)"
    )
    assert fake_poptorch.busy_ipus() == set()


def test_evaluate_runs_the_trained_weights_on_the_host():
    model = classifier()
    x, y = problem()
    initial = model(x).detach()
    step = make_backend().compile_training(model, (x, y), "fp32", {}, request())
    try:
        for _ in range(5):
            step(x, y)
        executor = fake_poptorch.executors[-1]
        copies = executor._host_weights_version
        assert step.evaluate is not None
        out = step.evaluate(x)
        assert executor._host_weights_version == copies + 1  # the device's weights were copied back
        assert isinstance(out, torch.Tensor)
        assert out.shape == (16, 3)
        assert not out.requires_grad
        assert not torch.allclose(out, initial)
        # Argmax accuracy on the training batch: the trained weights classify better than the initial.
        assert (out.argmax(1) == y).sum() > (initial.argmax(1) == y).sum()
        assert executor.model.model.training  # evaluation left the module in training mode
    finally:
        step.close()
    assert torch.equal(step.evaluate(x), out)  # closing copied the weights back; evaluate still works
    assert torch.equal(model(x).detach(), initial)


@pytest.mark.skipif(not cpu_runs_fp16(), reason="this torch has no fp16 matmul on the CPU")
def test_fp16_trains_half_weights_and_evaluates_to_float():
    x, y = problem()
    step = compile_step((x, y), precision="fp16")
    try:
        prepared = step.prepare_inputs((x, y))
        assert (prepared[0].dtype, prepared[1].dtype) == (torch.float16, torch.int64)
        assert math.isfinite(step.run(*prepared))
        assert fake_poptorch.executors[-1].model.model.weight.dtype == torch.float16
        assert step.training is not None
        assert step.training.amp is False
        assert step.evaluate is not None
        assert step.evaluate(x).dtype == torch.float32
    finally:
        step.close()


# -- PopRun ----------------------------------------------------------------------------------------


def under_poprun(monkeypatch: pytest.MonkeyPatch, index: int = 1, count: int = 2, **settings: int):
    """Instance ``index`` of a ``count``-instance launch, as mpirun and PopDist present it."""
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", str(count))
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", str(index))
    # popdist.poptorch imports poptorch, as the SDK's does: here, the fake.
    monkeypatch.setitem(sys.modules, "poptorch", fake_poptorch)
    fake_popdist.configure(index, count, **settings)
    return make_backend(popdist=fake_popdist)


def test_under_poprun_popdists_options_configure_the_step(monkeypatch):
    backend = under_poprun(monkeypatch, replicas_local=2)
    x, y = problem(8)
    step = backend.compile_training(classifier(), (x, y), "fp32", {}, request(accumulation=2))
    try:
        used = fake_poptorch.executors[-1].options
        assert isinstance(used, fake_popdist.poptorch.Options)
        # Not disabled: this instance is process 1 of the launch's 2.
        assert (used.Distributed.processId, used.Distributed.numProcesses) == (1, 2)
        assert used.replication_factor == 2
        assert used.ipu_id == 5  # PopDist's device for instance 1: the pair of IPUs 2 and 3
        assert fake_poptorch.busy_ipus() == {2, 3}
        assert fake_popdist.calls().count("init") == 1
        info = step.training
        assert info is not None
        assert (info.micro_batch, info.gradient_accumulation, info.replicas, info.processes) == (2, 2, 2, 2)
        assert step.info["ipu_id"] == 5
        assert step.info["poprun"] == {
            "index": 1,
            "count": 2,
            "local_index": 1,
            "replicas_local": 2,
            "replicas_total": 4,
            "ipus_per_replica": 1,
        }
        assert math.isfinite(step(x, y))
    finally:
        step.close()
    again = backend.compile_training(classifier(), (x, y), "fp32", {}, request(accumulation=2))
    again.close()
    assert fake_popdist.calls().count("init") == 1  # once per process


def test_outside_poprun_the_step_is_one_independent_process(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    step = compile_step(backend=make_backend(popdist=fake_popdist))
    try:
        used = fake_poptorch.executors[-1].options
        assert type(used) is fake_poptorch.Options
        assert used.Distributed.numProcesses == 1
        assert step.training is not None
        assert step.training.processes == 1
        assert "init" not in fake_popdist.calls()
    finally:
        step.close()


@pytest.mark.parametrize(
    ("device", "options", "message"),
    [
        (
            "ipu:0",
            {},
            "Linear: under PopRun a training step is one replica group of the launch's distributed graph, on "
            "the IPUs PopDist gives PopRun instance 1 of 2, not on device 'ipu:0'; use the device 'ipu', or "
            "run outside poprun",
        ),
        (
            None,
            {"replication_factor": 2},
            "Linear: replication_factor=2, but PopRun gives PopRun instance 1 of 2 1 local replica(s) "
            "(--num-replicas 2); under PopRun the replicas are PopRun's: leave replication_factor out, or "
            "launch poprun with --num-replicas 4",
        ),
    ],
)
def test_under_poprun_the_device_and_replicas_are_poprun_s(monkeypatch, device, options, message):
    under_poprun(monkeypatch)
    with pytest.raises(CompileError) as exc:
        compile_step(options=options, backend=make_backend(device, popdist=fake_popdist))
    assert str(exc.value) == message


def test_under_poprun_pipeline_stages_must_match_the_ipus_per_replica(monkeypatch):
    backend = under_poprun(monkeypatch)
    with pytest.raises(CompileError) as exc:
        backend.compile_training(pipeline(), problem(12), "fp32", {"ipus": 2}, request(accumulation=3))
    assert str(exc.value) == (
        "Sequential: ipus=2 pipeline stages need 2 IPU(s) per replica, but PopRun gives PopRun instance 1 "
        "of 2 1 (--ipus-per-replica); launch poprun with --ipus-per-replica 2, or pass ipus=1"
    )


# -- the fakes' training surface -------------------------------------------------------------------


def test_the_fake_copies_weights_only_once_compiled_and_reduces_identity_losses():
    executor = fake_poptorch.trainingModel(torch.nn.Linear(4, 1))
    with pytest.raises(
        fake_poptorch.Error, match=re.escape("Model has not been compiled or has been destroyed.")
    ):
        executor.copyWeightsToHost()
    assert not executor.copyWeightsToHostIfNeeded()
    values = torch.tensor([1.0, 2.0, 3.0])
    assert float(fake_poptorch.identity_loss(values, reduction="sum")) == 6.0
    assert float(fake_poptorch.identity_loss(values, reduction="mean")) == 2.0
    assert fake_poptorch.identity_loss(values, reduction="none") is values
    with pytest.raises(AssertionError, match="Unsupported reduction type!"):
        fake_poptorch.identity_loss(values, reduction="max")


def test_the_fake_popdist_options_are_poptorch_options_set_for_the_instance(monkeypatch):
    monkeypatch.setitem(sys.modules, "poptorch", fake_poptorch)
    fake_popdist.configure(0, 2, replicas_local=2)
    opts = fake_popdist.poptorch.Options(ipus_per_replica=1)
    assert isinstance(opts, fake_poptorch.Options)
    assert (opts.replication_factor, opts.ipu_id) == (2, 4)
    assert (opts.Distributed.processId, opts.Distributed.numProcesses) == (0, 2)
    with pytest.raises(AttributeError, match="has no attribute 'missing'"):
        _ = fake_popdist.missing


@pytest.mark.parametrize(
    ("device", "options", "ipu_ids"),
    [
        ("ipu:2", {}, (2,)),  # a single IPU's id
        ("ipu:5", {"replication_factor": 2}, (2, 3)),  # a 2-IPU device: both its members
        ("ipu", {}, None),  # PopTorch chooses and does not say which (gcipuinfo's users tell the meter)
    ],
)
def test_a_step_holds_the_ipus_of_its_device_as_inference_does(device, options, ipu_ids):
    x, y = problem(8)
    step = compile_step((x, y), options, backend=make_backend(device))
    try:
        assert step.ipu_ids == ipu_ids
        assert step.ipu_count == len(fake_poptorch.busy_ipus())
        if ipu_ids is not None:
            assert set(ipu_ids) == fake_poptorch.busy_ipus()
    finally:
        step.close()


def test_under_poprun_a_step_holds_the_instances_ipus(monkeypatch):
    backend = under_poprun(monkeypatch, replicas_local=2)
    x, y = problem(8)
    step = backend.compile_training(classifier(), (x, y), "fp32", {}, request(accumulation=2))
    try:
        # PopDist's device 5 for instance 1: IPUs 2 and 3, never the launch's other instance's.
        assert step.ipu_ids == (2, 3)
        assert step.ipu_count == 2
    finally:
        step.close()
