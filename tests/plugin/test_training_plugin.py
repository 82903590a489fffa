"""Training benchmarks end to end: ``ipu_train`` with ``ipu_benchmark``, ``ipu_time_to_train``, their
gates, their one-line failures, ``--benchmark-disable`` and ``--ipu-scaling-baseline``.

One inner test file is run three times, each a subprocess (torch must not be imported in this
process after in-process pytester runs; tests/plugin/test_json_output.py says why), shared by the
tests of this module: the main run (every test, on torch and, where installed, ONNX Runtime), a
run against the main run's JSON as scaling baseline with a time-to-train gate, and an untimed run.
Each test's outcome is read from the run's JUnit XML. The models are tiny and the budgets short:
the assertions are on what the runs record and how they fail, never on how long anything took.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.backports import remove_prefix
from pytest_ipu.backports import zip_strict
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import schema
from tests.plugin.inner import INNER_ADDOPTS
from tests.plugin.inner import SENTINEL_TEST
from tests.plugin.inner import XDIST_VARIABLES
from tests.plugin.inner import assert_usage_error

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_ONNXRUNTIME = importlib.util.find_spec("onnxruntime") is not None

INNER = '''
import pytest
import torch
from pathlib import Path
from torch.nn import functional


def data(n=32):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=gen)
    return x, (x[:, 0] > 0).long()


def sgd(params):
    return torch.optim.SGD(params, lr=0.5)


def test_step(ipu_train, ipu_benchmark):
    torch.manual_seed(0)
    x, y = data()
    step = ipu_train(torch.nn.Linear(4, 2), functional.cross_entropy, sgd, (x, y), gradient_accumulation=2)
    record = ipu_benchmark(step, (x, y))
    Path("step.kind").write_text(type(record).__name__)


def test_nan(ipu_train, ipu_benchmark):
    x, y = data()
    x[3, 1] = float("nan")
    step = ipu_train(torch.nn.Linear(4, 2), functional.cross_entropy, sgd, (x, y))
    ipu_benchmark(step, (x, y))


class Run:
    """One time-to-train run: 4 steps of 8 samples an epoch, accuracy on the training data."""

    def __init__(self, step, x, y):
        self.step, self.x, self.y = step, x, y

    def train_epoch(self):
        for i in range(0, len(self.x), 8):
            self.step(self.x[i : i + 8], self.y[i : i + 8])
        return len(self.x)

    def evaluate(self):
        return float((self.step.evaluate(self.x).argmax(1) == self.y).float().mean())


def setup_for(ipu_train):
    def setup(seed):
        torch.manual_seed(seed)
        x, y = data()
        return Run(ipu_train(torch.nn.Linear(4, 2), functional.cross_entropy, sgd, (x[:8], y[:8])), x, y)

    return setup


def test_ttt_reaches(ipu_train, ipu_time_to_train):
    setup = setup_for(ipu_train)
    record = ipu_time_to_train(setup, quality_target=0.9, runs=3, max_epochs=50, seeds=[1, 2, 3])
    Path("ttt.kind").write_text(type(record).__name__)


@pytest.mark.ipu(gate="time_to_train<1ns")
def test_ttt_gate_impossible(ipu_train, ipu_time_to_train):
    ipu_time_to_train(setup_for(ipu_train), quality_target=0.9, runs=3, max_epochs=50, seeds=[1, 2, 3])


def test_ttt_never(ipu_train, ipu_time_to_train):
    # Accuracy never exceeds 1: every run misses the target.
    ipu_time_to_train(setup_for(ipu_train), quality_target=1.5, runs=3, max_epochs=2, seeds=[7, 8, 9])


def test_bad_runs(ipu_train, ipu_time_to_train):
    ipu_time_to_train(setup_for(ipu_train), quality_target=0.9, runs=0)


def test_bad_seeds(ipu_train, ipu_time_to_train):
    ipu_time_to_train(setup_for(ipu_train), quality_target=0.9, runs=3, seeds=[1, 2])


def test_bad_accumulation(ipu_train):
    x, y = data()
    ipu_train(torch.nn.Linear(4, 2), functional.cross_entropy, sgd, (x, y), gradient_accumulation=0)
'''

TORCH = "torch-cpu"
ONNX = "onnxruntime-cpu"


@dataclass(frozen=True)
class Outcome:
    """One inner test's result from the JUnit XML."""

    outcome: str  # passed, failed, error or skipped
    #: The failure's (or skip's) message: pytest's one-line summary of it.
    message: str = ""
    #: The failure's full report, as pytest printed it.
    text: str = ""


@dataclass(frozen=True)
class InnerRun:
    """A finished inner run: its exit status, output, JSON document and each test's outcome."""

    ret: int
    output: str
    path: Path
    outcomes: dict[str, Outcome]

    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.path / "out.json").read_text())
        return data

    def records(self) -> dict[str, dict[str, Any]]:
        """The pytest-ipu records by benchmark name (``test_step[torch-cpu]``)."""
        return {
            b["name"]: b["extra_info"][schema.NAMESPACE]
            for b in self.json()["benchmarks"]
            if schema.NAMESPACE in b["extra_info"]
        }

    def of(self, name: str) -> Outcome:
        found = self.outcomes.get(name)
        assert found is not None, f"{name} did not run:\n{self.output[-4000:]}"
        return found


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k not in XDIST_VARIABLES}
    env.update(PYTEST_ADDOPTS=INNER_ADDOPTS, PY_COLORS="0", OMP_NUM_THREADS="1")
    return env


def _outcomes(junit: Path) -> dict[str, Outcome]:
    found: dict[str, Outcome] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        result = Outcome("passed")
        for kind in ("failure", "error", "skipped"):
            element = case.find(kind)
            if element is not None:
                outcome = "failed" if kind == "failure" else kind
                result = Outcome(outcome, element.attrib.get("message", ""), element.text or "")
                break
        found[case.attrib["name"]] = result
    return found


def _inner_run(path: Path, *args: str) -> InnerRun:
    """Run the inner file in ``path`` once (a subprocess: it imports torch)."""
    (path / "test_training.py").write_text(INNER)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "test_training.py",
        "-rs",
        "--junitxml=junit.xml",
        "--benchmark-json=out.json",
        # The per-round times (a time-to-train benchmark's: its runs) stay in the document.
        "--benchmark-save-data",
        "--ipu-power=off",
        "--ipu-repeats=1",
        "--ipu-max-time=0.2s",
        "--ipu-torch-threads=1",
        *args,
    ]
    done = subprocess.run(command, cwd=path, env=_env(), capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert (path / "junit.xml").exists(), output
    return InnerRun(done.returncode, output, path, _outcomes(path / "junit.xml"))


def _needs_torch() -> None:
    # find_spec, not importorskip: torch is only ever imported by the subprocesses.
    if not HAS_TORCH:
        pytest.skip("torch is not installed")


@pytest.fixture(scope="module")
def main_run(tmp_path_factory: pytest.TempPathFactory) -> InnerRun:
    """Every inner test, on torch:cpu (and onnxruntime:cpu where ONNX Runtime is installed)."""
    _needs_torch()
    targets = "torch:cpu,onnxruntime:cpu" if HAS_ONNXRUNTIME else "torch:cpu"
    return _inner_run(tmp_path_factory.mktemp("training_main"), f"--ipu-backend={targets}")


@pytest.fixture(scope="module")
def scaled_run(tmp_path_factory: pytest.TempPathFactory, main_run: InnerRun) -> InnerRun:
    """The step and the reaching time-to-train benchmarks again, against the main run as baseline,
    with a run-wide time-to-train gate."""
    return _inner_run(
        tmp_path_factory.mktemp("training_scaled"),
        "--ipu-backend=torch:cpu",
        "-k",
        "test_step or test_ttt_reaches",
        f"--ipu-scaling-baseline={main_run.path / 'out.json'}",
        "--ipu-gate",
        "time_to_train<60s",
        # One kept time-to-train run has no spread to bound: INCONCLUSIVE, a warning here.
        "--ipu-inconclusive=warn",
    )


@pytest.fixture(scope="module")
def untimed_run(tmp_path_factory: pytest.TempPathFactory) -> InnerRun:
    """The step and the reaching time-to-train benchmarks under ``--benchmark-disable``."""
    _needs_torch()
    return _inner_run(
        tmp_path_factory.mktemp("training_untimed"),
        "--ipu-backend=torch:cpu",
        "-k",
        "test_step or test_ttt_reaches",
        "--benchmark-disable",
    )


def _one_line_failure(found: Outcome) -> str:
    """The message of a ``pytest.fail(..., pytrace=False)``: pytest's report is the message alone."""
    assert found.outcome == "failed", found
    assert found.message.startswith("Failed: ")
    assert "\n" not in found.text.strip(), found.text
    return remove_prefix(found.message, "Failed: ")


# -- ipu_train + ipu_benchmark -----------------------------------------------------------------------


def test_a_training_step_benchmark_records_how_its_batch_is_made(main_run: InnerRun) -> None:
    assert main_run.of(f"test_step[{TORCH}]").outcome == "passed", main_run.output[-4000:]
    assert (main_run.path / "step.kind").read_text() == "IpuRecord"
    record = main_run.records()[f"test_step[{TORCH}]"]
    training = record["training"]
    assert {
        k: training[k] for k in ("micro_batch", "gradient_accumulation", "replicas", "device_iterations")
    } == {
        "micro_batch": 16,
        "gradient_accumulation": 2,
        "replicas": 1,
        "device_iterations": 1,
    }
    assert (training["processes"], training["global_batch"]) == (1, 32)
    assert (training["optimizer"], training["amp"], training["mode"]) == ("SGD", False, "eager")
    # Every call is a step: the first call and the warm-up ones too, so more steps than timed rounds.
    assert training["steps"] > record["rounds"] > 0
    assert training["loss_last"] < training["loss_first"]
    assert (record["batch_size"], record["items_per_call"]) == (32, 32)
    # Samples per second over the global batch: every timed step's samples over the windows.
    expected = record["items_per_call"] * record["rounds"] / record["window_s"]
    assert record["throughput_items_per_s"] == pytest.approx(expected, rel=1e-9)
    assert "time_to_train" not in record
    assert schema.from_json(record).training is not None


def test_a_nan_loss_fails_its_test_in_one_line_naming_the_step(main_run: InnerRun) -> None:
    message = _one_line_failure(main_run.of(f"test_nan[{TORCH}]"))
    assert message.startswith("pytest-ipu: training step 1 of Linear on torch:cpu: the loss is nan; ")


def test_the_run_with_failures_still_writes_a_valid_json(main_run: InnerRun) -> None:
    # The reader pytest-ipu's commands use parses every record of the run, typed.
    stored = {b.name: b for b in benchmark_json.read_run(main_run.path / "out.json").benchmarks}
    assert f"test_nan[{TORCH}]" not in stored
    for name in (f"test_step[{TORCH}]", f"test_ttt_reaches[{TORCH}]"):
        assert stored[name].record is not None, name


# -- ipu_time_to_train -------------------------------------------------------------------------------


def test_time_to_train_records_every_run_and_the_olympic_average(main_run: InnerRun) -> None:
    assert main_run.of(f"test_ttt_reaches[{TORCH}]").outcome == "passed", main_run.output[-4000:]
    assert (main_run.path / "ttt.kind").read_text() == "IpuRecord"
    bench = next(b for b in main_run.json()["benchmarks"] if b["name"] == f"test_ttt_reaches[{TORCH}]")
    record = bench["extra_info"][schema.NAMESPACE]
    part = record["time_to_train"]
    assert (part["quality"], part["quality_target"], part["higher_is_better"]) == ("accuracy", 0.9, True)
    assert (part["max_epochs"], part["processes"]) == (50, 1)
    runs = part["runs"]
    assert [(r["index"], r["seed"], r["reached"]) for r in runs] == [(1, 1, True), (2, 2, True), (3, 3, True)]
    for r in runs:
        qualities = [p["quality"] for p in r["curve"]]
        # Each run stopped at the first epoch that reached the target.
        assert qualities[-1] >= 0.9 > max(qualities[:-1], default=0.0)
        assert r["epochs"] == len(r["curve"])
        assert [p["samples"] for p in r["curve"]] == [32 * (i + 1) for i in range(r["epochs"])]
        # The run's time is that of the evaluation that reached the target: its last.
        assert r["time_s"] == r["curve"][-1]["elapsed_s"]
    times = [r["time_s"] for r in runs]
    # Three runs: the fastest and the slowest are dropped.
    kept = sorted(range(3), key=lambda i: times[i])[1]
    assert part["olympic_runs"] == [kept + 1]
    assert part["olympic_s"] == times[kept]
    assert (part["min_s"], part["max_s"]) == (min(times), max(times))
    assert "training" not in record
    assert record["rounds"] == 3
    # pytest-benchmark's rounds are the runs, in order: each timed call holds its run's clock.
    data = bench["stats"]["data"]
    assert len(data) == 3
    assert all(call >= run for call, run in zip_strict(data, times))
    assert schema.from_json(record).value("time_to_train") == part["olympic_s"]


def test_an_impossible_time_to_train_gate_fails_its_test(main_run: InnerRun) -> None:
    message = _one_line_failure(main_run.of(f"test_ttt_gate_impossible[{TORCH}]"))
    # One olympic time, no spread: the gate cannot decide, and by default that fails the test.
    assert message.startswith(
        "pytest-ipu gate INCONCLUSIVE (fails under --ipu-inconclusive=fail; 'warn' or 'pass' accepts it): "
        f"test_ttt_gate_impossible[{TORCH}] time_to_train: "
    )
    assert message.endswith(
        "bound < 1 ns: INCONCLUSIVE (no variance estimate); time_to_train has one value (one run kept): no "
        "spread to bound the value by"
    )


def test_a_target_never_reached_fails_naming_every_run_and_seed(main_run: InnerRun) -> None:
    found = main_run.of(f"test_ttt_never[{TORCH}]")
    assert found.outcome == "failed"
    assert found.message == (
        f"Failed: pytest-ipu: time to train of test_ttt_never[{TORCH}]: run 1 (seed 7), run 2 (seed 8), "
        "run 3 (seed 9) did not reach the target within the epoch limit; one run of three or more may miss it"
    )


def test_a_target_never_reached_is_reported_in_one_line(main_run: InnerRun) -> None:
    _one_line_failure(main_run.of(f"test_ttt_never[{TORCH}]"))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("test_bad_runs", "pytest-ipu: ipu_time_to_train(runs=0): runs must be a whole number >= 1"),
        (
            "test_bad_seeds",
            "pytest-ipu: ipu_time_to_train(seeds=[1, 2]): 2 seed(s) for runs=3; pass one seed per run, or "
            "none to draw them",
        ),
        (
            "test_bad_accumulation",
            "pytest-ipu: ipu_train(gradient_accumulation=0): gradient_accumulation must be a whole number "
            ">= 1",
        ),
    ],
)
def test_bad_arguments_fail_in_one_line(main_run: InnerRun, name: str, message: str) -> None:
    assert _one_line_failure(main_run.of(f"{name}[{TORCH}]")) == message


@pytest.mark.parametrize("name", ["test_step", "test_nan", "test_ttt_reaches", "test_bad_accumulation"])
def test_an_inference_only_target_skips_training(main_run: InnerRun, name: str) -> None:
    if not HAS_ONNXRUNTIME:
        pytest.skip("onnxruntime is not installed")
    found = main_run.of(f"{name}[{ONNX}]")
    assert found.outcome == "skipped"
    assert "pytest-ipu: the onnxruntime backend runs inference only; train on torch" in found.message


# -- --benchmark-disable -----------------------------------------------------------------------------


def test_untimed_training_benchmarks_return_not_timed(untimed_run: InnerRun) -> None:
    assert untimed_run.of(f"test_step[{TORCH}]").outcome == "passed", untimed_run.output[-4000:]
    assert untimed_run.of(f"test_ttt_reaches[{TORCH}]").outcome == "passed", untimed_run.output[-4000:]
    assert (untimed_run.path / "step.kind").read_text() == "NotTimed"
    assert (untimed_run.path / "ttt.kind").read_text() == "NotTimed"
    assert untimed_run.ret == 0


# -- --ipu-scaling-baseline and a run-wide gate ------------------------------------------------------


def test_a_scaling_baseline_adds_the_efficiency_against_it(main_run: InnerRun, scaled_run: InnerRun) -> None:
    baseline = main_run.records()
    records = scaled_run.records()
    for name in (f"test_step[{TORCH}]", f"test_ttt_reaches[{TORCH}]"):
        part = records[name]["scaling"]
        assert part is not None, name
        base = baseline[name]["throughput_items_per_s"]
        assert (part["processes"], part["baseline_processes"]) == (1, 1)
        assert part["baseline_file"] == str(main_run.path / "out.json")
        assert part["baseline_throughput_items_per_s"] == base
        # One process against one: the efficiency is the throughput ratio.
        assert part["efficiency"] == pytest.approx(records[name]["throughput_items_per_s"] / base, rel=1e-12)
        assert part["speedup"] == pytest.approx(part["efficiency"], rel=1e-12)
    ttt = records[f"test_ttt_reaches[{TORCH}]"]["scaling"]
    base_olympic = baseline[f"test_ttt_reaches[{TORCH}]"]["time_to_train"]["olympic_s"]
    olympic = records[f"test_ttt_reaches[{TORCH}]"]["time_to_train"]["olympic_s"]
    assert ttt["baseline_time_to_train_s"] == base_olympic
    assert ttt["time_to_train_speedup"] == pytest.approx(base_olympic / olympic, rel=1e-12)
    assert records[f"test_step[{TORCH}]"]["scaling"]["time_to_train_speedup"] is None


def test_a_time_to_train_gate_warns_and_fails_a_record_without_the_metric(scaled_run: InnerRun) -> None:
    # One kept run: INCONCLUSIVE, which --ipu-inconclusive=warn lets pass with a line.
    assert scaled_run.of(f"test_ttt_reaches[{TORCH}]").outcome == "passed", scaled_run.output[-4000:]
    assert (
        f"INCONCLUSIVE (a warning: --ipu-inconclusive=warn) test_ttt_reaches[{TORCH}]: time_to_train: "
        "one value per run: no threshold can be decided (time_to_train has one value (one run kept)"
    ) in scaled_run.output
    # A step benchmark has no time to train: the gate fails it (no value), never passes it unseen.
    message = _one_line_failure(scaled_run.of(f"test_step[{TORCH}]"))
    assert message.startswith(
        f"pytest-ipu gate FAILED: test_step[{TORCH}] time_to_train: no value, bound < 60 s"
    )
    assert "2 gate check(s) on 2 benchmark(s): 0 PASS, 1 FAIL, 1 INCONCLUSIVE" in scaled_run.output


# -- a bad baseline file (in-process: plain callables, no torch) --------------------------------------

PLAIN_BENCH = """
def test_plain(ipu_benchmark):
    ipu_benchmark(lambda: sum(range(100)), rounds=3, warmup_rounds=0)
"""


@pytest.mark.parametrize(("content", "part"), [("nope", "not JSON"), (None, "cannot read")])
def test_a_bad_baseline_file_fails_the_run_naming_it(
    pytester: pytest.Pytester, content: str | None, part: str
) -> None:
    baseline = pytester.path / "base.json"
    if content is not None:
        baseline.write_text(content)
    pytester.makepyfile(test_plain=PLAIN_BENCH)
    result = pytester.runpytest(f"--ipu-scaling-baseline={baseline}", "--ipu-power=off")
    assert result.ret != pytest.ExitCode.OK
    assert (
        f"pytest-ipu: --ipu-scaling-baseline: {baseline}: {part}" in result.stdout.str() + result.stderr.str()
    )


def test_a_bad_baseline_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    baseline = pytester.path / "base.json"
    baseline.write_text("nope")
    pytester.makepyfile(test_sentinel=SENTINEL_TEST)
    result = pytester.runpytest(f"--ipu-scaling-baseline={baseline}")
    assert_usage_error(
        pytester,
        result,
        f"--ipu-scaling-baseline: {baseline}: not JSON: Expecting value: line 1 column 1 (char 0)",
    )
