"""Training steps: ResNet-50 (SGD with momentum) and BERT (AdamW), samples per second per step.

One step is what a training loop does per batch: zero the gradients, forward, loss, backward,
optimizer step, and the loss read back to the host. ``ipu_train`` compiles it for each target that
``--ipu-backend`` selects and ``ipu_benchmark`` times it. Under ``torchrun --nproc-per-node=N`` the
step is data parallel (DistributedDataParallel) and every rank trains on its own seeded batch of
the same size, so the global batch is N times the batch named in the test id; run with
``--ipu-scaling-baseline`` pointing at the 1-process run's JSON, each record also gets its scaling
efficiency. ``--training-size``, ``--training-image`` and ``--training-batches`` choose the sizes
(``benchmarks/conftest.py``); ``make bench-training`` runs the study on 1 and 2 processes.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from benchmarks.conftest import TrainingSize
from benchmarks.conftest import training_size
from benchmarks.models import bert
from benchmarks.models import resnet

#: SGD with momentum for ResNet-50, MLPerf's reference optimizer for it; a learning rate small
#: enough that repeated steps on one random-labelled batch of 4 stay finite.
RESNET_LR = 0.01
RESNET_MOMENTUM = 0.9
RESNET_WEIGHT_DECAY = 5e-5
#: AdamW at BERT's pre-training learning rate and weight decay.
BERT_LR = 1e-4
BERT_WEIGHT_DECAY = 0.01


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One benchmark per batch size of ``--training-size`` (or ``--training-batches``), each with the
    size's timing as its ``@pytest.mark.ipu`` keywords."""
    size = training_size(metafunc.config)
    for name, batches, timing in (
        ("resnet_batch", size.resnet_batches, size.resnet_timing),
        ("bert_batch", size.bert_batches, size.bert_timing),
    ):
        if name in metafunc.fixturenames:
            # The id names the batch only: a run on more processes pairs with its baseline by node id.
            params = [pytest.param(b, marks=pytest.mark.ipu(**timing), id=f"batch{b}") for b in batches]
            metafunc.parametrize(name, params)


@pytest.fixture(scope="session")
def sizes(request: pytest.FixtureRequest) -> TrainingSize:
    """The study's sizes for this run."""
    return training_size(request.config)


@pytest.fixture(scope="session")
def resnet50() -> torch.nn.Module:
    """ResNet-50 with seeded weights, built once per run (``ipu_train`` copies it, never trains it)."""
    return resnet.build(seed=0)


@pytest.fixture(scope="session")
def bert_study() -> torch.nn.Module:
    """The study's BERT with seeded weights, built once per run."""
    return bert.build(bert.BERT_STUDY, seed=0)


def sgd(params: Any) -> torch.optim.Optimizer:
    """ResNet-50's optimizer."""
    return torch.optim.SGD(params, lr=RESNET_LR, momentum=RESNET_MOMENTUM, weight_decay=RESNET_WEIGHT_DECAY)


def adamw(params: Any) -> torch.optim.Optimizer:
    """BERT's optimizer."""
    return torch.optim.AdamW(params, lr=BERT_LR, weight_decay=BERT_WEIGHT_DECAY)


def check_training(record: Any, batch: int, world_size: int, optimizer: str) -> None:
    """What a timed training record must say: the global batch of every rank, the optimizer, and
    a finite loss at the last step."""
    assert record.training.global_batch == batch * world_size
    assert record.training.processes == world_size
    assert record.training.optimizer == optimizer
    assert math.isfinite(record.training.loss_last)
    assert record.throughput_items_per_s > 0


@pytest.mark.benchmark(group="resnet50-training")
def test_resnet50_training_step(
    ipu_train: Any,
    ipu_benchmark: Any,
    ipu_process_group: Any,
    sizes: TrainingSize,
    resnet50: torch.nn.Module,
    resnet_batch: int,
) -> None:
    """One SGD step of ResNet-50 on this rank's synthetic batch."""
    # The architecture is checked before anything is timed: a network with other layers would
    # time something else under ResNet-50's name.
    assert sum(p.numel() for p in resnet50.parameters()) == resnet.RESNET50_PARAMETERS
    # Each rank its own batch: data parallelism over copies of one batch would be a loop, not a study.
    batch = resnet.training_batch(resnet_batch, sizes.resnet_image, seed=ipu_process_group.rank)
    step = ipu_train(resnet50, torch.nn.functional.cross_entropy, sgd, batch)
    record = ipu_benchmark(step, batch)
    if record.timed:
        check_training(record, resnet_batch, ipu_process_group.world_size, "SGD")


@pytest.mark.benchmark(group="bert-training")
def test_bert_training_step(
    ipu_train: Any,
    ipu_benchmark: Any,
    ipu_process_group: Any,
    sizes: TrainingSize,
    bert_study: torch.nn.Module,
    bert_batch: int,
) -> None:
    """One AdamW step of the study's BERT (masked-LM loss) on this rank's synthetic batch."""
    batch = bert.training_batch(bert.BERT_STUDY, bert_batch, sizes.bert_seq, seed=ipu_process_group.rank)
    step = ipu_train(bert_study, bert.mlm_loss, adamw, batch)
    record = ipu_benchmark(step, batch)
    if record.timed:
        check_training(record, bert_batch, ipu_process_group.world_size, "AdamW")
