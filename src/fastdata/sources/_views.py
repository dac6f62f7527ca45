"""A stream's view of its reader per epoch: the reader of the epoch, its unit rows, and where
each unit's rows start among all rows."""

from __future__ import annotations

from typing import NamedTuple, cast

import numpy as np

from fastdata.sources.base import PerEpochReader, Reader, declares

__all__ = ["EpochView", "EpochViews"]


class EpochView(NamedTuple):
    """The reader of an epoch, its units' rows, and each unit's first row index (the
    :data:`~fastdata.sources.base.INDEX` of its row 0; one more entry: the total)."""

    reader: Reader
    rows: tuple[int, ...]
    offsets: np.ndarray


class EpochViews:
    """The :class:`EpochView` of each epoch, asked of the reader once (filters may make
    counting its rows costly): one for all epochs, or, for a
    :class:`~fastdata.sources.base.PerEpochReader`, one per epoch, the two most recent kept
    (the epoch read and the one planned next)."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self._per_epoch = declares(reader, PerEpochReader)
        self._views: dict[int | None, EpochView] = {}

    def __call__(self, epoch: int) -> EpochView:
        """The view of ``epoch``.

        Raises:
            ValueError: the reader counts a negative number of rows in a unit.
        """
        key = epoch if self._per_epoch else None
        if key not in self._views:
            by_epoch = cast(PerEpochReader, self.reader)
            reader = self.reader if key is None else by_epoch.for_epoch(epoch)
            rows = tuple(int(n) for n in reader.unit_rows())
            if any(n < 0 for n in rows):
                raise ValueError(f"{reader!r} counts a negative number of rows in a unit")
            offsets = np.concatenate([[0], np.cumsum(rows, dtype=np.int64)])
            while len(self._views) >= 2:
                self._views.pop(next(iter(self._views)))
            self._views[key] = EpochView(reader, rows, offsets)
        return self._views[key]
