"""Runs named the way ``pytest-benchmark compare`` names them: paths, saved-run ids and globs.

``resolve`` turns each argument into run files by pytest-benchmark's own rule: an existing file is
that file; otherwise it is ``FILE-GLOB`` or ``MACHINE-GLOB/FILE-GLOB`` in the storage, a trailing ``*``
dropped and ``*.json`` appended (an argument ending in ``.json`` names the file exactly), in every
machine folder (or the one named) and in the storage folder itself. Where pytest-benchmark loads
whatever matches, this module refuses what would mislead (``RunLookupError``).

The rule is documented in docs/ci.md (section "Comparing saved runs", its "Runs" paragraph).
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence
from pathlib import Path

#: pytest-benchmark's default storage, as its ``--benchmark-storage`` and ``--storage`` have it.
DEFAULT_STORAGE = "file://./.benchmarks"

#: What a message says of how to name a run, after naming the argument and the storage.
_HOW = (
    "give a pytest-benchmark JSON file, or a saved run's id ('0001', '0001_abc') or glob ('*/0001_*') "
    "from the storage (--storage picks another; 'pytest-benchmark list' lists its runs)"
)
#: How many matches an ambiguity message names.
_SHOWN = 3


class RunLookupError(ValueError):
    """An argument that names no run file, or several where one was meant; the message is one line
    naming the argument, the storage and the fix."""


def storage_path(uri: str) -> Path:
    """The folder of a storage given as a path or as pytest-benchmark's ``file://PATH``; raises
    ``RunLookupError`` for another kind of storage."""
    if uri.startswith("file://"):
        return Path(uri[len("file://") :] or ".")
    if "://" in uri:
        raise RunLookupError(
            f"--storage {uri!r}: only file storage can be read (a folder, or file://PATH such as "
            f"{DEFAULT_STORAGE!r}); export the runs to JSON files and give their paths"
        )
    return Path(uri)


def _is_glob(text: str) -> bool:
    return any(c in text for c in "*?[")


def _shown(storage: Path) -> str:
    """The storage as messages name it."""
    return str(storage) if storage.is_dir() else f"{storage} (which does not exist)"


def resolve(argument: str, storage: Path) -> list[Path]:
    """The run files ``argument`` names (the module docstring's rule), in pytest-benchmark's order;
    raises ``RunLookupError`` when it names none, or several without being a glob."""
    path = Path(argument)
    if path.is_file():
        return [path]
    where = _shown(storage)
    if path.is_dir():
        raise RunLookupError(f"{argument}: is a folder, not a run; {_HOW}")
    if path.exists():  # a FIFO, a socket or a device: it exists, and is no run
        raise RunLookupError(f"{argument}: is not a regular file, not a run; {_HOW}")
    parts = path.parts
    if path.is_absolute() or len(parts) > 2 or not parts:
        raise RunLookupError(f"{argument}: no such file, and not a saved-run id or glob of {where}; {_HOW}")
    found = _query(parts, storage)
    if not found:
        raise RunLookupError(f"{argument}: no such file, and no saved run in {where} matches it; {_HOW}")
    if len(found) > 1 and not _is_glob(argument):
        shown = ", ".join(str(_relative(f, storage)) for f in found[:_SHOWN])
        more = f" and {len(found) - _SHOWN} more" if len(found) > _SHOWN else ""
        first = _relative(found[0], storage)
        # The machine folder and run number tell runs apart; in the storage folder itself, the name.
        example = (
            first.parent / first.name.split("_", 1)[0] if first.parent != Path() else first.with_suffix("")
        )
        raise RunLookupError(
            f"{argument}: matches {len(found)} saved runs in {where} ({shown}{more}); name one as "
            f"MACHINE/ID (e.g. '{example.as_posix()}') or by its path, or give a glob to compare them all"
        )
    return found


def resolve_all(arguments: Iterable[str], storage: Path) -> list[Path]:
    """Every argument's run files in the order given; raises ``RunLookupError`` at the first that fails."""
    return [file for argument in arguments for file in resolve(argument, storage)]


def _query(parts: Sequence[str], storage: Path) -> list[Path]:
    """Files of ``storage`` matching ``[MACHINE-GLOB, ]FILE-GLOB``, sorted by name, then folder."""
    if not storage.is_dir():
        return []
    *machine, name = parts
    pattern = name if name.endswith(".json") else name.rstrip("*") + "*.json"
    folders = [f for f in storage.glob(machine[0]) if f.is_dir()] if machine else [storage]
    if not machine:
        # pytest-benchmark's CLI looks in every machine folder and in the storage folder itself.
        folders += sorted(f for f in storage.iterdir() if f.is_dir())
    found = {file for folder in folders for file in folder.glob(pattern) if file.is_file()}
    return sorted(found, key=lambda file: (file.name, str(file.parent)))


def _relative(file: Path, storage: Path) -> Path:
    try:
        return file.relative_to(storage)
    except ValueError:
        return file
