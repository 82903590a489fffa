"""The ``@pytest.mark.ipu(...)`` marker: its name, its help line, and the one question about it that
parses nothing (``has_marker_gates``).

Its keywords, their parsers and their validation are ``marker_keywords``', loaded by the first test
that has the marker.
"""

from __future__ import annotations

import pytest

MARKER = "ipu"
MARKER_HELP = (
    "ipu(backend=..., precision=..., rounds=..., warmup_rounds=..., min_rounds=..., max_time=..., "
    "max_time_cap=..., repeats=..., call_timeout=..., repeat_mode=..., power=..., "
    "ipus=..., replicas=..., stages=..., "
    "instances=..., gate=...): "
    "pytest-ipu settings for this benchmark, overriding the command line, and its device placement"
)


def has_marker_gates(item: pytest.Item) -> bool:
    """Whether an ``ipu`` marker of ``item`` has ``gate=`` (a question that parses nothing)."""
    return any("gate" in mark.kwargs for mark in item.iter_markers(MARKER))
