"""Fuzz of the run-file readers (``benchmark_json.parse_run``, and through it ``schema.from_json``).

Start from valid runs (the golden files and a schema-2 record with every part), replace or delete
fields at any depth with arbitrary JSON values (null, bools, huge whole numbers, NaN and Infinity,
strings, lists, objects, deep nesting), and require one of two outcomes: a run whose every number is
usable (finite and >= 0), or ``RunFileError`` with a one-line message. Any other exception
(``TypeError``, ``KeyError``, ``OverflowError``, ``RecursionError``...) is a bug. A run that is read
must also survive ``pytest-ipu compare``'s pairing and rendering.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.measure.contention import ContentionRecord
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.report import compare as compare_report
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import compare
from pytest_ipu.results import schema
from pytest_ipu.results.records import BudgetRecord
from pytest_ipu.results.records import DeviceEnergy
from pytest_ipu.results.records import InstanceRecord
from pytest_ipu.results.records import ParityRecord
from pytest_ipu.results.records import PlacementRecord
from pytest_ipu.results.records import PowerRecord
from pytest_ipu.results.records import RepeatRecord
from pytest_ipu.results.records import StabilityRecord
from tests.unit.run_files import bench
from tests.unit.run_files import record

GOLDEN = Path(__file__).parent.parent / "golden"
PATH = Path("fuzzed.json")

Key = typing.Union[str, int]


def _full_record() -> dict[str, Any]:
    """A schema-2 record with every optional part, so that the fuzzer reaches each reader."""
    lat = LatencySummary(0.001, 0.002, 0.003, 0.004, 0.005, 0.0025, 40, ("p99",))
    base = schema.from_json(record(4, 0.002, 2000.0))
    full = dataclasses.replace(
        base,
        compile_phases_s={"trace": 0.1},
        compile_info={"threads": 2},
        parity=ParityRecord("torch eager fp32 on cpu", 1e-7, 1e-6, 1e-3),
        power=PowerRecord(
            measured=True,
            source="rapl",
            method="counter",
            integration="counter",
            devices=(DeviceEnergy("rapl:0", "package 0", "cpu-package", 5.0, 5.0, 1.0),),
            energy_j=5.0,
            mean_power_w=5.0,
            idle_power_w=1.0,
            items=160,
            energy_per_item_j=0.03,
            items_per_j=32.0,
            samples=10,
            sample_hz_requested=100.0,
            sample_hz_achieved=99.0,
            update_period_s=0.001,
            window_s=1.0,
            valid=True,
            warnings=("low confidence: short",),
            low_confidence=True,
        ),
        placement=PlacementRecord(2, 1, 1, 1, "threads", True, ("cpu", "cpu"), ipu_ids=((0,), (1,))),
        instances=tuple(
            InstanceRecord(i, "torch:cpu", "cpu", "CPU", 0.5, {}, {}, calls=40, latency_s=lat)
            for i in range(2)
        ),
        device_latency={"resolution_s": 1e-6},
        repeats=tuple(RepeatRecord(i, 40, 0.3, lat, 2000.0) for i in range(3)),
        budget=BudgetRecord(2.0, 10.0, 1.0, "planned"),
        stability=StabilityRecord(3, "process", 0.01, 0.02, 0.05, False),
        contention=ContentionRecord(True, "", 1.0, 4, 0.01, 0.9, None, 0.5),
    )
    return schema.to_json(full)


def _bases() -> list[str]:
    """The valid runs the fuzzer starts from, as JSON text (each example parses its own copy)."""
    built = bench(4, 0.002, 2000.0)
    built["extra_info"]["ipu"] = _full_record()
    texts = [json.dumps({"machine_info": {"cpu": {"brand_raw": "Xeon"}}, "benchmarks": [built]})]
    for name in ("schema-v1.json", "pytest-benchmark-5.2.0.json"):
        data = json.loads((GOLDEN / name).read_text(encoding="utf-8"))
        # machine_info is free-form and large (the CPU flags); its own keys are enough here.
        data["machine_info"] = {k: v for k, v in data["machine_info"].items() if k != "cpu"}
        texts.append(json.dumps(data))
    return texts


BASES = _bases()


def _paths(value: Any, prefix: tuple[Key, ...] = ()) -> list[tuple[Key, ...]]:
    """Every place in a document: each key of every object and each index of every list (only the
    first three entries of a list, which is where its readers differ)."""
    out: list[tuple[Key, ...]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out.append((*prefix, key))
            out.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):
            out.append((*prefix, index))
            out.extend(_paths(item, (*prefix, index)))
    return out


PATHS = [(n, path) for n, text in enumerate(BASES) for path in _paths(json.loads(text))]


@dataclasses.dataclass(frozen=True)
class Deep:
    """Stands for JSON nested ``depth`` levels deep, built only when applied: hypothesis prints the
    examples it draws, and printing a value thousands deep would itself recurse too deep."""

    depth: int

    def build(self) -> Any:
        value: Any = 1.0
        for i in range(self.depth):
            value = [value] if i % 2 else {"x": value}
        return value


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.sampled_from([0, -1, 2**53 + 1, 10**400, -(10**400), 0.0, -0.0, -1e-9])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
) | st.integers(min_value=1, max_value=5000).map(Deep)

#: A mutation: a place, and a value to put there (``None`` from ``st.none()`` is JSON null; the
#: marker below deletes the key instead).
DELETE = object()
mutations = st.tuples(st.sampled_from(PATHS), st.just(DELETE) | json_values)


def _apply(documents: dict[int, Any], base: int, path: tuple[Key, ...], value: Any) -> None:
    target = documents[base]
    for key in path[:-1]:
        # An earlier mutation may have replaced a container on this path: then this one is moot.
        fits = isinstance(key, int) and isinstance(target, list) and key < len(target)
        if not (fits or (isinstance(key, str) and isinstance(target, dict) and key in target)):
            return
        target = target[key]
    last = path[-1]
    if isinstance(value, Deep):
        value = value.build()
    if isinstance(target, dict) and isinstance(last, str):
        if value is DELETE:
            target.pop(last, None)
        else:
            target[last] = value
    elif isinstance(target, list) and isinstance(last, int) and last < len(target):
        if value is DELETE:
            del target[last]
        else:
            target[last] = value


def _assert_usable(value: Any, where: str) -> None:
    """Every number of a typed record is finite and >= 0; free-form objects hold no NaN or Infinity."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        assert math.isfinite(value), f"{where} = {value!r}"
        assert value >= 0, f"{where} = {value!r}"
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if isinstance(value, ParityRecord) and f.name in ("max_abs", "max_rel") and item == math.inf:
                continue  # a non-finite output's parity: +Infinity, and it fails (backends.parity)
            _assert_usable(item, f"{where}.{f.name}")
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            _assert_usable(item, f"{where}[{i}]")
    elif isinstance(value, Mapping):
        _assert_finite_anywhere(value, where)
    else:
        raise AssertionError(f"{where}: unexpected {type(value).__name__}")


def _assert_finite_anywhere(value: Any, where: str) -> None:
    stack = [(where, value)]
    while stack:
        name, item = stack.pop()
        if isinstance(item, float):
            assert math.isfinite(item), f"{name} = {item!r}"
        elif isinstance(item, Mapping):
            stack.extend((f"{name}.{k}", v) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{name}[{i}]", v) for i, v in enumerate(item))


def _check(document: Any) -> None:
    """The property: ``document`` is read whole, with usable numbers, or refused in one line."""
    try:
        run = benchmark_json.parse_run(document, PATH)
    except benchmark_json.RunFileError as exc:
        message = str(exc)
        assert message.startswith(f"{PATH}: ")
        assert "\n" not in message
        assert len(message) < 600, message
        return
    for stored in run.benchmarks:
        assert isinstance(stored.name, str)
        assert isinstance(stored.fullname, str)
        assert stored.group is None or isinstance(stored.group, str)
        _assert_usable(stored.record, f"{stored.fullname}.record")
        _assert_usable(stored.samples_s or (), f"{stored.fullname}.samples_s")
        _assert_usable(tuple(stored.stats.values()), f"{stored.fullname}.stats")
    # What compare does with a run read: pair it, render every format.
    comparison = compare.compare_runs([run, run])
    for render in compare_report.RENDERERS.values():
        render(comparison)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutations, min_size=1, max_size=3))
def test_a_mutated_run_is_read_whole_or_refused_in_one_line(changes: list[Any]) -> None:
    documents = {n: json.loads(text) for n, text in enumerate(BASES)}
    base = changes[0][0][0]
    for (n, path), value in changes:
        if n == base:
            _apply(documents, base, path, value)
    _check(documents[base])


#: The values every place gets in turn below: each kind a reader can trip on (with their test ids).
NASTY: tuple[Any, ...] = (DELETE, None, "x", -1, 1.5, math.nan, math.inf, 10**400, [], {}, Deep(3000))
NASTY_IDS = ("delete", "null", "str", "negative", "fraction", "nan", "inf", "huge", "list", "object", "deep")

#: The base runs checked at every place. The pytest-benchmark 5.2.0 golden file (the third) holds the
#: same benchmarks as the schema-1 one, so it is left to the fuzzer.
EXHAUSTIVE_BASES = [n for n in range(len(BASES)) if n != 2]


# One case per base run and nasty value (each a few seconds; all of them in one test took over 20 s).
@pytest.mark.parametrize("value", NASTY, ids=NASTY_IDS)
@pytest.mark.parametrize("n", EXHAUSTIVE_BASES, ids=lambda n: f"base{n}")
def test_every_place_with_every_nasty_value(n: int, value: Any) -> None:
    # Exhaustive where the fuzzer samples: one place and one value at a time, every place of the base
    # run (a random sample of thousands of places can miss a rare key, such as a flag of the
    # contention object).
    places = [path for m, path in PATHS if m == n]
    assert places
    for path in places:
        document = json.loads(BASES[n])
        _apply({n: document}, n, path, value)
        try:
            _check(document)
        except Exception as exc:
            raise AssertionError(f"{path} = {value!r}: {type(exc).__name__}: {exc}") from exc
