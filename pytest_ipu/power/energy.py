"""Energy over a time window from sampled readings (pure: numbers in, joules out).

One rule per kind of reading (requirement R6 of our measurement notes): ``counter_delta``,
``trapezoid`` and ``backward_rect``, whose reading ``i`` covers ``(t[i-1], t[i]]`` and counts in
proportion to that interval's overlap with the window. All three are additive over adjacent windows
and scale linearly with the readings. Times are in nanoseconds on one monotonic clock; energies in
joules; powers in watts.

Documented in docs/power.md (section "How a window is measured", step 5).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

Rule = Literal["counter_delta", "trapezoid", "backward_rect"]


class CoverageError(ValueError):
    """The readings do not span the whole window, so its energy cannot be known."""


def integrate(
    rule: Rule,
    t_ns: Sequence[int],
    values: Sequence[float],
    start_ns: int,
    end_ns: int,
    refresh_ns: float | None = None,
) -> float:
    """Energy in joules over ``[start_ns, end_ns]`` by ``rule``; raises ``CoverageError``.

    ``refresh_ns`` (counters only) is the counter's refresh period, when known: a change seen at a
    reading then happened within that period before it, however long ago the previous reading was.
    """
    t = np.asarray(t_ns, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if t.shape != v.shape or t.ndim != 1:
        raise ValueError(f"need one value per timestamp, got {t.shape} and {v.shape}")
    if end_ns < start_ns:
        raise ValueError(f"window ends before it starts ({start_ns} > {end_ns})")
    if len(t) < 2 or t[0] > start_ns or t[-1] < end_ns:
        span = f"[{t[0]:.0f}, {t[-1]:.0f}]" if len(t) else "nothing"
        raise CoverageError(f"readings span {span} ns, not the window [{start_ns}, {end_ns}] ns")
    if np.any(np.diff(t) <= 0):
        raise ValueError("timestamps must increase strictly")
    if rule == "counter_delta":
        ct, cv = _change_points(t, v, refresh_ns)
        return float(np.interp(end_ns, ct, cv) - np.interp(start_ns, ct, cv))
    if rule == "trapezoid":
        return _trapezoid(t, v, float(start_ns), float(end_ns))
    if rule == "backward_rect":
        return _backward_rect(t, v, float(start_ns), float(end_ns))
    raise ValueError(f"unknown integration rule {rule!r}")


def _change_points(t: np.ndarray, v: np.ndarray, refresh_ns: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Where a held counter changed: the first reading of each new value, moved back to the
    midpoint of the interval in which it changed: since the previous reading, and no longer ago
    than one refresh period when that is known. The first and last readings are kept as they are,
    so the series still spans what the readings spanned."""
    changed = np.flatnonzero(np.diff(v) != 0) + 1
    if len(changed) == 0:
        return t, v
    earliest = t[changed - 1] if refresh_ns is None else np.maximum(t[changed - 1], t[changed] - refresh_ns)
    times = (earliest + t[changed]) / 2.0
    ct = np.concatenate(([t[0]], times, [t[-1]]))
    cv = np.concatenate(([v[0]], v[changed], [v[-1]]))
    # A change right after the first reading can land on it; keep the times strictly increasing.
    keep = np.concatenate(([True], np.diff(ct) > 0))
    return ct[keep], cv[keep]


def _trapezoid(t: np.ndarray, w: np.ndarray, start: float, end: float) -> float:
    inside = (t > start) & (t < end)
    ts = np.concatenate(([start], t[inside], [end]))
    ws = np.concatenate(([np.interp(start, t, w)], w[inside], [np.interp(end, t, w)]))
    return float(np.sum((ws[1:] + ws[:-1]) * np.diff(ts)) / 2.0 * 1e-9)


def _backward_rect(t: np.ndarray, w: np.ndarray, start: float, end: float) -> float:
    lo = np.maximum(t[:-1], start)
    hi = np.minimum(t[1:], end)
    overlap = np.clip(hi - lo, 0.0, None)
    return float(np.sum(w[1:] * overlap) * 1e-9)
