"""Graphcore IPU power through the ``gcipuinfo`` library of the Poplar SDK.

API (Poplar SDK 3.x: docs.graphcore.ai gcipuinfo "latest" introduction, attributes and API reference
pages, and the command-line tools' "Device attributes" chapter): ``gcipuinfo.gcipuinfo()`` discovers
the IPUs of the active partition (``DiscoverActivePartitionIPUs``) and reads all attributes once, at
construction; later queries return the same data unless ``updateData()`` (``False`` when the update
failed) or ``setUpdateMode(True)`` refreshes it, so ``read`` calls ``updateData()`` before every
reading (R20 of our measurement notes). ``getDevices()`` gives one mapping per IPU from attribute key
(``KEY_*``) to string; a power string carries a unit, with or without a space (``"123.45W"``,
``"99.5 W"``), or is ``"N/A"``, which ``read`` raises on (never 0 W). Devices are matched by their
``"id"``, never by position. Whether the library exports ``"total board power"`` and ``"board serial
number"`` everywhere is not documented (its documentation calls some attributes internal).

**Documented and inferred spellings.** No Python binding is public (the C++ API's documentation says the
Python one is "very similar"): every Python spelling here is inferred from callers, each key from
``gc-info -i``'s output:

- seen in callers' code (wandb's IPU monitor; Graphcore's own PopTorch GNN benchmark and power script):
  ``gcipuinfo.gcipuinfo()``, ``getDevices()`` returning mappings (``dict(device)``),
  ``setUpdateMode(True)``, ``getNamedAttributeForAll(gcipuinfo.IpuPower)``, and the keys ``"id"``,
  ``"user process id"``, ``"clock"`` and ``"ipu power"`` read from ``getDevices()``;
- from the C++ API reference only, spelled as there: ``updateData()`` and ``DiscoverActivePartitionIPUs``;
- from ``gc-info -i``'s output only, never seen read from ``getDevices()``: ``"total board power"``,
  ``"board serial number"``, ``"board type"`` (``C2``, ``C600``, ``M2000``), ``"board ipu index"`` and
  ``"ipu architecture"``; that ``getDevices()`` exports them, so spelled, is inferred.

Kind ``instant_power``: what the power attributes measure (a sample or an average over some window)
and how often they update are not documented; they are taken as instantaneous (integrated by the
trapezoid rule), the least assuming choice, and ``open`` discovers the update period by refreshing
back-to-back (R5).

Which reading and which IPUs (R12: ``"ipu power"``, else board power once per board; ``NO_BOARD_POWER``;
a board with an IPU that lists another process's ``"user process id"``, a key gcipuinfo leaves out while
the IPU is idle; ``ipus_used_by``) are documented in docs/power.md (section "Which IPUs") and
docs/ipu.md (section "Energy").
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from types import ModuleType
from typing import Any

from pytest_ipu.backends.base import Availability
from pytest_ipu.power.base import PowerDevice
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.power.base import ReadingKind
from pytest_ipu.sdk import import_sdk

#: Attribute keys, as gcipuinfo and ``gc-info -i`` spell them.
KEY_ID = "id"
KEY_IPU_POWER = "ipu power"
KEY_BOARD_POWER = "total board power"
KEY_BOARD_SERIAL = "board serial number"
KEY_BOARD_TYPE = "board type"
KEY_BOARD_IPU_INDEX = "board ipu index"
KEY_ARCHITECTURE = "ipu architecture"
KEY_USER_PID = "user process id"

#: How the reason starts when the library exports no power this source can attribute.
NO_BOARD_POWER = "gcipuinfo exports no board power on this system"
#: How the reason starts when a board reading also covers an IPU that another program uses.
SHARED_BOARD = "gcipuinfo: a board's power cannot be attributed to the IPUs measured"

#: What ``availability`` says when ``import gcipuinfo`` fails.
NOT_INSTALLED = (
    "gcipuinfo is not installed: it ships with Graphcore's Poplar SDK (and its command-line tools), "
    "not on PyPI; enable the SDK in the shell that runs pytest (source the enable.sh script of the "
    "SDK's poplar directory) so that `import gcipuinfo` works in this Python environment"
)

#: Defaults bounding the update-period discovery in ``open``: refreshes, seconds.
# Enough polls to span the 0.5 s cap at microsecond call times: a 100 ms sensor needs ~300 ms
# to show three changes, and the loop stops as soon as it has.
PERIOD_PROBE_POLLS = 100_000
PERIOD_PROBE_S = 0.5
#: Discovery stops early once every device has shown this many intervals between value changes.
PERIOD_PROBE_INTERVALS = 3

_POWER_RE = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*W$")


def parse_power_w(text: object) -> float | None:
    """Watts from a gcipuinfo power string; ``None`` for ``"N/A"`` (no reading).

    Accepts ``"123.45W"``, ``"99.5 W"`` and surrounding whitespace. Anything else (another unit,
    a negative or non-finite number, an empty string) raises ``ValueError``: a value we cannot read
    for sure is an error, not a guess.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a string like '99.5 W', got {text!r}")
    stripped = text.strip()
    if stripped.upper() == "N/A":
        return None
    match = _POWER_RE.match(stripped)
    if match is None:
        raise ValueError(f"not a power in watts: {text!r}")
    watts = float(match.group(1))
    if not math.isfinite(watts) or watts < 0:
        raise ValueError(f"not a plausible power: {text!r}")
    return watts


@dataclass
class _Measured:
    """One measured device: an IPU (its own power) or a board (its total power, counted once)."""

    device: PowerDevice
    key: str
    ipu_ids: list[str]  # the IPUs whose listing entries carry the reading, in preference order
    selected_ipu_ids: list[str]
    board_serial: str | None
    board_type: str | None
    facts: dict[str, Any] = field(default_factory=dict)


class GcIpuInfoPowerSource:
    """Power of Graphcore IPUs (per IPU, or per board where only the board is metered).

    ``ipus``: the gcipuinfo device ``id`` values of the IPUs to measure; ``None`` measures every IPU
    of the active partition. ``gcipuinfo_module`` replaces ``import gcipuinfo`` (tests pass a fake).
    The keyword arguments bound the update-period discovery in ``open``
    (``period_probe_polls=0`` skips it) and give its monotonic nanosecond clock.
    """

    def __init__(
        self,
        ipus: Sequence[int] | None = None,
        gcipuinfo_module: ModuleType | None = None,
        *,
        period_probe_polls: int = PERIOD_PROBE_POLLS,
        period_probe_s: float = PERIOD_PROBE_S,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self._ipus = None if ipus is None else [str(int(i)) for i in ipus]
        self._module = gcipuinfo_module
        self._probe_polls = max(0, int(period_probe_polls))
        self._probe_ns = max(0, int(period_probe_s * 1e9))
        self._clock = clock
        self._info: Any = None
        self._measured: list[_Measured] | None = None
        self._period_s: float | None = None

    @property
    def name(self) -> str:
        """``gcipuinfo``."""
        return "gcipuinfo"

    @property
    def kind(self) -> ReadingKind:
        """``instant_power``: the sensor's semantics are undocumented; see the module docstring."""
        return "instant_power"

    # -- protocol ------------------------------------------------------------------------------------

    def availability(self) -> Availability:
        """gcipuinfo importable, it lists IPUs, and the selected ones are among them; never raises."""
        try:
            module = self._import()
        except ImportError:
            return Availability.no(NOT_INSTALLED)
        try:
            entries = self._entries(module.gcipuinfo())
            if not entries:
                return Availability.no(
                    "gcipuinfo: no IPUs in the active partition (gc-info -l lists them; on an IPU-POD, "
                    "check that a partition is set, e.g. IPUOF_VIPU_API_PARTITION_ID)"
                )
            self._select(entries)
        except Exception as exc:  # availability never raises: anything unforeseen is a reason
            return Availability.no(str(exc) if isinstance(exc, PowerSourceError) else f"gcipuinfo: {exc}")
        return Availability.yes()

    def open(self) -> list[PowerDevice]:
        """List the IPUs, choose per-IPU or per-board readings, discover the update period.

        Raises ``PowerSourceError`` naming the IPU when a selected IPU is missing, or has neither a
        per-IPU nor a board power reading. Opening again starts afresh.
        """
        self.close()
        try:
            module = self._import()
        except ImportError as exc:
            raise PowerSourceError(NOT_INSTALLED) from exc
        try:
            info = module.gcipuinfo()
        except Exception as exc:
            raise PowerSourceError(f"gcipuinfo: could not create gcipuinfo.gcipuinfo(): {exc}") from exc
        entries = self._refresh(info)
        measured = self._select(entries)
        self._info = info
        try:
            self._period_s = self._discover_period(measured)
        except BaseException:
            self._info = None
            raise
        self._measured = measured
        return [m.device for m in measured]

    def read(self) -> Mapping[str, float]:
        """Watts per device id, from a snapshot refreshed just now.

        ``PowerSourceError`` when the refresh fails, a device vanished, or a reading is ``N/A`` or
        unparsable (the message names the device and the field).
        """
        if self._measured is None or self._info is None:
            raise PowerSourceError("gcipuinfo: read() on a source that is not open (call open() first)")
        entries = self._refresh(self._info)
        return {m.device.id: self._value(m, entries) for m in self._measured}

    def update_period_s(self) -> float | None:
        """The shortest interval between value changes seen in ``open``; ``None`` if none was seen."""
        return self._period_s

    def describe(self) -> dict[str, Any]:
        """The devices measured (field, IPUs, board), library version and sensor notes; plain JSON.

        Never raises: before ``open`` it lists the IPUs to describe them, reporting an ``error``
        if that fails.
        """
        out: dict[str, Any] = {
            "source": "gcipuinfo",
            "library": "gcipuinfo (Poplar SDK)",
            "library_version": None,
            "kind": "instant_power",
            "sensor_semantics": (
                "undocumented (instantaneous or averaged, and the update rate, are not published); "
                "treated as instantaneous power"
            ),
            "update_period_s": self._period_s,
        }
        try:
            module = self._import()
            version = getattr(module, "__version__", None)
            out["library_version"] = None if version is None else str(version)
            measured = self._measured
            if measured is None:
                measured = self._select(self._entries(module.gcipuinfo()))
            out["devices"] = [self._describe_one(m) for m in measured]
        except Exception as exc:  # describe is informational: report, never fail the run
            out["error"] = NOT_INSTALLED if isinstance(exc, ImportError) else str(exc)
        return out

    def ipus_used_by(self, pids: Sequence[int]) -> tuple[int, ...]:
        """The IPUs of the active partition whose ``"user process id"`` is one of ``pids``, ascending,
        whatever IPUs this source measures (``power.base.ProcessIpus``).

        Empty when none is: the processes hold no IPU, or this gcipuinfo does not list the key.
        ``PowerSourceError`` when gcipuinfo cannot be imported or read. A fresh listing (gcipuinfo
        reads every attribute when constructed), so an open source's snapshot is left as it is.
        """
        wanted = {str(int(pid)) for pid in pids}
        try:
            module = self._import()
        except ImportError as exc:
            raise PowerSourceError(NOT_INSTALLED) from exc
        try:
            entries = self._entries(module.gcipuinfo())
        except PowerSourceError:
            raise
        except Exception as exc:
            raise PowerSourceError(f"gcipuinfo: could not list the IPUs: {exc}") from exc
        used = [i for i, a in entries.items() if a.get(KEY_USER_PID, "").strip() in wanted]
        return _numbers(sorted(used, key=_id_key))

    def close(self) -> None:
        """Drop the gcipuinfo object (the library has no close); safe to call twice."""
        self._info = None
        self._measured = None

    # -- internals -----------------------------------------------------------------------------------

    def _import(self) -> Any:
        if self._module is not None:
            return self._module
        return import_sdk("gcipuinfo")

    @staticmethod
    def _entries(info: Any) -> dict[str, dict[str, str]]:
        """The listing, keyed by each IPU's ``id`` (in listing order)."""
        entries: dict[str, dict[str, str]] = {}
        for position, device in enumerate(info.getDevices()):
            attributes = {str(k): str(v) for k, v in dict(device).items()}
            ipu_id = attributes.get(KEY_ID)
            if ipu_id is None:
                raise PowerSourceError(
                    f"gcipuinfo: device #{position} of getDevices() has no {KEY_ID!r} attribute"
                )
            entries[ipu_id.strip()] = attributes
        return entries

    def _refresh(self, info: Any) -> dict[str, dict[str, str]]:
        """``updateData()`` then the listing: the snapshot is otherwise frozen (R20)."""
        try:
            ok = info.updateData()
        except Exception as exc:
            raise PowerSourceError(f"gcipuinfo: updateData() failed: {exc}") from exc
        if ok is False:
            raise PowerSourceError(
                "gcipuinfo: updateData() returned false (the attributes could not be refreshed); "
                "the readings would be stale"
            )
        return self._entries(info)

    def _select(self, entries: dict[str, dict[str, str]]) -> list[_Measured]:
        """Per board: each IPU's own power if all selected ones have it, else the board's, once."""
        if self._ipus is None:
            selected = list(entries)
        else:
            missing = [i for i in self._ipus if i not in entries]
            if missing:
                raise PowerSourceError(
                    f"gcipuinfo: IPU id(s) {', '.join(missing)} not found; gcipuinfo lists "
                    f"{', '.join(entries) or 'none'} in the active partition"
                )
            selected = list(dict.fromkeys(self._ipus))
        boards: dict[str, list[str]] = {}
        for ipu_id in selected:
            found = entries[ipu_id].get(KEY_BOARD_SERIAL, "").strip()
            # Without a serial an IPU cannot be grouped with its board mates: its own group.
            boards.setdefault(found or f"\0{ipu_id}", []).append(ipu_id)
        measured: list[_Measured] = []
        for group, ipu_ids in boards.items():
            board = None if group.startswith("\0") else group
            if all(_has_reading(entries[i], KEY_IPU_POWER) for i in ipu_ids):
                measured.extend(self._per_ipu(entries, i, board) for i in ipu_ids)
                continue
            measured.append(self._per_board(entries, board, ipu_ids))
        return measured

    @staticmethod
    def _exported(entries: dict[str, dict[str, str]], ipu_ids: list[str], serial: str | None) -> None:
        """``PowerSourceError`` starting with ``NO_BOARD_POWER`` when the listing lacks the keys a
        board reading needs: ``"total board power"`` on every IPU of the board, or the board's serial."""
        if all(KEY_BOARD_POWER not in entries[i] for i in ipu_ids):
            ipu_power = ", ".join(f"IPU {i}: {_shown(entries[i], KEY_IPU_POWER)}" for i in ipu_ids)
            raise PowerSourceError(
                f"{NO_BOARD_POWER}: IPU(s) {', '.join(ipu_ids)} list no {KEY_BOARD_POWER!r} and no usable "
                f"{KEY_IPU_POWER!r} ({ipu_power}); gc-info may print it, this gcipuinfo library does not "
                "export it"
            )
        if serial is None:
            # Board power with no serial could be counted once per IPU of a shared board.
            raise PowerSourceError(
                f"{NO_BOARD_POWER}: IPU {ipu_ids[0]} has no per-IPU power "
                f"({_shown(entries[ipu_ids[0]], KEY_IPU_POWER)}) and no {KEY_BOARD_SERIAL!r}, so a board "
                "reading cannot be attributed once per board"
            )

    def _per_ipu(self, entries: dict[str, dict[str, str]], ipu_id: str, serial: str | None) -> _Measured:
        attributes = entries[ipu_id]
        board_type = attributes.get(KEY_BOARD_TYPE)
        index = attributes.get(KEY_BOARD_IPU_INDEX)
        stable = f"ipu-{serial}-{index}" if serial and index is not None else f"ipu-{ipu_id}"
        name = f"IPU {ipu_id} ({board_type or 'board'} {serial or 'unknown serial'}, IPU {index})"
        return _Measured(
            PowerDevice(f"gcipuinfo:{stable}", name, "ipu", _numbers([ipu_id])),
            KEY_IPU_POWER,
            [ipu_id],
            [ipu_id],
            serial,
            board_type,
            _facts(attributes),
        )

    def _per_board(
        self, entries: dict[str, dict[str, str]], serial: str | None, ipu_ids: list[str]
    ) -> _Measured:
        self._exported(entries, ipu_ids, serial)
        assert serial is not None  # _exported refuses a board without a serial
        on_board = [i for i, a in entries.items() if a.get(KEY_BOARD_SERIAL, "").strip() == serial]
        order = ipu_ids + [i for i in on_board if i not in ipu_ids]
        if not any(_has_reading(entries[i], KEY_BOARD_POWER) for i in order):
            shown = "; ".join(
                f"IPU {i}: {KEY_IPU_POWER}={_shown(entries[i], KEY_IPU_POWER)}, "
                f"{KEY_BOARD_POWER}={_shown(entries[i], KEY_BOARD_POWER)}"
                for i in ipu_ids
            )
            raise PowerSourceError(f"gcipuinfo: board {serial} has no power reading ({shown})")
        first = entries[ipu_ids[0]]
        board_type = first.get(KEY_BOARD_TYPE)
        name = f"{board_type or 'IPU'} board {serial} (IPUs {', '.join(sorted(on_board, key=_id_key))})"
        facts = _facts(first)
        del facts["board_ipu_index"]  # one IPU's index says nothing about a board reading
        covered = sorted(on_board, key=_id_key)
        unused = [i for i in covered if i not in ipu_ids]
        facts["ipus_on_board"] = covered
        facts["unselected_ipus_on_board"] = unused
        measured = _Measured(
            PowerDevice(f"gcipuinfo:board-{serial}", name, "ipu-board", _numbers(covered), _numbers(unused)),
            KEY_BOARD_POWER,
            order,
            list(ipu_ids),
            serial,
            board_type,
            facts,
        )
        _check_attributable(measured, entries)
        return measured

    def _value(self, measured: _Measured, entries: dict[str, dict[str, str]]) -> float:
        """The device's watts from this snapshot, or ``PowerSourceError`` naming device and field
        (or, for a board, the IPU another program started using)."""
        _check_attributable(measured, entries)
        present = [i for i in measured.ipu_ids if i in entries]
        if not present:
            raise PowerSourceError(
                f"gcipuinfo: {measured.device.id} ({measured.device.name}) is no longer listed by "
                f"gcipuinfo (IPU id(s) {', '.join(measured.ipu_ids)})"
            )
        raw_values: list[str] = []
        for ipu_id in present:
            raw = entries[ipu_id].get(measured.key)
            if raw is None:
                raw_values.append(f"IPU {ipu_id}: absent")
                continue
            try:
                watts = parse_power_w(raw)
            except ValueError as exc:
                raise PowerSourceError(
                    f"gcipuinfo: {measured.device.id}: {measured.key!r} of IPU {ipu_id} is unreadable: {exc}"
                ) from exc
            if watts is not None:
                # Every IPU of a board lists the same board reading; the first one present is used.
                return watts
            raw_values.append(f"IPU {ipu_id}: {raw!r}")
        raise PowerSourceError(
            f"gcipuinfo: {measured.device.id} ({measured.device.name}) has no {measured.key!r} "
            f"reading ({'; '.join(raw_values)}); the sample is missing, not zero"
        )

    def _discover_period(self, measured: list[_Measured]) -> float | None:
        """Refresh back-to-back within the bounds; the shortest interval between changes (R5)."""
        if self._probe_polls == 0 or self._probe_ns == 0 or not measured:
            return None
        start = self._clock()

        def snapshot() -> dict[str, str]:
            # The raw strings: any change of a published value is a sensor update.
            entries = self._refresh(self._info)
            return {
                m.device.id: "|".join(entries.get(i, {}).get(m.key, "") for i in m.ipu_ids) for m in measured
            }

        last = snapshot()
        changed_at: dict[str, int] = {}
        intervals = {m.device.id: 0 for m in measured}
        best_ns: int | None = None
        for _ in range(self._probe_polls):
            now_values = snapshot()
            now = self._clock()
            for device_id, value in now_values.items():
                if value == last[device_id]:
                    continue
                last[device_id] = value
                previous = changed_at.get(device_id)
                changed_at[device_id] = now
                # The first change only marks where an update happened; intervals start from it.
                if previous is not None:
                    intervals[device_id] += 1
                    best_ns = now - previous if best_ns is None else min(best_ns, now - previous)
            if now - start >= self._probe_ns:
                break
            if all(n >= PERIOD_PROBE_INTERVALS for n in intervals.values()):
                break
        return None if best_ns is None else best_ns / 1e9

    def _describe_one(self, measured: _Measured) -> dict[str, Any]:
        return {
            "id": measured.device.id,
            "name": measured.device.name,
            "scope": measured.device.scope,
            "field": measured.key,
            "ipus": list(measured.selected_ipu_ids),
            "board_serial": measured.board_serial,
            "board_type": measured.board_type,
            **measured.facts,
        }


def _check_attributable(measured: _Measured, entries: dict[str, dict[str, str]]) -> None:
    """``PowerSourceError`` starting with ``SHARED_BOARD`` when the reading covers an IPU that was not
    selected and that a process is using (its ``"user process id"``): the reading is then partly
    that program's. Idle IPUs on the board are covered too, and say so (``unused_ipus``)."""
    busy: dict[int, str] = {}
    for ipu_id in measured.device.unused_ipus:
        pid = entries.get(str(ipu_id), {}).get(KEY_USER_PID, "").strip()
        if pid and pid.upper() != "N/A":
            busy[ipu_id] = pid
    if not busy:
        return
    users = ", ".join(f"IPU {i} (used by process {pid})" for i, pid in busy.items())
    selected = ", ".join(measured.selected_ipu_ids)
    raise PowerSourceError(
        f"{SHARED_BOARD}: {measured.device.name} reports one {KEY_BOARD_POWER!r} for all its IPUs, and "
        f"besides IPU(s) {selected} it covers {users}, as gcipuinfo's {KEY_USER_PID!r} says; measure "
        "where the board's other IPUs are idle, or use all of them"
    )


def _numbers(ipu_ids: Sequence[str]) -> tuple[int, ...]:
    """gcipuinfo ids as numbers, as placement and ``gc-info -l`` give them; ``PowerSourceError``
    for one that is not."""
    out = []
    for ipu_id in ipu_ids:
        if not ipu_id.isdigit():
            raise PowerSourceError(f"gcipuinfo: IPU id {ipu_id!r} is not a number as gc-info -l lists ids")
        out.append(int(ipu_id))
    return tuple(out)


def _has_reading(attributes: Mapping[str, str], key: str) -> bool:
    """Whether ``key`` holds a parsable, non-N/A power (absent, N/A and garbage do not)."""
    raw = attributes.get(key)
    if raw is None:
        return False
    try:
        return parse_power_w(raw) is not None
    except ValueError:
        return False


def _shown(attributes: Mapping[str, str], key: str) -> str:
    raw = attributes.get(key)
    return "absent" if raw is None else repr(raw)


def _id_key(ipu_id: str) -> tuple[int, str]:
    return (int(ipu_id), "") if ipu_id.isdigit() else (1 << 30, ipu_id)


def _facts(attributes: Mapping[str, str]) -> dict[str, Any]:
    """Plain-JSON facts worth recording next to the reading."""
    return {
        "board_ipu_index": attributes.get(KEY_BOARD_IPU_INDEX),
        "ipu_architecture": attributes.get(KEY_ARCHITECTURE),
        "driver_version": attributes.get("driver version"),
        "firmware_version": attributes.get("firmware version"),
        "pci_id": attributes.get("pci id"),
    }
