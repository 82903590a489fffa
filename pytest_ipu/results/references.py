"""Published reference points: figures measured elsewhere that a report shows beside measured ones.

``pytest-ipu report --references FILE`` reads a TOML file of ``[[reference]]`` tables; every key is
required and no other key is allowed. ``benchmark`` matches a benchmark's name or group (a substring,
any case); ``metric`` is one of the registry's (``catalog.METRICS``) that a report headline shows
(``METRICS``); ``value`` is a positive number in its SI unit or a string with one of its units: ``s``,
``min`` or ``h`` (``time_to_train``), ``items/s`` (``throughput``), ``s``, ``ms`` or ``us``
(``latency.p50``), ``items/J`` or its equal ``items/s/W`` (``items_per_j``). Every entry is checked as
the file is read, before anything is drawn (``ReferenceError``, one line). Pure: the standard library
only (its TOML parser, ``tomli`` before Python 3.11: ``backports.toml``).

Documented in docs/training.md (section "Report") and docs/ci.md (section "Reports").
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ipu.backports import toml

#: The metrics a reference can give (the registry's names, ``catalog.METRICS``), and the SI unit of
#: each (the registry's unit of that metric; the suite checks they agree).
METRICS: Mapping[str, str] = {
    "time_to_train": "s",
    "throughput": "items/s",
    "latency.p50": "s",
    "items_per_j": "items/J",
}

#: The unit texts a string value may carry, by metric, and the factor of each to SI.
VALUE_UNITS: Mapping[str, Mapping[str, float]] = {
    "time_to_train": {"s": 1.0, "min": 60.0, "h": 3600.0},
    "throughput": {"items/s": 1.0},
    "latency.p50": {"s": 1.0, "ms": 1e-3, "us": 1e-6},
    # One item per second per watt is one item per joule: vendors publish either.
    "items_per_j": {"items/J": 1.0, "items/s/W": 1.0},
}

#: An example value of each metric, for the fix of a message.
_VALUE_EXAMPLES: Mapping[str, str] = {
    "time_to_train": '"28.33 min"',
    "throughput": '"2,526 items/s"',
    "latency.p50": '"1.36 ms"',
    "items_per_j": '"9.68 items/J"',
}

#: The keys of a ``[[reference]]`` table, in the order messages list them; all are required.
KEYS = ("benchmark", "metric", "devices", "value", "label", "source")

#: What to write for each key, for the fix of a message.
_EXAMPLES: Mapping[str, str] = {
    "benchmark": 'benchmark = "resnet50" (part of the benchmark\'s name or group)',
    "metric": 'metric = "time_to_train", "throughput", "latency.p50" or "items_per_j"',
    "devices": "devices = 16 (a whole number of devices, 1 or more)",
    "value": 'value = "28.33 min" (a number in the metric\'s SI unit, or a string with a unit)',
    "label": 'label = "IPU-POD16" (the name the legend gives it)',
    "source": 'source = "MLPerf Training v1.0, Graphcore" (where the figure was published)',
}

_QUANTITY = re.compile(
    r"\s*(?P<number>(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?"
    r"|\.[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(?P<unit>.*?)\s*"
)


# The name shadows Python's weakref ``ReferenceError``, which nothing here uses; callers import it
# qualified (``references.ReferenceError``).
class ReferenceError(ValueError):
    """A references file or one of its entries is bad; the message is one line with the fix."""


@dataclass(frozen=True)
class Reference:
    """One published figure: what it measured, on how many devices, and where it was published."""

    #: The entry's position in its file, from 1 (messages and tables name it so).
    index: int
    #: Text matched against a benchmark's name or group (substring, case-insensitive).
    benchmark: str
    #: `time_to_train`, `throughput`, `latency.p50` or `items_per_j` (`METRICS`).
    metric: str
    #: The devices the figure ran on.
    devices: int
    #: The figure in the metric's SI unit (`METRICS`): seconds, items per second, items per joule.
    value: float
    #: The value as the file wrote it (`28.33 min`), so tables show the published text.
    written: str
    #: The name the legend and the table give it (`IPU-POD16`).
    label: str
    #: Where the figure was published.
    source: str

    def matches(self, *names: str | None) -> bool:
        """Whether ``benchmark`` is part of any of ``names`` (a benchmark's name, its group), any case."""
        wanted = self.benchmark.casefold()
        return any(name is not None and wanted in name.casefold() for name in names)


def load(path: Path) -> tuple[Reference, ...]:
    """The references of the TOML file ``path``, in file order; ``ReferenceError`` on any bad entry."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ReferenceError(f"{path}: cannot read the references file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ReferenceError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
        ) from None
    try:
        document = toml.loads(text)
    except toml.TOMLDecodeError as exc:
        raise ReferenceError(
            f"{path}: not TOML: {exc}; see docs/examples/mlperf-resnet50-references.toml"
        ) from None
    return parse(document, str(path))


def parse(document: Mapping[str, Any], where: str) -> tuple[Reference, ...]:
    """The references of a parsed TOML ``document``; ``where`` names it in messages (the file)."""
    for key in document:
        if key != "reference":
            raise ReferenceError(
                f"{where}: unknown top-level key {key!r}; the file holds [[reference]] tables only"
            )
    entries = document.get("reference")
    if entries is None:
        raise ReferenceError(
            f"{where}: no [[reference]] entries; add one per published figure "
            "(see docs/examples/mlperf-resnet50-references.toml)"
        )
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise ReferenceError(
            f"{where}: 'reference' is not a list of tables; write each entry as a [[reference]] table"
        )
    return tuple(_entry(entry, index, where) for index, entry in enumerate(entries, start=1))


def _toml(value: object) -> str:
    """``value`` as TOML writes it, for messages: strings quoted, booleans lower case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _entry(entry: Mapping[str, Any], index: int, where: str) -> Reference:
    """The reference of the ``[[reference]]`` table ``entry`` (the ``index``-th in ``where``), or
    ``ReferenceError`` naming the key, its value and the fix."""
    at = f"{where}: [[reference]] #{index}"

    def bad(key: str, problem: str, fix: str = "") -> ReferenceError:
        return ReferenceError(
            f"{at}: {key} = {_toml(entry[key])}: {problem}; {fix or 'write ' + _EXAMPLES[key]}"
        )

    _check_keys(entry, at)
    texts: dict[str, str] = {}
    for key in ("benchmark", "metric", "label", "source"):
        value = entry[key]
        if not isinstance(value, str) or not value.strip():
            raise bad(key, "not a non-empty string")
        texts[key] = value.strip()
    metric = texts["metric"]
    if metric not in METRICS:
        *head, last = (f'"{m}"' for m in METRICS)
        raise bad("metric", "unknown metric", f"use {', '.join(head)} or {last}")

    devices = entry["devices"]
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise bad("devices", "not a device count")

    value = entry["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise bad("value", "not a number or a string with a unit")
    si = _value(value, metric)
    if isinstance(si, str):
        raise bad("value", si, _value_fix(metric))
    return Reference(
        index=index,
        benchmark=texts["benchmark"],
        metric=metric,
        devices=devices,
        value=si,
        written=value if isinstance(value, str) else f"{value:g} {METRICS[metric]}",
        label=texts["label"],
        source=texts["source"],
    )


def _check_keys(entry: Mapping[str, Any], at: str) -> None:
    """``ReferenceError`` for an unknown key (with the nearest known one) or a missing one."""
    # Unknown keys first: a misspelt key would otherwise be reported as the missing one it meant.
    for key in entry:
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ReferenceError(
                f"{at}: unknown key {key!r} = {_toml(entry[key])}; {hint}the keys are {', '.join(KEYS)}"
            )
    for key in KEYS:
        if key not in entry:
            raise ReferenceError(f"{at}: {key} is missing; add {_EXAMPLES[key]}")


def _value_fix(metric: str) -> str:
    units = VALUE_UNITS[metric]
    *head, last = units
    listed = f"{', '.join(head)} or {last}" if head else last
    example = _VALUE_EXAMPLES[metric]
    return (
        f"for {metric} write a number in {METRICS[metric]} or a string with {listed}, e.g. value = {example}"
    )


def _value(value: float | str, metric: str) -> float | str:
    """The value in SI units, or what is wrong with it (a string)."""
    if isinstance(value, str):
        match = _QUANTITY.fullmatch(value)
        if match is None:
            return "not a number with a unit"
        unit = match["unit"]
        factors = VALUE_UNITS[metric]
        if not unit:
            return f"no unit after {match['number']!r}"
        if unit not in factors:
            other = next((m for m, units in VALUE_UNITS.items() if unit in units and m != metric), None)
            return f"unit {unit!r} is for {other}, not {metric}" if other else f"unknown unit {unit!r}"
        number = float(match["number"].replace(",", "")) * factors[unit]
    else:
        number = float(value)
    if not math.isfinite(number) or number <= 0:
        return "not a finite number above 0"
    return number
