"""torchrun launches end to end: ``python -m torch.distributed.run ... -m pytest`` on this machine's CPU.

Each launch starts two pytest processes (ranks) that train over gloo: the ranks time in lock-step,
each writes its own JSON file, and rank 0 merges them into the file ``--benchmark-json`` names.
The launches are subprocesses of a few seconds each (every rank imports torch), shared by the
tests that read them (module-scoped): two ranks on one node, two "nodes" of one rank on loopback,
a rank that fails at import, a rank that hangs (started first: its waits overlap the others), and
a repeat mode torchrun cannot run. A launch that outlives its timeout is stopped, with every
process it started, and fails its test.

Nothing here asserts how long anything took: the window check compares the ranks' own records.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.backports import zip_strict
from pytest_ipu.cli import main as cli
from pytest_ipu.placement import poprun
from pytest_ipu.results import launch_merge
from pytest_ipu.results import schema
from tests.plugin.inner import INNER_ADDOPTS
from tests.plugin.inner import XDIST_VARIABLES

if importlib.util.find_spec("torch") is None:
    pytest.skip("torch is not installed (torchrun is torch's)", allow_module_level=True)

VENV_BIN = Path(sys.executable).parent
#: Longest a launch may take on a loaded machine; a hung launch is killed then.
LAUNCH_TIMEOUT_S = 300
#: The hanging rank sleeps far longer than the launch may take: a launch that ended at all ended early.
HANG_S = 3 * LAUNCH_TIMEOUT_S

#: Two ranks, each training on its own shard of the data (a data-parallel step, then time to train).
TRAIN = """
import json
from pathlib import Path

import torch
from torch.nn import functional

HOST_BATCH = 16


def shard(rank):
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(HOST_BATCH, 4, generator=gen)
    return x, (x[:, 0] > 0).long()


def sgd(params):
    return torch.optim.SGD(params, lr=0.5)


def test_step(ipu_train, ipu_benchmark, ipu_process_group):
    torch.manual_seed(0)
    x, y = shard(ipu_process_group.rank)
    step = ipu_train(torch.nn.Linear(4, 2), functional.cross_entropy, sgd, (x, y), gradient_accumulation=2)
    ipu_benchmark(step, (x, y))
    probe = torch.linspace(-1, 1, 8).reshape(2, 4)
    seen = {
        "world_size": ipu_process_group.world_size,
        "backend": ipu_process_group.backend,
        "distributed": ipu_process_group.distributed,
        "outputs": step.evaluate(probe).tolist(),
    }
    Path(f"step-{ipu_process_group.rank}.json").write_text(json.dumps(seen))


class Run:
    def __init__(self, step, x, y):
        self.step, self.x, self.y = step, x, y

    def train_epoch(self):
        for i in range(0, len(self.x), 8):
            self.step(self.x[i : i + 8], self.y[i : i + 8])
        return len(self.x)

    def evaluate(self):
        return float((self.step.evaluate(self.x).argmax(1) == self.y).float().mean())


def test_ttt(ipu_train, ipu_time_to_train, ipu_process_group):
    def setup(seed):
        torch.manual_seed(seed)
        x, y = shard(ipu_process_group.rank)
        return Run(ipu_train(torch.nn.Linear(4, 2), functional.cross_entropy, sgd, (x[:8], y[:8])), x, y)

    ipu_time_to_train(setup, quality_target=0.8, runs=3, max_epochs=50, seeds=[1, 2, 3])
"""

#: One plain benchmark: enough for a launch whose ranks need only meet.
PLAIN = """
def test_sum(ipu_benchmark, ipu_process_group):
    ipu_benchmark(lambda: sum(range(1000)), rounds=5, warmup_rounds=1)
"""

#: Rank 1 exits with status 3 while pytest imports the test module.
FAIL_AT_IMPORT = """
import os

if os.environ["RANK"] == "1":
    os._exit(3)  # a crash: no pytest version turns it into a collection error


def test_sum(ipu_benchmark, ipu_process_group):
    ipu_benchmark(lambda: sum(range(1000)), rounds=5, warmup_rounds=1)
"""

#: A conftest with which tearing the process group down never ends (a peer gone, say).
TEARDOWN_HANGS = """
import threading

import torch.distributed


def _never_returns(group=None):
    threading.Event().wait()


torch.distributed.destroy_process_group = _never_returns
"""

#: Rank 1 skips its benchmark: the launch has nothing to merge for it.
ONE_RANK_SKIPS = """
import pytest


def test_sum(ipu_benchmark, ipu_process_group):
    if ipu_process_group.rank == 1:
        pytest.skip("this rank measures nothing")
    ipu_benchmark(lambda: sum(range(1000)), rounds=5, warmup_rounds=1)
"""

#: A conftest under which rank 0 makes each test's report seconds late: a rank 1 that exits at the end
#: of its run before rank 0 has reported would have torchrun stop rank 0 before it says where it was.
RANK_0_REPORTS_LATE = """
import os
import time

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    if call.when == "call" and os.environ["RANK"] == "0":
        time.sleep(3)
    return (yield)
"""

#: Rank 1 stops answering after the first benchmark: before the second one's first step.
HANG = f"""
import time

import torch
from torch.nn import functional


def test_first(ipu_benchmark, ipu_process_group):
    ipu_benchmark(lambda: sum(range(1000)), rounds=5, warmup_rounds=1)


def test_hang(ipu_train, ipu_benchmark, ipu_process_group):
    x = torch.randn(8, 4)
    y = (x[:, 0] > 0).long()
    sgd = lambda params: torch.optim.SGD(params, lr=0.1)
    step = ipu_train(torch.nn.Linear(4, 2), functional.cross_entropy, sgd, (x, y))
    if ipu_process_group.rank == 1:
        time.sleep({HANG_S})
    ipu_benchmark(step, (x, y))
"""


def free_port() -> int:
    """A TCP port free now on the loopback interface (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "TORCHELASTIC_")) and k not in XDIST_VARIABLES
    }
    # OMP_NUM_THREADS set: torchrun then does not warn that it sets it.
    env.update(PYTEST_ADDOPTS=INNER_ADDOPTS, PY_COLORS="0", OMP_NUM_THREADS="1")
    return env


@dataclass(frozen=True)
class Launch:
    """A finished launch: torchrun's exit status, the output of it and of every rank, its directory."""

    ret: int
    output: str
    path: Path

    def load(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.path / name).read_text())
        return data


class Running:
    """One torchrun (or several, for several nodes) started in ``path`` and not waited for yet.

    Each writes its output, and its ranks', to a file: a pipe nobody reads until the launch ends
    could fill up and block the ranks writing to it.
    """

    def __init__(self, path: Path, commands: Sequence[Sequence[str]]) -> None:
        self.path = path
        self.logs = [path / f"launch-{i}.log" for i in range(len(commands))]
        self.processes = []
        for command, log in zip_strict(commands, self.logs):
            with log.open("w") as out:
                self.processes.append(
                    subprocess.Popen(
                        list(command),
                        cwd=path,
                        env=_env(),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        # Its own process group, so that a launch that outlives its timeout is stopped whole.
                        start_new_session=True,
                    )
                )

    def wait(self) -> list[Launch]:
        """Each torchrun's ``Launch``. The launches are watched together: one still running at
        ``LAUNCH_TIMEOUT_S`` stops them all and fails the test with every launch's exit status and
        output (the one that hung may be waiting for another that ended)."""
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S
        while any(p.poll() is None for p in self.processes) and time.monotonic() < deadline:
            time.sleep(0.2)
        if any(p.poll() is None for p in self.processes):
            codes = [p.poll() for p in self.processes]
            self.kill()
            tails = "\n".join(
                f"--- launch {i} (exit status {code}, None: still running):\n{log.read_text()[-3000:]}"
                for i, (code, log) in enumerate(zip_strict(codes, self.logs))
            )
            pytest.fail(f"a torchrun launch in {self.path} ran past {LAUNCH_TIMEOUT_S} s:\n{tails}")
        return [
            Launch(p.returncode, log.read_text(), self.path)
            for p, log in zip_strict(self.processes, self.logs)
        ]

    def kill(self) -> None:
        """End every process the launches started, and reap them.

        torchrun first: its ranks run in sessions of their own, out of reach of a signal to its
        process group, and torchrun stops them on SIGTERM (then SIGKILL) before it exits.
        """
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def _torchrun(launcher: Sequence[str], test_file: str, *pytest_args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *launcher,
        "-m",
        "pytest",
        test_file,
        "-rfs",
        "--ipu-backend=torch:cpu",
        "--ipu-torch-threads=1",
        "--ipu-power=off",
        "--ipu-repeats=1",
        "--benchmark-json=out.json",
        # A rank that ran no benchmark (it failed first) gets pytest-benchmark's "Not saving anything"
        # warning, which -W error would turn into a crash of its session's end, hiding its report.
        "-W",
        "ignore:Not saving anything:pytest_benchmark.logger.PytestBenchmarkWarning",
        *pytest_args,
    ]


def _single_node(path: Path, source: str, *pytest_args: str, ranks: int = 2) -> Running:
    """``ranks`` ranks on this node."""
    (path / "test_launch.py").write_text(source)
    launcher = [f"--nproc-per-node={ranks}", "--master-addr=127.0.0.1", f"--master-port={free_port()}"]
    return Running(path, [_torchrun(launcher, "test_launch.py", *pytest_args)])


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launch]:
    """Two ranks training on one node; every test passes."""
    running = _single_node(
        tmp_path_factory.mktemp("torchrun_two"),
        TRAIN,
        # A short window: what is checked of it (the merged rate against the ranks' own) holds
        # whatever its length.
        "--ipu-max-time=0.2s",
        "--ipu-rank-timeout=120s",
    )
    try:
        (launch,) = running.wait()
        yield launch
    finally:
        running.kill()


def _records(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["name"]: b["extra_info"][schema.NAMESPACE] for b in document["benchmarks"]}


STEP = "test_step[torch-cpu]"
TTT = "test_ttt[torch-cpu]"
RANK_FILES = ("out.rank-0-of-2.json", "out.rank-1-of-2.json")


def test_two_ranks_pass_and_rank_0_merges_their_files(two_ranks: Launch) -> None:
    assert two_ranks.ret == 0, two_ranks.output[-6000:]
    merged = two_ranks.load("out.json")
    identity = merged["machine_info"]["ipu"]["torchrun"]
    assert identity["merged"] is True
    assert (identity["count"], identity["nodes"]) == (2, 1)
    assert [i["index"] for i in identity["instances"]] == [0, 1]
    assert identity["files"] == list(RANK_FILES)
    for index, name in enumerate(RANK_FILES):
        rank = two_ranks.load(name)["machine_info"]["ipu"]["torchrun"]
        assert (rank["index"], rank["count"], rank["local_count"], rank["node"]) == (index, 2, 2, 0)
    assert (
        "pytest-ipu: merged 2 torchrun rank(s), 2 benchmark(s), into out.json"
        in two_ranks.output.splitlines()
    )


def test_only_rank_0_prints_the_header_and_the_tables(two_ranks: Launch) -> None:
    lines = two_ranks.output.splitlines()
    for one in ("platform ", "Name (time in ", "torchrun launch: "):
        assert sum(line.startswith(one) for line in lines) == 1, (one, two_ranks.output[-6000:])
    assert sum(line.strip("= ") == "pytest-ipu" for line in lines) == 1, two_ranks.output[-6000:]


def test_the_merged_throughput_is_every_ranks_items_over_the_common_window(two_ranks: Launch) -> None:
    record = _records(two_ranks.load("out.json"))[STEP]
    ranks = [_records(two_ranks.load(name))[STEP] for name in RANK_FILES]
    items = sum(r["throughput_items_per_s"] * r["window_s"] for r in ranks)
    window = max(r["window_s"] for r in ranks)
    assert record["window_s"] == window
    assert record["throughput_items_per_s"] == pytest.approx(items / window, rel=1e-9)
    assert record["sum_of_ranks_items_per_s"] == pytest.approx(
        sum(r["throughput_items_per_s"] for r in ranks), rel=1e-12
    )
    # Lock-step: the ranks made the same rounds in windows opened and closed together.
    assert ranks[0]["rounds"] == ranks[1]["rounds"]
    assert record["rounds"] == 2 * ranks[0]["rounds"]
    # Over the common (longest) window the merged figure can only be at most the sum of the ranks'
    # own rates: equal when the windows are equal, below it by how much they differ (scheduling).
    assert record["throughput_items_per_s"] <= record["sum_of_ranks_items_per_s"] * (1 + 1e-12)
    assert [r["torchrun"]["index"] for r in record["torchrun"]["instances"]] == [0, 1]


def test_the_global_batch_counts_every_rank(two_ranks: Launch) -> None:
    for document in (two_ranks.load("out.json"), *(two_ranks.load(name) for name in RANK_FILES)):
        training = _records(document)[STEP]["training"]
        # Host batch 16: micro-batches of 8, accumulated twice, on each of two processes.
        assert (training["micro_batch"], training["gradient_accumulation"], training["processes"]) == (
            8,
            2,
            2,
        )
        assert training["global_batch"] == 2 * 16


def test_each_rank_trains_its_own_shard_of_one_data_parallel_model(two_ranks: Launch) -> None:
    seen = [two_ranks.load(f"step-{rank}.json") for rank in (0, 1)]
    for group in seen:
        assert (group["world_size"], group["backend"], group["distributed"]) == (2, "gloo", True)
    # Different shards, so different losses; the averaged gradients keep the replicas equal.
    losses = [_records(two_ranks.load(name))[STEP]["training"]["loss_first"] for name in RANK_FILES]
    assert losses[0] != losses[1]
    outputs = [[value for row in group["outputs"] for value in row] for group in seen]
    assert outputs[0] == pytest.approx(outputs[1], rel=1e-6, abs=1e-7)


def test_time_to_train_ranks_stop_together_and_count_every_sample(two_ranks: Launch) -> None:
    ranks = [_records(two_ranks.load(name))[TTT]["time_to_train"] for name in RANK_FILES]
    assert [r["epochs"] for r in ranks[0]["runs"]] == [r["epochs"] for r in ranks[1]["runs"]]
    merged = _records(two_ranks.load("out.json"))[TTT]["time_to_train"]
    assert merged["processes"] == 2
    for run in merged["runs"]:
        assert run["reached"]
        # 16 samples an epoch on each of the two ranks.
        assert [p["samples"] for p in run["curve"]] == [32 * (i + 1) for i in range(run["epochs"])]
    assert [r["seed"] for r in merged["runs"]] == [1, 2, 3]


def test_pytest_benchmark_and_pytest_ipu_compare_read_the_merged_file(
    two_ranks: Launch, capsys: pytest.CaptureFixture[str]
) -> None:
    merged = str(two_ranks.path / "out.json")
    compare = subprocess.run(
        [str(VENV_BIN / "pytest-benchmark"), "compare", merged],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert compare.returncode == 0, compare.stdout + compare.stderr
    assert STEP in compare.stdout
    capsys.readouterr()
    assert cli.main(["compare", merged, merged]) == 0
    assert STEP in capsys.readouterr().out


def test_merging_the_rank_files_again_gives_the_launchs_records(two_ranks: Launch) -> None:
    files = [two_ranks.path / name for name in reversed(RANK_FILES)]
    again = launch_merge.merge(files, poprun.IDENTITIES)
    assert again["machine_info"]["ipu"]["torchrun"]["count"] == 2
    assert _records(again) == _records(two_ranks.load("out.json"))


def test_pytest_ipu_merge_joins_the_rank_files(
    two_ranks: Launch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "merged.json"
    files = [str(two_ranks.path / name) for name in RANK_FILES]
    capsys.readouterr()
    assert cli.main(["merge", str(out), *files]) == 0
    assert "merged 2" in capsys.readouterr().out
    assert _records(json.loads(out.read_text())) == _records(two_ranks.load("out.json"))


def test_pytest_ipu_merge_refuses_a_missing_rank(
    two_ranks: Launch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "merged.json"
    only = two_ranks.path / RANK_FILES[1]
    capsys.readouterr()
    assert cli.main(["merge", str(out), str(only)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"pytest-ipu: {only}: rank(s) 0 of 2 missing; pass the JSON file of every rank\n"
    assert not out.exists()


# -- two nodes on loopback -------------------------------------------------------------------------


def test_two_nodes_of_one_rank_merge_into_one_launch(tmp_path: Path) -> None:
    (tmp_path / "test_launch.py").write_text(PLAIN)
    launcher = [
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        f"--rdzv-id=nodes-{os.getpid()}",
    ]
    command = _torchrun(launcher, "test_launch.py", "--ipu-rank-timeout=120s")
    running = Running(tmp_path, [command, command])
    try:
        launches = running.wait()
    finally:
        running.kill()
    for launch in launches:
        assert launch.ret == 0, launch.output[-6000:]
    identity = launches[0].load("out.json")["machine_info"]["ipu"]["torchrun"]
    assert (identity["merged"], identity["count"], identity["nodes"]) == (True, 2, 2)
    assert [(i["index"], i["node"], i["local_count"]) for i in identity["instances"]] == [
        (0, 0, 1),
        (1, 1, 1),
    ]


# -- gates ----------------------------------------------------------------------------------------


def test_gates_are_decided_once_on_rank_0_against_the_merged_records(tmp_path: Path) -> None:
    running = _single_node(
        tmp_path,
        PLAIN,
        "--ipu-rank-timeout=120s",
        "--ipu-repeats=3",  # a bound is judged on the interval of the repeats
        "--ipu-gate=latency.p50<60s",
        "--ipu-gate=throughput>1e15/s",
    )
    try:
        (launch,) = running.wait()
    finally:
        running.kill()
    assert launch.ret != 0  # the impossible gate failed the launch
    merged = launch.load("out.json")  # merged all the same: the gate judges it, it does not lose it
    throughput = merged["benchmarks"][0]["extra_info"]["ipu"]["throughput_items_per_s"]
    # One rank decided (rank 0, on the merged record), not each rank on its share.
    summaries = [line for line in launch.output.splitlines() if "gate check(s) on" in line]
    assert len(summaries) == 1, launch.output[-6000:]
    assert summaries[0].endswith("2 gate check(s) on 1 benchmark(s): 1 PASS, 1 FAIL, 0 INCONCLUSIVE")
    failed = [line for line in launch.output.splitlines() if " throughput: " in line and "FAILED" in line]
    assert len(failed) == 1, launch.output[-6000:]
    # The value judged is the merged one (the launch's samples/s), as the table prints it.
    assert f"throughput: {throughput:,.0f} items/s" in failed[0] or f"{throughput:,.3g}" in failed[0], (
        failed[0],
        throughput,
    )
    # The launch's file carries the verdicts, as a single run's file does, each with its printed line.
    gates = merged["pytest_ipu"]["gates"]
    assert sorted(g["outcome"] for g in gates) == ["FAIL", "PASS"], gates
    (failing,) = [g for g in gates if g["outcome"] == "FAIL"]
    assert failing["line"] in failed[0], (failing, failed[0])


def test_a_rank_that_skips_a_benchmark_stops_the_launch_naming_where_each_rank_is(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(RANK_0_REPORTS_LATE)
    running = _single_node(tmp_path, ONE_RANK_SKIPS, "--ipu-rank-timeout=120s")
    try:
        (launch,) = running.wait()
    finally:
        running.kill()
    assert launch.ret != 0
    assert not (launch.path / "out.json").exists()
    # Both ranks reached a barrier (no timeout), each elsewhere: each says where it and the other are.
    rank0 = [line for line in launch.output.splitlines() if line.startswith("pytest-ipu: rank 0 of 2")]
    rank1 = [line for line in launch.output.splitlines() if line.startswith("pytest-ipu: rank 1 of 2")]
    assert len(rank0) == 1, launch.output[-6000:]
    assert rank0[0].startswith(
        "pytest-ipu: rank 0 of 2 (torchrun) is at the first call of repeat 1 in test_sum, but rank 1 at the "
        "end of the run (writing the merged results): every rank must run the same benchmarks in the same "
        "order"
    ), rank0[0]
    assert rank1 == [
        "pytest-ipu: rank 1 of 2 (torchrun) is at the end of the run (writing the merged results), but "
        "rank 0 at the first call of repeat 1 in test_sum: every rank must run the same benchmarks in the "
        "same order (one skipped or deselected on some ranks only, say); the run stops here"
    ], launch.output[-6000:]
    assert "Timed out" not in launch.output


# -- failures --------------------------------------------------------------------------------------


def test_a_rank_that_fails_fails_the_launch_named_and_nothing_is_merged(tmp_path: Path) -> None:
    running = _single_node(tmp_path, FAIL_AT_IMPORT, "--ipu-rank-timeout=120s")
    try:
        (launch,) = running.wait()
    finally:
        running.kill()
    assert launch.ret != 0
    assert not (tmp_path / "out.json").exists()
    # torchrun's summary names the rank that failed, and its exit status. It is usually the "root
    # cause"; on a loaded machine rank 0 may have ended too (its peer gone) before torchrun looked,
    # and then either may be named first: rank 1's own entry is what must be there.
    summary = launch.output[launch.output.index("pytest FAILED") :]
    assert re.search(r"rank\s*:\s*1 \(local_rank: 1\)\s*\n\s*exitcode\s*:\s*3\b", summary), summary


@pytest.fixture(scope="module", autouse=True)
def _hang_started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """The launch whose rank 1 sleeps (far longer than the launch may take) before its second
    benchmark. Started before the module's first test: its two waits of a rank timeout each then
    overlap the other launches instead of adding to them."""
    running = _single_node(tmp_path_factory.mktemp("torchrun_hang"), HANG, "--ipu-rank-timeout=10s")
    yield running
    running.kill()


@pytest.fixture(scope="module")
def hung_launch(_hang_started: Running) -> Launch:
    """The hanging launch, finished."""
    (launch,) = _hang_started.wait()
    return launch


def test_a_hung_rank_ends_the_launch_named_and_nothing_is_merged(hung_launch: Launch) -> None:
    # The launch ended at all (it was not stopped at the timeout): long before the sleep would have.
    assert hung_launch.ret != 0
    assert not (hung_launch.path / "out.json").exists()
    assert (hung_launch.path / RANK_FILES[0]).exists()  # rank 0's own results are kept
    # The benchmark that waited fails with one line from rank 0 (its failure section, whole whatever
    # the terminal's width) naming the wait and the missing rank, and the run stops after it.
    lines = [line for line in hung_launch.output.splitlines() if line.startswith("pytest-ipu: rank 0 of 2")]
    assert len(lines) == 1, hung_launch.output[-6000:]
    assert re.match(
        r"pytest-ipu: rank 0 of 2 \(torchrun\): rank\(s\) 1 did not reach the first call of repeat 1 in "
        r"test_hang\S* within --ipu-rank-timeout=10s \(",
        lines[0],
    ), lines[0]
    assert re.search(r"Ranks? 1 failed to pass monitoredBarrier", lines[0]), lines[0]
    assert re.search(
        r"^FAILED \S*test_hang\S* - Failed: pytest-ipu: rank 0 of 2", hung_launch.output, re.MULTILINE
    )
    assert re.search(
        r"^! Interrupted: pytest-ipu: rank 0 of 2 \(torchrun\)", hung_launch.output, re.MULTILINE
    )


def test_process_repeats_cannot_run_under_torchrun(tmp_path: Path) -> None:
    # One rank is enough: the refusal is each rank's own, made before it meets any other.
    running = _single_node(tmp_path, PLAIN, "--ipu-repeat-mode=process", "--ipu-repeats=2", ranks=1)
    try:
        (launch,) = running.wait()
    finally:
        running.kill()
    assert launch.ret != 0
    assert not (tmp_path / "out.json").exists()
    # The rank fails the benchmark in one line.
    assert (
        "pytest-ipu: --ipu-repeat-mode=process cannot run under torchrun: its worker processes are not ranks "
        "of the launch; use --ipu-repeat-mode=interleaved (the default)"
    ) in launch.output


def test_a_rank_ends_with_its_status_without_tearing_its_groups_down(tmp_path: Path) -> None:
    # Tearing gloo's groups down could deadlock or abort a rank (lifecycle's _leave): a rank ends at
    # exit without it, so a teardown that would hang (patched in) is never waited for.
    (tmp_path / "conftest.py").write_text(TEARDOWN_HANGS)
    running = _single_node(tmp_path, PLAIN, "--ipu-rank-timeout=5s", ranks=1)
    try:
        (launch,) = running.wait()
    finally:
        running.kill()
    assert launch.ret == 0, launch.output[-6000:]
    assert "did not close" not in launch.output
    assert re.search(r"^=+ 1 passed", launch.output, re.MULTILINE), launch.output[-6000:]
    assert (tmp_path / "out.json").exists()  # merged before the rank left
