"""A fake Linux powercap sysfs tree (``/sys/class/powercap``), written into a temporary directory.

It imitates the layout the kernel creates (docs.kernel.org/power/powercap/powercap.html): each
control type (``intel-rapl``, ``intel-rapl-mmio``) is a directory under
``sys/devices/virtual/powercap`` holding its top-level zones, sub-zones nest inside their parent
zone, and ``sys/class/powercap`` holds one symbolic link per control type and per zone (so it lists
``intel-rapl:0`` and ``intel-rapl:0:0`` side by side). Every zone has ``name``, ``energy_uj``,
``max_energy_range_uj``, ``enabled`` and a ``device`` link to its parent, as the real ones do.

Tests run as root here, and root reads a ``chmod 000`` file anyway; so ``deny`` also records the
file, and ``read`` (pass it as the source's ``reader``) raises ``PermissionError`` for it, the way a
non-root process sees ``energy_uj`` on kernels patched for CVE-2020-8694.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

#: ``max_energy_range_uj`` of a package zone on common Intel parts: 2**32 - 1 energy units of
#: 61035/1000 µJ (the kernel's integer rendering of 2**-14 J).
PACKAGE_RANGE_UJ = 262_143_328_850
#: ``max_energy_range_uj`` of a server DRAM zone: 2**32 - 1 units of 15.3 µJ.
DRAM_RANGE_UJ = 65_712_999_613


class FakePowercap:
    """Builds a fake powercap tree under ``base``; ``root`` is the ``/sys/class/powercap`` to read."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "sys" / "class" / "powercap"
        self.devices = base / "sys" / "devices" / "virtual" / "powercap"
        self.root.mkdir(parents=True, exist_ok=True)
        self.devices.mkdir(parents=True, exist_ok=True)
        self._denied: set[Path] = set()

    # -- building ---------------------------------------------------------------------------------

    def add_zone(
        self,
        zone: str,
        name: str,
        *,
        energy_uj: int = 0,
        max_energy_range_uj: int = PACKAGE_RANGE_UJ,
    ) -> Path:
        """Create zone ``zone`` (``intel-rapl:0``, ``intel-rapl:0:1``, ``intel-rapl-mmio:0``).

        Its parent zone must exist already for a sub-zone. Returns the zone's path under ``root``.
        """
        control_type, *indices = zone.split(":")
        if not indices:
            raise ValueError(f"{zone!r} is a control type, not a zone")
        self._add_control_type(control_type)
        parent = self.devices / control_type
        for depth in range(1, len(indices)):
            parent = parent / ":".join([control_type, *indices[:depth]])
            if not parent.is_dir():
                raise ValueError(f"add {parent.name} before its sub-zone {zone}")
        directory = parent / zone
        directory.mkdir()
        (directory / "name").write_text(f"{name}\n")
        (directory / "energy_uj").write_text(f"{energy_uj}\n")
        (directory / "max_energy_range_uj").write_text(f"{max_energy_range_uj}\n")
        (directory / "enabled").write_text("0\n")
        (directory / "device").symlink_to(Path("..", "..", parent.name))  # as the kernel links it
        (self.root / zone).symlink_to(os.path.relpath(directory, self.root))
        return self.root / zone

    def add_package(
        self,
        zone: str,
        package: int,
        *,
        die: int | None = None,
        core: bool = False,
        uncore: bool = False,
        dram: bool = False,
        energy_uj: int = 0,
    ) -> str:
        """A package zone named ``package-P`` (``package-P-die-D`` with ``die``) and its sub-zones.

        Sub-zones are numbered in the kernel's domain order (core, uncore, dram), as it registers
        them. Returns ``zone``.
        """
        name = f"package-{package}" if die is None else f"package-{package}-die-{die}"
        self.add_zone(zone, name, energy_uj=energy_uj)
        subs = [d for d, wanted in (("core", core), ("uncore", uncore), ("dram", dram)) if wanted]
        for i, domain in enumerate(subs):
            rng = DRAM_RANGE_UJ if domain == "dram" else PACKAGE_RANGE_UJ
            self.add_zone(f"{zone}:{i}", domain, max_energy_range_uj=rng)
        return zone

    def add_psys(self, zone: str, name: str = "psys") -> str:
        """A platform (``psys``) top-level zone; the kernel names it ``psys-P`` for packages past 0."""
        self.add_zone(zone, name)
        return zone

    def _add_control_type(self, control_type: str) -> None:
        directory = self.devices / control_type
        if directory.is_dir():
            return
        directory.mkdir()
        (directory / "enabled").write_text("1\n")
        (self.root / control_type).symlink_to(os.path.relpath(directory, self.root))

    # -- changing ---------------------------------------------------------------------------------

    def set_energy(self, zone: str, energy_uj: int) -> None:
        """Set zone ``zone``'s counter (what the hardware would have accumulated, in µJ)."""
        (self.root / zone / "energy_uj").write_text(f"{energy_uj}\n")

    def write(self, zone: str, attribute: str, text: str) -> None:
        """Overwrite one attribute file of ``zone`` with ``text`` (for malformed values)."""
        (self.root / zone / attribute).write_text(text)

    def deny(self, zone: str, attribute: str = "energy_uj") -> Path:
        """Make ``zone``'s ``attribute`` unreadable: mode 000, and ``read`` refuses it even as root."""
        path = self.root / zone / attribute
        path.chmod(0)
        self._denied.add(path.resolve())
        return path

    def read(self, path: Path) -> str:
        """Read one attribute as the kernel would serve it; ``PermissionError`` for denied files."""
        if path.resolve() in self._denied:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return path.read_text(encoding="ascii")
