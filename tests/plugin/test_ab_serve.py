"""``pytest-ipu ab``'s sides served by one long-lived pytest each (``--ipu-serve``): the rounds and
their files, the fixtures kept between rounds, and every way a server can go (killed, hung, ab
stopped by Ctrl-C or SIGTERM) leaving no process behind."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pytest_ipu.cli import ab_server
from pytest_ipu.cli import main as cli
from pytest_ipu.results import benchmark_json
from tests import interrupts
from tests.waiting import wait_for

#: Three benchmarks, one of each kind, and a module fixture noting when it is set up and torn down.
SUITE = """
import os
from pathlib import Path

import pytest


def note(line):
    with Path(os.environ["SERVE_LOG"]).open("a") as out:
        out.write(line + "\\n")


@pytest.fixture(scope="module")
def data():
    note("setup")
    yield list(range(200))
    note("teardown")


def test_plain(benchmark, data):
    note("plain")
    benchmark(sorted, data)


def test_pedantic(benchmark, data):
    note("pedantic")
    benchmark.pedantic(sorted, args=(data,), rounds=5)


def test_ipu(ipu_benchmark, data):
    note("ipu")
    ipu_benchmark(lambda: sorted(data), rounds=10)
"""


def test_a_server_runs_the_rounds_asked_for_and_writes_each_rounds_benchmarks(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    log = tmp_path / "fixture.log"
    env = {**os.environ, "SERVE_LOG": str(log), "PYTEST_IPU_REPEATS": "1"}
    command = [sys.executable, "-m", "pytest", "test_suite.py", "-p", "no:cacheprovider", "-q"]
    server = ab_server.Server(command, tmp_path, env, tmp_path / "server.log")
    try:
        assert server.ready(120)
        skips = [[], ["test_suite.py::test_plain"], []]
        for number, skip in enumerate(skips):
            assert server.round(tmp_path / f"round{number}.json", skip, 120) == 0
    finally:
        server.close(graceful=True, grace_s=10)
    assert server.process.returncode == 0, (tmp_path / "server.log").read_text()
    every = ["test_suite.py::test_plain", "test_suite.py::test_pedantic", "test_suite.py::test_ipu"]
    for number, skip in enumerate(skips):
        run = benchmark_json.read_run(tmp_path / f"round{number}.json")
        # Each file holds its round's benchmarks, not the session's so far.
        assert [b.fullname for b in run.benchmarks] == [n for n in every if n not in skip]
        kinds = {b.fullname.split("::")[1]: b.record is not None for b in run.benchmarks}
        assert kinds == {k: k == "test_ipu" for k in kinds}  # the pytest-ipu record on test_ipu alone
    raw = json.loads((tmp_path / "round1.json").read_text())
    (pedantic,) = [b for b in raw["benchmarks"] if b["name"] == "test_pedantic"]
    assert pedantic["stats"]["rounds"] == 5
    # The module fixture was set up once, before the first round, and torn down once, at the end.
    assert log.read_text().split() == [
        "setup",
        *["plain", "pedantic", "ipu"],
        *["pedantic", "ipu"],
        *["plain", "pedantic", "ipu"],
        "teardown",
    ]


def test_a_round_of_one_test_sets_it_up_again(tmp_path: Path) -> None:
    # The round's last test is torn down to what the round's first needs: here itself.
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {**os.environ, "SERVE_LOG": str(tmp_path / "fixture.log"), "PYTEST_IPU_REPEATS": "1"}
    command = [sys.executable, "-m", "pytest", "test_suite.py::test_ipu", "-p", "no:cacheprovider", "-q"]
    server = ab_server.Server(command, tmp_path, env, tmp_path / "server.log")
    try:
        assert server.ready(120)
        for number in range(3):
            assert server.round(tmp_path / f"round{number}.json", [], 120) == 0
    finally:
        server.close(graceful=True, grace_s=10)
    for number in range(3):
        (measured,) = benchmark_json.read_run(tmp_path / f"round{number}.json").benchmarks
        assert measured.record is not None
    assert (tmp_path / "fixture.log").read_text().split() == ["setup", "ipu", "ipu", "ipu", "teardown"]


#: A benchmark whose side (``AB_SIDE``) notes its process id and each run, and on the run
#: ``AB_STOP_AT`` of side ``AB_STOP_SIDE`` either kills its own process (``AB_STOP=kill``) or hangs
#: (``AB_STOP=hang``), noting ``hung`` first.
STOPPING = """
import os
import signal
import time
from pathlib import Path


def test_x(benchmark):
    side = os.environ["AB_SIDE"]
    folder = Path(os.environ["AB_FOLDER"])
    (folder / f"{side}.pid").write_text(str(os.getpid()))
    with (folder / "order.txt").open("a") as out:
        out.write(side + "\\n")
    runs = (folder / "order.txt").read_text().split().count(side)
    if side == os.environ.get("AB_STOP_SIDE") and runs == int(os.environ["AB_STOP_AT"]):
        if os.environ["AB_STOP"] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        (folder / "hung").write_text(side)
        while True:
            time.sleep(0.05)
    benchmark(sum, range(100))
"""


def _side(label: str) -> str:
    return shlex.join(["env", f"AB_SIDE={label}", sys.executable, "-m", "pytest"])


@pytest.fixture
def stopping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project of ``STOPPING`` as the working directory; its notes go to its folder."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "test_bench.py").write_text(STOPPING)
    monkeypatch.chdir(root)
    monkeypatch.setenv("AB_FOLDER", str(root))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return root


def test_a_server_killed_mid_job_stops_ab_in_one_line_and_leaves_no_process(
    stopping: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AB_STOP", "kill")
    monkeypatch.setenv("AB_STOP_SIDE", "B")
    monkeypatch.setenv("AB_STOP_AT", "2")
    code = cli.main(["ab", "--serve", "--baseline", _side("A"), "--candidate", _side("B"), "--pairs", "3"])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    # ABBA: A B, then B (killed in its second round); A's second round never ran.
    assert (stopping / "order.txt").read_text().split() == ["A", "B", "B"]
    (line,) = [line for line in err.splitlines() if line.startswith("pytest-ipu: ")]
    pid = int((stopping / "B.pid").read_text())
    assert line.startswith(
        f"pytest-ipu: the candidate side ({_side('B')}) failed in pair 2: its pytest (pid {pid}) ended in "
        "the round (killed by SIGKILL)"
    ), line
    assert interrupts.gone(pid)
    assert interrupts.gone(int((stopping / "A.pid").read_text()))  # the other side's server was stopped too
    assert list(Path(tempfile.gettempdir()).iterdir()) == []


def test_a_server_that_does_not_answer_is_stopped_after_max_time(
    stopping: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AB_STOP", "hang")
    monkeypatch.setenv("AB_STOP_SIDE", "B")
    monkeypatch.setenv("AB_STOP_AT", "1")
    code = cli.main(["ab", "--serve", "--baseline", _side("A"), "--candidate", _side("B"), "--max-time", "5"])
    _, err = capsys.readouterr()
    assert code == 2, err
    (line,) = [line for line in err.splitlines() if line.startswith("pytest-ipu: ")]
    pid = int((stopping / "B.pid").read_text())
    assert line.startswith(f"pytest-ipu: the candidate side ({_side('B')}) failed in pair 1: its pytest ")
    assert f"(pid {pid}) did not answer: no answer in 5 s (no answer is waited for past --max-time" in line
    assert interrupts.gone(pid)
    assert interrupts.gone(int((stopping / "A.pid").read_text()))


@pytest.mark.parametrize(
    ("signum", "code", "said"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_ctrl_c_or_sigterm_to_ab_mid_round_leaves_no_process(
    tmp_path: Path, signum: int, code: int, said: str
) -> None:
    # The signal to ab alone (as a CI runner sends it) while a server is in a round that never ends.
    root = tmp_path / "project"
    root.mkdir()
    (root / "test_bench.py").write_text(STOPPING)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {
        **os.environ,
        "TMPDIR": str(scratch),
        "AB_FOLDER": str(root),
        "AB_STOP": "hang",
        "AB_STOP_SIDE": "B",
        "AB_STOP_AT": "1",
    }
    ab = interrupts.popen(
        [
            sys.executable,
            "-m",
            "pytest_ipu.cli.main",
            "ab",
            "--serve",
            "--baseline",
            _side("A"),
            "--candidate",
            _side("B"),
        ],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: (root / "hung").exists(), "the candidate's server to hang in its round")
        ab.send_signal(signum)
        out, err = ab.communicate(timeout=120)
    finally:
        if ab.poll() is None:
            ab.kill()
        ab.communicate()  # reaps it and closes its pipes, whichever way the test ended
    assert ab.returncode == code, out + err
    assert err.strip().splitlines()[-1] == f"pytest-ipu: ab {said}; worktrees and temporary files removed"
    assert "Traceback" not in err
    assert interrupts.gone(int((root / "A.pid").read_text()))
    assert interrupts.gone(int((root / "B.pid").read_text()))
    assert list(scratch.iterdir()) == []
