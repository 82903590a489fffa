"""``ipu_cycles``: the IPU's own cycle count per call, from the SDK fakes to a gate's verdict.

The fakes count as the SDKs do (``cycleCount`` and ``getCycleCount`` raise where the real ones do,
and a count is deterministic per graph and batch: ``CALL_CYCLES`` plus, per micro-batch, the
model's parameter elements and the micro-batch's input elements), so the records are asserted
exactly. The counts are read in a counting pass after the timed rounds, never inside them (shown by
the order of the calls), in every repeat; a counter that is off says why; a gate on an exact count
decides in one run with zero spread.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.backends.base import CallCounter
from pytest_ipu.backends.host import wrap_callable
from pytest_ipu.backends.ipu import cycles as counter_option
from pytest_ipu.backends.ipu.poptorch import PopTorchBackend
from pytest_ipu.devices.ipu_clock import parse_clock_hz
from pytest_ipu.devices.ipu_clock import read_clock
from pytest_ipu.errors import CompileError
from pytest_ipu.placement import plan as placed
from pytest_ipu.results import ab
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import changes
from pytest_ipu.results import counts
from pytest_ipu.results import decide
from pytest_ipu.results import gates
from pytest_ipu.results import level_shift
from pytest_ipu.results import schema
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import RepeatRecord
from pytest_ipu.run.benchmark import Measurement
from pytest_ipu.run.benchmark import RepeatContext
from pytest_ipu.run.benchmark import measure
from pytest_ipu.run.benchmark import pool
from pytest_ipu.run.counting import COUNTING_CALLS
from pytest_ipu.run.plan import RoundsPolicy
from tests.fakes import fake_gcipuinfo
from tests.fakes.fake_pedantic import RecordingBenchmark
from tests.unit import run_files
from tests.unit import test_history
from tests.unit import test_placed
from tests.unit.test_run import FakeProbe
from tests.unit.test_schema import make_record

torch = pytest.importorskip("torch")
fake_poptorch = importlib.import_module("tests.fakes.fake_poptorch")

REPEATS = 3
GOLDEN = Path(__file__).parent.parent / "golden"


@pytest.fixture(autouse=True)
def fresh_machine(monkeypatch: pytest.MonkeyPatch):
    """4 free fake IPUs, and a fake gcipuinfo (an M2000 at 1300 MHz) as ``import gcipuinfo`` gives it."""
    for var in fake_poptorch.ENVIRONMENT:
        monkeypatch.delenv(var, raising=False)
    fake_poptorch.reset()
    monkeypatch.setitem(sys.modules, "gcipuinfo", fake_gcipuinfo.FakeGcIpuInfoModule(fake_gcipuinfo.m2000()))
    yield
    fake_poptorch.reset()


def mlp(hidden: int = 32) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 4)
    ).eval()


def expected_poptorch(model: torch.nn.Module, batch: int, micro_batches: int = 1) -> int:
    """The fake's count of one call: its stated model, from the graph and the batch."""
    parameters = sum(p.numel() for p in model.parameters())
    return fake_poptorch.CALL_CYCLES + micro_batches * (parameters + batch // micro_batches * 16)


def poptorch_backend(device: str = "ipu") -> PopTorchBackend:
    return PopTorchBackend(device=device, poptorch_module=fake_poptorch, torch_module=torch)


def repeats(compiled, inputs: Sequence[object], n: int = REPEATS, probe=None) -> Measurement:
    """``n`` repeats of ``compiled`` (fixed rounds), pooled as the plugin pools them."""
    parts = []
    for index in range(1, n + 1):
        timer = RecordingBenchmark()
        parts.append(
            measure(
                compiled,
                inputs,
                items_per_call=None,
                policy=RoundsPolicy(warmup_rounds=1, rounds=4, max_time_s=1.0, min_rounds=1),
                timer=timer,
                round_times_s=lambda timer=timer: timer.times_s,
                meter=None,
                context=RepeatContext(index=index, probe=probe),
            )
        )
    return pool(parts, "interleaved", 0.05)


# -- the fakes count as the SDKs do ------------------------------------------------------------------


def test_poptorch_cycle_count_raises_as_poptorch_does_until_a_run_with_the_option_on():
    x = torch.randn(4, 16)
    off = fake_poptorch.inferenceModel(mlp())
    with pytest.raises(fake_poptorch.Error, match="Cycle count logging is disabled"):
        off.cycleCount()
    model = mlp()
    on = fake_poptorch.inferenceModel(model, fake_poptorch.Options().logCycleCount(True))
    with pytest.raises(fake_poptorch.Error, match="Please run the model at least once"):
        on.cycleCount()
    on.compile(x)
    with pytest.raises(fake_poptorch.Error, match="Please run the model at least once"):
        on.cycleCount()
    on(x)
    assert on.cycleCount() == expected_poptorch(model, 4)
    on.destroy()
    off.destroy()


def test_poptorch_counts_are_deterministic_per_graph_and_batch_and_count_the_first_replica():
    counted = {}
    for name, model, batch, iterations, replicas in (
        ("small", mlp(32), 4, 1, 1),
        ("wider", mlp(64), 4, 1, 1),
        ("batch 8", mlp(32), 8, 1, 1),
        ("2 iterations", mlp(32), 8, 2, 1),
        ("2 replicas", mlp(32), 8, 1, 2),
    ):
        opts = fake_poptorch.Options().logCycleCount(True).deviceIterations(iterations)
        opts.replicationFactor(replicas)
        executor = fake_poptorch.inferenceModel(model, opts)
        x = torch.randn(batch, 16)
        executor(x)
        first = executor.cycleCount()
        executor(torch.randn(batch, 16))  # other data, same graph and batch: the same count
        assert executor.cycleCount() == first, name
        counted[name] = first
        executor.destroy()
    small = mlp(32)
    assert counted["small"] == expected_poptorch(small, 4)
    assert counted["wider"] == expected_poptorch(mlp(64), 4)
    assert counted["batch 8"] == expected_poptorch(small, 8)
    assert counted["2 iterations"] == expected_poptorch(small, 8, micro_batches=2)
    # Two replicas of 4 each: the count is the first replica's, as PopTorch's cycleCount says.
    assert counted["2 replicas"] == expected_poptorch(small, 4)


# -- the PopTorch backend: every repeat counts, outside the timed rounds ------------------------------


def test_every_repeat_records_the_cycles_per_call_and_the_device_time_at_the_clock():
    model = mlp()
    x = torch.randn(4, 16)
    compiled = poptorch_backend().compile(model, (x,), "fp32", {"cycle_counter": True})
    try:
        record = repeats(compiled, (x,)).record
    finally:
        compiled.close()
    cycles = expected_poptorch(model, 4)
    assert len(record.repeats) == REPEATS
    for repeat in record.repeats:
        count = repeat.counts["ipu_cycles"]
        assert count.per_call == cycles
        assert count.reads == (cycles,) * COUNTING_CALLS
        # PopTorch reads the counter at the end of every call: the record says the timed rounds held it.
        assert count.method == counter_option.IN_EVERY_CALL
        assert count.clock_hz == 1.3e9
        assert "gcipuinfo 'clock'" in (count.clock or "")
        assert count.time_s == cycles / 1.3e9
    assert record.value("ipu_cycles") == cycles
    assert record.repeat_values("ipu_cycles") == (cycles,) * REPEATS
    assert record.counts["ipu_cycles"].reads == (cycles,) * (COUNTING_CALLS * REPEATS)
    # The record reads back as written.
    assert schema.from_json(schema.to_json(record)) == record


def test_the_counts_are_read_after_the_timed_window_never_inside_it():
    events: list[str] = []

    def call() -> None:
        events.append("call")

    def read() -> int:
        events.append("read")
        return 1000

    compiled = dataclasses.replace(
        wrap_callable(call),
        counters=(CallCounter("ipu_cycles", read, None, lambda: (None, "no clock here")),),
    )
    record = repeats(compiled, (), n=1, probe=FakeProbe(events, 0.0)).record
    # First call and one warm-up call, the window's 4 rounds, then the counting pass.
    assert events == [
        "call",
        "call",
        "probe start",
        *["call"] * 4,
        "probe stop",
        *["call", "read"] * COUNTING_CALLS,
    ]
    count = record.counts["ipu_cycles"]
    assert (count.per_call, count.clock_hz, count.clock, count.time_s) == (
        1000.0,
        None,
        "no clock here",
        None,
    )


def test_poptorchs_counter_is_off_by_default_and_says_why_in_every_repeat_and_in_the_gate_message():
    x = torch.randn(4, 16)
    compiled = poptorch_backend().compile(mlp(), (x,), "fp32", {})
    try:
        record = repeats(compiled, (x,)).record
    finally:
        compiled.close()
    why = counter_option.POPTORCH_OFF
    assert why.startswith(
        "the cycle counter is off (the poptorch backend option cycle_counter=False, its default"
    )
    assert [r.counts["ipu_cycles"].reason for r in record.repeats] == [why] * REPEATS
    assert all(r.counts["ipu_cycles"].per_call is None for r in record.repeats)
    assert record.value("ipu_cycles") is None
    assert record.why_missing("ipu_cycles") == f"ipu_cycles not counted: {why}"
    # Not compiled in: PopTorch never saw logCycleCount.
    assert fake_poptorch.executors[-1].options._Popart.options["instrumentWithHardwareCycleCounter"] is False
    verdict = decide.check(gates.parse("ipu_cycles:+1%"), "b", record, record)
    assert verdict.failed
    assert why in verdict.method


def test_the_ipu_model_has_no_hardware_counter_and_its_record_says_so():
    x = torch.randn(4, 16)
    compiled = poptorch_backend("ipu-model").compile(mlp(), (x,), "fp32", {"cycle_counter": True})
    try:
        record = repeats(compiled, (x,), n=1).record
    finally:
        compiled.close()
    assert record.counts["ipu_cycles"].reason == (
        "the IPU Model simulator has no hardware cycle counter (cycle counts are IPU hardware only)"
    )
    assert fake_poptorch.executors[-1].options._Popart.options["instrumentWithHardwareCycleCounter"] is False


def test_a_read_the_sdk_refuses_is_recorded_with_its_message():
    def refuse() -> int:
        raise RuntimeError("Cycle count logging is disabled.")

    compiled = dataclasses.replace(wrap_callable(lambda: None), counters=(CallCounter("ipu_cycles", refuse),))
    record = repeats(compiled, (), n=1).record
    assert record.counts["ipu_cycles"].reason == (
        "reading the counter raised RuntimeError: Cycle count logging is disabled."
    )
    assert record.value("ipu_cycles") is None


def test_a_target_without_a_counter_has_no_count_and_a_reason():
    record = repeats(wrap_callable(lambda: None), (), n=1).record
    assert "ipu_cycles" not in record.counts  # the host's own count (host_instructions) it does have
    assert "ipu_cycles not counted: the record has no such count" in record.why_missing("ipu_cycles")


def test_the_option_must_be_a_bool():
    with pytest.raises(CompileError, match=r"cycle_counter='yes' for Sequential; use True"):
        poptorch_backend().compile(mlp(), (torch.randn(4, 16),), "fp32", {"cycle_counter": "yes"})


# -- the clock --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "hz"), [("1330MHz", 1.33e9), ("1300 MHz", 1.3e9), ("1.85GHz", 1.85e9), ("N/A", None)]
)
def test_gcipuinfo_clock_strings_parse_to_hz(text: str, hz: float | None):
    assert parse_clock_hz(text) == hz


@pytest.mark.parametrize("text", ["", "1330", "fast", "-5MHz", "0MHz"])
def test_a_clock_that_is_not_one_is_an_error_naming_it(text: str):
    with pytest.raises(ValueError, match=repr(text)):
        parse_clock_hz(text)


def test_no_clock_is_ever_guessed():
    def module(*ipus: fake_gcipuinfo.FakeIpu) -> fake_gcipuinfo.FakeGcIpuInfoModule:
        return fake_gcipuinfo.FakeGcIpuInfoModule(list(ipus))

    board = fake_gcipuinfo.m2000()
    hz, where = read_clock([1], module(*board))
    assert (hz, where) == (1.3e9, "gcipuinfo 'clock' of IPU(s) 1 (1: 1300MHz)")
    slow = dataclasses.replace(board[1], extra={"clock": "1250MHz"})
    assert read_clock(None, module(board[0], slow))[0] is None
    assert "report different clocks" in read_clock(None, module(board[0], slow))[1]
    na = dataclasses.replace(board[0], extra={"clock": "N/A"})
    assert read_clock([0], module(na)) == (None, "no IPU clock: gcipuinfo's 'clock' is N/A (0: N/A)")
    assert read_clock([7], module(*board)) == (None, "no IPU clock: gcipuinfo lists none of IPU(s) 7")


def test_without_gcipuinfo_the_count_stands_and_its_time_is_not_given(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "gcipuinfo", None)  # import gcipuinfo raises ImportError
    model, x = mlp(), torch.randn(4, 16)
    compiled = poptorch_backend().compile(model, (x,), "fp32", {"cycle_counter": True})
    try:
        record = repeats(compiled, (x,), n=1).record
    finally:
        compiled.close()
    count = record.counts["ipu_cycles"]
    assert count.per_call == expected_poptorch(model, 4)
    assert count.clock_hz is None
    assert count.time_s is None
    assert (count.clock or "").startswith("no IPU clock: gcipuinfo could not list the IPUs")


# -- the exact rule -----------------------------------------------------------------------------------


def counted(*per_repeat: int) -> IpuRecord:
    """A record whose repeats counted ``per_repeat`` cycles per call (each read three times)."""
    parts = [counts.measured((c,) * 3, counts.COUNTING_PASS, 1.3e9, "gcipuinfo") for c in per_repeat]
    base = make_record()
    reps = tuple(
        RepeatRecord(i + 1, 10, 0.5, base.latency_s, base.throughput_items_per_s, counts={"ipu_cycles": p})
        for i, p in enumerate(parts)
    )
    return make_record(repeats=reps, counts={"ipu_cycles": counts.pool(parts)})


GATE = gates.parse("ipu_cycles:+1%")


@pytest.mark.parametrize(
    ("now", "outcome"),
    [(1_000_000, "PASS"), (1_009_999, "PASS"), (1_010_000, "PASS"), (1_010_001, "FAIL"), (990_000, "PASS")],
)
def test_a_one_percent_cycle_gate_decides_in_one_run_with_three_repeats(now: int, outcome: str):
    verdict = decide.check(GATE, "b", counted(now, now, now), counted(1_000_000, 1_000_000, 1_000_000))
    assert verdict.outcome == outcome
    ratio = now / 1_000_000
    assert verdict.interval == (ratio, ratio)
    assert verdict.p_fail == (0.0 if outcome == "FAIL" else 1.0)
    assert verdict.method.startswith("exact: 3 current and 3 baseline repeats")
    assert verdict.noise == "exact count, no spread"


def test_one_repeat_shows_nothing_about_repeatability():
    verdict = decide.check(GATE, "b", counted(1_000_000), counted(1_000_000))
    assert verdict.inconclusive
    assert verdict.method == "no variance estimate"


def test_counts_that_vary_between_repeats_go_to_the_ordinary_rule():
    verdict = decide.check(
        GATE, "b", counted(1_000_000, 1_000_500, 999_800), counted(1_000_000, 1_000_000, 1_000_000)
    )
    assert verdict.method.startswith("repeats:")
    assert verdict.inconclusive  # within the drift allowance of a 1 % threshold: it cannot tell
    assert verdict.interval is not None
    assert all(math.isfinite(v) for v in verdict.interval)


def test_an_absolute_cycle_gate_with_zero_spread_decides_without_dividing_by_it():
    record = counted(1_000_000, 1_000_000, 1_000_000)
    assert decide.check(gates.parse("ipu_cycles<1.5e6"), "b", record).passed
    failed = decide.check(gates.parse("ipu_cycles<9e5"), "b", record)
    assert failed.failed
    assert failed.p_fail == 0.0


def test_a_level_shift_of_the_host_takes_back_no_cycle_verdict():
    verdict = decide.check(GATE, "b", counted(*[1_020_000] * 3), counted(*[1_000_000] * 3))
    assert verdict.failed
    slower = level_shift.LevelShift(0.3, 0.25, 0.35, 0.0, 1.3, 1.0, 3, "test")
    assert slower.moved
    assert slower.slower
    assert level_shift.judge(verdict, slower) == verdict
    latency = decide.Verdict(
        gates.parse("latency.p50:+1%"), "b", "FAIL", 1.0, 1.02, 0.02, (1.015, 1.025), "x"
    )
    assert level_shift.judge(latency, slower).inconclusive  # a time, unlike a count, it takes back


def test_ab_pairs_of_equal_counts_decide_without_dividing_by_zero():
    assert ab.check_paired(GATE, "b", [1e6] * 3, [1.005e6] * 3).passed
    failed = ab.check_paired(GATE, "b", [1e6] * 3, [1.02e6] * 3)
    assert failed.failed
    assert failed.p_fail == 0.0


# -- the record's JSON -----------------------------------------------------------------------------


def test_a_record_without_counts_is_written_as_before_and_reads_with_none():
    plain = make_record()
    data = schema.to_json(plain)
    assert "counts" not in data
    assert schema.from_json(data).counts == {}
    record = counted(1_000_000, 1_000_000)
    data = schema.to_json(record)
    assert data["counts"]["ipu_cycles"] == {
        "per_call": 1e6,
        "reason": None,
        "method": "counting pass",
        "reads": [1_000_000] * 6,
        "clock_hz": 1.3e9,
        "clock": "gcipuinfo",
        "time_s": 1e6 / 1.3e9,
    }
    assert data["repeats"][0]["counts"]["ipu_cycles"]["reads"] == [1_000_000] * 3
    assert schema.from_json(data) == record


def test_a_bad_count_in_a_file_is_an_error_naming_it():
    data = schema.to_json(counted(1_000_000, 1_000_000))
    data["repeats"][1]["counts"]["ipu_cycles"]["reads"][2] = -4
    with pytest.raises(schema.SchemaError, match=r"repeats\[1\]\.counts\.ipu_cycles\.reads\[2\]"):
        schema.from_json(data)


# -- history across commits -------------------------------------------------------------------------


def test_history_finds_the_commit_a_count_stepped_at_and_fails_its_check(tmp_path):
    folder = tmp_path / test_history.MACHINE
    for number in range(1, 13):
        cycles = 1_000_000 if number < 9 else 1_012_000  # +1.2 % from c09 on, exactly
        bench = run_files.bench(4, 0.001, 4000.0)
        record = schema.from_json(bench["extra_info"]["ipu"])
        parts = [counts.measured((cycles,) * 3, counts.COUNTING_PASS, None, "no clock")]
        bench["extra_info"]["ipu"] = schema.to_json(
            dataclasses.replace(record, counts={"ipu_cycles": parts[0]})
        )
        test_history._save(
            folder, number, f"c{number:02d}", [bench], commit_time=test_history._minute(number)
        )
    found = test_history._load(tmp_path, machines=[test_history.MACHINE], metrics=["ipu_cycles"])
    [series] = found.series
    assert series.metric == "ipu_cycles"
    result = changes.report(found, 0.01)
    assert [(c.commit, c.worse) for c in result.changes] == [("c09", True)]
    [verdict] = result.verdicts
    assert verdict.outcome == decide.FAIL


def test_the_golden_file_with_counts_reads_back_and_writes_the_same_json():
    """A file written when counts were added (tests/golden/README.md): typed records that write back
    byte for byte the JSON they came from, the count in the record and in every repeat."""
    path = GOLDEN / "schema-v2-counts.json"
    stored = {b["name"]: b["extra_info"]["ipu"] for b in json.loads(path.read_text())["benchmarks"]}
    run = benchmark_json.read_run(path)
    records = {b.name: b.record for b in run.benchmarks}
    for name, record in records.items():
        assert record is not None
        assert schema.to_json(record) == stored[name], name
    counted = records["test_cycles[poptorch-ipu]"]
    assert counted is not None
    assert counted.value("ipu_cycles") == 2740.0
    assert counted.repeat_values("ipu_cycles") == (2740.0,) * 3
    assert counted.counts["ipu_cycles"].time_s == 2740.0 / 1.3e9
    off = records["test_counter_off[poptorch-ipu]"]
    assert off is not None
    assert off.why_missing("ipu_cycles") == (
        "ipu_cycles not counted: the cycle counter is off (the poptorch backend option cycle_counter=False)"
    )
    plain = records["test_no_counter[torch-cpu]"]
    assert plain is not None
    assert plain.counts == {}
    assert plain.value("ipu_cycles") is None


# -- pooling the repeats' counts ---------------------------------------------------------------------


def test_pooled_counts_need_every_repeat_and_one_clock():
    a = counts.measured((100, 100, 101), counts.COUNTING_PASS, 1.3e9, "gcipuinfo")
    b = counts.measured((102,) * 3, counts.COUNTING_PASS, 1.3e9, "gcipuinfo")
    pooled = counts.pool([a, b])
    assert (pooled.per_call, pooled.reads, pooled.clock_hz) == (101.5, (100, 100, 101, 102, 102, 102), 1.3e9)
    slower = dataclasses.replace(b, clock_hz=1.25e9)
    other = counts.pool([a, slower])
    assert other.clock_hz is None
    assert other.time_s is None
    assert other.clock == "the repeats read different clocks (1250 MHz, 1300 MHz): no one device time"
    gap = counts.pool([a, counts.not_counted("the SDK raised")])
    assert (gap.per_call, gap.reason) == (None, "repeat 2: the SDK raised")
    # A count a repeat took without single reads (over its window, say): the repeats' counts pooled.
    windowed = [counts.CountRecord(float(c), method="over the window") for c in (7, 9, 8)]
    assert counts.pool(windowed) == counts.CountRecord(8.0, method="over the window")
    assert counts.pool_counts([{"ipu_cycles": a}, {}])["ipu_cycles"].reason == (
        "repeat 2: this repeat did not read it"
    )


# -- instances in threads (PopART's runner) -----------------------------------------------------------


class CountingStub(test_placed.StubBackend):
    """Compiles to a model that does nothing and counts ``cycles[device]`` cycles a call (``None``:
    its counter is off), at the clock ``clocks[device]``."""

    def __init__(
        self, name: str, device: str, cycles: dict[str, int | None], clocks: dict[str, float]
    ) -> None:
        super().__init__(name, device)
        self.cycles, self.clocks = cycles, clocks

    def compile(self, *args: object) -> Any:
        count = self.cycles[self.device]
        hz = self.clocks[self.device]
        counter = (
            CallCounter("ipu_cycles", None, "the cycle counter is off (test)")
            if count is None
            else CallCounter("ipu_cycles", lambda: count, None, lambda: (hz, f"{hz / 1e6:g} MHz"))
        )
        return dataclasses.replace(wrap_callable(lambda: None), device=self.device, counters=(counter,))


def group(cycles: dict[str, int | None], clocks: dict[str, float] | None = None) -> IpuRecord:
    """Two instances in threads counting ``cycles`` (by device), measured in three repeats."""
    clocks = clocks or dict.fromkeys(cycles, 1.3e9)
    backend = test_placed.PlacedStub("popart", "ipu", test_placed.StubInventory((0, 1)))
    plan = placed.plan(
        backend, test_placed._req(instances=2), {}, lambda n, d: CountingStub(n, d, cycles, clocks)
    )
    compiled = placed.compile_plan(plan, object(), (), "fp32", {})
    try:
        return repeats(compiled, ()).record
    finally:
        compiled.close()


def test_a_group_of_instances_in_threads_counts_when_every_instance_counts_alike():
    record = group({"ipu:0": 5000, "ipu:1": 5000})
    assert record.repeat_values("ipu_cycles") == (5000.0,) * REPEATS
    assert record.counts["ipu_cycles"].clock == "instance 0: 1300 MHz; instance 1: 1300 MHz"
    # The counting calls are not timed calls of the instances: the last repeat's instances made its
    # 4 timed rounds' calls, and the latency pools every repeat's timed calls of both, no more.
    assert record.instances is not None
    assert [i.calls for i in record.instances] == [4, 4]
    assert record.latency_s.rounds == 2 * 4 * REPEATS


def test_a_group_whose_instances_count_differently_or_not_at_all_says_so():
    differ = group({"ipu:0": 5000, "ipu:1": 5100})
    assert differ.counts["ipu_cycles"].reason == (
        "reading the counter raised ValueError: the instances counted differently "
        "(instance 0: 5,000, instance 1: 5,100): no one count per call"
    )
    off = group({"ipu:0": 5000, "ipu:1": None})
    assert off.counts["ipu_cycles"].reason == "instance 1: the cycle counter is off (test)"
    clocks = group({"ipu:0": 5000, "ipu:1": 5000}, {"ipu:0": 1.3e9, "ipu:1": 1.25e9})
    count = clocks.counts["ipu_cycles"]
    assert (count.per_call, count.clock_hz) == (5000.0, None)
    assert count.clock == "no one clock for the instances (instance 0: 1300 MHz; instance 1: 1250 MHz)"
