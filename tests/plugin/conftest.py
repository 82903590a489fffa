"""Every plugin test's inner pytest runs get the same, isolated options (see ``inner``)."""

from __future__ import annotations

import pytest

from tests.plugin.inner import INNER_ADDOPTS
from tests.plugin.inner import XDIST_VARIABLES


@pytest.fixture(autouse=True)
def _inner_run_options(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in XDIST_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTEST_ADDOPTS", INNER_ADDOPTS)
