"""PlannedStream: a reader's units, planned, read ahead, batched and resumable.

A stream puts a :class:`~fastdata.sources.base.Reader` (counts and reads units) and a
:class:`~fastdata.sources.base.Decoder` (turns rows into items) together with everything the
sources share: it asks :mod:`fastdata.sources.plan` what this ``(rank, worker)`` reads, skips
by metadata to a resume position, reads window by window on background threads, and cuts
items of ``batch_size`` rows (or single rows) across window boundaries. ``ParquetStream`` and
``ImageStream`` are such streams, built by constructors that pick the reader and decoder.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
from torch.utils.data import IterableDataset, get_worker_info

from fastdata._env import resolve_rank, worker_slot
from fastdata._stats import StageTimes
from fastdata._validate import check_int, keywords_checked
from fastdata.errors import ResumeError, warn_user
from fastdata.sources._cache import start_fetching
from fastdata.sources._cursors import Cursors
from fastdata.sources._epoch import SharedEpoch
from fastdata.sources._reading import decoded, read_segments
from fastdata.sources._views import EpochView, EpochViews
from fastdata.sources.base import (
    ArrowDecoder,
    BatchingDecoder,
    Context,
    Decoder,
    Reader,
    VaryingDecoder,
    check_parts,
    declares,
    varies,
)
from fastdata.sources.elastic import Handover, Segment, after, items_before, slot_segments
from fastdata.sources.options import StreamOptions, checked_options
from fastdata.sources.plan import Layout, Policy, Summary, plan_epoch
from fastdata.sources.resume import Pending, check_state, resume_point
from fastdata.sources.state import MAX_EPOCH, Delivered, Resume, state_of, taken_out_of_turn
from fastdata.workers import ThreadPools

__all__ = ["PlannedStream"]

if TYPE_CHECKING:
    from typing_extensions import Unpack


class PlannedStream(IterableDataset):
    """Stream a reader's rows exactly once across DDP ranks x DataLoader workers.

    Args:
        reader: the source's units (see :class:`fastdata.sources.Reader`).
        decoder: turns rows into items; :class:`~fastdata.sources.ArrowDecoder` (dicts of
            tensors) when None.
        **options: :class:`~fastdata.sources.StreamOptions` (``batch_size``, ``shuffle``,
            ``seed``, ``shuffle_buffer``, ``drop_last``, ``even_batches``, ``rank``,
            ``world_size``, ``read_ahead``).
    """

    @keywords_checked(StreamOptions)
    def __init__(
        self,
        reader: Reader,
        /,
        *,
        decoder: Decoder | None = None,
        **options: Unpack[StreamOptions],
    ) -> None:
        check_parts(reader, decoder)
        self._policy, self._rank_args, self.read_ahead = checked_options(**options)
        self.reader = reader
        self.decoder: Decoder = decoder if decoder is not None else ArrowDecoder()
        self.batch_size = None if options.get("batch_size") is None else self._policy.batch_size
        self._resolved_rank: tuple[int, int] | None = None
        self._views = EpochViews(reader)
        self._times: StageTimes | None = None
        self._epoch = SharedEpoch(self)  # shared memory: set_epoch() reaches workers too
        self._pending: Pending | None = None
        # Layout changes and their epoch: persistent workers' copies keep them, so they hold
        # for that epoch only (set_epoch() changes the shared epoch, not the copies).
        self._handovers: tuple[int, tuple[Handover, ...]] = (0, ())
        self._continues_from: int | None = None  # epoch of a loaded end-of-epoch state
        self._consumed = 0
        self._pools = ThreadPools()
        # A decoder taking a varying number of rows per item reports its position.
        self._cursors = Cursors() if varies(self.decoder) else None
        self._batching = declares(self.decoder, BatchingDecoder)
        start_fetching(self)  # planned: a cache of a part's files now fetches whole files

    # ----------------------------------------------------------------- units
    def _view(self, epoch: int | None = None) -> EpochView:
        """The reader of ``epoch`` (the current one when None), its unit rows and offsets."""
        return self._views(self.epoch if epoch is None else epoch)

    def unit_rows(self, epoch: int | None = None) -> tuple[int, ...]:
        """Rows of every unit of the reader in ``epoch`` (the current one when None)."""
        return self._view(epoch)[1]

    @property
    def num_rows(self) -> int:
        """Rows in the data, over all ranks (in the current epoch)."""
        return sum(self.unit_rows())

    def location(self, index: int, epoch: int | None = None) -> dict[str, Any]:
        """Where the row with :data:`~fastdata.sources.base.INDEX` ``index`` is."""
        reader, _, offsets = self._view(epoch)
        unit = int(np.searchsorted(offsets, index, side="right")) - 1
        return reader.location(unit, index - int(offsets[unit]))

    def attach_stats(self, times: StageTimes | None) -> None:
        """Record read (and the decoder's) stage times in ``times`` (``DataLoader(stats=True)``
        attaches its table; None stops recording)."""
        self._times = times

    # ----------------------------------------------------------------- epochs and layout
    @property
    def epoch(self) -> int:
        """The epoch whose order is produced next; see :meth:`set_epoch`."""
        return int(self._epoch)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch: each has its own order (``shuffle=True``); each source of a mix goes
        on through its rows (else every epoch reads the same ones). Call it before each epoch
        (persistent workers see it: shared memory); a packed stream shares its source's epoch."""
        epoch = check_int("epoch", epoch, minimum=0, maximum=MAX_EPOCH)
        for stream in list(self._epoch.join(self).streams):  # this one, those sharing its epoch
            stream._moving(epoch)
        self._epoch.set(epoch)

    def _moving(self, epoch: int) -> None:
        if self._continues_from is not None and epoch <= self._continues_from:
            warn_user(
                f"set_epoch({epoch}) after loading a state saved at the end of epoch "
                f"{self._continues_from}: that epoch is read again in full; the state "
                f"continues with epoch {self._continues_from + 1} (stream.epoch)"
            )
        self._continues_from = None
        if epoch != self.epoch:
            self._consumed = 0
            self._pending = None  # a resumed position belongs to its own epoch only

    @property
    def policy(self) -> Policy:
        """The settings that shape each epoch (batch size, shuffling, seed, ...)."""
        return self._policy

    def rank_and_world_size(self) -> tuple[int, int]:
        """This process's ``(rank, world_size)``: arguments, torch.distributed, or the
        ``RANK``/``WORLD_SIZE`` variables."""
        if self._resolved_rank is not None and get_worker_info() is not None:
            return self._resolved_rank
        return resolve_rank(*self._rank_args)

    def summary(self) -> Summary:
        """This epoch's totals: rows used, dropped by ``drop_last`` / ``even_batches="drop"``,
        padded by ``even_batches="pad"``, and the item count of every rank (of a whole epoch,
        also after a layout change; ``unit`` says whether batches or rows)."""
        rank, world = self.rank_and_world_size()
        _, _, summary = plan_epoch(self.unit_rows(), Layout(rank, world), self._policy, self.epoch)
        return dataclasses.replace(summary, unit="rows" if self.batch_size is None else "batches")

    def __len__(self) -> int:
        """Items (batches, or rows when ``batch_size=None``) this rank yields this epoch;
        after a layout change, those it took before (:func:`items_before`) and what is left,
        as a trainer that restores its batch count expects (Lightning stops an epoch there)."""
        handovers = self.handovers
        if not handovers:
            rank, _ = self.rank_and_world_size()
            return self.summary().items_per_rank[rank]
        return items_before(handovers, self._policy.batch_size) + sum(self.reader_items(1))

    def slot_rows(
        self,
        num_readers: int,
        *,
        epoch: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        handovers: tuple[Handover, ...] | None = None,
    ) -> list[int]:
        """Rows each of ``num_readers`` readers of ``rank`` reads in ``epoch`` (by default
        this process's rank and the current epoch, with its layout changes)."""
        return [
            sum(s.rows for s in self._segments(w, num_readers, epoch, rank, world_size, handovers))
            for w in range(num_readers)
        ]

    def reader_items(self, num_readers: int, epoch: int | None = None) -> list[int]:
        """Items each of ``num_readers`` readers of this rank (DataLoader workers, or 1)
        yields in ``epoch`` (the current one when None)."""
        b = self._policy.batch_size
        return [-(-n // b) for n in self.slot_rows(num_readers, epoch=epoch)]

    def _segments(
        self,
        slot: int,
        num_readers: int,
        epoch: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        handovers: tuple[Handover, ...] | None = None,
    ) -> list[Segment]:
        own_rank, own_world = self.rank_and_world_size()
        layout = Layout(
            own_rank if rank is None else rank,
            own_world if world_size is None else world_size,
            slot,
            num_readers,
        )
        return slot_segments(
            self.unit_rows(epoch),
            layout,
            self._policy,
            self.epoch if epoch is None else epoch,
            self._changes(epoch) if handovers is None else handovers,
        )

    # ----------------------------------------------------------------- resume
    def state_dict(self, delivered: Delivered | None = None) -> dict[str, Any]:
        """Plain JSON-able position of iteration.

        Without arguments: of this process's own iteration (``num_workers=0``). With
        ``delivered``, what a loader's readers handed out (see
        :class:`~fastdata.sources.state.Delivered`): the state once they did —
        ``fastdata.DataLoader.state_dict()`` hands these facts over for its workers.

        Raises:
            ResumeError: items of a varying number of rows, grouped several per batch (a
                batch does not say where it ended).
        """
        cursors = self._cursors
        if delivered is None:
            if cursors is not None:
                own = (0, [cursors.own])
                return state_of(self, self._consumed, num_readers=1, items_per_batch=1,
                                drop_last=False, own=own)  # fmt: skip
            delivered = Delivered(self._consumed)
        readers = delivered.readers
        handed = list(delivered.handed) or [0] * readers
        mine = None
        if cursors is not None:
            if delivered.items_per_batch != 1:
                raise ResumeError(
                    "cannot save an exact state: the stream's items take a varying number of "
                    "rows (packing, or images with on_error='skip'), and they are batched "
                    f"{delivered.items_per_batch} at a time (a DataLoader's batch_size="
                    f"{delivered.items_per_batch}); "
                    "batch in the stream instead (ImageStream(..., batch_size=...) or "
                    "pack(rows=...)) with fastdata.DataLoader(stream, batch_size=None)"
                )
            mine = cursors.positions(handed, delivered.next_reader, delivered.start)
            if delivered.finished:  # every reader ran out: each at the end of its share
                mine = (mine[0], [(n, 0) for n in self.slot_rows(readers)])
        elif not delivered.in_order and readers > 1:  # out of turn: each reader's own count
            rows = self._policy.batch_size * delivered.items_per_batch
            taken = taken_out_of_turn(handed, self.slot_rows(readers), rows, delivered.start)
            mine = (0, [(n, 0) for n in taken])
        return state_of(
            self,
            delivered.batches,
            num_readers=readers,
            items_per_batch=delivered.items_per_batch,
            drop_last=delivered.drop_last,
            own=mine,
        )

    @property
    def settings(self) -> dict[str, Any]:
        """Everything besides the data and the layout that decides which rows come when."""
        policy = self._policy
        return {
            "batch_size": self.batch_size,
            "shuffle": policy.shuffle,
            "seed": policy.seed,
            "shuffle_buffer": policy.shuffle_buffer,
            "drop_last": policy.drop_last,
            "even_batches": policy.even_batches,
        }

    @property
    def handovers(self) -> tuple[Handover, ...]:
        """The layout changes of the current epoch (after an elastic resume)."""
        return self._changes()

    def _changes(self, epoch: int | None = None) -> tuple[Handover, ...]:
        """The layout changes of ``epoch`` (the current one when None)."""
        changed, handovers = self._handovers
        return handovers if changed == (self.epoch if epoch is None else epoch) else ()

    def load_state_dict(
        self, state: dict[str, Any], *, num_workers: int = 1, end_continues: bool = True
    ) -> None:
        """Continue from ``state`` on the next iteration: exactly the rest of its epoch.

        ``num_workers`` is the number of readers that will iterate (the DataLoader's
        ``num_workers``, 1 for ``num_workers=0``; ``fastdata.DataLoader`` passes it). The
        state may come from any rank of any layout: under the same layout this rank takes up
        where it (in lockstep with the saving rank) stopped; under another, what is left of
        the epoch is shared among the new ranks x readers, each remaining row once (see
        :mod:`fastdata.sources.elastic`). A state saved at the end of an epoch continues at
        the start of the next one; with ``end_continues=False`` (``fastdata.DataLoader``'s,
        when the consumer had not seen the epoch end) its next iteration is empty instead.

        Raises:
            ResumeError: the state is malformed, or was saved for other data or settings;
                the message names the field.
        """
        checked = check_state(self, state)
        epoch, handovers, resume = resume_point(self, checked, num_workers, end_continues)
        if resume is None:  # saved at the end of the epoch: the next begins
            self._epoch.set(epoch + 1)
            self._consumed, self._pending, self._handovers = 0, None, (0, ())
            self._continues_from = epoch
            return
        self._epoch.set(epoch)
        self._handovers = (epoch, handovers)
        b = self._policy.batch_size
        self._consumed = -(-resume.consumed[0] // b) if num_workers == 1 else 0
        if self._cursors is not None:
            self._cursors.own = (resume.consumed[0], resume.offsets[0])
        self._pending, self._continues_from = Pending(resume), None

    @property
    def resume(self) -> Resume | None:
        """Where the next iteration starts, as a loaded state put it; None: at the start of
        the epoch (nothing loaded, :meth:`set_epoch` moved to another epoch, or an iteration
        already started from it)."""
        pending = self._pending
        return None if pending is None or pending.taken else pending.resume

    @property
    def varying(self) -> bool:
        """Whether items take a varying number of rows (the decoder's ``varying``: packing,
        skipping images): then each reader reports where it is, and a state knows this
        rank's position only."""
        return self._cursors is not None

    # ----------------------------------------------------------------- iteration
    def __getstate__(self) -> dict[str, Any]:
        # Pickled for DataLoader workers: plan once here (metadata), resolve the rank while
        # torch.distributed is visible, and send the result along.
        self.unit_rows()
        state = self.__dict__.copy()
        state["_resolved_rank"] = self.rank_and_world_size()
        return state

    def __iter__(self) -> Iterator[Any]:
        worker, num_workers = worker_slot()
        pending = self._pending.take(worker, num_workers) if self._pending is not None else None
        if get_worker_info() is None:  # this process reads: the position is its own
            self._pending = None
        slot, skip = worker, 0
        if pending is not None:
            slot = (worker + pending.rotation) % num_workers
            skip = pending.consumed[slot]
        offset = pending.offsets[slot] if pending is not None else 0
        segments = after(self._segments(slot, num_workers), skip)
        if self._cursors is not None:  # a decoder of a varying number of rows per item
            tables, context = self._tables(segments)
            items = cast(VaryingDecoder, self.decoder).items(tables, context, offset)
            return self._track(self._cursors.track(items, slot, (skip, offset)))
        return self._track(self._items(segments))

    def _track(self, items: Iterator[Any]) -> Iterator[Any]:
        tally = getattr(self.decoder, "tally", None)  # what the items hold, counted (Tally)
        return self._counted(items if tally is None else tally.track(items))

    def _counted(self, items: Iterator[Any]) -> Iterator[Any]:
        for item in items:
            self._consumed += 1
            yield item

    def _tables(self, segments: list[Segment]) -> tuple[Iterator[pa.Table], Context]:
        epoch = self.epoch
        reader, _, offsets = self._view(epoch)
        locate = functools.partial(self.location, epoch=epoch)
        context = Context(epoch, self._policy.seed, locate, self._times, self.batch_size)
        index = offsets if self.decoder.needs_index else None
        pool = self._pools.get("read", self.read_ahead) if self.read_ahead else None
        tables = read_segments(reader, segments, pool, self.read_ahead, index, self._times)
        return tables, context

    def _items(self, segments: list[Segment]) -> Iterator[Any]:
        tables, context = self._tables(segments)  # on the first item: reads start there
        yield from decoded(self.decoder, tables, context, batching=self._batching)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.reader!r}, batch_size={self.batch_size}, "
            f"shuffle={self._policy.shuffle})"
        )
