"""``ipu_loadgen``'s arguments checked before anything runs (pytest_ipu.loadgen.request.build): each
bad one is a one-line ``ValueError`` that starts ``ipu_loadgen(`` and names the value. The keywords
and their defaults are the fixture's signature (``Loadgen.__call__``), the one place they are
written: these tests read them there."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.loadgen.request import DEFAULT_MAX_BATCH
from pytest_ipu.loadgen.request import LoadgenRequest
from pytest_ipu.loadgen.request import build
from pytest_ipu.pytest_plugin.fixtures.calls import Loadgen

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _keywords() -> dict[str, inspect.Parameter]:
    """LoadGen's keywords as ``ipu_loadgen``'s signature declares them: their one statement."""
    parameters = inspect.signature(Loadgen.__call__).parameters
    return {n: p for n, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}


def request(**changes: Any) -> LoadgenRequest:
    """``build`` as a call of ``ipu_loadgen`` with ``changes`` passes it: every keyword, the
    signature's defaults for those not changed."""
    unknown = set(changes) - set(_keywords())
    assert not unknown, f"ipu_loadgen takes no {unknown}"
    return build({n: changes.get(n, p.default) for n, p in _keywords().items()})


def test_the_docs_table_names_every_keyword_with_its_default() -> None:
    """docs/loadgen.md's keyword table is the signature's: each keyword, its default, in its order."""
    page = (DOCS / "loadgen.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| (`[^`]*`)? \|", page, flags=re.MULTILINE)
    documented = [(name, default) for name, default in rows if name not in ("model", "samples")]

    def shown(value: object) -> str:
        return f'`"{value}"`' if isinstance(value, str) else f"`{value!r}`"

    assert documented == [(n, shown(p.default)) for n, p in _keywords().items()]


def test_build_reads_every_keyword_the_signature_declares() -> None:
    """A keyword added to the signature and not to ``build`` would be taken and ignored."""
    read: set[str] = set()

    class Recording(dict):  # type: ignore[type-arg]
        def __getitem__(self, name: str) -> object:
            read.add(name)
            return super().__getitem__(name)

    build(Recording({n: p.default for n, p in _keywords().items()}))
    assert read == set(_keywords())


def top1(outputs: dict[int, object]) -> float:
    """A stand-in accuracy score."""
    return 1.0


@pytest.mark.parametrize(
    ("changes", "names"),
    [
        ({"scenario": "Servr"}, ["scenario='Servr'", "choose one of SingleStream"]),
        ({"scenario": 3}, ["scenario=3"]),
        ({"mode": "perf"}, ["mode='perf'", "'performance' or 'accuracy'"]),
        ({"scenario": "Server"}, ["scenario='Server'", "target_qps=", "find_peak=True"]),
        ({"scenario": "Offline", "find_peak": True}, ["find_peak=True", "Offline"]),
        (
            {"scenario": "Server", "find_peak": True, "mode": "accuracy"},
            ["find_peak=True", "performance mode"],
        ),
        ({"find_peak": "yes"}, ["find_peak='yes'", "True or False"]),
        ({"mlperf": 1}, ["mlperf=1", "True or False"]),
        ({"latency_percentile": 99}, ["latency_percentile=99", "fraction in (0, 1)", "0.99"]),
        ({"latency_percentile": True}, ["latency_percentile=True"]),
        ({"max_batch": 8, "pad_to": 4}, ["pad_to=4", "max_batch=8", "max_batch=4 or less"]),
        ({"scenario": "Offline", "pad_to": 2}, ["pad_to=2", "max_batch=8"]),  # Offline's default batch
        ({"accuracy": top1}, ["accuracy=...", "mode='accuracy'"]),
        ({"accuracy": "top1", "mode": "accuracy"}, ["accuracy='top1'", "callable"]),
        ({"accuracy_name": ""}, ["accuracy_name=''"]),
        ({"min_duration": -1}, ["min_duration=-1", "finite and > 0"]),
        ({"min_duration": 0}, ["min_duration=0", "> 0"]),
        ({"min_duration": "-5 ms"}, ["min_duration='-5 ms'", "finite and > 0"]),
        ({"max_duration": "3 min"}, ["max_duration='3 min'", "unknown unit 'min'"]),
        ({"target_latency": "15"}, ["target_latency='15'", "missing unit"]),
        ({"target_latency": float("inf")}, ["target_latency=inf", "finite"]),
        ({"target_latency": [15]}, ["target_latency=[15]", "'15 ms'"]),
        ({"batch_timeout": -0.001}, ["batch_timeout=-0.001", ">= 0"]),
        ({"search_budget": "-1 s"}, ["search_budget='-1 s'"]),
        ({"min_queries": True}, ["min_queries=True", "whole number >= 1"]),
        ({"max_batch": True}, ["max_batch=True", "whole number"]),
        ({"max_batch": 0}, ["max_batch=0", "whole number >= 1"]),
        ({"pad_to": False}, ["pad_to=False", "whole number"]),
        ({"performance_samples": True}, ["performance_samples=True"]),
        ({"max_probes": True}, ["max_probes=True"]),
        ({"max_probes": 2.0}, ["max_probes=2.0"]),
        ({"scenario": "MultiStream", "samples_per_query": True}, ["samples_per_query=True"]),
        ({"samples_per_query": 4}, ["samples_per_query=4", "only MultiStream"]),
        ({"scenario": "Server", "target_qps": 0}, ["target_qps=0", "finite number > 0"]),
        ({"scenario": "Server", "target_qps": True}, ["target_qps=True"]),
        ({"scenario": "Server", "target_qps": "100"}, ["target_qps='100'"]),
        ({"search_tolerance": 1.5}, ["search_tolerance=1.5", "fraction in (0, 1)"]),
        ({"mlperf_model": "  "}, ["mlperf_model='  '", "resnet50"]),
        ({"mlperf_model": 50}, ["mlperf_model=50"]),
    ],
)
def test_every_bad_argument_is_named(changes: dict[str, Any], names: list[str]) -> None:
    with pytest.raises(ValueError, match=r"^ipu_loadgen\(") as caught:
        request(**changes)
    message = str(caught.value)
    assert message.startswith("ipu_loadgen("), message
    assert "\n" not in message
    for name in names:
        assert name in message, f"{name!r} not in {message!r}"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("15 ms", 0.015), ("15ms", 0.015), ("2 s", 2.0), ("500 us", 0.0005), (3, 3.0), (0.25, 0.25)],
)
def test_durations_are_seconds_or_text_with_a_unit(value: object, seconds: float) -> None:
    asked = request(
        scenario="Server", target_qps=100, target_latency=value, min_duration=value, max_duration=value
    )
    assert asked.run.target_latency_s == seconds
    assert asked.run.min_duration_s == seconds
    assert asked.run.max_duration_s == seconds


def test_a_zero_batch_timeout_is_allowed() -> None:
    assert request(batch_timeout=0).timeout_s == 0.0
    assert request(batch_timeout="2 ms").timeout_s == 0.002


@pytest.mark.parametrize(
    ("scenario", "changes", "batch"),
    [
        ("SingleStream", {}, 1),
        ("Server", {"target_qps": 100}, 8),
        ("Offline", {}, 8),
        ("MultiStream", {}, 8),
        ("MultiStream", {"samples_per_query": 4}, 4),  # a query's samples in one batch
    ],
)
def test_default_max_batch_per_scenario(scenario: str, changes: dict[str, Any], batch: int) -> None:
    assert request(scenario=scenario, **changes).max_batch == batch


def test_default_batches_are_stated_per_scenario() -> None:
    assert DEFAULT_MAX_BATCH == {"SingleStream": 1, "Server": 8, "Offline": 8}


def test_a_good_request_carries_every_argument() -> None:
    asked = request(
        scenario="server",
        find_peak=True,
        target_latency="50 ms",
        latency_percentile=0.9,
        min_duration=1,
        max_batch=4,
        pad_to=4,
        batch_timeout="1 ms",
        max_probes=6,
        search_budget="120 s",
        search_tolerance=0.1,
        mlperf_model=" resnet50 ",
        performance_samples=64,
    )
    assert asked.run.scenario == "Server"
    assert asked.run.target_qps is None  # the search sets it
    assert asked.run.target_latency_s == 0.05
    assert asked.run.latency_percentile == 0.9
    assert asked.run.mlperf_model == "resnet50"
    assert asked.run.performance_sample_count == 64
    assert asked.run.mode == "performance"
    assert asked.find_peak is True
    assert (asked.max_batch, asked.pad_to, asked.timeout_s) == (4, 4, 0.001)
    assert (asked.max_probes, asked.search_budget_s, asked.search_tolerance) == (6, 120.0, 0.1)


def test_accuracy_mode_takes_a_scorer() -> None:
    asked = request(scenario="Offline", mode="accuracy", accuracy=top1, accuracy_name="top1")
    assert asked.accuracy is top1
    assert asked.accuracy_name == "top1"
    assert asked.run.mode == "accuracy"


def test_server_accuracy_needs_no_rate() -> None:
    # An accuracy run issues every sample once: there is no arrival rate to ask for.
    assert request(scenario="Server", mode="accuracy").run.target_qps is None
