"""``--ipu-torch-threads`` and ``--ipu-torch-interop-threads`` end to end, into the JSON record.

Subprocesses (``runpytest_subprocess``): they import torch, and the thread counts they set are
process-wide, so an in-process run would change them for every later test here.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.unit.torch_versions import needs_catchable_interop_refusal

BENCH = """
import torch

def test_bench(ipu_compile, ipu_benchmark):
    x = torch.zeros(2, 8)
    ipu_benchmark(ipu_compile(torch.nn.Linear(8, 4), (x,)), (x,))
    assert torch.get_num_threads() == 1
"""


def _needs_torch() -> None:
    # find_spec, not importorskip: torch is only imported by the subprocesses (see test_backends.py).
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")


def test_torch_threads_end_up_in_compile_info_and_machine_info(pytester: pytest.Pytester) -> None:
    _needs_torch()
    pytester.makepyfile(test_threads=BENCH)
    result = pytester.runpytest_subprocess(
        "--ipu-backend=torch:cpu",
        "--ipu-rounds=3",
        "--ipu-torch-threads=1",
        "--ipu-torch-interop-threads=1",
        "--benchmark-json=out.json",
    )
    result.assert_outcomes(passed=1)
    data = json.loads((pytester.path / "out.json").read_text())
    (bench,) = data["benchmarks"]
    assert bench["extra_info"]["ipu"]["compile_info"]["threads"] == {
        "intra_op": 1,
        "inter_op": 1,
        "requested": {"intra_op": 1, "inter_op": 1},
    }
    torch_cpu = data["machine_info"]["ipu"]["backends"]["torch:cpu"]
    assert (torch_cpu["threads"], torch_cpu["interop_threads"]) == (1, 1)
    assert torch_cpu["threads_requested"] == {"intra_op": 1, "inter_op": 1}


@needs_catchable_interop_refusal
def test_an_interop_count_torch_no_longer_accepts_fails_the_test_in_one_line(
    pytester: pytest.Pytester,
) -> None:
    _needs_torch()
    # A conftest that fixes the inter-op threads first: torch accepts that once per process.
    pytester.makeconftest("import torch\n\ntorch.set_num_interop_threads(2)\n")
    pytester.makepyfile(test_threads=BENCH)
    result = pytester.runpytest_subprocess(
        "--ipu-backend=torch:cpu", "--ipu-rounds=3", "--ipu-torch-threads=1", "--ipu-torch-interop-threads=3"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * pytest_ipu.errors.CompileError: --ipu-torch-interop-threads=3 cannot be applied: "
            "torch's inter-op threads are already 2 in this process, and torch allows "
            "set_num_interop_threads only once, before any inter-op parallel work starts; "
            "use --ipu-torch-interop-threads=2 or auto, *",
        ]
    )
