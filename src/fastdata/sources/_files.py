"""Turn a user's ``source`` into a filesystem and an ordered list of file paths.

One resolver for every source type (Parquet files, image lists, tar shards), local or remote:
a path, a directory (walked recursively, sorted), a glob, a list of any of these, a URI
(``s3://bucket/prefix/*.parquet``, ``file:///...``), a ``pyarrow.fs.FileSystem`` or an fsspec
filesystem passed as ``filesystem``, or a ``pyarrow.dataset.FileSystemDataset``.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

import pyarrow.fs as pafs

from fastdata.errors import SourceError

Source = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]

_GLOB_CHARS = set("*?[")
_HIDDEN_PREFIXES = (".", "_")  # pyarrow.dataset ignores these too (_SUCCESS, .crc, ...)


def as_filesystem(filesystem: Any) -> pafs.FileSystem | None:
    """A pyarrow filesystem for ``filesystem`` (pyarrow, fsspec, or None)."""
    if filesystem is None or isinstance(filesystem, pafs.FileSystem):
        return filesystem
    if hasattr(filesystem, "protocol") and hasattr(filesystem, "open"):  # fsspec
        return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
    raise TypeError(
        f"filesystem={filesystem!r}: expected a pyarrow.fs.FileSystem or an fsspec filesystem"
    )


def resolve_files(
    source: Any, *, filesystem: Any = None, suffixes: tuple[str, ...] = ()
) -> tuple[pafs.FileSystem, list[str]]:
    """The filesystem and the files ``source`` names, in a deterministic order.

    Directories and globs expand to the files below them, sorted, keeping only names ending
    in ``suffixes`` (all when empty) and skipping hidden/underscore names. Explicit file paths
    are kept as given, in the given order.

    Raises:
        SourceError: a path that does not exist, or a directory/glob that matches no file.
    """
    if hasattr(source, "files") and hasattr(source, "filesystem"):  # pyarrow FileSystemDataset
        return source.filesystem, list(source.files)
    fs = as_filesystem(filesystem)
    items = [source] if isinstance(source, str | os.PathLike) else list(source)
    if not items:
        raise SourceError("source is an empty list: pass at least one path, directory or glob")
    files: list[str] = []
    for item in items:
        item_fs, paths = _expand(os.fspath(item), fs, suffixes)
        if fs is None:
            fs = item_fs
        elif type(item_fs) is not type(fs):
            raise SourceError(
                "all paths of one source must be on the same filesystem; "
                f"{item!r} is on {type(item_fs).__name__}, earlier ones on {type(fs).__name__}",
                path=os.fspath(item),
            )
        files.extend(paths)
    assert fs is not None  # items is non-empty
    return fs, files


def _expand(
    item: str, fs: pafs.FileSystem | None, suffixes: tuple[str, ...]
) -> tuple[pafs.FileSystem, list[str]]:
    if fs is None:
        if "://" in item:
            fs, path = pafs.FileSystem.from_uri(item)
        else:
            fs, path = pafs.LocalFileSystem(), os.path.abspath(item)
    else:
        path = item.split("://", 1)[1] if "://" in item else item
    if _has_glob(path):
        return fs, _glob(fs, path, suffixes, shown=item)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.File:
        return fs, [path]
    if info.type == pafs.FileType.Directory:
        found = _walk(fs, path, suffixes)
        if not found:
            raise SourceError(
                f"directory holds no {_kinds(suffixes)} files: check the path or the suffixes",
                path=item,
            )
        return fs, found
    raise SourceError("no such file or directory", path=item)


def _has_glob(path: str) -> bool:
    return any(c in _GLOB_CHARS for c in path)


def _kinds(suffixes: tuple[str, ...]) -> str:
    return "/".join(suffixes) if suffixes else "matching"


def _walk(fs: pafs.FileSystem, base: str, suffixes: tuple[str, ...]) -> list[str]:
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    return sorted(
        info.path
        for info in infos
        if info.type == pafs.FileType.File
        and not any(part.startswith(_HIDDEN_PREFIXES) for part in _relative_parts(base, info.path))
        and (not suffixes or info.path.endswith(suffixes))
    )


def _relative_parts(base: str, path: str) -> tuple[str, ...]:
    return PurePath(path[len(base) :].lstrip("/")).parts


def _glob(fs: pafs.FileSystem, pattern: str, suffixes: tuple[str, ...], shown: str) -> list[str]:
    parts = pattern.split("/")
    fixed = next(i for i, part in enumerate(parts) if _has_glob(part))
    base = "/".join(parts[:fixed]) or "/"
    # Like glob: "*" stays within one directory level unless the pattern says "**".
    same_depth = "**" not in pattern
    found = [
        p
        for p in _walk(fs, base, suffixes)
        if fnmatch.fnmatchcase(p, pattern) and (not same_depth or p.count("/") == len(parts) - 1)
    ]
    if not found:
        raise SourceError("glob matched no files: check the pattern and the directory", path=shown)
    return found
