"""What gating costs: a gated run beside the same run ungated, ``pytest-ipu compare --gate`` of 11
runs, and the size of a run file.

The case is ``gate_cost_support``'s: 69 small ``ipu_benchmark`` benchmarks (pure Python, 23 tests of
3 sizes, ``--ipu-max-time=0.05s``), run ten times for the baseline runs and once more for a current
run, each by a fresh ``python -m pytest``. Then the suite runs ``PAIRS`` times ungated and ``PAIRS``
times gated against the ten baselines (``--ipu-baseline='baselines/*.json'
--ipu-gate=latency.p50:+5%``), alternating (ABAB...) so that drift of the machine lands on both; and
``pytest-ipu compare --gate 'latency.p50:+5%'`` of the eleven files ``COMPARES`` times. Printed at the
end of ``make bench``: the medians of each, on the wall clock (the targets: a gated run at most 10 %
plus 2 s over the ungated one, the comparison under 2 s) and in CPU time (the process and its
children: what a busy machine's wall clock hides), the load average beside them, and the size of a
run file. About 17 runs of the suite: two to four minutes on a quiet 2-core machine.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

import pytest

from benchmarks import gate_cost_support as support

#: Gated and ungated runs of the suite, alternating; and runs of ``compare``.
PAIRS = 3
COMPARES = 3
#: Targets: a gated run's added time, relative and absolute; ``compare --gate`` of the 11 runs.
MAX_ADDED_SHARE = 0.10
MAX_ADDED_S = 2.0
MAX_COMPARE_S = 2.0
SECTION = "gating cost (69 benchmarks, 10 baseline runs: gated vs ungated run, compare --gate, file size)"


def _median(times: list[support.Timed], what: str) -> float:
    return float(statistics.median(float(getattr(t, what)) for t in times))


def _load() -> str:
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:  # not available on this platform
        return "unknown"


@pytest.mark.benchmark(group="gate-cost")
def test_gate_cost(
    tmp_path: Path, study_report: dict[str, list[str]], self_check_summary: dict[str, str], benchmark: Any
) -> None:
    """The gated run's added time and ``compare --gate``'s time, against their targets."""
    case = support.make_case(tmp_path / "case", baselines=10, kind="ipu")
    load_before = _load()
    ungated: list[support.Timed] = []
    gated: list[support.Timed] = []
    gate = support.gate_args(case.folder / "baselines")
    for n in range(PAIRS):
        for runs, extra in ((ungated, []), (gated, gate)):
            out = case.folder / f"timed-{'gated' if extra else 'ungated'}-{n}.json"
            timed = support.run_pytest(case.folder, *support.run_args(case.kind, out), *extra)
            # A gated run fails where a gate FAILed (1); anything else is a broken run.
            assert timed.returncode in ((0, 1) if extra else (0,)), timed.tail
            runs.append(timed)
    files = [*case.baselines, case.current]
    command = support.compare_command(files)
    compares = [support.run_command(command, case.folder) for _ in range(COMPARES)]
    # 0 every gate PASS, 1 a FAIL, 3 an INCONCLUSIVE and no FAIL: each a comparison that was made.
    assert all(c.returncode in (0, 1, 3) for c in compares), compares[-1].tail
    assert "gates: " in compares[-1].output, compares[-1].tail

    plain_s, gated_s = _median(ungated, "wall_s"), _median(gated, "wall_s")
    added = gated_s - plain_s
    allowed = MAX_ADDED_SHARE * plain_s + MAX_ADDED_S
    run_verdict = "meets" if added <= allowed else "MISSES"
    compare_s = _median(compares, "wall_s")
    compare_verdict = "meets" if compare_s < MAX_COMPARE_S else "MISSES"
    sizes = [p.stat().st_size for p in files]
    size_kb = statistics.mean(sizes) / 1e3
    lines = study_report.setdefault(SECTION, [])
    lines.append(
        f"gated run {gated_s:.1f} s vs ungated {plain_s:.1f} s (wall, medians of {PAIRS} alternating): "
        f"added {added:+.1f} s ({added / plain_s:+.0%}; {run_verdict} <= {MAX_ADDED_SHARE:.0%} + "
        f"{MAX_ADDED_S:g} s = {allowed:.1f} s); CPU {_median(gated, 'cpu_s'):.1f} s vs "
        f"{_median(ungated, 'cpu_s'):.1f} s"
    )
    lines.append(
        f"pytest-ipu compare --gate '{support.GATE}' of {len(files)} runs: {compare_s:.2f} s wall "
        f"({compare_verdict} < {MAX_COMPARE_S:g} s), {_median(compares, 'cpu_s'):.2f} s CPU (medians of "
        f"{COMPARES})"
    )
    lines.append(
        f"a run file of {len(files)}: {size_kb:,.0f} kB on average ({size_kb / 69:.1f} kB a benchmark), "
        f"{min(sizes) / 1e3:,.0f} to {max(sizes) / 1e3:,.0f} kB; load average (1/5/15 min) "
        f"{load_before} before the timed runs, {_load()} after"
    )
    self_check_summary[SECTION] = (
        f"gated run {added:+.1f} s over ungated ({run_verdict} <= {allowed:.1f} s), compare --gate of "
        f"{len(files)} runs {compare_s:.2f} s ({compare_verdict} < {MAX_COMPARE_S:g} s), "
        f"{size_kb:,.0f} kB a run"
    )
    benchmark.extra_info["gate_cost"] = {
        "ungated_wall_s": [t.wall_s for t in ungated],
        "gated_wall_s": [t.wall_s for t in gated],
        "ungated_cpu_s": [t.cpu_s for t in ungated],
        "gated_cpu_s": [t.cpu_s for t in gated],
        "compare_wall_s": [t.wall_s for t in compares],
        "compare_cpu_s": [t.cpu_s for t in compares],
        "file_bytes": sizes,
    }
    # A benchmark of our own making, timed by pytest-benchmark too: one comparison of the 11 runs.
    benchmark.pedantic(support.run_command, args=(command, case.folder), rounds=1, iterations=1)
