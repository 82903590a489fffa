"""Power end to end: a conftest power source, energy in the record and the table, power off, the
``auto`` choice without RAPL, the ``ipu_power`` fixture and the source's release at session end.

Every run is in-process and benchmarks plain callables (no torch). The conftest's source is the
deterministic fake (copied into the pytester directory): 50 W of instantaneous power with a 10 ms
update period, so it is sampled at 200 Hz and the shortest confident window is 5 s.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import fake_power

WATTS = 50.0
OFF_REASON = "power measurement is off (--ipu-power=off or the test's marker)"
NOT_MEASURED_NOTE = f"n/m = power not measured: {OFF_REASON}"
LOW_CONFIDENCE_NOTE = "~ = low confidence: the energy window is shorter than the sensor needs"


CONFTEST = """
import json
from pathlib import Path

from pw_fake_source import FakePowerSource

HERE = Path(__file__).parent
MADE = []


def pytest_ipu_make_power_source(config, name, device):
    if name != "rapl":
        return None

    def on_close():
        with (HERE / "closed.jsonl").open("a") as f:
            f.write(json.dumps({"device": device, "opens": source.opens, "reads": source.reads}) + "\\n")

    source = FakePowerSource("instant_power", 50.0, name="rapl", update_period_s=0.01, on_close=on_close)
    MADE.append(device)
    (HERE / "made.json").write_text(json.dumps(MADE))
    return source
"""

SPIN = """
import time


def spin(seconds=0.001):
    # busy-wait: a round lasts at least 1 ms of wall time, however loaded the machine
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
"""


def _with_fake_source(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(pw_fake_source=Path(fake_power.__file__).read_text())
    pytester.makeconftest(CONFTEST)


def _records(pytester: pytest.Pytester, name: str = "out.json") -> dict[str, dict[str, Any]]:
    data = json.loads((pytester.path / name).read_text())
    return {b["name"]: b["extra_info"]["ipu"] for b in data["benchmarks"]}


def _ipu_table_row(lines: list[str], benchmark: str) -> list[str]:
    """The cells of ``benchmark``'s row in a pytest-ipu table (not pytest-benchmark's)."""
    for i, line in enumerate(lines):
        if line.startswith("benchmark ") and "J/item" in line:
            row = lines[i + 2]
            if row.startswith(benchmark + " "):
                return row.split()
    raise AssertionError(f"no pytest-ipu table row for {benchmark}:\n" + "\n".join(lines))


def _power_cells(cells: list[str]) -> list[str]:
    """W, J/item and items/J: the three columns before what the energy covers (the fake RAPL
    package, one word, or ``n/m`` as they are), parity ('-' here) and the flags (one cell without
    spaces, whatever this machine's load flags)."""
    assert cells[-2] == "-", cells
    figures, scope = cells[-6:-3], cells[-3]
    assert scope == ("n/m" if figures == ["n/m"] * 3 else "cpu-package"), cells
    return figures


def _summary(pytester: pytest.Pytester, name: str = "out.json") -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("pytest-ipu")
    command = [str(exe)] if exe.exists() else [shutil.which("pytest-ipu") or "pytest-ipu"]
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run(
        [*command, "summary", str(pytester.path / name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


# -- auto rounds: the window is lengthened to the sensor's minimum ------------------------------------


MISSED = re.compile(r"^the sampler missed (\d+) of (\d+) scheduled reads \(> 10%\)$")


def test_auto_rounds_lengthen_the_window_and_record_energy(pytester: pytest.Pytester) -> None:
    """~5 s: the only run that measures a confident window."""
    _with_fake_source(pytester)
    pytester.makepyfile(
        test_pw_energy=SPIN
        + """

def test_energy(ipu_benchmark):
    ipu_benchmark(spin)
"""
    )
    result = pytester.runpytest(
        "--benchmark-json=out.json",
        "--ipu-idle=0.05",
        "--ipu-max-time=0.05",
        "--ipu-warmup-rounds=5",
    )
    result.assert_outcomes(passed=1)
    record = _records(pytester)["test_energy"]
    power = record["power"]
    assert power["measured"] is True
    assert power["valid"] is True
    assert power["source"] == "rapl"
    assert power["reason"] == ""
    assert (power["method"], power["integration"]) == ("sampled_power", "trapezoid")
    # --ipu-max-time=0.05 at 1 ms a round would give about 50 rounds; the budget was lengthened to
    # min_window_s = max(5 s, 20 x 0.01 s) = 5 s instead, and the rounds end once it is reached,
    # whatever the warm-up and calibration estimated (a busy machine inflates their estimate): at
    # most 5000 rounds of at least 1 ms each.
    assert record["rounds_policy"] == "auto"
    assert record["budget"]["budget_s"] == 5.0
    assert record["budget"]["ended"] == "budget", (record["rounds"], record["window_s"], record["budget"])
    assert record["window_s"] >= 5.0
    assert 5 <= record["rounds"] <= math.ceil(5.0 / 0.001)
    assert not any(w.startswith("low confidence") for w in power["warnings"]), power["warnings"]
    # The only warning a busy machine may add: a sampling thread that lost the CPU missed reads.
    # It is there only when the run's own count says more than 10% were missed.
    for warning in power["warnings"]:
        missed = MISSED.match(warning)
        assert missed is not None, power["warnings"]
        assert int(missed[1]) > 0.1 * int(missed[2])
    assert power["samples"] >= 10  # 5 s at 200 Hz; fewer would have added a warning
    assert power["window_s"] == pytest.approx(record["window_s"], rel=1e-9)
    assert power["energy_j"] == pytest.approx(WATTS * power["window_s"], rel=1e-6)
    assert power["mean_power_w"] == pytest.approx(WATTS, rel=1e-6)
    items = record["items_per_call"] * record["rounds"]
    assert power["items"] == items
    assert power["items_per_j"] == pytest.approx(items / power["energy_j"], rel=1e-9)
    assert power["energy_per_item_j"] == pytest.approx(power["energy_j"] / items, rel=1e-9)
    assert power["idle_power_w"] == pytest.approx(WATTS, rel=1e-6)
    assert power["update_period_s"] == 0.01
    assert power["sample_hz_requested"] == 200.0
    assert [d["id"] for d in power["devices"]] == ["fake:0"]
    assert power["devices"][0]["energy_j"] == pytest.approx(power["energy_j"])

    expected = [
        f"{power['mean_power_w']:.3g}",
        f"{power['energy_per_item_j']:.3g}",
        f"{power['items_per_j']:.3g}",
    ]
    assert expected[0] == "50"
    assert _power_cells(_ipu_table_row(result.outlines, "test_energy")) == expected
    assert not any(line.startswith(("n/m =", "~ =", "? =")) for line in result.outlines)

    summary = _summary(pytester)
    assert summary.returncode == 0, summary.stderr
    assert _power_cells(_ipu_table_row(summary.stdout.splitlines(), "test_energy")) == expected


# -- fixed rounds: a short window is flagged ---------------------------------------------------------


def test_fixed_rounds_give_a_low_confidence_window(pytester: pytest.Pytester) -> None:
    _with_fake_source(pytester)
    pytester.makepyfile(
        test_pw_short=SPIN
        + """

def test_short(ipu_benchmark):
    ipu_benchmark(spin)
"""
    )
    result = pytester.runpytest(
        "--benchmark-json=out.json", "--ipu-idle=0", "--ipu-rounds=10", "--ipu-power-hz=500"
    )
    result.assert_outcomes(passed=1)
    settings = json.loads((pytester.path / "out.json").read_text())["pytest_ipu"]["settings"]
    assert (settings["power"], settings["power_hz"], settings["idle_s"]) == ("auto", 500.0, 0.0)
    record = _records(pytester)["test_short"]
    assert (record["rounds"], record["rounds_policy"]) == (10, "fixed")  # not lengthened
    power = record["power"]
    assert power["measured"] is True
    assert power["valid"] is True
    assert power["idle_power_w"] is None  # --ipu-idle=0
    assert power["sample_hz_requested"] == 500.0  # --ipu-power-hz wins over 2 x the sensor's rate
    low = [w for w in power["warnings"] if w.startswith("low confidence")]
    assert len(low) == 1
    assert "< 5 s (the rounds were fixed)" in low[0]
    assert power["energy_j"] == pytest.approx(WATTS * power["window_s"], rel=1e-6)

    cells = _power_cells(_ipu_table_row(result.outlines, "test_short"))
    assert cells[0] == "~50"
    assert all(c.startswith("~") for c in cells)
    assert LOW_CONFIDENCE_NOTE in result.outlines

    summary = _summary(pytester)
    assert summary.returncode == 0, summary.stderr
    assert _power_cells(_ipu_table_row(summary.stdout.splitlines(), "test_short")) == cells
    assert LOW_CONFIDENCE_NOTE in summary.stdout.splitlines()


# -- power off ---------------------------------------------------------------------------------------

OFF_TESTS = (
    SPIN
    + """
import pytest


@pytest.mark.ipu(power="off")
def test_off(ipu_benchmark):
    ipu_benchmark(spin)


def test_on(ipu_benchmark):
    ipu_benchmark(spin)
"""
)


def _assert_not_measured(power: dict[str, Any], reason: str) -> None:
    assert power["measured"] is False
    assert power["reason"] == reason
    for key in ("energy_j", "mean_power_w", "energy_per_item_j", "items_per_j", "idle_power_w"):
        assert power[key] is None, key


def test_power_off_option_is_not_measured(pytester: pytest.Pytester) -> None:
    _with_fake_source(pytester)
    pytester.makepyfile(test_pw_off=OFF_TESTS)
    result = pytester.runpytest("--benchmark-json=out.json", "--ipu-power=off", "--ipu-rounds=3")
    result.assert_outcomes(passed=2)
    records = _records(pytester)
    for name in ("test_off", "test_on"):
        _assert_not_measured(records[name]["power"], OFF_REASON)
        assert records[name]["power"]["source"] == "off"
        assert _power_cells(_ipu_table_row(result.outlines, name)) == ["n/m"] * 3
    # One footnote per distinct reason, under each table (test_off's, test_on's) that needs it.
    assert result.outlines.count(NOT_MEASURED_NOTE) == 2
    assert not (pytester.path / "made.json").exists()  # no source is even made


def test_power_off_marker_turns_one_test_off(pytester: pytest.Pytester) -> None:
    _with_fake_source(pytester)
    pytester.makepyfile(test_pw_off=OFF_TESTS)
    result = pytester.runpytest("--benchmark-json=out.json", "--ipu-rounds=3", "--ipu-idle=0")
    result.assert_outcomes(passed=2)
    records = _records(pytester)
    _assert_not_measured(records["test_off"]["power"], OFF_REASON)
    assert records["test_on"]["power"]["measured"] is True
    assert records["test_on"]["power"]["source"] == "rapl"
    assert _power_cells(_ipu_table_row(result.outlines, "test_off")) == ["n/m"] * 3
    assert _power_cells(_ipu_table_row(result.outlines, "test_on"))[0] == "~50"
    assert NOT_MEASURED_NOTE in result.outlines


# -- auto without a source ---------------------------------------------------------------------------


@pytest.mark.skipif(
    Path("/sys/class/powercap").exists(), reason="this machine has powercap; RAPL may be available"
)
def test_auto_without_rapl_or_a_hook_says_why(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_pw_auto=SPIN
        + """

def test_auto(ipu_benchmark):
    ipu_benchmark(spin)
"""
    )
    result = pytester.runpytest("--benchmark-json=out.json", "--ipu-power=auto", "--ipu-rounds=3")
    result.assert_outcomes(passed=1)
    power = _records(pytester)["test_auto"]["power"]
    reason = power["reason"]
    assert reason.startswith("rapl unavailable: ")
    assert "/sys/class/powercap does not exist" in reason
    _assert_not_measured(power, reason)
    assert power["source"] == "rapl"
    assert _power_cells(_ipu_table_row(result.outlines, "test_auto")) == ["n/m"] * 3
    assert f"n/m = power not measured: {reason}" in result.outlines


def test_a_source_that_is_unavailable_or_fails_to_open_is_not_measured(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(pw_fake_source=Path(fake_power.__file__).read_text())
    pytester.makeconftest(
        """
        from pw_fake_source import FakePowerSource


        def pytest_ipu_make_power_source(config, name, device):
            if device == "host":
                return FakePowerSource(name="rapl", unavailable="no RAPL here (a VM)")
            return FakePowerSource(name="rapl", open_error="rapl: energy_uj: permission denied")
        """
    )
    pytester.makepyfile(
        test_pw_sources="""
        import json
        from pathlib import Path


        def test_host(ipu_benchmark):
            ipu_benchmark(lambda: None)


        def test_cpu_block(ipu_power):
            with ipu_power("cpu", items=4) as window:
                pass
            Path("block.json").write_text(json.dumps(window.result.as_json()))
        """
    )
    result = pytester.runpytest("--benchmark-json=out.json", "--ipu-rounds=3", "--ipu-idle=0")
    result.assert_outcomes(passed=2)
    _assert_not_measured(_records(pytester)["test_host"]["power"], "rapl unavailable: no RAPL here (a VM)")
    block = json.loads((pytester.path / "block.json").read_text())
    _assert_not_measured(block, "rapl failed to open: rapl: energy_uj: permission denied")


# -- option errors -----------------------------------------------------------------------------------


def test_a_bad_power_choice_is_a_usage_error_naming_the_choices(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_pw_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--ipu-power=bogus")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*pytest-ipu: invalid value 'bogus' for --ipu-power from the command line: "
            "expected one of auto, off, nvml, rapl, gcipuinfo"
        ]
    )


def test_a_bad_power_marker_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_pw_x="""
        import pytest

        @pytest.mark.ipu(power="wallplug")
        def test_x():
            pass
        """
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*test_pw_x.py::test_x: invalid value 'wallplug' for @pytest.mark.ipu(power=...): expected one of*"]
    )


# -- the ipu_power fixture, and the source's lifetime ------------------------------------------------

POWER_FIXTURE_TESTS = """
import json
import time
from pathlib import Path

import pytest


def _save(name, result):
    Path(name).write_text(json.dumps(result.as_json()))


def test_block(ipu_power):
    with ipu_power("cpu") as window:
        time.sleep(0.1)
        window.items = 10
    assert window.device == "cpu"
    _save("block.json", window.result)


def test_block_again(ipu_power):
    # the same meter, still open: the source was not closed after the first test
    with ipu_power("cpu", items=3) as window:
        time.sleep(0.02)
    _save("again.json", window.result)


def test_benchmark(ipu_benchmark):
    ipu_benchmark(lambda: time.sleep(0.001), rounds=5)


@pytest.mark.ipu(power="off")
def test_block_off(ipu_power):
    with ipu_power("cpu") as window:
        window.items = 10
    _save("off.json", window.result)
"""


def test_ipu_power_fixture_and_the_source_closed_at_session_end(pytester: pytest.Pytester) -> None:
    _with_fake_source(pytester)
    pytester.makepyfile(test_pw_fixture=POWER_FIXTURE_TESTS)
    result = pytester.runpytest("--benchmark-json=out.json", "--ipu-idle=0.05")
    result.assert_outcomes(passed=4)

    block = json.loads((pytester.path / "block.json").read_text())
    assert block["measured"] is True
    assert block["valid"] is True
    assert block["source"] == "rapl"
    assert block["items"] == 10
    assert block["window_s"] >= 0.1
    assert block["energy_j"] == pytest.approx(WATTS * block["window_s"], rel=1e-6)
    assert block["mean_power_w"] == pytest.approx(WATTS, rel=1e-6)
    assert block["items_per_j"] == pytest.approx(10 / block["energy_j"], rel=1e-9)
    assert block["idle_power_w"] == pytest.approx(WATTS, rel=1e-6)
    # low confidence exactly when the window is shorter than the sensor's 5 s (a 0.1 s block is)
    low = any(w.startswith("low confidence: window") for w in block["warnings"])
    assert low == (block["window_s"] < 5.0)

    again = json.loads((pytester.path / "again.json").read_text())
    assert again["measured"] is True
    assert again["valid"] is True
    assert again["items"] == 3
    assert again["idle_power_w"] == pytest.approx(WATTS, rel=1e-6)  # the baseline of the first open

    _assert_not_measured(json.loads((pytester.path / "off.json").read_text()), OFF_REASON)

    # one source per (source, device): the benchmark's "host" and the blocks' "cpu", each made,
    # opened (idle measured) once and closed once, at the end of the session
    made = json.loads((pytester.path / "made.json").read_text())
    assert sorted(made) == ["cpu", "host"]
    closed = [json.loads(line) for line in (pytester.path / "closed.jsonl").read_text().splitlines()]
    assert sorted(c["device"] for c in closed) == ["cpu", "host"]
    assert all(c["opens"] == 1 for c in closed)
    by_device = {c["device"]: c for c in closed}
    # the "cpu" source was read for both blocks, so it was still open for the second one
    assert by_device["cpu"]["reads"] >= 2 * 2 + 2
    assert _records(pytester)["test_benchmark"]["power"]["measured"] is True

    # The run had a benchmark, so pytest-benchmark wrote the file; every block is in it, as measured.
    blocks = json.loads((pytester.path / "out.json").read_text())["pytest_ipu"]["power_blocks"]
    saved = {"test_block": block, "test_block_again": again, "test_block_off": None}
    assert [(b["test"], b["index"], b["device"], b["error"]) for b in blocks] == [
        (f"test_pw_fixture.py::{name}", 1, "cpu", None) for name in saved
    ]
    assert blocks[0]["power"] == block
    assert blocks[1]["power"] == again
    row = _block_row(result.outlines, "test_pw_fixture.py::test_block")
    assert row[5:7] == ["10", "~50"]  # items, and W: 50 W over a window shorter than the sensor's 5 s


CLOSE_FAILS = """
from pw_fake_source import FakePowerSource


def pytest_ipu_make_power_source(config, name, device):
    def on_close():
        if device == "host":
            raise RuntimeError("sensor wedged")
        (__import__("pathlib").Path(__file__).parent / "cpu-closed").write_text("yes")

    return FakePowerSource(name="rapl", on_close=on_close)
"""

CLOSE_FAILS_TESTS = """
def test_host(ipu_benchmark):
    ipu_benchmark(lambda: None, rounds=3)


def test_cpu(ipu_power):
    with ipu_power("cpu"):
        pass
"""


def _run_with_a_failing_close(pytester: pytest.Pytester) -> pytest.RunResult:
    pytester.makepyfile(pw_fake_source=Path(fake_power.__file__).read_text())
    pytester.makeconftest(CLOSE_FAILS)
    pytester.makepyfile(test_pw_close=CLOSE_FAILS_TESTS)
    # Not with -W error: the warning is the behaviour under test.
    result = pytester.runpytest("--ipu-idle=0", "-W", "default")
    result.assert_outcomes(passed=2, warnings=1)
    return result


def test_a_failing_source_close_is_a_warning_and_the_others_are_still_closed(
    pytester: pytest.Pytester,
) -> None:
    result = _run_with_a_failing_close(pytester)
    result.stdout.fnmatch_lines(
        ["*PytestIpuWarning: pytest-ipu could not release *power source rapl: sensor wedged*"]
    )
    assert (pytester.path / "cpu-closed").read_text() == "yes"


def test_a_failing_source_close_is_not_called_a_compiled_model(pytester: pytest.Pytester) -> None:
    result = _run_with_a_failing_close(pytester)
    assert "could not release compiled models: power source" not in result.stdout.str()


# -- ipu_power blocks always record, and reach the JSON and the terminal ---------------------------

BLOCK_TESTS = """
import json
import time
from pathlib import Path

import pytest


def test_block(ipu_power):
    with ipu_power("cpu") as window:
        time.sleep(0.01)
        window.items = 160
    Path("block.json").write_text(json.dumps(window.result.as_json()))


def test_two_blocks_one_raises(ipu_power):
    with ipu_power("cuda:0", items=8):
        pass
    with pytest.raises(ZeroDivisionError):
        with ipu_power("ipu:1") as window:
            window.items = 4
            1 / 0
    # recorded up to where it raised, and the exception reached the test
    assert window.result.items == 4
    assert isinstance(window.result.window_s, float)  # the window was recorded, not left None
"""


def _block_row(lines: list[str], test: str) -> list[str]:
    """The cells of ``test``'s first row in the "ipu_power blocks" table."""
    start = next(i for i, line in enumerate(lines) if line.startswith("ipu_power blocks ("))
    for line in lines[start + 3 :]:
        if line.startswith(test + " "):
            return line.split()
    raise AssertionError(f"no ipu_power blocks row for {test}:\n" + "\n".join(lines))


def test_blocks_without_a_source_record_window_and_items_and_are_saved_without_benchmarks(
    pytester: pytest.Pytester,
) -> None:
    from pytest_ipu.results import benchmark_json

    pytester.makepyfile(test_pw_blocks=BLOCK_TESTS)
    # -W error (the inner runs' options): pytest-benchmark's "Not saving anything" would end the run.
    result = pytester.runpytest("--benchmark-json=out.json", "--benchmark-save=blocks", "--ipu-power=off")
    result.assert_outcomes(passed=2)
    assert "Not saving anything" not in result.stdout.str() + result.stderr.str()

    block = json.loads((pytester.path / "block.json").read_text())
    _assert_not_measured(block, OFF_REASON)
    assert isinstance(block["window_s"], float)  # recorded without a source
    assert block["items"] == 160

    # No benchmark ran, and still both files were written in pytest-benchmark's shape, with the blocks.
    data = json.loads((pytester.path / "out.json").read_text())
    assert data["benchmarks"] == []
    assert {"machine_info", "commit_info", "datetime", "version"} <= set(data)
    assert data["machine_info"]["ipu"]["pytest_ipu"]
    section = data["pytest_ipu"]
    assert section["settings"]["power"] == "off"
    blocks = section["power_blocks"]
    assert [(b["test"], b["index"], b["device"], b["error"]) for b in blocks] == [
        ("test_pw_blocks.py::test_block", 1, "cpu", None),
        ("test_pw_blocks.py::test_two_blocks_one_raises", 1, "cuda:0", None),
        ("test_pw_blocks.py::test_two_blocks_one_raises", 2, "ipu:1", "ZeroDivisionError: division by zero"),
    ]
    assert blocks[0]["power"] == block
    assert [b["power"]["items"] for b in blocks] == [160, 8, 4]
    for entry in blocks:
        _assert_not_measured(entry["power"], OFF_REASON)
        assert isinstance(entry["power"]["window_s"], float)
    assert not list(pytester.path.glob(".out.json.*"))  # moved into place whole
    stored = list(pytester.path.glob(".benchmarks/*/0001_blocks.json"))
    assert len(stored) == 1
    assert json.loads(stored[0].read_text())["pytest_ipu"]["power_blocks"] == blocks
    # The reader keeps them, typed and checked.
    run = benchmark_json.read_run(pytester.path / "out.json")
    assert [(b.test, b.index, b.power.items) for b in run.power_blocks] == [
        (b["test"], b["index"], b["power"]["items"]) for b in blocks
    ]

    # The terminal shows every block: its device, window and items, and why it has no energy.
    row = _block_row(result.outlines, "test_pw_blocks.py::test_block")
    assert row[1:3] == ["1", "cpu"]
    assert row[5:10] == ["160", "n/m", "n/m", "n/m", "n/m"]
    lines = [line for line in result.outlines if line.startswith("test_pw_blocks.py::")]
    assert len(lines) == 3
    assert lines[0].endswith(f"not measured: {OFF_REASON}")
    assert lines[2].endswith(
        f"not measured: {OFF_REASON}; the block raised ZeroDivisionError: division by zero"
    )


def test_a_measured_block_alone_is_saved_with_its_energy(pytester: pytest.Pytester) -> None:
    _with_fake_source(pytester)
    pytester.makepyfile(
        test_pw_one="""
        import time


        def test_block(ipu_power):
            with ipu_power("cpu", items=160):
                time.sleep(0.05)
        """
    )
    result = pytester.runpytest("--benchmark-json=out.json", "--ipu-idle=0")
    result.assert_outcomes(passed=1)
    (entry,) = json.loads((pytester.path / "out.json").read_text())["pytest_ipu"]["power_blocks"]
    power = entry["power"]
    assert (power["measured"], power["valid"], power["source"], power["items"]) == (True, True, "rapl", 160)
    assert isinstance(power["window_s"], float)
    assert power["energy_j"] == pytest.approx(WATTS * power["window_s"], rel=1e-6)
    assert power["items_per_j"] == pytest.approx(160 / power["energy_j"], rel=1e-9)
    row = _block_row(result.outlines, "test_pw_one.py::test_block")
    assert row[5:7] == ["160", "~50"]


BAD_BLOCK_TESTS = """
import pytest


@pytest.mark.parametrize("device", ["gpu7", "", 7])
def test_device(ipu_power, device):
    with ipu_power(device):
        pass


def test_items(ipu_power):
    with ipu_power("cpu") as window:
        window.items = "160"


def test_absent_index(ipu_power):
    # Well spelled: whether a cuda:99 exists is the power source's to say, in the record's reason.
    with ipu_power("cuda:99") as window:
        pass
    assert window.result.measured is False
    assert window.result.reason
"""


def _failure_lines(lines: list[str], test: str) -> list[str]:
    """The non-blank lines of ``test``'s entry in pytest's FAILURES section."""
    header = next(i for i, line in enumerate(lines) if line.startswith("_") and f" {test} " in line)
    body = []
    for line in lines[header + 1 :]:
        if line.startswith(("____", "====")):
            break
        if line.strip():
            body.append(line)
    return body


def test_an_unknown_device_fails_the_test_in_one_line_naming_it_and_the_devices(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_pw_bad=BAD_BLOCK_TESTS)
    result = pytester.runpytest("--ipu-power=auto", "-k", "test_device")
    result.assert_outcomes(failed=3)
    for test, shown in [
        ("test_device[gpu7]", "'gpu7'"),
        ("test_device[]", "''"),
        ("test_device[7]", "7 (int)"),
    ]:
        assert _failure_lines(result.outlines, test) == [
            f"pytest-ipu: ipu_power(device=...): {shown} is not a compute device: expected 'cpu', 'host', "
            "'cuda', 'cuda:N', 'ipu', 'ipu:N' or 'ipu:N,M' (N a device index), e.g. 'cuda:0'"
        ]


def test_bad_items_fail_in_one_line_and_a_well_spelled_absent_device_is_not_an_error(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_pw_bad=BAD_BLOCK_TESTS)
    result = pytester.runpytest("--ipu-power=auto", "-k", "items or absent_index")
    result.assert_outcomes(passed=1, failed=1)
    assert _failure_lines(result.outlines, "test_items") == [
        "pytest-ipu: window.items is '160': the items a block completed are a whole number >= 0; "
        "set window.items = N inside the block (or pass ipu_power(device, items=N))"
    ]


def test_blocks_that_cannot_be_saved_fail_the_run_in_one_line_and_sources_are_still_closed(
    pytester: pytest.Pytester,
) -> None:
    _with_fake_source(pytester)
    pytester.makepyfile(test_pw_one="def test_block(ipu_power):\n    with ipu_power('cpu'):\n        pass\n")
    (pytester.path / "not-a-dir").write_text("")
    result = pytester.runpytest("--benchmark-save=x", "--benchmark-storage=not-a-dir/runs", "--ipu-idle=0")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # The storage's own writer says it, as for any run it cannot save.
    lines = [line for line in result.outlines if line.startswith("pytest-ipu: cannot save")]
    assert len(lines) == 1, result.outlines
    assert lines[0].startswith("pytest-ipu: cannot save the run into the benchmark storage as ")
    assert "not-a-dir" in lines[0]
    # Not a full disk: the fix is a writable storage, not free space.
    assert lines[0].endswith("Not a directory; nothing was saved there (pass a writable --benchmark-storage)")
    closed = [json.loads(line) for line in (pytester.path / "closed.jsonl").read_text().splitlines()]
    assert [c["device"] for c in closed] == ["cpu"]
