"""The run's power meters: one per power source and compute device, opened on first use and closed
when the run ends; for a compiled model, the meter of exactly the devices it runs on.

Made by the first benchmark that measures energy (``IpuSession.meters``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from pytest_ipu.pytest_plugin.settings import AUTO

if TYPE_CHECKING:
    from pytest_ipu.backends.base import CompiledModel
    from pytest_ipu.power.base import PowerSource
    from pytest_ipu.power.meter import PowerMeter
    from pytest_ipu.pytest_plugin.settings import Settings


class RunMeters:
    """The power meters of one pytest run (an ordinary class: it holds open meters, closed by
    ``close``)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self._meters: dict[tuple[str, str], tuple[PowerMeter | None, str]] = {}

    def model_meter(self, compiled: CompiledModel, choice: str) -> tuple[PowerMeter | None, str, str]:
        """``power_meter`` for what a compiled model runs on: on IPU hardware exactly the IPUs it
        holds (``power.metered_device``), never the partition. When its backend cannot say which,
        those gcipuinfo names the processes running it as user of (``power.ipus_of_processes``);
        when none is found, no meter, and the reason."""
        from pytest_ipu import power

        device = power.metered_device(compiled.device, compiled.ipu_ids)
        if device is not None or choice == "off":
            return self.power_meter(device or compiled.device, choice)
        name = power.source_for_device(compiled.device) if choice == AUTO else choice
        # The backend let the SDK choose: the IPUs gcipuinfo names the model's processes as user of.
        found, lookup = power.ipus_of_processes(
            None if name is None else self._partition_source(name, compiled.device),
            _model_processes(compiled),
            compiled.ipu_count,
        )
        device = power.metered_device(compiled.device, found)
        if device is not None:
            return self.power_meter(device, choice)
        reason = power.UNKNOWN_IPUS.format(target=compiled.target, backend=compiled.backend, lookup=lookup)
        return None, name or "none", reason

    def _partition_source(self, name: str, device: str) -> PowerSource | None:
        """Source ``name`` for every IPU of ``device``'s partition, as a conftest or the registry makes
        it: asked which IPUs processes use, never opened (nothing is metered on it)."""
        from pytest_ipu import power

        partition = device.partition(":")[0]
        made = self.config.hook.pytest_ipu_make_power_source(config=self.config, name=name, device=partition)
        try:
            source: PowerSource = made if made is not None else power.make_source(name, partition)
        except Exception:  # an unknown name, or a device it cannot map: then no source says
            return None
        return source

    def power_meter(self, device: str, choice: str) -> tuple[PowerMeter | None, str, str]:
        """The open power meter for compute ``device`` (made once per run) under the test's
        ``--ipu-power`` choice, its source name, and when there is none, the reason."""
        if choice == "off":
            return None, "off", "power measurement is off (--ipu-power=off or the test's marker)"
        from pytest_ipu import power

        name = power.source_for_device(device) if choice == AUTO else choice
        if name is None:
            return None, "none", f"no power source measures device {device!r}"
        key = (name, device)
        if key not in self._meters:
            self._meters[key] = self._open_meter(name, device)
        meter, reason = self._meters[key]
        return meter, name, reason

    def _open_meter(self, name: str, device: str) -> tuple[PowerMeter | None, str]:
        from pytest_ipu import power
        from pytest_ipu.power.base import PowerSourceError

        made = self.config.hook.pytest_ipu_make_power_source(config=self.config, name=name, device=device)
        try:
            source: PowerSource = made if made is not None else power.make_source(name, device)
        except Exception as exc:  # a third-party source, or a device string it cannot map
            return None, f"{name} could not be set up for {device!r}: {type(exc).__name__}: {exc}"
        availability = source.availability()
        if not availability.ok:
            return None, f"{name} unavailable: {availability.reason}"
        from pytest_ipu.power.meter import PowerMeter

        meter = PowerMeter(source, hz=self.settings.power_hz, idle_s=self.settings.idle_s)
        try:
            meter.open()
        except PowerSourceError as exc:
            meter.close()
            return None, f"{name} failed to open: {exc}"
        return meter, ""

    def close(self) -> list[str]:
        """Close every power meter (once; later calls find nothing open); what could not be closed,
        one line each."""
        meters, self._meters = [m for m, _ in self._meters.values() if m is not None], {}
        errors = []
        for meter in meters:
            try:
                meter.close()
            except Exception as exc:
                errors.append(f"power source {meter.source.name}: {exc}")
        return errors


def _model_processes(compiled: CompiledModel) -> tuple[int, ...]:
    """The processes whose calls run ``compiled``: a group's (its workers', or this process for
    threads), else this process."""
    from pytest_ipu.backends.base import Grouped

    if isinstance(compiled, Grouped):
        return compiled.group.process_ids()
    return (os.getpid(),)
