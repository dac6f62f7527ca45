"""ImageFiles: image files listed up front; a unit is a block of consecutive files.

A unit's table holds the files' paths (and labels): the bytes are read by the decoder's
threads, so a shuffle window holds paths, not images.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from fastdata._validate import check_int
from fastdata.sources._files import Listing, paths_digest
from fastdata.sources.filesystem import digest

__all__ = ["IMG_EXTENSIONS", "ImageFiles"]

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
"""File endings an image folder is scanned for (torchvision's, compared case-insensitively);
also the image members of a tar sample, in this order of preference."""


class ImageFiles:
    """Image files as a :class:`fastdata.sources.Reader`: columns ``path`` (and ``label``).

    Args:
        listing: the files (:func:`fastdata.sources._files.resolve_files`).
        labels: one integer label per file, or None.
        files_per_unit: files per unit of the plan (the granularity of sharding and of the
            shuffle of unit order).
    """

    def __init__(self, listing: Listing, labels: list[int] | None, files_per_unit: int) -> None:
        paths = listing.paths
        if labels is not None and len(labels) != len(paths):
            raise ValueError(f"{len(labels)} labels for {len(paths)} files: give one per file")
        self.per_unit = check_int("files_per_unit", files_per_unit, minimum=1)
        self.fs, self.paths, self.sizes, self.labels = listing.fs, paths, listing.sizes, labels

    def unit_rows(self) -> list[int]:
        n = len(self.paths)
        return [min(self.per_unit, n - s) for s in range(0, n, self.per_unit)]

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        first = unit * self.per_unit
        columns = {"path": pa.array(self.paths[first + start : first + stop], pa.string())}
        if self.labels is not None:
            columns["label"] = pa.array(self.labels[first + start : first + stop], pa.int64())
        return pa.table(columns)

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
