"""Counts of what a stream's items hold (packed tokens and padding, rows or tokens of each
source of a mix), kept so that they say what the training loop received, not what workers
made ahead of it.

A decoder adds to its :class:`Tally` as it makes an item (:meth:`Tally.add`); the stream
marks each item it yields (:meth:`Tally.track`): the counts up to then are the item's. Where
the items go is the reader's to know:

- iterated directly (the main process, no loader; or a worker of a loader that does not
  report, such as torch's own DataLoader), an item counts once the stream yields it: into the
  reader's own row of a shared table (one writer per row, so workers never race);
- under ``fastdata.DataLoader`` (which sets :attr:`Tally.reporting` while it makes its
  workers), each batch carries its reader's counts up to its last item, taken when the batch
  is collated, to the consumer: the loader's :class:`Delivery` adds them to
  :attr:`Tally.delivered` when the consumer gets the batch, so prefetching changes nothing.
  What a reader counts after its last item (documents dropped after its last batch, the
  short batch ``drop_last`` drops) has no batch to travel with: it is left in the reader's
  row, and counted once the consumer sees the epoch end.

A stream's counts add up over all its iterations (:meth:`Tally.totals`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from fastdata._env import worker_slot

__all__ = ["Delivery", "Tally", "counts_of"]

# rows of the shared table: the main process and as many workers as a loader resumes (each
# worker its own row: two sharing one would count their left-over rows twice)
_MAX_READERS = 4097
_LEFT, _DIRECT = 0, 1  # a reader's row: counts after its last item (reported); delivered


def counts_of(values: np.ndarray, width: int) -> np.ndarray:
    """How many of ``values`` (integers in ``[0, width)``) are 0, 1, ... ``width - 1``.

    For a few values one comparison each: ``np.bincount`` costs about 12 us a call on a
    4,096-row int16 batch whatever ``width`` is (it casts and scans first), a comparison
    about 2 us; a mix counts its sources once per batch in the training process."""
    if width > 4:
        return np.bincount(values, minlength=width)
    return np.array([np.count_nonzero(values == k) for k in range(width)], dtype=np.int64)


def reader_row(worker: int | None = None) -> int:
    """The shared table's row of the calling reader (``worker``: of that DataLoader worker):
    0 for the main process, 1 + the worker id for a worker."""
    if worker is None:
        worker = worker_slot()[0] if get_worker_info() is not None else -1
    if worker + 1 >= _MAX_READERS:
        raise ValueError(f"worker {worker}: a stream counts for at most {_MAX_READERS - 1} workers")
    return worker + 1


class Tally:
    """A stream's counts of ``width`` numbers (see the module docstring)."""

    def __init__(self, width: int) -> None:
        self.width = width
        # What the consumer of a fastdata.DataLoader got (written by the consumer alone).
        self.delivered = torch.zeros(width, dtype=torch.int64).share_memory_()
        self.readers = torch.zeros(_MAX_READERS, 2, width, dtype=torch.int64).share_memory_()
        # Set while a fastdata.DataLoader makes its iterator: the readers it starts (worker
        # copies, or this process with num_workers=0) report their counts with each batch.
        self.reporting = False
        self._running = np.zeros(width, np.int64)  # this copy's iteration: counted so far
        self._made = np.zeros(width, np.int64)  # ... up to the last item yielded

    def add(self, what: Any, n: Any) -> None:
        """Count ``n`` at ``what`` (an index, a slice or an index array), for the item being
        made."""
        self._running[what] += n

    def track(self, items: Iterator[Any]) -> Iterator[Any]:
        """``items`` (a reader's iteration), each marked as made when yielded; whether a
        loader reports them is decided now (the loader calls ``iter()`` as it makes its
        iterator)."""
        return self._tracked(items, self.reporting)

    def _tracked(self, items: Iterator[Any], reporting: bool) -> Iterator[Any]:
        running = self._running = np.zeros(self.width, np.int64)
        made = self._made = np.zeros(self.width, np.int64)
        row = self.readers[reader_row()].numpy()
        if reporting:
            row[_LEFT] = 0
        for item in items:
            if not reporting:
                row[_DIRECT] += running - made
            made[:] = running
            yield item
        row[_LEFT if reporting else _DIRECT] += running - made

    def counted(self) -> np.ndarray:
        """This reader's counts of its current iteration so far (items being made too)."""
        return self._running.copy()

    def made(self) -> np.ndarray:
        """This reader's counts up to its last item (per iteration): what a batch of it
        collated now carries."""
        return self._made.copy()

    def totals(self) -> list[int]:
        """The counts of everything delivered, over all iterations and workers."""
        direct = self.readers[:, _DIRECT].sum(dim=0)
        return [int(x) for x in (self.delivered + direct).tolist()]


class Delivery:
    """The consumer's side of a :class:`Tally` for one iteration of a loader with
    ``readers`` readers (``in_process``: the main process reads, ``num_workers=0``)."""

    def __init__(self, tally: Tally, readers: int, *, in_process: bool) -> None:
        self.tally = tally
        self.rows = [reader_row(-1)] if in_process else [reader_row(w) for w in range(readers)]
        self.seen = np.zeros((readers, tally.width), np.int64)  # each reader's last report
        self.ended = False

    def handed(self, worker: int, made: np.ndarray) -> None:
        """The consumer got a batch of ``worker`` whose reader had made ``made`` with it."""
        delivered = self.tally.delivered.numpy()
        delivered += made - self.seen[worker]
        self.seen[worker] = made

    def end(self) -> None:
        """The consumer saw the epoch end: every reader finished; count what each left after
        its last item."""
        if self.ended:
            return
        self.ended = True
        delivered = self.tally.delivered.numpy()
        delivered += self.tally.readers[self.rows, _LEFT].sum(dim=0).numpy()
