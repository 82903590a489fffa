"""Which process has attached which IPU on the fake host, shared by every process of a test.

On a real host the driver knows which process holds each IPU, and every process sees it:
gcipuinfo lists it as the IPU's ``"user process id"`` (a decimal string, absent while the IPU is
idle; reference ``graphcore-sdk-api.md`` section 0.3), gc-monitor as its PID, and an SDK will not
attach an IPU another process holds. The fakes are modules of one process each, so what the
driver would share lives in a JSON file (``{"ipu id": pid}``) named by ``ENV``: the fake PopTorch
records there the IPUs it attaches (in whichever process, worker processes included) and skips
those another live process holds, and the fake gcipuinfo lists their users from it. Without
``ENV`` nothing is shared, as before: each fake keeps its own state.

An entry whose process has ended is dropped when read, as the driver frees a dead process's IPUs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable
from collections.abc import Iterator
from pathlib import Path

#: The environment variable naming the shared file (inherited by worker and sampler processes).
ENV = "FAKE_GRAPHCORE_IPU_USERS"


def _path() -> Path | None:
    value = os.environ.get(ENV, "")
    return Path(value) if value else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.with_name(f"{path.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read(path: Path) -> dict[int, int]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {int(ipu): int(pid) for ipu, pid in raw.items() if _alive(int(pid))}


def _write(path: Path, users: dict[int, int]) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({str(i): p for i, p in sorted(users.items())}), encoding="utf-8")
    tmp.replace(path)  # readers never see half a file


def users() -> dict[int, int]:
    """IPU id -> the live process holding it (empty without ``ENV``)."""
    path = _path()
    if path is None:
        return {}
    with _locked(path):
        return _read(path)


def held_by_others(pid: int) -> set[int]:
    """The IPUs a live process other than ``pid`` holds."""
    return {ipu for ipu, user in users().items() if user != pid}


def attach(ipus: Iterable[int], pid: int) -> None:
    """Process ``pid`` now holds ``ipus`` (nothing without ``ENV``)."""
    path = _path()
    if path is None:
        return
    with _locked(path):
        current = _read(path)
        current.update({int(i): pid for i in ipus})
        _write(path, current)


def release(ipus: Iterable[int], pid: int) -> None:
    """Process ``pid`` no longer holds ``ipus`` (those another process holds are left alone)."""
    path = _path()
    if path is None:
        return
    with _locked(path):
        current = _read(path)
        for ipu in ipus:
            if current.get(int(ipu)) == pid:
                del current[int(ipu)]
        _write(path, current)
