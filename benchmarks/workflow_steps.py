"""Running a GitHub Actions workflow's ``run:`` steps here, as a Linux runner runs them: the CI
recipe's test (``tests/plugin/test_ci_recipe.py``) and the gate-recipe study
(``benchmarks/test_gate_recipe.py``) both run the recipe's workflow as written, on a throwaway git
repository of a pull request.

What a runner does and this does not: the ``uses:`` steps (GitHub's own actions: checkout, set-up
of Python, artifact upload) and the steps named in ``skip`` (the recipe's install step, which
clones pytest-ipu from the network: this interpreter has it) are left out; the repository given
stands for the checkout, this interpreter for the set-up. ``${{ github.X }}`` and ``${{ env.X }}``
are substituted (``github.base_ref`` is ``main``), the variables a runner sets are set
(``GITHUB_STEP_SUMMARY``, ``GITHUB_ENV``, ``GITHUB_PATH``, ``GITHUB_OUTPUT``, ``RUNNER_TEMP``), and
what a step appends to ``GITHUB_ENV`` and ``GITHUB_PATH`` reaches the steps after it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The recipe's step that installs pytest-ipu and the project (from the network): not run here.
INSTALL_STEP = "Install pytest-ipu and the project"
#: No step may run longer by default: a hung step fails its caller rather than running on.
STEP_TIMEOUT_S = 1800


def load(path: Path) -> dict[str, Any]:
    """The workflow file, parsed (PyYAML)."""
    import yaml

    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict), f"{path}: not a mapping"
    return loaded


def steps(workflow: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The steps of the workflow's one job."""
    (job,) = workflow["jobs"].values()
    return list(job["steps"])


def git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd`` with a committer identity of its own; its output."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return done.stdout


def pull_request(where: Path, base: Mapping[str, str], head: Mapping[str, str]) -> Path:
    """The repository a runner checks out for a pull request: ``main`` holds the base commit (the
    files ``base``, path to text), the pull request one commit more (the files ``head`` written
    over them). A full clone, as ``fetch-depth: 0`` makes it: ``origin/main`` is there."""
    origin = where / "origin"
    for name, text in base.items():
        (origin / name).parent.mkdir(parents=True, exist_ok=True)
        (origin / name).write_text(text)
    git(origin, "init", "-q", "-b", "main")
    git(origin, "add", ".")
    git(origin, "commit", "-q", "-m", "base")
    workspace = where / "workspace"
    git(where, "clone", "-q", str(origin), str(workspace))
    git(workspace, "checkout", "-q", "-b", "pull-request")
    for name, text in head.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(text)
    git(workspace, "add", ".")
    git(workspace, "commit", "-q", "-m", "head")
    return workspace


_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def expand(text: str, contexts: dict[str, dict[str, str]]) -> str:
    """``${{ github.X }}`` and ``${{ env.X }}`` substituted; any other expression is an error here."""

    def value(match: re.Match[str]) -> str:
        context, _, name = match.group(1).partition(".")
        assert context in contexts, f"cannot evaluate {match.group(0)}"
        assert name in contexts[context], f"cannot evaluate {match.group(0)}: no {name} in {context}"
        return contexts[context][name]

    return _EXPRESSION.sub(value, text)


def _shell(step: dict[str, Any], script: Path) -> list[str]:
    """The command a Linux runner runs a ``run:`` script with (GitHub's defaults for bash)."""
    shell = step.get("shell")
    if shell is None:
        return ["bash", "-e", str(script)]
    assert shell == "bash", f"step {step.get('name')!r}: shell {shell!r} is not run by this test"
    return ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)]


def run_steps(
    workflow_path: Path,
    workspace: Path,
    tmp_path: Path,
    knobs: Mapping[str, str],
    skip: tuple[str, ...] = (INSTALL_STEP,),
    timeout_s: float = STEP_TIMEOUT_S,
) -> tuple[int, str, str]:
    """Run the workflow's run steps in order, as a runner would, until one fails: the last step's exit
    code, the job summary and the steps' output."""
    workflow = load(workflow_path)
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    summary = tmp_path / "step-summary.md"
    summary.touch()
    github = {"base_ref": "main", "event_name": "pull_request", "workspace": str(workspace)}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "GITHUB_"))}
    env.pop("PYTEST_IPU_REPEATS", None)  # a runner sets none: the command chooses
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(
        {
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKSPACE": str(workspace),
            "GITHUB_BASE_REF": "main",
            "GITHUB_EVENT_NAME": "pull_request",
            "GITHUB_STEP_SUMMARY": str(summary),
            "RUNNER_TEMP": str(runner_temp),
        }
    )
    env.update({k: expand(str(v), {"github": github, "env": env}) for k, v in workflow["env"].items()})
    env.update(knobs)
    ran, output, code = [], [], 0
    for number, step in enumerate(steps(workflow)):
        if "uses" in step or step.get("name") in skip:
            continue
        assert "if" not in step, f"step {step.get('name')!r}: a condition this test does not evaluate"
        files = {name: tmp_path / f"step{number}-{name}" for name in ("env", "path", "output")}
        for file in files.values():
            file.touch()
        step_env = {
            **env,
            "GITHUB_ENV": str(files["env"]),
            "GITHUB_PATH": str(files["path"]),
            "GITHUB_OUTPUT": str(files["output"]),
        }
        step_env.update(
            {k: expand(str(v), {"github": github, "env": env}) for k, v in step.get("env", {}).items()}
        )
        script = tmp_path / f"step{number}.sh"
        script.write_text(expand(step["run"], {"github": github, "env": step_env}))
        done = subprocess.run(
            _shell(step, script),
            cwd=workspace / step.get("working-directory", "."),
            env=step_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout_s,
        )
        ran.append(step.get("name"))
        output.append(f"--- step {step.get('name')!r}: exit {done.returncode}\n{done.stdout}{done.stderr}")
        code = done.returncode
        # What a step appends to GITHUB_ENV and GITHUB_PATH reaches the steps after it.
        for line in files["env"].read_text().splitlines():
            assert "<<" not in line, "multi-line GITHUB_ENV values are not read by this test"
            name, _, value = line.partition("=")
            env[name] = value
        for line in reversed(files["path"].read_text().splitlines()):
            env["PATH"] = os.pathsep.join([line, env["PATH"]])
        if code != 0:
            break
    assert ran, f"{workflow_path.name}: no run step was executed"
    return code, summary.read_text(), "\n".join(output)
