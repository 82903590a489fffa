"""A scriptable stand-in for Graphcore's ``gcipuinfo`` Python module (Poplar SDK 3.x).

It mirrors the library as its documentation (docs.graphcore.ai, gcipuinfo "latest", which is the
SDK 3.x generation; the last SDK, 3.4, shipped in September 2023) and Graphcore's command-line
tools documentation describe it, with the Python method names seen in public code (wandb's IPU
monitor, Graphcore's own scripts):

- ``DiscoverActivePartitionIPUs`` (the default) and ``DiscoverAllPartitionIPUs``, and the label
  constants ``IpuPower`` and ``BoardType`` (their values are assumed to be the key strings);
- ``gcipuinfo.gcipuinfo(discoveryMode)`` reads every attribute of every device **once**, when it is
  constructed; later queries return that frozen snapshot until ``updateData()`` (which returns
  ``False`` when the update fails) or, after ``setUpdateMode(True)``, on every query;
- ``getDevices()`` returns one ``dict[str, str]`` per IPU; ``getNamedAttributeForAll(label)``,
  ``getNamedAttributeForDevice(id, label)`` and ``getDevicesAsJSON()`` read the same snapshot;
- values are strings with units: ``"123.45W"`` (no space, as Graphcore's example parses it) and
  ``"99.5 W"`` (with a space, as gc-info prints it), or ``"N/A"``. A C2 card (two IPUs on one
  board, ``board ipu index`` 0 and 1, or 1 and 0 as the documented sample lists them) has no
  ``"ipu power"`` key at all and one
  ``"total board power"``; a C600 reports ``"ipu power": "N/A"``; an M2000 gives per-IPU power;
- an IPU some process uses lists that process as ``"user process id"`` (a decimal string); an idle
  IPU lists no such key (reference section 0.3). ``FakeGcIpuInfoModule.use`` sets or clears it, and
  where a test shares the host between processes (``tests.fakes.ipu_users``) an IPU the fake
  PopTorch attached lists the process that attached it, whichever process that was.

An IPU's ``"id"`` is its ``gc-info -l`` id, which PopART's single-IPU devices share (the fake
PopART's single IPUs are ``0..N-1``); PopART's ``driverIds`` are another numbering
(``tests/fakes/fake_popart.py`` makes them differ), which the plugin translates into these ids and
never compares with them directly.

A host is a list of boards' IPUs with distinct ids, e.g. two C2 cards
(``c2_card("A", 0) + c2_card("B", 2)``) or an M2000 (``m2000()``).

A device's power can be a function of a fake nanosecond clock, so a value changes only when the
clock moved *and* the snapshot was refreshed. ``events`` records the calls in order.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from dataclasses import field

from tests.fakes import ipu_users

DiscoverActivePartitionIPUs = 0
DiscoverAllPartitionIPUs = 1
IpuPower = "ipu power"
BoardType = "board type"

#: A value: a fixed string, a function of fake time (seconds) giving one, or ``None`` (key absent).
Value = typing.Union[str, typing.Callable[[float], str], None]


class FakeClock:
    """A nanosecond clock that moves only when told to (or by ``call_latency_s``)."""

    def __init__(self, start_s: float = 500.0) -> None:
        self.ns = int(start_s * 1e9)

    def __call__(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.ns += round(seconds * 1e9)


@dataclass
class FakeIpu:
    """One IPU as gcipuinfo lists it; power values may depend on fake time."""

    id: int
    board_serial: str | None = "0340.0004.919062"
    board_type: str = "C2"
    board_ipu_index: int = 0
    ipu_power: Value = None
    total_board_power: Value = "99.5 W"
    architecture: str = "ipu1"
    extra: dict[str, str] = field(default_factory=dict)
    #: The process using the IPU (``"user process id"``); ``None`` while it is idle (key absent).
    user_process_id: int | None = None

    def attributes(self, t: float) -> dict[str, str]:
        """The attribute strings at fake time ``t`` (seconds)."""
        out = {
            "id": str(self.id),
            "target": "PCIe",
            "board type": self.board_type,
            "board ipu index": str(self.board_ipu_index),
            "ipu architecture": self.architecture,
            "clock": "1300MHz",
            "average board temp": "36.2 C",
            "driver version": "1.0.56",
            "firmware version": "1.4.14",
        }
        if self.board_serial is not None:
            out["board serial number"] = self.board_serial
        for key, value in (("ipu power", self.ipu_power), ("total board power", self.total_board_power)):
            if value is not None:
                out[key] = value(t) if callable(value) else value
        if self.user_process_id is not None:
            out["user process id"] = str(self.user_process_id)
        out.update(self.extra)
        return out


def c2_card(
    serial: str | None = "0340.0004.919062",
    first_id: int = 0,
    board_power: Value = "99.5 W",
    board_ipu_indices: tuple[int, int] = (0, 1),
) -> list[FakeIpu]:
    """A C2 card: two ipu1 IPUs on one board, no per-IPU power, one total board power.

    ``board_power=None`` leaves the key out (a library that does not export it), as ``serial=None``
    does the serial. ``board_ipu_indices`` gives each id's ``board ipu index``.
    """
    return [
        FakeIpu(first_id + i, serial, "C2", board_ipu_indices[i], None, board_power, "ipu1") for i in range(2)
    ]


def c2_card_as_documented(serial: str = "0340.0004.919062", first_id: int = 0) -> list[FakeIpu]:
    """A C2 card as the command-line tools' "Device attributes" sample (version 1.2.1) lists one:
    id 0 is ``board ipu index`` 1 and id 1 is index 0, so ids do not follow the board's order."""
    return c2_card(serial, first_id, board_ipu_indices=(1, 0))


def m2000(
    serial: str = "0131.0002.8204521",
    powers: tuple[Value, ...] = ("92.3 W", "91.0W", "93.5 W", "90W"),
    first_id: int = 0,
) -> list[FakeIpu]:
    """An IPU-Machine's four ipu2 IPUs, each with its own ``ipu power`` (and no board power)."""
    return [FakeIpu(first_id + i, serial, "M2000", 3 - i, powers[i], None, "ipu2") for i in range(4)]


class FakeGcIpuInfo:
    """A ``gcipuinfo.gcipuinfo`` object: a snapshot taken at construction, refreshed on request."""

    def __init__(self, module: FakeGcIpuInfoModule, discoveryMode: int) -> None:
        self._module = module
        self.discovery_mode = discoveryMode
        self.update_mode = False
        self._snapshot = module.take_snapshot()

    def updateData(self) -> bool:
        """Refresh the snapshot; ``False`` (snapshot unchanged) when the fake is told to fail."""
        self._module.events.append("updateData")
        if not self._module.update_ok:
            return False
        self._snapshot = self._module.take_snapshot()
        return True

    def setUpdateMode(self, autoUpdate: bool) -> None:
        """Refresh on every query from now on when ``autoUpdate``."""
        self._module.events.append(f"setUpdateMode({autoUpdate})")
        self.update_mode = bool(autoUpdate)

    def _current(self) -> list[dict[str, str]]:
        if self.update_mode:
            self._snapshot = self._module.take_snapshot()
        return [dict(device) for device in self._snapshot]

    def getDevices(self) -> list[dict[str, str]]:
        """One attribute dict per IPU, from the snapshot."""
        self._module.events.append("getDevices")
        return self._current()

    def getNamedAttributeForAll(self, label: str) -> list[str]:
        """One value per IPU, in listing order (``"N/A"`` where the IPU lacks the attribute)."""
        self._module.events.append(f"getNamedAttributeForAll({label})")
        return [device.get(label, "N/A") for device in self._current()]

    def getNamedAttributeForDevice(self, device_id: int, label: str) -> str:
        """One attribute of one IPU, by its ``id``."""
        self._module.events.append(f"getNamedAttributeForDevice({device_id}, {label})")
        for device in self._current():
            if device.get("id") == str(device_id):
                return device.get(label, "N/A")
        raise RuntimeError(f"no device with id {device_id}")

    def getDevicesAsJSON(self) -> str:
        """The snapshot as a JSON string."""
        self._module.events.append("getDevicesAsJSON")
        return json.dumps(self._current())


class FakeGcIpuInfoModule(types.ModuleType):
    """A ``gcipuinfo`` module over a list of fake IPUs.

    ``listing_order`` (indices into ``ipus``) changes the order ``getDevices`` lists them in;
    ``update_ok=False`` makes ``updateData`` fail; ``lists_users=False`` leaves every
    ``"user process id"`` out; ``construct_error`` makes construction raise.
    ``call_latency_s`` advances the clock on every snapshot, like a real query taking time.
    """

    DiscoverActivePartitionIPUs = DiscoverActivePartitionIPUs
    DiscoverAllPartitionIPUs = DiscoverAllPartitionIPUs
    IpuPower = IpuPower
    BoardType = BoardType

    def __init__(
        self,
        ipus: list[FakeIpu],
        *,
        clock: FakeClock | None = None,
        call_latency_s: float = 0.0,
        construct_error: Exception | None = None,
    ) -> None:
        super().__init__("gcipuinfo")
        self.ipus = ipus
        self.clock = clock if clock is not None else FakeClock()
        self.call_latency_s = call_latency_s
        self.construct_error = construct_error
        self.update_ok = True
        #: ``False``: a library that does not export ``"user process id"`` (its documentation calls
        #: some attributes internal), so no IPU names its user.
        self.lists_users = True
        self.listing_order: list[int] | None = None
        self.events: list[str] = []
        self.instances: list[FakeGcIpuInfo] = []

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled as its IPUs and settings, so that a sampler process can build the same fake (a
        module object does not pickle); what it recorded (``events``, ``instances``) stays here."""
        settings = {
            "update_ok": self.update_ok,
            "listing_order": self.listing_order,
            "lists_users": self.lists_users,
        }
        return (
            _rebuild_module,
            (self.ipus, self.clock, self.call_latency_s, self.construct_error, settings),
        )

    def use(self, ipu_ids: typing.Iterable[int], pid: int | None) -> None:
        """Process ``pid`` now uses the IPUs ``ipu_ids`` (``None``: they are idle again)."""
        wanted = set(ipu_ids)
        found = {ipu.id for ipu in self.ipus} & wanted
        if found != wanted:
            raise ValueError(f"fake: no IPU with id(s) {sorted(wanted - found)} on this host")
        for ipu in self.ipus:
            if ipu.id in wanted:
                ipu.user_process_id = pid

    def take_snapshot(self) -> list[dict[str, str]]:
        """Every IPU's attributes now (the clock advanced by the query's latency first)."""
        self.clock.advance(self.call_latency_s)
        t = self.clock.ns / 1e9
        order = self.listing_order if self.listing_order is not None else range(len(self.ipus))
        listing = [self.ipus[i].attributes(t) for i in order]
        # The processes an SDK fake attached the IPUs in (any process of the test), as the driver
        # tells gcipuinfo; an IPU given its user here (``use``) keeps it.
        shared = {str(ipu): pid for ipu, pid in ipu_users.users().items()}
        for attributes in listing:
            pid = shared.get(attributes.get("id", ""))
            if pid is not None:
                attributes.setdefault("user process id", str(pid))
            if not self.lists_users:
                attributes.pop("user process id", None)
        return listing

    def gcipuinfo(self, discoveryMode: int = DiscoverActivePartitionIPUs) -> FakeGcIpuInfo:
        """Construct the info object (reads every attribute once, now)."""
        self.events.append("gcipuinfo()")
        if self.construct_error is not None:
            raise self.construct_error
        info = FakeGcIpuInfo(self, discoveryMode)
        self.instances.append(info)
        return info

    @property
    def refreshes(self) -> int:
        """How many times ``updateData`` was called."""
        return self.events.count("updateData")


def _rebuild_module(
    ipus: list[FakeIpu],
    clock: FakeClock,
    call_latency_s: float,
    construct_error: Exception | None,
    settings: dict[str, object],
) -> FakeGcIpuInfoModule:
    """``FakeGcIpuInfoModule.__reduce__``'s inverse."""
    module = FakeGcIpuInfoModule(
        ipus, clock=clock, call_latency_s=call_latency_s, construct_error=construct_error
    )
    for name, value in settings.items():
        setattr(module, name, value)
    return module
