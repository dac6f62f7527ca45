"""fastdata.sources.stream (PlannedStream) and the modules it runs on: the per-epoch reader
views (``_views``), reading and decoding (``_reading.decoded``) and cutting tables into batches
(``_feed``), over small in-memory readers whose every row is known."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch

import fastdata as fd
from fastdata.sources import Context
from fastdata.sources._feed import RowFeed, cut, cut_converted
from fastdata.sources._reading import decoded
from fastdata.sources._views import EpochViews


class Units:
    """A reader of units of the given sizes; row ``i`` of the source has ``id == i``."""

    def __init__(self, rows: list[int]) -> None:
        self.rows = rows
        self.reads: list[tuple[int, int, int]] = []

    def unit_rows(self) -> list[int]:
        return self.rows

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        self.reads.append((unit, start, stop))
        first = sum(self.rows[:unit])
        return pa.table({"id": np.arange(first + start, first + stop, dtype=np.int64)})

    def location(self, unit: int, row: int) -> dict[str, Any]:
        return {"path": f"unit-{unit}", "row": row}

    def identity(self) -> dict[str, Any]:
        return {"rows": self.rows}


class Growing(Units):
    """A per-epoch reader: epoch ``e`` has one more unit of 3 rows than epoch ``e - 1``."""

    def for_epoch(self, epoch: int) -> Units:
        return Units([*self.rows, *[3] * epoch])


def ids(stream: fd.PlannedStream) -> list[int]:
    return [int(i) for item in stream for i in np.atleast_1d(item["id"])]


def test_units_rows_and_locations_come_from_the_reader() -> None:
    stream = fd.PlannedStream(Units([4, 0, 6]), batch_size=3)
    assert stream.unit_rows() == (4, 0, 6) and stream.num_rows == 10
    assert stream.location(3) == {"path": "unit-0", "row": 3}
    assert stream.location(4) == {"path": "unit-2", "row": 0}  # the empty unit skipped
    assert stream.location(9) == {"path": "unit-2", "row": 5}


def test_every_row_once_in_order_in_batches_across_units() -> None:
    stream = fd.PlannedStream(Units([4, 0, 6, 5]), batch_size=4)
    batches = list(stream)
    assert [len(b["id"]) for b in batches] == [4, 4, 4, 3] and len(stream) == 4
    assert torch.cat([b["id"] for b in batches]).tolist() == list(range(15))


def test_rows_one_by_one_when_there_is_no_batch_size() -> None:
    stream = fd.PlannedStream(Units([2, 3]))
    rows = list(stream)
    assert [int(r["id"]) for r in rows] == [0, 1, 2, 3, 4] and len(stream) == 5


@pytest.mark.parametrize("read_ahead", [0, 1, 3])
def test_read_ahead_and_shuffling_never_lose_or_repeat_a_row(read_ahead: int) -> None:
    stream = fd.PlannedStream(
        Units([7, 5, 9, 1]), batch_size=4, shuffle=True, shuffle_buffer=6, read_ahead=read_ahead
    )
    first = ids(stream)
    assert sorted(first) == list(range(22)) and first != list(range(22))
    assert ids(stream) == first  # the same epoch, the same order
    stream.set_epoch(1)
    assert sorted(ids(stream)) == list(range(22)) and ids(stream) != first


def test_each_reader_slot_reads_its_share_once() -> None:
    stream = fd.PlannedStream(Units([5, 5, 5, 5]), batch_size=3)
    assert sum(stream.slot_rows(3)) == 20
    assert stream.reader_items(3) == [-(-n // 3) for n in stream.slot_rows(3)]


def test_drop_last_leaves_out_the_partial_batch() -> None:
    stream = fd.PlannedStream(Units([5, 6]), batch_size=4, drop_last=True)
    assert [len(b["id"]) for b in stream] == [4, 4] and len(stream) == 2
    assert stream.summary().dropped_rows == 3


def test_a_per_epoch_reader_is_planned_over_each_epochs_units() -> None:
    stream = fd.PlannedStream(Growing([2, 2]), batch_size=2)
    assert stream.unit_rows() == (2, 2) and stream.unit_rows(epoch=2) == (2, 2, 3, 3)
    stream.set_epoch(1)
    assert sorted(ids(stream)) == list(range(7))


def test_epoch_views_ask_the_reader_once_and_keep_two_epochs() -> None:
    calls: list[int] = []

    class Counted(Growing):
        def for_epoch(self, epoch: int) -> Units:
            calls.append(epoch)
            return super().for_epoch(epoch)

    views = EpochViews(Counted([1]))
    assert views(0).rows == (1,) and views(1).rows == (1, 3)
    assert views(1).offsets.tolist() == [0, 1, 4]
    views(0), views(1)
    assert calls == [0, 1]  # asked once each
    views(2)  # a third epoch: the oldest is dropped
    views(0)
    assert calls == [0, 1, 2, 0]
    plain = EpochViews(Units([3]))
    assert plain(0) is plain(7)  # one view for every epoch


def test_a_negative_unit_is_refused() -> None:
    with pytest.raises(ValueError, match="negative number of rows"):
        fd.PlannedStream(Units([3, -1]), batch_size=2).num_rows  # noqa: B018


class Lengths:
    """A decoder without ``batches``: each batch is its row count (rows: the ids)."""

    needs_index = False

    def batch(self, table: pa.Table, context: Context) -> int:
        return table.num_rows

    def rows(self, table: pa.Table, context: Context) -> Iterator[int]:
        return iter(table.column("id").to_pylist())


def tables(*sizes: int) -> Iterator[pa.Table]:
    bounds = np.cumsum([0, *sizes])
    return (pa.table({"id": np.arange(a, b)}) for a, b in itertools.pairwise(bounds))


def test_decoded_cuts_batches_for_a_decoder_that_does_not() -> None:
    context = Context(0, 0, lambda i: {}, None, 4)
    assert list(decoded(Lengths(), tables(3, 0, 6), context, batching=False)) == [4, 4, 1]
    rows = Context(0, 0, lambda i: {}, None, None)
    assert list(decoded(Lengths(), tables(2, 1), rows, batching=False)) == [0, 1, 2]


def test_a_stream_asks_arrow_decoders_for_their_batches_and_others_for_each_batch() -> None:
    assert fd.PlannedStream(Units([3]), batch_size=2)._batching
    stream = fd.PlannedStream(Units([3, 4]), decoder=Lengths(), batch_size=3)
    assert not stream._batching and list(stream) == [3, 3, 1]


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
