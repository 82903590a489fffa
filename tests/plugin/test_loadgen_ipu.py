"""LoadGen on IPUs, against the SDK fakes: a PopTorch model compiled for one batch size, two instances
on a C2 card's two IPUs, the card's board power from gcipuinfo.

The model is compiled in fp32: the fake PopTorch runs it with torch on the CPU, where torch 2.0.1
(the SDK's) has no fp16 matrix product. PopTorch runs only the input shapes it compiled (the fake
refuses others as PopTorch does), so a batch of Server queries shorter than the compiled batch must
be padded (``pad_to``); without it the run fails with PopTorch's message, and LoadGen still returns.
One subprocess run, shared by the tests (module-scoped): the instances spawn worker processes, and
the inner run imports torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_ipu.results import schema
from tests.plugin.inner import INNER_ADDOPTS
from tests.plugin.inner import XDIST_VARIABLES

pytest.importorskip("mlperf_loadgen")
pytest.importorskip("torch")


ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
import pytest

from pytest_ipu.backends.ipu.poptorch import PopTorchBackend
from pytest_ipu.power.gcipuinfo import GcIpuInfoPowerSource
from tests.fakes import fake_gcipuinfo
from tests.fakes import fake_poptorch

fake_poptorch.configure(ipus=2, version=1)
GCIPUINFO = fake_gcipuinfo.FakeGcIpuInfoModule(fake_gcipuinfo.c2_card(board_power="110.0 W"))


def pytest_ipu_make_backend(config, target):
    if target.backend == "poptorch":
        return PopTorchBackend(target.backend, target.device, poptorch_module=fake_poptorch)
    return None


def pytest_ipu_make_power_source(config, name, device):
    if name == "gcipuinfo":
        return GcIpuInfoPowerSource(gcipuinfo_module=GCIPUINFO, period_probe_polls=0)
    return None


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    import json
    import multiprocessing
    from pathlib import Path

    Path("after.json").write_text(json.dumps({"children": len(multiprocessing.active_children())}))
"""

INNER = """
import pytest
import torch

torch.manual_seed(0)
MODEL = torch.nn.Sequential(torch.nn.Linear(6, 3)).eval()
SAMPLES = torch.randn(32, 6)
BATCH = 4


@pytest.mark.ipu(backend="poptorch:ipu", instances=2)
def test_offline_two_instances(ipu_compile, ipu_loadgen):
    compiled = ipu_compile(MODEL, (SAMPLES[:BATCH],), precision="fp32")
    ipu_loadgen(compiled, (SAMPLES,), scenario="Offline", max_batch=BATCH, pad_to=BATCH, min_duration=0.3)


@pytest.mark.ipu(backend="poptorch:ipu", instances=2)
def test_server_padded(ipu_compile, ipu_loadgen):
    compiled = ipu_compile(MODEL, (SAMPLES[:BATCH],), precision="fp32")
    ipu_loadgen(
        compiled, (SAMPLES,), scenario="Server", target_qps=100, max_batch=BATCH, pad_to=BATCH,
        min_duration=0.3,
    )


@pytest.mark.ipu(backend="poptorch:ipu")
def test_server_one_instance(ipu_compile, ipu_loadgen):
    compiled = ipu_compile(MODEL, (SAMPLES[:BATCH],), precision="fp32")
    ipu_loadgen(
        compiled, (SAMPLES,), scenario="Server", target_qps=100, max_batch=BATCH, pad_to=BATCH,
        min_duration=0.3,
    )


@pytest.mark.ipu(backend="poptorch:ipu")
def test_server_unpadded(ipu_compile, ipu_loadgen):
    compiled = ipu_compile(MODEL, (SAMPLES[:BATCH],), precision="fp32")
    ipu_loadgen(compiled, (SAMPLES,), scenario="Server", target_qps=100, max_batch=BATCH, min_duration=0.3)
"""


@pytest.fixture(scope="module")
def inner_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pytest.RunResult]:
    """The inner tests, run once in a subprocess: its directory and result (``-rA``: each test's
    outcome is in the short summary)."""
    path = tmp_path_factory.mktemp("loadgen_ipu")
    (path / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    (path / "test_lg_ipu.py").write_text(INNER, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in XDIST_VARIABLES}
    env.update(
        PYTEST_ADDOPTS=INNER_ADDOPTS,
        PYTEST_IPU_REPEATS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    args = ("-p", "no:cacheprovider", "-p", "no:randomly", "-rA", "--ipu-idle=0", "--benchmark-json=run.json")
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    result = pytest.RunResult(
        done.returncode, done.stdout.splitlines(), done.stderr.splitlines(), time.monotonic() - start
    )
    return path, result


def _outcome(result: pytest.RunResult, test: str) -> str:
    """``test``'s outcome as ``-rA``'s short summary gives it: ``PASSED``, ``FAILED``..."""
    (line,) = (line for line in result.outlines if f"test_lg_ipu.py::{test}[" in line and " " in line)
    return line.split(" ")[0]


def test_two_ipus_serve_padded_batches_and_their_energy_is_measured(
    inner_run: tuple[Path, pytest.RunResult],
) -> None:
    path, result = inner_run
    assert _outcome(result, "test_offline_two_instances") == "PASSED", result.outlines[-40:]
    assert _outcome(result, "test_server_padded") == "PASSED", result.outlines[-40:]
    data = json.loads((path / "run.json").read_text(encoding="utf-8"))
    records = {b["name"].split("[")[0]: schema.from_json(b["extra_info"]["ipu"]) for b in data["benchmarks"]}
    offline = records["test_offline_two_instances"]
    part = offline.loadgen
    assert part is not None
    assert offline.backend == "poptorch"
    assert part.batching.instances == 2
    # Offline's one query is split into full batches taken by both instances' workers at once.
    assert all(n > 0 for n in part.batching.instance_batches)
    assert set(part.batching.batch_sizes) <= {"1", "2", "3", "4"}
    assert (
        sum(int(k) * v for k, v in part.batching.batch_sizes.items())
        == part.query_count * part.samples_per_query
    )
    # The card's board power over the LoadGen run, per sample LoadGen counted.
    assert offline.power.measured, offline.power.reason
    assert offline.power.items == part.query_count * part.samples_per_query
    server = records["test_server_padded"].loadgen
    assert server is not None
    assert server.batching.pad_to == 4
    assert server.query_count > 0
    # One PopTorch instance serves LoadGen from a worker process: its calls hold the GIL, which
    # would stall LoadGen's callbacks in this one.
    alone = records["test_server_one_instance"]
    assert _outcome(result, "test_server_one_instance") == "PASSED", result.outlines[-40:]
    assert alone.placement is not None
    assert alone.placement.runner == "processes"
    assert alone.placement.instances == 1
    assert alone.loadgen is not None
    assert alone.loadgen.batching.instances == 1
    # The host cost counts the instance worker processes the model ran in, as their replies report
    # their clocks: one worker here, two for the two instances.
    assert alone.cpu is not None
    assert offline.cpu is not None
    assert (alone.cpu.workers, offline.cpu.workers) == (1, 2)
    # CPU time, not wall time: a worker that made calls reported some, however busy the machine.
    # (That the workers' part is counted inside the total is run_cpu_time's arithmetic, asserted
    # with exact figures in tests/unit/test_loadgen_record.py.)
    assert alone.cpu.workers_total_s > 0
    assert offline.cpu.workers_total_s > 0
    # No instance or worker process outlives the run.
    assert json.loads((path / "after.json").read_text()) == {"children": 0}


def test_an_unpadded_batch_fails_in_one_line_naming_pad_to(inner_run: tuple[Path, pytest.RunResult]) -> None:
    path, result = inner_run
    assert _outcome(result, "test_server_unpadded") == "FAILED"
    # The calibration's call on one sample is the first to meet the compiled shape.
    result.stdout.fnmatch_lines(
        [
            "*pytest-ipu: ipu_loadgen's calibration call on a batch of 1 sample(s) failed: *Shape mismatch*; "
            "a model compiled for one batch size (PopTorch, PopART) needs ipu_loadgen(pad_to=<that size>)"
        ]
    )
    assert json.loads((path / "after.json").read_text()) == {"children": 0}
