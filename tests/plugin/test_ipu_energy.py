"""IPU energy is the energy of exactly the IPUs a benchmark used, end to end against the SDK fakes.

Two hosts, each a subprocess run (the inner run imports torch, and PopART runs the exported model
with onnxruntime):

- two C2 cards (board power only: 60 W and 110 W) while another program holds the first card: a
  benchmark lands on the second card and is charged that card's board power alone, stated as the
  ``board`` scope with the card's idle IPU named; a benchmark whose card mate another program uses
  is not measured, with the reason;
- an M2000 (per-IPU power: 92.3, 91.0, 93.5 and 90 W) of which another program uses IPUs 2 and 3:
  a benchmark on one IPU is charged that IPU's power alone, a placed 2-IPU model and two instances
  the power of both IPUs they hold (not a multi-IPU device id gcipuinfo does not list), and a
  PopTorch model on plain ``ipu``, whose IPU PopTorch does not name, the power of the IPU
  gcipuinfo names its process as user of; where gcipuinfo names none, or the process also holds
  another open model's IPU, it is not measured. PopTorch training steps are charged their IPUs as
  inference models are.

The conftest's gcipuinfo source honours the device the plugin asks for (``power.ipus_of``), as the
built-in one does: what the meter is given is what is measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.power.gcipuinfo import SHARED_BOARD
from tests.plugin.inner import INNER_ADDOPTS
from tests.plugin.inner import XDIST_VARIABLES
from tests.unit.torch_versions import onnx_export_modules

for _module in onnx_export_modules():
    pytest.importorskip(_module)

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
import json
import os
from pathlib import Path

from pytest_ipu import power
from pytest_ipu.backends.ipu.popart import PopArtBackend
from pytest_ipu.backends.ipu.poptorch_training import PopTorchTrainingBackend
from pytest_ipu.power.gcipuinfo import GcIpuInfoPowerSource
from tests.fakes import fake_gcipuinfo
from tests.fakes import fake_popart
from tests.fakes import fake_poptorch

#: The program that is not this benchmark.
OTHER = 4242
POPART = fake_popart.make_module(ipus=4)
if os.environ["ENERGY_HOST"] == "two-c2":
    POPART.configure(architecture="ipu1")
    fake_poptorch.configure(ipus=4, version=1)
    GCIPUINFO = fake_gcipuinfo.FakeGcIpuInfoModule(
        fake_gcipuinfo.c2_card("CARD-A", 0, "60.0 W") + fake_gcipuinfo.c2_card("CARD-B", 2, "110.0 W")
    )
    ELSEWHERE = {0, 1}  # the first card
else:
    fake_poptorch.configure(ipus=4, version=2)
    GCIPUINFO = fake_gcipuinfo.FakeGcIpuInfoModule(fake_gcipuinfo.m2000("M2000-A"))
    ELSEWHERE = {2, 3}


def elsewhere(ipus):
    # Another program holds these IPUs: PopART cannot attach them, gcipuinfo names its process.
    global ELSEWHERE
    GCIPUINFO.use(ELSEWHERE, None)
    ELSEWHERE = set(ipus)
    POPART.configure(busy=ELSEWHERE)
    GCIPUINFO.use(ELSEWHERE, OTHER)


elsewhere(ELSEWHERE)
MADE = []


def pytest_ipu_make_backend(config, target):
    if target.backend == "popart":
        return PopArtBackend(target.backend, target.device, Path("cache"), popart_module=POPART)
    if target.backend == "poptorch":
        return PopTorchTrainingBackend(target.backend, target.device, poptorch_module=fake_poptorch)
    return None


def pytest_ipu_make_power_source(config, name, device):
    if name != "gcipuinfo":
        return None
    MADE.append(device)
    Path("meters.json").write_text(json.dumps(MADE))
    return GcIpuInfoPowerSource(power.ipus_of(device), gcipuinfo_module=GCIPUINFO, period_probe_polls=0)
"""

COMMON = """
import pytest
import torch

from conftest import GCIPUINFO
from conftest import elsewhere

torch.manual_seed(0)
MODEL = torch.nn.Sequential(torch.nn.Linear(6, 3)).eval()
X = torch.randn(4, 6)


def measure(ipu_compile, ipu_benchmark):
    ipu_benchmark(ipu_compile(MODEL, (X,), precision="fp32"), (X,))


def train(ipu_train, ipu_benchmark):
    y = torch.tensor([0, 1, 2, 0])
    sgd = lambda params: torch.optim.SGD(params, lr=0.1)  # noqa: E731
    step = ipu_train(torch.nn.Linear(6, 3), torch.nn.functional.cross_entropy, sgd, (X, y), precision="fp32")
    ipu_benchmark(step, (X, y))
"""

TWO_C2 = (
    COMMON
    + """

@pytest.mark.ipu(backend="popart:ipu")
def test_on_the_second_card(ipu_compile, ipu_benchmark):
    measure(ipu_compile, ipu_benchmark)  # PopART takes the first free IPU: 2, on the second card


@pytest.mark.ipu(backend="popart:ipu:3")
def test_beside_another_program(ipu_compile, ipu_benchmark):
    elsewhere({0, 1, 2})  # the other program now holds IPU 2 as well: the card is shared
    measure(ipu_compile, ipu_benchmark)
"""
)

M2000 = (
    COMMON
    + """

# First: no other model of this process holds an IPU yet.
@pytest.mark.ipu(backend="poptorch:ipu:1")
def test_a_poptorch_training_step_on_a_pinned_ipu(ipu_train, ipu_benchmark):
    train(ipu_train, ipu_benchmark)


@pytest.mark.ipu(backend="poptorch:ipu")
def test_a_poptorch_training_step_on_any_ipu(ipu_train, ipu_benchmark):
    train(ipu_train, ipu_benchmark)  # PopTorch takes the first free IPU: 0

@pytest.mark.ipu(backend="popart:ipu")
def test_one_ipu(ipu_compile, ipu_benchmark):
    measure(ipu_compile, ipu_benchmark)  # PopART takes the first free IPU: 0


@pytest.mark.ipu(backend="popart:ipu", replicas=2)
def test_a_placed_two_ipu_model(ipu_compile, ipu_benchmark):
    measure(ipu_compile, ipu_benchmark)  # device 4 of gc-info -l: IPUs 0 and 1


@pytest.mark.ipu(backend="popart:ipu", instances=2)
def test_two_instances(ipu_compile, ipu_benchmark):
    measure(ipu_compile, ipu_benchmark)


@pytest.mark.ipu(backend="poptorch:ipu")
def test_poptorch_chooses_its_ipu(ipu_compile, ipu_benchmark):
    measure(ipu_compile, ipu_benchmark)  # PopTorch takes the first free IPU: 0, which names this process


@pytest.mark.ipu(backend="poptorch:ipu")
def test_a_poptorch_training_step_beside_an_open_model(ipu_train, ipu_benchmark):
    # The inference model above still holds IPU 0 in this process: the step takes IPU 1, and
    # gcipuinfo names this process as the user of both.
    train(ipu_train, ipu_benchmark)


@pytest.mark.ipu(backend="poptorch:ipu")
def test_poptorch_where_gcipuinfo_names_no_user(ipu_compile, ipu_benchmark):
    GCIPUINFO.lists_users = False  # a library that does not export "user process id"
    try:
        ipu_benchmark(ipu_compile(torch.nn.Linear(6, 3).eval(), (X,), precision="fp32"), (X,))
    finally:
        GCIPUINFO.lists_users = True
"""
)


def _run(path: Path, host: str, tests: str) -> tuple[pytest.RunResult, dict[str, dict[str, Any]], list[str]]:
    """``tests`` on ``host`` in a subprocess in ``path``: the result, each benchmark's power object by
    test name, and the devices the plugin asked a meter for."""
    (path / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    (path / "test_energy.py").write_text(tests, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in XDIST_VARIABLES}
    env.update(
        ENERGY_HOST=host,
        PYTEST_ADDOPTS=INNER_ADDOPTS,
        PYTEST_IPU_REPEATS="1",
        # Which process attached which IPU, shared by the fakes as the driver shares it.
        FAKE_GRAPHCORE_IPU_USERS=str(path / "ipu-users.json"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    options = ("--ipu-rounds=4", "--ipu-warmup-rounds=1", "--ipu-idle=0", "--benchmark-json=run.json")
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-rA", *options],
        cwd=path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    result = pytest.RunResult(
        done.returncode, done.stdout.splitlines(), done.stderr.splitlines(), time.monotonic() - start
    )
    assert result.ret == 0, "\n".join(result.outlines[-40:] + result.errlines[-20:])
    data = json.loads((path / "run.json").read_text(encoding="utf-8"))
    powers = {b["name"].split("[")[0]: b["extra_info"]["ipu"]["power"] for b in data["benchmarks"]}
    meters = json.loads((path / "meters.json").read_text(encoding="utf-8"))
    return result, powers, meters


@pytest.fixture(scope="module")
def two_c2(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict[str, Any]], list[str]]:
    _, powers, meters = _run(tmp_path_factory.mktemp("two_c2"), "two-c2", TWO_C2)
    return powers, meters


@pytest.fixture(scope="module")
def m2000(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict[str, Any]], list[str]]:
    _, powers, meters = _run(tmp_path_factory.mktemp("m2000"), "m2000", M2000)
    return powers, meters


def _devices(power: dict[str, Any]) -> list[tuple[str, list[int], list[int]]]:
    return [(d["scope"], d["ipus"], d["unused_ipus"]) for d in power["devices"]]


def test_a_benchmark_on_the_second_c2_card_is_charged_that_card_alone(two_c2) -> None:
    powers, meters = two_c2
    power = powers["test_on_the_second_card"]
    assert power["measured"], power["reason"]
    assert power["source"] == "gcipuinfo"
    # The second card's board power, not both cards' 170 W.
    assert power["mean_power_w"] == pytest.approx(110.0)
    assert power["scope"] == "board"
    # The card's two IPUs, and the one this benchmark did not use (idle, yet in the reading).
    assert _devices(power) == [("ipu-board", [2, 3], [3])]
    assert meters[0] == "ipu:2"


def test_a_card_shared_with_another_program_is_not_measured(two_c2) -> None:
    powers, meters = two_c2
    power = powers["test_beside_another_program"]
    assert power["measured"] is False
    assert power["reason"].startswith(f"gcipuinfo unavailable: {SHARED_BOARD}: C2 board CARD-B (IPUs 2, 3) ")
    assert "besides IPU(s) 3 it covers IPU 2 (used by process 4242)" in power["reason"]
    assert (power["energy_j"], power["scope"]) == (None, None)
    assert meters == ["ipu:2", "ipu:3"]


def test_a_benchmark_on_one_m2000_ipu_is_charged_that_ipu_alone(m2000) -> None:
    powers, _ = m2000
    power = powers["test_one_ipu"]
    assert power["measured"], power["reason"]
    # IPU 0's own power, not the machine's 366.8 W (nor the other program's IPUs 2 and 3).
    assert power["mean_power_w"] == pytest.approx(92.3)
    assert power["scope"] == "ipus"
    assert _devices(power) == [("ipu", [0], [])]


@pytest.mark.parametrize("test", ["test_a_placed_two_ipu_model", "test_two_instances"])
def test_a_model_on_two_ipus_is_charged_both_of_them(m2000, test: str) -> None:
    powers, meters = m2000
    power = powers[test]
    assert power["measured"], power["reason"]
    assert power["mean_power_w"] == pytest.approx(92.3 + 91.0)
    assert power["scope"] == "ipus"
    assert _devices(power) == [("ipu", [0], []), ("ipu", [1], [])]
    # Both IPUs by their own ids: never the 2-IPU device's id 4, which no gcipuinfo entry carries.
    assert "ipu:0,1" in meters
    assert "ipu:4" not in meters


def test_a_poptorch_model_on_any_free_ipu_is_charged_the_ipu_its_process_uses(m2000) -> None:
    powers, meters = m2000
    power = powers["test_poptorch_chooses_its_ipu"]
    assert power["measured"], power["reason"]
    # IPU 0's own power, found by this process's id in gcipuinfo's "user process id".
    assert power["mean_power_w"] == pytest.approx(92.3)
    assert power["scope"] == "ipus"
    assert _devices(power) == [("ipu", [0], [])]
    assert "ipu:0" in meters


@pytest.mark.parametrize(
    ("test", "watts", "ipu"),
    [
        ("test_a_poptorch_training_step_on_a_pinned_ipu", 91.0, 1),  # ipu:1's own IPU
        ("test_a_poptorch_training_step_on_any_ipu", 92.3, 0),  # the IPU its process uses
    ],
)
def test_a_poptorch_training_step_is_charged_its_ipu_as_inference_is(
    m2000, test: str, watts: float, ipu: int
):
    powers, _ = m2000
    power = powers[test]
    assert power["measured"], power["reason"]
    assert power["mean_power_w"] == pytest.approx(watts)
    assert _devices(power) == [("ipu", [ipu], [])]


def test_a_process_holding_another_models_ipu_too_is_not_measured(m2000) -> None:
    powers, _ = m2000
    power = powers["test_a_poptorch_training_step_beside_an_open_model"]
    assert power["measured"] is False
    assert (
        "as the user of IPUs 0, 1, but the model holds 1: the process's other IPUs are another model's"
        in (power["reason"])
    )
    assert (power["energy_j"], power["scope"]) == (None, None)


def test_a_poptorch_model_whose_ipu_names_no_user_is_not_measured_with_the_reason(m2000) -> None:
    powers, _ = m2000
    power = powers["test_poptorch_where_gcipuinfo_names_no_user"]
    assert power["measured"] is False
    assert power["reason"].startswith(
        "which IPUs poptorch:ipu runs on is unknown (its backend let the SDK choose them, and gcipuinfo "
        "lists no IPU as used by process "
    )
    # Never the partition's total, nor any figure.
    assert (power["energy_j"], power["mean_power_w"], power["scope"]) == (None, None, None)
