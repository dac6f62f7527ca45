"""What the sources and the dataset writer share about files: a user's ``filesystem=`` as a
pyarrow filesystem, the size of the pieces a file is copied in, deleting a file that may be
gone already, the short content hash that states and written datasets record, the name
of the shard writer's record of a conversion, and how a folder's files are listed (by the
streams, and by the writer checking its destination)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import PurePath
from typing import Any

import pyarrow.fs as pafs

from fastdata.errors import SourceError

__all__ = ["CHUNK", "MANIFEST", "as_filesystem", "below", "digest", "unlink", "walk"]

_HIDDEN_PREFIXES = (".", "_")  # pyarrow.dataset ignores these too (_SUCCESS, .crc, ...)
CHUNK = 8 << 20  # bytes per read while copying or checksumming

MANIFEST = "_fastdata_shards.json"
"""The record fastdata's shard writer (:mod:`fastdata.writer`) keeps in its destination: the
conversion's plan and every shard's name, sample count and digest, written before the first
shard. Its leading ``_`` keeps streams from reading it; a folder read whole is checked
against it, and refused while shards it lists are missing."""


def as_filesystem(filesystem: Any) -> pafs.FileSystem | None:
    """A pyarrow filesystem for ``filesystem`` (pyarrow, fsspec, or None)."""
    if filesystem is None or isinstance(filesystem, pafs.FileSystem):
        return filesystem
    if hasattr(filesystem, "protocol") and hasattr(filesystem, "open"):  # fsspec
        return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
    raise TypeError(
        f"filesystem={filesystem!r}: expected a pyarrow.fs.FileSystem or an fsspec filesystem"
    )


def digest(value: Any) -> str:
    """16 hex digits of the SHA-256 of ``value`` as canonical JSON."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def unlink(path: str) -> None:
    """Delete ``path`` if it is there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def walk(
    fs: pafs.FileSystem, base: str, suffixes: tuple[str, ...], *, hidden: bool = False
) -> list[tuple[str, int]]:
    """``(path, size)`` of the files below ``base`` whose names end in ``suffixes``
    (case-insensitively; all when empty), sorted by path; names starting with ``.`` or ``_``
    (and what is below them) only with ``hidden``."""
    if isinstance(fs, pafs.LocalFileSystem):
        found = _walk_local(base, hidden)
    else:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        found = [
            (info.path, int(info.size or 0))
            for info in infos
            if info.type == pafs.FileType.File
            and (hidden or all(_visible(part) for part in PurePath(below(base, info.path)).parts))
        ]
    return sorted((p, n) for p, n in found if _suffixed(p, suffixes))


def below(base: str, path: str) -> str:
    """``path``, listed below the folder ``base``, relative to it, however the filesystem
    spells ``base``: fsspec lists a relative one with a root "/" (its memory filesystem:
    ``/ds/out/x`` for ``ds/out``) or made absolute (its local filesystem)."""
    if path.startswith(base):
        return path[len(base) :].lstrip("/" + os.sep)
    rest = path.lstrip("/")
    for spelled in (os.path.abspath(base), base):  # the longer first: "tmp" is in /x/tmp/tmp
        top = spelled.strip("/")
        if not top or rest.startswith(f"{top}/"):
            return rest[len(top) :].lstrip("/")
    return path[len(base) :].lstrip("/")


def _visible(name: str) -> bool:
    return not name.startswith(_HIDDEN_PREFIXES)


def _suffixed(path: str, suffixes: tuple[str, ...]) -> bool:
    """Whether ``path`` ends in one of ``suffixes`` (case-insensitively; any when empty)."""
    return not suffixes or path.lower().endswith(tuple(s.lower() for s in suffixes))


def _walk_local(base: str, hidden: bool) -> list[tuple[str, int]]:
    """The files below a local directory (the visible ones unless ``hidden``). Symbolic
    links are followed, but each directory is entered once, by its first path in sorted
    order: a link back up the tree (a loop) or a second link to one directory adds nothing.
    A link that leads nowhere is listed (with size 0), as torchvision's ImageFolder lists
    it: reading it then fails naming it (or ``on_error="skip"`` counts it), where leaving
    it out would lose a sample silently."""
    found: list[tuple[str, int]] = []
    seen: set[tuple[int, int]] = set()
    pending = [base]
    while pending:
        directory = pending.pop()
        try:
            stat = os.stat(directory)
            if (stat.st_dev, stat.st_ino) in seen:
                continue
            seen.add((stat.st_dev, stat.st_ino))
            entries = sorted(os.scandir(directory), key=lambda e: e.name, reverse=True)
        except OSError as exc:
            raise SourceError(f"cannot list the directory ({exc})", path=directory) from exc
        for entry in entries:
            if not hidden and not _visible(entry.name):
                continue
            if entry.is_dir():
                pending.append(entry.path)
            elif entry.is_file():
                found.append((entry.path, entry.stat().st_size))
            elif entry.is_symlink():  # dangling (or a loop): listed, so reading it names it
                found.append((entry.path, 0))
    return found
