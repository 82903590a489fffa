"""What a benchmark run leaves behind: the pytest-benchmark JSON sections, the terminal tables, and the
``pytest-ipu summary`` / ``pytest-benchmark compare`` views of the saved file.

One subprocess run with torch (importing torch takes seconds) is shared by the tests of this module; the
auto-rounds checks need no runtime and run in-process.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pytest_ipu
from pytest_ipu.results import schema

VENV_BIN = Path(sys.executable).parent
INNER_ADDOPTS = "-p no:hypothesispytest -p no:cacheprovider"
ROUNDS = 20

RECORD_KEYS = {
    "schema",
    "target",
    "backend",
    "device",
    "device_name",
    "precision",
    "io",
    "batch_size",
    "items_per_call",
    "rounds",
    "rounds_policy",
    "warmup_rounds",
    "latency_s",
    "latency_unsupported",
    "window_s",
    "throughput_items_per_s",
    "median_throughput_items_per_s",
    "compile_s",
    "compile_cached",
    "first_call_s",
    "compile_phases_s",
    "compile_info",
    "parity",
    "power",
    "simulator",
    "placement",
    "instances",
    "device_latency",
    "repeats",
    "budget",
    "stability",
    "contention",
    "cpu",
    "counts",
}

BENCH_FILE = """
import pytest
import torch

torch.manual_seed(0)
MODEL = torch.nn.Linear(16, 8)
X = torch.randn(4, 16)


def test_plain(ipu_benchmark):
    record = ipu_benchmark(lambda: sum(range(100)))
    assert record is not None and record.compile_s is None


def test_linear(ipu_compile, ipu_benchmark):
    compiled = ipu_compile(MODEL, (X,))
    assert compiled.compile_cached is False
    ipu_benchmark(compiled, (X,))


def test_linear_again(ipu_compile, ipu_benchmark):
    compiled = ipu_compile(MODEL, (X,))
    assert compiled.compile_cached is True
    ipu_benchmark(compiled, (X,))


@pytest.mark.benchmark(group="linear-items")
def test_linear_items(ipu_compile, ipu_benchmark):
    compiled = ipu_compile(MODEL, (X,))
    ipu_benchmark(compiled, (X,), items_per_call=12)
"""


@dataclass(frozen=True)
class Run:
    """A finished pytest (or console-script) subprocess."""

    ret: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


def _clean_env() -> dict[str, str]:
    # No PYTEST_* from this run: options, PYTEST_XDIST_WORKER (pytest-benchmark disables itself), ...
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTEST_ADDOPTS"] = INNER_ADDOPTS
    env["PY_COLORS"] = "0"
    env["PYTEST_IPU_REPEATS"] = "1"  # the module checks one measurement (test_repeats.py: several)
    return env


def _run(args: list[str], cwd: Path, timeout: float = 300) -> Run:
    proc = subprocess.run(
        args, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def _section(lines: list[str]) -> list[str]:
    """The lines of the terminal's pytest-ipu section: its tables, each followed by its footnotes."""
    start = next(
        i for i, line in enumerate(lines) if line.strip("= ") == "pytest-ipu" and line.startswith("=")
    )
    # The section ends where the next begins: a rule with a title ("=== x ===", "--- benchmark ... ---"),
    # not a table's rule of dashes alone.
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if lines[i].startswith(("=", "-")) and lines[i].strip("=- ")
        ),
        len(lines),
    )
    section = lines[start + 1 : end]
    while section and not section[0].strip():
        section.pop(0)
    while section and not section[-1].strip():
        section.pop()
    return section


@dataclass(frozen=True)
class TorchRun:
    run: Run
    path: Path
    data: dict[str, Any]

    def bench(self, name: str) -> dict[str, Any]:
        return next(b for b in self.data["benchmarks"] if b["name"] == name)

    def record(self, name: str) -> dict[str, Any]:
        return self.bench(name)["extra_info"]["ipu"]


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory: pytest.TempPathFactory) -> TorchRun:
    # find_spec, not importorskip: torch is only ever imported by the subprocess. Imported in this
    # process after in-process pytester runs have restored sys.modules, it fails to load.
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    path = tmp_path_factory.mktemp("json_output")
    (path / "test_bench.py").write_text(BENCH_FILE)
    run = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-W",
            "error",
            "--strict-markers",
            "--benchmark-json=out.json",
            # The per-round times stay in the document (by default they leave it): checked below.
            "--benchmark-save-data",
            f"--ipu-rounds={ROUNDS}",
            "--ipu-warmup-rounds=1",
            "--ipu-backend=torch:cpu",
            f"--ipu-cache-dir={path / 'cache'}",
            # Energy is tested in test_power_plugin.py; here it must not depend on the machine's sensors.
            "--ipu-power=off",
            "test_bench.py",
        ],
        path,
    )
    assert run.ret == 0, run.stdout + run.stderr
    return TorchRun(run, path, json.loads((path / "out.json").read_text()))


LINEAR = ("test_linear[torch-cpu]", "test_linear_again[torch-cpu]", "test_linear_items[torch-cpu]")
ALL = ("test_plain", *LINEAR)


def test_the_run_passes_every_benchmark(torch_run: TorchRun) -> None:
    assert "4 passed" in torch_run.run.lines[-1]
    assert [b["name"] for b in torch_run.data["benchmarks"]] == list(ALL)


@pytest.mark.parametrize("name", ALL)
def test_record_has_exactly_the_schema_keys(torch_run: TorchRun, name: str) -> None:
    record = torch_run.record(name)
    assert set(record) == RECORD_KEYS
    assert set(record["latency_s"]) == {"min", "p50", "p90", "p99", "max", "mean"}
    assert record["schema"] == schema.SCHEMA_VERSION == 2
    assert schema.to_json(schema.from_json(record)) == record  # the reader reads back what was written


@pytest.mark.parametrize("name", ALL)
def test_every_record_has_its_host_instructions_or_says_why_not(torch_run: TorchRun, name: str) -> None:
    record = torch_run.record(name)
    counted = record["counts"]["host_instructions"]
    assert [r["counts"]["host_instructions"] for r in record["repeats"]] == [counted]  # one repeat: its own
    if counted["reason"] is None:  # a kernel with the hardware counter
        assert (counted["method"], counted["calls"]) == ("timed window", record["rounds"])
        assert counted["per_call"] == counted["total"] / counted["calls"] > 0
    else:  # a VM without a PMU, a kernel that forbids it: the errno and what it means, no figure
        assert counted["reason"].startswith("the hardware counter is not available: ")
        assert "perf_event_open" in counted["reason"] or "machine" in counted["reason"]
        assert (counted["per_call"], counted.get("total")) == (None, None)


@pytest.mark.parametrize("name", ALL)
def test_every_record_has_its_cpu_time_beside_its_wall_time(torch_run: TorchRun, name: str) -> None:
    record = torch_run.record(name)
    cpu = record["cpu"]
    assert set(cpu) == {
        "process_s",
        "thread_s",
        "process_total_s",
        "thread_total_s",
        "off_cpu_share",
        "workers",
        "workers_total_s",
        "host_per_item_s",
        "host_cores",
    }
    # A thread never runs longer than the wall time that passes, however busy the machine.
    assert cpu["thread_total_s"] <= record["window_s"]
    assert 0 <= cpu["off_cpu_share"] <= 1
    assert [r["cpu"] for r in record["repeats"]] == [cpu]  # one repeat: the record's is its own
    # The host cost is of this process alone (no worker processes), over the window's items.
    assert (cpu["workers"], cpu["workers_total_s"]) == (0, 0.0)
    items = record["throughput_items_per_s"] * record["window_s"]
    assert cpu["host_per_item_s"] == pytest.approx(cpu["process_total_s"] / items)
    assert cpu["host_cores"] == pytest.approx(cpu["process_total_s"] / record["window_s"])


@pytest.mark.parametrize("name", LINEAR)
def test_torch_record_values(torch_run: TorchRun, name: str) -> None:
    record = torch_run.record(name)
    assert (record["target"], record["backend"], record["device"]) == ("torch:cpu", "torch", "cpu")
    assert record["device_name"]
    assert (record["precision"], record["io"]) == ("fp32", "host")  # auto on a CPU is fp32
    # The batch shown is the items per call a benchmark declares, else the input's leading dimension.
    assert (
        record["batch_size"]
        == record["items_per_call"]
        == (12 if name.startswith("test_linear_items") else 4)
    )
    assert (record["rounds"], record["rounds_policy"], record["warmup_rounds"]) == (ROUNDS, "fixed", 1)
    assert record["compile_s"] > 0
    assert record["first_call_s"] > 0
    # The torch backend reports no compile phases, only the threads in effect; no parity was asked for.
    assert (record["compile_phases_s"], record["parity"]) == ({}, None)
    threads = record["compile_info"]["threads"]
    assert threads["requested"] == {"intra_op": "auto", "inter_op": "auto"}
    assert threads["intra_op"] >= 1
    assert threads["inter_op"] >= 1


def test_plain_callable_record_values(torch_run: TorchRun) -> None:
    record = torch_run.record("test_plain")
    assert (record["target"], record["backend"], record["device"]) == ("python:host", "python", "host")
    assert (record["precision"], record["io"]) == ("n/a", "host")
    assert (record["batch_size"], record["items_per_call"]) == (1, 1)
    assert (record["rounds"], record["rounds_policy"], record["warmup_rounds"]) == (ROUNDS, "fixed", 1)
    assert record["compile_s"] is None
    assert record["compile_cached"] is False
    assert record["first_call_s"] > 0
    assert (record["compile_phases_s"], record["compile_info"], record["parity"]) == ({}, {}, None)


def test_compile_is_cached_for_the_same_model_object(torch_run: TorchRun) -> None:
    first, again, items = (torch_run.record(n) for n in LINEAR)
    assert first["compile_cached"] is False
    assert again["compile_cached"] is True
    assert items["compile_cached"] is True
    # A cache hit reports the compile that made the model.
    assert again["compile_s"] == first["compile_s"] == items["compile_s"]


@pytest.mark.parametrize("name", ALL)
def test_latency_summary_is_ordered_and_agrees_with_the_raw_samples(torch_run: TorchRun, name: str) -> None:
    record = torch_run.record(name)
    lat = record["latency_s"]
    stats = torch_run.bench(name)["stats"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert lat["min"] <= lat["mean"] <= lat["max"]
    # One call per round: pytest-benchmark's own statistics are over exactly our rounds.
    assert (stats["rounds"], stats["iterations"], len(stats["data"])) == (ROUNDS, 1, ROUNDS)
    assert lat["min"] == pytest.approx(stats["min"], rel=1e-12)
    assert lat["max"] == pytest.approx(stats["max"], rel=1e-12)
    assert lat["mean"] == pytest.approx(stats["mean"], rel=1e-9)
    assert lat["p50"] == pytest.approx(stats["median"], rel=1e-9)
    for q in (50, 90, 99):  # documented: numpy.percentile of stats["data"] gives the same value
        assert lat[f"p{q}"] == pytest.approx(float(np.percentile(stats["data"], q)), rel=1e-9)
    assert record["latency_unsupported"] == ["p99"]  # p99 needs 100 rounds; p50 and p90 are fine at 20


@pytest.mark.parametrize("name", ALL)
def test_throughput_is_items_times_rounds_over_the_window(torch_run: TorchRun, name: str) -> None:
    record = torch_run.record(name)
    stats = torch_run.bench(name)["stats"]
    window = record["window_s"]
    expected = record["items_per_call"] * record["rounds"] / window
    assert record["throughput_items_per_s"] == pytest.approx(expected, rel=1e-9)
    # The window holds every timed call (and the bookkeeping between them), so it is at least their
    # sum: throughput is never above items / mean latency. 1 us of slack for clock rounding.
    assert sum(stats["data"]) <= window + 1e-6
    assert record["rounds"] * record["latency_s"]["mean"] <= window + 1e-6


def test_machine_info_describes_the_torch_cpu_backend(torch_run: TorchRun) -> None:
    info = torch_run.data["machine_info"]["ipu"]
    assert info["schema"] == 2
    assert info["pytest_ipu"] == pytest_ipu.__version__
    assert list(info["backends"]) == ["torch:cpu"]  # the plain callable is no backend
    torch_cpu = info["backends"]["torch:cpu"]
    # torch's own version may carry its build (2.0.1+cu117) where the package metadata does not.
    assert torch_cpu["torch"].partition("+")[0] == importlib.metadata.version("torch").partition("+")[0]
    for key in ("threads", "interop_threads"):
        assert isinstance(torch_cpu[key], int)
        assert torch_cpu[key] >= 1
    assert (torch_cpu["backend"], torch_cpu["mode"], torch_cpu["device"]) == ("torch", "eager", "cpu")
    assert torch_cpu["device_name"] == torch_run.record("test_linear[torch-cpu]")["device_name"]
    assert "absent" not in info  # targets were given, not found by auto


def test_top_level_section_has_schema_version_and_settings(torch_run: TorchRun) -> None:
    top = dict(torch_run.data["pytest_ipu"])
    # The run's samples of its machine's speed (tests/plugin/test_machine_speed_plugin.py has them).
    assert set(top.pop("machine_speed")) == {"workload", "cost_s", "samples"}
    assert top == {
        "schema": 2,
        "version": pytest_ipu.__version__,
        "settings": {
            "targets": ["torch:cpu"],
            "precision": "auto",
            "rounds": ROUNDS,
            "warmup_rounds": 1,
            "min_rounds": 5,
            "max_time_s": 2.0,
            "missing_sdk": "skip",
            "cache_dir": str(torch_run.path / "cache"),
            "power": "off",
            "power_hz": "auto",
            "idle_s": 5.0,
            "gates": [],
            "baselines": [],
            "baseline_missing": "warn",
            "inconclusive": "fail",
            "drift": 0.05,
            "job_alpha": 0.01,
            "repeats": 1,
            "repeat_mode": "interleaved",
            "time_cap": "3x",
            "unstable_threshold": 0.05,
            "contended_threshold": 0.1,
            "torch_threads": "auto",
            "torch_interop_threads": "auto",
            "call_timeout_s": 600.0,
            "rank_timeout_s": 300.0,
            "scaling_baseline": None,
        },
    }


def test_terminal_shows_the_pytest_ipu_tables_and_the_footnote(torch_run: TorchRun) -> None:
    section = _section(torch_run.run.lines)
    headers = [line for line in section if line.startswith("benchmark ")]
    assert len(headers) == 4  # one table per group: each test function, and the benchmark mark's group
    for header in headers:
        assert header.split() == [
            "benchmark",
            "target",
            "precision",
            "batch",
            "rounds",
            "repeats",
            "p50",
            "p99",
            "items/s",
            "host",
            "CPU/item",
            "host",
            "cores",
            "first",
            "call",
            "compile",
            "W",
            "J/item",
            "items/J",
            "energy",
            "of",
            "parity",
            "flags",
        ]
    # Under each table (title, header, rule, its one row) its own footnotes; flag notes (an unstable
    # round spread, a thread kept off the CPU, on a busy machine) may come after these two.
    titles = [i for i, line in enumerate(section) if line.endswith("throughput summed over instances)")]
    assert len(titles) == 4
    for title in titles:
        end = section.index("", title) if "" in section[title:] else len(section)
        # A busy machine may pull items/s away from batch / p50 (the ``^`` note and its row lines).
        notes = [line for line in section[title + 4 : end] if not line.startswith(("^ = ", "  "))]
        assert notes[:2] == [
            "* too few rounds for this percentile (p99 needs >= 100): it is the maximum of the rounds run",
            "n/m = power not measured: power measurement is off (--ipu-power=off or the test's marker)",
        ]
        assert all(line.startswith(("unstable: ", "contended: ", "off-cpu: ")) for line in notes[2:]), notes
    pytest.LineMatcher(section).fnmatch_lines(
        [
            "test_plain (latency per call; throughput summed over instances)",
            "benchmark * p50 * p99 *",
            "-----*",
            f"test_plain * python:host * n/a * 1 * {ROUNDS} * 1 *s *s[*] * - *",
            "test_linear (latency per call; throughput summed over instances)",
            "benchmark *",
            "-----*",
            f"[[]torch-cpu] * torch:cpu * fp32 * 4 * {ROUNDS} * 1 *s *s[*] *s *- *",
            "test_linear_again (latency per call; throughput summed over instances)",
            "benchmark *",
            "-----*",
            f"[[]torch-cpu] * torch:cpu * fp32 * 4 * {ROUNDS} *s[*] * (cached) *- *",
            "linear-items (latency per call; throughput summed over instances)",
            "benchmark *",
            "-----*",
            f"test_linear_items[[]torch-cpu] * torch:cpu * fp32 * 12 * {ROUNDS} *s[*] * (cached) *- *",
        ]
    )


def test_pytest_benchmark_compare_reads_the_file(torch_run: TorchRun) -> None:
    run = _run([str(VENV_BIN / "pytest-benchmark"), "compare", "out.json"], torch_run.path, timeout=120)
    assert run.ret == 0, run.stderr
    for name in ALL:
        assert any(line.startswith(name + " ") for line in run.lines), name


def test_pytest_ipu_summary_prints_the_terminal_tables(torch_run: TorchRun) -> None:
    run = _run([str(VENV_BIN / "pytest-ipu"), "summary", "out.json"], torch_run.path, timeout=120)
    assert run.ret == 0, run.stderr
    assert run.stderr == ""
    printed = run.lines
    assert any(line.startswith("* too few rounds for this percentile (p99 needs >= 100)") for line in printed)
    assert any(line.startswith("n/m = power not measured: power measurement is off") for line in printed)
    # The saved file gives back the very tables the run printed (the run's last table ends in a blank
    # line before whatever follows it).
    assert printed == [*_section(torch_run.run.lines), ""]


def test_pytest_ipu_summary_of_a_missing_file_exits_2_naming_it(torch_run: TorchRun) -> None:
    run = _run([str(VENV_BIN / "pytest-ipu"), "summary", "missing.json"], torch_run.path, timeout=120)
    assert run.ret == 2
    assert run.stdout == ""
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("pytest-ipu: missing.json: no such file, and no saved run in .benchmarks matches")


def test_pytest_ipu_summary_of_a_file_that_is_not_a_run(torch_run: TorchRun) -> None:
    (torch_run.path / "not_a_run.json").write_text('{"benchmarks": 3}')
    run = _run([str(VENV_BIN / "pytest-ipu"), "summary", "not_a_run.json"], torch_run.path, timeout=120)
    assert run.ret == 2
    assert (
        run.stderr.strip() == "pytest-ipu: not_a_run.json: not a pytest-benchmark run (no 'benchmarks' list)"
    )


AUTO_FILE = """
import time


def test_one_ms(ipu_benchmark):
    ipu_benchmark(lambda: time.sleep(0.001))


def test_twenty_ms(ipu_benchmark):
    ipu_benchmark(lambda: time.sleep(0.02))
"""


def test_auto_rounds_fill_the_time_budget(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_ADDOPTS", INNER_ADDOPTS)
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)  # under xdist, pytest-benchmark would disable itself
    pytester.makepyfile(test_auto=AUTO_FILE)
    result = pytester.runpytest("-W", "error", "--benchmark-json=auto.json", "--ipu-max-time=50ms")
    result.assert_outcomes(passed=2)
    data = json.loads((pytester.path / "auto.json").read_text())
    records = {b["name"]: b["extra_info"]["ipu"] for b in data["benchmarks"]}
    one, twenty = records["test_one_ms"], records["test_twenty_ms"]
    assert one["rounds_policy"] == twenty["rounds_policy"] == "auto"
    # A call takes at least 1 ms, so at most 50 fit in 50 ms; never fewer than --ipu-min-rounds (5).
    assert 5 <= one["rounds"] <= 60
    # 20 ms calls: 3 fit in 50 ms, so the floor of --ipu-min-rounds decides.
    assert twenty["rounds"] == 5
    assert twenty["latency_unsupported"] == ["p90", "p99"]  # p90 needs 10 rounds
    for name, record in records.items():
        stats = next(b["stats"] for b in data["benchmarks"] if b["name"] == name)
        assert stats["rounds"] == record["rounds"]
    assert data["pytest_ipu"]["settings"]["rounds"] == "auto"
    assert data["pytest_ipu"]["settings"]["max_time_s"] == 0.05
    # The table has no p90 column, so its footnote names p99 only.
    result.stdout.fnmatch_lines(["* too few rounds for this percentile (p99 needs >= 100): *"])


ROUND_DATA_FILE = """
def test_ours(ipu_benchmark):
    ipu_benchmark(lambda: sum(range(10)), rounds=7)


def test_theirs(benchmark):
    benchmark.pedantic(lambda: sum(range(10)), rounds=7)
"""


def test_per_round_times_stay_only_when_asked_for(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pytest-ipu benchmark's per-round times leave the document (its repeats' summaries are what
    every reader uses) unless ``--benchmark-save-data`` keeps them, in ``--benchmark-json`` and in
    saved runs alike; pytest-benchmark's own benchmark keeps what pytest-benchmark writes."""
    monkeypatch.setenv("PYTEST_ADDOPTS", INNER_ADDOPTS)
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)  # under xdist, pytest-benchmark would disable itself
    pytester.makepyfile(test_rounds=ROUND_DATA_FILE)

    def documents(*extra: str) -> list[dict[str, dict[str, Any]]]:
        storage = pytester.path / f"storage{len(extra)}"
        result = pytester.runpytest(
            "-W", "error", "--benchmark-json=out.json", f"--benchmark-storage={storage}",
            "--benchmark-save=run", "--ipu-repeats=1", *extra,
        )  # fmt: skip
        result.assert_outcomes(passed=2)
        (saved,) = storage.rglob("*.json")
        return [
            {b["name"]: b["stats"] for b in json.loads(path.read_text())["benchmarks"]}
            for path in (pytester.path / "out.json", saved)
        ]

    json_stats, saved_stats = documents()
    for stats in (json_stats, saved_stats):
        assert "data" not in stats["test_ours"]
        # pytest-benchmark's statistics of the rounds stay.
        assert (stats["test_ours"]["rounds"], stats["test_ours"]["median"] > 0) == (7, True)
    assert len(json_stats["test_theirs"]["data"]) == 7  # --benchmark-json always has them
    assert "data" not in saved_stats["test_theirs"]  # a saved run only with --benchmark-save-data
    for stats in documents("--benchmark-save-data"):
        assert len(stats["test_ours"]["data"]) == len(stats["test_theirs"]["data"]) == 7
