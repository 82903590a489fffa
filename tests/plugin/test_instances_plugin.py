"""``instances=N`` on a backend without an IPU inventory: N copies share the one device, side by side.

A subprocess run (the inner run imports torch).
"""

from __future__ import annotations

import json

import pytest

from tests.plugin.inner import INNER_ADDOPTS

pytest.importorskip("torch")  # the inner run's model is a torch model

TESTS = """
import pytest
import torch

MODEL = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
X = torch.randn(4, 32)


@pytest.mark.ipu(backend="torch:cpu", instances=2, rounds=6, warmup_rounds=1, power="off")
def test_two_copies(ipu_compile, ipu_benchmark):
    compiled = ipu_compile(MODEL, (X,), parity=True)
    assert compiled.parity.passed
    ipu_benchmark(compiled, (X,))


@pytest.mark.ipu(backend="torch:cpu", replicas=2)
def test_replicas_need_an_ipu(ipu_compile, ipu_benchmark):
    ipu_benchmark(ipu_compile(MODEL, (X,)), (X,))
"""


def test_instances_share_a_cpu_and_throughput_counts_both(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_copies=TESTS)
    result = pytester.runpytest_subprocess(
        *INNER_ADDOPTS.split(), "--benchmark-json=out.json", "--benchmark-save-data"
    )
    result.assert_outcomes(passed=1, failed=1)
    # The marker's mistake fails its test in one line, without a traceback through the placement
    # code and without pytest-benchmark's "fixture was not used" warning (the test never got there).
    result.stdout.fnmatch_lines(
        [
            "*_ test_replicas_need_an_ipu?torch-cpu? _*",
            "pytest-ipu: replicas=2 and stages=1 place one model over several IPUs, but target torch:cpu "
            "is not an IPU backend; use a poptorch or popart target, or ask for instances= only",
            "*= pytest-ipu =*",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert "CompileError" not in result.stdout.str()
    assert "was not used" not in result.stdout.str() + result.stderr.str()
    (bench,) = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    record = bench["extra_info"]["ipu"]
    placement = record["placement"]
    assert placement["runner"] == "threads"
    assert placement["shared_device"] is True
    assert placement["devices"] == ["cpu", "cpu"]
    assert [i["calls"] for i in record["instances"]] == [6, 6]
    assert record["items_per_call"] == 4
    assert record["throughput_items_per_s"] == pytest.approx(2 * 4 * 6 / record["window_s"], rel=1e-9)
    # pytest-benchmark's own stats are the rounds: each at least as long as the slower instance's call.
    assert len(bench["stats"]["data"]) == 6
    assert min(bench["stats"]["data"]) >= record["latency_s"]["min"]
