"""``pytest-ipu ab`` end to end: a small example project benchmarked between two command prefixes
(one env var apart), between two real virtual environments and between two git revisions; the
ABBA order, the files kept, the exit codes, the errors, and worktrees and temporary files removed.

Each side run is a real pytest subprocess (about a second). The assertions are on behaviour and
order, never on wall-clock time; the injected slowdown is 20x, far past any gate's threshold, so a
loaded machine cannot turn it into a pass. Everything lives under ``tmp_path`` (fine under
``-n 2``): the example test appends which side ran to a file named by ``AB_ORDER``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.workflow_steps import git as _git
from pytest_ipu.backports import zip_strict
from pytest_ipu.cli import ab as ab_runner
from pytest_ipu.cli import main as cli

#: The example benchmark: its work, and the side it reports, come from the environment, so two
#: command prefixes that set them differently act as two environments with different code.
EXAMPLE = """
import os
from pathlib import Path


def test_x(ipu_benchmark):
    work = int(os.environ.get("AB_WORK", "20000"))
    side = os.environ.get("AB_SIDE", "?")
    with Path(os.environ["AB_ORDER"]).open("a") as out:
        out.write(f"{side} repeats={os.environ.get('PYTEST_IPU_REPEATS')}\\n")
    ipu_benchmark(lambda: sum(range(work)), rounds=10)
"""

#: The same benchmark in a git project: its work comes from a module of the revision checked out.
GIT_EXAMPLE = """
import os
from pathlib import Path

import work


def test_x(ipu_benchmark):
    with Path(os.environ["AB_ORDER"]).open("a") as out:
        out.write(f"{work.LABEL} {work.__file__} {Path.cwd()}\\n")
    ipu_benchmark(lambda: sum(range(work.N)), rounds=10)
"""


def _side(*env: str) -> str:
    """A command prefix that runs pytest with this interpreter, with ``env`` assignments first."""
    return shlex.join(["env", *env, sys.executable, "-m", "pytest"])


def _ab(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(["ab", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _progress(err: str) -> list[str]:
    """``pair N role`` of each progress line, in order."""
    return [line.split(": ", 3)[2] for line in err.splitlines() if line.startswith("pytest-ipu ab: run ")]


def _order(path: Path) -> list[str]:
    return [line.split()[0] for line in path.read_text().splitlines()]


def _scratch() -> list[Path]:
    """What the command left in the temporary directory (``project`` makes it this test's own)."""
    return sorted(Path(tempfile.gettempdir()).iterdir())


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An example project as the working directory; ``AB_ORDER`` names the file of sides run."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "test_bench.py").write_text(EXAMPLE)
    monkeypatch.chdir(root)
    monkeypatch.setenv("AB_ORDER", str(tmp_path / "order.txt"))
    monkeypatch.delenv("PYTEST_IPU_REPEATS", raising=False)
    # The command's temporary directories go under this test's own (xdist workers share /tmp).
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return root


@pytest.mark.parametrize("serve", [False, True], ids=["one-process-per-run", "served"])
def test_a_20x_slower_candidate_fails_its_gate_in_abba_order(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], serve: bool
) -> None:
    keep = tmp_path / "keep"
    code, out, err = _ab(
        [
            *(["--serve"] if serve else []),
            "--baseline",
            _side("AB_SIDE=A"),
            "--candidate",
            _side("AB_SIDE=B", "AB_WORK=400000"),
            "--pairs",
            "4",
            # On a loaded machine one stalled run can leave 4 pairs INCONCLUSIVE: looks at 4, 6 and 8.
            "--max-pairs",
            "8",
            # The median latency: a few stalled rounds on a loaded machine move it least.
            "--gate",
            "latency.p50:+100%",
            "--gate",
            "throughput:-50%",
            "--keep",
            str(keep),
            "--",
            "test_bench.py",
        ],
        capsys,
    )
    assert code == 1, out + err
    # Executed in ABBA order (from the tests themselves) and announced in that order: 4 pairs,
    # or 6 or 8 when a look could not decide.
    ran = _order(tmp_path / "order.txt")
    pairs = len(ran) // 2
    assert pairs in (4, 6, 8), ran
    assert ran == ["A", "B", "B", "A"] * (pairs // 2)
    assert _progress(err) == [
        f"pair {p} {role}"
        for p in range(1, pairs + 1)
        for role in (("baseline", "candidate") if p % 2 else ("candidate", "baseline"))
    ]
    # The pairs are the repeats: each run measured once.
    assert set((tmp_path / "order.txt").read_text().split()[1::2]) == {"repeats=1"}
    # A JSON file per run; a log per run, or (served) one per side.
    logs = (
        ["baseline-server.log", "candidate-server.log"]
        if serve
        else [f"pair{p}-{role}.log" for p in range(1, pairs + 1) for role in ("baseline", "candidate")]
    )
    assert sorted(p.name for p in keep.iterdir()) == sorted(
        [*(f"pair{p}-{role}.json" for p in range(1, pairs + 1) for role in ("baseline", "candidate")), *logs]
    )
    for path in keep.glob("*.json"):
        (bench,) = json.loads(path.read_text())["benchmarks"]
        assert bench["fullname"] == "test_bench.py::test_x"
        assert bench["extra_info"]["ipu"]["rounds"] == 10
    if serve:
        assert f"{pairs} passed" in (keep / "candidate-server.log").read_text()
    else:
        assert "1 passed" in (keep / "pair2-candidate.log").read_text()
    assert "test_x (test_bench.py::test_x)" in out
    assert "gates: 2 checked: " in out
    (line,) = [line for line in out.splitlines() if line.startswith("test_x latency.p50:")]
    assert "threshold +100%" in line
    assert f": FAIL (paired: {pairs} ABBA pairs' log-ratios (df {pairs - 1}, alpha 0.0258))" in line
    assert any(line.startswith("test_x throughput:") for line in out.splitlines())


#: Two benchmarks that the candidate makes 20x slower: test_wide carries its own gate, an absolute bound on
#: the metric the job gates, which replaces the job's there; test_y has the job's gate. The marker's
#: relative gate would need a baseline in a plain run: ab's runs check none.
MARKED_EXAMPLE = """
import os

import pytest

WORK = int(os.environ.get("AB_WORK", "20000"))


@pytest.mark.ipu(gate=["time.median<10s", "time.min:+50%"])
def test_wide(benchmark):
    benchmark(sum, range(WORK))


def test_y(benchmark):
    benchmark(sum, range(WORK))
"""


def _plain_20x(
    capsys: pytest.CaptureFixture[str], *extra: str, gate: str = "time.median:+100%", work: int = 400_000
) -> tuple[int, str, str]:
    """``ab`` of the project's plain pytest-benchmark suite against the same with ``work`` (20x the
    example's 20,000 by default) to do, gated at ``gate``, 4 to 8 pairs, with ``extra`` arguments
    first."""
    # pytest-benchmark's own budget per benchmark, cut to keep each side's run short, in the sides'
    # commands (which ab then leaves alone); at least 20 rounds, so that on a busy machine each
    # run's median is not one or two rounds a neighbour stretched.
    quick = "--benchmark-max-time=0.05 --benchmark-min-rounds=20"
    return _ab(
        [
            *extra,
            "--baseline",
            f"{_side()} {quick}",
            "--candidate",
            f"{_side(f'AB_WORK={work}')} {quick}",
            "--pairs",
            "4",
            "--max-pairs",
            "8",
            "--gate",
            gate,
        ],
        capsys,
    )


@pytest.mark.parametrize("how", ["--fresh", "--serve", None], ids=["fresh", "served", "forked"])
def test_a_benchmarks_marker_gates_replace_the_jobs_on_their_metric(
    project: Path, capsys: pytest.CaptureFixture[str], how: str | None
) -> None:
    (project / "test_bench.py").write_text(MARKED_EXAMPLE)
    # 100x slower: the job's gate is on medians, which neighbours on a busy machine stretch most,
    # and its FAIL must not hang on how busy the machine is (20x once failed beside two CPU hogs).
    code, out, err = _plain_20x(capsys, *([how] if how else []), "--verbose", work=2_000_000)
    assert code == 1, out + err
    lines = {line.split(":")[0]: line for line in out.splitlines() if line.startswith("test_")}
    assert "threshold +100%" in lines["test_y latency.p50"], out + err
    assert ": FAIL (" in lines["test_y latency.p50"], out + err
    # test_wide's own bound replaced the job's gate on latency.p50: 100x slower, within 10 s.
    assert ", bound < 10 s, " in lines["test_wide latency.p50"], out + err
    assert ": PASS (absolute bound" in lines["test_wide latency.p50"], out + err
    # Its own relative gate on another metric was checked on the pairs, not refused for lack of a
    # baseline run: 100x slower FAILs it (the fastest round: what a busy machine moves least).
    assert ": FAIL (" in lines["test_wide latency.min"], out + err


#: The example as a plain pytest-benchmark suite: its own ``benchmark`` fixture, no pytest-ipu fixture.
PLAIN_EXAMPLE = """
import os


def test_x(benchmark):
    benchmark(sum, range(int(os.environ.get("AB_WORK", "20000"))))
"""


def test_a_plain_pytest_benchmark_suite_is_paired_and_a_20x_slower_candidate_fails(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "test_bench.py").write_text(PLAIN_EXAMPLE)
    # Gated on the fastest round, the figure a busy machine moves least (a 20x slowdown decided
    # on medians once failed beside two CPU hogs on a shared machine; the median's mapping to
    # latency.p50 is the marker test's).
    code, out, err = _plain_20x(capsys, gate="time.min:+100%")
    assert code == 1, out + err
    assert "missing:" not in out
    (line,) = [line for line in out.splitlines() if line.startswith("test_x latency.min:")]
    assert "threshold +100%" in line
    assert ": FAIL (paired: " in line


def test_identical_sides_pass_a_generous_gate(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _ab(
        [
            "--baseline",
            _side("AB_SIDE=A"),
            "--candidate",
            _side("AB_SIDE=B"),
            "--pairs",
            "3",
            "--max-pairs",
            "6",
            "--gate",
            # Generous enough that identical sides pass on a loaded runner: three pairs of 10-round
            # medians once gave [0.41, 2.07] there, so +100% was INCONCLUSIVE at the first look.
            "latency.p50:+900%",
            "--format",
            "markdown",
            "-k",
            "test_x",
        ],
        capsys,
    )
    assert code == 0, out + err
    order = _order(tmp_path / "order.txt")
    # ABBA from the first pair; pairs are added (looks at 3, 5 and 6) only while INCONCLUSIVE.
    assert len(order) in (6, 10, 12)
    abba = ["A", "B", "B", "A"] * 3
    assert order == abba[: len(order)]
    # The interval is at the level of the look that decided (Pocock's for 0.05 over the looks at 3, 5, 6).
    assert "| metric | baseline | candidate | ratio | 97.38% CI | p | change |" in out
    assert "- gates: 1 checked: 1 PASS, 0 FAIL, 0 INCONCLUSIVE" in out
    assert _scratch() == []  # without --keep, nothing is left behind


#: The example benchmark of two real virtual environments: each has its own ``ab_env`` module.
VENV_EXAMPLE = """
import os
import sys
from pathlib import Path

import ab_env


def test_x(ipu_benchmark):
    with Path(os.environ["AB_ORDER"]).open("a") as out:
        out.write(f"{ab_env.LABEL} {sys.prefix}\\n")
    ipu_benchmark(lambda: sum(range(ab_env.WORK)), rounds=10)
"""


def _venv(path: Path, label: str, work: int) -> Path:
    """A real virtual environment (no pip: made in a second) that sees this interpreter's packages,
    pytest-ipu among them, and has an ``ab_env`` module of its own; its python."""
    import sysconfig
    import venv

    venv.EnvBuilder(with_pip=False, symlinks=True).create(path)
    python = path / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # An 'import' line of a .pth file runs at start-up: addsitedir also reads that directory's own
    # .pth files (the editable install of pytest-ipu is one).
    here = sysconfig.get_paths()["purelib"]
    (Path(purelib) / "shared.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    (Path(purelib) / "ab_env.py").write_text(f"LABEL = {label!r}\nWORK = {work}\n")
    return python


def test_two_virtual_environments_are_two_sides(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "test_bench.py").write_text(VENV_EXAMPLE)
    fast = _venv(tmp_path / "venv-a", "A", 20_000)
    slow = _venv(tmp_path / "venv-b", "B", 400_000)
    code, out, err = _ab(
        [
            "--baseline",
            f"{fast} -m pytest",
            "--candidate",
            f"{slow} -m pytest",
            "--pairs",
            "4",
            "--max-pairs",
            "4",
            "--gate",
            "latency.p50:+100%",
            "--",
            "test_bench.py",
        ],
        capsys,
    )
    assert code == 1, out + err
    runs = [line.split() for line in (tmp_path / "order.txt").read_text().splitlines()]
    # Each run in its own environment, in ABBA order; the candidate's 20x work fails the gate. Four
    # pairs (df 3): the job's 1 % level for a FAIL needs an interval that three pairs give only on a
    # machine less busy than two CPU hogs beside the suite leave it.
    assert [label for label, _ in runs] == ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert {label: Path(prefix).name for label, prefix in runs} == {"A": "venv-a", "B": "venv-b"}
    (line,) = [line for line in out.splitlines() if line.startswith("test_x latency.p50:")]
    assert ": FAIL (paired: 4 ABBA pairs' log-ratios (df 3, alpha 0.05))" in line


def test_a_side_that_fails_to_run_stops_with_exit_2(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _ab(
        ["--baseline", _side("AB_SIDE=A"), "--candidate", _side("AB_SIDE=B") + " --no-such-option"],
        capsys,
    )
    assert code == 2
    assert out == ""
    assert _order(tmp_path / "order.txt") == ["A"]  # pair 1's baseline ran, its candidate did not
    # The error's own line and what follows it (other lines, such as progress, may come first).
    assert "pytest-ipu: the candidate side (" in err, err
    message = err[err.index("pytest-ipu: the candidate side (") :].partition("pytest-ipu: ")[2]
    assert message.startswith("the candidate side (")
    assert "failed in pair 1 (exit 4, usage error: check the pytest arguments)" in message
    assert "--no-such-option" in message.splitlines()[0]
    assert "unrecognized arguments: --no-such-option" in message
    assert _scratch() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--baseline", "no-such-thing-here"],
            "--baseline 'no-such-thing-here': 'no-such-thing-here' is neither",
        ),
        (["--pairs", "0"], "--pairs 0: out of range; give from 1 to 1000 pairs"),
        (["--pairs", "1001"], "--pairs 1001: out of range"),
        (["--gate", "throughput:+5%"], "--gate: bad gate 'throughput:+5%'"),
        (["--alpha", "2"], "--alpha 2: out of range"),
        (["--extra-time", "-1"], "--extra-time -1: give a number of seconds >= 0 (default: no bound)"),
        (["--candidate", "git:HEAD"], "--candidate 'git:HEAD': 'HEAD' is not a commit of the git repository"),
        (["--candidate", "'unbalanced"], '--candidate "\'unbalanced": cannot split into words'),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    defaults = {"--baseline": _side("AB_SIDE=A"), "--candidate": _side("AB_SIDE=B")}
    given = dict(zip_strict(args[::2], args[1::2]))
    argv = [item for key, value in {**defaults, **given}.items() for item in (key, value)]
    code, out, err = _ab(argv, capsys)
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"pytest-ipu: {message}"), err
    assert not (tmp_path / "order.txt").exists()  # nothing ran


# --- Git revisions ----------------------------------------------------------------------------------


@pytest.fixture
def repo(project: Path) -> Path:
    """The example project as a git repository of two commits: the second does 20x the work."""
    (project / "test_bench.py").write_text(GIT_EXAMPLE)
    (project / "work.py").write_text('LABEL = "old"\nN = 20000\n')
    _git(project, "init", "-q")
    _git(project, "add", ".")
    _git(project, "commit", "-q", "-m", "one")
    (project / "work.py").write_text('LABEL = "new"\nN = 400000\n')
    _git(project, "commit", "-q", "-am", "two")
    return project


def test_two_git_revisions_run_their_own_code_in_worktrees_that_are_removed(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bare "HEAD" must read as the revision: some machines have a HEAD command (libwww-perl's), which
    # makes the side ambiguous (tested apart). Those PATH entries are left out, git kept through a link.
    shim = tmp_path / "bin"
    shim.mkdir()
    git = shutil.which("git")
    assert git is not None
    (shim / "git").symlink_to(git)
    kept = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "HEAD").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join([str(shim), *kept]))
    # The checkout's own files change too: a git side must not see them.
    (repo / "work.py").write_text('LABEL = "dirty"\nN = 1\n')
    code, out, err = _ab(
        # A fixed three pairs (--max-pairs 3): how many pairs a busy machine needs to decide is the
        # sequential looks' business, not this test's, and the order below is the evidence.
        [
            "--baseline",
            "git:HEAD~1",
            "--candidate",
            "HEAD",
            "--pairs",
            "3",
            "--max-pairs",
            "3",
            "--gate",
            "latency.p50<10s",
        ],
        capsys,
    )
    assert code == 0, out + err
    rows = [line.split() for line in (tmp_path / "order.txt").read_text().splitlines()]
    assert [r[0] for r in rows] == ["old", "new", "new", "old", "old", "new"]
    for label, module, cwd in rows:
        # Each run imported work.py from its own worktree, and ran there.
        assert Path(module).parent == Path(cwd)
        assert Path(cwd).name == ("worktree-baseline" if label == "old" else "worktree-candidate")
        assert not Path(cwd).exists()  # removed afterwards
    head, parent = _git(repo, "rev-parse", "HEAD").strip(), _git(repo, "rev-parse", "HEAD~1").strip()
    assert out.splitlines()[:2] == [f"baseline: git:HEAD~1 ({parent[:12]})", f"candidate: HEAD ({head[:12]})"]
    assert "gates: 1 checked: 1 PASS, 0 FAIL, 0 INCONCLUSIVE" in out
    # The table compares the two sides' medians. Which side ran which code is the order file's
    # evidence above (each run's label and module); whether a 3-pair test of the 20x work reads
    # "worse" or "within noise" depends on how busy the machine is, so the verdict is not asserted.
    median = next(line for line in out.splitlines() if line.startswith("latency.p50"))
    assert re.search(r"[+-]\d[\d.,]*% (worse|better|within noise)$", median), median
    worktrees = [
        line
        for line in _git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]
    assert worktrees == [f"worktree {repo.resolve()}"]
    assert _scratch() == []


def test_worktrees_are_removed_when_a_git_side_fails(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _ab(
        ["--baseline", "git:HEAD~1", "--candidate", "git:HEAD", "--", "--no-such-option"], capsys
    )
    assert code == 2
    assert "the baseline side (git:HEAD~1 (" in err
    worktrees = [
        line
        for line in _git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]
    assert worktrees == [f"worktree {repo.resolve()}"]
    assert _scratch() == []


def test_a_name_both_executable_and_a_revision_is_ambiguous(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert shutil.which("env") is not None  # the sides of these tests use it too
    _git(repo, "branch", "env")
    code, _, err = _ab(["--baseline", "env", "--candidate", "git:HEAD"], capsys)
    assert code == 2
    assert "--baseline 'env': both an executable on PATH and a git revision" in err
    assert "write git:env for the revision" in err


def test_repeats_are_one_per_run_unless_the_user_chose(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    side = ab_runner.Side("baseline", "git:HEAD", "git", commit="0" * 40)
    prepared = ab_runner._Prepared(side, (sys.executable, "-m", "pytest"), tmp_path, tmp_path / "root")
    monkeypatch.delenv("PYTEST_IPU_REPEATS", raising=False)
    monkeypatch.setenv("PYTHONPATH", "elsewhere")
    env = ab_runner._environment(prepared, ["-k", "x"])
    assert env["PYTEST_IPU_REPEATS"] == "1"
    assert env["PYTHONPATH"] == f"{tmp_path / 'root'}{os.pathsep}elsewhere"  # the worktree's code first
    assert "PYTEST_IPU_REPEATS" not in ab_runner._environment(prepared, ["--ipu-repeats=3"])
    monkeypatch.setenv("PYTEST_IPU_REPEATS", "4")
    assert ab_runner._environment(prepared, [])["PYTEST_IPU_REPEATS"] == "4"


def test_the_runs_of_both_sides_share_a_quarter_of_one_plain_runs_budget_unless_the_user_chose(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    side = ab_runner.Side("baseline", "git:HEAD", "git", commit="0" * 40)
    prepared = ab_runner._Prepared(side, (sys.executable, "-m", "pytest"), tmp_path, tmp_path / "root")
    monkeypatch.delenv("PYTEST_IPU_MAX_TIME", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    # Five pairs before the first look, ten runs: each measures a quarter of a tenth of a plain
    # run's 2 s and 1 s.
    assert ab_runner._environment(prepared, [], 5)["PYTEST_IPU_MAX_TIME"] == "0.05s"
    assert ab_runner.budget_args(5, ["-k", "x"]) == ["--benchmark-max-time=0.025"]
    assert ab_runner.budget_args(8, []) == ["--benchmark-max-time=0.0156"]
    # The user's choice stands: the option, or the variable, or pytest's own PYTEST_ADDOPTS.
    assert "PYTEST_IPU_MAX_TIME" not in ab_runner._environment(prepared, ["--ipu-max-time=1s"], 5)
    assert ab_runner.budget_args(5, ["--benchmark-max-time", "0.5"]) == []
    monkeypatch.setenv("PYTEST_ADDOPTS", "--benchmark-max-time=0.3 -q")
    assert ab_runner.budget_args(5, []) == []
    monkeypatch.setenv("PYTEST_IPU_MAX_TIME", "3s")
    assert ab_runner._environment(prepared, [], 5)["PYTEST_IPU_MAX_TIME"] == "3s"
    # So does an option in a command side's own command.
    monkeypatch.delenv("PYTEST_IPU_MAX_TIME")
    monkeypatch.delenv("PYTEST_ADDOPTS")
    chose = ab_runner._Prepared(side, (sys.executable, "-m", "pytest", "--ipu-max-time=1s"), tmp_path, None)
    assert "PYTEST_IPU_MAX_TIME" not in ab_runner._environment(chose, [], 5)
    quick = ab_runner._Prepared(side, ("pytest", "--benchmark-max-time=0.5"), tmp_path, None)
    _, _, argv = ab_runner._run_args(quick, 1, tmp_path, ["-k", "x"], 5)
    assert not [a for a in argv if a.startswith("--benchmark-max-time")]
    _, _, argv = ab_runner._run_args(prepared, 1, tmp_path, ["-k", "x"], 5)
    assert "--benchmark-max-time=0.025" in argv
