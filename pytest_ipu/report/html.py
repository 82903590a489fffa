"""``pytest-ipu report``: plots of saved runs as PNG and SVG files, and one self-contained HTML page.

The page carries its CSS and figures (base64 SVG) inline. Its tables are the terminal's
(``pytest_ipu.report.terminal``'s ``COLUMNS`` and ``footnotes``), a note given once per page
(``pytest_ipu.report.footnotes``); groups come in ``plots.report_order`` (the batch-size study first,
on the first screen), the machine and run facts after them; a group of one batch size gets no figure
(one point per line would say nothing its table does not). The "LoadGen" section
(``pytest_ipu.report.loadgen``, ``loadgen_plot``) stands apart from the groups; the "Scaling" section,
first, is ``pytest_ipu.report.scaling``'s, its tables shown without matplotlib too. Every figure is
rendered before the first file is written, each file through a temporary one and ``os.replace``, so
a failure leaves earlier files whole and no half-written page.

Documented in docs/ci.md (section "Reports"), docs/training.md (section "Report") and docs/loadgen.md
(section "Comparing runs").
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import re
import sys
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from pytest_ipu import __version__
from pytest_ipu.backports import zip_strict
from pytest_ipu.measure import units
from pytest_ipu.report import footnotes
from pytest_ipu.report import loadgen
from pytest_ipu.report import loadgen_plot
from pytest_ipu.report import plots
from pytest_ipu.report import scaling
from pytest_ipu.report import summary
from pytest_ipu.report import terminal as report
from pytest_ipu.results import atomic
from pytest_ipu.results import benchmark_json
from pytest_ipu.results import references
from pytest_ipu.results.benchmark_json import StoredRun
from pytest_ipu.results.records import IpuRecord
from pytest_ipu.results.records import group_name
from pytest_ipu.results.references import Reference

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from pytest_ipu.results.changes import Report as Report_
    from pytest_ipu.results.history import Series as Series_

#: Resolution of the PNG files.
PNG_DPI = 150

#: The terminal table's columns the page shows, by header, after the batch and target columns.
TABLE_COLUMNS = (
    "precision",
    "repeats",
    "p50",
    "p99",
    "items/s",
    report.HOST_PER_ITEM,
    report.HOST_CORES,
    "W",
    "J/item",
    "items/J",
    "flags",
)

_CSS = """
:root { color-scheme: light; }
body { font: 15px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  color: #1d1d1f; margin: 0; background: #fafafa; }
main { max-width: 1320px; margin: 0 auto; padding: 24px 24px 48px; }
h1 { font-size: 26px; margin: 8px 0 4px; }
h2 { font-size: 20px; margin: 40px 0 8px; padding-top: 12px; border-top: 1px solid #e2e2e2; }
h3 { font-size: 15px; margin: 20px 0 6px; color: #444; }
.sub { color: #666; margin: 0 0 16px; }
table { border-collapse: collapse; margin: 8px 0; background: #fff; font-size: 13.5px; }
th, td { padding: 4px 8px; border-bottom: 1px solid #e6e6e6; text-align: left; vertical-align: top; }
th { background: #f0f0f2; font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) td { background: #f8f8fa; }
table.facts th { background: none; color: #555; font-weight: 500; }
.notes { color: #555; font-size: 12.5px; margin: 6px 0 16px; padding-left: 18px; }
.figures { display: grid; grid-template-columns: 1fr; gap: 16px; }
figure { margin: 0; background: #fff; border: 1px solid #e2e2e2; border-radius: 6px; padding: 8px; }
figure img { width: 100%; height: auto; display: block; }
figcaption { color: #777; font-size: 12px; margin-top: 4px; }
code { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 12.5px; }
details { margin: 6px 0; color: #555; font-size: 13px; }
ul.contents { margin: 4px 0 8px; padding-left: 0; }
ul.contents li { display: inline; }
ul.contents li + li::before { content: " \\00b7  "; color: #999; }
a { color: #0a5fa8; text-decoration: none; }
footer { color: #888; font-size: 12px; margin-top: 40px; }
td.pass { color: #1a7f37; font-weight: 600; }
td.fail { color: #c62828; font-weight: 600; }
td.unsure { color: #9a6700; font-weight: 600; }
table.summary td { font-size: 14px; }
table.summary th, table.summary td { white-space: normal; overflow-wrap: anywhere; }
table.summary td { min-width: 90px; }
table.summary td[rowspan] { min-width: 150px; }
table.summary strong { font-size: 16px; }
table.summary .source { color: #777; font-size: 12px; }
"""


class ReportError(RuntimeError):
    """The report cannot be made from these runs or here (no record to plot, no matplotlib)."""


@dataclass(frozen=True)
class ReportFiles:
    """What ``write_report`` wrote: the HTML page and the images (PNG and SVG) beside it."""

    html: Path
    images: tuple[Path, ...]


@dataclass(frozen=True)
class _Figure:
    """One rendered view of one group: the file stem and both formats' bytes."""

    group: str
    view: str
    stem: str
    png: bytes
    svg: bytes


def _slug(text: str) -> str:
    """A file-name-safe version of a group name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "group"


def generic(runs: Sequence[StoredRun]) -> list[StoredRun]:
    """``runs`` without their LoadGen benchmarks: what the groups' tables and figures show (a
    LoadGen benchmark's batch size is its largest batch, and its rounds LoadGen's queries)."""
    return [
        dataclasses.replace(
            run,
            benchmarks=tuple(b for b in run.benchmarks if b.record is None or b.record.loadgen is None),
        )
        for run in runs
    ]


def _render(
    runs: Sequence[StoredRun],
    studies: Sequence[scaling.Study] = (),
    charts: Sequence[loadgen_plot.Chart] = (),
    *,
    machine: str = "",
) -> list[_Figure] | None:
    """The three views of every group with a batch axis, the scaling views of ``studies`` and the
    LoadGen ``charts``, as PNG and SVG bytes, before anything is written; ``None`` when only scaling
    or LoadGen figures were due and matplotlib is missing (their tables say so). Every group's and
    chart's numbers are checked (``plots.check_plottable``, ``loadgen_plot.check``), drawn or not: a
    table must not show a number that a figure would have refused. ``runs`` are the groups' runs
    (``generic``); ``machine`` the hardware line of the LoadGen figures (``plots.machine_label`` of
    every run, LoadGen benchmarks included)."""
    order = plots.report_order(runs)
    try:
        for group in order:
            for view in plots.VIEWS:
                plots.check_plottable(view, group, plots.series_for(runs, group, view))
        for chart in charts:
            loadgen_plot.check(chart)
    except plots.PlotError as exc:
        raise ReportError(str(exc)) from None
    swept = [g for g in order if plots.has_batch_axis(runs, g)]
    scaled = [(i, view) for i, study in enumerate(studies) for view in study.views()]
    if not swept and not scaled and not charts:
        return []  # nothing to draw, so nothing needs matplotlib
    try:
        import matplotlib  # noqa: F401  (only whether it is installed: _encode and plots import it)
    except ImportError:
        if not swept:
            return None
        raise ReportError(
            "pytest-ipu report needs matplotlib (pytest-ipu's extra 'report'): pip install matplotlib"
        ) from None

    return _draw(runs, swept, studies, scaled, charts, machine)


def _draw(
    runs: Sequence[StoredRun],
    swept: Sequence[str],
    studies: Sequence[scaling.Study],
    scaled: Sequence[tuple[int, str]],
    charts: Sequence[loadgen_plot.Chart],
    machine: str,
) -> list[_Figure]:
    """Draw and encode the figures ``_render`` found due: each view of the ``swept`` groups, the
    ``scaled`` views of ``studies`` and the LoadGen ``charts``, each under a file stem of its own."""
    out: list[_Figure] = []
    stems: set[str] = set()

    def unique(stem: str) -> str:
        # Two names can reduce to one slug (``a b`` and ``a-b``); keep their files apart.
        base, n = stem, 2
        while stem in stems:
            stem, n = f"{base}-{n}", n + 1
        stems.add(stem)
        return stem

    for group in swept:
        stem = unique(_slug(group))
        hardware = plots.machine_label(runs, group)
        for view in plots.VIEWS:
            series = plots.series_for(runs, group, view)
            if not plots.has_values(series):
                continue  # a plot of nothing: the table's n/m and its footnote say why (``_figures``)
            figure = plots.draw(view, group, series, plots.notes_for(view, series), machine=hardware)
            out.append(_Figure(group, view, f"{stem}-{view}", *_encode(figure)))
    for index, view in scaled:
        study = studies[index]
        hardware = plots.machine_label([runs[i] for i in sorted({p.run for p in study.points})])
        stem = unique(f"{view}-{_slug(study.title)}")
        out.append(_Figure(study.title, view, stem, *_encode(scaling.draw(study, view, machine=hardware))))
    for chart in charts:
        stem = unique(f"loadgen-{_slug(chart.target)}")
        figure = loadgen_plot.draw(chart, machine=machine)
        out.append(_Figure(chart.target, loadgen_plot.VIEW, stem, *_encode(figure)))
    return out


def _encode(figure: Figure) -> tuple[bytes, bytes]:
    """A figure's PNG and SVG bytes."""
    import matplotlib

    png, svg = io.BytesIO(), io.BytesIO()
    # A fixed hash salt and no date make the SVG the same bytes for the same data, so that
    # reports diff cleanly; text as paths needs no font on the reader's machine.
    with matplotlib.rc_context({"svg.hashsalt": "pytest-ipu", "svg.fonttype": "path"}):
        figure.savefig(png, format="png", dpi=PNG_DPI, metadata={"Software": None})
        figure.savefig(svg, format="svg", metadata=dict.fromkeys(("Creator", "Date", "Format", "Type")))
    return png.getvalue(), svg.getvalue()


def write_report(
    runs: Sequence[StoredRun], out_dir: Path, references: Sequence[Reference] = ()
) -> ReportFiles:
    """Write ``index.html``, and a PNG and an SVG per view of each group with a batch axis, per
    scaling view of each training benchmark and per LoadGen chart (a target's latency against QPS),
    into ``out_dir`` (created if needed). ``references`` are published points drawn beside the
    measured ones (``pytest_ipu.results.references``).

    Raises ``ReportError`` when no run holds a pytest-ipu record, a record cannot be plotted, or
    matplotlib is missing where there is a figure against batch size to draw, and ``OSError`` when
    a file cannot be written.
    """
    if not plots.groups(runs):
        raise ReportError("no benchmark carries extra_info['ipu']: nothing to report")
    try:
        studies = scaling.studies(runs, references)
    except scaling.ScalingError as exc:
        raise ReportError(str(exc)) from None
    charts = loadgen_plot.charts(runs)
    figures = _render(generic(runs), studies, charts, machine=plots.machine_label(runs))
    # backslashreplace: a file name that is not UTF-8 (``name_\xff.json``) reaches here with Python's
    # surrogate escape, which UTF-8 cannot encode; the page shows it escaped rather than failing.
    page = _page(runs, figures or [], studies, references, scaling_drawn=figures is not None).encode(
        "utf-8", "backslashreplace"
    )
    return _write_files(out_dir, figures or [], page)


def _write_files(out_dir: Path, figures: Sequence[_Figure], page: bytes) -> ReportFiles:
    """Every figure as PNG and SVG, then the page, each written whole (``atomic``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images: list[Path] = []
    for figure in figures:
        for suffix, data in ((".png", figure.png), (".svg", figure.svg)):
            path = out_dir / f"{figure.stem}{suffix}"
            atomic.write_bytes(path, data)
            images.append(path)
    # The page last: it is what a reader opens, and it must never describe images not yet written.
    html_path = out_dir / "index.html"
    atomic.write_bytes(html_path, page)
    return ReportFiles(html_path, tuple(images))


def main(paths: Sequence[Path], out_dir: Path, references_file: Path | None = None) -> int:
    """The ``pytest-ipu report`` command: 0 on success, 2 on bad input (a bad references file
    included, before anything is drawn) or when nothing can be written."""
    runs: list[StoredRun] = []
    if not paths:
        print("pytest-ipu: report needs at least one RUN.json", file=sys.stderr)
        return 2
    published: tuple[Reference, ...] = ()
    if references_file is not None:
        try:
            published = references.load(references_file)
        except references.ReferenceError as exc:
            print(f"pytest-ipu: --references: {exc}", file=sys.stderr)
            return 2
    for path in paths:
        try:
            run = benchmark_json.read_run(path)
        except benchmark_json.RunFileError as exc:
            print(f"pytest-ipu: {exc}", file=sys.stderr)
            return 2
        if not any(b.record is not None for b in run.benchmarks):
            print(
                f"pytest-ipu: {path}: no benchmark carries extra_info['ipu'] (not a pytest-ipu run): "
                "nothing to report",
                file=sys.stderr,
            )
            return 2
        runs.append(run)
    try:
        files = write_report(runs, out_dir, published)
    except ReportError as exc:
        print(f"pytest-ipu: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = exc.filename or out_dir
        print(f"pytest-ipu: {where}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 2
    groups = len(plots.groups(generic(runs)))
    studies = scaling.studies(runs, published)
    queried = len(_loadgen_rows(runs))
    scaled = f", {queried} LoadGen benchmark(s)" if queried else ""
    scaled += f", scaling of {len(studies)} training benchmark(s)" if studies else ""
    scaled += f", {len(published)} published reference(s)" if published else ""
    print(f"wrote {files.html} ({groups} group(s){scaled}, {len(files.images) // 2} figure(s))")
    if files.images:
        print(f"wrote {len(files.images)} image(s), PNG and SVG, to {out_dir}")
    return 0


# --- the page ---------------------------------------------------------------------------------


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _target_cell(record: IpuRecord) -> str:
    count = len(record.instances) if record.instances else 1
    text = record.target + (f" x{count}" if count > 1 else "")
    return text + (" [sim] simulated timings" if record.simulator else "")


def _commit(run: StoredRun) -> str:
    info = run.commit_info
    commit = info.get("id")
    if not commit:
        return "none recorded"
    text = str(commit)[:12]
    if info.get("branch"):
        text += f" on {info['branch']}"
    if info.get("dirty"):
        text += " (uncommitted changes)"
    return text


def _cpu(machine: Mapping[str, Any]) -> str:
    cpu = _mapping(machine.get("cpu"))
    text = str(cpu.get("brand_raw") or machine.get("processor") or "unknown CPU")
    details = [
        f"{cpu['count']} CPUs" if isinstance(cpu.get("count"), int) else "",
        str(cpu.get("arch") or ""),
    ]
    details = [d for d in details if d]
    return text + (f" ({', '.join(details)})" if details else "")


def _backend_text(name: str, info: Mapping[str, Any]) -> str:
    """``torch:cpu``: its device name and the facts the backend recorded (versions, mode, threads)."""
    skip = {"backend", "device", "device_name", "providers_available"}
    facts = [
        f"{key} {', '.join(map(str, value)) if isinstance(value, list) else value}"
        for key, value in info.items()
        if key not in skip and not isinstance(value, Mapping) and value not in (None, "")
    ]
    device = info.get("device_name")
    return f"{name}: {device}" + (f" ({'; '.join(facts)})" if facts else "") if device else name


def _facts_table(rows: Sequence[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="facts"><tbody>{body}</tbody></table>'


def _mapping(value: object) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one: machine_info is free-form."""
    return value if isinstance(value, Mapping) else {}


def _run_section(run: StoredRun, label: str | None) -> str:
    machine = run.machine_info
    ipu = _mapping(machine.get("ipu"))
    backends = _mapping(ipu.get("backends"))
    absent = _mapping(ipu.get("absent"))
    rows = [
        ("file", f"<code>{_e(run.path)}</code>"),
        ("date", _e(plots.format_date(run.datetime))),
        ("commit", _e(_commit(run))),
        ("CPU", _e(_cpu(machine))),
        ("node", _e(machine.get("node") or "unknown")),
        (
            "system",
            _e(" ".join(str(machine.get(k) or "") for k in ("system", "release")).strip() or "unknown"),
        ),
        ("Python", _e(machine.get("python_version") or "unknown")),
    ]
    if ipu.get("pytest_ipu"):
        rows.append(("pytest-ipu", _e(ipu["pytest_ipu"])))
    if backends:
        items = "<br/>".join(_e(_backend_text(str(n), _mapping(b))) for n, b in backends.items())
        rows.append(("backends", items))
    parts = [f"<h3>{_e(label)}</h3>" if label else "", _facts_table(rows)]
    if absent:
        items = "".join(f"<li><code>{_e(n)}</code>: {_e(why)}</li>" for n, why in absent.items())
        summary = f"{len(absent)} target(s) absent on this machine"
        parts.append(f"<details><summary>{summary}</summary><ul>{items}</ul></details>")
    return "".join(parts)


def _group_rows(runs: Sequence[StoredRun], group: str) -> list[tuple[int, report.Row]]:
    rows = [
        (index, report.Row(group, bench.name, bench.record))
        for index, run in enumerate(runs)
        for bench in run.benchmarks
        if bench.record is not None and group_name(bench.group, bench.name) == group
    ]
    rows.sort(key=lambda item: (report.sort_key(item[1]), item[0]))
    return rows


def _table(runs: Sequence[StoredRun], group: str) -> str:
    columns = {c.header: c for c in report.COLUMNS}
    labels = plots.run_labels(runs)
    rows = _group_rows(runs, group)
    # A run column only where the group's rows come from several runs; else the caption names the run.
    held = sorted({index for index, _ in rows})
    multi = len(held) > 1
    headers = ["run"] if multi else []
    headers += ["benchmark", "batch", "target", *TABLE_COLUMNS]
    # Text columns wrap and align left; the flags of a row can be long (unstable,contended,...).
    text_columns = {"run", "benchmark", "target", "precision", "flags"}
    attrs = ["" if h in text_columns else ' class="num"' for h in headers]
    head = "".join(f"<th{a}>{_e(h)}</th>" for a, h in zip_strict(attrs, headers))
    body = []
    for index, row in rows:
        cells = [labels[index]] if multi else []
        # The test's parameters tell rows apart that share a batch size and target (workload=...).
        cells += [columns["benchmark"].render(row), str(row.record.batch_size), _target_cell(row.record)]
        cells += [columns[h].render(row) for h in TABLE_COLUMNS]
        body.append("<tr>" + "".join(f"<td{a}>{_e(c)}</td>" for a, c in zip_strict(attrs, cells)) + "</tr>")
    notes = report.footnotes([row for _, row in rows])
    notes_html = f'<ul class="notes">{"".join(f"<li>{_e(n)}</li>" for n in notes)}</ul>' if notes else ""
    caption = "latency per call; throughput summed over instances"
    if len(runs) > 1 and not multi and held:
        caption += f"; every row from {labels[held[0]]}"
    return (
        f'<p class="sub">{_e(caption)}</p><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>{notes_html}"
    )


def _group_section(runs: Sequence[StoredRun], group: str, figures: Sequence[_Figure], anchor: str) -> str:
    """One group's section: its heading, table and figures, then its benchmarks without a record
    (``_plain_table``)."""
    mine = [f for f in figures if f.group == group and f.view in plots.VIEWS]
    body = f"<h2>{_e(group)}</h2>"
    if group in plots.groups(runs):
        body += f"{_table(runs, group)}{_figures(runs, group, mine)}"
    body += _plain_table(runs, group)
    return f'<section id="{_e(anchor)}">{body}</section>'


def plain_groups(runs: Sequence[StoredRun]) -> list[str]:
    """The groups of the benchmarks without a pytest-ipu record (pytest-benchmark's own
    ``benchmark`` fixture alone), in first-seen order over the runs."""
    seen: dict[str, None] = {}
    for run in runs:
        for bench in run.benchmarks:
            if bench.record is None:
                seen[group_name(bench.group, bench.name)] = None
    return list(seen)


#: pytest-benchmark's statistics a benchmark without a record is shown with: (key, header).
PLAIN_STATS = (("min", "min"), ("median", "median"), ("mean", "mean"), ("stddev", "stddev"))
#: The caption of a table of benchmarks without a record.
PLAIN_CAPTION = (
    "pytest-benchmark's own statistics of the rounds (its benchmark fixture alone: no pytest-ipu "
    "record, so no throughput, power or flags)"
)


def _plain_table(runs: Sequence[StoredRun], group: str) -> str:
    """The group's benchmarks without a pytest-ipu record, with pytest-benchmark's statistics
    (min, median, mean, stddev, rounds); empty when it has none. A statistic the file lacks is
    ``-``, and a note says so."""
    labels = plots.run_labels(runs)
    multi = len(runs) > 1
    rows = [
        (index, bench)
        for index, run in enumerate(runs)
        for bench in run.benchmarks
        if bench.record is None and group_name(bench.group, bench.name) == group
    ]
    if not rows:
        return ""
    headers = (["run"] if multi else []) + ["benchmark", *(h for _, h in PLAIN_STATS), "rounds"]
    numeric = ' class="num"'
    head = "".join(f"<th{'' if h in ('run', 'benchmark') else numeric}>{h}</th>" for h in headers)
    body = []
    missing = False
    for index, bench in rows:
        cells = [f"<td>{_e(labels[index])}</td>"] if multi else []
        cells.append(f"<td>{_e(bench.name)}</td>")
        for key, _ in PLAIN_STATS:
            value = bench.stats.get(key)
            missing = missing or value is None
            cells.append(f'<td class="num">{_e(units.format_value(value, "s"))}</td>')
        missing = missing or bench.rounds is None
        cells.append(f'<td class="num">{"-" if bench.rounds is None else bench.rounds}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    note = (
        '<ul class="notes"><li>- = not in the run file (pytest-benchmark wrote no such statistic)</li></ul>'
        if missing
        else ""
    )
    return (
        f'<p class="sub">{_e(PLAIN_CAPTION)}</p><table class="plain"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>{note}"
    )


def _embedded(figure: _Figure, alt: str) -> str:
    """A figure inline (its SVG as a data URL: the page stays one file), captioned by its files."""
    data = base64.b64encode(figure.svg).decode("ascii")
    return (
        f'<figure><img alt="{_e(alt)}" src="data:image/svg+xml;base64,{data}"/>'
        f"<figcaption>{_e(figure.stem)}.png, {_e(figure.stem)}.svg</figcaption></figure>"
    )


def _figures(runs: Sequence[StoredRun], group: str, figures: Sequence[_Figure]) -> str:
    if not plots.has_batch_axis(runs, group):
        sizes = ", ".join(map(str, plots.batch_sizes(runs, group)))
        text = f"No plots against batch size: every row has batch size {sizes}."
        return f'<p class="sub">{_e(text)}</p>'
    parts = [
        _embedded(figure, f"{figure.group}: {plots.VIEW_TITLES[figure.view]} against batch size")
        for figure in figures
    ]
    drawn = {figure.view for figure in figures}
    left = [v for v in plots.VIEWS if v not in drawn]
    note = ""
    if left:
        views = ", ".join(plots.VIEW_TITLES[v] for v in left)
        note = f'<p class="sub">Not drawn, nothing measured: {_e(views)} (the table says why).</p>'
    return f'<div class="figures">{"".join(parts)}</div>{note}'


def _loadgen_rows(runs: Sequence[StoredRun]) -> list[tuple[str, IpuRecord]]:
    """Every LoadGen benchmark of ``runs`` as ``(name, record)``, in run then benchmark order; the
    name carries its run's label when several runs are compared."""
    labels = plots.run_labels(runs)
    return [
        (bench.name + (f" ({labels[index]})" if len(runs) > 1 else ""), bench.record)
        for index, run in enumerate(runs)
        for bench in run.benchmarks
        if bench.record is not None and bench.record.loadgen is not None
    ]


def _loadgen_section(
    measured: Sequence[tuple[str, IpuRecord]], charts: Sequence[_Figure], *, drawn: bool
) -> str:
    """The LoadGen section's body: the terminal's LoadGen table and notes, then each target's figure
    of latency against QPS (or why there is none)."""
    attrs = ["" if h in loadgen.TEXT_HEADERS else ' class="num"' for h in loadgen.HEADERS]
    head = "".join(f"<th{a}>{_e(h)}</th>" for a, h in zip_strict(attrs, loadgen.HEADERS))
    body = "".join(
        "<tr>"
        + "".join(f"<td{a}>{_e(c)}</td>" for a, c in zip_strict(attrs, loadgen.cells(name, rec)))
        + "</tr>"
        for name, rec in measured
    )
    # A note's indented lines (a benchmark each) read as a list under it, as in the terminal.
    notes = "".join(
        f'<li style="margin-left: 18px; list-style: circle">{_e(n.strip())}</li>'
        if n.startswith("  ")
        else f"<li>{_e(n)}</li>"
        for n in loadgen.notes(measured)
    )
    parts = [
        f'<p class="sub">{_e(loadgen.TITLE)}</p>',
        f'<table class="loadgen"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>',
        f'<ul class="notes">{notes}</ul>',
    ]
    if not drawn:
        parts.append(
            '<p class="sub">No LoadGen figures: they need matplotlib (pytest-ipu\'s extra '
            "'report': pip install matplotlib).</p>"
        )
    elif not charts:
        parts.append(
            '<p class="sub">No figure of latency against QPS: no Server benchmark searched for '
            "its peak QPS (find_peak=True).</p>"
        )
    images = [_embedded(figure, f"{figure.group}: {loadgen_plot.TITLE}") for figure in charts]
    if images:
        parts.append(f'<div class="figures">{"".join(images)}</div>')
    return "".join(parts)


#: How each gate verdict is marked in the report: never a PASS colour for what could not be told.
_OUTCOME_CLASS = {"PASS": "pass", "FAIL": "fail", "INCONCLUSIVE": "unsure"}


def _gates_section(runs: Sequence[StoredRun], labels: Sequence[str]) -> str:
    """The verdicts of the gates each run recorded, with their counts; empty when no run had gates."""
    parts = []
    for run, label in zip_strict(runs, labels):
        if not run.gates:
            continue
        counts = ", ".join(f"{sum(v.outcome == o for v in run.gates)} {o}" for o in _OUTCOME_CLASS)
        head = f"run {label}: " if len(runs) > 1 else ""
        rows = "".join(
            f'<tr><td class="{_OUTCOME_CLASS[v.outcome]}">{_e(v.outcome)}</td><td>{_e(v.benchmark)}</td>'
            f"<td><code>{_e(v.gate)}</code></td><td>{_e(v.line)}</td></tr>"
            for v in run.gates
        )
        parts.append(
            f'<p class="sub">{_e(head)}{len(run.gates)} gate check(s): {_e(counts)}</p>'
            f"<table><tr><th>verdict</th><th>benchmark</th><th>gate</th><th>evidence</th></tr>{rows}</table>"
        )
    return "".join(parts)


def _page(
    runs: Sequence[StoredRun],
    figures: Sequence[_Figure],
    studies: Sequence[scaling.Study] = (),
    published: Sequence[Reference] = (),
    *,
    scaling_drawn: bool = True,
) -> str:
    """The report's HTML page: the summary, the gates, each group, the scaling studies, LoadGen,
    pytest-ipu's self-checks (folded) and the machine, with ``figures`` in their sections."""
    shown = generic(runs)
    recorded = plots.report_order(shown)
    # The groups of pytest-benchmark's own benchmarks (no record) come after those with records.
    groups = recorded + [g for g in plain_groups(shown) if g not in recorded]
    labels = plots.run_labels(runs)
    sub, heading, machine = _runs_heading(runs, labels)
    sections: list[str] = []
    contents: list[str] = []
    checks = set(summary.self_check_groups(shown))
    anchors = {group: f"group-{index + 1}-{_slug(group)}" for index, group in enumerate(groups)}
    # First: the answer, each study's headline figures; the sections follow.
    lead = summary.section(shown, anchors, published)
    if lead:
        _add_section(sections, contents, "summary", "Summary", lead, "summary")
    gated = _gates_section(runs, labels)
    if gated:
        _add_section(sections, contents, "gates", "Gates", gated, "gates")
    for group in groups:
        if group not in checks:
            sections.append(_group_section(shown, group, figures, anchors[group]))
            contents.append(f'<li><a href="#{_e(anchors[group])}">{_e(group)}</a></li>')
    body = _scaling_body(shown, figures, studies, published, scaling_drawn)
    if body is not None:
        _add_section(sections, contents, "scaling", "Scaling", body, "scaling")
    queried = _loadgen_rows(runs)
    if queried:
        charts = [f for f in figures if f.view == loadgen_plot.VIEW]
        body = _loadgen_section(queried, charts, drawn=scaling_drawn)
        _add_section(sections, contents, "loadgen", "LoadGen", body, "LoadGen")
    if checks:
        # pytest-ipu's checks of itself (overheads, sampler, gates): last, folded, out of the way.
        inner = "".join(_group_section(shown, g, figures, anchors[g]) for g in groups if g in checks)
        folded = (
            f"<details><summary>{len(checks)} group(s) that measure pytest-ipu itself, not a model</summary>"
            f"{inner}</details>"
        )
        _add_section(sections, contents, "self-checks", "Self-checks", folded, "self-checks")
    # The machine's facts come after the groups: the first screen is for the main study's table.
    _add_section(sections, contents, "machine", _e(heading), machine, _e(heading.lower()))
    return _document(runs, sub, sections, contents)


def _add_section(
    sections: list[str], contents: list[str], anchor: str, heading: str, body: str, link: str
) -> None:
    """Add a section of the page (``heading`` and ``body``, HTML) and its line in the contents."""
    sections.append(f'<section id="{anchor}"><h2>{heading}</h2>{body}</section>')
    contents.append(f'<li><a href="#{anchor}">{link}</a></li>')


def _document(runs: Sequence[StoredRun], sub: str, sections: Sequence[str], contents: Sequence[str]) -> str:
    """The whole page: its head and style, the title, the contents, the ``sections`` and the footer."""
    title = "pytest-ipu report"
    nav = f'<nav><ul class="contents">{"".join(contents)}</ul></nav>'
    # Each note once per page: tables share most of theirs (footnotes.once_per_page).
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"/>'
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body><main>"
        f'<h1>{_e(title)}</h1><p class="sub">{_e(sub)}</p>{nav}'
        f"{footnotes.once_per_page(''.join(sections))}"
        f"<footer>Made by pytest-ipu {_e(__version__)} from {_e(', '.join(str(r.path) for r in runs))}. "
        "Numbers: see docs/numbers.md; energy: docs/power.md.</footer>"
        "</main></body></html>\n"
    )


def _runs_heading(runs: Sequence[StoredRun], labels: Sequence[str]) -> tuple[str, str, str]:
    """The page's subtitle, and the heading and body of its section on the machine and runs."""
    if len(runs) == 1:
        sub = f"{plots.format_date(runs[0].datetime)} on {plots.machine_label(runs)}"
        return sub, "Machine and run", _run_section(runs[0], None)
    sub = f"{len(runs)} runs compared: " + ", ".join(labels)
    return sub, "Runs", "".join(_run_section(r, f"run {lab}") for r, lab in zip_strict(runs, labels))


def _scaling_body(
    shown: Sequence[StoredRun],
    figures: Sequence[_Figure],
    studies: Sequence[scaling.Study],
    published: Sequence[Reference],
    scaling_drawn: bool,
) -> str | None:
    """The scaling section's body: the studies, with their figures where drawn, and the published
    references no summary figure shows; ``None`` with neither."""
    # A reference the summary sets beside a figure is shown there; the scaling section lists the rest.
    beside = summary.used(shown, published)
    loose = [r for r in scaling.unmatched(published, studies) if r.index not in beside]
    if not (studies or loose):
        return None
    # First: across runs of a training benchmark, the scaling is what the runs were made for.
    drawn = {
        (i, f.view): (f.stem, f.svg)
        for i, study in enumerate(studies)
        for f in figures
        if f.group == study.title and f.view in scaling.VIEWS
    }
    return scaling.section(studies, loose, drawn if scaling_drawn else None)


# --- the history view (pytest-ipu report STORAGE) ------------------------------------------------


def write_history(found: Report_, out_dir: Path) -> ReportFiles:
    """Write ``index.html`` of the history view (``report.history``), with a PNG and an SVG per
    figure, into ``out_dir``; raises ``ReportError`` when there is nothing to draw or no matplotlib,
    ``OSError`` when a file cannot be written."""
    from pytest_ipu.report import history as history_view

    chosen = history_view.drawn(found)
    if not chosen:
        raise ReportError("no series in the history: nothing to report")
    try:
        import matplotlib  # noqa: F401  (only whether it is installed)
    except ImportError:
        raise ReportError(
            "pytest-ipu report needs matplotlib (pytest-ipu's extra 'report'): pip install matplotlib"
        ) from None
    figures: list[_Figure] = []
    for number, series in enumerate(chosen, start=1):
        drawing = history_view.draw(series, history_view.of(found, series))
        stem = f"history-{number}-{_slug(series.name)}-{_slug(series.metric)}"
        figures.append(_Figure(series.fullname, series.metric, stem, *_encode(drawing)))
    page = _history_page(found, chosen, figures).encode("utf-8")
    return _write_files(out_dir, figures, page)


def _history_page(found: Report_, chosen: Sequence[Series_], figures: Sequence[_Figure]) -> str:
    from pytest_ipu.report import history as history_view

    read = found.history
    sub = (
        f"{read.runs} run(s) of machine {', '.join(read.machines)}, {len(read.series)} series, "
        f"{len(found.changes)} change point(s) (docs/ci.md: history across commits)"
    )
    head = ["commit", "benchmark", "metric", "machine", "change", "interval", "p", "before", "after"]
    numeric = {"change", "interval", "p", "before", "after"}
    rows = []
    for change, cells in history_view.summary_rows(found):
        tds = "".join(
            f'<td class="{"num " if h in numeric else ""}{"fail" if change.worse else "pass"}">{_e(c)}</td>'
            if h == "change"
            else f"<td{' class=num' if h in numeric else ''}>{'<code>' if h == 'commit' else ''}{_e(c)}"
            f"{'</code>' if h == 'commit' else ''}</td>"
            for h, c in zip_strict(head, cells)
        )
        rows.append(f"<tr>{tds}</tr>")
    header = "".join(f"<th{' class=num' if h in numeric else ''}>{_e(h)}</th>" for h in head)
    summary = (
        f"<table><thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        if rows
        else '<p class="sub">No change point in any series.</p>'
    )
    sections = [f'<section id="changes"><h2>Change points, newest first</h2>{summary}</section>']
    for series, figure in zip_strict(chosen, figures):
        sections.append(
            f'<section id="{_e(figure.stem)}"><h2>{_e(history_view.title(series))}</h2>'
            f"{_embedded(figure, history_view.title(series) + ' against commit')}</section>"
        )
    notes = "".join(f"<li>{_e(n)}</li>" for n in read.notes)
    if notes:
        sections.append(f'<section id="notes"><h2>Left out</h2><ul class="notes">{notes}</ul></section>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"/>'
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>'
        f"<title>pytest-ipu history</title><style>{_CSS}</style></head><body><main>"
        f'<h1>pytest-ipu history</h1><p class="sub">{_e(sub)}</p>{"".join(sections)}'
        f"<footer>Made by pytest-ipu {_e(__version__)}.</footer></main></body></html>\n"
    )


def history_main(sources: Sequence[str], storage_uri: str, machines: Sequence[str], out_dir: Path) -> int:
    """``pytest-ipu report STORAGE``: the history view; 0 on success, 2 on bad input or when nothing
    can be written."""
    from pytest_ipu.results import changes
    from pytest_ipu.results import history
    from pytest_ipu.results import storage

    try:
        given, found_files = history.find_runs(sources, storage_uri)
        read = history.load(given, found_files, machines)
        found = changes.report(read)
        files = write_history(found, out_dir)
    except (history.HistoryError, storage.RunLookupError, benchmark_json.RunFileError, ReportError) as exc:
        print(f"pytest-ipu: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"pytest-ipu: {exc.filename or out_dir}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(
        f"wrote {files.html} (history of {len(read.series)} series, {len(found.changes)} change point(s), "
        f"{len(files.images) // 2} figure(s))"
    )
    return 0
