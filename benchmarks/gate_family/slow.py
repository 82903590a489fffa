"""How much slower each benchmark of the family is on this commit: benchmark name to factor.

The gate-recipe study commits a new version of this file to make a candidate commit: ``{}`` is
the unchanged code, ``{"plain-np_sort": 1.1}`` makes one benchmark's every call 10 % slower,
``{"*": 1.3}`` every benchmark's 30 % slower.
"""

from __future__ import annotations

SLOW: dict[str, float] = {}
