"""The record's reference page is generated from the dataclasses, and every attribute is its JSON key."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings

from pytest_ipu.backports import zip_strict
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.results import fields
from pytest_ipu.results import schema
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import NotTimed
from tests.unit.test_schema import records

PAGE = Path(__file__).resolve().parents[2] / "docs" / "record.md"

#: Attributes a part's JSON leaves out when they hold nothing (``PlacementRecord.as_json``; a
#: record's ``counts`` where the target keeps none).
OMITTED_WHEN_EMPTY = (None, False, {})


def test_the_page_is_what_the_dataclasses_say() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert page == fields.rewrite(page), "docs/record.md is stale: run `python -m pytest_ipu.results.fields`"


@pytest.mark.parametrize(("cls", "properties"), [(c, p) for c, _, p in fields.CLASSES], ids=lambda v: str(v))
def test_every_attribute_is_documented(cls: type, properties: tuple[str, ...]) -> None:
    undocumented = [f.name for f in fields.field_docs(cls, properties) if not f.doc]
    assert not undocumented, f"{cls.__name__}: add a `#:` comment above {undocumented}"


def test_the_page_names_every_field_of_the_record() -> None:
    page = PAGE.read_text(encoding="utf-8")
    for f in dataclasses.fields(IpuRecord):
        assert f"| `{f.name}` |" in page


def _attribute_names(obj: object) -> set[str]:
    names = {f.name for f in dataclasses.fields(obj)}  # type: ignore[arg-type]
    return names | {n for n in dir(type(obj)) if isinstance(getattr(type(obj), n, None), property)}


def _same(attribute: object, stored: object, where: str) -> None:
    """``stored`` (JSON) holds what ``attribute`` (Python) holds, under the same names throughout."""
    if dataclasses.is_dataclass(attribute) and not isinstance(attribute, type):
        assert isinstance(stored, dict), where
        names = _attribute_names(attribute)
        assert set(stored) <= names, f"{where}: JSON keys without an attribute: {set(stored) - names}"
        for name in {f.name for f in dataclasses.fields(attribute)} - set(stored):
            assert getattr(attribute, name) in OMITTED_WHEN_EMPTY, f"{where}.{name} is not in the JSON"
        for key, value in stored.items():
            _same(getattr(attribute, key), value, f"{where}.{key}")
    elif isinstance(attribute, tuple):
        assert isinstance(stored, list), where
        assert len(stored) == len(attribute), where
        for i, (a, s) in enumerate(zip_strict(attribute, stored)):
            _same(a, s, f"{where}[{i}]")
    elif isinstance(attribute, Mapping):
        assert dict(attribute) == stored, where
    else:
        assert attribute == stored, where


@settings(max_examples=60, deadline=None)
@given(record=records())
def test_attribute_names_are_the_json_keys(record: IpuRecord) -> None:
    data = schema.to_json(record)
    assert data.pop("schema") == schema.SCHEMA_VERSION  # the one key with no attribute
    # The record's latency summary keeps its round count and unsupported percentiles at the top
    # level of the JSON (``rounds``, ``latency_unsupported``), where schema 1 put them.
    latency: dict[str, Any] = data["latency_s"]
    data["latency_s"] = {**latency, "rounds": data["rounds"], "unsupported": data["latency_unsupported"]}
    _same(record, data, "record")
    assert record.timed is True


def test_a_record_that_was_not_timed_names_the_reason_for_every_figure() -> None:
    record = NotTimed("torch:cpu", "torch", "cpu", "CPU", "fp32", "host", 8, 8, "benchmarking is disabled")
    assert record.timed is False
    assert record.batch_size == 8
    with pytest.raises(AttributeError, match=r"record\.throughput_items_per_s: .*benchmarking is disabled"):
        _ = record.throughput_items_per_s
    with pytest.raises(AttributeError, match=r"record\.latency_s: .*record\.timed"):
        _ = record.latency_s
    with pytest.raises(AttributeError, match="'NotTimed' object has no attribute 'nonsense'"):
        _ = record.nonsense


def test_latency_summary_attributes_are_the_keys_under_latency_s() -> None:
    names = {f.name for f in dataclasses.fields(LatencySummary)}
    assert {"min", "p50", "p90", "p99", "max", "mean"} <= names
