"""Rows of a sequence of tables taken ``n`` at a time across table boundaries, and cut into
batches.

:func:`cut` makes tables of exactly ``batch_size`` rows (the plan makes only a reader's last
one partial) for a decoder that turns each into a batch. :func:`cut_converted` cuts the same
rows for a decoder that converts a table's columns once and cuts the converted columns
(:meth:`fastdata.sources.ArrowDecoder.batches`): per batch that is a few numpy slices instead
of an Arrow slice and a conversion of every column.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

__all__ = ["Cutter", "RowFeed", "cut", "cut_converted"]

Piece = tuple[pa.Table, int, int]
"""Rows ``[start, stop)`` of a table."""

Cutter = Callable[[int, int], Any]
"""The batch of rows ``[start, stop)`` of a table whose columns were converted once."""


class RowFeed:
    """The rows of a sequence of tables, taken ``n`` at a time across table boundaries."""

    def __init__(self, tables: Iterator[pa.Table]) -> None:
        self._tables = tables
        self._head: pa.Table | None = None
        self._at = 0  # rows of the head table taken
        self._rows = 0  # rows of the head table

    def pieces(self, n: int) -> list[Piece]:
        """Where the next ``n`` rows are (fewer when the tables end; none when none are
        left): row ranges of the tables, in order, one where the head table holds them all."""
        pieces: list[Piece] = []
        need = n
        while need > 0:
            if self._at >= self._rows:
                self._head = next(self._tables, None)
                if self._head is None:
                    self._at = self._rows = 0
                    break
                self._at, self._rows = 0, self._head.num_rows
                continue
            assert self._head is not None
            got = min(need, self._rows - self._at)
            pieces.append((self._head, self._at, self._at + got))
            self._at += got
            need -= got
        return pieces

    def take(self, n: int) -> pa.Table | None:
        """The next ``n`` rows (fewer when the tables end; None when none are left), as
        zero-copy slices of the tables: one slice where the head table holds them all."""
        pieces = self.pieces(n)
        return _joined(pieces) if pieces else None


def _joined(pieces: list[Piece]) -> pa.Table:
    tables = [table.slice(start, stop - start) for table, start, stop in pieces]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def cut(tables: Iterator[pa.Table], size: int) -> Iterator[pa.Table]:
    """Tables of exactly ``size`` rows across table boundaries (the plan makes only the
    slot's last one partial)."""
    feed = RowFeed(tables)
    while (table := feed.take(size)) is not None:
        yield table


def cut_converted(
    tables: Iterator[pa.Table],
    size: int,
    convert: Callable[[pa.Table], Any],
    converted: Callable[[pa.Table], Cutter | None],
) -> Iterator[Any]:
    """``convert`` of every table :func:`cut` makes, each record batch of ``tables`` converted
    once instead.

    A batch within one record batch is ``converted(record_batch)(start, stop)``: the record
    batch is converted when its first such batch is cut (a record batch only spanned by
    batches that cross into the next is never converted whole). A batch across record batches,
    or within one that ``converted`` declines (None), is ``convert(rows)``.
    """
    feed = RowFeed(_record_batches(tables))
    held: tuple[pa.Table, Cutter | None] | None = None  # the record batch converted last
    while pieces := feed.pieces(size):
        if len(pieces) == 1:
            table, start, stop = pieces[0]
            if held is None or held[0] is not table:
                held = (table, converted(table))
            if held[1] is not None:
                yield held[1](start, stop)
                continue
        yield convert(_joined(pieces))


def _record_batches(tables: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """Each table, or each of its record batches where it has several (each column then
    one chunk, converted without concatenating)."""
    for table in tables:
        batches = table.to_batches()
        if len(batches) <= 1:
            yield table
        else:
            yield from (pa.Table.from_batches([batch], table.schema) for batch in batches)
