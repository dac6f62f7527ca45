"""What one epoch of a loader's iterator handed to the consumer: the facts a state is made of.

The iterators (:mod:`fastdata.loader._torch_iterators`, and the thread workers) tell a
:class:`Record` each batch they hand out — which worker made it, that worker's report
(:mod:`fastdata.loader._worker_side`) and, for a map-style loader, the sampler's position
once the batch's indices were drawn — and that the epoch ended. The loader turns a record
into a state (:mod:`fastdata.loader._resume`); the record never holds the iterator, so an
abandoned iterator (and its workers) can go.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Position", "Record", "epoch_start"]


@dataclass(frozen=True)
class Position:
    """A map-style sampler's position once a batch's indices were drawn: batches (tasks) so
    far this epoch, the offset past the batch's last *unit* (what the sampler's iterator
    yields: an index, or a batch of a batch sampler of the user's) and of its first, the
    states of samplers with ``state_dict()`` (see :mod:`fastdata.loader._indices`) and the
    digest of the first ``covered`` units the epoch drew, which a replay checks (None: not
    kept). ``covered`` is ``units`` but where a resume drew ahead to check its digest."""

    tasks: int
    units: int
    first: int = 0
    states: dict[str, Any] | None = None
    # (fastdata.loader._digest): they follow from where, not part of it
    digest: str | None = field(default=None, compare=False)
    covered: int = field(default=0, compare=False)


class Record:
    """The facts of one epoch of one iterator (see the module docstring).

    Args:
        readers: DataLoader workers, or 1 for the main process.
        batches: batches handed out before this iterator (a resumed epoch's).
        workers: each worker's last report before this iterator (a resumed epoch's).
        prefix: a map-style sampler's consumed position before this iterator.
    """

    def __init__(
        self,
        readers: int,
        *,
        batches: int = 0,
        workers: list[dict[str, Any] | None] | None = None,
        prefix: Position | None = None,
        done: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self.readers = readers
        self.batches = batches
        self.handed = [0] * readers  # batches handed out, per worker, by this iterator
        self.workers: list[dict[str, Any] | None] = list(workers or [None] * readers)
        self.snapshots: list[dict[str, Any] | None] = [
            None if w is None else w.get("snapshot") for w in self.workers
        ]
        self.finished = False
        self.next_worker = 0
        self.base_seed: int | None = None
        self.start: Any = None  # a stream's loaded position its readers began from
        self.prefix = prefix or Position(0, 0)
        self.done: dict[int, Position] = {}  # consumed beyond the prefix, by task
        # unit ranges a loaded state had consumed beyond its prefix (absolute offsets)
        self.carried = [(self.prefix.units + o, n) for o, n in done]
        self._sent: list[deque[Position]] = [deque() for _ in range(readers)]
        # With a stage between torch's iterator and the consumer (device= prefetches), the
        # facts wait here until the consumer gets their batch (commit()).
        self.deferred = False
        self._arrived: deque[tuple[str, tuple[Any, ...]]] = deque()
        # A stream's counts of what its batches hold (fastdata.sources.tally.Delivery):
        # each batch's, carried in its report, counted as the consumer gets it.
        self.delivery: Any = None

    def follow(self, previous: Record) -> None:
        """This record is the next epoch of ``previous``'s persistent workers: their base seed
        stays, and each worker starts it where it ended that one (its last snapshot, counted
        from this epoch's start): a state saved before a worker's first report of this epoch
        restores it from there, not from a fresh worker's generators."""
        self.base_seed = previous.base_seed
        self.snapshots = [None if s is None else epoch_start(s) for s in previous.snapshots]

    def arrive(self, fact: str, *args: Any) -> None:
        """A fact from the iterator (``"handed_out"``, ``"reported"`` or ``"end"``), applied
        now, or when the consumer gets the batch it came with (``deferred``)."""
        if self.deferred:
            self._arrived.append((fact, args))
        else:
            getattr(self, fact)(*args)

    def commit(self, *, all_: bool = False) -> None:
        """The consumer got the next batch (``all_``: reached the end): apply the facts that
        arrived up to it."""
        while self._arrived:
            fact, args = self._arrived.popleft()
            getattr(self, fact)(*args)
            if fact == "handed_out" and not all_:
                return

    def end(self) -> None:
        """The consumer saw the epoch end."""
        self.finished = True
        if self.delivery is not None:
            self.delivery.end()

    def sent(self, worker: int, position: Position) -> None:
        """A map-style batch (whose indices leave the sampler at ``position``) went to
        ``worker``; workers hand their batches back in the order they got them."""
        self._sent[worker].append(position)

    def take_sent(self, worker: int) -> Position | None:
        """The position of the oldest batch ``worker`` has not handed back yet."""
        return self._sent[worker].popleft() if self._sent[worker] else None

    def handed_out(
        self, worker: int, report: dict[str, Any] | None, position: Position | None, turn: int
    ) -> None:
        """The consumer got a batch from ``worker`` (``report``: the worker's; ``position``:
        the sampler's once its indices were drawn, for a map-style loader; ``turn``: the
        worker whose batch comes next)."""
        self.batches += 1
        self.next_worker = turn
        self.handed[worker] += 1
        if report is not None and "tally" in report:  # a stream's counts (see delivery)
            self.delivery.handed(worker, report["tally"])
        elif report is not None:
            self.reported(worker, report)
        if position is not None:
            self.consumed(position)

    def reported(self, worker: int, report: dict[str, Any]) -> None:
        """A worker's report arrived (with a batch, or alone when its iterator ended)."""
        self.workers[worker] = report
        if report.get("snapshot") is not None:
            self.snapshots[worker] = report["snapshot"]

    def consumed(self, position: Position) -> None:
        """The batch that left the sampler at ``position`` is consumed (handed out, or
        skipped as consumed before a resume): move the prefix over it and over every batch
        consumed out of order right after it."""
        if position.tasks != self.prefix.tasks + 1:
            self.done[position.tasks] = position
            return
        self.prefix = position
        while self.prefix.tasks + 1 in self.done:
            self.prefix = self.done.pop(self.prefix.tasks + 1)

    def beyond(self) -> list[list[int]]:
        """Unit ranges consumed beyond the prefix (out of order), as ``[offset, count]``
        counted from the prefix's end."""
        end = self.prefix.units
        ranges = [(p.first, p.units - p.first) for p in self.done.values()]
        ranges += [(s, n) for s, n in self.carried if s >= end]
        return [[s - end, n] for s, n in sorted(ranges)]

    def __repr__(self) -> str:
        return (
            f"Record(batches={self.batches}, handed={self.handed}, finished={self.finished}, "
            f"prefix={self.prefix})"
        )


def epoch_start(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A worker's snapshot at the end of an epoch, as where it starts the next: nothing
    made yet, and no iterator (the next epoch makes a new one), unless the dataset is its own
    iterator, whose state lives on."""
    started = {**snapshot, "batches": 0, "items": 0}
    if not started.get("own"):
        started["iterator"] = None
    return started
