"""Arrow columns to torch: zero-copy where Arrow allows, one conversion per column per table.

A stream's batches are cut from its tables' columns converted once
(:mod:`fastdata.sources._columns`, cut by :func:`fastdata.sources._feed.cut_converted`); a
batch that spans two tables, or one of a table whose columns do not all convert whole, is
converted by itself (:func:`to_batch`), with the same result. The choices, per Arrow type, in
a batch and in a row (:func:`iter_rows`), decided by :mod:`fastdata.sources._arrow_types`:

| Arrow type | batch of N rows | row |
|---|---|---|
| integer, floating (float16 too), boolean | 1-D tensor of that dtype | numpy scalar |
| date, time, timestamp (any zone), duration | 1-D int64 tensor of ticks | numpy int64 |
| fixed-size list of the above (nested: more dims); fixed-shape tensor | ``(N, *shape)`` | tensor |
| (large) list of the kinds of numbers above | ``Ragged`` | 1-D tensor; None if null |
| (large) string / binary, fixed-size binary | ``Ragged`` of UTF-8 / bytes | ``str`` / ``bytes`` |
| decimal, struct, map, null, lists of strings or lists | list of Python objects | Python object |

(``Ragged`` is :class:`fastdata.Ragged`.) A temporal column's ticks are its stored integers, in
its unit: days since 1970-01-01 for ``date32``, the unit since midnight for times, the unit
since 1970-01-01 UTC for timestamps (a zone only labels them). Readers deliver tables of
:func:`~fastdata.sources._arrow_types.delivered_type`: dictionaries are decoded to their
values, view types become their large types, extension types other than
``arrow.fixed_shape_tensor`` their storage type (so a ``uuid`` is 16 bytes of fixed-size
binary, ``json`` a string).

Numbers are zero-copy from the Arrow buffer when the column is a single chunk without nulls
(booleans and 32-bit temporals are converted). A Ragged's values are zero-copy from the Arrow
values (or data) buffer, cut to the rows of the batch; its offsets are rebased to start at 0
(one small int64 tensor per batch, also when the batch is a slice of a row group). Null
list / string rows are empty rows, False in the Ragged's ``valid``.

Nulls in a column that becomes a tensor raise a :class:`fastdata.SourceError` naming the
column; pass ``fill_null={"col": value}`` or filter them out (``pc.field("col").is_valid()``).
So do nulls *inside* a list of numbers (``[1, null, 3]``), which no tensor can hold
(:func:`~fastdata.sources._arrow_types.refuses_nulls_inside`); inside lists whose values
become Python objects (strings, lists of lists, decimals, structs) a null is a ``None``.
One type is refused when the stream is made (a ``SchemaError`` naming the column): a
fixed-shape tensor stored with permuted dimensions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from fastdata.errors import SourceError
from fastdata.sources._arrow_types import ragged_kind, tensor_shape
from fastdata.sources._columns import (
    CONVERSION_ERRORS,
    RaggedColumn,
    WholeConverter,
    arrays_of,
    as_tensor,
    numbers,
    numpy_values,
    whole_converter,
    whole_converters,
)
from fastdata.sources._handover import handed_over

Converter = Callable[[pa.Array], Any]


def converter(field: pa.Field) -> tuple[Converter, bool]:
    """The batch converter for a column, and whether it makes tensors (so nulls are errors;
    a Ragged keeps its nulls in ``valid``).

    Raises:
        SchemaError: a type no conversion fits (the one: a fixed-shape tensor whose dimensions
            are permuted in memory).
    """
    t = field.type
    if tensor_shape(t) == () and (pat.is_integer(t) or pat.is_floating(t)):  # in one call
        return (lambda a: as_tensor(a.to_numpy(zero_copy_only=True, writable=False))), True
    whole = whole_converter(field)
    if whole is None:
        return (lambda a: a.to_pylist()), False
    return (lambda a: whole(a).cut(0, len(a))), tensor_shape(t) is not None


class Conversions:
    """A schema's column converters, chosen once: per batch (:func:`converter`), and whole
    (:func:`~fastdata.sources._columns.whole_converters`; None: batch by batch).

    Raises:
        SchemaError: as :func:`converter`.
    """

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.batch = {field.name: converter(field)[0] for field in schema}
        self.whole: dict[str, WholeConverter] | None = whole_converters(schema)


Locate = Callable[[int], dict[str, Any]]
"""Where a row of the table being converted is (:class:`fastdata.SourceError` keywords)."""


def converted(name: str, convert: Converter, array: pa.Array, locate: Locate | None) -> Any:
    """``convert(array)``, a failure raised as a :class:`SourceError` naming the column and,
    with ``locate``, the first row that fails (its file, row group / member, row)."""
    try:
        return convert(array)
    except SourceError as exc:  # nulls inside a list of numbers: add where they are
        if locate is None or exc.path is not None:
            raise
        row = first_null_inside(pa.chunked_array([array])) or 0
        raise SourceError(exc.reason, column=name, **locate(row)) from exc
    except CONVERSION_ERRORS as exc:
        row = _first_failing(array)
        where = {} if locate is None else locate(row)
        raise SourceError(
            f"cannot convert a value of type {array.type} to Python ({type(exc).__name__}: "
            f"{exc}); leave the column out, or store such values as plain numbers or "
            "strings",
            column=name,
            **where,
        ) from exc


def _first_failing(array: pa.Array) -> int:
    """The first row whose value does not convert to Python (0 if each does alone)."""
    for row in range(len(array)):
        try:
            array[row].as_py()
        except CONVERSION_ERRORS:
            return row
    return 0


def row_values(field: pa.Field, array: pa.Array) -> list[Any] | np.ndarray:
    """Per-row values of a column, for streams that yield single rows.

    Numbers become numpy scalars (``default_collate`` stacks them keeping the dtype),
    fixed-shape columns tensors of the row's shape, lists of numbers 1-D tensors (views of
    one buffer; None for a null row), everything else Python objects (``str`` / ``bytes``
    for strings and binary).
    """
    shape = tensor_shape(field.type)
    if shape == ():
        return numpy_values(array)
    if shape is not None:
        return list(as_tensor(numbers(array, shape)))
    if ragged_kind(field.type) == "list":
        return list(RaggedColumn(array, "list", field.name).cut(0, len(array)))
    return array.to_pylist()


def first_null_inside(column: pa.ChunkedArray) -> int | None:
    """The first row of a list, fixed-size list or fixed-shape tensor column with a null
    among its values (at any depth), or None: no tensor can hold such a row."""
    if not any(_nulls_below(chunk) for chunk in column.chunks):
        return None  # the usual case, decided without allocating
    values: Any = column
    rows: Any = None  # row of each of ``values``
    while True:
        if isinstance(values.type, pa.FixedShapeTensorType):
            values = pa.chunked_array([c.storage for c in values.chunks], values.type.storage_type)
        t = values.type
        if not (pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t)):
            return None
        parents = pc.list_parent_indices(values)
        values = pc.list_flatten(values)
        rows = parents if rows is None else pc.take(rows, parents)
        if values.null_count:
            return int(rows[pc.index(pc.is_null(values), True).as_py()].as_py())


def _nulls_below(array: pa.Array) -> bool:
    """Whether the child values of ``array`` (all of them, also those of rows outside a
    slice or under a null row) hold a null, at any depth."""
    while True:
        if isinstance(array.type, pa.FixedShapeTensorType):
            array = array.storage
        t = array.type
        if not (pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t)):
            return False
        array = array.values
        if array.null_count:
            return True


def iter_rows(table: pa.Table, locate: Locate | None = None) -> Iterator[dict[str, Any]]:
    """The rows of ``table`` as dicts, converting each column once (a failure names the
    column, and with ``locate`` where its row is)."""
    names = table.column_names
    columns = [
        converted(field.name, functools.partial(row_values, field), array, locate)
        for field, array in zip(table.schema, arrays_of(table), strict=True)
    ]
    if not columns:  # no column but the rows' origin to come: an empty dict per row
        yield from ({} for _ in range(table.num_rows))
        return
    for values in zip(*columns, strict=True):
        yield dict(zip(names, values, strict=True))


def to_batch(
    table: pa.Table,
    converters: dict[str, Converter],
    *,
    reuse: bool = True,
    locate: Locate | None = None,
) -> dict[str, Any]:
    """A table as one batch: ``{column: tensor | Ragged | list}``.

    In a DataLoader worker, each Ragged is copied into one shared-memory segment, reused for a
    later batch once nothing holds this one (:func:`~fastdata.sources._handover.handed_over`;
    ``reuse=False`` where the main process shares by ``file_system``). A conversion that
    fails is a :class:`SourceError` naming the column (and, with ``locate``, where the row
    is).
    """
    batch = {
        name: converted(name, converters[name], array, locate)
        for name, array in zip(table.column_names, arrays_of(table), strict=True)
    }
    return handed_over(batch, reuse)
