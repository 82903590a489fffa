"""What pytest-ipu adds to pytest-benchmark's document: ``machine_info["ipu"]`` and the top-level
``pytest_ipu`` section, filled from the run's state (``session.IpuSession``).

Loaded by ``lifecycle``'s hooks when pytest-benchmark writes a document (``--benchmark-json``,
``--benchmark-save``), never by a run that writes none.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

import pytest

import pytest_ipu
from pytest_ipu.placement import torchrun
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import codec
from pytest_ipu.results import schema

if TYPE_CHECKING:
    from pytest_ipu.pytest_plugin.session import IpuSession
    from pytest_ipu.results.decide import Verdict


def update_machine_info(session: IpuSession, config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """``machine_info["ipu"]``: the plugin version, each backend used as it describes itself, and
    (under ``auto``) the default targets absent here with the reason; then the
    ``pytest_ipu_update_device_info`` hook's changes."""
    # Keyed like the records' "target" (backend:device), whatever spelling the user asked for.
    used = {
        f"{b.name}:{b.device}": b.describe()
        for _, (b, a) in sorted(session.backends.items(), key=lambda kv: str(kv[0]))
        if b is not None and a.ok
    }
    device_info: dict[str, Any] = {
        "schema": schema.SCHEMA_VERSION,
        "pytest_ipu": pytest_ipu.__version__,
        "backends": used,
    }
    if session.auto is not None:
        device_info["absent"] = {str(t): why for t, why in session.auto[1]}
    if session.poprun is not None:
        from pytest_ipu.placement import poprun

        device_info[poprun.KEY] = session.poprun.as_json()
    if session.torchrun is not None:
        device_info[torchrun.KEY] = session.torchrun.as_json()
    config.hook.pytest_ipu_update_device_info(config=config, device_info=device_info)
    benchmark_json.update_machine_info(machine_info, device_info)


def update_json(session: IpuSession, output_json: dict[str, Any]) -> None:
    """The top-level ``pytest_ipu`` section: schema version, plugin version, settings and, when the
    run measured any, the energy of every ``ipu_power`` block (``power_blocks``), the run's samples
    of its machine's speed (``machine_speed``), when it had gates, every gate's verdict
    (``gates``) and, in a run of pytest-ipu ab, each benchmark's own gates (``own_gates``). The
    per-round times of pytest-ipu's benchmarks leave the document unless ``--benchmark-save-data``
    asks for them (``benchmark_json.drop_round_data``). Under torchrun the document is kept for the
    launch's merge (``IpuSession.launch_document``)."""
    run_info: dict[str, Any] = {
        "schema": schema.SCHEMA_VERSION,
        "version": pytest_ipu.__version__,
        "settings": session.settings.as_json(),
    }
    if session.power_blocks:
        # Absent rather than empty: a run without blocks writes the section it always wrote.
        from pytest_ipu.results import power_blocks

        run_info[power_blocks.KEY] = [b.as_json() for b in session.power_blocks]
    from pytest_ipu.pytest_plugin.repeats import in_worker

    if not in_worker():
        # The last sample of the machine's speed, before the gates still to check read it.
        measured_speed = session.speed().final()
        if measured_speed is not None:
            run_info[benchmark_json.MACHINE_SPEED_KEY] = codec.to_json(measured_speed)
    # Every benchmark's gates, not only those checked as each was measured (end_session checks
    # the rest again: a no-op then).
    gate_check = session.gate_check_made
    if gate_check is not None:
        gate_check.check()
    if gate_check is not None and gate_check.verdicts:
        run_info[benchmark_json.GATES_KEY] = gates_json(gate_check.verdicts)
    if session.own_gates:
        # A run of pytest-ipu ab checks none: ab reads them here and gates on the pairs.
        run_info[benchmark_json.OWN_GATES_KEY] = {
            nodeid: [str(g) for g in own] for nodeid, own in session.own_gates.items()
        }
    benchmark_json.update_json(output_json, run_info)
    if not getattr(session.config.option, "benchmark_save_data", False):
        benchmark_json.drop_round_data(output_json)
    if session.torchrun is not None:
        # Kept for the merge at the end of the session, as pytest-benchmark writes it
        # (parameters such as a Target become their str()).
        session.launch_document = json.loads(json.dumps(output_json, default=str))


def gates_json(verdicts: Sequence[Verdict]) -> list[dict[str, Any]]:
    """The ``gates`` entries of a results file: each verdict's fields and its line, as printed."""
    return [{**v.as_json(), "line": v.line()} for v in verdicts]
