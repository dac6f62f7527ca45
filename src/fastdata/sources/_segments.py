"""Reusable shared-memory segments for the batches a DataLoader worker hands over.

torch sends a worker's tensor to the main process in a fresh shared-memory segment per batch,
and a fresh segment costs more than filling it: reserving it zeroes every page and the first
touch faults each one in (about 8 ms for a 9.6 MB image batch, against 0.1 ms for the same
bytes in a buffer that is reused). Each worker here keeps a few segments and reuses one once
the main process is done with the batch in it.

Why reuse is safe. The worker marks a segment busy in its last byte before writing a batch
into it. The main process maps the segment per batch and builds the tensor with
``torch.frombuffer`` over a ``memoryview`` of that mapping; a finalizer on the memoryview
clears the busy byte and unmaps when the last tensor viewing the batch is gone (every view,
``.numpy()`` array or pinned-memory step holds it). To torch that tensor is ordinary private
memory, not shared memory: passing it on to another process (a ``torch.multiprocessing``
queue, say) copies it into a new segment first, so no other process can be left reading a
segment that is being reused. A batch the main process never receives keeps its segment busy
for the life of the worker; when every segment is busy, :func:`acquire` gives ``None`` and
the caller falls back to a fresh segment per batch, as torch does.
"""

from __future__ import annotations

import mmap
import os
import uuid
import weakref
from multiprocessing.reduction import DupFd
from typing import Any

import numpy as np
import torch

__all__ = ["Lease", "RecycledBatch", "acquire"]

SEGMENTS_PER_WORKER = 6
"""Segments a worker keeps: the batches in flight (``prefetch_factor``, 2 by default), the
one being consumed and the ones the consumer still holds, with room to spare."""

_FREE, _BUSY = 0, 1


class _Segment:
    """One memfd-backed mapping: ``capacity`` bytes of batch, then the busy byte."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.fd = os.memfd_create(f"fastdata-batch-{uuid.uuid4().hex[:8]}")
        os.ftruncate(self.fd, capacity + 1)
        self.map = mmap.mmap(self.fd, capacity + 1)

    @property
    def free(self) -> bool:
        return self.map[self.capacity] == _FREE


_pool: list[_Segment] = []
_pool_pid: int | None = None


class Lease:
    """A free segment of this process's pool, marked busy, with a uint8 tensor of the
    requested shape over it (:attr:`tensor`) to fill."""

    def __init__(self, segment: _Segment, shape: tuple[int, ...]) -> None:
        self.segment = segment
        count = int(np.prod(shape))
        self.tensor = torch.frombuffer(segment.map, dtype=torch.uint8, count=count).view(shape)

    def hand_over(self, view: torch.Tensor) -> RecycledBatch:
        """``view`` (of :attr:`tensor`) as the object to yield: pickled for the main process,
        it travels as the segment's file descriptor."""
        batch = view.as_subclass(RecycledBatch)
        batch._fastdata_segment = self.segment
        return batch

    def cancel(self) -> None:
        """Give the segment back unused (its batch was not handed over)."""
        self.segment.map[self.segment.capacity] = _FREE


def acquire(shape: tuple[int, ...]) -> Lease | None:
    """A :class:`Lease` on a free segment of this process's pool large enough for a uint8
    tensor of ``shape``; ``None`` where memfd is unavailable or every segment is busy."""
    global _pool, _pool_pid
    if not hasattr(os, "memfd_create"):
        return None
    if _pool_pid != os.getpid():  # a forked child inherits the list, not the right to it
        _pool, _pool_pid = [], os.getpid()
    nbytes = int(np.prod(shape))
    segment = next((s for s in _pool if s.capacity >= nbytes and s.free), None)
    if segment is None and len(_pool) < SEGMENTS_PER_WORKER:
        segment = _Segment(nbytes)
        _pool.append(segment)
    if segment is None:
        return None
    segment.map[segment.capacity] = _BUSY
    return Lease(segment, shape)


class RecycledBatch(torch.Tensor):
    """A worker's batch in a reusable segment. It behaves as a plain tensor (operations on
    it return plain tensors); pickled for the main process it travels as the segment's file
    descriptor and arrives there as a plain tensor (see the module docstring)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __reduce_ex__(self, protocol: Any) -> tuple:
        segment = self._fastdata_segment
        geometry = (self.storage_offset(), tuple(self.shape), self.stride())
        return (_attach, (DupFd(segment.fd), segment.capacity, *geometry))


def _attach(
    fd: Any, capacity: int, offset: int, shape: tuple[int, ...], stride: tuple[int, ...]
) -> torch.Tensor:
    """In the main process: the batch as a tensor over a fresh mapping of its segment,
    which is unmapped, and the segment given back, when the last view of it is gone."""
    descriptor = fd.detach()
    try:
        mapping = mmap.mmap(descriptor, capacity + 1)
    finally:
        os.close(descriptor)
    view = memoryview(mapping)[:capacity]
    weakref.finalize(view, _release, mapping, capacity).atexit = False
    return torch.frombuffer(view, dtype=torch.uint8).as_strided(shape, stride, offset)


def _release(mapping: mmap.mmap, capacity: int) -> None:
    mapping[capacity] = _FREE
    mapping.close()
