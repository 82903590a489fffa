"""The metric registry (``catalog.METRICS``) is the one declaration of a metric: docs/ci.md lists
exactly its metrics, with their units and directions, and every reader goes through it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_ipu.results import gates
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.records import RepeatRecord
from tests.unit.test_schema import CPU
from tests.unit.test_schema import CYCLES
from tests.unit.test_schema import INSTRUCTIONS
from tests.unit.test_schema import make_record

PAGE = Path(__file__).resolve().parents[2] / "docs" / "ci.md"

#: A row of the metric table in docs/ci.md: metric, unit, better, meaning.
ROW = re.compile(r"^\| `([a-z_.0-9]+)` \| ([^|]+?) \| (lower|higher) \| [^|]+\|$")


def documented() -> dict[str, tuple[str, str]]:
    """The metric table of docs/ci.md: each metric's unit and better direction."""
    rows = [ROW.match(line) for line in PAGE.read_text(encoding="utf-8").splitlines()]
    return {m.group(1): (m.group(2), m.group(3)) for m in rows if m is not None}


def test_every_registry_metric_is_documented_and_nothing_else() -> None:
    table = documented()
    assert sorted(set(METRICS) - set(table)) == [], "add a row to docs/ci.md's metric table"
    assert sorted(set(table) - set(METRICS)) == [], "docs/ci.md lists a metric the registry lacks"
    assert list(table) == list(METRICS), "docs/ci.md's metric table is in the registry's order"
    for name, metric in METRICS.items():
        assert table[name] == (metric.unit, metric.better), name


def test_the_gate_grammar_names_the_registry_rather_than_a_list() -> None:
    doc = gates.__doc__ or ""
    assert "catalog.METRICS" in doc
    # The metric list lives in the registry and docs/ci.md only.
    assert "loadgen.early_stopping_latency" not in doc


@pytest.mark.parametrize("name", list(METRICS))
def test_every_metric_parses_as_a_gate(name: str) -> None:
    metric = METRICS[name]
    sign = "-" if metric.better == "higher" else "+"
    assert gates.parse(f"{name}:{sign}5%").metric == name


def test_a_repeat_has_only_the_per_repeat_metrics() -> None:
    record = make_record()
    repeat = RepeatRecord(
        1,
        10,
        0.5,
        record.latency_s,
        20.0,
        cpu=CPU,
        counts={"ipu_cycles": CYCLES, "host_instructions": INSTRUCTIONS},
    )
    for name, metric in METRICS.items():
        assert (repeat.value(name) is not None) == metric.per_repeat, name
    assert repeat.value("no.such.metric") is None


def test_a_missing_value_says_why() -> None:
    record = make_record(power=None, compile_s=None)
    assert METRICS["energy"].why_missing(record) == "power not measured (the record has no power section)"
    assert "not a compiled model" in METRICS["compile"].why_missing(record)
    assert "not a LoadGen benchmark" in METRICS["loadgen.p99"].why_missing(record)
    assert (
        METRICS["time_to_train"].why_missing(record) == "the record has no value at time_to_train.olympic_s"
    )
    assert "predates it" in METRICS["cpu_time"].why_missing(record)


def test_cpu_time_of_instances_in_worker_processes_that_reported_none_is_missing_for_that_reason() -> None:
    from pytest_ipu.results.records import PlacementRecord

    placed = PlacementRecord(2, 1, 1, 1, "processes", True, ("cpu", "cpu"))
    record = make_record(placement=placed)
    for name in ("cpu_time", "host_cpu_per_item", "host_cores"):
        assert record.value(name) is None
        assert "worker processes that reported none" in METRICS[name].why_missing(record)


def test_a_record_of_no_timed_rounds_says_so_for_its_cpu_metrics() -> None:
    from dataclasses import replace

    from tests.unit.test_schema import LOADGEN

    record = make_record(loadgen=LOADGEN)
    assert METRICS["host_cores"].why_missing(record) == (
        "no CPU time: a LoadGen record written before LoadGen runs measured their host cost"
    )
    assert "predates" in METRICS["host_cores"].why_missing(replace(record, loadgen=None))


def test_the_host_cost_is_per_repeat_lower_is_better_and_gates_parse_it() -> None:
    per_item, cores = METRICS["host_cpu_per_item"], METRICS["host_cores"]
    assert (per_item.path, per_item.unit, per_item.better, per_item.per_repeat) == (
        ("cpu", "host_per_item_s"),
        "s",
        "lower",
        True,
    )
    assert (cores.path, cores.unit, cores.better, cores.per_repeat) == (
        ("cpu", "host_cores"),
        "cores",
        "lower",
        True,
    )
    record = make_record(cpu=CPU)
    assert (record.value("host_cpu_per_item"), record.value("host_cores")) == (
        CPU.host_per_item_s,
        CPU.host_cores,
    )
    assert gates.parse("host_cpu_per_item<5ms").threshold == 0.005
    assert gates.parse("host_cores<2").threshold == 2.0
    assert gates.parse("host_cores<1.5 cores").threshold == 1.5
    assert gates.parse("host_cores:+10%").metric == "host_cores"


def test_cpu_time_is_the_process_cpu_time_per_round_and_lower_is_better() -> None:
    metric = METRICS["cpu_time"]
    assert (metric.path, metric.unit, metric.better, metric.per_repeat) == (
        ("cpu", "process_s"),
        "s",
        "lower",
        True,
    )
    assert make_record(cpu=CPU).value("cpu_time") == CPU.process_s
    assert gates.parse("cpu_time:+5%").metric == "cpu_time"
    assert gates.parse("cpu_time<3ms").threshold == 0.003
