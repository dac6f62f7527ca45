"""The work of :mod:`fastdata.sources.pack`, a table at a time: documents as one array of
tokens, packed batches cut from it with numpy slices.

Each table's token column is converted once (:class:`~fastdata.sources._columns.RaggedColumn`:
the values zero-copy, the document bounds) and the ``overlong`` policy applied to all its
documents at once (:func:`documents`). The documents of a reader then form one stream of
tokens in which every packed row is a range: rows follow each other without a gap, so the
real tokens of a batch are one slice of it, and a piece is cut wherever a row or a document
starts (:func:`packed_batch`). :class:`Window` holds that stream a table at a time; where a
batch runs past the end of a table it joins the table's last documents to the first of the
next (a copy of about a batch), then reads the next table in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from fastdata.errors import SchemaError
from fastdata.sources._arrow import converted
from fastdata.sources._columns import RaggedColumn, arrays_of
from fastdata.sources.base import Context, split_index

__all__ = ["Docs", "Window", "documents", "packed_batch", "row_bounds"]


@dataclass
class Docs:
    """Documents as packed: their tokens end to end, where each ends in them, which were
    longer than a row (``over``; None under ``overlong="split"``, where none counts) and,
    packing a mix, each token's source (``sources``, int16, as the mix's ``source`` column)."""

    values: np.ndarray
    ends: np.ndarray  # int64, cumulative: ends[i] is where document i ends in values
    over: np.ndarray | None
    sources: np.ndarray | None = None

    def head(self, docs: int) -> Docs:
        """The first ``docs`` documents."""
        tokens = int(self.ends[docs - 1]) if docs else 0
        over = None if self.over is None else self.over[:docs]
        sources = None if self.sources is None else self.sources[:tokens]
        return Docs(self.values[:tokens], self.ends[:docs], over, sources)

    def tail(self, docs: int) -> Docs:
        """The documents after the first ``docs``."""
        start = int(self.ends[docs - 1]) if docs else 0
        over = None if self.over is None else self.over[docs:]
        sources = None if self.sources is None else self.sources[start:]
        return Docs(self.values[start:], self.ends[docs:] - start, over, sources)

    def then(self, other: Docs) -> Docs:
        """These documents followed by ``other``'s: the tokens copied where these have
        some, ``other``'s in place where not (its dtype then)."""
        over = other.over
        if over is not None:
            mine = np.zeros(len(self.ends), bool) if self.over is None else self.over
            over = np.concatenate([mine, over])
        values, sources = other.values, other.sources
        if len(self.values):
            values = np.concatenate([self.values, values.astype(self.values.dtype, copy=False)])
            if sources is not None and self.sources is not None:
                sources = np.concatenate([self.sources, sources])
        ends = np.concatenate([self.ends, other.ends + len(self.values)])
        return Docs(values, ends, over, sources)


def documents(
    table: pa.Table, column: str, seq_len: int, overlong: str, context: Context, source: str = ""
) -> Docs:
    """The documents of ``table``'s ``column`` (a list of integers) under the ``overlong``
    policy: a document longer than ``seq_len`` kept whole (``"split"``), left empty
    (``"drop"``) or cut to ``seq_len`` tokens (``"truncate"``); with ``source`` (the column
    of a mix's source index), each token's source. With the table's
    :data:`~fastdata.sources.base.INDEX`, an error names the file, row group and row of the
    first bad document (``context.locate``).

    Raises:
        SchemaError: a null document.
        SourceError: a null inside a document (no tensor can hold it).
    """
    table, _, locate = split_index(table, context)
    (array,) = arrays_of(table.select([column]))
    if array.null_count:
        row = pc.index(array.is_null(), True).as_py()
        raise SchemaError(
            f"{array.null_count} null document(s) in {column!r}; filter them out "
            f"(filter=pc.field({column!r}).is_valid())",
            column=column,
            **({} if locate is None else locate(row)),
        )
    ragged = converted(column, lambda a: RaggedColumn(a, "list", column), array, locate)
    values, bounds = ragged.values, ragged.bounds
    lengths = np.diff(bounds)
    of = None if not source else table.column(source).to_numpy().astype(np.int16, copy=False)
    if overlong == "split":
        return Docs(values, bounds[1:], None, None if of is None else np.repeat(of, lengths))
    over = lengths > seq_len
    if not over.any():
        return Docs(values, bounds[1:], over, None if of is None else np.repeat(of, lengths))
    if overlong == "drop":
        keep = np.repeat(~over, lengths)
        lengths = np.where(over, 0, lengths)
    else:  # truncate: the first seq_len tokens of each document
        into = np.arange(len(values)) - np.repeat(bounds[:-1], lengths)
        keep = into < seq_len
        lengths = np.minimum(lengths, seq_len)
    sources = None if of is None else np.repeat(of, lengths)
    return Docs(values[keep], np.cumsum(lengths), over, sources)


class Window:
    """The token stream of a reader's documents (see the module docstring), read up to
    ``at``, with the position reached and the overlong documents passed.

    ``first`` is the index of the window's first document among the reader's, ``counted``
    how many of the window's documents had their ``over`` flag reported (through
    ``count_overlong``, once reached). A *bridge* (the last documents of a table joined to
    the first of the next) keeps the next table whole in ``rest``, with the number of the
    bridge's documents and tokens before it: once ``at`` passes them the window reads that
    table in place.
    """

    def __init__(
        self, tables: Iterator[Docs], offset: int, count_overlong: Callable[[int], None]
    ) -> None:
        self.tables = tables
        self.count_overlong = count_overlong
        self.docs = Docs(np.empty(0, np.int64), np.empty(0, np.int64), None)
        self.at = self.first = self.counted = 0
        self.offset = offset  # into the reader's first document, applied when it comes
        self.rest: tuple[Docs, int, int] | None = None  # next table, bridge docs, tokens

    def left(self) -> int:
        """Tokens of the window after ``at``."""
        return len(self.docs.values) - self.at

    def fill(self, need: int) -> None:
        """Make at least ``need`` tokens (of whole documents) follow ``at``, or all that are
        left; read a table only where those read do not hold them. ``need`` is the same on
        every call (a batch's tokens)."""
        while self.left() < need:
            if self.rest is not None:  # short, so past the bridge: its table in place
                table, docs, tokens = self.rest
                assert self.at > tokens  # the bridge holds `need` tokens of its table
                self._drop(docs, tokens, table)
                continue
            after = next(self.tables, None)
            if after is None:
                return
            done = self._done()
            kept = self.docs.tail(done)  # a document begun, or empty ones at `at`
            cut = len(after.ends)  # nothing begun: the next table in place
            if len(kept.values):  # a bridge: what is begun and the next `need` tokens
                cut = min(int(after.ends.searchsorted(need, "left")) + 1, cut)
            self._drop(done, len(self.docs.values) - len(kept.values), kept.then(after.head(cut)))
            if cut < len(after.ends):
                self.rest = (after, len(kept.ends), len(kept.values))
            if self.offset:  # a resume, into the reader's first document (read first)
                self.at, self.offset = min(self.offset, int(self.docs.ends[0])), 0

    def _drop(self, docs: int, tokens: int, then: Docs) -> None:
        """Leave the window's first ``docs`` documents (``tokens`` tokens), all read, and go
        on in ``then`` (which holds what is left of the window)."""
        self._reach(docs)
        self.first += docs
        self.counted = max(0, self.counted - docs)
        self.docs, self.at, self.rest = then, self.at - tokens, None

    def _done(self) -> int:
        """The window's documents read: those with a token before ``at`` and none after it,
        and the empty ones before ``at`` (not those at ``at``: whether some follow may be
        in a table not read yet)."""
        ends, at = self.docs.ends, self.at
        done = int(ends.searchsorted(at, "left"))  # ending before `at`
        if done < len(ends) and ends[done] == at and at > (ends[done - 1] if done else 0):
            done += 1  # one ending at `at`, not empty
        return done

    def position(self) -> tuple[int, int]:
        """``(documents fully read, tokens read of the next one)``, counting the overlong
        documents reached (the next one too, once begun)."""
        done = self._done()
        into = self.at - (int(self.docs.ends[done - 1]) if done else 0)
        self._reach(done + (into > 0))
        return self.first + done, into

    def finish(self) -> None:
        """Count the overlong documents left (no token comes after them)."""
        self._reach(len(self.docs.ends))

    def _reach(self, docs: int) -> None:
        """Count the overlong documents among the window's first ``docs`` not counted yet."""
        over = self.docs.over
        if over is not None and docs > self.counted:
            self.count_overlong(int(over[self.counted : docs].sum()))
            self.counted = docs


def row_bounds(window: Window, rows: int, seq_len: int, split: bool) -> list[int]:
    """Where the next (up to) ``rows`` rows start in the window's tokens, and the last ends.

    With ``split`` a row is the next ``seq_len`` tokens. Without, a row ends after the last
    document that fits whole, or after ``seq_len`` tokens of a document that does not fit
    in a row of its own; :meth:`Window.fill` made the window hold every document a row
    can reach.
    """
    at, stop, ends = window.at, len(window.docs.values), window.docs.ends
    if split:
        count = min(rows, -((at - stop) // seq_len))  # rows left, the last maybe short
        return [min(at + k * seq_len, stop) for k in range(count + 1)]
    bounds = [at]
    while len(bounds) <= rows and bounds[-1] < stop:
        limit = bounds[-1] + seq_len
        fits = int(ends.searchsorted(limit, "right"))  # documents ending in this row
        end = int(ends[fits - 1]) if fits else 0
        bounds.append(min(end if end > bounds[-1] else limit, stop))
    return bounds


def packed_batch(window: Window, bounds: list[int], seq_len: int, pad_id: int) -> dict[str, Any]:
    """The batch of the window's rows ``bounds`` (see :mod:`fastdata.sources.pack` for its
    fields), ``window.at`` moved past it.

    Its real tokens are ``values[first:last]`` in row order; a piece starts at every row
    start and every document end inside, so ``position_ids`` and ``document_ids`` are
    ranges repeated over the pieces' sizes, and where no row is short the three arrays are
    that range reshaped. Packing a mix, ``source`` is each token's source (-1: padding).
    """
    values, ends, sources = window.docs.values, window.docs.ends, window.docs.sources
    first, last, rows = bounds[0], bounds[-1], len(bounds) - 1
    inner = ends[ends.searchsorted(first, "right") : ends.searchsorted(last, "left")]
    cuts = np.concatenate((np.asarray(bounds[:-1], np.int64), inner))  # every piece's start
    cuts.sort()
    if len(cuts) > 1:  # a document ending where a row starts, or empty ones: one cut each
        cuts = cuts[np.concatenate(([True], cuts[1:] != cuts[:-1]))]
    sizes = np.empty_like(cuts)
    sizes[:-1] = cuts[1:] - cuts[:-1]
    sizes[-1] = last - cuts[-1]
    offsets = (cuts - first).astype(np.int32)  # where each piece starts among the real tokens
    real_positions = np.arange(last - first, dtype=np.int32)
    real_positions -= np.repeat(offsets, sizes)
    real_ids = np.repeat(np.arange(len(cuts), dtype=np.int32), sizes)
    real = [values[first:last], real_positions, real_ids]
    if sources is not None:
        real.append(sources[first:last])
    if last - first == rows * seq_len:  # no padding
        out = [a.reshape(rows, seq_len) for a in real]
        out[0] = out[0].copy()
        if sources is not None:
            out[3] = out[3].copy()
        cu = np.append(offsets, np.int32(rows * seq_len))
    else:
        out, cu = _padded(real, bounds, cuts, seq_len, pad_id)
    window.at = last
    batch = {
        "tokens": torch.from_numpy(out[0]),
        "position_ids": torch.from_numpy(out[1]),
        "document_ids": torch.from_numpy(out[2]),
        "cu_seqlens": torch.from_numpy(cu),
        "max_seqlen": int((cu[1:] - cu[:-1]).max()),
    }
    if sources is not None:
        batch["source"] = torch.from_numpy(out[3])
    return batch


def _padded(
    real: list[np.ndarray], bounds: list[int], cuts: np.ndarray, seq_len: int, pad_id: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """The rows ``bounds`` of the real tokens, position and document ids (and sources), in
    row order, each row padded to ``seq_len`` (with ``pad_id``, 0, -1, -1), and
    ``cu_seqlens``: every piece and every padding run."""
    rows, first = len(bounds) - 1, bounds[0]
    shape = (rows, seq_len)
    fills = (pad_id, 0, -1, -1)[: len(real)]
    out = [np.full(shape, fill, array.dtype) for array, fill in zip(real, fills, strict=True)]
    runs = []
    for r in range(rows):
        a, b = bounds[r] - first, bounds[r + 1] - first
        for array, row in zip(out, real, strict=True):
            array[r, : b - a] = row[a:b]
        if b - a < seq_len:
            runs.append(r * seq_len + b - a)
    starts = np.asarray(bounds[:-1], np.int64)
    row = starts.searchsorted(cuts, "right") - 1
    flat = row * seq_len + cuts - starts[row]  # where each piece starts in the batch
    cu = np.concatenate((flat, runs, [rows * seq_len]))
    cu.sort()
    return out, cu.astype(np.int32)
