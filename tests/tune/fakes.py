"""Fakes shared by the tuner's tests: a clock that moves only when told, paced loaders,
made-up trials. Nothing here sleeps except :class:`Paced` (a loader without processes)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

GiB = 1024**3


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def paced(clock: FakeClock, costs: Callable[[int], float], n: int) -> Iterator[int]:
    """A loader of ``n`` items; item ``i`` keeps the consumer waiting ``costs(i)`` seconds."""
    for i in range(n):
        clock.advance(costs(i))
        yield i


class Passes:
    """Re-iterable: every pass yields one batch per cost."""

    def __init__(self, clock: FakeClock, costs: list[float]) -> None:
        self.clock, self.costs = clock, costs

    def __iter__(self) -> Iterator[int]:
        return paced(self.clock, self.costs.__getitem__, len(self.costs))


def settings(
    workers: int, prefetch: int | None = 2, pin: bool = False, method: str = "multiprocessing"
) -> dict[str, Any]:
    """The searched settings, with torch's rule: no prefetch_factor without workers."""
    return {
        "num_workers": workers,
        "worker_method": method,
        "prefetch_factor": None if workers == 0 else prefetch,
        "pin_memory": pin,
    }


class Paced:
    """A re-iterable loader without processes: ``n`` items, ``cost_s`` of sleep each."""

    def __init__(self, n: int, cost_s: float) -> None:
        self.n, self.cost_s = n, cost_s

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            time.sleep(self.cost_s)
            yield i
