"""The threads of numpy's BLAS and of OpenMP code in a benchmark: pinned with torch's, or named.

With ``--ipu-torch-threads=N`` each of ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS`` and
``OMP_NUM_THREADS`` not set already is set to ``N`` at configure time, before numpy loads; otherwise
a run with benchmarks names the unset ones in one terminal-summary line. Loaded at configure time only
with ``--ipu-torch-threads``, else by the first benchmark.

Documented in docs/numbers.md (section "Threads on a busy machine").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import MutableMapping

#: The variables that set the threads of OpenMP, OpenBLAS and MKL, in that order.
VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def pin(
    threads: int, environ: MutableMapping[str, str] | None = None, loaded: Mapping[str, object] | None = None
) -> list[str]:
    """Set each of ``VARIABLES`` that ``environ`` lacks to ``threads``, unless numpy is loaded
    already (in ``loaded``: its BLAS has read them); the variables set."""
    env = os.environ if environ is None else environ
    modules = sys.modules if loaded is None else loaded
    if "numpy" in modules:
        return []
    unset = [name for name in VARIABLES if name not in env]
    for name in unset:
        env[name] = str(threads)
    return unset


def unset(environ: Mapping[str, str] | None = None) -> list[str]:
    """The ``VARIABLES`` that ``environ`` (the process's) does not set."""
    env = os.environ if environ is None else environ
    return [name for name in VARIABLES if not env.get(name)]


def notice(
    cores: Callable[[], int | None] | None = None, environ: Mapping[str, str] | None = None
) -> str | None:
    """The line a run prints once, at its first benchmark, when a variable is unset on a machine of
    more than one core (``cores``: ``os.cpu_count``); ``None`` when there is nothing to say."""
    count = (cores or os.cpu_count)() or 1
    missing = unset(environ)
    if count <= 1 or not missing:
        return None
    names = ", ".join(missing)
    settings = " ".join(f"{name}=1" for name in missing)
    return (
        f"pytest-ipu: WARNING {names} unset: numpy's BLAS and OpenMP code start one thread per core "
        f"({count} here), which on a machine shared with other jobs wait on one another and time the "
        f"neighbours, not the code; set {settings} (or the cores the job has) in the job's environment, "
        "or pass --ipu-torch-threads=1, which pins them with torch's threads (docs/numbers.md, threads "
        "on a busy machine)"
    )
