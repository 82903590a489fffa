"""What every power source provides: devices, readings of one kind, and a sensor update period.

No vendor library is imported here. Sources import theirs lazily (or take it injected, for tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Literal
from typing import Protocol
from typing import runtime_checkable

from pytest_ipu.backends.base import Availability
from pytest_ipu.errors import PytestIpuError

#: What ``PowerSource.read`` returns for each device.
#:
#: - ``energy_counter``: cumulative joules since ``open`` (the source unwraps hardware wraparound);
#: - ``instant_power``: watts at the moment of the read;
#: - ``average_power``: watts averaged over the sensor's update period ending at the read.
ReadingKind = Literal["energy_counter", "instant_power", "average_power"]


class PowerSourceError(PytestIpuError):
    """A power source failed while open (a read error, a counter reset); the window is invalid."""


class CounterReset(PowerSourceError):
    """An energy counter went backwards in a way one wraparound cannot explain."""


@dataclass(frozen=True)
class PowerDevice:
    """One thing a source measures, identified stably.

    ``id`` is stable across runs and processes: ``nvml:GPU-<uuid>``, ``rapl:package-0``,
    ``gcipuinfo:board-<serial>``. ``scope`` says what the reading covers: ``gpu`` (the GPU board
    as NVML reports it), ``cpu-package``, ``dram``, ``ipu`` (one IPU) or ``ipu-board`` (a board
    shared by several IPUs, counted once). For IPUs, ``ipus`` are the IPU ids the reading covers
    (the one IPU, or every IPU on the board) and ``unused_ipus`` those of them the source was not
    asked to measure, whose power a board reading includes all the same.
    """

    id: str
    name: str
    scope: str
    ipus: tuple[int, ...] = ()
    unused_ipus: tuple[int, ...] = ()


class PowerSource(Protocol):
    """A vendor's power or energy readings for a set of devices.

    ``open`` acquires handles and returns the devices; ``read`` returns one value per device id, of
    the source's ``kind``; ``close`` releases everything and is safe to call twice. Sources never
    sleep, spawn threads or integrate: the sampler does the timing and ``energy`` the integration.
    """

    @property
    def name(self) -> str:
        """``nvml``, ``rapl`` or ``gcipuinfo``."""

    @property
    def kind(self) -> ReadingKind:
        """What ``read`` returns (see ``ReadingKind``)."""

    def availability(self) -> Availability:
        """Whether the library and readable devices are present; never raises."""

    def open(self) -> list[PowerDevice]:
        """Acquire the devices; raises ``PowerSourceError`` naming what failed."""

    def read(self) -> Mapping[str, float]:
        """One reading per device id: joules since ``open`` or watts, by ``kind``."""

    def update_period_s(self) -> float | None:
        """The sensor's update period if known (documented or discovered), else ``None``."""

    def describe(self) -> dict[str, Any]:
        """Library and driver versions, power limits and the like, as plain JSON values."""

    def close(self) -> None:
        """Release every handle; idempotent."""


@runtime_checkable
class ProcessIpus(Protocol):
    """A source that can say which IPUs processes use (gcipuinfo's ``"user process id"``): how a
    model whose backend let the SDK choose its IPUs is metered on exactly them."""

    def ipus_used_by(self, pids: Sequence[int]) -> tuple[int, ...]:
        """The IPUs of the partition that one of ``pids`` uses, ascending (empty when none is);
        ``PowerSourceError`` when the listing cannot be read. Needs no ``open``."""
