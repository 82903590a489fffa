"""The run's samples of its machine's speed (``measure.machine_speed``), taken where the run is.

``lifecycle`` samples before each benchmark test's call when one is due (the first benchmark
always; then at most one every ``machine_speed.SPACING_S`` seconds), and once more when
pytest-benchmark writes its document, whose top-level ``pytest_ipu`` section keeps the samples
(``machine_speed``, docs/json-schema.md). The gates read the samples so far
(``results.level_shift``). A repeat worker process does not sample: the process that started it
writes the document and gates.

Loaded when the first benchmark runs or a document is written, never at pytest's start-up.
"""

from __future__ import annotations

import os

from pytest_ipu.measure.contention import ContentionProbe
from pytest_ipu.measure.machine_speed import MachineSpeed
from pytest_ipu.measure.machine_speed import SpeedProbe


def load_avg_1m() -> float | None:
    """The 1-minute load average; ``None`` where the system does not give one (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def new_probe() -> SpeedProbe:
    """The probe a run samples with: the reference kernels on the performance clock, the load average
    and /proc's CPU shares (a test's conftest may give one on a fake clock instead)."""
    return SpeedProbe(load=load_avg_1m, contention=ContentionProbe())


class RunSpeed:
    """The samples of one run: ``between`` before a benchmark, ``final`` for the document."""

    def __init__(self, probe: SpeedProbe | None = None) -> None:
        self.probe = probe if probe is not None else new_probe()
        self._final = False

    def between(self) -> None:
        """Before a benchmark: take a sample when one is due."""
        if not self._final and self.probe.due():
            self.probe.sample()

    def current(self) -> MachineSpeed | None:
        """The samples so far (``None`` before the first)."""
        return self.probe.result()

    def final(self) -> MachineSpeed | None:
        """The run's samples with one taken at its end (once, however often the document is written)."""
        if not self._final:
            self._final = True
            self.probe.sample()
        return self.probe.result()
