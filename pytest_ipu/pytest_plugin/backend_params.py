"""Which targets a test runs on: ``ipu_backend``'s parametrization over them, and the refusal of a
target whose backend or device nobody provides (a one-line usage error naming where it came from).

Loaded by ``Lifecycle``'s collection hooks when a run names targets or has a test on a backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest

from pytest_ipu.pytest_plugin import options

if TYPE_CHECKING:
    from pytest_ipu.backends.target import Target
    from pytest_ipu.pytest_plugin.session import IpuSession


def parametrize(metafunc: pytest.Metafunc, session: IpuSession) -> None:
    """Parametrize a test that uses ``ipu_backend`` over its targets (unless it does it itself): its
    marker's ``backend=``, else the run's."""
    if parametrizes(metafunc, "ipu_backend"):
        return
    requested = session.settings.targets
    for mark in metafunc.definition.iter_markers("ipu"):
        if "backend" in mark.kwargs:
            from pytest_ipu.pytest_plugin.option_values import parse_targets

            try:
                requested = parse_targets(mark.kwargs["backend"])
            except ValueError:
                return  # reported with the node id at collection (pytest_collection_modifyitems)
            break
    targets = session.run_backends.targets_for(requested)
    metafunc.parametrize("ipu_backend", targets, indirect=True, ids=[t.id for t in targets])


def refuse_unprovided(
    config: pytest.Config, requested: Sequence[Target], items: Sequence[pytest.Item]
) -> None:
    """Refuse (``pytest.UsageError``) a target nobody provides: one of the option's (``requested``),
    or one a collected test runs on."""
    provided: dict[Target, bool] = {}

    def unprovided(target: Target) -> str | None:
        """Why nobody provides ``target``, or None when the registry or a conftest does."""
        from pytest_ipu import backends  # only when a target is named: not at every start-up

        reason = backends.unknown_target_reason(target)
        if reason is None:
            return None
        if target not in provided:
            # Only a conftest's implementation can make a target the registry does not know.
            provided[target] = config.hook.pytest_ipu_make_backend(config=config, target=target) is not None
        return None if provided[target] else reason

    # The option's own targets, whatever the tests use: a typo in --ipu-backend is a usage error
    # even in a suite of plain callables that never asks for ``ipu_backend``.
    for target in requested:
        reason = unprovided(target)
        if reason is not None:
            value, source = options.value_and_source(config, "targets")
            raise pytest.UsageError(
                f"pytest-ipu: invalid value {value!r} for --ipu-backend from {source}: {reason}"
            )
    for item in items:
        param = _target_param(item)
        if param is None:
            continue
        reason = unprovided(param)
        if reason is not None:
            raise pytest.UsageError(f"pytest-ipu: {_target_origin(config, item)}: {reason}")


def _target_param(item: pytest.Item) -> Target | None:
    """The ``ipu_backend`` parameter of ``item`` as a target; ``None`` when it has none or it is
    malformed (the fixture reports that, naming the test)."""
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("ipu_backend") if callspec is not None else None
    if param is None:
        return None
    from pytest_ipu.backends.target import Target
    from pytest_ipu.backends.target import parse_target

    if isinstance(param, Target):
        return param
    if isinstance(param, str):
        try:
            return parse_target(param)
        except ValueError:
            return None
    return None


def _target_origin(config: pytest.Config, item: pytest.Item) -> str:
    """Where ``item``'s target came from, as the start of a message: its own parametrize, its
    marker, or the ``--ipu-backend`` option (with the option's source)."""
    if parametrizes(item, "ipu_backend"):
        param = item.callspec.params["ipu_backend"]  # type: ignore[attr-defined]
        return f"{item.nodeid}: invalid value {str(param)!r} for the ipu_backend parameter"
    for mark in item.iter_markers("ipu"):
        if "backend" in mark.kwargs:
            value = mark.kwargs["backend"]
            return f"{item.nodeid}: invalid value {value!r} for @pytest.mark.ipu(backend=...)"
    value, source = options.value_and_source(config, "targets")
    return f"invalid value {value!r} for --ipu-backend from {source}"


def parametrizes(node: pytest.Item | pytest.Metafunc, name: str) -> bool:
    """Whether ``node`` (a test, or the test being generated) parametrizes ``name`` itself."""
    markers = node.definition.iter_markers if isinstance(node, pytest.Metafunc) else node.iter_markers
    for mark in markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        listed = names if isinstance(names, (list, tuple)) else [n.strip() for n in str(names).split(",")]
        if name in listed:
            return True
    return False
