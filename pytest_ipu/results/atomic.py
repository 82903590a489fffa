"""Writing files whole or not at all: results, reports and cached exports are never half-written.

A temporary file beside the target (``os.replace`` is atomic only within one file system) is flushed
to disk, then renamed onto it; on any failure it is removed and the target left as it was. It gets a
plain ``open``'s mode (0o666 less the umask, not ``tempfile``'s private one: reports are shared), or
an exact one where asked (the export cache's 0o644): it is created 0o666 for the kernel to apply the
umask, which is never changed, not even read, since it is process-wide and a file another thread
creates meanwhile would get the wrong mode. ``PendingFile`` does the same for a file another program
writes (``--benchmark-json``). ``write_new`` has the kernel claim a new name (a hard link, or an
exclusive create), so two writers choosing one name never both "succeed" with one file left.

Documented in docs/ci.md (section "Interrupted runs are never saved").
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(target: Path, mode: int | None = None) -> Iterator[Path]:
    """A temporary path beside ``target`` to write to, renamed onto it only if the block succeeds.

    The file gets ``mode`` exactly, or without it 0o666 less the umask.
    """
    # Created no wider than ``mode``: the umask can only narrow it, never widen it meanwhile.
    temporary = create_temporary(target, 0o666 if mode is None else mode)
    try:
        yield temporary
        # After the block: the umask may have narrowed ``mode``, and a block that recreates the
        # file would get the umask's; the rename publishes exactly ``mode``.
        if mode is not None:
            temporary.chmod(mode)
        temporary.replace(target)
    finally:
        temporary.unlink(missing_ok=True)


def create_temporary(target: Path, mode: int = 0o666) -> Path:
    """A new empty file ``.<target name>.<random>.tmp`` beside ``target``, of ``mode`` less the umask
    (the kernel applies it; ``tempfile.mkstemp`` would make it 0o600, private)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        path = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(path, flags, mode)
        except FileExistsError:
            continue  # another writer's temporary file: try the next name
        os.close(fd)
        return path
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", str(target.parent))


def write_bytes(target: Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``target`` whole, synced to disk before the rename, or not at all."""
    with atomic_path(target, mode) as temporary, temporary.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


#: What ``os.link`` gives on a file system without hard links (FAT, some network and FUSE file
#: systems): the name is then claimed by an exclusive create instead.
_NO_HARD_LINKS = frozenset(
    {errno.EPERM, errno.ENOSYS, errno.EMLINK, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}
)


def write_new(target: Path, data: bytes) -> None:
    """Write ``data`` whole as ``target``, a file that must not exist yet: ``FileExistsError`` when it
    does, also when another writer creates it at the same moment (never check-then-replace, which
    lets the second writer overwrite the first's file). Synced to disk before it is published."""
    temporary = create_temporary(target)
    try:
        with temporary.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            # A hard link publishes the whole file under a name only if that name is free.
            os.link(temporary, target)
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            # No hard links here: claim the name first (empty for a moment), then rename the whole
            # file onto it.
            claim = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            os.close(os.open(target, claim, 0o666))
            temporary.replace(target)
    finally:
        temporary.unlink(missing_ok=True)


def write_text(target: Path, text: str) -> None:
    """``write_bytes`` of ``text`` in UTF-8."""
    write_bytes(target, text.encode("utf-8"))


class PendingFile:
    """A file that another writer writes at ``temporary`` (beside ``target``, so the rename is atomic);
    ``commit`` renames it onto ``target`` once written whole, ``discard`` removes it.

    The temporary path is only named, not created: a writer that never writes leaves nothing, and
    the target keeps its previous content (or stays absent) until ``commit``.
    """

    def __init__(self, target: Path) -> None:
        self.target = target
        self.temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")

    def commit(self) -> bool:
        """Sync the written temporary file and rename it onto the target; ``False`` when nothing was
        written. Raises ``OSError`` (after removing the temporary file) when that fails."""
        try:
            with self.temporary.open("rb+") as handle:
                os.fsync(handle.fileno())
        except FileNotFoundError:
            return False
        except OSError:
            self.discard()
            raise
        try:
            self.temporary.replace(self.target)
        finally:
            self.discard()
        return True

    def discard(self) -> None:
        """Remove the temporary file, if any: whatever it holds may be half-written."""
        try:
            self.temporary.unlink()
        except OSError:
            # A read-only file system refuses even the removal of a file that was never created
            # (EROFS, not ENOENT): there is nothing to remove then.
            if os.path.lexists(self.temporary):
                raise
