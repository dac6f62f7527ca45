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
    source        (rows, seq_len)  packing a mix (``fastdata.mix``) only: int16, the source
                                   of each token's document, an index into ``sources`` (-1:
                                   padding); ``source_counts()`` counts each one's tokens

A piece is a document's tokens within one row (a document split over rows is a piece per
row, so attention never crosses rows). A batch has ``rows`` rows, the last of a reader's
share fewer (``drop_last=True`` drops that one, counted). Every token of every document is
packed exactly once per epoch across ranks x workers (the stream's plan shards the
documents), and resume is exact mid-document: the state records how far into the next
document the packing had gone. :meth:`PackedStream.packing` reports the pad share; its counts
are of the batches the training loop received (see :mod:`fastdata.sources.tally`).
A packed stream shares its source's epoch: ``set_epoch`` on either sets both.

How many batches a rank yields is known only once its documents are packed, so a packed
stream has no ``len()`` (a TypeError, as for an unsized ``IterableDataset``), cannot give
ranks equal counts (``even_batches``; the counts can differ by more than one), and
``summary()`` counts documents.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import pyarrow as pa
import pyarrow.types as pat

from fastdata._validate import check_bool, check_choice, check_int, keywords_checked
from fastdata.errors import SchemaError
from fastdata.sources._packing import Window, documents, packed_batch, row_bounds
from fastdata.sources._source_checks import options_set
from fastdata.sources.base import Context, SchemaReader, declares
from fastdata.sources.mix import SOURCE, MixedStream
from fastdata.sources.options import StreamOptions
from fastdata.sources.plan import Summary
from fastdata.sources.stream import PlannedStream
from fastdata.sources.tally import Tally, counts_of

if TYPE_CHECKING:
    from typing_extensions import Unpack


__all__ = ["PackedStream", "Packer", "pack"]

Overlong = Literal["split", "drop", "truncate"]
_TOKENS, _PAD, _DROPPED, _BATCHES, _SHORT = range(5)
_NO_COUNT = "known only once packed (a packed batch takes a varying number of documents)"
_STEPS = (
    "Under DDP stop every rank after the same number of steps: Lightning's "
    "Trainer(limit_train_batches=N) with N at most the smallest rank's count (e.g. from "
    "packed.packing()['batches'] of an earlier epoch), or torch.distributed.algorithms.Join"
    "([ddp_model]) around a plain DDP loop"
)


class Packer:
    """The decoder of a packed stream: documents -> packed batches, with the position after
    each batch (see :meth:`items`); the options are :func:`pack`'s."""

    needs_index = True  # an error names the file, row group and row of its document
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
        drop_last: bool = False,
        sources: int = 0,
    ) -> None:
        self.column, self.seq_len, self.batch_rows = column, seq_len, rows
        self.overlong, self.split_documents, self.pad_id = overlong, split_documents, pad_id
        self.drop_last = drop_last
        self.sources = sources  # packing a mix: its sources (their tokens are counted)
        # tokens, pad, dropped, batches, short, then the tokens of each source
        self.tally = Tally(5 + sources)

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
        reader started (``offset`` tokens into its first document). Each table is converted
        once and the batches cut from it (:mod:`fastdata.sources._packing`)."""
        source = SOURCE if self.sources else ""
        docs = (
            self._pad_fits(
                documents(table, self.column, self.seq_len, self.overlong, context, source)
            )
            for table in tables
            if table.num_rows
        )
        window = Window(docs, offset, lambda n: self._count(_DROPPED, n))
        size = self.batch_rows * self.seq_len
        while True:
            window.fill(size)
            bounds = row_bounds(window, self.batch_rows, self.seq_len, self.split_documents)
            if len(bounds) == 1:
                window.finish()
                return
            real = bounds[-1] - bounds[0]
            last = len(bounds) <= self.batch_rows  # the reader's last rows, fewer than `rows`
            if last and self.drop_last:  # a share of less than one batch: nothing to yield
                window.finish()
                self._count(_SHORT, real)
                return
            if self.sources:
                of = cast(np.ndarray, window.docs.sources)[bounds[0] : bounds[-1]]
                self._count(slice(5, None), counts_of(of, self.sources))
            batch = packed_batch(window, bounds, self.seq_len, self.pad_id)
            self._count(_TOKENS, real)
            self._count(_PAD, batch["tokens"].numel() - real)
            self._count(_BATCHES, 1)
            if self.drop_last and not last:
                last = self._drop_short(window, size)
            position = window.position()
            if last:
                window.finish()  # overlong documents after them count with them
            yield batch, position
            if last:
                return

    def _pad_fits(self, docs: Any) -> Any:
        """``docs``, once ``pad_id`` is known to fit their tokens' dtype (a reader with no
        schema: checked at the first batch rather than at the first padded one)."""
        check_pad_id(self.pad_id, docs.values.dtype, self.column)
        return docs

    def _drop_short(self, window: Window, size: int) -> bool:
        """Whether the reader's share ends after the batch just cut, with at most a short
        batch (fewer than ``rows`` rows), which ``drop_last`` drops: passed over (counted),
        so that the position yielded with the last full batch is the end of the share."""
        window.fill(size)
        bounds = row_bounds(window, self.batch_rows, self.seq_len, self.split_documents)
        if len(bounds) > self.batch_rows:
            return False
        self._count(_SHORT, bounds[-1] - bounds[0])
        window.at = bounds[-1]
        return True

    def _count(self, what: Any, n: Any) -> None:
        self.tally.add(what, n)


class PackedStream(PlannedStream):
    """A stream of packed batches over a source's reader; see :func:`pack`."""

    decoder: Packer

    def packing(self) -> dict[str, float]:
        """Of the batches delivered so far (to the training loop, under
        ``fastdata.DataLoader``: not those its workers made ahead), over all workers and
        iterations: their tokens and padding, the pad share, the documents dropped or cut
        before them (``overlong``), the batches, and the tokens of the short batches
        ``drop_last`` dropped (counted once the epoch's end is seen)."""
        tokens, pad, dropped, batches, short = self.decoder.tally.totals()[:5]
        total = tokens + pad
        return {
            "tokens": tokens,
            "pad_tokens": pad,
            "pad_share": pad / total if total else 0.0,
            "overlong_documents": dropped,
            "batches": batches,
            "drop_last_tokens": short,
        }

    def __len__(self) -> int:
        """Never: a TypeError, as for an unsized ``IterableDataset`` (torch's DataLoader
        and Lightning then treat the length as unknown)."""
        raise TypeError(
            "a packed stream has no len(): the number of batches a rank yields is "
            + _NO_COUNT
            + "; summary().items_per_rank counts documents. Give a step count yourself "
            "where one is needed (an LR schedule, Trainer(max_steps=...)), e.g. from "
            "packed.packing()['batches'] after an epoch"
        )

    def __bool__(self) -> bool:
        return True  # not len(): a stream is never false

    def summary(self) -> Summary:
        """This epoch's totals, ``items_per_rank`` counting the documents of each rank
        (``unit="documents"``): its packed batches are known only once packed."""
        return dataclasses.replace(super().summary(), unit="documents")

    @property
    def settings(self) -> dict[str, Any]:
        return {**super().settings, "drop_last": self.decoder.drop_last}

    def __repr__(self) -> str:
        d = self.decoder
        return f"PackedStream({self.reader!r}, rows={d.batch_rows}, seq_len={d.seq_len})"


class _PackedMix(PackedStream):
    """A packed stream of a mix: its batches carry each token's ``source``."""

    sources: list[str]
    """The mix's sources' names; a token's ``source`` is an index into it."""

    def source_counts(self) -> dict[str, int]:
        """Tokens of each source delivered so far (as :meth:`packing` counts them), over all
        workers: ``fastdata.DataLoader(stats=True).stats()["sources"]``."""
        return dict(zip(self.sources, self.decoder.tally.totals()[5:], strict=True))


def check_pad_id(pad_id: int, dtype: Any, column: str) -> None:
    """Refuse a ``pad_id`` that the token column's integer ``dtype`` cannot hold."""
    info = np.iinfo(dtype)
    if not info.min <= pad_id <= info.max:
        raise ValueError(
            f"pad_id={pad_id} cannot be stored in column {column!r}, whose dtype is "
            f"{np.dtype(dtype)} (integers {info.min}..{info.max}): the padding is written "
            "in the tokens' dtype; pass a pad_id in that range (e.g. 0) or store the column "
            "as a wider integer type"
        )


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

    ``source`` gives the reader (a ``ParquetStream`` reading at least ``column``, built with
    no stream options): the packed stream takes the stream options itself (``shuffle``,
    ``seed``, ``shuffle_buffer``, ``rank``, ... as for :class:`fastdata.PlannedStream`; the
    batch is ``rows`` rows, so ``batch_size`` is not an option). ``drop_last=True`` drops
    each reader's last batch when it has fewer than ``rows`` rows (its tokens counted in
    :meth:`PackedStream.packing`), so every batch is ``(rows, seq_len)``. ``source`` is a
    mix (``fastdata.mix``): each batch has a ``source`` field (each token's source), and
    ``stats()["sources"]`` counts each source's tokens. The packed stream and ``source``
    share one epoch: ``set_epoch`` on either sets both. ``even_batches``
    is refused: the ranks' batch counts are known only once packed, and can differ by more
    than one. Use it with ``fastdata.DataLoader(packed, batch_size=None)``.

    ``pad_id`` (default 0) is the token written into the padding of ``tokens`` (the rest of
    a row under ``split_documents=False``, the rows of a reader's last batch). It is written
    in the column's integer dtype, so it must fit it: ``-100`` does not fit a ``uint16``
    column. That is checked here when the reader has a schema (a ParquetStream), else at the
    first batch. Padding is also marked by ``document_ids == -1``, whatever ``pad_id`` is.

    Raises:
        SchemaError: ``column`` is not a list of integers.
        ValueError: a bad option, ``even_batches``, a source with stream options (pass
            them to ``pack()``), or a ``pad_id`` the column's dtype cannot hold.
    """
    if not isinstance(source, PlannedStream):
        raise TypeError(f"source={source!r}: expected a fastdata stream, e.g. a ParquetStream")
    if "batch_size" in options:
        raise TypeError("pack() makes batches of rows x seq_len: pass rows=, not batch_size=")
    if options.get("even_batches") is not None:
        raise ValueError(
            f"pack(even_batches={options['even_batches']!r}) cannot give the ranks the same "
            "number of batches: their counts are "
            + _NO_COUNT
            + " and can differ by more than one. "
            + _STEPS
        )
    ignored = options_set(source)
    if ignored:
        raise ValueError(
            f"the source stream's options {', '.join(ignored)} would be ignored: pack() "
            "reads the source's reader with its own stream options; build the source "
            "without them and pass them to pack() instead (batch_size as rows=)"
        )
    drop_last = check_bool("drop_last", options.pop("drop_last", False))
    pad_id = check_int("pad_id", pad_id)
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
        check_pad_id(pad_id, kind.value_type.to_pandas_dtype(), column)
    packer = Packer(
        column,
        seq_len=check_int("seq_len", seq_len, minimum=1),
        rows=check_int("rows", rows, minimum=1),
        overlong=check_choice("overlong", overlong, ("split", "drop", "truncate")),
        split_documents=check_bool("split_documents", split_documents),
        pad_id=pad_id,
        drop_last=drop_last,
        sources=len(source.sources) if isinstance(source, MixedStream) else 0,
    )
    options["batch_size"] = None  # a packed batch is rows x seq_len tokens, not rows
    kind = _PackedMix if isinstance(source, MixedStream) else PackedStream
    packed = kind(source.reader, decoder=packer, **options)
    if isinstance(packed, _PackedMix):
        packed.sources = list(cast(MixedStream, source).sources)
    # One epoch for both: source.set_epoch() must move the stream a loader iterates.
    packed._epoch = source._epoch.join(packed)
    return packed
