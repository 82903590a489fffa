"""Model definitions benchmarked by the project's inference studies."""

from __future__ import annotations
