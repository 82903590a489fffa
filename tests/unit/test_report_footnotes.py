"""Footnotes once per page (pytest_ipu.report.footnotes): the tables of a report share their notes,
and the page gives each one once, under the first table that needs it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from pytest_ipu.backports import remove_prefix
from pytest_ipu.report import footnotes
from pytest_ipu.report import html as html_report
from pytest_ipu.results import benchmark_json
from tests.unit.test_html_report import OFF
from tests.unit.test_html_report import _record
from tests.unit.test_html_report import _write_run


def _notes(root: ET.Element) -> list[tuple[str, list[str]]]:
    """Every notes list of the page: the innermost section it is in and its items' text."""
    found = []
    for section in root.iter("section"):
        for child in section:
            if child.tag == "ul" and child.get("class") == "notes":
                found.append((section.get("id") or "", ["".join(li.itertext()) for li in child]))
    return found


def test_a_note_two_tables_share_is_given_once_and_the_second_table_points_to_it(tmp_path: Path) -> None:
    # Three groups, all with power off and too few rounds for p99: the same two notes under each.
    run = _write_run(
        tmp_path / "run.json",
        [
            (group, f"{group}[{b}]", _record("torch:cpu", b, OFF, rounds=20, unsupported=("p99",)))
            for group in ("first", "second", "third")
            for b in (1, 2)
        ],
    )
    runs = [benchmark_json.read_run(run)]
    page = html_report._page(runs, [])
    root = ET.fromstring(remove_prefix(page, "<!DOCTYPE html>"))
    lists = _notes(root)
    assert [where for where, _ in lists] == ["group-1-first", "group-2-second", "group-3-third"]
    first = lists[0][1]
    assert any(n.startswith("n/m = power not measured") for n in first)
    assert any(n.startswith("* too few rounds") for n in first)
    for _, later in lists[1:]:
        assert later == [f"{len(first)} more note(s) apply here, as given above under first"]
    # Each note's text is on the page once.
    text = "".join(root.itertext())
    for note in first:
        assert text.count(note) == 1
    second = next(s for s in root.iter("section") if s.get("id") == "group-2-second")
    (link,) = [a for ul in second.iter("ul") for a in ul.iter("a")]
    assert link.get("href") == "#group-1-first"


def test_rows_under_a_repeated_note_keep_their_place_under_its_marker() -> None:
    page = (
        '<section id="a"><h2>A</h2><ul class="notes"><li>^ = items/s is far from batch / p50</li>'
        "<li>  a[1]: mean round 2 ms</li><li>unstable: a[1] varied</li></ul></section>"
        '<section id="b"><h2>B</h2><ul class="notes"><li>^ = items/s is far from batch / p50</li>'
        "<li>  b[1]: mean round 3 ms</li><li>unstable: b[1] varied</li></ul></section>"
    )
    out = footnotes.once_per_page(page)
    second = out[out.index('<section id="b">') :]
    assert "far from batch" not in second
    assert "<li>^ = (as noted above)</li><li>  b[1]: mean round 3 ms</li>" in second
    assert "<li>unstable: b[1] varied</li>" in second  # a note of another text is a note of its own
    assert out.count("a[1]: mean round 2 ms") == 1


def test_a_list_left_with_nothing_new_is_one_line_and_a_page_without_repeats_is_unchanged() -> None:
    page = '<section id="a"><h2>A</h2><ul class="notes"><li>x = one</li></ul></section>'
    assert footnotes.once_per_page(page) == page
    twice = page + page.replace('"a"', '"b"').replace(">A<", ">B<")
    out = footnotes.once_per_page(twice)
    assert out.count("x = one") == 1
    assert out.endswith(
        '<ul class="notes"><li class="seen">1 more note(s) apply here, as given above under '
        '<a href="#a">A</a></li></ul></section>'
    )
