"""The stage between torch's iterator and the consumer, when the loader has one: the device
transfer (``device=``) and the consumer's wait (``stats=True``).

The consumer's wait is the time blocked in ``iter()`` (workers started or reset) and in
``next()`` here, as a loop timing itself around them measures it; the part of it not spent
waiting for torch's iterator is the transfer (copies issued, normalization). Counts go to
:class:`Progress`, not to the loader: torch's ``DataLoader.__setattr__`` is Python code, too
slow to run per batch. The epoch's :class:`~fastdata.loader._record.Record` learns of a batch
when the consumer gets it, not when the device stage prefetches it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from fastdata._stats import StageTimes, WaitClock
from fastdata.loader._record import Record

__all__ = ["Progress", "consumer_stage"]


class Progress:
    """What the loader's iterations have handed out and how long they took (see stats())."""

    __slots__ = ("batches", "wait", "wall")

    def __init__(self) -> None:
        self.batches = 0  # over all iterations
        self.wait = 0.0
        self.wall = 0.0


def consumer_stage(
    iterator: Any,
    record: Record,
    progress: Progress,
    *,
    starting: float,
    device: Any,
    normalize: Any,
    pin_memory: bool,
    times: StageTimes | None,
) -> Iterator[Any]:
    """Iterate ``iterator`` for the consumer, moving batches to ``device`` and timing the
    wait (``starting``: seconds already spent in ``iter()``)."""
    loaded = WaitClock(iterator) if device is not None or pin_memory else None
    batches: Any = iterator if loaded is None else loaded
    if device is not None:
        from fastdata.device import to_device

        batches = to_device(batches, device, normalize=normalize)
        record.deferred = True
    source = iter(batches)
    transfer = times if device is not None else None
    clock = time.perf_counter
    progress.wait += starting
    now = clock()
    start = now - starting
    wall_before = progress.wall
    while True:
        try:
            batch = next(source)
        except StopIteration:
            record.commit(all_=True)
            break
        finally:
            asked, now = now, clock()
            progress.wait += now - asked
        record.commit()
        if transfer is not None and loaded is not None:
            transfer.add("transfer", now - asked - loaded.take())
        progress.batches += 1
        progress.wall = wall_before + now - start
        yield batch
        now = clock()  # the consumer's step is not waiting
    progress.wall = wall_before + clock() - start
