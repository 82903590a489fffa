"""A benchmark target: which backend runs the model, on which device (``torch:cuda:0``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"^[a-z][a-z0-9_.-]*$")
_DEVICE = re.compile(r"^[a-z][a-z0-9_-]*(:[0-9]+)?$")


@dataclass(frozen=True)
class Target:
    """A backend name and an optional device, written ``name`` or ``name:device``.

    ``device`` is ``None`` when the backend should choose (the torch backend picks ``cpu``).
    """

    backend: str
    device: str | None = None

    def __str__(self) -> str:
        return self.backend if self.device is None else f"{self.backend}:{self.device}"

    @property
    def id(self) -> str:
        """The form used in test ids: ``torch-cuda0`` (no ``:``, which pytest node ids reserve)."""
        return str(self).replace(":", "-", 1).replace(":", "")

    @property
    def device_kind(self) -> str | None:
        """The device without its index: ``cuda`` for ``cuda:1``, ``ipu`` for ``ipu``; ``None`` when unset."""
        return None if self.device is None else self.device.partition(":")[0]


def parse_target(text: str) -> Target:
    """Parse ``name`` or ``name:device``; raise ``ValueError`` saying what a target looks like."""
    name, colon, device = text.strip().partition(":")
    if not _NAME.match(name) or (colon and not _DEVICE.match(device)):
        raise ValueError(
            f"expected a backend target such as 'torch', 'torch:cpu' or 'torch:cuda:0', got {text!r}"
        )
    return Target(name, device or None)
