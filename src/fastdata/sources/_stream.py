"""The machinery every planned source shares: epochs, layout, resume state and batching.

A source subclass describes its data as units with row counts and knows how to read one unit
as an Arrow table and how to turn tables into items. :class:`PlannedStream` does the rest:
it asks :mod:`fastdata.sources.plan` what this ``(rank, worker)`` reads, skips by metadata to
the resume cursor, reads window by window, and cuts items of ``batch_size`` rows (or single
rows) across window boundaries.
"""

from __future__ import annotations

import os
import time
import warnings
from abc import abstractmethod
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import torch
from torch.utils.data import IterableDataset, get_worker_info

from fastdata._env import resolve_rank, worker_slot
from fastdata._stats import StageTimes
from fastdata._validate import check_bool, check_choice, check_int
from fastdata.errors import ResumeError
from fastdata.sources._state import MAX_EPOCH, STATE_VERSION, check_matches, validate
from fastdata.sources.plan import (
    EvenBatches,
    Layout,
    Piece,
    Policy,
    SlotPlan,
    Summary,
    Window,
    plan_epoch,
    plan_slot,
    window_permutation,
)


class PlannedStream(IterableDataset):
    """Base class of fastdata's streams (see the module docstring).

    Subclasses implement :meth:`_unit_rows`, :meth:`_read_unit` (and, where a part of a unit
    can be read alone, :meth:`_read_piece`), :meth:`_make_batch`, :meth:`_make_rows` and
    :meth:`_identity`.
    """

    _stage_times: StageTimes | None = None  # set by DataLoader(stats=True)

    def __init__(
        self,
        *,
        batch_size: int | None,
        shuffle: bool,
        seed: int,
        shuffle_buffer: int,
        drop_last: bool,
        even_batches: EvenBatches,
        rank: int | None,
        world_size: int | None,
        read_ahead: int,
    ) -> None:
        batch_size = check_int("batch_size", batch_size, minimum=1, none="None to yield rows")
        if check_bool("drop_last", drop_last) and batch_size is None:
            raise ValueError(
                "drop_last=True needs batch_size: with batch_size=None the stream yields rows "
                "and DataLoader(drop_last=...) drops the partial batch"
            )
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
        # Shared memory, so set_epoch() reaches persistent DataLoader workers too.
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._pending: dict[str, Any] | None = None
        self._continues_from: int | None = None  # epoch of a loaded end-of-epoch state
        self._consumed = 0
        self._pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}

    def _thread_pool(self, name: str, threads: int) -> ThreadPoolExecutor:
        """This process's pool ``name``. A forked DataLoader worker inherits the pool object
        but not its threads, and a pickled stream none at all: each process starts its own."""
        owner, pool = self._pools.get(name, (None, None))
        if pool is None or owner != os.getpid():
            pool = ThreadPoolExecutor(threads, f"fastdata-{name}")
            self._pools[name] = (os.getpid(), pool)
        return pool

    # ----------------------------------------------------------------- subclass hooks
    @abstractmethod
    def _unit_rows(self) -> Sequence[int]:
        """Rows of every unit, from metadata; cached by the subclass."""

    @abstractmethod
    def _read_unit(self, unit: int) -> pa.Table:
        """All rows of one unit, as the plan counted them."""

    def _read_piece(self, piece: Piece) -> pa.Table:
        """Rows ``[start, stop)`` of a unit; sources that can read part of a unit override it."""
        return self._read_unit(piece.unit).slice(piece.start, piece.rows)

    @abstractmethod
    def _make_batch(self, table: pa.Table) -> Any:
        """One item of ``batch_size`` rows."""

    @abstractmethod
    def _make_rows(self, table: pa.Table) -> Iterator[Any]:
        """One item per row."""

    @abstractmethod
    def _identity(self) -> dict[str, Any]:
        """Named, small, JSON-able facts about the data (counts, hashes of paths and
        contents) that a state must match; a mismatch is refused naming the field."""

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
        _, _, summary = plan_epoch(self._unit_rows(), Layout(rank, world), self._policy, self.epoch)
        return summary

    def __len__(self) -> int:
        """Items (batches, or rows when ``batch_size=None``) this rank yields per epoch."""
        rank, _ = self.rank_and_world_size()
        return self.summary().items_per_rank[rank]

    def worker_items(self, num_workers: int) -> list[int]:
        """Items each of ``num_workers`` DataLoader workers of this rank yields this epoch."""
        return [self._slot_plan(w, num_workers).items for w in range(num_workers)]

    def _slot_plan(self, slot: int, num_workers: int, epoch: int | None = None) -> SlotPlan:
        rank, world = self.rank_and_world_size()
        layout = Layout(rank, world, slot, num_workers)
        epoch = self.epoch if epoch is None else epoch
        plan, _ = plan_slot(self._unit_rows(), layout, self._policy, epoch)
        return plan

    def _slot_plans(self, num_workers: int, epoch: int) -> list[SlotPlan]:
        return [self._slot_plan(w, num_workers, epoch) for w in range(num_workers)]

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
        """The state after each worker slot delivered ``consumed[slot]`` items; ``rotation`` is
        the slot whose turn is next in the loader's round-robin (see :mod:`._state`)."""
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
            "data": self._identity(),
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
        check_matches(checked["data"], self._identity(), "data")
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
        items = [plan.items for plan in self._slot_plans(readers, epoch)]
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
            self._consumed = 0
            self._pending = None
            self._continues_from = epoch
            return
        self._epoch[0] = epoch
        self._consumed = sum(checked["consumed"]) if readers == 1 else 0
        self._pending = checked
        self._continues_from = None

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
        self._unit_rows()
        state = self.__dict__.copy()
        state["_resolved_rank"] = self.rank_and_world_size()
        state["_pools"] = {}  # threads stay in the process that started them
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
        if skip > plan.items:
            raise ResumeError(
                f"cannot resume: the state says {skip} items were consumed from reader {slot}, "
                f"which has only {plan.items} this epoch; was the state saved for this data?"
            )
        self._consumed = skip
        return self._track(self._items(plan, skip))

    def _track(self, items: Iterator[Any]) -> Iterator[Any]:
        for item in items:
            self._consumed += 1
            yield item

    def _items(self, plan: SlotPlan, skip: int) -> Iterator[Any]:
        offset = skip * self._policy.batch_size
        tables = self._tables(plan.windows, offset)
        if self.batch_size is None:
            for table in tables:
                yield from self._make_rows(table)
        else:
            yield from self._batches(tables, self.batch_size)

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
        pool = self._thread_pool("read", self.read_ahead)
        ahead: deque[Future[pa.Table]] = deque()
        for i, (_, skip) in enumerate(reads):
            while len(ahead) <= self.read_ahead and i + len(ahead) < len(reads):
                ahead.append(pool.submit(self._read_window, reads[i + len(ahead)][0]))
            table = ahead.popleft().result()
            yield table.slice(skip) if skip else table

    def _read_window(self, window: Window) -> pa.Table:
        start = time.perf_counter()
        parts = [self._read_piece(p) for p in window.pieces]
        table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        perm = window_permutation(window)
        table = table if perm is None else table.take(perm)
        if self._stage_times is not None:
            self._stage_times.add("read", time.perf_counter() - start, table.num_rows)
        return table

    def _batches(self, tables: Iterator[pa.Table], size: int) -> Iterator[Any]:
        """Items of exactly ``size`` rows across table boundaries; the plan makes only the
        slot's last item partial."""
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
                yield self._make_batch(pa.concat_tables(pending))
                pending, pending_rows = [], 0
            while start + size <= table.num_rows:
                yield self._make_batch(table.slice(start, size))
                start += size
            if start < table.num_rows:
                pending, pending_rows = [table.slice(start)], table.num_rows - start
        if pending:
            yield self._make_batch(pa.concat_tables(pending))
