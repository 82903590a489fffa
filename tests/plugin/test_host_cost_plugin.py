"""Every timed record says what it cost the host: a short run of the kinds of benchmark ``make bench``
writes (``ipu_benchmark`` of a plain callable, of instances in threads, and ``ipu_loadgen`` runs of
each scenario kind, a peak search included) leaves no record without ``cpu.host_per_item_s`` and
``cpu.host_cores``, and none without ``host_instructions`` or the reason it has none.

The inner run is a subprocess with a timeout, so a LoadGen run that waited for a lost query fails
the test instead of hanging the suite. Nothing here asserts a measured time or rate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pytest_ipu.results import schema
from pytest_ipu.results.records import IpuRecord
from tests.plugin.inner import INNER_ADDOPTS
from tests.plugin.inner import XDIST_VARIABLES

pytest.importorskip("mlperf_loadgen")

INNER = """
import time

import numpy as np
import pytest
import torch

MODEL = torch.nn.Linear(3, 2).eval()
SAMPLES = np.arange(32, dtype=np.float32).reshape(32, 1).repeat(3, axis=1)


def model(x):
    time.sleep(0.002)
    return x[:, 0].copy()


def test_plain(ipu_benchmark):
    ipu_benchmark(lambda x: sum(range(2000)), (SAMPLES,), rounds=5)


@pytest.mark.ipu(backend="torch:cpu", instances=2, rounds=5, warmup_rounds=1, power="off")
def test_threads(ipu_compile, ipu_benchmark):
    x = torch.from_numpy(SAMPLES[:4])
    ipu_benchmark(ipu_compile(MODEL, (x,)), (x,))


def test_single(ipu_loadgen):
    ipu_loadgen(model, (SAMPLES,), scenario="SingleStream", min_duration=0.2, min_queries=20)


def test_offline(ipu_loadgen):
    ipu_loadgen(model, (SAMPLES,), scenario="Offline", max_batch=8, min_duration=0.2)


def test_accuracy(ipu_loadgen):
    ipu_loadgen(model, (SAMPLES,), scenario="Offline", max_batch=8, mode="accuracy")


def test_search(ipu_loadgen):
    ipu_loadgen(model, (SAMPLES,), scenario="Server", max_batch=4, find_peak=True, max_probes=2,
                min_duration=0.2, search_budget=20)
"""

TESTS = ("test_plain", "test_threads", "test_single", "test_offline", "test_accuracy", "test_search")


def without_host_cost(document: dict[str, object]) -> list[str]:
    """The benchmarks of a pytest-benchmark document whose pytest-ipu record has timed figures but
    no host cost (a time-to-train record has no timed window: it is not one of them)."""
    missing = []
    for bench in document["benchmarks"]:  # type: ignore[attr-defined]
        data = bench.get("extra_info", {}).get("ipu")
        if data is None:
            continue
        record = schema.from_json(data)
        cpu = record.cpu
        if record.time_to_train is None and (cpu is None or None in (cpu.host_per_item_s, cpu.host_cores)):
            missing.append(f"{bench['fullname']}: {record.why_missing('host_cores')}")
    return missing


@pytest.fixture(scope="module")
def bench_like(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, object], str]:
    """The inner run's JSON document and its output."""
    path = tmp_path_factory.mktemp("host_cost")
    (path / "test_inner.py").write_text(INNER, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in XDIST_VARIABLES}
    env.update(PYTEST_ADDOPTS=INNER_ADDOPTS, PYTEST_IPU_REPEATS="1")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-rA",
            "--ipu-idle=0",
            "--benchmark-json=run.json",
        ],
        cwd=path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    return json.loads((path / "run.json").read_text(encoding="utf-8")), out


def _records(document: dict[str, object]) -> dict[str, IpuRecord]:
    return {
        b["name"].partition("[")[0]: schema.from_json(b["extra_info"]["ipu"])
        for b in document["benchmarks"]  # type: ignore[attr-defined]
    }


def test_every_timed_record_of_a_bench_like_run_carries_its_host_cost(
    bench_like: tuple[dict[str, object], str],
) -> None:
    document, _ = bench_like
    records = _records(document)
    assert sorted(records) == sorted(TESTS)
    assert without_host_cost(document) == []
    for name, record in records.items():
        assert record.cpu is not None, name
        assert record.value("host_cpu_per_item") is not None, name
        assert record.value("host_cores") is not None, name
    # The LoadGen runs' cost is their run's (no rounds), the others' their windows'.
    assert all(records[n].loadgen is not None for n in TESTS[2:])
    assert all(records[n].cpu.process_s is None for n in TESTS[2:])  # type: ignore[union-attr]
    assert all(records[n].cpu.process_s is not None for n in TESTS[:2])  # type: ignore[union-attr]


def test_every_timed_window_has_its_instruction_count_or_says_why_not(
    bench_like: tuple[dict[str, object], str],
) -> None:
    document, _ = bench_like
    for name, record in _records(document).items():
        counted = record.counts.get("host_instructions")
        if record.loadgen is not None:
            assert counted is None, name  # no timed rounds
            assert "no timed rounds" in record.why_missing("host_instructions")
            continue
        assert counted is not None, name
        assert (counted.per_call is None) == (counted.reason is not None), name
        assert (record.value("host_instructions") is None) == (counted.per_call is None)


def test_the_check_names_a_record_without_host_cost() -> None:
    # The same check over a document whose record has none: it names the benchmark and the reason.
    from tests.unit.test_schema import make_record

    document = {
        "benchmarks": [{"fullname": "t.py::test_x", "extra_info": {"ipu": schema.to_json(make_record())}}]
    }
    assert without_host_cost(document) == ["t.py::test_x: no CPU time: the record predates it"]
