"""``check_reader``: a reader checked against the contract every fastdata stream keeps.

A :class:`~fastdata.sources.Reader` gets exactly-once sharding, seeded shuffling and exact,
elastic resume from :class:`~fastdata.PlannedStream`, as long as it keeps its side of the
contract: the same units and rows in every process, any range of a unit readable, nothing
that depends on who reads. :func:`check_reader` runs the streams a training job would (real
``fastdata.DataLoader`` instances, workers as threads, over a grid of ranks x workers), so a
reader's author learns which promise breaks, and where, before a job does.
"""

from __future__ import annotations

import json
import pickle
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from fastdata._contract_items import Probe, fingerprint, fingerprints, tagged
from fastdata.errors import ContractError, ResumeError
from fastdata.sources.base import Decoder, Reader, varies
from fastdata.sources.stream import PlannedStream

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fastdata.sources.options import StreamOptions

__all__ = ["ContractError", "check_reader"]

Layout = tuple[int, int]  # (world_size, num_workers); 0 workers: the main process reads
Where = tuple[int, int, int]  # (rank, worker, batch)
LAYOUTS: tuple[Layout, ...] = ((1, 0), (1, 3), (2, 2), (3, 1))
_SAVE_POINTS = 8  # resume points per rank: 0, 1, the end, and evenly spaced between


def check_reader(
    reader: Reader | Callable[[], Reader],
    /,
    *,
    decoder: Decoder | None = None,
    key: Callable[[Any], list[Hashable]] | None = None,
    changed: Reader | Callable[[], Reader] | None = None,
    layouts: Sequence[Layout] = LAYOUTS,
    **options: Unpack[StreamOptions],
) -> None:
    """Check that streams over ``reader`` keep fastdata's contract; raise at the first breach.

    The checks, in order (each names itself in the error):

    - ``pickling``: the reader pickles, and the copy (what a worker gets) has the same
      ``unit_rows()`` and ``identity()``; ``unit_rows``: the same on every call;
      ``identity``: plain JSON.
    - ``exactly-once``: under every ``(world_size, num_workers)`` of ``layouts``, one epoch
      over all ranks x workers delivers every row once: none lost, none twice.
    - ``order`` (without ``decoder``): the row at each position of the source is the one
      ``read(unit, 0, rows)`` gives in this process, whatever the layout and the range read.
    - ``resume``: per layout and rank, a state saved after ``k`` batches (0, 1, the end and
      evenly spaced ``k`` between) and loaded into a stream over a new reader continues with
      exactly the batches an uninterrupted epoch has after ``k``, in the same order.
    - ``elastic resume``: a state saved after ``k`` batches under one layout and loaded
      under the next delivers each row not yet taken exactly once (a varying decoder's
      state, every rank's, may instead be refused with a ResumeError, as packing's is
      in the middle of a document).
    - ``refusal of changed data`` (with ``changed``): a state saved over ``reader`` is
      refused by a stream over ``changed`` with :class:`fastdata.ResumeError`.

    Small readers (a few hundred rows) take a second or two; every run is deterministic.

    Args:
        reader: the reader, or a function making one: then every resumed stream reads
            through a new one, as a resumed job in a new process would (catches readers
            whose order depends on the process: a ``set`` of files, an unseeded shuffle);
            a reader is copied by pickling instead.
        decoder: check the streams this decoder makes (default: rows as they are read,
            which checks the reader alone, down to each row's content).
        key: with ``decoder``, the keys of an item's rows (default: one key per item, a hash
            of its contents); they must tell the rows apart.
        changed: a reader (or function) over other data, whose states must not resume.
        layouts: the ``(world_size, num_workers)`` grid; 0 workers reads in the main
            process, more read as DataLoader thread workers.
        **options: stream options (``batch_size``, ``shuffle``, ``seed``,
            ``shuffle_buffer``, ``read_ahead``); ``rank`` and ``world_size`` come from
            ``layouts``, and ``drop_last`` / ``even_batches``, which leave rows out or
            repeat them by design, are not checked.

    Raises:
        ContractError: an ``AssertionError`` naming the property broken and, where one is
            to blame, the ``(rank, worker, batch)``.
        TypeError: an option that is not checked here, or ``key`` without ``decoder``.
    """
    for name in ("rank", "world_size", "drop_last", "even_batches"):
        if name in options:
            raise TypeError(f"check_reader sets {name}= itself or checks without it; leave it out")
    if key is not None and decoder is None:
        raise TypeError("key= tells items of decoder= apart: pass decoder= too")
    layouts = [(int(world), int(workers)) for world, workers in layouts]
    if not layouts or any(world < 1 or workers < 0 for world, workers in layouts):
        raise ValueError(f"layouts={layouts!r}: expected (world_size >= 1, num_workers >= 0)")
    contract = _Contract(reader, decoder, key, dict(options))
    contract.check_pickling()
    epochs = {layout: contract.check_epoch(layout) for layout in layouts}
    for layout in layouts:
        contract.check_resume(layout, epochs[layout])
    for old, new in zip(layouts, [*layouts[1:], layouts[0]], strict=True):
        contract.check_elastic(old, new, epochs[old])
    if changed is not None:
        contract.check_refusal(_made(changed, "changed"))


@dataclass(frozen=True)
class _Batch:
    """What one item delivered: the worker that made it, its rows' keys, and (read by the
    probe) each row's position in the source."""

    worker: int
    keys: list[Hashable]
    index: list[int] | None


class _Contract:
    """The streams and runs of :func:`check_reader`."""

    def __init__(
        self,
        reader: Reader | Callable[[], Reader],
        decoder: Decoder | None,
        key: Callable[[Any], list[Hashable]] | None,
        options: dict[str, Any],
    ) -> None:
        self.factory = None if _is_reader(reader) else reader
        self.reader = _made(reader, "reader")
        self.options = options
        self.decoder = decoder
        self.key = key or fingerprint
        self.units = [int(n) for n in self.reader.unit_rows()]
        self.offsets = np.concatenate([[0], np.cumsum(self.units, dtype=np.int64)])
        self.expected: Counter[Hashable] = Counter()
        self.content: list[Hashable] = []  # each row's fingerprint, by position (probe only)

    # ----------------------------------------------------------------- streams
    def fresh(self) -> Reader:
        """The reader of a new process: a new one from the function, else a pickled copy."""
        if self.factory is not None:
            return _made(self.factory, "reader")
        return pickle.loads(pickle.dumps(self.reader))

    def loader(self, reader: Reader, world: int, rank: int, workers: int) -> Any:
        from fastdata.loader import DataLoader  # the contract is what a user's loader does

        copy = None if self.decoder is None else pickle.loads(pickle.dumps(self.decoder))
        decoder = Probe() if copy is None else tagged(copy)  # a copy, as each worker has
        stream = PlannedStream(reader, decoder=decoder, rank=rank, world_size=world, **self.options)
        return DataLoader(stream, batch_size=None, num_workers=workers, worker_method="thread")

    def batch(self, item: Any) -> _Batch:
        worker, value = item
        if self.decoder is None:
            return _Batch(int(worker), [fp for _, fp in value], [int(i) for i, _ in value])
        return _Batch(int(worker), list(self.key(value)), None)

    def take(self, loader: Any, k: int | None = None) -> list[_Batch]:
        """The next ``k`` batches of ``loader`` (all when None; fewer at the end)."""
        out: list[_Batch] = []
        iterator = iter(loader)
        try:
            while k is None or len(out) < k:
                out.append(self.batch(next(iterator)))
        except StopIteration:
            pass
        finally:
            del iterator
        return out

    def describe(self, key: Hashable) -> str:
        if self.decoder is not None:
            return f"item key {key!r}"[:80]
        return self.place(self.content.index(key))

    def unit_of(self, index: int) -> int:
        return int(np.searchsorted(self.offsets, index, side="right")) - 1

    def place(self, index: int) -> str:
        unit = self.unit_of(index)
        return f"row {index} (unit {unit}, row {index - int(self.offsets[unit])})"

    # ----------------------------------------------------------------- checks
    def check_pickling(self) -> None:
        rows, identity = self.units, self.reader.identity()
        if [int(n) for n in self.reader.unit_rows()] != rows:
            raise ContractError("unit_rows", f"the counts changed between two calls: {rows} ...")
        try:
            copy = pickle.loads(pickle.dumps(self.reader))
        except Exception as error:  # whatever pickle raises: the reader cannot go to workers
            message = f"{self.reader!r} does not pickle: {error!r}"
            raise ContractError("pickling", message) from error
        if [int(n) for n in copy.unit_rows()] != rows or copy.identity() != identity:
            raise ContractError("pickling", "a pickled copy has other unit_rows() or identity()")
        try:
            shown = json.loads(json.dumps(identity))
        except (TypeError, ValueError) as error:
            raise ContractError("identity", f"{identity!r} is not JSON: {error}") from error
        if shown != identity:
            raise ContractError("identity", f"{identity!r} changes through JSON: {shown!r}")
        if self.decoder is None:
            for unit, n in enumerate(rows):
                self.content += fingerprints(self.reader.read(unit, 0, n))
            self.expected = Counter(self.content)

    def check_epoch(self, layout: Layout) -> list[list[_Batch]]:
        """One uninterrupted epoch of every rank of ``layout``, checked for exactly-once
        delivery and, with the probe, order."""
        world, workers = layout
        ranks = [self.take(self.loader(self.reader, world, r, workers)) for r in range(world)]
        if self.decoder is not None and not self.expected:  # the first layout is the reference
            self.expected = Counter(k for batches in ranks for b in batches for k in b.keys)
        self.exactly_once(ranks, layout, Counter(), "exactly-once")
        if self.decoder is None:
            self.in_order(ranks, layout)
        return ranks

    def exactly_once(
        self, ranks: list[list[_Batch]], layout: Layout, taken: Counter[Hashable], check: str
    ) -> None:
        seen: dict[Hashable, list[Where]] = {}
        for rank, batches in enumerate(ranks):
            for i, batch in enumerate(batches):
                for key in batch.keys:
                    seen.setdefault(key, []).append((rank, batch.worker, i))
        under = _layout(layout)
        for key, places in seen.items():
            if len(places) + taken[key] > self.expected[key]:
                before = f" after {taken[key]} before the save" if taken[key] else ""
                raise ContractError(
                    check,
                    f"{self.describe(key)} delivered {len(places)} time(s){before} under "
                    f"{under}, at (rank, worker, batch) {places[:4]}; expected "
                    f"{self.expected[key]} in all",
                    places[-1],
                )
        for key, count in self.expected.items():
            if len(seen.get(key, ())) + taken[key] < count:
                raise ContractError(check, f"{self.describe(key)} never delivered under {under}")

    def in_order(self, ranks: list[list[_Batch]], layout: Layout) -> None:
        for rank, batches in enumerate(ranks):
            for i, batch in enumerate(batches):
                assert batch.index is not None  # the probe's batches
                for index, key in zip(batch.index, batch.keys, strict=True):
                    if self.content[index] != key:
                        raise ContractError(
                            "order",
                            f"under {_layout(layout)}, {self.place(index)} holds other values "
                            f"than read({self.unit_of(index)}, 0, rows) gives in the main "
                            "process: what read() returns must not depend on the layout, the "
                            "worker or the range asked for",
                            (rank, batch.worker, i),
                        )

    def check_resume(self, layout: Layout, ranks: list[list[_Batch]]) -> None:
        world, workers = layout
        for rank, full in enumerate(ranks):
            for k in _save_points(len(full)):
                first = self.loader(self.reader, world, rank, workers)
                head = self.take(first, k)
                state = json.loads(json.dumps(first.state_dict()))
                resumed = self.loader(self.fresh(), world, rank, workers)
                resumed.load_state_dict(state)
                tail = self.take(resumed)
                got = [b.keys for b in head + tail]
                for i, want in enumerate(b.keys for b in full):
                    if i >= len(got) or got[i] != want:
                        worker = (head + tail)[i].worker if i < len(got) else -1
                        what = "ends early" if i >= len(got) else "differs from the uninterrupted"
                        raise ContractError(
                            "resume",
                            f"under {_layout(layout)}, saved after {k} batches and resumed over "
                            f"a new reader, batch {i} {what} epoch's (as when a reader reads "
                            "other rows in a new process)",
                            (rank, worker, i),
                        )
                if len(got) > len(full):
                    raise ContractError(
                        "resume",
                        f"under {_layout(layout)}, resumed after {k} batches: "
                        f"{len(got) - len(full)} batch(es) more than the uninterrupted epoch",
                        (rank, (head + tail)[len(full)].worker, len(full)),
                    )

    def check_elastic(self, old: Layout, new: Layout, ranks: list[list[_Batch]]) -> None:
        """Every rank of ``old`` takes ``k`` batches (in lockstep, as DDP does) and rank 0's
        state (every rank's, for a varying decoder, whose state knows its own rank only)
        is loaded by every rank of ``new``."""
        varying = self.decoder is not None and varies(self.decoder)
        for k in sorted({1, max(1, len(ranks[0]) // 2)}):
            taken: Counter[Hashable] = Counter()
            states: list[Any] = []
            for rank in range(old[0]):
                loader = self.loader(self.reader, old[0], rank, old[1])
                taken.update(key for b in self.take(loader, k) for key in b.keys)
                states.append(json.loads(json.dumps(loader.state_dict())))
            rest = []
            for rank in range(new[0]):
                loader = self.loader(self.fresh(), new[0], rank, new[1])
                try:
                    loader.load_state_dict(states if varying else states[0])
                except ResumeError:
                    if varying and old != new:  # e.g. packing mid-document: same layout only
                        return
                    raise
                rest.append(self.take(loader))
            self.exactly_once(rest, new, taken, "elastic resume")

    def check_refusal(self, other: Reader) -> None:
        loader = self.loader(self.reader, 1, 0, 0)
        self.take(loader, 1)
        state = json.loads(json.dumps(loader.state_dict()))
        try:
            self.loader(other, 1, 0, 0).load_state_dict(state)
        except ResumeError:
            return
        raise ContractError(
            "refusal of changed data",
            f"a state saved over {self.reader!r} loaded into a stream over {other!r}: "
            f"identity() must tell the data apart ({self.reader.identity()!r} vs "
            f"{other.identity()!r})",
        )


def _is_reader(reader: object) -> bool:
    return isinstance(reader, Reader) and not isinstance(reader, type)  # a class is a function


def _made(reader: Reader | Callable[[], Reader], name: str) -> Reader:
    """``reader``, or the reader it makes."""
    if _is_reader(reader):
        return cast(Reader, reader)
    made = cast(Callable[[], Reader], reader)() if callable(reader) else None
    if not _is_reader(made):
        raise TypeError(
            f"{name}={reader!r}: expected a fastdata.sources.Reader or a function making one"
        )
    return cast(Reader, made)


def _layout(layout: Layout) -> str:
    return f"world_size={layout[0]} x num_workers={layout[1]}"


def _save_points(n: int) -> list[int]:
    between = np.linspace(0, n, _SAVE_POINTS - 2).round().astype(int).tolist()
    return sorted({0, min(1, n), n, *between})
