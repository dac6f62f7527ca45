"""Sequence packing (``fastdata.pack``): documents concatenated into fixed-length rows.

The documents of a token column (``list<int>``) are laid end to end in the stream's order and
cut into batches of ``rows`` rows of ``seq_len`` tokens. With ``split_documents=True`` (the
default) a document goes on in the next row when the row is full: no padding but at the very
end of a reader's share of the epoch. With ``split_documents=False`` a document that does not
fit in what is left of a row starts the next row, and the rest of the row is padding. A
document longer than ``seq_len`` is split over rows (``overlong="split"``, the default),
dropped (``"drop"``, counted) or cut to ``seq_len`` tokens (``"truncate"``).

Each batch carries what varlen attention kernels need::

    tokens        (rows, seq_len)  the tokens (padding: pad_id)
    position_ids  (rows, seq_len)  position within each piece (0 for padding)
    document_ids  (rows, seq_len)  which piece of the batch a token belongs to (-1: padding);
                                   same id <=> may attend: a block-diagonal mask is
                                   document_ids[..., :, None] == document_ids[..., None, :]
    cu_seqlens    (runs + 1,)      int32 start of every run (piece or padding) in the
                                   flattened batch, as flash-attn's varlen functions take it
    max_seqlen    int              the longest run

A piece is a document's tokens within one row (a document split over rows is a piece per
row, so attention never crosses rows). A batch has ``rows`` rows, the last of a reader's
share fewer. Every token of every document is packed exactly once per epoch across ranks x
workers (the stream's plan shards the documents), and resume is exact mid-document: the
state records how far into the next document the packing had gone.
:meth:`PackedStream.packing` reports the pad share.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import pyarrow as pa
import pyarrow.types as pat
import torch
from torch.utils.data import get_worker_info

from fastdata._env import worker_slot
from fastdata._validate import check_bool, check_choice, check_int, keywords_checked
from fastdata.errors import SchemaError
from fastdata.sources.base import Context, SchemaReader, declares
from fastdata.sources.options import StreamOptions
from fastdata.sources.stream import PlannedStream

if TYPE_CHECKING:
    from typing_extensions import Unpack


__all__ = ["PackedStream", "Packer", "pack"]

Overlong = Literal["split", "drop", "truncate"]
_MAX_READERS = 257  # rows of the shared counts: the main process and 256 workers
_TOKENS, _PAD, _DROPPED = 0, 1, 2


class _Documents:
    """The documents of a row stream, one at a time, and the position reached:
    ``(documents fully taken, tokens taken of the next one)``."""

    def __init__(self, packer: Packer, tables: Iterator[pa.Table], offset: int) -> None:
        self.packer = packer
        self.tables = tables
        self.position = (0, offset)
        self.current: np.ndarray | None = None  # what is left of the document being taken
        self._table: tuple[np.ndarray, np.ndarray, int] | None = None  # starts, values, next

    def peek(self) -> np.ndarray | None:
        """What is left of the next document (None: no more)."""
        while self.current is None or not len(self.current):
            if self.current is not None:  # an empty document (or one dropped) is done
                self.position = (self.position[0] + 1, 0)
            self.current = self._next()
            if self.current is None:
                return None
        return self.current

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` tokens of the current document (which ``peek`` showed)."""
        assert self.current is not None  # peek() came first
        piece, self.current = self.current[:n], self.current[n:]
        done, into = self.position
        self.position = (done + 1, 0) if not len(self.current) else (done, into + n)
        if not len(self.current):
            self.current = None
        return piece

    def _next(self) -> np.ndarray | None:
        while self._table is None or self._table[2] >= len(self._table[0]) - 1:
            table = next(self.tables, None)
            if table is None:
                return None
            starts, values = self.packer.documents(table)
            self._table = (starts, values, 0)
        starts, values, i = self._table
        self._table = (starts, values, i + 1)
        doc = self.packer.policy(values[starts[i] : starts[i + 1]])
        first = self.position[1]  # a resume's start, into its first document
        return doc[first:] if first else doc


class Packer:
    """The decoder of a packed stream: documents -> packed batches, with the position after
    each batch (see :meth:`items`); the options are :func:`pack`'s."""

    needs_index = False
    varying = True

    def __init__(
        self,
        column: str,
        *,
        seq_len: int,
        rows: int,
        overlong: Overlong,
        split_documents: bool,
        pad_id: int,
    ) -> None:
        self.column, self.seq_len, self.batch_rows = column, seq_len, rows
        self.overlong, self.split_documents, self.pad_id = overlong, split_documents, pad_id
        self.counts = torch.zeros(_MAX_READERS, 3, dtype=torch.int64).share_memory_()
        self._row: tuple[int, np.ndarray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_row": None}

    # batch() and rows() complete the Decoder protocol; a stream uses items() when it exists.
    def batch(self, table: pa.Table, context: Context) -> Any:
        return next(self.items(iter([table]), context, 0))[0]

    def rows(self, table: pa.Table, context: Context) -> Iterator[Any]:
        return (item for item, _ in self.items(iter([table]), context, 0))

    def items(
        self, tables: Iterator[pa.Table], context: Context, offset: int
    ) -> Iterator[tuple[dict[str, Any], tuple[int, int]]]:
        """Packed batches from the documents of ``tables``, each with the position after it:
        ``(documents fully packed, tokens of the next one packed)``, counted from where this
        reader started (``offset`` tokens into its first document)."""
        documents = _Documents(self, tables, offset)
        while True:
            rows = (self._row_of(documents) for _ in range(self.batch_rows))
            batch = [row for row in rows if row]
            if not batch:
                return
            yield self._emit(batch), documents.position
            if len(batch) < self.batch_rows:
                return

    def documents(self, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """The start of every document in the values, and the values, of ``table``."""
        column = table.column(self.column)
        array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        if array.null_count:
            raise SchemaError(
                f"{array.null_count} null document(s) in {self.column!r}; filter them out "
                f"(filter=pc.field({self.column!r}).is_valid())",
                column=self.column,
            )
        offsets = array.offsets.to_numpy()
        values = array.values.to_numpy(zero_copy_only=False)
        return offsets, values

    def policy(self, doc: np.ndarray) -> np.ndarray:
        """A document as packed: as is, or dropped / cut when longer than a row."""
        if len(doc) <= self.seq_len or self.overlong == "split":
            return doc
        self._count(_DROPPED, 1)
        return doc[:0] if self.overlong == "drop" else doc[: self.seq_len]

    def _row_of(self, documents: _Documents) -> list[np.ndarray]:
        """The pieces of the next row (empty: no documents left)."""
        pieces: list[np.ndarray] = []
        room = self.seq_len
        while room:
            doc = documents.peek()
            if doc is None:
                break
            if not self.split_documents and pieces and len(doc) > room:
                break  # it starts the next row; the rest of this one is padding
            pieces.append(documents.take(min(room, len(doc))))
            room -= len(pieces[-1])
        return pieces

    def _emit(self, batch: list[list[np.ndarray]]) -> dict[str, Any]:
        rows, length = len(batch), self.seq_len
        dtype = batch[0][0].dtype
        tokens = np.full((rows, length), self.pad_id, dtype=dtype)
        positions = np.zeros((rows, length), dtype=np.int32)
        documents = np.full((rows, length), -1, dtype=np.int32)
        starts: list[int] = []
        piece = 0
        for r, row in enumerate(batch):
            at = 0
            for part in row:
                n = len(part)
                tokens[r, at : at + n] = part
                positions[r, at : at + n] = np.arange(n, dtype=np.int32)
                documents[r, at : at + n] = piece
                starts.append(r * length + at)
                piece, at = piece + 1, at + n
            if at < length:
                starts.append(r * length + at)  # a padding run
        starts.append(rows * length)
        cu = np.asarray(starts, dtype=np.int32)
        real = int((documents >= 0).sum())
        self._count(_TOKENS, real)
        self._count(_PAD, rows * length - real)
        return {
            "tokens": torch.from_numpy(tokens),
            "position_ids": torch.from_numpy(positions),
            "document_ids": torch.from_numpy(documents),
            "cu_seqlens": torch.from_numpy(cu),
            "max_seqlen": int(np.diff(cu).max()),
        }

    def _count(self, what: int, n: int) -> None:
        if self._row is None or self._row[0] != os.getpid():  # a forked worker: its own row
            worker = worker_slot()[0] + 1 if get_worker_info() is not None else 0
            self._row = (os.getpid(), self.counts[worker % _MAX_READERS].numpy())
        self._row[1][what] += n


class PackedStream(PlannedStream):
    """A stream of packed batches over a source's reader; see :func:`pack`."""

    decoder: Packer

    def packing(self) -> dict[str, float]:
        """Tokens and padding packed so far over all workers, the pad share, and the
        documents dropped or cut (``overlong``)."""
        tokens, pad, dropped = (int(x) for x in self.decoder.counts.sum(dim=0).tolist())
        total = tokens + pad
        return {
            "tokens": tokens,
            "pad_tokens": pad,
            "pad_share": pad / total if total else 0.0,
            "overlong_documents": dropped,
        }

    def __repr__(self) -> str:
        d = self.decoder
        return f"PackedStream({self.reader!r}, rows={d.batch_rows}, seq_len={d.seq_len})"


@keywords_checked(StreamOptions)
def pack(
    source: PlannedStream,
    /,
    *,
    seq_len: int,
    rows: int = 8,
    column: str = "tokens",
    overlong: Overlong = "split",
    split_documents: bool = True,
    pad_id: int = 0,
    **options: Unpack[StreamOptions],
) -> PackedStream:
    """Pack the documents of ``source``'s ``column`` into batches of ``rows`` x ``seq_len``
    tokens (see :mod:`fastdata.sources.pack`).

    ``source`` gives the reader (a ``ParquetStream`` reading at least ``column``); its
    stream options are not used: the packed stream has its own (``shuffle``, ``seed``,
    ``shuffle_buffer``, ``rank``, ... as for :class:`fastdata.PlannedStream`; the batch is
    ``rows`` rows, so ``batch_size`` is not an option). Use it with
    ``fastdata.DataLoader(packed, batch_size=None)``.

    Raises:
        SchemaError: ``column`` is not a list of integers.
        ValueError: a bad option.
    """
    if not isinstance(source, PlannedStream):
        raise TypeError(f"source={source!r}: expected a fastdata stream, e.g. a ParquetStream")
    if "batch_size" in options:
        raise TypeError("pack() makes batches of rows x seq_len: pass rows=, not batch_size=")
    if declares(source.reader, SchemaReader):
        schema = cast(SchemaReader, source.reader).schema
        kind = schema.field(column).type if column in schema.names else None
        if kind is None or not (
            (pat.is_list(kind) or pat.is_large_list(kind)) and pat.is_integer(kind.value_type)
        ):
            raise SchemaError(
                f"column {column!r} is {kind}: expected a list of integers (token ids)",
                column=column,
            )
    packer = Packer(
        column,
        seq_len=check_int("seq_len", seq_len, minimum=1),
        rows=check_int("rows", rows, minimum=1),
        overlong=check_choice("overlong", overlong, ("split", "drop", "truncate")),
        split_documents=check_bool("split_documents", split_documents),
        pad_id=check_int("pad_id", pad_id),
    )
    options["batch_size"] = None  # a packed batch is rows x seq_len tokens, not rows
    return PackedStream(source.reader, decoder=packer, **options)
