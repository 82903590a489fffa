"""Bad input files, one table: each row sets up a fault and says which line and exit code it must give.

The export-cache rows run a pytest run compiling a small torch model for ONNX Runtime with a faulty
``--ipu-cache-dir`` (the export itself is replaced by a prepared file, so no row pays for torch's
exporter); the merge rows run ``pytest-ipu merge``; the baseline rows run a gated
benchmark with a bad ``--ipu-baseline``, which must stop the run as a usage error (exit 4).
Faults this suite cannot make for real when run as root (a read-only directory) or without a tiny
file system (a full disk) are injected as the ``OSError`` the kernel would give.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.cli import main as cli
from pytest_ipu.results import benchmark_json
from tests.plugin.inner import INNER_ADDOPTS
from tests.plugin.inner import XDIST_VARIABLES
from tests.unit.test_poprun import _two_instances
from tests.unit.torch_versions import onnx_export_modules

CACHE, MERGE, BASELINE = "cache", "merge", "baseline"

TEST_EXPORT = """
import torch

def test_export(ipu_compile):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()).eval()
    ipu_compile(model, (torch.randn(2, 4),))
"""

#: The cache rows' inner runs are pytest sessions of one child process, one after the other
#: (``CACHE_DRIVER``): torch and ONNX Runtime do not survive being re-imported in one process, so
#: they cannot run in this one beside the in-process pytester runs, and a process each would import
#: them once per row. This conftest replaces the export with the prepared file and makes the
#: injected fault, if the row asked for one, for its own session only.
CACHE_CONFTEST = """
import os
from pathlib import Path

from pytest_ipu.backends import onnx_export
from pytest_ipu.results import atomic

_SAVED = (onnx_export._export, atomic.create_temporary)


def pytest_configure(config):
    onnx_export._export = lambda *args: Path("exported.onnx").read_bytes()
    if Path("inject_errno.txt").exists():
        number = int(Path("inject_errno.txt").read_text())

        def fail(*args, **kwargs):
            raise OSError(number, os.strerror(number))

        atomic.create_temporary = fail
    # A cache entry that is a directory where the export's file must go.
    if Path("entry_dir_suffix.txt").exists():
        import torch

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()).eval()
        key = onnx_export.cache_key(model, (torch.randn(2, 4),), onnx_export.ExportOptions())
        suffix = Path("entry_dir_suffix.txt").read_text()
        (Path(config.getoption("ipu_cache_dir")) / f"{key}{suffix}").mkdir(parents=True)


def pytest_unconfigure(config):
    onnx_export._export, atomic.create_temporary = _SAVED
"""

#: Runs pytest in each directory given, one session after another in this one process, and writes
#: each session's exit code and terminal output beside it. torch and ONNX Runtime are imported
#: first, once; each directory's own modules (its conftest and test file) are dropped after its
#: session, as pytest's own in-process runs do, so that the next directory's are imported afresh.
CACHE_DRIVER = """
import contextlib
import io
import os
import sys
from pathlib import Path

import onnxruntime  # noqa: F401
import pytest
import torch  # noqa: F401

for directory in sys.argv[1:]:
    os.chdir(directory)
    args = Path("args.txt").read_text().splitlines()
    modules, path = set(sys.modules), list(sys.path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = pytest.main(args)
    for name in set(sys.modules) - modules:
        if name in ("conftest", "test_bad"):
            del sys.modules[name]
    sys.path[:] = path
    Path("output.txt").write_text(out.getvalue())
    Path("exit_code.txt").write_text(str(int(code)))
"""


TEST_GATED = """
def test_sum(ipu_benchmark):
    ipu_benchmark(lambda: sum(range(100)), rounds=5, warmup_rounds=1)
"""


@dataclass(frozen=True)
class Row:
    """One fault: ``setup(directory, monkeypatch)`` makes it and returns the path the command is given."""

    kind: str
    setup: Callable[[Path, pytest.MonkeyPatch], Path]
    message: str
    exit_code: int


def _a_file(d: Path, mp: pytest.MonkeyPatch) -> Path:
    (d / "cache").write_text("")
    return d / "cache"


def _through_a_file(d: Path, mp: pytest.MonkeyPatch) -> Path:
    (d / "file").write_text("")
    return d / "file" / "cache"


def _writable_by_others(d: Path, mp: pytest.MonkeyPatch) -> Path:
    # Whoever can write the directory can replace a model and its recorded SHA-256 together.
    (d / "cache").mkdir()
    (d / "cache").chmod(0o777)
    return d / "cache"


def _injected(number: int) -> Callable[[Path, pytest.MonkeyPatch], Path]:
    def setup(d: Path, mp: pytest.MonkeyPatch) -> Path:
        # Read by the inner run's conftest (CACHE_CONFTEST), which makes the fault there.
        (d / "inject_errno.txt").write_text(str(number))
        return d / "cache"

    return setup


def _entry_is_a_directory(suffix: str) -> Callable[[Path, pytest.MonkeyPatch], Path]:
    def setup(d: Path, mp: pytest.MonkeyPatch) -> Path:
        # Read by the inner run's conftest, which makes the entry there: torch must not be imported
        # into this process beside the in-process pytester runs (that crashed it in garbage collection).
        (d / "entry_dir_suffix.txt").write_text(suffix)
        return d / "cache"

    return setup


def _merge_inputs(change: Callable[[list[dict[str, Any]]], Any] | None = None, text: str | None = None):  # type: ignore[no-untyped-def]
    def setup(d: Path, mp: pytest.MonkeyPatch) -> Path:
        docs = _two_instances()
        if change is not None:
            change(docs)
        for i, doc in enumerate(docs):
            (d / f"in-{i}.json").write_text(json.dumps(doc))
        if text is not None:
            (d / "in-1.json").write_text(text)
        return d / "merged.json"

    return setup


def _record_field(field: str, value: Any) -> Callable[[list[dict[str, Any]]], None]:
    def change(docs: list[dict[str, Any]]) -> None:
        docs[1]["benchmarks"][1]["extra_info"]["ipu"][field] = value

    return change


def _over_an_input(d: Path, mp: pytest.MonkeyPatch) -> Path:
    _merge_inputs()(d, mp)
    return d / "in-0.json"


def _in_is_a_directory(d: Path, mp: pytest.MonkeyPatch) -> Path:
    out = _merge_inputs()(d, mp)
    (d / "in-1.json").unlink()
    (d / "in-1.json").mkdir()
    return out


def _missing_instance(d: Path, mp: pytest.MonkeyPatch) -> Path:
    out = _merge_inputs()(d, mp)
    (d / "in-1.json").unlink()
    (d / "in-1.json").write_text((d / "in-0.json").read_text())
    return out


def _baseline(content: str | None = None, doc: Any = None, directory: bool = False):  # type: ignore[no-untyped-def]
    def setup(d: Path, mp: pytest.MonkeyPatch) -> Path:
        path = d / "base.json"
        if directory:
            path.mkdir()
        elif doc is not None:
            path.write_text(json.dumps(doc))
        elif content is not None:
            path.write_text(content)
        return path

    return setup


def _nan_baseline(d: Path, mp: pytest.MonkeyPatch) -> Path:
    """A pytest-ipu run whose record says its p50 was NaN (written by hand: the plugin never does)."""
    return _p50_baseline(float("nan"))(d, mp)


def _p50_baseline(p50: float, copies: int = 1):  # type: ignore[no-untyped-def]
    """A pytest-ipu run whose record says its p50 was ``p50``, its benchmark ``copies`` times."""

    def setup(d: Path, mp: pytest.MonkeyPatch) -> Path:
        from tests.unit.run_files import record

        written = record(batch=1, p50=0.001, throughput=1000.0)
        written["latency_s"]["p50"] = p50
        bench = {**_PLAIN_BENCH, "extra_info": {"ipu": written}}
        path = d / "base.json"
        path.write_text(json.dumps({**_IPU, "benchmarks": [bench] * copies}))
        return path

    return setup


_PLAIN_BENCH = {"name": "test_sum", "fullname": "test_bad.py::test_sum", "stats": {"mean": 0.1}}
_IPU = {benchmark_json.TOP_LEVEL_KEY: {"schema": 1}}

ROWS: dict[str, Row] = {
    # -- the export cache (--ipu-cache-dir) ---------------------------------------------------------------
    "cache dir is a file": Row(CACHE, _a_file, "is not a directory: pass a directory path", 1),
    "cache dir is /dev/null": Row(CACHE, lambda d, mp: Path(os.devnull), "--ipu-cache-dir=/dev/null", 1),
    "cache dir through a file": Row(CACHE, _through_a_file, "is not a directory: pass a directory", 1),
    "cache dir under /proc": Row(
        CACHE, lambda d, mp: Path("/proc/pytest-ipu-cache"), "No such file or directory; pass a writable", 1
    ),
    "cache dir read-only": Row(CACHE, _injected(errno.EROFS), "make the directory writable", 1),
    "cache dir not permitted": Row(CACHE, _injected(errno.EACCES), "Permission denied; make the", 1),
    "cache dir disk full": Row(CACHE, _injected(errno.ENOSPC), "free space on its file system", 1),
    "cache entry .onnx is a directory": Row(CACHE, _entry_is_a_directory(".onnx"), "remove the directory", 1),
    "cache entry .json is a directory": Row(CACHE, _entry_is_a_directory(".json"), "remove the directory", 1),
    "cache dir writable by others": Row(CACHE, _writable_by_others, "other users could replace a cached", 1),
    # -- pytest-ipu merge ----------------------------------------------------------------------------------
    "merge over an input": Row(MERGE, _over_an_input, "refusing to write over an input", 2),
    "merge latency_unsupported an int": Row(
        MERGE, _merge_inputs(_record_field("latency_unsupported", 3)), "latency_unsupported", 2
    ),
    "merge latency_unsupported ints": Row(
        MERGE, _merge_inputs(_record_field("latency_unsupported", [1])), "latency_unsupported", 2
    ),
    "merge latency_unsupported nested": Row(
        MERGE, _merge_inputs(_record_field("latency_unsupported", [["p99"]])), "latency_unsupported", 2
    ),
    "merge throughput not a number": Row(
        MERGE, _merge_inputs(_record_field("throughput_items_per_s", "fast")), "malformed", 2
    ),
    "merge latency_s not an object": Row(
        MERGE, _merge_inputs(_record_field("latency_s", [1])), "malformed", 2
    ),
    "merge latency_s without p99": Row(
        MERGE, _merge_inputs(_record_field("latency_s", {"p50": 0.1})), "in-1.json: benchmark", 2
    ),
    "merge truncated JSON": Row(MERGE, _merge_inputs(text='{"benchmarks": ['), "not JSON", 2),
    "merge empty file": Row(MERGE, _merge_inputs(text=""), "not JSON", 2),
    "merge input is a directory": Row(MERGE, _in_is_a_directory, "cannot read", 2),
    "merge an instance twice": Row(MERGE, _missing_instance, "pass each instance's file once", 2),
    # -- --ipu-baseline -------------------------------------------------------------------------------------
    "baseline partial": Row(
        BASELINE,
        _baseline(
            doc={**_IPU, "benchmarks": [{**_PLAIN_BENCH, "extra_info": {"ipu_pending": "ipu_benchmark"}}]}
        ),
        "no benchmark in it can be gated (each is a partial entry",
        4,
    ),
    "baseline partial, no benchmarks": Row(
        BASELINE, _baseline(doc={**_IPU, "benchmarks": []}), "no benchmark in it can be gated", 4
    ),
    "baseline without statistics": Row(
        BASELINE,
        _baseline(doc={"benchmarks": [{k: v for k, v in _PLAIN_BENCH.items() if k != "stats"}]}),
        "no benchmark in it can be gated",
        4,
    ),
    "baseline empty": Row(BASELINE, _baseline(content=""), "not JSON", 4),
    "baseline truncated JSON": Row(BASELINE, _baseline(content='{"benchmarks": [{"na'), "not JSON", 4),
    "baseline a directory": Row(BASELINE, _baseline(directory=True), "cannot read", 4),
    "baseline missing": Row(BASELINE, lambda d, mp: d / "absent.json", "cannot read", 4),
    "baseline no benchmarks list": Row(
        BASELINE, _baseline(doc={"benchmarks": {}}), "no 'benchmarks' list", 4
    ),
    "baseline a JSON list": Row(BASELINE, _baseline(content="[]"), "no 'benchmarks' list", 4),
    "baseline with a NaN p50": Row(BASELINE, _nan_baseline, "'latency_s.p50' is nan", 4),
    # A time no timed call can take, and a benchmark twice: refused as every reader refuses them.
    "baseline with a p50 of 0 s": Row(
        BASELINE, _p50_baseline(0.0), "'latency_s.p50' is 0.0: a timed call takes at least", 4
    ),
    "baseline with a p50 of 1e308 s": Row(
        BASELINE, _p50_baseline(1e308), "'latency_s.p50' is 1e+308: a call beyond a day", 4
    ),
    "baseline with a benchmark twice": Row(
        BASELINE, _p50_baseline(0.001, copies=2), "benchmark 'test_bad.py::test_sum' is in it twice", 4
    ),
}


@pytest.fixture(scope="module")
def cache_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int, list[str]]]:
    """Every cache row's inner run, by row name: the path it gave as ``--ipu-cache-dir``, the run's
    exit code and its terminal output's lines.

    One child process makes a real export of the inner test's model, which the rows reuse instead of
    exporting, then runs every row's session (``CACHE_DRIVER``): torch loaded into this process,
    beside the pytester runs, crashed it.
    """
    for name in onnx_export_modules():
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed")
    directory = tmp_path_factory.mktemp("export")
    script = (
        "import sys, torch\n"
        "from pathlib import Path\n"
        "from pytest_ipu.backends import onnx_export\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()).eval()\n"
        "e = onnx_export.export(model, (torch.randn(2, 4),), Path(sys.argv[1]))\n"
        "print(e.path)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(directory)], capture_output=True, text=True, check=True
    )
    exported = Path(done.stdout.strip().splitlines()[-1]).read_bytes()
    env = {k: v for k, v in os.environ.items() if k not in XDIST_VARIABLES}
    env.update(PYTEST_ADDOPTS=INNER_ADDOPTS, PYTEST_IPU_REPEATS="1")
    rows = {name: row for name, row in ROWS.items() if row.kind == CACHE}
    directories = {}
    with pytest.MonkeyPatch.context() as mp:
        for name, row in rows.items():
            d = tmp_path_factory.mktemp("cache_row")
            (d / "exported.onnx").write_bytes(exported)
            path = row.setup(d, mp)
            (d / "conftest.py").write_text(CACHE_CONFTEST)
            (d / "test_bad.py").write_text(TEST_EXPORT)
            args = ("--ipu-backend=onnxruntime:cpu", f"--ipu-cache-dir={path}", "-rf", f"--basetemp={d}/tmp")
            (d / "args.txt").write_text("\n".join(args))
            directories[name] = (d, path)
    subprocess.run(
        [sys.executable, "-c", CACHE_DRIVER, *(str(d) for d, _ in directories.values())],
        env=env,
        check=True,
        timeout=600,
    )
    return {
        name: (path, int((d / "exit_code.txt").read_text()), (d / "output.txt").read_text().splitlines())
        for name, (d, path) in directories.items()
    }


@pytest.mark.parametrize("row", list(ROWS.values()), ids=list(ROWS))
def test_bad_input_gives_one_line_and_its_exit_code(
    row: Row,
    request: pytest.FixtureRequest,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if row.kind == CACHE:
        path, code, outlines = request.getfixturevalue("cache_runs")[request.node.callspec.id]
        # The error's own line, not pytest's short summary of it (cut to the terminal's width, or
        # whole where pytest detects CI).
        lines = [line for line in outlines if "--ipu-cache-dir=" in line and not line.startswith("FAILED ")]
        assert lines, outlines
        line = lines[-1]
        assert f"--ipu-cache-dir={path}" in line
        # One line, the CacheDirError's: no traceback of the OSError under it.
        assert not [text for text in outlines if text.startswith("E ")], outlines
    elif row.kind == MERGE:
        out = row.setup(pytester.path, monkeypatch)
        inputs = [str(pytester.path / "in-0.json"), str(pytester.path / "in-1.json")]
        before = out.read_bytes() if out.is_file() else None
        code = cli.main(["merge", str(out), *inputs])
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.count("\n") == 1, captured.err
        line = captured.err
        assert (out.read_bytes() if out.is_file() else None) == before, "the output was written"
    else:
        path = row.setup(pytester.path, monkeypatch)
        pytester.makepyfile(test_bad=TEST_GATED)
        result = pytester.runpytest("--ipu-gate=throughput:-5%", f"--ipu-baseline={path}")
        errors = [line for line in result.errlines if line.strip()]
        assert len(errors) == 1, errors
        line = errors[0]
        assert line.startswith("ERROR: pytest-ipu: ")
        code = result.ret
    assert "Traceback" not in line
    assert row.message in line
    assert code == row.exit_code
