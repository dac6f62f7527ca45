"""What :func:`fastdata.bucket_by_length` returns: the bucketing's iterator, with an exact
``state_dict()`` / ``load_state_dict()``.

A pool (``boundaries=None``) is a run of consecutive rows of the stream: it fills with whole
incoming items until it holds ``buffer_size`` rows, its rows but the newest
``count % batch_size`` are sorted and cut into full batches in an order drawn from a generator
seeded with ``(seed, pool number)``, and the newest rows begin the next pool. So a pool is
rebuilt exactly from the stream's position at (or before) its first row, the pool number and
how many of its batches were yielded: that, and nothing held, is the state. The position is the
upstream's own ``state_dict()`` (a fastdata DataLoader's), taken before the first read of each
pool: one per pool. Resuming loads it into the upstream, reads (and drops) the rows before the
pool's first, rebuilds the pool and skips the batches already yielded.

Buckets (a list of ``boundaries`` or ``"auto"``) hold rows from anywhere in the stream read so
far, but each is a queue of the rows of its lengths, in stream order: its content is the last
rows put in it. So the state is a checkpoint of the upstream from before the oldest row held
(one is taken every ``buffer_size`` rows; the oldest still needed is kept), each bucket's count
of rows put in it by then, and how many of its rows after it were yielded before: a resume
re-reads from the checkpoint, drops those and so refills every bucket as it was. A bucket that
fills rarely keeps an old checkpoint: the resume then re-reads from far back (reading only).

While the bucketing holds rows read from a fastdata DataLoader, that loader's own
``state_dict()`` raises (see :mod:`fastdata._holding`): it would resume past them.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar, cast

from fastdata._holding import hold
from fastdata.errors import FastDataError, ResumeError

__all__ = ["Bucketing", "Track"]

T = TypeVar("T")
X = TypeVar("X")

_VERSION = 1


class Track:
    """The bucketing's position: rows read and yielded, the current pool (or the buckets'
    counts), checkpoints of the upstream's state."""

    def __init__(
        self, upstream: Any, make_rng: Callable[[int], Any], pooled: bool, every: int
    ) -> None:
        self.upstream = upstream  # has state_dict(), or None
        self.make_rng = make_rng
        self.pooled = pooled
        self.every = every  # buckets: rows between checkpoints
        self.read = 0  # rows read from the stream this epoch (dropped ones included)
        self.out = 0  # rows yielded (or dropped as yielded before a resume)
        self.pool = 0  # the pool being filled, or whose batches are being yielded
        self.start = 0  # its first row
        self.yielded = 0  # its batches yielded
        self.skip_rows = 0  # on resume: rows before the pool, to drop
        self.skip_batches = 0  # on resume: the pool's batches yielded before
        self.boundaries: list[int] | None = None  # the buckets' (auto ones once known)
        self.totals: list[int] = []  # buckets: rows put in each this epoch
        self.counts: list[int] = []  # buckets: rows each holds
        self.drops: list[int] = []  # buckets, on resume: rows of each to drop (yielded before)
        # (row, upstream state or its error, the buckets' totals then)
        self.checkpoints: list[tuple[int, Any, list[int]]] = []
        self.want = upstream is not None  # take a checkpoint before the next read
        self.pausing = False  # taking one: the loader must not see rows held
        self.ended = False  # the stream ended (the loader's state is of its next epoch)

    def held(self) -> int:
        return max(self.read - self.out, 0)  # (rows to drop on a resume count as out early)

    def rng(self) -> Any:
        """The generator of the current pool (the same on a resume)."""
        return self.make_rng(self.pool)

    def reading(self, items: Iterator[X], rows: Callable[[X], int]) -> Iterator[X]:
        """``items`` (read from the upstream), counted; a checkpoint before a pool's first
        (buckets: every ``every`` rows)."""
        while True:
            if self.want:
                self.want = False
                self.pausing = True
                try:
                    saved: Any = self.upstream.state_dict()
                except FastDataError as error:  # raised by state_dict(), not by the reading
                    saved = error
                finally:
                    self.pausing = False
                self.checkpoints.append((self.read, saved, list(self.totals)))
                if not self.pooled:
                    usable = [i for i, c in enumerate(self.checkpoints) if self._before(c[2])]
                    del self.checkpoints[: usable[-1] if usable else 0]
            try:
                item = next(items)
            except StopIteration:
                self.ended = True
                return
            self.read += rows(item)
            if self.totals and self.upstream is not None:  # buckets, their boundaries known
                self.want = self.read - self.checkpoints[-1][0] >= self.every
            yield item

    def pour(self, batches: Iterable[tuple[Any, int]], keep: int) -> Iterator[Any]:
        """Yield the current pool's batches (``(batch, rows)``), but those a resumed run had
        yielded; then the next pool starts ``keep`` rows before the last read."""
        for batch, rows in batches:
            self.yielded += 1
            self.out += rows
            if self.yielded > self.skip_batches:
                yield batch
        self.skip_batches = 0
        self.pool += 1
        self.start = self.read - keep
        self.yielded = 0
        self.want = self.upstream is not None and self.pooled
        usable = [c for c in self.checkpoints if c[0] <= self.start]
        self.checkpoints = usable[-1:] + [c for c in self.checkpoints if c[0] > self.start]

    def dropping(self) -> int:
        """Rows to drop before the resumed pool's first (once)."""
        rows, self.skip_rows = self.skip_rows, 0
        self.out += rows
        return rows

    def buckets(self, n: int) -> None:
        """The buckets are known: ``n`` of them."""
        self.totals = self.totals or [0] * n
        self.drops = self.drops or [0] * n
        self.counts = [0] * n

    def assign(self, bucket: int, rows: int) -> int:
        """``rows`` go to ``bucket``; how many of the first of them to drop (on a resume,
        those yielded before)."""
        drop = min(self.drops[bucket], rows)
        self.drops[bucket] -= drop
        self.totals[bucket] += rows
        self.counts[bucket] += rows - drop
        self.out += drop
        return drop

    def emit(self, rows: int, bucket: int) -> None:
        """A bucket's batch of ``rows`` goes out."""
        self.out += rows
        self.counts[bucket] -= rows

    def _before(self, totals: list[int]) -> bool:
        """Whether a checkpoint with these bucket totals is before every row held."""
        return all(
            then <= total - held
            for then, total, held in zip(totals, self.totals, self.counts, strict=False)
        )

    def state(self) -> dict[str, Any]:
        """The position to resume from (see the module docstring)."""
        extra: dict[str, Any] = {"totals": [], "drops": []}
        if not self.held():  # nothing held: the upstream's position now is exact
            self.pausing = True
            try:
                now = self.upstream.state_dict()
            finally:
                self.pausing = False
            at: tuple[int, Any, list[int]] = (self.read, now, list(self.totals))
            # a pool all yielded (its generator still at its last batch): the next one
            start, pool, yielded = self.read, self.pool + (self.yielded > 0), 0
            extra["totals"] = list(self.totals)
        elif self.pooled:
            at = [c for c in self.checkpoints if c[0] <= self.start][-1]
            start, pool, yielded = self.start, self.pool, self.yielded
        else:  # buckets: from before the oldest row held, dropping each bucket's yielded
            at = [c for c in self.checkpoints if self._before(c[2])][-1]
            start, pool, yielded = at[0], self.pool, self.yielded
            base = at[2] or [0] * len(self.totals)
            extra["totals"] = base
            extra["drops"] = [
                total - held - then
                for total, held, then in zip(self.totals, self.counts, base, strict=True)
            ]
        if isinstance(at[1], BaseException):
            raise ResumeError(f"the stream's state_dict() failed: {at[1]}") from at[1]
        return {
            "loader": copy.deepcopy(at[1]),
            "row": at[0],
            "start": start,
            "pool": pool,
            "yielded": yielded,
            "boundaries": self.boundaries,
            **extra,
        }


def torch_drawn_seed() -> int:
    """A seed drawn from torch's global generator, as ``RandomSampler(generator=None)`` draws
    its own: after ``torch.manual_seed(s)`` it is the same in every process (so DDP ranks
    seeded alike agree on the batches they split) and in every run (so a run is reproduced)."""
    import torch  # here: bucketing samples with an int seed stays torch-free

    return int(torch.empty((), dtype=torch.int64).random_().item())


class Bucketing(Generic[T]):
    """The iterator :func:`~fastdata.bucket_by_length` returns: its batches, one epoch of
    ``stream``; ``state_dict()`` / ``load_state_dict()`` resume it exactly (see the module
    docstring of ``fastdata.collate._bucket_state``).

    Save the bucketing's state, not the loader's: the loader's position runs ahead of the
    batches yielded by the rows the bucketing holds, and its ``state_dict()`` raises while
    it does.
    """

    def __init__(
        self,
        stream: Iterable[Any],
        settings: dict[str, Any],
        build: Callable[[Iterator[Any], Track], Iterator[T]],
        rng: Callable[[int, int], Any],
        pooled: bool,
        every: int,
    ) -> None:
        self._stream = stream
        self._settings = settings  # seed: the user's (None: drawn here, saved in the state)
        self._seed = settings["seed"]
        if self._seed is None:
            self._seed = torch_drawn_seed()
        self._rng = rng  # (seed, pool) -> the pool's generator
        self._build = build
        self._loader = hold(stream, self)  # a fastdata DataLoader (or its iterator), or None
        upstream = self._loader
        if upstream is None and callable(getattr(stream, "state_dict", None)):
            upstream = stream
        self._track = Track(upstream, functools.partial(rng, self._seed), pooled, every)
        self._pooled = pooled
        self._iterator: Iterator[T] | None = None
        self._finished = False
        self._loaded: dict[str, Any] | None = None

    def __iter__(self) -> Bucketing[T]:
        return self

    def __next__(self) -> T:
        if self._iterator is None:
            if self._loaded is not None and self._loaded.get("ended"):
                self._iterator = iter(())  # resumed after the last batch: an empty epoch
            else:
                self._iterator = self._build(iter(self._stream), self._track)
            self._loaded = None
        try:
            return next(self._iterator)
        except StopIteration:
            self._finished = True
            raise

    def unsaved(self) -> str | None:
        """Why the upstream loader's state would lose rows now (see fastdata._holding)."""
        track = self._track
        if self._finished or track.pausing or not track.held():
            return None
        return (
            f"bucket_by_length holds {track.held()} rows it read from this DataLoader and has "
            "not yielded yet: a loader state now would resume past them and lose them; save "
            "the bucketing's state_dict() instead (b = bucket_by_length(loader, ...); "
            "b.state_dict()), and resume with b.load_state_dict(state) on a new bucketing of "
            "a new loader"
        )

    def state_dict(self) -> dict[str, Any]:
        """Where this bucketing is, as plain data: the upstream loader's state at the start
        of the current pool, the pool's number and the batches of it already yielded (for
        buckets: a state from before the oldest row held, and the rows of each bucket
        yielded since).

        Raises:
            ResumeError: the stream has no ``state_dict()`` (it is no fastdata DataLoader,
                nor an iterator of one, nor stateful), or its ``state_dict()`` failed.
        """
        if self._loaded is not None:  # loaded, not iterated since
            return copy.deepcopy(self._loaded)
        track = self._track
        if track.upstream is None:
            raise ResumeError(
                f"bucket_by_length over a {type(self._stream).__name__} cannot save a state: "
                "its stream has no state_dict(); bucket a fastdata.DataLoader (or another "
                "iterable with state_dict() / load_state_dict())"
            )
        if self._finished:
            track.read = track.out  # nothing held; the upstream's state starts its next epoch
        body = track.state()
        # every batch yielded: the rest of this epoch is empty (its end not seen), or the
        # loader's state is the next epoch's start (seen)
        ended = track.ended and not track.held() and not self._finished
        if self._finished or ended:
            body.update(row=0, start=0, pool=0, yielded=0, boundaries=None)
        return {
            "bucket_by_length": _VERSION,
            "settings": dict(self._settings),
            "seed": self._seed,
            "ended": ended,
            **body,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`'s output; call it before the first batch, on a
        bucketing with the same settings over a new loader (or the same one) of the same
        data.

        Raises:
            ResumeError: the state is not a bucketing's, its settings differ from these, the
                bucketing has started, or its stream cannot load a state.
        """
        if not isinstance(state, dict) or state.get("bucket_by_length") != _VERSION:
            raise ResumeError(
                "not a bucket_by_length state (expected the dict its state_dict() returned; "
                "a DataLoader's own state cannot resume the bucketing's pool)"
            )
        for name, value in self._settings.items():
            saved = state["settings"].get(name)
            if saved != value:
                raise ResumeError(
                    f"the bucketing's {name} was {saved!r} when saved, and is {value!r} now; "
                    "the pools depend on it: bucket with the saved settings"
                )
        if self._iterator is not None:
            raise ResumeError("load_state_dict() after the bucketing started: call it first")
        upstream = self._track.upstream
        if upstream is None or not callable(getattr(upstream, "load_state_dict", None)):
            raise ResumeError(
                f"bucket_by_length over a {type(self._stream).__name__} cannot load a state: "
                "bucket the DataLoader itself (not an iterator of it), or another iterable "
                "with load_state_dict()"
            )
        if self._stream is not upstream:
            raise ResumeError(
                "load_state_dict() of a bucketing over an iterator of a DataLoader: the "
                "iterator was made before the state was loaded; bucket the DataLoader itself"
            )
        if self._settings["seed"] is None and "seed" not in state:
            raise ResumeError("a state saved with seed=None before seeds were saved")
        cast(Any, upstream).load_state_dict(copy.deepcopy(state["loader"]))
        if self._settings["seed"] is None:  # the seed drawn by the saved run
            self._seed = int(state["seed"])
        make_rng = functools.partial(self._rng, self._seed)
        track = Track(upstream, make_rng, self._pooled, self._track.every)
        track.read = track.out = int(state["row"])
        track.skip_rows = int(state["start"]) - track.read
        track.start = int(state["start"])
        track.pool = int(state["pool"])
        track.skip_batches = int(state["yielded"])
        track.boundaries = state["boundaries"]
        track.totals = list(state["totals"])
        track.drops = list(state["drops"])
        track.checkpoints = [(track.read, copy.deepcopy(state["loader"]), list(track.totals))]
        track.want = False
        self._track = track
        self._loaded = copy.deepcopy(state)
