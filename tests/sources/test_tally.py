"""fastdata.sources.tally: a reader's counts, per item; counted as yielded when iterated
directly, or as a loader's consumer gets each batch (with what a reader counted after its
last item once the epoch's end is seen)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastdata.sources.tally import Delivery, Tally, counts_of, reader_row


def counted_items(tally: Tally, sizes: list[int], after: int = 0):
    """Items that each count their size at 0 and one item at 1; ``after`` counted at 0 once
    the last is made."""
    for size in sizes:
        tally.add(0, size)
        tally.add(1, 1)
        yield size
    tally.add(0, after)


def test_iterated_directly_an_item_counts_once_yielded() -> None:
    tally = Tally(2)
    items = tally.track(counted_items(tally, [3, 4, 5], after=7))
    assert tally.totals() == [0, 0]
    next(items)
    assert tally.totals() == [3, 1]
    assert tally.made().tolist() == [3, 1]
    assert list(items) == [4, 5]
    assert tally.totals() == [19, 3]  # what came after the last item too, at the end
    list(tally.track(counted_items(tally, [1])))  # totals add up over iterations
    assert tally.totals() == [20, 4]


def test_under_a_loader_a_batch_counts_when_the_consumer_gets_it() -> None:
    tally = Tally(2)
    tally.reporting = True  # as a fastdata.DataLoader sets it while it makes its iterator
    items = tally.track(counted_items(tally, [3, 4, 5], after=7))
    tally.reporting = False
    delivery = Delivery(tally, 1, in_process=True)
    reports = []
    for _ in items:  # made ahead of the consumer: nothing counted yet
        reports.append(tally.made())
    assert tally.totals() == [0, 0]
    delivery.handed(0, reports[0])
    assert tally.totals() == [3, 1]
    delivery.handed(0, reports[2])  # reports are cumulative: the one before counts once
    assert tally.totals() == [12, 3]
    delivery.end()
    delivery.end()  # (an end seen twice counts once)
    assert tally.totals() == [19, 3]


def test_each_worker_reports_its_own_counts() -> None:
    tally = Tally(1)
    delivery = Delivery(tally, 2, in_process=False)
    delivery.handed(0, np.array([5]))
    delivery.handed(1, np.array([2]))
    delivery.handed(0, np.array([6]))
    assert tally.totals() == [8]
    assert delivery.rows == [1, 2]  # the shared rows of workers 0 and 1 (0: the main process)


def test_every_worker_a_loader_can_have_counts_in_a_row_of_its_own() -> None:
    """Rows were shared modulo 257: with 300 workers, two shared one and their left-over
    rows were added twice (drop_last_tokens 7,720 of 6,000; found by review)."""
    rows = [reader_row(worker) for worker in range(4096)]
    assert len(set(rows)) == 4096 and reader_row(-1) not in rows
    with pytest.raises(ValueError, match="at most 4096 workers"):
        reader_row(4096)


@given(st.integers(1, 9).flatmap(lambda w: st.tuples(st.just(w), st.lists(st.integers(0, w - 1)))))
def test_counts_of_counts_each_value_for_every_width(case: tuple[int, list[int]]) -> None:
    width, values = case
    got = counts_of(np.asarray(values, dtype=np.int16), width)
    assert got.dtype == np.int64
    assert got.tolist() == [values.count(k) for k in range(width)]
