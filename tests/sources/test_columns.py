"""Columns converted once and cut into batches (fastdata.sources._columns): every cut holds what
Arrow holds for those rows, with a storage of its own rows only; what cannot convert whole is
left to the batches."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata.errors import SchemaError, SourceError
from fastdata.sources._columns import (
    NumberColumn,
    RaggedColumn,
    arrays_of,
    as_tensor,
    batch_cutter,
    converted_columns,
    numbers,
    numpy_values,
    whole_converter,
    whole_converters,
)

RAGGED_TYPES = {
    "list": (pa.list_(pa.int16()), st.lists(st.integers(-100, 100), max_size=4)),
    "large list": (pa.large_list(pa.float32()), st.lists(st.integers(-9, 9), max_size=4)),
    "str": (pa.string(), st.text(max_size=4)),
    "large str": (pa.large_string(), st.text(max_size=4)),
    "bytes": (pa.binary(), st.binary(max_size=4)),
    "fixed bytes": (pa.binary(3), st.binary(min_size=3, max_size=3)),
}


@st.composite
def ragged_arrays(draw: Any) -> pa.Array:
    """A list, string or binary array with null rows, maybe a slice of a longer one."""
    arrow_type, values = RAGGED_TYPES[draw(st.sampled_from(sorted(RAGGED_TYPES)))]
    rows = draw(st.lists(st.one_of(st.none(), values), min_size=1, max_size=12))
    array = pa.array(rows, arrow_type)
    start = draw(st.integers(0, len(array)))
    return array.slice(start, draw(st.integers(0, len(array) - start)))


@settings(max_examples=150, deadline=None)
@given(array=ragged_arrays(), data=st.data())
def test_a_ragged_cut_holds_arrows_rows(array: pa.Array, data: Any) -> None:
    column = whole_converter(pa.field("c", array.type))(array)
    assert isinstance(column, RaggedColumn)
    start = data.draw(st.integers(0, len(array)))
    stop = data.draw(st.integers(start, len(array)))
    ragged = column.cut(start, stop)
    assert ragged.tolist() == array.slice(start, stop - start).to_pylist()
    assert ragged.offsets[0] == 0 and len(ragged) == stop - start
    nulls = array.slice(start, stop - start).null_count
    assert (ragged.valid is None) == (nulls == 0)


def test_values_of_null_rows_are_dropped() -> None:
    """Arrow allows a null row over values; the Ragged's rows hold none of them."""
    offsets = pa.array([0, 2, 5, 6], pa.int32())
    values = pa.array([1, 2, 3, 4, 5, 6], pa.int32())
    array = pa.ListArray.from_arrays(offsets, values, mask=pa.array([False, True, False]))
    ragged = RaggedColumn(array, "list", "c").cut(0, 3)
    assert ragged.tolist() == [[1, 2], None, [6]]
    assert ragged.values.tolist() == [1, 2, 6]


def test_nulls_inside_lists_are_refused_naming_the_column() -> None:
    array = pa.array([[1, None]], pa.list_(pa.int32()))
    with pytest.raises(SourceError, match=r"null\(s\) inside the lists of column 'c'"):
        RaggedColumn(array, "list", "c")


@settings(max_examples=60, deadline=None)
@given(
    dims=st.lists(st.integers(1, 3), min_size=0, max_size=3),
    rows=st.integers(0, 6),
    offset=st.integers(0, 3),
    dtype=st.sampled_from([pa.int8(), pa.float64(), pa.uint32(), pa.bool_()]),
    seed=st.integers(0, 2**16),
)
def test_numbers_of_fixed_size_lists_are_arrows_values_in_their_shape(
    dims: list[int], rows: int, offset: int, dtype: pa.DataType, seed: int
) -> None:
    shape = tuple(dims)
    rng = np.random.default_rng(seed)
    expected = rng.integers(0, 2, (rows + offset, *shape)).astype(dtype.to_pandas_dtype())
    t = dtype
    for size in reversed(dims):
        t = pa.list_(t, size)
    array = pa.array(expected.tolist(), t).slice(offset)
    got = numbers(array, shape)
    np.testing.assert_array_equal(got, expected[offset:])
    column = whole_converter(pa.field("x", t))(array)
    assert isinstance(column, NumberColumn)
    batch = column.cut(1, rows)
    np.testing.assert_array_equal(batch.numpy(), expected[offset + 1 : offset + rows])


def test_a_fixed_shape_tensor_column_reads_in_its_shape() -> None:
    t = pa.fixed_shape_tensor(pa.int32(), [2, 3])
    values = np.arange(24, dtype=np.int32).reshape(4, 2, 3)
    array = pa.ExtensionArray.from_storage(
        t, pa.array(values.reshape(4, 6).tolist(), t.storage_type)
    )
    np.testing.assert_array_equal(numbers(array, (2, 3)), values)
    permuted = pa.fixed_shape_tensor(pa.int32(), [2, 3], permutation=[1, 0])
    with pytest.raises(
        SchemaError, match="column 't' is a fixed-shape tensor stored with permuted"
    ):
        whole_converter(pa.field("t", permuted))


def test_temporals_are_int64_ticks_and_numbers_zero_copy() -> None:
    ticks = [0, 1_700_000_000_123, -5]
    for t in (pa.timestamp("ms"), pa.duration("ms"), pa.date64(), pa.time64("us")):
        array = pa.array(ticks if t != pa.time64("us") else [0, 5, 7], pa.int64()).cast(t)
        values = numpy_values(array)
        assert values.dtype == np.int64 and values.tolist() == array.cast(pa.int64()).to_pylist()
    date = pa.array([1, 2], pa.int32()).cast(pa.date32())
    assert numpy_values(date).dtype == np.int64 and numpy_values(date).tolist() == [1, 2]
    floats = pa.array([1.5, 2.5], pa.float32())
    assert numpy_values(floats).ctypes.data == floats.buffers()[1].address  # no copy


def test_read_only_buffers_become_tensors_sharing_them_without_a_warning() -> None:
    values = np.arange(6, dtype=np.int64)
    values.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tensor = as_tensor(values)
        again = as_tensor(values)
    assert tensor.data_ptr() == again.data_ptr() == values.ctypes.data
    assert tensor.tolist() == list(range(6))


def test_columns_that_become_objects_are_not_converted_whole() -> None:
    assert whole_converter(pa.field("d", pa.decimal128(5, 2))) is None
    assert whole_converter(pa.field("l", pa.list_(pa.string()))) is None
    assert whole_converters(pa.schema([("a", pa.int8()), ("d", pa.decimal128(5, 2))])) is None
    assert set(whole_converters(pa.schema([("a", pa.int8()), ("s", pa.string())]))) == {"a", "s"}


@pytest.mark.parametrize(
    "table",
    [
        pa.table({"a": pa.array([1, None], pa.int64())}),  # a null a tensor cannot hold
        pa.table({"l": pa.array([[1, None]], pa.list_(pa.int32()))}),  # a null inside a list
        pa.table({"f": pa.array([[True, None]], pa.list_(pa.bool_(), 2))}),  # objects
    ],
)
def test_what_does_not_convert_whole_is_left_to_each_batch(table: pa.Table) -> None:
    converters = whole_converters(table.schema)
    assert converters is not None
    assert converted_columns(table, converters) is None
    assert batch_cutter(table, converters, reuse=False) is None
    assert batch_cutter(table, None, reuse=False) is None


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 20), data=st.data())
def test_a_cut_batch_has_a_storage_of_its_rows_only(rows: int, data: Any) -> None:
    table = pa.table(
        {
            "id": np.arange(rows, dtype=np.int64),
            "v": pa.array([[i] * (i % 3) for i in range(rows)], pa.list_(pa.int64())),
            "s": pa.array([f"row {i}" for i in range(rows)]),
        }
    )
    cutter = batch_cutter(table, whole_converters(table.schema), reuse=False)
    assert cutter is not None
    start = data.draw(st.integers(0, rows - 1))
    stop = data.draw(st.integers(start + 1, rows))
    batch = cutter(start, stop)
    assert batch["id"].tolist() == list(range(start, stop))
    assert batch["v"].tolist() == table["v"].to_pylist()[start:stop]
    assert batch["s"].tolist() == table["s"].to_pylist()[start:stop]
    ids: torch.Tensor = batch["id"]
    assert ids.untyped_storage().nbytes() == (stop - start) * 8


def test_arrays_of_keeps_one_chunk_and_joins_several() -> None:
    one = pa.table({"a": [1, 2], "b": ["x", "y"]})
    arrays = arrays_of(one)
    assert [a.buffers()[1].address for a in arrays] == [
        c.chunk(0).buffers()[1].address for c in one.columns
    ]
    two = pa.concat_tables([one, one])
    assert [a.to_pylist() for a in arrays_of(two)] == [[1, 2, 1, 2], ["x", "y", "x", "y"]]
    mixed = pa.table(
        {"a": pa.chunked_array([[1], [2, 3]]), "b": pa.chunked_array([["x", "y", "z"]])}
    )
    assert [a.to_pylist() for a in arrays_of(mixed)] == [[1, 2, 3], ["x", "y", "z"]]
