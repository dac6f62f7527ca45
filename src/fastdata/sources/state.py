"""A stream's resume state as plain data: what it holds, making it from what the readers
delivered (:class:`Delivered`, the facts a loader hands a stream's ``state_dict``), and
putting the states of every rank of a job together. Loading one — the checks it must pass and
where it puts the next iteration — is :mod:`fastdata.sources.resume`.

A stream's state::

    {"type": "ParquetStream", "version": 4, "epoch": 0,
     "world_size": 2, "num_workers": 2, "rank": 0,   # the layout it was saved under
     "batches": [7, 7],                                # batches each rank had taken
     "consumed": [1500, 1000, 1500, 1000],             # rows per slot, every rank's slots
     "offsets": [0, 0, 0, 0],                          # tokens into the next row (packing)
     "rotations": [1, 1],                              # each rank's next worker in turn
     "known": [0, 1],                                  # ranks whose counts are known
     "handovers": [],                                  # earlier layout changes this epoch
     "settings": {"batch_size": 500, "shuffle": true, ...},  # what shapes the order
     "data": {"files": 4, "rows": 20000, "content": "...", ...}}  # what was read

Slots are rank-major (``rank * num_workers + worker``). The saving rank's counts are what it
consumed; the other ranks' are what they consumed if the ranks went in lockstep (as DDP
training does), so any rank's state describes the whole epoch, and loads on any rank of any
layout. A stream whose items take a varying number of rows (packing) knows only the saving
rank's counts (``known``). :func:`merge` puts the states of all ranks of a job together into
one whose counts are each rank's own, which needs no lockstep (see
:mod:`fastdata.sources.elastic` for what a layout change does). ``data`` is the source's
:meth:`identity`: counts, names and hashes that are cheap to compute and change when the
data does (see each reader for what its ``content`` hash covers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from fastdata._state_checks import fail, require_mapping, short
from fastdata._validate import is_int
from fastdata.errors import ResumeError, warn_user
from fastdata.sources.base import Reader
from fastdata.sources.elastic import Handover
from fastdata.sources.plan import Policy, round_robin_consumed

STATE_VERSION = 4
"""The version of every resume state fastdata writes (a stream's and a loader's): a state of
another version is refused by name."""
MAX_EPOCH = 2**62  # the epoch lives in an int64 tensor shared with the workers

__all__ = [
    "MAX_EPOCH",
    "STATE_VERSION",
    "Delivered",
    "Resume",
    "StreamFacts",
    "consumed_after",
    "handover_dict",
    "merge",
    "rank_batches",
    "state_of",
    "taken_out_of_turn",
]


@dataclass(frozen=True)
class Resume:
    """Where a loaded state puts this rank's next iteration: the rows each of its readers had
    consumed (and the tokens into the next row, when packing), and the reader whose turn
    comes first."""

    num_workers: int
    consumed: tuple[int, ...]
    rotation: int
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class Delivered:
    """What one rank's readers handed out: the facts a loader knows, from which a stream
    makes its state (:meth:`fastdata.PlannedStream.state_dict`).

    Args:
        batches: batches this rank handed out this epoch, a loaded state's included (after a
            layout change, since the change: the stream counts from its handovers).
        readers: the rank's readers (DataLoader workers; 1 for the main process).
        handed: each reader's batches since the iteration began, readers in torch's order
            (empty: none yet). A stream of fixed rows per item handed out in turn needs only
            ``batches``; out of turn, or with a varying number of rows per item, each
            reader's own count says where it is.
        next_reader: whose turn is next, in ``handed``'s order.
        items_per_batch: the stream's items in each batch (a DataLoader's ``batch_size``
            over a stream of single rows; 1 when the stream batches itself).
        drop_last: a reader's last partial batch is dropped (the DataLoader's ``drop_last``).
        in_order: batches are taken from the readers in turn (torch's ``in_order=True``).
        start: where the readers began (:attr:`fastdata.PlannedStream.resume` when the
            iteration began); None: at the epoch's start.
        finished: the iteration ended (every reader ran out): a reader of a varying stream
            is then at the end of its share, whatever its last item said (rows after it
            made no item: empty documents, or a batch ``pack(drop_last=True)`` dropped).
    """

    batches: int
    readers: int = 1
    handed: tuple[int, ...] = ()
    next_reader: int = 0
    items_per_batch: int = 1
    drop_last: bool = False
    in_order: bool = True
    start: Resume | None = None
    finished: bool = False


class StreamFacts(Protocol):
    """What a stream's state is made of and checked against: the members of a
    :class:`~fastdata.PlannedStream` this module reads, and nothing else of it (so the
    state's rules depend on these facts, not on the stream class)."""

    reader: Reader

    @property
    def epoch(self) -> int: ...

    @property
    def policy(self) -> Policy: ...

    @property
    def handovers(self) -> tuple[Handover, ...]: ...

    @property
    def settings(self) -> dict[str, Any]: ...

    @property
    def varying(self) -> bool: ...

    def rank_and_world_size(self) -> tuple[int, int]: ...

    def unit_rows(self, epoch: int | None = None) -> tuple[int, ...]: ...

    def slot_rows(
        self,
        num_readers: int,
        *,
        epoch: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        handovers: tuple[Handover, ...] | None = None,
    ) -> list[int]: ...


def handover_dict(handover: Handover) -> dict[str, Any]:
    """A layout change as plain data."""
    return {
        "world_size": handover.world_size,
        "num_workers": handover.num_workers,
        "consumed": list(handover.consumed),
    }


def consumed_after(
    batches: list[int],
    slot_rows: list[list[int]],
    *,
    rows_per_item: int,
    items_per_batch: int,
    drop_last: bool,
) -> tuple[list[int], list[int]]:
    """Rows each slot had consumed, and each rank's next worker, once each rank of the layout
    had taken ``batches[rank]`` batches.

    ``slot_rows[rank][worker]`` is what each slot reads this epoch; its items hold
    ``rows_per_item`` rows (the last may hold fewer), and the loader's batches
    ``items_per_batch`` items of one worker (``drop_last``: a worker's last partial batch is
    dropped, and with it the rows it held, which count as consumed once the worker is done).
    torch's loader takes one batch from each worker in turn
    (:func:`fastdata.sources.plan.round_robin_consumed`).
    """
    consumed: list[int] = []
    rotations: list[int] = []
    rows_per_batch = rows_per_item * items_per_batch
    for rows, taken in zip(slot_rows, batches, strict=True):
        per_worker = rank_batches(rows, rows_per_item, items_per_batch, drop_last)
        done, turn = round_robin_consumed(per_worker, min(taken, sum(per_worker)))
        consumed += [
            n if d == b else d * rows_per_batch
            for d, b, n in zip(done, per_worker, rows, strict=True)
        ]
        rotations.append(turn)
    return consumed, rotations


def rank_batches(
    rows: list[int], rows_per_item: int, items_per_batch: int, drop_last: bool
) -> list[int]:
    """The loader batches each worker of a rank yields, its slots reading ``rows``."""
    items = [-(-n // rows_per_item) for n in rows]
    return [i // items_per_batch if drop_last else -(-i // items_per_batch) for i in items]


def state_of(
    stream: StreamFacts,
    batches: int,
    *,
    num_readers: int,
    items_per_batch: int,
    drop_last: bool,
    own: tuple[int, list[tuple[int, int]]] | None = None,
) -> dict[str, Any]:
    """The state of ``stream`` once its rank (and every rank, in lockstep) took ``batches``
    batches from ``num_readers`` readers in turn (see the module docstring); with ``own``
    (the next reader and each reader's ``(rows, offset)``), this rank's exact position and
    no other rank's."""
    rank, world = stream.rank_and_world_size()
    slot_rows = [stream.slot_rows(num_readers, rank=r) for r in range(world)]
    per_rank = [
        min(batches, sum(rank_batches(rows, stream.policy.batch_size, items_per_batch, drop_last)))
        for rows in slot_rows
    ]
    consumed, rotations = consumed_after(
        per_rank,
        slot_rows,
        rows_per_item=stream.policy.batch_size,
        items_per_batch=items_per_batch,
        drop_last=drop_last,
    )
    offsets = [0] * len(consumed)
    known = list(range(world))
    if own is not None:
        rotations[rank], positions = own
        mine = slice(rank * num_readers, (rank + 1) * num_readers)
        consumed[mine] = [rows for rows, _ in positions]
        offsets[mine] = [into for _, into in positions]
        per_rank[rank], known = batches, [rank]
    return {
        "type": type(stream).__name__,
        "version": STATE_VERSION,
        "epoch": stream.epoch,
        "world_size": world,
        "num_workers": num_readers,
        "rank": rank,
        "batches": per_rank,
        "consumed": consumed,
        "offsets": offsets,
        "known": known,
        "rotations": rotations,
        "handovers": [handover_dict(h) for h in stream.handovers],
        "settings": stream.settings,
        "data": stream.reader.identity(),
    }


def taken_out_of_turn(
    handed: list[int], slot_rows: list[int], rows_per_batch: int, start: Resume | None
) -> list[int]:
    """Rows each slot had consumed once reader ``w`` handed out ``handed[w]`` batches of
    ``rows_per_batch`` rows since the readers began at ``start`` (None: the epoch's start),
    out of turn (torch's ``in_order=False``), ``slot_rows`` being what each slot reads."""
    readers = len(handed)
    taken = list(start.consumed) if start is not None else [0] * readers
    rotation = start.rotation if start is not None else 0
    for worker, count in enumerate(handed):
        slot = (worker + rotation) % readers
        taken[slot] = min(taken[slot] + count * rows_per_batch, slot_rows[slot])
    return taken


def merge(states: list[Any]) -> dict[str, Any]:
    """One stream state from the states of every rank of a job (``states[rank]``), whose
    counts are each rank's own: exact whether or not the ranks went in lockstep.

    Raises:
        ResumeError: the states are not one job's (another epoch, layout, data, a rank
            missing or twice).
    """
    states = [require_mapping(s, "state") for s in states]
    first = states[0]
    world, readers = first.get("world_size"), first.get("num_workers")
    if not is_int(world) or len(states) != world:
        raise ResumeError(
            f"cannot resume: {len(states)} states for a job of world_size={short(world)}: pass "
            "every rank's state, in rank order"
        )
    shared = ("type", "version", "epoch", "world_size", "num_workers", "handovers")
    for rank, state in enumerate(states):
        if state.get("rank") != rank:
            raise ResumeError(
                f"cannot resume: states[{rank}] is rank {short(state.get('rank'))}'s; pass every "
                "rank's state, in rank order"
            )
        for field in (*shared, "settings", "data"):
            if state.get(field) != first.get(field):
                raise ResumeError(
                    f"cannot resume: the ranks' states differ in {field} "
                    f"({short(first.get(field))} and {short(state.get(field))}); they are not "
                    "one job's states"
                )
    merged = dict(first)
    n = readers if is_int(readers) else 0
    own = [b for r, s in enumerate(states) for b in _own(s, "batches", r, 1)]
    if any(s.get("batches") != own for s in states):
        warn_user(
            f"the ranks were not in lockstep (batches taken per rank: {own}); each rank's own "
            "counts are used, so the resume is exact"
        )
    merged["batches"] = own
    merged["consumed"] = [c for r, s in enumerate(states) for c in _own(s, "consumed", r, n)]
    merged["offsets"] = [c for r, s in enumerate(states) for c in _own(s, "offsets", r, n)]
    merged["known"] = list(range(world))
    merged["rotations"] = [t for r, s in enumerate(states) for t in _own(s, "rotations", r, 1)]
    return merged


def _own(state: Mapping[str, Any], field: str, rank: int, size: int) -> list[Any]:
    """Rank ``rank``'s own ``size`` entries of the per-rank (``size`` 1) or per-slot list
    ``field`` (checked for shape with the rest of the merged state)."""
    values = state.get(field)
    if not isinstance(values, list):
        raise fail(field, values, "is not a list; the state is corrupt")
    return values[rank * size : (rank + 1) * size]
