"""What a gate reads of a benchmark, whichever fixture measured it: the typed views the decision
(``decide``) takes.

A benchmark is gated from a pytest-ipu record (``records.IpuRecord``, from ``ipu_benchmark`` and the
other pytest-ipu fixtures) or from what pytest-benchmark keeps of a benchmark of its own
``benchmark`` fixture (``plain.PlainBenchmark``). Both give a metric's value, its independent
measurements, why a value is missing and, where every metric has one value per run, why: the
decision reads nothing else, so neither is dressed up as the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Protocol

if TYPE_CHECKING:
    from pytest_ipu.results.gates import Gate


class Gated(Protocol):
    """A benchmark's figures as a gate reads them."""

    @property
    def device_name(self) -> str | None:
        """The device's own name (CPU or accelerator model); ``None`` where it is not known."""

    def value(self, metric: str) -> float | None:
        """The metric's value (SI units), ``None`` when there is none (``why_missing`` says why)."""

    def repeat_values(self, metric: str) -> tuple[float, ...]:
        """The metric's independent measurements in this run: each repeat's, or its one value."""

    def why_missing(self, metric: str) -> str:
        """Why there is no value for ``metric``, as a verdict says it."""

    def no_repeats(self) -> str | None:
        """Why every metric has one value per run (the cause a verdict names when that leaves no
        variance estimate); ``None`` where repeats may give more."""


class Candidate(Protocol):
    """A benchmark of the run being gated: its name, full name (what pairs it with the baseline's),
    figures and its own gates (its marker's)."""

    @property
    def fullname(self) -> str:
        """pytest's node id (pytest-benchmark's ``fullname``)."""

    @property
    def name(self) -> str:
        """The name verdicts show."""

    @property
    def record(self) -> Gated:
        """Its figures."""

    @property
    def gates(self) -> tuple[Gate, ...]:
        """Its own gates, which replace the run's on the same metric."""
