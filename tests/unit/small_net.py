"""A small convolutional model the ONNX-path backend tests share: its inputs and its eager outputs."""

from __future__ import annotations

import copy
import io
import warnings

import numpy as np
import pytest

from tests.unit.torch_versions import torchscript_exporter

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


def torchscript_onnx(
    model: torch.nn.Module,
    inputs: tuple[object, ...],
    precision: str = "fp32",
    opset: int = 11,
    dynamic: bool = True,
) -> bytes:
    """``model`` as ONNX at an opset PopART imports, from torch's TorchScript exporter (deprecated,
    but the dynamo exporter cannot convert these models below opset 18); inputs ``x``, ``x1``, ...,
    output ``y``, the batch dimension dynamic unless ``dynamic`` is false."""
    module = copy.deepcopy(model).eval()
    args = tuple(torch.as_tensor(x) for x in inputs)
    if precision == "fp16":
        module, args = module.half(), tuple(a.half() for a in args)
    f = io.BytesIO()
    names = [f"x{i}" if i else "x" for i in range(len(args))]
    axes = {name: {0: "batch"} for name in [*names, "y"]} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            f,
            **torchscript_exporter(),
            opset_version=opset,
            input_names=names,
            output_names=["y"],
            dynamic_axes=axes,
        )
    return f.getvalue()
