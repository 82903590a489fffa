"""The case the gating-cost self-check measures (``benchmarks/test_gate_cost.py``), and a script that
writes it for a look of one's own.

A suite of 69 small pure-Python benchmarks, the shape of a real library's (23 tests, each over 3
sizes), either as ``ipu_benchmark`` benchmarks (``--ipu-max-time=0.05s``, three repeats each) or as
pytest-benchmark's own ``benchmark.pedantic`` ones; baseline runs of it and a current run, each a
``--benchmark-json`` file. Every run is a fresh ``python -m pytest`` with no other plugin than
pytest-ipu and pytest-benchmark, timed on the wall clock and in CPU time (its own and its children's).

    python -m benchmarks.gate_cost_support OUT_DIR [--baselines 10] [--kind ipu|plain]

writes ``OUT_DIR/test_suite.py``, ``OUT_DIR/baselines/run01.json``... and ``OUT_DIR/current.json``, and
prints how long each run took and what to time next (the gated run and ``pytest-ipu compare --gate``).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.conftest import other_plugins_off
from pytest_ipu.backports import zip_strict

#: Tests, and sizes each runs at: 69 benchmarks.
TESTS = 23
SIZES = (10, 100, 1000)
#: The budget of each ``ipu_benchmark`` benchmark (the issue's case: fast calls, short windows).
MAX_TIME = "0.05s"
#: Rounds of each plain ``benchmark.pedantic`` benchmark.
PLAIN_ROUNDS = 200
#: The gate every gated run and ``compare`` checks.
GATE = "latency.p50:+5%"
KINDS = ("ipu", "plain")

_WORKLOADS = """
import pytest

SIZES = {sizes!r}


def _sort(n):
    data = list(range(n, 0, -1))
    return lambda: sorted(data)


def _sum(n):
    data = list(range(n))
    return lambda: sum(data)


def _join(n):
    parts = [str(i) for i in range(n)]
    return lambda: ",".join(parts)


def _dict(n):
    keys = list(range(n))
    return lambda: {{k: k for k in keys}}


def _set(n):
    data = list(range(n))
    return lambda: set(data)


def _squares(n):
    return lambda: [i * i for i in range(n)]


WORKLOADS = (_sort, _sum, _join, _dict, _set, _squares)
"""

_IPU_TEST = """

@pytest.mark.parametrize("n", SIZES)
def test_{index:02d}(ipu_benchmark, n):
    ipu_benchmark(WORKLOADS[{index} % len(WORKLOADS)](n + {index}), ())
"""

_PLAIN_TEST = """

@pytest.mark.parametrize("n", SIZES)
def test_{index:02d}(benchmark, n):
    benchmark.pedantic(WORKLOADS[{index} % len(WORKLOADS)](n + {index}), rounds={rounds}, iterations=1)
"""


def suite_source(kind: str) -> str:
    """The test file of the suite: ``TESTS`` tests over ``SIZES``, each ``kind`` of benchmark."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    test = _IPU_TEST if kind == "ipu" else _PLAIN_TEST
    body = "".join(test.format(index=i, rounds=PLAIN_ROUNDS) for i in range(TESTS))
    return _WORKLOADS.format(sizes=SIZES) + body


@dataclass(frozen=True)
class Timed:
    """One command: its exit code, wall time and CPU time (user and system, its whole process tree),
    seconds, and what it printed (stdout, then stderr)."""

    returncode: int
    wall_s: float
    cpu_s: float
    output: str

    @property
    def tail(self) -> str:
        """The last 15 lines printed, for a message."""
        return "\n".join(self.output.strip().splitlines()[-15:])


def run_pytest(folder: Path, *args: str, timeout_s: float = 600.0) -> Timed:
    """``python -m pytest test_suite.py ARGS`` in ``folder``, with no other plugin than pytest-ipu's
    and pytest-benchmark's, and none of this process's pytest options."""
    return run_command([sys.executable, "-m", "pytest", *_quiet(), "test_suite.py", *args], folder, timeout_s)


def run_command(command: Sequence[str], folder: Path, timeout_s: float = 600.0) -> Timed:
    """Run ``command`` in ``folder``, timed; the CPU time is the children's, read before and after
    (one command at a time in this process, so the difference is its own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_ADDOPTS", "PYTEST_IPU_"))}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        list(command), cwd=folder, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(proc.returncode, wall, cpu, proc.stdout + proc.stderr)


def _quiet() -> list[str]:
    return ["-q", "-p", "no:cacheprovider", *other_plugins_off()]


def run_args(kind: str, json_path: Path) -> list[str]:
    """The options of one run of the suite: its JSON file and, for ``ipu_benchmark``, the budget."""
    args = [f"--benchmark-json={json_path}"]
    return [*args, f"--ipu-max-time={MAX_TIME}"] if kind == "ipu" else args


def gate_args(baselines: Path) -> list[str]:
    """The options that gate a run against every baseline run in ``baselines``; an INCONCLUSIVE
    verdict warns instead of failing, so that the run's outcome is the FAILs alone."""
    return [f"--ipu-baseline={baselines}/*.json", f"--ipu-gate={GATE}", "--ipu-inconclusive=warn"]


def compare_command(files: Sequence[Path]) -> list[str]:
    """``pytest-ipu compare --gate GATE FILES``, by this interpreter."""
    return [sys.executable, "-m", "pytest_ipu.cli.main", "compare", "--gate", GATE, *map(str, files)]


@dataclass(frozen=True)
class Case:
    """The suite, its baseline runs (oldest first) and a current run, with how long each took."""

    folder: Path
    kind: str
    baselines: tuple[Path, ...]
    current: Path
    runs: tuple[Timed, ...]


def make_case(folder: Path, baselines: int = 10, kind: str = "ipu") -> Case:
    """Write the suite into ``folder`` and run it ``baselines`` + 1 times, ungated: the baseline runs
    under ``folder/baselines`` and the current run as ``folder/current.json``. Raises
    ``RuntimeError`` with the run's output when a run fails."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_suite.py").write_text(suite_source(kind))
    (folder / "baselines").mkdir(exist_ok=True)
    paths = [folder / "baselines" / f"run{i + 1:02d}.json" for i in range(baselines)]
    current = folder / "current.json"
    runs = []
    for path in [*paths, current]:
        timed = run_pytest(folder, *run_args(kind, path))
        if timed.returncode != 0:
            raise RuntimeError(f"the suite's run for {path} exited {timed.returncode}:\n{timed.tail}")
        runs.append(timed)
    return Case(folder, kind, tuple(paths), current, tuple(runs))


def main(argv: Sequence[str] | None = None) -> int:
    """Write the case (see the module docstring) and print what each run took."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gate_cost_support", description=__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--baselines", type=int, default=10)
    parser.add_argument("--kind", choices=KINDS, default="ipu")
    args = parser.parse_args(argv)
    if args.baselines < 1:
        parser.error(f"--baselines {args.baselines}: give 1 or more")
    case = make_case(args.folder, args.baselines, args.kind)
    for path, timed in zip_strict([*case.baselines, case.current], case.runs):
        size = path.stat().st_size
        print(f"{path}: {timed.wall_s:.1f} s wall, {timed.cpu_s:.1f} s CPU, {size / 1e3:,.0f} kB")
    gated = " ".join(gate_args(args.folder / "baselines"))
    print(f"gated run: cd {args.folder} && python -m pytest test_suite.py {gated} ...")
    files = " ".join(str(p) for p in [*case.baselines, case.current])
    print(f"compare: pytest-ipu compare --gate '{GATE}' {files}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
