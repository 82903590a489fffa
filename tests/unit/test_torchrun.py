"""torchrun ranks from the environment (``placement.torchrun.detect``), and each rank's own output files
(``rank_json_path``, ``configure_json_path``). No process group: the launches are in
tests/plugin/test_torchrun_plugin.py."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_ipu.placement import torchrun
from pytest_ipu.placement.rank_group import ProcessGroup
from pytest_ipu.placement.torchrun import TorchrunRank

#: What torchrun sets for rank 3 of a launch of two nodes of two ranks each.
RANK_3 = {
    "TORCHELASTIC_RUN_ID": "job-7",
    "RANK": "3",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


def test_outside_torchrun_there_is_no_rank() -> None:
    assert torchrun.detect({}) is None
    # A shell with RANK and WORLD_SIZE set (by another launcher, or by hand) is not a torchrun worker:
    # only torchrun's agent sets TORCHELASTIC_RUN_ID.
    assert torchrun.detect({k: v for k, v in RANK_3.items() if k != "TORCHELASTIC_RUN_ID"}) is None


def test_the_plugin_looks_for_torchrun_by_detects_variable() -> None:
    """The plugin loads ``placement.torchrun`` only when torchrun's variable is set (a run outside
    torchrun loads no launch code): the variable it checks is the one ``detect`` needs."""
    from pytest_ipu.pytest_plugin import plugin

    assert plugin.TORCHRUN_RUN_ID == torchrun.RUN_ID == "TORCHELASTIC_RUN_ID"
    assert torchrun.detect({k: v for k, v in RANK_3.items() if k != plugin.TORCHRUN_RUN_ID}) is None


def test_a_worker_reads_every_variable() -> None:
    rank = torchrun.detect(RANK_3)
    assert rank == TorchrunRank(index=3, count=4, local_index=1, local_count=2, node=1, run_id="job-7")
    assert rank.nodes == 2
    assert rank.as_json() == {
        "index": 3,
        "count": 4,
        "local_index": 1,
        "local_count": 2,
        "node": 1,
        "run_id": "job-7",
    }


def test_detect_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in RANK_3.items():
        monkeypatch.setenv(name, value)
    assert torchrun.detect() == torchrun.detect(RANK_3)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    assert torchrun.detect() is None


@pytest.mark.parametrize("name", ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"])
@pytest.mark.parametrize("value", [None, "", "one", "1.5"])
def test_a_missing_or_non_numeric_variable_is_named(name: str, value: str | None) -> None:
    env = dict(RANK_3)
    if value is None:
        del env[name]
    else:
        env[name] = value
    with pytest.raises(ValueError, match=rf"^{name}={re.escape(repr(value))} in the environment: ") as info:
        torchrun.detect(env)
    message = str(info.value)
    assert "\n" not in message
    assert "torchrun ... -m pytest" in message


@pytest.mark.parametrize(
    ("changes", "shown"),
    [
        ({"RANK": "4"}, "RANK=4, WORLD_SIZE=4"),
        ({"RANK": "-1"}, "RANK=-1, WORLD_SIZE=4"),
        ({"LOCAL_RANK": "2"}, "LOCAL_RANK=2, LOCAL_WORLD_SIZE=2"),
        ({"LOCAL_WORLD_SIZE": "8"}, "LOCAL_WORLD_SIZE=8"),
        ({"WORLD_SIZE": "0", "RANK": "0"}, "RANK=0, WORLD_SIZE=0"),
    ],
)
def test_a_rank_outside_its_launch_is_refused(changes: dict[str, str], shown: str) -> None:
    with pytest.raises(ValueError, match="not one rank of a launch; start pytest with torchrun") as info:
        torchrun.detect({**RANK_3, **changes})
    assert shown in str(info.value)
    assert "\n" not in str(info.value)


RANK_0_OF_2 = TorchrunRank(index=0, count=2, local_index=0, local_count=2, node=0)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("results/run.json", "results/run.rank-0-of-2.json"),
        ("run", "run.rank-0-of-2"),
        ("a.b.json", "a.b.rank-0-of-2.json"),
        # Already this rank's: unchanged (configure runs once per process, but must be idempotent).
        ("results/run.rank-0-of-2.json", "results/run.rank-0-of-2.json"),
    ],
)
def test_each_rank_writes_its_own_file(given: str, expected: str) -> None:
    assert torchrun.rank_json_path(Path(given), RANK_0_OF_2) == Path(expected)


def test_the_files_of_the_ranks_of_a_launch_all_differ() -> None:
    paths = {
        torchrun.rank_json_path(Path("out.json"), TorchrunRank(i, 4, i % 2, 2, i // 2)) for i in range(4)
    }
    assert len(paths) == 4
    # Another rank's name is not this rank's: it gains this rank's tag.
    other = torchrun.rank_json_path(Path("out.rank-1-of-2.json"), RANK_0_OF_2)
    assert other == Path("out.rank-1-of-2.rank-0-of-2.json")


def test_configure_gives_the_rank_its_files_and_returns_the_merged_path() -> None:
    rank = TorchrunRank(index=1, count=2, local_index=1, local_count=2, node=0)
    option = SimpleNamespace(
        benchmark_json=Path("results/run.json"), benchmark_save="base", benchmark_autosave=True
    )
    assert torchrun.configure_json_path(option, rank) == Path("results/run.json")
    assert option.benchmark_json == Path("results/run.rank-1-of-2.json")
    assert option.benchmark_save == "base.rank-1-of-2"
    assert option.benchmark_autosave is True  # a flag, not a name: left alone
    # Twice (a second configure of the same process) changes nothing more.
    torchrun.configure_json_path(option, rank)
    assert (option.benchmark_json, option.benchmark_save) == (
        Path("results/run.rank-1-of-2.json"),
        "base.rank-1-of-2",
    )


def test_configure_without_a_json_file_has_no_merged_path() -> None:
    option = SimpleNamespace(benchmark_json=None, benchmark_save=None)
    assert torchrun.configure_json_path(option, RANK_0_OF_2) is None
    assert option.benchmark_json is None
    assert option.benchmark_save is None


def test_outside_torchrun_the_process_group_is_one_process_alone() -> None:
    group = ProcessGroup()
    assert (group.rank, group.world_size, group.local_rank, group.node) == (0, 1, 0, 0)
    assert group.backend is None
    assert not group.distributed
    assert ProcessGroup(group=object(), backend="gloo").distributed
