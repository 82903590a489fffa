"""The run's backends: one per target, made on first use (a conftest's ``pytest_ipu_make_backend``
first, the built-in registry last) and asked once whether it can run here; under
``--ipu-backend=auto``, which default targets are present and why the others are not.

Made by the first test on a backend (``IpuSession.run_backends``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_ipu.errors import BackendUnavailable

if TYPE_CHECKING:
    from pytest_ipu.backends.base import Availability
    from pytest_ipu.backends.base import Backend
    from pytest_ipu.backends.target import Target
    from pytest_ipu.pytest_plugin.settings import Settings


class RunBackends:
    """The backends of one pytest run, by target (an ordinary class: it holds backends, not values)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        #: Every target asked for, its backend (``None``: nobody makes it) and whether it runs here.
        self.backends: dict[Target, tuple[Backend | None, Availability]] = {}
        #: Under ``auto``, once asked: the default targets present, and those absent with the reason.
        self.auto: tuple[list[Target], list[tuple[Target, str]]] | None = None

    def backend(self, target: Target) -> tuple[Backend | None, Availability]:
        """The backend for ``target`` (made once per run) and whether it can run here."""
        if target not in self.backends:
            from pytest_ipu import backends
            from pytest_ipu.backends.base import Availability

            # A conftest's implementation first; the built-in registry answers last.
            made = self.config.hook.pytest_ipu_make_backend(config=self.config, target=target)
            if made is None:
                made = backends.make_backend(
                    target,
                    self.settings.cache_dir,
                    (self.settings.torch_threads, self.settings.torch_interop_threads),
                )
            found: Backend | None = made
            availability = (
                made.availability()
                if made is not None
                else Availability.no(backends.unknown_backend_reason(target))
            )
            self.backends[target] = (found, availability)
        return self.backends[target]

    def backend_for(self, name: str, device: str | None) -> Backend:
        """The backend for ``name:device``, made once per run; ``BackendUnavailable`` (the test skips)
        when it cannot run here."""
        from pytest_ipu.backends.target import Target

        target = Target(name, device)
        backend, availability = self.backend(target)
        if backend is None or not availability.ok:
            raise BackendUnavailable(f"pytest-ipu: target {target} is not available: {availability.reason}")
        return backend

    def auto_targets(self) -> tuple[list[Target], list[tuple[Target, str]]]:
        """``--ipu-backend=auto``: the default targets present here, and those absent with the reason."""
        if self.auto is None:
            from pytest_ipu import backends

            present, absent = [], []
            for target in backends.auto_candidates():
                _, availability = self.backend(target)
                if availability.ok:
                    present.append(target)
                else:
                    absent.append((target, availability.reason))
            self.auto = (present, absent)
        return self.auto

    def targets_for(self, requested: tuple[Target, ...]) -> list[Target]:
        """Targets to parametrize: as requested, or for ``auto`` every default target present.

        When ``auto`` finds nothing, every candidate is returned, so the tests skip (or fail under
        ``--ipu-missing-sdk=fail``) with the reason instead of silently not existing.
        """
        if requested:
            return list(requested)
        present, absent = self.auto_targets()
        return present or [t for t, _ in absent]
