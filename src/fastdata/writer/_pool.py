"""The worker processes of a local :func:`~fastdata.writer.write_shards`: a
``ProcessPoolExecutor`` whose workers never outlive the conversion.

Plain pool workers do: a parent killed by SIGTERM (what Slurm, Kubernetes and ``timeout``
send) or SIGKILL left its workers writing on for minutes, reparented to init and holding
its stdout and stderr open, so ``fastdata convert ... | tee log`` never returned. So, as
torch's DataLoader workers do, each worker watches its parent (:func:`watch_parent`): on
Linux the kernel sends it SIGTERM when the parent dies (``prctl(PR_SET_PDEATHSIG)``),
elsewhere a thread polls ``os.getppid()``.

A worker stops on SIGTERM: a shard it is writing is abandoned (its temporary file deleted,
its partial upload removed) and the process exits; a finished shard is complete. Workers
ignore SIGINT: Ctrl-C reaches the whole process group, and the parent alone decides. A
parent that stops early (``KeyboardInterrupt``, or the exception ``fastdata convert`` raises
for SIGTERM) sends its workers SIGTERM rather than waiting for their shards
(:func:`write_in_pool`); a failed shard still lets the others being written finish.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from types import FrameType
from typing import Any

from fastdata.workers import start_method
from fastdata.writer._shard_files import BadImage, ShardTask, write_shard

__all__ = ["watch_parent", "write_in_pool"]

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_STOPPED = 128 + signal.SIGTERM  # a worker's exit status when it stops on SIGTERM
_POLL_S = 0.5  # how often the portable fallback looks at the parent
_GRACE_S = 10.0  # how long stopping workers get to delete their temporary files
_AGAIN_S = 0.01  # when a SIGTERM that could not raise is delivered again

Result = tuple[int, int, list[BadImage]]


def write_in_pool(
    tasks: list[ShardTask], workers: int, progress: Callable[[str, Result], None]
) -> None:
    """Write ``tasks`` on ``workers`` processes, calling ``progress(name, result)`` in this
    process as each shard finishes (in the order they finish).

    An exception from a shard (or from ``progress``) stops the conversion: shards not started
    are cancelled, those being written finish, and it is raised. Any other way out
    (``KeyboardInterrupt``, ``SystemExit``, the CLI's SIGTERM) stops the workers at once.
    """
    method = start_method(None)  # the default context's, the process-wide one unpinned
    pool = ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context(method),
        initializer=watch_parent,
        initargs=(os.getpid(), method),
    )
    try:
        futures = {pool.submit(_write, task): task.name for task in tasks}
        for future in as_completed(futures):
            progress(futures[future], future.result())
    except Exception:
        pool.shutdown(cancel_futures=True)
        raise
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown()


def _stop(pool: ProcessPoolExecutor) -> None:
    """Send every worker SIGTERM, give them :data:`_GRACE_S` to delete their temporary files
    (SIGKILL after that), then shut the pool down."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        with contextlib.suppress(Exception):  # exited already
            process.terminate()
    deadline = time.monotonic() + _GRACE_S
    running = processes
    while running and (left := deadline - time.monotonic()) > 0:
        ended = multiprocessing.connection.wait([process.sentinel for process in running], left)
        running = [process for process in running if process.sentinel not in ended]
    for process in running:
        with contextlib.suppress(Exception):
            process.kill()
    pool.shutdown(cancel_futures=True)


# ----------------------------------------------------------------------------- in a worker
_writing = False  # a shard is being written: SIGTERM unwinds it first
_stopping = False  # SIGTERM came: the worker exits


class _Stop(BaseException):
    """Raised by SIGTERM in a worker writing a shard, to delete its temporary file first."""


def watch_parent(owner: int, method: str) -> None:
    """The pool workers' initializer: exit when the parent dies, stop on SIGTERM, leave
    SIGINT to the parent.

    Args:
        owner: the pid of the process that made the pool.
        method: its start method; under ``"forkserver"`` the worker's parent is the fork
            server, which exits when ``owner`` does.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    sys.unraisablehook = _StopUnraised(sys.unraisablehook)
    parent = os.getppid() if method == "forkserver" else owner
    armed = _exit_with_parent()
    if os.getppid() != parent:  # it died before the kernel was told to signal its death
        os._exit(_STOPPED)
    if not armed:
        threading.Thread(target=_poll, args=(parent,), name="fastdata-parent", daemon=True).start()


def _exit_with_parent() -> bool:
    """Ask Linux to send this process SIGTERM when its parent dies; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGTERM), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _poll(parent: int) -> None:
    """Where prctl is missing: SIGTERM this process once its parent is gone (a new parent
    on POSIX; on Windows, where a parent's death changes nothing, the pid gone)."""
    import psutil

    while os.getppid() == parent and psutil.pid_exists(parent):
        time.sleep(_POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _stopping
    if _stopping:  # a second SIGTERM (the parent's, then its death's): one is enough
        return
    _stopping = True
    if _writing:
        raise _Stop
    os._exit(_STOPPED)


class _StopUnraised:
    """The worker's ``sys.unraisablehook``: a :class:`_Stop` that SIGTERM raised where Python
    cannot raise (a weakref callback, a ``__del__``: as a SIGKILLed parent's workers' garbage
    collection ran one) is not printed as "Exception ignored in ...", but delivered again
    :data:`_AGAIN_S` later, to unwind the shard from where it is being written then; every
    other unraisable exception goes to the hook there was."""

    def __init__(self, hook: Callable[[Any], object]) -> None:
        self.hook = hook

    def __call__(self, unraisable: Any) -> None:
        global _stopping
        if not isinstance(unraisable.exc_value, _Stop):
            self.hook(unraisable)
            return
        _stopping = False  # nothing was unwound: the next SIGTERM raises again
        again = threading.Timer(_AGAIN_S, os.kill, (os.getpid(), signal.SIGTERM))
        again.daemon = True
        again.start()


def _write(task: ShardTask) -> Result:
    """:func:`write_shard` in a worker: on SIGTERM its ``finally`` deletes the temporary
    file, then the worker exits."""
    global _writing
    _writing = True
    try:
        result = write_shard(task)
    except _Stop:
        os._exit(_STOPPED)
    finally:
        _writing = False
        if _stopping:  # the _Stop was swallowed on the way (or came just after the shard)
            os._exit(_STOPPED)
    return result
