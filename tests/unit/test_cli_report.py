"""``pytest-ipu report`` through the command: files written, and bad input exits 2."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from pytest_ipu.cli import main as cli
from tests.unit.run_files import bench

#: The report's figures need matplotlib (the ``report`` extra); without it these tests skip.
requires_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="needs matplotlib (pip install matplotlib)",
)


@requires_matplotlib
def test_report_writes_the_page_and_the_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run.json"
    run.write_text(
        json.dumps({"machine_info": {}, "benchmarks": [bench(2, 0.002, 1000.0), bench(4, 0.003, 1300.0)]})
    )
    out = tmp_path / "report"
    assert cli.main(["report", str(run), "--output", str(out)]) == 0
    assert (out / "index.html").stat().st_size > 0
    # Latency and throughput; no items/J figure where no row measured energy.
    assert sorted(p.suffix for p in out.iterdir()) == [".html"] + [".png"] * 2 + [".svg"] * 2
    assert f"wrote {out / 'index.html'}" in capsys.readouterr().out


def test_report_of_a_foreign_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    foreign = tmp_path / "foreign.json"
    foreign.write_text("[]")
    assert cli.main(["report", str(foreign), "--output", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith(f"pytest-ipu: {foreign}: not a pytest-benchmark run")
