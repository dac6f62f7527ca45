"""Thread workers (``worker_method="thread"``): the pipeline inside the training process.

``num_workers`` threads fetch and collate batches as worker processes do, and hand them over
through a queue — no pickling, no shared-memory segment, no second copy of the batch. What is
heavy in fastdata's pipelines releases the GIL (pyarrow's reading and decoding, OpenCV and the
libjpeg extension, the resize extension, collate over buffers), so threads run it in parallel.

:class:`ThreadIterator` is torch's iterator protocol (``_BaseDataLoaderIter``: the sampler,
the base seed, ``__next__``, ``__len__``) with torch's multi-process iterator's behaviour:
``prefetch_factor`` batches in flight per worker, batches in order (or as they come, with
``in_order=False``), an iterable dataset's worker that ends is skipped, an error is re-raised
in the consumer with its type and where it happened, ``timeout=`` bounds each wait,
``persistent_workers`` keeps the threads (and their dataset copies) for the next epoch.

What a thread worker sees: ``torch.utils.data.get_worker_info()`` answers per thread (id,
``num_workers``, ``seed`` = base seed + id, its dataset); the ``worker_init_fn`` runs in the
thread. A map-style dataset gets a shallow copy per thread (``copy.copy``): what
``worker_init_fn`` sets on ``get_worker_info().dataset`` (a file handle, a connection) is that
thread's own, as in a worker process, while the data the dataset holds is shared, not
duplicated (its ``__getitem__`` must be safe to call from several threads at once on it; an
array or tensor given as the dataset is shared as it is); an iterable dataset (and a fastdata
stream) gets a copy per thread, made as a worker process gets one — pickled — except that
shared-memory tensors stay shared (a stream's epoch, its counters). The collate function and
the worker init are copied with the dataset, as a worker process gets them
(:class:`~fastdata.loader._thread_copies.ThreadCopies`): a method of the dataset is bound to
the thread's copy, a collate object with state has one per thread; functions are shared.
The global random generators are the process's: threads do not seed them, and their draws
interleave (see the loader guide); :func:`fastdata.worker_generator` is a generator of the
thread's own.

No state is shared between threads without a lock: each thread owns its inbox, its dataset
copy and its fetcher; results meet in one thread-safe queue; the iterator's own bookkeeping is
touched by the consumer thread only. Nothing assumes the GIL serialises anything.
"""

from __future__ import annotations

import atexit
import itertools
import queue
import threading
import time
import traceback
import weakref
from typing import Any

import torch.utils.data.dataloader as _dataloader
from torch.utils.data._utils import ExceptionWrapper
from torch.utils.data._utils.worker import WorkerInfo

from fastdata._torch_compat import (
    install_thread_worker_info,
    pin_memory,
    release_frames,
    set_thread_worker_info,
)
from fastdata.loader._thread_copies import ThreadCopies
from fastdata.loader._torch_iterators import _SKIP, LoaderView, Setup, WorkerStart, _Hooks
from fastdata.loader._worker_side import IterableSide, ReportingCollate, WorkerSide
from fastdata.workers import BatchOrderedPool, in_batch

__all__ = ["ThreadIterator"]

_POLL_S = 0.1  # how often a waiting thread looks whether the iterator went away
_LIVE: weakref.WeakSet[ThreadIterator] = weakref.WeakSet()  # iterators whose threads may run


@atexit.register
def _stop_all() -> None:
    """At interpreter exit, stop the threads of every iterator still alive while the
    interpreter is whole: a daemon thread still inside C++ code (OpenCV, pyarrow) when the
    interpreter finalizes can abort the process, and a ``__del__`` run that late meets
    modules already torn down."""
    for iterator in list(_LIVE):
        iterator._shutdown_workers()


class _Exhausted:
    """What an iterable dataset's thread sends once its iterator ended."""

    __slots__ = ()


_EXHAUSTED = _Exhausted()


class _Worker:
    """One thread worker: its inbox, its dataset and the loop that serves it."""

    def __init__(
        self, worker_id: int, iterator: ThreadIterator, results: queue.Queue, copies: ThreadCopies
    ) -> None:
        self.id = worker_id
        self.inbox: queue.Queue = queue.Queue()
        self.results = results
        self.done = iterator._fd_done
        self.pool = iterator._fd_pool
        # (side: the worker's resume-and-report duties; None for a stream, which has its own)
        dataset, collate, self.init_fn, self.side = _worker_parts(iterator._fd, copies)
        self.info = WorkerInfo(
            id=worker_id,
            num_workers=iterator._num_workers,
            seed=iterator._base_seed + worker_id,
            dataset=dataset,
        )
        # What the loop needs of the iterator, taken now: the thread must not hold the
        # iterator (an abandoned one must go, and stop its threads).
        self.iterable = iterator._dataset_kind == _dataloader._DatasetKind.Iterable
        self.fetcher_args = (
            iterator._dataset_kind,
            dataset,
            iterator._auto_collation,
            collate,
            iterator._drop_last,
        )
        self.thread = threading.Thread(
            target=self.run, name=f"fastdata-worker-{worker_id}", daemon=True
        )
        # What ended the thread when it was not an Exception (SystemExit, ...): a worker
        # process would have died; the consumer reports it (ThreadIterator._get_data).
        self.died: BaseException | None = None
        self.trace = ""  # where it happened, as a worker process would have printed it

    def run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # Exceptions are handed over as results in _serve
            self.died = exc
            self.trace = "".join(traceback.format_exception(exc))
        finally:
            set_thread_worker_info(None)

    def _serve(self) -> None:
        set_thread_worker_info(self.info)
        failed: ExceptionWrapper | None = None
        try:
            if self.init_fn is not None:
                self.init_fn(self.id)
        except Exception:
            failed = _wrapped(self.id)
        fetcher, epoch = None, -1
        while not self.done.is_set():
            try:
                task = self.inbox.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if task is None:
                break
            index_id, task_epoch, index = task
            data: Any
            if failed is not None:
                data = failed
            else:
                try:
                    if task_epoch != epoch:  # a new epoch: a new iterator over the dataset
                        fetcher = _dataloader._DatasetKind.create_fetcher(*self.fetcher_args)
                        if epoch >= 0 and self.side is not None:  # a persistent worker's next
                            self.side.new_epoch()
                        epoch = task_epoch
                    with in_batch(self.pool, (task_epoch, index_id)):
                        data = fetcher.fetch(index)  # type: ignore[union-attr]
                except StopIteration:  # the end of an iterable's worker, an error of a map's
                    data = _EXHAUSTED if self.iterable else _wrapped(self.id)
                except Exception:
                    data = _wrapped(self.id)
            self.results.put((index_id, task_epoch, self.id, data))


def _wrapped(worker_id: int) -> ExceptionWrapper:
    """The exception being handled, for the consumer to raise (as a worker process sends it)."""
    return ExceptionWrapper(where=f"in DataLoader worker thread {worker_id}")


def _worker_parts(setup: Setup, copies: ThreadCopies) -> tuple[Any, Any, Any, WorkerSide | None]:
    """One thread's dataset, collate function, start and worker side: its own copies
    (``copies``, of :func:`_copies`); the resume-and-report duties its own
    (:class:`~fastdata.loader._worker_side.WorkerSide`), without the global generators,
    which are the process's."""
    dataset, collate, init = copies.make()
    side = setup.side
    if side is None:  # a fastdata stream: its copy resumes and reports itself
        return dataset, collate, init, None
    own = side.for_thread(dataset)
    ours = IterableSide(own) if side.kind == "iterable" else own.dataset
    return ours, ReportingCollate(collate, own), WorkerStart(own, init), own


def _copies(setup: Setup, dataset: Any) -> ThreadCopies:
    """What each thread worker gets a copy of, together: the stream or the user's dataset
    the worker side wraps (a map-style one only ever copied shallowly), the collate function
    and the worker init."""
    side = setup.side
    if side is None:
        return ThreadCopies((dataset, setup.collate_fn, setup.worker_init_fn))
    parts = (side.dataset, setup.collate_fn.collate, setup.worker_init_fn)
    return ThreadCopies(parts, shallow=side.dataset if side.kind == "map" else None)


class ThreadIterator(_Hooks, _dataloader._BaseDataLoaderIter):  # type: ignore[misc]
    """torch's iterator protocol over thread workers (see the module docstring)."""

    def __init__(self, view: LoaderView, setup: Setup) -> None:
        self._fd = setup
        _LIVE.add(self)
        install_thread_worker_info()
        super().__init__(view)  # type: ignore[arg-type]
        self._prefetch = view.prefetch_factor * self._num_workers
        self._in_order = view.in_order
        self._fd_done = threading.Event()
        # The workers' shared threads for per-item work (decoding), earliest batch first.
        self._fd_pool = BatchOrderedPool("fastdata-worker-items")
        self._fd_epoch = 0
        self._results: queue.Queue = queue.Queue()
        copies = _copies(setup, self._dataset)
        self._fd_workers = [
            _Worker(i, self, self._results, copies) for i in range(self._num_workers)
        ]
        for worker in self._fd_workers:
            worker.thread.start()
        self._reset(view, first_iter=True)

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        super()._reset(loader, first_iter)
        if not first_iter:
            self._fd_epoch += 1
        self._send_idx = 0  # the next task sent
        self._rcvd_idx = 0  # the next task handed out (in order)
        self._task_info: dict[int, tuple[Any, ...]] = {}  # task -> (worker,) or (worker, data)
        self._tasks_outstanding = 0
        self._workers_status = [True] * self._num_workers
        first, self._fd.first_worker = self._fd.first_worker, 0
        self._fd_cycle = itertools.islice(itertools.cycle(range(self._num_workers)), first, None)
        for _ in range(self._prefetch):
            self._try_put_index()

    def _try_put_index(self) -> None:
        if self._tasks_outstanding >= self._prefetch:
            return
        try:
            index = self._next_index()
        except StopIteration:
            return
        for _ in range(self._num_workers):  # the next active worker
            worker = next(self._fd_cycle)
            if self._workers_status[worker]:
                break
        else:
            return
        self._fd_workers[worker].inbox.put((self._send_idx, self._fd_epoch, index))
        self._task_info[self._send_idx] = (worker,)
        if self._fd.indices is not None:
            self._fd.record.sent(worker, self._fd.position())  # type: ignore[arg-type]
        self._tasks_outstanding += 1
        self._send_idx += 1

    def _get_data(self) -> tuple[int, int, Any]:
        """The next result of this epoch from any worker, waiting at most ``timeout``."""
        deadline = None if self._timeout <= 0 else time.monotonic() + self._timeout
        while True:
            wait = _POLL_S if deadline is None else max(deadline - time.monotonic(), 0)
            try:
                index_id, epoch, worker, data = self._results.get(timeout=min(wait, _POLL_S))
            except queue.Empty:
                self._check_alive()
                if deadline is not None and time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"DataLoader timed out after {self._timeout} seconds (a thread worker "
                        "did not hand over its batch: stuck, or in code that holds the GIL)"
                    ) from None
                continue
            if epoch == self._fd_epoch:  # an earlier epoch's late result is dropped
                return index_id, worker, data

    def _check_alive(self) -> None:
        """Raise, as torch does for a worker process that died, when a worker thread ended
        by other than an Exception (``SystemExit``: ``sys.exit()`` in a dataset) while its
        batches are awaited."""
        dead = [w for w in self._fd_workers if w.died is not None and not w.thread.is_alive()]
        if dead and self._results.empty():
            ids = ", ".join(str(w.id) for w in dead)
            causes = "; ".join(f"{type(w.died).__name__}: {w.died}" for w in dead)
            traces = "".join(f"\nin DataLoader worker thread {w.id}:\n{w.trace}" for w in dead)
            self._shutdown_workers()
            raise RuntimeError(
                f"DataLoader worker thread {ids} exited unexpectedly ({causes}){traces}"
            ) from None

    def _next_data(self) -> Any:
        while True:
            data = self._next_result()
            if data is not _SKIP:
                return data

    def _next_result(self) -> Any:
        while self._rcvd_idx < self._send_idx:  # skip the tasks of workers that ended
            info = self._task_info.get(self._rcvd_idx)
            if info is not None and (len(info) == 2 or self._workers_status[info[0]]):
                break
            self._task_info.pop(self._rcvd_idx, None)
            self._rcvd_idx += 1
        else:
            self._fd.record.arrive("end")
            if not self._persistent_workers:
                self._shutdown_workers()
            raise StopIteration
        if len(self._task_info[self._rcvd_idx]) == 2:
            worker, data = self._task_info.pop(self._rcvd_idx)
            self._rcvd_idx += 1
            return self._process(data, worker)
        index_id, worker, data = self._get_data()
        self._tasks_outstanding -= 1
        if data is _EXHAUSTED:
            self._workers_status[worker] = False
            self._task_info.pop(index_id, None)
            self._try_put_index()
            return _SKIP
        if index_id != self._rcvd_idx and self._in_order:
            self._task_info[index_id] += (data,)
            return _SKIP
        self._task_info.pop(index_id, None)
        if index_id == self._rcvd_idx:
            self._rcvd_idx += 1
        return self._process(data, worker)

    def _process(self, data: Any, worker: int) -> Any:
        position = self._fd.record.take_sent(worker) if self._fd.indices else None
        self._try_put_index()
        if isinstance(data, ExceptionWrapper):
            try:
                data.reraise()
            except BaseException as error:
                release_frames(error)
                raise
        if self._pin_memory:
            data = pin_memory(data, self._pin_memory_device)
        upcoming = self._task_info.get(self._rcvd_idx)
        turn = upcoming[0] if upcoming else (worker + 1) % self._num_workers
        return self._handed(data, worker, position, turn)

    def _shutdown_workers(self) -> None:
        done = getattr(self, "_fd_done", None)
        if done is None or done.is_set():
            return
        done.set()
        workers = getattr(self, "_fd_workers", [])  # none when __init__ failed before them
        for worker in workers:
            worker.inbox.put(None)
        self._fd_pool.shutdown(wait=False)  # a worker waiting on its items wakes up
        for worker in workers:
            if worker.thread is not threading.current_thread():
                worker.thread.join(timeout=_POLL_S * 10)
        self._fd_pool.shutdown(wait=True)

    def __del__(self) -> None:
        self._shutdown_workers()
