"""``--benchmark-json`` before pytest-benchmark 5.3: the file is not emptied while the command line
is parsed (``bench_seam.defer_json_open``), whichever plugin registers first. A subprocess run each:
the plugins are loaded by ``-p`` in the order under test.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "plugins",
    [
        ("pytest_benchmark.plugin", "pytest_ipu.pytest_plugin.plugin"),
        ("pytest_ipu.pytest_plugin.plugin", "pytest_benchmark.plugin"),
    ],
    ids=["benchmark-first", "ipu-first"],
)
def test_the_previous_json_file_is_untouched_until_the_run_writes_it(
    pytester: pytest.Pytester, monkeypatch, plugins: tuple[str, str]
) -> None:
    """pytest-benchmark before 5.3 empties it while parsing the command line, so a run that failed
    to finish would lose it; the deferral keeps it whichever plugin registers first (entry points
    load in no set order)."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    (pytester.path / "out.json").write_text('{"previous": true}', encoding="utf-8")
    pytester.makepyfile(
        """
        from pathlib import Path

        def test_the_file_is_as_it_was(benchmark):
            benchmark(lambda: None)
            assert Path("out.json").read_text(encoding="utf-8") == '{"previous": true}'
        """
    )
    load = [arg for plugin in plugins for arg in ("-p", plugin)]
    # pytest-benchmark's budget shortened (1 s by default): what is checked is the file, not the timing.
    options = ("-p", "no:cacheprovider", "--benchmark-max-time=0.01", "--benchmark-json=out.json")
    result = pytester.runpytest_subprocess(*load, *options)
    result.assert_outcomes(passed=1)
    assert '"benchmarks"' in (pytester.path / "out.json").read_text(encoding="utf-8")
    assert [p.name for p in pytester.path.iterdir() if p.name.startswith(".out.json")] == []


def test_the_written_line_names_the_final_file_not_the_temporary(pytester: pytest.Pytester) -> None:
    """The document is written to a temporary file and renamed onto ``--benchmark-json``'s path;
    pytest-benchmark's "Wrote benchmark data in: ..." must name that path, the file the user gets."""
    pytester.makepyfile(
        """
        def test_fast(benchmark):
            benchmark(lambda: None)
        """
    )
    (pytester.path / "runs").mkdir()
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--benchmark-max-time=0.01", "--benchmark-json=runs/out.json"
    )
    result.assert_outcomes(passed=1)
    written = [line for line in result.outlines + result.errlines if "Wrote benchmark data in" in line]
    assert len(written) == 1
    assert written[0].rstrip().endswith("runs/out.json"), written
    assert ".tmp" not in written[0]
    assert (pytester.path / "runs" / "out.json").is_file()
