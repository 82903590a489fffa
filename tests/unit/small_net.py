"""A small convolutional model the ONNX-path backend tests share: its inputs and its eager outputs."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")


class SmallNet(torch.nn.Module):
    """Conv, ReLU, global mean, linear: every op the exporters and runtimes under test handle."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def small_net() -> SmallNet:
    """The model with seeded weights, in eval mode."""
    torch.manual_seed(0)
    return SmallNet().eval()


def inputs(batch: int) -> torch.Tensor:
    """A seeded batch of ``batch`` 3x6x6 images."""
    torch.manual_seed(batch)
    return torch.randn(batch, 3, 6, 6)


def eager(x: torch.Tensor) -> np.ndarray:
    """``small_net()``'s outputs on ``x``, eager fp32."""
    with torch.inference_mode():
        return small_net()(x).numpy()
