"""The plan: who reads which rows, in which order — pure functions, no I/O.

Every source (Parquet row groups, image file lists, tar shards) describes its data as *units*:
pieces it can read in one go (a row group, a block of files, a shard), each with a row count
known from metadata. From the unit sizes alone, the plan decides, for one epoch:

1. the order of the units (seeded by ``(seed, epoch)`` when shuffling);
2. which contiguous span of that order each *slot* ``(rank, worker)`` reads — ranks first,
   then the DataLoader workers of each rank — so that every row is read exactly once, and the
   batch counts of ranks (and of the workers within a rank) differ by at most one;
3. how the rows of a slot are mixed: consecutive pieces are grouped into *windows* of at least
   ``shuffle_buffer`` rows and each window is permuted by its own seed. A window is the bounded
   shuffle buffer, and because its permutation is a pure function, a resumed reader can jump
   straight to the window holding its cursor without reading what came before.

Positions are counted in rows; ``batch_size`` is the size of the items the stream yields (1
when it yields rows). Nothing here reads a file, imports torch or looks at the environment, so
it is property-tested directly.

Layout changes within an epoch (elastic resume) are :mod:`fastdata.sources.elastic`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = [
    "EvenBatches",
    "Layout",
    "Piece",
    "Policy",
    "SlotPlan",
    "Summary",
    "Window",
    "even_split",
    "item_counts",
    "plan_epoch",
    "plan_slot",
    "round_robin_consumed",
    "slot_rows",
    "window_permutation",
]

EvenBatches = Literal["drop", "pad"] | None
_EVEN_CHOICES = (None, "drop", "pad")


@dataclass(frozen=True)
class Layout:
    """Where a reader sits: its rank among ``world_size`` and its worker among ``num_workers``.

    ``num_workers`` counts readers within a rank: the DataLoader's workers, or 1 when the
    stream is iterated in the main process.
    """

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(
                f"rank={self.rank}, world_size={self.world_size}: need 0 <= rank < world_size"
            )
        if self.num_workers < 1 or not 0 <= self.worker < self.num_workers:
            raise ValueError(
                f"worker={self.worker}, num_workers={self.num_workers}: "
                "need 0 <= worker < num_workers"
            )


@dataclass(frozen=True)
class Policy:
    """Everything besides the layout that shapes an epoch.

    Args:
        batch_size: rows per item the stream yields (1 when it yields single rows).
        shuffle: permute unit order and mix rows within windows.
        seed: base seed; with ``epoch`` it fixes the order.
        drop_last: drop the final partial item (its rows are reported in :class:`Summary`).
        even_batches: ``None`` lets rank item counts differ by one; ``"drop"`` drops the last
            items so every rank has the same count; ``"pad"`` repeats rows from the start of
            the epoch's order to fill up (like ``DistributedSampler``), reported as padded.
        shuffle_buffer: rows mixed together when shuffling (a window holds at least this many).
        shuffle_units: shuffling permutes the unit order (False: the reader's units come in
            the order they are to be read, as a mix orders them, :mod:`fastdata.sources.mix`).
    """

    batch_size: int = 1
    shuffle: bool = False
    seed: int = 0
    drop_last: bool = False
    even_batches: EvenBatches = None
    shuffle_buffer: int = 0
    shuffle_units: bool = True

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size}: must be >= 1")
        if self.even_batches not in _EVEN_CHOICES:
            raise ValueError(f"even_batches={self.even_batches!r}: expected one of {_EVEN_CHOICES}")
        if self.shuffle_buffer < 0:
            raise ValueError(f"shuffle_buffer={self.shuffle_buffer}: must be >= 0")


@dataclass(frozen=True)
class Piece:
    """Rows ``[start, stop)`` of unit ``unit`` (an index into the source's unit list)."""

    unit: int
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Window:
    """Consecutive pieces read together; ``seed`` permutes their rows (None: keep order)."""

    pieces: tuple[Piece, ...]
    seed: int | None

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.pieces)


@dataclass(frozen=True)
class SlotPlan:
    """What one slot ``(rank, worker)`` reads in one epoch, in order."""

    windows: tuple[Window, ...]
    rows: int
    items: int


@dataclass(frozen=True)
class Summary:
    """Epoch totals: what was dropped or padded, and how many items each rank gets.

    ``unit`` names what ``items_per_rank`` counts: ``"batches"`` (a stream with a
    ``batch_size``), ``"rows"`` (``batch_size=None``), ``"documents"`` (``fastdata.pack``:
    the packed batches of a rank are known only once packed), ``"items"`` (from
    :func:`plan_epoch`, which does not know).
    """

    total_rows: int
    used_rows: int
    dropped_rows: int
    padded_rows: int
    items_per_rank: tuple[int, ...]
    unit: str = "items"


def unit_order(num_units: int, *, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    """The order units are visited in: identity, or a permutation seeded by (seed, epoch)."""
    if not shuffle:
        return np.arange(num_units)
    return np.random.default_rng([seed, epoch, 0]).permutation(num_units)


def even_split(total: int, parts: int) -> np.ndarray:
    """Boundaries splitting ``total`` into ``parts`` contiguous counts differing by <= 1."""
    sizes = np.full(parts, total // parts, dtype=np.int64)
    sizes[: total % parts] += 1
    return np.concatenate([[0], np.cumsum(sizes)])


def item_counts(total_rows: int, policy: Policy, world_size: int) -> tuple[int, int]:
    """(items over all ranks, rows those items cover) after drop_last and even_batches."""
    b = policy.batch_size
    items = total_rows // b if policy.drop_last else math.ceil(total_rows / b)
    if policy.even_batches == "drop":
        items -= items % world_size
    elif policy.even_batches == "pad" and total_rows > 0:
        items = math.ceil(items / world_size) * world_size
        return items, items * b
    return items, min(items * b, total_rows)


def plan_epoch(
    unit_rows: Sequence[int], layout: Layout, policy: Policy, epoch: int
) -> tuple[list[Piece], int, Summary]:
    """The pieces (in reading order) of the slot ``layout`` for ``epoch``, the position of
    its first row in the epoch order, and the epoch totals.

    Ranks get contiguous spans of whole items; within a rank, workers get contiguous spans of
    whole items. Only the globally last item can be partial, so item counts of ranks differ by
    at most one (exactly equal with ``even_batches``).
    """
    rows = np.asarray(unit_rows, dtype=np.int64)
    if rows.size and rows.min() < 0:
        raise ValueError("unit row counts must be >= 0")
    total = int(rows.sum())
    items, used = item_counts(total, policy, layout.world_size)
    rank_bounds = even_split(items, layout.world_size)
    r0, r1 = rank_bounds[layout.rank], rank_bounds[layout.rank + 1]
    worker_bounds = r0 + even_split(int(r1 - r0), layout.num_workers)
    w0, w1 = worker_bounds[layout.worker], worker_bounds[layout.worker + 1]
    b = policy.batch_size
    start, stop = min(int(w0) * b, used), min(int(w1) * b, used)

    shuffle = policy.shuffle and policy.shuffle_units
    order = unit_order(len(rows), shuffle=shuffle, seed=policy.seed, epoch=epoch)
    pieces = _pieces(rows[order], order, start, stop, total)
    summary = Summary(
        total_rows=total,
        used_rows=min(used, total),
        dropped_rows=max(total - used, 0),
        padded_rows=max(used - total, 0),
        items_per_rank=tuple(int(x) for x in np.diff(rank_bounds)),
    )
    return pieces, start, summary


def _pieces(
    ordered_rows: np.ndarray, order: np.ndarray, start: int, stop: int, total: int
) -> list[Piece]:
    """Pieces covering positions [start, stop) of the epoch order; positions past ``total``
    wrap around to the start (padding)."""
    pieces: list[Piece] = []
    if total == 0:
        return pieces
    ends = np.cumsum(ordered_rows)
    pos = start
    while pos < stop:
        lap_start = (pos // total) * total
        local = pos - lap_start
        k = int(np.searchsorted(ends, local, side="right"))
        unit_start = int(ends[k] - ordered_rows[k])
        take = min(int(ends[k]) - local, stop - pos)
        offset = local - unit_start
        pieces.append(Piece(int(order[k]), offset, offset + take))
        pos += take
    return pieces


def _windows(
    pieces: Sequence[Piece], policy: Policy, epoch: int, first_position: int
) -> tuple[Window, ...]:
    """Group pieces into windows of >= shuffle_buffer rows, each with its permutation seed.

    Without shuffling, every piece is its own window and keeps its order.
    """
    if not policy.shuffle:
        return tuple(Window((p,), None) for p in pieces)
    windows: list[Window] = []
    group: list[Piece] = []
    group_rows = 0
    position = first_position
    for piece in pieces:
        group.append(piece)
        group_rows += piece.rows
        if group_rows >= max(policy.shuffle_buffer, 1):
            windows.append(Window(tuple(group), _window_seed(policy.seed, epoch, position)))
            position += group_rows
            group, group_rows = [], 0
    if group:
        windows.append(Window(tuple(group), _window_seed(policy.seed, epoch, position)))
    return tuple(windows)


def _window_seed(seed: int, epoch: int, position: int) -> int:
    return int(np.random.SeedSequence([seed, epoch, 1, position]).generate_state(1)[0])


def window_permutation(window: Window) -> np.ndarray | None:
    """The row permutation of a window (None when it keeps its order)."""
    if window.seed is None:
        return None
    return np.random.default_rng(window.seed).permutation(window.rows)


def plan_slot(
    unit_rows: Sequence[int], layout: Layout, policy: Policy, epoch: int
) -> tuple[SlotPlan, Summary]:
    """The full plan of one slot for one epoch: its windows, rows and item count."""
    pieces, start, summary = plan_epoch(unit_rows, layout, policy, epoch)
    windows = _windows(pieces, policy, epoch, start)
    rows = sum(p.rows for p in pieces)
    return SlotPlan(windows, rows, math.ceil(rows / policy.batch_size)), summary


def slot_rows(plan: SlotPlan) -> list[tuple[int, int]]:
    """Every ``(unit, row)`` the slot yields, in order — the reference the readers follow."""
    out: list[tuple[int, int]] = []
    for window in plan.windows:
        rows = [(p.unit, r) for p in window.pieces for r in range(p.start, p.stop)]
        perm = window_permutation(window)
        out.extend(rows if perm is None else [rows[i] for i in perm])
    return out


def round_robin_consumed(items_per_worker: Sequence[int], consumed: int) -> tuple[list[int], int]:
    """How many items each worker had delivered after ``consumed`` items of a round-robin.

    ``torch.utils.data.DataLoader`` (``in_order=True``) takes one item from each worker in
    turn, skipping workers that are exhausted. Returns the per-worker counts and the worker
    whose turn is next, so a resumed loader can start its round-robin there.
    """
    counts = list(items_per_worker)
    total = sum(counts)
    if not 0 <= consumed <= total:
        raise ValueError(f"consumed={consumed}: must be between 0 and {total}")
    done = [0] * len(counts)
    remaining = consumed
    turn = 0
    while remaining:
        active = [w for w, c in enumerate(counts) if c > done[w]]
        # A full round over the active workers, while the shortest of them lasts.
        rounds = min(min(counts[w] - done[w] for w in active), remaining // len(active))
        if rounds:
            for w in active:
                done[w] += rounds
            remaining -= rounds * len(active)
            continue
        # Fewer items left than active workers: a partial round, in worker order.
        for w in active:
            if not remaining:
                turn = w
                break
            done[w] += 1
            remaining -= 1
    return done, turn
