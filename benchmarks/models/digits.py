"""Handwritten digits, a small classifier and one seeded training run of it, for time-to-train studies.

The data are scikit-learn's 8x8 handwritten digits (``sklearn.datasets.load_digits``: 1797 images of
the UCI optical-recognition set, shipped inside scikit-learn, so nothing is downloaded). They are split
once, stratified, into 1437 training and 360 held-out images, and standardised with the training
images' statistics only, so that nothing of the held-out set leaks into training.

:class:`DigitsRun` is what ``ipu_time_to_train``'s ``setup(seed)`` returns: ``train_epoch()`` runs one
epoch of this process's shard through a training step, and ``evaluate()`` scores the step's model on
the held-out images. The step comes from a factory (in a study, a wrapper around ``ipu_train``), so
this module depends on no fixture and runs under a plain training loop as well.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from typing import Protocol

import numpy as np
import torch
from torch import Tensor
from torch import nn
from torch.nn import functional

__all__ = [
    "BATCH",
    "CLASSES",
    "FEATURES",
    "HELD_OUT",
    "HIDDEN",
    "Digits",
    "DigitsRun",
    "LossFn",
    "OptimizerFactory",
    "StepFactory",
    "TrainStep",
    "accuracy",
    "load",
    "make_run",
    "mlp",
    "optimizer",
]

#: Pixels of one 8x8 image, the model's input width.
FEATURES = 64
#: Digit classes 0 to 9.
CLASSES = 10
#: Images held out for evaluation: a fifth of the 1797, the rest (1437) train.
HELD_OUT = 360
#: Width of the classifier's hidden layer.
HIDDEN = 64
#: A batch size that suits the set: 44 steps an epoch on one process.
BATCH = 32
#: Learning rate and momentum of :func:`optimizer`.
_LEARNING_RATE = 0.05
_MOMENTUM = 0.9

#: ``loss(outputs, *targets)``, as ``ipu_train`` takes it.
LossFn = typing.Callable[..., Tensor]
#: ``optimizer(params)``, as ``ipu_train`` takes it.
OptimizerFactory = typing.Callable[[typing.Iterable[nn.Parameter]], torch.optim.Optimizer]


class TrainStep(Protocol):
    """A training step: one call trains on one batch, ``evaluate`` runs the trained model.

    ``ipu_train``'s ``CompiledModel`` is one: calling it trains on a host batch ``(inputs, targets)``,
    and its ``evaluate(*inputs)`` returns the trained model's outputs on the host, in eval mode, without
    gradients (``None`` on a model that was not built for training).
    """

    # Any arguments: a step may take exactly ``(x, y)`` or any batch; the runs pass ``(x, y)``.
    def __call__(self, *batch: Any, **options: Any) -> object:
        """Train on one host batch; returns the loss (unused here)."""
        ...

    @property
    def evaluate(self) -> Callable[..., object] | None:
        """The trained model's forward pass for evaluation, or ``None`` when the step has none."""
        ...


#: ``step_factory(model, loss, optimizer, example_batch) -> step``: builds the step that trains a copy
#: (or the original) of ``model``; ``example_batch`` is ``(inputs, targets)`` of the batch's shape.
StepFactory = typing.Callable[[nn.Module, LossFn, OptimizerFactory, typing.Tuple[Tensor, ...]], TrainStep]


@dataclass(frozen=True)
class Digits:
    """The split and standardised digits: float32 ``(N, 64)`` images and int64 ``(N,)`` labels.

    Attributes:
        train_x: Training images, each pixel standardised with the training set's mean and deviation.
        train_y: Training labels in ``[0, 10)``.
        test_x: Held-out images, standardised with the training set's statistics.
        test_y: Held-out labels.
    """

    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor


def load(seed_split: int = 0) -> Digits:
    """The digits split into 1437 training and 360 held-out images, stratified by class.

    Args:
        seed_split: Seed of the split; the same seed gives the same split on every call and process.

    Returns:
        The standardised split.
    """
    # Imported here so that the other models of the zoo import without scikit-learn installed.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    images, labels = load_digits(return_X_y=True)
    train_x, test_x, train_y, test_y = train_test_split(
        images, labels, test_size=HELD_OUT, stratify=labels, random_state=seed_split
    )
    mean = train_x.mean(axis=0)
    std = train_x.std(axis=0)
    # Some border pixels are blank in every training image: their deviation is 0. Dividing by 1 there
    # keeps them at 0 after centring instead of turning them into NaN or infinities.
    std[std == 0] = 1.0

    def features(x: np.ndarray) -> Tensor:
        return torch.from_numpy(((x - mean) / std).astype(np.float32))

    def classes(y: np.ndarray) -> Tensor:
        return torch.from_numpy(y.astype(np.int64))

    return Digits(features(train_x), classes(train_y), features(test_x), classes(test_y))


def mlp(seed: int, hidden: int = HIDDEN) -> nn.Sequential:
    """The classifier, 64 -> ``hidden`` -> ReLU -> 10 logits, with weights that depend only on ``seed``.

    Seeding happens on a forked RNG, so the caller's global torch RNG state is left untouched.
    """
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, CLASSES))


def optimizer(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """SGD with momentum, the optimizer of the digits runs."""
    return torch.optim.SGD(params, lr=_LEARNING_RATE, momentum=_MOMENTUM)


def accuracy(logits: Tensor, labels: Tensor) -> float:
    """Fraction of ``(N, classes)`` ``logits`` whose highest score is at the ``(N,)`` ``labels``.

    Raises:
        ValueError: If the shapes do not pair one row of logits with each label.
    """
    if logits.dim() != 2 or logits.shape[0] != labels.shape[0] or labels.dim() != 1:
        msg = (
            f"accuracy: logits of shape {tuple(logits.shape)} do not pair with labels of shape "
            f"{tuple(labels.shape)}; expected (N, classes) and (N,)"
        )
        raise ValueError(msg)
    return float((logits.argmax(dim=1) == labels).double().mean())


def _check(seed: int, batch: int, rank: int, world_size: int, train_size: int) -> None:
    """Reject a run that cannot be sharded, naming the values."""
    if world_size < 1:
        msg = f"DigitsRun: world_size={world_size} must be >= 1 (the number of processes)"
        raise ValueError(msg)
    if not 0 <= rank < world_size:
        msg = f"DigitsRun: rank={rank} must be in [0, world_size={world_size}); pass the process's own rank"
        raise ValueError(msg)
    if seed < 0:
        msg = f"DigitsRun: seed={seed} must be >= 0"
        raise ValueError(msg)
    if batch < 1:
        msg = f"DigitsRun: batch={batch} must be >= 1"
        raise ValueError(msg)
    if batch * world_size > train_size:
        msg = (
            f"DigitsRun: batch={batch} on world_size={world_size} processes needs more than the {train_size} "
            "training images for one step; pass a smaller batch"
        )
        raise ValueError(msg)


class DigitsRun:
    """One seeded training run on the digits, as one process of ``world_size`` sees it.

    Each epoch shuffles the training set with a generator seeded by the run's seed and the epoch
    number, so every rank draws the same permutation. The permutation is cut into full batches (the
    compiled steps of the studies take one batch shape, and every rank must make the same number of
    steps, or a distributed step waits forever for the ranks that stopped); rank ``r`` trains on batches
    ``r, r + world_size, ...``. The tail of fewer than ``batch x world_size`` images is left out of that
    epoch only: the next permutation leaves out others.
    """

    def __init__(
        self, step: TrainStep, data: Digits, seed: int, batch: int, rank: int = 0, world_size: int = 1
    ) -> None:
        """Wrap ``step``; see :func:`make_run`, which builds the step too.

        Raises:
            ValueError: If ``rank`` is not in ``[0, world_size)``, ``world_size`` is below 1, ``seed`` is
                negative, or ``batch x world_size`` is not between 1 and the training set's size.
        """
        _check(seed, batch, rank, world_size, len(data.train_y))
        self.step = step
        self.data = data
        self.seed = seed
        self.batch = batch
        self.rank = rank
        self.world_size = world_size
        #: Epochs trained so far: the number of the next epoch.
        self.epochs = 0

    @property
    def steps_per_epoch(self) -> int:
        """Steps each process makes in one epoch (the same on every rank)."""
        return len(self.data.train_y) // (self.batch * self.world_size)

    def shard(self, epoch: int) -> list[Tensor]:
        """The training-set indices of this rank's batches in ``epoch``, in training order."""
        # SeedSequence mixes (seed, epoch) into independent streams: seed 1's epoch 0 is not seed 0's
        # epoch 1, which a sum or a product of the two would make it.
        state = np.random.SeedSequence([self.seed, epoch]).generate_state(1, dtype=np.uint64)[0]
        generator = torch.Generator().manual_seed(int(state))
        order = torch.randperm(len(self.data.train_y), generator=generator)
        batches = order[: self.steps_per_epoch * self.world_size * self.batch].view(-1, self.batch)
        return list(batches[self.rank :: self.world_size])

    def train_epoch(self) -> int:
        """Train one epoch of this rank's shard; the number of images this process trained on."""
        seen = 0
        for indices in self.shard(self.epochs):
            self.step(self.data.train_x[indices], self.data.train_y[indices])
            seen += len(indices)
        self.epochs += 1
        return seen

    def evaluate(self) -> float:
        """Held-out accuracy of the step's trained model, in [0, 1].

        Raises:
            TypeError: If the step's ``evaluate`` is ``None``.

        Every rank scores the whole held-out set; the replicas of a distributed step hold the same
        weights, so every rank gets the same figure and all stop at the same epoch.
        """
        evaluate = self.step.evaluate
        if evaluate is None:
            msg = (
                f"DigitsRun: the training step {type(self.step).__name__} has no evaluate, so its trained "
                "model cannot be scored; build the step with ipu_train"
            )
            raise TypeError(msg)
        logits = torch.as_tensor(evaluate(self.data.test_x))
        return accuracy(logits, self.data.test_y)


def make_run(
    step_factory: StepFactory, data: Digits, seed: int, batch: int, rank: int = 0, world_size: int = 1
) -> DigitsRun:
    """Build the classifier from ``seed``, its training step, and the run that feeds it.

    Args:
        step_factory: Builds the step from the model, ``cross_entropy``, :func:`optimizer` and an
            example ``(images, labels)`` batch of ``batch`` rows.
        data: The split from :func:`load`.
        seed: Seeds the weights and every epoch's shuffle; the same on every rank.
        batch: Images per step on this process.
        rank: This process's rank.
        world_size: Number of processes training together.

    Raises:
        ValueError: As :class:`DigitsRun`, before the step is built.
    """
    _check(seed, batch, rank, world_size, len(data.train_y))
    example = (data.train_x[:batch], data.train_y[:batch])
    step = step_factory(mlp(seed), functional.cross_entropy, optimizer, example)
    return DigitsRun(step, data, seed, batch, rank, world_size)
