"""``pytest-ipu ab``'s looks as one job (``results.ab``): a benchmark decided at a look keeps that
look's verdicts and is read from the pairs it had then; the others go on; FAILs are the job's."""

from __future__ import annotations

from pathlib import Path

from pytest_ipu.results import ab
from pytest_ipu.results import gates
from pytest_ipu.results import schema
from pytest_ipu.results.benchmark_json import StoredBenchmark
from pytest_ipu.results.benchmark_json import StoredRun
from tests.unit.run_files import record

MS = 1e-3
#: The machine's speed in each pair: both sides of a pair move alike.
DRIFT = (1.0, 1.013, 0.991, 1.021, 0.996, 1.008)


def _bench(name: str, p50: float) -> StoredBenchmark:
    return StoredBenchmark(
        name, f"t.py::{name}", None, schema.from_json(record(1, p50, 1 / p50)), None, {}, {}
    )


def _sides(pairs: int, noisy_from: int = 0) -> tuple[list[StoredRun], list[StoredRun]]:
    """test_fast is 30 % slower on the candidate (decided at once); test_open's pairs disagree (open).
    Past pair ``noisy_from`` (when given) test_fast is left out, as a settled benchmark is."""
    base, cand = [], []
    for i in range(pairs):
        d = DRIFT[i % len(DRIFT)] * MS
        jitter = 1.0 + (0.04 if i % 2 else -0.04)
        keep = not noisy_from or i < noisy_from
        base.append(
            StoredRun(
                Path(f"b{i}.json"),
                {},
                {},
                None,
                (*([_bench("test_fast", d)] if keep else []), _bench("test_open", d)),
            )
        )
        cand.append(
            StoredRun(
                Path(f"c{i}.json"),
                {},
                {},
                None,
                (*([_bench("test_fast", 1.3 * d)] if keep else []), _bench("test_open", d * jitter)),
            )
        )
    return base, cand


def test_a_look_settles_the_decided_benchmark_and_later_pairs_need_not_run_it() -> None:
    gate = [gates.parse("latency.p50:+5%")]
    base, cand = _sides(3)
    first = ab.analyse(base, cand, gate, alpha=0.05 / 3, job_alpha=0.01 / 3)
    assert [v.benchmark for v in first.failed] == ["test_fast"]
    assert first.undecided() == ("t.py::test_open",)
    settled = first.settle()
    assert set(settled) == {"t.py::test_fast"}
    assert settled["t.py::test_fast"].pairs == 3
    # Pairs 4 to 6 ran only test_open: test_fast is not missing, and keeps the first look's verdict.
    base, cand = _sides(6, noisy_from=3)
    last = ab.analyse(base, cand, gate, alpha=0.05 / 3, job_alpha=0.01 / 3, settled=settled)
    assert last.missing == ()
    assert last.failed == first.failed
    (open_verdict,) = (v for v in last.verdicts if v.benchmark == "test_open")
    assert "6 ABBA pairs" in open_verdict.method
    fast_lines = [line for line in last.lines if line.benchmark == "test_fast"]
    assert fast_lines
    assert all(len(line.baseline) == 3 for line in fast_lines)
    (note,) = ab.notes(last)
    assert note.startswith("1 benchmark(s) decided at an earlier look")
    assert note.endswith("were not run after it (1 after 3 pairs)")
