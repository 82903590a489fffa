"""A family of twenty small benchmarks for the gate-recipe study (``test_gate_recipe.py``): pure
Python, numpy and torch, ten through pytest-benchmark's own ``benchmark`` fixture (seven plain
calls, three ``benchmark.pedantic``) and ten through pytest-ipu's ``ipu_benchmark`` (six callables,
four torch models through ``ipu_compile``). Not collected by ``make bench`` itself: the study copies
its two files into the ``benchmarks/`` folder of a throwaway git repository and runs them there
through the CI recipe's workflow, as a team's own suite. The torch models run on ``torch:cpu``
(their marker), so that the family is twenty benchmarks on any machine.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from slow import SLOW  # type: ignore[import-not-found]

_RNG = np.random.default_rng(0)
_FLOATS = _RNG.standard_normal(20_000)
_MATRIX = _RNG.standard_normal((96, 96))
_SIGNAL = _RNG.standard_normal(4096)
_WORDS = [f"word{i}" for i in range(2000)]
_ITEMS = list(range(3000, 0, -1))
_DOC = {f"k{i}": [i, str(i), {"x": i * 0.5}] for i in range(300)}
_TEXT = " ".join(_WORDS)
_PATTERN = re.compile(r"word(\d*7)\b")


def _factor(name: str) -> float:
    return float(SLOW.get(name, SLOW.get("*", 1.0)))


def _stretched(name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn``, every call stretched to exactly ``SLOW[name]`` times its own duration (1: as is)."""
    factor = _factor(name)
    if factor == 1.0:
        return fn
    clock = time.perf_counter_ns

    def call() -> Any:
        start = clock()
        out = fn()
        end = start + int((clock() - start) * factor)
        while clock() < end:
            pass
        return out

    return call


WORK: dict[str, Callable[[], Any]] = {
    "py_sum": lambda: sum(i * i for i in range(4000)),
    "py_sort": lambda: sorted(_ITEMS),
    "py_dict": lambda: {w: i for i, w in enumerate(_WORDS)},
    "py_join": lambda: ",".join(_WORDS),
    "py_json": lambda: json.dumps(_DOC),
    "py_regex": lambda: _PATTERN.findall(_TEXT),
    "np_sort": lambda: np.sort(_FLOATS),
    "np_cumsum": lambda: np.cumsum(_FLOATS),
    "np_matmul": lambda: _MATRIX @ _MATRIX,
    "np_fft": lambda: np.fft.rfft(_SIGNAL),
}
PLAIN = ["py_sum", "py_sort", "py_dict", "py_json", "np_sort", "np_matmul", "np_fft"]
PEDANTIC = ["py_join", "py_regex", "np_cumsum"]
IPU = ["py_sum", "py_sort", "py_json", "np_sort", "np_fft", "np_matmul"]


@pytest.mark.parametrize("name", PLAIN)
def test_plain(benchmark: Any, name: str) -> None:
    benchmark(_stretched(f"plain-{name}", WORK[name]))


@pytest.mark.parametrize("name", PEDANTIC)
def test_pedantic(benchmark: Any, name: str) -> None:
    benchmark.pedantic(_stretched(f"pedantic-{name}", WORK[name]), rounds=100, iterations=5, warmup_rounds=10)


@pytest.mark.parametrize("name", IPU)
def test_ipu(ipu_benchmark: Any, name: str) -> None:
    ipu_benchmark(_stretched(f"ipu-{name}", WORK[name]), ())


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


TORCH: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]] = {
    "mlp": (_Mlp, (8, 64)),
    "conv": (lambda: torch.nn.Conv2d(3, 8, 3), (2, 3, 16, 16)),
    "softmax": (lambda: torch.nn.Softmax(dim=-1), (16, 256)),
    "layernorm": (lambda: torch.nn.LayerNorm(256), (16, 256)),
}


@pytest.mark.ipu(backend="torch:cpu")
@pytest.mark.parametrize("name", sorted(TORCH))
def test_torch(ipu_compile: Any, ipu_benchmark: Any, name: str) -> None:
    make, shape = TORCH[name]
    torch.manual_seed(0)
    x = torch.randn(*shape)
    compiled = ipu_compile(make().eval(), (x,))
    if _factor(f"torch-{name}") == 1.0:
        ipu_benchmark(compiled, (x,))
    else:
        ipu_benchmark(_stretched(f"torch-{name}", lambda: compiled(x)), (), items_per_call=shape[0])
