"""fastdata.sources.stream (PlannedStream) and reading and decoding (``_reading.decoded``), over
small in-memory readers whose every row is known (stream_readers.py). The per-epoch views:
test_views.py; cutting tables into batches: test_feed.py."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest
import torch

import fastdata as fd
from fastdata.sources import Context
from fastdata.sources._reading import decoded

from .stream_readers import Growing, Units, tables


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


def test_decoded_cuts_batches_for_a_decoder_that_does_not() -> None:
    context = Context(0, 0, lambda i: {}, None, 4)
    assert list(decoded(Lengths(), tables(3, 0, 6), context, batching=False)) == [4, 4, 1]
    rows = Context(0, 0, lambda i: {}, None, None)
    assert list(decoded(Lengths(), tables(2, 1), rows, batching=False)) == [0, 1, 2]


def test_a_stream_asks_arrow_decoders_for_their_batches_and_others_for_each_batch() -> None:
    assert fd.PlannedStream(Units([3]), batch_size=2)._batching
    stream = fd.PlannedStream(Units([3, 4]), decoder=Lengths(), batch_size=3)
    assert not stream._batching and list(stream) == [3, 3, 1]
