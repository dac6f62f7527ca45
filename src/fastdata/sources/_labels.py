"""Labels as integer class indices: one rule for an image stream's labels, whatever holds them.

A label is an integer (Python's, numpy's, an Arrow integer column), a float with no fraction
(pandas writes an integer column with gaps as float64) or a string of an integer (a CSV
column, ``"07"``). Anything else (``0.7``, ``"cat"``, NaN) is refused with its location,
never truncated (``int(0.7) == 0``) or left to fail without one. :func:`file_label` applies the
rule to :meth:`~fastdata.ImageStream.from_files`' labels, :func:`int_labels` to a Parquet
label column, row by row in either mode (a stream batch or one row at a time).
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fastdata.errors import SourceError
from fastdata.sources.base import INDEX, Context

__all__ = ["as_label", "file_label", "int_labels"]

_INT64 = range(-(2**63), 2**63)
_NOT_AN_INDEX = (
    "label {!r} is not an integer class index; labels must be integers (or strings of them, "
    "or floats without a fraction): map class names to indices first (a datasets.ClassLabel "
    "column, or pyarrow.compute.index_in(column, value_set=names))"
)


def as_label(value: Any) -> int | None:
    """``value`` as an int64 class index, or None when the rule refuses it."""
    number: int | None
    try:
        if isinstance(value, numbers.Integral):
            number = operator.index(value)
        elif isinstance(value, str | bytes):
            number = _from_text(value)
        else:
            real = float(value)
            number = int(real) if real.is_integer() else None
    except (TypeError, ValueError, OverflowError):
        return None
    return number if number is not None and number in _INT64 else None


def _from_text(text: str | bytes) -> int | None:
    try:
        return int(text)
    except ValueError:
        real = float(text)
        return int(real) if real.is_integer() else None


def file_label(value: Any, path: str) -> int:
    """A file's label (:func:`as_label`); refused naming the file."""
    label = as_label(value)
    if label is None:
        raise SourceError(_NOT_AN_INDEX.format(value), path=path)
    return label


def int_labels(table: pa.Table, column: str, context: Context) -> pa.Table:
    """``table`` with its label ``column`` as int64 (:func:`as_label` of each value of a column
    of floats, strings, ...; an integer column as it is). A value the rule refuses, or a null
    the reader let through (a column that is not numeric), is refused naming its file, row
    group, row and column (``table`` carries :data:`INDEX`)."""
    values = table.column(column)
    if pa.types.is_integer(values.type) and not (
        pa.types.is_uint64(values.type) and (pc.max(values).as_py() or 0) >= 2**63
    ):
        return table  # (uint64 beyond int64 goes on, to be refused naming its row)
    labels = []
    for value, index in zip(values.to_pylist(), table.column(INDEX).to_pylist(), strict=True):
        label = as_label(value)
        if label is None:
            if value is None:
                reason = (
                    f"a null label; pass fill_null={{{column!r}: value}} or "
                    f"filter=pyarrow.compute.field({column!r}).is_valid()"
                )
            elif isinstance(value, float) and math.isnan(value):
                reason = (
                    "a NaN label (not a null: fill_null does not replace it); pass "
                    f"filter=~pyarrow.compute.is_nan(pyarrow.compute.field({column!r}))"
                )
            else:
                reason = _NOT_AN_INDEX.format(value)
            raise SourceError(
                f"{reason} (column type {values.type})", **context.locate(index), column=column
            )
        labels.append(label)
    position = table.schema.get_field_index(column)
    return table.set_column(position, column, pa.array(labels, pa.int64()))
