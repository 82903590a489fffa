"""``pytest-ipu doctor --first-contact DIR`` (pytest_ipu/cli/first_contact.py): the one file it writes on
a machine with IPUs, here the SDK fakes of tests/fakes/ put on the steps' ``PYTHONPATH`` as the Poplar
SDK's enable script puts the SDK there (as tests/unit/test_doctor.py does); a failing or crashing step
recorded while the others run; the one line on a machine without IPUs; a ``DIR`` it cannot write.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any
from typing import Callable

import pytest

from pytest_ipu import __version__
from pytest_ipu.cli import first_contact
from pytest_ipu.cli import main as cli
from pytest_ipu.cli.doctor import Machine
from pytest_ipu.devices import driver_ids
from tests.fakes import fake_gcipuinfo
from tests.fakes import fake_popart

REPO = Path(__file__).resolve().parents[2]

#: ``import popart``: the PopART fake over {ipus} IPUs. {extra} may patch it.
POPART_SHIM = """
import sys
from tests.fakes import fake_popart
popart = fake_popart.make_module(ipus={ipus})
{extra}
sys.modules[__name__] = popart
"""
#: ``import poptorch``: the PopTorch fake over {ipus} IPUs. {extra} may patch it.
POPTORCH_SHIM = """
import sys
from tests.fakes import fake_poptorch
fake_poptorch.configure(ipus={ipus})
{extra}
sys.modules[__name__] = fake_poptorch
"""
#: ``import gcipuinfo``: the gcipuinfo fake listing an IPU-Machine's four IPUs (or none).
GCIPUINFO_SHIM = """
import sys
from tests.fakes import fake_gcipuinfo
gcipuinfo = fake_gcipuinfo.FakeGcIpuInfoModule(fake_gcipuinfo.m2000() if {ipus} else [])
{extra}
sys.modules[__name__] = gcipuinfo
"""
#: ``import popdist``: the popdist fake, an instance of a PopRun launch when ``FAKE_POPDIST`` says so.
POPDIST_SHIM = """
import os
import sys
from tests.fakes import fake_popdist
fake_popdist.configure_from_environ(os.environ)
sys.modules[__name__] = fake_popdist
"""

#: The two PopTorch instance workers' calls meet: each, inside its call, waits until the other
#: worker's call of the same round has begun (files in ``FIRST_CONTACT_MEET``), so the two calls of
#: every round overlap. ``ProcessInstances`` names its workers ``pytest-ipu-instance-N``.
POPTORCH_MEET = """
import multiprocessing
import os
import time
from pathlib import Path
_calls = [0]
_call = fake_poptorch.PoplarExecutor.__call__
def _meeting_call(self, *args, **kwargs):
    if multiprocessing.current_process().name.startswith("pytest-ipu-instance-"):
        _calls[0] += 1
        meet = Path(os.environ["FIRST_CONTACT_MEET"])
        (meet / f"call{_calls[0]}.{os.getpid()}").touch()
        deadline = time.monotonic() + 120
        while len(list(meet.glob(f"call{_calls[0]}.*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
    return _call(self, *args, **kwargs)
fake_poptorch.PoplarExecutor.__call__ = _meeting_call
"""
#: The two PopART instance threads' runs meet at a barrier inside the call (``ThreadInstances``
#: names its threads ``pytest-ipu-instance-N``), so the two calls of every round overlap.
POPART_MEET = """
import threading
_both = threading.Barrier(2, timeout=120)
_run = popart.InferenceSession.run
def _meeting_run(self, *args, **kwargs):
    if threading.current_thread().name.startswith("pytest-ipu-instance-"):
        _both.wait()
    return _run(self, *args, **kwargs)
popart.InferenceSession.run = _meeting_run
"""


def _site(tmp_path: Path, ipus: int, *, popart: str = "", poptorch: str = "", gcipuinfo: str = "") -> Path:
    """A directory as the SDK's enable script would put on ``PYTHONPATH``, with the fakes over ``ipus``."""
    site = tmp_path / "sdk"
    site.mkdir()
    shims = {
        "popart": POPART_SHIM.format(ipus=ipus, extra=textwrap.dedent(popart)),
        "poptorch": POPTORCH_SHIM.format(ipus=ipus, extra=textwrap.dedent(poptorch)),
        "gcipuinfo": GCIPUINFO_SHIM.format(ipus=ipus, extra=textwrap.dedent(gcipuinfo)),
        "popdist": POPDIST_SHIM,
    }
    for name, text in shims.items():
        (site / f"{name}.py").write_text(text)
    return site


def _machine(tmp_path: Path, site: Path | None, **environ: str) -> Machine:
    """The machine the steps see: this environment (less pytest's and mpirun's), the fakes first on
    ``PYTHONPATH`` when ``site`` is given, and ``environ`` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "OMPI_", "POPDIST_"))}
    env.pop("FAKE_POPDIST", None)
    env["PYTHONPATH"] = os.pathsep.join([*([str(site)] if site else []), str(REPO)])
    env.update(environ)
    return Machine(environ=env, which=lambda name: None, nvidia_proc=tmp_path / "no-nvidia")


def _written(out: Path, stdout: str) -> dict[str, Any]:
    """The one file in ``out``, whose path is the last line of ``stdout``."""
    files = list(out.iterdir())
    assert [str(f) for f in files] == [stdout.splitlines()[-1]]
    assert re.fullmatch(r"first-contact-\d{8}T\d{6}Z-\d+(-instance-\d+-of-\d+)?\.json", files[0].name)
    data: dict[str, Any] = json.loads(files[0].read_text())
    return data


def _ok(data: dict[str, Any], step: str) -> dict[str, Any]:
    record = data["steps"][step]
    assert record["status"] == "ok", record
    result: dict[str, Any] = record["result"]
    return result


def _assert_overlap_from_timestamps(result: dict[str, Any]) -> None:
    """Each round's ``overlapped`` is the order of its calls' timestamps: each began before the
    other ended; the step's ``overlapped`` is every round's."""
    assert len(result["rounds"]) == first_contact.ROUNDS
    for round_ in result["rounds"]:
        a, b = round_["calls"]
        assert a["start_s"] <= a["end_s"]
        assert b["start_s"] <= b["end_s"]
        assert round_["overlapped"] is (a["start_s"] < b["end_s"] and b["start_s"] < a["end_s"])
    together = sum(r["overlapped"] for r in result["rounds"])
    assert result["overlapped_rounds"] == together
    assert result["overlapped"] is (together == first_contact.ROUNDS)


# -- on a machine with IPUs (the fakes) -----------------------------------------------------------------


def _check_ipus(data: dict[str, Any]) -> None:
    ipus = _ok(data, "ipus")
    assert ipus["found"] is True
    assert [i["id"] for i in ipus["inventory"]["ipus"]] == [0, 1, 2, 3]
    assert ipus["inventory"]["source"] == "gcipuinfo"


def _check_gcipuinfo(data: dict[str, Any]) -> None:
    # getDevices() verbatim: what the library lists, every key and string as it gave them.
    listing = fake_gcipuinfo.FakeGcIpuInfoModule(fake_gcipuinfo.m2000()).gcipuinfo().getDevices()
    gcipuinfo = _ok(data, "gcipuinfo")
    assert gcipuinfo["devices"] == listing
    assert json.loads(gcipuinfo["devices_as_json"]) == listing
    assert all(gcipuinfo["object_has"].values())
    # The exact names getDevices() returned, and how many of the M2000's 4 IPUs list each key the
    # plugin reads: an idle IPU lists no "user process id", an M2000 no "total board power".
    names = gcipuinfo["attribute_names"]
    assert names["names"] == sorted({key for device in listing for key in device})
    assert names["per_device"] == [sorted(device) for device in listing]
    assert names["read_by_the_plugin"] == {
        "id": 4,
        "ipu architecture": 4,
        "board ipu index": 4,
        "board serial number": 4,
        "board type": 4,
        "total board power": 0,
        "ipu power": 4,
        "user process id": 0,
    }
    update = gcipuinfo["update_data"]
    assert update["calls"] == first_contact.UPDATE_CALLS
    assert 0 < update["min_s"] <= update["median_s"] <= update["max_s"]
    assert update["returned"] == [True] * first_contact.UPDATE_CALLS


def _check_popart_devices(data: dict[str, Any]) -> None:
    # The ids PopART lists per device size, with the IPUs (driverIds) of each multi-IPU device.
    manager = fake_popart.make_module(ipus=4).DeviceManager()
    enumerated = _ok(data, "popart_devices")["enumerateDevices"]
    assert list(enumerated) == ["1", "2", "4", "8"]
    for size, devices in enumerated.items():
        listed = manager.enumerateDevices(numIpus=int(size))
        assert [(d["id"], d["numIpus"], d["driverIds"]) for d in devices] == [
            (d.id, d.numIpus, list(d.driverIds)) for d in listed
        ]
    # The fake's driver ids are not gc-info's ids: each pair's IPUs come from the translation.
    assert [d["driverIds"] for d in enumerated["2"]] == [[67, 66], [65, 64]]
    translation = _ok(data, "popart_devices")["driver_id_translation"]
    assert translation == driver_ids.read(fake_popart.make_module(ipus=4)).as_json()
    assert [d["ipu_ids"] for d in translation["multi_ipu_devices"]] == [[0, 1], [2, 3], [0, 1, 2, 3]]
    assert translation["driver_ids_differ_from_device_ids"] is True
    assert translation["mismatches"] == []


def _check_poptorch_devices(data: dict[str, Any]) -> None:
    poptorch = _ok(data, "poptorch_devices")
    assert poptorch["ipuHardwareIsAvailable"] == {"1": True, "2": True, "4": True, "8": False}
    assert poptorch["ipuHardwareVersion"] == 2


def _check_run(data: dict[str, Any], step: str, backend: str) -> None:
    run = _ok(data, step)
    assert run["target"] == f"{backend}:ipu"
    assert run["compile_s"] > 0
    assert len(run["run_s"]) == first_contact.RUNS
    assert all(seconds > 0 for seconds in run["run_s"])
    assert run["output_matches_host"] is True


def _check_popart_run(data: dict[str, Any]) -> None:
    _check_run(data, "popart_run", "popart")
    assert _ok(data, "popart_run")["device_latency"] is None  # PopART has no latency counters


def _check_poptorch_run(data: dict[str, Any]) -> None:
    _check_run(data, "poptorch_run", "poptorch")
    # PopTorch's own counters (getLatency and the others), as the plugin reads them.
    latency = _ok(data, "poptorch_run")["device_latency"]
    assert set(latency["round_trip"]) == {"min_s", "max_s", "avg_s"}
    assert latency["samples"] >= 1


def _check_overlap(data: dict[str, Any], step: str, runner: str) -> None:
    # Two instances calling at once; the fakes' calls meet inside each round, so every round overlapped.
    overlap = _ok(data, step)
    assert overlap["runner"] == runner
    assert [i["index"] for i in overlap["instances"]] == [0, 1]
    assert all(i["compile_s"] > 0 for i in overlap["instances"])
    _assert_overlap_from_timestamps(overlap)
    assert overlap["overlapped"] is True


def _check_popart_threads(data: dict[str, Any]) -> None:
    _check_overlap(data, "popart_threads", "threads")


def _check_poptorch_processes(data: dict[str, Any]) -> None:
    _check_overlap(data, "poptorch_processes", "processes")
    # While the two PopTorch workers held their IPUs: gcipuinfo named each worker as its IPU's user
    # (a decimal string), and the plugin matched each worker's pid to exactly its own IPU.
    users = _ok(data, "poptorch_processes")["ipu_users"]
    workers = users["process_ids"]
    assert len(set(workers)) == 2
    matched = users["ipus_by_process"]
    assert sorted(len(matched[str(pid)]) for pid in workers) == [1, 1]
    assert {matched[str(pid)][0] for pid in workers} == {0, 1}
    listed = users["user_process_id"]
    assert {listed[str(matched[str(pid)][0])] for pid in workers} == {str(pid) for pid in workers}


def _check_popdist(data: dict[str, Any]) -> None:
    popdist = _ok(data, "popdist")
    assert popdist["under_poprun"] is False
    assert popdist["reason"] == "not under PopRun: popdist.isPopdistEnvSet() is False"


def _check_poprun_inference(step: str) -> Callable[[dict[str, Any]], None]:
    def check(data: dict[str, Any]) -> None:
        # Outside PopRun both ways of making inference options say why they did not run.
        assert _ok(data, step) == {
            "under_poprun": False,
            "reason": "not under PopRun: popdist.isPopdistEnvSet() is False",
        }

    return check


def _check_versions(data: dict[str, Any]) -> None:
    versions = _ok(data, "versions")
    assert versions["pytest_ipu"] == __version__
    assert versions["imported"]["popart"]["versionString()"] == "3.4.0 (fake)"
    assert versions["imported"]["poptorch"]["__version__"] == "3.4.0-fake"
    assert "Poplar SDK" in [row["name"] for row in versions["installed"]]


def _check_host(data: dict[str, Any]) -> None:
    assert _ok(data, "host")["cpu_count"] == os.cpu_count()


#: What each step's record must hold on a machine with four (fake) IPUs.
CHECKS = {
    "ipus": _check_ipus,
    "host": _check_host,
    "versions": _check_versions,
    "gcipuinfo": _check_gcipuinfo,
    "popart_devices": _check_popart_devices,
    "poptorch_devices": _check_poptorch_devices,
    "popdist": _check_popdist,
    "popart_run": _check_popart_run,
    "poptorch_run": _check_poptorch_run,
    "poptorch_popdist_inference": _check_poprun_inference("poptorch_popdist_inference"),
    "poptorch_poprun_inference": _check_poprun_inference("poptorch_poprun_inference"),
    "popart_threads": _check_popart_threads,
    "poptorch_processes": _check_poptorch_processes,
}
#: The steps in groups, each run by one test (``ipus`` runs in every run): each step starts an
#: interpreter, and those that compile import torch, so one run of them all is the slowest test here.
GROUPS = (
    (
        "host",
        "versions",
        "gcipuinfo",
        "popart_devices",
        "poptorch_devices",
        "popdist",
        "poptorch_popdist_inference",
        "poptorch_poprun_inference",
    ),
    ("popart_run", "poptorch_run"),
    ("popart_threads",),
    ("poptorch_processes",),
)


def test_every_step_is_checked_in_exactly_one_group():
    assert list(CHECKS) == [step.name for step in first_contact.STEPS]
    assert sorted(name for group in GROUPS for name in group) == sorted(set(CHECKS) - {"ipus"})


@pytest.mark.parametrize("group", GROUPS, ids=[group[0] for group in GROUPS])
def test_the_file_holds_every_step_on_a_machine_with_ipus(tmp_path, capsys, group):
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    meet = tmp_path / "meet"
    meet.mkdir()
    site = _site(tmp_path, 4, popart=POPART_MEET, poptorch=POPTORCH_MEET)
    out = tmp_path / "out" / "new"  # created when the file is written
    users = str(tmp_path / "ipu-users.json")  # which process attached which IPU, shared as the driver does
    code = first_contact.main(
        out,
        300,
        _machine(tmp_path, site, FIRST_CONTACT_MEET=str(meet), FAKE_GRAPHCORE_IPU_USERS=users),
        only=group,
    )
    stdout = capsys.readouterr().out
    data = _written(out, stdout)
    assert code == 0, json.dumps(data["failed_steps"])
    assert (data["kind"], data["pytest_ipu"], data["failed_steps"]) == (first_contact.KIND, __version__, [])
    # In the order of STEPS, whatever the order asked.
    assert list(data["steps"]) == [step.name for step in first_contact.STEPS if step.name in {"ipus", *group}]
    for step in data["steps"]:
        CHECKS[step](data)


def test_under_poprun_the_popdist_getters_are_recorded_and_the_file_names_the_instance(tmp_path, capsys):
    site = _site(tmp_path, 4)
    launch = json.dumps({"instance_index": 1, "num_instances": 2})
    machine = _machine(tmp_path, site, FAKE_POPDIST=launch, POPDIST_LOCAL_INSTANCE_INDEX="1")
    assert first_contact.main(tmp_path / "out", 300, machine, only=["popdist"]) == 0
    stdout = capsys.readouterr().out
    data = _written(tmp_path / "out", stdout)
    assert stdout.splitlines()[-1].endswith("-instance-1-of-2.json")
    assert list(data["steps"]) == ["ipus", "popdist"]
    popdist = _ok(data, "popdist")
    assert popdist["under_poprun"] is True
    assert popdist["getters"] == {
        "getInstanceIndex": 1,
        "getNumInstances": 2,
        "getLocalInstanceIndex": 1,
        "getNumLocalReplicas": 1,
        "getNumTotalReplicas": 2,
        "getNumIpusPerReplica": 1,
        "getDeviceId(1)": 1,
    }
    assert popdist["instance"] == {
        "index": 1,
        "count": 2,
        "local_index": 1,
        "replicas_local": 1,
        "replicas_total": 2,
        "ipus_per_replica": 1,
    }
    assert popdist["device"]["ipu_ids"] == [1]
    assert popdist["environment"] == {"POPDIST_LOCAL_INSTANCE_INDEX": "1"}


def test_under_poprun_both_ways_of_making_inference_options_are_tried_and_timed(tmp_path, capsys):
    pytest.importorskip("torch")
    site = _site(tmp_path, 4)
    # Instance 0 of 2, two local replicas each: PopDist's device for it is the pair (0, 1), id 4.
    launch = json.dumps({"instance_index": 0, "num_instances": 2, "replicas_local": 2})
    machine = _machine(tmp_path, site, FAKE_POPDIST=launch)
    steps = ["poptorch_popdist_inference", "poptorch_poprun_inference"]
    assert first_contact.main(tmp_path / "out", 300, machine, only=steps) == 0
    data = _written(tmp_path / "out", capsys.readouterr().out)
    assert list(data["steps"]) == ["ipus", *steps]
    popdist = _ok(data, "poptorch_popdist_inference")
    # What popdist.poptorch.Options set: the local replicas, the launch's process id and count, and
    # PopDist's device.
    assert popdist["options"] == {"replication_factor": 2, "process_id": 0, "num_processes": 2, "ipu_id": 4}
    plugin = _ok(data, "poptorch_poprun_inference")
    assert plugin["options"]["distributed"] == "disabled"
    # The plugin's model is one independent replica: on the first IPU of PopDist's pair.
    assert plugin["options"]["info"]["ipu_id"] == 0
    for result in (popdist, plugin):
        assert result["under_poprun"] is True
        assert result["output_matches_host"] is True
        assert result["coupling_delay_s"] == 0.0  # instance 0 starts at once; the others wait
        assert result["how_to_read"] == first_contact.COUPLING_RULE
        calls = result["calls"]
        assert len(calls) == first_contact.POPRUN_CALLS
        # In order: compiled, then each call after the one before.
        edges = [result["compile_unix_s"]["end"]] + [
            t for c in calls for t in (c["start_unix_s"], c["end_unix_s"])
        ]
        assert edges == sorted(edges)


def test_outside_poprun_the_poprun_inference_steps_say_why(tmp_path, capsys):
    site = _site(tmp_path, 4)
    steps = ["poptorch_popdist_inference", "poptorch_poprun_inference"]
    assert first_contact.main(tmp_path / "out", 300, _machine(tmp_path, site), only=steps) == 0
    data = _written(tmp_path / "out", capsys.readouterr().out)
    for step in steps:
        assert _ok(data, step) == {
            "under_poprun": False,
            "reason": "not under PopRun: popdist.isPopdistEnvSet() is False",
        }


def test_a_failing_step_and_a_crashing_one_are_recorded_and_the_others_still_run(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    site = _site(
        tmp_path,
        4,
        poptorch="""
        def _refuses(model, options=None):
            raise fake_poptorch.Error("the model does not compile")
        fake_poptorch.inferenceModel = _refuses
        """,
        # As an SDK library crashing the process would: no exception, no result line.
        gcipuinfo="""
        import os
        def _crashes(self):
            os._exit(70)
        fake_gcipuinfo.FakeGcIpuInfo.updateData = _crashes
        """,
    )
    only = ["gcipuinfo", "popart_run", "poptorch_run", "host"]
    assert first_contact.main(tmp_path / "out", 300, _machine(tmp_path, site), only=only) == 1
    data = _written(tmp_path / "out", capsys.readouterr().out)
    assert list(data["steps"]) == ["ipus", "host", "gcipuinfo", "popart_run", "poptorch_run"]
    assert data["failed_steps"] == ["gcipuinfo", "poptorch_run"]
    poptorch = data["steps"]["poptorch_run"]
    assert poptorch["status"] == "failed"
    assert poptorch["error"].startswith("CompileError: PopTorch could not compile Linear for poptorch:ipu")
    assert "the model does not compile" in poptorch["error"]
    assert any("Traceback" in line for line in poptorch["stderr_tail"])
    crashed = data["steps"]["gcipuinfo"]
    assert crashed["status"] == "failed"
    assert crashed["error"].startswith("its process exited with code 70")
    # The steps around them ran and worked.
    assert _ok(data, "popart_run")["output_matches_host"] is True
    assert _ok(data, "host")["cpu_count"] == os.cpu_count()


def test_a_backend_that_finds_no_ipu_fails_its_step_with_its_own_reason(tmp_path, capsys):
    pytest.importorskip("torch")
    # gcipuinfo lists IPUs, but PopTorch says there are none: its run step fails with the backend's
    # own reason, and no traceback (nothing raised unexpectedly).
    site = _site(tmp_path, 4, poptorch="fake_poptorch.configure(ipus=0)")
    assert first_contact.main(tmp_path / "out", 300, _machine(tmp_path, site), only=["poptorch_run"]) == 1
    data = _written(tmp_path / "out", capsys.readouterr().out)
    record = data["steps"]["poptorch_run"]
    assert record["status"] == "failed"
    assert record["error"].startswith(
        "no IPU: poptorch.ipuHardwareIsAvailable() is False (poptorch 3.4.0-fake)"
    )
    assert not any("Traceback" in line for line in record["stderr_tail"])


# -- without IPUs: one line, nothing written --------------------------------------------------------------


def test_without_the_sdk_it_says_so_in_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert first_contact.main(out, 300, _machine(tmp_path, None)) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    (line,) = captured.out.splitlines()
    assert line.startswith("pytest-ipu doctor --first-contact: no IPU here, nothing written: no IPU found (")
    for module in ("gcipuinfo", "popart", "poptorch"):
        assert f"{module}: not importable (ModuleNotFoundError: No module named '{module}')" in line
    assert not out.exists()


def test_with_the_sdk_but_no_ipu_it_says_what_each_module_answered(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    assert first_contact.main(out, 300, _machine(tmp_path, _site(tmp_path, 0))) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(
        "pytest-ipu doctor --first-contact: no IPU here, nothing written: no IPU found (gcipuinfo: lists no "
        "IPUs in the active partition; popart: DeviceManager().enumerateDevices() lists no IPU; poptorch: "
        "ipuHardwareIsAvailable() is False"
    )
    assert list(out.iterdir()) == []


def test_the_command_here_without_ipus_is_one_line_and_exit_0(tmp_path):
    """``pytest-ipu doctor --first-contact DIR`` as a user runs it, on this machine."""
    env = _machine(tmp_path, None).environ
    if env.get("POPLAR_SDK_ENABLED"):
        pytest.skip("a Poplar SDK is enabled here")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_ipu.cli", "doctor", "--first-contact", str(tmp_path / "out")],
        cwd=tmp_path,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 1
    assert proc.stdout.startswith("pytest-ipu doctor --first-contact: no IPU here, nothing written: ")
    assert not (tmp_path / "out").exists()


# -- bad usage --------------------------------------------------------------------------------------------


def test_a_dir_that_is_a_file_is_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text("{}")
    assert cli.main(["doctor", "--first-contact", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"pytest-ipu: doctor --first-contact {path}: is a file, not a directory; give a directory to write "
        "the result file into\n"
    )
    below = path / "more"
    assert cli.main(["doctor", "--first-contact", str(below)]) == 2
    assert capsys.readouterr().err == (
        f"pytest-ipu: doctor --first-contact {below}: cannot be created: {path} is a file, not a directory; "
        "give a directory to write the result file into\n"
    )
    assert path.read_text() == "{}"


@pytest.fixture
def unwritable_dir(tmp_path: Path):
    """A directory this process cannot create files in: a read-only one, or, for root (whom
    permissions do not stop), /sys, when the kernel refuses files there."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
        yield locked
        locked.chmod(stat.S_IRWXU)
        return
    try:
        with tempfile.TemporaryFile(dir="/sys"):
            pass
    except OSError:
        yield Path("/sys")
        return
    pytest.skip("running as root, and /sys accepts files here")


def test_a_dir_that_cannot_be_written_is_one_line_and_exit_2(unwritable_dir, capsys):
    target = unwritable_dir / "first-contact"
    assert cli.main(["doctor", "--first-contact", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pytest-ipu: doctor --first-contact {target}: {unwritable_dir} is not writable (")
    assert err.endswith("); give a directory you can write to\n")
    assert err.count("\n") == 1
    assert not target.exists()


def test_a_timeout_that_is_not_positive_is_bad_usage(tmp_path, capsys):
    assert cli.main(["doctor", "--first-contact", str(tmp_path), "--timeout", "-1"]) == 2
    assert capsys.readouterr().err == (
        "pytest-ipu: doctor --timeout -1: not a positive number of seconds up to 86400; give e.g. 300\n"
    )


# -- pieces -------------------------------------------------------------------------------------------------


def test_overlap_is_decided_by_the_order_of_the_timestamps():
    assert first_contact.overlapped((0, 10), (5, 15))
    assert first_contact.overlapped((5, 15), (0, 10))
    assert first_contact.overlapped((0, 10), (2, 3))  # one inside the other
    assert not first_contact.overlapped((0, 10), (10, 20))  # one began as the other ended
    assert not first_contact.overlapped((30, 40), (0, 10))
    report = first_contact.overlap_report([[(100, 110), (200, 210)], [(105, 115), (210, 220)]])
    assert [r["overlapped"] for r in report["rounds"]] == [True, False]
    assert (report["overlapped_rounds"], report["overlapped"]) == (1, False)
    assert report["rounds"][0]["calls"] == [
        {"start_s": 0.0, "end_s": pytest.approx(10e-9)},
        {"start_s": pytest.approx(5e-9), "end_s": pytest.approx(15e-9)},
    ]
