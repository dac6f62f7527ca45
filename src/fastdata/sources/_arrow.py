"""Arrow columns to torch: zero-copy where Arrow allows, one conversion per column per batch.

The choices, per Arrow type, in a batch (``to_batch``) and in a row (``iter_rows``):

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
:func:`delivered_type`: dictionaries are decoded to their values, view types become their
large types, extension types other than ``arrow.fixed_shape_tensor`` their storage type (so a
``uuid`` is 16 bytes of fixed-size binary, ``json`` a string).

Numbers are zero-copy from the Arrow buffer when the column is a single chunk without nulls
(booleans and 32-bit temporals are converted). A Ragged's values are zero-copy from the Arrow
values (or data) buffer, cut to the rows of the batch; its offsets are rebased to start at 0
(one small int64 tensor per batch, also when the batch is a slice of a row group). Null
list / string rows are empty rows, False in the Ragged's ``valid``.

Nulls in a column that becomes a tensor raise a :class:`fastdata.SourceError` naming the
column; pass ``fill_null={"col": value}`` or filter them out (``pc.field("col").is_valid()``).
So do nulls *inside* a list of numbers (``[1, null, 3]``), which no tensor can hold
(:func:`refuses_nulls_inside`); inside lists whose values become Python objects (strings,
lists of lists, decimals, structs) a null is a ``None``.
One type is refused when the stream is made (a ``SchemaError`` naming the column): a
fixed-shape tensor stored with permuted dimensions.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat
import torch

from fastdata._torch_compat import in_worker_process
from fastdata.errors import SchemaError, SourceError
from fastdata.ragged import Ragged, RaggedKind
from fastdata.workers import shared_batch

Converter = Callable[[pa.Array], Any]


def delivered_type(t: pa.DataType) -> pa.DataType:
    """The type a reader hands out for a stored type ``t`` (see the module docstring):
    dictionaries decoded, view types as large types, extension types (but fixed-shape
    tensors) as their storage, at every level of nesting."""
    if pat.is_dictionary(t):
        return delivered_type(t.value_type)
    if pat.is_string_view(t):
        return pa.large_string()
    if pat.is_binary_view(t):
        return pa.large_binary()
    if isinstance(t, pa.FixedShapeTensorType):
        return t
    if isinstance(t, pa.BaseExtensionType):
        return delivered_type(t.storage_type)
    if pat.is_list_view(t) or pat.is_large_list_view(t):
        return pa.large_list(_delivered_field(t.value_field))
    return rebuild(t, _delivered_field)


def _delivered_field(field: pa.Field) -> pa.Field:
    return field.with_type(delivered_type(field.type))


def rebuild(t: pa.DataType, child: Callable[[pa.Field], pa.Field]) -> pa.DataType:
    """``t`` with ``child`` applied to each of its child fields (``t`` itself if none)."""
    if pat.is_list(t):
        return pa.list_(child(t.value_field))
    if pat.is_large_list(t):
        return pa.large_list(child(t.value_field))
    if pat.is_fixed_size_list(t):
        return pa.list_(child(t.value_field), t.list_size)
    if pat.is_map(t):
        key = child(t.key_field).with_nullable(False)  # map keys are never null
        return pa.map_(key, child(t.item_field), t.keys_sorted)
    if pat.is_struct(t):
        return pa.struct([child(t.field(i)) for i in range(t.num_fields)])
    return t


def _is_number(t: pa.DataType) -> bool:
    """Whether values of ``t`` are one number each (a tensor element)."""
    return (
        pat.is_integer(t)
        or pat.is_floating(t)
        or pat.is_boolean(t)
        or pat.is_date(t)
        or pat.is_time(t)
        or pat.is_timestamp(t)
        or pat.is_duration(t)
    )


def _shape(t: pa.DataType) -> tuple[int, ...] | None:
    """The per-row tensor shape of ``t`` (``()`` for a number), or None if it is no tensor."""
    if isinstance(t, pa.FixedShapeTensorType):
        return tuple(t.shape) if _is_number(t.value_type) else None
    dims: list[int] = []
    while pat.is_fixed_size_list(t):
        dims.append(t.list_size)
        t = t.value_type
    return tuple(dims) if _is_number(t) else None


def _numpy(array: pa.Array) -> np.ndarray:
    t = array.type
    if not (pat.is_integer(t) or pat.is_floating(t) or pat.is_boolean(t)):  # temporal
        array = array.view(pa.int32() if t.bit_width == 32 else pa.int64()).cast(pa.int64())
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


def _to_tensor(array: pa.Array, shape: tuple[int, ...] = ()) -> torch.Tensor:
    """A number column (``shape == ()``) or a fixed-shape one as a tensor ``(N, *shape)``."""
    if isinstance(array.type, pa.FixedShapeTensorType):
        return _to_tensor(array.storage, (math.prod(shape),)).reshape(len(array), *shape)
    values = array
    for _ in shape:  # fixed-size lists: their values, cut to the rows of ``array``
        values = values.flatten()
    return _tensor(_numpy(values)).reshape(len(array), *shape)


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


def _ragged(array: pa.Array, kind: RaggedKind, column: str) -> Ragged:
    """A list, string or binary array (sliced or not) as a Ragged, values zero-copy."""
    bounds, data = _bounds(array)
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


def _ragged_kind(t: pa.DataType) -> RaggedKind | None:
    """The Ragged kind a column of type ``t`` becomes, or None if it is no Ragged."""
    if (pat.is_list(t) or pat.is_large_list(t)) and _is_number(t.value_type):
        return "list"
    if pat.is_string(t) or pat.is_large_string(t):
        return "str"
    if pat.is_binary(t) or pat.is_large_binary(t) or pat.is_fixed_size_binary(t):
        return "bytes"
    return None


def converter(field: pa.Field) -> tuple[Converter, bool]:
    """The batch converter for a column, and whether it makes tensors (so nulls are errors;
    a Ragged keeps its nulls in ``valid``).

    Raises:
        SchemaError: a type no conversion fits (the one: a fixed-shape tensor whose dimensions
            are permuted in memory).
    """
    t = field.type
    permuted = isinstance(t, pa.FixedShapeTensorType) and t.permutation is not None
    if permuted and t.permutation != sorted(t.permutation):
        raise SchemaError(
            f"column {field.name!r} is a fixed-shape tensor stored with permuted dimensions "
            f"(permutation {t.permutation}); write it with the default permutation, or "
            "leave it out of `columns`",
            column=field.name,
        )
    shape = _shape(t)
    if shape == () and (pat.is_integer(t) or pat.is_floating(t)):  # _to_tensor, type decided
        return (lambda a: _tensor(a.to_numpy(zero_copy_only=True, writable=False))), True
    if shape is not None:
        return (lambda a: _to_tensor(a, shape)), True
    kind = _ragged_kind(field.type)
    if kind is not None:
        return (lambda a: _ragged(a, kind, field.name)), False
    return (lambda a: a.to_pylist()), False


def becomes_objects(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` becomes Python objects (the one conversion that can
    fail on valid data: a timestamp outside Python's datetime range, say)."""
    return _shape(t) is None and _ragged_kind(t) is None


Locate = Callable[[int], dict[str, Any]]
"""Where a row of the table being converted is (:class:`fastdata.SourceError` keywords)."""

_CONVERSION_ERRORS = (ArithmeticError, ValueError, TypeError, pa.ArrowException)


def _converted(name: str, convert: Converter, array: pa.Array, locate: Locate | None) -> Any:
    """``convert(array)``, a failure raised as a :class:`SourceError` naming the column and,
    with ``locate``, the first row that fails (its file, row group / member, row)."""
    try:
        return convert(array)
    except SourceError as exc:  # nulls inside a list of numbers: add where they are
        if locate is None or exc.path is not None:
            raise
        row = first_null_inside(pa.chunked_array([array])) or 0
        raise SourceError(exc.reason, column=name, **locate(row)) from exc
    except _CONVERSION_ERRORS as exc:
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
        except _CONVERSION_ERRORS:
            return row
    return 0


def row_values(field: pa.Field, array: pa.Array) -> list[Any] | np.ndarray:
    """Per-row values of a column, for streams that yield single rows.

    Numbers become numpy scalars (``default_collate`` stacks them keeping the dtype),
    fixed-shape columns tensors of the row's shape, lists of numbers 1-D tensors (views of
    one buffer; None for a null row), everything else Python objects (``str`` / ``bytes``
    for strings and binary).
    """
    shape = _shape(field.type)
    if shape == ():
        return _numpy(array)
    if shape is not None:
        return list(_to_tensor(array, shape))
    if _ragged_kind(field.type) == "list":
        return list(_ragged(array, "list", field.name))
    return array.to_pylist()


def refuses_nulls_inside(t: pa.DataType) -> bool:
    """Whether a null inside the lists of a column of type ``t`` is an error: its values
    become tensor elements (a fixed-size list or fixed-shape tensor of numbers, a list of
    numbers). Values that become Python objects hold a null as None."""
    return bool(_shape(t)) or _ragged_kind(t) == "list"


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


def _arrays(table: pa.Table) -> list[pa.Array]:
    """One array per column, copying only a column that really has several chunks; those of
    the table's one record batch where there is one (a slice of a row group: cheaper)."""
    batches = table.to_batches()
    if len(batches) == 1:
        return batches[0].columns
    return [c.chunk(0) if c.num_chunks == 1 else c.combine_chunks() for c in table.columns]


def iter_rows(table: pa.Table, locate: Locate | None = None) -> Iterator[dict[str, Any]]:
    """The rows of ``table`` as dicts, converting each column once (a failure names the
    column, and with ``locate`` where its row is)."""
    names = table.column_names
    columns = [
        _converted(field.name, functools.partial(row_values, field), array, locate)
        for field, array in zip(table.schema, _arrays(table), strict=True)
    ]
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

    In a DataLoader worker, each Ragged is copied from the Arrow buffers straight into one
    shared-memory segment (values, offsets and validity back to back), which is then handed
    to the main process without another copy, and reused for a later batch once nothing
    holds this one (see :mod:`fastdata.workers`; ``reuse=False`` where the main
    process shares by ``file_system``). A fresh segment per batch would cost about as much
    CPU as decoding the column: every page of it is zeroed and faulted in. A conversion that
    fails is a :class:`SourceError` naming the column (and, with ``locate``, where the row
    is).
    """
    batch = {
        name: _converted(name, converters[name], array, locate)
        for name, array in zip(table.column_names, _arrays(table), strict=True)
    }
    if not in_worker_process():  # the main process or a thread worker: no hand-over copy
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
