"""Bad inputs to a benchmark, one row each: every one fails its own test with one line that names
the argument (or the call, or the output), the value and the fix (issue 12).

All rows are tests of ONE inner file, run once in a subprocess (module-scoped: the run takes
seconds, not a run per row); each row then reads its own test's failure from the run's JUnit XML.
A subprocess, not pytester: torch (the parity rows) must not be imported in this process after
in-process pytester runs (tests/plugin/test_json_output.py says why).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pytest

from tests.plugin.inner import INNER_ADDOPTS
from tests.plugin.inner import XDIST_VARIABLES

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_LOADGEN = importlib.util.find_spec("mlperf_loadgen") is not None


@dataclass(frozen=True)
class BadCall:
    """One bad input: the inner test's body, and the part of its failure message that must appear."""

    description: str
    test_body: str
    message_part: str
    #: The ``ipu`` marker's keywords for the inner test ("" for none).
    marker: str = ""
    needs_torch: bool = False
    needs_loadgen: bool = False
    #: False where the failure is an assertion with a traceback (parity), not a one-line report.
    one_line: bool = True
    #: The inner test's fixtures, where the body alone does not say (by default the pytest-ipu
    #: fixture the body calls).
    fixtures: str = ""

    @property
    def name(self) -> str:
        return "test_" + "".join(c if c.isalnum() else "_" for c in self.description.lower())


RUN = "pass rounds=N with N >= 1 (at most 1000000, as --ipu-rounds), or leave it out"
ROWS = [
    BadCall(
        "rounds zero",
        "ipu_benchmark(noop, (), rounds=0)",
        "ipu_benchmark(rounds=0): rounds must be at least 1; " + RUN,
    ),
    BadCall(
        "rounds negative",
        "ipu_benchmark(noop, (), rounds=-1)",
        "ipu_benchmark(rounds=-1): rounds must be at least 1",
    ),
    BadCall(
        "rounds float",
        "ipu_benchmark(noop, (), rounds=2.5)",
        "ipu_benchmark(rounds=2.5): rounds must be a whole number, not float",
    ),
    BadCall(
        "rounds string",
        "ipu_benchmark(noop, (), rounds='10')",
        "ipu_benchmark(rounds='10'): rounds must be a whole number, not str",
    ),
    BadCall(
        "rounds bool",
        "ipu_benchmark(noop, (), rounds=True)",
        "ipu_benchmark(rounds=True): rounds must be a whole number, not bool",
    ),
    # One bound for the option, the marker and the fixture: fixed rounds are not ended by the time cap.
    BadCall(
        "rounds a trillion",
        "ipu_benchmark(noop, (), rounds=10**12)",
        "ipu_benchmark(rounds=1000000000000): rounds must be at most 1000000; " + RUN,
    ),
    BadCall(
        "warmup a billion",
        "ipu_benchmark(noop, (), warmup_rounds=10**9)",
        "ipu_benchmark(warmup_rounds=1000000000): warmup_rounds must be at most 100000; pass warmup_rounds=N",
    ),
    BadCall(
        "items 1e30",
        "ipu_benchmark(noop, (), items_per_call=10**30)",
        "items_per_call must be at most 9007199254; pass the items one call completes",
    ),
    BadCall(
        "warmup negative",
        "ipu_benchmark(noop, (), warmup_rounds=-5)",
        "ipu_benchmark(warmup_rounds=-5): warmup_rounds must be at least 0; pass warmup_rounds=N with N >= 0",
    ),
    BadCall(
        "warmup float",
        "ipu_benchmark(noop, (), warmup_rounds=1.5)",
        "ipu_benchmark(warmup_rounds=1.5): warmup_rounds must be a whole number, not float",
    ),
    BadCall(
        "warmup string",
        "ipu_benchmark(noop, (), warmup_rounds='2')",
        "ipu_benchmark(warmup_rounds='2'): warmup_rounds must be a whole number, not str",
    ),
    BadCall(
        "warmup bool",
        "ipu_benchmark(noop, (), warmup_rounds=False)",
        "ipu_benchmark(warmup_rounds=False): warmup_rounds must be a whole number, not bool",
    ),
    BadCall(
        "items string",
        "ipu_benchmark(noop, (), items_per_call='8')",
        "ipu_benchmark(items_per_call='8'): items_per_call must be a whole number, not str; pass the items "
        "one call completes",
    ),
    BadCall(
        "items float",
        "ipu_benchmark(noop, (), items_per_call=2.5)",
        "ipu_benchmark(items_per_call=2.5): items_per_call must be a whole number, not float",
    ),
    BadCall(
        "items whole float",
        "ipu_benchmark(noop, (), items_per_call=8.0)",
        "ipu_benchmark(items_per_call=8.0): items_per_call must be a whole number, not float",
    ),
    BadCall(
        "items bool",
        "ipu_benchmark(noop, (), items_per_call=True)",
        "ipu_benchmark(items_per_call=True): items_per_call must be a whole number, not bool",
    ),
    BadCall(
        "items zero",
        "ipu_benchmark(noop, (), items_per_call=0)",
        "ipu_benchmark(items_per_call=0): items_per_call must be at least 1",
    ),
    BadCall(
        "items negative",
        "ipu_benchmark(noop, (), items_per_call=-3)",
        "ipu_benchmark(items_per_call=-3): items_per_call must be at least 1",
    ),
    BadCall(
        "empty batch",
        "ipu_benchmark(noop, (numpy.zeros((0, 3)),))",
        "items_per_call defaults to the batch size (the leading dimension of the first input), here 0; "
        "pass items_per_call=N",
    ),
    BadCall(
        "array as inputs",
        "ipu_benchmark(noop, numpy.zeros((4, 3)))",
        "inputs=ndarray of shape (4, 3)): inputs is a sequence of positional arguments, not one tensor or "
        "array; pass (x,)",
    ),
    BadCall(
        "tensor as inputs",
        "import torch\n    ipu_benchmark(noop, torch.zeros(2, 5))",
        "inputs=Tensor of shape (2, 5)): inputs is a sequence of positional arguments, not one tensor or "
        "array; pass (x,)",
        needs_torch=True,
    ),
    BadCall(
        "number as inputs",
        "ipu_benchmark(noop, 5)",
        "ipu_benchmark(model, inputs=int object): inputs is a sequence of positional arguments (a tuple or "
        "list); pass (x,), or () for none",
    ),
    BadCall(
        "string as inputs",
        "ipu_benchmark(noop, 'abc')",
        "ipu_benchmark(model, inputs=str object): inputs is a sequence",
    ),
    BadCall(
        "dict as inputs",
        "ipu_benchmark(noop, {'x': 1})",
        "ipu_benchmark(model, inputs=dict object): inputs is a sequence",
    ),
    BadCall(
        "loadgen tensor as samples",
        "import torch\n    ipu_loadgen(noop, torch.randn(8, 4))",
        "ipu_loadgen(samples): samples=Tensor of shape (8, 4): the samples are a tuple of inputs, not one "
        "tensor or array; pass (x,)",
        needs_torch=True,
    ),
    BadCall(
        "loadgen model fails on its third call",
        "ipu_loadgen(fails_on(3), (numpy.zeros((8, 4)),))",
        "ipu_loadgen's calibration call on a batch of 1 sample(s) failed: RuntimeError: broken on call 3; "
        "2 earlier call(s) on this batch size passed: the batch size is not the cause",
        needs_loadgen=True,
    ),
    BadCall(
        "ipu_benchmark twice",
        "ipu_benchmark(noop, (), rounds=2)\n    ipu_benchmark(noop, (), rounds=2)",
        "pytest-ipu: ipu_benchmark(...) called after ipu_benchmark(...) in test_ipu_benchmark_twice: "
        "pytest-ipu measures one benchmark per test; measure each model in a test of its own",
    ),
    BadCall(
        "ipu_benchmark after benchmark",
        "benchmark(noop)\n    ipu_benchmark(noop, (), rounds=2)",
        "pytest-ipu: ipu_benchmark(...) called after pytest-benchmark's benchmark(...) in "
        "test_ipu_benchmark_after_benchmark: pytest-ipu measures one benchmark per test",
        fixtures="benchmark, ipu_benchmark",
    ),
    BadCall(
        "ipu_benchmark nested",
        "ipu_benchmark(lambda: ipu_benchmark(noop, (), rounds=2), (), rounds=2)",
        "pytest-ipu: ipu_benchmark(...) called inside the model ipu_benchmark(...) is measuring in "
        "test_ipu_benchmark_nested: pytest-ipu measures one benchmark per test",
    ),
    BadCall(
        "model not callable",
        "ipu_benchmark(42, ())",
        "ipu_benchmark(model=int object): the model must be callable",
    ),
    BadCall(
        "inputs swapped with model",
        "ipu_benchmark((numpy.zeros(3),), noop)",
        "ipu_benchmark(model=tuple object): the model must be callable",
    ),
    # Calls: 1 is the first call, then the warm-up calls, then calibration (auto rounds) or rounds.
    BadCall(
        "hang on the first call",
        "ipu_benchmark(hangs_on(1), (), rounds=3)",
        "the first call of repeat 1 was still running after the call timeout of 1s (--ipu-call-timeout",
        marker="call_timeout='1s'",
    ),
    BadCall(
        "hang on a warm-up call",
        "ipu_benchmark(hangs_on(3), (), rounds=3, warmup_rounds=4)",
        "warm-up call 2 of repeat 1 was still running after the call timeout of 1s",
        marker="call_timeout='1s'",
    ),
    BadCall(
        "hang in calibration",
        "ipu_benchmark(hangs_on(5), (), warmup_rounds=0)",
        "calibration call 4 of repeat 1 was still running after the call timeout of 1s",
        marker="call_timeout='1s', max_time='10s'",
    ),
    BadCall(
        "hang in a timed round",
        "ipu_benchmark(hangs_on(21), (), rounds=30, warmup_rounds=0)",
        "timed round 20 of repeat 1 was still running after the call timeout of 1s",
        marker="call_timeout='1s'",
    ),
    BadCall(
        "rounds numpy float",
        "ipu_benchmark(noop, (), rounds=numpy.float64(3))",
        # numpy 2 writes the value as np.float64(3.0), numpy 1 as 3.0: the message's reason is the same.
        "): rounds must be a whole number, not float64",
    ),
    # The first call's output: a generator (its body never runs), NaN or infinity.
    BadCall(
        "generator function as the model",
        "def gen(*args):\n        yield 1\n    ipu_benchmark(gen, (), rounds=3)",
        "the model's first call returned a generator (generator): a call runs none of its body, so only "
        "its creation would be timed; pass a model that computes its result when called",
    ),
    BadCall(
        "async function as the model",
        "async def model(*args):\n        return 1\n    ipu_benchmark(model, (), rounds=3)",
        "the model's first call returned a coroutine (coroutine)",
    ),
    BadCall(
        "output nan in an array",
        "ipu_benchmark(lambda: (1, {'y': numpy.array([1.0, float('nan')])}), (), rounds=3)",
        "the model's first call returned NaN or infinity in output[1]['y']: timing a model that computes "
        "non-finite values measures nothing useful; fix the model or its inputs",
    ),
    BadCall(
        "output inf float",
        "ipu_benchmark(lambda: float('inf'), (), rounds=3)",
        "returned NaN or infinity in output:",
    ),
    BadCall(
        "output inf tensor",
        "import torch\n    out = [torch.ones(2), torch.full((2,), float('inf'))]\n"
        "    ipu_benchmark(lambda: out, (), rounds=3)",
        "returned NaN or infinity in output[1]:",
        needs_torch=True,
    ),
    BadCall(
        "parity both nan",
        "ipu_compile(Scale(float('nan')), (torch.ones(2, 3),), parity=True)",
        "output 0: both outputs are NaN (the fp32 model's at 6 of 6 values",
        marker="precision='fp32'",
        needs_torch=True,
        one_line=False,
    ),
    BadCall(
        "parity model only inf",
        "ipu_compile(Scale(1e5), (torch.ones(2, 3),), parity=True)",
        "output 0: only the fp16 model's output is inf (at 6 of 6 values; first at index (0, 0), where the "
        "reference's (torch eager fp32 on cpu) is 100000)",
        marker="precision='fp16'",
        needs_torch=True,
        one_line=False,
    ),
    BadCall(
        "parity model only nan",
        "ipu_compile(Cancel(), (torch.ones(2, 3),), parity=True)",
        "output 0: only the fp16 model's output is NaN (at 6 of 6 values",
        marker="precision='fp16'",
        needs_torch=True,
        one_line=False,
    ),
    # A call its signature does not take: Python's own words, in one line under the fixture's name.
    BadCall(
        "benchmark unknown keyword",
        "ipu_benchmark(noop, (), round=3)",
        "ipu_benchmark() got an unexpected keyword argument 'round'",
    ),
    BadCall(
        "benchmark no model",
        "ipu_benchmark()",
        "ipu_benchmark() missing a required argument: 'model'",
    ),
    BadCall(
        "power unknown keyword",
        "ipu_power(devices='cpu')",
        "ipu_power() got an unexpected keyword argument 'devices'",
        fixtures="ipu_power",
    ),
    BadCall(
        "compile without example inputs",
        "ipu_compile(torch.nn.Linear(3, 2))",
        "ipu_compile() missing a required argument: 'example_inputs'",
        needs_torch=True,
    ),
    BadCall(
        "train positional precision",
        "ipu_train(torch.nn.Linear(3, 2), noop, noop, (torch.ones(2, 3),), 1)",
        "ipu_train() too many positional arguments",
        needs_torch=True,
        fixtures="ipu_train",
    ),
    BadCall(
        "time to train without a target",
        "ipu_time_to_train(noop)",
        "ipu_time_to_train() missing a required argument: 'quality_target'",
        needs_torch=True,
        fixtures="ipu_time_to_train",
    ),
]

HEADER = '''
import threading
import numpy
import pytest

try:
    import torch

    class Scale(torch.nn.Module):
        def __init__(self, factor):
            super().__init__()
            self.factor = factor

        def forward(self, x):
            return x * self.factor

    class Cancel(torch.nn.Module):
        def forward(self, x):
            big = x * 1e5  # inf in fp16, 1e5 in fp32
            return big - big  # NaN in fp16, 0 in fp32
except ImportError:
    pass

CALLS = [0]


def noop(*args):
    return None


def hangs_on(n):
    """A model whose n-th call (counted over the whole test, every repeat) never returns."""
    def model(*args):
        CALLS[0] += 1
        if CALLS[0] == n:
            threading.Event().wait()
    return model


def fails_on(n):
    """A model whose n-th call (counted over the whole test) raises."""
    def model(*args):
        CALLS[0] += 1
        if CALLS[0] == n:
            raise RuntimeError(f"broken on call {n}")
    return model


@pytest.fixture(autouse=True)
def _count_calls_per_test():
    CALLS[0] = 0


def test_a_good_call_passes(ipu_benchmark):
    assert ipu_benchmark(noop, (numpy.zeros((4, 3)),), rounds=3, warmup_rounds=1).items_per_call == 4


def test_finite_outputs_of_every_kind_pass(ipu_benchmark):
    out = (1, 2.5, 'text', None, [numpy.zeros(2, dtype=numpy.int64)], {'a': numpy.ones((2, 2))})
    assert ipu_benchmark(lambda: out, (), rounds=3).rounds == 3
'''


def _inner_file(rows: list[BadCall]) -> str:
    parts = [HEADER]
    for row in rows:
        marker = f"@pytest.mark.ipu({row.marker})\n" if row.marker else ""
        fixtures = row.fixtures or next(
            (name for name in ("ipu_compile", "ipu_loadgen") if f"{name}(" in row.test_body), "ipu_benchmark"
        )
        parts.append(f"\n\n{marker}def {row.name}({fixtures}):\n    {row.test_body}\n")
    return "".join(parts)


@pytest.fixture(scope="module")
def failures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    """Run every row once; each test's outcome and failure message (``passed`` for a pass)."""
    rows = [r for r in ROWS if (HAS_TORCH or not r.needs_torch) and (HAS_LOADGEN or not r.needs_loadgen)]
    path = tmp_path_factory.mktemp("bad_inputs")
    (path / "test_bad.py").write_text(_inner_file(rows))
    env = {k: v for k, v in os.environ.items() if k not in XDIST_VARIABLES}
    env.update(PYTEST_ADDOPTS=INNER_ADDOPTS, PYTEST_IPU_REPEATS="1")
    args = [sys.executable, "-m", "pytest", "test_bad.py", "--junitxml=junit.xml", "--ipu-power=off"]
    if HAS_TORCH:
        args += ["--ipu-backend=torch:cpu", f"--ipu-cache-dir={path / 'cache'}"]
    # The hang guard: a run that ignored the call timeout would hang here, so it is bounded.
    done = subprocess.run(args, cwd=path, env=env, capture_output=True, text=True, timeout=300)
    assert (path / "junit.xml").exists(), done.stdout + done.stderr
    found: dict[str, tuple[str, str]] = {}
    for case in ET.parse(path / "junit.xml").getroot().iter("testcase"):
        name = case.attrib["name"].split("[")[0]
        failure = case.find("failure")
        error = case.find("error")
        if failure is not None:
            found[name] = ("failed", failure.attrib.get("message", ""))
        elif error is not None:
            found[name] = ("error", error.attrib.get("message", "") + (error.text or ""))
        else:
            found[name] = ("passed", "")
    found["_output"] = ("output", done.stdout + done.stderr)
    return found


def test_there_are_enough_rows() -> None:
    assert len(ROWS) >= 25
    assert len({row.name for row in ROWS}) == len(ROWS)


def test_the_good_call_in_the_same_run_passes(failures: dict[str, tuple[str, str]]) -> None:
    # The rows' failures are theirs: the same inner run measures a correct call.
    assert failures["test_a_good_call_passes"] == ("passed", ""), failures["_output"][1]
    assert failures["test_finite_outputs_of_every_kind_pass"] == ("passed", ""), failures["_output"][1]


@pytest.mark.parametrize("row", ROWS, ids=[row.description for row in ROWS])
def test_a_bad_call_fails_its_test_with_one_line_naming_it(
    row: BadCall, failures: dict[str, tuple[str, str]]
) -> None:
    if row.needs_torch and not HAS_TORCH:
        pytest.skip("torch is not installed")
    if row.needs_loadgen and not HAS_LOADGEN:
        pytest.skip("mlperf_loadgen is not installed")
    outcome, message = failures.get(row.name, ("missing", ""))
    assert outcome == "failed", f"{row.name}: {outcome}\n{failures['_output'][1]}"
    assert row.message_part in message
    if row.one_line:
        # pytest.fail(..., pytrace=False): the report is the message itself, one line.
        assert message.startswith("Failed: pytest-ipu: ")
        assert "\n" not in message.strip()


# -- the fixtures where a test is not a benchmark, or its call is long --------------------------------

NOT_A_BENCHMARK = """
import time

import pytest


def test_asks_and_never_calls(ipu_benchmark):
    pass


def test_skipped(ipu_benchmark):
    pytest.skip("not here")


def test_plain_then_ipu(benchmark, ipu_benchmark):
    benchmark(lambda: None)
    ipu_benchmark(lambda: None, (), rounds=2)


def test_long_call(ipu_benchmark):
    # Twenty times the budget below: as a 40 s call under the default --ipu-max-time of 2 s.
    record = ipu_benchmark(lambda: time.sleep(0.2), ())
    assert record.rounds == 1
    assert {"capped", "over-budget"} <= set(record.flags)
"""


def test_a_test_that_measures_nothing_or_too_long_says_so(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_fixtures=NOT_A_BENCHMARK)
    # The suite's -W error would make the warning below an error: shown as a warning here.
    warnings = ("-W", "default::pytest_ipu.errors.PytestIpuWarning")
    result = pytester.runpytest(
        "--benchmark-json=out.json", "--ipu-max-time=10ms", "--ipu-power=off", "-rf", *warnings
    )
    result.assert_outcomes(passed=2, failed=1, skipped=1, warnings=1)
    # The fixture never called: one warning in pytest-ipu's words (not pytest-benchmark's "Benchmark
    # fixture was not used at all"), none for the skipped test.
    text = result.stdout.str()
    assert "Benchmark fixture was not used" not in text
    result.stdout.fnmatch_lines(
        [
            "*PytestIpuWarning: pytest-ipu: test_asks_and_never_calls asked for ipu_benchmark and never "
            "called it: nothing was measured; call ipu_benchmark(...) in the test, or drop the fixture "
            "from it"
        ]
    )
    # A benchmark after pytest-benchmark's own fails in one line; the failed test's plain benchmark is
    # not saved as a measurement. The long call is one round, flagged, and saved.
    result.stdout.fnmatch_lines(
        [
            "pytest-ipu: ipu_benchmark(...) called after pytest-benchmark's benchmark(...) in "
            "test_plain_then_ipu: pytest-ipu measures one benchmark per test; *"
        ]
    )
    names = [b["name"] for b in json.loads((pytester.path / "out.json").read_text())["benchmarks"]]
    assert names == ["test_long_call"]
