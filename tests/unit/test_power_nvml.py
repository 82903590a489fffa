"""NVML source: CUDA-to-GPU mapping, counter and instant-power paths, period discovery, lifecycle."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter

import pytest

from pytest_ipu.power.base import CounterReset
from pytest_ipu.power.base import PowerDevice
from pytest_ipu.power.base import PowerSource
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.power.nvml import NOT_INSTALLED
from pytest_ipu.power.nvml import NvmlPowerSource
from tests.fakes.fake_pynvml import NVML_ERROR_DRIVER_NOT_LOADED
from tests.fakes.fake_pynvml import NVML_ERROR_GPU_IS_LOST
from tests.fakes.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND
from tests.fakes.fake_pynvml import NVML_ERROR_NOT_SUPPORTED
from tests.fakes.fake_pynvml import NVML_VALUE_TYPE_DOUBLE
from tests.fakes.fake_pynvml import NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
from tests.fakes.fake_pynvml import FakeClock
from tests.fakes.fake_pynvml import FakeGpu
from tests.fakes.fake_pynvml import FakeNvml
from tests.fakes.fake_pynvml import mig_uuid
from tests.fakes.fake_pynvml import uuid

# NVML enumerates these out of PCI order (index 0 sits on bus 0x81): CUDA's order differs.
GPU_A = FakeGpu(uuid(0xA), "00000000:81:00.0", watts=300.0)
GPU_B = FakeGpu(uuid(0xB), "00000000:01:00.0", watts=100.0)
GPU_C = FakeGpu(uuid(0xC), "00000000:41:00.0", watts=200.0)


def gpus(*specs: FakeGpu) -> list[FakeGpu]:
    """Fresh copies, so a test's changes never leak into another."""
    return [dataclasses.replace(s, calls=Counter()) for s in specs]


def source(nvml: FakeNvml, env: dict[str, str] | None = None, **kwargs: object) -> NvmlPowerSource:
    """A source over ``nvml``; discovery off unless asked for, clock from the fake."""
    kwargs.setdefault("period_probe_polls", 0)
    return NvmlPowerSource(
        nvml_module=nvml,
        environ=env if env is not None else {},
        clock=nvml.clock,
        **kwargs,  # type: ignore[arg-type]
    )


def ids(devices: list[PowerDevice]) -> list[str]:
    return [d.id for d in devices]


@pytest.fixture
def three() -> FakeNvml:
    return FakeNvml(gpus(GPU_A, GPU_B, GPU_C))


# -- which GPU is which -------------------------------------------------------------------------------


def test_it_satisfies_the_power_source_protocol(three):
    src: PowerSource = source(three)
    assert (src.name, src.kind) == ("nvml", "energy_counter")


def test_cuda_indices_in_cuda_visible_devices_follow_pci_order_not_nvml_order(three):
    # PCI order is B (01), C (41), A (81); "2,0" makes CUDA device 0 = A, CUDA device 1 = B.
    env = {"CUDA_VISIBLE_DEVICES": "2,0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert ids(source(three, env, devices=[0]).open()) == [f"nvml:{uuid(0xA)}"]
    assert ids(source(three, env, devices=[1]).open()) == [f"nvml:{uuid(0xB)}"]
    assert ids(source(three, env).open()) == [f"nvml:{uuid(0xA)}", f"nvml:{uuid(0xB)}"]


def test_identical_gpus_need_no_device_order_setting(three):
    # Same model everywhere: fastest-first cannot reorder them, so PCI order holds.
    assert ids(source(three, {}, devices=[0]).open()) == [f"nvml:{uuid(0xB)}"]
    assert ids(source(three, {}, devices=["cuda:2"]).open()) == [f"nvml:{uuid(0xA)}"]


def test_uuids_and_unique_prefixes_in_cuda_visible_devices(three):
    env = {"CUDA_VISIBLE_DEVICES": f"{uuid(0xC)},GPU-0000000a"}
    src = source(three, env, devices=[1, 0])
    assert ids(src.open()) == [f"nvml:{uuid(0xA)}", f"nvml:{uuid(0xC)}"]
    assert [d["cuda_indices"] for d in src.describe()["devices"]] == [[1], [0]]


def test_an_invalid_entry_hides_every_later_device(three):
    env = {"CUDA_VISIBLE_DEVICES": "1,-1,0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert ids(source(three, env).open()) == [f"nvml:{uuid(0xC)}"]
    with pytest.raises(PowerSourceError, match=r"CUDA device 1 is not visible.*1 GPU\(s\) visible"):
        source(three, env, devices=[1]).open()
    ambiguous = {"CUDA_VISIBLE_DEVICES": "GPU-0000000"}  # a prefix of all three: invalid
    assert not source(three, ambiguous).availability().ok


def test_different_models_with_fastest_first_order_are_refused_not_guessed():
    nvml = FakeNvml(gpus(GPU_A, FakeGpu(uuid(0xB), "00000000:01:00.0", name="Tesla T4")))
    with pytest.raises(PowerSourceError, match="CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        source(nvml, {}, devices=[0]).open()
    with pytest.raises(PowerSourceError, match="fastest first"):
        source(nvml, {"CUDA_VISIBLE_DEVICES": "1"}).open()
    # Identities need no order; nor does "every GPU".
    by_uuid = source(nvml, {"CUDA_VISIBLE_DEVICES": uuid(0xA)})
    assert ids(by_uuid.open()) == [f"nvml:{uuid(0xA)}"]
    assert len(source(nvml, {}).open()) == 2
    named = source(nvml, {"CUDA_VISIBLE_DEVICES": "1,0"}, devices=[uuid(0xB)])
    assert ids(named.open()) == [f"nvml:{uuid(0xB)}"]
    pci_order = source(nvml, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, devices=[0])
    assert ids(pci_order.open()) == [f"nvml:{uuid(0xB)}"]


def test_devices_may_name_gpus_by_uuid_or_pci_bus_id(three):
    src = source(three, {}, devices=[uuid(0xC), "0000:81:00.0"])
    assert ids(src.open()) == [f"nvml:{uuid(0xC)}", f"nvml:{uuid(0xA)}"]
    with pytest.raises(PowerSourceError, match="no single GPU matches 'GPU-ffff'"):
        source(three, {}, devices=["GPU-ffff"]).open()


def test_mig_devices_are_measured_once_through_their_parent_gpu():
    parent = FakeGpu(uuid(0xD), "00000000:17:00.0", mig_uuids=(mig_uuid(1), mig_uuid(2)))
    nvml = FakeNvml([parent, *gpus(GPU_B)])
    env = {"CUDA_VISIBLE_DEVICES": f"{mig_uuid(1)},MIG-00000002"}
    src = source(nvml, env)
    assert src.open() == [PowerDevice(f"nvml:{uuid(0xD)}", "NVIDIA H100 80GB HBM3", "gpu")]
    (described,) = src.describe()["devices"]
    assert described["mig_devices"] == [mig_uuid(1), mig_uuid(2)]
    assert described["cuda_indices"] == [0, 1]
    old_form = source(nvml, {"CUDA_VISIBLE_DEVICES": f"MIG-{uuid(0xD)}/1/0"})
    assert ids(old_form.open()) == [f"nvml:{uuid(0xD)}"]


def test_an_empty_cuda_visible_devices_hides_every_gpu(three):
    availability = source(three, {"CUDA_VISIBLE_DEVICES": ""}).availability()
    assert not availability.ok
    assert "leaves no GPU visible" in availability.reason
    assert three.refcount == 0


# -- the energy counter ------------------------------------------------------------------------------


def test_the_counter_gives_joules_since_open():
    nvml = FakeNvml(gpus(GPU_A, GPU_B))
    src = source(nvml)
    assert ids(src.open()) == [f"nvml:{uuid(0xB)}", f"nvml:{uuid(0xA)}"]
    assert src.kind == "energy_counter"
    assert src.read() == {f"nvml:{uuid(0xB)}": 0.0, f"nvml:{uuid(0xA)}": 0.0}
    nvml.clock.advance(2.0)
    # 2 s at 100 W and 300 W: 200 000 mJ and 600 000 mJ, reported in joules.
    assert src.read() == {f"nvml:{uuid(0xB)}": 200.0, f"nvml:{uuid(0xA)}": 600.0}
    assert all(g.calls["nvmlDeviceGetPowerUsage"] == 0 for g in nvml.gpus)


def test_the_counter_value_between_updates_is_the_last_published_one():
    nvml = FakeNvml(gpus(GPU_B))
    src = source(nvml)
    src.open()
    nvml.clock.advance(0.25)  # updates at +0.1 and +0.2 (clock starts on a period boundary)
    assert src.read() == {f"nvml:{uuid(0xB)}": 20.0}


def test_a_counter_that_drops_is_a_reset():
    script = {"mj": 9_000_000}
    nvml = FakeNvml([FakeGpu(uuid(1), "00000000:01:00.0", energy_mj=lambda t: script["mj"])])
    src = source(nvml)
    src.open()
    script["mj"] = 9_500_000
    assert src.read() == {f"nvml:{uuid(1)}": 500.0}
    script["mj"] = 12_000  # the driver reloaded
    with pytest.raises(CounterReset, match=r"went back from 9500000 mJ to 12000 mJ"):
        src.read()


def test_a_failing_counter_read_names_the_gpu():
    nvml = FakeNvml(gpus(GPU_B))
    src = source(nvml)
    src.open()
    nvml.gpus[0].energy_error = NVML_ERROR_GPU_IS_LOST
    with pytest.raises(PowerSourceError, match=rf"{uuid(0xB)}.*GPU is lost"):
        src.read()


# -- instant power -----------------------------------------------------------------------------------


def test_pre_volta_gpus_use_the_instant_power_field():
    pascal = FakeGpu(uuid(0xE), "00000000:02:00.0", name="Tesla P100", supports_energy=False, watts=123.0)
    nvml = FakeNvml([pascal])
    src = source(nvml)
    assert src.kind == "energy_counter"  # the preference, before open
    src.open()
    assert src.kind == "instant_power"
    assert src.read() == {f"nvml:{uuid(0xE)}": 123.0}
    assert pascal.calls["nvmlDeviceGetPowerUsage"] == 0
    assert src.describe()["devices"][0]["method"] == "sampled_power"


def test_one_gpu_without_a_counter_puts_every_gpu_on_instant_power():
    nvml = FakeNvml([*gpus(GPU_B), FakeGpu(uuid(0xE), "00000000:02:00.0", supports_energy=False)])
    src = source(nvml)
    src.open()
    assert src.kind == "instant_power"
    assert src.read() == {f"nvml:{uuid(0xB)}": 100.0, f"nvml:{uuid(0xE)}": 250.0}


@pytest.mark.parametrize(
    ("value_type", "milliwatts", "watts"),
    [(NVML_VALUE_TYPE_DOUBLE, 61234.5, 61.2345), (NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 70000, 70.0)],
)
def test_the_field_value_is_read_from_the_member_its_value_type_names(value_type, milliwatts, watts):
    gpu = FakeGpu(
        uuid(1),
        "00000000:01:00.0",
        supports_energy=False,
        field_value_type=value_type,
        power_mw=lambda t: milliwatts,
    )
    src = source(FakeNvml([gpu]))
    src.open()
    assert src.read()[f"nvml:{uuid(1)}"] == pytest.approx(watts)


def test_a_gpu_with_neither_counter_nor_field_fails_open_naming_it_and_both_reasons():
    gpu = FakeGpu(uuid(7), "00000000:07:00.0", supports_energy=False, field_return=NVML_ERROR_NOT_SUPPORTED)
    nvml = FakeNvml([gpu])
    with pytest.raises(PowerSourceError) as info:
        source(nvml).open()
    message = str(info.value)
    assert uuid(7) in message
    assert "NVML_FI_DEV_POWER_INSTANT" in message
    assert "Not Supported (NVML return code 3)" in message
    assert "its energy counter: Not Supported" in message
    assert nvml.refcount == 0  # open shut NVML down again


def test_a_field_error_at_read_time_is_an_error_not_a_zero():
    nvml = FakeNvml([FakeGpu(uuid(1), "00000000:01:00.0", supports_energy=False)])
    src = source(nvml)
    src.open()
    nvml.gpus[0].field_return = NVML_ERROR_GPU_IS_LOST
    with pytest.raises(PowerSourceError, match=rf"NVML_FI_DEV_POWER_INSTANT on .*{uuid(1)}.*GPU is lost"):
        src.read()
    nvml.gpus[0].field_return = 0
    nvml.gpus[0].field_value_type = 42
    with pytest.raises(PowerSourceError, match="unknown value type 42"):
        src.read()


# -- availability ------------------------------------------------------------------------------------


def test_without_pynvml_the_reason_is_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    src = NvmlPowerSource()
    assert (src.availability().ok, src.availability().reason) == (False, NOT_INSTALLED)
    assert NOT_INSTALLED == "nvidia-ml-py is not installed; pip install nvidia-ml-py"
    with pytest.raises(PowerSourceError, match="nvidia-ml-py is not installed"):
        src.open()
    assert src.describe()["error"] == NOT_INSTALLED


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
        (NVML_ERROR_LIBRARY_NOT_FOUND, "Library Not Found"),
    ],
)
def test_when_nvml_cannot_start_the_reason_is_nvmls_message(code, text):
    nvml = FakeNvml(gpus(GPU_A), init_error=code)
    availability = source(nvml).availability()
    assert not availability.ok
    assert availability.reason.startswith("nvml: NVML could not start: ")
    assert text in availability.reason
    with pytest.raises(PowerSourceError, match=text):
        source(nvml).open()
    assert nvml.shutdown_calls == 0  # nothing to balance: init never succeeded


def test_no_gpu_is_unavailable_and_shutdown_balances_init():
    nvml = FakeNvml([])
    availability = source(nvml).availability()
    assert (availability.ok, availability.reason) == (False, "nvml: NVML sees no NVIDIA GPU")
    assert (nvml.init_calls, nvml.shutdown_calls, nvml.refcount) == (1, 1, 0)


def test_an_available_source_leaves_nvml_as_it_found_it(three):
    assert source(three).availability().ok
    assert (three.init_calls, three.shutdown_calls) == (1, 1)


# -- update period -----------------------------------------------------------------------------------


def test_the_update_period_is_discovered_from_value_changes():
    # Values change every 100 ms of fake time; each NVML call takes 1 ms.
    nvml = FakeNvml(gpus(GPU_B), call_latency_s=0.001)
    src = source(nvml, period_probe_polls=1000, period_probe_s=0.5)
    src.open()
    assert src.update_period_s() == pytest.approx(0.1, abs=0.0015)
    # It stopped once three intervals were seen, well before the 1000-poll bound.
    assert nvml.gpus[0].calls["nvmlDeviceGetTotalEnergyConsumption"] < 450


def test_discovery_of_the_instant_field_too():
    nvml = FakeNvml(
        [
            FakeGpu(
                uuid(1),
                "00000000:01:00.0",
                supports_energy=False,
                power_mw=lambda t: 50_000 + round(t * 10) % 5 * 1000,
            )
        ],
        call_latency_s=0.002,
        clock=FakeClock(start_s=10.0),
    )
    src = source(nvml, period_probe_polls=200, period_probe_s=0.5)
    src.open()
    assert src.update_period_s() == pytest.approx(0.1, abs=0.0025)


def test_a_value_that_never_changes_gives_no_period_and_the_polls_are_bounded():
    nvml = FakeNvml([FakeGpu(uuid(1), "00000000:01:00.0", energy_mj=lambda t: 42)], call_latency_s=0.0001)
    src = source(nvml, period_probe_polls=200, period_probe_s=10.0)
    src.open()
    assert src.update_period_s() is None
    # The first probe, the baseline, 200 polls and the start value: no more.
    assert nvml.gpus[0].calls["nvmlDeviceGetTotalEnergyConsumption"] == 203
    timed = FakeNvml([FakeGpu(uuid(1), "00000000:01:00.0", energy_mj=lambda t: 42)], call_latency_s=0.01)
    source(timed, period_probe_polls=200, period_probe_s=0.5).open()
    assert timed.gpus[0].calls["nvmlDeviceGetTotalEnergyConsumption"] <= 3 + 51


def test_energy_counts_from_the_end_of_open_not_from_before_discovery():
    nvml = FakeNvml(gpus(GPU_B), call_latency_s=0.001)
    src = source(nvml, period_probe_polls=1000, period_probe_s=0.5)
    src.open()
    assert src.read() == {f"nvml:{uuid(0xB)}": 0.0}


# -- describe and lifecycle --------------------------------------------------------------------------


def test_describe_reports_limits_in_watts_and_null_for_unsupported_queries():
    plain = FakeGpu(uuid(1), "00000000:01:00.0", power_limit_mw=350_000, enforced_power_limit_mw=300_500)
    bare = FakeGpu(
        uuid(2), "00000000:02:00.0", power_limit_mw=None, enforced_power_limit_mw=None, persistence_mode=None
    )
    nvml = FakeNvml([plain, bare], nvml_version=None)
    src = source(nvml, {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    before = src.describe()  # works before open, and leaves NVML shut down
    assert nvml.refcount == 0
    assert before["devices"][0]["method"] is None
    src.open()
    described = src.describe()
    json.dumps(described)  # plain JSON
    assert described["driver_version"] == "550.54.15"
    assert described["nvml_version"] is None
    assert described["cuda_visible_devices"] == "0,1"
    first, second = described["devices"]
    assert (first["power_limit_W"], first["enforced_power_limit_W"], first["persistence_mode"]) == (
        350.0,
        300.5,
        True,
    )
    assert (second["power_limit_W"], second["enforced_power_limit_W"], second["persistence_mode"]) == (
        None,
        None,
        None,
    )
    assert (first["uuid"], first["pci_bus_id"], first["method"]) == (uuid(1), "00000000:01:00.0", "counter")


def test_describe_never_raises_when_nvml_cannot_start():
    described = source(FakeNvml([], init_error=NVML_ERROR_DRIVER_NOT_LOADED)).describe()
    assert described["error"] == "Driver Not Loaded"


def test_close_shuts_nvml_down_once_and_is_idempotent(three):
    src = source(three)
    src.open()
    assert three.refcount == 1
    src.close()
    src.close()
    assert (three.init_calls, three.shutdown_calls, three.refcount) == (1, 1, 0)
    with pytest.raises(PowerSourceError, match="not open"):
        src.read()


def test_opening_again_restarts_without_leaking_an_init(three):
    src = source(three)
    src.open()
    three.clock.advance(1.0)
    src.open()
    assert three.refcount == 1
    assert set(src.read().values()) == {0.0}
    src.close()
    assert three.refcount == 0
