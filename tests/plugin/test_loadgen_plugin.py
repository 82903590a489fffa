"""LoadGen benchmarks end to end: ``ipu_loadgen`` runs real MLPerf LoadGen over a fake model of known
latency, and the record, the verdicts, the gates, the failures and ``compare`` are what the
arithmetic predicts.

The fake model sleeps ``LATENCY_S`` per call, whatever the batch, so one instance answers at most
``batch / LATENCY_S`` samples per second. The assertions are on what the record says against what
LoadGen itself logged, on how the samples were batched, and on LoadGen's verdicts where the margin is
wide (ten times that capacity, or a tenth of it); never on a measured time, which a loaded machine
moves (benchmarks/test_loadgen_overhead.py is where the times are compared): the suite passes beside
two CPU-burning processes. Each inner run is a subprocess with a timeout, so
a LoadGen run that waited for a lost query would fail the test instead of hanging the suite. Three
runs are shared by the tests that read them (module-scoped): the benchmarks that
succeed (and one whose score raises) with a steady fake power source, the Server runs under a gate,
and the benchmarks that fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.results import schema
from tests.plugin.inner import INNER_ADDOPTS
from tests.plugin.inner import XDIST_VARIABLES

pytest.importorskip("mlperf_loadgen")

#: Seconds the fake model takes per call.
LATENCY_S = 0.005

INNER = f"""
import time

import numpy as np
import pytest

LATENCY_S = {LATENCY_S}
SAMPLES = np.arange(64, dtype=np.float32).reshape(64, 1).repeat(3, axis=1)


def model(x):
    time.sleep(LATENCY_S)
    return x[:, 0].copy()


def test_single(ipu_loadgen):
    rec = ipu_loadgen(model, (SAMPLES,), scenario="SingleStream", min_duration=0.5, min_queries=150)
    if rec.timed:
        print("QUERIES", rec.loadgen.query_count)


def test_offline(ipu_loadgen):
    ipu_loadgen(model, (SAMPLES,), scenario="Offline", max_batch=8, min_duration=0.5)


def test_multistream(ipu_loadgen):
    ipu_loadgen(model, (SAMPLES,), scenario="MultiStream", samples_per_query=4, min_duration=0.5)


def test_server_overloaded(ipu_loadgen):
    # Ten times what one instance at batch 1 can answer: the queue grows until the run ends.
    ipu_loadgen(
        model, (SAMPLES,), scenario="Server", max_batch=1, target_qps=2 / LATENCY_S * 5,
        target_latency="50 ms", min_duration=0.2,
    )


def test_server_light(ipu_loadgen):
    # A tenth of the capacity at batch 8 (8 / 5 ms = 1,600 QPS), a bound of 1 s: VALID once early
    # stopping has its queries.
    ipu_loadgen(
        model, (SAMPLES,), scenario="Server", max_batch=8, target_qps=160, target_latency="1 s",
        min_duration=0.5, min_queries=600,
    )


def test_accuracy(ipu_loadgen):
    def score(outputs):
        assert sorted(outputs) == list(range(len(SAMPLES)))
        return sum(float(outputs[i]) == float(SAMPLES[i, 0]) for i in outputs) / len(outputs)

    ipu_loadgen(model, (SAMPLES,), scenario="Offline", mode="accuracy", accuracy=score, accuracy_name="exact")


def test_accuracy_score_raises(ipu_loadgen):
    def score(outputs):
        raise KeyError("no labels")

    ipu_loadgen(model, (SAMPLES,), scenario="Offline", mode="accuracy", accuracy=score)


def test_fails_midway(ipu_loadgen):
    calls = []

    def flaky(x):
        calls.append(1)
        if len(calls) > 20:  # the calibration's calls and a few of LoadGen's pass
            raise RuntimeError("device lost")
        return model(x)

    ipu_loadgen(flaky, (SAMPLES,), scenario="SingleStream", min_duration=0.5)


def test_fails_midway_server(ipu_loadgen):
    calls = []

    def flaky(x):
        calls.append(1)
        if len(calls) > 12:
            raise RuntimeError("device lost")
        return model(x)

    # Batches of one: how many of Server's queries wait behind a call depends on when they arrive
    # (a loaded machine batches more of them), and the failure line names the failing batch's size.
    ipu_loadgen(flaky, (SAMPLES,), scenario="Server", max_batch=1, target_qps=100, min_duration=0.5)


def test_search(ipu_loadgen):
    ipu_loadgen(
        model, (SAMPLES,), scenario="Server", find_peak=True, max_probes=5, target_latency="200 ms",
        min_duration=0.2,
    )


def test_bad_argument(ipu_loadgen):
    ipu_loadgen(model, (SAMPLES,), scenario="Sever")


def test_bad_keyword_argument(ipu_loadgen):
    ipu_loadgen(model, (SAMPLES,), scenari="Server")
"""


def _run(pytester: pytest.Pytester, *args: str, timeout: float = 240) -> pytest.RunResult:
    pytester.makepyfile(test_inner=INNER)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", *args, timeout=timeout)


POWER_CONFTEST = """
from pw_fake_source import FakePowerSource


def pytest_ipu_make_power_source(config, name, device):
    if name != "rapl":
        return None
    return FakePowerSource("instant_power", 50.0, name="rapl", update_period_s=0.01)
"""


def _shared_run(path: Path, *args: str, conftest: str | None = None) -> pytest.RunResult:
    """A subprocess run of ``INNER`` in ``path``, as ``_run`` makes one, for a module-scoped fixture
    (pytester's runs are the test's own): ``-rA`` lists each test's outcome (``_outcomes``)."""
    (path / "test_inner.py").write_text(INNER, encoding="utf-8")
    if conftest is not None:
        from tests.fakes import fake_power

        (path / "pw_fake_source.py").write_text(Path(fake_power.__file__).read_text(encoding="utf-8"))
        (path / "conftest.py").write_text(conftest, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in XDIST_VARIABLES}
    env.update(PYTEST_ADDOPTS=INNER_ADDOPTS, PYTEST_IPU_REPEATS="1")
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "-rA", *args],
        cwd=path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return pytest.RunResult(
        done.returncode, done.stdout.splitlines(), done.stderr.splitlines(), time.monotonic() - start
    )


def _outcomes(result: pytest.RunResult) -> dict[str, str]:
    """Each inner test's outcome, from ``-rA``'s short summary: ``{"test_single": "PASSED", ...}``."""
    outcomes = {}
    for line in result.outlines:
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR", "SKIPPED") and rest.startswith("test_inner.py::"):
            outcomes[rest.split("::")[1].split(" ")[0]] = word
    return outcomes


#: The tests of ``main_run``: every scenario, accuracy mode (scored, and a score that raises), the
#: peak search.
MAIN = ("test_single", "test_offline", "test_multistream", "test_server_overloaded", "test_server_light")


@pytest.fixture(scope="module")
def main_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pytest.RunResult]:
    """The benchmarks that succeed, and one whose score raises, measured by a steady 50 W fake power
    source (no idle measurement: nothing here reads it), into ``run.json``: the run's directory and
    its result."""
    path = tmp_path_factory.mktemp("loadgen_main")
    selected = " or ".join((*MAIN, "test_accuracy", "test_search"))
    result = _shared_run(
        path, "-k", selected, "--ipu-idle=0", f"--benchmark-json={path / 'run.json'}", conftest=POWER_CONFTEST
    )
    return path, result


@pytest.fixture(scope="module")
def gated_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pytest.RunResult]:
    """The two Server runs (one VALID, one overloaded) under a gate on the Server QPS, into
    ``run.json``."""
    path = tmp_path_factory.mktemp("loadgen_gated")
    result = _shared_run(
        path,
        "-k",
        "test_server_",
        "--ipu-gate=loadgen.server_qps>100",
        # One LoadGen run measures the Server QPS once: no spread, so the gate cannot PASS it.
        "--ipu-inconclusive=warn",
        f"--benchmark-json={path / 'run.json'}",
    )
    return path, result


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pytest.RunResult]:
    """The models that fail midway and the bad arguments, into ``run.json``."""
    path = tmp_path_factory.mktemp("loadgen_failing")
    result = _shared_run(path, "-k", "fails_midway or bad_", f"--benchmark-json={path / 'run.json'}")
    return path, result


def _logged(log_dir: str) -> dict[str, Any]:
    """Every key's value in the LoadGen detail log of ``log_dir``, read here independently."""
    values: dict[str, Any] = {}
    text = (Path(log_dir) / "mlperf_log_detail.txt").read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.startswith(":::MLLOG "):
            entry = json.loads(line[len(":::MLLOG ") :])
            values[entry["key"]] = entry["value"]
    return values


def _records(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return {b["name"]: schema.from_json(b["extra_info"]["ipu"]) for b in data["benchmarks"]}


def test_scenarios_record_what_loadgen_logged(main_run: tuple[Path, pytest.RunResult]) -> None:
    path, result = main_run
    outcomes = _outcomes(result)
    assert {name: outcomes.get(name) for name in MAIN} == dict.fromkeys(MAIN, "PASSED"), result.outlines[-40:]
    records = _records(path / "run.json")
    single = records["test_single"].loadgen
    assert single is not None
    assert single.scenario == "SingleStream"
    assert single.query_count >= 150
    # The record's figures are LoadGen's own, as its log states them.
    logged = _logged(single.log_dir)
    assert single.query_count == logged["result_query_count"]
    for name, text in (("min", "min"), ("max", "max"), ("mean", "mean")):
        assert single.latency_s[name] == logged[f"result_{text}_latency_ns"] / 1e9
    for name, text in (("p50", "50.00"), ("p90", "90.00"), ("p99", "99.00")):
        assert single.latency_s[name] == logged[f"result_{text}_percentile_latency_ns"] / 1e9
    assert single.samples_per_s == logged["result_qps_with_loadgen_overhead"]
    assert single.early_stopping_latency_s == logged["early_stopping_latency_ss"] / 1e9
    assert single.valid is True, single.invalid_reasons
    # Every query the SUT answered was a batch of one sample, and LoadGen counted them all.
    assert single.batching.batch_sizes == {"1": single.batching.batches}
    assert single.batching.batches >= single.query_count
    assert records["test_single"].latency_s.p50 == single.latency_s["p50"]
    assert records["test_single"].rounds == single.query_count

    offline = records["test_offline"].loadgen
    assert offline is not None
    assert offline.samples_per_s == _logged(offline.log_dir)["result_samples_per_second"]
    assert offline.batching.max_batch == 8
    assert max(int(size) for size in offline.batching.batch_sizes) == 8

    multi = records["test_multistream"].loadgen
    assert multi is not None
    assert multi.samples_per_query == 4
    # MultiStream's latency is per query (its slowest sample): LoadGen's per-query keys.
    assert (
        multi.latency_s["p99"] == _logged(multi.log_dir)["result_99.00_percentile_per_query_latency_ns"] / 1e9
    )
    assert multi.batching.batch_sizes == {"4": multi.batching.batches}

    overloaded = records["test_server_overloaded"].loadgen
    assert overloaded is not None
    assert overloaded.valid is False
    assert overloaded.checks["perf_constraints_met"] is False
    assert "latency bound not met at the target percentile" in overloaded.invalid_reasons
    assert overloaded.server_qps is None

    light = records["test_server_light"].loadgen
    assert light is not None
    assert light.valid is True, light.invalid_reasons
    assert light.server_qps == light.scheduled_qps
    assert light.query_count >= 600

    for name in MAIN:
        part = records[name].loadgen
        assert part.mlperf_compliant is False
        assert "no MLPerf benchmark named (mlperf_model=...): judged by MLPerf's general rules" in (
            part.compliance_reasons
        )
        assert any(r.startswith("minimum duration ") for r in part.compliance_reasons)
        # LoadGen's own logs are kept beside the JSON, one directory per benchmark.
        assert Path(part.log_dir).parent == path / "run.loadgen"
        assert (Path(part.log_dir) / "mlperf_log_detail.txt").is_file()
        assert (Path(part.log_dir) / "mlperf_log_summary.txt").is_file()
        assert part.version.split()[0].count(".") == 2


def test_accuracy_mode_scores_every_sample(main_run: tuple[Path, pytest.RunResult]) -> None:
    path, result = main_run
    assert _outcomes(result)["test_accuracy"] == "PASSED"
    record = _records(path / "run.json")["test_accuracy"]
    part = record.loadgen
    assert part is not None
    assert part.mode == "accuracy"
    # LoadGen times nothing in accuracy mode: the record's figures are the system under test's own,
    # one per sample answered, never zeros standing in for LoadGen's.
    assert part.latency_s == {}
    assert part.samples_per_s is None
    assert part.query_count == 1  # Offline's one query, as LoadGen generated it
    assert record.latency_s.rounds == 64
    assert record.items_per_call == 1
    assert record.throughput_items_per_s == pytest.approx(64 / record.window_s)
    assert part.accuracy == 1.0
    assert part.accuracy_name == "exact"
    assert part.valid is None
    assert "an accuracy run has no performance result; MLPerf judges the performance run" in (
        part.compliance_reasons
    )
    # LoadGen logged each sample's output bytes (a float32 each) for its accuracy script.
    logged = json.loads((Path(part.log_dir) / "mlperf_log_accuracy.json").read_text(encoding="utf-8"))
    assert sorted(entry["qsl_idx"] for entry in logged) == list(range(64))
    assert all(len(entry["data"]) == 8 for entry in logged)  # 4 bytes as hex


@pytest.mark.parametrize("test", ["test_fails_midway", "test_fails_midway_server"])
def test_an_exception_in_the_model_ends_the_run_with_one_line(
    failing_run: tuple[Path, pytest.RunResult], test: str
) -> None:
    path, result = failing_run
    assert _outcomes(result)[test] == "FAILED"
    scenario = "Server" if "server" in test else "SingleStream"
    result.stdout.fnmatch_lines(
        [
            f"*pytest-ipu: LoadGen's {scenario} run failed: instance 0 failed on a batch of 1 sample(s) "
            f"(indices *): RuntimeError: device lost. The run was ended by answering its remaining * "
            f"sample(s) unrun; LoadGen's logs are in *{test}* (the traceback: sut_error.txt)",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    (kept,) = (p for p in path.rglob("sut_error.txt") if p.relative_to(path / "run.loadgen").parts[0] == test)
    text = kept.read_text(encoding="utf-8")
    assert text.startswith("Traceback")
    assert "RuntimeError: device lost" in text


def test_a_bad_argument_fails_with_one_line(failing_run: tuple[Path, pytest.RunResult]) -> None:
    _, result = failing_run
    outcomes = _outcomes(result)
    assert (outcomes["test_bad_argument"], outcomes["test_bad_keyword_argument"]) == ("FAILED", "FAILED")
    result.stdout.fnmatch_lines(
        [
            "*pytest-ipu: ipu_loadgen(scenario='Sever'): 'Sever' is not a LoadGen scenario; choose one of "
            "SingleStream, MultiStream, Server, Offline",
            "*pytest-ipu: ipu_loadgen() got an unexpected keyword argument 'scenari'",
        ],
        consecutive=False,
    )


def test_gates_read_the_server_qps(gated_run: tuple[Path, pytest.RunResult]) -> None:
    _, result = gated_run
    outcomes = _outcomes(result)
    # The VALID run's Server QPS is one value, with no spread to bound it by: INCONCLUSIVE, here a
    # warning; the overloaded one has none, and says why: FAIL.
    assert (outcomes["test_server_light"], outcomes["test_server_overloaded"]) == ("PASSED", "FAILED")
    result.stdout.fnmatch_lines(
        [
            "*pytest-ipu gate FAILED: *loadgen.server_qps*LoadGen called the Server run INVALID*",
            "INCONCLUSIVE (a warning: --ipu-inconclusive=warn) test_server_light*: loadgen.server_qps: one "
            "value per run: no threshold can be decided (loadgen.server_qps is measured once per benchmark: "
            "no spread to bound the value by)",
        ]
    )


def test_two_saved_runs_compare(
    main_run: tuple[Path, pytest.RunResult], gated_run: tuple[Path, pytest.RunResult]
) -> None:
    first, second = main_run[0] / "run.json", gated_run[0] / "run.json"
    compared = subprocess.run(
        [sys.executable, "-m", "pytest_ipu.cli", "compare", str(first), str(second)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert compared.returncode == 0, compared.stderr
    assert "loadgen.p50" in compared.stdout
    assert "loadgen.samples_per_s" in compared.stdout


def test_untimed_run_calls_the_model_once(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "-k", "test_single", "--benchmark-disable")
    result.assert_outcomes(passed=1)
    assert "QUERIES" not in result.stdout.str()


def test_without_loadgen_the_test_is_skipped(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("import sys\nsys.modules['mlperf_loadgen'] = None\n")
    result = _run(pytester, "-k", "test_single", "-rs")
    result.assert_outcomes(skipped=1)
    assert (
        "pytest-ipu: MLPerf LoadGen is not installed: pip install 'pytest-ipu[loadgen]'"
        in result.stdout.str()
    )


def test_every_loadgen_record_carries_its_runs_host_cost(main_run: tuple[Path, pytest.RunResult]) -> None:
    path, _ = main_run
    records = _records(path / "run.json")
    assert set(records) >= {*MAIN, "test_accuracy", "test_search"}
    for name, rec in records.items():
        cpu = rec.cpu
        assert cpu is not None, name
        part = rec.loadgen
        assert part is not None
        # The CPU time of this process over the LoadGen run (no worker processes here), per sample
        # the system under test answered: LoadGen's threads, the batching, the model's calls.
        answered = round(part.batching.mean_batch * part.batching.batches) if part.batching.mean_batch else 0
        assert answered > 0, name
        assert (cpu.workers, cpu.workers_total_s) == (0, 0.0)
        # CPU time (not wall time) of a process that answered samples: some, however busy the machine.
        assert cpu.process_total_s > 0
        assert cpu.host_per_item_s == pytest.approx(cpu.process_total_s / answered), name
        assert rec.value("host_cpu_per_item") == cpu.host_per_item_s
        assert rec.value("host_cores") == cpu.host_cores
        assert cpu.host_cores is not None
        assert cpu.host_cores > 0
        # No rounds: no CPU time per call, and the record says why rather than show a zero.
        assert (cpu.process_s, cpu.thread_s, cpu.thread_total_s, cpu.off_cpu_share) == (
            None,
            None,
            None,
            None,
        )
        assert rec.value("cpu_time") is None
        assert "no timed rounds" in rec.why_missing("cpu_time")
        assert "off-cpu" not in rec.flags


def test_a_loadgen_run_is_an_energy_window(main_run: tuple[Path, pytest.RunResult]) -> None:
    path, _ = main_run
    records = _records(path / "run.json")
    single = records["test_single"]
    assert single.power.measured, single.power.reason
    # The window's items are the samples LoadGen counted; a steady 50 W gives 50 W whatever the length.
    assert single.power.items == single.loadgen.query_count
    assert single.power.mean_power_w == pytest.approx(50.0, rel=1e-6)
    assert single.power.energy_j == pytest.approx(50.0 * single.power.window_s, rel=1e-3)
    server = records["test_server_light"]
    assert server.power.measured
    assert server.power.items == server.loadgen.query_count


def test_the_peak_search_keeps_every_probe(main_run: tuple[Path, pytest.RunResult]) -> None:
    path, result = main_run
    assert _outcomes(result)["test_search"] == "PASSED"
    record = _records(path / "run.json")["test_search"]
    part = record.loadgen
    peak = part.peak
    assert peak is not None
    assert 1 <= len(peak.probes) <= 5
    assert peak.ended in ("converged", "probes")
    # The calibration's estimate (8 samples per call of at least 5 ms) bounds where the search starts.
    assert peak.capacity_estimate_qps <= 8 / LATENCY_S
    assert peak.probes[0].target_qps == pytest.approx(peak.capacity_estimate_qps / 2)
    valid = [p.target_qps for p in peak.probes if p.valid]
    invalid = [p.target_qps for p in peak.probes if not p.valid]
    assert peak.peak_qps == (max(valid) if valid else None)
    assert peak.lowest_invalid_qps == (min(invalid) if invalid else None)
    for probe in peak.probes:
        assert probe.valid == (not probe.reasons)
        # Each probe ran long enough for early stopping at the 99th percentile (twice its minimum).
        assert probe.elapsed_s > 0
    assert part.server_qps == peak.peak_qps
    # One log directory per probe, in the order run.
    names = sorted(p.name for p in Path(part.log_dir).iterdir())
    assert [n[: len("probe-01")] for n in names] == [f"probe-{i:02d}" for i in range(1, len(peak.probes) + 1)]
    # A power source was there (main_run's): a search is many runs, never one energy window.
    assert record.power.measured is False
    assert "peak QPS search is many runs" in record.power.reason


def test_a_score_that_raises_fails_its_test_and_the_json_is_still_written(
    main_run: tuple[Path, pytest.RunResult],
) -> None:
    path, result = main_run
    outcomes = _outcomes(result)
    assert (outcomes["test_accuracy_score_raises"], outcomes["test_single"]) == ("FAILED", "PASSED")
    result.stdout.fnmatch_lines(["*KeyError: 'no labels'*"])
    records = _records(path / "run.json")
    assert "test_single" in records
    assert "test_accuracy_score_raises" not in records
