"""RAPL through powercap: zone selection, µJ -> J, wraparound versus reset, and availability."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_ipu.power.base import CounterReset
from pytest_ipu.power.base import PowerDevice
from pytest_ipu.power.base import PowerSource
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.power.rapl import RaplPowerSource
from tests.fakes.sysfs import DRAM_RANGE_UJ
from tests.fakes.sysfs import PACKAGE_RANGE_UJ
from tests.fakes.sysfs import FakePowercap

S = 1_000_000_000  # ns per second


class FakeClock:
    """A monotonic nanosecond clock that moves only when told to."""

    def __init__(self) -> None:
        self.ns = 1_000 * S

    def __call__(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        self.ns += int(seconds * S)


@pytest.fixture
def fake(tmp_path: Path) -> FakePowercap:
    return FakePowercap(tmp_path)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def source(
    fake: FakePowercap,
    clock: FakeClock | None = None,
    *,
    include_dram: bool = True,
    max_power_w: float = 1000.0,
) -> RaplPowerSource:
    """A source reading ``fake`` through its permission-aware reader, on a fake clock."""
    return RaplPowerSource(
        fake.root,
        include_dram,
        max_power_w=max_power_w,
        clock=clock or FakeClock(),
        reader=fake.read,
    )


def two_sockets(fake: FakePowercap) -> None:
    """A two-socket server: package + dram each, plus core sub-zones."""
    fake.add_package("intel-rapl:0", 0, core=True, dram=True)
    fake.add_package("intel-rapl:1", 1, core=True, dram=True)


def test_two_sockets_with_dram_give_four_devices_with_stable_ids_and_scopes(fake: FakePowercap) -> None:
    two_sockets(fake)
    src = source(fake)
    assert src.availability().ok, src.availability().reason
    devices = src.open()
    assert devices == [
        PowerDevice("rapl:package-0", "CPU package 0 (RAPL)", "cpu-package"),
        PowerDevice("rapl:package-0-dram", "DRAM of CPU package 0 (RAPL)", "dram"),
        PowerDevice("rapl:package-1", "CPU package 1 (RAPL)", "cpu-package"),
        PowerDevice("rapl:package-1-dram", "DRAM of CPU package 1 (RAPL)", "dram"),
    ]
    assert set(src.read()) == {d.id for d in devices}


def test_source_satisfies_the_protocol_and_names_itself(fake: FakePowercap) -> None:
    src: PowerSource = source(fake)
    assert (src.name, src.kind, src.update_period_s()) == ("rapl", "energy_counter", 0.001)


def test_core_uncore_and_psys_are_never_counted(fake: FakePowercap, clock: FakeClock) -> None:
    # A laptop: package-0 with core and uncore, and psys as a second top-level zone.
    fake.add_package("intel-rapl:0", 0, core=True, uncore=True)
    fake.add_psys("intel-rapl:1")
    src = source(fake, clock)
    assert [d.id for d in src.open()] == ["rapl:package-0"]
    # Energy on the overlapping zones must not leak into the package's number.
    for zone in ("intel-rapl:0:0", "intel-rapl:0:1", "intel-rapl:1"):
        fake.set_energy(zone, 50_000_000)
    fake.set_energy("intel-rapl:0", 7_000_000)
    clock.advance(1)
    assert src.read() == {"rapl:package-0": 7.0}
    ignored = {entry["domain"]: entry["reason"] for entry in src.describe()["ignored"]}
    assert set(ignored) == {"core", "uncore", "psys"}
    assert "psys covers the packages" in ignored["psys"]


def test_psys_of_a_second_socket_is_ignored_too(fake: FakePowercap) -> None:
    two_sockets(fake)
    fake.add_psys("intel-rapl:2")
    fake.add_psys("intel-rapl:3", name="psys-1")
    assert [d.id for d in source(fake).open()] == [
        "rapl:package-0",
        "rapl:package-0-dram",
        "rapl:package-1",
        "rapl:package-1-dram",
    ]


def test_mmio_duplicate_of_a_package_is_dropped_and_the_intel_rapl_counter_kept(
    fake: FakePowercap, clock: FakeClock
) -> None:
    fake.add_package("intel-rapl:0", 0)
    fake.add_package("intel-rapl-mmio:0", 0)
    src = source(fake, clock)
    assert [d.id for d in src.open()] == ["rapl:package-0"]
    fake.set_energy("intel-rapl:0", 3_000_000)
    fake.set_energy("intel-rapl-mmio:0", 9_000_000)
    clock.advance(1)
    assert src.read() == {"rapl:package-0": 3.0}
    described = src.describe()
    assert [z["path"] for z in described["zones"]] == [str(fake.root / "intel-rapl:0")]
    assert described["ignored"][0]["path"] == str(fake.root / "intel-rapl-mmio:0")


def test_an_mmio_only_package_is_used(fake: FakePowercap) -> None:
    fake.add_package("intel-rapl-mmio:0", 0)
    src = source(fake)
    assert [d.id for d in src.open()] == ["rapl:package-0"]
    assert src.describe()["zones"][0]["path"] == str(fake.root / "intel-rapl-mmio:0")


def test_multi_die_packages_give_one_device_per_die(fake: FakePowercap) -> None:
    fake.add_package("intel-rapl:0", 0, die=0, dram=True)
    fake.add_package("intel-rapl:1", 0, die=1, dram=True)
    fake.add_package("intel-rapl:2", 1, die=0)
    devices = source(fake).open()
    assert [(d.id, d.scope) for d in devices] == [
        ("rapl:package-0-die-0", "cpu-package"),
        ("rapl:package-0-die-0-dram", "dram"),
        ("rapl:package-0-die-1", "cpu-package"),
        ("rapl:package-0-die-1-dram", "dram"),
        ("rapl:package-1-die-0", "cpu-package"),
    ]
    assert devices[2].name == "CPU package 0, die 1 (RAPL)"


def test_include_dram_false_leaves_the_dram_zones_out(fake: FakePowercap) -> None:
    two_sockets(fake)
    src = source(fake, include_dram=False)
    assert [d.id for d in src.open()] == ["rapl:package-0", "rapl:package-1"]
    reasons = [e["reason"] for e in src.describe()["ignored"] if e["domain"] == "dram"]
    assert reasons == ["include_dram is off", "include_dram is off"]


def test_microjoules_become_joules_exactly_and_accumulate_since_open(
    fake: FakePowercap, clock: FakeClock
) -> None:
    fake.add_package("intel-rapl:0", 0, dram=True, energy_uj=123_456_789)
    src = source(fake, clock)
    src.open()
    fake.set_energy("intel-rapl:0", 123_456_789 + 1_234_567)
    fake.set_energy("intel-rapl:0:0", 1)
    clock.advance(1)
    assert src.read() == {"rapl:package-0": 1.234567, "rapl:package-0-dram": 0.000001}
    fake.set_energy("intel-rapl:0", 123_456_789 + 1_234_567 + 3)
    clock.advance(1)
    assert src.read()["rapl:package-0"] == 1.23457


def test_a_wraparound_across_the_range_gives_the_energy_used(fake: FakePowercap, clock: FakeClock) -> None:
    fake.add_package("intel-rapl:0", 0, energy_uj=PACKAGE_RANGE_UJ - 5_000_000)
    src = source(fake, clock)
    src.open()
    fake.set_energy("intel-rapl:0", 2_000_000)  # 5 J up to the range, then 2 J past 0
    clock.advance(1)
    assert src.read() == {"rapl:package-0": 7.0}
    fake.set_energy("intel-rapl:0", 2_500_000)
    clock.advance(1)
    assert src.read() == {"rapl:package-0": 7.5}


def test_a_dram_wrap_uses_the_dram_zones_own_range(fake: FakePowercap, clock: FakeClock) -> None:
    fake.add_package("intel-rapl:0", 0, dram=True)
    fake.set_energy("intel-rapl:0:0", DRAM_RANGE_UJ - 1_000_000)
    src = source(fake, clock)
    src.open()
    fake.set_energy("intel-rapl:0:0", 500_000)
    clock.advance(0.5)
    assert src.read()["rapl:package-0-dram"] == 1.5


def test_a_drop_that_no_wrap_explains_is_a_counter_reset(fake: FakePowercap, clock: FakeClock) -> None:
    fake.add_package("intel-rapl:0", 0, energy_uj=100_000_000_000)  # 100 kJ into a 262 kJ range
    src = source(fake, clock)
    src.open()
    fake.set_energy("intel-rapl:0", 1_000_000)  # written to 0, then 1 J: a wrap would be 162 kJ
    clock.advance(1)
    with pytest.raises(CounterReset, match=r"intel-rapl:0/energy_uj.*package-0"):
        src.read()


def test_the_same_drop_is_a_wrap_when_enough_time_has_passed(fake: FakePowercap, clock: FakeClock) -> None:
    # 162 kJ since the last read is plausible over 200 s at <= 1000 W: the plausibility test
    # depends on the elapsed time, not on the size of the drop alone.
    fake.add_package("intel-rapl:0", 0, energy_uj=100_000_000_000)
    src = source(fake, clock)
    src.open()
    fake.set_energy("intel-rapl:0", 1_000_000)
    clock.advance(200)
    assert src.read()["rapl:package-0"] == (PACKAGE_RANGE_UJ - 100_000_000_000 + 1_000_000) / 1e6


def test_max_power_w_sets_what_counts_as_plausible(fake: FakePowercap, clock: FakeClock) -> None:
    fake.add_package("intel-rapl:0", 0, energy_uj=PACKAGE_RANGE_UJ - 60_000_000)
    src = source(fake, clock, max_power_w=50.0)
    src.open()
    fake.set_energy("intel-rapl:0", 0)  # 60 J in 1 s: more than 50 W
    clock.advance(1)
    with pytest.raises(CounterReset):
        src.read()


def test_permission_denied_is_unavailable_with_the_fix(fake: FakePowercap) -> None:
    two_sockets(fake)
    fake.deny("intel-rapl:1")
    availability = source(fake).availability()
    assert not availability.ok
    assert str(fake.root / "intel-rapl:1" / "energy_uj") in availability.reason
    assert "CVE-2020-8694" in availability.reason
    assert "root" in availability.reason
    assert f"sudo chmod o+r {fake.root}/intel-rapl:*/energy_uj" in availability.reason


def test_open_on_an_unreadable_counter_raises_naming_the_zone(fake: FakePowercap) -> None:
    fake.add_package("intel-rapl:0", 0, dram=True)
    fake.deny("intel-rapl:0:0")
    with pytest.raises(PowerSourceError, match=r"intel-rapl:0:0/energy_uj.*CVE-2020-8694"):
        source(fake).open()


def test_a_read_error_while_open_raises_power_source_error(fake: FakePowercap) -> None:
    fake.add_package("intel-rapl:0", 0)
    src = source(fake)
    src.open()
    fake.deny("intel-rapl:0")
    with pytest.raises(PowerSourceError, match="intel-rapl:0/energy_uj"):
        src.read()


def test_a_missing_root_is_unavailable(tmp_path: Path) -> None:
    root = tmp_path / "no" / "powercap"
    availability = RaplPowerSource(root).availability()
    assert not availability.ok
    assert availability.reason.startswith(f"no RAPL: {root} does not exist")
    with pytest.raises(PowerSourceError):
        RaplPowerSource(root).open()


def test_powercap_without_rapl_zones_is_unavailable(fake: FakePowercap) -> None:
    (fake.root / "dtpm").mkdir()  # another control type, nothing of RAPL
    availability = source(fake).availability()
    assert not availability.ok
    assert "no intel-rapl zones" in availability.reason


def test_no_package_zone_is_unavailable_saying_so(fake: FakePowercap) -> None:
    fake.add_psys("intel-rapl:0")
    availability = source(fake).availability()
    assert not availability.ok
    assert "no RAPL package zone" in availability.reason
    assert "intel-rapl:0 (psys)" in availability.reason


def test_availability_never_raises_on_malformed_values(fake: FakePowercap) -> None:
    fake.add_package("intel-rapl:0", 0)
    fake.write("intel-rapl:0", "energy_uj", "garbage\n")
    availability = source(fake).availability()
    assert not availability.ok
    assert "'garbage', not an integer" in availability.reason


def test_a_zero_range_cannot_be_unwrapped(fake: FakePowercap) -> None:
    fake.add_zone("intel-rapl:0", "package-0", max_energy_range_uj=0)
    with pytest.raises(PowerSourceError, match="max_energy_range_uj is 0"):
        source(fake).open()


def test_close_is_idempotent_and_read_after_close_raises(fake: FakePowercap) -> None:
    fake.add_package("intel-rapl:0", 0)
    src = source(fake)
    with pytest.raises(PowerSourceError, match="not open"):
        src.read()
    src.open()
    assert src.read() == {"rapl:package-0": 0.0}
    src.close()
    src.close()
    with pytest.raises(PowerSourceError, match="not open"):
        src.read()


def test_reopening_restarts_energy_at_zero(fake: FakePowercap, clock: FakeClock) -> None:
    fake.add_package("intel-rapl:0", 0)
    src = source(fake, clock)
    src.open()
    fake.set_energy("intel-rapl:0", 2_000_000)
    clock.advance(1)
    assert src.read() == {"rapl:package-0": 2.0}
    src.close()
    src.open()
    assert src.read() == {"rapl:package-0": 0.0}


def test_max_read_interval_sees_every_wrap(fake: FakePowercap) -> None:
    fake.add_package("intel-rapl:0", 0)
    # 262 kJ at 1000 W takes 131 s to cross half: the 1 s cap applies.
    assert source(fake).max_read_interval_s() == 1.0
    fake.add_zone("intel-rapl:1", "package-1", max_energy_range_uj=2_000_000)  # a 2 J range
    src = source(fake, max_power_w=100.0)
    assert src.max_read_interval_s() == pytest.approx(2.0 / (2 * 100.0))
    src.open()
    assert src.max_read_interval_s() == pytest.approx(0.01)


def test_describe_is_plain_json_naming_the_zones_used(fake: FakePowercap) -> None:
    two_sockets(fake)
    src = source(fake)
    src.open()
    described = json.loads(json.dumps(src.describe()))
    assert described["zones"][1] == {
        "device_id": "rapl:package-0-dram",
        "scope": "dram",
        "path": str(fake.root / "intel-rapl:0:1"),
        "domain": "dram",
        "max_energy_range_uj": DRAM_RANGE_UJ,
    }
    assert len(described["zones"]) == 4
    assert described["update_period_s"] == 0.001


def test_describe_never_raises_before_open(tmp_path: Path) -> None:
    described = RaplPowerSource(tmp_path / "missing").describe()
    assert described["source"] == "rapl"
    assert "error" in described


def test_the_devices_tree_layout_is_read_too(fake: FakePowercap) -> None:
    # /sys/devices/virtual/powercap nests zones in their control type and parent zone.
    two_sockets(fake)
    src = RaplPowerSource(fake.devices, reader=fake.read)
    assert [d.id for d in src.open()] == [
        "rapl:package-0",
        "rapl:package-0-dram",
        "rapl:package-1",
        "rapl:package-1-dram",
    ]


def test_max_power_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_power_w"):
        RaplPowerSource(max_power_w=0)
