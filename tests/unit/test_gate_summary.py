"""The gates' summary of a pytest run (``report.gate_summary``): a ``Table`` of no columns whose
legend is the counts and the job's rule and whose notes are what a reader must act on, each note
toned red when it fails the run."""

from __future__ import annotations

from pytest_ipu.report import gate_summary
from pytest_ipu.results import decide
from pytest_ipu.results import gates
from pytest_ipu.results.decide import Verdict


def _verdict(name: str, outcome: str) -> Verdict:
    interval = (1.25, 1.35) if outcome == decide.FAIL else (0.9, 1.1)
    return Verdict(
        gates.parse("latency.p50:+5%"),
        name,
        outcome,
        1.0,
        1.3,
        0.3,
        interval,
        "run-to-run",
        "",
        None,
        "one repeat",
    )


def _gates(verdicts: list[Verdict], **changes: object) -> gate_summary.RunGates:
    fields: dict[str, object] = {
        "measured": True,
        "against": "base.json",
        "job_alpha": 0.05,
        "planned": len(verdicts),
        "inconclusive": "fail",
        "baseline_missing": "warn",
        **changes,
    }
    return gate_summary.RunGates(verdicts, **fields)  # type: ignore[arg-type]


def test_the_counts_and_the_job_are_the_legend_and_the_verdicts_the_notes() -> None:
    verdicts = [
        _verdict("test_a", decide.PASS),
        _verdict("test_b", decide.FAIL),
        _verdict("test_c", decide.INCONCLUSIVE),
    ]
    summary = gate_summary.table(_gates(verdicts, missing=["test_d: not in the baseline"], notes=["drift"]))
    assert (
        summary.legend[0]
        == "3 gate check(s) on 3 benchmark(s) against base.json: 1 PASS, 1 FAIL, 1 INCONCLUSIVE"
    )
    assert summary.legend[1].startswith("job: ")
    assert summary.legend[1].endswith("; INCONCLUSIVE fails the run")
    assert [n.split(" ")[0] for n in summary.notes] == ["FAILED", "INCONCLUSIVE", "MISSING", "NOTE"]
    assert summary.notes[0] == f"FAILED {verdicts[1].line()}"
    assert summary.notes[2] == "MISSING (a warning) test_d: not in the baseline"
    # Its text form is its legend then its notes: no grid for a table of no columns.
    assert summary.text().splitlines() == [*summary.legend, *summary.notes]


def test_verbose_lists_every_verdict_that_is_not_a_pass_with_its_label() -> None:
    verdicts = [
        _verdict("test_a", decide.PASS),
        _verdict("test_b", decide.FAIL),
        _verdict("test_c", decide.INCONCLUSIVE),
    ]
    summary = gate_summary.table(_gates(verdicts, inconclusive="warn"), verbose=True)
    assert summary.notes == [
        f"FAILED {verdicts[1].line()}",
        f"INCONCLUSIVE (a warning: --ipu-inconclusive=warn) {verdicts[2].line()}",
    ]


def test_what_fails_the_run_is_red_and_the_rest_yellow() -> None:
    assert gate_summary.tone("FAILED test_b latency.p50: ...", "warn") == "red"
    assert gate_summary.tone("INCONCLUSIVE (fails the run) test_c: ...", "fail") == "red"
    assert gate_summary.tone("and 3 more INCONCLUSIVE benchmark(s): pytest -v lists them", "fail") == "red"
    assert (
        gate_summary.tone("INCONCLUSIVE (a warning: --ipu-inconclusive=warn) test_c: ...", "warn") == "yellow"
    )
    assert gate_summary.tone("MISSING (fails the run) test_d", "fail") == "yellow"
    assert gate_summary.tone("NOTE drift", "fail") == "yellow"


def test_gates_that_checked_nothing_are_one_failed_line_without_counts() -> None:
    summary = gate_summary.table(_gates([], measured=False, unchecked="no gate was checked (why): fix"))
    assert summary.legend == []
    assert summary.notes == ["FAILED no gate was checked (why): fix"]
