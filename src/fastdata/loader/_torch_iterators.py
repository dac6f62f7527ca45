"""torch's DataLoader iterators, run with fastdata's facts and resume hooks; every use of
their internals is here (``tests/test_torch_compat.py`` checks each against the installed
torch).

torch's iterator is made as torch makes it, from a :class:`LoaderView` of the loader that
replaces four things: the dataset (for an iterable one, the user's behind
:class:`~fastdata.loader._worker_side.IterableSide`), the collate function (reporting, see
:mod:`fastdata.loader._worker_side`), the index sampler (:class:`~fastdata.loader._indices.Indices`)
and the worker init. On top of torch's code, the iterators here:

- tell the epoch's :class:`~fastdata.loader._record.Record` each batch handed out (its worker,
  its report, the sampler's position) and the epoch's end, and hand out the batch alone;
- take a loaded base seed instead of drawing one (``_base_seed``), and send the first batch of
  a resumed epoch to the worker whose turn it was (``_worker_queue_idx_cycle``);
- make two failure modes of worker processes loud and bounded: a worker that dies while
  handing a batch over is named, and ``timeout=`` also covers the receive
  (:mod:`fastdata.loader._watchdog`);
- never shut down from a process forked from their owner, nor after a failed construction;
- once they stop the workers, wait for the threads that fed their queues (torch leaves them
  running, which at interpreter exit can leak a semaphore: :func:`_join_feeders`).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils.data.dataloader as _dataloader
from torch.utils.data import get_worker_info

from fastdata._torch_compat import release_frames
from fastdata.loader._indices import Indices
from fastdata.loader._record import Position, Record
from fastdata.loader._watchdog import Watch, ended
from fastdata.loader._worker_side import NOTHING, Carried, IterableSide, WorkerSide

__all__ = ["LoaderView", "Setup", "WorkerStart", "iterator_setup", "make_iterator"]

_GRACE_S = 2.0  # how long a worker that broke the hand-over gets to be seen dead
_SKIP = object()  # a report without a batch: nothing to hand out


@dataclass
class Setup:
    """What one iterator is made with, beside torch's own arguments."""

    record: Record
    dataset: Any
    collate_fn: Any
    index_sampler: Any
    worker_init_fn: Any
    base_seed: int | None = None  # a loaded seed for the workers (None: torch draws one)
    first_worker: int = 0  # the worker whose batch comes first (a loaded turn)
    indices: Indices | None = field(default=None)
    side: WorkerSide | None = None  # a user dataset's (thread workers make one each)

    def position(self) -> Position | None:
        """The sampler's position once the last batch's indices were drawn (map-style)."""
        indices = self.indices
        if indices is None:
            return None
        at, states = indices.position, indices.states()
        return at if states is None else Position(at.tasks, at.units, at.first, states)


class LoaderView:
    """The loader as torch's iterator reads it, with :class:`Setup`'s replacements."""

    def __init__(self, loader: Any, setup: Setup) -> None:
        self._loader = loader
        self.dataset = setup.dataset
        self.collate_fn = setup.collate_fn
        self._index_sampler = setup.index_sampler
        self.worker_init_fn = setup.worker_init_fn
        # A loaded base seed is taken as it is: the draw torch makes must not move the
        # user's generator (or the global one), as it did not in the saved run.
        self.generator = torch.Generator() if setup.base_seed is not None else loader.generator

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _Hooks:
    """What both iterators add to torch's (put first among the bases)."""

    _fd: Setup

    @property
    def _base_seed(self) -> int:
        return self._fd_base_seed

    @_base_seed.setter
    def _base_seed(self, drawn: int) -> None:
        loaded = self._fd.base_seed
        self._fd_base_seed = drawn if loaded is None else loaded
        self._fd.record.base_seed = self._fd_base_seed

    def _handed(self, data: Any, worker: int, position: Position | None, turn: int = 0) -> Any:
        """Record a batch that reaches the consumer (``turn``: the worker whose batch comes
        next); the batch alone (or _SKIP)."""
        record = self._fd.record
        if not isinstance(data, Carried):
            record.arrive("handed_out", worker, None, position, turn)
            return data
        if data.batch is NOTHING:
            record.arrive("reported", worker, data.report)
            return _SKIP
        record.arrive("handed_out", worker, data.report, position, turn)
        return data.batch


class SingleIterator(_Hooks, _dataloader._SingleProcessDataLoaderIter):  # type: ignore[misc]
    """torch's single-process iterator with fastdata's hooks (see the module docstring)."""

    def __init__(self, view: LoaderView, setup: Setup) -> None:
        self._fd = setup
        super().__init__(view)

    def _next_data(self) -> Any:
        while True:
            try:
                data = super()._next_data()
            except StopIteration:
                self._fd.record.arrive("end")
                raise
            data = self._handed(data, 0, self._fd.position())
            if data is not _SKIP:
                return data


class WorkerIterator(_Hooks, _dataloader._MultiProcessingDataLoaderIter):  # type: ignore[misc]
    """torch's multi-process iterator with fastdata's hooks (see the module docstring)."""

    def __init__(self, view: LoaderView, setup: Setup) -> None:
        self._fd = setup
        self._fd_watch: Watch | None = None
        self._fd_pid = os.getpid()
        super().__init__(view)
        if self._timeout > 0:
            self._fd_watch = Watch(list(self._workers), id(self))
            self._fd_watch.start()

    @property
    def _worker_queue_idx_cycle(self) -> Any:
        return self._fd_cycle

    @_worker_queue_idx_cycle.setter
    def _worker_queue_idx_cycle(self, cycle: Any) -> None:
        # torch sets a fresh cycle at each epoch's start; a resumed epoch starts at the
        # worker whose batch came next when the state was saved.
        first, self._fd.first_worker = self._fd.first_worker, 0
        self._fd_cycle = itertools.islice(cycle, first, None) if first else cycle

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        self._fd_next_epoch = not first_iter  # persistent workers: see _try_put_index
        super()._reset(loader, first_iter)

    def _try_put_index(self) -> None:
        side = self._fd.side
        if self._fd_next_epoch and side is not None and side.epochs is not None:
            # torch sends a persistent worker's next epoch's first indices only once every
            # worker finished the tasks before: from here on, their batches are the new
            # epoch's (WorkerSide.report).
            side.epochs += 1
        self._fd_next_epoch = False
        sent = self._send_idx
        super()._try_put_index()
        if self._send_idx != sent and self._fd.indices is not None:
            worker = self._task_info[sent][0]
            self._fd.record.sent(worker, self._fd.position())  # type: ignore[arg-type]

    def _process_data(self, data: Any, worker_idx: int) -> Any:
        position = self._fd.record.take_sent(worker_idx) if self._fd.indices else None
        try:
            data = super()._process_data(data, worker_idx)  # re-raises a worker's error
        except BaseException as error:
            release_frames(error)
            raise
        upcoming = self._task_info.get(self._rcvd_idx)  # torch moved on to the next batch
        turn = upcoming[0] if upcoming else (worker_idx + 1) % self._num_workers
        return self._handed(data, worker_idx, position, turn)

    def _next_data(self) -> Any:
        record = self._fd.record
        while True:
            try:
                data = super()._next_data()
            except StopIteration:
                record.arrive("end")
                raise
            if data is not _SKIP:
                return data

    def _try_get_data(self, timeout: float = _dataloader._utils.MP_STATUS_CHECK_INTERVAL) -> Any:
        watch = self._fd_watch
        if watch is not None:
            watch.deadline = time.monotonic() + timeout + _GRACE_S
        try:
            return super()._try_get_data(timeout)
        except (ConnectionError, EOFError, RuntimeError) as exc:
            if isinstance(exc, RuntimeError) and not (watch and watch.timed_out):
                raise  # torch's own, naming the worker
            raise self._hand_over_failed(exc) from exc
        finally:
            if watch is not None:
                watch.deadline = None

    def _hand_over_failed(self, exc: BaseException) -> BaseException:
        """The error for a hand-over that broke: naming the workers that died, if any."""
        if self._fd_watch is not None and self._fd_watch.timed_out:
            return RuntimeError(
                f"DataLoader timed out after {self._timeout} seconds: a worker announced a "
                "batch but did not hand it over (stopped, or hung holding the GIL); its "
                "workers were stopped"
            )
        deadline = time.monotonic() + _GRACE_S
        dead: list[tuple[int, Any]] = []
        while not dead and time.monotonic() < deadline:
            dead = [(i, w) for i, w in enumerate(self._workers) if w.exitcode is not None]
            if not dead:
                time.sleep(0.02)
        if not dead:
            return exc
        described = ", ".join(f"{i} (pid {w.pid}) {ended(w.exitcode)}" for i, w in dead)
        return RuntimeError(
            f"DataLoader worker {described} while handing over a batch; the batch is lost, "
            "so the epoch cannot complete"
        )

    def _shutdown_workers(self, _getpid: Any = os.getpid) -> None:
        # (os.getpid bound here: at interpreter exit this runs after module globals are gone)
        if not hasattr(self, "_shutdown") or getattr(self, "_fd_pid", None) != _getpid():
            # Construction failed before torch had anything to shut down, or this is a copy
            # of the iterator in a process forked from its owner (a worker of another
            # loader): the owner's workers are not this process's to stop or ask about.
            return
        watch = getattr(self, "_fd_watch", None)
        if watch is not None:
            with watch.lock:
                watch.done.set()
                if watch.unregistered:  # the watchdog took the pids out of torch's registry
                    self._worker_pids_set = False
        stopping = not self._shutdown
        super()._shutdown_workers()
        if stopping and self._shutdown:  # torch stopped the workers now (not at exit)
            _join_feeders([*getattr(self, "_index_queues", ()), self._worker_result_queue])


def _join_feeders(queues: list[Any]) -> None:
    """Wait (at most ``_GRACE_S`` in all) for the feeder threads of ``queues``, which torch
    closed without joining. A feeder holds two of its queue's semaphores, so the last one
    to drop them may be the feeder, as it ends: with spawned or fork-server workers it then
    unlinks them and tells multiprocessing's resource tracker. Should the interpreter exit
    meanwhile (a script whose last epoch just ended), the thread is stopped between the two
    and the tracker reports a leaked semaphore. Joined here, the thread is done before the
    epoch's last ``next()`` returns."""
    deadline = time.monotonic() + _GRACE_S
    for queue in queues:
        feeder = getattr(queue, "_thread", None)  # started by the queue's first put
        if feeder is not None and feeder is not threading.current_thread():
            feeder.join(max(deadline - time.monotonic(), 0))


def make_iterator(loader: Any, setup: Setup) -> Any:
    """The iterator torch's ``DataLoader._get_iterator`` would make, with ``setup``.
    (torch warned of too many workers when the loader was made: once is enough.)"""
    view = LoaderView(loader, setup)
    return SingleIterator(view, setup) if loader.num_workers == 0 else WorkerIterator(view, setup)


def iterator_setup(iterator: Any) -> Setup | None:
    """The :class:`Setup` of a loader's iterator (a persistent one is reset per epoch)."""
    return getattr(iterator, "_fd", None)


class WorkerStart:
    """A worker process's start: torch's ``get_worker_info().dataset`` made the user's own
    dataset again (the iterator was given it behind an
    :class:`~fastdata.loader._worker_side.IterableSide`), fastdata's and the user's worker
    init (``init``), then a map-style worker's resume (its dataset's state, its generators:
    after the user's init, as they were saved)."""

    def __init__(self, side: WorkerSide, init: Any) -> None:
        self.side = side
        self.init = init

    def __call__(self, worker_id: int) -> None:
        info: Any = get_worker_info()  # set: this runs in a worker
        if isinstance(info.dataset, IterableSide):
            # WorkerInfo refuses new values once made; this one is the user's own dataset.
            object.__setattr__(info, "dataset", info.dataset.side.dataset)
        self.init(worker_id)
        if self.side.kind == "map":
            self.side.dataset = info.dataset  # the worker's copy, whatever pickling did
            self.side.start_map()
