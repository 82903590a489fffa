"""Fixtures of the benchmark studies: the model zoo and deterministic inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from benchmarks.models import resnext

#: The batch sizes of the reference study (ResNeXt-101 on a C2 card: 2 to 12).
BATCH_SIZES = (2, 4, 6, 8, 10, 12)
IMAGE_SHAPE = (3, 224, 224)


@dataclass(frozen=True)
class HarnessCost:
    """The harness-overhead benchmark's result for one workload (nanoseconds per round)."""

    workload: str
    rounds: int
    bare_ns: float
    harness_ns: float
    #: The throughput window divided by the rounds: the call plus pytest-benchmark's bookkeeping.
    window_per_round_ns: float

    @property
    def added_ns(self) -> float:
        """What ipu_benchmark adds to a round's median."""
        return self.harness_ns - self.bare_ns

    @property
    def ratio(self) -> float:
        """ipu_benchmark's median over the bare loop's."""
        return self.harness_ns / self.bare_ns


_HARNESS_COSTS = pytest.StashKey[list[HarnessCost]]()
#: Targets of the harness-overhead benchmark: added time per round, and the ratio at ~1 ms.
MAX_ADDED_NS = 2_000.0
MAX_RATIO_AT_1MS = 1.02


def pytest_addoption(parser: pytest.Parser) -> None:
    """Study options: which ResNeXt-101 variant to run."""
    parser.addoption(
        "--resnext-variant",
        default="32x4d",
        choices=sorted(resnext.VARIANTS),
        help="ResNeXt-101 variant of the inference study (default: 32x4d)",
    )


@pytest.fixture(scope="session")
def harness_costs(request: pytest.FixtureRequest) -> list[HarnessCost]:
    """Where the harness-overhead benchmark leaves its figures for the terminal summary."""
    return request.config.stash.setdefault(_HARNESS_COSTS, [])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Print the harness-overhead figures, each against its target."""
    costs = config.stash.get(_HARNESS_COSTS, [])
    if not costs:
        return
    terminalreporter.section("harness overhead (ipu_benchmark vs bare perf_counter_ns loop, medians)")
    for c in costs:
        verdict = "meets" if c.added_ns <= MAX_ADDED_NS else "MISSES"
        line = (
            f"{c.workload:>5}: bare {c.bare_ns:,.0f} ns, ipu_benchmark {c.harness_ns:,.0f} ns, "
            f"added {c.added_ns:+,.0f} ns/round ({verdict} <= {MAX_ADDED_NS:,.0f} ns), ratio {c.ratio:.4f}"
        )
        if c.workload == "1ms":
            line += f" ({'meets' if c.ratio <= MAX_RATIO_AT_1MS else 'MISSES'} <= {MAX_RATIO_AT_1MS})"
        terminalreporter.write_line(
            f"{line}; wall window {c.window_per_round_ns:,.0f} ns/round "
            f"({c.window_per_round_ns - c.harness_ns:+,.0f} ns between rounds); {c.rounds} rounds"
        )


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
