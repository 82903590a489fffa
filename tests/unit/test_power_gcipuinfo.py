"""gcipuinfo source: parsing, refresh before every read, board power counted once, attribution to
exactly the IPUs asked for, availability."""

from __future__ import annotations

import json
import sys

import pytest

from pytest_ipu.power.base import PowerDevice
from pytest_ipu.power.base import PowerSource
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.power.gcipuinfo import NO_BOARD_POWER
from pytest_ipu.power.gcipuinfo import NOT_INSTALLED
from pytest_ipu.power.gcipuinfo import SHARED_BOARD
from pytest_ipu.power.gcipuinfo import GcIpuInfoPowerSource
from pytest_ipu.power.gcipuinfo import parse_power_w
from tests.fakes.fake_gcipuinfo import FakeClock
from tests.fakes.fake_gcipuinfo import FakeGcIpuInfoModule
from tests.fakes.fake_gcipuinfo import FakeIpu
from tests.fakes.fake_gcipuinfo import c2_card
from tests.fakes.fake_gcipuinfo import c2_card_as_documented
from tests.fakes.fake_gcipuinfo import m2000

C2_SERIAL = "0340.0004.919062"
M2000_SERIAL = "0131.0002.8204521"


def source(module: FakeGcIpuInfoModule, **kwargs: object) -> GcIpuInfoPowerSource:
    """A source over ``module``; discovery off unless asked for, clock from the fake."""
    kwargs.setdefault("period_probe_polls", 0)
    return GcIpuInfoPowerSource(
        gcipuinfo_module=module,
        clock=module.clock,
        **kwargs,  # type: ignore[arg-type]
    )


def ramp(watts_at: float, step: float = 10.0):
    """A power string that grows by ``step`` W every fake second (so changes are visible)."""
    return lambda t: f"{watts_at + step * int(t - 500.0):.1f} W"


# -- parsing -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "watts"),
    [
        ("123.45W", 123.45),
        ("99.5 W", 99.5),
        ("  12.6 W\n", 12.6),
        ("0W", 0.0),
        ("7 W", 7.0),
        (".5W", 0.5),
        ("1e2 W", 100.0),
        ("N/A", None),
        (" n/a ", None),
    ],
)
def test_power_strings_parse_to_watts_or_none(text, watts):
    assert parse_power_w(text) == watts


@pytest.mark.parametrize(
    "text", ["", "W", "12.6", "12.6 mW", "12.6 kW", "36.2 C", "-5 W", "nan W", "inf W", "1,5 W"]
)
def test_anything_else_is_an_error_not_a_guess(text):
    with pytest.raises(ValueError, match="not a"):
        parse_power_w(text)


# -- what is measured --------------------------------------------------------------------------------


def test_it_satisfies_the_power_source_protocol():
    src: PowerSource = source(FakeGcIpuInfoModule(c2_card()))
    assert (src.name, src.kind) == ("gcipuinfo", "instant_power")


def test_a_c2_cards_two_ipus_share_one_board_reading_counted_once():
    module = FakeGcIpuInfoModule(c2_card())
    src = source(module)
    assert src.open() == [
        PowerDevice(f"gcipuinfo:board-{C2_SERIAL}", f"C2 board {C2_SERIAL} (IPUs 0, 1)", "ipu-board", (0, 1))
    ]
    assert src.read() == {f"gcipuinfo:board-{C2_SERIAL}": 99.5}  # not 199 W


def test_one_ipu_of_a_shared_board_is_measured_by_the_whole_board_and_says_so():
    src = source(FakeGcIpuInfoModule(c2_card()), ipus=[1])
    assert [d.id for d in src.open()] == [f"gcipuinfo:board-{C2_SERIAL}"]
    (described,) = src.describe()["devices"]
    assert (described["ipus"], described["unselected_ipus_on_board"]) == (["1"], ["0"])
    assert described["field"] == "total board power"


def test_per_ipu_power_where_the_sdk_gives_it():
    src = source(FakeGcIpuInfoModule(m2000()), ipus=[0, 2])
    devices = src.open()
    assert devices == [
        PowerDevice(f"gcipuinfo:ipu-{M2000_SERIAL}-3", f"IPU 0 (M2000 {M2000_SERIAL}, IPU 3)", "ipu", (0,)),
        PowerDevice(f"gcipuinfo:ipu-{M2000_SERIAL}-1", f"IPU 2 (M2000 {M2000_SERIAL}, IPU 1)", "ipu", (2,)),
    ]
    assert list(src.read().values()) == [92.3, 93.5]


def test_a_c600_with_ipu_power_na_falls_back_to_its_board_power():
    c600 = FakeIpu(0, "0063.0063.822391", "C600", 0, ipu_power="N/A", total_board_power="12.6 W")
    src = source(FakeGcIpuInfoModule([c600, *c2_card(first_id=1)]))
    assert [(d.id, d.scope) for d in src.open()] == [
        ("gcipuinfo:board-0063.0063.822391", "ipu-board"),
        (f"gcipuinfo:board-{C2_SERIAL}", "ipu-board"),
    ]
    assert list(src.read().values()) == [12.6, 99.5]


def test_an_ipu_with_no_reading_at_all_fails_open_naming_it():
    dark = FakeIpu(5, "1111.2222.333333", "C600", 0, ipu_power="N/A", total_board_power="N/A")
    with pytest.raises(PowerSourceError, match=r"board 1111\.2222\.333333 has no power reading.*IPU 5"):
        source(FakeGcIpuInfoModule([dark])).open()


def test_a_library_that_exports_no_board_power_makes_energy_not_measured_with_the_reason():
    # Whether gcipuinfo exports "total board power" everywhere is undocumented: without it (and no
    # per-IPU power) the source is unavailable, which the run records as energy not measured.
    src = source(FakeGcIpuInfoModule(c2_card(board_power=None)))
    availability = src.availability()
    assert not availability.ok
    assert availability.reason == (
        f"{NO_BOARD_POWER}: IPU(s) 0, 1 list no 'total board power' and no usable 'ipu power' "
        "(IPU 0: absent, IPU 1: absent); gc-info may print it, this gcipuinfo library does not export it"
    )
    with pytest.raises(PowerSourceError, match=f"^{NO_BOARD_POWER}: "):
        src.open()


def test_a_library_that_exports_no_board_serial_makes_energy_not_measured_with_the_reason():
    src = source(FakeGcIpuInfoModule(c2_card(serial=None)), ipus=[1])
    availability = src.availability()
    assert not availability.ok
    assert availability.reason.startswith(f"{NO_BOARD_POWER}: IPU 1 has no per-IPU power (absent) and no ")
    assert "'board serial number'" in availability.reason


def test_board_grouping_follows_serials_not_id_order():
    # The documented C2 sample lists id 0 as board ipu index 1: ids do not follow the board's order.
    cards = c2_card_as_documented("SER-A", 0) + c2_card_as_documented("SER-B", 2)
    module = FakeGcIpuInfoModule(cards)
    module.listing_order = [2, 0, 3, 1]
    src = source(module, ipus=[1, 2])
    assert [(d.id, d.name) for d in src.open()] == [
        ("gcipuinfo:board-SER-A", "C2 board SER-A (IPUs 0, 1)"),
        ("gcipuinfo:board-SER-B", "C2 board SER-B (IPUs 2, 3)"),
    ]
    assert src.read() == {"gcipuinfo:board-SER-A": 99.5, "gcipuinfo:board-SER-B": 99.5}
    described = {d["id"]: d for d in src.describe()["devices"]}
    assert described["gcipuinfo:board-SER-A"]["unselected_ipus_on_board"] == ["0"]
    assert described["gcipuinfo:board-SER-B"]["unselected_ipus_on_board"] == ["3"]


def test_an_unknown_ipu_id_fails_open_listing_the_known_ones():
    with pytest.raises(PowerSourceError, match=r"IPU id\(s\) 7 not found; gcipuinfo lists 0, 1"):
        source(FakeGcIpuInfoModule(c2_card()), ipus=[7]).open()


# -- attribution: exactly the IPUs asked for -------------------------------------------------------

#: Two C2 cards with different board powers, so that a reading shows which card it came from.
CARD_A, CARD_B = "0340.0004.000001", "0340.0004.000002"


def two_c2_cards() -> FakeGcIpuInfoModule:
    return FakeGcIpuInfoModule(c2_card(CARD_A, 0, "60.0 W") + c2_card(CARD_B, 2, "110.0 W"))


def test_an_ipu_on_the_second_c2_card_is_measured_by_that_card_alone():
    module = two_c2_cards()
    module.use([0, 1], 4242)  # another program on the first card: not this benchmark's reading
    src = source(module, ipus=[2])
    assert src.open() == [
        PowerDevice(f"gcipuinfo:board-{CARD_B}", f"C2 board {CARD_B} (IPUs 2, 3)", "ipu-board", (2, 3), (3,))
    ]
    assert src.read() == {f"gcipuinfo:board-{CARD_B}": 110.0}
    # Given no IPUs, the source reads the partition: both cards (what a benchmark must never get).
    whole = source(two_c2_cards())
    whole.open()
    assert sum(whole.read().values()) == 170.0


def test_a_board_shared_with_another_program_is_not_attributed():
    module = two_c2_cards()
    module.use([3], 4242)
    src = source(module, ipus=[2])
    availability = src.availability()
    assert not availability.ok
    assert availability.reason == (
        f"{SHARED_BOARD}: C2 board {CARD_B} (IPUs 2, 3) reports one 'total board power' for all its IPUs, "
        "and besides IPU(s) 2 it covers IPU 3 (used by process 4242), as gcipuinfo's 'user process id' "
        "says; measure where the board's other IPUs are idle, or use all of them"
    )
    with pytest.raises(PowerSourceError, match=f"^{SHARED_BOARD}: "):
        src.open()
    # Both of the board's IPUs are the benchmark's: nothing else is in the reading.
    module.use([2, 3], 4242)
    both = source(module, ipus=[2, 3])
    assert [(d.ipus, d.unused_ipus) for d in both.open()] == [((2, 3), ())]
    assert both.read() == {f"gcipuinfo:board-{CARD_B}": 110.0}


def test_a_board_another_program_starts_using_during_a_window_fails_the_read():
    module = two_c2_cards()
    src = source(module, ipus=[2])
    src.open()
    assert src.read() == {f"gcipuinfo:board-{CARD_B}": 110.0}
    module.use([3], 4242)
    with pytest.raises(PowerSourceError, match=r"IPU 3 \(used by process 4242\)"):
        src.read()
    module.use([3], None)  # idle again
    assert src.read() == {f"gcipuinfo:board-{CARD_B}": 110.0}


def test_one_ipu_of_an_m2000_is_its_own_reading_whatever_the_others_run():
    module = FakeGcIpuInfoModule(m2000())
    module.use([2, 3], 4242)  # another program on two of its IPUs: per-IPU readings leave it out
    src = source(module, ipus=[1])
    assert src.open() == [
        PowerDevice(f"gcipuinfo:ipu-{M2000_SERIAL}-2", f"IPU 1 (M2000 {M2000_SERIAL}, IPU 2)", "ipu", (1,))
    ]
    assert src.read() == {f"gcipuinfo:ipu-{M2000_SERIAL}-2": 91.0}


def test_a_multi_ipu_device_id_is_not_an_ipu_and_is_not_measured():
    # gc-info -l numbers the pair {0, 1} of four IPUs 4: no gcipuinfo entry carries it.
    availability = source(FakeGcIpuInfoModule(m2000()), ipus=[4]).availability()
    assert (availability.ok, availability.reason) == (
        False,
        "gcipuinfo: IPU id(s) 4 not found; gcipuinfo lists 0, 1, 2, 3 in the active partition",
    )


def test_an_ipu_id_that_is_not_a_number_is_named():
    odd = FakeIpu(0, "SER", "C2", 0, None, "99.5 W")
    odd.extra["id"] = "ipu0"
    with pytest.raises(PowerSourceError, match=r"IPU id 'ipu0' is not a number"):
        source(FakeGcIpuInfoModule([odd])).open()


# -- reading -----------------------------------------------------------------------------------------


def test_the_snapshot_is_refreshed_before_every_read():
    clock = FakeClock()
    module = FakeGcIpuInfoModule(m2000(powers=(ramp(90.0), "1 W", "1 W", "1 W")), clock=clock)
    # The fake itself is frozen until refreshed: a plain query after time moved sees old data.
    probe = module.gcipuinfo()
    clock.advance(3.0)
    assert probe.getNamedAttributeForDevice(0, "ipu power") == "90.0 W"
    src = source(module, ipus=[0])
    src.open()
    key = f"gcipuinfo:ipu-{M2000_SERIAL}-3"
    assert src.read() == {key: 120.0}
    before = module.refreshes
    clock.advance(2.0)
    assert src.read() == {key: 140.0}
    assert module.refreshes == before + 1
    assert module.events[-2:] == ["updateData", "getDevices"]


def test_na_at_read_time_raises_naming_the_device_and_the_field():
    script = {"value": "91.0W"}
    ipus = m2000(powers=("92.3 W", lambda t: script["value"], "93.5 W", "90W"))
    src = source(FakeGcIpuInfoModule(ipus))
    src.open()
    script["value"] = "N/A"
    with pytest.raises(PowerSourceError) as info:
        src.read()
    message = str(info.value)
    assert f"gcipuinfo:ipu-{M2000_SERIAL}-2" in message
    assert "'ipu power'" in message
    assert "'N/A'" in message
    assert "missing, not zero" in message


def test_readings_follow_ids_when_the_listing_order_changes():
    module = FakeGcIpuInfoModule(m2000())
    src = source(module)
    src.open()
    first = src.read()
    module.listing_order = [3, 2, 1, 0]
    assert src.read() == first
    assert first[f"gcipuinfo:ipu-{M2000_SERIAL}-3"] == 92.3


def test_a_failed_refresh_is_an_error_not_a_stale_value():
    module = FakeGcIpuInfoModule(c2_card())
    src = source(module)
    src.open()
    module.update_ok = False
    with pytest.raises(PowerSourceError, match=r"updateData\(\) returned false"):
        src.read()


def test_a_device_that_disappears_is_an_error():
    module = FakeGcIpuInfoModule(c2_card())
    src = source(module)
    src.open()
    module.listing_order = []
    with pytest.raises(PowerSourceError, match=f"board-{C2_SERIAL}.*no longer listed"):
        src.read()


def test_an_unreadable_value_names_the_device_and_the_field():
    script = {"value": "99.5 W"}
    src = source(FakeGcIpuInfoModule(c2_card(board_power=lambda t: script["value"])))
    src.open()
    script["value"] = "99.5 mW"
    with pytest.raises(PowerSourceError, match=r"board-.*'total board power' of IPU 0 is unreadable"):
        src.read()


# -- availability, period, describe, lifecycle -------------------------------------------------------


def test_without_gcipuinfo_the_reason_says_it_comes_with_the_poplar_sdk(monkeypatch):
    monkeypatch.setitem(sys.modules, "gcipuinfo", None)  # makes `import gcipuinfo` fail
    src = GcIpuInfoPowerSource()
    availability = src.availability()
    assert (availability.ok, availability.reason) == (False, NOT_INSTALLED)
    assert "Poplar SDK" in NOT_INSTALLED
    assert "not on PyPI" in NOT_INSTALLED
    assert "enable.sh" in NOT_INSTALLED
    with pytest.raises(PowerSourceError, match="not on PyPI"):
        src.open()


def test_no_ipus_is_unavailable():
    availability = source(FakeGcIpuInfoModule([])).availability()
    assert not availability.ok
    assert availability.reason.startswith("gcipuinfo: no IPUs in the active partition")


def test_a_library_error_is_a_reason_not_an_exception():
    availability = source(
        FakeGcIpuInfoModule([], construct_error=RuntimeError("no ipu driver"))
    ).availability()
    assert (availability.ok, availability.reason) == (False, "gcipuinfo: no ipu driver")
    assert source(FakeGcIpuInfoModule(c2_card())).availability().ok
    assert not source(FakeGcIpuInfoModule(c2_card()), ipus=[3]).availability().ok


def test_the_update_period_is_discovered_by_refreshing_back_to_back():
    module = FakeGcIpuInfoModule(
        m2000(powers=(lambda t: f"{90 + int(t * 10) % 3} W", "1 W", "1 W", "1 W")), call_latency_s=0.001
    )
    src = source(module, ipus=[0], period_probe_polls=200, period_probe_s=0.5)
    src.open()
    assert src.update_period_s() == pytest.approx(0.1, abs=0.0015)
    never = source(FakeGcIpuInfoModule(c2_card(), call_latency_s=0.001), period_probe_polls=50)
    never.open()
    assert never.update_period_s() is None


def test_describe_is_plain_json_and_works_before_open():
    src = source(FakeGcIpuInfoModule(c2_card()))
    before = src.describe()
    json.dumps(before)
    assert before["devices"][0]["id"] == f"gcipuinfo:board-{C2_SERIAL}"
    assert before["devices"][0]["ipus_on_board"] == ["0", "1"]
    assert "undocumented" in before["sensor_semantics"]
    missing = GcIpuInfoPowerSource(gcipuinfo_module=FakeGcIpuInfoModule([], construct_error=OSError("x")))
    assert missing.describe()["error"] == "x"


def test_close_is_idempotent_and_reading_afterwards_fails():
    src = source(FakeGcIpuInfoModule(c2_card()))
    src.open()
    src.close()
    src.close()
    with pytest.raises(PowerSourceError, match="not open"):
        src.read()
    assert [d.id for d in src.open()] == [f"gcipuinfo:board-{C2_SERIAL}"]
