"""fastdata.Ragged: rows, views, equality, pickling through workers, pinning and devices.

The reference for every property is the rows as Python lists (``from_rows`` / ``tolist``).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.multiprocessing import reductions
from torch.utils.data import DataLoader, IterableDataset

import fastdata as fd
from fastdata import Ragged, SourceError
from fastdata.sources._arrow import converter, row_values, to_batch

ROWS = st.lists(st.one_of(st.none(), st.lists(st.integers(-(2**31), 2**31 - 1), max_size=6)))
TEXTS = st.lists(st.one_of(st.none(), st.text(max_size=5)))
BLOBS = st.lists(st.one_of(st.none(), st.binary(max_size=5)))


def dense_rows(rows: list[Any]) -> list[list[Any]]:
    return [[] if r is None else r for r in rows]


# --------------------------------------------------------------------------- rows
@settings(max_examples=100, deadline=None)
@given(rows=st.one_of(ROWS, TEXTS, BLOBS))
def test_rows_round_trip(rows: list[Any]) -> None:
    r = Ragged.from_rows(rows, dtype=torch.int64 if _numeric(rows) else None)
    assert len(r) == len(rows)
    assert r.tolist() == rows
    present = [x for x in rows if x is not None]
    assert r.kind == (
        "str"
        if present and isinstance(present[0], str)
        else "bytes"
        if present and isinstance(present[0], bytes)
        else "list"
    )
    encoded = [len(x.encode()) if isinstance(x, str) else len(x or []) for x in rows]
    assert r.lengths.tolist() == encoded
    assert (r.valid is None) == all(x is not None for x in rows)
    assert r == Ragged(r.values, r.offsets, r.valid, kind=r.kind)  # the checked constructor
    assert r == pickle.loads(pickle.dumps(r))


@settings(max_examples=60, deadline=None)
@given(rows=ROWS)
def test_from_rows_infers_int64_from_int_rows_as_pyarrow_does(rows: list[Any]) -> None:
    """An empty list has no dtype of its own: it takes the other rows' (it made the whole
    Ragged float32, and its padded tokens then failed in nn.Embedding)."""
    r = Ragged.from_rows(rows)
    if any(rows):
        assert pa.array(rows).type == pa.list_(pa.int64())
        assert r == Ragged.from_rows(rows, dtype=torch.int64)
    else:  # no element anywhere: torch.tensor([])'s float32
        assert r.values.dtype == torch.float32
    assert r.tolist() == rows


@pytest.mark.parametrize(
    ("rows", "dtype"),
    [
        ([[5, 6, 7], [8], []], torch.int64),
        ([[], None, [True]], torch.bool),
        ([[1.5], [], [2]], torch.float32),
        ([[[1, 2]], []], torch.int64),  # inner dims: an empty list is still no row's dtype
        ([np.array([1], dtype=np.uint16), []], torch.uint16),
        ([[5], torch.empty(0)], torch.float32),  # an empty tensor has a dtype: promoted
        ([[5], np.array([], dtype=np.float64)], torch.float64),
        ([[], []], torch.float32),
    ],
)
def test_from_rows_dtype_comes_from_the_rows_that_have_one(
    rows: list[Any], dtype: torch.dtype
) -> None:
    r = Ragged.from_rows(rows)
    assert r.values.dtype == dtype
    assert r.lengths.tolist() == [0 if x is None else len(x) for x in rows]
    cast = torch.float64 if dtype == torch.float32 else torch.int16  # 1.5 is no int16
    assert Ragged.from_rows(rows, dtype=cast).values.dtype == cast


def _numeric(rows: list[Any]) -> bool:
    return not any(isinstance(x, (str, bytes)) for x in rows)


@settings(max_examples=100, deadline=None)
@given(rows=ROWS, data=st.data())
def test_rows_slices_and_takes_agree_with_the_lists(rows: list[Any], data: Any) -> None:
    r = Ragged.from_rows(rows, dtype=torch.int64)
    for i in range(-len(rows), len(rows)):
        row = r[i]
        if rows[i] is None:
            assert row is None
        else:
            assert row.tolist() == rows[i]
            assert row._base is r.values or row.numel() == 0  # a view, no copy
    start = data.draw(st.integers(-len(rows) - 1, len(rows) + 1))
    stop = data.draw(st.integers(-len(rows) - 1, len(rows) + 1))
    step = data.draw(st.sampled_from([1, 1, 2, -1]))
    assert r[start:stop:step].tolist() == rows[start:stop:step]
    if step == 1 and r[start:stop].values.numel():
        assert r[start:stop].values.data_ptr() >= r.values.data_ptr()  # a view
    index = data.draw(st.lists(st.integers(-len(rows), len(rows) - 1), max_size=8)) if rows else []
    assert r.take(index).tolist() == [rows[i] for i in index]
    mask = data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)))
    assert r[torch.tensor(mask, dtype=torch.bool)].tolist() == [
        x for x, m in zip(rows, mask, strict=True) if m
    ]
    assert Ragged.cat([r, r[:2]]).tolist() == rows + rows[:2]


def test_index_errors_and_equality() -> None:
    r = Ragged.from_rows([[1, 2], [3]])
    with pytest.raises(IndexError, match="row 2 is out of range"):
        r[2]
    with pytest.raises(IndexError, match="out of range"):
        r.take([5])
    assert r == Ragged.from_rows([[1, 2], [3]])
    assert r != Ragged.from_rows([[1, 2], [4]])
    assert r != Ragged.from_rows([[1], [2, 3]])
    assert r != Ragged.from_rows([[1, 2], [3]], dtype=torch.int32)
    with_null = Ragged.from_rows([[1, 2], None])
    assert with_null != Ragged.from_rows([[1, 2], []])  # null differs from empty
    all_valid = Ragged(r.values, r.offsets, torch.tensor([True, True]))
    assert all_valid == r  # valid=None means no nulls
    assert Ragged.from_rows(["ab"]) != Ragged.from_rows([b"ab"])
    assert r != [[1, 2], [3]]


def test_inner_dims() -> None:
    rows = [torch.arange(6).reshape(3, 2), torch.zeros(0, 2, dtype=torch.int64)]
    r = Ragged.from_rows(rows)
    assert r.values.shape == (3, 2) and r.lengths.tolist() == [3, 0]
    assert torch.equal(r[0], rows[0])
    assert r.tolist() == [rows[0].tolist(), []]
    assert "x 2" in repr(r)


@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "fragment"),
    [
        ((torch.ones(3), torch.tensor([0, 2])), {}, ValueError, "end at 3"),
        ((torch.ones(3), torch.tensor([1, 3])), {}, ValueError, "start at 0"),
        ((torch.ones(3), torch.tensor([0, 2, 1, 3])), {}, ValueError, "never decrease"),
        ((torch.ones(3), torch.tensor([0.0, 3.0])), {}, TypeError, "integer"),
        ((torch.ones(3), [0, 3]), {}, TypeError, "offsets"),
        ((torch.tensor(1.0), torch.tensor([0, 1])), {}, TypeError, "at least one dim"),
        ((torch.ones(2), torch.tensor([0, 2]), torch.ones(2)), {}, ValueError, "(1,) bool"),
        ((torch.ones(2), torch.tensor([0, 2]), torch.tensor([False])), {}, ValueError, "empty"),
        ((torch.ones(2), torch.tensor([0, 2])), {"kind": "str"}, TypeError, "uint8"),
        ((torch.ones(2), torch.tensor([0, 2])), {"kind": "text"}, ValueError, "'str'"),
    ],
)
def test_constructor_checks(args: tuple, kwargs: dict, exc: type, fragment: str) -> None:
    with pytest.raises(exc, match=None) as info:
        Ragged(*args, **kwargs)
    assert fragment in str(info.value)


def test_repr_says_what_it_holds() -> None:
    r = Ragged.from_rows([[1, 2, 3], None, [4], [5], [6]], dtype=torch.int32)
    text = repr(r)
    assert (
        text
        == "Ragged(5 rows of int32, lengths 0..3, 6 values, 1 null: [[1, 2, 3], None, [4], ...])"
    )
    assert repr(Ragged.from_rows(["héllo", "x"])) == (
        "Ragged(2 rows of str, lengths 1..6, 7 bytes: ['héllo', 'x'])"
    )


# --------------------------------------------------------------------------- conversions
@settings(max_examples=60, deadline=None)
@given(rows=ROWS.filter(lambda rows: len(rows) > 0))
def test_to_nested_shares_the_buffers(rows: list[Any]) -> None:
    r = Ragged.from_rows(rows, dtype=torch.int64)
    nt = r.to_nested()
    assert nt.layout == torch.jagged
    assert [t.tolist() for t in nt.unbind()] == dense_rows(rows)
    assert nt.values().data_ptr() == r.values.data_ptr()
    padded = r.to_padded(pad_value=-1)
    assert torch.equal(torch.nested.to_padded_tensor(nt, -1), padded.values)


def test_to_device_and_map_tensors() -> None:
    r = Ragged.from_rows([[1, 2], None])
    moved = r.to("meta")
    assert {t.device.type for t in (moved.values, moved.offsets, moved.valid)} == {"meta"}
    assert r.to("cpu") == r
    names = []
    r.map_tensors(lambda t, name: names.append(name) or t)
    assert names == ["valid", "values", "offsets"]
    assert not r.is_pinned()


# --------------------------------------------------------------------------- across processes
def storages_pickled(obj: Any) -> tuple[int, int]:
    """How many storages (shared-memory segments) and bytes torch's DataLoader queue pickling
    of ``obj`` takes."""
    count = 0

    def counting(storage: Any) -> Any:
        nonlocal count
        count += 1
        return reductions.reduce_storage(storage)

    class Counting(ForkingPickler):
        _extra_reducers: ClassVar = {
            **ForkingPickler._extra_reducers,
            torch.UntypedStorage: counting,
        }

    buffer = io.BytesIO()
    Counting(buffer, pickle.HIGHEST_PROTOCOL).dump(obj)
    return count, len(buffer.getvalue())


def test_crosses_workers_as_two_or_three_segments_whatever_the_rows() -> None:
    small = Ragged.from_rows([list(range(n)) for n in range(10)])
    large = Ragged.from_rows([list(range(n % 50)) for n in range(5000)])
    assert storages_pickled(small)[0] == storages_pickled(large)[0] == 2
    assert storages_pickled(Ragged.from_rows([[1], None]))[0] == 3  # + validity
    # no record per row: only the sizes in the two records grow
    assert abs(storages_pickled(small)[1] - storages_pickled(large)[1]) < 32
    rows = list(large)
    assert storages_pickled(rows)[1] > 50 * storages_pickled(large)[1]  # what it replaces
    # torch's jagged nested tensor: values + offsets, plus (torch 2.14) one tiny segment
    # each for its cached min / max row length
    assert storages_pickled(large.to_nested())[0] >= 2


class RaggedBatches(IterableDataset):
    def __iter__(self) -> Iterator[dict[str, Any]]:
        for b in range(4):
            rows = [[b * 100 + i] * (i % 5) if i % 7 else None for i in range(30)]
            yield {"tokens": Ragged.from_rows(rows, dtype=torch.int64), "batch": torch.tensor(b)}


@pytest.mark.slow
def test_torch_dataloader_workers_hand_it_over_in_shared_memory() -> None:
    want = list(RaggedBatches())
    got = list(DataLoader(RaggedBatches(), batch_size=None, num_workers=1))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert isinstance(g["tokens"], Ragged) and g["tokens"] == w["tokens"]
        assert g["tokens"].values.is_shared() and g["tokens"].offsets.is_shared()
    # batch_size=None: torch's default_convert leaves a Ragged alone
    loader = fd.DataLoader(RaggedBatches(), batch_size=None)
    assert all(isinstance(b["tokens"], Ragged) for b in loader)


def test_to_device_moves_every_tensor_of_a_ragged() -> None:
    batch = {"tokens": Ragged.from_rows([[1, 2], None, [3]]), "id": torch.arange(3)}
    [same] = list(fd.to_device([batch], "cpu"))
    assert same["tokens"] == batch["tokens"] and torch.equal(same["id"], batch["id"])
    [moved] = list(fd.to_device([batch], "meta"))  # a device without data: no GPU needed
    tokens = moved["tokens"]
    assert isinstance(tokens, Ragged)
    assert {t.device.type for t in (tokens.values, tokens.offsets, tokens.valid)} == {"meta"}


@pytest.mark.cuda
def test_pins_and_moves_to_cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    r = Ragged.from_rows([[1, 2], None, [3]])
    pinned = r.pin_memory()
    assert pinned.is_pinned() and pinned.valid.is_pinned() and pinned == r
    loader = DataLoader(RaggedBatches(), batch_size=None, num_workers=1, pin_memory=True)
    assert all(b["tokens"].is_pinned() for b in loader)
    [on_gpu] = list(fd.to_device([{"tokens": r}], "cuda"))
    assert on_gpu["tokens"].device.type == "cuda" and on_gpu["tokens"].to("cpu") == r
    padded = fd.pad_collate(on_gpu["tokens"])
    assert padded.values.device.type == "cuda"
    assert padded.values.cpu().tolist() == [[1, 2], [0, 0], [3, 0]]


@pytest.mark.parametrize(
    "index", [torch.tensor([1.7, 3.9]), np.array([1.0]), [0.5], 1.5, torch.tensor(1.0)]
)
def test_float_indices_are_refused_as_torch_refuses_them(index: Any) -> None:
    """They were truncated: take(tensor([1.7, 3.9])) gave rows 1 and 3 (rcol #7)."""
    r = Ragged.from_rows([[1, 2, 3], [9], [], [4], [5, 6]])
    with pytest.raises(IndexError, match=r"must be integers or a bool mask, got torch\.float"):
        r[index]
    if not isinstance(index, float):
        with pytest.raises(IndexError, match="must be integers or a bool mask"):
            r.take(index)
    assert r.take([]).tolist() == r[np.array([])].tolist() == []  # no value to truncate
    assert r.take(torch.tensor([1, 3], dtype=torch.int32)).tolist() == [[9], [4]]


def test_numpy_index_and_empty() -> None:
    r = Ragged.from_rows([[1], [2, 3]])
    assert r[np.int64(1)].tolist() == [2, 3]
    empty = r[1:1]
    assert len(empty) == 0 and empty.tolist() == [] and "0 rows" in repr(empty)
    with pytest.raises(ValueError, match="at least one row"):
        empty.to_nested()
    assert empty.to_padded().values.shape == (0, 0)


# --------------------------------------------------------------------------- from Arrow
FLOATS = st.lists(st.one_of(st.none(), st.lists(st.floats(-1, 1, width=32), max_size=4)))
ARROW_CASES = {
    "list<int32>": (pa.list_(pa.int32()), ROWS),  # ROWS' ints fit int32
    "large_list<int64>": (pa.large_list(pa.int64()), ROWS),
    "list<float32>": (pa.list_(pa.float32()), FLOATS),
    "string": (pa.string(), TEXTS),
    "large_string": (pa.large_string(), TEXTS),
    "binary": (pa.binary(), BLOBS),
}


@pytest.mark.parametrize("case", list(ARROW_CASES))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_arrow_columns_become_ragged_zero_copy(case: str, data: Any) -> None:
    arrow_type, rows_strategy = ARROW_CASES[case]
    rows = data.draw(rows_strategy)
    array = pa.array(rows, arrow_type)
    start = data.draw(st.integers(0, len(rows)))
    stop = data.draw(st.integers(start, len(rows)))
    sliced = array.slice(start, stop - start)  # batches are slices: offsets do not start at 0
    ragged = to_batch(pa.table({"c": sliced}), {"c": converter(pa.field("c", arrow_type))[0]})["c"]
    assert isinstance(ragged, Ragged)
    assert ragged.tolist() == sliced.to_pylist()
    assert ragged.offsets[0] == 0 and ragged.offsets.dtype == torch.int64
    assert (ragged.valid is None) == (sliced.null_count == 0)
    if ragged.values.numel():  # zero-copy: the values are Arrow's own buffer
        nested = pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)
        data_buffer = sliced.buffers()[3 if nested else 2]  # the child values / the bytes
        start, size = data_buffer.address, data_buffer.size
        assert start <= ragged.values.data_ptr() < start + size
    rows_out = row_values(pa.field("c", arrow_type), sliced)  # row mode: one value per row
    if ragged.kind == "list":
        assert [None if r is None else r.tolist() for r in rows_out] == sliced.to_pylist()
    else:
        assert rows_out == sliced.to_pylist()


def test_null_rows_over_values_and_nulls_inside_lists() -> None:
    # Arrow allows a null row to span values; they are dropped, not handed out
    offsets = pa.array([0, 2, 4, 5], pa.int32())
    array = pa.ListArray.from_arrays(
        offsets, pa.array([1, 2, 3, 4, 5], pa.int32()), mask=pa.array([False, True, False])
    )
    ragged = converter(pa.field("t", array.type))[0](array)
    assert ragged.tolist() == [[1, 2], None, [5]] and ragged.values.tolist() == [1, 2, 5]
    inner = pa.array([[1, None]], pa.list_(pa.int32()))
    with pytest.raises(SourceError, match="inside the lists of column 't'") as info:
        converter(pa.field("t", inner.type))[0](inner)
    assert info.value.column == "t"
