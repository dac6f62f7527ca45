"""fastdata.sources._cursors: the positions the readers of a varying stream write into shared
memory, and the loader reads back from what each worker delivered."""

from __future__ import annotations

from fastdata.sources._cursors import Cursors
from fastdata.sources.state import Resume


def test_a_reader_writes_the_position_after_each_item() -> None:
    cursors = Cursors()
    items = iter([("a", (2, 0)), ("b", (3, 5)), ("c", (7, 0))])
    tracked = cursors.track(items, slot=1, start=(10, 0))
    assert next(tracked) == "a" and cursors.own == (12, 0)
    assert list(tracked) == ["b", "c"] and cursors.own == (17, 0)
    # worker 0 delivered nothing; worker 1 (slot 1) three items: its third position
    assert cursors.positions([0, 3], next_reader=0, start=None) == (0, [(0, 0), (17, 0)])
    assert cursors.positions([0, 2], next_reader=1, start=None) == (1, [(0, 0), (13, 5)])


def test_a_loaded_position_is_where_counting_starts() -> None:
    cursors = Cursors()
    start = Resume(2, consumed=(4, 6), rotation=1, offsets=(0, 3))
    # nothing delivered yet: every slot where the state put it, worker 0 reads slot 1
    assert cursors.positions([0, 0], next_reader=0, start=start) == (1, [(4, 0), (6, 3)])
    list(cursors.track(iter([("x", (1, 0))]), slot=0, start=(4, 0)))
    # worker 1 reads slot (1 + 1) % 2 = 0 under rotation 1
    assert cursors.positions([0, 1], next_reader=0, start=start) == (1, [(5, 0), (6, 3)])
