"""fastdata.sources._arrow: a table as one batch (``to_batch``), as rows (``iter_rows``), and
ArrowDecoder's batches cut from columns converted once, which must equal converting each batch
alone (values, dtypes, shapes, nulls, storages), also where batches straddle tables, columns
hold nulls a tensor cannot, or a column becomes Python objects."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata import Ragged, SourceError
from fastdata.sources import INDEX, ArrowDecoder, Context
from fastdata.sources._arrow import Conversions, converter, iter_rows, row_values, to_batch
from fastdata.sources._feed import cut


def context(batch_size: int | None, locate: Any = None) -> Context:
    return Context(0, 0, locate or (lambda i: {"row": i}), None, batch_size)


def same(a: Any, b: Any) -> bool:
    """Equal batches: the same keys; tensors of one dtype, shape and values; Ragged with the
    same parts (``valid`` None on both or equal); lists equal."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, Ragged):
        parts = [(a.values, b.values), (a.offsets, b.offsets)]
        return (
            a.kind == b.kind
            and (a.valid is None) == (b.valid is None)
            and all(same(x, y) for x, y in [*parts, (a.valid, b.valid)] if x is not None)
        )
    return a == b


def outcome(batches: Iterator[Any]) -> list[Any]:
    """The batches, and the message of the error that stopped them (if any)."""
    out: list[Any] = []
    try:
        out.extend(batches)
    except SourceError as exc:
        out.append(f"error: {exc}")
    return out


def one_by_one(tables: list[pa.Table], size: int, decoder: ArrowDecoder) -> list[Any]:
    """What the stream made before: every cut table converted alone."""
    return outcome(decoder.batch(t, context(size)) for t in cut(iter(tables), size))


def cut_once(tables: list[pa.Table], size: int, decoder: ArrowDecoder) -> list[Any]:
    return outcome(decoder.batches(iter(tables), context(size)))


# --------------------------------------------------------------------- property: same batches
def column(kind: str, n: int, rng: np.random.Generator, nulls: str) -> pa.Array:
    """``n`` values of one kind of column; ``nulls``: some null rows in list / string columns
    (``"ragged"``, a Ragged holds them) and in tensor columns too (``"all"``: an error, raised
    with the batch that holds the first)."""
    ragged = kind in ("tokens", "text")
    mask = rng.random(n) < 0.3 if nulls == "all" or (nulls == "ragged" and ragged) else None
    lengths = rng.integers(0, 5, n)
    if kind == "int64":
        return pa.array(rng.integers(-(2**40), 2**40, n), pa.int64())
    if kind == "float32":
        return pa.array(rng.standard_normal(n).astype(np.float32))
    if kind == "bool":
        return pa.array(rng.random(n) < 0.5, mask=mask)  # a null: batch by batch
    if kind == "timestamp":
        return pa.array(rng.integers(0, 2**40, n), pa.timestamp("us", tz="UTC"), mask=mask)
    if kind == "date32":
        return pa.array(rng.integers(0, 30_000, n).astype(np.int32), pa.date32())
    if kind == "fixed":  # rows of shape (2, 3)
        values = pa.array(rng.integers(0, 100, n * 6), pa.int16())
        inner = pa.FixedSizeListArray.from_arrays(values, 3)
        return pa.FixedSizeListArray.from_arrays(inner, 2)
    if kind == "tokens":
        rows = [list(rng.integers(0, 32_000, k)) for k in lengths]
        return pa.array(rows, pa.list_(pa.int32()), mask=mask)
    if kind == "text":
        rows = ["w" * int(k) + str(i) for i, k in enumerate(lengths)]
        return pa.array(rows, pa.large_string(), mask=mask)
    if kind == "blob":
        return pa.array(
            [bytes(rng.integers(0, 256, 4, dtype=np.uint8)) for _ in range(n)], pa.binary(4)
        )
    if kind == "struct":  # Python objects: the table is converted batch by batch
        return pa.array([{"a": int(k)} for k in lengths], pa.struct([("a", pa.int64())]))
    raise AssertionError(kind)


KINDS = [
    "int64",
    "float32",
    "bool",
    "timestamp",
    "date32",
    "fixed",
    "tokens",
    "text",
    "blob",
    "struct",
]


@settings(max_examples=150, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=4, unique=True),
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=5),
    batch_size=st.integers(1, 17),
    nulls=st.sampled_from(["none", "ragged", "all"]),
    chunked=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_batches_cut_from_whole_columns_equal_batches_converted_alone(
    kinds: list[str], sizes: list[int], batch_size: int, nulls: str, chunked: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    tables = []
    for n in sizes:
        table = pa.table({k: column(k, n, rng, nulls) for k in kinds})
        if chunked and n > 1:  # a table of two record batches, as concatenated pieces are
            table = pa.concat_tables([table.slice(0, n // 2), table.slice(n // 2)])
        tables.append(table)
    decoder = ArrowDecoder()
    expected = one_by_one(tables, batch_size, decoder)
    got = cut_once(tables, batch_size, decoder)
    assert len(got) == len(expected)
    assert all(same(g, e) for g, e in zip(got, expected, strict=True))
    if nulls != "all" or not {"bool", "timestamp"} & set(kinds):  # no error
        assert len(got) == -(-sum(sizes) // batch_size)


def test_whole_columns_are_converted_once_and_each_batch_has_its_own_storage() -> None:
    table = pa.table({"x": np.arange(1000, dtype=np.float32), "t": [[1, 2]] * 1000})
    batches = cut_once([table], 100, ArrowDecoder())
    assert [len(b["x"]) for b in batches] == [100] * 10
    for i, b in enumerate(batches):
        assert torch.equal(b["x"], torch.arange(i * 100, (i + 1) * 100, dtype=torch.float32))
        # the storage holds the batch's rows only, as a batch converted alone: it crosses
        # to the main process, pins and saves as such
        assert b["x"].untyped_storage().nbytes() == 100 * 4
        assert b["t"].values.untyped_storage().nbytes() == 200 * 8
        assert b["t"].offsets.tolist() == list(range(0, 201, 2))


def test_a_conversion_error_is_raised_with_the_batch_that_holds_it() -> None:
    """A null in a boolean column: the table is converted batch by batch, and the batches
    before the null's come out first, as when every batch was converted alone."""
    mask = np.zeros(100, bool)
    mask[57] = True
    table = pa.table({"b": pa.array(np.ones(100, bool), mask=mask), INDEX: np.arange(100) + 1000})
    batches = ArrowDecoder().batches(iter([table]), context(16))
    assert [len(next(batches)["b"]) for _ in range(3)] == [16, 16, 16]
    with pytest.raises(SourceError, match="cannot convert") as err:
        next(batches)
    assert (err.value.column, err.value.row) == ("b", 1048)  # located in the batch


def test_a_subclass_that_overrides_batch_is_called_for_every_batch() -> None:
    class Tagged(ArrowDecoder):
        def batch(self, table: pa.Table, context: Context) -> dict[str, Any]:
            return {**super().batch(table, context), "tag": table.num_rows}

    table = pa.table({"x": np.arange(10)})
    batches = list(Tagged().batches(iter([table, table]), context(7)))
    assert [b["tag"] for b in batches] == [7, 7, 6]
    assert torch.equal(torch.cat([b["x"] for b in batches]), torch.arange(10).repeat(2))


def test_origin_is_cut_with_the_columns() -> None:
    table = pa.table({"x": np.arange(10), INDEX: np.arange(10) + 50})
    ctx = context(4, lambda i: {"row": i})
    batches = list(ArrowDecoder(origin=True).batches(iter([table]), ctx))
    assert [[o["row"] for o in b["origin"]] for b in batches] == [
        [50, 51, 52, 53],
        [54, 55, 56, 57],
        [58, 59],
    ]
    assert all("__index__" not in b for b in batches)


# --------------------------------------------------------------------- to_batch and rows
def test_to_batch_converts_each_kind_of_column() -> None:
    table = pa.table(
        {
            "i": pa.array([1, 2, 3], pa.int32()),
            "ts": pa.array([0, 1, 2], pa.timestamp("ms")),
            "tokens": pa.array([[1], None, [2, 3]], pa.list_(pa.int64())),
            "text": pa.array(["a", "bc", None]),
            "obj": pa.array([{"k": 1}, {"k": 2}, None]),
        }
    )
    conversions = Conversions(table.schema)
    batch = to_batch(table, conversions.batch)
    assert batch["i"].dtype == torch.int32 and batch["i"].tolist() == [1, 2, 3]
    assert batch["ts"].dtype == torch.int64 and batch["ts"].tolist() == [0, 1, 2]
    assert batch["tokens"].tolist() == [[1], None, [2, 3]]
    assert batch["text"].tolist() == ["a", "bc", None]
    assert batch["obj"] == [{"k": 1}, {"k": 2}, None]
    assert conversions.whole is None  # an object column: batches are converted one by one


def test_nulls_in_a_tensor_column_are_refused_naming_the_column_and_row() -> None:
    table = pa.table({"x": pa.array([1.0, None, 3.0], pa.float32())})
    with pytest.raises(SourceError) as err:
        to_batch(table, {"x": converter(table.schema.field("x"))[0]}, locate=lambda r: {"row": r})
    assert err.value.column == "x"


def test_nulls_inside_lists_of_numbers_are_refused_where_they_are() -> None:
    table = pa.table({"t": pa.array([[1], [2, None]], pa.list_(pa.int32()))})
    with pytest.raises(SourceError, match="null") as err:
        to_batch(table, Conversions(table.schema).batch, locate=lambda r: {"row": r + 10})
    assert (err.value.column, err.value.row) == ("t", 11)


def test_rows_are_dicts_of_numpy_scalars_tensors_and_objects() -> None:
    table = pa.table(
        {
            "i": pa.array([4, 5], pa.int64()),
            "t": pa.array([[1, 2], None], pa.list_(pa.int16())),
            "s": pa.array(["x", "yz"]),
        }
    )
    rows = list(iter_rows(table))
    assert [type(r["i"]) for r in rows] == [np.int64, np.int64]
    assert rows[0]["t"].tolist() == [1, 2] and rows[1]["t"] is None
    assert [r["s"] for r in rows] == ["x", "yz"]
    fixed = pa.array([[1, 2], [3, 4]], pa.list_(pa.int8(), 2))
    assert [v.tolist() for v in row_values(pa.field("f", fixed.type), fixed)] == [[1, 2], [3, 4]]


def test_rows_of_a_table_without_columns_are_empty_dicts_one_per_row() -> None:
    """What an unlabelled image source's other columns are: nothing, but its rows still
    count (origin=True adds each row's origin to them)."""
    table = pa.table({"x": [1, 2, 3]}).drop_columns(["x"])
    assert list(iter_rows(table)) == [{}, {}, {}]
    indexed = pa.table({INDEX: pa.array([7, 8], pa.int64())})
    rows = list(ArrowDecoder(origin=True).rows(indexed, context(None, lambda i: {"row": i})))
    assert rows == [{"origin": {"row": 7}}, {"origin": {"row": 8}}]


def test_batches_of_every_size_cover_every_row_once() -> None:
    tables = [pa.table({"x": np.arange(a, b)}) for a, b in itertools.pairwise([0, 5, 5, 23, 24])]
    for size in range(1, 26):
        batches = cut_once(tables, size, ArrowDecoder())
        assert torch.cat([b["x"] for b in batches]).tolist() == list(range(24))
        assert all(len(b["x"]) == size for b in batches[:-1])
