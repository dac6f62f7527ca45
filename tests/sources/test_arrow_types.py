"""What each Arrow type becomes in torch (fastdata.sources._arrow_types): the delivered type of a
stored one, numbers, tensor shapes, Ragged kinds, objects, and where nulls are refused."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata.sources._arrow_types import (
    becomes_objects,
    delivered_type,
    is_number,
    ragged_kind,
    rebuild,
    refuses_nulls_inside,
    tensor_shape,
)

NUMBERS = [
    pa.int8(),
    pa.uint64(),
    pa.float16(),
    pa.float64(),
    pa.bool_(),
    pa.date32(),
    pa.time64("us"),
    pa.timestamp("ns", tz="UTC"),
    pa.duration("ms"),
]
NOT_NUMBERS = [pa.string(), pa.binary(), pa.decimal128(5, 2), pa.null(), pa.list_(pa.int8())]


@pytest.mark.parametrize(
    ("stored", "delivered"),
    [
        (pa.dictionary(pa.int32(), pa.string()), pa.string()),
        (pa.string_view(), pa.large_string()),
        (pa.list_(pa.dictionary(pa.int8(), pa.int64())), pa.list_(pa.int64())),
        (pa.struct([("a", pa.binary_view())]), pa.struct([("a", pa.large_binary())])),
        (pa.int16(), pa.int16()),
    ],
)
def test_readers_deliver_decoded_dictionaries_and_large_types(stored, delivered) -> None:
    assert delivered_type(stored) == delivered


@pytest.mark.parametrize(
    ("arrow_type", "objects", "refuses_inner_nulls"),
    [
        (pa.int64(), False, False),
        (pa.list_(pa.float32()), False, True),
        (pa.list_(pa.int8(), 4), False, True),
        (pa.string(), False, False),
        (pa.list_(pa.string()), True, False),
        (pa.decimal128(5, 2), True, False),
    ],
)
def test_what_a_type_becomes(arrow_type, objects, refuses_inner_nulls) -> None:
    assert becomes_objects(arrow_type) is objects
    assert refuses_nulls_inside(arrow_type) is refuses_inner_nulls


def test_numbers_are_the_types_of_one_tensor_element() -> None:
    assert all(is_number(t) for t in NUMBERS)
    assert not any(is_number(t) for t in NOT_NUMBERS)


@settings(max_examples=60, deadline=None)
@given(
    number=st.sampled_from(NUMBERS + NOT_NUMBERS),
    dims=st.lists(st.integers(1, 5), max_size=3),
)
def test_a_tensors_shape_is_its_fixed_size_lists_sizes_around_a_number(
    number: pa.DataType, dims: list[int]
) -> None:
    t = number
    for size in reversed(dims):
        t = pa.list_(t, size)
    assert tensor_shape(t) == (tuple(dims) if is_number(number) else None)
    if dims and is_number(number):
        assert tensor_shape(pa.fixed_shape_tensor(number, dims)) == tuple(dims)
        assert refuses_nulls_inside(t) and not becomes_objects(t)


@pytest.mark.parametrize(
    ("arrow_type", "kind"),
    [
        (pa.list_(pa.int32()), "list"),
        (pa.large_list(pa.float32()), "list"),
        (pa.string(), "str"),
        (pa.large_string(), "str"),
        (pa.binary(), "bytes"),
        (pa.binary(4), "bytes"),
        (pa.large_binary(), "bytes"),
        (pa.list_(pa.string()), None),
        (pa.list_(pa.int32(), 2), None),
        (pa.int64(), None),
    ],
)
def test_the_ragged_kind_of_a_column(arrow_type: pa.DataType, kind: str | None) -> None:
    assert ragged_kind(arrow_type) == kind


NESTED = [
    pa.list_(pa.field("v", pa.int32())),
    pa.large_list(pa.string()),
    pa.list_(pa.float32(), 3),
    pa.map_(pa.string(), pa.int64(), keys_sorted=True),
    pa.struct([("a", pa.int8()), ("b", pa.list_(pa.string()))]),
]


@pytest.mark.parametrize("t", NESTED)
def test_rebuild_applies_the_function_to_each_child_field_and_keeps_the_rest(
    t: pa.DataType,
) -> None:
    def renamed(field: pa.Field) -> pa.Field:
        return field.with_name(f"x_{field.name}").with_nullable(False)

    assert rebuild(t, lambda field: field) == t
    out = rebuild(t, renamed)
    assert type(out) is type(t)
    children = (
        [(out.key_field, t.key_field), (out.item_field, t.item_field)]
        if pa.types.is_map(t)
        else [(out.field(i), t.field(i)) for i in range(t.num_fields)]
    )
    for new, old in children:
        assert (new.name, new.type, new.nullable) == (f"x_{old.name}", old.type, False)
    if pa.types.is_map(t):
        assert out.keys_sorted == t.keys_sorted
    assert rebuild(pa.int32(), renamed) == pa.int32()


def test_extension_and_view_types_are_delivered_as_their_storage() -> None:
    class Point(pa.ExtensionType):
        def __init__(self) -> None:
            super().__init__(pa.struct([("x", pa.dictionary(pa.int8(), pa.string()))]), "point")

        def __arrow_ext_serialize__(self) -> bytes:
            return b""

        @classmethod
        def __arrow_ext_deserialize__(cls, storage_type, serialized):
            return cls()

    assert delivered_type(Point()) == pa.struct([("x", pa.string())])
    tensor = pa.fixed_shape_tensor(pa.float32(), [2, 2])
    assert delivered_type(tensor) == tensor  # a tensor stays one
    assert delivered_type(pa.list_view(pa.string_view())) == pa.large_list(pa.large_string())
    assert delivered_type(pa.map_(pa.dictionary(pa.int8(), pa.string()), pa.int8())) == pa.map_(
        pa.string(), pa.int8()
    )
