"""Columns that become tensors or Ragged, converted once and cut into batches.

The conversions of :mod:`fastdata.sources._arrow` for numbers, fixed-shape rows and lists /
strings / binary, applied to a whole table (a record batch, a row group), so that a batch of
it costs a few numpy slices instead of an Arrow slice and a conversion of each column.

A cut holds the same values, dtypes and shapes as the batch converted alone, each tensor with
a storage of its rows only (``torch.from_numpy`` of a slice): it crosses to the main process,
pins and saves as that batch would. Columns that become Python objects are not converted
whole (a whole table's objects would be held at once), nor are columns a whole conversion
refuses (nulls a tensor cannot hold, values that do not convert): their batches are converted
one by one, so an error is raised with the batch that holds it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.types as pat
import torch

from fastdata.errors import SchemaError, SourceError
from fastdata.ragged import Ragged, RaggedKind
from fastdata.sources._arrow_types import ragged_kind, tensor_shape
from fastdata.sources._handover import handed_over

__all__ = [
    "CONVERSION_ERRORS",
    "Column",
    "NumberColumn",
    "RaggedColumn",
    "WholeConverter",
    "arrays_of",
    "as_tensor",
    "batch_cutter",
    "converted_columns",
    "numbers",
    "numpy_values",
    "whole_converter",
    "whole_converters",
]

CONVERSION_ERRORS = (ArithmeticError, ValueError, TypeError, pa.ArrowException)


def numpy_values(array: pa.Array) -> np.ndarray:
    """A number array's values: zero-copy but for booleans, temporals as int64 ticks."""
    t = array.type
    if not (pat.is_integer(t) or pat.is_floating(t) or pat.is_boolean(t)):  # temporal
        array = array.view(pa.int32() if t.bit_width == 32 else pa.int64()).cast(pa.int64())
    zero_copy = not pat.is_boolean(array.type)
    return array.to_numpy(zero_copy_only=zero_copy, writable=False)


_readonly_warning_seen = False


def as_tensor(values: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` without copying, also for Arrow's read-only buffers.

    The tensor shares the Arrow buffer and nothing here writes to it. torch warns about
    read-only arrays once per process; that one warning is silenced here, and later calls skip
    the (costly) warning filter altogether.
    """
    global _readonly_warning_seen
    if _readonly_warning_seen or values.flags.writeable:
        return torch.from_numpy(values)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        tensor = torch.from_numpy(values)
    _readonly_warning_seen = True
    return tensor


def numbers(array: pa.Array, shape: tuple[int, ...] = ()) -> np.ndarray:
    """A number column (``shape == ()``) or a fixed-shape one as an array ``(N, *shape)``."""
    if isinstance(array.type, pa.FixedShapeTensorType):
        return numbers(array.storage, (math.prod(shape),)).reshape(len(array), *shape)
    values = array
    for _ in shape:  # fixed-size lists: their values, cut to the rows of ``array``
        values = values.flatten()
    return numpy_values(values).reshape(len(array), *shape)


def _bounds(array: pa.Array) -> tuple[np.ndarray, pa.Buffer]:
    """Where each row's values start and end in ``array``'s values (or data buffer)."""
    t = array.type
    if pat.is_fixed_size_binary(t):
        rows = np.arange(array.offset, array.offset + len(array) + 1, dtype=np.int64)
        return rows * t.byte_width, array.buffers()[1]
    large = pat.is_large_list(t) or pat.is_large_string(t) or pat.is_large_binary(t)
    bounds = np.frombuffer(
        array.buffers()[1],
        np.int64 if large else np.int32,
        len(array) + 1,
        array.offset * (8 if large else 4),
    )
    return bounds, array.buffers()[-1]


class NumberColumn:
    """A tensor column converted once: a batch is a tensor of some of its rows, zero-copy
    (its storage holds those rows only, as if converted alone)."""

    __slots__ = ("values",)

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def cut(self, start: int, stop: int) -> torch.Tensor:
        return as_tensor(self.values[start:stop])


class RaggedColumn:
    """A list, string or binary column (sliced or not) converted once: values zero-copy
    (null rows over values dropped), row bounds from 0, validity where some row is null."""

    __slots__ = ("bounds", "kind", "valid", "values")

    def __init__(self, array: pa.Array, kind: RaggedKind, column: str) -> None:
        bounds, data = _bounds(array)
        first, last = int(bounds[0]), int(bounds[-1])
        if kind == "list":
            child = array.values.slice(first, last - first)
            if child.null_count:
                raise SourceError(
                    f"{child.null_count} null(s) inside the lists of column {column!r}: a "
                    f"tensor cannot hold them; drop or fill them when writing the data",
                    column=column,
                )
            values = numpy_values(child)
        else:
            values = (
                np.frombuffer(data, np.uint8, last - first, first)
                if last > first
                else np.empty(0, np.uint8)
            )
        self.bounds = bounds.astype(np.int64) - first
        self.valid: np.ndarray | None = None
        if array.null_count:
            keep = array.is_valid().to_numpy(zero_copy_only=False)
            lengths = np.diff(self.bounds)
            if lengths[~keep].any():  # Arrow allows null rows over values: drop those values
                values = values[np.repeat(keep, lengths)]
            self.bounds = np.zeros(len(array) + 1, np.int64)
            np.cumsum(np.where(keep, lengths, 0), out=self.bounds[1:])
            self.valid = keep
        self.values, self.kind = values, kind

    def cut(self, start: int, stop: int) -> Ragged:
        """Rows ``[start, stop)``: values zero-copy, offsets rebased to 0 (a small int64
        tensor of its own), ``valid`` None where none of these rows is null."""
        bounds = self.bounds[start : stop + 1]
        first = bounds[0]
        valid = None
        if self.valid is not None and not (keep := self.valid[start:stop]).all():
            valid = torch.from_numpy(keep)
        values = as_tensor(self.values[first : bounds[-1]])
        return Ragged._unchecked(values, torch.from_numpy(bounds - first), valid, self.kind)


Column = NumberColumn | RaggedColumn
"""A column converted once, whose batches are cut from it (:func:`converted_columns`)."""


WholeConverter = Callable[[pa.Array], Column]


def whole_converter(field: pa.Field) -> WholeConverter | None:
    """How a column is converted once to cut batches from; None for one that becomes Python
    objects (a batch's objects are made when it is cut, not a whole table's at once)."""
    t = field.type
    permuted = isinstance(t, pa.FixedShapeTensorType) and t.permutation is not None
    if permuted and t.permutation != sorted(t.permutation):
        raise SchemaError(
            f"column {field.name!r} is a fixed-shape tensor stored with permuted dimensions "
            f"(permutation {t.permutation}); write it with the default permutation, or "
            "leave it out of `columns`",
            column=field.name,
        )
    shape = tensor_shape(t)
    if shape is not None:
        return lambda a: NumberColumn(numbers(a, shape))
    kind = ragged_kind(t)
    if kind is not None:
        return lambda a: RaggedColumn(a, kind, field.name)
    return None


def whole_converters(schema: pa.Schema) -> dict[str, WholeConverter] | None:
    """The whole-column converters of a schema's columns (:func:`converted_columns`), or None
    where some column becomes Python objects."""
    converters = {field.name: whole_converter(field) for field in schema}
    if any(c is None for c in converters.values()):
        return None
    return {name: c for name, c in converters.items() if c is not None}


def converted_columns(
    table: pa.Table, converters: dict[str, WholeConverter]
) -> dict[str, Column] | None:
    """Every column of ``table`` converted once, to cut batches from (the same values a
    batch converted alone has); None where some column does not convert whole: nulls a tensor
    cannot hold, a failed conversion. Each batch is then converted alone, and a failure raised
    with the batch that holds it."""
    columns: dict[str, Column] = {}
    for (name, convert), array in zip(converters.items(), arrays_of(table), strict=True):
        try:
            column = columns[name] = convert(array)
        except (SourceError, *CONVERSION_ERRORS):
            return None
        if isinstance(column, NumberColumn) and (array.null_count or column.values.dtype == object):
            return None  # null rows, or nulls inside fixed-size lists of booleans
    return columns


def batch_cutter(
    table: pa.Table, converters: dict[str, WholeConverter] | None, reuse: bool
) -> Callable[[int, int], dict[str, Any]] | None:
    """The batch of rows ``[start, stop)`` of ``table`` as
    :func:`~fastdata.sources._arrow.to_batch` makes it, cut from
    its columns converted once (:func:`converted_columns`); None where they do not all
    convert whole, or ``converters`` is None (a column becomes Python objects)."""
    columns = None if converters is None else converted_columns(table, converters)
    if columns is None:
        return None

    def rows(start: int, stop: int) -> dict[str, Any]:
        batch = {name: column.cut(start, stop) for name, column in columns.items()}
        return handed_over(batch, reuse)

    return rows


def arrays_of(table: pa.Table) -> list[pa.Array]:
    """One array per column, copying only a column that really has several chunks; those of
    the table's one record batch where there is one (a slice of a row group: cheaper)."""
    batches = table.to_batches()
    if len(batches) == 1:
        return batches[0].columns
    return [c.chunk(0) if c.num_chunks == 1 else c.combine_chunks() for c in table.columns]
