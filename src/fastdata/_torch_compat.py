"""The torch internals fastdata uses outside its loader, each checked by a test.

fastdata builds on torch's public API; where that is not enough, the private names it needs
are reached from here (and, for the DataLoader's iterators, from
``fastdata.loader._torch_iterators``) only, so that a torch upgrade that moves one breaks one
place (and ``tests/test_torch_compat.py``, which names the torch versions they were checked
against).

Checked against torch 2.5 - 2.14 (the supported range; CI runs the newest).
"""

from __future__ import annotations

import re
import sys
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import torch
import torch.utils.data._utils.collate as _collate_module
import torch.utils.data._utils.worker as _worker_module
import torch.utils.data.dataloader as _dataloader

T = TypeVar("T")

__all__ = [
    "CHECKED_TORCH",
    "TORCH_DATALOADER",
    "WORKER_RERAISE",
    "WorkerPool",
    "in_worker_process",
    "install_thread_worker_info",
    "pin_memory",
    "set_thread_worker_info",
    "shared_fd_storage",
    "shared_storage",
    "thread_worker_info",
    "upsample_bilinear_aa",
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


# torch's ExceptionWrapper.reraise(): "Caught DecodeError in DataLoader worker process 1.\n
# Original Traceback (most recent call last): ...\nfastdata.errors.DecodeError: why [where]"
# ("worker thread 1" from fastdata's thread workers, which re-raise the same way).
WORKER_RERAISE = re.compile(r"Caught \w+ in DataLoader worker (?:process|thread) \d+\.\n")
"""The start of the message torch gives an exception it re-raises from a worker."""


def release_frames(error: BaseException) -> None:
    """Clear the locals of the finished frames below the current one in ``error``'s
    traceback: torch's ``ExceptionWrapper.reraise()`` keeps the exception in a local of its
    own frame (a reference cycle through the traceback), and the iterator's frames hold the
    iterator, so a failed iterator lived on until the cycle collector ran and then shut its
    workers down in arbitrary order (5 s per worker waiting on queues already finalized).
    The traceback keeps every frame and line; only finished frames' variables go."""
    below = error.__traceback__.tb_next if error.__traceback__ is not None else None
    traceback.clear_frames(below)


def pin_memory(batch: Any, device: Any = None) -> Any:
    """torch's own pinning of a nested batch (``torch.utils.data._utils.pin_memory``)."""
    from torch.utils.data._utils.pin_memory import pin_memory as pin

    return pin(batch, device)


# --------------------------------------------------------------------------- thread workers
_thread = threading.local()


def thread_worker_info() -> Any:
    """The calling thread's WorkerInfo when it is a thread worker, else None."""
    return getattr(_thread, "info", None)


_TENSOR_COLLATE = _collate_module.collate_tensor_fn.__code__
"""torch's ``default_collate`` for tensors, which asks ``get_worker_info()`` whether to build
the batch in a fresh shared-memory segment (for a worker *process* to hand over)."""


def _answer_thread() -> Any:
    """What ``get_worker_info()`` answers its caller in a thread worker: the thread's info,
    except to torch's tensor collate, which would otherwise put every batch in a fresh
    shared-memory segment, whoever calls ``default_collate`` there (the loader, a user's
    ``collate_fn``, a dataset); a thread hands its batch over in the same process."""
    caller = sys._getframe(1).f_back  # 1: get_worker_info; None when C code called it
    if caller is not None and caller.f_code is _TENSOR_COLLATE:
        return None
    return getattr(_thread, "info", None)


def _get_worker_info() -> Any:  # the body torch's get_worker_info runs once installed
    info = _fastdata_thread_worker_info()  # type: ignore[name-defined]  # noqa: F821
    return _worker_info if info is None else info  # type: ignore[name-defined]  # noqa: F821


def install_thread_worker_info() -> None:
    """Make ``torch.utils.data.get_worker_info()`` answer per thread: in a fastdata thread
    worker, that worker's ``WorkerInfo``; elsewhere what it answered before (None in the main
    process, the process's in a worker process).

    torch keeps the info in a module global, one per process; every name for the function
    (``torch.utils.data.get_worker_info``, ``...dataloader.get_worker_info``, a user's own
    import) is the one function object, whose code is replaced here, once. Idempotent."""
    module = _worker_module
    function = module.get_worker_info
    if function.__code__ is not _get_worker_info.__code__:
        module._fastdata_thread_worker_info = _answer_thread  # type: ignore[attr-defined]
        function.__code__ = _get_worker_info.__code__


def set_thread_worker_info(info: Any) -> None:
    """The calling thread's WorkerInfo (None: not a worker)."""
    _thread.info = info


class WorkerPool(ThreadPoolExecutor):
    """A thread pool whose tasks see the ``get_worker_info()`` of the thread that submitted
    them. In a worker process every thread sees the process's info; a thread worker's info is
    its thread's own, so without this a task it hands to a pool (reading ahead, decoding)
    would see None, and a reader that shards or seeds by worker would behave as in the main
    process."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        info = thread_worker_info()
        if info is None:
            return super().submit(fn, *args, **kwargs)
        return super().submit(_as_worker, info, fn, *args, **kwargs)


def _as_worker(info: Any, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` with this thread answering ``get_worker_info()`` as ``info``."""
    previous = thread_worker_info()
    set_thread_worker_info(info)
    try:
        return fn(*args, **kwargs)
    finally:
        set_thread_worker_info(previous)


def in_worker_process() -> bool:
    """Whether this code runs in a DataLoader worker *process* (whose batches cross to the
    main process through shared memory), as opposed to the main process or a thread worker."""
    return _worker_module._worker_info is not None


def persistent_iterator(loader: Any) -> Any:
    """The iterator a DataLoader with ``persistent_workers=True`` keeps between epochs (torch's
    ``DataLoader._iterator``), or None."""
    return loader._iterator


def stop_persistent_workers(loader: Any) -> None:
    """Shut down the workers of the iterator ``loader`` keeps between epochs and forget it,
    so that the next ``iter(loader)`` starts new workers (from a loaded state, say)."""
    running = loader._iterator
    if running is not None:
        running._shutdown_workers()
        loader._iterator = None
