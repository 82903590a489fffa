"""The report's summary (pytest_ipu.report.summary): each study's best figures with the row that
reached them, what was not measured and why, and the self-checks kept out of it and folded last."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.backports import remove_prefix
from pytest_ipu.backports import zip_strict
from pytest_ipu.report import compare as compare_report
from pytest_ipu.report import html as html_report
from pytest_ipu.report import summary
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import compare
from pytest_ipu.results import references
from pytest_ipu.results.benchmark_json import RunFileError
from pytest_ipu.results.catalog import METRICS
from tests.unit.test_html_report import OFF
from tests.unit.test_html_report import _power
from tests.unit.test_html_report import _record
from tests.unit.test_html_report import _write_run


def _with_role(path: Path, role: object, names: set[str]) -> Path:
    document = json.loads(path.read_text(encoding="utf-8"))
    for bench in document["benchmarks"]:
        if bench["name"] in names:
            bench["extra_info"]["role"] = role
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_the_headline_is_the_best_row_of_each_figure(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "run.json",
        [
            ("study", "s[cpu-2]", _record("torch:cpu", 2, _power(2.0))),
            ("study", "s[cpu-4]", _record("torch:cpu", 4, _power(3.0))),
            ("study", "s[ort-2]", _record("onnxruntime:cpu", 2, OFF)),
        ],
    )
    line = summary.headline([benchmark_json.read_run(run)], "study")
    assert line.rows == 3
    # _record's p50 is 1 ms per item of batch, its throughput batch / p50: batch 2 is the fastest call.
    assert line.latency.value == pytest.approx(0.002)
    assert "batch 2" in line.latency.who
    assert line.items_per_j.value == pytest.approx(3.0)
    assert line.items_per_j.who.startswith("torch:cpu")
    assert "batch 4" in line.items_per_j.who


def test_a_figure_no_row_measured_says_why(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "run.json", [("study", f"s[{b}]", _record("torch:cpu", b, OFF)) for b in (1, 2)]
    )
    line = summary.headline([benchmark_json.read_run(run)], "study")
    assert line.items_per_j.value is None
    assert line.items_per_j.who.startswith("not measured: ")


def test_self_checks_stay_out_of_the_summary_and_are_folded_last(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "run.json",
        [
            *(("study", f"s[{b}]", _record("torch:cpu", b, OFF)) for b in (1, 2)),
            *(("overhead", f"o[{b}]", _record("torch:cpu", b, OFF)) for b in (1, 2, 4)),
        ],
    )
    _with_role(run, summary.SELF_CHECK, {"o[1]", "o[2]", "o[4]"})
    runs = [benchmark_json.read_run(run)]
    assert summary.self_check_groups(runs) == ["overhead"]
    assert summary.studies(runs) == ["study"]
    root = ET.fromstring(remove_prefix(html_report._page(runs, []), "<!DOCTYPE html>"))
    main = next(root.iter("main"))
    sections = [s.get("id") for s in main if s.tag == "section"]
    # The self-checks' group has the most rows, yet the study leads and the self-checks come last,
    # before only the machine's facts.
    assert sections == ["summary", "group-2-study", "self-checks", "machine"]
    folded = next(s for s in root.iter("section") if s.get("id") == "self-checks")
    assert [h.text for h in folded.iter("h2")][1:] == ["overhead"]
    assert folded.find("details") is not None


def test_a_role_that_is_not_a_string_is_refused(tmp_path: Path) -> None:
    run = _write_run(tmp_path / "run.json", [("g", "t[1]", _record("torch:cpu", 1, OFF))])
    _with_role(run, 3, {"t[1]"})
    with pytest.raises(RunFileError, match=r"extra_info\.role"):
        benchmark_json.read_run(run)


# --- published references beside the headline figures -------------------------------------------

BENCH_REFERENCES = Path(__file__).parents[2] / "benchmarks" / "references.toml"
EXAMPLE_REFERENCES = Path(__file__).parents[2] / "docs" / "examples" / "mlperf-resnet50-references.toml"

C2 = """
[[reference]]
benchmark = "STUDY"
metric = "latency.p50"
devices = 2
value = "1.36 ms"
label = "C2 card"
source = "a report"

[[reference]]
benchmark = "study"
metric = "throughput"
devices = 2
value = "2,526 items/s"
label = "C2 card"
source = "a report"

[[reference]]
benchmark = "study"
metric = "items_per_j"
devices = 2
value = "9.68 items/s/W"
label = "C2 card"
source = "a report"

[[reference]]
benchmark = "elsewhere"
metric = "throughput"
devices = 16
value = 3000
label = "POD16"
source = "a blog"
"""


def _cells(root: ET.Element) -> list[list[str]]:
    table = next(t for t in root.iter("table") if t.get("class") == "summary")
    return [["".join(td.itertext()) for td in tr.iter("td")] for tr in table.iter("tr")][1:]


def test_each_headline_figure_stands_beside_the_published_one_with_its_source_and_ratio(
    tmp_path: Path,
) -> None:
    run = _write_run(
        tmp_path / "run.json",
        [
            ("study", "s[cpu-2]", _record("torch:cpu", 2, _power(2.0))),
            ("study", "s[cpu-4]", _record("torch:cpu", 4, _power(3.0))),
        ],
    )
    refs = tmp_path / "refs.toml"
    refs.write_text(C2, encoding="utf-8")
    published = references.load(refs)
    runs = [benchmark_json.read_run(run)]
    line = summary.headline(runs, "study", published)
    # Each figure gets the references of its own metric that the study names (any case), no other.
    assert [[r.index for r in f.references] for f in line.figures] == [[1], [2], [3]]
    latency, throughput, per_joule = line.figures
    assert published[0].value == pytest.approx(0.00136)
    assert published[2].value == pytest.approx(9.68)  # items/s/W is items/J
    # _record: the lowest p50 is batch 2's 2 ms, throughput 1,000 items/s, best items/J 3.0.
    assert latency.ratio(published[0]) == pytest.approx(0.002 / 0.00136)
    assert throughput.ratio(published[1]) == pytest.approx(1000 / 2526)
    assert per_joule.ratio(published[2]) == pytest.approx(3.0 / 9.68)
    assert summary.used(runs, published) == {1, 2, 3}

    root = ET.fromstring(remove_prefix(html_report._page(runs, [], published=published), "<!DOCTYPE html>"))
    rows = _cells(root)
    assert rows[0][1:] == [
        "lowest p50 latency",
        "2 mstorch:cpu fp32, batch 2",
        "1.36 ms published: C2 card (2 device(s))source: a report",
        "1.47\u00d7",
    ]
    assert rows[1][-2:] == ["2,526 items/s published: C2 card (2 device(s))source: a report", "0.396\u00d7"]
    assert rows[2][-1] == "0.31\u00d7"
    # The reference no study names is listed apart, as not measured here; the summary's are not.
    loose = next(s for s in root.iter("section") if s.get("id") == "scaling")
    text = "".join(loose.itertext())
    assert "POD16" in text
    assert "C2 card" not in text


def test_a_study_that_names_no_reference_says_so_and_unmeasured_figures_have_no_ratio(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "run.json", [("other", f"o[{b}]", _record("torch:cpu", b, OFF)) for b in (1, 2)]
    )
    refs = tmp_path / "refs.toml"
    refs.write_text(C2.replace('"elsewhere"', '"other"').replace('"study"', '"other"'), encoding="utf-8")
    runs = [benchmark_json.read_run(run)]
    published = references.load(refs)
    line = summary.headline(runs, "other", published)
    per_joule = line.figure("items_per_j")
    assert per_joule.best.value is None
    assert per_joule.ratio(per_joule.references[0]) is None
    rows = _cells(
        ET.fromstring(remove_prefix(html_report._page(runs, [], published=published), "<!DOCTYPE html>"))
    )
    assert rows[0][-2] == "none named"  # "STUDY" names no group "other"
    assert rows[2][-1] == "-"


def test_a_training_studys_headline_is_its_time_to_train_beside_mlperfs(tmp_path: Path) -> None:
    from tests.unit.test_scaling_report import EXAMPLE
    from tests.unit.test_scaling_report import _bench
    from tests.unit.test_scaling_report import _record as _training_record
    from tests.unit.test_scaling_report import _time_to_train
    from tests.unit.test_scaling_report import _write

    name = "test_time_to_train[resnet50]"
    one = _write(
        tmp_path / "one.json",
        _bench(name, _training_record(50.0, time_to_train=_time_to_train(1, (9, 10, 12)))),
    )
    two = _write(
        tmp_path / "two.json",
        _bench(name, _training_record(90.0, time_to_train=_time_to_train(2, (5, 6, 8)))),
    )
    runs = [benchmark_json.read_run(p) for p in (one, two)]
    published = references.load(EXAMPLE)
    assert summary.studies(runs) == ["test_time_to_train"]
    line = summary.headline(runs, "test_time_to_train", published)
    (figure,) = line.figures
    assert figure.metric == "time_to_train"
    assert figure.best.value == pytest.approx(6.0)
    assert "2 process(es) (two.json)" in figure.best.who
    assert [r.label for r in figure.references] == [
        "IPU-POD16",
        "IPU-POD64",
        "IPU-POD128",
        "IPU-POD256",
        "NVIDIA DGX A100",
    ]
    assert figure.ratio(figure.references[0]) == pytest.approx(6.0 / (28.33 * 60))


def test_the_benchmarks_references_file_names_the_c2_figures_and_mlperfs_with_their_sources() -> None:
    refs = references.load(BENCH_REFERENCES)
    c2 = {r.metric: r for r in refs if r.benchmark == "resnext101"}
    assert c2["latency.p50"].value == pytest.approx(1.36e-3)
    assert c2["throughput"].value == pytest.approx(2526)
    assert c2["items_per_j"].value == pytest.approx(9.68)
    assert all(r.devices == 2 and "arXiv:2002.11670" in r.source for r in c2.values())
    assert all(r.matches("resnext101-inference") and r.matches("resnext101-c2") for r in c2.values())
    mlperf = [r for r in refs if r.metric == "time_to_train"]
    assert [r.label for r in mlperf] == [r.label for r in references.load(EXAMPLE_REFERENCES)]
    assert all("MLPerf" in r.source for r in mlperf)


def test_a_references_metric_is_a_registry_metric_in_the_registrys_unit() -> None:
    assert {m: METRICS[m].unit for m in references.METRICS} == dict(references.METRICS)


@pytest.mark.parametrize(
    ("metric", "value", "expected"),
    [
        ("latency.p50", '"2 min"', "unit 'min' is for time_to_train, not latency.p50"),
        ("items_per_j", '"9 items/s"', "unit 'items/s' is for throughput, not items_per_j"),
        (
            "latency.p50",
            '"1.36"',
            "no unit after '1.36'; for latency.p50 write a number in s or a string with s, ms or us",
        ),
    ],
)
def test_a_bad_value_for_the_new_metrics_is_one_line_with_the_fix(
    tmp_path: Path, metric: str, value: str, expected: str
) -> None:
    refs = tmp_path / "refs.toml"
    refs.write_text(
        f'[[reference]]\nbenchmark = "x"\nmetric = "{metric}"\ndevices = 2\nvalue = {value}\n'
        'label = "l"\nsource = "s"\n',
        encoding="utf-8",
    )
    with pytest.raises(references.ReferenceError) as caught:
        references.load(refs)
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


# --- several runs: the change, its interval and the verdict, as compare has them --------------------


def _slower(record: dict[str, Any], factor: float) -> dict[str, Any]:
    """``record`` with every latency ``factor`` times as long and its throughput as much lower."""
    record["latency_s"] = {
        k: v * factor if isinstance(v, float) else v for k, v in record["latency_s"].items()
    }
    record["throughput_items_per_s"] /= factor
    return record


def test_several_runs_get_compares_change_interval_and_verdict_for_the_row_holding_each_figure(
    tmp_path: Path,
) -> None:
    factors = (1.0, 1.02, 0.99, 1.3)  # the last run 30 % slower than three steady ones
    paths = [
        _write_run(
            tmp_path / f"run{n}.json",
            [
                ("study", "s[2]", _slower(_record("torch:cpu", 2, OFF), factor)),
                ("study", "s[4]", _slower(_record("torch:cpu", 4, OFF), factor)),
                # Batch 8 at twice the throughput of the others, in the first run only.
                *([("study", "s[8]", _slower(_record("torch:cpu", 8, OFF), 0.5))] if n == 0 else []),
            ],
        )
        for n, factor in enumerate(factors)
    ]
    runs = [benchmark_json.read_run(p) for p in paths]
    line = summary.headline(runs, "study")
    # The lowest p50: batch 2 of the third run.
    assert line.latency.run == 2
    assert line.latency.name == "s[2]"
    root = ET.fromstring(remove_prefix(html_report._page(runs, []), "<!DOCTYPE html>"))
    table = next(t for t in root.iter("table") if t.get("class") == "summary")
    headers = ["".join(th.itertext()) for th in table.iter("th")]
    assert headers[-3:] == ["run1.json vs run0.json", "run2.json vs run0.json", "run3.json vs run0.json"]
    rows = _cells(root)
    expected = {
        (lin.metric.name, lin.name): lin for lin in compare.compare_runs(runs).lines if lin.group == "study"
    }
    p50 = expected[("latency.p50", "s[2]")]
    for index, cell in zip_strict((1, 2, 3), rows[0][-3:]):
        assert cell == compare_report.format_change(p50, index) + compare_report.format_interval(p50, index)
    # Three steady runs before it make the run-to-run test: the last run is worse, its interval too.
    assert rows[0][-1].startswith("+30.0% worse (p")
    low, high = p50.interval(3) or (0.0, 0.0)
    assert 1.0 < low < 1.3 < high
    assert "99% interval" in rows[0][-1]
    assert rows[0][-3] == "+2.0% not tested"  # one run before it and one repeat a side: no estimate
    assert p50.interval(1) is None
    # The highest throughput is batch 8's, which only the first run has.
    assert line.throughput.name == "s[8]"
    assert rows[1][-3:] == ["not measured in both runs"] * 3
    assert rows[2][-3:] == ["-"] * 3  # items/J: nothing measured, nothing compared
    assert "as pytest-ipu compare judges them" in "".join(next(root.iter("section")).itertext())


def test_the_interval_is_the_one_the_test_rejects_no_change_outside_of() -> None:
    from pytest_ipu.results import decide

    found = decide.evidence(1.1, (), (), (1.0, 1.01, 0.99, 1.0))
    assert found is not None
    low, high = found.interval(0.01)
    assert low < math.exp(found.shift) < high
    # At the alpha where p equals it, one bound of the interval is the ratio 1 (no change).
    p = found.p_change()
    bounds = found.interval(p)
    assert min(abs(b - 1.0) for b in bounds) == pytest.approx(0.0, abs=1e-6)


def test_runs_that_share_no_figures_row_get_no_change_column_and_say_why(tmp_path: Path) -> None:
    # As make bench gives them: the inference run, then a run of other benchmarks (training).
    first = _write_run(
        tmp_path / "a.json", [("study", f"s[{b}]", _record("torch:cpu", b, OFF)) for b in (1, 2)]
    )
    other = _write_run(
        tmp_path / "b.json", [("other", f"o[{b}]", _record("torch:cpu", b, OFF)) for b in (1, 2)]
    )
    runs = [benchmark_json.read_run(p) for p in (first, other)]
    root = ET.fromstring(remove_prefix(html_report._page(runs, []), "<!DOCTYPE html>"))
    table = next(t for t in root.iter("table") if t.get("class") == "summary")
    assert [th.text for th in table.iter("th")][-1] == "measured / published"
    section = next(s for s in root.iter("section") if s.get("id") == "summary")
    assert summary.UNPAIRED_NOTE in "".join(section.itertext())
