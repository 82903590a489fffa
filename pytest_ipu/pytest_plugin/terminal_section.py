"""The pytest-ipu section of pytest's terminal summary: the tables (and a torchrun launch's), the
``ipu_power`` blocks, and under ``auto`` which targets were found.

Loaded by ``Lifecycle.pytest_terminal_summary`` when the run has something to show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_ipu.pytest_plugin.session import IpuSession


def write(terminalreporter: pytest.TerminalReporter, state: IpuSession) -> None:
    """The section, fitted to the terminal's width; nothing when there are no lines."""
    from pytest_ipu.report import text

    width = text.terminal_width()
    lines = text.wrap(_summary_lines(state, width), width)
    if lines:
        terminalreporter.section("pytest-ipu")
        for line in lines:
            terminalreporter.write_line(line)


def _summary_lines(state: IpuSession, width: int | None = None) -> list[str]:
    """The pytest-ipu section: the tables (and a torchrun launch's), the ``ipu_power`` blocks, and
    under ``auto`` which targets were found and which were not; tables fitted to ``width``. Nothing
    on a torchrun rank other than 0: rank 0 prints the launch's, merged."""
    if state.torchrun is not None and state.torchrun.index > 0:
        return []
    tables: list[str] = []
    if state.measured:  # a run without benchmarks never loads the tables (nor numpy)
        from pytest_ipu.report import terminal as report
        from pytest_ipu.report import training

        tables = report.tables([report.Row(m.group, m.name, m.record) for m in state.measured], width=width)
        if state.launch_records and state.torchrun is not None:
            tables += training.launch_lines(
                state.torchrun.count, state.torchrun.nodes, str(state.merged_json), state.launch_records
            )
    blocks: list[str] = []
    if state.power_blocks:
        from pytest_ipu.report import power_blocks as report_blocks

        blocks = report_blocks.lines(state.power_blocks)
    targets: list[str] = []
    if state.auto is not None:
        present, absent = state.auto
        targets = [f"targets present (auto): {', '.join(map(str, present)) or 'none'}"]
        targets.extend(f"target absent: {t}: {why}" for t, why in absent)
    # A blank line after each table that other lines follow.
    lines = tables + ([""] if tables and blocks and tables[-1] else []) + blocks
    return lines + ([""] if blocks and state.auto is not None else []) + targets
