"""Performance gates (pytest_ipu.results.gates and .decide): grammar, errors, decision rule, runner."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.measure import stats
from pytest_ipu.measure.metrics import LatencySummary
from pytest_ipu.results import decide
from pytest_ipu.results import gates
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.decide import Verdict
from pytest_ipu.results.gates import Gate
from pytest_ipu.results.gates import GateError
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import Measured
from pytest_ipu.results.records import PowerRecord
from pytest_ipu.results.schema import METRICS

MS = 1e-3
METRIC_LIST = ", ".join(METRICS)


def _power(measured: bool = True, reason: str = "", **values: float) -> PowerRecord:
    """A power section with ``values`` (``energy_j=12.0``...), valid when measured."""
    return PowerRecord(measured=measured, source="rapl", reason=reason, valid=measured, **values)


def _typed(
    p50: float = 1 * MS,
    throughput: float = 1000.0,
    power: PowerRecord | None = None,
    **latency: float,
) -> IpuRecord:
    """A record with the given p50 latency and throughput (the other percentiles as given, else p50)."""
    stat = {k: latency.get(k, p50) for k in ("min", "p90", "p99", "max", "mean")}
    return IpuRecord(
        target="torch:cpu",
        backend="torch",
        device="cpu",
        device_name="Some CPU",
        precision="fp32",
        io="host",
        batch_size=4,
        items_per_call=4,
        rounds=1,
        rounds_policy="fixed",
        warmup_rounds=0,
        latency=LatencySummary(
            stat["min"], p50, stat["p90"], stat["p99"], stat["max"], stat["mean"], 1, ("p50", "p90", "p99")
        ),
        window_s=1.0,
        throughput_items_per_s=throughput,
        compile_s=None,
        compile_cached=False,
        first_call_s=1.5,
        power=power,
    )


def _record(samples: Any, items_per_call: int = 4, power: PowerRecord | None = None) -> IpuRecord:
    """A record whose numbers are computed from per-round times as the plugin does."""
    s = np.asarray(samples, dtype=np.float64)
    return _typed(
        p50=float(np.percentile(s, 50)),
        throughput=items_per_call * s.size / float(s.sum()),
        power=power,
        min=float(s.min()),
        p90=float(np.percentile(s, 90)),
        p99=float(np.percentile(s, 99)),
        max=float(s.max()),
        mean=float(s.mean()),
    )


# --- Grammar: valid expressions -------------------------------------------------------------------

VALID = [
    ("throughput:-5%", Gate("throughput", "relative", 0.05, None)),
    ("latency.p99:+10%", Gate("latency.p99", "relative", 0.1, None)),
    ("energy_per_item:+5%", Gate("energy_per_item", "relative", 0.05, None)),
    ("items_per_j:-0.5%", Gate("items_per_j", "relative", 0.005, None)),
    ("latency.p99:+5.5%", Gate("latency.p99", "relative", 0.055, None)),
    (" latency.p50 : + 2.5 % ", Gate("latency.p50", "relative", 0.025, None)),
    ("compile:+999%", Gate("compile", "relative", 9.99, None)),
    ("throughput:-99.5%", Gate("throughput", "relative", 0.995, None)),
    ("latency.p99<2ms", Gate("latency.p99", "absolute", 0.002, "<")),
    ("latency.p99 < 2 ms", Gate("latency.p99", "absolute", 0.002, "<")),
    ("latency.mean<250us", Gate("latency.mean", "absolute", 250e-6, "<")),
    ("latency.max<3\u00b5s", Gate("latency.max", "absolute", 3e-6, "<")),
    ("latency.max<3\u03bcs", Gate("latency.max", "absolute", 3e-6, "<")),
    ("latency.min>1ns", Gate("latency.min", "absolute", 1e-9, ">")),
    ("latency.p90<.5s", Gate("latency.p90", "absolute", 0.5, "<")),
    ("first_call<1.5s", Gate("first_call", "absolute", 1.5, "<")),
    ("compile<2e1s", Gate("compile", "absolute", 20.0, "<")),
    ("throughput>2500/s", Gate("throughput", "absolute", 2500.0, ">")),
    ("throughput>2500 items/s", Gate("throughput", "absolute", 2500.0, ">")),
    ("throughput>2500", Gate("throughput", "absolute", 2500.0, ">")),
    ("throughput<1e6/s", Gate("throughput", "absolute", 1e6, "<")),
    ("throughput>0", Gate("throughput", "absolute", 0.0, ">")),
    ("items_per_j>9.5", Gate("items_per_j", "absolute", 9.5, ">")),
    ("items_per_j>9.5/J", Gate("items_per_j", "absolute", 9.5, ">")),
    ("items_per_j>9.5items/J", Gate("items_per_j", "absolute", 9.5, ">")),
    ("power<300W", Gate("power", "absolute", 300.0, "<")),
    ("power<0.3kW", Gate("power", "absolute", 300.0, "<")),
    ("power>500mW", Gate("power", "absolute", 0.5, ">")),
    ("energy_per_item<0.5J", Gate("energy_per_item", "absolute", 0.5, "<")),
    ("energy_per_item<500mJ", Gate("energy_per_item", "absolute", 0.5, "<")),
    ("energy<1kJ", Gate("energy", "absolute", 1000.0, "<")),
]


@pytest.mark.parametrize(("text", "gate"), VALID, ids=[t for t, _ in VALID])
def test_valid_expressions(text, gate):
    assert gates.parse(text) == gate
    assert gates.parse(str(gate)) == gate


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("throughput:-5%", "throughput:-5%"),
        ("latency.p99: +10 %", "latency.p99:+10%"),
        ("compile:+999%", "compile:+999%"),
        ("latency.p99<2 ms", "latency.p99<2ms"),
        ("latency.p50<1500us", "latency.p50<1.5ms"),
        ("latency.p50<0.25s", "latency.p50<250ms"),
        ("latency.min>0.001ns", "latency.min>0.001ns"),
        ("compile<2e1s", "compile<20s"),
        ("compile<3600s", "compile<3600s"),
        ("throughput>2500 items/s", "throughput>2500/s"),
        ("throughput>0", "throughput>0/s"),
        ("items_per_j>9.5/J", "items_per_j>9.5"),
        ("power<0.3kW", "power<300W"),
        ("power<1500W", "power<1.5kW"),
        ("energy_per_item<0.5J", "energy_per_item<500mJ"),
        ("energy<1e20J", "energy<1e+17kJ"),
    ],
)
def test_canonical_text(text, canonical):
    assert str(gates.parse(text)) == canonical


# --- Grammar: errors ------------------------------------------------------------------------------

BAD = [
    (
        "latency.p99<2xs",
        "bad gate 'latency.p99<2xs': unknown unit 'xs' at column 14; "
        "latency.p99 is in seconds: use s, ms, us or ns",
    ),
    (
        "latency.p99<2",
        "bad gate 'latency.p99<2': missing unit after '2' at column 14; "
        "latency.p99 is in seconds: use s, ms, us or ns (e.g. 'latency.p99<2ms')",
    ),
    (
        "energy<3",
        "bad gate 'energy<3': missing unit after '3' at column 9; "
        "energy is in joules: use J, mJ or kJ (e.g. 'energy<0.5J')",
    ),
    (
        "latency.p99<2W",
        "bad gate 'latency.p99<2W': unit 'W' at column 14 measures watts, not seconds; "
        "latency.p99 is in seconds: use s, ms, us or ns",
    ),
    (
        "throughput>2.5k/s",
        "bad gate 'throughput>2.5k/s': unknown unit 'k/s' at column 15; "
        "throughput is in items per second: use /s or items/s, or no unit",
    ),
    (
        "power<300w",
        "bad gate 'power<300w': unknown unit 'w' at column 10; power is in watts: use W, mW or kW",
    ),
    (
        "items_per_j>9.5J",
        "bad gate 'items_per_j>9.5J': unit 'J' at column 16 measures joules, not items per joule; "
        "items_per_j is in items per joule: use /J or items/J, or no unit",
    ),
    (
        "throughput:+5%",
        "bad gate 'throughput:+5%': '+' at column 12 would gate an improvement; "
        "throughput is better higher, so a regression is a drop: write 'throughput:-5%'",
    ),
    (
        "latency.p99:-10%",
        "bad gate 'latency.p99:-10%': '-' at column 13 would gate an improvement; "
        "latency.p99 is better lower, so a regression is a rise: write 'latency.p99:+10%'",
    ),
    (
        "throughput:5%",
        "bad gate 'throughput:5%': missing sign at column 12; "
        "throughput is better higher, so a regression is a drop: write 'throughput:-5%'",
    ),
    (
        "latency.p99:+0%",
        "bad gate 'latency.p99:+0%': threshold 0% at column 14 is out of range; "
        "the percentage must be more than 0 and less than 1000",
    ),
    (
        "latency.p99:+1000%",
        "bad gate 'latency.p99:+1000%': threshold 1000% at column 14 is out of range; "
        "the percentage must be more than 0 and less than 1000",
    ),
    (
        "throughput:-100%",
        "bad gate 'throughput:-100%': threshold 100% at column 13 is out of range; "
        "the percentage must be more than 0 and less than 100 (nothing drops by 100% or more)",
    ),
    (
        "latency.p99:+5",
        "bad gate 'latency.p99:+5': expected '%' after '5' at column 15; "
        "a relative threshold is a percentage: write 'latency.p99:+5%'",
    ),
    (
        "latency.p99:+%",
        "bad gate 'latency.p99:+%': expected a percentage at column 14, got '%'; "
        "write e.g. 'latency.p99:+5%'",
    ),
    (
        "latency.p99:+5%x",
        "bad gate 'latency.p99:+5%x': unexpected 'x' at column 16; nothing may follow the '%'",
    ),
    (
        "latency.p99<5%",
        "bad gate 'latency.p99<5%': '%' at column 14 in an absolute bound; "
        "for a relative threshold write 'latency.p99:+5%'",
    ),
    (
        "latency.p99<=2ms",
        "bad gate 'latency.p99<=2ms': comparison '<=' at column 12 is not supported; "
        "use '<' or '>' (a bound is strict): 'latency.p99<2ms'",
    ),
    (
        "throughput=2500",
        "bad gate 'throughput=2500': comparison '=' at column 11 is not supported; "
        "use '<' or '>' (a bound is strict): 'throughput<2500/s'",
    ),
    (
        "latency.p99<0ms",
        "bad gate 'latency.p99<0ms': bound '<0' at column 12 can never pass; "
        "latency.p99 is never negative: use a bound above 0, e.g. 'latency.p99<2ms'",
    ),
    (
        "latency.p99<-2ms",
        "bad gate 'latency.p99<-2ms': expected a number after '<' at column 13, got '-'; "
        "write e.g. 'latency.p99<2ms'",
    ),
    (
        "compile<1e999999999999s",
        "bad gate 'compile<1e999999999999s': bound '1e999999999999' at column 9 is too large; "
        "write e.g. 'compile<2ms'",
    ),
    (
        "latncy.p99<2ms",
        f"bad gate 'latncy.p99<2ms': unknown metric 'latncy.p99' at column 1; "
        f"did you mean 'latency.p99'? metrics: {METRIC_LIST}",
    ),
    (
        "Throughput:-5%",
        f"bad gate 'Throughput:-5%': unknown metric 'Throughput' at column 1; "
        f"did you mean 'throughput'? metrics: {METRIC_LIST}",
    ),
    ("xyzzy>1", f"bad gate 'xyzzy>1': unknown metric 'xyzzy' at column 1; metrics: {METRIC_LIST}"),
    ("5%", f"bad gate '5%': expected a metric name at column 1, got '5'; start with one of: {METRIC_LIST}"),
    ("", "bad gate '': empty expression; write a gate such as 'throughput:-5%' or 'latency.p99<2ms'"),
    ("   ", "bad gate '   ': empty expression; write a gate such as 'throughput:-5%' or 'latency.p99<2ms'"),
    (
        "latency.p99",
        "bad gate 'latency.p99': missing threshold after 'latency.p99' at column 12; "
        "write e.g. 'latency.p99:+5%' or 'latency.p99<2ms'",
    ),
    (
        "throughput ? 2",
        "bad gate 'throughput ? 2': expected ':', '<' or '>' after 'throughput' at column 12, got '?'; "
        "write e.g. 'throughput:-5%' or 'throughput>2500/s'",
    ),
    (
        "latency.p99<2ms\nx",
        "bad gate 'latency.p99<2ms\\nx': unknown unit 'ms\\nx' at column 14; "
        "latency.p99 is in seconds: use s, ms, us or ns",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[repr(t) for t, _ in BAD])
def test_bad_expressions_say_what_and_how_to_fix(text, message):
    with pytest.raises(GateError) as info:
        gates.parse(text)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_parse_rejects_what_is_not_text():
    with pytest.raises(GateError, match="a gate is text, got int"):
        gates.parse(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("latency", "relative", 0.1), "unknown metric 'latency'"),
        (("throughput", "relative", 1.0), r"relative threshold must be within \(0, 1\)"),
        (("latency.p99", "relative", 10.0), r"relative threshold must be within \(0, 10\)"),
        (("latency.p99", "relative", 0.0), r"relative threshold must be within \(0, 10\)"),
        (("latency.p99", "relative", 0.1, "<"), "a relative gate has no comparison"),
        (("latency.p99", "absolute", 0.1), "an absolute gate needs '<' or '>'"),
        (("latency.p99", "absolute", 0.0, "<"), "can never pass"),
        (("latency.p99", "absolute", -1.0, ">"), "can never pass"),
        (("latency.p99", "absolute", math.nan, ">"), "is not finite"),
        (("latency.p99", "both", 0.1), "kind must be 'relative' or 'absolute'"),
    ],
)
def test_gate_rejects_inconsistent_fields(args, message):
    with pytest.raises(GateError, match=message):
        Gate(*args)


@st.composite
def valid_gates(draw: st.DrawFn) -> Gate:
    metric = draw(st.sampled_from(list(METRICS)))
    if draw(st.booleans()):
        upper = 1.0 if METRICS[metric].better == "higher" else 10.0
        threshold = draw(st.floats(min_value=0.0, max_value=upper, exclude_min=True, exclude_max=True))
        return Gate(metric, "relative", threshold)
    op = draw(st.sampled_from(["<", ">"]))
    bound = draw(st.floats(min_value=0.0, allow_infinity=False, allow_nan=False, exclude_min=op == "<"))
    return Gate(metric, "absolute", bound, op)


@settings(max_examples=300, deadline=None)
@given(valid_gates())
@example(Gate("latency.min", "absolute", 5e-324, "<"))
@example(Gate("energy", "absolute", 1.7976931348623157e308, ">"))
@example(Gate("latency.p99", "relative", 9.999999999999998))
@example(Gate("throughput", "relative", 5e-324))
@example(Gate("latency.p50", "relative", 0.07))
def test_gates_round_trip_through_text(gate):
    text = str(gate)
    assert gates.parse(text) == gate
    assert str(gates.parse(text)) == text


# Text that is mostly near the grammar, so the fuzzing reaches deep into the parser.
_FRAGMENTS = st.sampled_from(
    [*METRICS, "latency", ".", ":", "+", "-", "<", ">", "=", "%", "/", " ", "5", "2.5", "1e3", "e", "1e",
     "ms", "us", "\u00b5s", "s", "J", "kJ", "W", "items", "/s", "/J", "\n", "\x00", "\u0663", "9" * 400]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=30), st.lists(_FRAGMENTS, max_size=8).map("".join)))
def test_any_text_parses_or_raises_one_line_gate_error(text):
    try:
        gate = gates.parse(text)
    except GateError as exc:
        message = str(exc)
        assert message.startswith(f"bad gate {text!r}: ")
        assert "\n" not in message
        assert "\r" not in message
    else:
        assert gates.parse(str(gate)) == gate


# --- check: absolute gates and missing values -----------------------------------------------------


def test_absolute_gate_is_a_strict_bound():
    record = _record([1 * MS, 2 * MS, 3 * MS])
    assert decide.check(gates.parse("latency.p50<2.5ms"), "t", record).passed
    assert not decide.check(gates.parse("latency.p50<2ms"), "t", record).passed
    assert decide.check(gates.parse("throughput>1000/s"), "t", record).passed
    verdict = decide.check(gates.parse("throughput>3000/s"), "t", record, _record([1 * MS]))
    assert verdict == Verdict(
        gates.parse("throughput>3000/s"), "t", False, None, 2000.0, None, None, None, "absolute bound"
    )


def test_missing_power_fails_with_the_records_reason():
    record = _record([1 * MS], power=_power(False, "no readable RAPL counters"))
    verdict = decide.check(gates.parse("power<300W"), "test_a", record)
    assert not verdict.passed
    assert verdict.current is None
    assert verdict.line() == (
        "test_a power: no value, bound < 300 W: FAIL "
        "(no value in the current record: power not measured: no readable RAPL counters)"
    )
    no_section = decide.check(gates.parse("energy:+5%"), "test_a", _record([1 * MS]), _record([1 * MS]))
    assert not no_section.passed
    assert no_section.method == (
        "no value in the current record: power not measured (the record has no power section)"
    )


def test_relative_gate_needs_a_baseline_and_a_sane_alpha():
    record = _record([1 * MS])
    with pytest.raises(ValueError, match=r"relative gate latency\.p99:\+5% on t: no baseline record"):
        decide.check(gates.parse("latency.p99:+5%"), "t", record)
    with pytest.raises(ValueError, match=r"alpha must be within \(0, 1\), got 0"):
        decide.check(gates.parse("latency.p99<1s"), "t", record, alpha=0)


def test_metric_missing_from_the_baseline_is_not_compared():
    current = _record([1 * MS], power=_power(energy_j=10.0))
    verdict = decide.check(gates.parse("energy:+5%"), "test_a", current, _record([1 * MS]))
    assert verdict.passed
    assert verdict.baseline is None
    assert verdict.line() == (
        "test_a energy: no value -> 10 J (threshold +5%): not compared "
        "(no value in the baseline: power not measured (the record has no power section))"
    )


# --- check: the decision rule ---------------------------------------------------------------------


def _draws(seed: int, count: int, rounds: int, sigma: float, shift: float = 1.0):
    """Seeded (baseline, current) pairs of lognormal round times around 2 ms; current scaled by shift."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        baseline, current = rng.lognormal(math.log(2 * MS), sigma, (2, rounds))
        yield baseline, current * shift


@pytest.mark.parametrize("expression", ["latency.p50:+5%", "latency.p99:+5%"])
def test_equal_distributions_rarely_fail(expression):
    # Noisy rounds (30%): the observed change is often beyond 5%, but it is rarely significant.
    gate = gates.parse(expression)
    verdicts = [decide.check(gate, "t", _record(c), _record(b), c, b) for b, c in _draws(11, 200, 100, 0.3)]
    beyond = sum(decide._beyond(gate, v.change) for v in verdicts if v.change is not None)
    false_alarms = sum(not v.passed for v in verdicts)
    assert beyond >= 20
    assert false_alarms <= 4  # 2% of 200


@pytest.mark.parametrize(("expression", "count"), [("latency.p50:+5%", 200), ("throughput:-5%", 50)])
def test_a_ten_percent_slowdown_is_detected(expression, count):
    gate = gates.parse(expression)
    failed = sum(
        not decide.check(gate, "t", _record(c), _record(b), c, b).passed
        for b, c in _draws(12, count, 100, 0.05, shift=1.10)
    )
    assert failed >= 0.95 * count


def test_a_speedup_never_fails():
    for expression in ("latency.p50:+5%", "throughput:-5%"):
        gate = gates.parse(expression)
        for b, c in _draws(13, 20, 100, 0.05, shift=0.8):
            verdict = decide.check(gate, "t", _record(c), _record(b), c, b)
            assert verdict.passed
            assert verdict.p_value is not None
            assert verdict.p_value > 0.5


def test_beyond_the_threshold_but_not_significant_passes_and_says_why():
    baseline = [2.0 * MS, 1.6 * MS, 2.5 * MS, 1.9 * MS]
    current = [2.6 * MS, 1.8 * MS, 3.1 * MS, 2.2 * MS]
    gate = gates.parse("latency.p50:+5%")
    verdict = decide.check(gate, "test_small", _record(current), _record(baseline), current, baseline)
    assert verdict.passed
    assert verdict.change == pytest.approx(2.4 / 1.95 - 1)
    assert verdict.p_value is not None
    assert verdict.p_value > 0.01
    assert verdict.interval is not None
    assert verdict.interval[0] < 1.0 < verdict.interval[1]
    assert verdict.method == (
        "one-sided Mann-Whitney U of per-round times against the baseline's x 1.05 (n=4 current vs 4 "
        "baseline, alpha 0.01), bootstrap 99% CI of the ratio"
    )
    line = verdict.line()
    assert line.startswith("test_small latency.p50: 1.95 ms -> 2.4 ms (+23.1%, threshold +5%), p=0.")
    assert ": pass, not significant (one-sided Mann-Whitney U" in line


def test_a_real_but_small_change_passes():
    # A 2 % slowdown is real (the interval excludes 1) but within a 5 % gate: not beyond the threshold.
    gate = gates.parse("latency.p50:+5%")
    rng = np.random.default_rng(14)
    baseline = rng.lognormal(math.log(2 * MS), 0.01, 200)
    current = rng.lognormal(math.log(2 * MS * 1.02), 0.01, 200)
    verdict = decide.check(gate, "t", _record(current), _record(baseline), current, baseline)
    assert verdict.p_value is not None
    assert verdict.p_value > 0.5  # the test is against the threshold: nowhere near beyond it
    assert verdict.change == pytest.approx(0.02, abs=0.005)
    assert verdict.interval is not None
    assert 1.0 < verdict.interval[0] < 1.02 < verdict.interval[1] < 1.05
    assert verdict.passed
    assert ": pass (" in verdict.line()


def test_throughput_interval_is_a_ratio_of_throughputs():
    gate = gates.parse("throughput:-5%")
    (b, c), *_ = _draws(15, 1, 100, 0.05, shift=1.25)
    verdict = decide.check(gate, "t", _record(c), _record(b), c, b)
    assert verdict.interval is not None
    assert verdict.interval[0] < 0.8 < verdict.interval[1]
    assert verdict.change == pytest.approx(-0.2, abs=0.02)
    assert not verdict.passed


@pytest.mark.parametrize(
    ("baseline_samples", "current_samples", "method"),
    [
        (
            None,
            [2 * MS],
            "threshold only: no per-round samples in the baseline (save it with --benchmark-save-data)",
        ),
        (
            [],
            [2 * MS],
            "threshold only: no per-round samples in the baseline (save it with --benchmark-save-data)",
        ),
        ([1 * MS], None, "threshold only: no per-round samples in the current run"),
    ],
)
def test_without_samples_the_threshold_decides_and_says_so(baseline_samples, current_samples, method):
    gate = gates.parse("latency.p50:+5%")
    verdict = decide.check(gate, "t", _record([2 * MS]), _record([1 * MS]), current_samples, baseline_samples)
    assert not verdict.passed
    assert verdict.p_value is None
    assert verdict.interval is None
    assert verdict.method == method


def test_metrics_measured_once_decide_on_the_threshold_and_say_so():
    baseline = _record([1 * MS], power=_power(energy_j=10.0))
    current = _record([1 * MS], power=_power(energy_j=12.0))
    samples = [1 * MS, 1.1 * MS]
    verdict = decide.check(gates.parse("energy:+5%"), "test_a", current, baseline, samples, samples)
    assert not verdict.passed
    assert verdict.line() == (
        "test_a energy: 10 J -> 12 J (+20.0%, threshold +5%): FAIL "
        "(threshold only: energy is measured once per benchmark, not per round)"
    )
    within = decide.check(gates.parse("energy:+25%"), "test_a", current, baseline)
    assert within.passed
    assert within.line().endswith(
        ": pass (threshold only: energy is measured once per benchmark, not per round)"
    )


def test_a_zero_baseline_is_an_infinite_rise():
    baseline = _record([1 * MS], power=_power(energy_j=0.0))
    current = _record([1 * MS], power=_power(energy_j=1.0))
    verdict = decide.check(gates.parse("energy:+5%"), "t", current, baseline)
    assert verdict.change == math.inf
    assert not verdict.passed


# --- Verdict lines --------------------------------------------------------------------------------


def test_line_of_a_significant_regression():
    verdict = Verdict(
        gate=gates.parse("latency.p99:+10%"),
        benchmark="test_resnet[bs4]",
        passed=False,
        baseline=2.1 * MS,
        current=2.45 * MS,
        change=2.45 / 2.1 - 1,
        p_value=0.00031,
        interval=(1.121, 1.2049),
        method="one-sided Mann-Whitney U on per-round times (n=120 current vs 118 baseline, alpha 0.01), "
        "bootstrap 99% CI of the ratio",
    )
    assert verdict.line() == (
        "test_resnet[bs4] latency.p99: 2.1 ms -> 2.45 ms (+16.7%, threshold +10%), p=0.00031, "
        "ratio CI [1.121, 1.205]: FAIL (one-sided Mann-Whitney U on per-round times "
        "(n=120 current vs 118 baseline, alpha 0.01), bootstrap 99% CI of the ratio)"
    )


def test_line_of_a_throughput_drop_and_an_absolute_pass():
    verdict = Verdict(
        gates.parse("throughput:-5%"), "test_b", False, 2526.4, 2301.9, 2301.9 / 2526.4 - 1, None, None,
        "threshold only: no per-round samples in the baseline (save it with --benchmark-save-data)",
    )  # fmt: skip
    assert verdict.line() == (
        "test_b throughput: 2,526 items/s -> 2,302 items/s (-8.9%, threshold -5%): FAIL "
        "(threshold only: no per-round samples in the baseline (save it with --benchmark-save-data))"
    )
    bound = decide.check(gates.parse("items_per_j>9.5"), "test_c", _typed(power=_power(items_per_j=12.25)))
    assert bound.line() == "test_c items_per_j: 12.25 items/J, bound > 9.5 items/J: pass (absolute bound)"


def test_line_shows_the_bound_exactly():
    record = _record([2.0004 * MS])
    verdict = decide.check(gates.parse("latency.p99<2ms"), "test_d", record)
    # The current value is rounded for reading; the bound is not, so the failure is not a puzzle.
    assert verdict.line() == "test_d latency.p99: 2 ms, bound < 2 ms: FAIL (absolute bound)"
    close = decide.check(gates.parse("latency.p99<2.0005ms"), "test_d", record)
    assert close.line() == "test_d latency.p99: 2 ms, bound < 2.0005 ms: pass (absolute bound)"
    rate = decide.check(gates.parse("throughput>2500/s"), "test_d", record)
    assert rate.line() == "test_d throughput: 2,000 items/s, bound > 2500 items/s: FAIL (absolute bound)"


def test_the_test_is_against_the_threshold_not_against_no_change():
    # 6 % slower, clearly different from the baseline, but not clearly beyond the allowed 5 %: a
    # run-to-run drift of that size must not fail the gate; 15 % slower must. (Seed 0: the median
    # rises 6.1 %, p = 0.036 against the threshold, 1e-15 against no change.)
    gate = gates.parse("latency.p50:+5%")
    rng = np.random.default_rng(0)
    baseline = rng.lognormal(math.log(2 * MS), 0.03, 60)
    drift = rng.lognormal(math.log(2 * MS * 1.06), 0.03, 60)
    _, against_no_change = stats.mann_whitney_u(drift, baseline, alternative="greater")
    assert against_no_change < 1e-10  # a test against no change would call it a regression
    verdict = decide.check(gate, "t", _record(drift), _record(baseline), drift, baseline)
    assert verdict.change is not None
    assert verdict.change > 0.05
    assert verdict.p_value is not None
    assert verdict.p_value > 0.01
    assert verdict.passed
    slower = rng.lognormal(math.log(2 * MS * 1.15), 0.03, 60)
    verdict = decide.check(gate, "t", _record(slower), _record(baseline), slower, baseline)
    assert not verdict.passed
    assert verdict.p_value is not None
    assert verdict.p_value < 1e-6


def test_throughput_is_tested_against_the_equivalent_growth_of_round_times():
    # 5 % less throughput is rounds 1/0.95 = 5.26 % longer.
    verdict = decide.check(
        gates.parse("throughput:-5%"),
        "t",
        _typed(throughput=90.0),
        _typed(throughput=100.0),
        [1.0] * 10,
        [1.0] * 10,
    )
    assert "against the baseline's x 1.053 " in verdict.method


def _p50(value: float) -> IpuRecord:
    return _typed(p50=value)


def test_without_per_round_samples_several_baseline_runs_judge_a_change_by_their_drift():
    gate = gates.parse("latency.p50:+5%")
    steady = [1.000, 1.004, 0.998, 1.002, 1.001]  # runs agree within 0.3 %
    drifting = [1.00, 1.05, 0.97, 1.04, 0.96]  # runs drift by 4 %
    # 10 % slower than steady runs: clearly beyond 5 %, fails.
    verdict = decide.check(gate, "t", _p50(1.10), _p50(1.001), history=steady)
    assert not verdict.passed
    assert verdict.baseline == pytest.approx(1.001, abs=1e-3)  # the runs' geometric mean
    assert verdict.p_value is not None
    assert verdict.p_value < 1e-4
    assert verdict.method.startswith("run-to-run: one-sided t test against 5 baseline runs (geometric mean; ")
    # The same 10 % against runs that drift by 4 %: within what this machine's drift can explain.
    verdict = decide.check(gate, "t", _p50(1.10), _p50(0.96), history=drifting)
    assert verdict.passed
    assert verdict.change == pytest.approx(1.10 / math.exp(np.mean(np.log(drifting))) - 1)
    assert "spread 4.0% sd between runs" in verdict.method
    limit = float(verdict.method.rsplit("changes under +", 1)[1].split("%")[0])
    assert 20 < limit < 30  # what this drift hides, stated: 5 % + t(0.99, 4) x 4 % x sqrt(1.2)
    assert ": pass, not significant (run-to-run" in verdict.line()


def test_fewer_than_three_baseline_runs_leave_the_per_round_test_in_charge():
    gate = gates.parse("latency.p50:+5%")
    rng = np.random.default_rng(1)
    base = rng.lognormal(math.log(2 * MS), 0.02, 50)
    current = rng.lognormal(math.log(2 * MS * 1.2), 0.02, 50)
    verdict = decide.check(
        gate, "t", _record(current), _record(base), current, base, history=[float(np.median(base))] * 2
    )
    assert verdict.method.startswith("one-sided Mann-Whitney U")
    assert not verdict.passed


def test_throughput_history_is_mirrored():
    gate = gates.parse("throughput:-5%")
    runs = [100.0, 100.5, 99.7, 100.2]
    assert not decide.check(gate, "t", _typed(throughput=85.0), _typed(throughput=100.2), history=runs).passed
    assert decide.check(gate, "t", _typed(throughput=115.0), _typed(throughput=100.2), history=runs).passed


def test_with_per_round_samples_the_baseline_runs_only_state_the_drift():
    gate = gates.parse("latency.p50:+5%")
    rng = np.random.default_rng(1)
    base = rng.lognormal(math.log(2 * MS), 0.02, 50)
    current = rng.lognormal(math.log(2 * MS * 1.2), 0.02, 50)
    history = [2 * MS * f for f in (1.0, 1.05, 0.97, 1.04, 0.96)]
    verdict = decide.check(gate, "t", _record(current), _record(base), current, base, history=history)
    assert not verdict.passed  # the per-round test decides: 20 % slower
    assert verdict.method.startswith("one-sided Mann-Whitney U")
    assert verdict.method.endswith(
        "; 5 baseline runs differ by 4.0% sd between runs: a change under +23.8% is within this "
        "machine's drift"
    )


# --- GateRunner: every gate of a run ---------------------------------------------------------------


def _stored(name: str, record: IpuRecord | None, samples: Any = None) -> StoredBenchmark:
    return StoredBenchmark(
        name, f"t.py::{name}", None, record, None if samples is None else tuple(float(x) for x in samples)
    )


def _run(path: str, *benchmarks: StoredBenchmark) -> StoredRun:
    return StoredRun(Path(path), {}, {}, None, benchmarks)


def _measured(name: str, record: IpuRecord, samples: Any = (), own: tuple[Gate, ...] = ()) -> Measured:
    return Measured(f"t.py::{name}", name, "t", record, tuple(float(x) for x in samples), own)


def test_a_benchmarks_own_gates_replace_the_runs_on_the_same_metric():
    run_gates = (gates.parse("throughput:-5%"), gates.parse("latency.p99:+10%"))
    own = (gates.parse("latency.p99<2ms"),)
    assert decide.effective_gates(run_gates, own) == (gates.parse("throughput:-5%"), *own)
    assert decide.effective_gates(run_gates, ()) == run_gates


def test_the_runner_checks_against_the_last_baseline_run_and_reports_what_it_cannot():
    rng = np.random.default_rng(3)
    base_samples = rng.lognormal(math.log(2 * MS), 0.02, 60)
    slow_samples = base_samples * 1.3
    baseline = _run(
        "base.json",
        _stored("test_a", _record(base_samples), base_samples),
        _stored("test_c", None),
        _stored("test_d", dataclasses.replace(_record(base_samples), device_name="Other CPU"), base_samples),
    )
    older = _run("older.json", _stored("test_a", _record(base_samples * 2), base_samples * 2))
    runner = decide.GateRunner(history=[older, baseline], run_gates=[gates.parse("latency.p50:+5%")])
    assert runner.base is baseline
    assert runner.baseline_name() == "base.json (and 1 earlier baseline run(s))"
    outcome = runner.check(
        [
            _measured("test_a", _record(slow_samples), slow_samples),
            _measured("test_b", _record(base_samples), base_samples, (gates.parse("latency.p99<1s"),)),
            _measured("test_c", _record(base_samples), base_samples),
            _measured("test_d", _record(base_samples), base_samples),
        ]
    )
    by_name = {(v.benchmark, str(v.gate)): v for v in outcome.verdicts}
    assert set(by_name) == {
        ("test_a", "latency.p50:+5%"),
        ("test_b", "latency.p99<1s"),
        ("test_d", "latency.p50:+5%"),
    }
    slow = by_name[("test_a", "latency.p50:+5%")]
    assert not slow.passed
    assert slow.baseline == pytest.approx(float(np.percentile(base_samples, 50)))  # the last run, not older
    assert by_name[("test_b", "latency.p99<1s")].passed
    assert outcome.failed == (slow,)
    assert outcome.missing == (
        "test_b is not in the baseline (base.json (and 1 earlier baseline run(s))): its relative gates "
        "(latency.p50:+5%) were not checked",
        "test_c has no pytest-ipu record in the baseline (base.json (and 1 earlier baseline run(s))): its "
        "relative gates (latency.p50:+5%) were not checked",
    )
    assert outcome.notes == (
        "different hardware: the baseline ran test_d on 'Other CPU', this run on 'Some CPU'",
    )


def test_benchmarks_without_gates_are_not_checked():
    runner = decide.GateRunner(history=[_run("base.json")])
    assert runner.check([_measured("test_a", _record([1 * MS]))]) == decide.GateOutcome()
    assert decide.GateRunner().baseline_name() == "none"


def test_the_runner_gives_each_gate_the_history_of_its_benchmark():
    history = [
        _run(f"run{i}.json", _stored("test_a", _typed(p50=p50)))
        for i, p50 in enumerate((1.000, 1.004, 0.998, 1.002))
    ]
    runner = decide.GateRunner(history=history, run_gates=[gates.parse("latency.p50:+5%")])
    assert runner.history_of("t.py::test_a", "latency.p50") == [1.000, 1.004, 0.998, 1.002]
    assert runner.history_of("t.py::test_b", "latency.p50") == []
    assert runner.history_of("t.py::test_a", "energy") == []  # no power section: no value
    (verdict,) = runner.check([_measured("test_a", _typed(p50=1.10))]).verdicts
    assert not verdict.passed
    assert verdict.method.startswith("run-to-run: one-sided t test against 4 baseline runs")


def test_an_explicit_baseline_need_not_be_the_last_run():
    first = _run("a.json", _stored("test_a", _typed(p50=1.0)))
    second = _run("b.json", _stored("test_a", _typed(p50=2.0)))
    runner = decide.GateRunner(
        history=[first, second], run_gates=[gates.parse("latency.p50:+5%")], baseline=first
    )
    (verdict,) = runner.check([_measured("test_a", _typed(p50=1.01))]).verdicts
    assert verdict.baseline == 1.0
    assert verdict.passed
    assert runner.baseline_name() == "a.json (and 1 earlier baseline run(s))"
