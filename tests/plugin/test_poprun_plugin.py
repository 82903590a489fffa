"""Two PopRun instances end to end: each inner run (the fake ``popdist`` configured as instance 0 or 1
of 2) writes its own ``--benchmark-json`` file, and ``pytest-ipu merge`` joins them, throughput summed.

The inner runs are in-process and benchmark a plain callable (no torch). The fake popdist is copied
into the pytester directory as ``popdist.py``, so ``import popdist`` finds it as it would the SDK's;
pytester restores ``sys.modules`` after each inner run, so each run imports it afresh. The conftest
only says which instance the process is; the plugin finds that out, renames the JSON file and adds
the instance to ``machine_info`` and to every record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.cli import main as cli
from pytest_ipu.results import schema
from tests.fakes import fake_popdist

CONFTEST = """
import os

import popdist

# The fake reads which instance of which launch this process is from the environment, as PopRun's
# processes learn it from theirs; the plugin does the rest.
popdist.configure_from_environ(os.environ)
"""

BENCH = """
def test_sum(ipu_benchmark):
    ipu_benchmark(lambda: sum(range(2000)), rounds=30, warmup_rounds=1)


def test_join(ipu_benchmark):
    ipu_benchmark(lambda batch: "-".join(map(str, batch * 100)), [[0, 1, 2, 3]], rounds=20, warmup_rounds=1)
"""

ARGS = ("--benchmark-json=results/run.json", "--ipu-power=off")


def _setup(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(popdist=Path(fake_popdist.__file__).read_text())
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_work=BENCH)
    (pytester.path / "results").mkdir()


def _instance(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, index: int, count: int) -> None:
    monkeypatch.setenv(fake_popdist.ENV, json.dumps({"instance_index": index, "num_instances": count}))
    pytester.runpytest(*ARGS).assert_outcomes(passed=2)


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _records(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["name"]: b["extra_info"][schema.NAMESPACE] for b in data["benchmarks"]}


def test_two_instances_write_two_files_that_merge(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _setup(pytester)
    _instance(pytester, monkeypatch, 0, 2)
    _instance(pytester, monkeypatch, 1, 2)
    results = pytester.path / "results"
    assert sorted(p.name for p in results.iterdir()) == [
        "run.instance-0-of-2.json",
        "run.instance-1-of-2.json",
    ]
    files = [results / "run.instance-0-of-2.json", results / "run.instance-1-of-2.json"]
    runs = [_load(f) for f in files]
    for index, run in enumerate(runs):
        identity = run["machine_info"]["ipu"]["poprun"]
        assert (identity["index"], identity["count"]) == (index, 2)
        assert all(r["poprun"]["index"] == index for r in _records(run).values())

    out = pytester.path / "merged.json"
    capsys.readouterr()
    assert cli.main(["merge", str(out), *map(str, reversed(files))]) == 0
    assert capsys.readouterr().out == f"merged 2 PopRun instance(s), 2 benchmark(s), into {out}\n"
    merged = _load(out)
    per_instance = [_records(run) for run in runs]
    for name, record in _records(merged).items():
        throughputs = [records[name]["throughput_items_per_s"] for records in per_instance]
        items = sum(r[name]["throughput_items_per_s"] * r[name]["window_s"] for r in per_instance)
        # The instances ran here one after the other: the launch's window spans both, they never
        # overlap, and the launch's rate is every item over it, not the sum of their rates.
        assert record["poprun"]["window_rule"] == "common span"
        assert record["poprun"]["window_overlap"] == 0.0
        assert record["window_s"] >= sum(r[name]["window_s"] for r in per_instance)
        assert record["throughput_items_per_s"] == pytest.approx(items / record["window_s"], rel=1e-12)
        assert record["sum_of_instances_items_per_s"] == pytest.approx(sum(throughputs), rel=1e-12)
        assert record["throughput_items_per_s"] < record["sum_of_instances_items_per_s"]
        assert record["rounds"] == sum(records[name]["rounds"] for records in per_instance)
        assert record["latency_worst_instance_p99_s"] == max(
            r[name]["latency_s"]["p99"] for r in per_instance
        )
        assert [i["poprun"]["index"] for i in record["poprun"]["instances"]] == [0, 1]
    assert _records(merged)["test_join"]["items_per_call"] == 4
    assert merged["machine_info"]["ipu"]["poprun"]["count"] == 2
    assert [b["stats"] for b in merged["benchmarks"]] == [b["stats"] for b in runs[0]["benchmarks"]]


def test_outside_poprun_the_json_path_is_kept(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _setup(pytester)
    monkeypatch.delenv(fake_popdist.ENV, raising=False)
    pytester.runpytest(*ARGS).assert_outcomes(passed=2)
    run = _load(pytester.path / "results" / "run.json")
    assert "poprun" not in run["machine_info"]["ipu"]
    assert [p.name for p in (pytester.path / "results").iterdir()] == ["run.json"]


def test_instances_saving_into_one_storage_get_a_file_each(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _setup(pytester)
    storage = f"--benchmark-storage=file://{pytester.path / 'store'}"
    for index in (0, 1):
        monkeypatch.setenv(fake_popdist.ENV, json.dumps({"instance_index": index, "num_instances": 2}))
        pytester.runpytest("--ipu-power=off", storage, "--benchmark-save=base").assert_outcomes(passed=2)
    saved = sorted(p.name.split("_", 1)[1] for p in (pytester.path / "store").rglob("*.json"))
    assert saved == ["base.instance-0-of-2.json", "base.instance-1-of-2.json"]


# -- PopTorch under PopRun: independent models, each instance on the device PopDist gives it --------

POPTORCH_CONFTEST = """
import os

import popdist
import torch

from pytest_ipu.backends.ipu.poptorch import PopTorchBackend
from tests.fakes import fake_poptorch

popdist.configure_from_environ(os.environ)
fake_poptorch.reset()


def pytest_ipu_make_backend(config, target):
    # The backend finds popdist by importing it, as it would the SDK's.
    if target.backend == "poptorch":
        return PopTorchBackend(
            target.backend, target.device, poptorch_module=fake_poptorch, torch_module=torch
        )
    return None
"""

POPTORCH_TESTS = """
import json
from pathlib import Path

import pytest
import torch

from tests.fakes import fake_poptorch


@pytest.mark.ipu(instances=2)
def test_placed(ipu_placement):
    Path("placed.json").write_text(json.dumps([p.device for p in ipu_placement.instances]))


def test_compiled(ipu_compile):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4)).eval()
    ipu_compile(model, (torch.zeros(4, 8),), precision="fp32")
    used = fake_poptorch.executors[-1].options
    Path("compiled.json").write_text(
        json.dumps({"processes": used.Distributed.numProcesses, "ipu_id": used.ipu_id})
    )
"""


def test_poptorch_instances_compile_independent_models_on_their_own_ipus(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    pytester.makepyfile(popdist=Path(fake_popdist.__file__).read_text())
    pytester.makeconftest(POPTORCH_CONFTEST)
    pytester.makepyfile(test_poptorch_work=POPTORCH_TESTS)
    seen = []
    for index in (0, 1):
        # What PopRun sets in each instance: OpenMPI's rank and size, and (here, for the fake) popdist's.
        monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
        monkeypatch.setenv("OMPI_COMM_WORLD_RANK", str(index))
        monkeypatch.setenv(
            fake_popdist.ENV, json.dumps({"instance_index": index, "num_instances": 2, "replicas_local": 2})
        )
        result = pytester.runpytest("--ipu-backend=poptorch:ipu", "--ipu-power=off", "-p", "no:randomly")
        result.assert_outcomes(passed=2)
        seen.append(
            (_load(pytester.path / "placed.json"), _load(pytester.path / "compiled.json")),
        )
    # Each instance holds two of the four IPUs (two local replicas of one IPU): placement and a
    # plain compile keep to them, and no model is compiled as part of a two-process graph.
    assert seen == [
        (["ipu:0", "ipu:1"], {"processes": 1, "ipu_id": 0}),
        (["ipu:2", "ipu:3"], {"processes": 1, "ipu_id": 2}),
    ]
