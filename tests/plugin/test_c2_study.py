"""The C2 study (``benchmarks/test_resnext101_c2.py``) end to end against the SDK fakes.

The study module runs unchanged; the inner conftest swaps in what a machine without IPUs lacks: the
fake PopART (a C2 card's two IPUs), the fake PopTorch, a fake gcipuinfo reading the card's board
power, and a small convolutional stand-in for ResNeXt-101 (the real one takes minutes per batch on
these CPUs). A subprocess run: the inner run imports torch, and the PopTorch instances spawn
worker processes of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.plugin.inner import INNER_ADDOPTS
from tests.plugin.inner import XDIST_VARIABLES
from tests.unit.torch_versions import NO_CPU_FP16
from tests.unit.torch_versions import onnx_export_modules
from tests.unit.torch_versions import torch_version

# The inner run compiles a torch model, and the fake PopART runs it through the ONNX path.
for _module in onnx_export_modules():
    pytest.importorskip(_module)
if (torch_version() or (0, 0)) < (2, 1):
    # The study runs in fp16, and the fakes of PopTorch and PopART compute with torch on the CPU.
    pytest.skip(NO_CPU_FP16, allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
from pathlib import Path

import pytest
import torch

from benchmarks.conftest import pytest_addoption  # noqa: F401 (the study's options)
from pytest_ipu.backends.ipu.popart import PopArtBackend
from pytest_ipu.backends.ipu.poptorch import PopTorchBackend
from pytest_ipu.power.gcipuinfo import GcIpuInfoPowerSource
from tests.fakes import fake_gcipuinfo
from tests.fakes import fake_popart
from tests.fakes import fake_poptorch

POPART = fake_popart.make_module(ipus=2)  # a C2 card: two IPUs, of the first generation
POPART.configure(architecture="ipu1")
fake_poptorch.configure(ipus=2, version=1)
GCIPUINFO = fake_gcipuinfo.FakeGcIpuInfoModule(fake_gcipuinfo.c2_card(board_power="110.0 W"))


def pytest_ipu_make_backend(config, target):
    if target.backend == "popart":
        return PopArtBackend(target.backend, target.device, Path("cache"), popart_module=POPART)
    if target.backend == "poptorch":
        return PopTorchBackend(target.backend, target.device, poptorch_module=fake_poptorch)
    return None


def pytest_ipu_make_power_source(config, name, device):
    if name == "gcipuinfo":
        return GcIpuInfoPowerSource(gcipuinfo_module=GCIPUINFO, period_probe_polls=0)
    return None


@pytest.fixture(scope="session")
def resnext_variant():
    return "stand-in"


@pytest.fixture(scope="session")
def resnext101():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 7, stride=8),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 10),
    ).eval()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    # Every IPU must be free again once the run is over, and no worker process left running.
    import json
    import multiprocessing

    Path("after.json").write_text(json.dumps({
        "attached": POPART.system.attached_count(),
        "children": len(multiprocessing.active_children()),
    }))
"""

STUDY = "from benchmarks.test_resnext101_c2 import *  # noqa: F403 (the study, unchanged)\n"


def _study(path: Path, *args: str, failures: bool = False) -> tuple[pytest.RunResult, dict]:
    """The study (and, with ``failures``, the ``FAILURES`` module beside it) run in a subprocess in
    ``path``: the run's result (``-rA``: each test's outcome, and each skip's reason, is in the short
    summary) and its JSON."""
    (path / "conftest.py").write_text(CONFTEST)
    (path / "test_c2.py").write_text(STUDY)
    if failures:
        (path / "test_failures.py").write_text(FAILURES.lstrip("\n"))  # as pytester writes it
    env = {k: v for k, v in os.environ.items() if k not in XDIST_VARIABLES}
    env.update(
        PYTEST_ADDOPTS=INNER_ADDOPTS,
        PYTEST_IPU_REPEATS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    options = ("--ipu-rounds=4", "--ipu-warmup-rounds=1", "--ipu-idle=0", "--benchmark-json=c2.json")
    start = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-rA",
            *options,
            *args,
        ],
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
    data = json.loads((path / "c2.json").read_text()) if (path / "c2.json").exists() else {}
    return result, data


def _outcomes(result: pytest.RunResult, module: str) -> dict[str, int]:
    """How many of ``module``'s tests had each outcome, from ``-rA``'s short summary."""
    counts: dict[str, int] = {}
    for line in result.outlines:
        word, _, rest = line.partition(" ")
        if word == "SKIPPED" and rest.startswith("[") and f"] {module}:" in rest:
            counts["skipped"] = counts.get("skipped", 0) + int(rest[1 : rest.index("]")])
        elif word in ("PASSED", "FAILED", "ERROR") and rest.startswith(f"{module}::"):
            counts[word.lower()] = counts.get(word.lower(), 0) + 1
    return counts


@pytest.fixture(scope="module")
def c2_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pytest.RunResult, dict]:
    """The study at one batch per call (the parity check runs: at the example's 200 it is left
    out), and beside it the failures (``FAILURES``), in one run: its directory, result and JSON."""
    path = tmp_path_factory.mktemp("c2")
    result, data = _study(path, "--c2-batches-per-step=1", "-k", "2] or 12] or test_failures", failures=True)
    return path, result, data


def test_the_c2_study_runs_the_examples_configuration(tmp_path: Path) -> None:
    """Several batches per call and the example's memory proportion reach both backends' compiles."""
    result, data = _study(tmp_path, "--c2-batches-per-step=3", "-k=ipu-2]")
    assert _outcomes(result, "test_c2.py") == {"passed": 2}, result.outlines[-40:]
    records = {b["name"]: b["extra_info"]["ipu"] for b in data["benchmarks"]}
    popart = records["test_resnext101_c2_popart[popart-ipu-2]"]
    poptorch = records["test_resnext101_c2_poptorch[poptorch-ipu-2]"]
    for record in (popart, poptorch):
        assert record["batch_size"] == record["items_per_call"] == 2 * 3  # batch 2, three per call
        assert record["parity"] is None  # checked at --c2-batches-per-step=1 only
    for instance in popart["compile_info"]["instances"]:
        info = instance["info"]
        assert (info["batches_per_step"], info["micro_batch"]) == (3, 2)
        assert info["available_memory_proportion"] == 0.3
        assert info["available_memory_convs"] == 1  # the stand-in's one convolution
        assert info["ipu_version"] == "ipu1"  # the C2 card's IPUs
        assert info["partials_type"] == "half"  # the example's --half_partials
    for instance in poptorch["compile_info"]["instances"]:
        info = instance["info"]
        assert info["device_iterations"] == 3
        assert info["options"]["available_memory_proportion"] == 0.3
        assert info["options"]["partials_type"] == "fp16"
        # What PopTorch handed to PopART: the example's two settings.
        assert info["popart_partials"] == {"matmuls": "half", "convolutions": "half"}
    # The IPU's cycle count: the two PopART sessions (threads) count alike, read after the rounds;
    # PopTorch's instances run in worker processes, which report none, and the record says so.
    count = popart["counts"]["ipu_cycles"]
    assert count["per_call"] is not None, count
    assert count["method"] == "counting pass"
    assert len(set(count["reads"])) == 1, count
    assert "ipu_cycles" not in poptorch["counts"]  # it has the host's instructions, as every timed record


def test_the_memory_proportion_follows_the_example() -> None:
    """0.26 only for a global batch of 5: the study's batches are per instance, two instances."""
    from benchmarks import test_resnext101_c2 as study

    assert [study.memory_proportion(b) for b in (2, 4, 5, 6, 12)] == [0.3, 0.3, 0.26, 0.3, 0.3]
    assert study.compile_options("popart", 5, 200) == {
        "batches_per_step": 200,
        "available_memory_proportion": 0.3,  # a global batch of 10
        "partials_type": "half",
    }
    assert study.compile_options("poptorch", 8, 1) == {
        "device_iterations": 1,
        "available_memory_proportion": 0.3,
        "partials_type": "fp16",
    }


def test_the_c2_study_runs_end_to_end_against_the_fakes(c2_run: tuple[Path, pytest.RunResult, dict]) -> None:
    path, result, data = c2_run
    assert _outcomes(result, "test_c2.py") == {"passed": 4}, result.outlines[-40:]
    records = {
        b["name"]: b["extra_info"]["ipu"]
        for b in data["benchmarks"]
        if b["name"].startswith("test_resnext101")
    }
    assert sorted(records) == [
        "test_resnext101_c2_popart[popart-ipu-12]",
        "test_resnext101_c2_popart[popart-ipu-2]",
        "test_resnext101_c2_poptorch[poptorch-ipu-12]",
        "test_resnext101_c2_poptorch[poptorch-ipu-2]",
    ]
    for name, record in records.items():
        backend = "popart" if "popart" in name else "poptorch"
        assert record["backend"] == backend
        assert record["precision"] == "fp16"
        placement = record["placement"]
        assert placement["instances"] == 2
        assert placement["ipus_per_instance"] == 1
        assert placement["devices"] == ["ipu:0", "ipu:1"]
        assert placement["runner"] == ("threads" if backend == "popart" else "processes")
        assert placement["ipu_ids"] == [[0], [1]]
        assert record["compile_s"] > 0
        assert [i["index"] for i in record["instances"]] == [0, 1]
        assert all(i["compile_s"] > 0 for i in record["instances"])
        assert [i["calls"] for i in record["instances"]] == [4, 4]
        assert record["parity"]["passed"]
        # Throughput: both instances' items (batch x 2 per round) over the one window.
        batch = record["batch_size"]
        expected = 2 * batch * record["rounds"] / record["window_s"]
        assert record["throughput_items_per_s"] == pytest.approx(expected, rel=1e-9)
        # Latency pools every call of every instance: it lies within the instances' own ranges.
        lows = [i["latency_s"]["min"] for i in record["instances"]]
        highs = [i["latency_s"]["max"] for i in record["instances"]]
        assert min(lows) == pytest.approx(record["latency_s"]["min"])
        assert max(highs) == pytest.approx(record["latency_s"]["max"])
        power = record["power"]
        assert power["measured"]
        assert power["source"] == "gcipuinfo"
        assert power["mean_power_w"] == pytest.approx(110.0)  # the board power, counted once
        # The host cost counts PopTorch's instance worker processes beside this one.
        cpu = record["cpu"]
        assert cpu["workers"] == (0 if backend == "popart" else 2)
        assert (cpu["workers_total_s"] > 0) == (backend == "poptorch")
        assert cpu["host_cores"] == pytest.approx(cpu["process_total_s"] / record["window_s"])
    # PopTorch's own latency counters, read in each worker process; PopART has none.
    poptorch = records["test_resnext101_c2_poptorch[poptorch-ipu-2]"]
    assert [i["device_latency"]["resolution_s"] for i in poptorch["instances"]] == [0.001, 0.001]
    assert all(i["device_latency"]["samples"] >= 1 for i in poptorch["instances"])
    popart = records["test_resnext101_c2_popart[popart-ipu-2]"]
    assert [i["device_latency"] for i in popart["instances"]] == [None, None]
    inventory = data["machine_info"]["ipu"]["backends"]["popart:ipu"]["inventory"]
    assert inventory["count"] == 2
    after = json.loads((path / "after.json").read_text())
    assert after == {"attached": 0, "children": 0}
    summary = "\n".join(result.outlines)
    assert "popart:ipu x2" in summary
    assert "poptorch:ipu x2" in summary


FAILURES = """
import pytest
import torch

from conftest import POPART
from pytest_ipu.errors import CompileError

X = torch.randn(2, 3, 64, 64)


@pytest.mark.ipu(backend="popart:ipu", instances=4)
def test_more_instances_than_ipus(ipu_compile, resnext101):
    ipu_compile(resnext101, (X,))


@pytest.mark.ipu(backend="popart:ipu", instances=2)
def test_second_ipu_busy(ipu_compile, resnext101):
    POPART.configure(busy={1})  # another process holds IPU 1: instance 0 compiles, instance 1 cannot
    try:
        ipu_compile(resnext101, (X,), key="busy")
    finally:
        POPART.configure(busy=set())


@pytest.mark.ipu(backend="poptorch:ipu", rounds=3, warmup_rounds=1)
def test_one_poptorch_model_records_its_device_latency(ipu_compile, ipu_benchmark, resnext101):
    record = ipu_benchmark(ipu_compile(resnext101, (X,)), (X,))
    assert record.placement is None
    assert record.instances is None
    assert record.simulator is False
    assert record.device_latency["resolution_s"] == 0.001
    assert record.device_latency["samples"] >= 1


@pytest.mark.ipu(backend="popart:ipu-model", rounds=3, warmup_rounds=1, power="off")
def test_the_ipu_model_is_labelled_a_simulator(ipu_compile, ipu_benchmark, resnext101):
    record = ipu_benchmark(ipu_compile(resnext101, (X,)), (X,))
    assert record.simulator is True
    assert "simulated timings" in record.device_name


@pytest.mark.ipu(backend="popart:ipu", rounds=2, warmup_rounds=0, power="off")
def test_a_tests_own_ipu_models_stay_open_while_it_compiles_another(ipu_compile, ipu_benchmark, resnext101):
    first = ipu_compile(resnext101, (X,), key="first")
    second = ipu_compile(resnext101, (torch.randn(4, 3, 64, 64),), key="second")
    assert POPART.system.attached_count() == 2  # one IPU each: neither was closed under the test
    assert ipu_benchmark(first, (X,)).rounds == 2
    assert second.compile_cached is False


@pytest.mark.ipu(backend="popart:ipu", instances=2)
def test_the_placement_fixture_gives_each_instance_its_ipu(ipu_placement):
    assert [(i.device, i.ipu_ids) for i in ipu_placement.instances] == [("ipu:0", (0,)), ("ipu:1", (1,))]
    assert ipu_placement.placement.as_json()["inventory"]["count"] == 2


@pytest.mark.ipu(backend="poptorch:ipu", instances=2)
def test_a_worker_fails_to_compile(ipu_compile, resnext101):
    with pytest.raises(CompileError, match=r"instance \\d of 2 could not compile Sequential in its worker"):
        ipu_compile(resnext101, (X,), device_iterations=4)  # batch 2 is not a multiple of 4
"""


def test_failures_skip_or_fail_with_the_reason_and_release_every_ipu_and_worker(
    c2_run: tuple[Path, pytest.RunResult, dict],
) -> None:
    path, result, _ = c2_run
    assert _outcomes(result, "test_failures.py") == {"passed": 5, "skipped": 2}, result.outlines[-40:]
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]1[]] test_failures.py:12: pytest-ipu: placement on popart:ipu: cannot place 4 "
            "instance(s) x 1 IPU each = 4 IPUs in aligned groups of 1: the ipu inventory has 2 IPUs, "
            "ids [[]0, 1[]]*",
            "SKIPPED [[]1[]] test_failures.py:19: pytest-ipu: Failed to acquire 1 IPU(s) for Sequential "
            "(device id 1)*",
        ],
        consecutive=False,
    )
    after = json.loads((path / "after.json").read_text())
    assert after == {"attached": 0, "children": 0}
    result.stdout.fnmatch_lines(["*popart:ipu-model [[]sim[]]*", "[[]sim[]] = a simulator (the IPU Model)*"])
