"""What each Arrow type becomes in torch: the type-level decisions of
:mod:`fastdata.sources._arrow` (which columns become tensors, Ragged or Python objects), and
the type a reader hands out for a stored type (:func:`delivered_type`)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.types as pat

from fastdata.ragged import RaggedKind

__all__ = [
    "becomes_objects",
    "delivered_type",
    "is_number",
    "ragged_kind",
    "rebuild",
    "refuses_nulls_inside",
    "relaxed",
    "take_rows",
    "tensor_shape",
]


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


def relaxed(t: pa.DataType) -> pa.DataType:
    """``t`` with every nested field nullable and strings, binaries and lists in their large
    form: two types equal in this form hold the same values."""
    if pat.is_string(t):
        return pa.large_string()
    if pat.is_binary(t):
        return pa.large_binary()
    if pat.is_list(t):
        t = pa.large_list(t.value_field)
    return rebuild(t, lambda field: pa.field(field.name, relaxed(field.type)))


def is_number(t: pa.DataType) -> bool:
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


def tensor_shape(t: pa.DataType) -> tuple[int, ...] | None:
    """The per-row tensor shape of ``t`` (``()`` for a number), or None if it is no tensor."""
    if isinstance(t, pa.FixedShapeTensorType):
        return tuple(t.shape) if is_number(t.value_type) else None
    dims: list[int] = []
    while pat.is_fixed_size_list(t):
        dims.append(t.list_size)
        t = t.value_type
    return tuple(dims) if is_number(t) else None


def ragged_kind(t: pa.DataType) -> RaggedKind | None:
    """The Ragged kind a column of type ``t`` becomes, or None if it is no Ragged."""
    if (pat.is_list(t) or pat.is_large_list(t)) and is_number(t.value_type):
        return "list"
    if pat.is_string(t) or pat.is_large_string(t):
        return "str"
    if pat.is_binary(t) or pat.is_large_binary(t) or pat.is_fixed_size_binary(t):
        return "bytes"
    return None


def becomes_objects(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` becomes Python objects (the one conversion that can
    fail on valid data: a timestamp outside Python's datetime range, say)."""
    return tensor_shape(t) is None and ragged_kind(t) is None


def refuses_nulls_inside(t: pa.DataType) -> bool:
    """Whether a null inside the lists of a column of type ``t`` is an error: its values
    become tensor elements (a fixed-size list or fixed-shape tensor of numbers, a list of
    numbers). Values that become Python objects hold a null as None."""
    return bool(tensor_shape(t)) or ragged_kind(t) == "list"


def take_rows(table: pa.Table, indices: object) -> pa.Table:
    """``table.take(indices)``, right for every column type.

    pyarrow 26's ``take`` on a sliced (non-zero offset) fixed-size list of fixed-size lists,
    or a struct holding one, returns zeros or other rows' memory, without an error: a row
    group cut at a rank or worker boundary and then shuffled lost its values. The sliced
    chunks of such columns are copied first (``concat_arrays`` gives an unsliced copy); other
    columns, and unsliced chunks, are taken as they are.
    """
    for i, field in enumerate(table.schema):
        if not _holds_nested_fixed_lists(field.type):
            continue
        column = table.column(i)
        if any(chunk.offset for chunk in column.chunks):
            chunks = [pa.concat_arrays([c]) if c.offset else c for c in column.chunks]
            table = table.set_column(i, field, pa.chunked_array(chunks, field.type))
    return table.take(indices)


def _holds_nested_fixed_lists(t: pa.DataType) -> bool:
    """Whether ``t`` holds, at any depth, a fixed-size list of fixed-size lists."""
    if pat.is_fixed_size_list(t) and pat.is_fixed_size_list(t.value_type):
        return True
    if isinstance(t, pa.BaseExtensionType):
        return _holds_nested_fixed_lists(t.storage_type)
    return any(_holds_nested_fixed_lists(t.field(i).type) for i in range(t.num_fields))
