"""Fixtures of the benchmark studies: the model zoo, deterministic inputs and the studies' options."""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import math
import pathlib
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import Any

import pytest

from benchmarks.models import resnext

#: The batch sizes of the reference study (ResNeXt-101 on a C2 card: 2 to 12).
BATCH_SIZES = (2, 4, 6, 8, 10, 12)
IMAGE_SHAPE = (3, 224, 224)
#: Seconds the gate-accuracy benchmark measures for by default (``--gate-accuracy-budget``): short
#: enough for ``make bench``; a study of the rates themselves wants 600 s or more.
GATE_ACCURACY_BUDGET_S = 60.0
#: Seconds the gate-recipe study starts episodes for (``--gate-recipe-budget``), once it has one of
#: each kind: one episode of each on a 2-core machine; rates worth quoting want 1800 or more
#: (``make bench-full``).
GATE_RECIPE_BUDGET_S = 120.0


# PopART refuses to import once onnx is imported (an SDK quirk, docs/ipu.md). Importing it first, where
# the SDK is enabled, lets the popart targets run in the same session as the ONNX Runtime ones.
with contextlib.suppress(Exception):
    importlib.import_module("popart")

#: The gate-recipe study's family of benchmarks runs in a throwaway repository of its own
#: (``test_gate_recipe.py``), never as part of the studies.
collect_ignore = ["gate_family"]

_REPORT = pytest.StashKey[typing.Dict[str, typing.List[str]]]()
_SUMMARIES = pytest.StashKey[typing.Dict[str, str]]()

#: The benchmarks that check pytest-ipu itself (its overheads, its sampler, its gates, its start-up)
#: rather than measure a model: they run after the studies, and the terminal gives them one short
#: table at the end (``SelfChecks``), their full lines going to ``--self-check-details``.
SELF_CHECKS = frozenset(
    {
        "test_gate_accuracy.py",
        "test_gate_cost.py",
        "test_gate_recipe.py",
        "test_cycle_counter_cost.py",
        "test_gil.py",
        "test_harness_overhead.py",
        "test_history.py",
        "test_instances_overhead.py",
        "test_loadgen_overhead.py",
        "test_memory_sweep.py",
        "test_power_sampling.py",
        "test_startup_cost.py",
        "test_training_harness.py",
    }
)

#: The distributions whose pytest plugins a measured pytest run of the studies loads: pytest-ipu and
#: pytest-benchmark, which it needs.
OWN_PLUGINS = frozenset({"pytest-ipu", "pytest-benchmark"})


@functools.lru_cache(maxsize=None)
def other_plugins_off() -> tuple[str, ...]:
    """``-p no:NAME`` for every installed pytest plugin of another distribution than ``OWN_PLUGINS``.

    The development environment installs hypothesis and pytest-xdist for the test suite; a project
    that uses pytest-ipu need not have them. A pytest run that a study measures (its start-up, its
    memory) leaves them out, on every side of a comparison alike: they would only add their own
    start-up (most of a trivial run's second) and its noise to what is measured.
    """
    from importlib import metadata

    args: list[str] = []
    # By distribution, not entry_points(group=...): an entry point knows its distribution from Python 3.10.
    for dist in metadata.distributions():
        if str(dist.metadata["Name"]).lower().replace("_", "-") in OWN_PLUGINS:
            continue
        for entry in dist.entry_points:
            if entry.group == "pytest11":
                args += ["-p", f"no:{entry.name}"]
    return tuple(args)


def _seconds(text: str) -> float:
    """A positive number of seconds, for ``--gate-accuracy-budget``; argparse reports the error."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds > 0; pass e.g. --gate-accuracy-budget=100"
        )
    return value


#: Batches per device call in the C2 study: the ``--device_iterations`` default of Graphcore's
#: ResNeXt-101 inference example (examples at 69f35e67, resnext101.py and its launcher).
C2_BATCHES_PER_STEP = 200


def _positive_int(text: str) -> int:
    """A whole number >= 1, for ``--c2-batches-per-step``; argparse reports the error."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number >= 1; pass e.g. --c2-batches-per-step=1"
        )
    return value


@dataclass(frozen=True)
class TrainingSize:
    """The sizes of the training-step study (``test_training_step``) at one ``--training-size``.

    Batches are per process: under torchrun each rank trains on its own batch of that size, so the
    global batch grows with the processes (weak scaling, as data-parallel training is run).
    """

    #: Height and width of ResNet-50's synthetic images, pixels.
    resnet_image: int
    #: ResNet-50's batch sizes, one benchmark each.
    resnet_batches: tuple[int, ...]
    #: BERT's batch sizes (sequences), one benchmark each.
    bert_batches: tuple[int, ...]
    #: BERT's sequence length, tokens.
    bert_seq: int
    #: ``@pytest.mark.ipu`` keywords of the ResNet-50 benchmarks (empty: the run's settings).
    resnet_timing: Mapping[str, object] = field(default_factory=dict)
    #: ``@pytest.mark.ipu`` keywords of the BERT benchmarks (empty: the run's settings).
    bert_timing: Mapping[str, object] = field(default_factory=dict)


#: ``--training-size``: ``small`` is what ``make bench`` runs, twice (on 1 and 2 processes), in well
#: under a minute each on a 2-core CPU; ``full`` is the study at ImageNet's image size over a sweep of
#: batch sizes, timed by the run's own settings, for a machine with the time (or the accelerator).
TRAINING_SIZES: Mapping[str, TrainingSize] = {
    # ResNet-50 at 64 pixels: the same network and parameters as at 224, a twelfth of the arithmetic.
    # A step takes about 0.3 s on one core: the run's 3 repeats, one warm-up call each, fit a 3 s
    # budget. BERT's step takes 1 to 2 s on one core, so it is timed by fixed rounds: 3 after one
    # warm-up, in one repeat (a repeat would cost another 5 s per process count for a spread that
    # the ResNet-50 benchmark already shows).
    "small": TrainingSize(
        resnet_image=64,
        resnet_batches=(4,),
        bert_batches=(8,),
        bert_seq=128,
        resnet_timing={"max_time": "3s", "warmup_rounds": 1},
        bert_timing={"rounds": 3, "warmup_rounds": 1, "repeats": 1},
    ),
    "full": TrainingSize(
        resnet_image=224, resnet_batches=(8, 16, 32), bert_batches=(8, 16, 32), bert_seq=128
    ),
}


def _batches(text: str) -> tuple[int, ...]:
    """Comma-separated whole numbers >= 1, for ``--training-batches``; argparse reports the error."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of whole numbers >= 1; pass e.g. --training-batches=4,8"
        )
    return values


def _pixels(text: str) -> int:
    """A whole number of pixels >= 1, for ``--training-image``; argparse reports the error."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number of pixels >= 1; pass e.g. --training-image=224"
        )
    return value


def training_size(config: pytest.Config) -> TrainingSize:
    """The training-step study's sizes: ``--training-size``'s, with ``--training-image`` and
    ``--training-batches`` applied over them."""
    size = TRAINING_SIZES[str(config.getoption("--training-size"))]
    image = config.getoption("--training-image")
    if image is not None:
        size = replace(size, resnet_image=int(image))
    batches = config.getoption("--training-batches")
    if batches is not None:
        size = replace(size, resnet_batches=tuple(batches), bert_batches=tuple(batches))
    return size


@dataclass(frozen=True)
class LoadgenSize:
    """The sizes and settings of the LoadGen study (``test_loadgen_study``) at one ``--loadgen-size``.

    The networks are the same at every size; only the images, the run lengths and the Server search's
    latency bounds change with it.
    """

    #: Height and width of the synthetic images, pixels.
    image: int
    #: Minimum duration of each LoadGen run, and of each probe of the Server search, seconds.
    min_duration_s: float
    #: The Server search's latency percentile; ``None``: MLPerf's (0.99, from LoadGen's mlperf.conf).
    server_percentile: float | None
    #: The Server latency bound of each model, seconds; ``None``: MLPerf's own for the model.
    server_bound_s: Mapping[str, float | None]
    #: The Server search's time budget, seconds.
    search_budget_s: float
    #: The search stops when the lowest INVALID rate is within this fraction above the highest VALID.
    search_tolerance: float


#: ``--loadgen-size``: ``small`` is what ``make bench`` runs, about two minutes for the whole study
#: on a 2-core CPU; ``full`` is the study at ImageNet's image size with MLPerf's Server bound and
#: percentile, for a machine with the time (or the accelerator).
LOADGEN_SIZES: Mapping[str, LoadgenSize] = {
    # 64 pixels: the same networks and parameters as at 224, a twelfth of the arithmetic. On a 2-core
    # CPU a batch of 1 takes about 28 ms (ResNet-50) and 42 ms (ResNeXt-101 32x4d), a batch of 8 about
    # 72 ms and 98 ms. MLPerf's 15 ms bound would leave no VALID rate at all, so each model has a
    # fixed bound of its own instead, stated here so that runs stay comparable (a bound computed
    # from each run's own timing would move the peak with the machine's load): about three batches of
    # 8 on that CPU, 200 ms for ResNet-50 and 300 ms for ResNeXt-101. Under it a sample can wait for
    # the batch running and still run in a full batch of its own, so the search climbs to full
    # batches, and the queueing near capacity, not the first call, ends it. Above capacity the
    # backlog grows by the excess rate: over a 2 s probe, a rate about 10 % over capacity queues past
    # the bound before the last tenth of the queries, so LoadGen calls it INVALID at the 90th
    # percentile (a 1 s probe let rates 20 % over capacity pass). The 90th percentile instead of
    # MLPerf's 99th: LoadGen's early stopping needs 459 queries at the 99th (44 at the 90th), and each
    # probe runs twice that many, which at 50 QPS would be 18 s a probe instead of 2.
    "small": LoadgenSize(
        image=64,
        min_duration_s=2.0,
        server_percentile=0.9,
        server_bound_s={"resnet50": 0.200, "resnext101": 0.300},
        # Probes take 2.5 to 3 s here: 20 s is room for six or seven, what the search needs to bring
        # its bracket within 10 % from a first guess within a factor of two.
        search_budget_s=20.0,
        search_tolerance=0.10,
    ),
    # 224 pixels, MLPerf's percentile and ResNet-50's own bound (15 ms, from mlperf.conf). MLPerf has
    # no ResNeXt-101 benchmark; its bound is twice ResNet-50's, as its arithmetic is (8.0 against
    # 4.1 billion multiply-adds an image at 224 px, counted by torch's FlopCounterMode).
    "full": LoadgenSize(
        image=224,
        min_duration_s=10.0,
        server_percentile=None,
        server_bound_s={"resnet50": None, "resnext101": 0.030},
        search_budget_s=300.0,
        search_tolerance=0.05,
    ),
}


def loadgen_size(config: pytest.Config) -> LoadgenSize:
    """The LoadGen study's sizes: ``--loadgen-size``'s."""
    return LOADGEN_SIZES[str(config.getoption("--loadgen-size"))]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--self-check-details",
        default=None,
        metavar="PATH",
        help="write the self-checks' full report lines to PATH (written whole) and print only their "
        "one-line summaries at the end; by default every line is printed",
    )
    """Study options: which ResNeXt-101 variant to run, how long the gate-accuracy benchmark
    measures and whether its targets are enforced, and the sizes of the training-step and LoadGen
    studies."""
    parser.addoption(
        "--resnext-variant",
        default="32x4d",
        choices=sorted(resnext.VARIANTS),
        help="ResNeXt-101 variant of the inference study (default: 32x4d)",
    )
    parser.addoption(
        "--gate-accuracy-budget",
        default=GATE_ACCURACY_BUDGET_S,
        type=_seconds,
        metavar="SECONDS",
        help="seconds test_gate_accuracy measures for, after a minimum of episodes of each kind "
        f"(default: {GATE_ACCURACY_BUDGET_S:g}; 600 or more for rates worth quoting)",
    )
    parser.addoption(
        "--gate-recipe-budget",
        default=GATE_RECIPE_BUDGET_S,
        type=_seconds,
        metavar="SECONDS",
        help="seconds test_gate_recipe starts new episodes for, once it has one of each kind "
        f"(default: {GATE_RECIPE_BUDGET_S:g}; 1800 or more for rates worth quoting)",
    )
    parser.addoption(
        "--gate-recipe-strict",
        action="store_true",
        help="fail test_gate_recipe when a target is missed (by default it reports MISSES)",
    )
    parser.addoption(
        "--c2-batches-per-step",
        default=C2_BATCHES_PER_STEP,
        type=_positive_int,
        metavar="N",
        help="batches each call of the C2 study runs on the device (PopART batches per step, PopTorch "
        f"device iterations; default: {C2_BATCHES_PER_STEP}, as Graphcore's ResNeXt-101 example; "
        "1 checks parity and measures one batch per call)",
    )
    parser.addoption(
        "--gate-accuracy-strict",
        action="store_true",
        default=False,
        help="fail test_gate_accuracy when a rule misses its target (default: report only; "
        "or set PYTEST_IPU_GATE_ACCURACY_STRICT=1)",
    )
    small, full = TRAINING_SIZES["small"], TRAINING_SIZES["full"]
    parser.addoption(
        "--training-size",
        default="small",
        choices=sorted(TRAINING_SIZES),
        help="sizes of test_training_step, per process: 'small' (default; make bench) ResNet-50 at "
        f"{small.resnet_image} px batch {small.resnet_batches[0]} and BERT batch {small.bert_batches[0]} "
        f"seq {small.bert_seq}, few rounds; 'full' ResNet-50 at {full.resnet_image} px and BERT seq "
        f"{full.bert_seq}, batches {','.join(map(str, full.resnet_batches))}, timed by the run's settings",
    )
    parser.addoption(
        "--training-image",
        default=None,
        type=_pixels,
        metavar="PIXELS",
        help="image height and width of test_training_step's ResNet-50, over --training-size's",
    )
    parser.addoption(
        "--training-batches",
        default=None,
        type=_batches,
        metavar="N[,N...]",
        help="batch sizes per process of test_training_step's ResNet-50 and BERT, over --training-size's",
    )
    parser.addoption(
        "--loadgen-size",
        default="small",
        choices=sorted(LOADGEN_SIZES),
        help="sizes of test_loadgen_study: 'small' (default; make bench) ResNet-50 and ResNeXt-101 at "
        f"{LOADGEN_SIZES['small'].image} px, 2 s runs, Server bounds of its own at the 90th percentile; "
        f"'full' at {LOADGEN_SIZES['full'].image} px, 10 s runs, MLPerf's Server bound and percentile",
    )


@pytest.fixture(scope="session")
def study_report(request: pytest.FixtureRequest) -> dict[str, list[str]]:
    """Lines a study wants printed at the end of the run, by section title (in insertion order).

    The figures the harness and power benchmarks measure side by side go here, so that one run
    prints them together after the tables.
    """
    return request.config.stash.setdefault(_REPORT, {})


@pytest.fixture(scope="session")
def self_check_summary(request: pytest.FixtureRequest) -> dict[str, str]:
    """One line per self-check section of ``study_report`` (by its title), for the short table at
    the end of the run; a self-check that gives none is summed up by its ``meets``/``MISSES`` marks."""
    return request.config.stash.setdefault(_SUMMARIES, {})


def _is_self_check(item: pytest.Item) -> bool:
    return item.path.name in SELF_CHECKS


@pytest.fixture(autouse=True)
def _self_check_role(request: pytest.FixtureRequest) -> None:
    """A self-check's benchmark says so in its JSON (``extra_info["role"]``): the report shows it
    last, folded, and keeps it out of the summary of the studies."""
    if _is_self_check(request.node) and "benchmark" in request.fixturenames:
        from pytest_ipu.report.summary import SELF_CHECK

        request.getfixturevalue("benchmark").extra_info["role"] = SELF_CHECK


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The studies first, the self-checks after them (each in its collected order): the studies'
    tables then lead the terminal's pytest-ipu section and the report."""
    items.sort(key=_is_self_check)


def _marks(lines: typing.Sequence[str]) -> str:
    """A self-check without a summary of its own: how many of its targets it met, and the first miss."""
    met = sum(line.count("meets") for line in lines)
    missed = [line for line in lines if "MISSES" in line]
    if not missed:
        return f"{met} target(s) met" if met else "measured (no target)"
    return f"{met} met, {sum(line.count('MISSES') for line in missed)} MISSED: {missed[0].strip()}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Print each study's report section (the self-checks' too, unless ``--self-check-details``
    sends them to a file: ``SelfChecks`` sums them up last)."""
    from pytest_ipu.report import text

    width = text.terminal_width()
    to_file = config.getoption("--self-check-details") is not None
    for title, lines in config.stash.get(_REPORT, {}).items():
        if to_file and title in config.stash.get(_SELF_CHECK_TITLES, set()):
            continue
        terminalreporter.section(title)
        for line in text.wrap(lines, width):
            terminalreporter.write_line(line)


_SELF_CHECK_TITLES = pytest.StashKey[typing.Set[str]]()


class SelfChecks:
    """The last section of the run: one line per self-check, after pytest-benchmark's tables, and
    the file of their full lines (``--self-check-details``)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The short table, and where the details are."""
        from pytest_ipu.report import text
        from pytest_ipu.results import atomic

        report = self.config.stash.get(_REPORT, {})
        titles = self.config.stash.get(_SELF_CHECK_TITLES, set())
        checks = [title for title in report if title in titles]
        if not checks:
            return
        summaries = self.config.stash.get(_SUMMARIES, {})
        width = text.terminal_width()
        terminalreporter.section("self-checks of pytest-ipu (harness, sampler, gates, start-up)")
        for title in checks:
            line = f"{title.split(' (')[0]}: {summaries.get(title) or _marks(report[title])}"
            for part in text.wrap([line], width):
                terminalreporter.write_line(part)
        path = self.config.getoption("--self-check-details")
        if path is not None:
            body = "".join(f"== {t} ==\n" + "".join(f"{line}\n" for line in report[t]) + "\n" for t in checks)
            atomic.write_text(pathlib.Path(path), body)
            terminalreporter.write_line(f"every self-check's figures: {path}")


def pytest_configure(config: pytest.Config) -> None:
    """Register the self-checks' closing section (a plugin object, so that it can run last)."""
    config.pluginmanager.register(SelfChecks(config), "benchmarks-self-checks")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Note which report sections the self-checks write (their titles), as each runs."""
    if _is_self_check(item):
        item.config.stash.setdefault(_SELF_CHECK_TITLES, set())
        item.stash[_BEFORE] = _titles(item.config)


_BEFORE = pytest.StashKey[typing.Set[str]]()


def _titles(config: pytest.Config) -> set[str]:
    report: dict[str, list[str]] = config.stash.get(_REPORT, {})
    return set(report)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """The sections a self-check added while it ran are self-check sections."""
    before = item.stash.get(_BEFORE, None)
    if before is not None:
        added = _titles(item.config) - before
        item.config.stash.setdefault(_SELF_CHECK_TITLES, set()).update(added)


@pytest.fixture(scope="session")
def resnext_variant(request: pytest.FixtureRequest) -> str:
    """The ResNeXt-101 variant chosen with --resnext-variant."""
    return str(request.config.getoption("--resnext-variant"))


@pytest.fixture(scope="session")
def resnext101(resnext_variant: str) -> Any:
    """ResNeXt-101 with seeded random weights, built once per run (backends copy it, never change it)."""
    return resnext.build(resnext_variant, seed=0)


def image_batch(batch_size: int, seed: int = 0) -> Any:
    """A deterministic batch of ``batch_size`` normalised random images, float32, NCHW."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randn((batch_size, *IMAGE_SHAPE), generator=generator)
