"""What ``pytest --help``, ``--fixtures`` and ``--markers`` show of pytest-ipu (in-process pytester runs)."""

from __future__ import annotations

import re

import pytest

from pytest_ipu.backports import remove_prefix
from pytest_ipu.pytest_plugin.marker_keywords import KEYWORDS
from pytest_ipu.pytest_plugin.options import OPTIONS
from pytest_ipu.pytest_plugin.options import OptionSpec

GROUP_TITLE = "pytest-ipu: benchmark models on IPUs, GPUs and CPUs:"


def _block(lines: list[str], title: str) -> list[str]:
    """The lines after ``title`` up to the next blank line (one argparse group or ini section)."""
    start = lines.index(title) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def _words(lines: list[str]) -> str:
    """The block with argparse's wrapping undone: one space between words."""
    return " ".join(" ".join(lines).split())


@pytest.fixture
def help_lines(pytester: pytest.Pytester) -> list[str]:
    result = pytester.runpytest("--help")
    assert result.ret == pytest.ExitCode.OK
    return result.outlines


def test_help_has_an_ipu_group_with_every_option(help_lines: list[str]) -> None:
    assert GROUP_TITLE in help_lines
    group = _block(help_lines, GROUP_TITLE)
    flags = [m.group(1) for line in group if (m := re.match(r"^\s+(--ipu-[a-z-]+)=", line))]
    # --ipu-serve is not a setting (pytest-ipu ab passes it to the sides it serves): it follows them.
    settings = [spec.flag for spec in OPTIONS]
    assert flags == [*settings, "--ipu-serve"], "every option, in OPTIONS order, inside the group"


@pytest.mark.parametrize("spec", OPTIONS, ids=lambda s: s.flag)
def test_help_names_each_options_metavar_default_env_var_and_ini_key(
    help_lines: list[str], spec: OptionSpec
) -> None:
    group = _block(help_lines, GROUP_TITLE)
    starts = [i for i, line in enumerate(group) if line.startswith("  --")]
    first = next(i for i in starts if group[i].startswith(f"  {spec.flag}={spec.metavar}"))
    last = next((i for i in starts if i > first), len(group))
    own = _words(group[first:last])  # this option's entry, unwrapped
    assert own.endswith(f"(default: {spec.default}; env {spec.env}; ini {spec.ini})")


def test_help_lists_every_ini_key(help_lines: list[str]) -> None:
    # Repeatable options take one value per line in the ini file.
    ini_keys = {
        m.group(1) for line in help_lines if (m := re.match(r"^  (ipu_[a-z_]+) \((string|linelist)\):", line))
    }
    assert ini_keys == {spec.ini for spec in OPTIONS}


def test_help_does_not_probe_backends(pytester: pytest.Pytester) -> None:
    """A target that exists nowhere is only a well-formed value until a test needs its backend."""
    result = pytester.runpytest("--help", "--ipu-backend=nosuch:dev7")
    assert result.ret == pytest.ExitCode.OK
    assert any(line.startswith("  --ipu-backend=TARGETS") for line in result.outlines)


def test_fixtures_shows_the_six_fixtures_with_their_docstrings(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("--fixtures")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "ipu_benchmark -- *pytest_ipu*fixtures*.py:*",
            "    Measure a compiled model (or any callable) the way every pytest-ipu number is measured.",
        ],
        consecutive=True,
    )
    result.stdout.fnmatch_lines(
        [
            "ipu_settings -- *pytest_ipu*fixtures*.py:*",
            "    The pytest-ipu settings for this test: the run's options, overridden by its ``ipu`` marker.",
        ],
        consecutive=True,
    )
    result.stdout.fnmatch_lines(
        [
            "ipu_backend -- *pytest_ipu*fixtures*.py:*",
            "    The backend this test runs on, ready to compile models.",
        ],
        consecutive=True,
    )
    result.stdout.fnmatch_lines(
        [
            "ipu_compile -- *pytest_ipu*fixtures*.py:*",
            "    Compile a model for this test's backend, once per run for each model and set of options.",
        ],
        consecutive=True,
    )
    result.stdout.fnmatch_lines(
        [
            "ipu_placement -- *pytest_ipu*fixtures*.py:*",
            "    Where this test's model goes, for benchmarks that build their own sessions.",
        ],
        consecutive=True,
    )
    result.stdout.fnmatch_lines(
        [
            "ipu_power -- *pytest_ipu*fixtures*.py:*",
            "    Measure the energy of any block of code, the same way ``ipu_benchmark`` measures *",
        ],
        consecutive=True,
    )


def test_fixtures_verbose_shows_the_full_docstrings(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("--fixtures", "-v")
    assert result.ret == pytest.ExitCode.OK
    text = _words(result.outlines)
    assert "the fixture returns a ``NotTimed`` record" in text
    assert "skips the test with the reason, or fails it under ``--ipu-missing-sdk=fail``" in text
    assert "its ``compile_cached`` is true" in text


def test_markers_shows_the_ipu_marker_with_every_keyword(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    assert result.ret == pytest.ExitCode.OK
    line = next((x for x in result.outlines if x.startswith("@pytest.mark.ipu(")), None)
    assert line is not None, "no @pytest.mark.ipu line in --markers"
    signature, _, description = line.partition("): ")
    assert [k.split("=")[0] for k in remove_prefix(signature, "@pytest.mark.ipu(").split(", ")] == list(
        KEYWORDS
    )
    assert "overriding the command line" in description


def test_the_ipu_marker_is_registered_for_strict_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.ipu(rounds=3)
        def test_marked():
            pass
        """
    )
    result = pytester.runpytest("--strict-markers")
    result.assert_outcomes(passed=1)
