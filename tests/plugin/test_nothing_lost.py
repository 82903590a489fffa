"""Nothing lost: ``--benchmark-json`` reaches disk whole or not at all, an interrupted run never
replaces a complete one, and gates that checked nothing do not pass (nor does anything switch them
off in silence). Failures are injected (a writer that stops half-way with a full disk, a Ctrl-C
raised inside a benchmark), or sent for real (SIGINT, SIGTERM while the file is written, once the
writer says it is writing); nothing here depends on timing."""

from __future__ import annotations

import errno
import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from typing import cast

import pytest

from tests import interrupts
from tests.plugin.inner import INNER_ADDOPTS
from tests.plugin.inner import SENTINEL_TEST
from tests.plugin.inner import XDIST_VARIABLES
from tests.plugin.inner import assert_usage_error
from tests.unit import small_fs as small_file_system
from tests.waiting import wait_for

BENCH = """
def test_sum(ipu_benchmark):
    ipu_benchmark(lambda: sum(range(100)), rounds=3, warmup_rounds=0)
"""

#: pytest-benchmark's writer, made to write half the file and then find the disk full; put back
#: when the inner run ends (in-process runs share the class with this process).
FULL_DISK = """
import errno
import os

from pytest_benchmark.session import BenchmarkSession

ORIGINAL = BenchmarkSession.save_json


def save_json(self, output_json):
    with open(self.json, "w") as out:
        out.write('{"benchmarks": [')
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def pytest_configure(config):
    BenchmarkSession.save_json = save_json


def pytest_unconfigure(config):
    BenchmarkSession.save_json = ORIGINAL
"""


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_the_json_file_is_written_whole_and_no_temporary_file_is_left(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest("--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    data = json.loads((pytester.path / "out.json").read_text())
    assert [b["name"] for b in data["benchmarks"]] == ["test_sum"]
    assert _leftovers(pytester.path) == []


def test_a_failed_write_leaves_the_previous_file_and_says_so(pytester: pytest.Pytester) -> None:
    (pytester.path / "out.json").write_text('{"previous": true}')
    pytester.makeconftest(FULL_DISK)
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest("--benchmark-json=out.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = [line for line in result.outlines if "--benchmark-json=" in line]
    assert len(lines) == 1, result.outlines
    assert "cannot write the results" in lines[0]
    assert "No space left on device" in lines[0]
    # The half-written file never replaced the previous one, and was removed.
    assert json.loads((pytester.path / "out.json").read_text()) == {"previous": True}
    assert _leftovers(pytester.path) == []


def test_a_failed_write_of_a_new_file_leaves_none(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FULL_DISK)
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest("--benchmark-json=out.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert not (pytester.path / "out.json").exists()
    assert _leftovers(pytester.path) == []


def test_gates_that_checked_nothing_fail_the_run(pytester: pytest.Pytester) -> None:
    # A baseline from another suite: the gated benchmark is not in it, so no gate can be checked.
    pytester.makepyfile(test_bench=BENCH)
    pytester.runpytest("--benchmark-json=base.json").assert_outcomes(passed=1)
    data = json.loads((pytester.path / "base.json").read_text())
    for bench in data["benchmarks"]:
        bench["fullname"] = "elsewhere.py::test_other"
    (pytester.path / "base.json").write_text(json.dumps(data))
    result = pytester.runpytest("--ipu-baseline=base.json", "--ipu-gate=throughput:-50%")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*FAILED no gate was checked*"])


# -- gates that nothing measures --------------------------------------------------------------------

MARKED = """
import pytest


@pytest.mark.ipu(gate="latency.p50<1s")
def test_gated(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=3, warmup_rounds=0)


def test_plain(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=3, warmup_rounds=0)
"""

#: The end of each refusal: what would switch the gates off, where it was given, and the fix.
UNTIMED = {
    "-n": "-n 2 (from the command line) runs the tests in pytest-xdist workers, where pytest-benchmark "
    "times nothing; run the gated benchmarks without -n",
    "--benchmark-disable": "--benchmark-disable (from the command line) turns pytest-benchmark's timing "
    "off; run without --benchmark-disable (or add --benchmark-enable)",
    "--benchmark-skip": "--benchmark-skip (from the command line) skips every benchmark; run without "
    "--benchmark-skip",
}


@pytest.mark.parametrize(
    "option", [("-n", "2"), ("--benchmark-disable",), ("--benchmark-skip",)], ids=lambda o: o[0]
)
def test_the_runs_gates_are_refused_when_nothing_is_timed(
    pytester: pytest.Pytester, option: tuple[str, ...]
) -> None:
    if option[0] == "-n" and importlib.util.find_spec("xdist") is None:
        pytest.skip("needs pytest-xdist")
    pytester.makepyfile(test_bench=BENCH, test_sentinel=SENTINEL_TEST)
    # Refused at configure time: under -n, before any worker starts.
    result = pytester.runpytest(*option, "--ipu-gate=latency.p50<1s")
    assert_usage_error(
        pytester,
        result,
        f"--ipu-gate 'latency.p50<1s' from the command line would check nothing: {UNTIMED[option[0]]}, "
        "or pass --ipu-gate=none to run them untimed, without gates",
    )


def test_dist_from_addopts_is_named_with_its_source(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    if importlib.util.find_spec("xdist") is None:
        pytest.skip("needs pytest-xdist")
    # --dist without -n starts no worker, yet pytest-benchmark stops timing.
    monkeypatch.setenv("PYTEST_ADDOPTS", f"{INNER_ADDOPTS} --dist=loadfile")
    pytester.makepyfile(test_bench=BENCH, test_sentinel=SENTINEL_TEST)
    result = pytester.runpytest("--ipu-gate=latency.p50<1s")
    assert_usage_error(
        pytester,
        result,
        "--ipu-gate 'latency.p50<1s' from the command line would check nothing: --dist=loadfile (from "
        "PYTEST_ADDOPTS) makes pytest-benchmark time nothing (it stops timing whenever --dist is set, even "
        "without -n); run the gated benchmarks without --dist, or pass --ipu-gate=none to run them "
        "untimed, without gates",
    )


def test_ini_gates_are_refused_and_none_lifts_them(pytester: pytest.Pytester) -> None:
    ini = pytester.makeini("[pytest]\nipu_gate = latency.p50<1s\n")
    pytester.makepyfile(test_bench=BENCH, test_sentinel=SENTINEL_TEST)
    result = pytester.runpytest("--benchmark-disable")
    assert_usage_error(
        pytester,
        result,
        f"--ipu-gate 'latency.p50<1s' from ini key ipu_gate in {ini} would check nothing: "
        f"{UNTIMED['--benchmark-disable']}, or pass --ipu-gate=none to run them untimed, without gates",
    )
    # Asked for on the command line: the benchmarks run as plain tests, without gates.
    result = pytester.runpytest("--benchmark-disable", "--ipu-gate=none")
    result.assert_outcomes(passed=2)


def test_a_markers_gates_are_refused_when_nothing_is_timed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=MARKED, test_sentinel=SENTINEL_TEST)
    # Refused once the tests are collected, before any runs.
    result = pytester.runpytest("--benchmark-disable")
    assert_usage_error(
        pytester,
        result,
        "test_bench.py::test_gated: @pytest.mark.ipu(gate=...) would check nothing: "
        f"{UNTIMED['--benchmark-disable']}, or deselect the gated benchmarks (-k) to run the others untimed",
    )
    # Without the gated benchmark, the others run untimed.
    pytester.runpytest("--benchmark-disable", "-k", "not gated").assert_outcomes(passed=2)


def test_under_xdist_a_markers_gates_fail_the_run_once(pytester: pytest.Pytester) -> None:
    if importlib.util.find_spec("xdist") is None:
        pytest.skip("needs pytest-xdist")
    pytester.makepyfile(test_bench=MARKED)
    # The controller collects nothing: its workers name the gated benchmarks, the controller fails
    # the run at its end, with one line (each worker collected the gated benchmark).
    result = pytester.runpytest_subprocess("-n", "2", timeout=120)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = [line for line in result.outlines if "no gate was checked" in line]
    if importlib.metadata.version("pytest-benchmark").split(".")[0] == "4":
        # pytest-benchmark 4 still times the rounds in a worker: the worker's own gate decides (one
        # repeat: INCONCLUSIVE, which fails the test), and nothing ran untimed.
        result.assert_outcomes(passed=1, failed=1)
        assert lines == []
        result.stdout.fnmatch_lines(["*pytest-ipu gate INCONCLUSIVE*"])
        return
    result.assert_outcomes(passed=2)
    assert lines == [
        "FAILED no gate was checked: 1 benchmark(s) with gates (@pytest.mark.ipu(gate=...)) ran untimed: "
        f"{UNTIMED['-n']}"
    ]


def test_gates_with_every_benchmark_deselected_fail_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCH, test_sentinel=SENTINEL_TEST)
    result = pytester.runpytest("--ipu-gate=latency.p50<1s", "-k", "ran")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "FAILED no gate was checked: gates given (latency.p50<1s) but no benchmark was selected "
            "(1 deselected); select the gated benchmarks, or pass --ipu-gate=none to run without gates"
        ]
    )


def test_gates_with_every_gated_benchmark_skipped_fail_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=MARKED.replace("def test_gated", "@pytest.mark.skip\ndef test_gated"))
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "FAILED no gate was checked: every gated benchmark was skipped (1); run them where they are "
            "not skipped (-rs says why), or remove their gates"
        ]
    )


# -- interrupted runs ---------------------------------------------------------------------------------

#: The second benchmark stops the run as asked by STOP: Ctrl-C (a KeyboardInterrupt) inside its
#: measured call, as a user's Ctrl-C lands; SIGTERM to the run (a cancelled CI job); ``pytest.exit``;
#: or a failure (``-x`` then stops).
STOPPING = """
import os
import signal

import pytest


def test_first(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=3, warmup_rounds=0)


def stop():
    how = os.environ.get("STOP")
    if how == "ctrl-c":
        raise KeyboardInterrupt
    if how == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    if how == "exit":
        pytest.exit("stopped by the test")
    if how == "fail":
        raise AssertionError("failed")


def test_second(ipu_benchmark):
    ipu_benchmark(stop, rounds=3, warmup_rounds=0)


def test_third(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=3, warmup_rounds=0)
"""

SAVING = ("--benchmark-json=out.json", "--benchmark-autosave")


def _saved(directory: Path) -> list[str]:
    return sorted(p.name[:4] for p in (directory / ".benchmarks").rglob("*.json"))


@pytest.mark.parametrize(
    ("how", "said"),
    [("ctrl-c", "interrupted"), ("exit", "interrupted"), ("sigterm", "terminated (SIGTERM)")],
)
def test_an_interrupted_run_saves_nothing_and_says_so(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str, said: str
) -> None:
    pytester.makepyfile(test_bench=STOPPING)
    pytester.runpytest(*SAVING).assert_outcomes(passed=3)
    complete = (pytester.path / "out.json").read_bytes()
    monkeypatch.setenv("STOP", how)
    result = pytester.runpytest(*SAVING, no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    lines = [line for line in result.outlines if line.startswith("pytest-ipu: ")]
    assert lines == [
        f"pytest-ipu: {said}: results not saved, out.json keeps the previous complete run; "
        "no run was saved into file://./.benchmarks"
    ]
    assert (pytester.path / "out.json").read_bytes() == complete
    assert _saved(pytester.path) == ["0001"]
    assert _leftovers(pytester.path) == []
    # The next comparison gates against the complete run, the one saved.
    monkeypatch.delenv("STOP")
    # One repeat a side: INCONCLUSIVE, a warning here; what matters is the baseline it names.
    result = pytester.runpytest(
        "--benchmark-compare", "--ipu-gate=throughput:-99%", "--ipu-inconclusive=warn"
    )
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        ["3 gate check(s) on 3 benchmark(s) against --benchmark-compare: 0 PASS, 0 FAIL, 3 INCONCLUSIVE"]
    )


def test_an_interrupted_first_run_writes_no_file(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_bench=STOPPING)
    monkeypatch.setenv("STOP", "ctrl-c")
    result = pytester.runpytest("--benchmark-json=out.json", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["pytest-ipu: interrupted: results not saved, out.json was not written"])
    assert not (pytester.path / "out.json").exists()
    assert _leftovers(pytester.path) == []


@pytest.mark.parametrize(
    ("stop", "status"), [("-x", pytest.ExitCode.TESTS_FAILED), ("--stepwise", pytest.ExitCode.INTERRUPTED)]
)
def test_a_run_stopped_at_a_failure_is_saved_as_far_as_it_ran(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, stop: str, status: pytest.ExitCode
) -> None:
    # Not an interrupt: the run ends where a test failed (-x: as failed; --stepwise: through
    # session.shouldstop, as interrupted), and each benchmark it ran is whole.
    monkeypatch.setenv("PYTEST_ADDOPTS", INNER_ADDOPTS.replace("-p no:cacheprovider", ""))  # --stepwise's
    pytester.makepyfile(test_bench=STOPPING)
    monkeypatch.setenv("STOP", "fail")
    result = pytester.runpytest(stop, *SAVING)
    assert result.ret == status
    result.assert_outcomes(passed=1, failed=1)
    assert "pytest-ipu: interrupted" not in result.stdout.str()
    data = json.loads((pytester.path / "out.json").read_text())
    assert [b["name"] for b in data["benchmarks"]] == ["test_first"]
    assert _saved(pytester.path) == ["0001"]


def test_compare_skips_a_partial_newest_run_to_the_newest_complete_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCH)
    pytester.runpytest("--benchmark-autosave").assert_outcomes(passed=1)
    # A partial run: ipu_benchmark began its benchmark, and its test stopped before the record was
    # written (pytest-benchmark saves the entry with pytest-ipu's mark and without the record).
    (first,) = (pytester.path / ".benchmarks").rglob("0001_*.json")
    data = json.loads(first.read_text())
    for bench in data["benchmarks"]:
        bench["extra_info"] = {"ipu_pending": "ipu_benchmark"}
    partial = first.with_name(re.sub("^0001_", "0002_", first.name))
    partial.write_text(json.dumps(data))
    result = pytester.runpytest(
        "--benchmark-compare", "--ipu-gate=throughput:-99%", "--ipu-inconclusive=warn"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"1 gate check(s) on 1 benchmark(s) against {first}: 0 PASS, 0 FAIL, 1 INCONCLUSIVE",
            f"NOTE --benchmark-compare: the newest saved run, {partial}, is partial; the gates compare "
            f"against {first}, the newest complete one (pytest-benchmark's table shows the partial one)",
            "SKIPPED baseline --benchmark-compare skipped: no benchmark in it can be gated (each is a "
            "partial entry *",
        ]
    )


# -- signals while the results are written -----------------------------------------------------------

#: pytest-benchmark's writer, made to write the start of a large file, say so (``writing.txt``) and
#: go on writing until a signal stops it: the test sends the signal once the file is being written,
#: so the signal lands inside the write, whatever the machine's speed.
SLOW_WRITE = """
import time
from pathlib import Path

from pytest_benchmark.session import BenchmarkSession


def save_json(self, output_json):
    # Where pytest-benchmark itself writes: the path (5.3), or the path of the file object pytest-ipu
    # handed it (4.0.0 to 5.2).
    with open(getattr(self.json, "path", self.json), "w") as out:
        out.write('{"benchmarks": [' + "0, " * 100000)
        out.flush()
        Path("writing.txt").write_text("yes")
        deadline = time.monotonic() + 120  # a hang guard only: the signal ends it
        while time.monotonic() < deadline:
            out.write("0, ")
            time.sleep(0.01)


def pytest_configure(config):
    BenchmarkSession.save_json = save_json
"""


@pytest.mark.parametrize(
    ("signum", "how"), [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated (SIGTERM)")]
)
def test_a_signal_while_the_json_is_written_leaves_the_previous_file_and_says_one_line(
    pytester: pytest.Pytester, signum: int, how: str
) -> None:
    (pytester.path / "out.json").write_text('{"previous": true}')
    pytester.makeconftest(SLOW_WRITE)
    pytester.makepyfile(test_bench=BENCH)
    env = {k: v for k, v in os.environ.items() if k not in XDIST_VARIABLES}
    env["PYTEST_ADDOPTS"] = INNER_ADDOPTS
    run = interrupts.popen(
        [sys.executable, "-m", "pytest", *SAVING],
        cwd=pytester.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def writing() -> bool:
        if (pytester.path / "writing.txt").exists():
            return True
        assert run.poll() is None, run.communicate()[0]
        return False

    try:
        # The writer says it is writing (a hang guard bounds the wait, not the result).
        wait_for(writing, "the inner run to start writing its JSON")
        run.send_signal(signum)
        output, _ = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
        run.communicate()  # reaps it and closes its pipes, whichever way the test ended
    assert run.returncode == pytest.ExitCode.INTERRUPTED, output
    lines = [line for line in output.splitlines() if line.startswith("pytest-ipu:")]
    assert lines == [
        f"pytest-ipu: {how}: results not saved, out.json keeps the previous complete run; "
        "no run was saved into file://./.benchmarks"
    ], output
    assert "Traceback" not in output
    assert json.loads((pytester.path / "out.json").read_text()) == {"previous": True}
    assert _leftovers(pytester.path) == []
    assert _saved(pytester.path) == []


# -- signals to a run whose repeats are in worker processes ---------------------------------------

#: A benchmark whose model blocks in a repeat worker (``--ipu-repeat-mode=process``) after writing
#: the worker's pid: the test signals the parent once the worker is inside the model. A worker
#: asked to stop unwinds as a run does (its fixtures' teardown writes ``worker-teardown.txt``);
#: one killed outright would not.
BLOCKED_WORKER = """
import os
import threading
from pathlib import Path

import pytest


@pytest.fixture
def teardown_mark():
    yield
    if os.environ.get("PYTEST_IPU_REPEAT_WORKER"):
        Path("worker-teardown.txt").write_text("yes")


def model():
    if os.environ.get("PYTEST_IPU_REPEAT_WORKER"):
        Path("worker.pid").write_text(str(os.getpid()))
        threading.Event().wait(120)  # a hang guard only: the parent's signal ends the worker


def test_blocked(teardown_mark, ipu_benchmark):
    ipu_benchmark(model, (), rounds=2, warmup_rounds=0)
"""


def _parent_of(pid: int) -> int | None:
    """The parent pid of ``pid`` (``/proc``), or ``None`` once it has gone (reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return int(stat.rpartition(")")[2].split()[1])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads parent pids from /proc (Linux)")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_parent_ends_its_repeat_worker_and_removes_its_folder(
    pytester: pytest.Pytester, signum: int
) -> None:
    pytester.makepyfile(test_blocked=BLOCKED_WORKER)
    scratch = pytester.mkdir("scratch")
    env = {k: v for k, v in os.environ.items() if k not in XDIST_VARIABLES}
    env.update(PYTEST_ADDOPTS=INNER_ADDOPTS, TMPDIR=str(scratch))
    parent = interrupts.popen(
        [sys.executable, "-m", "pytest", "--ipu-repeat-mode=process", "--ipu-repeats=2", "--ipu-power=off"],
        cwd=pytester.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    worker = None
    try:
        pid_file = pytester.path / "worker.pid"

        def started() -> bool:
            if pid_file.exists() and pid_file.read_text():
                return True
            assert parent.poll() is None, parent.communicate()[0]
            return False

        wait_for(started, "the repeat worker to start its model (worker.pid)")
        worker = int(pid_file.read_text())
        # The worker runs, as the parent's child, with its folder, when the signal is sent.
        assert _parent_of(worker) == parent.pid
        assert len(list(scratch.glob("pytest-ipu-repeat-*"))) == 1
        parent.send_signal(signum)  # to the parent alone, as `kill` or a CI runner sends it
        output, _ = parent.communicate(timeout=120)
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.communicate()  # reaps it and closes its pipes, whichever way the test ended
    # The parent ended and reaped its worker before it exited: the worker is gone, not re-parented
    # to init and still running; and its folder was removed.
    orphan = None if worker is None else _parent_of(worker)
    if orphan is not None and worker is not None:
        os.kill(worker, signal.SIGKILL)
    assert orphan is None, f"worker {worker} outlived the parent (now a child of {orphan})\n{output}"
    assert list(scratch.glob("pytest-ipu-repeat-*")) == [], output
    # The worker was asked to stop before it was killed: it tore its test down.
    assert (pytester.path / "worker-teardown.txt").exists(), output
    assert parent.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "Traceback" not in output


# -- a full file system under the benchmark storage --------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs of the test's own (skipped where the machine refuses to mount one)."""
    with small_file_system.mounted(tmp_path / "fs") as mount:
        yield mount


def _runs(storage: Path) -> list[str]:
    """The files in the storage, hidden ones too (a temporary file would be one)."""
    return sorted(p.name[:4] if p.name[0].isdigit() else p.name for p in storage.rglob("*") if p.is_file())


def test_autosave_onto_a_full_file_system_saves_nothing_and_says_one_line(
    pytester: pytest.Pytester, small_fs: Path
) -> None:
    pytester.makepyfile(test_bench=BENCH)
    storage = small_fs / "storage"
    saving = ("--benchmark-autosave", f"--benchmark-storage=file://{storage}")
    pytester.runpytest_subprocess(*saving).assert_outcomes(passed=1)
    (first,) = storage.rglob("0001_*.json")
    complete = first.read_bytes()
    # Room for half a run: the next run's file cannot be written whole.
    small_file_system.fill(small_fs, len(complete) // 2)
    result = pytester.runpytest_subprocess(*saving)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = [line for line in result.outlines if line.startswith("pytest-ipu:")]
    assert len(lines) == 1, result.outlines
    assert lines[0].startswith(
        f"pytest-ipu: cannot save the run into the benchmark storage as {first.parent}"
    )
    assert "0002_" in lines[0]
    assert lines[0].endswith(
        "No space left on device; nothing was saved there (free space, or pass a writable "
        "--benchmark-storage)"
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    # The storage keeps its complete run, and nothing half-written beside it.
    assert _runs(storage) == ["0001"]
    assert first.read_bytes() == complete


# -- runs saving into one storage at the same moment ---------------------------------------------------


def _routed_storage(path: Path, say: Callable[[str], None]) -> Any:
    """A pytest-benchmark file storage at ``path`` whose writer is routed as a run's is
    (``bench_seam.route_storage`` to ``RunSaving.write_saved_run``): one run's saving, in-process."""
    from pytest_benchmark.storage.file import FileStorage

    from pytest_ipu.pytest_plugin import bench_seam
    from pytest_ipu.pytest_plugin.saving import RunSaving

    class Logger:
        def info(self, text: str) -> None:
            say(text)

    storage = FileStorage(path, logger=Logger(), default_machine_id="Linux-CPython-3.8-64bit")
    config: Any = SimpleNamespace(_benchmarksession=SimpleNamespace(storage=storage))
    saving = RunSaving(cast(Any, None), None, say)
    assert bench_seam.route_storage(config, saving.write_saved_run)
    return storage


@pytest.mark.parametrize("links", [True, False], ids=["hard links", "no hard links"])
def test_runs_saving_into_one_storage_at_once_keep_every_run_under_its_own_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: bool
) -> None:
    # Every writer chooses its name from the same storage at the same moment, behind a barrier, under
    # the same save name (autosave's commit and second): the kernel, not a check before the write,
    # must give each a name of its own; also on a file system without hard links (FAT, some network
    # file systems), where the name is claimed by an exclusive create.
    if not links:

        def no_link(*args: object, **kwargs: object) -> None:
            raise OSError(errno.EPERM, os.strerror(errno.EPERM))

        monkeypatch.setattr(os, "link", no_link)
    writers = 8
    said: list[list[str]] = [[] for _ in range(writers)]
    storages = [_routed_storage(tmp_path, said[i].append) for i in range(writers)]
    barrier = threading.Barrier(writers)

    def save(index: int) -> None:
        barrier.wait()
        storages[index].save({"benchmarks": [], "writer": index}, "abc123_20260101_000000")

    threads = [threading.Thread(target=save, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    files = sorted(tmp_path.rglob("*"))
    files = [f for f in files if f.is_file()]
    # Every run is kept, each in a file of its own (no temporary file is left), and each writer said
    # where its own run went.
    assert sorted(json.loads(f.read_text())["writer"] for f in files) == list(range(writers))
    assert [f.name for f in files] == [f"{n:04}_abc123_20260101_000000.json" for n in range(1, writers + 1)]
    for index, lines in enumerate(said):
        (line,) = lines
        assert line.startswith("Saved benchmark data in: "), lines
        assert json.loads(Path(line.split(": ", 1)[1]).read_text())["writer"] == index


# -- a read-only file system, a folder where the file goes -------------------------------------------


def test_json_onto_a_read_only_file_system_says_one_line(pytester: pytest.Pytester, small_fs: Path) -> None:
    small_file_system.read_only(small_fs)
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest_subprocess(f"--benchmark-json={small_fs}/out.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = [line for line in result.outlines if line.startswith("pytest-ipu:")]
    assert lines == [
        f"pytest-ipu: --benchmark-json={small_fs}/out.json: cannot write the results: Read-only file "
        "system; the file was left as it was (pass a writable path)"
    ]
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_storage_folder_on_a_read_only_file_system_names_the_cause(
    pytester: pytest.Pytester, small_fs: Path
) -> None:
    small_file_system.read_only(small_fs)
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest_subprocess(
        "--benchmark-autosave", f"--benchmark-storage=file://{small_fs}/storage"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = [line for line in result.outlines if line.startswith("pytest-ipu:")]
    assert len(lines) == 1, result.outlines
    assert lines[0].startswith(
        f"pytest-ipu: cannot save the run into the benchmark storage as {small_fs}/storage/"
    )
    assert lines[0].endswith(
        ": Read-only file system; nothing was saved there (pass a writable --benchmark-storage)"
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_json_naming_a_folder_is_refused_before_any_test(pytester: pytest.Pytester) -> None:
    (pytester.path / "adir").mkdir()
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest("--benchmark-json=adir")
    assert_usage_error(
        pytester, result, "--benchmark-json=adir: is a directory; pass the path of the JSON file to write"
    )
    assert "Wrote benchmark data" not in result.stdout.str()
    assert list((pytester.path / "adir").iterdir()) == []


# -- a test that failed after its rounds ----------------------------------------------------------------

#: Both tests' rounds run whole; ``test_broken``'s record is never made (the hook that completes it
#: raises, as a sampler that died after the rounds does), ``test_gated_out`` fails after its record.
AFTER_THE_ROUNDS = """
def test_kept(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=3, warmup_rounds=0)


def test_broken(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=3, warmup_rounds=0)


def test_asserted(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=3, warmup_rounds=0)
    assert False, "after the measurement"
"""

BREAK_RECORD = """
def pytest_ipu_update_record(config, item, record):
    if item.name == "test_broken":
        raise RuntimeError("the power sampler died")
"""


def test_a_benchmark_whose_test_failed_before_its_record_is_not_saved(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(BREAK_RECORD)
    pytester.makepyfile(test_bench=AFTER_THE_ROUNDS)
    result = pytester.runpytest(*SAVING)
    result.assert_outcomes(passed=1, failed=2)
    # pytest-benchmark timed all three; the one without a record is no measurement: saved in
    # neither file. The one that failed after its record was measured whole and is kept.
    for path in [pytester.path / "out.json", *(pytester.path / ".benchmarks").rglob("*.json")]:
        names = [b["name"] for b in json.loads(path.read_text())["benchmarks"]]
        assert names == ["test_kept", "test_asserted"], path


# -- a folder this user cannot write ---------------------------------------------------------------------

#: The user the save runs as when the suite runs as root (root writes any folder): nobody.
NOBODY = 65534

#: Saves a run into the storage folder given, as a run's routed writer does, as a user that is not
#: root (nobody, where the suite runs as root: the modules are loaded first, as root, since nobody
#: may not read this interpreter's files), and prints what it said as JSON.
SAVE_AS_A_USER = """
import json
import os
import sys
from types import SimpleNamespace

from pytest_benchmark.storage.file import FileStorage

from pytest_ipu.pytest_plugin import bench_seam
from pytest_ipu.pytest_plugin.saving import RunSaving
from pytest_ipu.results import atomic  # noqa: F401  (the writer's, loaded before the user changes)

said = []


class Logger:
    def info(self, text):
        said.append(text)


storage = FileStorage(sys.argv[1], logger=Logger(), default_machine_id="Linux-CPython-3.8-64bit")
saving = RunSaving(None, None, said.append)
config = SimpleNamespace(_benchmarksession=SimpleNamespace(storage=storage))
assert bench_seam.route_storage(config, saving.write_saved_run)
if os.geteuid() == 0:
    os.setgid(int(sys.argv[2]))
    os.setuid(int(sys.argv[2]))
storage.save({"benchmarks": []}, "abc123_20260101_000000")
print(json.dumps(said))
"""


def test_a_storage_folder_this_user_cannot_write_names_the_cause() -> None:
    import shutil
    import tempfile

    # Not under pytest's own temporary folder, which only its owner may enter.
    top = Path(tempfile.mkdtemp(prefix="pytest-ipu-unwritable-"))
    machine = top / "storage" / "Linux-CPython-3.8-64bit"
    try:
        machine.mkdir(parents=True)
        # Readable and searchable by everyone, writable by its owner only (root), and not by this
        # user either where it is not root.
        for folder in (top, top / "storage"):
            folder.chmod(0o755)
        machine.chmod(0o555)
        done = subprocess.run(
            [sys.executable, "-c", SAVE_AS_A_USER, str(machine.parent), str(NOBODY)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == [
            f"pytest-ipu: cannot save the run into the benchmark storage as {machine}/"
            "0001_abc123_20260101_000000.json: Permission denied; nothing was saved there (pass a "
            "writable --benchmark-storage)"
        ]
        assert list(machine.iterdir()) == []
    finally:
        if machine.exists():
            machine.chmod(0o755)
        shutil.rmtree(top)
