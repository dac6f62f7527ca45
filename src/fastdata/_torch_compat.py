"""Every use of torch internals in fastdata, in one file, each checked by a test.

fastdata builds on torch's public API; where that is not enough, the private names it needs
are reached from here only, so that a torch upgrade that moves one breaks one place (and
``tests/test_torch_compat.py``, which names the torch versions they were checked against).

Checked against torch 2.5 - 2.14 (the supported range; CI runs the newest).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import sys
import threading
import time
import weakref
from typing import Any

import torch
import torch.utils.data.dataloader as _dataloader

__all__ = [
    "CHECKED_TORCH",
    "TORCH_DATALOADER",
    "WORKER_RERAISE",
    "DataLoaderHooks",
    "IteratorRecord",
    "SingleIterator",
    "WorkerIterator",
    "drain_sampler",
    "num_yielded",
    "pin_memory",
    "shared_fd_storage",
    "shared_storage",
    "upsample_bilinear_aa",
    "worker_iterator",
]

CHECKED_TORCH = "2.14.1"
"""The torch release every name here was last checked against (``tests/test_torch_compat.py``)."""


def _torch_dataloader() -> type:
    """torch's own ``DataLoader`` class, found once, at import.

    Users install a replacement loader by assigning it over torch's names
    (``torch.utils.data.DataLoader = fastdata.DataLoader``, before or after this import, in
    ``torch.utils.data`` or ``torch.utils.data.dataloader``); a replacement subclasses
    torch's class, so torch's own is the one in the class's MRO that torch's module defined.
    Everything in fastdata that needs torch's class uses this one, never the names.
    """
    for cls in _dataloader.DataLoader.__mro__:
        if cls.__module__ == _dataloader.__name__ and cls.__qualname__ == "DataLoader":
            return cls
    raise ImportError(
        f"torch.utils.data.dataloader.DataLoader is {_dataloader.DataLoader!r}, which does not "
        "subclass torch's DataLoader; fastdata builds on torch's own class: import fastdata "
        "before replacing torch's DataLoader with another class"
    )


TORCH_DATALOADER: type = _torch_dataloader()
"""torch's own DataLoader class, whatever torch's names point to now (see above)."""


def num_yielded(iterator: Any) -> int:
    """Batches torch's DataLoader iterator has handed out (``_num_yielded``)."""
    return int(iterator._num_yielded)


class IteratorRecord:
    """What the loader needs to know of its current iterator without keeping it alive (an
    iterator kept alive keeps its worker processes): its length, and the batches it handed out
    (live while it exists, final once it is gone)."""

    __slots__ = ("batches", "length", "ref", "workers")
    length: float

    def __init__(self, iterator: Any) -> None:
        self.ref = weakref.ref(iterator)
        self.length = length(iterator)
        self.batches = 0
        self.workers = bytearray()  # the worker of every batch fetched (multi-process only)

    def reset(self, iterator: Any) -> None:
        """A new epoch of the same iterator (persistent workers)."""
        self.length = length(iterator)
        self.batches = 0
        self.workers = bytearray()

    def next_worker(self, consumed: int) -> int:
        """The worker whose batch comes after the first ``consumed`` (torch's turn)."""
        if len(self.workers) > consumed:
            return self.workers[consumed]
        iterator = self.ref()
        info = getattr(iterator, "_task_info", {}).get(getattr(iterator, "_rcvd_idx", -1))
        return int(info[0]) if info else 0

    @property
    def iterator(self) -> Any:
        return self.ref()

    def handed_out(self) -> int:
        iterator = self.ref()
        return self.batches if iterator is None else num_yielded(iterator)


def length(iterator: Any) -> float:
    """Batches the iterator yields in all (infinite for an iterable dataset: torch's index
    sampler there has no length)."""
    try:
        return len(iterator)
    except TypeError:
        return math.inf


def _close(iterator: Any) -> None:
    """When an iterator goes: note its count, and if it handed out the whole epoch, let its
    sampler make its last draws, as a run that reached the end would have."""
    record = getattr(iterator, "_fd_record", None)
    if record is not None:
        record.batches = num_yielded(iterator)
        if record.batches >= record.length:
            drain_sampler(iterator)


class SingleIterator(_dataloader._SingleProcessDataLoaderIter):
    """torch's single-process iterator, reporting to its :class:`IteratorRecord` when it goes."""

    _fd_record: IteratorRecord | None = None

    def __del__(self, _finalizing: Any = sys.is_finalizing) -> None:
        if not _finalizing():  # at interpreter exit there is no next epoch to record for
            _close(self)


def drain_sampler(iterator: Any) -> None:
    """Run the iterator's index sampler to its end (``_sampler_iter``). A sampler makes its
    last random draws only when asked past the last batch; an uninterrupted run does that
    before the next epoch, so a state saved at an epoch's end must too."""
    sampler_iter = getattr(iterator, "_sampler_iter", None)
    for _ in sampler_iter or ():
        pass


def shared_storage(nbytes: int) -> torch.UntypedStorage:
    """A fresh shared-memory storage of ``nbytes`` (``UntypedStorage._new_shared``), what
    torch's ``default_collate`` allocates in a worker."""
    return torch.UntypedStorage._new_shared(nbytes)


def shared_fd_storage(fd: int, nbytes: int) -> torch.UntypedStorage:
    """torch's file-descriptor shared storage over the memfd ``fd`` (duplicated:
    ``UntypedStorage._new_shared_fd_cpu``), so the tensor is shared as torch shares its own."""
    return torch.UntypedStorage._new_shared_fd_cpu(fd, nbytes)  # type: ignore[attr-defined]


def upsample_bilinear_aa(image: torch.Tensor, hw: tuple[int, int], out: torch.Tensor) -> None:
    """torch's antialiased bilinear resize (``F.interpolate(..., antialias=True)``'s kernel),
    written into ``out``: ``F.interpolate`` has no ``out=``, and the copy it would need is
    saved."""
    torch._C._nn._upsample_bilinear2d_aa(image, hw, False, None, None, out=out)  # type: ignore[call-arg]


class DataLoaderHooks:
    """The private hooks of torch's DataLoader that ``fastdata.DataLoader`` overrides (put it
    first among the bases): the iterator it makes (:func:`worker_iterator`), and the index
    sampler that iterator draws from (the loader's ``_resumed_sampler(torch's own)``)."""

    def _get_iterator(self) -> Any:
        iterator, _ = worker_iterator(self)
        return iterator

    @property
    def _index_sampler(self) -> Any:
        base = TORCH_DATALOADER._index_sampler.fget(self)  # type: ignore[attr-defined]
        return self._resumed_sampler(base)  # type: ignore[attr-defined]


# torch's ExceptionWrapper.reraise(): "Caught DecodeError in DataLoader worker process 1.\n
# Original Traceback (most recent call last): ...\nfastdata.errors.DecodeError: why [where]".
WORKER_RERAISE = re.compile(r"Caught \w+ in DataLoader worker process \d+\.\n")
"""The start of the message torch gives an exception it re-raises from a worker."""


def pin_memory(batch: Any, device: Any = None) -> Any:
    """torch's own pinning of a nested batch (``torch.utils.data._utils.pin_memory``)."""
    from torch.utils.data._utils.pin_memory import pin_memory as pin

    return pin(batch, device)


_GRACE_S = 2.0  # how long a worker that broke the hand-over gets to be seen dead


class WorkerIterator(_dataloader._MultiProcessingDataLoaderIter):
    """torch's multi-process iterator, with two failure modes made loud and bounded.

    - A worker that dies while handing a batch over (its shared-memory descriptor travels
      through a socket to the worker) makes torch raise a bare ``ConnectionResetError`` or
      ``EOFError``; here it becomes a ``RuntimeError`` naming the worker and how it ended.
    - With ``timeout=``, torch's timer covers waiting for a batch but not receiving it: a
      worker that is stopped (SIGSTOP) or hung with the GIL held after announcing a batch
      blocks the receive forever. A watchdog thread ends such a receive once the timeout has
      passed by killing the workers, and the error says the loader timed out.
    """

    def __init__(self, loader: Any) -> None:
        self._fd_watch: _Watch | None = None
        self._fd_pid = os.getpid()
        super().__init__(loader)
        if self._timeout > 0:
            # The watchdog thread sees only this small record, never the iterator: holding the
            # iterator would keep an abandoned one, and so its workers, alive.
            self._fd_watch = _Watch(list(self._workers), id(self))
            threading.Thread(
                target=self._fd_watch.run, name="fastdata-timeout", daemon=True
            ).start()

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
        described = ", ".join(f"{i} (pid {w.pid}) {_ended(w.exitcode)}" for i, w in dead)
        return RuntimeError(
            f"DataLoader worker {described} while handing over a batch; the batch is lost, "
            "so the epoch cannot complete"
        )

    _fd_record: IteratorRecord | None = None

    def __del__(self, _finalizing: Any = sys.is_finalizing, _getpid: Any = os.getpid) -> None:
        if not _finalizing() and getattr(self, "_fd_pid", None) == _getpid():
            _close(self)  # as SingleIterator's; torch's own clean-up still runs
        super().__del__()

    def _process_data(self, data: Any, worker_idx: int) -> Any:
        if self._fd_record is not None:
            self._fd_record.workers.append(worker_idx % 256)
        return super()._process_data(data, worker_idx)

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
        super()._shutdown_workers()


class _Watch:
    """The watchdog of a :class:`WorkerIterator` with a timeout: once a receive has run past
    its ``deadline`` (set around each receive), kill the workers; the receive then fails and
    the error says why (``timed_out``). Ends when ``done`` is set (the iterator shuts down).

    Before killing, it takes the workers out of torch's SIGCHLD registry (``unregistered``,
    under ``lock``, which the iterator's shut-down takes too): torch's handler would otherwise
    raise "worker killed by signal" in the main thread wherever it is when they die, possibly
    after the timeout error was caught, in the caller's own code."""

    def __init__(self, workers: list[Any], iterator_id: int) -> None:
        self.workers = workers
        self.iterator_id = iterator_id
        self.deadline: float | None = None
        self.timed_out = False
        self.unregistered = False
        self.done = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.done.wait(0.25):
            deadline = self.deadline
            if deadline is None or time.monotonic() < deadline:
                continue
            with self.lock:
                if self.done.is_set():
                    return
                self.timed_out = True
                _dataloader._utils.signal_handling._remove_worker_pids(self.iterator_id)
                self.unregistered = True
                for worker in self.workers:
                    if worker.pid is not None and worker.exitcode is None:
                        with contextlib.suppress(OSError):
                            os.kill(worker.pid, signal.SIGKILL)
            return


def _ended(exitcode: int) -> str:
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name}"
    return f"exited with code {exitcode}"


def worker_iterator(loader: Any) -> tuple[Any, IteratorRecord]:
    """The iterator torch's ``DataLoader._get_iterator`` would make (as
    :class:`SingleIterator` / :class:`WorkerIterator`), and its record."""
    # (torch warned of too many workers when the loader was made: once is enough)
    iterator: Any = SingleIterator(loader) if loader.num_workers == 0 else WorkerIterator(loader)
    iterator._fd_record = IteratorRecord(iterator)
    return iterator, iterator._fd_record
