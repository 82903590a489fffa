"""A deterministic ``PowerSource``: constant power per device, reported as any ``ReadingKind``.

``watts`` is one number (one device, ``fake:0``) or a mapping ``device id -> watts``. Readings are
exact for constant power: ``instant_power`` and ``average_power`` return the watts themselves, and
``energy_counter`` returns ``watts x (clock() - clock at open)`` joules (a counter with any
wraparound already unwrapped, as the protocol requires). The clock is injectable, so a test can
drive time itself; ``on_read(index)`` runs inside each read (after the values are taken), which lets
a test make a read take time on a fake clock. ``read_error_at`` makes that read (and, with
``persistent``, every later one) raise ``PowerSourceError``. The source counts its opens, reads
and ``close`` calls, and calls ``on_close`` on the first one. Reading a closed source raises, as real
sources do.

This module imports nothing but pytest-ipu and the standard library, so plugin tests can copy it
into a pytester directory and import it from a conftest there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from pytest_ipu.backends.base import Availability
from pytest_ipu.power.base import PowerDevice
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.power.base import ReadingKind


class FakePowerSource:
    """Constant power of one or more devices, as ``kind`` readings (see the module docstring)."""

    def __init__(
        self,
        kind: ReadingKind = "instant_power",
        watts: float | Mapping[str, float] = 50.0,
        *,
        name: str = "fake",
        update_period_s: float | None = 0.01,
        clock: Callable[[], int] = time.perf_counter_ns,
        unavailable: str = "",
        open_error: str = "",
        read_error_at: int | None = None,
        persistent: bool = False,
        on_read: Callable[[int], None] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._kind: ReadingKind = kind
        self.watts: dict[str, float] = (
            {"fake:0": float(watts)} if isinstance(watts, (int, float)) else dict(watts)
        )
        self._name = name
        self._period = update_period_s
        self._clock = clock
        self._unavailable = unavailable
        self._open_error = open_error
        self._read_error_at = read_error_at
        self._persistent = persistent
        self._on_read = on_read
        self._on_close = on_close
        self._opened_ns: int | None = None
        self.opens = 0
        self.reads = 0
        self.closes = 0
        #: The clock at the start of every read, in order (failed reads included).
        self.read_started_ns: list[int] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def kind(self) -> ReadingKind:
        return self._kind

    def availability(self) -> Availability:
        return Availability.no(self._unavailable) if self._unavailable else Availability.yes()

    def open(self) -> list[PowerDevice]:
        self.opens += 1
        if self._open_error:
            raise PowerSourceError(self._open_error)
        self._opened_ns = self._clock()
        return [PowerDevice(device_id, f"fake device {device_id}", "cpu-package") for device_id in self.watts]

    def read(self) -> Mapping[str, float]:
        index = self.reads
        self.reads += 1
        now = self._clock()
        self.read_started_ns.append(now)
        if self._opened_ns is None:
            raise PowerSourceError(f"{self._name}: read() on a source that is not open")
        if self._read_error_at is not None and (
            index == self._read_error_at or (self._persistent and index > self._read_error_at)
        ):
            raise PowerSourceError(f"{self._name}: read {index} failed")
        if self._kind == "energy_counter":
            elapsed_s = (now - self._opened_ns) * 1e-9
            values = {d: w * elapsed_s for d, w in self.watts.items()}
        else:
            values = dict(self.watts)
        if self._on_read is not None:
            self._on_read(index)
        return values

    def update_period_s(self) -> float | None:
        return self._period

    def describe(self) -> dict[str, Any]:
        return {"source": self._name, "kind": self._kind, "watts": dict(self.watts)}

    def close(self) -> None:
        self.closes += 1
        self._opened_ns = None
        if self._on_close is not None and self.closes == 1:
            self._on_close()
