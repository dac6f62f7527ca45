"""What runs in DataLoader workers, and what the loader does to start them.

- **Set-up** (:class:`WorkerInit`, :func:`opencv_single_threaded_fork`): OpenCV's own thread
  pool is capped at one thread per worker (the workers are the parallelism): spawned workers
  set it in fastdata's worker init, to which a user's ``worker_init_fn`` is chained; forked
  workers inherit it from the parent, which holds the cap only while it forks them
  (reconfiguring OpenCV inside a forked child deadlocks).
- **Thread pools** (:class:`ThreadPools`): each process starts its own (a forked worker
  inherits the pool objects but not their threads). Thread workers share one
  (:class:`BatchOrderedPool`, found through :func:`item_pool`) that runs the earliest batch's
  tasks first.
- **Batch buffers** (:func:`batch_buffer`): a batch built in a worker lives in shared memory,
  in a reused segment where that is safe (below).

**Reused shared-memory segments.** torch hands a worker's tensor to the main process as a
shared-memory segment (only its file descriptor travels), but in a fresh segment per batch,
and a fresh segment costs more than filling it: reserving one zeroes every page and the
first touch faults each one in (measured in docs/guides/images.md). A worker here keeps a
few segments (memfd), writes each batch through a mapping of its own that stays faulted in,
and hands a segment out again once no process holds anything of the batch it carried before.

What is handed over is an ordinary torch shared-memory tensor (torch's file-descriptor
storage, ``is_shared()``), so it behaves everywhere as the batch torch's ``default_collate``
builds in a worker: passed on to another process, the same descriptor travels, and nothing
is moved or copied.

How a worker knows a segment is free: each hand-over opens the segment anew through
``/proc/self/fd``, which makes a new *open file description*, and puts an OFD read lock on
it. Every descriptor torch derives from that one (``dup``, sending it to the main process and
on, ``fork``) and every mapping of it refer to the same description, and the kernel drops the
lock only when the last of them is gone, in every process. The worker asks for a write lock
on its own description of the segment (``F_OFD_GETLK``), which conflicts with the lock of any
hand-over still alive anywhere.

Where this is unavailable (not Linux, no ``/proc``, or torch's ``file_system`` sharing
strategy, under which torch would copy the batch into a segment of its own anyway), each batch
gets a fresh segment, as with torch.

Reuse also needs the process that receives the batches to share by file descriptor: torch
there keeps a cache of the storages it received, keyed by the segment's inode, which is the
same for every reuse of one segment. Under ``file_system``, re-sharing a received batch
(``share_memory_()``, a ``torch.multiprocessing`` queue) moves it to a new segment and lets go
of ours, yet the cache still holds the moved storage under our inode, and would hand it out
again for the next batch sent in our segment. A worker does not see the receiver's strategy
(spawned workers do not inherit it), so the caller passes ``reuse=False`` when the receiver's
is ``file_system`` (:class:`~fastdata.ImageStream` records it when it is pickled for
workers). Switching the receiver to ``file_system`` after its workers have started is not
detected: set the strategy before iterating, as torch advises.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import mmap
import multiprocessing
import os
import queue
import struct
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from typing import Any

import numpy as np
import torch
import torch.multiprocessing

from fastdata._torch_compat import (
    WorkerPool,
    in_worker_process,
    set_thread_worker_info,
    shared_fd_storage,
    shared_storage,
    thread_worker_info,
)

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "SEGMENTS_PER_WORKER",
    "BatchOrderedPool",
    "ThreadPools",
    "WorkerInit",
    "batch_buffer",
    "in_batch",
    "item_pool",
    "opencv_single_threaded_fork",
    "receiver_sharing",
    "start_method",
]


class WorkerInit:
    """fastdata's worker set-up, then the user's ``worker_init_fn`` (picklable for spawn).

    In a fresh (spawned or forkserver) worker, OpenCV's own thread pool is capped at one
    thread: the workers are the parallelism. A forked worker is left alone: reconfiguring the
    pool it inherited from a parent that already used it deadlocks in OpenCV (the parent caps
    it around the fork instead, see :func:`opencv_single_threaded_fork`).
    """

    def __init__(self, user_fn: Any, *, limit_opencv: bool) -> None:
        self.user_fn = user_fn
        self.limit_opencv = limit_opencv

    def __call__(self, worker_id: int) -> None:
        if "cv2" in sys.modules and self.limit_opencv:  # only if the pipeline uses OpenCV
            from fastdata.decode import limit_opencv_threads

            limit_opencv_threads(1)
        if self.user_fn is not None:
            self.user_fn(worker_id)


@contextlib.contextmanager
def opencv_single_threaded_fork(loader: Any) -> Iterator[None]:
    """While forking workers, cap OpenCV's pool at one thread so each forked worker runs
    single-threaded OpenCV (the workers are the parallelism); the parent's setting is put
    back once they are started. Thread workers share the process's setting: nothing to do
    (capping it while they start would change it under their first batches)."""
    forking = (
        loader.num_workers > 0
        and getattr(loader, "worker_method", "multiprocessing") == "multiprocessing"
        and start_method(loader.multiprocessing_context) == "fork"
    )
    if "cv2" not in sys.modules or not forking:
        yield
        return
    from fastdata.decode import limit_opencv_threads

    previous = limit_opencv_threads(1)
    try:
        yield
    finally:
        limit_opencv_threads(previous)


def start_method(context: Any) -> str:
    if isinstance(context, str):
        return context
    if context is not None:  # anything else is torch's to reject, with its own message
        return context.get_start_method() if hasattr(context, "get_start_method") else ""
    # Without pinning the process-wide default (unlike multiprocessing.get_context()).
    return (
        multiprocessing.get_start_method(allow_none=True)
        or (multiprocessing.get_all_start_methods()[0])
    )


class ThreadPools:
    """Named thread pools, one set per process: a forked DataLoader worker inherits the pool
    objects but not their threads, and a pickled owner none at all, so each process starts its
    own on first use. Pickles as empty."""

    def __init__(self) -> None:
        self._pools: dict[str, tuple[int, WorkerPool]] = {}

    def get(self, name: str, threads: int) -> WorkerPool:
        """This process's pool ``name`` (``threads`` threads when it is started here)."""
        owner, pool = self._pools.get(name, (None, None))
        if pool is None or owner != os.getpid():
            worker = thread_worker_info()  # a thread worker's pools carry its id
            pool = WorkerPool(threads, f"fastdata-{name}{f'-w{worker.id}' if worker else ''}")
            self._pools[name] = (os.getpid(), pool)
        return pool

    def __getstate__(self) -> dict[str, Any]:
        return {"_pools": {}}


_LAST = (math.inf, math.inf)  # after every task: where a thread is told to stop
_thread = threading.local()  # a thread worker's shared pool and the batch it is making


class BatchOrderedPool(Executor):
    """Threads that the thread workers of one loader share, running earlier batches' tasks
    first.

    With threads of its own, a worker would decode the first batch alone while the others
    decode batches not yet wanted. Here every thread takes the task of the earliest batch in
    flight (the batch its submitter is making, :func:`in_batch`; tasks from outside a batch
    last), so all of them decode the first batch; a full pipeline keeps them busy either way.
    A task sees the ``get_worker_info()`` of its submitter (as
    :class:`~fastdata._torch_compat.WorkerPool`'s do). Threads start as the pool grows
    (:meth:`grow`) and end at :meth:`shutdown`, which cancels the tasks not yet started.
    """

    _EMPTY = queue.Empty  # a shutdown at interpreter exit may outlive the module globals

    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: queue.PriorityQueue = queue.PriorityQueue()
        self._order = itertools.count()  # ties (one batch's tasks) run in submission order
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def grow(self, threads: int) -> None:
        """At least ``threads`` threads from now on."""
        with self._lock:
            while not self._closed and len(self._threads) < threads:
                thread = threading.Thread(
                    target=self._run, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """``fn(*args, **kwargs)`` on the pool, ordered by the submitting thread's batch."""
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot submit to a pool that was shut down")
            key = getattr(_thread, "batch", None) or (math.inf, 0)
            call = (future, fn, args, kwargs, thread_worker_info())
            self._tasks.put((key, next(self._order), call))
        return future

    def _run(self) -> None:
        while True:
            key, _, (future, fn, args, kwargs, info) = self._tasks.get()
            if key == _LAST:
                return
            if not future.set_running_or_notify_cancel():
                continue
            set_thread_worker_info(info)
            try:
                result = fn(*args, **kwargs)
            except BaseException as error:
                future.set_exception(error)
            else:
                future.set_result(result)
            finally:
                set_thread_worker_info(None)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = True) -> None:
        """Cancel the tasks not started (unless ``cancel_futures=False``), let the running
        ones finish and, with ``wait``, join the threads (a second of grace for a task stuck
        in C code, as the thread workers get). Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                while cancel_futures:
                    try:
                        _, _, (future, *_) = self._tasks.get_nowait()
                    except self._EMPTY:
                        break
                    future.cancel()
                    future.set_running_or_notify_cancel()  # wakes concurrent.futures.wait()
                for _ in self._threads:
                    self._tasks.put((_LAST, next(self._order), (None, None, (), {}, None)))
        if wait:
            for thread in self._threads:
                if thread is not threading.current_thread():
                    thread.join(timeout=1.0)


@contextlib.contextmanager
def in_batch(pool: BatchOrderedPool, key: tuple[int, int]) -> Iterator[None]:
    """Inside the block, this thread is a thread worker making the batch ``key`` (epoch,
    task): :func:`item_pool` answers ``pool``, and its tasks rank by ``key``."""
    _thread.pool, _thread.batch = pool, key
    try:
        yield
    finally:
        _thread.pool = _thread.batch = None


def item_pool(pools: ThreadPools, name: str, threads: int) -> Executor | None:
    """Where a stage runs its per-item tasks (each image's decode) with ``threads`` threads
    per worker: in a thread worker, the pool the loader's thread workers share, grown to
    ``threads`` x ``num_workers`` (:class:`BatchOrderedPool`); elsewhere this process's pool
    ``name`` of ``pools``, or None (run them inline) for one thread."""
    shared: BatchOrderedPool | None = getattr(_thread, "pool", None)
    info = thread_worker_info()
    if shared is not None and info is not None and threads * info.num_workers > 1:
        shared.grow(threads * info.num_workers)
        return shared
    return pools.get(name, threads) if threads > 1 else None


def receiver_sharing() -> str:
    """The sharing strategy of this process, recorded by a stream when it is pickled for its
    workers (spawned workers do not inherit it; it decides whether segments can be reused)."""
    return torch.multiprocessing.get_sharing_strategy()


def batch_buffer(
    shape: tuple[int, ...], *, receiver: str | None = None
) -> tuple[torch.Tensor, np.ndarray]:
    """An uninitialised uint8 tensor of ``shape`` and a numpy array to fill it through.

    Inside a DataLoader worker it lives in shared memory (a reused segment unless the process
    receiving the batches, ``receiver``, shares by ``file_system``), so handing it over moves
    no bytes, as with the batches torch's ``default_collate`` builds there.
    """
    if not in_worker_process():  # the main process or a thread worker: plain memory
        batch = torch.empty(shape, dtype=torch.uint8)
        return batch, batch.numpy()
    return shared_batch(shape, reuse=receiver in (None, "file_descriptor"))


SEGMENTS_PER_WORKER = 8
"""Segments a worker keeps: the batches in flight (``prefetch_factor``, 2 by default), the
one being consumed and the ones the consumer still holds, with room to spare. When all are
busy, a batch gets a fresh segment."""

_SUPPORTED = (
    sys.platform == "linux"
    and hasattr(os, "memfd_create")
    and hasattr(fcntl, "F_OFD_GETLK")
    and os.path.isdir("/proc/self/fd")
)
_FLOCK = "hhqqi4x"  # struct flock: l_type, l_whence, l_start, l_len, l_pid (64-bit Linux)


def _lock(fd: int, command: int, kind: int) -> int:
    """An OFD lock ``command`` of ``kind`` on the first byte of ``fd``; the lock type the
    kernel answers (for ``F_OFD_GETLK``, ``F_UNLCK`` when nothing conflicts)."""
    request = struct.pack(_FLOCK, kind, os.SEEK_SET, 0, 1, 0)
    return struct.unpack(_FLOCK, fcntl.fcntl(fd, command, request))[0]


class _Segment:
    """One memfd of ``nbytes`` bytes, mapped for writing in the worker that owns it."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.fd = os.memfd_create("fastdata-batch", os.MFD_CLOEXEC)
        weakref.finalize(self, os.close, self.fd)
        os.ftruncate(self.fd, nbytes)
        os.posix_fallocate(self.fd, 0, nbytes)  # out of memory: an error now, not SIGBUS later
        self.map = mmap.mmap(self.fd, nbytes)

    def busy(self) -> bool:
        """Whether a hand-over of this segment is still alive in any process."""
        return _lock(self.fd, fcntl.F_OFD_GETLK, fcntl.F_WRLCK) != fcntl.F_UNLCK

    def lend(self, shape: tuple[int, ...]) -> tuple[torch.Tensor, np.ndarray]:
        """A tensor of ``shape`` over a new locked description of the segment, to hand over,
        and an array over the worker's own mapping of the same bytes, to write through."""
        fd = os.open(f"/proc/self/fd/{self.fd}", os.O_RDWR | os.O_CLOEXEC)
        try:
            _lock(fd, fcntl.F_OFD_SETLK, fcntl.F_RDLCK)
            storage = shared_fd_storage(fd, self.nbytes)  # dups fd
        finally:
            os.close(fd)
        tensor = torch.empty(0, dtype=torch.uint8).set_(storage).view(shape)
        return tensor, np.frombuffer(self.map, dtype=np.uint8).reshape(shape)


_pool: list[_Segment] = []
_pool_pid: int | None = None
_pool_lock = threading.Lock()  # a segment found free is locked before another thread looks


def shared_batch(shape: tuple[int, ...], *, reuse: bool = True) -> tuple[torch.Tensor, np.ndarray]:
    """An uninitialised uint8 tensor of ``shape`` in shared memory, for a DataLoader worker
    to hand over without a copy, and a numpy array over the same bytes to fill it through.

    The tensor lives in a free segment of this process's pool where one fits and ``reuse``
    is true (see the module docstring; false when the receiving process shares by
    ``file_system``), else in a fresh segment.
    """
    if reuse:
        with _pool_lock:
            segment = _free_segment(math.prod(shape))
            if segment is not None:
                return segment.lend(shape)
    storage = shared_storage(math.prod(shape))
    tensor = torch.empty(0, dtype=torch.uint8).set_(storage).view(shape)
    return tensor, tensor.numpy()


def _free_segment(nbytes: int) -> _Segment | None:
    """A segment of exactly ``nbytes`` that no hand-over holds: a free one of the pool, else
    a new one while the pool has room (replacing a free one of another size when full)."""
    global _pool, _pool_pid
    if not _SUPPORTED or torch.multiprocessing.get_sharing_strategy() != "file_descriptor":
        return None
    if _pool_pid != os.getpid():  # a forked child inherits the list, not the right to it
        _pool, _pool_pid = [], os.getpid()
    free = [segment for segment in _pool if not segment.busy()]
    for segment in free:
        if segment.nbytes == nbytes:
            return segment
    if len(_pool) >= SEGMENTS_PER_WORKER:
        if not free:
            return None
        _pool.remove(free[0])
    segment = _Segment(nbytes)
    _pool.append(segment)
    return segment
