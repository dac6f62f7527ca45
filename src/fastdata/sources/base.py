"""What a source is made of: a :class:`Reader` of units and a :class:`Decoder` of rows.

A stream (:class:`fastdata.PlannedStream`) is a reader and a decoder put together with a plan:

- the **reader** knows its data as *units* (a Parquet row group, a block of image files, a tar
  shard) whose row counts it can tell from metadata, reads any range of rows of one unit as an
  Arrow table, names the location of a row for error messages, and describes its data for
  resume checks. Nothing else: no sharding, shuffling, batching or state.
- the **decoder** turns a table of rows into what the stream yields: a batch of
  ``batch_size`` rows, or one item per row. :class:`ArrowDecoder` (the default) gives dicts
  of torch tensors; the image streams decode image bytes. A decoder whose items take a
  varying number of rows (packing; images under ``on_error="skip"``, whose skipped rows are
  replaced by the following ones) says so with ``varying = True`` and has
  ``items(tables, context, offset)``: the stream hands it all of a reader's tables and it
  yields each item with the position it reached (see :mod:`fastdata.sources._cursors`).

Both are pickled for DataLoader workers: they hold plain data (pools, open files: per process).

Optional capabilities are declared, not guessed: each is a small protocol below
(:class:`PerEpochReader`, :class:`VaryingDecoder`, :class:`BatchingDecoder`, :class:`FileBacked`,
:class:`RowReader`, :class:`SkipCounting`, :class:`SchemaReader`, :class:`SourceCounting`), and
:func:`declares` is the one way the package asks whether an object has one. It checks every
member and its type, and refuses a capability declared by halves (``varying = True`` without
``items``, an ``fs`` that is a string, a ``for_epochs`` typo) with a TypeError, where probing
an attribute would have turned the feature off without a word.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast, get_type_hints, runtime_checkable

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from fastdata._stats import StageTimes
from fastdata.sources._arrow import Conversions, iter_rows, to_batch
from fastdata.sources._columns import batch_cutter
from fastdata.sources._feed import cut, cut_converted
from fastdata.workers import receiver_sharing

__all__ = [
    "INDEX",
    "ORIGIN",
    "ArrowDecoder",
    "BatchingDecoder",
    "Context",
    "Decoder",
    "FileBacked",
    "PerEpochReader",
    "Reader",
    "RowReader",
    "SchemaReader",
    "SkipCounting",
    "SourceCounting",
    "VaryingDecoder",
    "check_parts",
    "declares",
    "varies",
]

INDEX = "__index__"
"""The column a stream adds for a decoder that asks for it (:attr:`Decoder.needs_index`): each
row's index among all rows of the source (the units' rows, in unit order)."""

ORIGIN = "origin"
"""The entry of an item that says where each of its rows came from, with ``origin=True``: the
reader's :meth:`Reader.location` of the row (``{"path": ..., "row_group": ..., "row": ...}``
for Parquet, ``{"path": ..., "member": ...}`` for a tar shard, ``{"path": ...}`` for an image
file); a list of them in a batch."""


@runtime_checkable
class Reader(Protocol):
    """How a source counts and reads its units (see the module docstring)."""

    def unit_rows(self) -> Sequence[int]:
        """Rows of every unit, from metadata (no data read); the same on every call."""
        ...

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        """Rows ``[start, stop)`` of unit ``unit``, exactly ``stop - start`` of them.

        Raises:
            fastdata.SourceError: the data cannot be read, naming where.
        """
        ...

    def location(self, unit: int, row: int) -> dict[str, Any]:
        """Where row ``row`` of unit ``unit`` is, as :class:`fastdata.SourceError` keywords
        (``path``, ``row_group``, ``member``, ``row``)."""
        ...

    def identity(self) -> dict[str, Any]:
        """Small, JSON-able facts about the data (counts, hashes of names and contents) that a
        resume state must match; a state whose facts differ is refused naming the fact."""
        ...


@dataclass(frozen=True)
class Context:
    """What a decoder may need besides the rows: the epoch and seed (per-sample randomness
    that a resumed run repeats), where a row is (for errors), the stage timer, and the
    stream's ``batch_size`` (None: one item per row)."""

    epoch: int
    seed: int
    locate: Callable[[int], dict[str, Any]]
    times: StageTimes | None = None
    batch_size: int | None = None


@runtime_checkable
class Decoder(Protocol):
    """Turns tables of rows into the items a stream yields."""

    needs_index: bool
    """Whether tables should carry the :data:`INDEX` column."""

    def batch(self, table: pa.Table, context: Context) -> Any:
        """One item from all rows of ``table`` (``batch_size`` rows, fewer at the end)."""
        ...

    def rows(self, table: pa.Table, context: Context) -> Iterator[Any]:
        """One item per row of ``table``."""
        ...


# ----------------------------------------------------------------- optional capabilities
@runtime_checkable
class PerEpochReader(Protocol):
    """A reader whose units change from epoch to epoch (the mix of several sources,
    :mod:`fastdata.sources.mix`): the stream plans each epoch over ``for_epoch(epoch)``."""

    def for_epoch(self, epoch: int) -> Reader:
        """The reader of ``epoch`` (its units, rows and locations)."""
        ...


@runtime_checkable
class VaryingDecoder(Protocol):
    """A decoder that may take a varying number of rows per item (packing; images under
    ``on_error="skip"``). When ``varying`` is true the stream hands it all of a reader's
    tables and it reports where the reader stands after each item, so resume stays exact
    (see :mod:`fastdata.sources._cursors`)."""

    varying: bool
    """Whether items take a varying number of rows (it may depend on the options)."""

    def items(
        self, tables: Iterator[pa.Table], context: Context, offset: int
    ) -> Iterator[tuple[Any, tuple[int, int]]]:
        """``(item, (rows_taken, offset_into_next_row))`` per item, counted from where this
        reader started (``offset`` into its first row)."""
        ...


@runtime_checkable
class BatchingDecoder(Protocol):
    """A decoder that makes a stream's batches from the reader's tables itself, where the
    stream would otherwise cut the tables and call ``batch`` on each cut:
    :class:`ArrowDecoder` converts each table's columns once and cuts the converted columns,
    cheaper than converting every batch."""

    def batches(self, tables: Iterator[pa.Table], context: Context) -> Iterator[Any]:
        """What ``batch`` makes of each ``context.batch_size`` rows of ``tables``, cut across
        table boundaries (the last cut may be shorter)."""
        ...


@runtime_checkable
class FileBacked(Protocol):
    """A reader that opens its files through ``fs`` (only readers open files: a decoder gets
    the data in the rows): a cache wrapping it is found there (``stats()["cache"]``)."""

    fs: pafs.FileSystem | None


@runtime_checkable
class RowReader(Protocol):
    """A reader that reads any rows in any order as cheaply as a range (a file a row): the
    stream reads a shuffled window's rows in order, not its ranges then a permuted copy."""

    def read_rows(self, units: np.ndarray, rows: np.ndarray) -> pa.Table:
        """Row ``rows[i]`` of unit ``units[i]`` for each ``i``, as :meth:`Reader.read` has it."""
        ...


@runtime_checkable
class SkipCounting(Protocol):
    """A reader or decoder that leaves out bad items under ``on_error="skip"`` and counts
    them (over all workers), for ``ImageStream.skipped``."""

    skipped: int


@runtime_checkable
class SchemaReader(Protocol):
    """A reader that knows the Arrow schema of every table it reads, before reading: a
    column's type is checked when the stream is built (``fastdata.pack``)."""

    schema: pa.Schema


@runtime_checkable
class SourceCounting(Protocol):
    """A stream of several sources that counts what each delivered (``fastdata.mix``: rows;
    packed, tokens): ``DataLoader(stats=True).stats()["sources"]``."""

    def source_counts(self) -> dict[str, int]:
        """What each source has delivered so far (to the training loop), over all workers."""
        ...


# The capabilities a stream's reader and decoder may declare (SourceCounting is a stream's).
_PART_CAPABILITIES = {
    "reader": (PerEpochReader, FileBacked, RowReader, SkipCounting, SchemaReader),
    "decoder": (VaryingDecoder, BatchingDecoder, SkipCounting),
}
_TYPO_CHECKED = (PerEpochReader, VaryingDecoder)  # a typo there changes which rows come when


@functools.cache
def _members(capability: type) -> dict[str, Any]:
    """A capability's members: ``{name: type}`` of its data members, ``{name: None}`` of its
    methods."""
    members: dict[str, Any] = {
        name: None
        for name, value in vars(capability).items()
        if callable(value) and not name.startswith("_")
    }
    members.update(get_type_hints(capability))
    return members


def declares(obj: object, capability: type) -> bool:
    """Whether ``obj`` has ``capability`` (one of the protocols of this module): every member,
    data members of their annotated type, methods callable.

    Raises:
        TypeError: ``obj`` has some members of the capability but not all, one of the wrong
            type, or (for :class:`PerEpochReader` and :class:`VaryingDecoder`, whose absence
            changes which rows come when) none but a public name one typo away from one.
    """
    members = _members(capability)
    present = [name for name in members if hasattr(obj, name)]
    name = capability.__name__
    if not present:
        if capability in _TYPO_CHECKED:
            for member in members:
                near = difflib.get_close_matches(member, _public(obj), n=1, cutoff=0.8)
                if near:
                    raise TypeError(
                        f"{obj!r} has {near[0]!r}, not {member!r}: to declare "
                        f"fastdata.sources.{name}, name it {member!r}"
                    )
        return False
    if len(present) < len(members):
        missing = [m for m in members if m not in present]
        raise TypeError(
            f"{obj!r} declares fastdata.sources.{name} by halves: it has {present} but not "
            f"{missing}; give it all of {list(members)}, or none"
        )
    for member, kind in members.items():
        value = getattr(obj, member)
        ok = callable(value) if kind is None else isinstance(value, kind)
        if not ok:
            expected = "a method" if kind is None else f"of type {kind}"
            raise TypeError(
                f"{obj!r}.{member} is {value!r}: fastdata.sources.{name} needs it {expected}"
            )
    return isinstance(obj, capability)


def _public(obj: object) -> list[str]:
    return [name for name in dir(obj) if not name.startswith("_")]


def varies(decoder: object) -> bool:
    """Whether ``decoder`` takes a varying number of rows per item (a
    :class:`VaryingDecoder` whose ``varying`` is true)."""
    return declares(decoder, VaryingDecoder) and bool(cast(VaryingDecoder, decoder).varying)


def check_parts(reader: object, decoder: object | None) -> None:
    """Check a stream's parts when it is built: a :class:`Reader`, a :class:`Decoder` (or
    None), and every optional capability of its part (a reader's ``items`` list is not a
    decoder's method) either declared in full or not at all.

    Raises:
        TypeError: naming the part and what it lacks.
    """
    for name, obj, kind in (("reader", reader, Reader), ("decoder", decoder, Decoder)):
        if obj is None:
            continue
        if not isinstance(obj, kind):
            raise TypeError(f"{name}={obj!r}: expected a fastdata.sources.{kind.__name__}")
        for capability in _PART_CAPABILITIES[name]:
            declares(obj, capability)


class ArrowDecoder:
    """Arrow rows as torch: a batch is ``{column: tensor | list}``, a row a dict of values.

    Conversions per Arrow type are those of :mod:`fastdata.sources._arrow`; they are chosen
    once per schema. A conversion that fails (a timestamp outside Python's datetime range)
    is a :class:`fastdata.SourceError` naming the column, and the row's file and row group
    (or member) when the tables carry :data:`INDEX`.

    Args:
        origin: add :data:`ORIGIN` to each item: where each row came from.
        index: ask for :data:`INDEX` without ``origin`` (so failed conversions are located;
            worth it where some column becomes Python objects, see
            :func:`~fastdata.sources._arrow_types.becomes_objects`).
    """

    def __init__(self, *, origin: bool = False, index: bool = False) -> None:
        self.origin = origin
        self.needs_index = origin or index
        self._converters: Conversions | None = None
        # The sharing strategy of the process that pickled this decoder for its workers:
        # ragged columns reuse shared-memory segments only where it shares by descriptor.
        self._receiver: str | None = None

    def _conversions(self, schema: pa.Schema) -> Conversions:
        """The converters of ``schema``'s columns, chosen once per schema."""
        if self._converters is None or self._converters.schema != schema:
            self._converters = Conversions(schema)
        return self._converters

    def batch(self, table: pa.Table, context: Context) -> dict[str, Any]:
        table, index, locate = split_index(table, context)
        converters = self._conversions(table.schema).batch
        batch = to_batch(table, converters, reuse=self._reuse, locate=locate)
        if self.origin:
            batch[ORIGIN] = [context.locate(i) for i in _indexes(index)]
        return batch

    def batches(self, tables: Iterator[pa.Table], context: Context) -> Iterator[dict[str, Any]]:
        """What :meth:`batch` makes of each ``context.batch_size`` rows of ``tables``, with
        each table's columns converted once and cut
        (:func:`~fastdata.sources._feed.cut_converted`)."""
        assert context.batch_size is not None  # streams ask for batches with a batch size
        convert = functools.partial(self.batch, context=context)
        if type(self).batch is not ArrowDecoder.batch:  # a subclass's own batch() decides
            return map(convert, cut(tables, context.batch_size))
        cutter = functools.partial(self._cutter, context=context)
        return cut_converted(tables, context.batch_size, convert, cutter)

    def _cutter(self, table: pa.Table, context: Context) -> Callable[[int, int], Any] | None:
        """The batch of rows ``[start, stop)`` of ``table``, its columns converted once;
        None where they do not all convert whole (then :meth:`batch`)."""
        table, index, _ = split_index(table, context)
        rows = batch_cutter(table, self._conversions(table.schema).whole, self._reuse)
        if rows is None or not self.origin:
            return rows
        where = _indexes(index)
        return lambda a, b: rows(a, b) | {ORIGIN: [context.locate(i) for i in where[a:b]]}

    @property
    def _reuse(self) -> bool:
        """Whether Ragged columns reuse shared-memory segments (where the receiving process
        shares by descriptor)."""
        return self._receiver in (None, "file_descriptor")

    def rows(self, table: pa.Table, context: Context) -> Iterator[dict[str, Any]]:
        table, index, locate = split_index(table, context)
        rows = iter_rows(table, locate)
        if not self.origin:
            return rows
        where = _indexes(index)
        return ({**row, ORIGIN: context.locate(i)} for row, i in zip(rows, where, strict=True))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_converters": None, "_receiver": receiver_sharing()}


def split_index(
    table: pa.Table, context: Context
) -> tuple[pa.Table, pa.ChunkedArray | None, Callable[[int], dict[str, Any]] | None]:
    """``table`` without :data:`INDEX`, that column (None if absent), and where a row of
    the table is (None without the column)."""
    if INDEX not in table.column_names:
        return table, None, None
    index = table.column(INDEX)

    def locate(row: int) -> dict[str, Any]:
        return context.locate(index[row].as_py())

    return table.drop_columns([INDEX]), index, locate


def _indexes(index: pa.ChunkedArray | None) -> list[int]:
    if index is None:
        raise ValueError("origin=True needs the tables' INDEX column: the decoder's needs_index")
    return index.to_pylist()
