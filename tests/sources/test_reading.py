"""fastdata.sources._reading: a slot's segments read (ahead, on threads) in order, permuted
by their window's seed (a RowReader's read in the permuted order, row by row), cut to the
segment, and cut again into tables of one batch's rows."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastdata.errors import ContractError
from fastdata.sources._feed import RowFeed, cut
from fastdata.sources._reading import ROWS_PER_READ, read_segments
from fastdata.sources.base import INDEX, RowReader, declares
from fastdata.sources.elastic import Segment
from fastdata.sources.plan import Piece, Window, window_permutation


class Units:
    """Units of 10 rows; row ``r`` of unit ``u`` holds ``100 * u + r``; bad units fail."""

    def __init__(self, bad: tuple[int, ...] = ()) -> None:
        self.bad = bad

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        if unit in self.bad:
            raise OSError(f"unit {unit} is gone")
        return pa.table({"v": [100 * unit + r for r in range(start, stop)]})

    def unit_rows(self) -> list[int]:
        return [10] * 4

    def location(self, unit: int, row: int) -> dict[str, Any]:
        return {}

    def identity(self) -> dict[str, Any]:
        return {}


WINDOWS = [
    Window((Piece(0, 2, 6), Piece(1, 0, 3)), seed=None),
    Window((Piece(2, 0, 10),), seed=7),
    Window((Piece(3, 5, 10),), seed=None),
]
SEGMENTS = [Segment(WINDOWS[0], 1, 7), Segment(WINDOWS[1], 0, 10), Segment(WINDOWS[2], 0, 5)]


def expected() -> list[list[int]]:
    first = [2, 3, 4, 5, 100, 101, 102][1:7]
    perm = window_permutation(WINDOWS[1])
    assert perm is not None
    second = [200 + int(i) for i in perm]
    return [first, second, [305, 306, 307, 308, 309]]


@pytest.mark.parametrize("read_ahead", [0, 1, 2, 5])
def test_segments_come_in_order_permuted_and_cut(read_ahead: int) -> None:
    with ThreadPoolExecutor(2) as pool:
        tables = read_segments(Units(), SEGMENTS, pool, read_ahead, None, None)
        assert [t.column("v").to_pylist() for t in tables] == expected()


def test_tables_carry_each_rows_index_from_the_units_offsets() -> None:
    offsets = np.array([0, 10, 20, 30, 40])
    table = next(read_segments(Units(), SEGMENTS[:1], None, 0, offsets, None))
    assert table.column(INDEX).to_pylist() == [3, 4, 5, 10, 11, 12]


def test_a_failed_read_raises_in_order_after_the_tables_before_it() -> None:
    with ThreadPoolExecutor(2) as pool:
        tables = read_segments(Units(bad=(3,)), SEGMENTS, pool, 2, None, None)
        assert len(next(tables)) == 6 and len(next(tables)) == 10
        with pytest.raises(OSError, match="unit 3 is gone"):
            next(tables)


class Rows(Units):
    """:class:`Units` that read any rows (a :class:`RowReader`), recording what they read."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[list[int], list[int]]] = []

    def read_rows(self, units: np.ndarray, rows: np.ndarray) -> pa.Table:
        self.asked.append((units.tolist(), rows.tolist()))
        return pa.table({"v": (100 * units + rows).tolist()})


@given(
    sizes=st.lists(st.integers(1, 10), min_size=1, max_size=4),
    seed=st.integers(0, 2**32),
    cut=st.tuples(st.integers(0, 40), st.integers(0, 40)),
)
def test_a_row_readers_shuffled_segment_is_the_permuted_window_read_row_by_row(
    sizes: list[int], seed: int, cut: tuple[int, int]
) -> None:
    pieces = tuple(Piece(unit, 10 - size, 10) for unit, size in enumerate(sizes))
    window = Window(pieces, seed=seed)
    start, stop = sorted(min(c, window.rows) for c in cut)
    segment = Segment(window, start, stop)
    offsets = np.arange(0, 50, 10)
    reader = Rows()
    assert declares(reader, RowReader) and not declares(Units(), RowReader)
    by_rows = list(read_segments(reader, [segment], None, 0, offsets, None))
    [by_ranges] = read_segments(Units(), [segment], None, 0, offsets, None)
    assert [row for t in by_rows for row in t.to_pylist()] == by_ranges.to_pylist()  # INDEX too
    asked = [len(units) for units, _ in reader.asked]  # its rows only, a part at a time
    assert sum(asked) == stop - start and max(asked, default=0) <= ROWS_PER_READ


def test_a_row_readers_shuffled_window_is_read_in_parts_ahead() -> None:
    window = Window(tuple(Piece(unit, 0, 10) for unit in range(4)), seed=0)
    reader = Rows()
    with patch("fastdata.sources._reading.ROWS_PER_READ", 15), ThreadPoolExecutor(2) as pool:
        tables = list(read_segments(reader, [Segment(window, 3, 40)], pool, 2, None, None))
    assert [len(t) for t in tables] == [15, 15, 7]
    perm = window_permutation(window)
    assert perm is not None
    want = [100 * (int(i) // 10) + int(i) % 10 for i in perm[3:40]]
    assert pa.concat_tables(tables).column("v").to_pylist() == want


class CountingPool(ThreadPoolExecutor):
    """Two threads that count the reads submitted to them."""

    def __init__(self) -> None:
        super().__init__(2)
        self.submitted = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def test_a_row_readers_parts_are_read_ahead_once_the_first_is_taken() -> None:
    window = Window(tuple(Piece(unit, 0, 10) for unit in range(4)), seed=0)
    with patch("fastdata.sources._reading.ROWS_PER_READ", 10), CountingPool() as pool:
        tables = read_segments(Rows(), [Segment(window, 0, 40)], pool, 2, None, None)
        assert len(next(tables)) == 10 and pool.submitted == 0  # the first part alone
        assert len(next(tables)) == 10 and pool.submitted == 3  # then read_ahead ahead
        assert [len(t) for t in tables] == [10, 10]
    with CountingPool() as pool:  # another reader's segments: read ahead at once
        tables = read_segments(Units(), SEGMENTS, pool, 2, None, None)
        assert len(next(tables)) == 6 and pool.submitted == 2
        assert [t.column("v").to_pylist() for t in tables] == expected()[1:]


def test_a_row_reader_reads_a_window_in_order_by_ranges_when_not_shuffled() -> None:
    reader = Rows()
    tables = read_segments(reader, SEGMENTS[::2], None, 0, None, None)
    assert [t.column("v").to_pylist() for t in tables] == expected()[::2]
    assert reader.asked == []


def test_rows_are_taken_across_table_boundaries() -> None:
    tables = [pa.table({"v": list(range(a, b))}) for a, b in ((0, 3), (3, 4), (4, 9))]
    feed = RowFeed(iter(tables))
    assert feed.take(2).column("v").to_pylist() == [0, 1]
    assert feed.take(5).column("v").to_pylist() == [2, 3, 4, 5, 6]
    assert feed.take(5).column("v").to_pylist() == [7, 8]
    assert feed.take(1) is None
    batches = cut(iter(tables), 4)
    assert [t.column("v").to_pylist() for t in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]


class OneTooMany(Units):
    """Reads ``[start, stop]``: one row past what was asked for (an off-by-one)."""

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        return super().read(unit, start, stop + 1)


class RowsOneShort(Rows):
    def read_rows(self, units: np.ndarray, rows: np.ndarray) -> pa.Table:
        return super().read_rows(units, rows).slice(1)


@pytest.mark.parametrize(
    ("reader", "call"),
    [(OneTooMany(), r"OneTooMany\.read\(0, 2, 6\) returned 5 rows, not 4"),
     (RowsOneShort(), r"RowsOneShort\.read_rows\(<10 rows>\) returned 9 rows, not 10")],
)  # fmt: skip
def test_a_reader_returning_other_than_the_rows_asked_for_breaks_the_contract(
    reader: Any, call: str
) -> None:
    segment = SEGMENTS[0] if isinstance(reader, OneTooMany) else SEGMENTS[1]
    with pytest.raises(ContractError, match=call) as caught:
        next(read_segments(reader, [segment], None, 0, None, None))
    assert caught.value.check == "read"


def test_a_contract_error_from_a_worker_keeps_its_type() -> None:
    import fastdata as fd

    stream = fd.PlannedStream(OneTooMany(), batch_size=4)
    for method in ("thread", "multiprocessing"):
        loader = fd.DataLoader(stream, batch_size=None, num_workers=1, worker_method=method)
        with pytest.raises(
            ContractError, match=r"(?s)worker.*read: OneTooMany\.read\(0, 0, 10\) returned 11"
        ):
            list(loader)
