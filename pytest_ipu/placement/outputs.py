"""Each process of a launch (a PopRun instance, a torchrun rank) writes files of its own.

Every process of a launch gets the same command line, so the same ``--benchmark-json`` path and
saved-run names: each tags them with its place in the launch (``.instance-0-of-2``,
``.rank-1-of-2``), and the merge (``pytest-ipu merge``, or rank 0 of a torchrun launch) joins them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def tagged(path: Path, tag: str) -> Path:
    """``results/run.json`` -> ``results/run<tag>.json``; a path that already carries ``tag`` is
    returned unchanged, so tagging twice is safe."""
    if path.stem.endswith(tag):
        return path
    return path.with_name(f"{path.stem}{tag}{path.suffix}")


def tag_outputs(option: Any, tag: str) -> Path | None:
    """Tag this process's output files in pytest's parsed options (``config.option``): the
    ``--benchmark-json`` path, and the names ``--benchmark-save`` and ``--benchmark-autosave`` save
    under, so processes saving into one storage at once never pick the same file. Returns the
    ``--benchmark-json`` path as given (``None`` without one). Call it from a ``pytest_configure``
    that runs before pytest-benchmark's, which is ``trylast`` and reads the options when it creates
    its session."""
    given = getattr(option, "benchmark_json", None)
    if given is not None:
        option.benchmark_json = tagged(Path(given), tag)
    for key in ("benchmark_save", "benchmark_autosave"):
        name = getattr(option, key, None)
        if isinstance(name, str) and name and not name.endswith(tag):
            setattr(option, key, name + tag)
    return None if given is None else Path(given)
