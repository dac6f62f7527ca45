"""What tells a cache entry (:mod:`fastdata.sources._cache`) from another version of its
remote file, or from damage: the version an fsspec filesystem gives where pyarrow reports no
modification time (:func:`fsspec_tag`), and a whole check of an entry's bytes against its
download's CRC-32, for when reading a cached copy failed (:func:`drop_damaged`).

A cached copy's bytes are checked whole only when its inode or mtime changed since its
download, or when a read of it failed: reading a whole file for a CRC-32 at every open
(2.1 GB/s) cost 0.17x to 0.52x of a stream's epoch over that file (85 MB, all columns to
three numeric ones), so bytes changed with the file's metadata kept, where the read still
succeeds, are not found."""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow.fs as pafs

from fastdata.sources._cache_disk import Entry, Lock, crc32_file, discard, entry_of, on_disk

__all__ = ["damaged", "drop_damaged", "fsspec_tag", "unversioned", "versioned"]

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


def drop_damaged(cache_dir: str, remote_type: str, path: str) -> tuple[str, str] | None:
    """After a read of ``path`` failed: ``(its cache entry's data file, what is wrong)``
    if the cache holds a copy of it whose bytes are not its download's (bit rot, a restore
    that kept the file's times), deleted now under its lock; None if it holds none, or an
    intact one (the remote file itself is then at fault)."""
    entry = entry_of(cache_dir, remote_type, path)
    if not os.path.exists(entry.data):
        return None
    with on_disk(cache_dir, path, entry.data), Lock(entry.lock):
        damage = damaged(entry)
        if damage is not None:
            discard(entry)  # by the lock's holder (see discard)
    return None if damage is None else (entry.data, damage)
