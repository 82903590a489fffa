"""Training steps on the torch backend, called directly (``TorchBackend().compile_training``): the
update arithmetic (gradient accumulation against one full batch), mixed precision, the caller's
model left alone, evaluation, and the one-line refusals."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from pytest_ipu.backends.base import CompiledModel
from pytest_ipu.backends.base import TrainingRequest
from pytest_ipu.backends.torch import TorchBackend
from pytest_ipu.errors import CompileError
from pytest_ipu.errors import NonFiniteLoss
from tests.unit.torch_versions import needs_torch_compile

torch = pytest.importorskip("torch")

from torch.nn import functional  # noqa: E402


def _net(seed: int = 0, dropout: float = 0.0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Dropout(dropout), torch.nn.Linear(8, 3)
    )


def _batch(n: int = 8, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=gen)
    # Separable classes: a small net learns them in a few dozen steps.
    y = (x[:, 0] > 0).long() + (x[:, 1] > 1).long()
    return x, y


def _sgd(lr: float) -> Callable[[Any], torch.optim.Optimizer]:
    return lambda params: torch.optim.SGD(params, lr=lr)


def _train(
    model: torch.nn.Module,
    batch: tuple[torch.Tensor, ...],
    *,
    accumulation: int = 1,
    precision: str = "fp32",
    lr: float = 0.1,
    backend: TorchBackend | None = None,
    options: dict[str, object] | None = None,
    inputs: int = 1,
) -> CompiledModel:
    request = TrainingRequest(
        loss=functional.cross_entropy, optimizer=_sgd(lr), inputs=inputs, gradient_accumulation=accumulation
    )
    return (backend or TorchBackend(device="cpu")).compile_training(
        model, batch, precision, options or {}, request
    )


def _one_line(error: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def _reference_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float) -> torch.nn.Module:
    """One plain SGD step on the whole batch, written out by hand."""
    ref = copy.deepcopy(model).train()
    loss = functional.cross_entropy(ref(x), y)
    loss.backward()
    with torch.no_grad():
        for p in ref.parameters():
            p -= lr * p.grad
    return ref.eval()


@pytest.mark.parametrize("accumulation", [1, 2, 4])
def test_accumulated_micro_batches_make_the_update_of_one_full_batch(accumulation: int) -> None:
    model, (x, y) = _net(), _batch(8)
    probe = torch.randn(5, 4, generator=torch.Generator().manual_seed(9))
    step = _train(model, (x, y), accumulation=accumulation, lr=0.5)
    loss = step(x, y)
    expected = _reference_step(model, x, y, 0.5)
    # Summing the micro-batches' mean losses instead of averaging them would double the step.
    doubled = _reference_step(model, x, y, 1.0)
    assert step.evaluate is not None
    after = step.evaluate(probe)
    with torch.no_grad():
        assert loss == pytest.approx(float(functional.cross_entropy(model(x), y)), rel=1e-5)
        assert torch.allclose(after, expected(probe), atol=1e-6, rtol=1e-5)
        # The comparison can tell: a doubled update, or none, is far outside the tolerance.
        assert not torch.allclose(after, doubled(probe), atol=1e-4, rtol=1e-3)
        assert not torch.allclose(after, model.eval()(probe), atol=1e-4, rtol=1e-3)
    assert step.training is not None
    assert (step.training.micro_batch, step.training.gradient_accumulation) == (
        8 // accumulation,
        accumulation,
    )
    assert step.training.host_batch == 8
    assert step.options["gradient_accumulation"] == accumulation


def test_the_loss_falls_and_the_trace_keeps_first_and_last() -> None:
    x, y = _batch(64)
    step = _train(_net(), (x, y), accumulation=2, lr=0.5)
    losses = [step(x, y) for _ in range(40)]
    info = step.training
    assert info is not None
    assert losses[-1] < losses[0] / 2
    assert (info.losses.steps, info.losses.first, info.losses.last) == (40, losses[0], losses[-1])
    assert (info.optimizer, info.amp, info.mode, info.processes, info.replicas) == (
        "SGD",
        False,
        "eager",
        1,
        1,
    )
    assert (step.target, step.precision, step.training.device_iterations) == ("torch:cpu", "fp32", 1)


def test_evaluation_sees_the_trained_model_in_eval_mode() -> None:
    model = _net(dropout=0.5)
    x, y = _batch(64)
    step = _train(model, (x, y), lr=0.5)
    assert step.evaluate is not None
    with torch.no_grad():
        before = step.evaluate(x)
        # Untrained, the copy is the caller's model; dropout is off while evaluating.
        assert torch.allclose(before, model.eval()(x), atol=1e-6)
        assert torch.equal(step.evaluate(x), before)
    accuracy_before = float((before.argmax(1) == y).float().mean())
    for _ in range(60):
        step(x, y)
    after = step.evaluate(x)
    assert float((after.argmax(1) == y).float().mean()) > max(accuracy_before, 0.8)
    assert after.dtype == torch.float32
    # Evaluating switches the model back to training: with a learning rate of 0 the weights stay,
    # so only dropout, active again, can make two steps on one batch differ.
    still = _train(model, (x, y), lr=0.0)
    assert still.evaluate is not None
    still.evaluate(x)
    assert still(x, y) != still(x, y)


def test_the_callers_model_is_never_trained() -> None:
    model = _net().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = _batch(16)
    step = _train(model, (x, y), accumulation=2, lr=0.5)
    for _ in range(5):
        step(x, y)
    assert not model.training, "ipu_train must not switch the caller's model to training mode"
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert all(p.grad is None for p in model.parameters())


def test_bf16_mixed_precision_trains_on_the_cpu() -> None:
    x, y = _batch(32)
    step = _train(_net(), (x, y), precision="bf16", accumulation=2, lr=0.5)
    losses = [step(x, y) for _ in range(20)]
    assert step.training is not None
    assert step.training.amp is True
    assert step.precision == "bf16"
    assert all(isinstance(v, float) for v in losses)
    assert losses[-1] < losses[0]
    assert step.evaluate is not None
    assert step.evaluate(x).dtype == torch.float32


def test_fp16_on_the_cpu_is_refused() -> None:
    with pytest.raises(CompileError) as info:
        _train(_net(), _batch(8), precision="fp16")
    assert _one_line(info) == "Sequential: fp16 mixed precision needs a CUDA device; on cpu use bf16 or fp32"


def test_a_batch_that_does_not_split_into_the_micro_batches_is_refused() -> None:
    with pytest.raises(CompileError) as info:
        _train(_net(), _batch(10), accumulation=4)
    message = _one_line(info)
    assert (
        "the batch of 10 samples does not split into gradient_accumulation=4 equal micro-batches" in message
    )


def test_a_model_of_two_inputs_takes_the_first_two_elements_of_the_batch() -> None:
    class Pair(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(4, 3)
            self.b = torch.nn.Linear(2, 3)

        def forward(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
            return self.a(left) + self.b(right)

    torch.manual_seed(0)
    x, y = _batch(16)
    right = torch.randn(16, 2)
    step = _train(Pair(), (x, right, y), inputs=2, accumulation=2, lr=0.5)
    losses = [step(x, right, y) for _ in range(10)]
    assert losses[-1] < losses[0]
    with pytest.raises(CompileError) as info:
        _train(Pair(), (x, right, y), inputs=3)
    assert "inputs=3 of a batch of 3 element(s) leaves no targets for the loss" in _one_line(info)


@pytest.mark.parametrize(
    ("model", "options", "part"),
    [
        ("not a module", {}, "ipu_train needs a torch.nn.Module, got str"),
        (None, {"chanels_last": True}, "unknown torch backend option(s) 'chanels_last' for Sequential"),
        (None, {"io": "gpu"}, "io must be 'host' or 'device', got 'gpu'"),
    ],
)
def test_bad_models_and_options_are_refused_in_one_line(
    model: object, options: dict[str, object], part: str
) -> None:
    with pytest.raises(CompileError) as info:
        _train(_net() if model is None else model, _batch(8), options=options)
    assert part in _one_line(info)


def test_a_nan_loss_fails_the_step_naming_it() -> None:
    x, y = _batch(8)
    step = _train(torch.nn.Linear(4, 3), (x, y))
    step(x, y)
    bad = x.clone()
    bad[2, 1] = float("nan")
    with pytest.raises(NonFiniteLoss) as info:
        step(bad, y)
    assert _one_line(info).startswith("pytest-ipu: training step 2 of Linear on torch:cpu: the loss is nan; ")


@needs_torch_compile
def test_torch_compile_makes_the_same_steps_as_eager() -> None:
    x, y = _batch(16)
    eager = _train(_net(), (x, y), accumulation=2, lr=0.5)
    compiled = _train(
        _net(),
        (x, y),
        accumulation=2,
        lr=0.5,
        backend=TorchBackend(name="torch-compile", device="cpu", mode="compile"),
    )
    info = compiled.training
    assert info is not None
    assert info.mode == "compile"
    # torch.compile compiles on its first step, made while compiling (never a timed round).
    assert info.losses.steps == 1
    assert compiled.options["mode"] == "compile"
    eager_losses = [eager(x, y) for _ in range(4)]
    compiled_losses = [info.losses.first, *(compiled(x, y) for _ in range(3))]
    assert compiled_losses == pytest.approx(eager_losses, rel=1e-4)
