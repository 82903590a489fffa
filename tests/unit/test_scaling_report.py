"""The scaling views of ``pytest-ipu report``: training benchmarks across runs by device count, the
ideal line and efficiencies, time to train, and published reference points (``--references``)."""

from __future__ import annotations

import builtins
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.backports import remove_prefix
from pytest_ipu.backports import zip_strict
from pytest_ipu.cli import main as cli
from pytest_ipu.report import html as html_report
from pytest_ipu.report import scaling
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import references
from pytest_ipu.results import schema
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.training import ScalingRecord
from pytest_ipu.results.training import TimeToTrainRecord
from pytest_ipu.results.training import TrainingRecord
from pytest_ipu.results.training import TrainRun
from tests.unit import run_files

pytest.importorskip("matplotlib", reason="the scaling figures need matplotlib (pip install matplotlib)")

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "mlperf-resnet50-references.toml"


def _training(processes: int, replicas: int = 1) -> TrainingRecord:
    micro = 8
    return TrainingRecord(
        micro_batch=micro,
        gradient_accumulation=1,
        replicas=replicas,
        device_iterations=1,
        processes=processes,
        global_batch=micro * replicas * processes,
        optimizer="SGD",
        amp=False,
        mode="eager",
        steps=20,
        loss_first=2.3,
        loss_last=1.9,
    )


def _time_to_train(processes: int, times: tuple[float, ...]) -> TimeToTrainRecord:
    runs = tuple(TrainRun(i + 1, i, True, t, 2, 1000, 1000 / t, ()) for i, t in enumerate(times))
    kept = sorted(runs, key=lambda r: r.time_s or 0.0)[1:-1]
    return TimeToTrainRecord(
        quality="accuracy",
        quality_target=0.9,
        higher_is_better=True,
        max_epochs=5,
        processes=processes,
        runs=runs,
        olympic_s=sum(r.time_s or 0.0 for r in kept) / len(kept),
        olympic_runs=tuple(r.index for r in kept),
        min_s=min(times),
        max_s=max(times),
        cv=None,
    )


def _record(throughput: float, **parts: Any) -> dict[str, Any]:
    """A training record of ``throughput`` samples/s with the given training parts."""
    return run_files.record(8, 0.01, throughput, **parts)


def _bench(name: str, record: dict[str, Any], path: str = "tests/test_train.py") -> dict[str, Any]:
    return {
        "group": None,
        "name": name,
        "fullname": f"{path}::{name}",
        "params": {},
        "stats": {},
        "extra_info": {"ipu": record},
    }


def _write(path: Path, *benchmarks: dict[str, Any]) -> Path:
    path.write_text(
        json.dumps({"machine_info": {"cpu": {"brand_raw": "Some CPU"}}, "benchmarks": list(benchmarks)}),
        encoding="utf-8",
    )
    return path


def _runs(*paths: Path) -> list[benchmark_json.StoredRun]:
    return [benchmark_json.read_run(p) for p in paths]


def _page(out: Path) -> ET.Element:
    return ET.fromstring(remove_prefix((out / "index.html").read_text(encoding="utf-8"), "<!DOCTYPE html>"))


def _section(root: ET.Element) -> ET.Element:
    return next(s for s in root.iter("section") if s.get("id") == "scaling")


def _rows(table: ET.Element) -> list[list[str]]:
    return [[td.text or "" for td in tr.iter("td")] for tr in table.iter("tr") if tr.find("td") is not None]


def _tables(section: ET.Element, css: str) -> list[ET.Element]:
    return [t for t in section.iter("table") if t.get("class") == css]


@pytest.fixture
def three_runs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """One training benchmark on 1 device, and twice on 2 (one of them from another checkout path)."""
    name = "test_train[mlp]"
    one = _write(tmp_path / "one.json", _bench(name, _record(100.0, training=_training(1))))
    two = _write(tmp_path / "two.json", _bench(name, _record(180.0, training=_training(2))))
    # The same benchmark from another checkout: its fullname differs only by the file's path.
    again = _write(
        tmp_path / "again.json", _bench(name, _record(170.0, training=_training(1, replicas=2)), "/ci/x.py")
    )
    return one, two, again


def test_report_has_a_scaling_section_with_figures_and_every_run_as_a_row(
    tmp_path: Path, three_runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert cli.main(["report", *map(str, three_runs), "--output", str(out)]) == 0
    assert "scaling of 1 training benchmark(s)" in capsys.readouterr().out
    names = {p.name for p in out.iterdir()}
    assert {"scaling-throughput-test_train-mlp.png", "scaling-throughput-test_train-mlp.svg"} <= names
    # No time to train measured: no such figure.
    assert not [n for n in names if "time-to-train" in n]
    section = _section(_page(out))
    assert section.findtext("h2") == "Scaling"
    assert [h.text for h in section.iter("h3")] == ["test_train[mlp]"]
    assert len(list(section.iter("img"))) == 1
    (table,) = _tables(section, "scaling-measured")
    # One row per run, none averaged: two runs at 2 devices are two rows.
    rows = _rows(table)
    assert [(r[0], r[1], r[3], r[4], r[5]) for r in rows] == [
        ("one.json", "1", "100", "100", "100%"),
        ("two.json", "2", "180", "200", "90%"),
        ("again.json", "2", "170", "200", "85%"),
    ]
    caption = next(section.iter("figcaption")).text or ""
    assert caption.startswith("Efficiency beside each point: computed here against one.json at N_min = 1")


def test_the_figure_gets_the_ideal_line_and_efficiencies_from_the_measured_numbers(
    three_runs: tuple[Path, Path, Path],
) -> None:
    (study,) = scaling.studies(_runs(*three_runs))
    assert study.ideal() == ((1, 100.0), (2, 200.0))
    figure = scaling.draw(study, scaling.THROUGHPUT)
    (ax,) = figure.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    ideal = next(line for label, line in lines.items() if label.startswith("ideal"))
    xs, ys = (list(map(float, v)) for v in ideal.get_data())
    assert ys[xs.index(2.0)] == 2 * ys[xs.index(1.0)]
    measured = lines["measured (one point per run)"]
    assert list(measured.get_ydata()) == [100.0, 180.0, 170.0]
    assert [t.get_text() for t in ax.texts] == ["100%", "90%", "85%"]
    assert not [label for label in lines if label.startswith("published")]


def test_a_records_own_efficiency_is_preferred_and_marked(tmp_path: Path) -> None:
    name = "test_train[mlp]"
    own = ScalingRecord(2, 1, "base.json", 100.0, 1.6, 0.8)
    one = _write(tmp_path / "one.json", _bench(name, _record(100.0, training=_training(1))))
    two = _write(tmp_path / "two.json", _bench(name, _record(180.0, training=_training(2), scaling=own)))
    (study,) = scaling.studies(_runs(one, two))
    assert [scaling.efficiency_text(p) for p in study.points] == ["100%", "80% \u2020"]
    html_report.write_report(_runs(one, two), tmp_path / "out")
    section = _section(_page(tmp_path / "out"))
    caption = next(section.iter("figcaption")).text or ""
    assert "the record's own where marked \u2020" in caption
    assert "against its baseline run base.json (1 process(es))" in caption


def test_time_to_train_is_drawn_with_the_fastest_to_slowest_bar(tmp_path: Path) -> None:
    name = "test_time_to_train[mlp]"
    one = _write(
        tmp_path / "one.json",
        _bench(name, _record(50.0, time_to_train=_time_to_train(1, (9.0, 10.0, 12.0)))),
    )
    two = _write(
        tmp_path / "two.json",
        _bench(name, _record(90.0, time_to_train=_time_to_train(2, (5.0, 6.0, 8.0)))),
    )
    (study,) = scaling.studies(_runs(one, two))
    assert study.views() == (scaling.THROUGHPUT, scaling.TIME_TO_TRAIN)
    (ax,) = scaling.draw(study, scaling.TIME_TO_TRAIN).axes
    (bars,) = ax.containers
    line, _, (vertical,) = bars.lines  # type: ignore[misc]
    assert list(line.get_xdata()) == [1, 2]
    assert list(line.get_ydata()) == [10.0, 6.0]
    assert [seg[:, 1].tolist() for seg in vertical.get_segments()] == [[9.0, 12.0], [5.0, 8.0]]
    html_report.write_report(_runs(one, two), tmp_path / "out")
    (table,) = _tables(_section(_page(tmp_path / "out")), "scaling-measured")
    assert [r[-2:] for r in _rows(table)] == [["10 s", "9 s..12 s"], ["6 s", "5 s..8 s"]]


def test_published_references_are_drawn_and_listed_apart_from_the_measured_points(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "test_time_to_train[resnet50]"
    one = _write(
        tmp_path / "one.json", _bench(name, _record(50.0, time_to_train=_time_to_train(1, (9, 10, 12))))
    )
    two = _write(
        tmp_path / "two.json", _bench(name, _record(90.0, time_to_train=_time_to_train(2, (5, 6, 8))))
    )
    refs = tmp_path / "refs.toml"
    refs.write_text(
        EXAMPLE.read_text(encoding="utf-8")
        + '\n[[reference]]\nbenchmark = "bert"\nmetric = "throughput"\ndevices = 16\n'
        'value = "3,000 items/s"\nlabel = "BERT on POD16"\nsource = "a vendor\'s blog"\n',
        encoding="utf-8",
    )
    out = tmp_path / "out"
    assert cli.main(["report", str(one), str(two), "--output", str(out), "--references", str(refs)]) == 0
    assert "6 published reference(s)" in capsys.readouterr().out
    section = _section(_page(out))
    measured = _tables(section, "scaling-measured")
    assert [r[0] for r in _rows(measured[0])] == ["one.json", "two.json"]
    text = ET.tostring(measured[0], encoding="unicode")
    assert "POD" not in text
    assert "published" not in text
    headings = [h.text for h in section.iter("h4")]
    assert headings == ["Published reference points (not measured here)"] * 2
    matched, loose = _tables(section, "references")
    assert [(r[0], r[1], r[3], r[-1]) for r in _rows(matched)] == [
        ("IPU-POD16", "16", "28.33 min", "drawn in the time to train vs devices figure"),
        ("IPU-POD64", "64", "8.5 min", "drawn in the time to train vs devices figure"),
        ("IPU-POD128", "128", "5.67 min", "drawn in the time to train vs devices figure"),
        ("IPU-POD256", "256", "3.79 min", "drawn in the time to train vs devices figure"),
        ("NVIDIA DGX A100", "8", "29.1 min", "drawn in the time to train vs devices figure"),
    ]
    assert _rows(loose) == [
        [
            "BERT on POD16",
            "16",
            "throughput",
            "3,000 items/s",
            "a vendor's blog",
            "no measured benchmark matches 'bert'",
        ]
    ]
    # The figure: references in the legend as published, never on the measured line.
    (study,) = scaling.studies(_runs(one, two), references.load(refs))
    (ax,) = scaling.draw(study, scaling.TIME_TO_TRAIN).axes
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0].startswith("measured")
    assert legend[1:] == [f"published: {r.label}" for r in references.load(EXAMPLE)]
    assert list(ax.containers[0].lines[0].get_xdata()) == [1, 2]  # type: ignore[attr-defined]
    assert ax.get_ylabel() == "time to train (min)"  # one unit for both: 8.5 min reads as published
    published = [line for line in ax.get_lines() if line.get_label() == "published: IPU-POD64"]
    assert [(float(x), float(y)) for x, y in zip_strict(*published[0].get_data())] == [(64.0, 8.5)]
    # Throughput references do not match this benchmark, so its samples/s view has none.
    (tax,) = scaling.draw(study, scaling.THROUGHPUT).axes
    assert not [t for t in tax.get_legend().get_texts() if t.get_text().startswith("published")]


ENTRY = {
    "benchmark": '"resnet50"',
    "metric": '"time_to_train"',
    "devices": "16",
    "value": '"28.33 min"',
    "label": '"IPU-POD16"',
    "source": '"MLPerf Training v1.0"',
}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"source": None}, "[[reference]] #2: source is missing; add source = "),
        (
            {"metric": '"latency"'},
            '[[reference]] #2: metric = "latency": unknown metric; use "time_to_train"',
        ),
        (
            {"value": '"12 parsecs"'},
            "[[reference]] #2: value = \"12 parsecs\": unknown unit 'parsecs'; for time_to_train write a "
            "number in s or a string with s, min or h",
        ),
        ({"devices": "0"}, "[[reference]] #2: devices = 0: not a device count; write devices = 16"),
        ({"sorce": '"x"'}, "[[reference]] #2: unknown key 'sorce' = \"x\"; did you mean 'source'?"),
        (
            {"value": '"5 items/s"'},
            "value = \"5 items/s\": unit 'items/s' is for throughput, not time_to_train",
        ),
        ({"value": "-3"}, "value = -3: not a finite number above 0"),
        ({"label": '""'}, 'label = "": not a non-empty string; write label = '),
    ],
)
def test_each_bad_reference_is_one_line_naming_file_entry_key_value_and_fix(
    tmp_path: Path,
    three_runs: tuple[Path, Path, Path],
    capsys: pytest.CaptureFixture[str],
    change: dict[str, str | None],
    expected: str,
) -> None:
    bad = {**ENTRY, **change}
    second = "".join(f"{k} = {v}\n" for k, v in bad.items() if v is not None)
    first = "".join(f"{k} = {v}\n" for k, v in ENTRY.items())
    refs = tmp_path / "refs.toml"
    refs.write_text(f"[[reference]]\n{first}\n[[reference]]\n{second}", encoding="utf-8")
    out = tmp_path / "out"
    assert cli.main(["report", str(three_runs[0]), "--output", str(out), "--references", str(refs)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pytest-ipu: --references: {refs}: ")
    assert expected in err
    assert err.count("\n") == 1
    assert not out.exists()  # refused before anything is drawn


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[[reference]\n", "not TOML: "),
        ("title = 'x'\n", "unknown top-level key 'title'; the file holds [[reference]] tables only"),
        ("", "no [[reference]] entries"),
        ("[reference]\nbenchmark = 'x'\n", "'reference' is not a list of tables"),
    ],
)
def test_a_bad_references_file_is_one_line(tmp_path: Path, text: str, expected: str) -> None:
    refs = tmp_path / "refs.toml"
    refs.write_text(text, encoding="utf-8")
    with pytest.raises(references.ReferenceError) as caught:
        references.load(refs)
    message = str(caught.value)
    assert message.startswith(f"{refs}: ")
    assert expected in message
    assert "\n" not in message


def test_the_example_file_holds_the_published_resnet50_figures() -> None:
    refs = references.load(EXAMPLE)
    assert [(r.label, r.devices, r.written) for r in refs] == [
        ("IPU-POD16", 16, "28.33 min"),
        ("IPU-POD64", 64, "8.5 min"),
        ("IPU-POD128", 128, "5.67 min"),
        ("IPU-POD256", 256, "3.79 min"),
        ("NVIDIA DGX A100", 8, "29.1 min"),
    ]
    assert refs[0].value == pytest.approx(28.33 * 60)
    assert all(r.metric == "time_to_train" and r.source for r in refs)
    assert all(r.matches("test_train[ResNet50-ipu]") for r in refs)


def test_a_time_to_train_reference_is_not_drawn_beside_a_training_step(
    tmp_path: Path, three_runs: tuple[Path, Path, Path]
) -> None:
    refs = tmp_path / "refs.toml"
    refs.write_text(EXAMPLE.read_text(encoding="utf-8").replace("resnet50", "MLP"), encoding="utf-8")
    published = references.load(refs)
    (study,) = scaling.studies(_runs(*three_runs), published)
    assert study.references == ()
    html_report.write_report(_runs(*three_runs), tmp_path / "out", published)
    section = _section(_page(tmp_path / "out"))
    (table,) = _tables(section, "references")
    assert {r[-1] for r in _rows(table)} == {"not drawn: test_train[mlp] measured no time to train"}


def test_benchmarks_differing_only_by_path_in_one_run_stay_apart(tmp_path: Path) -> None:
    run = _write(
        tmp_path / "run.json",
        _bench("test_train", _record(100.0, training=_training(1)), "a/test_x.py"),
        _bench("test_train", _record(100.0, training=_training(1)), "b/test_x.py"),
        _bench("test_infer", _record(100.0)),  # no training part: not a scaling benchmark
    )
    assert [s.title for s in scaling.studies(_runs(run))] == [
        "a/test_x.py::test_train",
        "b/test_x.py::test_train",
    ]


def test_one_device_count_gives_the_table_and_no_figure(tmp_path: Path) -> None:
    run = _write(tmp_path / "run.json", _bench("test_train", _record(100.0, training=_training(2))))
    html_report.write_report(_runs(run), tmp_path / "out")
    section = _section(_page(tmp_path / "out"))
    assert not list(section.iter("img"))
    assert "No scaling figure: every run has 2 device(s)." in ET.tostring(section, encoding="unicode")
    assert len(_tables(section, "scaling-measured")) == 1


def test_without_matplotlib_the_scaling_tables_are_shown_and_the_page_says_why(
    tmp_path: Path, three_runs: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    files = html_report.write_report(_runs(*three_runs), tmp_path / "out")
    assert files.images == ()
    section = _section(_page(tmp_path / "out"))
    assert not list(section.iter("img"))
    assert "No scaling figures: they need matplotlib" in ET.tostring(section, encoding="unicode")
    assert len(_rows(_tables(section, "scaling-measured")[0])) == 3


def test_a_record_that_cannot_be_drawn_is_refused_naming_it(tmp_path: Path) -> None:
    good = schema.from_json(_record(100.0, training=_training(1)))
    bad = IpuRecord(**{**good.__dict__, "throughput_items_per_s": float("inf")})
    stored = benchmark_json.StoredRun(
        tmp_path / "run.json", {}, {}, None, (benchmark_json.StoredBenchmark("t", "x.py::t", None, bad),)
    )
    with pytest.raises(html_report.ReportError, match=r"scaling of 't' in run.json: its samples/s is inf"):
        html_report.write_report([stored], tmp_path / "out")


@pytest.mark.parametrize(("two_devices", "shown"), [(250.0, "125% !"), (32.0, "16% !"), (200.0, "100%")])
def test_an_efficiency_past_what_hardware_gives_is_marked_and_explained(
    tmp_path: Path, two_devices: float, shown: str
) -> None:
    name = "test_train[mlp]"
    one = _write(tmp_path / "one.json", _bench(name, _record(100.0, training=_training(1))))
    two = _write(tmp_path / "two.json", _bench(name, _record(two_devices, training=_training(2))))
    (study,) = scaling.studies(_runs(one, two))
    assert [scaling.efficiency_text(p) for p in study.points] == ["100%", shown]
    warned = [n for n in scaling.efficiency_notes(study) if n.startswith(scaling.SUSPECT_MARK)]
    assert len(warned) == (1 if shown.endswith("!") else 0)
    if warned:
        assert shown in warned[0]
