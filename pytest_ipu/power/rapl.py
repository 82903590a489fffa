"""CPU package and DRAM energy from RAPL counters, read through the Linux powercap sysfs tree.

The kernel's RAPL drivers (``intel_rapl_msr``, which also serves AMD since Linux 5.8,
``intel_rapl_tpmi``, and ``intel-rapl-mmio`` from the processor thermal device) register zones under
``/sys/class/powercap`` (docs.kernel.org/power/powercap/powercap.html): top-level ``intel-rapl:N``
named ``package-P`` (``package-P-die-D`` with several dies a package) or ``psys`` / ``psys-P`` (the
platform), sub-zones ``intel-rapl:N:M`` named ``core``, ``uncore`` or ``dram``, and the same layout
under ``intel-rapl-mmio:N`` and ``intel-rapl-tpmi:N``; each zone's ``energy_uj`` (µJ) wraps to 0 at
``max_energy_range_uj``.

Summed (R11 of our measurement notes): per socket the package zone (or its dies) plus, with
``include_dram``, the ``dram`` sub-zone, which the package counter does not include. ``core`` and
``uncore`` are parts of the package (counted twice if added); ``psys`` covers the package and more of
the platform, so it is never used (added, it double counts; instead, it loses the per-socket split and
mixes in power not the CPU's). A package seen by both ``intel-rapl`` and ``intel-rapl-mmio`` is one
counter: the ``intel-rapl`` one is kept. Nothing here sleeps or starts a thread: the sampler reads at
least every ``max_read_interval_s()`` so that no wraparound goes unseen (R9).

Documented in docs/power.md (section "Sources").
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ipu.backends.base import Availability
from pytest_ipu.power.base import CounterReset
from pytest_ipu.power.base import PowerDevice
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.power.base import ReadingKind

#: Where Linux exposes powercap zones.
DEFAULT_ROOT = Path("/sys/class/powercap")

#: RAPL energy status registers are "updated about every 1 ms" (Intel SDM Vol. 3B §14.9, for
#: MSR_PKG_ENERGY_STATUS and MSR_DRAM_ENERGY_STATUS; the kernel's amd_energy documentation says the
#: same of AMD's accumulators). Section 3 of our measurement notes quotes both.
UPDATE_PERIOD_S = 0.001

#: Default ceiling on the power one zone can draw, used to tell a wraparound from a reset. Above any
#: CPU socket's or DRAM's real draw, yet far below what a reset implies (a whole range, ~262 kJ on
#: common parts, in the time between two reads).
DEFAULT_MAX_POWER_W = 1000.0

#: Control types holding RAPL zones, most preferred first: when the same domain appears under
#: several, the first wins (the MSR interface is the one every RAPL tool and the kernel's own perf
#: events use; MMIO duplicates its package counter on client parts).
CONTROL_TYPES: tuple[str, ...] = ("intel-rapl", "intel-rapl-tpmi", "intel-rapl-mmio")

_ZONE_RE = re.compile(r"^(intel-rapl(?:-tpmi|-mmio)?)((?::\d+)+)$")
_PACKAGE_RE = re.compile(r"^package-(\d+)(?:-die-(\d+))?$")
# control type / zone / sub-zone: enough for both /sys/class/powercap (flat links to every zone) and
# /sys/devices/virtual/powercap (zones nested in their control type and parent zone).
_MAX_DEPTH = 3


def _read_text(path: Path) -> str:
    """Read a sysfs attribute (ASCII text)."""
    return path.read_text(encoding="ascii")


@dataclass(frozen=True)
class RaplZone:
    """One powercap zone as found on disk: where it is and the domain its ``name`` file gives."""

    path: Path
    control_type: str
    index: tuple[int, ...]
    domain: str


@dataclass
class _Counter:
    """Unwrapping state of one selected zone while the source is open."""

    zone: RaplZone
    device: PowerDevice
    range_uj: int
    last_uj: int
    last_ns: int
    # Integer µJ, converted to J only when reported, so accumulation never loses precision.
    total_uj: int = 0


@dataclass(frozen=True)
class _Selection:
    """The zones to measure (with their devices) and the ones left out, each with the reason."""

    used: tuple[tuple[RaplZone, PowerDevice], ...]
    ignored: tuple[tuple[RaplZone, str], ...]


class RaplPowerSource:
    """Cumulative CPU-package and DRAM energy from RAPL through Linux powercap (``energy_counter``).

    ``root`` is the powercap directory (tests pass a fake tree); ``reader`` reads one attribute file
    (tests inject permission failures through it, since root can read a ``chmod 000`` file);
    ``clock`` gives monotonic nanoseconds for the wrap-versus-reset check; ``max_power_w`` is the
    most one zone can plausibly draw. ``read`` returns joules since ``open`` per device id.
    """

    def __init__(
        self,
        root: Path = DEFAULT_ROOT,
        include_dram: bool = True,
        *,
        max_power_w: float = DEFAULT_MAX_POWER_W,
        clock: Callable[[], int] = time.monotonic_ns,
        reader: Callable[[Path], str] = _read_text,
    ) -> None:
        if not max_power_w > 0:
            raise ValueError(f"max_power_w must be a positive number of watts, got {max_power_w!r}")
        self._root = Path(root)
        self._include_dram = include_dram
        self._max_power_w = float(max_power_w)
        self._clock = clock
        self._reader = reader
        self._counters: list[_Counter] | None = None
        self._selection: _Selection | None = None

    @property
    def name(self) -> str:
        """``rapl``."""
        return "rapl"

    @property
    def kind(self) -> ReadingKind:
        """``energy_counter``: ``read`` returns joules since ``open``."""
        return "energy_counter"

    @property
    def root(self) -> Path:
        """The powercap directory this source reads."""
        return self._root

    def availability(self) -> Availability:
        """Whether readable package counters exist; the reason says how to fix it when not."""
        try:
            if not self._root.is_dir():
                return Availability.no(
                    f"no RAPL: {self._root} does not exist (not Linux, or no powercap driver / "
                    "a VM without RAPL)"
                )
            selection = self._select()
            for zone, _device in selection.used:
                self._read_uj(zone, "max_energy_range_uj")
                self._read_uj(zone, "energy_uj")
        except PowerSourceError as exc:
            return Availability.no(str(exc))
        except Exception as exc:  # availability never raises: anything unforeseen is a reason
            return Availability.no(f"rapl: unexpected error while probing {self._root}: {exc!r}")
        return Availability.yes()

    def open(self) -> list[PowerDevice]:
        """Find the zones, read each one's wrap range and first counter value; return the devices.

        Raises ``PowerSourceError`` naming the zone path on any read error. Opening again restarts
        every device's energy at 0.
        """
        selection = self._select()
        counters: list[_Counter] = []
        for zone, device in selection.used:
            range_uj = self._read_uj(zone, "max_energy_range_uj")
            if range_uj <= 0:
                raise PowerSourceError(
                    f"rapl: {zone.path / 'max_energy_range_uj'} is {range_uj}; without a positive "
                    "range the counter's wraparound cannot be undone"
                )
            value = self._read_uj(zone, "energy_uj")
            counters.append(_Counter(zone, device, range_uj, value, self._clock()))
        self._selection = selection
        self._counters = counters
        return [c.device for c in counters]

    def read(self) -> Mapping[str, float]:
        """Joules per device id since ``open``, unwrapping each counter's wraparound.

        A counter lower than at the previous read has wrapped once, unless undoing one wrap implies
        more than ``max_power_w`` over the time since that read: then it was reset or misread
        (RAPL's registers are read-only, so this takes a suspend, a CPU reset or a VM moving hosts)
        and ``CounterReset`` is raised naming the zone. Nothing is updated when a read fails. Two
        wraps between reads look like one: read at least every ``max_read_interval_s()``.
        """
        if self._counters is None:
            raise PowerSourceError("rapl: read() on a source that is not open (call open() first)")
        updates: list[tuple[_Counter, int, int, int]] = []
        for counter in self._counters:
            now_uj = self._read_uj(counter.zone, "energy_uj")
            now_ns = self._clock()
            delta_uj = now_uj - counter.last_uj
            if delta_uj < 0:
                delta_uj = self._unwrap(counter, now_uj, now_ns)
            updates.append((counter, now_uj, now_ns, delta_uj))
        # Commit only once every zone was read, so a failed read leaves a consistent state.
        out: dict[str, float] = {}
        for counter, now_uj, now_ns, delta_uj in updates:
            counter.total_uj += delta_uj
            counter.last_uj = now_uj
            counter.last_ns = now_ns
            out[counter.device.id] = counter.total_uj / 1_000_000
        return out

    def update_period_s(self) -> float:
        """0.001 s: RAPL energy registers update about every millisecond (Intel SDM Vol. 3B §14.9)."""
        return UPDATE_PERIOD_S

    def max_read_interval_s(self) -> float:
        """The longest gap between reads that still sees every wraparound (R9).

        ``min(1 s, min over zones of range_J / (2 * max_power_w))``: at ``max_power_w`` a counter
        crosses half its range in that time, so consecutive reads are never a whole wrap apart.
        Uses the ranges read at ``open``; before it, reads them (raises ``PowerSourceError``).
        """
        if self._counters is not None:
            ranges = [c.range_uj for c in self._counters]
        else:
            ranges = [self._read_uj(zone, "max_energy_range_uj") for zone, _ in self._select().used]
        positive = [r for r in ranges if r > 0]
        if not positive:
            return 1.0
        return min(1.0, min(r / 1_000_000 / (2.0 * self._max_power_w) for r in positive))

    def describe(self) -> dict[str, Any]:
        """The zones used (path, domain, wrap range) and those left out with the reason; plain JSON.

        Never raises: before ``open`` it probes the tree and reports an ``error`` if that fails.
        """
        out: dict[str, Any] = {
            "source": "rapl",
            "root": str(self._root),
            "include_dram": self._include_dram,
            "max_power_w": self._max_power_w,
            "update_period_s": UPDATE_PERIOD_S,
        }
        try:
            selection = self._selection if self._selection is not None else self._select()
            ranges = {c.device.id: c.range_uj for c in self._counters or []}
            zones: list[dict[str, Any]] = []
            for zone, device in selection.used:
                range_uj = ranges.get(device.id)
                if range_uj is None:
                    range_uj = self._read_uj(zone, "max_energy_range_uj")
                zones.append(
                    {
                        "device_id": device.id,
                        "scope": device.scope,
                        "path": str(zone.path),
                        "domain": zone.domain,
                        "max_energy_range_uj": range_uj,
                    }
                )
            out["zones"] = zones
            out["ignored"] = [
                {"path": str(zone.path), "domain": zone.domain, "reason": reason}
                for zone, reason in selection.ignored
            ]
        except Exception as exc:  # describe is informational: report, never fail the run
            out["error"] = str(exc)
        return out

    def close(self) -> None:
        """Forget the counters; safe to call twice. Reading afterwards raises ``PowerSourceError``."""
        self._counters = None

    # -- internals ---------------------------------------------------------------------------------

    def _unwrap(self, counter: _Counter, now_uj: int, now_ns: int) -> int:
        """The energy since the last read of a counter that went backwards, or ``CounterReset``."""
        # One wrap: the counter ran from last_uj up to the range, restarted at 0 and reached now_uj.
        # The hardware wraps at 2^32 energy units, one unit (~15-61 µJ) above max_energy_range_uj,
        # so this undercounts by at most that per wrap: negligible next to joules.
        delta_uj = now_uj - counter.last_uj + counter.range_uj
        elapsed_s = max(0, now_ns - counter.last_ns) / 1e9
        # The counter lags real time by up to one update period, so the energy between two reads
        # can cover that much more time than the reads' own timestamps do.
        allowed_uj = self._max_power_w * (elapsed_s + UPDATE_PERIOD_S) * 1_000_000
        if delta_uj > allowed_uj:
            raise CounterReset(
                f"rapl: {counter.zone.path / 'energy_uj'} ({counter.zone.domain}) went back from "
                f"{counter.last_uj} to {now_uj} µJ; one wraparound at {counter.range_uj} µJ would mean "
                f"{delta_uj / 1e6:.3f} J in {elapsed_s:.6f} s, above {self._max_power_w:g} W, so the "
                "counter was reset (a suspend, a CPU reset, a VM moving hosts); the window is invalid"
            )
        return delta_uj

    def _read_uj(self, zone: RaplZone, attribute: str) -> int:
        """An integer attribute of ``zone``; ``PowerSourceError`` naming the file when that fails."""
        path = zone.path / attribute
        text = self._read(path)
        try:
            return int(text.strip())
        except ValueError:
            raise PowerSourceError(f"rapl: {path} holds {text.strip()!r}, not an integer") from None

    def _read(self, path: Path) -> str:
        """One attribute file's text; permission and I/O errors become ``PowerSourceError``."""
        try:
            return self._reader(path)
        except PermissionError as exc:
            raise PowerSourceError(self._permission_message(path)) from exc
        except OSError as exc:
            raise PowerSourceError(f"rapl: reading {path} failed: {exc}") from exc

    def _permission_message(self, path: Path) -> str:
        """Why ``path`` is unreadable and how to allow it (R10)."""
        control_type = path.parent.name.split(":", 1)[0]
        if path.name != "energy_uj":
            return f"rapl: permission denied reading {path}"
        return (
            f"rapl: permission denied reading {path}: Linux makes RAPL energy counters readable "
            "by root only since November 2020 (CVE-2020-8694, the PLATYPUS power side channel). "
            f"To measure CPU energy, run as root, or allow reading with `sudo chmod o+r "
            f"{self._root}/{control_type}:*/energy_uj` (lost at reboot; a udev rule or a "
            "systemd-tmpfiles entry makes it permanent). Either re-opens that side channel to "
            "local users, so do it only on a benchmark machine you trust"
        )

    def _discover(self) -> list[RaplZone]:
        """Every RAPL zone under the root, each once, with its ``name``."""
        found: dict[str, Path] = {}

        def visit(directory: Path, depth: int) -> None:
            try:
                entries = sorted(directory.iterdir())
            except OSError as exc:
                raise PowerSourceError(f"rapl: cannot list {directory}: {exc}") from exc
            zones = [e for e in entries if _ZONE_RE.match(e.name) and e.is_dir()]
            # Zones seen directly here win over the same zone nested deeper, so that with the flat
            # /sys/class/powercap layout every path is the short class path.
            for entry in zones:
                found.setdefault(entry.name, entry)
            if depth >= _MAX_DEPTH:
                return
            for entry in entries:
                if entry in zones or (depth == 0 and entry.name in CONTROL_TYPES and entry.is_dir()):
                    visit(entry, depth + 1)

        visit(self._root, 0)
        out: list[RaplZone] = []
        for zone_name, path in found.items():
            match = _ZONE_RE.match(zone_name)
            if match is None:  # pragma: no cover - only matching names were collected
                continue
            index = tuple(int(part) for part in match.group(2)[1:].split(":"))
            domain = self._read(path / "name").strip()
            out.append(RaplZone(path, match.group(1), index, domain))
        out.sort(key=lambda z: (CONTROL_TYPES.index(z.control_type), z.index))
        return out

    def _select(self) -> _Selection:
        """Package (or die) zones and their DRAM sub-zones, without double counting (R11).

        Raises ``PowerSourceError`` when no package zone exists, listing what was found.
        """
        zones = self._discover()
        if not zones:
            raise PowerSourceError(
                f"no RAPL: {self._root} has no intel-rapl zones (the intel_rapl_msr driver is not "
                "loaded, the CPU has no RAPL, or a VM does not expose it)"
            )
        by_key = {(z.control_type, z.index): z for z in zones}
        used: list[tuple[RaplZone, PowerDevice]] = []
        ignored: list[tuple[RaplZone, str]] = []
        taken: dict[str, RaplZone] = {}

        def use(zone: RaplZone, device: PowerDevice) -> None:
            first = taken.get(device.id)
            if first is not None:
                ignored.append((zone, f"the same counter as {first.path} (kept: {first.control_type})"))
                return
            taken[device.id] = zone
            used.append((zone, device))

        for zone in zones:
            chosen = self._classify(zone, by_key)
            if isinstance(chosen, str):
                ignored.append((zone, chosen))
            else:
                use(zone, chosen)
        if not any(device.scope == "cpu-package" for _zone, device in used):
            seen = ", ".join(f"{z.path.name} ({z.domain})" for z in zones)
            raise PowerSourceError(
                f"no RAPL package zone under {self._root}: found only {seen}; psys, core and uncore "
                "overlap a package counter, so they are not used on their own"
            )
        return _Selection(tuple(used), tuple(ignored))

    def _classify(
        self, zone: RaplZone, by_key: Mapping[tuple[str, tuple[int, ...]], RaplZone]
    ) -> PowerDevice | str:
        """The device ``zone`` counts (a package, or a package's DRAM), or why it is not used."""
        if len(zone.index) == 1:
            if _PACKAGE_RE.match(zone.domain):
                return _package_device(zone.domain)
            if zone.domain.startswith("psys"):
                return "psys covers the packages and more of the platform"
            return f"not a package zone ({zone.domain!r})"
        parent = by_key.get((zone.control_type, zone.index[:-1]))
        if len(zone.index) != 2 or parent is None or not _PACKAGE_RE.match(parent.domain):
            return "not a direct sub-zone of a package zone"
        if zone.domain in ("core", "uncore"):
            return f"{zone.domain} is part of its package, which is counted"
        if zone.domain != "dram":
            return f"unknown sub-zone domain {zone.domain!r}"
        if not self._include_dram:
            return "include_dram is off"
        return _dram_device(parent.domain)


def _package_label(domain: str) -> str:
    """``package-0`` -> ``CPU package 0``; ``package-0-die-1`` -> ``CPU package 0, die 1``."""
    match = _PACKAGE_RE.match(domain)
    if match is None:  # pragma: no cover - callers pass package domains only
        return domain
    package, die = match.groups()
    return f"CPU package {package}" + (f", die {die}" if die is not None else "")


def _package_device(domain: str) -> PowerDevice:
    """The device of a package (or die) zone: ``rapl:package-0``."""
    return PowerDevice(id=f"rapl:{domain}", name=f"{_package_label(domain)} (RAPL)", scope="cpu-package")


def _dram_device(package_domain: str) -> PowerDevice:
    """The device of a package's DRAM sub-zone: ``rapl:package-0-dram`` (every socket has one)."""
    return PowerDevice(
        id=f"rapl:{package_domain}-dram",
        name=f"DRAM of {_package_label(package_domain)} (RAPL)",
        scope="dram",
    )
