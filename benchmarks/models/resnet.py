"""ResNet-50 and synthetic ImageNet-shaped batches for the project's training studies.

ResNet-50 (He et al., 2016, "Deep Residual Learning for Image Recognition") in the "v1.5" layout of
the common ImageNet implementation is a ResNeXt whose 3x3 convolutions have one group of 64 channels
in the first stage, so the network is built by :class:`benchmarks.models.resnext.ResNeXt` rather than
by a second copy of the bottleneck block. Weights are random and batches synthetic: the training
studies measure the cost of a step, not what the network learns.
"""

from __future__ import annotations

import torch
from torch import Tensor

from benchmarks.models.resnext import ResNeXt

__all__ = ["CLASSES", "RESNET50_PARAMETERS", "build", "resnet50", "training_batch"]

#: Blocks per stage of ResNet-50.
_RESNET50_LAYERS: tuple[int, int, int, int] = (3, 4, 6, 3)

#: Classes of ImageNet-1k, the classifier's output size.
CLASSES = 1000

#: Parameters of ResNet-50 with 1000 classes, as published in torchvision's ``resnet50``
#: documentation (``ResNet50_Weights.IMAGENET1K_V1``, "num_params"). The reference the architecture
#: built here is checked against.
RESNET50_PARAMETERS = 25_557_032


def resnet50(num_classes: int = CLASSES) -> ResNeXt:
    """ResNet-50 v1.5: bottleneck stages of [3, 4, 6, 3] blocks, the stride on each 3x3 convolution.

    Args:
        num_classes: Size of the classification output.

    Returns:
        The network in training mode, initialised from the global torch RNG.
    """
    # groups=1 with 64 channels per group makes every bottleneck's inner width equal to its planes:
    # exactly the plain ResNet bottleneck.
    return ResNeXt(_RESNET50_LAYERS, groups=1, width_per_group=64, num_classes=num_classes)


def build(seed: int = 0, num_classes: int = CLASSES) -> ResNeXt:
    """ResNet-50 with weights that depend only on ``seed``, in training mode.

    Seeding happens on a forked RNG, so the caller's global torch RNG state is left untouched.

    Args:
        seed: Seed for the random weight initialisation.
        num_classes: Size of the classification output.
    """
    # fork_rng also saves and restores the accelerator generators, which manual_seed reseeds too.
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = resnet50(num_classes)
    return model.train()


def training_batch(batch: int, image: int, seed: int, *, classes: int = CLASSES) -> tuple[Tensor, Tensor]:
    """A synthetic ImageNet-shaped training batch that depends only on its arguments.

    Args:
        batch: Images in the batch (>= 1).
        image: Height and width of the square images in pixels (>= 1).
        seed: Seed of the batch's own generator (the global RNG is not used).
        classes: Labels are drawn from ``[0, classes)``.

    Returns:
        ``(images, labels)``: float32 ``(batch, 3, image, image)`` drawn from a standard normal (the
        statistics of normalised images), and int64 ``(batch,)`` labels.

    Raises:
        ValueError: If ``batch``, ``image`` or ``classes`` is below 1.
    """
    for name, value in (("batch", batch), ("image", image), ("classes", classes)):
        if value < 1:
            msg = f"training_batch: {name}={value} must be >= 1; pass a positive whole number"
            raise ValueError(msg)
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn((batch, 3, image, image), generator=generator)
    labels = torch.randint(0, classes, (batch,), generator=generator)
    return images, labels
