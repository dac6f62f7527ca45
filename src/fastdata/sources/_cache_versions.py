"""What tells a cache entry (:mod:`fastdata.sources._cache`) from another version of its
remote file, or from damage: the version an fsspec filesystem gives where pyarrow reports no
modification time (:func:`fsspec_tag`), and a whole check of an entry's bytes against its
download's CRC-32, for when reading a cached copy failed (:func:`drop_damaged`).

A cached copy's bytes are checked whole only when its inode or mtime changed since its
download, or when a read of it failed: reading a whole file for a CRC-32 at every open
(2.1 GB/s) cost 0.17x to 0.52x of a stream's epoch over that file (85 MB, all columns to
three numeric ones), so bytes changed with the file's metadata kept, where the read still
succeeds, are not found. Several reads of one damaged copy fail at once (a stream's
read-ahead threads, its workers): the first to check it deletes it, and the others, whose
copy is gone or replaced by then, read again too (:class:`Opened` knows what they read)."""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any

import pyarrow.fs as pafs

from fastdata.sources._cache_disk import Entry, Lock, crc32_file, discard, on_disk

__all__ = [
    "Copy", "Opened", "copy_of", "damaged", "drop_damaged", "fsspec_tag", "unversioned",
    "versioned",
]  # fmt: skip

log = logging.getLogger("fastdata")

Copy = tuple[int, int, int]  # a cached copy as os.stat sees it: inode, mtime (ns), size

# What an fsspec filesystem's info may say of a file's version, where pyarrow's FSSpecHandler
# finds no 'mtime' (s3fs: ETag, LastModified; gcsfs: generation, updated; adlfs:
# last_modified, etag; memory: created).
_VERSION_KEYS = (
    "ETag", "etag", "LastModified", "last_modified", "updated", "generation", "VersionId",
    "version_id", "mtime", "created",
)  # fmt: skip


def fsspec_tag(fs: pafs.FileSystem, path: str) -> str | None:
    """The version of ``path`` as an fsspec filesystem's info gives it (its ETag,
    LastModified, ... as JSON); None for other filesystems or where it gives none. s3fs
    answers from the listing it keeps: no request of its own."""
    if not (isinstance(fs, pafs.PyFileSystem) and isinstance(fs.handler, pafs.FSSpecHandler)):
        return None
    try:
        return _tag(fs.handler.fs.info(path))
    except OSError:  # gone: reading it says so
        return None


def versioned(
    fs: pafs.FileSystem, what: list[str] | pafs.FileSelector
) -> list[tuple[pafs.FileInfo, str | None]]:
    """``fs``'s info of each file of ``what`` (paths, or a selector), with its version where
    it has no mtime (:func:`fsspec_tag`). Paths on an fsspec filesystem are asked once
    each for both, their infos made as pyarrow's ``FSSpecHandler`` makes them: s3fs keeps
    no answer of a HEAD request, so asking again would be a request more a file."""
    handler = fs.handler if isinstance(fs, pafs.PyFileSystem) else None
    if not isinstance(what, pafs.FileSelector) and isinstance(handler, pafs.FSSpecHandler):
        return [_fsspec_info(handler.fs, path) for path in what]
    return [
        (info, None if info.mtime_ns is not None else fsspec_tag(fs, info.path))
        if info.type == pafs.FileType.File
        else (info, None)
        for info in fs.get_file_info(what)
    ]


def _fsspec_info(fs: Any, path: str) -> tuple[pafs.FileInfo, str | None]:
    try:
        info = fs.info(path)
    except FileNotFoundError:
        return pafs.FileInfo(path, pafs.FileType.NotFound), None
    kind = _KINDS.get(info["type"], pafs.FileType.Unknown)
    size = None if kind == pafs.FileType.Directory else info["size"]
    found = pafs.FileInfo(path, kind, size=size, mtime=info.get("mtime"))
    return found, _tag(info) if found.mtime_ns is None else None


_KINDS = {"file": pafs.FileType.File, "directory": pafs.FileType.Directory}


def _tag(info: dict[str, Any]) -> str | None:
    found = {key: str(info[key]) for key in _VERSION_KEYS if info.get(key) is not None}
    return json.dumps(found, sort_keys=True) if found else None


def unversioned(cache_dir: str, fs: pafs.FileSystem, path: str) -> str:
    """The warning for a remote ``fs`` that gives no version of its files (``path``)."""
    return (
        f"cache_dir={cache_dir!r} cannot tell versions of a file of this {fs.type_name} "
        f"filesystem apart ({path}): it reports no modification time, ETag or other "
        "version, so a cached copy of the listed size is used as it is. After rewriting "
        "files in the store, delete the cache folder (or pass another cache_dir=)"
    )


def damaged(entry: Entry) -> str | None:
    """What is wrong with the entry's bytes, read whole: its size and CRC-32 against its
    download's; None if it is intact, or gone."""
    try:
        with open(entry.meta, "rb") as f:
            meta = json.loads(f.read())
        size, crc = os.path.getsize(entry.data), crc32_file(entry.data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return f"it cannot be read ({exc})"
    if size != meta.get("size"):
        return f"{size} bytes, not {meta.get('size')}"
    return "its checksum does not match" if crc != meta.get("crc32") else None


def copy_of(data: str) -> Copy | None:
    """The copy at ``data`` (an entry's data file) now; None if there is none."""
    try:
        stat = os.stat(data)
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


class Opened:
    """The copies of each cache entry that a process has opened (:func:`drop_damaged`);
    thread-safe. A handful an entry: a copy is replaced only when damaged or evicted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._copies: dict[str, set[Copy]] = {}

    def add(self, key: str, copy: Copy | None) -> None:
        if copy is not None:
            with self._lock:
                self._copies.setdefault(key, set()).add(copy)

    def of(self, key: str) -> frozenset[Copy]:
        with self._lock:
            return frozenset(self._copies.get(key, ()))


def drop_damaged(entry: Entry, path: str, opened: frozenset[Copy]) -> tuple[bool, bool]:
    """After a read of ``path`` failed, having opened the copies ``opened`` of its cache
    entry (none: it read the remote): ``(whether to read it again, whether the copy was
    damaged)``. A copy whose bytes are not its download's (bit rot, a restore that kept the
    file's times) is deleted now under its lock, and logged. The read is also done again
    when a copy it may have read is gone or replaced since (another reader found it damaged
    first, or it was evicted): the copy there now may be intact. Only a failure on the copy
    there now, intact and the only one opened, is the remote file's: that read raises."""
    if not opened:
        return False, False
    damage = None
    with on_disk(entry.cache_dir, path, entry.data):
        if copy_of(entry.data) in opened:  # perhaps the copy read: check it, under its lock
            with Lock(entry.lock):
                damage = damaged(entry) if copy_of(entry.data) in opened else None
                if damage is not None:
                    discard(entry)  # by the lock's holder (see discard)
        now = copy_of(entry.data)
    if damage is not None:
        log.warning(
            "fastdata: reading the cache entry %s of %s failed and it is corrupt (%s): "
            "fetching it again",
            entry.data,
            path,
            damage,
        )
        return True, True
    return bool(opened - {now}), False
