"""``pytest-ipu ab`` with git sides: every run a fresh fork of one warm process (``cli/ab_fork.py``).

What is asserted: each run is its own child process, all of one forker, running its side's own code
in its side's worktree; both sides share one hash seed; ``--fresh`` starts a new interpreter per run
instead; what the forker imports ahead never includes a module of either side's tree, nor one a
side's tree names, nor a module whose import starts a thread, and includes an installed pytest
plugin wherever its files are; the CPU is asked once a job and the commit once a side; each run
freezes its objects out of the garbage collector's sight once its session has finished, never while
it measures; and Ctrl-C or SIGTERM to ``ab`` mid-run leaves no process behind.
Each run is a real pytest (about a second); nothing here asserts a time or a verdict.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.workflow_steps import git as _git
from pytest_ipu.cli import ab_fork
from pytest_ipu.cli import main as cli
from tests import interrupts
from tests.waiting import wait_for

#: A benchmark whose run notes its side, its process, its parent, its string hash, its directory and
#: how many objects the garbage collector leaves frozen (``gc.freeze``) as it measures; with
#: ``AB_HANG`` naming a side, that side's run never ends (and says so in a file).
EXAMPLE = """
import gc
import os
import time
from pathlib import Path

import work


def test_x(ipu_benchmark):
    with Path(os.environ["AB_ORDER"]).open("a") as out:
        out.write(
            f"{work.LABEL} {os.getpid()} {os.getppid()} {hash('pytest-ipu')} {Path.cwd().name} "
            f"{gc.get_freeze_count()}\\n"
        )
    if os.environ.get("AB_HANG") == work.LABEL:
        Path(os.environ["AB_HUNG"]).write_text(str(os.getpid()))
        time.sleep(600)
    ipu_benchmark(lambda: sum(range(work.N)), rounds=10)
"""


#: A conftest that notes, as each run (the forker's collection included) ends, how many objects the
#: garbage collector leaves frozen.
FROZEN_AT_END = """
import gc
import os


def pytest_unconfigure(config):
    with open(os.environ["AB_FROZEN"], "a") as out:
        out.write(f"{gc.get_freeze_count()}\\n")
"""


def _frozen_at_end(tmp_path: Path) -> list[int]:
    return [int(n) for n in (tmp_path / "frozen.txt").read_text().split()]


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git project of two commits as the working directory; ``AB_ORDER`` names the runs' notes."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "test_bench.py").write_text(EXAMPLE)
    (root / "conftest.py").write_text(FROZEN_AT_END)
    (root / "work.py").write_text('LABEL = "old"\nN = 2000\n')
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "one")
    (root / "work.py").write_text('LABEL = "new"\nN = 4000\n')
    _git(root, "commit", "-q", "-am", "two")
    monkeypatch.chdir(root)
    monkeypatch.setenv("AB_ORDER", str(tmp_path / "order.txt"))
    monkeypatch.setenv("AB_FROZEN", str(tmp_path / "frozen.txt"))
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return root


def _runs(tmp_path: Path) -> list[list[str]]:
    """Each run's notes: label, pid, parent pid, hash, working directory's name, frozen objects."""
    return [line.split() for line in (tmp_path / "order.txt").read_text().splitlines()]


def test_each_run_is_a_fresh_fork_of_one_process_with_one_hash_seed_for_both_sides(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["ab", "--baseline", "git:HEAD~1", "--candidate", "git:HEAD", "--pairs", "2"])
    _, err = capsys.readouterr()
    assert code == 0, err
    runs = _runs(tmp_path)
    assert [r[0] for r in runs] == ["old", "new", "new", "old"]  # ABBA, each its own revision's code
    assert {r[4] for r in runs if r[0] == "old"} == {"worktree-baseline"}
    assert {r[4] for r in runs if r[0] == "new"} == {"worktree-candidate"}
    assert len({r[1] for r in runs}) == 4  # four processes
    (forker,) = {int(r[2]) for r in runs}  # all children of one process
    assert forker != os.getpid()
    assert len({r[3] for r in runs}) == 1  # one string hash: one hash seed on both sides
    # Nothing is frozen while a run measures; everything, what was imported ahead included, once its
    # session has finished: pytest's collections at its end skip it.
    assert {r[5] for r in runs} == {"0"}
    assert len(_frozen_at_end(tmp_path)) == 5  # the candidate's collection, then the four runs
    assert all(n > 10_000 for n in _frozen_at_end(tmp_path))
    assert interrupts.gone(forker)
    assert any(
        line.startswith("pytest-ipu ab: each run a fork of one process that imported")
        for line in err.splitlines()
    )
    assert list(Path(tempfile.gettempdir()).iterdir()) == []


def test_fresh_starts_a_new_interpreter_per_run(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["ab", "--fresh", "--baseline", "git:HEAD~1", "--candidate", "git:HEAD", "--pairs", "2"])
    _, err = capsys.readouterr()
    assert code == 0, err
    runs = _runs(tmp_path)
    assert [r[0] for r in runs] == ["old", "new", "new", "old"]
    assert {int(r[2]) for r in runs} == {os.getpid()}  # each started by ab itself
    assert {r[5] for r in runs} == {"0"}
    assert _frozen_at_end(tmp_path) == [0, 0, 0, 0]  # a fresh interpreter per run: nothing frozen
    assert "fork" not in err


@pytest.mark.parametrize(
    ("signum", "code", "said"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_ctrl_c_or_sigterm_to_ab_mid_run_leaves_no_process(
    repo: Path, tmp_path: Path, signum: int, code: int, said: str
) -> None:
    # The signal to ab alone (as a CI runner sends it) while the candidate's forked run never ends.
    hung = tmp_path / "hung"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "AB_HANG": "new", "AB_HUNG": str(hung)}
    command = [
        sys.executable,
        "-m",
        "pytest_ipu.cli.main",
        "ab",
        "--baseline",
        "git:HEAD~1",
        "--candidate",
        "git:HEAD",
    ]
    ab = interrupts.popen(
        command, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(hung.exists, "the candidate's run to hang")
        ab.send_signal(signum)
        out, err = ab.communicate(timeout=120)
    finally:
        if ab.poll() is None:
            ab.kill()
        ab.communicate()
    assert ab.returncode == code, out + err
    assert err.strip().splitlines()[-1] == f"pytest-ipu: ab {said}; worktrees and temporary files removed"
    assert "Traceback" not in err
    (_, new) = _runs(tmp_path)
    assert interrupts.gone(int(new[1]))  # the hung run
    assert interrupts.gone(int(new[2]))  # and the forker
    assert list(scratch.iterdir()) == []


def test_modules_of_a_sides_tree_or_outside_the_interpreters_libraries_are_not_imported_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "tree"
    (tree / "mine").mkdir(parents=True)
    (tree / "mine" / "__init__.py").write_text("")
    (tree / "mine" / "part.py").write_text("")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "stray.py").write_text("")
    monkeypatch.syspath_prepend(str(tree))
    monkeypatch.syspath_prepend(str(elsewhere))
    for name in ("mine", "mine.part", "stray"):
        monkeypatch.delitem(sys.modules, name, raising=False)
        __import__(name)
    ahead = ab_fork._outside([str(tree)])
    assert not {"mine", "mine.part", "stray"} & set(ahead)
    assert "json" in ahead  # the standard library's, imported by then
    assert "pytest" in ahead  # and site-packages'


def test_modules_whose_import_starts_a_thread_are_not_imported_ahead(tmp_path: Path) -> None:
    # In a process of its own: the probe forks, and this pytest has threads.
    (tmp_path / "spins.py").write_text(
        "import threading\nthreading.Thread(target=threading.Event().wait, daemon=True).start()\n"
    )
    (tmp_path / "quiet.py").write_text("X = 1\n")
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from pytest_ipu.cli import ab_fork\n"
        "print(json.dumps([ab_fork._probe(['quiet'], []), ab_fork._probe(['quiet', 'spins'], []),"
        " sorted(m for m in ('quiet', 'spins') if m in sys.modules), ab_fork._threads()]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    quiet, spinning, imported, threads = json.loads(done.stdout)
    assert (quiet, spinning) == (1, 2)  # the probe's child saw the thread
    assert imported == []  # the probing process itself imported neither
    assert threads == 1


def test_a_module_named_by_a_sides_tree_is_not_imported_ahead_wherever_it_lives(tmp_path: Path) -> None:
    # The side's run would import the tree's own xdist (its folder first on sys.path), not this one.
    tree = tmp_path / "tree"
    (tree / "xdist").mkdir(parents=True)
    import xdist  # noqa: F401 -- site-packages', imported by the plugin anyway

    ahead = ab_fork._outside([str(tree)])
    assert not [n for n in ahead if n.split(".")[0] == "xdist"]
    assert "xdist" in ab_fork._outside([str(tmp_path / "other")])


def test_an_installed_pytest_plugins_package_is_imported_ahead_wherever_its_files_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An editable install: the plugin's files outside the interpreter's library folders.
    assert {"pytest_ipu", "xdist", "pytest_benchmark"} <= ab_fork._plugin_packages()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "editable_plugin").mkdir(parents=True)
    (elsewhere / "editable_plugin" / "__init__.py").write_text("")
    (elsewhere / "stray.py").write_text("")
    monkeypatch.syspath_prepend(str(elsewhere))
    for name in ("editable_plugin", "stray"):
        monkeypatch.delitem(sys.modules, name, raising=False)
        __import__(name)
    monkeypatch.setattr(ab_fork, "_plugin_packages", lambda: {"editable_plugin"})
    ahead = ab_fork._outside([str(tmp_path / "tree")])
    assert "editable_plugin" in ahead
    assert "stray" not in ahead  # outside the libraries, and no plugin's
    # Held by a side's tree, it is that side's own code.
    assert "editable_plugin" not in ab_fork._outside([str(elsewhere)])


def test_the_cpu_is_asked_once_and_the_runs_read_that_answer() -> None:
    # In a process of its own: the question is asked in a forked child, and this pytest has threads.
    script = (
        "import json, os, subprocess, cpuinfo\n"
        "from pytest_ipu.cli import ab_fork\n"
        "ab_fork._remember_cpu_info([])\n"
        "def refuse(*a, **k):\n"
        "    raise AssertionError('a run started a process to ask for the CPU')\n"
        "subprocess.Popen = refuse\n"
        "os.fork = refuse\n"
        "first = cpuinfo.get_cpu_info()\n"
        "first['arch'] = 'changed by a run'\n"
        "print(json.dumps([cpuinfo.get_cpu_info().get('arch'), sorted(first), ab_fork._threads()]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    arch, keys, threads = json.loads(done.stdout)
    assert arch
    assert arch != "changed by a run"  # each run gets its own copy of the answer
    assert "brand_raw" in keys or "arch_string_raw" in keys
    assert threads == 1  # the forker asked in a child, and has no thread of it


def test_each_side_asks_git_for_its_commit_once_and_every_run_writes_its_sides_commit(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A git first on the PATH that notes each `git describe`, pytest-benchmark's first question of
    # the commit (twice a run when each run asks), then runs the real one.
    real = shutil.which("git")
    assert real is not None
    wrapper = tmp_path / "bin" / "git"
    wrapper.parent.mkdir()
    asked = tmp_path / "describes.txt"
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = describe ] && echo asked >> "{asked}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    kept = tmp_path / "kept"
    code = cli.main(
        ["ab", "--baseline", "git:HEAD~1", "--candidate", "git:HEAD", "--pairs", "3", "--keep", str(kept)]
    )
    _, err = capsys.readouterr()
    assert code == 0, err
    written = {
        role: {json.loads(p.read_text())["commit_info"]["id"] for p in kept.glob(f"pair*-{role}.json")}
        for role in ("baseline", "candidate")
    }
    assert written == {
        "baseline": {_git(repo, "rev-parse", "HEAD~1").strip()},
        "candidate": {_git(repo, "rev-parse", "HEAD").strip()},
    }
    # The candidate's collection (before pytest-benchmark is imported ahead), then once a side: not
    # the 12 times of six runs asking for themselves.
    assert len(asked.read_text().splitlines()) <= 3


def test_stopping_a_child_reaped_already_sends_it_no_sigkill(monkeypatch: pytest.MonkeyPatch) -> None:
    # SIGTERM to the forker between `_reap`'s wait and its unlisting leaves a reaped pid listed.
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped
    pid = child.pid
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda p, s: sent.append((p, s)))
    ab_fork._stop_child([pid])
    assert sent == [(pid, signal.SIGTERM)]  # no SIGKILL to a pid that may be another process's now
