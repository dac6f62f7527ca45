"""fastdata.loader._record: the facts of one epoch — the consumed prefix of a map-style
sampler's units and the batches consumed out of order beyond it (also across a resume, with
the ranges a loaded state carried), the workers' reports and snapshots, whose turn is next,
and facts held back until the consumer gets their batch."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata.loader._record import Position, Record


def tasks_of(units: list[int], size: int, first_task: int) -> list[tuple[Position, set[int]]]:
    """The batches a standard BatchSampler makes of ``units`` (their offsets in the epoch,
    ascending): each batch's position (as fastdata.loader._indices records it) and units."""
    found = []
    for n, start in enumerate(range(0, len(units), size)):
        taken = units[start : start + size]
        position = Position(first_task + n + 1, taken[-1] + 1, taken[0])
        found.append((position, set(taken)))
    return found


def covered(record: Record) -> set[int]:
    """The units a state made of ``record`` says are consumed: the prefix and the ranges
    beyond it."""
    end = record.prefix.units
    beyond = {end + offset + i for offset, count in record.beyond() for i in range(count)}
    assert not beyond & set(range(end)), "a range beyond the prefix overlaps it"
    return set(range(end)) | beyond


def deliver(record: Record, tasks: list[tuple[Position, set[int]]], rnd: random.Random) -> set:
    """Hand out a random subset of ``tasks`` in a random order; the units handed out."""
    chosen = rnd.sample(tasks, rnd.randint(0, len(tasks)))
    for position, _ in chosen:
        record.handed_out(0, None, position, 0)
    return set().union(*(units for _, units in chosen))


@settings(max_examples=200, deadline=None)
@given(units=st.integers(1, 40), size=st.integers(1, 5), seed=st.integers(0, 2**32))
def test_the_prefix_and_the_ranges_beyond_it_are_exactly_the_delivered_units(
    units: int, size: int, seed: int
) -> None:
    rnd = random.Random(seed)
    record = Record(1)
    tasks = tasks_of(list(range(units)), size, 0)
    delivered = deliver(record, tasks, rnd)
    assert covered(record) == delivered
    # the prefix is the longest run of batches delivered from the first on
    done = {p.tasks for p, units in tasks if units <= delivered}
    assert record.prefix.tasks == next(t for t in itertools.count() if t + 1 not in done)


@settings(max_examples=200, deadline=None)
@given(units=st.integers(1, 40), size=st.integers(1, 5), seed=st.integers(0, 2**32))
def test_a_resumed_record_covers_what_the_state_carried_and_what_came_after(
    units: int, size: int, seed: int
) -> None:
    """Resumed, the sampler skips the units consumed beyond the prefix and batches the rest
    (a batch may then span a carried range); the state saved next still says exactly what
    was consumed, before and after the resume."""
    rnd = random.Random(seed)
    first = Record(1)
    before = deliver(first, tasks_of(list(range(units)), size, 0), rnd)
    prefix = first.prefix
    carried = tuple((offset, count) for offset, count in first.beyond())
    resumed = Record(1, prefix=Position(prefix.tasks, prefix.units), done=carried)
    assert covered(resumed) == before
    rest = [u for u in range(prefix.units, units) if u not in before]
    after = deliver(resumed, tasks_of(rest, size, prefix.tasks), rnd)
    assert covered(resumed) == before | after


def test_handing_out_counts_batches_per_worker_and_keeps_whose_turn_is_next() -> None:
    record = Record(3, batches=5)
    record.handed_out(1, None, None, 2)
    record.handed_out(2, None, None, 0)
    record.handed_out(0, None, None, 1)
    record.handed_out(1, None, None, 2)
    assert record.batches == 9
    assert record.handed == [1, 2, 1]
    assert record.next_worker == 2


def test_reports_replace_the_workers_last_and_keep_the_last_snapshot() -> None:
    record = Record(2, workers=[{"batches": 1, "snapshot": {"at": 1}}, None])
    assert record.snapshots == [{"at": 1}, None]
    record.handed_out(1, {"batches": 1, "snapshot": {"at": "w1"}}, None, 0)
    record.handed_out(0, {"batches": 2, "snapshot": None}, None, 1)  # none due this batch
    assert record.workers == [
        {"batches": 2, "snapshot": None},
        {"batches": 1, "snapshot": {"at": "w1"}},
    ]
    assert record.snapshots == [{"at": 1}, {"at": "w1"}]
    record.reported(0, {"batches": 2, "ended": True, "snapshot": {"at": "end"}})  # alone
    assert record.snapshots[0] == {"at": "end"} and record.batches == 2


def test_batches_sent_to_a_worker_come_back_in_the_order_sent() -> None:
    record = Record(2)
    positions = [Position(t, 3 * t, 3 * t - 3) for t in range(1, 5)]
    for worker, position in zip([0, 1, 0, 1], positions, strict=True):
        record.sent(worker, position)
    assert record.take_sent(1) == positions[1]
    assert record.take_sent(0) == positions[0]
    assert record.take_sent(0) == positions[2]
    assert record.take_sent(1) == positions[3]
    assert record.take_sent(0) is None


def test_deferred_facts_apply_only_as_the_consumer_gets_their_batch() -> None:
    record = Record(2)
    record.deferred = True
    record.arrive("reported", 1, {"batches": 0, "ended": True, "snapshot": None})
    record.arrive("handed_out", 0, {"batches": 1}, Position(1, 2, 0), 1)
    record.arrive("handed_out", 1, {"batches": 1}, Position(2, 4, 2), 0)
    record.arrive("end")
    assert (record.batches, record.workers, record.prefix) == (0, [None, None], Position(0, 0))

    record.commit()  # the consumer got the first batch: the facts up to it, the report too
    assert record.batches == 1 and record.prefix == Position(1, 2, 0)
    assert record.workers[1] == {"batches": 0, "ended": True, "snapshot": None}
    assert record.next_worker == 1

    record.commit()
    assert record.batches == 2 and record.prefix == Position(2, 4, 2) and not record.finished
    record.commit(all_=True)  # the consumer saw the end
    assert record.finished


def test_facts_apply_at_once_when_not_deferred() -> None:
    record = Record(1)
    record.arrive("handed_out", 0, None, Position(1, 1, 0), 0)
    record.arrive("end")
    assert record.batches == 1 and record.finished and record.prefix == Position(1, 1, 0)


def test_a_persistent_workers_next_epoch_starts_from_their_last_snapshots() -> None:
    previous = Record(2)
    previous.base_seed = 5
    end = {"batches": 4, "items": 12, "iterator": {"at": 12}, "rng": "r", "own": False}
    own = {"batches": 3, "items": 9, "iterator": {"at": 9}, "rng": "s", "own": True}
    previous.reported(0, {"batches": 4, "items": 12, "snapshot": end})
    previous.reported(1, {"batches": 3, "items": 9, "snapshot": own})
    record = Record(2)
    record.follow(previous)
    assert record.base_seed == 5
    assert record.snapshots == [
        {"batches": 0, "items": 0, "iterator": None, "rng": "r", "own": False},
        {"batches": 0, "items": 0, "iterator": {"at": 9}, "rng": "s", "own": True},
    ]
    assert end["items"] == 12  # the previous epoch's own record is left as it was
    assert Record(2).snapshots == [None, None]
