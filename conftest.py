"""Repository-root conftest: its presence puts the repository root on sys.path, so that tests and
studies can import the model zoo as ``benchmarks.models``."""

from __future__ import annotations
