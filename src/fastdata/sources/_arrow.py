"""Arrow columns to torch: zero-copy where Arrow allows, one conversion per column per batch.

The choices, per Arrow type, in a batch (``to_batch``) and in a row (``iter_rows``):

| Arrow type | batch of N rows | row |
|---|---|---|
| integer, floating, boolean, temporal | 1-D tensor (temporal: int64 ticks) | numpy scalar |
| fixed-size list of numbers | 2-D tensor ``(N, size)`` | 1-D tensor |
| (large) list of numbers | ``Ragged`` (values + offsets) | 1-D tensor; None if null |
| (large) string / binary | ``Ragged`` of UTF-8 / raw bytes | ``str`` / ``bytes`` / None |
| anything else (structs, maps, nested lists) | list of Python objects | Python object |

(``Ragged`` is :class:`fastdata.Ragged`.)

Numbers are zero-copy from the Arrow buffer when the column is a single chunk without nulls
(booleans and temporals are converted). A Ragged's values are zero-copy from the Arrow
values (or data) buffer, cut to the rows of the batch; its offsets are rebased to start at 0
(one small int64 tensor per batch, also when the batch is a slice of a row group). Null
list / string rows are empty rows, False in the Ragged's ``valid``.

Nulls in a column that becomes a tensor raise a :class:`fastdata.SourceError` naming the
column; pass ``fill_null={"col": value}`` or filter them out (``pc.field("col").is_valid()``).
So do nulls *inside* a list of numbers (``[1, null, 3]``), which no tensor can hold.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.types as pat
import torch
from torch.utils.data import get_worker_info

from fastdata.errors import SourceError
from fastdata.ragged import Ragged, RaggedKind
from fastdata.workers import shared_batch

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


def _ragged(array: pa.Array, kind: RaggedKind, column: str) -> Ragged:
    """A list, string or binary array (sliced or not) as a Ragged, values zero-copy."""
    large = pat.is_large_list(array.type) or pat.is_large_string(array.type)
    large = large or pat.is_large_binary(array.type)
    bounds = np.frombuffer(
        array.buffers()[1],
        np.int64 if large else np.int32,
        len(array) + 1,
        array.offset * (8 if large else 4),
    )
    first, last = int(bounds[0]), int(bounds[-1])
    if kind == "list":
        child = array.values.slice(first, last - first)
        if child.null_count:
            raise SourceError(
                f"{child.null_count} null(s) inside the lists of column {column!r}: a tensor "
                f"cannot hold them; drop or fill them when writing the data",
                column=column,
            )
        values = _numpy(child)
    else:
        data = array.buffers()[2]
        values = (
            np.frombuffer(data, np.uint8, last - first, first)
            if last > first
            else np.empty(0, np.uint8)
        )
    offsets = torch.from_numpy(bounds.astype(np.int64))
    offsets -= first
    valid = None
    if array.null_count:
        keep = array.is_valid().to_numpy(zero_copy_only=False)
        lengths = np.diff(bounds)
        if lengths[~keep].any():  # Arrow allows null rows over values: drop those values
            values = values[np.repeat(keep, lengths)]
        offsets = torch.zeros(len(array) + 1, dtype=torch.int64)
        torch.cumsum(torch.from_numpy(np.where(keep, lengths, 0)), 0, out=offsets[1:])
        valid = torch.from_numpy(keep)
    return Ragged._unchecked(_tensor(values), offsets, valid, kind)


def _fixed_list_to_tensor(array: pa.Array) -> torch.Tensor:
    size = array.type.list_size
    return _tensor(_numpy(array.flatten())).reshape(len(array), size)


def _is_numeric(t: pa.DataType) -> bool:
    return pat.is_integer(t) or pat.is_floating(t) or pat.is_boolean(t) or pat.is_temporal(t)


def _ragged_kind(t: pa.DataType) -> RaggedKind | None:
    """The Ragged kind a column of type ``t`` becomes, or None if it is no Ragged."""
    if (pat.is_list(t) or pat.is_large_list(t)) and _is_numeric(t.value_type):
        return "list"
    if pat.is_string(t) or pat.is_large_string(t):
        return "str"
    if pat.is_binary(t) or pat.is_large_binary(t):
        return "bytes"
    return None


def converter(field: pa.Field) -> tuple[Converter, bool]:
    """The batch converter for a column, and whether it makes tensors (so nulls are errors;
    a Ragged keeps its nulls in ``valid``)."""
    t = field.type
    if _is_numeric(t):
        return _to_tensor, True
    if pat.is_fixed_size_list(t) and _is_numeric(t.value_type):
        return _fixed_list_to_tensor, True
    kind = _ragged_kind(t)
    if kind is not None:
        return (lambda a: _ragged(a, kind, field.name)), False
    return (lambda a: a.to_pylist()), False


def row_values(field: pa.Field, array: pa.Array) -> list[Any] | np.ndarray:
    """Per-row values of a column, for streams that yield single rows.

    Numbers become numpy scalars (``default_collate`` stacks them keeping the dtype), lists of
    numbers 1-D tensors (views of one buffer; None for a null row), everything else Python
    objects (``str`` / ``bytes`` for strings and binary).
    """
    t = field.type
    if _is_numeric(t):
        return _numpy(array)
    if pat.is_fixed_size_list(t) and _is_numeric(t.value_type):
        return list(_fixed_list_to_tensor(array))
    if _ragged_kind(t) == "list":
        return list(_ragged(array, "list", field.name))
    return array.to_pylist()


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


def to_batch(
    table: pa.Table, converters: dict[str, Converter], *, reuse: bool = True
) -> dict[str, Any]:
    """A table as one batch: ``{column: tensor | Ragged | list}``.

    In a DataLoader worker, each Ragged is copied from the Arrow buffers straight into one
    shared-memory segment (values, offsets and validity back to back), which is then handed
    to the main process without another copy, and reused for a later batch once nothing
    holds this one (see :mod:`fastdata.workers`; ``reuse=False`` where the main
    process shares by ``file_system``). A fresh segment per batch would cost about as much
    CPU as decoding the column: every page of it is zeroed and faulted in.
    """
    batch = {name: converters[name](_array(table.column(name))) for name in table.column_names}
    if get_worker_info() is None:
        return batch
    return {k: _shared(v, reuse) if isinstance(v, Ragged) else v for k, v in batch.items()}


def _shared(ragged: Ragged, reuse: bool) -> Ragged:
    """``ragged`` copied into one shared-memory segment.

    Segments come in powers of two (at least 64 KiB), so batches of different sizes still
    find a free segment of their size class; at most half of one is unused.
    """
    parts = [t for t in (ragged.values, ragged.offsets, ragged.valid) if t is not None]
    starts, end = [], 0
    for t in parts:
        end = -(-end // 8) * 8  # aligned for int64 views
        starts.append(end)
        end += t.numel() * t.element_size()
    segment, writable = shared_batch((1 << max(16, (end - 1).bit_length()),), reuse=reuse)
    moved = []
    for t, start in zip(parts, starts, strict=True):
        stop = start + t.numel() * t.element_size()
        # written through the worker's own mapping, which stays faulted in across reuses
        writable[start:stop].view(t.numpy().dtype).reshape(t.shape)[...] = t.numpy()
        moved.append(segment[start:stop].view(t.dtype).view(t.shape))
    valid = moved[2] if len(moved) == 3 else None
    return Ragged._unchecked(moved[0], moved[1], valid, ragged.kind)
