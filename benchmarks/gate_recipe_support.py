"""The parts of ``test_gate_recipe.py`` that are not the experiment's design: a pull request of the
benchmark family (``gate_family/``) on a throwaway repository, the two CPU hogs that can be switched
off and on, and one job of the CI recipe's workflow, run as written (``workflow_steps``), with what
its job summary says.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from benchmarks import workflow_steps

#: The family's two files, copied into the pull request's ``benchmarks/`` folder (the recipe's
#: ``BENCHMARKS``).
FAMILY = Path(__file__).resolve().parent / "gate_family"
#: The CI recipe's workflow for a suite with ``ipu_benchmark`` benchmarks (docs/ci.md), as a team
#: copies it: the family mixes them with pytest-benchmark's own fixture, which its gate judges too.
WORKFLOW = Path(__file__).resolve().parents[1] / "docs" / "examples" / "perf-ab-ipu.yml"
#: What ``slow.py`` keys each benchmark by, and the name its verdicts give it.
NAMES: Mapping[str, str] = {
    **{f"plain-{n}": f"test_plain[{n}]" for n in ("py_sum", "py_sort", "py_dict", "py_json")},
    **{f"plain-{n}": f"test_plain[{n}]" for n in ("np_sort", "np_matmul", "np_fft")},
    **{f"pedantic-{n}": f"test_pedantic[{n}]" for n in ("py_join", "py_regex", "np_cumsum")},
    **{f"ipu-{n}": f"test_ipu[{n}]" for n in ("py_sum", "py_sort", "py_json", "np_sort", "np_fft")},
    "ipu-np_matmul": "test_ipu[np_matmul]",
    **{f"torch-{n}": f"test_torch[torch-cpu-{n}]" for n in ("conv", "layernorm", "mlp", "softmax")},
}


def _files(slow: Mapping[str, float]) -> dict[str, str]:
    """The family as the pull request's files, ``slow.py`` saying which benchmarks are slower."""
    body = "{" + ", ".join(f"{k!r}: {v!r}" for k, v in sorted(slow.items())) + "}"
    text = (FAMILY / "slow.py").read_text()
    slow_py = re.sub(r"^SLOW: dict\[str, float\] = .*$", f"SLOW: dict[str, float] = {body}", text, flags=re.M)
    return {
        "benchmarks/test_family.py": (FAMILY / "test_family.py").read_text(),
        "benchmarks/slow.py": slow_py,
    }


def pull_request(where: Path, slow: Mapping[str, float], label: str) -> Path:
    """The checkout of a pull request: ``main`` the family unchanged, the head ``slow`` (``{}``: a
    change that touches no benchmark's code path, a comment only)."""
    head = _files(slow)
    head["benchmarks/slow.py"] += f"\n# the pull request: {label}\n"
    return workflow_steps.pull_request(where, _files({}), head)


# --- The CPU hogs ---------------------------------------------------------------------------------


@dataclass
class Hogs:
    """Two processes, each spinning on a core, as the jobs beside ours on a shared 2-core runner;
    ``off`` stops them (SIGSTOP) and ``on`` lets them run again (SIGCONT)."""

    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def off(self) -> None:
        """Stop both hogs where they are."""
        for process in self.processes:
            process.send_signal(signal.SIGSTOP)

    def on(self) -> None:
        """Let both hogs spin again."""
        for process in self.processes:
            process.send_signal(signal.SIGCONT)

    @property
    def alive(self) -> bool:
        """Whether both hogs are still there (stopped or spinning)."""
        return bool(self.processes) and all(p.poll() is None for p in self.processes)


@contextlib.contextmanager
def hogs(count: int = 2) -> Iterator[Hogs]:
    """``count`` spinning processes for as long as the block runs; ended on every way out."""
    group = Hogs([subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)])
    try:
        yield group
    finally:
        for process in group.processes:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGCONT)
                process.kill()
            process.wait()


# --- One job of the recipe -------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One CI job of the recipe: its gate step's exit status, how long the job took, the benchmarks
    the job summary's FAIL lines name, and its output."""

    status: int
    seconds: float
    failed: frozenset[str]
    summary: str
    output: str

    @property
    def counts(self) -> str:
        """The job summary's count of its gates' verdicts (``gates: 20 checked: ...``)."""
        return next((line[2:] for line in self.summary.splitlines() if line.startswith("- gates:")), "")

    @property
    def verdict(self) -> str:
        """The job's verdict as CI sees it: PASS (0), FAIL (1), INCONCLUSIVE (3), ERROR (other)."""
        return {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE"}.get(self.status, "ERROR")


_FAIL_LINE = re.compile(r"^- (?P<name>test_\w+\[[^\]]+\]) [\w.]+: .*: FAIL \(")


def failed_benchmarks(summary: str) -> frozenset[str]:
    """The benchmarks the job summary's FAIL lines name."""
    return frozenset(m.group("name") for m in map(_FAIL_LINE.match, summary.splitlines()) if m)


def run_job(workspace: Path, scratch: Path, switch: Hogs | None = None, after_s: float = 0.0) -> Job:
    """The recipe's workflow on ``workspace``, its run steps as written; with ``switch``, both hogs
    are switched off ``after_s`` seconds in (a level shift in the middle of the job)."""
    timer = None if switch is None else threading.Timer(after_s, switch.off)
    started = time.perf_counter()
    if timer is not None:
        timer.start()
    try:
        status, summary, output = workflow_steps.run_steps(WORKFLOW, workspace, scratch, {})
    finally:
        if timer is not None:
            timer.cancel()
    return Job(status, time.perf_counter() - started, failed_benchmarks(summary), summary, output)


def plain_run(workspace: Path) -> float:
    """Seconds the family's plain run takes: ``pytest benchmarks`` as the team's job runs it without
    gates (its defaults, with the workflow's thread variables), in the pull request's checkout."""
    env = {k: str(v) for k, v in workflow_steps.load(WORKFLOW)["env"].items() if k.endswith("THREADS")}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks", "-q", "-p", "no:cacheprovider"],
        cwd=workspace,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=workflow_steps.STEP_TIMEOUT_S,
    )
    assert done.returncode == 0, f"the family's plain run failed ({done.returncode}):\n{done.stdout[-3000:]}"
    return time.perf_counter() - started
