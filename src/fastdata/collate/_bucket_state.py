"""What :func:`fastdata.bucket_by_length` returns: the bucketing's iterator, with an exact
``state_dict()`` / ``load_state_dict()`` for pools.

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
far: their state is exact only when they hold nothing (before the first row, after the last
batch, or when every bucket happens to be empty); otherwise ``state_dict()`` raises.

While the bucketing holds rows read from a fastdata DataLoader, that loader's own
``state_dict()`` raises (see :mod:`fastdata._holding`): it would resume past them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar, cast

from fastdata._holding import hold
from fastdata.errors import FastDataError, ResumeError

__all__ = ["Bucketing", "Track"]

T = TypeVar("T")
X = TypeVar("X")

_VERSION = 1


class Track:
    """The bucketing's position: rows read and yielded, the current pool, checkpoints."""

    def __init__(self, upstream: Any, make_rng: Callable[[int], Any], pooled: bool) -> None:
        self.upstream = upstream  # has state_dict(), or None
        self.pooled = pooled
        self.make_rng = make_rng
        self.read = 0  # rows read from the stream this epoch (dropped ones included)
        self.out = 0  # rows yielded (or skipped as yielded before a resume)
        self.pool = 0  # the pool being filled, or whose batches are being yielded
        self.start = 0  # its first row
        self.yielded = 0  # its batches yielded
        self.skip_rows = 0  # on resume: rows before the pool, to drop
        self.skip_batches = 0  # on resume: the pool's batches yielded before
        self.boundaries: list[int] | None = None  # the buckets' (auto ones once known)
        self.checkpoints: list[tuple[int, Any]] = []  # (row, upstream state or its error)
        self.want = upstream is not None  # take a checkpoint before the next read
        self.pausing = False  # taking one: the loader must not see rows held
        self.ended = False  # the stream ended (the loader's state is of its next epoch)

    def held(self) -> int:
        return max(self.read - self.out, 0)  # (rows to drop on a resume count as out early)

    def rng(self) -> Any:
        """The generator of the current pool (the same on a resume)."""
        return self.make_rng(self.pool)

    def reading(self, items: Iterator[X], rows: Callable[[X], int]) -> Iterator[X]:
        """``items`` (read from the upstream), counted; a checkpoint before a pool's first."""
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
                self.checkpoints.append((self.read, saved))
            try:
                item = next(items)
            except StopIteration:
                self.ended = True
                return
            self.read += rows(item)
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
        self.want = self.upstream is not None
        usable = [c for c in self.checkpoints if c[0] <= self.start]
        self.checkpoints = usable[-1:] + [c for c in self.checkpoints if c[0] > self.start]

    def emit(self, rows: int) -> None:
        """A bucket's batch of ``rows`` goes out."""
        self.out += rows

    def dropping(self) -> int:
        """Rows to drop before the resumed pool's first (once)."""
        rows, self.skip_rows = self.skip_rows, 0
        self.out += rows
        return rows

    def state(self) -> dict[str, Any]:
        """The position to resume from (see the module docstring)."""
        if self.held() and not self.pooled:
            raise ResumeError(
                f"bucket_by_length(boundaries=...) holds {self.held()} rows in its buckets, "
                "rows it read from anywhere in the stream so far: a state now would lose "
                "them. Save at the end of an epoch, or bucket with boundaries=None (pools), "
                "whose state_dict() resumes exactly at any batch"
            )
        if not self.held():  # nothing held: the upstream's position now is exact
            self.pausing = True
            try:
                now = self.upstream.state_dict()
            finally:
                self.pausing = False
            at = (self.read, now)
            start, pool, yielded = self.read, self.pool, 0
        else:
            at = [c for c in self.checkpoints if c[0] <= self.start][-1]
            start, pool, yielded = self.start, self.pool, self.yielded
        if isinstance(at[1], BaseException):
            raise ResumeError(f"the stream's state_dict() failed: {at[1]}") from at[1]
        return {
            "loader": copy.deepcopy(at[1]),
            "row": at[0],
            "start": start,
            "pool": pool,
            "yielded": yielded,
            "boundaries": self.boundaries,
        }


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
        make_rng: Callable[[int], Any],
        pooled: bool,
    ) -> None:
        self._stream = stream
        self._settings = settings
        self._build = build
        self._loader = hold(stream, self)  # a fastdata DataLoader (or its iterator), or None
        upstream = self._loader
        if upstream is None and callable(getattr(stream, "state_dict", None)):
            upstream = stream
        self._track = Track(upstream, make_rng, pooled)
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
        instead = (
            "save the bucketing's state_dict() instead (b = bucket_by_length(loader, ...); "
            "b.state_dict()), and resume with b.load_state_dict(state) on a new bucketing "
            "of a new loader"
            if self._pooled
            else "save at the end of an epoch, or bucket with boundaries=None (pools), whose "
            "state_dict() resumes exactly"
        )
        return (
            f"bucket_by_length holds {track.held()} rows it read from this DataLoader and has "
            f"not yielded yet: a loader state now would resume past them and lose them; " + instead
        )

    def state_dict(self) -> dict[str, Any]:
        """Where this bucketing is, as plain data: the upstream loader's state at the start
        of the current pool, the pool's number and the batches of it already yielded.

        Raises:
            ResumeError: the stream has no ``state_dict()`` (it is no fastdata DataLoader,
                nor an iterator of one, nor stateful), or buckets (not pools) hold rows.
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
        cast(Any, upstream).load_state_dict(copy.deepcopy(state["loader"]))
        track = Track(upstream, self._track.make_rng, self._pooled)
        track.read = track.out = int(state["row"])
        track.skip_rows = int(state["start"]) - track.read
        track.start = int(state["start"])
        track.pool = int(state["pool"])
        track.skip_batches = int(state["yielded"])
        track.boundaries = state["boundaries"]
        track.checkpoints = [(track.read, copy.deepcopy(state["loader"]))]
        track.want = False
        self._track = track
        self._loaded = copy.deepcopy(state)
