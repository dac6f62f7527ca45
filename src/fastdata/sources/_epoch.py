"""A stream's epoch: one number in shared memory, which the streams built over one another
share (``fastdata.pack`` of a stream: the packed stream and its source are one epoch).

In shared memory, so that :meth:`~fastdata.PlannedStream.set_epoch` reaches persistent
DataLoader workers (processes, and thread workers' copies). Shared by a packed stream and the
stream it packs, so that ``mixed.set_epoch(e)`` moves the packed stream a loader iterates as
``packed.set_epoch(e)`` does: each source of a mix goes on through its rows from epoch to
epoch, and a call on the stream the user built the mix with is not silently lost.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

__all__ = ["SharedEpoch"]


class SharedEpoch:
    """The epoch number of ``stream`` and of the streams that share it (see :meth:`join`)."""

    def __init__(self, stream: Any) -> None:
        self.value = torch.zeros(1, dtype=torch.int64).share_memory_()
        # (the main process's streams only: workers never call set_epoch)
        self.streams: weakref.WeakSet[Any] = weakref.WeakSet([stream])

    def __int__(self) -> int:
        return int(self.value[0])

    def set(self, epoch: int) -> None:
        self.value[0] = epoch

    def join(self, stream: Any) -> SharedEpoch:
        """``stream`` shares this epoch from now on (its own is dropped); this epoch."""
        self.streams.add(stream)
        return self

    def __getstate__(self) -> dict[str, Any]:
        return {"value": self.value}  # a worker's copy: the number, not the other streams

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.value = state["value"]
        self.streams = weakref.WeakSet()
