"""Every pytest-ipu option: its flag, ini key, environment variable, default, parser and help.

Precedence is command line > environment (``PYTEST_IPU_*``) > ini file > default. A bad value from
any source is a one-line usage error that names the value, its source and what is allowed.
"""

from __future__ import annotations

import difflib
import glob
import os
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest

from pytest_ipu.backports import remove_suffix
from pytest_ipu.errors import ConfigError
from pytest_ipu.errors import PytestIpuWarning
from pytest_ipu.run.plan import MAX_ROUNDS
from pytest_ipu.run.plan import MAX_WARMUP_ROUNDS
from pytest_ipu.run.plan import TimeCap
from pytest_ipu.run.plan import check_cap

if TYPE_CHECKING:
    # Every pytest run parses the options: the parsers of targets, gates and shares load when a
    # value needs them (benchmarks/test_startup_cost.py).
    from pytest_ipu.backends.target import Target
    from pytest_ipu.results.gates import Gate

PRECISIONS = ("fp32", "fp16", "bf16")
MISSING_SDK_POLICIES = ("skip", "fail")
REPEAT_MODES = ("interleaved", "process")
AUTO = "auto"
#: Upper limits of counts and durations: past them a value is a typo, not a plan.
MAX_REPEATS = 100
MAX_THREADS = 1024
#: The ``auto`` plan's floor may not pass its own cap: equal to ``measure.timing.MAX_AUTO_ROUNDS``
#: (not imported: the plugin's start-up loads no measurement code; tests/unit/test_options.py checks).
MAX_MIN_ROUNDS = 100_000
#: Longest duration of any option (time budget, cap, idle baseline, per-call timeout): a day.
MAX_DURATION_S = 86_400.0
#: Power sampling rates: below 0.1 Hz a benchmark gets no sample; above 10 kHz no sensor updates.
MIN_POWER_HZ = 0.1
MAX_POWER_HZ = 10_000.0


@dataclass(frozen=True)
class Settings:
    """The resolved pytest-ipu settings of one run.

    ``targets`` is empty for ``auto`` (every default backend present on this machine);
    ``rounds`` is ``None`` for ``auto`` (as many rounds as fit in ``max_time_s``, at least
    ``min_rounds``).
    """

    targets: tuple[Target, ...] = ()
    precision: str = AUTO
    rounds: int | None = None
    warmup_rounds: int = 2
    min_rounds: int = 5
    max_time_s: float = 2.0
    missing_sdk: str = "skip"
    cache_dir: Path = field(default_factory=lambda: Path("~/.cache/pytest-ipu").expanduser())
    power: str = AUTO
    power_hz: float | None = None
    idle_s: float = 5.0
    gates: tuple[Gate, ...] = ()
    baselines: tuple[Path, ...] = ()
    baseline_missing: str = "warn"
    inconclusive: str = "fail"
    drift: float = 0.05
    repeats: int = 3
    repeat_mode: str = "interleaved"
    time_cap: TimeCap = field(default_factory=TimeCap)
    unstable_threshold: float = 0.05
    contended_threshold: float = 0.10
    torch_threads: int | None = None
    torch_interop_threads: int | None = None
    call_timeout_s: float = 600.0
    rank_timeout_s: float = 300.0
    scaling_baseline: Path | None = None

    def as_json(self) -> dict[str, Any]:
        """Plain-JSON form, written to the top level of the benchmark JSON."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["targets"] = [str(t) for t in self.targets] or AUTO
        out["rounds"] = AUTO if self.rounds is None else self.rounds
        out["cache_dir"] = str(self.cache_dir)
        out["scaling_baseline"] = None if self.scaling_baseline is None else str(self.scaling_baseline)
        out["power_hz"] = AUTO if self.power_hz is None else self.power_hz
        out["gates"] = [str(g) for g in self.gates]
        out["baselines"] = [str(b) for b in self.baselines]
        out["time_cap"] = str(self.time_cap)
        out["torch_threads"] = AUTO if self.torch_threads is None else self.torch_threads
        out["torch_interop_threads"] = (
            AUTO if self.torch_interop_threads is None else self.torch_interop_threads
        )
        return out


def _int_at_least(minimum: int, maximum: int | None = None) -> Callable[[object], int]:
    def parse(value: object) -> int:
        try:
            number = int(str(value).strip()) if not isinstance(value, bool) else None
        except ValueError:
            number = None
        if number is None or number < minimum or (maximum is not None and number > maximum):
            if maximum is None:
                raise ValueError(f"expected an integer >= {minimum}")
            raise ValueError(f"expected an integer from {minimum} to {maximum}")
        return number

    return parse


def parse_threads(value: object) -> int | None:
    """``auto`` (``None``: the library's own default) or a thread count."""
    if str(value).strip().lower() == AUTO:
        return None
    try:
        return _int_at_least(1, MAX_THREADS)(value)
    except ValueError:
        raise ValueError(f"expected 'auto' or an integer from 1 to {MAX_THREADS}") from None


def parse_time_cap(value: object) -> TimeCap:
    """``3x`` (a multiple of the time budget, at least 1) or a duration (``60s``)."""
    text = str(value).strip().lower()
    if text.endswith("x"):
        try:
            factor = float(text[:-1])
        except ValueError:
            factor = -1.0
        if not 1.0 <= factor <= 1000.0:
            raise ValueError("expected a multiple of the time budget from '1x' to '1000x', or a duration")
        return TimeCap(factor=factor)
    try:
        return TimeCap(factor=None, seconds=parse_seconds(value))
    except ValueError:
        raise ValueError(
            "expected a multiple of the time budget such as '3x', or a duration such as '60s'"
        ) from None


def parse_rounds(value: object) -> int | None:
    """``auto`` (``None``) or a positive round count."""
    if str(value).strip().lower() == AUTO:
        return None
    try:
        return _int_at_least(1, MAX_ROUNDS)(value)
    except ValueError:
        raise ValueError(f"expected 'auto' or an integer from 1 to {MAX_ROUNDS}") from None


def parse_seconds(value: object) -> float:
    """A positive duration of at most a day: ``2``, ``2s``, ``0.5`` or ``500ms``."""
    text = str(value).strip().lower()
    scale = 1.0
    if text.endswith("ms"):
        text, scale = text[:-2], 1e-3
    elif text.endswith("s"):
        text = text[:-1]
    try:
        seconds = float(text) * scale
    except ValueError:
        seconds = -1.0
    # `not 0 < x <= max` is also true for NaN, which no comparison admits.
    if not 0 < seconds <= MAX_DURATION_S:
        raise ValueError(
            f"expected a positive duration such as '2', '2s' or '500ms', at most a day ({MAX_DURATION_S:g}s)"
        )
    return seconds


#: Longest per-call timeout accepted: a day, as for every duration.
MAX_CALL_TIMEOUT_S = MAX_DURATION_S


def parse_timeout(value: object) -> float:
    """A per-call timeout: a duration (``600``, ``600s``, ``500ms``) or minutes (``10min``), at most a day."""
    text = str(value).strip().lower()
    try:
        seconds = float(text[:-3]) * 60.0 if text.endswith("min") else parse_seconds(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_CALL_TIMEOUT_S:
        raise ValueError("expected a duration such as '600s', '10min' or '500ms', at most a day (86400s)")
    return seconds


def parse_file(value: object) -> Path | None:
    """A file path (``~`` expanded), or ``none``."""
    text = str(value).strip()
    if not text:
        raise ValueError("expected a file path or 'none'")
    return None if text.lower() == "none" else Path(text).expanduser()


def parse_hz(value: object) -> float | None:
    """``auto`` (``None``: twice the sensor's rate, 10 Hz to 1 kHz) or a rate from 0.1 Hz to 10 kHz."""
    text = str(value).strip().lower()
    if text == AUTO:
        return None
    try:
        hz = float(remove_suffix(text, "hz"))
    except ValueError:
        hz = -1.0
    if not MIN_POWER_HZ <= hz <= MAX_POWER_HZ:
        raise ValueError(f"expected 'auto' or a rate in Hz from {MIN_POWER_HZ:g} to {MAX_POWER_HZ:g}")
    return hz


def parse_idle(value: object) -> float:
    """A duration for the idle baseline, at most a day; ``0`` turns it off."""
    if str(value).strip().lower() in ("0", "0s", "off"):
        return 0.0
    return parse_seconds(value)


def parse_dir(value: object) -> Path:
    """A directory path; ``~`` expands to the home directory."""
    text = str(value).strip()
    if not text:
        raise ValueError("expected a directory path")
    return Path(text).expanduser()


def _choice(choices: tuple[str, ...]) -> Callable[[object], str]:
    def parse(value: object) -> str:
        text = str(value).strip().lower()
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return text

    return parse


def parse_targets(value: object) -> tuple[Target, ...]:
    """``auto`` (empty tuple) or a comma-separated list of targets such as ``torch:cpu,torch:cuda``."""
    text = str(value).strip()
    if text.lower() == AUTO:
        return ()
    parts = [p for p in (s.strip() for s in text.split(",")) if p]
    if not parts:
        raise ValueError("expected 'auto' or targets such as 'torch:cpu,torch:cuda'")
    from pytest_ipu.backends.target import parse_target

    targets = tuple(parse_target(p) for p in parts)
    return tuple(dict.fromkeys(targets))  # de-duplicated, order kept


def _listed(value: object, expected: str) -> list[str]:
    """The texts of a ``multiple`` option: a list (repeated flag, ini lines) or one ``;``-separated string.

    An empty item of a list is an error: ``--ipu-gate=`` is a flag given without its value (a shell
    variable that expanded to nothing, say), as ``--ipu-rounds=`` is; ``;;`` in a string is a separator.
    """
    if not isinstance(value, (list, tuple)):
        texts = str(value).split(";")
        # Separators and nothing else (`PYTEST_IPU_GATE=';;'`) would silently mean "none".
        if len(texts) > 1 and not any(t.strip() for t in texts):
            raise ValueError(f"{expected}, got only ';' separators; write 'none' for none")
        return texts
    texts = [str(v) for v in value]
    if any(not t.strip() for t in texts):
        raise ValueError(f"{expected}, got an empty value")
    return texts


def parse_gates(value: object) -> tuple[Gate, ...]:
    """Gate expressions (``throughput:-5%``, ``latency.p99<2ms``): a list (repeated flag, ini lines)
    or one string with ``;`` between expressions (environment); ``none`` for no gates."""
    texts = _listed(value, "expected a gate expression such as 'throughput:-5%' or 'none'")
    texts = [t.strip() for t in texts if t.strip() and t.strip().lower() != "none"]
    if not texts:
        return ()
    from pytest_ipu.results import gates

    try:
        return tuple(gates.parse(t) for t in texts)
    except gates.GateError as exc:
        raise ValueError(str(exc)) from None


def parse_share(value: object) -> float:
    """A share such as ``5%`` or ``0.05``, within (0, 1] (``measure.units`` owns the rule)."""
    from pytest_ipu.measure import units

    return units.parse_share(value)


def parse_baselines(value: object) -> tuple[Path, ...]:
    """pytest-benchmark JSON files to gate against (a list, or ``;`` between them), each a path or a
    glob pattern (``.benchmarks/*/*.json``, expanded in sorted order); ``none`` for none."""
    texts = _listed(value, "expected a pytest-benchmark JSON path, a glob or 'none'")
    paths: list[Path] = []
    for text in (t.strip() for t in texts):
        if not text or text.lower() == "none":
            continue
        expanded = str(Path(text).expanduser())
        if any(ch in expanded for ch in "*?["):
            # glob.glob, not Path.glob: patterns may be absolute (/ci/baselines/*.json).
            matches = sorted(glob.glob(expanded))  # noqa: PTH207
            if not matches:
                raise ValueError(f"no file matches {text!r}")
            paths.extend(Path(m) for m in matches)
        else:
            paths.append(Path(expanded))
    return tuple(dict.fromkeys(paths))


@dataclass(frozen=True)
class OptionSpec:
    """One option: the settings field it fills and every name it goes by.

    A ``multiple`` option may be repeated on the command line and takes one value per line in the
    ini file; its environment variable separates values with ``;``.
    """

    field: str
    flag: str
    metavar: str
    default: str
    parse: Callable[[object], Any]
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
        parse_targets,
        "backend targets to run benchmarks on, comma-separated, e.g. 'torch:cpu,torch:cuda'; "
        "'auto' runs every default backend present on this machine",
    ),
    OptionSpec(
        "precision",
        "--ipu-precision",
        "PRECISION",
        AUTO,
        _choice((AUTO, *PRECISIONS)),
        "numeric precision of compiled models: fp32, fp16 or bf16; 'auto' lets each backend "
        "pick for its device (fp32 on CPUs, fp16 on accelerators)",
    ),
    OptionSpec(
        "rounds",
        "--ipu-rounds",
        "N",
        AUTO,
        parse_rounds,
        "timed rounds per benchmark; 'auto' runs as many as fit in --ipu-max-time "
        "(at least --ipu-min-rounds)",
    ),
    OptionSpec(
        "warmup_rounds",
        "--ipu-warmup-rounds",
        "N",
        "2",
        _int_at_least(0, MAX_WARMUP_ROUNDS),
        "untimed warm-up rounds after the (also untimed) first call",
    ),
    OptionSpec(
        "min_rounds",
        "--ipu-min-rounds",
        "N",
        "5",
        _int_at_least(1, MAX_MIN_ROUNDS),
        "fewest timed rounds when --ipu-rounds is 'auto'",
    ),
    OptionSpec(
        "max_time_s",
        "--ipu-max-time",
        "SECONDS",
        "2s",
        parse_seconds,
        "time budget for the timed rounds of one benchmark when --ipu-rounds is 'auto'",
    ),
    OptionSpec(
        "time_cap",
        "--ipu-max-time-cap",
        "CAP",
        "3x",
        parse_time_cap,
        "hard limit on one benchmark's timed rounds, a multiple of its time budget ('3x') or a "
        "duration ('60s'): rounds still running are ended there and the record is flagged 'capped'",
    ),
    OptionSpec(
        "call_timeout_s",
        "--ipu-call-timeout",
        "SECONDS",
        "10min",
        parse_timeout,
        "longest one call of a benchmark (first call, warm-up or timed round) may take: a call still "
        "running then fails the test, naming the call and round",
    ),
    OptionSpec(
        "rank_timeout_s",
        "--ipu-rank-timeout",
        "SECONDS",
        "5min",
        parse_timeout,
        "under torchrun, longest one rank waits for the others (at a timed window's edges, at the end "
        "of the run): a rank that has not arrived by then ends the run, named",
    ),
    OptionSpec(
        "scaling_baseline",
        "--ipu-scaling-baseline",
        "PATH",
        "none",
        parse_file,
        "a pytest-benchmark JSON run of the same training benchmarks on fewer processes: each record "
        "gains its scaling efficiency and speed-up against it (record 'scaling', the terminal's 'eff')",
    ),
    OptionSpec(
        "repeats",
        "--ipu-repeats",
        "K",
        "3",
        _int_at_least(1, MAX_REPEATS),
        "independent repeats of each benchmark, each warmed up anew and given 1/K of the time budget; "
        "gates test the change against the spread between repeats; 1 measures once",
    ),
    OptionSpec(
        "repeat_mode",
        "--ipu-repeat-mode",
        "MODE",
        "interleaved",
        _choice(REPEAT_MODES),
        "how repeats are run: 'interleaved' (in this process, round-robin over a test's parameters, "
        "so slow drift spreads over all of them) or 'process' (each earlier repeat in a fresh worker "
        "process, as pyperf does)",
    ),
    OptionSpec(
        "unstable_threshold",
        "--ipu-unstable",
        "SHARE",
        "5%",
        parse_share,
        "flag a benchmark 'unstable' when its repeats' throughput varies by more than this "
        "(coefficient of variation), or with one repeat when its rounds' IQR / median does",
    ),
    OptionSpec(
        "contended_threshold",
        "--ipu-contended",
        "SHARE",
        "10%",
        parse_share,
        "flag a benchmark 'contended' when other processes used more than this share of the "
        "machine's CPU time during its timed rounds",
    ),
    OptionSpec(
        "torch_threads",
        "--ipu-torch-threads",
        "N",
        AUTO,
        parse_threads,
        "intra-op threads of the torch backend (torch.set_num_threads); 'auto' keeps torch's default "
        "(one per core), which oversubscribes a machine that other jobs share",
    ),
    OptionSpec(
        "torch_interop_threads",
        "--ipu-torch-interop-threads",
        "N",
        AUTO,
        parse_threads,
        "inter-op threads of the torch backend (torch.set_num_interop_threads); 'auto' keeps torch's default",
    ),
    OptionSpec(
        "missing_sdk",
        "--ipu-missing-sdk",
        "POLICY",
        "skip",
        _choice(MISSING_SDK_POLICIES),
        "what a benchmark does when its backend, runtime or device is missing: skip or fail",
    ),
    OptionSpec(
        "cache_dir",
        "--ipu-cache-dir",
        "DIR",
        "~/.cache/pytest-ipu",
        parse_dir,
        "where exported models (ONNX files) are kept between runs, keyed by a hash of the model",
    ),
    OptionSpec(
        "power",
        "--ipu-power",
        "SOURCE",
        AUTO,
        _choice((AUTO, "off", "nvml", "rapl", "gcipuinfo")),
        "power source for energy measurement: nvml, rapl, gcipuinfo or off; 'auto' picks the source "
        "that measures each benchmark's device (NVML for CUDA, RAPL for the CPU, gcipuinfo for IPUs)",
    ),
    OptionSpec(
        "power_hz",
        "--ipu-power-hz",
        "HZ",
        AUTO,
        parse_hz,
        "power sampling rate; 'auto' samples at twice the sensor's update rate, 10 Hz to 1 kHz",
    ),
    OptionSpec(
        "idle_s",
        "--ipu-idle",
        "SECONDS",
        "5s",
        parse_idle,
        "how long to measure idle power (once per power source per run) before the first window; 0 skips it",
    ),
    OptionSpec(
        "gates",
        "--ipu-gate",
        "EXPR",
        "none",
        parse_gates,
        "a performance gate, e.g. 'throughput:-5%' (relative to the baseline) or 'latency.p99<2ms' "
        "(absolute); repeatable; a failing gate makes the exit code 1",
        multiple=True,
    ),
    OptionSpec(
        "baselines",
        "--ipu-baseline",
        "PATH",
        "none",
        parse_baselines,
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
        _choice(("warn", "fail")),
        "a benchmark with gates but no counterpart in the baseline: warn, or fail the run",
    ),
    OptionSpec(
        "inconclusive",
        "--ipu-inconclusive",
        "POLICY",
        "fail",
        _choice(("fail", "warn", "pass")),
        "a gate whose evidence cannot tell (INCONCLUSIVE): 'fail' its benchmark's test and the run, "
        "'warn' (a line in the summary, the run passes) or 'pass' (counted as passed, still listed)",
    ),
    OptionSpec(
        "drift",
        "--ipu-drift",
        "SHARE",
        "5%",
        parse_share,
        "run-to-run drift allowed for when a gate's only noise estimate is the spread between one "
        "run's repeats (fewer than 3 baseline runs): the verdict's interval is widened by it",
    ),
)


def parser_for(field: str) -> Callable[[object], Any]:
    """The value parser of the option that fills settings field ``field``."""
    return next(spec.parse for spec in OPTIONS if spec.field == field)


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
            parser.addini(spec.ini, f"{spec.help} (one per line)", type="linelist", default=[])
        else:
            parser.addini(spec.ini, f"{spec.help} (default: {spec.default})", default=None)


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
        try:
            values[spec.field] = spec.parse(raw)
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
    # An empty variable counts as unset, like an empty ini value (`PYTEST_IPU_ROUNDS= pytest`).
    if environ.get(spec.env, "").strip():
        return environ[spec.env], f"environment variable {spec.env}"
    ini_value = ini.get(spec.ini)
    if ini_value not in (None, "", []):
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


#: ``PYTEST_IPU_*`` variables that are not options: the repeat worker's marker
#: (``repeats.WORKER_ENV``, set for the worker processes of --ipu-repeat-mode=process) and the
#: gate-accuracy benchmark's strict switch (``benchmarks/test_gate_accuracy.py``). Spelled out, not
#: imported: ``repeats`` is above this module, and the benchmarks are not part of the package.
NON_OPTION_VARIABLES = frozenset({"PYTEST_IPU_REPEAT_WORKER", "PYTEST_IPU_GATE_ACCURACY_STRICT"})


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
