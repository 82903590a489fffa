"""Bad input to every option and marker keyword, one row each: the run stops with a one-line error.

Each row is a ``BadInput``: where the value comes from (command line, environment, ini file, the test's
marker), how it is given, the offending value, the key part of the one-line message, and the exit
code (4, pytest's usage error). The runs are in-process: a usage error stops them before any test.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_ipu.pytest_plugin.marker_keywords import KEYWORDS
from pytest_ipu.pytest_plugin.options import OPTIONS
from tests.plugin.inner import SENTINEL_TEST

USAGE = int(pytest.ExitCode.USAGE_ERROR)
COMMAND_LINE = "command line"
ENVIRONMENT = "environment"
INI = "ini"
MARKER = "marker"

DURATION = "expected a positive duration such as '2', '2s' or '500ms', at most a day (86400s)"
UNKNOWN_NAME = "unknown backend"


@dataclass(frozen=True)
class BadInput:
    """One bad value: ``how`` is the command-line arguments, the environment's ``NAME=value``
    assignments, the ini file's ``key = value`` lines, or the marker's keyword source, by ``where``."""

    where: str
    how: tuple[str, ...]
    value: str
    message: str
    exit_code: int = USAGE
    #: True where the suite is plain callables that never ask for ``ipu_backend``.
    plain: bool = False

    @property
    def id(self) -> str:
        return f"{self.where}:{' '.join(self.how)}" + (":plain" if self.plain else "")


def cli(arg: str, value: str, message: str) -> BadInput:
    return BadInput(COMMAND_LINE, (arg,), value, message)


def env(assignment: str, value: str, message: str) -> BadInput:
    return BadInput(ENVIRONMENT, (assignment,), value, message)


def ini(line: str, value: str, message: str) -> BadInput:
    return BadInput(INI, (line,), value, message)


def marker(keywords: str, value: str, message: str) -> BadInput:
    return BadInput(MARKER, (keywords,), value, message)


ROWS = [
    # -- --ipu-backend: malformed, unknown names and devices (typos), from every source ----------------
    cli("--ipu-backend=Torch", "Torch", "expected a backend target such as 'torch'"),
    cli("--ipu-backend=,", ",", "expected 'auto' or targets such as 'torch:cpu,torch:cuda'"),
    cli("--ipu-backend=troch", "troch", "unknown backend 'troch' (did you mean 'torch'?)"),
    cli(
        "--ipu-backend=torch:gpu",
        "torch:gpu",
        "unknown device 'gpu' for backend 'torch' (did you mean 'cuda'?)",
    ),
    cli("--ipu-backend=torch:cpu,onnxruntim", "torch:cpu,onnxruntim", "unknown backend 'onnxruntim'"),
    cli("--ipu-backend=poptorch:gpu", "poptorch:gpu", "unknown device 'gpu' for backend 'poptorch'"),
    cli("--ipu-backend=onnxruntime-trt:cpu", "onnxruntime-trt:cpu", "unknown device 'cpu'"),
    env("PYTEST_IPU_BACKEND=nosuch", "nosuch", "environment variable PYTEST_IPU_BACKEND: unknown backend"),
    env("PYTEST_IPU_BACKEND=torch:cude", "torch:cude", "unknown device 'cude' for backend 'torch'"),
    ini("ipu_backend = popart:ipu-modle", "popart:ipu-modle", "unknown device 'ipu-modle'"),
    marker("backend='nosuch'", "nosuch", "for @pytest.mark.ipu(backend=...): unknown backend 'nosuch'"),
    marker("backend='torch:gpu'", "torch:gpu", "for @pytest.mark.ipu(backend=...): unknown device 'gpu'"),
    marker("backend='Torch'", "Torch", "expected a backend target such as 'torch'"),
    # A typo in a backend is a usage error whatever the tests use, plain callables too.
    BadInput(COMMAND_LINE, ("--ipu-backend=troch",), "troch", "unknown backend 'troch'", plain=True),
    BadInput(ENVIRONMENT, ("PYTEST_IPU_BACKEND=nosuch",), "nosuch", "PYTEST_IPU_BACKEND", plain=True),
    # -- --ipu-precision ------------------------------------------------------------------------------
    cli("--ipu-precision=fp8", "fp8", "expected one of auto, fp32, fp16, bf16"),
    ini("ipu_precision = double", "double", "from ini key ipu_precision"),
    # -- counts: rounds, warm-up, min rounds, repeats, threads: below and above their range -----------
    cli("--ipu-rounds=0", "0", "expected 'auto' or an integer from 1 to 1000000"),
    cli("--ipu-rounds=", "", "expected 'auto' or an integer from 1 to 1000000"),
    cli(f"--ipu-rounds={10**12}", str(10**12), "expected 'auto' or an integer from 1 to 1000000"),
    env("PYTEST_IPU_ROUNDS=1.5", "1.5", "environment variable PYTEST_IPU_ROUNDS"),
    cli("--ipu-warmup-rounds=-1", "-1", "expected an integer from 0 to 100000"),
    cli(f"--ipu-warmup-rounds={10**12}", str(10**12), "expected an integer from 0 to 100000"),
    cli("--ipu-min-rounds=0", "0", "expected an integer from 1 to 100000"),
    cli("--ipu-min-rounds=100001", "100001", "expected an integer from 1 to 100000"),
    env(f"PYTEST_IPU_MIN_ROUNDS={10**9}", str(10**9), "expected an integer from 1 to 100000"),
    ini(f"ipu_warmup_rounds = {10**6}", str(10**6), "expected an integer from 0 to 100000"),
    cli("--ipu-repeats=0", "0", "expected an integer from 1 to 100"),
    cli("--ipu-repeats=101", "101", "expected an integer from 1 to 100"),
    cli("--ipu-torch-threads=0", "0", "expected 'auto' or an integer from 1 to 1024"),
    cli("--ipu-torch-threads=4096", "4096", "expected 'auto' or an integer from 1 to 1024"),
    cli("--ipu-torch-interop-threads=-1", "-1", "expected 'auto' or an integer from 1 to 1024"),
    env("PYTEST_IPU_TORCH_INTEROP_THREADS=many", "many", "expected 'auto' or an integer from 1 to 1024"),
    # -- durations: budget, cap, timeout, idle ---------------------------------------------------------
    cli("--ipu-max-time=0", "0", DURATION),
    cli("--ipu-max-time=1e308", "1e308", DURATION),
    cli("--ipu-max-time=nan", "nan", DURATION),
    env("PYTEST_IPU_MAX_TIME=2days", "2days", DURATION),
    cli("--ipu-max-time-cap=0.5x", "0.5x", "expected a multiple of the time budget from '1x' to '1000x'"),
    cli("--ipu-max-time-cap=1e9s", "1e9s", "expected a multiple of the time budget such as '3x'"),
    cli("--ipu-call-timeout=0", "0", "at most a day (86400s)"),
    cli("--ipu-call-timeout=2000min", "2000min", "at most a day (86400s)"),
    cli("--ipu-rank-timeout=0", "0", "at most a day (86400s)"),
    env("PYTEST_IPU_RANK_TIMEOUT=soon", "soon", "at most a day (86400s)"),
    cli("--ipu-scaling-baseline=", "", "expected a file path or 'none'"),
    cli("--ipu-idle=1e9", "1e9", DURATION),
    cli("--ipu-idle=1e300", "1e300", DURATION),
    cli("--ipu-idle=-1", "-1", DURATION),
    ini("ipu_idle = forever", "forever", DURATION),
    # -- choices -------------------------------------------------------------------------------------
    cli("--ipu-repeat-mode=parallel", "parallel", "expected one of interleaved, process"),
    cli("--ipu-missing-sdk=ignore", "ignore", "expected one of skip, fail"),
    env("PYTEST_IPU_MISSING_SDK=warn", "warn", "expected one of skip, fail"),
    cli("--ipu-power=ina219", "ina219", "expected one of auto, off, nvml, rapl, gcipuinfo"),
    cli("--ipu-baseline-missing=skip", "skip", "expected one of warn, fail"),
    cli("--ipu-inconclusive=ignore", "ignore", "expected one of fail, warn, pass"),
    env("PYTEST_IPU_INCONCLUSIVE=yes", "yes", "expected one of fail, warn, pass"),
    # -- shares ----------------------------------------------------------------------------------------
    cli("--ipu-unstable=0", "0", "expected a share such as '5%' or '0.05'"),
    cli("--ipu-unstable=150%", "150%", "expected a share such as '5%' or '0.05'"),
    cli("--ipu-contended=-5%", "-5%", "expected a share such as '5%' or '0.05'"),
    cli("--ipu-drift=0", "0", "expected a share such as '5%' or '0.05'"),
    ini("ipu_drift = small", "small", "from ini key ipu_drift"),
    cli("--ipu-job-alpha=0", "0", "expected a level such as '1%' or '0.01', above 0 and below 50%"),
    cli("--ipu-job-alpha=60%", "60%", "expected a level such as '1%' or '0.01', above 0 and below 50%"),
    env("PYTEST_IPU_JOB_ALPHA=rare", "rare", "expected a level such as '1%' or '0.01'"),
    ini("ipu_contended = lots", "lots", "from ini key ipu_contended"),
    # -- power sampling rate ---------------------------------------------------------------------------
    cli("--ipu-power-hz=0", "0", "expected 'auto' or a rate in Hz from 0.1 to 10000"),
    cli("--ipu-power-hz=1e-300", "1e-300", "expected 'auto' or a rate in Hz from 0.1 to 10000"),
    cli("--ipu-power-hz=20000", "20000", "expected 'auto' or a rate in Hz from 0.1 to 10000"),
    env("PYTEST_IPU_POWER_HZ=fast", "fast", "expected 'auto' or a rate in Hz from 0.1 to 10000"),
    # -- cache directory, gates, baselines -------------------------------------------------------------
    cli("--ipu-cache-dir=", "", "expected a directory path"),
    cli(
        "--ipu-gate=", "", "expected a gate expression such as 'throughput:-5%' or 'none', got an empty value"
    ),
    cli("--ipu-gate=throughput", "throughput", "--ipu-gate from the command line"),
    env("PYTEST_IPU_GATE=latency.p99<", "latency.p99<", "environment variable PYTEST_IPU_GATE"),
    env("PYTEST_IPU_GATE=;;", ";;", "got only ';' separators; write 'none' for none"),
    env("PYTEST_IPU_BASELINE= ; ", " ; ", "got only ';' separators; write 'none' for none"),
    # A gate source given and empty (`PYTEST_IPU_GATE="$GATES"` with $GATES unset, `ipu_gate =`)
    # would switch every gate off in silence.
    env(
        "PYTEST_IPU_GATE=  ",
        "'  ' for --ipu-gate from environment variable PYTEST_IPU_GATE",
        "got an empty value; write 'none' for none",
    ),
    env(
        "PYTEST_IPU_GATE=",
        "'' for --ipu-gate from environment variable PYTEST_IPU_GATE",
        "got an empty value; write 'none' for none",
    ),
    env(
        "PYTEST_IPU_BASELINE= ",
        "' ' for --ipu-baseline from environment variable PYTEST_IPU_BASELINE",
        "got an empty value; write 'none' for none",
    ),
    ini("ipu_gate =", "'' for --ipu-gate from ini key ipu_gate", "got an empty value; write 'none' for none"),
    ini(
        "ipu_baseline =   ",
        "'' for --ipu-baseline from ini key ipu_baseline",
        "got an empty value; write 'none' for none",
    ),
    cli("--ipu-baseline=", "", "expected a pytest-benchmark JSON path, a glob or 'none', got an empty value"),
    cli("--ipu-baseline=no-such-dir/*.json", "no-such-dir/*.json", "no file matches 'no-such-dir/*.json'"),
    # -- the marker's own keywords ---------------------------------------------------------------------
    marker("round=3", "round", "unknown keyword 'round' (did you mean 'rounds'?)"),
    marker("rounds=0", "0", "for @pytest.mark.ipu(rounds=...): expected 'auto' or an integer from 1"),
    marker(f"rounds={10**12}", str(10**12), "expected 'auto' or an integer from 1 to 1000000"),
    marker("warmup_rounds=-1", "-1", "for @pytest.mark.ipu(warmup_rounds=...)"),
    marker("min_rounds=10**9", str(10**9), "expected an integer from 1 to 100000"),
    marker("max_time='1e308s'", "1e308s", DURATION),
    marker("max_time_cap='0x'", "0x", "for @pytest.mark.ipu(max_time_cap=...)"),
    marker("repeats=1000", "1000", "expected an integer from 1 to 100"),
    marker("repeat_mode='threads'", "threads", "expected one of interleaved, process"),
    marker("call_timeout='2d'", "2d", "for @pytest.mark.ipu(call_timeout=...)"),
    marker("power='watts'", "watts", "for @pytest.mark.ipu(power=...)"),
    marker("precision='fp64'", "fp64", "expected one of auto, fp32, fp16, bf16"),
    marker("ipus=3", "3", "invalid ipus=3"),
    marker("replicas=0", "0", "invalid replicas=0: expected a positive int"),
    marker("stages=3", "3", "write stages=2 or stages=4"),
    marker("stages=128", "128", "more than the 64 of the largest multi-IPU device"),
    marker("instances=10**6", str(10**6), "invalid instances=1000000: expected 1 to 64"),
    marker("instances=True", "True", "invalid instances=True: expected a positive int, got bool"),
    marker("gate='throughput'", "throughput", "@pytest.mark.ipu(gate=...)"),
    marker("gate=5", "5", "expected an expression such as 'throughput:-5%'"),
]

#: The test every row runs: it uses ``ipu_backend`` (so targets are checked) and writes the sentinel.
TEST_MODULE = """
import pytest
from pathlib import Path

@pytest.mark.ipu({keywords})
def test_a(ipu_backend):
    Path("ran.txt").write_text("yes")
"""

#: A suite of plain callables: no fixture of pytest-ipu's.
PLAIN_MODULE = """
from pathlib import Path

def test_a():
    Path("ran.txt").write_text("yes")
"""


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_input_stops_the_run_with_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, row: BadInput
) -> None:
    args: list[str] = []
    keywords = ""
    if row.where == COMMAND_LINE:
        args = list(row.how)
    elif row.where == ENVIRONMENT:
        for assignment in row.how:
            name, _, value = assignment.partition("=")
            monkeypatch.setenv(name, value)
    elif row.where == INI:
        pytester.makeini("[pytest]\n" + "\n".join(row.how) + "\n")
    else:
        keywords = ", ".join(row.how)
    module = PLAIN_MODULE if row.plain else TEST_MODULE.format(keywords=keywords)
    pytester.makepyfile(test_bad=module, test_sentinel=SENTINEL_TEST)
    # A built-in target, so only the row's own value can be wrong (and `auto` looks for no runtime);
    # not where the row itself sets the backend, which the command line would override.
    if not any("backend" in part.lower() for part in row.how if row.where != MARKER):
        args.append("--ipu-backend=torch:cpu")
    result = pytester.runpytest(*args)
    assert result.ret == row.exit_code
    lines = [line for line in result.errlines if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("ERROR: pytest-ipu: ")
    assert row.message in lines[0]
    assert row.value in lines[0]
    assert not (pytester.path / "ran.txt").exists(), "a test ran despite the usage error"


def test_every_option_and_marker_keyword_has_a_row() -> None:
    """The table covers every option on the command line and every marker keyword."""
    flags = {row.how[0].partition("=")[0] for row in ROWS if row.where == COMMAND_LINE}
    assert {spec.flag for spec in OPTIONS} <= flags
    keywords = {row.how[0].partition("=")[0] for row in ROWS if row.where == MARKER}
    assert set(KEYWORDS) <= keywords | {"round"}
    assert len(ROWS) >= 60


@pytest.mark.parametrize("value", ["[]", '""'])
def test_an_empty_gate_list_in_pyproject_stops_the_run_with_one_line(
    pytester: pytest.Pytester, value: str
) -> None:
    # pyproject.toml as the ini file: an empty list or string is the key given without gates.
    pytester.makepyprojecttoml(f"[tool.pytest.ini_options]\nipu_gate = {value}\n")
    pytester.makepyfile(test_sentinel=SENTINEL_TEST)
    result = pytester.runpytest("--ipu-backend=torch:cpu")
    assert result.ret == USAGE
    assert [line for line in result.errlines if line.strip()] == [
        "ERROR: pytest-ipu: invalid value '' for --ipu-gate from ini key ipu_gate in "
        f"{pytester.path / 'pyproject.toml'}: expected a gate expression such as 'throughput:-5%' or "
        "'none', got an empty value; write 'none' for none"
    ]
    assert not (pytester.path / "ran.txt").exists(), "a test ran despite the usage error"
