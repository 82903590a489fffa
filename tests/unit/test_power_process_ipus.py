"""A model whose backend let the SDK choose its IPUs (PopTorch on plain ``ipu``) is metered on the
IPUs gcipuinfo names its process as user of (``power.ipus_of_processes``), in this process or a
worker process, and on nothing when none is named: never the partition.

The host is an M2000 (per-IPU power) of which another program (process 4242) uses IPUs 2 and 3;
the fakes share which process attached which IPU through ``tests.fakes.ipu_users``, as the driver
does between real processes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from pytest_ipu import power
from pytest_ipu.backends.ipu.poptorch import PopTorchBackend
from pytest_ipu.power.base import PowerSourceError
from pytest_ipu.power.gcipuinfo import GcIpuInfoPowerSource
from tests.fakes import fake_poptorch
from tests.fakes import ipu_users
from tests.fakes.fake_gcipuinfo import FakeGcIpuInfoModule
from tests.fakes.fake_gcipuinfo import m2000

OTHER = 4242


class NoProcessIpus:
    """A power source that meters, but cannot say which process uses what."""

    name = "rapl"


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeGcIpuInfoModule:
    """An M2000 whose IPUs 2 and 3 another program uses; attaches shared between processes."""
    for var in fake_poptorch.ENVIRONMENT:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(ipu_users.ENV, str(tmp_path / "ipu-users.json"))
    fake_poptorch.reset()
    module = FakeGcIpuInfoModule(m2000("M2000-A"))
    module.use({2, 3}, OTHER)
    yield module
    fake_poptorch.reset()


def partition(module: FakeGcIpuInfoModule) -> GcIpuInfoPowerSource:
    return GcIpuInfoPowerSource(gcipuinfo_module=module, period_probe_polls=0)


def compile_on_any_ipu() -> object:
    backend = PopTorchBackend(device="ipu", poptorch_module=fake_poptorch, torch_module=torch)
    x = torch.randn(2, 6)
    return backend.compile(torch.nn.Linear(6, 3).eval(), (x,), "fp32", {})


def test_the_fake_lists_each_ipus_user_as_a_decimal_string_and_an_idle_ipu_without_the_key(host):
    devices = host.gcipuinfo().getDevices()
    assert [d.get("user process id") for d in devices] == [None, None, "4242", "4242"]
    compiled = compile_on_any_ipu()
    try:
        devices = host.gcipuinfo().getDevices()
        assert [d.get("user process id") for d in devices] == [str(os.getpid()), None, "4242", "4242"]
    finally:
        compiled.close()
    assert [d.get("user process id") for d in host.gcipuinfo().getDevices()] == [None, None, "4242", "4242"]


def test_a_poptorch_model_on_any_ipu_is_found_on_the_ipu_its_process_uses(host):
    compiled = compile_on_any_ipu()
    try:
        assert compiled.ipu_ids is None  # PopTorch does not say which IPU it took
        assert compiled.ipu_count == 1
        found = power.ipus_of_processes(partition(host), (os.getpid(),), compiled.ipu_count)
        assert found == ((0,), "")
        # The other program's IPUs are its own: asked for its process, those two.
        assert power.ipus_of_processes(partition(host), (OTHER,), None) == ((2, 3), "")
    finally:
        compiled.close()


def test_a_model_in_a_worker_process_is_found_by_the_workers_pid(host):
    from pytest_ipu.placement.instances import InstanceSpec
    from pytest_ipu.placement.instances import ProcessInstances

    backend = PopTorchBackend(device="ipu", poptorch_module=fake_poptorch, torch_module=torch)
    x = torch.randn(2, 6)
    group = ProcessInstances(
        [InstanceSpec(0, backend.worker_factory(), torch.nn.Linear(6, 3).eval(), (x,), "fp32")]
    )
    try:
        workers = group.process_ids()
        assert workers != (os.getpid(),)
        # The worker attached IPU 0 (2 and 3 are the other program's): found by its pid, not ours.
        assert power.ipus_of_processes(partition(host), workers, None) == ((0,), "")
        ours, why = power.ipus_of_processes(partition(host), (os.getpid(),), None)
        assert ours is None
        assert f"gcipuinfo lists no IPU as used by process {os.getpid()}" in why
    finally:
        group.close()


def test_no_ipu_named_means_not_measured_never_the_partition(host):
    # Nothing attached by this process: no IPU carries its pid.
    found, why = power.ipus_of_processes(partition(host), (os.getpid(),), 1)
    assert found is None
    assert why.startswith(
        f"gcipuinfo lists no IPU as used by process {os.getpid()} (no IPU's 'user process id'"
    )
    reason = power.UNKNOWN_IPUS.format(target="poptorch:ipu", backend="poptorch", lookup=why)
    assert reason.startswith(
        "which IPUs poptorch:ipu runs on is unknown (its backend let the SDK choose them, and "
    )
    # A library that does not export the key: the same, although the model holds IPU 0.
    compiled = compile_on_any_ipu()
    try:
        host.lists_users = False
        assert power.ipus_of_processes(partition(host), (os.getpid(),), 1)[0] is None
    finally:
        compiled.close()


def test_a_process_holding_more_ipus_than_the_model_is_not_attributed(host):
    host.use({1}, os.getpid())  # this process also holds IPU 1, for another model
    compiled = compile_on_any_ipu()
    try:
        found, why = power.ipus_of_processes(partition(host), (os.getpid(),), 1)
        assert found is None
        assert why == (
            f"gcipuinfo lists process {os.getpid()} as the user of IPUs 0, 1, but the model holds 1: the "
            "process's other IPUs are another model's"
        )
    finally:
        compiled.close()


def test_a_source_that_cannot_tell_users_or_cannot_list_gives_the_reason(host):
    assert power.ipus_of_processes(None, (1,), None) == (
        None,
        "no power source could be made to list the IPUs' users",
    )
    found, why = power.ipus_of_processes(NoProcessIpus(), (1,), None)
    assert (found, why) == (None, "power source 'rapl' cannot say which IPUs a process uses")
    broken = GcIpuInfoPowerSource(
        gcipuinfo_module=FakeGcIpuInfoModule([], construct_error=OSError("no driver"))
    )
    with pytest.raises(PowerSourceError, match=r"^gcipuinfo: could not list the IPUs: no driver$"):
        broken.ipus_used_by((1,))
    found, why = power.ipus_of_processes(broken, (1,), None)
    assert (found, why) == (
        None,
        "the IPUs' users could not be listed: gcipuinfo: could not list the IPUs: no driver",
    )
