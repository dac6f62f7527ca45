"""Reading a slot's segments: windows read (ahead, on background threads), permuted, cut.

A segment is a row range of one window (see :mod:`fastdata.sources.elastic`): its pieces are
read from the reader in order, concatenated, permuted by the window's seed and cut to the
range (a :class:`~fastdata.sources.base.RowReader` reads the permuted rows of the range
themselves, :data:`ROWS_PER_READ` at a time: no copy of the window's data). With
``read_ahead``, the next segments are read on a thread pool while the current one is turned
into items (Arrow reads and decodes without the GIL); tables come out in order, and a failed
read raises in order, after the tables before it.
:func:`decoded` then turns them into a stream's items: rows, or batches cut across segment
boundaries (:mod:`fastdata.sources._feed`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

import numpy as np
import pyarrow as pa

from fastdata._stats import StageTimes
from fastdata.errors import ContractError
from fastdata.sources._arrow_types import take_rows
from fastdata.sources._feed import cut
from fastdata.sources.base import (
    INDEX,
    BatchingDecoder,
    Context,
    Decoder,
    Reader,
    RowReader,
    declares,
)
from fastdata.sources.elastic import Segment
from fastdata.sources.plan import window_permutation

__all__ = ["ROWS_PER_READ", "decoded", "read_segments"]

ROWS_PER_READ = 64
"""Rows of a :class:`RowReader`'s shuffled segment read at once: the first rows of a window
are decoded while the next are read, and no window's data is held whole."""


def read_segments(
    reader: Reader,
    segments: Sequence[Segment],
    pool: ThreadPoolExecutor | None,
    read_ahead: int,
    offsets: np.ndarray | None,
    times: StageTimes | None,
) -> Iterator[pa.Table]:
    """The segments' rows as tables, in order; ``read_ahead`` segments are read ahead on
    ``pool``. With ``offsets`` (each unit's first index), tables carry the :data:`INDEX`
    column."""

    def read(segment: Segment) -> pa.Table:
        return _read_segment(reader, segment, offsets, times)

    segments = _by_reads(reader, segments)
    part = declares(reader, RowReader) and bool(segments) and segments[0].rows <= ROWS_PER_READ
    if pool is None or read_ahead == 0:
        yield from map(read, segments)
        return
    # The first segment is read here: waiting for it on the pool would add the threads'
    # start-up to the first batch. The pool starts on the next ones at once, except after a
    # RowReader's part (quick to read against decoding it): there it starts once that part
    # is taken, so the first batch's reads and decodes have the cores to themselves
    # (reading ahead at once took a sixth of the CPU time before the first batch of image
    # files, and a quarter of its wait with two thread workers on two cores).
    ahead: deque[Future[pa.Table]] = deque()
    submitted = 1
    for i, segment in enumerate(segments):
        while submitted < len(segments) and submitted <= i + read_ahead and (i or not part):
            ahead.append(pool.submit(read, segments[submitted]))
            submitted += 1
        yield read(segment) if i == 0 else ahead.popleft().result()


def _by_reads(reader: Reader, segments: Sequence[Segment]) -> Sequence[Segment]:
    """The segments as they are read: a :class:`RowReader`'s shuffled ones in parts of
    :data:`ROWS_PER_READ` rows, read ahead one after the other."""
    if not declares(reader, RowReader):
        return segments
    parts = []
    for s in segments:
        if s.window.seed is None:  # not shuffled: read by ranges
            parts.append(s)
            continue
        starts = range(s.start, s.stop, ROWS_PER_READ)
        parts += [Segment(s.window, a, min(a + ROWS_PER_READ, s.stop)) for a in starts]
    return parts


def _read_segment(
    reader: Reader, segment: Segment, offsets: np.ndarray | None, times: StageTimes | None
) -> pa.Table:
    start = time.perf_counter()
    window = segment.window
    perm = window_permutation(window)
    if perm is not None and declares(reader, RowReader):
        table = _read_shuffled(cast(RowReader, reader), segment, perm, offsets)
    else:
        parts = [_read_piece(reader, p.unit, p.start, p.stop, offsets) for p in window.pieces]
        table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        if perm is not None:
            table = take_rows(table, perm[segment.start : segment.stop])
        elif (segment.start, segment.stop) != (0, window.rows):
            table = table.slice(segment.start, segment.rows)
    if times is not None:
        times.add("read", time.perf_counter() - start, table.num_rows)
    return table


def _read_shuffled(
    reader: RowReader, segment: Segment, perm: np.ndarray, offsets: np.ndarray | None
) -> pa.Table:
    """The rows of a shuffled segment, read in their shuffled order (the rows the window's
    ranges, permuted, hold; only the segment's own)."""
    pieces = segment.window.pieces
    firsts = np.cumsum([0] + [p.rows for p in pieces])  # each piece's first window position
    positions = perm[segment.start : segment.stop]
    which = np.searchsorted(firsts, positions, side="right") - 1
    units = np.array([p.unit for p in pieces], np.int64)[which]
    rows = np.array([p.start for p in pieces], np.int64)[which] + positions - firsts[which]
    table = _exactly(
        reader.read_rows(units, rows), len(rows), reader, f"read_rows(<{len(rows)} rows>)"
    )
    return table if offsets is None else _with_index(table, offsets[units] + rows)


def _read_piece(
    reader: Reader, unit: int, start: int, stop: int, offsets: np.ndarray | None
) -> pa.Table:
    table = _exactly(
        reader.read(unit, start, stop), stop - start, reader, f"read({unit}, {start}, {stop})"
    )
    if offsets is None:
        return table
    # Wrapped, not converted: the first pa.array(ndarray) of a process costs 6-14 ms of
    # one-off set-up, which every DataLoader worker of every epoch would pay.
    first = int(offsets[unit]) + start
    return _with_index(table, np.arange(first, first + stop - start, dtype=np.int64))


def _exactly(table: pa.Table, rows: int, reader: object, call: str) -> pa.Table:
    """``table``, which a reader's ``call`` returned for ``rows`` rows.

    Raises:
        ContractError: it holds another number of rows (rows would be lost or repeated,
            and every later position would be off).
    """
    if table.num_rows != rows:
        raise ContractError(
            "read",
            f"{type(reader).__name__}.{call} returned {table.num_rows} rows, not {rows}: a "
            "reader returns exactly the rows asked for (see the writing-a-source guide)",
        )
    return table


def _with_index(table: pa.Table, index: np.ndarray) -> pa.Table:
    """``table`` with the :data:`INDEX` column ``index`` (int64)."""
    index = np.ascontiguousarray(index, np.int64)
    column = pa.Array.from_buffers(pa.int64(), len(index), [None, pa.py_buffer(index)])
    return table.append_column(INDEX, column)


def decoded(
    decoder: Decoder, tables: Iterator[pa.Table], context: Context, *, batching: bool
) -> Iterator[Any]:
    """The items ``decoder`` makes of ``tables``: one per row when ``context.batch_size`` is
    None, else batches of that many rows cut across tables (by the decoder itself where it
    declares :class:`~fastdata.sources.base.BatchingDecoder`, ``batching``)."""
    size = context.batch_size
    if size is None:
        for table in tables:
            yield from decoder.rows(table, context)
    elif batching:
        yield from cast(BatchingDecoder, decoder).batches(tables, context)
    else:
        for table in cut(tables, size):
            yield decoder.batch(table, context)
