"""Arrow columns to torch: zero-copy where Arrow allows, one conversion per column per batch.

The choices, per Arrow type:

- integer / floating / boolean / temporal: a torch tensor (temporal as int64 ticks);
  zero-copy from the Arrow buffer when the column is a single chunk without nulls;
- fixed-size list of numbers: a 2-D tensor ``(rows, size)``;
- variable-length list of numbers: a list of 1-D tensors (views of one values tensor), the
  form :func:`fastdata.pad_collate` and :func:`fastdata.nested_collate` take;
- string / binary: a list of ``str`` / ``bytes`` (None for nulls);
- anything else (structs, maps, nested lists): Python objects via ``to_pylist``.

Nulls in a column that becomes a tensor raise a :class:`fastdata.SourceError` naming the
column; pass ``fill_null={"col": value}`` or filter them out (``pc.field("col").is_valid()``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.types as pat
import torch

Converter = Callable[[pa.Array], Any]


def _numpy(array: pa.Array) -> np.ndarray:
    if pat.is_temporal(array.type):
        array = array.cast(pa.int64())
    zero_copy = not pat.is_boolean(array.type)
    return array.to_numpy(zero_copy_only=zero_copy, writable=False)


_readonly_warning_seen = False


def _tensor(values: np.ndarray) -> torch.Tensor:
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


def _to_tensor(array: pa.Array) -> torch.Tensor:
    return _tensor(_numpy(array))


def _list_to_tensors(array: pa.Array) -> list[torch.Tensor]:
    offsets = array.offsets.to_numpy()
    values = _tensor(_numpy(array.flatten()))
    return list(values.split(np.diff(offsets).tolist()))


def _fixed_list_to_tensor(array: pa.Array) -> torch.Tensor:
    size = array.type.list_size
    return _tensor(_numpy(array.flatten())).reshape(len(array), size)


def _is_numeric(t: pa.DataType) -> bool:
    return pat.is_integer(t) or pat.is_floating(t) or pat.is_boolean(t) or pat.is_temporal(t)


def converter(field: pa.Field) -> tuple[Converter, bool]:
    """The batch converter for a column, and whether it makes tensors (so nulls are errors)."""
    t = field.type
    if _is_numeric(t):
        return _to_tensor, True
    if pat.is_fixed_size_list(t) and _is_numeric(t.value_type):
        return _fixed_list_to_tensor, True
    if (pat.is_list(t) or pat.is_large_list(t)) and _is_numeric(t.value_type):
        return _list_to_tensors, True
    return (lambda a: a.to_pylist()), False


def row_values(field: pa.Field, array: pa.Array) -> list[Any] | np.ndarray:
    """Per-row values of a column, for streams that yield single rows.

    Numbers become numpy scalars (``default_collate`` stacks them keeping the dtype), lists of
    numbers 1-D tensors, everything else Python objects.
    """
    t = field.type
    if _is_numeric(t):
        return _numpy(array)
    if pat.is_fixed_size_list(t) and _is_numeric(t.value_type):
        return list(_fixed_list_to_tensor(array))
    conv, _ = converter(field)
    return conv(array)


def _array(column: pa.ChunkedArray) -> pa.Array:
    """One array for a column, copying only when it really has several chunks."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def iter_rows(table: pa.Table) -> Iterator[dict[str, Any]]:
    """The rows of ``table`` as dicts, converting each column once."""
    names = table.column_names
    columns = [
        row_values(table.schema.field(i), _array(table.column(i))) for i in range(table.num_columns)
    ]
    for values in zip(*columns, strict=True):
        yield dict(zip(names, values, strict=True))


def to_batch(table: pa.Table, converters: dict[str, Converter]) -> dict[str, Any]:
    """A table as one batch: ``{column: tensor | list}``."""
    return {name: converters[name](_array(table.column(name))) for name in table.column_names}
