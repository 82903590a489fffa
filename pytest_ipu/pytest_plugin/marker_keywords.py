"""The ``@pytest.mark.ipu(...)`` marker's keywords, their parsers, and their validation.

Keywords override the matching command-line settings for one test. An unknown keyword or a bad
value is an error naming the test, the keyword and (for typos) the closest valid keyword. Loaded by
the first test that has the marker (``marker`` names it).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

import pytest

from pytest_ipu.errors import ConfigError
from pytest_ipu.pytest_plugin import option_values
from pytest_ipu.pytest_plugin.marker import MARKER

if TYPE_CHECKING:
    from pytest_ipu.devices.request import DeviceRequest
    from pytest_ipu.results.gates import Gate


@dataclass(frozen=True)
class Keyword:
    """One marker keyword and the settings field it overrides (``None``: a placement keyword, read by
    ``placement_request`` instead)."""

    name: str
    field: str | None
    parse: Callable[[object], Any]
    help: str


def _placement_value(value: object) -> object:
    # Checked elsewhere: placement.parse_request knows how the four placement keywords combine, and
    # marker_gates parses gate expressions.
    return value


KEYWORDS: Mapping[str, Keyword] = {
    k.name: k
    for k in (
        Keyword("backend", "targets", option_values.parser_for("targets"), "targets this test runs on"),
        Keyword("precision", "precision", option_values.parser_for("precision"), "numeric precision"),
        Keyword("rounds", "rounds", option_values.parser_for("rounds"), "timed rounds, or 'auto'"),
        Keyword("warmup_rounds", "warmup_rounds", option_values.parser_for("warmup_rounds"), "warm-up"),
        Keyword("min_rounds", "min_rounds", option_values.parser_for("min_rounds"), "fewest rounds"),
        Keyword(
            "max_time",
            "max_time_s",
            option_values.parser_for("max_time_s"),
            "time budget of the timed rounds",
        ),
        Keyword(
            "max_time_cap",
            "time_cap",
            option_values.parser_for("time_cap"),
            "hard limit on the timed rounds ('3x' the budget, or '60s')",
        ),
        Keyword("repeats", "repeats", option_values.parser_for("repeats"), "independent repeats"),
        Keyword(
            "call_timeout",
            "call_timeout_s",
            option_values.parser_for("call_timeout_s"),
            "longest one call may take",
        ),
        Keyword(
            "repeat_mode", "repeat_mode", option_values.parser_for("repeat_mode"), "interleaved or process"
        ),
        Keyword("power", "power", option_values.parser_for("power"), "power source, or 'off'"),
        Keyword("ipus", None, _placement_value, "IPUs per instance (= stages x replicas)"),
        Keyword("replicas", None, _placement_value, "data-parallel replicas inside one model"),
        Keyword("stages", None, _placement_value, "pipeline stages, one IPU each"),
        Keyword("instances", None, _placement_value, "independent copies of the model, run concurrently"),
        Keyword("gate", None, _placement_value, "this benchmark's gates (replace --ipu-gate per metric)"),
    )
}


def marker_overrides(item: pytest.Item) -> dict[str, Any]:
    """Parse the ``ipu`` markers of ``item`` (closest wins) into settings-field overrides.

    Raises ``ConfigError`` naming the node id for positional arguments, unknown keywords and bad
    values.
    """
    overrides: dict[str, Any] = {}
    # iter_markers yields the closest marker first; apply farthest first so the closest wins.
    for mark in reversed(list(item.iter_markers(MARKER))):
        if mark.args:
            raise ConfigError(
                f"{item.nodeid}: @pytest.mark.ipu takes keywords only, got positional {mark.args!r}"
            )
        for name, value in mark.kwargs.items():
            keyword = KEYWORDS.get(name)
            if keyword is None:
                raise ConfigError(f"{item.nodeid}: {unknown_keyword_message(name)}")
            if keyword.field is None:
                continue
            try:
                overrides[keyword.field] = keyword.parse(value)
            except ValueError as exc:
                raise ConfigError(
                    f"{item.nodeid}: invalid value {value!r} for @pytest.mark.ipu({name}=...): {exc}"
                ) from None
    return overrides


def unknown_keyword_message(name: str) -> str:
    """``unknown keyword 'round' (did you mean 'rounds'?); allowed: ...``."""
    close = difflib.get_close_matches(name, list(KEYWORDS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"@pytest.mark.ipu got unknown keyword {name!r}{hint}; allowed: {', '.join(KEYWORDS)}"


def placement_request(item: pytest.Item) -> DeviceRequest:
    """The device request of ``item``'s ``ipu`` markers (closest wins per keyword; default: one
    instance on one device). Raises ``ConfigError`` naming the node id for a bad combination."""
    from pytest_ipu.devices import request as placement

    merged: dict[str, object] = {}
    for mark in reversed(list(item.iter_markers(MARKER))):
        merged.update({k: v for k, v in mark.kwargs.items() if k in placement.KEYWORDS})
    try:
        return placement.parse_request(merged, f"{item.nodeid}: @pytest.mark.ipu")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def marker_gates(item: pytest.Item) -> tuple[Gate, ...]:
    """The gates of ``item``'s closest ``ipu`` marker with ``gate=`` (one expression or a list of
    them); ``()`` when none. Raises ``ConfigError`` naming the node id for a bad expression."""
    for mark in item.iter_markers(MARKER):
        if "gate" not in mark.kwargs:
            continue
        value = mark.kwargs["gate"]
        texts = [value] if isinstance(value, str) else value
        if not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts):
            raise ConfigError(
                f"{item.nodeid}: invalid value {value!r} for @pytest.mark.ipu(gate=...): expected an "
                "expression such as 'throughput:-5%' or a list of them"
            )
        from pytest_ipu.results import gates

        try:
            return tuple(gates.parse(t) for t in texts)
        except gates.GateError as exc:
            raise ConfigError(f"{item.nodeid}: @pytest.mark.ipu(gate=...): {exc}") from None
    return ()
