"""A stand-in for Graphcore's ``popdist`` module (Poplar SDK 3.x), as section 0.4 and 5.1 of
``shared/reference/graphcore-sdk-api.md`` describe it (the popdist source itself is not public).

Module-level functions, as the SDK has them:

- ``isPopdistEnvSet()``: whether the process was launched by PopRun;
- ``init()``: records that it was called (the real one starts the MPI backend);
- ``getNumInstances()``, ``getInstanceIndex()``, ``getLocalInstanceIndex()``,
  ``getNumLocalReplicas()``, ``getNumTotalReplicas()``, ``getNumIpusPerReplica()``;
- ``getDeviceId(ipusPerReplica=0)``: the ``gc-info -l`` id of this instance's multi-IPU device;
- ``checkNumIpusPerReplica(n) -> bool``;
- ``execute_on_instances(instances, func, *args, **kwargs)``: ``func``'s result on the listed
  instances, ``None`` elsewhere.

Outside PopRun (the default, and after ``reset()``) they return single-process values: instance 0
of 1, one local replica of one, one IPU per replica. ``configure(...)`` simulates one instance of a
launch; ``configure_from_environ(environ)`` does the same from the JSON in ``FAKE_POPDIST`` (for
inner pytest runs). ``configure`` does not check its values: tests use that to give ``detect``
settings no real launch has.

Assumed, not documented: ``getDeviceId`` gives instance ``i`` the aligned group of IPUs
``[i * k, (i + 1) * k)`` with ``k = local replicas x IPUs per replica``, numbered as ``gc-info -l``
numbers devices (single IPUs, then pairs, then quads, ...).

``popdist.poptorch.Options(ipus_per_replica=None)``: the reference says it is presumably a
``poptorch.Options`` subclass that PopDist pre-configures with the local replicas, the process id and
count, and the device (the popdist source is not public); the fake is exactly that, built on first
access of ``popdist.poptorch`` (it imports ``poptorch``, which must then be importable: tests put
``tests.fakes.fake_poptorch`` in ``sys.modules``), so importing this module never imports torch.
Its options carry ``_configured_by_popdist``, which makes the PopTorch fake accept their
distributed compile: on hardware that compile is one replica group of a distributed replicated graph
(``globalReplicationFactor`` = instances x local replicas), whose every step PopART runs synchronised
with the other instances (``popdist::run``, popart ``willow/src/popx/devicex.cpp:248-250``). Not
imitated: the MPI backend, and that synchronisation (each fake instance runs alone; a test that
needs the coupling must arrange it).
"""

from __future__ import annotations

import importlib
import json
import os
import types
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

#: The environment variable ``configure_from_environ`` reads: a JSON object of ``configure`` keywords.
ENV = "FAKE_POPDIST"


@dataclass
class _State:
    launched: bool = False
    instance_index: Any = 0
    num_instances: Any = 1
    local_instance_index: Any = 0
    replicas_local: Any = 1
    replicas_total: Any = 1
    ipus_per_replica: Any = 1
    calls: list[str] = field(default_factory=list)


_STATE = _State()


def configure(
    instance_index: Any,
    num_instances: Any,
    *,
    local_instance_index: Any = None,
    replicas_local: Any = 1,
    replicas_total: Any = None,
    ipus_per_replica: Any = 1,
) -> None:
    """Pretend to be instance ``instance_index`` of ``num_instances`` of a PopRun launch.

    ``local_instance_index`` defaults to ``instance_index`` (every instance on one host) and
    ``replicas_total`` to ``replicas_local x num_instances``.
    """
    global _STATE
    _STATE = _State(
        launched=True,
        instance_index=instance_index,
        num_instances=num_instances,
        local_instance_index=instance_index if local_instance_index is None else local_instance_index,
        replicas_local=replicas_local,
        replicas_total=replicas_local * num_instances if replicas_total is None else replicas_total,
        ipus_per_replica=ipus_per_replica,
    )


def configure_from_environ(environ: Mapping[str, str] = os.environ) -> bool:
    """``configure(**json.loads(environ[ENV]))`` when the variable is set (else ``reset()``);
    whether it was set."""
    text = environ.get(ENV)
    if not text:
        reset()
        return False
    configure(**json.loads(text))
    return True


def reset() -> None:
    """Back outside PopRun, with no calls recorded (and ``popdist.poptorch`` built afresh)."""
    global _STATE, _POPTORCH
    _STATE = _State()
    _POPTORCH = None


def calls() -> list[str]:
    """The names of the functions called since the last ``configure`` or ``reset``, in order."""
    return list(_STATE.calls)


def _record(name: str) -> None:
    _STATE.calls.append(name)


def isPopdistEnvSet() -> bool:
    """Whether this process was launched by PopRun."""
    _record("isPopdistEnvSet")
    return _STATE.launched


def init() -> None:
    """Start the distributed backend (only recorded here)."""
    _record("init")


def getNumInstances() -> Any:
    """The launch's instance count (1 outside PopRun)."""
    _record("getNumInstances")
    return _STATE.num_instances


def getInstanceIndex() -> Any:
    """This instance's index in ``[0, getNumInstances())`` (0 outside PopRun)."""
    _record("getInstanceIndex")
    return _STATE.instance_index


def getLocalInstanceIndex() -> Any:
    """This instance's index among those on its host (0 if not set)."""
    _record("getLocalInstanceIndex")
    return _STATE.local_instance_index


def getNumLocalReplicas() -> Any:
    """The replicas this instance runs (1 if not set)."""
    _record("getNumLocalReplicas")
    return _STATE.replicas_local


def getNumTotalReplicas() -> Any:
    """The replicas of the whole launch (1 outside PopRun)."""
    _record("getNumTotalReplicas")
    return _STATE.replicas_total


def getNumIpusPerReplica() -> Any:
    """IPUs per replica (defaults to 1)."""
    _record("getNumIpusPerReplica")
    return _STATE.ipus_per_replica


def checkNumIpusPerReplica(n: int) -> bool:
    """Whether ``n`` matches the launch's IPUs per replica."""
    _record("checkNumIpusPerReplica")
    return bool(n == _STATE.ipus_per_replica)


def getDeviceId(ipusPerReplica: int = 0) -> int:
    """The ``gc-info -l`` id of this instance's device.

    The signature and "the device id of device suitable for PopDist" are documented (poprun user
    guide, Python API). Assumed, not documented: the device holds this instance's local replicas
    (``local replicas x ipusPerReplica`` IPUs, ``ipusPerReplica`` 0 meaning the launch's IPUs per
    replica), and instance ``i`` gets the ``i``-th aligned group of that size, numbered over the
    launch's IPUs as ``gc-info -l`` numbers devices (see the module docstring).
    """
    _record("getDeviceId")
    per_replica = ipusPerReplica or int(_STATE.ipus_per_replica)
    size = per_replica * int(_STATE.replicas_local)
    total = size * int(_STATE.num_instances)
    first_ipu = int(_STATE.instance_index) * size
    device_id, group = 0, 1
    while group < size:
        device_id += total // group
        group *= 2
    return device_id + first_ipu // size


def execute_on_instances(
    instances: Iterable[int], func: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """``func(*args, **kwargs)`` on the listed instances; ``None`` on the others."""
    _record("execute_on_instances")
    if _STATE.instance_index in set(instances):
        return func(*args, **kwargs)
    return None


# -- popdist.poptorch -------------------------------------------------------------------------------

#: ``popdist.poptorch`` once built, with the ``poptorch`` module its ``Options`` subclass.
_POPTORCH: tuple[types.ModuleType, types.ModuleType] | None = None


def __getattr__(name: str) -> Any:
    """``popdist.poptorch``, built on first access (PEP 562), as ``import popdist.poptorch`` gives it."""
    global _POPTORCH
    if name != "poptorch":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    poptorch = importlib.import_module("poptorch")
    if _POPTORCH is None or _POPTORCH[0] is not poptorch:
        _POPTORCH = (poptorch, _make_poptorch(poptorch))
    return _POPTORCH[1]


def _make_poptorch(poptorch: types.ModuleType) -> types.ModuleType:
    """A ``popdist.poptorch`` module whose ``Options`` subclasses ``poptorch.Options``."""

    class Options(poptorch.Options):  # type: ignore[name-defined,misc]
        """``popdist.poptorch.Options(ipus_per_replica=None)``: a ``poptorch.Options`` set up for this
        instance: ``replicationFactor(getNumLocalReplicas())``, ``Distributed.configureProcessId(
        getInstanceIndex(), getNumInstances())`` and ``useIpuId(getDeviceId(ipus_per_replica))``
        (``ipus_per_replica`` defaults to ``getNumIpusPerReplica()``). Which setters the real one
        calls is inferred from PopTorch's ``Distributed`` docstring, not read in its source."""

        _configured_by_popdist = True

        def __init__(self, ipus_per_replica: int | None = None) -> None:
            super().__init__()
            per_replica = getNumIpusPerReplica() if ipus_per_replica is None else ipus_per_replica
            self.replicationFactor(getNumLocalReplicas())
            self.Distributed.configureProcessId(getInstanceIndex(), getNumInstances())
            self.useIpuId(getDeviceId(per_replica))

    module = types.ModuleType(f"{__name__}.poptorch", "PopDist's PopTorch integration (fake).")
    module.Options = Options  # type: ignore[attr-defined]
    return module
