"""Writing files whole or not at all: results, reports and cached exports are never half-written.

A temporary file is written beside the target (``os.replace`` is atomic only within one file
system), flushed to disk, then renamed onto the target; on any failure it is removed and the target
is left as it was. The file gets the mode a plain ``open`` would give (0o666 less the umask), not
the private mode of ``tempfile``: caches and reports are shared.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """A temporary path beside ``target`` to write to, renamed onto it only if the block succeeds."""
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    temporary = Path(name)
    umask = os.umask(0)
    os.umask(umask)
    temporary.chmod(0o666 & ~umask)
    try:
        yield temporary
        temporary.replace(target)
    finally:
        temporary.unlink(missing_ok=True)


def write_bytes(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` whole, synced to disk before the rename, or not at all."""
    with atomic_path(target) as temporary, temporary.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def write_text(target: Path, text: str) -> None:
    """``write_bytes`` of ``text`` in UTF-8."""
    write_bytes(target, text.encode("utf-8"))
