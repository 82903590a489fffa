"""``pytest-ipu history`` end to end: a git project whose benchmark's work comes from a file, ten
commits of which the sixth triples that work, ``pytest --benchmark-autosave`` once at each commit,
and the command then names that commit, and no other, as the one change point; a newest run that
cannot be read makes the check exit 2 naming it.

The inner runs are in-process (``pytester``), a few tenths of a second each. The step is 3x, far
beyond any noise a loaded machine adds to a busy loop, so the test cannot flake on load; how small
a step is found is measured by ``benchmarks/test_history.py``.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from pytest_ipu.cli import main as cli

#: The benchmark: a busy loop whose length is read from ``work.txt``, which one commit changes.
EXAMPLE = """
from pathlib import Path


def test_loop(ipu_benchmark):
    n = int(Path(__file__).with_name("work.txt").read_text())
    ipu_benchmark(lambda: sum(range(n)), rounds=15)
"""
#: The commits, and the one (by position) that triples the work: a new project's first ten runs.
COMMITS = 10
STEP_AT = 6


def _git(pytester: pytest.Pytester, *args: str, date: str = "") -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date} if date else None
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=pytester.path,
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return done.stdout.strip()


def test_history_names_the_commit_that_made_it_slower(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(test_loop=EXAMPLE)
    (pytester.path / ".gitignore").write_text(".benchmarks/\n__pycache__/\n")
    _git(pytester, "init", "-q")
    shas = []
    for number in range(1, COMMITS + 1):
        (pytester.path / "work.txt").write_text("60000" if number >= STEP_AT else "20000")
        (pytester.path / "log.txt").write_text(f"commit {number}\n")
        _git(pytester, "add", "-A")
        # Commit times a minute apart, as a real history has them.
        _git(pytester, "commit", "-q", "-m", f"commit {number}", date=f"2026-01-01T10:{number:02d}:00+00:00")
        shas.append(_git(pytester, "rev-parse", "HEAD"))
        result = pytester.runpytest_inprocess("--benchmark-autosave", "-q", "-p", "no:randomly")
        assert result.ret == 0, result.stdout.str()
    machines = list((pytester.path / ".benchmarks").iterdir())
    assert len(machines) == 1
    assert len(list(machines[0].glob("*.json"))) == COMMITS
    capsys.readouterr()

    # pytester runs in its folder: the command reads the default storage, ./.benchmarks.
    code = cli.main(["history", "--metric", "latency.p50", "--format", "json", "--fail-on-regression", "50%"])
    out = json.loads(capsys.readouterr().out)
    [series] = out["series"]
    assert [p["commit"] for p in series["points"]] == shas
    assert [(c["commit"], c["direction"]) for c in out["change_points"]] == [(shas[STEP_AT - 1], "worse")]
    assert out["change_points"][0]["previous_commit"] == shas[STEP_AT - 2]
    # The regression started among the newest 10 commits, far beyond 50%: the check fails.
    assert code == 1
    assert out["check"]["verdicts"][0]["outcome"] == "FAIL"

    # The default form: one line, naming the commit.
    assert cli.main(["history", "--metric", "latency.p50"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("worse +")
    assert f"at {shas[STEP_AT - 1][:8]}" in lines[0]
    assert lines[1].startswith(f"1 change point(s) at 1 commit(s) in 1 series of {COMMITS} run(s)")

    # The newest run is unreadable (a NaN where a time should be): the check cannot judge it.
    newest = machines[0] / f"{COMMITS + 1:04d}_{shas[-1][:7]}_later.json"
    newest.write_text('{"benchmarks": [{"name": "test_loop", "fullname": "t", "stats": {"median": NaN}}]}')
    assert cli.main(["history", "--fail-on-regression", "50%"]) == 2
    err = capsys.readouterr().err
    assert f"the newest run {newest.relative_to(pytester.path)} was left out" in err
    assert "a time must be a finite number" in err
