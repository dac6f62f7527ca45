"""PlannedStream: a reader's units, planned, read ahead, batched and resumable.

A stream puts a :class:`~fastdata.sources.base.Reader` (counts and reads units) and a
:class:`~fastdata.sources.base.Decoder` (turns rows into items) together with everything the
sources share: it asks :mod:`fastdata.sources.plan` what this ``(rank, worker)`` reads, skips
by metadata to a resume position, reads window by window on background threads, and cuts
items of ``batch_size`` rows (or single rows) across window boundaries. ``ParquetStream`` and
``ImageStream`` are such streams, built by constructors that pick the reader and decoder.
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import Any, TypedDict

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import IterableDataset, get_worker_info

from fastdata._env import resolve_rank, worker_slot
from fastdata._stats import StageTimes
from fastdata._validate import check_bool, check_choice, check_int
from fastdata.errors import ResumeError
from fastdata.sources._state import MAX_EPOCH, STATE_VERSION, check_matches, validate
from fastdata.sources.base import INDEX, ArrowDecoder, Context, Decoder, Reader
from fastdata.sources.plan import (
    EvenBatches,
    Layout,
    Policy,
    SlotPlan,
    Summary,
    Window,
    plan_epoch,
    plan_slot,
    window_permutation,
)
from fastdata.workers import ThreadPools

__all__ = ["PlannedStream", "StreamOptions"]


class StreamOptions(TypedDict, total=False):
    """The options every stream takes (keyword-only), documented on :class:`PlannedStream`."""

    batch_size: int | None
    shuffle: bool
    seed: int
    shuffle_buffer: int
    drop_last: bool
    even_batches: EvenBatches
    rank: int | None
    world_size: int | None
    read_ahead: int


class PlannedStream(IterableDataset):
    """Stream a reader's rows exactly once across DDP ranks x DataLoader workers.

    Args:
        reader: the source's units (see :class:`fastdata.sources.Reader`).
        decoder: turns rows into items; :class:`~fastdata.sources.ArrowDecoder` (dicts of
            tensors) when None.
        batch_size: rows per yielded item (use it with ``DataLoader(batch_size=None)``);
            ``None`` yields one item per row for the DataLoader's own batching (slower:
            Python work per row).
        shuffle: shuffle unit order and the rows within windows of ``shuffle_buffer`` rows.
        seed: with the epoch (:meth:`set_epoch`), fixes the order.
        shuffle_buffer: rows mixed together when shuffling; memory grows with it.
        drop_last: drop the globally last partial batch (see :meth:`summary`).
        even_batches: ``"drop"`` or ``"pad"`` to give every rank exactly the same number of
            items (default: counts differ by at most one).
        rank: this process's rank; with ``world_size``, or neither: then it comes from
            torch.distributed or the ``RANK``/``WORLD_SIZE`` variables.
        world_size: the number of ranks; with ``rank``, or neither.
        read_ahead: windows read on background threads ahead of the one being consumed; 0
            reads in line. Memory holds up to ``1 + read_ahead`` windows per reader.
    """

    def __init__(
        self,
        reader: Reader,
        /,
        *,
        decoder: Decoder | None = None,
        batch_size: int | None = None,
        shuffle: bool = False,
        seed: int = 0,
        shuffle_buffer: int = 16_384,
        drop_last: bool = False,
        even_batches: EvenBatches = None,
        rank: int | None = None,
        world_size: int | None = None,
        read_ahead: int = 2,
    ) -> None:
        for name, obj, kind in (("reader", reader, Reader), ("decoder", decoder, Decoder)):
            if obj is not None and not isinstance(obj, kind):
                raise TypeError(f"{name}={obj!r}: expected a fastdata.sources.{kind.__name__}")
        batch_size = check_int("batch_size", batch_size, minimum=1, none="None to yield rows")
        if check_bool("drop_last", drop_last) and batch_size is None:
            raise ValueError(
                "drop_last=True needs batch_size: with batch_size=None the stream yields rows "
                "and DataLoader(drop_last=...) drops the partial batch"
            )
        self.reader = reader
        self.decoder: Decoder = decoder if decoder is not None else ArrowDecoder()
        self.batch_size = batch_size
        self.read_ahead = check_int("read_ahead", read_ahead, minimum=0)
        self._policy = Policy(
            batch_size=batch_size or 1,
            shuffle=check_bool("shuffle", shuffle),
            seed=check_int("seed", seed, minimum=0, maximum=2**63 - 1),
            drop_last=drop_last,
            even_batches=check_choice("even_batches", even_batches, (None, "drop", "pad")),
            shuffle_buffer=check_int("shuffle_buffer", shuffle_buffer, minimum=0),
        )
        rank = check_int("rank", rank, minimum=0, none="None (with world_size=None)")
        world_size = check_int("world_size", world_size, minimum=1, none="None (with rank=None)")
        if (rank is None) != (world_size is None) or (rank or 0) >= (world_size or 1):
            resolve_rank(rank, world_size)  # raises the explanatory error
        self._rank_args = (rank, world_size)
        self._resolved_rank: tuple[int, int] | None = None
        self._rows: tuple[int, ...] | None = None  # the reader's unit rows, asked once
        self._offsets = np.zeros(1, dtype=np.int64)  # first index of each unit
        self._times: StageTimes | None = None
        # Shared memory, so set_epoch() reaches persistent DataLoader workers too.
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._pending: dict[str, Any] | None = None
        self._continues_from: int | None = None  # epoch of a loaded end-of-epoch state
        self._consumed = 0
        self._pools = ThreadPools()

    # ----------------------------------------------------------------- units
    def unit_rows(self) -> tuple[int, ...]:
        """Rows of every unit of the reader (asked once; filters may make it costly)."""
        if self._rows is None:
            rows = tuple(int(n) for n in self.reader.unit_rows())
            if any(n < 0 for n in rows):
                raise ValueError(f"{self.reader!r} counts a negative number of rows in a unit")
            self._rows = rows
            self._offsets = np.concatenate([[0], np.cumsum(rows, dtype=np.int64)])
        return self._rows

    @property
    def num_rows(self) -> int:
        """Rows in the data, over all ranks."""
        return sum(self.unit_rows())

    def location(self, index: int) -> dict[str, Any]:
        """Where the row with :data:`~fastdata.sources.base.INDEX` ``index`` is."""
        self.unit_rows()
        unit = int(np.searchsorted(self._offsets, index, side="right")) - 1
        return self.reader.location(unit, index - int(self._offsets[unit]))

    def attach_stats(self, times: StageTimes | None) -> None:
        """Record read (and the decoder's) stage times in ``times`` (``DataLoader(stats=True)``
        attaches its table; None stops recording)."""
        self._times = times

    # ----------------------------------------------------------------- epochs and layout
    @property
    def epoch(self) -> int:
        """The epoch whose order is produced next; see :meth:`set_epoch`."""
        return int(self._epoch[0])

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch: with ``shuffle=True`` each epoch has its own order.

        Call it before iterating each epoch (also with persistent DataLoader workers: the
        value lives in shared memory).
        """
        epoch = check_int("epoch", epoch, minimum=0, maximum=MAX_EPOCH)
        if self._continues_from is not None and epoch <= self._continues_from:
            warnings.warn(
                f"set_epoch({epoch}) after loading a state saved at the end of epoch "
                f"{self._continues_from}: that epoch is read again in full; the state "
                f"continues with epoch {self._continues_from + 1} (stream.epoch)",
                stacklevel=2,
            )
        self._continues_from = None
        if epoch != self.epoch:
            self._consumed = 0
            self._pending = None  # a resumed position belongs to its own epoch only
        self._epoch[0] = epoch

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
        padded by ``even_batches="pad"``, and the item count of every rank."""
        rank, world = self.rank_and_world_size()
        _, _, summary = plan_epoch(self.unit_rows(), Layout(rank, world), self._policy, self.epoch)
        return summary

    def __len__(self) -> int:
        """Items (batches, or rows when ``batch_size=None``) this rank yields per epoch."""
        rank, _ = self.rank_and_world_size()
        return self.summary().items_per_rank[rank]

    def reader_items(self, num_readers: int, epoch: int | None = None) -> list[int]:
        """Items each of ``num_readers`` readers of this rank (DataLoader workers, or 1)
        yields in ``epoch`` (the current one when None)."""
        return [self._slot_plan(w, num_readers, epoch).items for w in range(num_readers)]

    def _slot_plan(self, slot: int, num_readers: int, epoch: int | None = None) -> SlotPlan:
        rank, world = self.rank_and_world_size()
        layout = Layout(rank, world, slot, num_readers)
        epoch = self.epoch if epoch is None else epoch
        plan, _ = plan_slot(self.unit_rows(), layout, self._policy, epoch)
        return plan

    # ----------------------------------------------------------------- resume
    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-able position of iteration in the main process (``num_workers=0``).

        With DataLoader workers use ``fastdata.DataLoader.state_dict()``, which knows how many
        items each worker delivered.
        """
        return self.state_at([self._consumed])

    def _settings(self) -> dict[str, Any]:
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

    def state_at(self, consumed: Sequence[int], *, rotation: int = 0) -> dict[str, Any]:
        """The state after each reader delivered ``consumed[reader]`` items; ``rotation`` is
        the reader whose turn is next in the loader's round-robin (see :mod:`._state`)."""
        rank, world = self.rank_and_world_size()
        return {
            "type": type(self).__name__,
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "rank": rank,
            "world_size": world,
            "num_workers": len(consumed),
            "consumed": [int(c) for c in consumed],
            "rotation": int(rotation),
            "settings": self._settings(),
            "data": self.reader.identity(),
        }

    def load_state_dict(self, state: dict[str, Any], *, num_workers: int | None = None) -> None:
        """Continue from ``state`` on the next iteration (exact: no item missed or repeated).

        ``num_workers`` is the number of readers that will iterate (the DataLoader's
        ``num_workers``, 1 for ``num_workers=0``); ``fastdata.DataLoader`` passes it, so a
        mismatch is refused here rather than in a worker. A state saved at the end of an
        epoch continues at the start of the next one.

        Raises:
            ResumeError: the state is malformed, or was saved for other data, settings or
                layout; the message names the field.
        """
        checked = validate(state, type_name=type(self).__name__)
        check_matches(checked["settings"], self._settings(), "settings")
        check_matches(checked["data"], self.reader.identity(), "data")
        rank, world = self.rank_and_world_size()
        if checked["world_size"] != world:
            raise ResumeError(
                f"cannot resume: the state's world_size={checked['world_size']} but this "
                f"process runs with world_size={world}; resume with the same world size"
            )
        if checked["rank"] != rank:
            raise ResumeError(
                f"cannot resume: the state belongs to rank {checked['rank']}, this is rank "
                f"{rank}; load each rank's own state"
            )
        readers = checked["num_workers"]
        if num_workers is not None and num_workers != readers:
            raise ResumeError(
                f"cannot resume: the state's num_workers={readers} reader(s) per rank "
                f"(DataLoader num_workers, 1 for num_workers=0), this loader has "
                f"{num_workers}; resume with the same num_workers"
            )
        epoch = checked["epoch"]
        items = self.reader_items(readers, epoch)
        for slot, (done, total) in enumerate(zip(checked["consumed"], items, strict=True)):
            if done > total:
                raise ResumeError(
                    f"cannot resume: the state's consumed[{slot}]={done}, but reader {slot} has "
                    f"only {total} items in epoch {epoch}; the state is corrupt or was saved "
                    "for other data"
                )
        if checked["consumed"] == items:  # saved at the end of the epoch: the next begins
            if epoch + 1 > MAX_EPOCH:
                raise ResumeError(f"cannot resume: the state's epoch={epoch} is the last one")
            self._epoch[0] = epoch + 1
            self._consumed, self._pending, self._continues_from = 0, None, epoch
            return
        self._epoch[0] = epoch
        self._consumed = sum(checked["consumed"]) if readers == 1 else 0
        self._pending, self._continues_from = checked, None

    @property
    def resuming(self) -> bool:
        """Whether the next iteration continues a loaded state (False once it has started,
        or after :meth:`set_epoch` moved to another epoch)."""
        return self._pending is not None

    def forget_resume(self) -> None:
        """Drop a loaded position: DataLoader workers received their own copy of it."""
        self._pending = None

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
        pending, self._pending = self._pending, None
        slot, skip = worker, 0
        if pending is not None:
            if pending["num_workers"] != num_workers:
                raise ResumeError(
                    f"cannot resume: the state was saved with {pending['num_workers']} reader(s) "
                    f"per rank (DataLoader num_workers, 1 for num_workers=0), this loader has "
                    f"{num_workers}; resume with the same num_workers"
                )
            slot = (worker + pending["rotation"]) % num_workers
            skip = pending["consumed"][slot]
        plan = self._slot_plan(slot, num_workers)
        self._consumed = skip
        return self._track(self._items(plan, skip))

    def _track(self, items: Iterator[Any]) -> Iterator[Any]:
        for item in items:
            self._consumed += 1
            yield item

    def _items(self, plan: SlotPlan, skip: int) -> Iterator[Any]:
        context = Context(self.epoch, self._policy.seed, self.location, self._times)
        tables = self._tables(plan.windows, skip * self._policy.batch_size)
        if self.batch_size is None:
            for table in tables:
                yield from self.decoder.rows(table, context)
            return
        for table in _cut(tables, self.batch_size):
            yield self.decoder.batch(table, context)

    def _tables(self, windows: Sequence[Window], offset: int) -> Iterator[pa.Table]:
        """The windows' rows in order, starting ``offset`` rows into the slot.

        Up to :attr:`read_ahead` windows after the current one are read on background
        threads while it is turned into items (Arrow reads and decodes without the GIL), so
        reading overlaps the rest of the pipeline. A failed read raises here, in order,
        after the windows before it have been yielded.
        """
        reads: list[tuple[Window, int]] = []
        for window in windows:
            if offset >= window.rows:
                offset -= window.rows  # skipped by metadata: nothing is read
                continue
            reads.append((window, offset))
            offset = 0
        if self.read_ahead == 0:
            for window, skip in reads:
                table = self._read_window(window)
                yield table.slice(skip) if skip else table
            return
        pool = self._pools.get("read", self.read_ahead)
        ahead: deque[Future[pa.Table]] = deque()
        for i, (_, skip) in enumerate(reads):
            while len(ahead) <= self.read_ahead and i + len(ahead) < len(reads):
                ahead.append(pool.submit(self._read_window, reads[i + len(ahead)][0]))
            table = ahead.popleft().result()
            yield table.slice(skip) if skip else table

    def _read_window(self, window: Window) -> pa.Table:
        start = time.perf_counter()
        parts = [self._read_piece(p.unit, p.start, p.stop) for p in window.pieces]
        table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        perm = window_permutation(window)
        table = table if perm is None else table.take(perm)
        if self._times is not None:
            self._times.add("read", time.perf_counter() - start, table.num_rows)
        return table

    def _read_piece(self, unit: int, start: int, stop: int) -> pa.Table:
        table = self.reader.read(unit, start, stop)
        if not self.decoder.needs_index:
            return table
        # Wrapped, not converted: the first pa.array(ndarray) of a process costs 6-14 ms of
        # one-off set-up, which every DataLoader worker of every epoch would pay.
        first = int(self._offsets[unit]) + start
        index = np.arange(first, first + stop - start, dtype=np.int64)
        column = pa.Array.from_buffers(pa.int64(), len(index), [None, pa.py_buffer(index)])
        return table.append_column(INDEX, column)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.reader!r}, batch_size={self.batch_size}, "
            f"shuffle={self._policy.shuffle})"
        )


def _cut(tables: Iterator[pa.Table], size: int) -> Iterator[pa.Table]:
    """Tables of exactly ``size`` rows across table boundaries (the plan makes only the
    slot's last one partial)."""
    pending: list[pa.Table] = []
    pending_rows = 0
    for table in tables:
        start = 0
        if pending_rows:
            head = table.slice(0, size - pending_rows)
            pending.append(head)
            pending_rows += head.num_rows
            start = head.num_rows
            if pending_rows < size:
                continue
            yield pa.concat_tables(pending)
            pending, pending_rows = [], 0
        while start + size <= table.num_rows:
            yield table.slice(start, size)
            start += size
        if start < table.num_rows:
            pending, pending_rows = [table.slice(start)], table.num_rows - start
    if pending:
        yield pa.concat_tables(pending)
