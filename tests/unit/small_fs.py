"""A small file system of the test's own, to fill up: a full disk made for real, not injected."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted(folder: Path, size: str = "1m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``folder`` (created) for the block, unmounted after it; the
    test is skipped where the machine refuses to mount one (not root, or a container without the
    capability)."""
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {(done.stderr or done.stdout).strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(mount: Path, leave: int) -> None:
    """Fill the file system at ``mount`` until ``leave`` bytes are free."""
    stats = os.statvfs(mount)
    free = stats.f_bavail * stats.f_frsize
    with (mount / "filler").open("wb") as out:
        out.write(b"\0" * max(free - leave, 0))


def read_only(mount: Path) -> None:
    """Remount the file system at ``mount`` read-only (writes then fail with EROFS, for real)."""
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True, capture_output=True)
