"""A trial's memory: the summed RSS of this process and its workers, and the ceiling it keeps.

:func:`rss_reader` gives the peak a trial reports: the resident set size of the main process
plus all its descendants (the workers). RSS counts pages shared between processes (forked
workers share the parent's pages copy-on-write) once per process, so it overstates the true
total: a safe upper bound for ``max_memory``. :class:`MemoryGuard` reads the same numbers to
keep a trial under a ceiling: past it (or when the machine's available memory runs low) the
trial is stopped, and its processes killed if it does not stop, before the machine swaps or
the OOM killer picks a victim.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["MemoryGuard", "rss_reader"]


def rss_reader(refresh_s: float = 0.2) -> Callable[[], float | None]:
    """A function returning the summed RSS (bytes) of this process and its descendants.

    Finding the descendants scans every process on the machine (milliseconds), so the list
    is refreshed only every ``refresh_s`` seconds (often enough that a trial's new workers
    count within a fifth of a second, which the memory ceiling relies on); reading the memory
    of known processes is cheap (microseconds each), so the sampler barely loads a core.
    """
    import psutil

    me = psutil.Process()
    known: list[Any] = []
    refreshed = -math.inf

    def read() -> float | None:
        nonlocal known, refreshed
        if time.monotonic() - refreshed >= refresh_s:
            known, refreshed = me.children(recursive=True), time.monotonic()
        total = me.memory_info().rss
        for child in known:
            try:
                total += child.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue  # a worker that exited
        return float(total)

    return read


class MemoryGuard:
    """Keeps each trial under a memory ceiling, so that no trial swaps or meets the OOM killer.

    :func:`~fastdata.tune.measure.measure` reads the memory through :meth:`read` (every sample
    of its background thread). Once the summed RSS of this process and its descendants passes
    ``ceiling``, the guard *trips*: it records why in :attr:`tripped`, and the trial ends after
    the batch in progress, shutting its workers down (a worker makes at most
    ``prefetch_factor`` batches ahead, so stopping the requests stops the growth) and
    reporting it refused. When the trial has not stopped :data:`GRACE_S` seconds after the
    trip (a worker stuck making one huge batch), or at once when the machine's available
    memory falls below ``floor`` (other programs use memory too), the guard kills the
    processes started since :meth:`start` (the trial's workers), which makes the loader fail.
    A trial without workers cannot be stopped mid-batch: it ends after the batch in progress.

    Args:
        ceiling: bytes of summed RSS a trial may reach (None: no ceiling).
        floor: bytes of available memory the machine must keep (None: not checked).
        read_rss: the summed RSS (default :func:`rss_reader`).
        read_available: the machine's available memory (default psutil's).
        processes: the process ids of this process's descendants (default psutil's).
        kill: kills one process id (default ``SIGKILL``).
        clock: the time source of the grace period.
    """

    GRACE_S = 0.5
    """Seconds a tripped trial has to stop by itself before its workers are killed."""

    def __init__(
        self,
        ceiling: int | None,
        *,
        floor: int | None = None,
        read_rss: Callable[[], float | None] | None = None,
        read_available: Callable[[], float] | None = None,
        processes: Callable[[], set[int]] | None = None,
        kill: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ceiling, self.floor = ceiling, floor
        self._read_rss = read_rss if read_rss is not None else rss_reader()
        self._read_available = read_available or _available_memory
        self._processes = processes or _descendants
        self._kill = kill or _kill
        self._clock = clock
        self._lock = threading.Lock()
        self._before: set[int] = set()
        self._tripped_at = 0.0
        self._stopped = False
        self.tripped: str | None = None
        self.killed: list[int] = []

    def start(self) -> None:
        """A new trial: forget the last one's trip and note the processes already running."""
        with self._lock:
            self.tripped, self.killed, self._stopped = None, [], False
            self._before = self._processes()

    def stop(self) -> bool:
        """The trial stops by itself (no kill from now on); whether the guard already killed
        its workers (the loader then fails, and its error is the guard's doing)."""
        with self._lock:
            self._stopped = True
            return bool(self.killed)

    def read(self) -> float | None:
        """The summed RSS; trips the guard (once) when a limit is passed, and kills the
        trial's workers when it must (see the class docstring)."""
        from fastdata.tune.words import format_size

        rss = self._read_rss()
        low = self.floor is not None and (available := self._read_available()) < self.floor
        with self._lock:
            if self.tripped is None and self.ceiling is not None and (rss or 0) > self.ceiling:
                self.tripped = (
                    f"used {format_size(rss or 0)}, over the memory ceiling of "
                    f"{format_size(self.ceiling)}"
                )
                self._tripped_at = self._clock()
            if self.tripped is None and low:
                self.tripped = (
                    f"the machine's available memory fell to {format_size(available)}, under "
                    f"the floor of {format_size(self.floor or 0)}"
                )
                self._tripped_at = self._clock()
            late = self.tripped is not None and self._clock() - self._tripped_at >= self.GRACE_S
            if (low or late) and self.tripped is not None and not self._stopped:
                self._kill_new()
        return rss

    def _kill_new(self) -> None:
        for pid in sorted(self._processes() - self._before - set(self.killed)):
            with contextlib.suppress(OSError):
                self._kill(pid)
                self.killed.append(pid)


def _available_memory() -> float:
    import psutil

    return float(psutil.virtual_memory().available)


def _descendants() -> set[int]:
    import psutil

    with contextlib.suppress(psutil.Error):
        return {p.pid for p in psutil.Process().children(recursive=True)}
    return set()


def _kill(pid: int) -> None:
    import os
    import signal

    os.kill(pid, signal.SIGKILL)
