"""``ipu_power`` blocks: the device check, their JSON entries read back from a run file (older files
without them included), and their terminal table."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu import power
from pytest_ipu.backports import remove_prefix
from pytest_ipu.report import power_blocks as report
from pytest_ipu.results import benchmark_json
from pytest_ipu.results.benchmark_json import RunFileError
from pytest_ipu.results.power_blocks import MAX_ERROR_CHARS
from pytest_ipu.results.power_blocks import PowerBlock
from pytest_ipu.results.power_blocks import describe_error
from pytest_ipu.results.records import DeviceEnergy
from pytest_ipu.results.records import PowerRecord

OFF = PowerRecord(measured=False, source="off", reason="power measurement is off", window_s=0.25, items=160)
MEASURED = PowerRecord(
    measured=True,
    source="rapl",
    method="counter",
    integration="counter_delta",
    devices=(DeviceEnergy("rapl:package-0", "package-0", "cpu-package", 12.0, 40.0, 5.0),),
    energy_j=12.0,
    mean_power_w=40.0,
    idle_power_w=5.0,
    items=160,
    energy_per_item_j=12.0 / 160,
    items_per_j=160 / 12.0,
    samples=3,
    sample_hz_requested=2.0,
    sample_hz_achieved=2.0,
    update_period_s=0.001,
    window_s=0.3,
    valid=True,
    warnings=("low confidence: window 0.3 s < 5 s (the rounds were fixed)",),
    low_confidence=True,
)
BLOCKS = (
    PowerBlock("tests/test_x.py::test_a", 1, "cpu", MEASURED),
    PowerBlock("tests/test_x.py::test_a", 2, "cuda:0", OFF, "ZeroDivisionError: division by zero"),
)


# -- the device check --------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "host", "cuda", "cuda:0", "cuda:12", "ipu", "ipu:0", "ipu:0,1"])
def test_compute_device_spellings_are_accepted(device):
    assert power.check_device(device) == device


@pytest.mark.parametrize(
    ("device", "shown"),
    [
        ("gpu7", "'gpu7'"),
        ("", "''"),
        ("cuda:", "'cuda:'"),
        ("CUDA:0", "'CUDA:0'"),
        ("cuda:0 ", "'cuda:0 '"),
        ("cuda:0\n", "'cuda:0\\n'"),
        ("cpu:0,1", "'cpu:0,1'"),
        ("ipu:", "'ipu:'"),
        (7, "7 (int)"),
        (None, "None (NoneType)"),
    ],
)
def test_anything_else_is_refused_naming_it_and_the_spellings(device, shown):
    with pytest.raises(ValueError, match="is not a compute device") as caught:
        power.check_device(device)
    message = str(caught.value)
    assert message.startswith(f"{shown} is not a compute device: expected 'cpu', 'host', 'cuda', 'cuda:N'")
    assert "\n" not in message


# -- errors as entries keep them ---------------------------------------------------------------------


def test_an_error_is_its_type_and_the_first_line_of_its_message():
    assert describe_error(ZeroDivisionError("division by zero")) == "ZeroDivisionError: division by zero"
    assert describe_error(AssertionError("first\nsecond")) == "AssertionError: first"
    assert describe_error(KeyboardInterrupt()) == "KeyboardInterrupt"
    long = describe_error(ValueError("x" * 1000))
    assert len(long) == MAX_ERROR_CHARS
    assert long.startswith("ValueError: xxx")
    assert long.endswith("...")


# -- reading them back -------------------------------------------------------------------------------


def _run(section: dict[str, Any] | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "machine_info": {},
        "commit_info": {},
        "benchmarks": [],
        "datetime": "2025-01-01T00:00:00",
        "version": "5.3.1",
    }
    if section is not None:
        data[benchmark_json.TOP_LEVEL_KEY] = section
    return data


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _with_blocks(*entries: object) -> dict[str, Any]:
    return _run({"schema": 2, "power_blocks": list(entries)})


def test_blocks_are_read_back_as_written(tmp_path):
    entries = [b.as_json() for b in BLOCKS]
    assert json.loads(json.dumps(entries, allow_nan=False)) == entries
    run = benchmark_json.read_run(_write(tmp_path, _with_blocks(*entries)))
    assert run.power_blocks == BLOCKS
    assert run.benchmarks == ()


@pytest.mark.parametrize("section", [None, {"schema": 2}, {"schema": 2, "power_blocks": None}])
def test_a_file_without_blocks_has_none(tmp_path, section):
    # Files written without pytest-ipu, or before the blocks were kept.
    assert benchmark_json.read_run(_write(tmp_path, _run(section))).power_blocks == ()


def _entry(**changes: Any) -> dict[str, Any]:
    entry = BLOCKS[0].as_json()
    for key, value in changes.items():
        if key.startswith("power."):
            entry["power"] = {**entry["power"], remove_prefix(key, "power."): value}
        else:
            entry[key] = value
    return entry


@pytest.mark.parametrize(
    ("entry", "key", "problem"),
    [
        (_entry(**{"power.energy_j": -1.0}), "power_blocks[0].power.energy_j", "it must be >= 0"),
        (_entry(**{"power.window_s": math.inf}), "power_blocks[0].power.window_s", "finite"),
        (_entry(**{"power.items": 1.5}), "power_blocks[0].power.items", "whole number"),
        (_entry(**{"power.measured": "yes"}), "power_blocks[0].power.measured", "true or false"),
        (_entry(power=None), "power_blocks[0].power", "JSON object"),
        (_entry(index=0), "power_blocks[0].index", ">= 1"),
        (_entry(index=True), "power_blocks[0].index", ">= 1"),
        (_entry(test=3), "power_blocks[0].test", "string"),
        (_entry(device=None), "power_blocks[0].device", "string"),
        (_entry(error=["boom"]), "power_blocks[0].error", "string or null"),
        ("block", "power_blocks[0]", "JSON object"),
    ],
)
def test_a_bad_block_is_refused_naming_the_file_and_the_key(tmp_path, entry, key, problem):
    path = _write(tmp_path, _with_blocks(entry))
    with pytest.raises(RunFileError) as caught:
        benchmark_json.read_run(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: malformed pytest-ipu ")
    assert f"'pytest_ipu.{key}' is " in message
    assert problem in message


def test_nan_in_a_block_is_refused(tmp_path):
    path = tmp_path / "run.json"
    entry = _entry(**{"power.mean_power_w": math.nan})
    path.write_text(json.dumps(_with_blocks(entry)), encoding="utf-8")  # json writes NaN
    with pytest.raises(RunFileError, match=r"'pytest_ipu\.power_blocks\[0\]\.power\.mean_power_w' is nan"):
        benchmark_json.read_run(path)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"power_blocks": {"0": {}}}, "'pytest_ipu.power_blocks' is an object: it must be a list"),
        (["power_blocks"], "'pytest_ipu' is a list: it must be a JSON object"),
    ],
)
def test_a_bad_section_or_list_is_refused(tmp_path, section, message):
    data = _run(None)
    data[benchmark_json.TOP_LEVEL_KEY] = section
    path = _write(tmp_path, data)
    with pytest.raises(RunFileError) as caught:
        benchmark_json.read_run(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


# -- the terminal table ------------------------------------------------------------------------------


def _cells(line: str) -> list[str]:
    return line.split()


def test_the_table_shows_each_block_its_figures_and_why_some_are_absent():
    lines = report.lines(BLOCKS)
    assert lines[0] == report.TITLE
    assert _cells(lines[1]) == list(report.HEADERS)
    assert set(lines[2]) == {"-"}
    measured, off = lines[3], lines[4]
    # W, J, J/item and items/J of a measured low-confidence block, each marked "~".
    assert _cells(measured)[:9] == [
        "tests/test_x.py::test_a",
        "1",
        "cpu",
        "300",
        "ms",
        "160",
        "~40",
        "~12",
        "~0.075",
    ]
    assert _cells(measured)[9] == "~13.3"
    assert measured.endswith("~13.3")  # nothing to note
    # A block without a source: its window and items, "n/m" for every figure, and why.
    assert _cells(off)[:10] == ["tests/test_x.py::test_a", "2", "cuda:0", "250", "ms", "160"] + ["n/m"] * 4
    assert off.endswith(
        "not measured: power measurement is off; the block raised ZeroDivisionError: division by zero"
    )
    assert lines[5:] == [report.LOW_CONFIDENCE_NOTE]


def test_no_items_and_an_invalid_window_are_shown_as_such_never_as_zero():
    no_items = PowerRecord(
        measured=True, source="rapl", energy_j=3.0, mean_power_w=30.0, window_s=0.1, valid=True
    )
    invalid = PowerRecord(
        measured=True, source="rapl", window_s=0.1, items=4, reason="sampling failed: read 2 failed"
    )
    lines = report.lines([PowerBlock("t::a", 1, "cpu", no_items), PowerBlock("t::b", 1, "cpu", invalid)])
    assert _cells(lines[3])[3:] == ["100", "ms", "-", "30", "3", "-", "-"]
    assert _cells(lines[4])[3:10] == ["100", "ms", "4", "?", "?", "?", "?"]
    assert lines[4].endswith("invalid: sampling failed: read 2 failed")
    assert report.LOW_CONFIDENCE_NOTE not in lines
    assert report.lines([]) == []
