"""Weighted mixing of several sources into one stream (``fastdata.mix``).

A mixed epoch holds ``epoch_rows`` rows (default: all rows of all sources); source ``c``
contributes ``round(epoch_rows * weight_c)`` of them (largest remainders, so they add up). Each
source walks through its own rows in order, cyclically, from where the previous mixed epoch
left it: a source smaller than its share repeats within an epoch (each of its rows once per
pass over it), a larger one is spread over several mixed epochs (each row once before any
repeats). The realised proportions are the weights, exactly (to a row), in every epoch.

The mix is a :class:`~fastdata.PlannedStream` over one reader whose units are pieces of the
sources' units, interleaved by weight (:mod:`fastdata.sources._interleave`; the stream keeps
that order, ``Policy.shuffle_units=False``), so it is sharded exactly once across ranks x
workers, shuffled (rows of all sources mixed within windows), batched, resumed and resumed
elastically like any stream, and every rank, worker and window gets each source at its
weight. Every row carries a ``source`` column: the index of its source in
:attr:`MixedStream.sources`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa

from fastdata._validate import check_int, check_number, keywords_checked
from fastdata.sources._interleave import MIN_ROUND_ROWS, Pieces, interleave
from fastdata.sources._source_checks import one_schema, warn_ignored_options
from fastdata.sources.base import (
    BatchingDecoder,
    Context,
    Decoder,
    Reader,
    VaryingDecoder,
    declares,
    varies,
)
from fastdata.sources.options import StreamOptions, checked_options
from fastdata.sources.plan import Policy
from fastdata.sources.stream import PlannedStream
from fastdata.sources.tally import Tally, counts_of

if TYPE_CHECKING:
    from typing_extensions import Unpack


__all__ = ["MixedStream", "mix"]

SOURCE = "source"


def shares(total: int, weights: list[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainders: they add up)."""
    exact = [total * w / sum(weights) for w in weights]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(exact)), key=lambda i: counts[i] - exact[i])
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


class MixedReader:
    """The sources' readers as one :class:`fastdata.sources.Reader` whose units depend on the
    epoch (:meth:`for_epoch`; see the module docstring)."""

    def __init__(
        self,
        readers: Mapping[str, Reader],
        weights: list[float],
        epoch_rows: int,
        policy: Policy | None = None,
    ) -> None:
        self.names = list(readers)
        self.readers = list(readers.values())
        self.unit_counts = [[int(n) for n in r.unit_rows()] for r in self.readers]
        self.totals = [sum(rows) for rows in self.unit_counts]
        self.weights = weights
        self.epoch_rows = epoch_rows
        self.counts = shares(epoch_rows, weights)
        policy = policy or Policy()
        self.shuffle, self.seed = policy.shuffle, policy.seed
        # rows in which every source appears in proportion: a shuffle window's, so that every
        # window (which permutes its rows) mixes all of them
        buffer = policy.shuffle_buffer if self.shuffle else 0
        self.round_rows = max(64, buffer) if buffer else MIN_ROUND_ROWS
        for name, total, count in zip(self.names, self.totals, self.counts, strict=True):
            if count and not total:
                raise ValueError(f"source {name!r} has no rows but a weight above 0")

    def for_epoch(self, epoch: int) -> _EpochMix:
        """The units of ``epoch``: each source's share, from where the previous epoch left it,
        interleaved (:mod:`fastdata.sources._interleave`)."""
        walks = [
            _walk(c, rows, (epoch * count) % total, count) if count else []
            for c, (rows, total, count) in enumerate(
                zip(self.unit_counts, self.totals, self.counts, strict=True)
            )
        ]
        granules, pieces = interleave(
            walks, self.round_rows, shuffle=self.shuffle, seed=self.seed, epoch=epoch
        )
        return _EpochMix(self, granules, pieces)

    def read_piece(self, piece: tuple[int, int, int, int]) -> pa.Table:
        """Rows ``[start, stop)`` of a source's unit, with the :data:`SOURCE` column (made
        once per piece, not per granule): ``piece`` is ``(source, unit, start, stop)``."""
        source, unit, start, stop = piece
        table = self.readers[source].read(unit, start, stop)
        column = pa.array(np.full(table.num_rows, source, dtype=np.int16))
        return table.append_column(SOURCE, column)

    # A Reader's methods: those of epoch 0 (a stream asks for_epoch).
    def unit_rows(self) -> list[int]:
        return self.for_epoch(0).unit_rows()

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        return self.for_epoch(0).read(unit, start, stop)

    def location(self, unit: int, row: int) -> dict[str, Any]:
        return self.for_epoch(0).location(unit, row)

    def identity(self) -> dict[str, Any]:
        return {
            "sources": {n: r.identity() for n, r in zip(self.names, self.readers, strict=True)},
            "weights": self.weights,
            "epoch_rows": self.epoch_rows,
            "interleave": {"round_rows": self.round_rows},  # (an order that states depend on)
        }

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}={c}" for n, c in zip(self.names, self.counts, strict=True))
        return f"MixedReader(rows per epoch: {parts})"


def _walk(source: int, rows: list[int], start: int, count: int) -> list[tuple[int, int, int, int]]:
    """``count`` rows of a source's units, cyclically from row ``start``, as unit pieces."""
    ends = np.cumsum(rows)
    total = int(ends[-1])
    out = []
    position = start
    while count:
        local = position % total
        unit = int(np.searchsorted(ends, local, side="right"))
        first = local - (int(ends[unit]) - rows[unit])
        take = min(rows[unit] - first, count)
        out.append((source, unit, first, first + take))
        position += take
        count -= take
    return out


class _EpochMix:
    """One epoch's units of a :class:`MixedReader`: the granules of its sources, in order,
    each read from its piece (see :mod:`fastdata.sources._interleave`)."""

    def __init__(
        self,
        mixed: MixedReader,
        units: list[tuple[int, int, int, int, int]],
        pieces: list[tuple[int, int, int, int]],
    ) -> None:
        self.mixed = mixed
        self.units = units
        self.pieces = pieces
        self._tables = Pieces(mixed.read_piece)

    def unit_rows(self) -> list[int]:
        return [stop - start for _, _, start, stop, _ in self.units]

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        _, _, first, _, index = self.units[unit]
        piece = self.pieces[index]
        return self._tables.table(index, piece).slice(first - piece[2] + start, stop - start)

    def location(self, unit: int, row: int) -> dict[str, Any]:
        source, real, first, _, _ = self.units[unit]
        return self.mixed.readers[source].location(real, first + row)

    def identity(self) -> dict[str, Any]:
        return self.mixed.identity()


class _Counting:
    """A decoder that counts the rows of each source in the items of ``inner`` (a
    :class:`~fastdata.sources.tally.Tally`: of the items the training loop received, over
    all DataLoader workers), then hands the rows to ``inner``."""

    def __init__(self, inner: Decoder, sources: int) -> None:
        self.inner = inner
        self.needs_index = inner.needs_index
        self.varying = varies(inner)
        self.tally = Tally(sources)

    def _count(self, table: pa.Table) -> None:
        self._count_sources(_sources(table))

    def _count_sources(self, sources: np.ndarray) -> None:
        self.tally.add(slice(None), counts_of(sources, self.tally.width))

    def batch(self, table: pa.Table, context: Context) -> Any:
        self._count(table)
        return self.inner.batch(table, context)

    def rows(self, table: pa.Table, context: Context) -> Iterator[Any]:
        """The inner decoder's rows, each counted as it is made."""
        tally, sources = self.tally, _sources(table).tolist()
        for row, source in zip(self.inner.rows(table, context), sources, strict=False):
            tally.add(source, 1)
            yield row

    def items(
        self, tables: Iterator[pa.Table], context: Context, offset: int
    ) -> Iterator[tuple[Any, tuple[int, int]]]:
        """A varying decoder's items, each counting the rows it took (its position says)."""
        inner = cast(VaryingDecoder, self.inner)  # items() is asked for when varying only
        taken: deque[np.ndarray] = deque()
        counted = 0
        for item, position in inner.items(_taking(tables, taken), context, offset):
            self._count_taken(taken, position[0] - counted)
            counted = position[0]
            yield item, position
        for rows in taken:  # taken after the last item (skipped): counted with none
            self._count_sources(rows)

    def _count_taken(self, taken: deque[np.ndarray], rows: int) -> None:
        """Count the sources of the next ``rows`` rows ``taken`` holds, and leave them."""
        while rows and taken:
            head = taken.popleft()
            self._count_sources(head[:rows])
            if len(head) > rows:
                taken.appendleft(head[rows:])
            rows -= min(rows, len(head))


class _BatchingCounting(_Counting):
    """:class:`_Counting` over a decoder that cuts its own batches (a
    :class:`~fastdata.sources.base.BatchingDecoder`): the rows of each batch are counted as
    the batch is handed on, as ``batch()`` counts them, so a mixed stream converts each table
    once like a single stream does."""

    def batches(self, tables: Iterator[pa.Table], context: Context) -> Iterator[Any]:
        taken: deque[np.ndarray] = deque()  # sources of the rows taken and not yet counted
        size = cast(int, context.batch_size)
        for batch in cast(BatchingDecoder, self.inner).batches(_taking(tables, taken), context):
            # a batch holds the next ``size`` rows taken (the last one may be short)
            self._count_taken(taken, size)
            yield batch


def _taking(tables: Iterator[pa.Table], taken: deque[np.ndarray]) -> Iterator[pa.Table]:
    """``tables``, the sources of each one's rows put in ``taken`` as it is taken."""
    for table in tables:
        taken.append(_sources(table))
        yield table


def _sources(table: pa.Table) -> np.ndarray:
    """The ``source`` column of a table of a mixed reader, as numpy."""
    column = table.column(SOURCE)
    chunk = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return chunk.to_numpy()


class MixedStream(PlannedStream):
    """Several sources mixed by weight into one stream; see :func:`mix`."""

    decoder: _Counting

    @keywords_checked(StreamOptions)
    def __init__(
        self,
        sources: Mapping[str, PlannedStream],
        /,
        *,
        weights: Mapping[str, float] | None = None,
        epoch_rows: int | None = None,
        **options: Unpack[StreamOptions],
    ) -> None:
        if not isinstance(sources, Mapping) or not sources:
            raise TypeError(f"sources={sources!r}: expected a dict {{name: stream}}, not empty")
        streams = dict(sources)
        for name, stream in streams.items():
            if not isinstance(stream, PlannedStream):
                raise TypeError(f"sources[{name!r}]={stream!r}: expected a fastdata stream")
        decoder = _one_decoder(streams)
        readers = one_schema(streams)
        warn_ignored_options(streams)
        if weights is None:  # every row of every source once per epoch (as ConcatDataset)
            weights = {n: s.num_rows for n, s in streams.items()}
            if not any(weights.values()):
                raise ValueError(f"the sources {list(streams)} have no rows: nothing to mix")
        weights = dict(weights)
        if set(weights) != set(streams):
            raise ValueError(f"weights={weights!r}: expected one weight per source {list(streams)}")
        shares_ = [check_number(f"weights[{n!r}]", weights[n], minimum=0) for n in streams]
        if not sum(shares_):
            raise ValueError(f"weights={weights!r}: at least one must be above 0")
        total = sum(s.num_rows for s in streams.values())
        rows = check_int("epoch_rows", epoch_rows, minimum=1, none="None: all rows of all sources")
        policy = checked_options(**options)[0]
        reader = MixedReader(readers, shares_, rows or total, policy)
        counting = _BatchingCounting if declares(decoder, BatchingDecoder) else _Counting
        super().__init__(reader, decoder=counting(decoder, len(streams)), **options)
        self._policy = replace(self._policy, shuffle_units=False)  # the reader orders them
        self.sources = list(streams)
        """The sources' names; a row's ``source`` column is an index into it."""

    def source_counts(self) -> dict[str, int]:
        """Rows of each source delivered so far (to the training loop, under
        ``fastdata.DataLoader``: not those its workers made ahead), over all workers."""
        return dict(zip(self.sources, self.decoder.tally.totals(), strict=True))

    def __repr__(self) -> str:
        return f"MixedStream({self.reader!r}, batch_size={self.batch_size})"


def _one_decoder(streams: Mapping[str, PlannedStream]) -> Decoder:
    """The sources' decoder, which must be the same for all: the rows of a batch may come
    from any of them."""
    decoders = [s.decoder for s in streams.values()]
    first = decoders[0]
    key = _decoder_key(first)
    for name, decoder in zip(streams, decoders, strict=True):
        if _decoder_key(decoder) != key:
            raise ValueError(
                f"source {name!r} turns rows into items differently from {next(iter(streams))!r}"
                f" ({_decoder_key(decoder)} vs {key}); mix sources of one kind, with the same "
                "columns (and, for images, the same transform)"
            )
    return first


def _decoder_key(decoder: Decoder) -> tuple[Any, ...]:
    config = getattr(decoder, "__dict__", {})
    shown = ("image_column", "label_column", "transform")
    return (type(decoder).__name__, *(repr(config.get(k)) for k in shown))


@keywords_checked(StreamOptions)
def mix(
    sources: Mapping[str, PlannedStream],
    /,
    *,
    weights: Mapping[str, float] | None = None,
    epoch_rows: int | None = None,
    **options: Unpack[StreamOptions],
) -> MixedStream:
    """Mix ``sources`` (``{name: stream}``) by ``weights`` into one stream.

    Each epoch holds ``epoch_rows`` rows (default: all rows of all sources), ``weights[name]``
    of them (normalised) from each source, each source walking through its own rows in order
    from where the previous epoch left it (see :mod:`fastdata.sources.mix`). Without
    ``weights`` each source is weighted by its number of rows: an epoch reads every row of
    every source once, as ``torch.utils.data.ConcatDataset`` does (pass weights to read a
    small corpus more often). The sources' readers and decoder are used; their stream options
    are not (a source built with any is warned about): the mix has its own (``batch_size``,
    ``shuffle``, ``seed``, ... as for :class:`fastdata.PlannedStream`), and its rows carry a
    ``source`` column (the index into :attr:`MixedStream.sources`).
    ``fastdata.DataLoader(stats=True).stats()["sources"]`` counts each source's rows.

    The sources must read the same columns with the same types (checked here for Parquet
    sources); where they differ only in nullability, in ``string`` / ``binary`` / ``list``
    against their large forms, or in the columns' order, each source's tables are cast to
    one schema (the columns in the first source's order; a column nullable if it is in any
    source; the large form if any source has it).

    Raises:
        SchemaError: two sources read different columns, or a column of different types.
        ValueError: a weight without a source (or the reverse), no positive weight, a weight
            that is not a finite number >= 0, a source with rows of another kind than the
            others.
    """
    return MixedStream(sources, weights=weights, epoch_rows=epoch_rows, **options)
