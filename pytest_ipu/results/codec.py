"""The plumbing the record dataclasses share: a part declared once and extended by the records that
hold it (``records.Identity``, ``records.InstanceInfo``, ``loadgen.LoadgenFigures``), and copying
such a part's fields into the record that extends it (``fields_of``)."""

from __future__ import annotations

import dataclasses
from typing import Any


def fields_of(part: type, obj: object) -> dict[str, Any]:
    """The fields ``part`` (a dataclass) declares, with ``obj``'s values, as keyword arguments for a
    dataclass that extends ``part``: ``IpuRecord(**fields_of(Identity, compiled), batch_size=...)``.
    The other keyword arguments stay checked by mypy; these are checked where ``obj`` was made."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(part)}
