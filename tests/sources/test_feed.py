"""Rows of a sequence of tables taken n at a time and cut into batches
(fastdata.sources._feed): across table and record-batch boundaries, each record batch
converted once."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata.sources._feed import RowFeed, cut, cut_converted

from .stream_readers import tables

SIZES = st.lists(st.integers(0, 12), max_size=8)


def test_a_row_feed_takes_rows_across_tables() -> None:
    feed = RowFeed(tables(2, 3, 0, 4))
    assert feed.take(4).column("id").to_pylist() == [0, 1, 2, 3]
    pieces = feed.pieces(4)
    assert [(t.num_rows, a, b) for t, a, b in pieces] == [(3, 2, 3), (4, 0, 3)]
    assert feed.take(9).column("id").to_pylist() == [8]
    assert feed.take(1) is None and feed.pieces(1) == []


def test_cut_converted_converts_each_record_batch_once_and_only_where_a_batch_fits() -> None:
    converted: list[int] = []

    def whole(table: pa.Table) -> Any:
        converted.append(table.num_rows)
        ids = table.column("id").to_pylist()
        return lambda a, b: ("cut", ids[a:b])

    def alone(table: pa.Table) -> Any:
        return ("alone", table.column("id").to_pylist())

    two_chunks = pa.concat_tables(list(tables(5, 4)))  # one table, two record batches
    got = list(cut_converted(iter([two_chunks, *tables(1)]), 3, alone, whole))
    # rows 0-2 within the first record batch; 3-5 across both; 6-8 within the second; the
    # last, partial batch within the table of one row
    assert got == [("cut", [0, 1, 2]), ("alone", [3, 4, 5]), ("cut", [6, 7, 8]), ("cut", [0])]
    assert converted == [5, 4, 1]


def test_cut_converted_falls_back_where_the_conversion_declines() -> None:
    got = list(cut_converted(tables(4, 4), 2, lambda t: t.num_rows, lambda t: None))
    assert got == [2, 2, 2, 2]
    assert [t.num_rows for t in cut(tables(4, 4), 3)] == [3, 3, 2]


@settings(max_examples=100, deadline=None)
@given(sizes=SIZES, takes=st.lists(st.integers(1, 15), min_size=1, max_size=12))
def test_takes_are_the_next_rows_in_order_until_none_are_left(
    sizes: list[int], takes: list[int]
) -> None:
    feed, at, total = RowFeed(tables(*sizes)), 0, sum(sizes)
    for n in takes:
        table = feed.take(n)
        if at >= total:
            assert table is None
            continue
        assert table is not None
        assert table.column("id").to_pylist() == list(range(at, min(at + n, total)))
        at += table.num_rows


@settings(max_examples=100, deadline=None)
@given(sizes=SIZES, size=st.integers(1, 15))
def test_cut_makes_batches_of_exactly_size_rows_but_the_last(sizes: list[int], size: int) -> None:
    batches = list(cut(tables(*sizes), size))
    assert [i for b in batches for i in b.column("id").to_pylist()] == list(range(sum(sizes)))
    assert all(b.num_rows == size for b in batches[:-1])
    assert all(0 < b.num_rows <= size for b in batches[-1:])


@settings(max_examples=100, deadline=None)
@given(sizes=SIZES, chunks=st.integers(1, 3), size=st.integers(1, 15))
def test_cut_converted_gives_what_cut_and_convert_give(
    sizes: list[int], chunks: int, size: int
) -> None:
    """Whatever the record batches: the same batches as converting each cut table, each record
    batch converted whole at most once."""
    source = [pa.concat_tables([t] * chunks) if t.num_rows else t for t in tables(*sizes)]
    converted: list[int] = []

    def whole(table: pa.Table) -> Any:
        converted.append(table.num_rows)
        ids = table.column("id").to_pylist()
        return lambda a, b: ids[a:b]

    def alone(table: pa.Table) -> list[int]:
        return table.column("id").to_pylist()

    got = list(cut_converted(iter(source), size, alone, whole))
    assert got == [alone(t) for t in cut(iter(source), size)]
    assert len(converted) <= sum(len(t.to_batches()) for t in source)
