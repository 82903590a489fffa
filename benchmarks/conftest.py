"""Fixtures of the benchmark studies: the model zoo and deterministic inputs."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

import pytest

from benchmarks.models import resnext

#: The batch sizes of the reference study (ResNeXt-101 on a C2 card: 2 to 12).
BATCH_SIZES = (2, 4, 6, 8, 10, 12)
IMAGE_SHAPE = (3, 224, 224)


# PopART refuses to import once onnx is imported (an SDK quirk, docs/ipu.md). Importing it first, where
# the SDK is enabled, lets the popart targets run in the same session as the ONNX Runtime ones.
with contextlib.suppress(Exception):
    importlib.import_module("popart")

_REPORT = pytest.StashKey[dict[str, list[str]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Study options: which ResNeXt-101 variant to run, and whether gate-accuracy targets are enforced."""
    parser.addoption(
        "--resnext-variant",
        default="32x4d",
        choices=sorted(resnext.VARIANTS),
        help="ResNeXt-101 variant of the inference study (default: 32x4d)",
    )
    parser.addoption(
        "--gate-accuracy-strict",
        action="store_true",
        default=False,
        help="fail test_gate_accuracy when a rule misses its target (default: report only; "
        "or set PYTEST_IPU_GATE_ACCURACY_STRICT=1)",
    )


@pytest.fixture(scope="session")
def study_report(request: pytest.FixtureRequest) -> dict[str, list[str]]:
    """Lines a study wants printed at the end of the run, by section title (in insertion order).

    The figures the harness and power benchmarks measure side by side go here, so that one run
    prints them together after the tables.
    """
    return request.config.stash.setdefault(_REPORT, {})


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Print each study's report section."""
    for title, lines in config.stash.get(_REPORT, {}).items():
        terminalreporter.section(title)
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def resnext_variant(request: pytest.FixtureRequest) -> str:
    """The ResNeXt-101 variant chosen with --resnext-variant."""
    return str(request.config.getoption("--resnext-variant"))


@pytest.fixture(scope="session")
def resnext101(resnext_variant: str) -> Any:
    """ResNeXt-101 with seeded random weights, built once per run (backends copy it, never change it)."""
    return resnext.build(resnext_variant, seed=0)


def image_batch(batch_size: int, seed: int = 0) -> Any:
    """A deterministic batch of ``batch_size`` normalised random images, float32, NCHW."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randn((batch_size, *IMAGE_SHAPE), generator=generator)
