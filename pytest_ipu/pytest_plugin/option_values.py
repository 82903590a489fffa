"""The value parsers of pytest-ipu's options, one per settings field (``PARSERS``), also the marker's.

Each takes the raw value (a string from the command line, the environment or the ini file, or a
marker's Python value) and returns the setting, or raises ``ValueError`` saying what is allowed
(``values.BadValue`` in its option voice: ``options`` adds the value and its source). Loaded by the
first value a run sets: an option left unset takes ``Settings``' default, unparsed.
"""

from __future__ import annotations

import glob
from collections.abc import Callable
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from pytest_ipu.backports import remove_suffix
from pytest_ipu.pytest_plugin.settings import AUTO
from pytest_ipu.pytest_plugin.settings import MISSING_SDK_POLICIES
from pytest_ipu.pytest_plugin.settings import PRECISIONS
from pytest_ipu.pytest_plugin.settings import REPEAT_MODES
from pytest_ipu.results import values
from pytest_ipu.run.plan import MAX_ROUNDS
from pytest_ipu.run.plan import MAX_WARMUP_ROUNDS
from pytest_ipu.run.plan import TimeCap

if TYPE_CHECKING:
    # The parsers of targets, gates and shares load their modules when a value needs them.
    from pytest_ipu.backends.target import Target
    from pytest_ipu.results.gates import Gate

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


def _auto_or(parse: Callable[[object], Any]) -> Callable[[object], Any]:
    """``parse``, or ``auto`` (``None``: the library's own default, or the plan's own count)."""

    def auto_or(value: object) -> Any:
        if str(value).strip().lower() == AUTO:
            return None
        try:
            return parse(value)
        except values.BadValue as exc:
            raise values.BadValue(value, f"'auto' or {exc.want}") from None

    return auto_or


#: ``auto`` (``None``: the library's own default) or a thread count.
parse_threads = _auto_or(partial(values.integer, least=1, most=MAX_THREADS))
#: ``auto`` (``None``: the plan's own count) or a positive round count.
parse_rounds = _auto_or(partial(values.integer, least=1, most=MAX_ROUNDS))


def parse_time_cap(value: object) -> TimeCap:
    """``3x`` (a multiple of the time budget, at least 1) or a duration (``60s``)."""
    text = str(value).strip().lower()
    if text.endswith("x"):
        try:
            factor = float(text[:-1])
        except ValueError:
            factor = -1.0
        if not 1.0 <= factor <= 1000.0:
            raise values.BadValue(value, "a multiple of the time budget from '1x' to '1000x', or a duration")
        return TimeCap(factor=factor)
    try:
        return TimeCap(factor=None, seconds=parse_seconds(value))
    except ValueError:
        raise values.BadValue(
            value, "a multiple of the time budget such as '3x', or a duration such as '60s'"
        ) from None


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
        raise values.BadValue(
            value, f"a positive duration such as '2', '2s' or '500ms', at most a day ({MAX_DURATION_S:g}s)"
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
        raise values.BadValue(value, "a duration such as '600s', '10min' or '500ms', at most a day (86400s)")
    return seconds


def parse_file(value: object) -> Path | None:
    """A file path (``~`` expanded), or ``none``."""
    text = str(value).strip()
    if not text:
        raise values.BadValue(value, "a file path or 'none'")
    return None if text.lower() == "none" else Path(text).expanduser()


def _hz(value: object) -> float:
    try:
        hz = float(remove_suffix(str(value).strip().lower(), "hz"))
    except ValueError:
        hz = -1.0
    if not MIN_POWER_HZ <= hz <= MAX_POWER_HZ:
        raise values.BadValue(value, f"a rate in Hz from {MIN_POWER_HZ:g} to {MAX_POWER_HZ:g}")
    return hz


#: ``auto`` (``None``: twice the sensor's rate, 10 Hz to 1 kHz) or a rate from 0.1 Hz to 10 kHz.
parse_hz = _auto_or(_hz)


def parse_idle(value: object) -> float:
    """A duration for the idle baseline, at most a day; ``0`` turns it off."""
    if str(value).strip().lower() in ("0", "0s", "off"):
        return 0.0
    return parse_seconds(value)


def parse_dir(value: object) -> Path:
    """A directory path; ``~`` expands to the home directory."""
    text = str(value).strip()
    if not text:
        raise values.BadValue(value, "a directory path")
    return Path(text).expanduser()


def parse_targets(value: object) -> tuple[Target, ...]:
    """``auto`` (empty tuple) or a comma-separated list of targets such as ``torch:cpu,torch:cuda``."""
    text = str(value).strip()
    if text.lower() == AUTO:
        return ()
    parts = [p for p in (s.strip() for s in text.split(",")) if p]
    if not parts:
        raise values.BadValue(value, "'auto' or targets such as 'torch:cpu,torch:cuda'")
    from pytest_ipu.backends.target import parse_target

    targets = tuple(parse_target(p) for p in parts)
    return tuple(dict.fromkeys(targets))  # de-duplicated, order kept


def _listed(value: object, expected: str) -> list[str]:
    """The texts of a ``multiple`` option: a list (repeated flag, ini lines) or one ``;``-separated string.

    An empty item of a list is an error: ``--ipu-gate=`` is a flag given without its value (a shell
    variable that expanded to nothing, say), as ``--ipu-rounds=`` is; ``;;`` in a string is a separator.
    A source given and empty (a variable of spaces, an ini key without lines) is an error too: it
    would mean "none" in silence, as ``PYTEST_IPU_GATE="$GATES"`` with ``$GATES`` unset does.
    """
    if not isinstance(value, (list, tuple)):
        texts = str(value).split(";")
        if not any(t.strip() for t in texts):
            got = "only ';' separators" if len(texts) > 1 else "an empty value"
            raise ValueError(f"{expected}, got {got}; write 'none' for none")
        return texts
    texts = [str(v) for v in value]
    if not texts:
        raise ValueError(f"{expected}, got an empty value; write 'none' for none")
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


def parse_level(value: object) -> float:
    """A test's level such as ``1%`` or ``0.01``, within (0, 0.5) (``measure.units`` owns the rule)."""
    from pytest_ipu.measure import units

    return units.parse_level(value)


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


#: The parser of each settings field's option (and marker keyword).
PARSERS: Mapping[str, Callable[[object], Any]] = {
    "targets": parse_targets,
    "precision": partial(values.choice, choices=(AUTO, *PRECISIONS)),
    "rounds": parse_rounds,
    "warmup_rounds": partial(values.integer, least=0, most=MAX_WARMUP_ROUNDS),
    "min_rounds": partial(values.integer, least=1, most=MAX_MIN_ROUNDS),
    "max_time_s": parse_seconds,
    "time_cap": parse_time_cap,
    "call_timeout_s": parse_timeout,
    "rank_timeout_s": parse_timeout,
    "scaling_baseline": parse_file,
    "repeats": partial(values.integer, least=1, most=MAX_REPEATS),
    "repeat_mode": partial(values.choice, choices=REPEAT_MODES),
    "unstable_threshold": parse_share,
    "contended_threshold": parse_share,
    "torch_threads": parse_threads,
    "torch_interop_threads": parse_threads,
    "missing_sdk": partial(values.choice, choices=MISSING_SDK_POLICIES),
    "cache_dir": parse_dir,
    "power": partial(values.choice, choices=(AUTO, "off", "nvml", "rapl", "gcipuinfo")),
    "power_hz": parse_hz,
    "idle_s": parse_idle,
    "gates": parse_gates,
    "baselines": parse_baselines,
    "baseline_missing": partial(values.choice, choices=("warn", "fail")),
    "inconclusive": partial(values.choice, choices=("fail", "warn", "pass")),
    "drift": parse_share,
    "job_alpha": parse_level,
}


def parser_for(field: str) -> Callable[[object], Any]:
    """The value parser of the option that fills settings field ``field``."""
    return PARSERS[field]
