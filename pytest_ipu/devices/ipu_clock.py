"""The IPU's clock as gcipuinfo reports it: what a count of device cycles means in seconds.

Graphcore's own code reads it as a device's ``clock`` attribute (``device['clock']`` of
``gcipuinfo.gcipuinfo().getDevices()``), a string such as ``"1330MHz"`` (reference
``graphcore-sdk-api.md`` sections 0.3 and 4.1). The clock can drop under load, so it is read
right after the cycles are counted. Where it cannot be read (gcipuinfo absent, ``N/A``, IPUs that
report different clocks) there is no clock and the reason says why: never a guessed one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from types import ModuleType

from pytest_ipu.processes import error_text
from pytest_ipu.sdk import import_sdk

#: The attribute, as gcipuinfo and ``gc-info -i`` spell it.
KEY_CLOCK = "clock"
_KEY_ID = "id"
_SCALES = {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}
_CLOCK_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kKmMgG]?[hH][zZ])\s*$")


def parse_clock_hz(text: object) -> float | None:
    """Hz from a gcipuinfo clock string (``"1330MHz"``, ``"1.85 GHz"``); ``None`` for ``"N/A"``.
    Anything else raises ``ValueError`` naming the text: a clock we cannot read for sure is none."""
    if not isinstance(text, str):
        raise ValueError(f"expected a clock string like '1330MHz', got {text!r}")
    if text.strip().upper() == "N/A":
        return None
    match = _CLOCK_RE.match(text)
    if match is None:
        raise ValueError(f"not a clock frequency: {text!r}")
    hz = float(match.group(1)) * _SCALES[match.group(2).lower()]
    if not math.isfinite(hz) or hz <= 0:
        raise ValueError(f"not a plausible clock: {text!r}")
    return hz


def read_clock(ipu_ids: Sequence[int] | None, module: ModuleType | None = None) -> tuple[float | None, str]:
    """The clock of the IPUs ``ipu_ids`` (gcipuinfo's ids; ``None``: every IPU listed, which must
    agree), Hz, and where it was read; or ``None`` and why not. ``module`` replaces
    ``import gcipuinfo`` (tests pass a fake). Never raises."""
    try:
        gcipuinfo = module if module is not None else import_sdk("gcipuinfo")
        devices = [{str(k): str(v) for k, v in dict(d).items()} for d in gcipuinfo.gcipuinfo().getDevices()]
    except Exception as exc:
        why = error_text(exc)
        return None, f"no IPU clock: gcipuinfo could not list the IPUs ({why})"
    wanted = None if ipu_ids is None else {str(i) for i in ipu_ids}
    chosen = [d for d in devices if wanted is None or d.get(_KEY_ID, "").strip() in wanted]
    which = "every IPU listed" if ipu_ids is None else f"IPU(s) {', '.join(map(str, ipu_ids))}"
    if not chosen:
        return None, f"no IPU clock: gcipuinfo lists none of {which}"
    texts = {d.get(_KEY_ID, "?").strip(): d.get(KEY_CLOCK) for d in chosen}
    absent = sorted(i for i, t in texts.items() if t is None)
    if absent:
        return None, f"no IPU clock: gcipuinfo gives no {KEY_CLOCK!r} for IPU(s) {', '.join(absent)}"
    try:
        clocks = {i: parse_clock_hz(t) for i, t in texts.items()}
    except ValueError as exc:
        return None, f"no IPU clock: gcipuinfo's {KEY_CLOCK!r} {exc}"
    shown = ", ".join(f"{i}: {t}" for i, t in sorted(texts.items()))
    if any(hz is None for hz in clocks.values()):
        return None, f"no IPU clock: gcipuinfo's {KEY_CLOCK!r} is N/A ({shown})"
    if len(set(clocks.values())) > 1:
        return None, f"no one IPU clock: {which} report different clocks ({shown})"
    return next(iter(clocks.values())), f"gcipuinfo {KEY_CLOCK!r} of {which} ({shown})"
