"""Tar shards written member by member for the reader tests (plain or compressed whole)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path


def write_tar(path: Path, members: list[tuple[str, bytes]], mode: str = "w") -> Path:
    """A tar shard of ``members`` (name, bytes), in order; ``mode`` ``"w:gz"`` etc. compresses
    it whole."""
    with tarfile.open(path, mode) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path
