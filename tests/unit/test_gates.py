"""Performance gates (pytest_ipu.results.gates and .decide): grammar, errors, decision rule, runner."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections import Counter
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
        # 0 is shown in the unit itself: '0mJ' reads as an energy rounded away.
        ("energy>0J", "energy>0J"),
        ("energy_per_item>0mJ", "energy_per_item>0J"),
        ("latency.p99>0ms", "latency.p99>0s"),
        ("power>0kW", "power>0W"),
        ("energy>0.000001J", "energy>0.001mJ"),
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
        "bad gate 'latency.p99<2ms\\nx': '\\n' at column 16; a gate is one line: separate its parts with "
        "spaces only",
    ),
    (
        "loadgen.p99<1\nms",
        "bad gate 'loadgen.p99<1\\nms': '\\n' at column 14; a gate is one line: separate its parts with "
        "spaces only",
    ),
    (
        "latency.p99<1e-400s",
        "bad gate 'latency.p99<1e-400s': bound '<1e-400' at column 12 can never pass (it underflows to 0: "
        "no float is that small); latency.p99 is never negative: use a bound above 0, e.g. 'latency.p99<2ms'",
    ),
    (
        "latency.p99<2ms" + " " * 20000 + "?",
        "bad gate '..." + " " * 59 + "?': unexpected '?' at column 20016; write e.g. 'latency.p99<2ms'",
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
        # A long expression is echoed as a window of it, cut at the ends.
        assert message.startswith(f"bad gate {text!r}: " if len(text) <= 60 else "bad gate '")
        assert "\n" not in message
        assert "\r" not in message
        assert len(message) <= MAX_MESSAGE, message  # no part of the expression is echoed whole
    else:
        assert gates.parse(str(gate)) == gate


#: The longest a gate error may be, whatever the expression's length: its fixed words, the list of
#: metrics, a 60-character window of the expression and two parts of it cut to 30 characters.
MAX_MESSAGE = 400 + len(", ".join(METRICS))


@pytest.mark.parametrize(
    ("text", "part"),
    [
        (
            "a" * 19_500 + "<1ms",
            "metric 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'... (19500 characters) at column 1",
        ),
        (
            "latency." + "p" * 3000 + "<1ms",
            "metric 'latency.pppppppppppppppppppppp'... (3008 characters)",
        ),
        (
            "latency.p99<1" + "x" * 5000,
            "unit 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... (5000 characters) at column 14",
        ),
        (
            "latency.p99<" + "1" * 5000 + "ms",
            "bound '111111111111111111111111111111'... (5000 characters)",
        ),
        (
            "throughput:-" + "5" * 3000 + "%",
            "'555555555555555555555555555555'... (3001 characters) at",
        ),
        ("latency.p99:+" + "3" * 3000 + "x", "a relative threshold is a percentage: write 'latency.p99:+5%'"),
        (
            "throughput:-5%" + "z" * 3000,
            "'zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz'... (3000 characters) at column 15",
        ),
        ("latency.p99<1e-" + "4" * 200 + "s", "can never pass (it underflows to 0: no float is that small)"),
    ],
    ids=["metric", "dotted metric", "unit", "bound", "threshold", "example", "trailing", "huge exponent"],
)
def test_a_long_part_of_an_expression_is_echoed_cut_with_its_length(text, part):
    with pytest.raises(GateError) as excinfo:
        gates.parse(text)
    message = str(excinfo.value)
    assert part in message
    assert len(message) <= MAX_MESSAGE


# --- check: absolute gates and missing values -----------------------------------------------------

#: The rule's level and the repeat test's drift allowance, by default.
ALPHA = decide.ALPHA
ALLOWANCE = math.log1p(decide.DRIFT)


def _bound_interval(values: Sequence[float], alpha: float = ALPHA) -> tuple[float, float]:
    """The one-sided ``1 - alpha`` bounds of the geometric mean of ``values``, written out."""
    logs = [math.log(v) for v in values]
    n = len(logs)
    centre = sum(logs) / n
    sd = math.sqrt(sum((x - centre) ** 2 for x in logs) / (n - 1))
    reach = stats.t_isf(alpha, n - 1) * sd / math.sqrt(n)
    return math.exp(centre - reach), math.exp(centre + reach)


def test_an_absolute_gate_judges_the_interval_of_the_repeats_geometric_mean():
    repeats = [1.9 * MS, 2.0 * MS, 2.1 * MS]
    record = _repeated(repeats)
    low, high = _bound_interval(repeats)
    # t(0.95, 2) = 2.919986, from tables: the bounds of three repeats are wide.
    assert stats.t_isf(0.05, 2) == pytest.approx(2.919986, abs=1e-6)
    assert (low, high) == pytest.approx((1.84e-3, 2.17e-3), abs=0.01e-3)
    below = decide.check(gates.parse("latency.p50<2.5ms"), "t", record)
    assert below.outcome == decide.PASS
    assert below.passed
    assert not below.failed
    assert not below.inconclusive
    assert below.interval == pytest.approx((low, high), rel=1e-9)
    assert below.method == "absolute bound on the interval of 3 repeats' geometric mean (df 2, alpha 0.05)"
    assert below.advice == ""
    above = decide.check(gates.parse("latency.p50<1.5ms"), "t", record)
    assert above.outcome == decide.FAIL
    assert above.failed
    # 2.05 ms is above the geometric mean, but inside its interval: the repeats cannot tell.
    straddled = decide.check(gates.parse("latency.p50<2.05ms"), "t", record)
    assert straddled.outcome == decide.INCONCLUSIVE
    assert straddled.inconclusive
    assert straddled.advice == (
        "the repeats' interval [1.84 ms, 2.17 ms] contains the bound: more repeats (now 3; --ipu-repeats), "
        "fewer threads or a quieter runner would decide it"
    )
    # A lower bound (throughput) the other way round.
    rates = _repeated(throughputs=[990.0, 1000.0, 1010.0])
    assert decide.check(gates.parse("throughput>900/s"), "t", rates).outcome == decide.PASS
    assert decide.check(gates.parse("throughput>1100/s"), "t", rates).outcome == decide.FAIL
    assert decide.check(gates.parse("throughput>1000/s"), "t", rates).outcome == decide.INCONCLUSIVE
    # A lower alpha widens the interval: the bound that passed at 5 % is inside it at 0.1 %.
    close = decide.check(gates.parse("latency.p50<2.3ms"), "t", record)
    assert close.passed
    strict = decide.check(gates.parse("latency.p50<2.3ms"), "t", record, alpha=0.001)
    assert strict.inconclusive
    assert strict.interval == pytest.approx(_bound_interval(repeats, 0.001), rel=1e-9)


def test_an_absolute_bound_is_strict():
    # Repeats that agree exactly: no spread, the value itself decides; equal to the bound never passes.
    record = _repeated([2 * MS] * 3)
    assert not decide.check(gates.parse("latency.p50<2ms"), "t", record).passed
    assert not decide.check(gates.parse("latency.p50>2ms"), "t", record).passed
    assert decide.check(gates.parse("latency.p50<1.999ms"), "t", record).outcome == decide.FAIL
    assert decide.check(gates.parse("latency.p50>2.001ms"), "t", record).outcome == decide.FAIL
    assert decide.check(gates.parse("latency.p50<2.001ms"), "t", record).outcome == decide.PASS
    assert decide.check(gates.parse("latency.p50>1.999ms"), "t", record).outcome == decide.PASS


def test_an_absolute_gate_without_repeats_is_inconclusive():
    # One repeat: however far from the bound, there is no spread to bound the value by.
    one = _record([1 * MS, 2 * MS, 3 * MS])
    for expression in ("latency.p50<2.5ms", "latency.p50<1ms", "throughput>1000/s"):
        verdict = decide.check(gates.parse(expression), "t", one, _record([1 * MS]))
        assert verdict.outcome == decide.INCONCLUSIVE
        assert verdict.interval is None
        assert verdict.baseline is None
        assert verdict.method == "no variance estimate"
        assert verdict.advice == "one repeat: no spread to bound the value by; use --ipu-repeats=3"
    assert decide.check(gates.parse("latency.p50<2.5ms"), "t", one).current == pytest.approx(2 * MS)
    # Energy is measured once per benchmark, whatever the repeats of the latency.
    energy = _repeated([1.0 * MS, 1.1 * MS, 0.9 * MS], power=_power(energy_j=10.0))
    verdict = decide.check(gates.parse("energy<1kJ"), "t", energy)
    assert verdict.outcome == decide.INCONCLUSIVE
    assert verdict.advice == "energy is measured once per benchmark: no spread to bound the value by"


def test_missing_power_fails_with_the_records_reason():
    record = _record([1 * MS], power=_power(False, "no readable RAPL counters"))
    verdict = decide.check(gates.parse("power<300W"), "test_a", record)
    assert verdict.outcome == decide.FAIL
    assert verdict.current is None
    assert verdict.line() == (
        "test_a power: no value, bound < 300 W: FAIL "
        "(no value in the current record: power not measured: no readable RAPL counters)"
    )
    # A relative gate too, even with a baseline that has the value: what it asks for was not delivered.
    no_section = decide.check(
        gates.parse("energy:+5%"), "test_a", _record([1 * MS]), _record([1 * MS], power=_power(energy_j=9.0))
    )
    assert no_section.outcome == decide.FAIL
    assert no_section.baseline == 9.0
    assert no_section.method == (
        "no value in the current record: power not measured (the record has no power section)"
    )


def test_relative_gate_needs_a_baseline_and_a_sane_alpha():
    record = _record([1 * MS])
    with pytest.raises(ValueError, match=r"relative gate latency\.p99:\+5% on t: no baseline record"):
        decide.check(gates.parse("latency.p99:+5%"), "t", record)
    # Two one-sided tests at alpha each need alpha below one half.
    for alpha in (0.0, 0.5, 1.0):
        with pytest.raises(ValueError, match=rf"alpha must be within \(0, 0\.5\), got {alpha}"):
            decide.check(gates.parse("latency.p99<1s"), "t", record, alpha=alpha)


def test_a_metric_missing_from_the_baseline_is_inconclusive():
    current = _record([1 * MS], power=_power(energy_j=10.0))
    verdict = decide.check(gates.parse("energy:+5%"), "test_a", current, _record([1 * MS]))
    assert verdict.outcome == decide.INCONCLUSIVE
    assert verdict.baseline is None
    assert verdict.current == 10.0
    assert verdict.line() == (
        "test_a energy: no value -> 10 J (threshold +5%): INCONCLUSIVE "
        "(no value in the baseline: power not measured (the record has no power section))"
    )


# --- check: the decision rule ---------------------------------------------------------------------

LATENCY = "latency.p50:+5%"
#: What an inconclusive verdict says when the change is within the drift allowance of the threshold.
WITHIN_DRIFT = (
    "the change is within the run-to-run drift allowance (+5.0%) of the threshold: give 3 or more "
    "baseline runs, whose drift is measured"
)
#: What a latency or throughput gate with one repeat on each side says.
ONE_REPEAT = "one repeat on each side: use --ipu-repeats=3 or 3 or more baseline runs"


def _by_hand(current: Sequence[float], baseline: Sequence[float]) -> dict[str, float]:
    """The repeats' evidence of the rule, written out: logs of each side's repeat values, the shift
    of their means, the pooled sd, the standard error of the shift and its degrees of freedom."""
    x = [math.log(v) for v in current]
    y = [math.log(v) for v in baseline]
    n, m = len(x), len(y)
    mean_x, mean_y = sum(x) / n, sum(y) / m
    squares = sum((v - mean_x) ** 2 for v in x) + sum((v - mean_y) ** 2 for v in y)
    df = n + m - 2
    sd = math.sqrt(squares / df)
    return {"shift": mean_x - mean_y, "sd": sd, "scale": sd * math.sqrt(1 / n + 1 / m), "df": df}


def _interval(
    shift: float, scale: float, df: int, alpha: float = ALPHA, allowance: float = ALLOWANCE
) -> tuple[float, float]:
    """The interval of the ratio a verdict is read from, written out:
    ``exp(shift -+ (t(1 - alpha, df) scale + allowance))``."""
    reach = stats.t_isf(alpha, df) * scale + allowance
    return math.exp(shift - reach), math.exp(shift + reach)


def _method(current: int, baseline: int, spread: str, df: int, alpha: str = "0.05", drift: str = "5") -> str:
    return (
        f"repeats: {current} current vs {baseline} baseline repeats (log scale, spread {spread}% sd between "
        f"repeats, df {df}, alpha {alpha}); within-run noise, widened by the {drift}% run-to-run drift "
        "allowance (--ipu-drift)"
    )


def test_an_unchanged_benchmark_with_tight_repeats_passes_a_gate_beyond_drift_and_noise():
    gate = gates.parse("latency.p50:+10%")
    same = [1.00 * MS, 1.02 * MS, 0.98 * MS]
    verdict = decide.check(gate, "test_a", _repeated(same), _repeated(same))
    assert verdict.outcome == decide.PASS
    assert verdict.change == pytest.approx(0.0, abs=1e-12)
    by_hand = _by_hand(same, same)
    assert verdict.interval is not None
    assert verdict.interval == pytest.approx(_interval(0.0, by_hand["scale"], 4), rel=1e-9)
    assert verdict.interval[1] < 1.10  # the whole interval within +10 %: evidence, not absence of it
    assert verdict.advice == ""
    assert verdict.method == _method(3, 3, "2.0", 4)
    assert verdict.line() == (
        "test_a latency.p50: 999.9 us -> 999.9 us (+0.0%, threshold +10%), ratio interval [0.920, 1.087]: "
        f"PASS ({verdict.method})"
    )
    # Repeats that agree exactly: no spread, the interval is the drift allowance alone.
    flat = decide.check(gate, "test_a", _repeated([MS] * 3), _repeated([MS] * 3))
    assert flat.passed
    assert flat.interval == pytest.approx((1 / 1.05, 1.05), rel=1e-12)


@pytest.mark.parametrize("repeats", [3, 30])
def test_a_change_within_the_drift_allowance_of_the_threshold_is_inconclusive_however_many_repeats(repeats):
    gate = gates.parse(LATENCY)
    same = [MS * (1.0 + 0.001 * (-1) ** i) for i in range(repeats)]
    slower = [v * 1.08 for v in same]  # beyond +5 %, but within the 5 % allowance of it
    for current in (same, slower):
        verdict = decide.check(gate, "t", _repeated(current), _repeated(same))
        assert verdict.outcome == decide.INCONCLUSIVE
        assert verdict.advice.endswith(f"; {WITHIN_DRIFT}")
        assert verdict.line().endswith(f"; {WITHIN_DRIFT}")
    # The allowance is what holds these back: without it (--ipu-drift=0) the same repeats decide.
    assert decide.check(gate, "t", _repeated(same), _repeated(same), drift=0.0).outcome == decide.PASS
    assert decide.check(gate, "t", _repeated(slower), _repeated(same), drift=0.0).outcome == decide.FAIL
    # Baseline runs measure the drift instead of allowing for it: three steady ones decide.
    history = [MS * f for f in (1.0, 1.002, 0.998, 1.001)]
    decided = decide.check(gate, "t", _repeated(same), _repeated(same), history=history)
    assert decided.outcome == decide.PASS
    assert decided.method.startswith("run-to-run: 4 baseline runs")
    assert decide.check(gate, "t", _repeated(slower), _repeated(same), history=history).failed


def test_a_thirty_percent_slowdown_in_every_repeat_fails():
    gate = gates.parse(LATENCY)
    baseline = [1.00 * MS, 1.01 * MS, 0.99 * MS]
    verdict = decide.check(gate, "test_a", _repeated([v * 1.3 for v in baseline]), _repeated(baseline))
    assert verdict.outcome == decide.FAIL
    assert verdict.change == pytest.approx(0.3)
    assert verdict.interval is not None
    assert 1.05 < verdict.interval[0] < 1.3 < verdict.interval[1]  # the whole interval beyond +5 %
    assert verdict.advice == ""
    assert verdict.line() == (
        "test_a latency.p50: 1 ms -> 1.3 ms (+30.0%, threshold +5%), ratio interval [1.217, 1.389]: "
        f"FAIL ({_method(3, 3, '1.0', 4)})"
    )


def test_noisy_repeats_are_inconclusive_and_say_what_they_could_decide_and_how_many_repeats_would():
    # +29 % between the geometric means, but the repeats of each side differ by more than that.
    gate = gates.parse(LATENCY)
    current, baseline = [1.4 * MS, 0.9 * MS, 1.8 * MS], [1.0 * MS, 1.5 * MS, 0.7 * MS]
    verdict = decide.check(gate, "test_a", _repeated(current), _repeated(baseline))
    assert verdict.outcome == decide.INCONCLUSIVE
    assert verdict.change is not None
    assert verdict.change > 0.25
    assert verdict.interval is not None
    assert verdict.interval[0] < 1.0 < 1.3 < verdict.interval[1]
    # The advice, by hand: the changes this evidence could decide, and the repeats that would
    # narrow the statistical part of the interval to the distance from the threshold.
    by_hand = _by_hand(current, baseline)
    m = math.log(1.05)
    statistical = stats.t_isf(ALPHA, 4) * by_hand["scale"]
    caught = math.exp(m + statistical + ALLOWANCE) - 1
    cleared = math.exp(m - statistical - ALLOWANCE) - 1
    # The fewest repeats k a side at which t(0.95, df + k - 3) x scale x sqrt(3 / k), the interval's
    # statistical half-width, falls below the estimate's distance from the threshold past the allowance.
    gap = abs(by_hand["shift"] - m) - ALLOWANCE
    needed = next(
        k for k in range(4, 1000) if stats.t_isf(ALPHA, 4 + k - 3) * by_hand["scale"] * math.sqrt(3 / k) < gap
    )
    assert needed == 31
    assert verdict.advice == (
        f"this evidence fails only changes past {caught * 100:+.1f}% and passes only improvements past "
        f"{cleared * 100:+.1f}%; about {needed} repeats (now 3; --ipu-repeats), fewer threads or a "
        "quieter runner would decide it"
    )
    assert "fails only changes past +108.6% and passes only improvements past -47.2%" in verdict.advice
    assert verdict.line() == (
        "test_a latency.p50: 1.016 ms -> 1.314 ms (+29.3%, threshold +5%), ratio interval [0.651, 2.569]: "
        f"INCONCLUSIVE ({_method(3, 3, '36.6', 4)}); {verdict.advice}"
    )
    # The advice holds: as many repeats a side, of the same spread and shift, decide.
    copies = math.ceil(needed / 3)
    more = decide.check(gate, "test_a", _repeated(current * copies), _repeated(baseline * copies))
    assert more.outcome == decide.FAIL


def test_the_interval_is_the_pooled_t_interval_widened_by_the_drift_allowance():
    baseline = [1.00 * MS, 1.04 * MS, 0.97 * MS]
    current = [1.30 * MS, 1.37 * MS, 1.25 * MS]
    gate = gates.parse(LATENCY)
    verdict = decide.check(gate, "t", _repeated(current), _repeated(baseline))
    by_hand = _by_hand(current, baseline)
    assert by_hand["df"] == 4
    # exp(shift -+ (t(0.95, 4) x scale + log 1.05)); t(0.95, 4) = 2.131847, from tables.
    assert stats.t_isf(0.05, 4) == pytest.approx(2.131847, abs=1e-6)
    reach = 2.131847 * by_hand["scale"] + math.log(1.05)
    expected = (math.exp(by_hand["shift"] - reach), math.exp(by_hand["shift"] + reach))
    assert verdict.interval == pytest.approx(expected, rel=1e-6)
    assert verdict.interval == pytest.approx((1.1549, 1.4677), abs=1e-4)
    assert verdict.outcome == decide.FAIL  # 1.157 > 1.05
    assert verdict.method == _method(3, 3, f"{by_hand['sd'] * 100:.1f}", 4)
    assert "spread 4.1% sd" in verdict.method
    # alpha sets the quantile, drift the allowance: t(0.99, 4) = 3.746947, log 1.02.
    other = decide.check(gate, "t", _repeated(current), _repeated(baseline), alpha=0.01, drift=0.02)
    reach = 3.746947 * by_hand["scale"] + math.log(1.02)
    assert other.interval == pytest.approx(
        (math.exp(by_hand["shift"] - reach), math.exp(by_hand["shift"] + reach)), rel=1e-6
    )
    assert other.method == _method(3, 3, "4.1", 4, alpha="0.01", drift="2")


def test_throughput_a_drop_is_the_regression():
    gate = gates.parse("throughput:-5%")
    baseline = [985.0, 1000.0, 1020.0]
    # A quarter less throughput in every repeat: the whole interval of the ratio below 0.95.
    drop = [v * 0.75 for v in baseline]
    verdict = decide.check(gate, "t", _repeated(throughputs=drop), _repeated(throughputs=baseline))
    assert verdict.outcome == decide.FAIL
    assert verdict.change == pytest.approx(-0.25)
    by_hand = _by_hand(drop, baseline)
    assert verdict.interval == pytest.approx(_interval(by_hand["shift"], by_hand["scale"], 4), rel=1e-9)
    assert verdict.interval is not None
    assert verdict.interval[0] < 0.75 < verdict.interval[1] < 0.95
    # 4 % less: within the 5 % that -5% allows, but within the drift allowance of it too.
    within = [v * 0.96 for v in baseline]
    verdict = decide.check(gate, "t", _repeated(throughputs=within), _repeated(throughputs=baseline))
    assert verdict.outcome == decide.INCONCLUSIVE
    assert verdict.advice.endswith(WITHIN_DRIFT)
    # Against a -20% gate the same 4 % drop is clearly within.
    loose = decide.check(
        gates.parse("throughput:-20%"), "t", _repeated(throughputs=within), _repeated(throughputs=baseline)
    )
    assert loose.outcome == decide.PASS
    assert loose.interval is not None
    assert loose.interval[0] > 0.8
    # More throughput is never a regression.
    verdict = decide.check(
        gate, "t", _repeated(throughputs=[v * 1.3 for v in baseline]), _repeated(throughputs=baseline)
    )
    assert verdict.outcome == decide.PASS


@pytest.mark.parametrize("expression", [LATENCY, "throughput:-5%"])
@pytest.mark.parametrize("records", ["schema 1", "one repeat each"])
def test_one_repeat_on_each_side_is_inconclusive_whatever_the_change(expression, records):
    # Twice as slow: beyond any threshold here, but with nothing to measure the noise by.
    if records == "schema 1":
        current, baseline = _typed(p50=2 * MS, throughput=2000.0), _typed(p50=1 * MS, throughput=4000.0)
    else:
        current, baseline = _repeated([2 * MS]), _repeated([1 * MS])
        assert len(current.repeats) == len(baseline.repeats) == 1
    for now in (current, baseline):  # and unchanged: no evidence makes no PASS either
        verdict = decide.check(gates.parse(expression), "t", now, baseline)
        assert verdict.outcome == decide.INCONCLUSIVE
        assert verdict.interval is None
        assert verdict.method == "no variance estimate"
        assert verdict.advice == ONE_REPEAT
        assert verdict.line().endswith(f": INCONCLUSIVE (no variance estimate); {ONE_REPEAT}")
        assert "interval" not in verdict.line()


def test_three_repeats_against_one_are_pooled_with_n_plus_m_minus_2_df():
    gate = gates.parse(LATENCY)
    three = [1.30 * MS, 1.37 * MS, 1.25 * MS]
    # The baseline of schema 1, without repeats: one repeat, its own value.
    one = _typed(p50=1.0 * MS)
    verdict = decide.check(gate, "t", _repeated(three), one)
    by_hand = _by_hand(three, [1.0 * MS])
    assert by_hand["df"] == 2  # 3 + 1 - 2: the one repeat adds a mean, not a spread
    assert verdict.interval == pytest.approx(_interval(by_hand["shift"], by_hand["scale"], 2), rel=1e-9)
    assert verdict.method.startswith("repeats: 3 current vs 1 baseline repeats (log scale, spread ")
    assert ", df 2, alpha 0.05);" in verdict.method
    assert verdict.outcome == decide.FAIL
    # The other way round: one current repeat against three baseline repeats, 23 % faster.
    reverse = decide.check(gate, "t", _typed(p50=1.0 * MS), _repeated(three))
    assert reverse.method.startswith("repeats: 1 current vs 3 baseline repeats (")
    assert ", df 2, " in reverse.method
    assert reverse.outcome == decide.PASS


def test_a_record_without_repeats_counts_as_one_repeat():
    record = _typed(p50=1.5 * MS, throughput=2000.0)
    assert record.repeats == ()
    assert record.repeat_values("latency.p50") == (1.5 * MS,)
    assert record.repeat_values("throughput") == (2000.0,)
    assert _repeated([1 * MS, 2 * MS]).repeat_values("latency.p50") == (1 * MS, 2 * MS)
    # Against two repeats: 1 vs 2, the record's own value as its one repeat.
    verdict = decide.check(gates.parse(LATENCY), "t", record, _repeated([1.0 * MS, 1.01 * MS]))
    by_hand = _by_hand([1.5 * MS], [1.0 * MS, 1.01 * MS])
    assert verdict.method.startswith("repeats: 1 current vs 2 baseline repeats (")
    assert verdict.interval == pytest.approx(_interval(by_hand["shift"], by_hand["scale"], 1), rel=1e-9)


@pytest.mark.parametrize(
    ("expression", "field", "before", "after"),
    [("energy:+5%", "energy", 10.0, 12.0), ("compile:+5%", "compile", 1.0, 1.2)],
)
def test_metrics_measured_once_need_baseline_runs(expression, field, before, after):
    # Both records have three repeats: they say nothing about energy or compile time.
    def record(value: float) -> IpuRecord:
        if field == "energy":
            return _repeated([1.0 * MS, 1.1 * MS, 0.9 * MS], power=_power(energy_j=value))
        return _repeated([1.0 * MS, 1.1 * MS, 0.9 * MS], compile_s=value)

    advice = f"{field} is measured once per benchmark: give 3 or more baseline runs"
    gate = gates.parse(expression)
    verdict = decide.check(gate, "test_a", record(after), record(before))
    assert verdict.outcome == decide.INCONCLUSIVE
    assert verdict.interval is None
    assert verdict.advice == advice
    unit = "J" if field == "energy" else "s"
    assert verdict.line() == (
        f"test_a {field}: {before:g} {unit} -> {after:g} {unit} (+20.0%, threshold +5%): INCONCLUSIVE "
        f"(no variance estimate); {advice}"
    )
    # Three baseline runs that agree within 0.5 % give them a spread: +20 % fails, and passes +50%.
    history = [before * f for f in (1.0, 1.005, 0.995)]
    assert decide.check(gate, "test_a", record(after), record(before), history=history).failed
    wide = gates.parse(expression.replace("+5%", "+50%"))
    assert decide.check(wide, "test_a", record(after), record(before), history=history).passed


def test_a_zero_baseline_is_an_infinite_rise_with_no_log_to_test():
    baseline = _record([1 * MS], power=_power(energy_j=0.0))
    current = _record([1 * MS], power=_power(energy_j=1.0))
    verdict = decide.check(gates.parse("energy:+5%"), "t", current, baseline)
    assert verdict.change == math.inf
    assert verdict.outcome == decide.INCONCLUSIVE
    assert "(+inf%, threshold +5%)" in verdict.line()


def test_the_test_is_against_the_threshold_not_against_no_change():
    # Without the drift allowance, the statistics alone: 2 % slower in every repeat, 0.2 % spread.
    gate = gates.parse(LATENCY)
    baseline = [2.000 * MS, 2.004 * MS, 1.996 * MS]
    small = decide.check(gate, "t", _repeated([v * 1.02 for v in baseline]), _repeated(baseline), drift=0.0)
    assert small.change == pytest.approx(0.02)
    assert small.interval is not None
    # A real change (its interval excludes 1), yet all within +5 %: PASS.
    assert 1.0 < small.interval[0] < 1.02 < small.interval[1] < 1.05
    assert small.outcome == decide.PASS
    assert small.method.endswith("widened by the 0% run-to-run drift allowance (--ipu-drift)")
    slower = decide.check(gate, "t", _repeated([v * 1.15 for v in baseline]), _repeated(baseline), drift=0.0)
    assert slower.outcome == decide.FAIL


# --- The rule's error rates, by simulation -----------------------------------------------------------


@pytest.fixture
def memoised_quantiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """``stats.t_isf`` memoised: thousands of simulated verdicts ask for the same few quantiles, and
    each is a call into SciPy."""
    monkeypatch.setattr(stats, "t_isf", functools.lru_cache(maxsize=None)(stats.t_isf))


def _most(draws: int, rate: float = ALPHA) -> float:
    """The most verdicts of ``draws`` at a true rate of ``rate`` to accept: its mean plus three
    binomial standard deviations (a test of the rate, not a flake, at a fixed seed)."""
    return draws * rate + 3 * math.sqrt(draws * rate * (1 - rate))


def _least(draws: int, rate: float = ALPHA) -> float:
    """The fewest verdicts of ``draws`` at a true rate of ``rate`` to accept."""
    return draws * rate - 3 * math.sqrt(draws * rate * (1 - rate))


def _simulated(gate: Gate, worse: float, seed: int, draws: int = 2000, n: int = 5, sigma: float = 0.03):
    """Outcomes of ``judge`` on ``draws`` seeded two-sample experiments: ``n`` normal log values a
    side of sd ``sigma``, the current side ``worse`` further in the metric's worse direction."""
    rng = np.random.default_rng(seed)
    values = rng.normal(0.0, sigma, (draws, 2, n))
    before, after = values[:, 0, :], values[:, 1, :] + decide.orient(gate) * worse
    shift = after.mean(axis=1) - before.mean(axis=1)
    scale = np.sqrt((before.var(axis=1, ddof=1) + after.var(axis=1, ddof=1)) / 2) * math.sqrt(2 / n)
    return Counter(
        decide.judge(gate, float(s), float(c), 2 * n - 2, ALPHA).outcome for s, c in zip_strict(shift, scale)
    )


@pytest.mark.usefixtures("memoised_quantiles")
@pytest.mark.parametrize("expression", [LATENCY, "throughput:-5%"])
def test_a_true_change_at_the_threshold_passes_and_fails_each_in_alpha_of_draws(expression):
    # At the threshold neither verdict is right; each one-sided test is exact on normal log values,
    # so each comes in a fraction alpha of the draws: not more (the guarantee), not much less (an
    # interval twice too wide would pass the first check and fail this one).
    gate = gates.parse(expression)
    outcomes = _simulated(gate, decide.margin(gate), seed=31)
    for outcome in (decide.PASS, decide.FAIL):
        assert _least(2000) <= outcomes[outcome] <= _most(2000), outcomes


@pytest.mark.usefixtures("memoised_quantiles")
@pytest.mark.parametrize("expression", [LATENCY, "throughput:-5%"])
def test_the_wrong_verdict_is_rarer_than_alpha_on_either_side_of_the_threshold(expression):
    gate = gates.parse(expression)
    m = decide.margin(gate)
    beyond = _simulated(gate, m + 0.05, seed=32)  # truly worse than the threshold: PASS is wrong
    assert beyond[decide.PASS] <= _most(2000), beyond
    assert beyond[decide.FAIL] > 0.5 * 2000  # and the evidence often says so
    within = _simulated(gate, m - 0.05, seed=33)  # truly within it: FAIL is wrong
    assert within[decide.FAIL] <= _most(2000), within
    assert within[decide.PASS] > 0.5 * 2000
    # Unchanged, with tight repeats: the evidence nearly always shows it within 5 %.
    unchanged = _simulated(gate, 0.0, seed=34, sigma=0.01)
    assert unchanged[decide.PASS] >= 0.99 * 2000, unchanged


@pytest.mark.usefixtures("memoised_quantiles")
def test_baseline_runs_at_the_threshold_pass_and_fail_each_in_alpha_of_draws():
    # Five baseline runs and this run, each run 3 % off by chance, this one truly 5 % slower.
    gate = gates.parse(LATENCY)
    rng = np.random.default_rng(35)
    outcomes: Counter[str] = Counter()
    for logs in rng.normal(0.0, 0.03, (2000, 6)):
        history = [float(math.exp(v)) for v in logs[:5]]
        current = _typed(p50=float(math.exp(logs[5])) * 1.05)
        verdict = decide.check(gate, "t", current, _typed(p50=history[-1]), history=history)
        assert verdict.method.startswith("run-to-run: 5 baseline runs")
        outcomes[verdict.outcome] += 1
    for outcome in (decide.PASS, decide.FAIL):
        assert _least(2000) <= outcomes[outcome] <= _most(2000), outcomes


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
        assert not verdict.failed
        if len(baseline) >= 2:
            assert verdict.interval is not None
            assert verdict.interval[0] <= ratio * (1 + 1e-9)
            assert verdict.interval[1] >= ratio * (1 - 1e-9)
        else:
            assert verdict.inconclusive
            assert verdict.interval is None
    # Any two sides: the interval holds the geometric means' ratio.
    verdict = decide.check(gates.parse(LATENCY), "t", _repeated(current), _repeated(baseline))
    if len(current) + len(baseline) >= 3:
        assert verdict.interval is not None
        ratio = _geometric_mean(current) / _geometric_mean(baseline)
        assert verdict.interval[0] <= ratio * (1 + 1e-9)
        assert ratio <= verdict.interval[1] * (1 + 1e-9)


# --- Verdict lines, JSON, summaries and exit codes --------------------------------------------------


def _verdict(outcome: str, benchmark: str = "test_a", **fields: Any) -> Verdict:
    """A relative verdict of ``latency.p99:+10%`` with the given outcome (2.1 ms -> 2.45 ms)."""
    values: dict[str, Any] = {
        "gate": gates.parse("latency.p99:+10%"),
        "benchmark": benchmark,
        "outcome": outcome,
        "baseline": 2.1 * MS,
        "current": 2.45 * MS,
        "change": 2.45 / 2.1 - 1,
        "interval": (1.121, 1.2049),
        "method": "repeats: 5 current vs 5 baseline repeats",
    }
    values.update(fields)
    return Verdict(**values)


def test_line_of_a_regression():
    assert _verdict(decide.FAIL, "test_resnet[bs4]").line() == (
        "test_resnet[bs4] latency.p99: 2.1 ms -> 2.45 ms (+16.7%, threshold +10%), "
        "ratio interval [1.121, 1.205]: FAIL (repeats: 5 current vs 5 baseline repeats)"
    )


def test_line_of_an_inconclusive_verdict_ends_with_its_advice():
    verdict = _verdict(decide.INCONCLUSIVE, interval=(0.98, 1.31), advice="about 12 repeats")
    assert verdict.line() == (
        "test_a latency.p99: 2.1 ms -> 2.45 ms (+16.7%, threshold +10%), ratio interval [0.980, 1.310]: "
        "INCONCLUSIVE (repeats: 5 current vs 5 baseline repeats); about 12 repeats"
    )


def test_line_of_a_throughput_drop_and_of_a_bound_without_repeats():
    verdict = decide.check(
        gates.parse("throughput:-5%"), "test_b", _typed(throughput=2301.9), _typed(throughput=2526.4)
    )
    assert verdict.line() == (
        "test_b throughput: 2,526 items/s -> 2,302 items/s (-8.9%, threshold -5%): INCONCLUSIVE "
        f"(no variance estimate); {ONE_REPEAT}"
    )
    bound = decide.check(gates.parse("items_per_j>9.5"), "test_c", _typed(power=_power(items_per_j=12.25)))
    assert bound.line() == (
        "test_c items_per_j: 12.25 items/J, bound > 9.5 items/J: INCONCLUSIVE (no variance estimate); "
        "items_per_j is measured once per benchmark: no spread to bound the value by"
    )


def test_line_shows_the_bound_exactly_and_the_interval():
    record = _repeated([2.0003 * MS, 2.0004 * MS, 2.0005 * MS])
    method = "absolute bound on the interval of 3 repeats' geometric mean (df 2, alpha 0.05)"
    verdict = decide.check(gates.parse("latency.p99<2ms"), "test_d", record)
    # The current value and the interval are rounded for reading; the bound is not, so the
    # failure is not a puzzle.
    assert verdict.line() == (
        f"test_d latency.p99: 2 ms, bound < 2 ms, interval [2 ms, 2 ms]: FAIL ({method})"
    )
    close = decide.check(gates.parse("latency.p99<2.001ms"), "test_d", record)
    assert close.line() == (
        f"test_d latency.p99: 2 ms, bound < 2.001 ms, interval [2 ms, 2 ms]: PASS ({method})"
    )
    rate = decide.check(gates.parse("throughput>2500/s"), "test_d", record)
    assert rate.line() == (
        "test_d throughput: 2,000 items/s, bound > 2500 items/s, interval [1,999 items/s, 2,000 items/s]: "
        f"FAIL ({method})"
    )


def test_as_json_is_plain_json_and_round_trips():
    record = _repeated([1.9 * MS, 2.0 * MS, 2.1 * MS])
    verdicts = [
        _verdict(decide.FAIL),
        decide.check(gates.parse("latency.p50<2.05ms"), "t", record),
        decide.check(gates.parse("power<300W"), "t", _record([1 * MS], power=_power(False, "none"))),
    ]
    for verdict in verdicts:
        data = verdict.as_json()
        assert json.loads(json.dumps(data, allow_nan=False)) == data
        assert set(data) == {
            "benchmark", "gate", "metric", "outcome", "baseline", "current", "change", "interval", "method",
            "advice", "p_fail", "noise",
        }  # fmt: skip
        assert data["outcome"] == verdict.outcome
        assert gates.parse(str(data["gate"])) == verdict.gate
        assert data["metric"] == verdict.gate.metric
        assert data["interval"] == (None if verdict.interval is None else list(verdict.interval))
        assert (data["method"], data["advice"]) == (verdict.method, verdict.advice)
    assert [v.as_json()["outcome"] for v in verdicts] == ["FAIL", "INCONCLUSIVE", "FAIL"]
    assert verdicts[1].as_json()["advice"].startswith("the repeats' interval [1.84 ms, 2.17 ms]")
    assert verdicts[2].as_json()["current"] is None


def test_summary_counts_each_outcome():
    verdicts = [_verdict(o) for o in ("PASS", "FAIL", "PASS", "INCONCLUSIVE", "PASS", "FAIL")]
    assert decide.summary(verdicts) == "gates: 6 checked: 3 PASS, 2 FAIL, 1 INCONCLUSIVE"
    assert decide.summary([]) == "gates: 0 checked: 0 PASS, 0 FAIL, 0 INCONCLUSIVE"


@pytest.mark.parametrize(
    ("outcomes", "gates_given", "code"),
    [
        (("PASS", "PASS"), True, 0),
        (("PASS", "INCONCLUSIVE"), True, 3),
        (("INCONCLUSIVE", "FAIL", "PASS"), True, 1),
        (("FAIL",), True, 1),
        ((), True, 1),  # gates given, none checked: a gate that checked nothing guards nothing
        ((), False, 0),
    ],
)
def test_exit_code_fail_beats_inconclusive_beats_pass(outcomes, gates_given, code):
    assert (decide.EXIT_PASS, decide.EXIT_FAIL, decide.EXIT_INCONCLUSIVE) == (0, 1, 3)
    assert decide.exit_code([_verdict(o) for o in outcomes], gates_given) == code


# --- check: baseline runs --------------------------------------------------------------------------


def _p50(value: float) -> IpuRecord:
    return _typed(p50=value)


def _run_to_run(value: float, runs: Sequence[float], alpha: float = ALPHA) -> tuple[float, float]:
    """The interval of the ratio against baseline runs, written out: a new run's log less the runs'
    mean log, the t quantile with k - 1 df times their sd times sqrt(1 + 1/k), no allowance."""
    logs = [math.log(v) for v in runs]
    k = len(logs)
    centre = sum(logs) / k
    sd = math.sqrt(sum((v - centre) ** 2 for v in logs) / (k - 1))
    shift = math.log(value) - centre
    reach = stats.t_isf(alpha, k - 1) * sd * math.sqrt(1 + 1 / k)
    return math.exp(shift - reach), math.exp(shift + reach)


def test_several_baseline_runs_judge_a_change_by_their_drift():
    gate = gates.parse(LATENCY)
    steady = [1.000, 1.004, 0.998, 1.002, 1.001]  # runs agree within 0.3 %
    drifting = [1.00, 1.05, 0.97, 1.04, 0.96]  # runs drift by 4 %
    # 10 % slower than steady runs: the whole interval beyond 5 %, fails.
    verdict = decide.check(gate, "t", _p50(1.10), _p50(1.001), history=steady)
    assert verdict.outcome == decide.FAIL
    assert verdict.baseline == pytest.approx(1.001, abs=1e-3)  # the runs' geometric mean
    assert verdict.interval == pytest.approx(_run_to_run(1.10, steady), rel=1e-9)
    assert verdict.method == (
        "run-to-run: 5 baseline runs (geometric mean; spread 0.2% sd between runs, df 4, alpha 0.05)"
    )
    assert verdict.line() == (
        "t latency.p50: 1.001 s -> 1.1 s (+9.9%, threshold +5%), ratio interval [1.093, 1.105]: "
        f"FAIL ({verdict.method})"
    )
    # 1 % slower than them: all within 5 %, passes; no drift allowance, so no more runs needed.
    assert decide.check(gate, "t", _p50(1.011), _p50(1.001), history=steady).outcome == decide.PASS
    # The same 10 % against runs that drift by 4 %: this machine's drift could explain it or not.
    verdict = decide.check(gate, "t", _p50(1.10), _p50(0.96), history=drifting)
    assert verdict.outcome == decide.INCONCLUSIVE
    assert verdict.change == pytest.approx(1.10 / math.exp(np.mean(np.log(drifting))) - 1)
    assert verdict.interval == pytest.approx(_run_to_run(1.10, drifting), rel=1e-9)
    assert "spread 4.0% sd between runs" in verdict.method
    # However many runs there were, their own 4 % drift (z(0.95) x 4 % = 6.6 %) would be wider than
    # the change's 6.3 % distance from the threshold: more runs cannot decide it.
    assert verdict.advice == (
        "this evidence fails only changes past +15.3% and passes only improvements past -4.4%; the change "
        "is too close to the threshold for more baseline runs to decide it: fewer threads or a quieter "
        "runner would narrow the interval"
    )
    # Runs that drift less leave more runs a say: the same change, runs drifting by 2.5 %.
    calmer = [1.00, 1.03, 0.98, 1.025, 0.975]
    verdict = decide.check(gate, "t", _p50(1.10), _p50(0.975), history=calmer)
    assert verdict.outcome == decide.INCONCLUSIVE
    assert "baseline runs (now 5; --ipu-baseline), fewer threads or a quieter runner would decide it" in (
        verdict.advice
    )


def test_fewer_than_three_baseline_runs_leave_the_repeats_in_charge():
    gate = gates.parse(LATENCY)
    baseline = [1.00 * MS, 1.01 * MS, 0.99 * MS]
    current = [v * 1.2 for v in baseline]
    verdict = decide.check(gate, "t", _repeated(current), _repeated(baseline), history=[1.0 * MS] * 2)
    assert verdict.method.startswith("repeats: 3 current vs 3 baseline repeats")
    assert verdict.outcome == decide.FAIL


def test_three_baseline_runs_decide_before_the_repeats():
    # Repeats that agree within 1 % (they would fail +15 %), but whole runs that drift by 4 %.
    gate = gates.parse(LATENCY)
    baseline = [1.00 * MS, 1.01 * MS, 0.99 * MS]
    current = [v * 1.15 for v in baseline]
    assert decide.check(gate, "t", _repeated(current), _repeated(baseline)).outcome == decide.FAIL
    history = [MS * f for f in (1.0, 1.05, 0.97, 1.04, 0.96)]
    verdict = decide.check(gate, "t", _repeated(current), _repeated(baseline), history=history)
    assert verdict.method.startswith("run-to-run: 5 baseline runs")
    assert verdict.interval == pytest.approx(_run_to_run(_geometric_mean(current), history), rel=1e-9)
    assert verdict.outcome == decide.INCONCLUSIVE  # the runs' drift hides +15 % from a +5 % gate
    assert "more baseline runs" in verdict.advice or "baseline runs (now 5; --ipu-baseline)" in verdict.advice
    # Values a run cannot have (zero, not finite) are not history; with too few left, repeats decide.
    verdict = decide.check(
        gate, "t", _repeated(current), _repeated(baseline), history=[MS, 0.0, math.inf, math.nan, MS]
    )
    assert verdict.method.startswith("repeats: ")
    assert verdict.outcome == decide.FAIL


def test_throughput_history_is_mirrored():
    gate = gates.parse("throughput:-5%")
    runs = [100.0, 100.5, 99.7, 100.2]
    dropped = decide.check(gate, "t", _typed(throughput=85.0), _typed(throughput=100.2), history=runs)
    assert dropped.outcome == decide.FAIL
    assert dropped.interval == pytest.approx(_run_to_run(85.0, runs), rel=1e-9)
    risen = decide.check(gate, "t", _typed(throughput=115.0), _typed(throughput=100.2), history=runs)
    assert risen.outcome == decide.PASS


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
        # A partial entry: ipu_benchmark began measuring it, and its test stopped before the record.
        dataclasses.replace(_stored("test_c", None), pending="ipu_benchmark"),
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
    assert slow.outcome == decide.FAIL
    assert slow.baseline == pytest.approx(base.latency_s.p50)  # the last run, not the older one
    # Two baseline runs are too few for their drift: the repeats of both records decide.
    assert slow.method.startswith("repeats: 3 current vs 3 baseline repeats")
    assert by_name[("test_b", "latency.p99<1s")].outcome == decide.PASS
    # Unchanged against a +5 % gate, with only the repeats: within the drift allowance of it.
    unchanged = by_name[("test_d", "latency.p50:+5%")]
    assert unchanged.outcome == decide.INCONCLUSIVE
    assert outcome.failed == (slow,)
    assert outcome.inconclusive == (unchanged,)
    assert outcome.missing == (
        "test_b is not in the baseline (base.json (and 1 earlier baseline run(s))): its relative gates "
        "(latency.p50:+5%) were not checked",
        "test_c is a partial entry (ipu_benchmark began measuring it and its test stopped before the "
        "pytest-ipu record was written) in the baseline (base.json (and 1 earlier baseline run(s))): its "
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
    runner = decide.GateRunner(history=[baseline], run_gates=[gates.parse("latency.p50:+10%")])
    (verdict,) = runner.check([_measured("test_a", _repeated(repeats), [10 * r for r in rounds])]).verdicts
    assert verdict.outcome == decide.PASS
    assert verdict.method.startswith("repeats: 3 current vs 3 baseline repeats")
    # And the other way round: rounds that agree do not hide repeats that are 30 % slower.
    (verdict,) = runner.check([_measured("test_a", _repeated([1.3 * r for r in repeats]), rounds)]).verdicts
    assert verdict.outcome == decide.FAIL


def test_the_runner_passes_its_alpha_and_drift_to_every_gate():
    repeats = [1.00 * MS, 1.01 * MS, 0.99 * MS]
    baseline = _run("base.json", _stored("test_a", _repeated(repeats)))
    current = [_measured("test_a", _repeated([1.08 * r for r in repeats]))]
    gate = [gates.parse("latency.p50:+5%")]
    # +8 %: within the default 5 % drift allowance of +5 %; without the allowance, beyond it.
    (allowed,) = decide.GateRunner(history=[baseline], run_gates=gate).check(current).verdicts
    assert allowed.outcome == decide.INCONCLUSIVE
    (exact,) = decide.GateRunner(history=[baseline], run_gates=gate, drift=0.0).check(current).verdicts
    assert exact.outcome == decide.FAIL
    assert exact.method.endswith(
        "alpha 0.05); within-run noise, widened by the 0% run-to-run drift allowance (--ipu-drift)"
    )
    (level,) = (
        decide.GateRunner(history=[baseline], run_gates=gate, drift=0.0, alpha=0.01).check(current).verdicts
    )
    assert "alpha 0.01" in level.method


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
    assert verdict.outcome == decide.FAIL
    assert verdict.method.startswith("run-to-run: 4 baseline runs")


def test_an_explicit_baseline_need_not_be_the_last_run():
    first = _run("a.json", _stored("test_a", _typed(p50=1.0)))
    second = _run("b.json", _stored("test_a", _typed(p50=2.0)))
    runner = decide.GateRunner(
        history=[first, second], run_gates=[gates.parse("latency.p50:+5%")], baseline=first
    )
    (verdict,) = runner.check([_measured("test_a", _typed(p50=1.01))]).verdicts
    assert verdict.baseline == 1.0
    # Two runs of one repeat each: no spread to judge by.
    assert verdict.outcome == decide.INCONCLUSIVE
    assert verdict.method == "no variance estimate"
    assert runner.baseline_name() == "a.json (and 1 earlier baseline run(s))"


def test_a_noisy_throughput_gate_advises_with_the_signs_of_a_drop_and_of_an_improvement():
    """For throughput a drop is worse: the changes it fails are drops (negative), and where the
    interval is wider than the threshold only a rise can pass, named as an improvement."""
    gate = gates.parse("throughput:-5%")
    current = _repeated(throughputs=[800.0, 1500.0, 600.0])
    baseline = _repeated(throughputs=[1000.0, 1700.0, 700.0])
    verdict = decide.check(gate, "t", current, baseline)
    assert verdict.outcome == decide.INCONCLUSIVE
    caught = re.search(r"fails only changes past ([+-][0-9.]+)%", verdict.advice)
    cleared = re.search(r"passes only improvements past ([+-][0-9.]+)%", verdict.advice)
    assert caught is not None, verdict.advice
    assert cleared is not None, verdict.advice
    assert float(caught.group(1)) < -5.0
    assert float(cleared.group(1)) > 0.0
