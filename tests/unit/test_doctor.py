"""``pytest-ipu doctor`` (pytest_ipu/cli/doctor.py): what it finds installed, the incompatibility lines, the
probes of targets in child processes (with the SDK fakes of tests/fakes/ put on ``PYTHONPATH``, as the
Poplar SDK's enable script puts popart there), the exit codes, and the real command on this machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.cli import doctor
from pytest_ipu.cli import main as cli
from pytest_ipu.cli.doctor import Check
from pytest_ipu.cli.doctor import Installed
from pytest_ipu.cli.doctor import Machine
from tests.fakes import fake_popart

REPO = Path(__file__).resolve().parents[2]

#: ``import popart`` loads the PopART fake the way the SDK's ``popart/__init__.py`` does: refused
#: after onnx (fake_popart.IMPORT_ERROR), a machine without IPUs.
POPART_SHIM = """
import sys
from tests.fakes import fake_popart
if "onnx" in sys.modules:
    raise ImportError(fake_popart.IMPORT_ERROR)
sys.modules[__name__] = fake_popart.make_module(ipus={ipus})
"""
#: ``import poptorch`` gives the PopTorch fake, on a machine without IPU hardware.
POPTORCH_SHIM = """
import sys
from tests.fakes import fake_poptorch
fake_poptorch.configure(ipus=0)
{extra}
sys.modules[__name__] = fake_poptorch
"""


def _sdk_dir(tmp_path: Path, *, poptorch_extra: str = "", startup: str = "", popart_ipus: int = 0) -> Path:
    """A directory as the SDK's enable script would put on ``PYTHONPATH``: popart, poptorch with its
    wheel's metadata (version 3.4.0), and optionally a ``sitecustomize`` run at interpreter start-up."""
    site = tmp_path / "sdk"
    site.mkdir()
    (site / "popart.py").write_text(POPART_SHIM.format(ipus=popart_ipus))
    (site / "poptorch.py").write_text(POPTORCH_SHIM.format(extra=textwrap.dedent(poptorch_extra)))
    info = site / "poptorch-3.4.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: poptorch\nVersion: 3.4.0\n")
    if startup:
        (site / "sitecustomize.py").write_text(startup)
    return site


@pytest.fixture
def sdk_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Makes a ``Machine`` whose probes (and this process's look-ups) find the SDK fakes."""

    def make(**kwargs: Any) -> Machine:
        site = _sdk_dir(tmp_path, **kwargs)
        monkeypatch.syspath_prepend(str(site))  # the doctor's own look-ups (find_spec, metadata)
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "OMPI_"))}
        environ["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO)])
        return Machine(environ=environ, which=lambda name: None, nvidia_proc=tmp_path / "no-nvidia")

    return make


def _check(report: doctor.Report, name: str) -> Check:
    return next(c for c in report.checks if c.name == name)


# -- with the SDK fakes ---------------------------------------------------------------------------------


def test_the_ipu_model_targets_run_with_the_sdk_fakes(sdk_machine):
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    machine = sdk_machine()
    names = ["popart:ipu", "popart:ipu-model", "poptorch:ipu", "poptorch:ipu-model"]
    report = doctor.diagnose(machine, timeout_s=300, only=names)
    assert sorted(c.name for c in report.checks) == names
    for name in ("popart:ipu-model", "poptorch:ipu-model"):
        check = _check(report, name)
        assert check.status == "works"
        assert check.detail.startswith("compiled and ran a torch Linear(4, 2) on IPU Model simulator")
    # The fakes' machine has no IPU: the hardware targets are absent, with the SDK's reason.
    assert _check(report, "popart:ipu").status == "absent"
    assert "PopART 3.4.0 finds no IPU" in _check(report, "popart:ipu").detail
    assert _check(report, "poptorch:ipu").status == "absent"
    assert report.exit_code == 0
    assert not report.ipu_present
    text = doctor.render(report)
    assert "IPU: no IPU is present or usable here (poptorch:ipu and popart:ipu say why above)" in text
    installed = {i.name: i for i in report.installed}
    assert installed["poptorch"].version == "3.4.0"
    assert installed["popart"].version == "present"  # on PYTHONPATH, without package metadata
    # Each probe ran in a process of its own, where popart was imported before anything imported onnx.
    assert not any(c.facts["onnx_imported_first"] for c in report.checks)


def test_the_doctor_prints_both_enumerations_and_the_driver_id_translation(sdk_machine):
    # Four IPUs whose driver ids (67..64) are not their gc-info -l ids (0..3).
    report = doctor.diagnose(sdk_machine(popart_ipus=4), timeout_s=300, only=[doctor.DEVICES])
    assert report.devices is not None
    assert report.devices.status == "works"
    assert report.devices.detail == "4 single-IPU and 3 multi-IPU device(s), 0 mismatch(es)"
    text = doctor.render(report)
    assert (
        "IPU devices (PopART's enumerateDevices; driverIds -> gc-info -l ids): 4 single-IPU and 3 "
        "multi-IPU device(s), 0 mismatch(es)\n  numIpus=1: 4 device(s) (id <- driverIds)\n    0 <- [67]\n"
    ) in text
    assert "\n    4 (2 IPUs): [67, 66] -> [0, 1]\n" in text
    assert report.as_json()["ipu_devices"]["table"]["driver_id_to_device_id"] == {
        "64": 3,
        "65": 2,
        "66": 1,
        "67": 0,
    }
    assert not any(f.problem.startswith("PopART's device listing") for f in report.findings)


def test_a_device_listing_mismatch_is_a_finding(tmp_path):
    listing = doctor.DeviceListing(
        "works", "", {"mismatches": ["2-IPU device 2 lists driver id(s) 12, which no single-IPU device has"]}
    )
    (finding,) = doctor.findings([], [], _machine(tmp_path), listing)
    assert finding.problem == (
        "PopART's device listing: 2-IPU device 2 lists driver id(s) 12, which no single-IPU device has"
    )


def test_poptorch_with_another_torch_is_one_line_with_the_fix(sdk_machine):
    torch_version = doctor._dist_version("torch")
    if torch_version is None or torch_version.startswith("2.0.1"):
        pytest.skip("needs a torch other than 2.0.1 installed")
    machine = sdk_machine()
    lines = [f.line() for f in doctor.findings(doctor.installed(machine), [], machine)]
    expected = (
        f"poptorch 3.4.0 needs torch==2.0.1 exactly (it asserts so at import) but torch {torch_version} is "
        "installed; fix: pip install torch==2.0.1 in this environment (poptorch's own requirement; its "
        "wheel names the CPU build from download.pytorch.org/whl/cpu)"
    )
    assert expected in lines


def test_onnx_imported_before_popart_fails_the_popart_target_with_its_line(sdk_machine):
    pytest.importorskip("onnx")
    machine = sdk_machine(startup="import onnx\n")
    report = doctor.diagnose(machine, timeout_s=300, only=["popart:ipu-model"])
    check = _check(report, "popart:ipu-model")
    assert check.status == "FAILED"  # popart is installed, but cannot be imported in that process
    assert check.detail.startswith(f"popart cannot be imported: {fake_popart.IMPORT_ERROR}")
    assert check.facts["onnx_imported_first"] is True
    assert (
        "onnx was imported before popart at start-up (a sitecustomize or .pth file imports it), and popart "
        "refuses to be imported after onnx; fix: remove that start-up import of onnx; in tests, "
        "'import popart' first thing in conftest.py"
    ) in [f.line() for f in report.findings]
    assert report.exit_code == 1


def test_a_present_target_whose_compile_raises_makes_exit_code_1(sdk_machine):
    pytest.importorskip("torch")
    machine = sdk_machine(
        poptorch_extra="""
        def _refuses(model, options=None):
            raise fake_poptorch.Error("the model does not compile")
        fake_poptorch.inferenceModel = _refuses
        """
    )
    report = doctor.diagnose(machine, timeout_s=300, only=["poptorch:ipu-model"])
    check = _check(report, "poptorch:ipu-model")
    assert check.status == "FAILED"
    assert "the model does not compile" in check.detail
    assert report.exit_code == 1
    assert doctor.render(report).endswith("FAILED: poptorch:ipu-model")
    assert report.as_json()["exit_code"] == 1


def test_a_probe_that_never_finishes_is_killed_and_failed(sdk_machine):
    pytest.importorskip("torch")
    machine = sdk_machine(
        poptorch_extra="""
        import time
        def _hangs(model, options=None):
            time.sleep(3600)
        fake_poptorch.inferenceModel = _hangs
        """
    )
    # Killed at the timeout wherever the probe is then (importing torch, or in the hanging call).
    report = doctor.diagnose(machine, timeout_s=2, only=["poptorch:ipu-model"])
    check = _check(report, "poptorch:ipu-model")
    assert check.status == "FAILED"
    assert check.detail.startswith("did not finish within 2 s and was killed")


# -- findings from facts -----------------------------------------------------------------------------


def _rows(**versions: str) -> list[Installed]:
    return [Installed(name, version) for name, version in versions.items()]


def _machine(tmp_path: Path, environ: dict[str, str] | None = None, which: dict[str, str] | None = None):
    found = which or {}
    return Machine(environ=environ or {}, which=found.get, nvidia_proc=tmp_path / "no-nvidia")


def test_no_finding_holds_for_a_plain_cpu_environment(tmp_path):
    rows = _rows(torch="2.13.0", numpy="2.4.6", onnxruntime="1.31.1", **{"nvidia-ml-py": "13.615.71"})
    assert doctor.findings(rows, [], _machine(tmp_path)) == []


def test_popart_with_numpy_2_is_one_line(tmp_path):
    lines = [
        f.line() for f in doctor.findings(_rows(popart="present", numpy="2.4.6"), [], _machine(tmp_path))
    ]
    assert (
        "PopART 3.4 is built for numpy 1.x (it pins numpy==1.22.3) but numpy 2.4.6 is installed; fix: "
        "pip install numpy==1.22.3 (or another 1.x) in the popart targets' environment"
    ) in lines
    found = doctor.findings(_rows(popart="present", numpy="1.22.3"), [], _machine(tmp_path))
    assert not any("numpy" in f.problem for f in found)


def test_an_sdk_for_another_python_is_said_unless_its_target_works(tmp_path):
    machine = _machine(tmp_path, {"POPLAR_SDK_ENABLED": "/opt/poplar_sdk-ubuntu_20_04-3.4.0+1507/poplar"})
    lines = [f.problem for f in doctor.findings([], [], machine)]
    if sys.version_info[:2] == (3, 8):
        assert lines == []
    else:
        assert any("built for CPython 3.8 only" in line for line in lines)
    works = [Check("target", "popart:ipu-model", "works", "ran")]
    assert not any("CPython 3.8" in f.problem for f in doctor.findings([], works, machine))


def test_running_under_mpirun_is_one_line(tmp_path):
    machine = _machine(tmp_path, {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"})
    (finding,) = doctor.findings([], [], machine)
    assert finding.problem.startswith("OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 is set")
    assert finding.fix.startswith("run pytest-ipu doctor outside mpirun/poprun")


def test_both_onnxruntime_packages_are_one_line(tmp_path):
    rows = _rows(onnxruntime="1.18.0", **{"onnxruntime-gpu": "1.18.0"})
    (finding,) = doctor.findings(rows, [], _machine(tmp_path))
    assert finding.problem.startswith("onnxruntime and onnxruntime-gpu are both installed")


@pytest.mark.parametrize("sign", ["nvidia-smi", "proc"])
def test_a_visible_gpu_without_nvidia_ml_py_is_one_line(tmp_path, sign):
    machine = _machine(tmp_path, which={"nvidia-smi": "/usr/bin/nvidia-smi"} if sign == "nvidia-smi" else {})
    if sign == "proc":
        machine = Machine(environ={}, which=machine.which, nvidia_proc=tmp_path)  # a directory that exists
    (finding,) = doctor.findings([], [], machine)
    assert finding.line() == (
        "an NVIDIA GPU is visible (nvidia-smi or /proc/driver/nvidia) but nvidia-ml-py is not installed, so "
        "GPU energy is not measured; fix: pip install 'pytest-ipu[nvidia]' (nvidia-ml-py)"
    )
    assert doctor.findings(_rows(**{"nvidia-ml-py": "13.615.71"}), [], machine) == []


# -- pieces ------------------------------------------------------------------------------------------------


def test_the_hand_encoded_onnx_model_is_valid_and_adds_its_input_to_itself():
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import numpy as np

    data = doctor.tiny_onnx_model()
    onnx.checker.check_model(onnx.load_from_string(data))
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (y,) = session.run(None, {"x": x})
    np.testing.assert_array_equal(y, x + x)


def test_every_target_and_power_source_is_probed_and_opt_in_targets_only_with_all():
    by_name = {name: run for _, name, run in doctor.probe_names(include_opt_in=False)}
    always = ["popart:ipu-model", "poptorch:ipu-model", "torch:cpu", "rapl", "nvml", "gcipuinfo"]
    assert [by_name[name] for name in always] == [True] * len(always)
    assert not by_name["torch-compile:cpu"]
    assert all(run for _, _, run in doctor.probe_names(include_opt_in=True))


def test_a_timeout_that_is_not_positive_is_bad_usage(capsys):
    assert cli.main(["doctor", "--timeout", "0"]) == 2
    assert capsys.readouterr().err == (
        "pytest-ipu: doctor --timeout 0: not a positive number of seconds up to 86400; give e.g. 300\n"
    )


# -- the real command on this machine ---------------------------------------------------------------------


def test_the_command_here_works_and_says_there_is_no_ipu():
    """``pytest-ipu doctor`` on this machine, as a user runs it."""
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "OMPI_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_ipu.cli", "doctor"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if "POPLAR_SDK_ENABLED=" in proc.stdout:
        pytest.skip("a Poplar SDK is enabled here")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "IPU: no IPU is present or usable here (poptorch:ipu and popart:ipu say why above)" in proc.stdout
    status = {
        row[0]: row[1] for row in (line.split(None, 2) for line in proc.stdout.splitlines()) if len(row) > 1
    }
    assert status["torch:cpu"] == "works"
    assert (status["popart:ipu"], status["poptorch:ipu"]) == ("absent", "absent")
    assert "FAILED" not in status.values()
    assert proc.stdout.rstrip().endswith("every present target and power source works")


def test_mlperf_loadgen_is_listed_among_the_installed_packages(tmp_path):
    """The `loadgen` extra's package is a row of its own, installed or not."""
    names = [row.name for row in doctor.installed(_machine(tmp_path))]
    assert "mlcommons-loadgen" in names
