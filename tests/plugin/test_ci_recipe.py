"""The CI recipe's GitHub Actions workflows (``docs/examples/perf-ab-*.yml``) lint clean and work as
written: their ``run:`` steps, executed by bash as a runner executes them, on a throwaway git
repository of two commits, gate a pull request against its merge base in one job.

Each workflow is parsed (PyYAML) and linted by actionlint with ShellCheck for its scripts. Its run
steps then run in a clone of an example project, with the variables a runner sets
(``GITHUB_STEP_SUMMARY``, ``GITHUB_ENV``, ``RUNNER_TEMP``, ...) and the ``${{ ... }}`` expressions
substituted (``github.base_ref`` is ``main``). Not run, and why:

- the ``uses:`` steps (checkout, set-up of Python, the artifact upload) are GitHub's own actions:
  here the clone stands for the checkout (with all history, as ``fetch-depth: 0`` gives), this
  interpreter for the set-up, and the test reads the folder the upload would keep;
- the install step clones pytest-ipu from the network and installs it and the project with pip: this
  interpreter already has pytest-ipu, and the example project needs nothing installed (each side
  imports its own revision's code, first on ``PYTHONPATH``). Its commands are checked as text.

The workflow's knobs under ``env`` are set as a team sets them, for a cheap run: three pairs before
the first look, a small time budget per benchmark (0.05 s for ``ipu_benchmark``, 0.2 s for
pytest-benchmark's), a generous gate. The slowed benchmark sleeps 5 ms a call beside about 0.1 ms of
work: a busy machine makes a sleep longer, never shorter, so it cannot pass.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

pytest.importorskip("yaml", reason="PyYAML is a test tool of the dev extra: pip install -e '.[dev]'")

from benchmarks import workflow_steps as steps_module

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
IPU_WORKFLOW = EXAMPLES / "perf-ab-ipu.yml"
PLAIN_WORKFLOW = EXAMPLES / "perf-ab-pytest-benchmark.yml"
#: The name of the step the test does not run (see the module docstring).
#: No step may run longer: a hung step fails the test rather than the whole suite.
STEP_TIMEOUT_S = 300
#: The gate the test sets: far from the 50x slowdown, and wide enough that three pairs of an
#: unchanged benchmark decide PASS beside busy neighbours.
TEST_GATE = {"perf-ab-ipu.yml": "latency.p50:+100%", "perf-ab-pytest-benchmark.yml": "time.median:+100%"}

#: The example project's code: three small workloads of about 0.1 ms a call or less.
WORK = """
import random

_RANDOM = random.Random(0)
NUMBERS = [_RANDOM.random() for _ in range(2000)]


def add_up():
    return sum(range(2000))


def sort_numbers():
    return sorted(NUMBERS)


def join_words():
    return " ".join(str(i) for i in range(200))
"""

#: The head commit's slower ``sort_numbers``.
SLOWER = """

import time

_sort_numbers = sort_numbers


def sort_numbers():
    time.sleep(0.005)
    return _sort_numbers()
"""

IPU_SUITE = """
import work


def test_add_up(ipu_benchmark):
    ipu_benchmark(work.add_up)


def test_sort_numbers(ipu_benchmark):
    ipu_benchmark(work.sort_numbers)


def test_join_words(ipu_benchmark):
    ipu_benchmark(work.join_words)
"""

PLAIN_SUITE = """
import work


def test_add_up(benchmark):
    benchmark(work.add_up)


def test_sort_numbers(benchmark):
    benchmark(work.sort_numbers)


def test_join_words(benchmark):
    benchmark.pedantic(work.join_words, rounds=50, iterations=1)
"""


def _tool(name: str) -> Path:
    """A test tool the dev extra installs into this environment's scripts folder."""
    path = Path(sysconfig.get_path("scripts")) / name
    assert path.is_file(), f"{name} is not installed in {path.parent}: pip install -e '.[dev]' installs it"
    return path


# --- Lint ------------------------------------------------------------------------------------------


def test_the_workflows_lint_clean_with_actionlint_and_shellcheck() -> None:
    workflows = sorted(EXAMPLES.glob("*.yml"))
    assert [p.name for p in workflows] == ["perf-ab-ipu.yml", "perf-ab-pytest-benchmark.yml"]
    done = subprocess.run(
        [
            str(_tool("actionlint")),
            "-no-color",
            "-shellcheck",
            str(_tool("shellcheck")),
            *map(str, workflows),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("path", [IPU_WORKFLOW, PLAIN_WORKFLOW], ids=lambda p: p.name)
def test_the_workflow_checks_out_history_pins_threads_and_keeps_its_runs(path: Path) -> None:
    workflow = steps_module.load(path)
    env = workflow["env"]
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        assert env[variable] == "1", variable
    steps = steps_module.steps(workflow)
    checkout = next(s for s in steps if str(s.get("uses", "")).startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0  # the merge base must be in the clone
    upload = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()"  # the runs are kept when the gate fails, too
    assert upload["with"]["path"].rstrip("/") == "ab-runs"
    for step in steps:
        script = step.get("run", "")
        # A pipe hides its left side's exit code unless pipefail is set.
        if any("|" in line.split("#")[0].replace("||", "") for line in script.splitlines()):
            assert "set -o pipefail" in script, step.get("name")
    (install,) = [s for s in steps if s.get("name") == steps_module.INSTALL_STEP]
    lines = [line.strip() for line in install["run"].splitlines() if not line.strip().startswith("#")]
    clone = lines.index('git clone --depth 1 "$INSTALL_PYTEST_IPU_FROM" "$RUNNER_TEMP/pytest-ipu"')
    assert lines[clone + 1].startswith('python -m pip install "$RUNNER_TEMP/pytest-ipu')
    assert "not on PyPI yet" in path.read_text(encoding="utf-8")


def test_the_docs_show_the_ipu_workflow_as_it_is() -> None:
    docs = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    text = IPU_WORKFLOW.read_text(encoding="utf-8")
    assert f"```yaml\n{text}```\n" in docs, "docs/ci.md does not show docs/examples/perf-ab-ipu.yml as it is"
    assert "examples/perf-ab-pytest-benchmark.yml" in docs


# --- The steps, run --------------------------------------------------------------------------------


def _pull_request(tmp_path: Path, suite: str, head_work: str) -> Path:
    """The example project on ``main``, and a pull request that appends ``head_work`` to its code."""
    base = {"work.py": WORK, "benchmarks/test_small.py": suite}
    head = {"work.py": WORK + head_work, "README": "the pull request's commit\n"}
    return steps_module.pull_request(tmp_path, base, head)


def _gate_lines(summary: str) -> list[str]:
    return [line for line in summary.splitlines() if line.startswith("- test_")]


def _check_the_recipe(workflow: Path, suite: str, tmp_path: Path, budget: dict[str, str]) -> None:
    knobs = {"GATE": TEST_GATE[workflow.name], "PAIRS": "3", **budget}

    # Unchanged code: every gate PASSes, the job is green, the runs are kept for the artifact.
    same = _pull_request(tmp_path / "same", suite, "\n# a comment: nothing measured changes\n")
    code, summary, output = steps_module.run_steps(
        workflow, same, tmp_path / "same", knobs, timeout_s=STEP_TIMEOUT_S
    )
    assert code == 0, output
    # The job's summary: every gate PASSed (a PASS has no line of its own without --verbose).
    assert "- gates: 3 checked: 3 PASS, 0 FAIL, 0 INCONCLUSIVE" in summary.splitlines(), summary
    assert sorted((same / "ab-runs").glob("pair1-*.json")), output

    # One benchmark 50x slower: the gate step exits 1 and the summary names that benchmark alone.
    slower = _pull_request(tmp_path / "slower", suite, SLOWER)
    code, summary, output = steps_module.run_steps(
        workflow, slower, tmp_path / "slower", knobs, timeout_s=STEP_TIMEOUT_S
    )
    assert code == 1, output
    failed = [line for line in _gate_lines(summary) if ": FAIL (" in line]
    assert len(failed) == 1, summary
    assert failed[0].startswith("- test_sort_numbers "), summary
    # No worktree of the runs is left in the checkout.
    assert steps_module.git(slower, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_the_ipu_benchmark_workflow_gates_a_pull_request_against_its_merge_base(
    tmp_path: Path,
) -> None:
    _check_the_recipe(IPU_WORKFLOW, IPU_SUITE, tmp_path, {"PYTEST_IPU_MAX_TIME": "0.05s"})


def test_the_pytest_benchmark_workflow_gates_a_pull_request_against_its_merge_base(
    tmp_path: Path,
) -> None:
    addopts = f"{os.environ.get('PYTEST_ADDOPTS', '')} --benchmark-max-time=0.2".strip()
    _check_the_recipe(PLAIN_WORKFLOW, PLAIN_SUITE, tmp_path, {"PYTEST_ADDOPTS": addopts})
