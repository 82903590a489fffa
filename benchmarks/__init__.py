"""Benchmark models and helpers used by the project's inference studies."""

from __future__ import annotations
