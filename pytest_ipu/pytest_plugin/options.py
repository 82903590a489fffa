"""Every pytest-ipu option: its flag, ini key, environment variable, default and help, and how its
value is resolved.

Precedence is command line > environment (``PYTEST_IPU_*``) > ini file > default. A bad value from
any source is a one-line usage error that names the value, its source and what is allowed. The
values' parsers are ``option_values``' (loaded by the first value a run sets); the resolved
settings are ``settings.Settings``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_ipu.errors import ConfigError
from pytest_ipu.errors import PytestIpuWarning
from pytest_ipu.pytest_plugin.settings import AUTO
from pytest_ipu.pytest_plugin.settings import Settings
from pytest_ipu.run.plan import check_cap


@dataclass(frozen=True)
class OptionSpec:
    """One option: the settings field it fills and every name it goes by (its value's parser is
    ``option_values.PARSERS[field]``, loaded when a value is given).

    A ``multiple`` option may be repeated on the command line and takes one value per line in the
    ini file; its environment variable separates values with ``;``.
    """

    field: str
    flag: str
    metavar: str
    default: str
    help: str
    multiple: bool = False

    @property
    def ini(self) -> str:
        """The ini key: ``--ipu-warmup-rounds`` -> ``ipu_warmup_rounds``."""
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def env(self) -> str:
        """The environment variable: ``--ipu-warmup-rounds`` -> ``PYTEST_IPU_WARMUP_ROUNDS``."""
        return "PYTEST_" + self.ini.upper()


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "targets",
        "--ipu-backend",
        "TARGETS",
        AUTO,
        "backend targets to run benchmarks on, comma-separated, e.g. 'torch:cpu,torch:cuda'; "
        "'auto' runs every default backend present on this machine",
    ),
    OptionSpec(
        "precision",
        "--ipu-precision",
        "PRECISION",
        AUTO,
        "numeric precision of compiled models: fp32, fp16 or bf16; 'auto' lets each backend "
        "pick for its device (fp32 on CPUs, fp16 on accelerators)",
    ),
    OptionSpec(
        "rounds",
        "--ipu-rounds",
        "N",
        AUTO,
        "timed rounds per benchmark; 'auto' runs as many as fit in --ipu-max-time "
        "(at least --ipu-min-rounds)",
    ),
    OptionSpec(
        "warmup_rounds",
        "--ipu-warmup-rounds",
        "N",
        "2",
        "untimed warm-up rounds after the (also untimed) first call",
    ),
    OptionSpec(
        "min_rounds",
        "--ipu-min-rounds",
        "N",
        "5",
        "fewest timed rounds when --ipu-rounds is 'auto'",
    ),
    OptionSpec(
        "max_time_s",
        "--ipu-max-time",
        "SECONDS",
        "2s",
        "time budget for the timed rounds of one benchmark when --ipu-rounds is 'auto'",
    ),
    OptionSpec(
        "time_cap",
        "--ipu-max-time-cap",
        "CAP",
        "3x",
        "hard limit on one benchmark's timed rounds, a multiple of its time budget ('3x') or a "
        "duration ('60s'): rounds still running are ended there and the record is flagged 'capped'",
    ),
    OptionSpec(
        "call_timeout_s",
        "--ipu-call-timeout",
        "SECONDS",
        "10min",
        "longest one call of a benchmark (first call, warm-up or timed round) may take: a call still "
        "running then fails the test, naming the call and round",
    ),
    OptionSpec(
        "rank_timeout_s",
        "--ipu-rank-timeout",
        "SECONDS",
        "5min",
        "under torchrun, longest one rank waits for the others (at a timed window's edges, at the end "
        "of the run): a rank that has not arrived by then ends the run, named",
    ),
    OptionSpec(
        "scaling_baseline",
        "--ipu-scaling-baseline",
        "PATH",
        "none",
        "a pytest-benchmark JSON run of the same training benchmarks on fewer processes: each record "
        "gains its scaling efficiency and speed-up against it (record 'scaling', the terminal's 'eff')",
    ),
    OptionSpec(
        "repeats",
        "--ipu-repeats",
        "K",
        "3",
        "independent repeats of each benchmark, each warmed up anew and given 1/K of the time budget; "
        "gates test the change against the spread between repeats; 1 measures once",
    ),
    OptionSpec(
        "repeat_mode",
        "--ipu-repeat-mode",
        "MODE",
        "interleaved",
        "how repeats are run: 'interleaved' (in this process, round-robin over a test's parameters, "
        "so slow drift spreads over all of them) or 'process' (each earlier repeat in a fresh worker "
        "process, as pyperf does)",
    ),
    OptionSpec(
        "unstable_threshold",
        "--ipu-unstable",
        "SHARE",
        "5%",
        "flag a benchmark 'unstable' when its repeats' throughput varies by more than this "
        "(coefficient of variation), or with one repeat when its rounds' IQR / median does",
    ),
    OptionSpec(
        "contended_threshold",
        "--ipu-contended",
        "SHARE",
        "10%",
        "flag a benchmark 'contended' when other processes used more than this share of the "
        "machine's CPU time during its timed rounds",
    ),
    OptionSpec(
        "torch_threads",
        "--ipu-torch-threads",
        "N",
        AUTO,
        "intra-op threads of the torch backend (torch.set_num_threads), and of numpy's BLAS and OpenMP "
        "where OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_NUM_THREADS are unset; 'auto' keeps the "
        "defaults (one per core), which oversubscribe a machine that other jobs share",
    ),
    OptionSpec(
        "torch_interop_threads",
        "--ipu-torch-interop-threads",
        "N",
        AUTO,
        "inter-op threads of the torch backend (torch.set_num_interop_threads); 'auto' keeps torch's default",
    ),
    OptionSpec(
        "missing_sdk",
        "--ipu-missing-sdk",
        "POLICY",
        "skip",
        "what a benchmark does when its backend, runtime or device is missing: skip or fail",
    ),
    OptionSpec(
        "cache_dir",
        "--ipu-cache-dir",
        "DIR",
        "~/.cache/pytest-ipu",
        "where exported models (ONNX files) are kept between runs, keyed by a hash of the model",
    ),
    OptionSpec(
        "power",
        "--ipu-power",
        "SOURCE",
        AUTO,
        "power source for energy measurement: nvml, rapl, gcipuinfo or off; 'auto' picks the source "
        "that measures each benchmark's device (NVML for CUDA, RAPL for the CPU, gcipuinfo for IPUs)",
    ),
    OptionSpec(
        "power_hz",
        "--ipu-power-hz",
        "HZ",
        AUTO,
        "power sampling rate; 'auto' samples at twice the sensor's update rate, 10 Hz to 1 kHz",
    ),
    OptionSpec(
        "idle_s",
        "--ipu-idle",
        "SECONDS",
        "5s",
        "how long to measure idle power (once per power source per run) before the first window; 0 skips it",
    ),
    OptionSpec(
        "gates",
        "--ipu-gate",
        "EXPR",
        "none",
        "a performance gate, e.g. 'throughput:-5%' (relative to the baseline) or 'latency.p99<2ms' "
        "(absolute); repeatable; a failing gate makes the exit code 1",
        multiple=True,
    ),
    OptionSpec(
        "baselines",
        "--ipu-baseline",
        "PATH",
        "none",
        "the pytest-benchmark JSON run that relative gates compare against (else --benchmark-compare's); "
        "repeatable or a glob: with 3 or more runs the last is the baseline and all of them measure "
        "how much whole runs drift here",
        multiple=True,
    ),
    OptionSpec(
        "baseline_missing",
        "--ipu-baseline-missing",
        "POLICY",
        "warn",
        "a benchmark with gates but no counterpart in the baseline: warn, or fail the run",
    ),
    OptionSpec(
        "inconclusive",
        "--ipu-inconclusive",
        "POLICY",
        "fail",
        "a gate whose evidence cannot tell (INCONCLUSIVE): 'fail' its benchmark's test and the run, "
        "'warn' (a line in the summary, the run passes) or 'pass' (counted as passed, still listed)",
    ),
    OptionSpec(
        "drift",
        "--ipu-drift",
        "SHARE",
        "5%",
        "run-to-run drift allowed for when a gate's only noise estimate is the spread between one "
        "run's repeats (fewer than 3 baseline runs): the verdict's interval is widened by it",
    ),
    OptionSpec(
        "job_alpha",
        "--ipu-job-alpha",
        "SHARE",
        "1%",
        "the job's level for FAIL: unchanged code FAILs some gate of the run at most this often (Holm's "
        "step-down over every gate check); a gate's FAIL beyond it only is INCONCLUSIVE",
    ),
)


#: What pytest reads for a multiple option's ini key that the ini file does not have: not ``[]``,
#: which is the key given without lines (``ipu_gate =``), an error for a gate source.
INI_ABSENT: tuple[str, ...] = ()


def add_options(parser: pytest.Parser) -> None:
    """Register the ``ipu`` option group and the matching ini keys."""
    group = parser.getgroup("ipu", "pytest-ipu: benchmark models on IPUs, GPUs and CPUs")
    for spec in OPTIONS:
        group.addoption(
            spec.flag,
            dest=spec.ini,
            metavar=spec.metavar,
            default=None,
            action="append" if spec.multiple else "store",
            # argparse formats help with %: a literal one (as in 'throughput:-5%') must be doubled.
            help=f"{spec.help} (default: {spec.default}; env {spec.env}; ini {spec.ini})".replace("%", "%%"),
        )
        if spec.multiple:
            parser.addini(spec.ini, f"{spec.help} (one per line)", type="linelist", default=INI_ABSENT)
        else:
            parser.addini(spec.ini, f"{spec.help} (default: {spec.default})", default=None)
    # Not a setting (no ini key, no variable): how pytest-ipu ab runs a side (``serve_channel``).
    group.addoption(
        "--ipu-serve",
        dest="ipu_serve",
        metavar="R,W",
        default=None,
        help="for pytest-ipu ab: after collecting, run the tests in rounds requested on pipe R, "
        "answering on pipe W (one process per side for a whole A/B job)",
    )


def resolve_settings(
    cli: Mapping[str, object | None],
    ini: Mapping[str, object | None],
    environ: Mapping[str, str],
    ini_path: str | None = None,
) -> Settings:
    """Combine the sources (CLI > environment > ini > default) into ``Settings``.

    ``cli`` and ``ini`` map ini-style keys (``ipu_rounds``) to raw values or ``None`` when unset.
    Raises ``ConfigError`` naming the value, its source and what is allowed.
    """
    values: dict[str, Any] = {}
    for spec in OPTIONS:
        raw, source = _pick(spec, cli, ini, environ, ini_path)
        if source == DEFAULT_SOURCE:
            # Settings' own defaults are the parsed defaults (tests/unit/test_options.py checks):
            # a run that sets nothing loads no parser.
            continue
        from pytest_ipu.pytest_plugin import option_values

        try:
            values[spec.field] = option_values.parser_for(spec.field)(raw)
        except ValueError as exc:
            shown = "; ".join(map(str, raw)) if isinstance(raw, (list, tuple)) else raw
            raise ConfigError(f"invalid value {shown!r} for {spec.flag} from {source}: {exc}") from None
    settings = Settings(**values)
    # A fixed cap below the budget is refused here, before any test runs (run.plan owns the rule).
    check_cap(settings.max_time_s, settings.time_cap)
    return settings


#: Where a value that no source sets comes from, in messages.
DEFAULT_SOURCE = "the default"


def _pick(
    spec: OptionSpec,
    cli: Mapping[str, object | None],
    ini: Mapping[str, object | None],
    environ: Mapping[str, str],
    ini_path: str | None,
) -> tuple[object, str]:
    if cli.get(spec.ini) is not None:
        return cli[spec.ini], "the command line"
    # An empty variable counts as unset, like an empty ini value (`PYTEST_IPU_ROUNDS= pytest`); but
    # an empty gate or baseline source would switch the gates off in silence, so its parser refuses it.
    if environ.get(spec.env, "").strip() or (spec.multiple and spec.env in environ):
        return environ[spec.env], f"environment variable {spec.env}"
    ini_value = ini.get(spec.ini)
    # A multiple option's key absent from the ini file reads as ``INI_ABSENT``; given without lines, as [].
    if ini_value not in (None, "", [], INI_ABSENT) or (spec.multiple and ini_value == []):
        return ini_value, f"ini key {spec.ini} in {ini_path or 'the ini file'}"
    return spec.default, DEFAULT_SOURCE


def _config_sources(
    config: pytest.Config,
) -> tuple[dict[str, object | None], dict[str, object | None], str | None]:
    cli = {spec.ini: config.getoption(spec.ini) for spec in OPTIONS}
    ini = {spec.ini: config.getini(spec.ini) for spec in OPTIONS}
    return cli, ini, str(config.inipath) if config.inipath else None


def settings_from_config(config: pytest.Config) -> Settings:
    """Resolve settings for a pytest run, as a ``pytest.UsageError`` on bad input."""
    cli, ini, ini_path = _config_sources(config)
    try:
        return resolve_settings(cli, ini, os.environ, ini_path)
    except ConfigError as exc:
        raise pytest.UsageError(f"pytest-ipu: {exc}") from None


def value_and_source(config: pytest.Config, field: str) -> tuple[object, str]:
    """The raw value of the option that fills settings field ``field`` and where it came from
    (``the command line``, ``environment variable PYTEST_IPU_BACKEND``, ...), for messages about a
    value that parsed but is refused later (an unknown backend is known only once conftests load)."""
    spec = next(spec for spec in OPTIONS if spec.field == field)
    cli, ini, ini_path = _config_sources(config)
    raw, source = _pick(spec, cli, ini, os.environ, ini_path)
    shown = "; ".join(map(str, raw)) if isinstance(raw, (list, tuple)) else raw
    return shown, source


#: Set to ``1`` by ``pytest-ipu ab`` for every run of a side: ab gates the runs on their pairs, so a
#: run checks no gate of its own and writes each benchmark's own gates (its marker's) into its
#: document for ab to read (``benchmark_json.OWN_GATES_KEY``). A variable, not an option: a side
#: may run a pytest without pytest-ipu, which would refuse an option it does not know.
AB_SIDE_VARIABLE = "PYTEST_IPU_AB_SIDE"

#: ``PYTEST_IPU_*`` variables that are not options: the repeat worker's marker
#: (``repeats.WORKER_ENV``, set for the worker processes of --ipu-repeat-mode=process), ab's mark
#: of its runs (``AB_SIDE_VARIABLE``) and the gate-accuracy benchmark's strict switch
#: (``benchmarks/test_gate_accuracy.py``). The first and last spelled out, not imported: ``repeats``
#: is above this module, and the benchmarks are not part of the package.
NON_OPTION_VARIABLES = frozenset(
    {"PYTEST_IPU_REPEAT_WORKER", AB_SIDE_VARIABLE, "PYTEST_IPU_GATE_ACCURACY_STRICT"}
)


def ab_side(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this run is one side of ``pytest-ipu ab`` (``AB_SIDE_VARIABLE``)."""
    return environ.get(AB_SIDE_VARIABLE, "").strip() == "1"


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One message per ``PYTEST_IPU_*`` variable that no option reads, naming the closest option's.

    A misspelt variable (``PYTEST_IPU_ROUND=3``) would otherwise be ignored in silence.
    """
    known = [spec.env for spec in OPTIONS]
    messages = []
    for name in sorted(environ):
        if not name.startswith("PYTEST_IPU_") or name in known or name in NON_OPTION_VARIABLES:
            continue
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; the options' variables are {', '.join(known)}"
        messages.append(f"pytest-ipu: unknown environment variable {name} is ignored{hint}")
    return messages


#: The key of the line pytest-ipu adds to pytest's command-line error (``Parser.extra_info``, whose
#: lines pytest prints sorted by key under the error: this one sorts after pytest's own).
FLAG_HINT_KEY = "tip"


def misspelt_flags(args: Sequence[str]) -> str | None:
    """One line naming the nearest pytest-ipu option of each argument that looks like a misspelt one
    (``--ipu-backnd``: ``did you mean --ipu-backend (for --ipu-backnd)?``); ``None`` when there is none.

    pytest refuses such an argument with its bare "unrecognized arguments": this line goes under
    that error. An ``--ipu...`` argument no pytest-ipu option has may be another plugin's or a
    conftest's, so it is only a guess, shown only when pytest does refuse the command line.
    """
    known = [spec.flag for spec in OPTIONS]
    hints = []
    for arg in args:
        name = arg.split("=", 1)[0]
        if not name.lower().startswith("--ipu") or name in known:
            continue
        close = difflib.get_close_matches(name.lower().replace("_", "-"), known, n=1)
        if close:
            hints.append(f"{close[0]} (for {name})")
    return f"did you mean {'; '.join(dict.fromkeys(hints))}?" if hints else None


def warn_unknown_variables(config: pytest.Config, environ: Mapping[str, str] = os.environ) -> None:
    """Warn at configure time about each unknown ``PYTEST_IPU_*``; where warnings are errors
    (``-W error``, ``filterwarnings = error``) that is a one-line usage error, not a traceback."""
    for message in unknown_variables(environ):
        try:
            config.issue_config_time_warning(PytestIpuWarning(message), stacklevel=2)
        except PytestIpuWarning:
            raise pytest.UsageError(message) from None  # the message starts "pytest-ipu: "
