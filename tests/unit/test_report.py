"""Terminal tables (report.terminal): cells, grouping, row order, flagged percentiles, footnotes.

The number formats themselves are the units registry's (tests/unit/test_units.py)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from pytest_ipu.backports import remove_suffix
from pytest_ipu.backports import zip_strict
from pytest_ipu.measure.contention import ContentionRecord
from pytest_ipu.measure.metrics import CpuTime
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.report import terminal as report
from pytest_ipu.report.terminal import Row
from pytest_ipu.results.records import DeviceEnergy
from pytest_ipu.results.records import InstanceRecord
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import ParityRecord
from pytest_ipu.results.records import PowerRecord

#: The CPU time of make_record's window: 0.4 s, 200 rounds of one item, 1.8 ms of CPU time each.
CPU = CpuTime(0.0018, 0.0018, 0.36, 0.36, 0.1, host_per_item_s=0.0018, host_cores=0.9)


def make_record(**changes: Any) -> IpuRecord:
    unsupported = changes.pop("unsupported", ())
    latency = LatencySummary(
        min=0.001,
        p50=changes.pop("p50_s", 0.002),
        p90=0.003,
        p99=changes.pop("p99_s", 0.004),
        max=0.005,
        mean=0.0025,
        rounds=changes.get("rounds", 200),
        unsupported=unsupported,
    )
    base: dict[str, Any] = {
        "target": "torch:cpu",
        "backend": "torch",
        "device": "cpu",
        "device_name": "Some CPU",
        "precision": "fp32",
        "io": "host",
        "batch_size": 1,
        "items_per_call": 1,
        "rounds": 200,
        "rounds_policy": "auto",
        "warmup_rounds": 2,
        "latency_s": latency,
        "window_s": 0.4,
        "throughput_items_per_s": 500.0,  # = batch / p50: the table marks no gap
        "compile_s": 1.5,
        "compile_cached": False,
        "first_call_s": 0.2,
        "cpu": CPU,
    }
    base.update(changes)
    return IpuRecord(**base)


#: How the footnotes under a table begin (each explains a mark or a flag).
NOTE_PREFIXES = (
    "* ",
    "xN = ",
    "[sim] = ",
    "n/m = ",
    "host n/m = ",
    "host CPU/item, ",
    "? = ",
    "~ = ",
    "board = ",
    "^ = ",
    "  ",
    "unstable: ",
    "contended: ",
    "off-cpu: ",
    "capped: ",
    "over-budget: ",
    "rounds-limit: ",
    "contention not measured: ",
    "time budget: ",
)


def _table_lines(lines: list[str], group: str) -> list[str]:
    """A table's header, rule and rows: the lines after its title, up to its footnotes."""
    start = lines.index(f"{group} (latency per call; throughput summed over instances)")
    end = lines.index("", start)
    table = lines[start + 1 : end]
    rows = next((i for i, line in enumerate(table) if i > 1 and line.startswith(NOTE_PREFIXES)), len(table))
    return table[:rows]


def test_one_table_per_group_in_first_seen_order():
    rows = [
        Row("test_b", "test_b[torch-cpu-1]", make_record()),
        Row("test_a", "test_a[torch-cpu-1]", make_record()),
        Row("test_b", "test_b[torch-cpu-8]", make_record(batch_size=8)),
    ]
    lines = report.tables(rows)
    titles = [line for line in lines if line.endswith("(latency per call; throughput summed over instances)")]
    assert titles == [
        "test_b (latency per call; throughput summed over instances)",
        "test_a (latency per call; throughput summed over instances)",
    ]
    # header, rule, one line per row
    assert len(_table_lines(lines, "test_b")) == 2 + 2
    assert len(_table_lines(lines, "test_a")) == 2 + 1
    assert not any(line.startswith("*") for line in lines)


HEADERS = [
    "benchmark",
    "target",
    "precision",
    "batch",
    "rounds",
    "repeats",
    "p50",
    "p99",
    "items/s",
    "host CPU/item",
    "host cores",
    "first call",
    "compile",
    "W",
    "J/item",
    "items/J",
    "energy of",
    "parity",
    "flags",
]


def _footnote(lines: list[str]) -> str:
    """The percentile footnote (power footnotes may follow it)."""
    return next(line for line in lines if line.startswith("* "))


def _cells(line: str) -> list[str]:
    """A table line split into its cells: cells are joined by two or more spaces, and hold at most one."""
    return re.split(r" {2,}", line.strip())


def _row_cells(record: IpuRecord) -> dict[str, str]:
    header, _, row = _table_lines(report.tables([Row("g", "g[a]", record)]), "g")
    return dict(zip_strict(_cells(header), _cells(row)))


def test_header_and_rule():
    lines = report.tables([Row("g", "g[x]", make_record())])
    header, rule, row = _table_lines(lines, "g")
    assert _cells(header) == HEADERS
    assert set(rule) == {"-"}
    assert len(rule) == len(header)
    assert row.split()[:5] == ["[x]", "torch:cpu", "fp32", "1", "200"]


def test_rows_sorted_by_batch_size_then_target():
    rows = [
        Row("g", "g[torch-cuda-8]", make_record(batch_size=8, target="torch:cuda")),
        Row("g", "g[torch-cpu-8]", make_record(batch_size=8, target="torch:cpu")),
        Row("g", "g[torch-cuda-1]", make_record(batch_size=1, target="torch:cuda")),
        Row("g", "g[torch-cpu-32]", make_record(batch_size=32, target="torch:cpu")),
        Row("g", "g[torch-cpu-1]", make_record(batch_size=1, target="torch:cpu")),
    ]
    body = _table_lines(report.tables(rows), "g")[2:]
    assert [line.split()[0] for line in body] == [
        "[torch-cpu-1]",
        "[torch-cuda-1]",
        "[torch-cpu-8]",
        "[torch-cuda-8]",
        "[torch-cpu-32]",
    ]


def test_name_outside_group_is_kept_whole():
    lines = report.tables([Row("custom", "test_x[torch-cpu]", make_record())])
    assert _table_lines(lines, "custom")[2].split()[0] == "test_x[torch-cpu]"


def test_cells_render_record_values():
    record = make_record(
        p50_s=1.36e-3, throughput_items_per_s=700.4, first_call_s=2.5, compile_s=12.3e-6, compile_cached=True
    )
    cells = _row_cells(record)
    assert cells["p50"] == "1.36 ms"
    assert cells["items/s"] == "700"
    assert cells["first call"] == "2.5 s"
    assert cells["compile"] == "12.3 us (cached)"
    assert cells["parity"] == "-"  # not checked


def test_missing_compile_renders_dash():
    assert _row_cells(make_record(compile_s=None))["compile"] == "-"


def _parity(max_rel: float, passed: bool) -> ParityRecord:
    parity = ParityRecord("torch eager fp32 on cpu", 0.5, max_rel, 1e-3)
    assert parity.passed is passed
    return parity


@pytest.mark.parametrize(
    ("parity", "text"),
    [
        (None, "-"),
        (_parity(2.4e-7, True), "ok 2.4e-07"),
        (_parity(0.0, True), "ok 0.0e+00"),
        (_parity(0.25, False), "FAIL 2.5e-01"),
        (_parity(float("inf"), False), "FAIL inf"),
    ],
)
def test_parity_cell_says_whether_it_passed_and_the_max_relative_error(parity, text):
    assert _row_cells(make_record(parity=parity))["parity"] == text


def test_flagged_percentile_gets_star_and_footnote():
    rows = [
        Row("g", "g[few]", make_record(rounds=50, p99_s=0.004, unsupported=("p99",))),
        Row("g", "g[many]", make_record(batch_size=2, rounds=200, p99_s=0.004)),
    ]
    lines = report.tables(rows)
    few, many = _table_lines(lines, "g")[2:]
    assert "4 ms*" in few
    assert "*" not in many
    assert _footnote(lines) == (
        "* too few rounds for this percentile (p99 needs >= 100): it is the maximum of the rounds run"
    )


def test_footnote_names_every_flagged_percentile():
    rows = [Row("g", "g[one]", make_record(rounds=1, unsupported=("p50", "p90", "p99")))]
    lines = report.tables(rows)
    row = _table_lines(lines, "g")[2]
    assert row.count("*") == 2  # p50 and p99 columns; p90 has no column
    assert _footnote(lines).startswith(
        "* too few rounds for this percentile (p50 needs >= 2, p99 needs >= 100)"
    )


def test_no_footnote_for_percentile_without_column():
    rows = [Row("g", "g[x]", make_record(rounds=9, unsupported=("p90",)))]
    lines = report.tables(rows)
    assert not any(line.startswith("*") for line in lines)
    assert "*" not in _table_lines(lines, "g")[2]


def test_no_rows_no_lines():
    assert report.tables([]) == []


def _power(**changes: Any) -> PowerRecord:
    base: dict[str, Any] = {
        "measured": True,
        "source": "rapl",
        "energy_j": 6.0,
        "mean_power_w": 46.25,
        "energy_per_item_j": 0.015,
        "items_per_j": 1234.5,
        "valid": True,
    }
    return PowerRecord(**{**base, **changes})


@pytest.mark.parametrize(
    ("power", "cells"),
    [
        (_power(), ("46.2", "0.015", "1,234")),
        (
            _power(low_confidence=True, warnings=("low confidence: window 1 s < 5 s",)),
            ("~46.2", "~0.015", "~1,234"),
        ),
        (_power(valid=False, reason="counter reset"), ("?", "?", "?")),
        (_power(items_per_j=None, energy_per_item_j=None), ("46.2", "?", "?")),
        (PowerRecord(measured=False, source="off", reason="power measurement is off"), ("n/m",) * 3),
        (None, ("n/m",) * 3),
    ],
)
def test_power_cells_read_the_typed_flags(power, cells):
    row = _row_cells(make_record(power=power))
    assert (row["W"], row["J/item"], row["items/J"]) == cells


def _device(scope: str, ipus: tuple[int, ...] = (), unused: tuple[int, ...] = ()) -> DeviceEnergy:
    return DeviceEnergy(f"dev-{scope}-{ipus}", "a device", scope, 6.0, 46.25, None, ipus, unused)


@pytest.mark.parametrize(
    ("devices", "cell"),
    [
        # Each IPU read on its own: the IPUs, ranges kept short (a Pod's 64 IPUs stay one cell).
        ((_device("ipu", (0,)),), "ipus 0"),
        ((_device("ipu", (0,)), _device("ipu", (1,))), "ipus 0-1"),
        (tuple(_device("ipu", (i,)) for i in (0, 1, 2, 3, 6)), "ipus 0-3,6"),
        # A C2 card's board reading: its IPUs, and the one the benchmark left idle that shares it.
        ((_device("ipu-board", (2, 3), (3,)),), "board 2-3 (3 idle)"),
        ((_device("ipu-board", (0, 1)),), "board 0-1"),
        ((_device("gpu"),), "gpu"),
        ((_device("cpu-package"), _device("dram")), "cpu-package+dram"),
    ],
)
def test_the_energy_scope_cell_says_what_the_energy_covers(devices, cell):
    assert _row_cells(make_record(power=_power(devices=devices)))["energy of"] == cell


@pytest.mark.parametrize(
    "power", [None, PowerRecord(measured=False, source="gcipuinfo", reason="which IPUs is unknown")]
)
def test_the_energy_scope_of_an_unmeasured_benchmark_is_not_measured(power):
    assert _row_cells(make_record(power=power))["energy of"] == "n/m"


def test_a_board_reading_has_a_footnote_and_the_scope_goes_before_the_energy_figures():
    board = _power(devices=(_device("ipu-board", (2, 3), (3,)),))
    rows = [Row("g", "g[a]", make_record(power=board))]
    assert report.footnotes(rows)[-1].startswith("board = the energy is whole boards' readings")
    assert report.DROP_ORDER.index("energy of") < report.DROP_ORDER.index("W")

    def header(width: int | None) -> list[str]:
        return _cells(next(line for line in report.tables(rows, width=width) if line.startswith("benchmark")))

    assert "energy of" in header(None)
    # Narrowed a character at a time: the scope goes while the energy figures stay.
    width = len(" ".join(header(None))) * 2
    while "energy of" in header(width):
        width -= 1
    assert {"W", "J/item"} <= set(header(width))


def test_low_confidence_comes_from_the_flag_not_the_warning_text():
    # A warning that merely reads like the old one is not a flag; the flag alone marks the cell.
    worded = _power(warnings=("low confidence: window 1 s < 5 s",))
    assert _row_cells(make_record(power=worded))["W"] == "46.2"
    assert report.footnotes([Row("g", "g[a]", make_record(power=worded))]) == []
    flagged = _power(low_confidence=True)
    assert report.footnotes([Row("g", "g[a]", make_record(power=flagged))]) == [
        "~ = low confidence: the energy window is shorter than the sensor needs"
    ]


def test_footnotes_of_one_table_are_the_footnotes_of_its_rows():
    rows = [
        Row("g", "g[few]", make_record(rounds=50, unsupported=("p99",), power=_power(low_confidence=True))),
        Row("h", "h[off]", make_record(power=PowerRecord(measured=False, source="off", reason="off here"))),
        Row(
            "h", "h[bad]", make_record(target="torch:cuda", power=_power(valid=False, reason="counter reset"))
        ),
        Row("h", "h[sim]", make_record(simulator=True)),
    ]
    notes = report.footnotes(rows)
    assert notes == [
        "* too few rounds for this percentile (p99 needs >= 100): it is the maximum of the rounds run",
        "[sim] = a simulator (the IPU Model): its timings are not hardware timings",
        "~ = low confidence: the energy window is shorter than the sensor needs",
        "n/m = power not measured: off here",
        "? = power window invalid (torch:cuda): counter reset",
        "n/m = power not measured: no power record",
    ]
    # Only the percentile columns given are footnoted.
    columns = [c for c in report.COLUMNS if c.header != "p99"]
    assert report.footnotes(rows, columns)[0].startswith("[sim]")


def _blocks(lines: list[str]) -> dict[str, list[str]]:
    """Each table's lines after its rule (its rows, then its footnotes), by group, up to its blank line."""
    out: dict[str, list[str]] = {}
    for start, line in enumerate(lines):
        if line.endswith(" (latency per call; throughput summed over instances)"):
            group = remove_suffix(line, " (latency per call; throughput summed over instances)")
            out[group] = lines[start + 3 : lines.index("", start)]
    return out


def test_each_table_is_followed_by_its_own_footnotes_only():
    rows = [
        Row("h", "h[off]", make_record(power=PowerRecord(measured=False, source="off", reason="off here"))),
        Row("g", "g[few]", make_record(rounds=50, unsupported=("p99",), power=_power())),
        Row("g", "g[many]", make_record(batch_size=2, power=_power())),
    ]
    lines = report.tables(rows)
    blocks = _blocks(lines)
    assert list(blocks) == ["h", "g"]
    # h: its row, then the n/m note; no percentile note, as no p99 of h is flagged.
    assert blocks["h"] == [blocks["h"][0], "n/m = power not measured: off here"]
    # g: its two rows, then the percentile note; the n/m note is h's alone.
    assert blocks["g"][2:] == [
        "* too few rounds for this percentile (p99 needs >= 100): it is the maximum of the rounds run"
    ]
    assert lines.count("n/m = power not measured: off here") == 1
    assert lines[-1] == ""


def test_a_footnote_two_tables_need_is_under_each():
    off = PowerRecord(measured=False, source="off", reason="off here")
    rows = [Row(g, f"{g}[a]", make_record(power=off)) for g in ("g", "h")]
    blocks = _blocks(report.tables(rows))
    for group in ("g", "h"):
        assert blocks[group][1:] == ["n/m = power not measured: off here"]


# -- repeats and flags -----------------------------------------------------------------------------


def _flagged(**changes: Any) -> IpuRecord:
    from pytest_ipu.measure.contention import ContentionRecord
    from pytest_ipu.results.records import BudgetRecord
    from pytest_ipu.results.records import RepeatRecord
    from pytest_ipu.results.records import StabilityRecord

    lat = LatencySummary(0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 10)
    repeats = tuple(RepeatRecord(i, 10, 0.5, lat, t) for i, t in ((1, 100.0), (2, 150.0), (3, 100.0)))
    base: dict[str, Any] = {
        "repeats": repeats,
        "stability": StabilityRecord(3, "interleaved", 0.2165, 0.01, 0.05, True),
        "contention": ContentionRecord(
            True, window_s=1.5, cpus=2, others_share=0.48, load_avg_1m=2.5, contended=True
        ),
        "budget": BudgetRecord(2.0, 6.0, 6.0, "cap", min_rounds_past_budget=True),
        "compile_info": {"threads": {"intra_op": 2, "inter_op": 2, "requested": {"intra_op": "auto"}}},
    }
    return make_record(**{**base, **changes})


def test_the_contended_footnote_cites_the_repeat_that_set_the_flag() -> None:
    """Averaged over the windows the share is below the threshold; the footnote cites the window
    that was above it, naming its repeat, and the average beside it."""
    contention = ContentionRecord(
        True, window_s=3.0, cpus=2, others_share=0.07, contended=True, flagged_share=0.31, flagged_repeat=2
    )
    lines = report.tables([Row("g", "g[a]", _flagged(contention=contention))])
    assert (
        "contended: [a]: other processes used 31% of the machine's CPU during repeat 2 (7% over all the "
        "windows), above 10%; torch ran 2 intra-op threads, which wait on each other when others take "
        "the CPU: --ipu-torch-threads=1 avoids it"
    ) in lines


def test_flags_and_repeats_have_cells_and_footnotes_with_their_figures() -> None:
    cells = _row_cells(_flagged())
    assert cells["repeats"] == "3 cv 21.6%"
    assert cells["flags"] == "unstable,contended,capped,over-budget"
    lines = report.tables([Row("g", "g[a]", _flagged())])
    assert "unstable: [a]: throughput varied 21.6% (cv) between 3 repeats, above 5%" in lines
    assert (
        "contended: [a]: other processes used 48% of the machine's CPU during the windows, above 10%, load "
        "average 2.50; torch ran 2 intra-op threads, which wait on each other when others take the CPU: "
        "--ipu-torch-threads=1 avoids it"
    ) in lines
    assert "capped: [a]: the hard cap (6 s) ended the rounds: 6 s of a 2 s budget" in lines
    assert "over-budget: [a]: the minimum rounds took 6 s of a 2 s budget" in lines
    assert lines[-2:] == [
        "time budget: 1 auto-round benchmark(s), window / budget 3.00 to 3.00; farthest from it: [a] at 3.00",
        "",
    ]


def test_flag_notes_name_the_group_when_they_cover_several() -> None:
    notes = report.footnotes([Row("g", "g[a]", _flagged()), Row("h", "h[b]", make_record())])
    assert "over-budget: g [a]: the minimum rounds took 6 s of a 2 s budget" in notes
    assert notes[-1].endswith("farthest from it: g [a] at 3.00")


def test_threads_asked_for_get_no_hint_and_a_quiet_record_no_flags() -> None:
    asked = _flagged(compile_info={"threads": {"intra_op": 1, "requested": {"intra_op": 1}}})
    contended = next(
        line for line in report.tables([Row("g", "g[a]", asked)]) if line.startswith("contended")
    )
    assert "--ipu-torch-threads" not in contended
    quiet = make_record()
    assert _row_cells(quiet)["flags"] == "-"
    assert _row_cells(quiet)["repeats"] == "1"
    assert not any(
        line.startswith(("unstable", "contended", "capped", "time budget"))
        for line in report.tables([Row("g", "g[a]", quiet)])
    )


def _off_cpu(share: float) -> Any:
    from pytest_ipu.measure.metrics import CpuTime

    # A window of 0.4 s the thread ran (1 - share) of; 1.5 ms of CPU per 2 ms call (p50).
    return CpuTime(0.0015, 0.0015, 0.3, 0.4 * (1 - share), share)


def test_a_host_benchmark_mostly_off_the_cpu_is_flagged_with_its_share_beside_its_wall_time() -> None:
    record = make_record(cpu=_off_cpu(0.4))
    assert _row_cells(record)["flags"] == "off-cpu"
    assert _row_cells(record)["p50"] == "2 ms"  # the wall figures stay as they are
    lines = report.tables([Row("g", "g[a]", record)])
    assert (
        "off-cpu: [a]: the thread running the rounds was off the CPU 40% of the windows' wall time "
        "(descheduled, or waiting); CPU time per round 1.5 ms, wall p50 2 ms"
    ) in lines


@pytest.mark.parametrize(
    ("device", "share"), [("cpu", 0.2), ("cuda:0", 0.9), ("ipu", 0.9)], ids=["below", "cuda", "ipu"]
)
def test_no_off_cpu_flag_below_the_share_or_for_an_accelerator(device: str, share: float) -> None:
    # On an accelerator the thread may wait for the device off the CPU: nothing of the host's.
    record = make_record(device=device, cpu=_off_cpu(share))
    assert _row_cells(record)["flags"] == "-"
    assert not any(line.startswith("off-cpu") for line in report.tables([Row("g", "g[a]", record)]))


def test_the_host_cost_columns_show_cpu_time_per_item_and_cores() -> None:
    row = _row_cells(make_record())
    assert (row["host CPU/item"], row["host cores"]) == ("1.8 ms", "0.9")
    assert not any(line.startswith("host ") for line in report.tables([Row("g", "g[a]", make_record())]))


def test_instances_in_worker_processes_say_the_host_cost_counts_them() -> None:
    workers = dataclasses.replace(CPU, process_total_s=1.2, workers=2, workers_total_s=1.0, host_cores=3.0)
    lines = report.tables([Row("g", "g[a]", make_record(cpu=workers))])
    assert _row_cells(make_record(cpu=workers))["host cores"] == "3"
    assert (
        "host CPU/item, host cores of [a]: this process and its 2 instance worker processes together" in lines
    )


@pytest.mark.parametrize(
    ("cpu", "reason"),
    [
        (None, "no CPU time: the record predates it"),
        (CpuTime(0.0018, 0.0018, 0.36, 0.36, 0.1), "no host cost: the record predates it"),
    ],
    ids=["no-cpu", "older-cpu"],
)
def test_a_record_without_host_cost_shows_not_measured_and_why_never_a_zero(cpu: Any, reason: str) -> None:
    record = make_record(cpu=cpu)
    row = _row_cells(record)
    assert (row["host CPU/item"], row["host cores"]) == ("n/m", "n/m")
    notes = report.footnotes([Row("g", "g[a]", record)])
    assert [n for n in notes if n.startswith("host n/m = host cost not measured: ")] == [
        n for n in notes if reason in n
    ]
    assert len([n for n in notes if reason in n]) == 1
    # A table without the host columns has no note about them.
    columns = [c for c in report.COLUMNS if not c.header.startswith("host ")]
    assert not any(n.startswith("host ") for n in report.footnotes([Row("g", "g[a]", record)], columns))


def test_unreadable_contention_is_said_once() -> None:
    from pytest_ipu.measure.contention import ContentionRecord

    blind = ContentionRecord(False, reason="/proc/stat is not readable here (not Linux?)")
    rows = [Row("g", f"g[{n}]", make_record(contention=blind)) for n in "ab"]
    lines = report.tables(rows)
    assert lines.count("contention not measured: /proc/stat is not readable here (not Linux?)") == 1


@pytest.mark.parametrize(
    ("throughput", "marked"),
    [(500.0, False), (380.0, False), (370.0, True), (630.0, True), (620.0, False)],
)
def test_items_per_s_far_from_batch_over_p50_is_marked(throughput: float, marked: bool) -> None:
    # p50 2 ms at batch 1: batch / p50 = 500 items/s; a quarter either way is tolerated.
    cells = _row_cells(make_record(throughput_items_per_s=throughput))
    assert cells["items/s"].endswith("^") is marked


def test_the_gap_footnote_reconciles_the_two_columns() -> None:
    # 200 rounds in 0.8 s: the mean round is 4 ms, twice the 2 ms median, because of a slow tail.
    record = make_record(
        throughput_items_per_s=2000.0, window_s=0.8, p99_s=0.05, batch_size=8, items_per_call=8
    )
    lines = report.tables([Row("g", "g[8]", record)])
    notes = [line for line in lines if line.startswith(("^ = ", "  [8]"))]
    assert notes[0].startswith("^ = items/s is more than a quarter away from batch / p50")
    assert notes[1] == "  [8]: mean round 4 ms, p50 2 ms, p99 50 ms; batch / p50 would give 4,000 items/s"


def test_instances_count_in_the_median_rate() -> None:
    # Two instances of batch 1 at p50 2 ms deliver up to 1,000 items/s together: no gap.
    instance = InstanceRecord(
        0, "torch:cpu", "cpu", "CPU", None, {}, {}, calls=200, latency_s=make_record().latency_s
    )
    record = make_record(
        throughput_items_per_s=1000.0, instances=(instance, dataclasses.replace(instance, index=1))
    )
    assert not _row_cells(record)["items/s"].endswith("^")
