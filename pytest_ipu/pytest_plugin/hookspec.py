"""The ``pytest_ipu_*`` hooks a conftest or plugin can implement."""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

import pytest

if TYPE_CHECKING:
    from pytest_ipu.backends.base import Backend
    from pytest_ipu.backends.target import Target
    from pytest_ipu.power.base import PowerSource


@pytest.hookspec(firstresult=True)
def pytest_ipu_make_backend(config: pytest.Config, target: Target) -> Backend | None:
    """Return a backend for ``target``, or ``None`` to leave it to the next implementation.

    The built-in registry answers last, so a conftest can add a backend or replace a built-in one::

        # conftest.py
        def pytest_ipu_make_backend(config, target):
            if target.backend == "my-runtime":
                return MyRuntimeBackend(device=target.device or "cpu")
    """


@pytest.hookspec(firstresult=True)
def pytest_ipu_make_power_source(config: pytest.Config, name: str, device: str) -> PowerSource | None:
    """Return the power source ``name`` for compute ``device``, or ``None`` for the built-in one.

    For a benchmark on IPUs, ``device`` names exactly the IPUs it holds (``ipu:2,3``, by their
    ``gc-info -l`` ids; ``pytest_ipu.power.ipus_of`` reads them): a source should measure those.
    For a site-specific meter (a wall-power PDU, say)::

        # conftest.py
        def pytest_ipu_make_power_source(config, name, device):
            if name == "rapl" and os.environ.get("LAB_PDU"):
                return LabPduSource(os.environ["LAB_PDU"])
    """


def pytest_ipu_update_record(config: pytest.Config, item: pytest.Item, record: dict[str, Any]) -> None:
    """Add fields to a benchmark's ``extra_info["ipu"]`` record before it is stored.

    Add keys of your own (plain JSON values, SI units with the unit in the key); changing the
    built-in keys breaks readers of the schema::

        # conftest.py
        def pytest_ipu_update_record(config, item, record):
            record["dataset"] = item.callspec.params.get("dataset")
    """


def pytest_ipu_update_device_info(config: pytest.Config, device_info: dict[str, Any]) -> None:
    """Add fields to ``machine_info["ipu"]``, the run's backend and device inventory::

    # conftest.py
    def pytest_ipu_update_device_info(config, device_info):
        device_info["rack"] = os.environ.get("RACK_ID")
    """
