"""What a worker does beside fetching batches: resume its dataset, and report where it is.

A user's dataset keeps its position in places the loader cannot see from the main process:
its own ``state_dict()`` (torchdata's ``Stateful`` protocol, which Hugging Face's
``IterableDataset`` implements), its iterator's, and the global random generators its
``__getitem__`` / ``__iter__`` (and the collate function) draw from. So each worker — a
process, a thread, or the main process with ``num_workers=0`` — reports with every batch it
makes what it has made (batches, items) and, when it has state, a *snapshot*: that state,
its generators' (:mod:`fastdata.loader._rng`), as plain JSON (:mod:`fastdata.loader._jsonable`).
The report travels with the batch (:class:`Carried`), so the main process knows, for each
batch it hands to the consumer, exactly where the worker that made it stood.

Resuming is the reverse, in the worker, before its first batch (:class:`WorkerPlan`): a
map-style dataset gets its saved state and generators back; an iterable one gets its
dataset's state (before ``iter()``), its iterator's (after), its generators, and then skips
the items delivered after the snapshot — without a snapshot (a dataset without
``state_dict``) it replays its iterator from the epoch's start, which the restored worker
seeds make identical. An iterable worker that had ended yields nothing.

An iterable worker reports once more after its iterator ends, so a state saved between
epochs holds the dataset's state after its last item: :class:`WorkerSide` yields
:data:`END` to fill the last batch, and the collate step turns a batch holding it into the
real items (or none: a report-only :class:`Carried` the loader does not hand out).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.utils.data import IterableDataset, get_worker_info

from fastdata.loader import _rng
from fastdata.loader._jsonable import decode, encode

__all__ = ["END", "Carried", "IterableSide", "ReportingCollate", "WorkerPlan", "WorkerSide"]


class _End:
    """The item an iterable worker yields after its iterator ended (see the module docs)."""

    def __reduce__(self) -> str:
        return "END"  # one object per process, also after pickling


class _Nothing:
    """The batch of a report-only :class:`Carried`."""

    def __reduce__(self) -> str:
        return "NOTHING"


END = _End()
NOTHING = _Nothing()


def stateful(obj: Any) -> bool:
    """Whether ``obj`` has torchdata's ``Stateful`` protocol (``state_dict`` and
    ``load_state_dict``)."""
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None)
    )


@dataclass(frozen=True)
class WorkerPlan:
    """Where one worker resumes: its last snapshot (None: from the epoch's start), the
    batches and items it had delivered, and whether its iterator had ended."""

    snapshot: dict[str, Any] | None
    batches: int = 0
    items: int = 0
    ended: bool = False


class Carried:
    """A batch with the report of the worker that made it. torch's pin-memory step pins any
    object with a ``pin_memory()`` method by calling it: this one pins the batch only."""

    __slots__ = ("batch", "report")

    def __init__(self, batch: Any, report: dict[str, Any]) -> None:
        self.batch = batch
        self.report = report

    def pin_memory(self, device: Any = None) -> Carried:
        from fastdata._torch_compat import pin_memory

        if self.batch is NOTHING:
            return self
        return Carried(pin_memory(self.batch, device), self.report)


class WorkerSide:
    """The resume and report duties of one iterator's workers (a copy in each worker).

    Args:
        dataset: the user's dataset (each worker's own copy, once pickled there).
        kind: ``"map"`` or ``"iterable"``.
        plans: each worker's :class:`WorkerPlan`, by worker id (empty: a fresh start).
        every: an iterable worker snapshots its state every ``every`` of its batches (and
            when it ends); a map-style one with every batch.
        rng: include the global generators in snapshots.
        batching: ``(batched, batch_size, drop_last)`` of torch's batching: whether it
            collates lists of items (``batch_size`` or a ``batch_sampler``), and for an
            iterable dataset the batch size and ``drop_last``.
        in_process: the main process iterates (``num_workers=0``): no snapshots, the loader
            reads the dataset's state itself when asked.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        kind: Literal["map", "iterable"],
        plans: dict[int, WorkerPlan],
        every: int,
        rng: bool,
        batching: tuple[bool, int | None, bool],
        in_process: bool,
    ) -> None:
        self.dataset = dataset
        self.kind = kind
        self.plans = dict(plans)
        self.every = every
        self.rng = rng
        self.batched, self.batch_size, self.drop_last = batching
        self.in_process = in_process
        self.iterator: Any = None
        self.start_rng: dict[str, Any] | None = None  # the generators at the epoch's start
        self.batches = 0  # made by this worker, this epoch
        self.items = 0
        self.has_state = stateful(dataset)
        # A map-style worker process fetches whatever indices come, with nothing from torch
        # when a persistent worker's next epoch begins: the loader counts epochs here, in
        # shared memory, bumped before the epoch's first indices are sent (after every
        # earlier task is done), and the worker starts counting afresh when it changes.
        # Thread workers are told by their own loop (new_epoch()).
        self.epochs = (
            torch.zeros(1, dtype=torch.int64).share_memory_()
            if kind == "map" and not in_process
            else None
        )
        self.epoch = 0

    # ----------------------------------------------------------------- resume
    def _plan(self) -> WorkerPlan | None:
        """This worker's plan, once (a persistent worker's later epochs start afresh)."""
        info = get_worker_info()
        return self.plans.pop(0 if info is None else info.id, None)

    def start_map(self) -> None:
        """A map-style worker's resume: its dataset's state and generators, once."""
        plan = self._plan()
        self.new_epoch()
        if plan is None:
            return
        self.batches, self.items = plan.batches, plan.items
        snapshot = plan.snapshot or {}
        if snapshot.get("dataset") is not None and self.has_state:
            self.dataset.load_state_dict(decode(snapshot["dataset"]))
        if snapshot.get("rng") is not None and self.rng:
            _rng.restore(snapshot["rng"])
        _rng.restore_own(snapshot.get("own_rng"))

    def new_epoch(self) -> None:
        """Count this worker's batches and items afresh: its (next) epoch begins."""
        self.batches = self.items = 0
        self.epoch = 0 if self.epochs is None else int(self.epochs)

    def iterate(self) -> Iterator[Any]:
        """The user's dataset as an iterable worker iterates it (see the module docstring).
        Like torch's fetcher, it calls ``iter(dataset)`` at once (an error surfaces where
        torch raises it), and resumes at once too: restores, and skips what was delivered."""
        plan = self._plan()
        snapshot = (plan.snapshot if plan else None) or {}
        # In the main process the global generators are the training loop's too: a replay
        # from the epoch's start runs under them as they were when the epoch started.
        replay = snapshot.get("replay_rng")
        self.start_rng = replay or (_rng.capture() if self.in_process else None)
        self.batches, self.items = (plan.batches, plan.items) if plan else (0, 0)
        with contextlib.nullcontext() if replay is None else _rng.using(replay):
            if snapshot.get("dataset") is not None:
                self.dataset.load_state_dict(decode(snapshot["dataset"]))
            elif snapshot.get("own") and snapshot.get("iterator") is not None:
                # its own iterator: before iter() too, which may start its epoch from it
                self.dataset.load_state_dict(decode(snapshot["iterator"]))
            iterator = iter(self.dataset)
            self.iterator = iterator
            if snapshot.get("iterator") is not None:
                iterator.load_state_dict(decode(snapshot["iterator"]))
            if snapshot.get("rng") is not None and self.rng:
                _rng.restore(snapshot["rng"])
            _rng.restore_own(snapshot.get("own_rng"))
            items = _nexts(iterator)  # next() only: iter() again may reset a dataset
            skip = 0 if plan is None or plan.ended else self.items - snapshot.get("items", 0)
            skipped = sum(1 for _ in itertools.islice(items, skip))
        ended = (plan is not None and plan.ended) or skipped < skip
        return self._rest(iter(()) if ended else items)

    def _rest(self, items: Iterator[Any]) -> Iterator[Any]:
        """``items``, then :data:`END` to fill the batch under way (or make one): the last
        report travels in it."""
        pulled = self.items
        for item in items:
            pulled += 1
            yield item
        size = self.batch_size
        yield from itertools.repeat(END, 1 if size is None else size - pulled % size)

    # ----------------------------------------------------------------- report
    def report(self, items: int, *, end: bool = False, batch: bool = True) -> dict[str, Any]:
        """What this worker has made once it took ``items`` items (``batch``: into a batch
        it hands out; ``end``: its iterator ended), with a snapshot when one is due."""
        if self.epochs is not None and int(self.epochs) != self.epoch:
            self.new_epoch()  # the first batch of a persistent worker's next epoch
        self.batches += batch
        self.items += items
        snapshot = None
        if not self.in_process and self._snapshot_due(end):
            snapshot = self._snapshot()
        info = get_worker_info()
        return {
            "worker": 0 if info is None else info.id,
            "batches": self.batches,
            "items": self.items,
            "ended": end,
            "snapshot": snapshot,
        }

    def _snapshot_due(self, end: bool) -> bool:
        if self.kind == "map":
            return self.has_state or self.rng or _rng.capture_own() is not None
        if end:  # where a worker that lives on (persistent) starts the next epoch
            return True
        if not (self.has_state or stateful(self.iterator)):
            return False  # nothing to restore: a resume replays from the epoch's start
        return self.every > 0 and self.batches > 0 and self.batches % self.every == 0

    def _snapshot(self) -> dict[str, Any]:
        """This worker's state now, as plain JSON; an error (a state JSON cannot hold) is
        kept as its message, for the loader's ``state_dict()`` to raise."""
        # A dataset that is its own iterator is restored before iter() (which may build its
        # epoch from the state) and after it (which may reset it), as its iterator.
        own = self.iterator is not None and self.iterator is self.dataset
        dataset = None if own or not self.has_state else self.dataset
        iterator = self.iterator if stateful(self.iterator) else None
        try:
            return {
                "batches": self.batches,
                "items": self.items,
                "dataset": None if dataset is None else encode(dataset.state_dict()),
                "iterator": None if iterator is None else encode(iterator.state_dict()),
                "own": own,  # the dataset is its own iterator: its state lives on
                "rng": _rng.capture() if self.rng else None,
                "own_rng": _rng.capture_own(),  # the worker's fastdata.worker_generator()
            }
        except Exception as exc:  # the user's state_dict() failed, or holds what JSON cannot
            return {"error": f"{type(exc).__name__}: {exc}"}

    def for_thread(self, dataset: Any) -> WorkerSide:
        """This side for one thread worker reading ``dataset``: counters and plans of its
        own, and no global generators (they are the process's, not the thread's)."""
        own = copy.copy(self)
        own.dataset, own.plans, own.rng, own.epochs = dataset, dict(self.plans), False, None
        own.has_state = stateful(dataset)
        own.iterator = None
        return own

    def state_now(self) -> dict[str, Any] | None:
        """A snapshot taken now, in this process (``num_workers=0``): the dataset's state,
        or, for an iterable dataset without one, what replays the epoch from its start."""
        if self.kind == "iterable" and not (self.has_state or stateful(self.iterator)):
            start = self.start_rng
            return None if start is None else {"batches": 0, "items": 0, "replay_rng": start}
        return self._snapshot() if self.has_state or stateful(self.iterator) else None


def _nexts(iterator: Any) -> Iterator[Any]:
    """The items of ``iterator`` by ``next()`` alone, as torch's fetcher takes them (a
    dataset that is its own iterator may start over on every ``iter()``)."""
    while True:
        try:
            yield next(iterator)
        except StopIteration:
            return


class IterableSide(IterableDataset):
    """What torch's iterator gets as the dataset of an iterable loader: the user's dataset
    behind :meth:`WorkerSide.iterate`."""

    def __init__(self, side: WorkerSide) -> None:
        self.side = side

    def __iter__(self) -> Iterator[Any]:
        return self.side.iterate()


class ReportingCollate:
    """The loader's collate function, then the worker's report: each batch leaves as a
    :class:`Carried`. Items that are :data:`END` are taken out first (see the module
    docstring); a batch left without items, or short under ``drop_last``, carries the
    report alone."""

    def __init__(self, collate: Callable[[Any], Any], side: WorkerSide) -> None:
        self.collate = collate
        self.side = side

    def __call__(self, data: Any) -> Carried:
        side = self.side
        if side.kind == "map":
            return Carried(self.collate(data), side.report(_count(data, side)))
        if side.batch_size is None:
            if data is END:
                return Carried(NOTHING, side.report(0, end=True, batch=False))
            return Carried(self.collate(data), side.report(1))
        real = [item for item in data if item is not END]
        end = len(real) < len(data)
        if not real or (end and side.drop_last and len(real) < side.batch_size):
            return Carried(NOTHING, side.report(len(real), end=end, batch=False))
        return Carried(self.collate(real), side.report(len(real), end=end))


def _count(data: Any, side: WorkerSide) -> int:
    """Items in a map-style fetch: a list of them with batching, one item without."""
    return len(data) if side.batched else 1
