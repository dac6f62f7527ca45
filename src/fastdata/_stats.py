"""Per-stage times and counts, and the shard cache's counts, shared by the main process and
the DataLoader workers.

Each is one small shared-memory table, one row per process (row 0: the main process, row
1 + w: worker w), so every process adds to its own row and the loader sums the rows.
Recording a stage costs two float additions in shared memory per batch-sized piece of work
(its cost is measured by the ``loader-stats`` benchmark), and nothing at all when stats are
off (no table is attached).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Literal

import torch
from torch.utils.data import get_worker_info

STAGES = ("read", "decode", "transform", "collate", "pin", "transfer")
_ROWS = 1 + 256  # main process + workers
_STAGE_INDEX = {stage: i for i, stage in enumerate(STAGES)}
CACHE_COUNTS = ("hits", "misses", "fetched_bytes", "evicted", "invalid", "remote_opens")
"""What :class:`CacheCounts` counts, per process (see :mod:`fastdata.sources._cache`): opens
served from the cache, opens that fetched the file, bytes fetched, entries evicted, entries
found corrupt (and fetched again), and opens read from the remote without caching."""
_CACHE_INDEX = {name: i for i, name in enumerate(CACHE_COUNTS)}


class StageTimes:
    """Seconds and item counts per stage, summed over processes (see the module docstring)."""

    def __init__(self) -> None:
        self._table = torch.zeros(_ROWS, len(STAGES), 2, dtype=torch.float64).share_memory_()
        self._view: Any = None

    def add(self, stage: str, seconds: float, count: int = 1) -> None:
        """Add ``seconds`` spent on ``count`` items of ``stage`` in this process."""
        if self._view is None:
            self._view = _flat(self._table, "d")
        cell = (_row() * len(STAGES) + _STAGE_INDEX[stage]) * 2
        self._view[cell] += seconds
        self._view[cell + 1] += count

    def __getstate__(self) -> dict[str, Any]:
        return {"_table": self._table, "_view": None}

    def totals(self) -> dict[str, dict[str, float]]:
        """``{stage: {"seconds": s, "count": n}}`` over all processes, for stages with work."""
        summed = self._table.sum(dim=0)
        return {
            stage: {"seconds": float(summed[i, 0]), "count": int(summed[i, 1])}
            for i, stage in enumerate(STAGES)
            if summed[i, 1] > 0
        }

    def reset(self) -> None:
        self._table.zero_()


class CacheCounts:
    """The shard cache's counts (:data:`CACHE_COUNTS`) per process, in shared memory like
    :class:`StageTimes`; thread-safe within a process (read-ahead and decoder threads fetch
    at once). A cache holds one and sends it to the DataLoader workers with itself."""

    def __init__(self) -> None:
        self._table = torch.zeros(_ROWS, len(CACHE_COUNTS), dtype=torch.int64).share_memory_()
        self._view: Any = None
        self._lock = threading.Lock()

    def add(self, name: str, count: int = 1) -> None:
        """Add ``count`` to this process's ``name``."""
        with self._lock:
            if self._view is None:
                self._view = _flat(self._table, "q")
            self._view[_row() * len(CACHE_COUNTS) + _CACHE_INDEX[name]] += count

    def __getstate__(self) -> dict[str, Any]:
        return {"_table": self._table}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._table, self._view, self._lock = state["_table"], None, threading.Lock()

    def totals(self) -> dict[str, int]:
        """The counts over all processes."""
        return dict(zip(CACHE_COUNTS, self._table.sum(dim=0).tolist(), strict=True))


def _flat(table: torch.Tensor, kind: Literal["d", "q"]) -> Any:
    """A flat memoryview of a shared table: an update costs a Python float addition, not a
    torch dispatch. Made per process, once the tensor has arrived there."""
    array: Any = table.numpy()
    return memoryview(array).cast("B").cast(kind)


def _row() -> int:
    info = get_worker_info()
    return 0 if info is None else 1 + info.id % (_ROWS - 1)


class TimedCollate:
    """A collate function that records its time under ``"collate"`` (picklable for spawn).

    With ``pin``, each batch leaves wrapped in a :class:`PinTimer`, so that the time torch's
    pin-memory step spends on it is recorded too.
    """

    def __init__(self, collate_fn: Any, times: StageTimes, *, pin: bool = False) -> None:
        self.collate_fn = collate_fn
        self.times = times
        self.pin = pin

    def __call__(self, batch: Any) -> Any:
        start = time.perf_counter()
        out = self.collate_fn(batch)
        self.times.add("collate", time.perf_counter() - start)
        return PinTimer(out, self.times) if self.pin else out


class PinTimer:
    """A collated batch on its way to torch's pin-memory step.

    torch pins any object with a ``pin_memory()`` method by calling it (in the pin-memory
    thread with workers, inline without). This one pins the batch it holds with torch's own
    function and records the time under ``"pin"``. Where torch does not pin (no
    accelerator), :func:`unwrap` takes the batch out unchanged.
    """

    __slots__ = ("batch", "times")

    def __init__(self, batch: Any, times: StageTimes) -> None:
        self.batch = batch
        self.times = times

    def pin_memory(self, device: Any = None) -> Any:
        from fastdata._torch_compat import pin_memory

        start = time.perf_counter()
        pinned = pin_memory(self.batch, device)
        self.times.add("pin", time.perf_counter() - start)
        return pinned


def unwrap(batch: Any) -> Any:
    """``batch`` without its :class:`PinTimer`, if it still has one."""
    return batch.batch if isinstance(batch, PinTimer) else batch


class WaitClock:
    """Iterates ``batches`` (unwrapping :class:`PinTimer`), counting the seconds spent
    blocked in their ``next()``; :meth:`take` returns and resets the count."""

    def __init__(self, batches: Any) -> None:
        self._batches = iter(batches)
        self._seconds = 0.0

    def __iter__(self) -> WaitClock:
        return self

    def __next__(self) -> Any:
        start = time.perf_counter()
        try:
            return unwrap(next(self._batches))
        finally:
            self._seconds += time.perf_counter() - start

    def take(self) -> float:
        seconds, self._seconds = self._seconds, 0.0
        return seconds
