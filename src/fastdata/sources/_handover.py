"""A batch handed from a DataLoader worker process to the main process: each Ragged column in
one shared-memory segment.

A Ragged's values, offsets and validity are copied from the Arrow buffers straight into one
shared-memory segment (back to back), which is then handed to the main process without
another copy, and reused for a later batch once nothing holds this one (see
:mod:`fastdata.workers`). A fresh segment per batch would cost about as much CPU as decoding
the column: every page of it is zeroed and faulted in. Tensors cross as torch sends them.
"""

from __future__ import annotations

from typing import Any

from fastdata._torch_compat import in_worker_process
from fastdata.ragged import Ragged
from fastdata.workers import shared_batch

__all__ = ["handed_over"]


def handed_over(batch: dict[str, Any], reuse: bool) -> dict[str, Any]:
    """``batch`` as it leaves this process: unchanged in the main process or a thread worker
    (no hand-over copy); in a worker process, each Ragged in one shared-memory segment,
    reused for a later batch once nothing holds this one (``reuse=False`` where the main
    process shares by ``file_system``)."""
    if not in_worker_process():
        return batch
    return {k: _shared(v, reuse) if isinstance(v, Ragged) else v for k, v in batch.items()}


def _shared(ragged: Ragged, reuse: bool) -> Ragged:
    """``ragged`` copied into one shared-memory segment.

    Segments come in powers of two (at least 64 KiB), so batches of different sizes still
    find a free segment of their size class; at most half of one is unused.
    """
    parts = [t for t in (ragged.values, ragged.offsets, ragged.valid) if t is not None]
    starts, end = [], 0
    for t in parts:
        end = -(-end // 8) * 8  # aligned for int64 views
        starts.append(end)
        end += t.numel() * t.element_size()
    segment, writable = shared_batch((1 << max(16, (end - 1).bit_length()),), reuse=reuse)
    moved = []
    for t, start in zip(parts, starts, strict=True):
        stop = start + t.numel() * t.element_size()
        # written through the worker's own mapping, which stays faulted in across reuses
        writable[start:stop].view(t.numpy().dtype).reshape(t.shape)[...] = t.numpy()
        moved.append(segment[start:stop].view(t.dtype).view(t.shape))
    valid = moved[2] if len(moved) == 3 else None
    return Ragged._unchecked(moved[0], moved[1], valid, ragged.kind)
