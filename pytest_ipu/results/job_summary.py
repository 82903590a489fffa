"""The job's gate summary on one screen: every FAIL, then each undecided benchmark once, the rest folded.

After the caller's counts line: every FAIL's line; one line per benchmark with an INCONCLUSIVE verdict
(metrics that say the same grouped, each group's cause from ``Verdict.noise``, said once where what is
missing names it already); past ``MAX_LINES``, one line that folds the rest. ``verbose`` lists every
verdict's own line instead; the run's JSON keeps every verdict (``pytest_ipu.gates``).

Documented in docs/ci.md (section "The job's summary on one screen").
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_ipu.measure import units
from pytest_ipu.results import family
from pytest_ipu.results.catalog import METRICS
from pytest_ipu.results.decide import Verdict

#: Lines after the counts line before the rest is folded: with the counts, the section's title and
#: the fold's own line, a 24-line terminal.
MAX_LINES = 20


def lines(
    verdicts: Sequence[Verdict],
    *,
    verbose: bool = False,
    passes: bool = False,
    limit: int = MAX_LINES,
    unfold: str = "--verbose lists them",
    label: str = "INCONCLUSIVE",
    failed_label: str = "",
) -> list[str]:
    """The summary's lines after its counts (the module docstring); ``passes`` lists the PASS
    verdicts' lines too under ``verbose``; ``unfold`` says how to see what was folded; ``label``
    begins each undecided benchmark's line, ``failed_label`` (when given) each FAIL's (and, under
    ``verbose``, ``label`` each other verdict's)."""
    if verbose:
        listed = [v for v in verdicts if passes or not v.passed]
        if not failed_label:
            return [v.line() for v in listed]
        return [f"{failed_label if v.failed else label} {v.line()}" for v in listed]
    head = f"{failed_label} " if failed_label else ""
    failed = [f"{head}{v.line()}" for v in verdicts if v.failed]
    undecided = undecided_lines(verdicts, label)
    shown = (failed + undecided)[:limit]
    hidden_failed = max(0, len(failed) - limit)
    hidden_undecided = len(undecided) - max(0, limit - len(failed))
    folded = []
    if hidden_failed:
        folded.append(f"{hidden_failed} more FAIL(s)")
    if hidden_undecided > 0:
        folded.append(f"{hidden_undecided} more INCONCLUSIVE benchmark(s)")
    if folded:
        shown.append(f"and {' and '.join(folded)}: {unfold}")
    return shown


def undecided_lines(verdicts: Sequence[Verdict], label: str = "INCONCLUSIVE") -> list[str]:
    """One line per benchmark with an INCONCLUSIVE verdict, in the verdicts' order, each beginning
    with ``label``."""
    by_benchmark: dict[str, dict[str, list[str]]] = {}
    for verdict in verdicts:
        if not verdict.inconclusive:
            continue
        groups = by_benchmark.setdefault(verdict.benchmark, {})
        groups.setdefault(_why(verdict), []).append(verdict.gate.metric)
    out = []
    for benchmark, groups in by_benchmark.items():
        parts = [f"{', '.join(dict.fromkeys(metrics))}: {text}" for text, metrics in groups.items()]
        out.append(f"{label} {benchmark}: {' | '.join(parts)}")
    return out


def _why(verdict: Verdict) -> str:
    """The cause and what the evidence decides, the cause said once: where what is missing already
    names it ("no threshold can be decided (a pytest-benchmark benchmark has one value per run ...)"),
    that alone."""
    reason, decides = cause(verdict), decidable(verdict)
    return decides if verdict.interval is None and reason in decides else f"{reason}: {decides}"


def cause(verdict: Verdict) -> str:
    """Why ``verdict`` could not decide, in a few words."""
    if verdict.advice.startswith(family.NOT_AT_JOB_LEVEL):
        return f"FAILs its own gate, {verdict.advice}"
    if verdict.noise:
        return verdict.noise
    return verdict.method


def decidable(verdict: Verdict) -> str:
    """The smallest threshold (relative gate) this verdict's evidence would decide, or the interval
    of the value (absolute gate); what is missing when it has no interval."""
    if verdict.interval is None:
        return f"no threshold can be decided ({verdict.advice or verdict.method})"
    low, high = verdict.interval
    metric = METRICS[verdict.gate.metric]
    if verdict.gate.kind == "absolute":
        shown = ", ".join(units.format_value(v, metric.unit, 3) for v in (low, high))
        return f"the value's interval [{shown}] contains the bound"
    if metric.better == "higher":
        smallest = f"-{(1.0 - low) * 100:.1f}%" if low < 1.0 else "any"
    else:
        smallest = f"+{(high - 1.0) * 100:.1f}%" if high > 1.0 else "any"
    return f"smallest threshold this evidence decides: {smallest}"
