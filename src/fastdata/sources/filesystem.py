"""What the sources and the dataset writer share about files: a user's ``filesystem=`` as a
pyarrow filesystem, the size of the pieces a file is copied in, deleting a file that may be
gone already, the short content hash that states and written datasets record, and the name
of the shard writer's record of a conversion."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from typing import Any

import pyarrow.fs as pafs

__all__ = ["CHUNK", "MANIFEST", "as_filesystem", "digest", "unlink"]

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
