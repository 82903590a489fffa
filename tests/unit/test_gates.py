"""Performance gates (pytest_ipu.results.gates and .decide): grammar, errors, decision rule, runner."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from pytest_ipu.backports import zip_strict
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
from pytest_ipu.results.records import RepeatRecord
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
    repeats: Sequence[RepeatRecord] = (),
    compile_s: float | None = None,
    **latency: float,
) -> IpuRecord:
    """A record with the given p50 latency and throughput (the other percentiles as given, else p50),
    and the given repeats (none: a record of schema 1, one repeat)."""
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
        latency_s=LatencySummary(
            stat["min"], p50, stat["p90"], stat["p99"], stat["max"], stat["mean"], 1, ("p50", "p90", "p99")
        ),
        window_s=1.0,
        throughput_items_per_s=throughput,
        compile_s=compile_s,
        compile_cached=False,
        first_call_s=1.5,
        power=power,
        repeats=tuple(repeats),
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


def _geometric_mean(values: Sequence[float]) -> float:
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


def _repeated(
    p50s: Sequence[float] = (),
    throughputs: Sequence[float] = (),
    power: PowerRecord | None = None,
    compile_s: float | None = None,
) -> IpuRecord:
    """A record of independent repeats, one per value given: each repeat's latency statistics are
    its p50 (``p50s``), its throughput 4 items a call at that latency; or, with ``throughputs``, each
    repeat's throughput is given and its latency is 4 items at that rate. The record's own figures,
    which the change is computed from, are the repeats' geometric means."""
    if throughputs:
        p50s = [4.0 / v for v in throughputs]
    rates = list(throughputs) or [4.0 / v for v in p50s]
    repeats = [
        RepeatRecord(
            index=i + 1,
            rounds=30,
            window_s=30 * p50,
            latency_s=LatencySummary(p50, p50, p50, p50, p50, p50, 30),
            throughput_items_per_s=rate,
        )
        for i, (p50, rate) in enumerate(zip_strict(p50s, rates))
    ]
    return _typed(
        p50=_geometric_mean(p50s),
        throughput=_geometric_mean(rates),
        power=power,
        repeats=repeats,
        compile_s=compile_s,
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

LATENCY = "latency.p50:+5%"
ALPHA = 0.01
#: The threshold-only method of a latency or throughput gate with one repeat on each side.
ONE_REPEAT = (
    "threshold only: no variance estimate (one repeat on each side): use --ipu-repeats or 3 or "
    "more baseline runs"
)


def _by_hand(
    current: Sequence[float], baseline: Sequence[float], allowed: float, higher_is_better: bool = False
) -> dict[str, float]:
    """The pooled two-sample t test of the rule, written out: logs of each side's repeat values,
    the shift of their means, the pooled sd, and the t statistic of the shift beyond ``allowed``
    (the log of the allowed ratio: ``log(1.05)`` for ``+5%``, ``log(0.95)`` for ``-5%``; mirrored
    for a better-higher metric, where a drop is the regression)."""
    x = [math.log(v) for v in current]
    y = [math.log(v) for v in baseline]
    n, m = len(x), len(y)
    mean_x, mean_y = sum(x) / n, sum(y) / m
    squares = sum((v - mean_x) ** 2 for v in x) + sum((v - mean_y) ** 2 for v in y)
    df = n + m - 2
    sd = math.sqrt(squares / df)
    scale = sd * math.sqrt(1 / n + 1 / m)
    shift = mean_x - mean_y
    t = (allowed - shift) / scale if higher_is_better else (shift - allowed) / scale
    return {"shift": shift, "sd": sd, "scale": scale, "df": df, "t": t}


def test_identical_repeats_on_both_sides_pass():
    gate = gates.parse(LATENCY)
    same = [1.00 * MS, 1.02 * MS, 0.98 * MS]
    verdict = decide.check(gate, "test_a", _repeated(same), _repeated(same))
    assert verdict.passed
    assert verdict.change == pytest.approx(0.0, abs=1e-12)
    assert verdict.p_value is not None
    assert verdict.p_value > 0.5  # nowhere near beyond +5 %
    assert verdict.interval is not None
    assert verdict.interval[0] < 1.0 < verdict.interval[1]
    assert verdict.method.startswith("repeats: one-sided t test on 3 current vs 3 baseline repeats (")
    assert ": pass (repeats: " in verdict.line()
    # Repeats that agree exactly leave no spread: the sign of the excess decides, p = 1.
    flat = decide.check(gate, "test_a", _repeated([MS] * 3), _repeated([MS] * 3))
    assert flat.passed
    assert flat.p_value == 1.0
    assert flat.interval == (1.0, 1.0)


def test_a_thirty_percent_slowdown_in_every_repeat_fails():
    gate = gates.parse(LATENCY)
    baseline = [1.00 * MS, 1.01 * MS, 0.99 * MS]
    verdict = decide.check(gate, "test_a", _repeated([v * 1.3 for v in baseline]), _repeated(baseline))
    assert not verdict.passed
    assert verdict.change == pytest.approx(0.3)
    assert verdict.p_value is not None
    assert verdict.p_value < ALPHA
    assert verdict.interval is not None
    assert 1.05 < verdict.interval[0] < 1.3 < verdict.interval[1]
    line = verdict.line()
    assert line.startswith("test_a latency.p50: 1 ms -> 1.3 ms (+30.0%, threshold +5%), p")
    assert ", ratio CI [" in line
    assert line.endswith(
        ": FAIL (repeats: one-sided t test on 3 current vs 3 baseline repeats (log scale, spread 1.0% sd "
        "between repeats, df 4, alpha 0.01), 99% CI of the ratio of geometric means)"
    )


def test_beyond_the_threshold_with_a_large_spread_between_repeats_is_not_significant():
    # +29 % between the geometric means, but the repeats of each side differ by more than that.
    gate = gates.parse(LATENCY)
    verdict = decide.check(
        gate, "test_a", _repeated([1.4 * MS, 0.9 * MS, 1.8 * MS]), _repeated([1.0 * MS, 1.5 * MS, 0.7 * MS])
    )
    assert verdict.passed
    assert verdict.change is not None
    assert verdict.change > 0.25
    assert verdict.p_value is not None
    assert verdict.p_value > ALPHA
    assert verdict.interval is not None
    assert verdict.interval[0] < 1.0 < 1.3 < verdict.interval[1]
    assert ": pass, not significant (repeats: one-sided t test on 3 current vs 3 baseline repeats" in (
        verdict.line()
    )


def test_p_value_and_interval_are_the_pooled_t_test_by_hand():
    baseline = [1.00 * MS, 1.04 * MS, 0.97 * MS]
    current = [1.30 * MS, 1.37 * MS, 1.25 * MS]
    verdict = decide.check(gates.parse(LATENCY), "t", _repeated(current), _repeated(baseline))
    by_hand = _by_hand(current, baseline, math.log(1.05))
    assert by_hand["df"] == 4
    assert by_hand["t"] == pytest.approx(6.4498, abs=1e-4)
    # p: the upper tail of t with 4 degrees of freedom beyond the statistic.
    p = stats.t_sf(by_hand["t"], 4)
    assert 0.001 < p < 0.002  # t(0.999, 4) = 7.173 and t(0.998, 4) = 5.598, from tables
    assert verdict.p_value == pytest.approx(p, rel=1e-12)
    # The 99 % interval of the ratio of geometric means: exp(shift +- t(0.995, 4) x scale).
    t_995 = 4.604095  # from tables
    assert stats.t_isf(0.005, 4) == pytest.approx(t_995, abs=1e-6)
    low = math.exp(by_hand["shift"] - t_995 * by_hand["scale"])
    high = math.exp(by_hand["shift"] + t_995 * by_hand["scale"])
    assert verdict.interval is not None
    assert verdict.interval == pytest.approx((low, high), rel=1e-6)
    assert verdict.interval == pytest.approx((1.1166, 1.5180), abs=1e-4)
    assert not verdict.passed
    assert verdict.method == (
        f"repeats: one-sided t test on 3 current vs 3 baseline repeats (log scale, spread "
        f"{by_hand['sd'] * 100:.1f}% sd between repeats, df 4, alpha 0.01), 99% CI of the ratio of "
        "geometric means"
    )
    assert "spread 4.1% sd" in verdict.method
    # alpha sets both the test's level and the interval's confidence.
    loose = decide.check(gates.parse(LATENCY), "t", _repeated(current), _repeated(baseline), alpha=0.05)
    assert loose.p_value == pytest.approx(p, rel=1e-12)
    t_975 = 2.776445  # t(0.975, 4), from tables
    assert loose.interval == pytest.approx(
        (
            math.exp(by_hand["shift"] - t_975 * by_hand["scale"]),
            math.exp(by_hand["shift"] + t_975 * by_hand["scale"]),
        ),
        rel=1e-6,
    )
    assert loose.method.endswith("df 4, alpha 0.05), 95% CI of the ratio of geometric means")


def test_throughput_a_drop_is_the_regression():
    gate = gates.parse("throughput:-5%")
    baseline = [985.0, 1000.0, 1020.0]
    # 11 % less throughput in every repeat: beyond the 5 % allowed; the test is against log(0.95).
    drop = [870.0, 890.0, 900.0]
    verdict = decide.check(gate, "t", _repeated(throughputs=drop), _repeated(throughputs=baseline))
    by_hand = _by_hand(drop, baseline, math.log(0.95), higher_is_better=True)
    assert by_hand["t"] > 0
    assert verdict.p_value is not None
    assert verdict.p_value == pytest.approx(stats.t_sf(by_hand["t"], 4), rel=1e-12)
    assert verdict.p_value < ALPHA
    ratio = _geometric_mean(drop) / _geometric_mean(baseline)  # 0.885
    assert verdict.change == pytest.approx(ratio - 1)
    assert verdict.interval is not None
    assert verdict.interval[0] < ratio < verdict.interval[1] < 0.95
    assert not verdict.passed
    # 4 % less in every repeat: clearly lower, but within the 5 % that -5% allows.
    within = [v * 0.96 for v in baseline]
    verdict = decide.check(gate, "t", _repeated(throughputs=within), _repeated(throughputs=baseline))
    assert verdict.passed
    assert verdict.change == pytest.approx(-0.04)
    assert ": pass (" in verdict.line()
    # More throughput is never a regression.
    verdict = decide.check(
        gate, "t", _repeated(throughputs=[v * 1.3 for v in baseline]), _repeated(throughputs=baseline)
    )
    assert verdict.passed
    assert verdict.p_value is not None
    assert verdict.p_value > 0.999


@pytest.mark.parametrize("expression", [LATENCY, "throughput:-5%"])
@pytest.mark.parametrize("records", ["schema 1", "one repeat each"])
def test_one_repeat_on_each_side_is_the_threshold_alone_without_a_p_value(expression, records):
    # Twice as slow: beyond any threshold here, but with nothing to measure the noise by.
    if records == "schema 1":
        current, baseline = _typed(p50=2 * MS, throughput=2000.0), _typed(p50=1 * MS, throughput=4000.0)
    else:
        current, baseline = _repeated([2 * MS]), _repeated([1 * MS])
        assert len(current.repeats) == len(baseline.repeats) == 1
    verdict = decide.check(gates.parse(expression), "t", current, baseline)
    assert not verdict.passed
    assert verdict.p_value is None
    assert verdict.interval is None
    assert verdict.method == ONE_REPEAT
    assert "p=" not in verdict.line()
    assert verdict.line().endswith(f": FAIL ({ONE_REPEAT})")
    # Within the threshold it passes, on the same grounds.
    same = decide.check(gates.parse(expression), "t", baseline, baseline)
    assert same.passed
    assert same.line().endswith(f": pass ({ONE_REPEAT})")


def test_three_repeats_against_one_are_a_t_test_with_n_plus_m_minus_2_df():
    gate = gates.parse(LATENCY)
    three = [1.30 * MS, 1.37 * MS, 1.25 * MS]
    # The baseline of schema 1, without repeats: one repeat, its own value.
    one = _typed(p50=1.0 * MS)
    verdict = decide.check(gate, "t", _repeated(three), one)
    by_hand = _by_hand(three, [1.0 * MS], math.log(1.05))
    assert by_hand["df"] == 2  # 3 + 1 - 2: the one repeat adds a mean, not a spread
    assert verdict.p_value == pytest.approx(stats.t_sf(by_hand["t"], 2), rel=1e-12)
    assert verdict.method.startswith(
        "repeats: one-sided t test on 3 current vs 1 baseline repeats (log scale, spread "
    )
    assert ", df 2, alpha 0.01)" in verdict.method
    # With 2 degrees of freedom, +31 % is not yet significant at 1 % (p = 0.027)...
    assert verdict.p_value is not None
    assert 0.02 < verdict.p_value < 0.03
    assert verdict.passed
    assert ": pass, not significant (repeats: " in verdict.line()
    # ...and twice as slow is.
    slower = decide.check(gate, "t", _repeated([2 * v for v in three]), one)
    assert not slower.passed
    # The other way round: one current repeat against three baseline repeats.
    reverse = decide.check(gate, "t", _typed(p50=1.0 * MS), _repeated(three))
    assert reverse.method.startswith("repeats: one-sided t test on 1 current vs 3 baseline repeats (")
    assert ", df 2, " in reverse.method
    assert reverse.passed


def test_a_record_without_repeats_counts_as_one_repeat():
    record = _typed(p50=1.5 * MS, throughput=2000.0)
    assert record.repeats == ()
    assert record.repeat_values("latency.p50") == (1.5 * MS,)
    assert record.repeat_values("throughput") == (2000.0,)
    assert _repeated([1 * MS, 2 * MS]).repeat_values("latency.p50") == (1 * MS, 2 * MS)
    # Against two repeats: a t test on 1 vs 2, the record's own value as its one repeat.
    verdict = decide.check(gates.parse(LATENCY), "t", record, _repeated([1.0 * MS, 1.01 * MS]))
    by_hand = _by_hand([1.5 * MS], [1.0 * MS, 1.01 * MS], math.log(1.05))
    assert verdict.method.startswith("repeats: one-sided t test on 1 current vs 2 baseline repeats (")
    assert verdict.p_value == pytest.approx(stats.t_sf(by_hand["t"], 1), rel=1e-12)


@pytest.mark.parametrize(
    ("expression", "field", "before", "after"),
    [("energy:+5%", "energy", 10.0, 12.0), ("compile:+5%", "compile", 1.0, 1.2)],
)
def test_metrics_measured_once_decide_on_the_threshold_and_say_so(expression, field, before, after):
    # Both records have three repeats: they say nothing about energy or compile time.
    def record(value: float) -> IpuRecord:
        if field == "energy":
            return _repeated([1.0 * MS, 1.1 * MS, 0.9 * MS], power=_power(energy_j=value))
        return _repeated([1.0 * MS, 1.1 * MS, 0.9 * MS], compile_s=value)

    method = (
        f"threshold only: no variance estimate ({field} is measured once per benchmark): use "
        "3 or more baseline runs"
    )
    gate = gates.parse(expression)
    verdict = decide.check(gate, "test_a", record(after), record(before))
    assert not verdict.passed
    assert verdict.p_value is None
    assert verdict.interval is None
    assert verdict.method == method
    unit = "J" if field == "energy" else "s"
    assert verdict.line() == (
        f"test_a {field}: {before:g} {unit} -> {after:g} {unit} (+20.0%, threshold +5%): FAIL ({method})"
    )
    within = decide.check(
        gates.parse(expression.replace("+5%", "+25%")), "test_a", record(after), record(before)
    )
    assert within.passed
    assert within.line().endswith(f": pass ({method})")


def test_a_zero_baseline_is_an_infinite_rise():
    baseline = _record([1 * MS], power=_power(energy_j=0.0))
    current = _record([1 * MS], power=_power(energy_j=1.0))
    verdict = decide.check(gates.parse("energy:+5%"), "t", current, baseline)
    assert verdict.change == math.inf
    assert not verdict.passed


def test_the_test_is_against_the_threshold_not_against_no_change():
    # 6 % slower in every repeat: clearly different from the baseline, but not clearly beyond the
    # allowed 5 %. A drift of that size must not fail the gate; 15 % slower must.
    gate = gates.parse(LATENCY)
    baseline = [1.000 * MS, 1.010 * MS, 0.990 * MS]
    drift = [1.065 * MS, 1.070 * MS, 1.045 * MS]
    against_none = _by_hand(drift, baseline, 0.0)
    t_none = against_none["shift"] / against_none["scale"]
    assert stats.t_sf(t_none, 4) < 0.005  # a test against no change would call it a regression
    verdict = decide.check(gate, "t", _repeated(drift), _repeated(baseline))
    assert verdict.change is not None
    assert verdict.change > 0.05
    assert verdict.p_value is not None
    assert verdict.p_value > 0.1
    assert verdict.passed
    slower = decide.check(gate, "t", _repeated([v * 1.15 for v in baseline]), _repeated(baseline))
    assert not slower.passed
    assert slower.p_value is not None
    assert slower.p_value < 1e-3


def test_a_real_but_small_change_passes():
    # 2 % slower in every repeat, with 0.2 % spread: real (the interval excludes 1), but within 5 %.
    gate = gates.parse(LATENCY)
    baseline = [2.000 * MS, 2.004 * MS, 1.996 * MS]
    verdict = decide.check(gate, "t", _repeated([v * 1.02 for v in baseline]), _repeated(baseline))
    assert verdict.change == pytest.approx(0.02)
    assert verdict.interval is not None
    assert 1.0 < verdict.interval[0] < 1.02 < verdict.interval[1] < 1.05
    assert verdict.p_value is not None
    assert verdict.p_value > 0.99
    assert verdict.passed
    assert ": pass (" in verdict.line()


def _pairs(seed: int, count: int, sigma: float, shift: float = 1.0, repeats: int = 3):
    """Seeded (baseline, current) repeat values, lognormal around 1 ms; current scaled by shift."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        baseline, current = rng.lognormal(math.log(1 * MS), sigma, (2, repeats))
        yield [float(v) for v in baseline], [float(v * shift) for v in current]


def test_a_over_a_repeats_rarely_fail_and_a_thirty_percent_slowdown_is_found():
    # Three repeats a side, 3 % spread between repeats, as from a quiet machine.
    gate = gates.parse(LATENCY)
    same = [decide.check(gate, "t", _repeated(c), _repeated(b)) for b, c in _pairs(21, 400, 0.03)]
    assert sum(not v.passed for v in same) < 4  # under 1 % of 400 false alarms
    assert (
        sum(decide.beyond_threshold(gate, v.change) for v in same if v.change is not None) >= 2
    )  # yet beyond 5 %
    slow = [decide.check(gate, "t", _repeated(c), _repeated(b)) for b, c in _pairs(22, 400, 0.03, 1.3)]
    assert sum(not v.passed for v in slow) > 0.9 * 400
    # Throughput the same way: 30 % slower calls are 1/1.3 of the throughput.
    rate = gates.parse("throughput:-5%")
    found = sum(
        not decide.check(rate, "t", _repeated(c), _repeated(b)).passed for b, c in _pairs(23, 100, 0.03, 1.3)
    )
    assert found > 90


def test_a_change_of_exactly_the_threshold_fails_at_most_about_alpha():
    # At the threshold the test is exact on lognormal repeats: it fails in a fraction alpha of draws.
    gate = gates.parse(LATENCY)
    verdicts = [decide.check(gate, "t", _repeated(c), _repeated(b)) for b, c in _pairs(24, 1000, 0.03, 1.05)]
    assert sum(not v.passed for v in verdicts) <= 20  # alpha is 1 %: 10 expected of 1000


# Repeat values within a factor of 1000 of each other (1 ms to 1 s, say): repeats of one benchmark
# that differ by more are not a measurement.
_REPEAT_VALUES = st.lists(st.floats(min_value=1.0, max_value=1000.0), min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(_REPEAT_VALUES, _REPEAT_VALUES, st.floats(min_value=0.2, max_value=1.0))
@example([1e-3, 1e-3], [1e-3], 1.0)
def test_a_uniform_speedup_never_fails(baseline, current, factor):
    # Whatever repeats the baseline had, the current side the same or faster never fails a gate.
    faster = [v * factor for v in baseline]  # latencies: throughputs are 1 / factor higher
    for expression, ratio in ((LATENCY, factor), ("throughput:-5%", 1 / factor)):
        verdict = decide.check(gates.parse(expression), "t", _repeated(faster), _repeated(baseline))
        assert verdict.passed
        if len(baseline) >= 2:
            assert verdict.p_value is not None
            assert 0.5 <= verdict.p_value <= 1.0
            assert verdict.interval is not None
            assert verdict.interval[0] <= ratio * (1 + 1e-9)
            assert verdict.interval[1] >= ratio * (1 - 1e-9)
        else:
            assert verdict.p_value is None
    # Any two sides: a p-value is a probability, and the interval holds the geometric means' ratio.
    verdict = decide.check(gates.parse(LATENCY), "t", _repeated(current), _repeated(baseline))
    if len(current) + len(baseline) >= 3:
        assert verdict.p_value is not None
        assert 0.0 <= verdict.p_value <= 1.0
        assert verdict.interval is not None
        ratio = _geometric_mean(current) / _geometric_mean(baseline)
        assert verdict.interval[0] <= ratio * (1 + 1e-9)
        assert ratio <= verdict.interval[1] * (1 + 1e-9)


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
        method="repeats: one-sided t test on 5 current vs 5 baseline repeats (log scale, spread 1.2% sd "
        "between repeats, df 8, alpha 0.01), 99% CI of the ratio of geometric means",
    )
    assert verdict.line() == (
        "test_resnet[bs4] latency.p99: 2.1 ms -> 2.45 ms (+16.7%, threshold +10%), p<0.001, "
        "ratio CI [1.121, 1.205]: FAIL (repeats: one-sided t test on 5 current vs 5 baseline repeats "
        "(log scale, spread 1.2% sd between repeats, df 8, alpha 0.01), 99% CI of the ratio of "
        "geometric means)"
    )


def test_line_of_a_throughput_drop_and_an_absolute_pass():
    verdict = decide.check(
        gates.parse("throughput:-5%"), "test_b", _typed(throughput=2301.9), _typed(throughput=2526.4)
    )
    assert verdict.line() == (
        f"test_b throughput: 2,526 items/s -> 2,302 items/s (-8.9%, threshold -5%): FAIL ({ONE_REPEAT})"
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


# --- check: baseline runs --------------------------------------------------------------------------


def _p50(value: float) -> IpuRecord:
    return _typed(p50=value)


def test_several_baseline_runs_judge_a_change_by_their_drift():
    gate = gates.parse(LATENCY)
    steady = [1.000, 1.004, 0.998, 1.002, 1.001]  # runs agree within 0.3 %
    drifting = [1.00, 1.05, 0.97, 1.04, 0.96]  # runs drift by 4 %
    # 10 % slower than steady runs: clearly beyond 5 %, fails.
    verdict = decide.check(gate, "t", _p50(1.10), _p50(1.001), history=steady)
    assert not verdict.passed
    assert verdict.baseline == pytest.approx(1.001, abs=1e-3)  # the runs' geometric mean
    assert verdict.p_value is not None
    assert verdict.p_value < 1e-4
    assert verdict.interval is None
    assert verdict.method.startswith("run-to-run: one-sided t test against 5 baseline runs (geometric mean; ")
    # The same 10 % against runs that drift by 4 %: within what this machine's drift can explain.
    verdict = decide.check(gate, "t", _p50(1.10), _p50(0.96), history=drifting)
    assert verdict.passed
    assert verdict.change == pytest.approx(1.10 / math.exp(np.mean(np.log(drifting))) - 1)
    assert "spread 4.0% sd between runs" in verdict.method
    limit = float(verdict.method.rsplit("changes under +", 1)[1].split("%")[0])
    assert 20 < limit < 30  # what this drift hides, stated: 5 % + t(0.99, 4) x 4 % x sqrt(1.2)
    assert ": pass, not significant (run-to-run" in verdict.line()


def test_the_run_to_run_p_value_by_hand():
    gate = gates.parse(LATENCY)
    runs = [1.00, 1.02, 0.99, 1.01]
    verdict = decide.check(gate, "t", _p50(1.12), _p50(1.01), history=runs)
    logs = [math.log(v) for v in runs]
    centre = sum(logs) / 4
    sd = math.sqrt(sum((v - centre) ** 2 for v in logs) / 3)
    t = (math.log(1.12) - centre - math.log(1.05)) / (sd * math.sqrt(1 + 1 / 4))
    assert verdict.p_value == pytest.approx(stats.t_sf(t, 3), rel=1e-9)
    assert verdict.baseline == pytest.approx(math.exp(centre))


def test_fewer_than_three_baseline_runs_leave_the_repeats_in_charge():
    gate = gates.parse(LATENCY)
    baseline = [1.00 * MS, 1.01 * MS, 0.99 * MS]
    current = [v * 1.2 for v in baseline]
    verdict = decide.check(gate, "t", _repeated(current), _repeated(baseline), history=[1.0 * MS] * 2)
    assert verdict.method.startswith("repeats: one-sided t test on 3 current vs 3 baseline repeats")
    assert not verdict.passed


def test_three_baseline_runs_decide_before_the_repeats():
    # Repeats that agree within 1 %, but whole runs that drift by 4 %: the runs' drift decides.
    gate = gates.parse(LATENCY)
    baseline = [1.00 * MS, 1.01 * MS, 0.99 * MS]
    current = [v * 1.2 for v in baseline]
    history = [MS * f for f in (1.0, 1.05, 0.97, 1.04, 0.96)]
    verdict = decide.check(gate, "t", _repeated(current), _repeated(baseline), history=history)
    assert verdict.method.startswith("run-to-run: one-sided t test against 5 baseline runs")
    assert verdict.interval is None
    assert verdict.passed  # +20 % is within this drift (changes under +23.8 % cannot fail)
    assert "changes under +23.8% cannot fail here" in verdict.method
    # Values a run cannot have (zero, not finite) are not history; with too few left, repeats decide.
    verdict = decide.check(
        gate, "t", _repeated(current), _repeated(baseline), history=[MS, 0.0, math.inf, math.nan, MS]
    )
    assert verdict.method.startswith("repeats: ")
    assert not verdict.passed


def test_throughput_history_is_mirrored():
    gate = gates.parse("throughput:-5%")
    runs = [100.0, 100.5, 99.7, 100.2]
    assert not decide.check(gate, "t", _typed(throughput=85.0), _typed(throughput=100.2), history=runs).passed
    assert decide.check(gate, "t", _typed(throughput=115.0), _typed(throughput=100.2), history=runs).passed


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
    steady = [2.00 * MS, 2.02 * MS, 1.98 * MS]
    base, slow_record = _repeated(steady), _repeated([v * 1.3 for v in steady])
    baseline = _run(
        "base.json",
        _stored("test_a", base),
        _stored("test_c", None),
        _stored("test_d", dataclasses.replace(base, device_name="Other CPU")),
    )
    older = _run("older.json", _stored("test_a", _repeated([2 * v for v in steady])))
    runner = decide.GateRunner(history=[older, baseline], run_gates=[gates.parse("latency.p50:+5%")])
    assert runner.base is baseline
    assert runner.baseline_name() == "base.json (and 1 earlier baseline run(s))"
    outcome = runner.check(
        [
            _measured("test_a", slow_record),
            _measured("test_b", base, own=(gates.parse("latency.p99<1s"),)),
            _measured("test_c", base),
            _measured("test_d", base),
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
    assert slow.baseline == pytest.approx(base.latency_s.p50)  # the last run, not the older one
    # Two baseline runs are too few for their drift: the repeats of both records decide.
    assert slow.method.startswith("repeats: one-sided t test on 3 current vs 3 baseline repeats")
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


def test_the_runner_weighs_repeats_not_round_samples():
    # The rounds of the current run are ten times slower; its repeats, the evidence, are not.
    repeats = [1.00 * MS, 1.01 * MS, 0.99 * MS]
    rounds = [1 * MS] * 30
    baseline = _run("base.json", _stored("test_a", _repeated(repeats), rounds))
    runner = decide.GateRunner(history=[baseline], run_gates=[gates.parse("latency.p50:+5%")])
    (verdict,) = runner.check([_measured("test_a", _repeated(repeats), [10 * r for r in rounds])]).verdicts
    assert verdict.passed
    assert verdict.method.startswith("repeats: one-sided t test on 3 current vs 3 baseline repeats")
    # And the other way round: rounds that agree do not hide repeats that are 30 % slower.
    (verdict,) = runner.check([_measured("test_a", _repeated([1.3 * r for r in repeats]), rounds)]).verdicts
    assert not verdict.passed


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
