"""Where the readers of a varying stream are: shared positions, written by the readers.

A decoder that takes a varying number of rows per item (packing) cannot have its position
derived from item counts, as the plan derives a fixed batch's rows. Instead each reader
writes, after every item, the position it reached — ``(rows fully taken, offset into the
next row)`` — into a small ring in shared memory, one per reader slot, and the loader reads
the entry of the last item it handed out from that reader (it knows which worker each batch
came from). The ring holds more positions than batches can be in flight.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from fastdata.sources.state import Resume

__all__ = ["Cursors"]

Position = tuple[int, int]
_MAX_SLOTS = 256  # DataLoader workers per rank whose positions are kept
_RING = 256  # positions kept per slot: more than the batches in flight


class Cursors:
    """The positions of one rank's readers (see the module docstring)."""

    def __init__(self) -> None:
        self.ring = torch.zeros(_MAX_SLOTS, _RING, 2, dtype=torch.int64).share_memory_()
        self.own: Position = (0, 0)  # this process's own reader (num_workers=0)

    def track(
        self, items: Iterator[tuple[Any, Position]], slot: int, start: Position
    ) -> Iterator[Any]:
        """``items`` (with the position each reached, counted from ``start``), writing the
        position after every one."""
        ring = self.ring[slot % _MAX_SLOTS].numpy()
        self.own = start
        for k, (item, (rows, into)) in enumerate(items):
            self.own = (start[0] + rows, into)
            ring[k % _RING] = self.own
            yield item

    def positions(
        self, delivered: list[int], next_reader: int, start: Resume | None
    ) -> tuple[int, list[Position]]:
        """The next slot, and each slot's position once reader ``w`` (DataLoader worker, or
        this process) delivered ``delivered[w]`` items since the iteration began at
        ``start`` (None: the epoch's start), read from the ring, which readers in this
        process write too: one DataLoader worker is not this process, whatever
        ``len(delivered)``."""
        readers = len(delivered)
        rotation, found = 0, [(0, 0)] * readers
        if start is not None:
            rotation, found = start.rotation, list(zip(start.consumed, start.offsets, strict=True))
        for worker, count in enumerate(delivered):
            slot = (worker + rotation) % readers
            if count:
                rows, into = np.asarray(self.ring[slot % _MAX_SLOTS, (count - 1) % _RING])
                found[slot] = (int(rows), int(into))
        return (next_reader + rotation) % readers, found
