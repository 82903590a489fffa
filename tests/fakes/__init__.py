"""Fakes of system interfaces and vendor libraries, shared by the tests."""

from __future__ import annotations
