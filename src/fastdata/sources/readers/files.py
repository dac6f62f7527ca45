"""ImageFiles: image files listed up front; a unit is a block of consecutive files.

A unit's table holds the files' encoded bytes (and labels), read through the listing's
filesystem: so a cache wrapping it (:func:`fastdata.sources.with_cache`) sees, fetches and
counts every image file, and the decoder only decodes. The stream reads tables ahead on its
own threads (``read_ahead``) while the decoder works on the ones before; the files of a
table on a remote filesystem are read on a small pool of threads (:data:`READ_THREADS`), so
the store serves several requests at once.

A file that cannot be read raises a :class:`fastdata.SourceError` naming it (``on_error=
"raise"``), or (``"skip"``) its row's image is null, which the image decoder counts and
leaves out as a bad image; the cause is logged here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from fastdata._validate import check_choice, check_int
from fastdata.errors import SourceError
from fastdata.sources._files import Listing, paths_digest
from fastdata.sources.filesystem import digest
from fastdata.workers import ThreadPools

__all__ = ["IMG_EXTENSIONS", "READ_THREADS", "ImageFiles"]

log = logging.getLogger("fastdata")

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
"""File endings an image folder is scanned for (torchvision's, compared case-insensitively);
also the image members of a tar sample, in this order of preference."""

READ_THREADS = 8
"""Threads reading one process's image files at once from a remote filesystem: requests to
object storage wait on the network, so several in flight keep the store busy. Local files
are read one after the other (from the page cache, 40-50 us each: handing them to threads
cost twice that)."""

_UNREADABLE = (OSError, pa.ArrowException)  # what opening or reading a file raises


class ImageFiles:
    """Image files as a :class:`fastdata.sources.Reader` (and a
    :class:`~fastdata.sources.RowReader`: any file is as cheap to read as the next): columns
    ``image`` (the file's bytes, ``large_binary``) and, with labels, ``label``.

    Args:
        listing: the files (:func:`fastdata.sources._files.resolve_files`).
        labels: one integer label per file, or None.
        files_per_unit: files per unit of the plan (the granularity of sharding and of the
            shuffle of unit order).
        on_error: ``"raise"``: a file that cannot be read is a :class:`fastdata.SourceError`
            naming it; ``"skip"``: its image is null (the image decoder counts it as a bad
            image and leaves it out), the cause logged.
    """

    def __init__(
        self,
        listing: Listing,
        labels: list[int] | None,
        files_per_unit: int,
        *,
        on_error: Literal["raise", "skip"] = "raise",
    ) -> None:
        paths = listing.paths
        if labels is not None and len(labels) != len(paths):
            raise ValueError(f"{len(labels)} labels for {len(paths)} files: give one per file")
        self.per_unit = check_int("files_per_unit", files_per_unit, minimum=1)
        self.fs, self.paths, self.sizes, self.labels = listing.fs, paths, listing.sizes, labels
        self.on_error = check_choice("on_error", on_error, ("raise", "skip"))
        self._local = isinstance(self.fs, pafs.LocalFileSystem)  # pooled reads cost more there
        self._pools = ThreadPools()

    def unit_rows(self) -> list[int]:
        n = len(self.paths)
        return [min(self.per_unit, n - s) for s in range(0, n, self.per_unit)]

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        first = unit * self.per_unit
        return self._table(range(first + start, first + stop))

    def read_rows(self, units: np.ndarray, rows: np.ndarray) -> pa.Table:
        """The files of rows ``rows[i]`` of units ``units[i]`` (:class:`RowReader`): a
        shuffled window is read file by file in its order, not copied to be permuted."""
        return self._table((units * self.per_unit + rows).tolist())

    def _table(self, rows: Sequence[int]) -> pa.Table:
        """The table of the files ``rows`` (indices into :attr:`paths`)."""
        columns = {"image": self._images(rows)}
        if self.labels is not None:
            columns["label"] = pa.array([self.labels[row] for row in rows], pa.int64())
        return pa.table(columns)

    def _images(self, rows: Sequence[int]) -> pa.Array:
        """The files of ``rows`` as one ``large_binary`` array, each read straight into its
        place in one buffer (no bytes object per file, no copy into Arrow: fewer fresh
        pages than a copy, in the new worker processes of every epoch)."""
        offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([self.sizes[row] for row in rows], out=offsets[1:])
        data = pa.allocate_buffer(int(offsets[-1]))
        places = np.frombuffer(data, np.uint8)
        slots = [places[offsets[i] : offsets[i + 1]] for i in range(len(rows))]
        paths = [self.paths[row] for row in rows]
        if len(rows) > 1 and not self._local:
            pool = self._pools.get("files", READ_THREADS)
            read = list(pool.map(self._read_into, paths, slots))
        else:
            read = [self._read_into(path, slot) for path, slot in zip(paths, slots, strict=True)]
        valid = None if all(read) else pa.array(read, pa.bool_()).buffers()[1]
        return pa.Array.from_buffers(
            pa.large_binary(), len(rows), [valid, pa.py_buffer(offsets), data]
        )

    def _read_into(self, path: str, slot: np.ndarray) -> bool:
        """Read the file at ``path`` into ``slot`` (its size when listed); False when it
        cannot be read under ``on_error="skip"``."""
        try:
            with self.fs.open_input_file(path) as f:
                size = f.size()
                if size != len(slot):
                    raise OSError(
                        f"its size changed since the stream listed it ({len(slot)} bytes, now "
                        f"{size}): the files must not change while a stream reads them"
                    )
                if f.readinto(slot) != size:
                    raise OSError(f"it ended before its {size} bytes")
            return True
        except _UNREADABLE as exc:
            if self.on_error == "raise":
                raise SourceError(f"cannot read ({exc})", path=path) from exc
            log.info("cannot read %s (%s): its image is skipped (on_error='skip')", path, exc)
            slot[:] = 0
            return False

    def location(self, unit: int, row: int) -> dict[str, Any]:
        return {"path": self.paths[unit * self.per_unit + row]}

    def identity(self) -> dict[str, Any]:
        return {
            "files": len(self.paths),
            "paths": paths_digest(self.paths),
            "labels": None if self.labels is None else digest(self.labels),
            "files_per_unit": self.per_unit,
            "content": digest(self.sizes),
        }

    def __repr__(self) -> str:
        return f"ImageFiles({len(self.paths)} files)"
