"""torchrun: one pytest run per rank, and which rank this process is.

``torchrun --nproc-per-node=N [--nnodes=M --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT] -m pytest
...`` starts N x M copies of the pytest run. Each learns who it is from the environment torchrun
sets for its workers (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``GROUP_RANK``, ``TORCHELASTIC_RUN_ID``, ``MASTER_ADDR``, ``MASTER_PORT``); ``detect`` reads them
into a ``TorchrunRank`` when pytest is configured. The process group the ranks benchmark and
wait over is ``placement.rank_group``'s, loaded when a launch opens it.

Every rank writes its own ``--benchmark-json`` file (``rank_json_path``); rank 0 also writes the
merged document of the launch (``results.launch_merge``, shared with PopRun) to the given path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ipu.placement import TORCHRUN_RUN_ID
from pytest_ipu.placement import outputs
from pytest_ipu.results import launch_merge
from pytest_ipu.results.codec import Coded

#: Where a rank's ``as_json()`` goes: ``machine_info["ipu"][KEY]`` and each record's ``KEY`` (the
#: merge's, which reads it back).
KEY = launch_merge.TORCHRUN_KEY

#: The variable torchrun's agent sets for its workers (and a user's shell does not): a process is
#: under torchrun when it is set (``placement.TORCHRUN_RUN_ID``).
RUN_ID = TORCHRUN_RUN_ID

#: The variables torchrun sets for every worker that ``detect`` needs, and the field each gives.
_VARIABLES: Mapping[str, str] = {
    "index": "RANK",
    "count": "WORLD_SIZE",
    "local_index": "LOCAL_RANK",
    "local_count": "LOCAL_WORLD_SIZE",
    "node": "GROUP_RANK",
}


@dataclass(frozen=True)
class TorchrunRank(Coded):
    """This process's place in a torchrun launch: rank ``index`` of ``count`` (the world size),
    ``local_index`` of the ``local_count`` ranks on its node, and the node (torchrun's group rank)."""

    index: int
    count: int
    local_index: int
    local_count: int
    node: int
    run_id: str = ""

    @property
    def nodes(self) -> int:
        """Nodes of the launch, when every node runs the same number of ranks (torchrun's rule)."""
        return self.count // self.local_count


def detect(environ: Mapping[str, str] | None = None) -> TorchrunRank | None:
    """This process's ``TorchrunRank``, or ``None`` when torchrun did not start it.

    A process is under torchrun when ``TORCHELASTIC_RUN_ID`` is set (torchrun's agent sets it for
    its workers, and a user's shell does not). Raises ``ValueError`` naming the variable and its
    value when one is missing or not a number, or when the rank is not below the world size.
    """
    env = os.environ if environ is None else environ
    if RUN_ID not in env:
        return None
    values: dict[str, int] = {}
    for field, name in _VARIABLES.items():
        text = env.get(name)
        try:
            values[field] = int(text if text is not None else "")
        except ValueError:
            raise ValueError(
                f"{name}={text!r} in the environment: torchrun sets it to a whole number for every worker; "
                "start pytest as `torchrun ... -m pytest`, not by hand with TORCHELASTIC_RUN_ID set"
            ) from None
    rank = TorchrunRank(run_id=env[RUN_ID], **values)
    if not (0 <= rank.index < rank.count and 0 <= rank.local_index < rank.local_count <= rank.count):
        raise ValueError(
            f"RANK={rank.index}, WORLD_SIZE={rank.count}, LOCAL_RANK={rank.local_index}, "
            f"LOCAL_WORLD_SIZE={rank.local_count}: not one rank of a launch; start pytest with torchrun"
        )
    return rank


def rank_json_path(path: Path, rank: TorchrunRank) -> Path:
    """``results/run.json`` -> ``results/run.rank-0-of-2.json``: one file per rank (unchanged when
    ``path`` already names this rank)."""
    return outputs.tagged(path, _tag(rank))


def configure_json_path(option: Any, rank: TorchrunRank) -> Path | None:
    """Give this rank its own output files; the path the merged document goes to (``None``
    without ``--benchmark-json``). The saved-run names (``--benchmark-save``/``-autosave``) gain
    ``.rank-R-of-N`` so ranks saving into one storage never pick the same file."""
    return outputs.tag_outputs(option, _tag(rank))


def _tag(rank: TorchrunRank) -> str:
    return f".rank-{rank.index}-of-{rank.count}"
