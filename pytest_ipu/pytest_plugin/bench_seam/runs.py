"""pytest-benchmark's runs written and read (its session object): its ``--benchmark-json`` writer
routed, a run saved without benchmarks, and the saved runs ``--benchmark-compare`` chose from.

Loaded by a run that writes ``--benchmark-json`` (``pytest_plugin.saving``), saves ``ipu_power``
blocks alone, or gates against ``--benchmark-compare``'s runs (``gating``). The versions it bridges
are the package's table (``bench_seam``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def wrap_json_writer(config: pytest.Config, after: Callable[[Callable[[], None]], None]) -> bool:
    """Route pytest-benchmark's ``--benchmark-json`` write through ``after``: it gets a function
    that writes the file and calls it itself (to move the file into place, or report a failure).
    Returns whether pytest-benchmark has such a writer (``save_json``) to route."""
    bench = getattr(config, "_benchmarksession", None)
    save_json = getattr(bench, "save_json", None)
    if not callable(save_json):
        return False

    def routed(output_json: Any) -> None:
        after(lambda: save_json(output_json))

    bench.save_json = routed  # type: ignore[union-attr]
    return True


def saved_runs_compared(config: pytest.Config) -> list[Path]:
    """The saved runs ``--benchmark-compare`` chose from, oldest first, when it was given without a
    run (pytest-benchmark then compares against the newest, the last of them); empty when it named
    a run, was not given, or the storage is not a folder (elasticsearch). The same query as
    pytest-benchmark's ``storage.load()``: this machine's folder, ``NNNN_*.json``, sorted by name."""
    bench = getattr(config, "_benchmarksession", None)
    storage = getattr(bench, "storage", None)
    # Only the file storage is a folder of runs (elasticsearch's ``query`` takes no glob).
    if getattr(bench, "compare", None) is not True or type(storage).__name__ != "FileStorage":
        return []
    return [Path(p) for p in storage.query("[0-9][0-9][0-9][0-9]_")]  # type: ignore[union-attr]


def save_without_benchmarks(config: pytest.Config) -> bool:
    """Save the run's file as pytest-benchmark would, for a run that measured no benchmark (it then
    saves nothing): ``--benchmark-json`` through its writer, ``--benchmark-save``/``-autosave``
    through its storage. Returns whether anything was to be saved.

    The document is made as pytest-benchmark's ``handle_saving`` makes it, through its public hooks
    (machine and commit info, ``pytest_benchmark_generate_json`` with no benchmarks, then
    ``pytest_benchmark_update_json``, where plugins add their sections). A disabled pytest-benchmark
    saves nothing, and neither does this; nor does a session that has benchmarks (it saves them).
    """
    bench = getattr(config, "_benchmarksession", None)
    if bench is None or bench.benchmarks or bench.disabled:
        return False
    save = bench.save or bench.autosave
    if not (save or bench.json):
        return False
    hook = config.hook
    machine_info = bench.get_machine_info()
    commit_info = hook.pytest_benchmark_generate_commit_info(config=config)
    hook.pytest_benchmark_update_commit_info(config=config, commit_info=commit_info)

    def document(include_data: bool) -> dict[str, Any]:
        output_json: dict[str, Any] = hook.pytest_benchmark_generate_json(
            config=config,
            benchmarks=[],
            include_data=include_data,
            machine_info=machine_info,
            commit_info=commit_info,
        )
        hook.pytest_benchmark_update_json(config=config, benchmarks=[], output_json=output_json)
        return output_json

    if bench.json:
        bench.save_json(document(True))
    if save:
        bench.storage.save(document(bench.save_data), save)
    return True


def start_round(config: pytest.Config) -> None:
    """Begin a round of a serving run (``pytest_plugin.serving``): forget the benchmarks of earlier
    rounds, so that the session's list (which every ``benchmark`` fixture appends to) holds this
    round's alone. Emptied in place: the fixtures append through the list's bound ``append``."""
    bench = getattr(config, "_benchmarksession", None)
    if bench is not None:
        del bench.benchmarks[:]


def round_json(config: pytest.Config) -> bytes:
    """The benchmarks measured since ``start_round`` as pytest-benchmark writes ``--benchmark-json``
    (its per-round data included): the same public hooks as its own saving, where plugins add their
    sections (pytest-ipu's top-level one among them). Raises ``RuntimeError`` when pytest-benchmark
    is not active (``-p no:benchmark``)."""
    bench = getattr(config, "_benchmarksession", None)
    if bench is None:
        raise RuntimeError("pytest-benchmark is not active (-p no:benchmark?): there is nothing to write")
    from pytest_benchmark.utils import safe_dumps

    hook = config.hook
    benchmarks = list(bench.benchmarks)
    machine_info = bench.get_machine_info()
    commit_info = hook.pytest_benchmark_generate_commit_info(config=config)
    hook.pytest_benchmark_update_commit_info(config=config, commit_info=commit_info)
    output_json: dict[str, Any] = hook.pytest_benchmark_generate_json(
        config=config,
        benchmarks=benchmarks,
        include_data=True,
        machine_info=machine_info,
        commit_info=commit_info,
    )
    hook.pytest_benchmark_update_json(config=config, benchmarks=benchmarks, output_json=output_json)
    text: str = safe_dumps(output_json, ensure_ascii=True, indent=4)  # type: ignore[no-untyped-call]
    return text.encode()
