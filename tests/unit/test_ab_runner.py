"""``pytest-ipu ab``'s runner (``pytest_ipu.cli.ab.run``) and the command around it, on fake sides: a
small script stands in for pytest, copying a prepared run file per side and pair and noting the order
it ran in. The sequential plan's stops: at a look that decides, at the most pairs, at ``--max-time``
(on a fake clock)."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import types
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.cli import ab as ab_runner
from pytest_ipu.cli import main as cli
from pytest_ipu.results.benchmark_json import StoredRun
from tests import interrupts
from tests.unit import small_fs
from tests.unit.run_files import bench
from tests.unit.run_files import write
from tests.waiting import wait_for

MS = 1e-3

#: How the fakes refuse ``--ipu-serve``, as pytest refuses an option it does not know: each stands in
#: for a pytest that cannot serve rounds (``ab`` then runs it once per run).
REFUSES_SERVING = """
import sys

if any(a.startswith("--ipu-serve") for a in sys.argv):
    sys.exit("pytest: error: unrecognized arguments: " + sys.argv[-1])
"""

#: Stands in for pytest: copies ``<label>-<pair>.json`` from its own folder to the run's
#: ``--benchmark-json`` file and notes ``<label> <pair>`` in ``order.txt`` there.
FAKE_PYTEST = (
    REFUSES_SERVING
    + """
import shutil
import sys
from pathlib import Path

label = sys.argv[1]
out = Path(next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--benchmark-json=")))
pair = out.name.split("-")[0][len("pair"):]
here = Path(sys.argv[0]).parent
with open(here / "order.txt", "a") as order:
    order.write(f"{label} {pair}\\n")
with open(here / "deselected.txt", "a") as deselected:
    chosen = [a for a in sys.argv if a.startswith("--deselect=")]
    deselected.write(" ".join([f"{label}{pair}", *chosen]) + "\\n")
shutil.copyfile(here / f"{label}-{pair}.json", out)
"""
)


class Sides:
    """Two fake sides, A (baseline) and B (candidate), in a folder of their own."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir()
        self.script = folder / "fake_pytest.py"
        self.script.write_text(FAKE_PYTEST)

    def prefix(self, label: str) -> tuple[str, ...]:
        """The command prefix of side ``label``: this interpreter, isolated, running the script."""
        return (sys.executable, "-I", str(self.script), label)

    def spec(self, label: str) -> str:
        """The side as ``--baseline`` or ``--candidate`` takes it."""
        return shlex.join(self.prefix(label))

    def side(self, role: ab_runner.Role, label: str) -> ab_runner.Side:
        """The side as ``resolve_side`` makes it."""
        return ab_runner.Side(role, self.spec(label), "command", prefix=self.prefix(label))

    def write(self, label: str, p50s: Sequence[float]) -> None:
        """The run files of side ``label``: pair ``i`` measures a median latency of ``p50s[i - 1]``."""
        for pair, p50 in enumerate(p50s, start=1):
            write(self.folder / f"{label}-{pair}.json", bench(4, p50, 4 / p50))

    def order(self) -> list[str]:
        """``<label> <pair>`` of every run, in the order they ran."""
        path = self.folder / "order.txt"
        return path.read_text().splitlines() if path.exists() else []

    def plan(self, looks: tuple[int, ...], max_time_s: float = float("inf")) -> ab_runner.Plan:
        """A plan of A against B with ``looks``."""
        return ab_runner.Plan(
            self.side("baseline", "A"),
            self.side("candidate", "B"),
            looks,
            cwd=self.folder,
            max_time_s=max_time_s,
        )


@pytest.fixture
def sides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sides:
    """Fake sides with ten pairs of run files each (A at 1 ms a pair, B at 1.01 ms); the runner's
    temporary directories go under this test's own."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    made = Sides(tmp_path / "sides")
    made.write("A", [MS * (1 + pair / 1000) for pair in range(1, 11)])
    made.write("B", [1.01 * MS * (1 + pair / 1000) for pair in range(1, 11)])
    return made


def _abba(pairs: int) -> list[str]:
    """The order file of ``pairs`` pairs of A (baseline) and B (candidate) in ABBA order."""
    label = {"baseline": "A", "candidate": "B"}
    return [f"{label[role]} {pair}" for pair, role in ab_runner.abba_order(pairs)]


class Looks:
    """A fake ``decided``: notes how many pairs of each side it was shown, and decides once it has
    seen ``at`` pairs (never, without)."""

    def __init__(self, at: int | None = None) -> None:
        self.at = at
        self.seen: list[tuple[int, int]] = []

    def __call__(self, baseline: Sequence[StoredRun], candidate: Sequence[StoredRun]) -> ab_runner.Look:
        self.seen.append((len(baseline), len(candidate)))
        return ab_runner.Look(self.at is not None and len(baseline) >= self.at)


def _p50s(runs: Sequence[StoredRun]) -> list[float]:
    values = []
    for run in runs:
        (benchmark,) = run.benchmarks
        assert benchmark.record is not None
        values.append(benchmark.record.latency_s.p50)
    return values


def test_abba_order_alternates_which_side_runs_first() -> None:
    assert ab_runner.abba_order(3) == [
        (1, "baseline"),
        (1, "candidate"),
        (2, "candidate"),
        (2, "baseline"),
        (3, "baseline"),
        (3, "candidate"),
    ]


def test_run_stops_at_the_first_look_that_decides(sides: Sides) -> None:
    looks = Looks(at=3)
    progress: list[str] = []
    outcome = ab_runner.run(sides.plan((2, 3, 5)), progress.append, looks)
    # Asked at each look, with every pair so far; decided at the second look, so no fourth pair.
    assert looks.seen == [(2, 2), (3, 3)]
    assert sides.order() == _abba(3)
    assert outcome.stopped == "every gate decided after 3 pair(s) (looks at 2, 3, 5)"
    # The runs read back in pair order, each side its own.
    assert _p50s(outcome.baseline) == pytest.approx([MS * (1 + p / 1000) for p in (1, 2, 3)])
    assert _p50s(outcome.candidate) == pytest.approx([1.01 * MS * (1 + p / 1000) for p in (1, 2, 3)])
    assert outcome.directory is None  # without keep, removed
    assert progress[0] == f"pytest-ipu ab: run 1 (of at most 10): pair 1 baseline: {sides.spec('A')}"


def test_sides_that_cannot_serve_rounds_run_one_process_per_run_with_one_line_each(sides: Sides) -> None:
    progress: list[str] = []
    plan = dataclasses.replace(sides.plan((2,)), serve=True)
    outcome = ab_runner.run(plan, progress.append)
    # Neither side can serve rounds: each says so once, then runs one process per run.
    assert progress[:2] == [
        f"pytest-ipu ab: the {role} side ({sides.spec(label)}) cannot serve rounds (it does not know "
        "--ipu-serve: an older pytest-ipu, or none): one pytest per run"
        for role, label in (("baseline", "A"), ("candidate", "B"))
    ]
    assert sides.order() == _abba(2)
    assert len(outcome.baseline) == len(outcome.candidate) == 2
    assert list(Path(tempfile.gettempdir()).iterdir()) == []


def test_later_pairs_run_only_the_benchmarks_a_look_left_undecided(sides: Sides) -> None:
    # The look after pair 2 settles test_a (and test_b, whose id begins the open test_bb's:
    # --deselect matches prefixes, so that one runs on).
    look = ab_runner.Look(False, ("t.py::test_a", "t.py::test_b"), ("t.py::test_bb", "t.py::test_c[1]"))
    seen: list[int] = []

    def decided(baseline: Sequence[StoredRun], candidate: Sequence[StoredRun]) -> ab_runner.Look:
        seen.append(len(baseline))
        return look

    progress: list[str] = []
    ab_runner.run(sides.plan((2, 3, 4)), progress.append, decided)
    assert seen == [2, 3]
    runs = (sides.folder / "deselected.txt").read_text().splitlines()
    # Pairs 1 and 2 ran everything; every run after the first look leaves test_a out, by its node id.
    assert runs == [
        "A1",
        "B1",
        "B2",
        "A2",
        *(f"{label} --deselect=t.py::test_a" for label in ("A3", "B3", "B4", "A4")),
    ]
    assert "pytest-ipu ab: after 2 pair(s): 2 benchmark(s) decided, 2 still measured" in progress


def test_run_goes_to_the_most_pairs_while_undecided(sides: Sides) -> None:
    looks = Looks()
    outcome = ab_runner.run(sides.plan((2, 3, 5)), [].append, looks)
    # Asked at the looks only: not after pair 4, and not after the last pair, when nothing is left.
    assert looks.seen == [(2, 2), (3, 3)]
    assert sides.order() == _abba(5)
    assert len(outcome.baseline) == len(outcome.candidate) == 5
    assert outcome.stopped == "the most pairs (5, --max-pairs) run"


def test_run_without_a_decision_runs_every_pair_and_a_fixed_plan_says_nothing(sides: Sides) -> None:
    outcome = ab_runner.run(sides.plan((2, 4)), [].append)
    assert sides.order() == _abba(4)
    assert outcome.stopped == "the most pairs (4, --max-pairs) run"
    (sides.folder / "order.txt").unlink()
    progress: list[str] = []
    fixed = ab_runner.run(sides.plan((3,)), progress.append, Looks(at=1))
    assert sides.order() == _abba(3)
    assert fixed.stopped == ""
    assert progress[-1].startswith("pytest-ipu ab: run 6/6: pair 3 candidate: ")


class Clock:
    """A fake ``time.monotonic`` for the runner: ``seconds_a_run`` seconds pass with each run it
    announces (the progress callback), ``seconds_a_start`` with each side's start (its line that it
    cannot serve), none otherwise."""

    def __init__(self, seconds_a_run: float, seconds_a_start: float = 0.0) -> None:
        self.seconds_a_run = seconds_a_run
        self.seconds_a_start = seconds_a_start
        self.runs = 0
        self.starts = 0

    def progress(self, line: str) -> None:
        if line.startswith("pytest-ipu ab: run "):
            self.runs += 1
        elif "cannot serve rounds" in line:
            self.starts += 1

    def monotonic(self) -> float:
        return self.runs * self.seconds_a_run + self.starts * self.seconds_a_start


@pytest.mark.parametrize("looks", [(2, 3, 5), (5,)])
def test_run_starts_no_pair_once_the_time_is_up(
    sides: Sides, monkeypatch: pytest.MonkeyPatch, looks: tuple[int, ...]
) -> None:
    clock = Clock(seconds_a_run=10.0)
    # The runner's own clock, not the time module's: nothing else in the process sees the fake.
    monkeypatch.setattr(ab_runner, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    outcome = ab_runner.run(sides.plan(looks, max_time_s=35.0), clock.progress, Looks())
    # 20 s after pair 1 (not past 35 s): pair 2 starts; 40 s after pair 2: no pair 3. Pairs whole.
    assert sides.order() == _abba(2)
    assert len(outcome.baseline) == len(outcome.candidate) == 2
    assert outcome.stopped == "--max-time 35s reached after 2 pair(s): no new pair started"


def test_no_pair_starts_that_would_end_past_the_extra_time_after_the_first_look(
    sides: Sides, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(seconds_a_run=10.0)
    monkeypatch.setattr(ab_runner, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    plan = dataclasses.replace(sides.plan((2, 3, 5)), extra_time_s=25.0)
    outcome = ab_runner.run(plan, clock.progress, Looks())
    # The first look after pair 2 (40 s in); pair 3 would end 20 s after it (as long as pair 2
    # took): it starts; pair 4 would end 40 s after it, past 25 s: it does not.
    assert sides.order() == _abba(3)
    assert outcome.stopped == (
        "--extra-time 25s after the first look: another pair would end past it (the last took 20 s, and 0 s "
        "are kept for the sides to stop); stopped after 3 pair(s)"
    )


def test_the_time_the_sides_took_to_start_is_kept_for_them_to_stop(
    sides: Sides, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(seconds_a_run=10.0, seconds_a_start=5.0)
    monkeypatch.setattr(ab_runner, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    plan = dataclasses.replace(sides.plan((2, 3, 5)), extra_time_s=25.0, serve=True)
    outcome = ab_runner.run(plan, clock.progress, Looks())
    # Pair 3 would end 20 s after the first look, within 25 s, but not with the 10 s the sides
    # took to start kept for them to stop.
    assert sides.order() == _abba(2)
    assert outcome.stopped == (
        "--extra-time 25s after the first look: another pair would end past it (the last took 20 s, and 10 s "
        "are kept for the sides to stop); stopped after 2 pair(s)"
    )


def test_a_look_that_decides_stops_before_the_time_is_checked(
    sides: Sides, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(seconds_a_run=100.0)
    monkeypatch.setattr(ab_runner, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    # Past the time at the look after pair 2 (400 s of 350 s), but that look decided: it says so.
    outcome = ab_runner.run(sides.plan((2, 3, 5), max_time_s=350.0), clock.progress, Looks(at=2))
    assert sides.order() == _abba(2)
    assert outcome.stopped == "every gate decided after 2 pair(s) (looks at 2, 3, 5)"


# --- The command ------------------------------------------------------------------------------------


def _ab(sides: Sides, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["ab", "--baseline", sides.spec("A"), "--candidate", sides.spec("B"), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_stops_at_the_first_look_when_every_gate_passes(
    sides: Sides, capsys: pytest.CaptureFixture[str]
) -> None:
    # B is 1 % slower in every pair: the paired ratios agree exactly, all within +5 %.
    code, out, err = _ab(
        sides, capsys, "--pairs", "2", "--max-pairs", "4", "--gate", "latency.p50:+5%", "--verbose"
    )
    assert code == 0, out + err
    assert sides.order() == _abba(2)
    assert "pytest-ipu ab: after 2 pair(s): gates: 1 checked: 1 PASS, 0 FAIL, 0 INCONCLUSIVE" in err
    assert (
        "sequential: 2 to 4 pairs, verdicts read after 2, 3, 4 pairs, each look at alpha 0.0258 "
        "(Pocock's level for 0.05 over the 3 looks); stopped: every gate decided after 2 pair(s) "
        "(looks at 2, 3, 4)"
    ) in out
    assert ": PASS (paired: 2 ABBA pairs' log-ratios (df 1, alpha 0.0258))" in out


def test_the_command_adds_pairs_while_a_gate_is_inconclusive_and_exits_3(
    sides: Sides, capsys: pytest.CaptureFixture[str]
) -> None:
    # B about 5 % slower, give or take 10 % a pair: never clearly within or beyond +5 %.
    sides.write("B", [MS * f for f in (1.15, 0.95, 1.12, 0.98)])
    code, out, err = _ab(sides, capsys, "--pairs", "2", "--max-pairs", "4", "--gate", "latency.p50:+5%")
    assert code == 3, out + err
    assert sides.order() == _abba(4)
    assert [line for line in err.splitlines() if "pair(s): gates:" in line] == [
        f"pytest-ipu ab: after {n} pair(s): gates: 1 checked: 0 PASS, 0 FAIL, 1 INCONCLUSIVE" for n in (2, 3)
    ]
    assert "stopped: the most pairs (4, --max-pairs) run" in out
    assert "gates: 1 checked: 0 PASS, 0 FAIL, 1 INCONCLUSIVE" in out
    # The undecided benchmark once, with its cause and the smallest threshold its pairs decide.
    assert (
        "INCONCLUSIVE test_mlp[torch-cpu-4]: latency.p50: spread 9.6% between pairs: smallest threshold "
        "this evidence decides: +21.3%"
    ) in out
    assert "job: a FAIL is one at the 0.333% family-wise level (Holm over 1 gate check(s))" in out


def test_the_command_measures_only_the_undecided_benchmarks_after_a_look(
    sides: Sides, capsys: pytest.CaptureFixture[str]
) -> None:
    # Batch 8: 1 % slower in every pair (PASS at the first look); batch 4: about 5 % slower, give or
    # take 10 % a pair (never decided).
    noisy = (1.15, 0.95, 1.12, 0.98)
    for pair in range(1, 5):
        steady = MS * (1 + pair / 1000)
        write(sides.folder / f"A-{pair}.json", bench(4, MS, 4 / MS), bench(8, steady, 8 / steady))
        b4, b8 = MS * noisy[pair - 1], 1.01 * steady
        write(sides.folder / f"B-{pair}.json", bench(4, b4, 4 / b4), bench(8, b8, 8 / b8))
    code, out, err = _ab(sides, capsys, "--pairs", "2", "--max-pairs", "4", "--gate", "latency.p50:+5%")
    assert code == 3, out + err
    decided = "--deselect=tests/test_mlp.py::test_mlp[torch-cpu-8]"
    runs = (sides.folder / "deselected.txt").read_text().splitlines()
    # Pairs 1 and 2 ran both; pairs 3 and 4 (after the look at 2) left the decided benchmark out.
    assert runs == [
        "A1",
        "B1",
        "B2",
        "A2",
        f"A3 {decided}",
        f"B3 {decided}",
        f"B4 {decided}",
        f"A4 {decided}",
    ]
    assert "pytest-ipu ab: after 2 pair(s): 1 benchmark(s) decided, 1 still measured" in err
    # The decided one keeps its PASS from the look at 2 pairs; the other is judged on all 4.
    assert "gates: 2 checked: 1 PASS, 0 FAIL, 1 INCONCLUSIVE" in out
    assert "were not run after it (1 after 2 pairs)" in out


def test_the_command_without_gates_runs_the_pairs_asked_for(
    sides: Sides, capsys: pytest.CaptureFixture[str]
) -> None:
    # No gate can be INCONCLUSIVE: no pair beyond --pairs, and the whole alpha for the tables.
    code, out, err = _ab(sides, capsys, "--pairs", "2")
    assert code == 0, out + err
    assert sides.order() == _abba(2)
    assert "2 pair(s), alpha 0.05" in out.splitlines()
    assert "95% CI" in out


#: Stands in for pytest on a full disk: writes the run file as pytest-ipu does (a temporary file
#: renamed into place, removed when the write fails), so a full disk leaves no file and exit 1.
FULL_DISK_PYTEST = (
    REFUSES_SERVING
    + """
import os
import shutil
import sys
from pathlib import Path

out = Path(next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--benchmark-json=")))
temporary = out.with_name("." + out.name + ".tmp")
try:
    shutil.copyfile(Path(sys.argv[0]).parent / "A-1.json", temporary)
    temporary.replace(out)
except OSError as exc:
    temporary.unlink(missing_ok=True)
    print(f"pytest-ipu: --benchmark-json={out}: cannot write the results: {exc.strerror}")
    sys.exit(1)
"""
)


def test_a_full_disk_under_keep_is_named_as_the_cause(sides: Sides, tmp_path: Path) -> None:
    script = sides.folder / "full_disk_pytest.py"
    script.write_text(FULL_DISK_PYTEST)
    prefix = (sys.executable, "-I", str(script))
    with small_fs.mounted(tmp_path / "fs") as keep:
        small_fs.fill(keep, 0)
        plan = ab_runner.Plan(
            ab_runner.Side("baseline", shlex.join(prefix), "command", prefix=prefix),
            sides.side("candidate", "B"),
            (2,),
            cwd=sides.folder,
            keep=keep,
        )
        with pytest.raises(ab_runner.RunFailed) as failed:
            ab_runner.run(plan, lambda line: None)
        first = str(failed.value).splitlines()[0]
        # The exit code is the run's own (1 after its one line, 120 when its log cannot take it).
        assert first.startswith(f"the baseline side ({shlex.join(prefix)}) failed in pair 1 (exit "), first
        assert (
            f", no JSON written: {keep} cannot be written (No space left on device); free space there or "
            "pass --keep on another disk): "
        ) in first
        assert "did a test use ipu_benchmark" not in str(failed.value)
        # The probe that found it left nothing behind.
        assert sorted(p.name for p in keep.iterdir()) == ["filler", "pair1-baseline.log"]


def _zero_p50(run: dict[str, Any]) -> None:
    run["benchmarks"][0]["extra_info"]["ipu"]["latency_s"]["p50"] = 0.0


def _infinite_p50(run: dict[str, Any]) -> None:
    run["benchmarks"][0]["extra_info"]["ipu"]["latency_s"]["p50"] = float("inf")


def _negative_median(run: dict[str, Any]) -> None:
    run["benchmarks"][0]["stats"]["median"] = -0.001


def _twice(run: dict[str, Any]) -> None:
    run["benchmarks"].append(json.loads(json.dumps(run["benchmarks"][0])))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_zero_p50, "'latency_s.p50' is 0.0: a timed call takes at least the timer's resolution"),
        (_infinite_p50, "'latency_s.p50' is inf: it must be a finite number >= 0"),
        (_negative_median, "'stats.median' is -0.001: a time must be a finite number of seconds >= 0"),
        (_twice, "is in it twice: a run has one result per benchmark"),
    ],
    ids=["zero", "infinite", "negative", "duplicated"],
)
def test_a_baseline_run_no_measurement_can_give_stops_ab_in_one_line(
    sides: Sides, capsys: pytest.CaptureFixture[str], mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    # The baseline's first run is broken: never gated, never a pass; the bad-input exit, naming the
    # side, the pair, the file and the value.
    path = sides.folder / "A-1.json"
    document = json.loads(path.read_text())
    mutate(document)
    path.write_text(json.dumps(document))
    code, out, err = _ab(sides, capsys, "--pairs", "2", "--gate", "latency.p50:+5%")
    assert code == 2, out + err
    (line,) = [line for line in err.splitlines() if line.startswith("pytest-ipu: ")]
    assert line.startswith("pytest-ipu: the baseline side (")
    assert "in pair 1: " in line
    assert message in line
    assert "PASS" not in out + err


#: Stands in for pytest that never ends: notes its process id, then waits to be stopped.
WAITING_PYTEST = (
    REFUSES_SERVING
    + """
import os
import sys
import threading
from pathlib import Path

Path(sys.argv[1]).write_text(str(os.getpid()))
threading.Event().wait()
"""
)


def test_sigint_to_ab_stops_its_side_and_removes_its_files(tmp_path: Path) -> None:
    # Ctrl-C to ab itself while a side runs (a SIGINT to its process alone, as a CI runner sends):
    # exit 130 with one line, the side's process stopped, no temporary folder left.
    script = tmp_path / "waiting_pytest.py"
    script.write_text(WAITING_PYTEST)
    pid_file = tmp_path / "side.pid"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    side = shlex.join([sys.executable, "-I", str(script), str(pid_file)])
    env = {**os.environ, "TMPDIR": str(scratch)}
    ab = interrupts.popen(
        [sys.executable, "-m", "pytest_ipu.cli.main", "ab", "--baseline", side, "--candidate", side],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text(), "the first side to start")
        side_pid = int(pid_file.read_text())
        ab.send_signal(signal.SIGINT)
        out, err = ab.communicate(timeout=120)
    finally:
        if ab.poll() is None:
            ab.kill()
        ab.communicate()  # reaps it and closes its pipes, whichever way the test ended
    assert ab.returncode == 130, out + err
    assert err.strip().splitlines()[-1] == "pytest-ipu: ab interrupted; worktrees and temporary files removed"
    assert "Traceback" not in err
    with pytest.raises(ProcessLookupError):
        os.kill(side_pid, 0)  # reaped by ab: no zombie left either
    assert list(scratch.iterdir()) == []
