"""Layout changes within an epoch (elastic resume) — pure functions, no I/O.

A slot reads a list of *segments*: row
ranges of its windows, in each window's permuted order. When an epoch that was read under one
layout (world size x workers) goes on under another, a :class:`Handover` records the old
layout and the rows each of its slots had consumed; what is left of every old slot, in slot
order, is one sequence of segments, which the new layout splits among its slots by the same
rule as a fresh epoch (contiguous spans of whole items, ranks first). Each remaining row is
read once, by one new slot; rows consumed before are never read again. The order within
what remains is the old slots' order, so it differs from an uninterrupted run's; several
hand-overs in one epoch chain.

What is preserved: every row of the epoch is read exactly once over the whole epoch (before
and after the change), per-sample randomness (seeded by ``(seed, epoch, index)``), and the
window permutations (rows mixed with the same neighbours). What is not: the order of batches
after the change, and which rank sees which rows. A layout-independent global order
(Mosaic Streaming's "canonical nodes") would have every slot read a 1/(ranks x workers)
share of every window: each row group read ranks x workers times, against once here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fastdata.sources.plan import (
    Layout,
    Policy,
    Window,
    even_split,
    item_counts,
    plan_slot,
    window_permutation,
)

__all__ = [
    "Handover",
    "Segment",
    "after",
    "batch_count",
    "items_before",
    "remaining",
    "segment_rows",
    "slot_segments",
]


@dataclass(frozen=True)
class Segment:
    """Rows ``[start, stop)`` of a window, counted in the window's (permuted) order."""

    window: Window
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Handover:
    """An epoch read so far under ``world_size`` x ``num_workers`` slots, each of which had
    consumed ``consumed[slot]`` rows (slots rank-major: ``rank * num_workers + worker``)."""

    world_size: int
    num_workers: int
    consumed: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.world_size < 1 or self.num_workers < 1:
            raise ValueError(f"{self}: world_size and num_workers must be >= 1")
        if len(self.consumed) != self.world_size * self.num_workers:
            raise ValueError(
                f"{len(self.consumed)} consumed counts for {self.world_size} x "
                f"{self.num_workers} slots"
            )


def items_before(
    handovers: Sequence[Handover], rows_per_item: int, *, drop_last: bool = False
) -> int:
    """Items a rank had taken in its epoch before the layout changes: under each old layout,
    the most any of its ranks took (DDP's ranks go in lockstep), over every change. With the
    items left, a rank's share of a whole epoch, as ``len()`` counts one without a change.
    ``drop_last``: a slot's last short item was dropped (counted in its rows)."""
    total = 0
    for h in handovers:
        per_slot = [_items(rows, rows_per_item, drop_last) for rows in h.consumed]
        n = h.num_workers
        total += max(sum(per_slot[r * n : (r + 1) * n]) for r in range(h.world_size))
    return total


def batch_count(
    slot_rows: Sequence[int],
    handovers: Sequence[Handover],
    batch_size: int,
    *,
    drop_last: bool = False,
) -> int:
    """Batches of ``batch_size`` rows a rank's readers make in a whole epoch when each batches
    its own ``slot_rows`` (a DataLoader's workers batching a stream's rows): each reader's
    last batch short (dropped with ``drop_last``), plus the batches taken before the layout
    changes (:func:`items_before`)."""
    before = items_before(handovers, batch_size, drop_last=drop_last)
    return before + sum(_items(rows, batch_size, drop_last) for rows in slot_rows)


def _items(rows: int, rows_per_item: int, drop_last: bool) -> int:
    return rows // rows_per_item if drop_last else -(-rows // rows_per_item)


def _base_segments(
    unit_rows: Sequence[int], layout: Layout, policy: Policy, epoch: int
) -> list[Segment]:
    plan, _ = plan_slot(unit_rows, layout, policy, epoch)
    return [Segment(w, 0, w.rows) for w in plan.windows]


def after(segments: Sequence[Segment], rows: int) -> list[Segment]:
    """``segments`` without their first ``rows`` rows."""
    out: list[Segment] = []
    for segment in segments:
        if rows >= segment.rows:
            rows -= segment.rows
            continue
        out.append(Segment(segment.window, segment.start + rows, segment.stop))
        rows = 0
    return out


def _take(segments: Sequence[Segment], start: int, stop: int, total: int) -> list[Segment]:
    """Positions ``[start, stop)`` of the sequence ``segments`` (``total`` rows); positions
    past ``total`` wrap around to its start (padding)."""
    out: list[Segment] = []
    if total == 0:
        return out
    ends = np.cumsum([s.rows for s in segments])
    pos = start
    while pos < stop:
        local = pos % total
        k = int(np.searchsorted(ends, local, side="right"))
        segment = segments[k]
        begin = int(ends[k]) - segment.rows
        take = min(int(ends[k]) - local, stop - pos)
        offset = segment.start + local - begin
        out.append(Segment(segment.window, offset, offset + take))
        pos += take
    return out


def _share(
    sequence: Sequence[Segment], layout: Layout, policy: Policy
) -> tuple[list[Segment], int]:
    """The part of ``sequence`` slot ``layout`` reads, by the rule of :func:`plan_epoch`
    (drop_last and even_batches applied to what the sequence holds), and its first
    position."""
    total = sum(s.rows for s in sequence)
    items, used = item_counts(total, policy, layout.world_size)
    rank_bounds = even_split(items, layout.world_size)
    r0, r1 = rank_bounds[layout.rank], rank_bounds[layout.rank + 1]
    worker_bounds = r0 + even_split(int(r1 - r0), layout.num_workers)
    w0, w1 = worker_bounds[layout.worker], worker_bounds[layout.worker + 1]
    b = policy.batch_size
    start, stop = min(int(w0) * b, used), min(int(w1) * b, used)
    return _take(sequence, start, stop, total), start


def remaining(
    unit_rows: Sequence[int],
    policy: Policy,
    epoch: int,
    handovers: Sequence[Handover],
) -> list[Segment]:
    """What is left of the epoch after ``handovers``, as one sequence (old slots in order)."""
    sequence: list[Segment] | None = None
    for handover in handovers:
        remaining: list[Segment] = []
        for rank in range(handover.world_size):
            for worker in range(handover.num_workers):
                layout = Layout(rank, handover.world_size, worker, handover.num_workers)
                if sequence is None:
                    mine = _base_segments(unit_rows, layout, policy, epoch)
                else:
                    mine, _ = _share(sequence, layout, policy)
                slot = rank * handover.num_workers + worker
                remaining += after(mine, handover.consumed[slot])
        sequence = remaining
    return sequence or []


def slot_segments(
    unit_rows: Sequence[int],
    layout: Layout,
    policy: Policy,
    epoch: int,
    handovers: Sequence[Handover] = (),
) -> list[Segment]:
    """What slot ``layout`` reads in ``epoch``, as segments of the epoch's windows, after the
    layout changes ``handovers`` (oldest first; none: a fresh epoch, as :func:`plan_slot`)."""
    if not handovers:
        return _base_segments(unit_rows, layout, policy, epoch)
    mine, _ = _share(remaining(unit_rows, policy, epoch, handovers), layout, policy)
    return mine


def segment_rows(segments: Sequence[Segment]) -> list[tuple[int, int]]:
    """Every ``(unit, row)`` the segments yield, in order (the reference readers follow)."""
    out: list[tuple[int, int]] = []
    for segment in segments:
        rows = [(p.unit, r) for p in segment.window.pieces for r in range(p.start, p.stop)]
        perm = window_permutation(segment.window)
        ordered = rows if perm is None else [rows[i] for i in perm]
        out.extend(ordered[segment.start : segment.stop])
    return out
