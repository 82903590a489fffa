"""PopRun's launch files: one pytest run per PopRun instance, each writing files of its own.

Every instance of ``poprun --num-instances N ... pytest ...`` (which instance it is, and its IPUs,
are ``devices.poprun``'s) would write the same ``--benchmark-json`` file; ``configure_json_path``
gives each its own (``instance_json_path``), and ``results.launch_merge`` (the ``pytest-ipu merge``
command) joins the files of one launch into one pytest-benchmark document, checking each file's
instance or rank with the classes ``IDENTITIES`` names.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from pytest_ipu.devices.poprun import PopRunInstance
from pytest_ipu.devices.poprun import detect
from pytest_ipu.placement import outputs
from pytest_ipu.placement.torchrun import TorchrunRank
from pytest_ipu.results import launch_merge

#: Where an instance's ``as_json()`` goes: ``machine_info["ipu"][KEY]`` and each record's ``KEY``
#: (the merge's, which reads it back).
KEY = launch_merge.KEY

#: The class each launcher's processes say which they are with, by its key: what the merge checks
#: each file's instance or rank against (``launch_merge.Identities``).
IDENTITIES: launch_merge.Identities = {
    KEY: PopRunInstance,
    launch_merge.TORCHRUN_KEY: TorchrunRank,
}


def instance_json_path(path: Path, instance: PopRunInstance) -> Path:
    """``results/run.json`` -> ``results/run.instance-0-of-2.json``: one file per instance.

    A path that already names this instance is returned unchanged, so calling this twice is safe.
    """
    return outputs.tagged(path, _tag(instance))


def configure_json_path(option: Any, popdist_module: ModuleType | None = None) -> PopRunInstance | None:
    """Under PopRun, give this instance its own output files; the instance, or ``None`` outside PopRun.

    ``--benchmark-json`` becomes ``instance_json_path``'s file, and the saved-run names gain
    ``.instance-I-of-N`` (``outputs.tag_outputs``). Safe to call twice.
    """
    instance = detect(popdist_module)
    if instance is None:
        return None
    outputs.tag_outputs(option, _tag(instance))
    return instance


def _tag(instance: PopRunInstance) -> str:
    return f".instance-{instance.index}-of-{instance.count}"
