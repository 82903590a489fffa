"""ResNeXt-101 model used by the project's inference studies.

A plain-PyTorch implementation of the ResNeXt bottleneck network (Xie et al.,
2017, "Aggregated Residual Transformations for Deep Neural Networks") in the
layout of the common ImageNet implementation. Weights are random: nothing is
downloaded, because the studies measure throughput and latency, not accuracy.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence

import torch
from torch import Tensor
from torch import nn

__all__ = [
    "VARIANTS",
    "Bottleneck",
    "ResNeXt",
    "build",
    "resnext101_32x4d",
    "resnext101_32x8d",
]

# Depth of ResNeXt-101: blocks per stage.
_RESNEXT101_LAYERS: tuple[int, int, int, int] = (3, 4, 23, 3)


class Bottleneck(nn.Module):
    """ResNeXt bottleneck block: 1x1 reduce, grouped 3x3, 1x1 expand.

    The stride sits on the grouped 3x3 convolution (the "ResNet v1.5" layout
    of the common ImageNet implementation), not on the first 1x1 convolution.
    """

    expansion: int = 4

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int,
        groups: int,
        base_width: int,
        downsample: nn.Module | None,
    ) -> None:
        """Create a block mapping ``inplanes`` channels to ``planes * 4``.

        Args:
            inplanes: Number of input channels.
            planes: Bottleneck base channel count; output is ``planes * 4``.
            stride: Spatial stride of the grouped 3x3 convolution.
            groups: Cardinality, the number of groups in the 3x3 convolution.
            base_width: Channels per group when ``planes == 64``.
            downsample: Projection for the shortcut when shapes differ, or
                ``None`` for an identity shortcut.
        """
        super().__init__()
        # The inner width scales with the stage so every stage keeps the same
        # channels-per-group ratio relative to its planes.
        width = int(planes * base_width / 64) * groups
        out_channels = planes * self.expansion
        # Convolutions have no bias: the following BatchNorm supplies one.
        self.conv1 = nn.Conv2d(inplanes, width, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(
            width,
            width,
            kernel_size=3,
            stride=stride,
            padding=1,
            groups=groups,
            bias=False,
        )
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block to a ``(N, C, H, W)`` tensor."""
        identity: Tensor = x if self.downsample is None else self.downsample(x)
        out: Tensor = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out = out + identity
        result: Tensor = self.relu(out)
        return result


class ResNeXt(nn.Module):
    """ResNeXt image classifier built from :class:`Bottleneck` blocks."""

    def __init__(
        self,
        layers: Sequence[int],
        groups: int,
        width_per_group: int,
        num_classes: int = 1000,
    ) -> None:
        """Build the network.

        Args:
            layers: Number of bottleneck blocks in each of the four stages.
            groups: Cardinality of the grouped 3x3 convolutions.
            width_per_group: Channels per group in the first stage.
            num_classes: Size of the classification output.

        Raises:
            ValueError: If ``layers`` does not have exactly four entries.
        """
        super().__init__()
        if len(layers) != 4:
            msg = f"ResNeXt needs 4 stage depths, got {len(layers)}: {list(layers)}"
            raise ValueError(msg)
        self.groups = groups
        self.base_width = width_per_group
        self.inplanes = 64

        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        # The first stage keeps resolution because the stem already
        # downsampled by 4; each later stage halves it.
        self.layer1 = self._make_layer(64, layers[0], stride=1)
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)

        self._init_weights()

    def _make_layer(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        """Stack ``blocks`` bottlenecks; only the first may change shape."""
        out_channels = planes * Bottleneck.expansion
        downsample: nn.Module | None = None
        if stride != 1 or self.inplanes != out_channels:
            downsample = nn.Sequential(
                nn.Conv2d(
                    self.inplanes,
                    out_channels,
                    kernel_size=1,
                    stride=stride,
                    bias=False,
                ),
                nn.BatchNorm2d(out_channels),
            )
        stage: list[nn.Module] = [
            Bottleneck(
                self.inplanes,
                planes,
                stride,
                self.groups,
                self.base_width,
                downsample,
            )
        ]
        self.inplanes = out_channels
        stage.extend(
            Bottleneck(
                self.inplanes,
                planes,
                1,
                self.groups,
                self.base_width,
                None,
            )
            for _ in range(1, blocks)
        )
        return nn.Sequential(*stage)

    def _init_weights(self) -> None:
        """Initialise weights so random-weight inference stays well behaved.

        The last BatchNorm of each block keeps gamma = 1 (no zero-init): that
        trick only helps training, and with it every residual branch would be
        silenced, making inference on random weights far less representative.
        """
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: Tensor) -> Tensor:
        """Classify a ``(N, 3, H, W)`` batch into ``(N, num_classes)`` logits."""
        out: Tensor = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        out = self.layer4(out)
        out = torch.flatten(self.avgpool(out), 1)
        logits: Tensor = self.fc(out)
        return logits


def resnext101_32x4d(num_classes: int = 1000) -> ResNeXt:
    """ResNeXt-101 with cardinality 32 and 4 channels per group (44.2M params)."""
    return ResNeXt(_RESNEXT101_LAYERS, groups=32, width_per_group=4, num_classes=num_classes)


def resnext101_32x8d(num_classes: int = 1000) -> ResNeXt:
    """ResNeXt-101 with cardinality 32 and 8 channels per group (88.8M params)."""
    return ResNeXt(_RESNEXT101_LAYERS, groups=32, width_per_group=8, num_classes=num_classes)


VARIANTS: dict[str, Callable[[], ResNeXt]] = {
    "32x4d": resnext101_32x4d,
    "32x8d": resnext101_32x8d,
}
"""Constructors for the supported ResNeXt-101 variants, keyed by name."""


def build(variant: str, seed: int = 0) -> ResNeXt:
    """Build a ResNeXt-101 variant with reproducible random weights.

    The weights depend only on ``variant`` and ``seed``. Seeding happens on a
    forked RNG so the caller's global torch RNG state is left untouched.

    Args:
        variant: A key of :data:`VARIANTS`, e.g. ``"32x4d"``.
        seed: Seed for the random weight initialisation.

    Returns:
        The model in eval mode, so BatchNorm uses its running statistics.

    Raises:
        ValueError: If ``variant`` is not a key of :data:`VARIANTS`.
    """
    try:
        factory = VARIANTS[variant]
    except KeyError:
        allowed = ", ".join(repr(name) for name in sorted(VARIANTS))
        msg = f"unknown ResNeXt-101 variant {variant!r}; expected one of {allowed}"
        raise ValueError(msg) from None
    # fork_rng also saves and restores the accelerator generators, because
    # manual_seed reseeds those too and would otherwise leak the seed.
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = factory()
    return model.eval()
