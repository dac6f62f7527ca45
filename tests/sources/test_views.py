"""A stream's view of its reader per epoch (fastdata.sources._views): the reader of each epoch,
asked once, its unit rows and offsets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata.sources._views import EpochViews

from .stream_readers import Growing, Units


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


@settings(max_examples=50, deadline=None)
@given(rows=st.lists(st.integers(0, 10**12), max_size=30), epoch=st.integers(0, 5))
def test_offsets_are_where_each_units_rows_start_among_all_rows(
    rows: list[int], epoch: int
) -> None:
    view = EpochViews(Growing(rows))(epoch)
    expected = [*rows, *[3] * epoch]
    assert view.rows == tuple(expected) and view.offsets.dtype == np.int64
    assert view.offsets.tolist() == [sum(expected[:k]) for k in range(len(expected) + 1)]
    assert view.reader.unit_rows() == expected  # the epoch's own reader


def test_a_unit_of_negative_rows_is_refused_naming_the_reader() -> None:
    reader = Units([2, -1])
    with pytest.raises(ValueError, match="counts a negative number of rows") as info:
        EpochViews(reader)(0)
    assert repr(reader) in str(info.value)
