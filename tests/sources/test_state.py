"""fastdata.sources.state: what a stream's resume state holds, making it from what the readers
delivered, the rows consumed after some batches, and merging ranks' states (loading one is
tests/sources/test_resume.py)."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdata as fd
from fastdata.errors import ResumeError
from fastdata.sources.elastic import Handover
from fastdata.sources.resume import check_state
from fastdata.sources.state import (
    STATE_VERSION,
    Delivered,
    Resume,
    consumed_after,
    handover_dict,
    merge,
    rank_batches,
    state_of,
    taken_out_of_turn,
)

from .stream_readers import Units


def stream(rank: int = 0, world_size: int = 1, rows: tuple[int, ...] = (10, 7, 9, 6)) -> Any:
    return fd.PlannedStream(Units(list(rows)), batch_size=2, rank=rank, world_size=world_size)


# --------------------------------------------------------------------------- batches and rows
def simulated_batches(rows: int, rows_per_item: int, items_per_batch: int, drop: bool) -> int:
    """Batches of one worker, counted by cutting its rows one item and one batch at a time."""
    items = []
    while rows > 0:
        items.append(min(rows, rows_per_item))
        rows -= items[-1]
    batches = [items[i : i + items_per_batch] for i in range(0, len(items), items_per_batch)]
    if drop and batches and len(batches[-1]) < items_per_batch:
        batches.pop()
    return len(batches)


sizes = st.integers(1, 5)
worker_rows = st.lists(st.integers(0, 40), min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(worker_rows, sizes, sizes, st.booleans())
def test_rank_batches_counts_each_workers_batches(
    rows: list[int], per_item: int, per_batch: int, drop: bool
) -> None:
    expected = [simulated_batches(n, per_item, per_batch, drop) for n in rows]
    assert rank_batches(rows, per_item, per_batch, drop) == expected


def simulated_round_robin(batches: list[int], taken: int) -> tuple[list[int], int]:
    """torch's in-order hand-over: one batch from each worker in turn, exhausted ones skipped;
    returns each worker's delivered batches and the worker asked next."""
    done, turn = [0] * len(batches), 0
    for _ in range(taken):
        while done[turn] == batches[turn]:
            turn = (turn + 1) % len(batches)
        done[turn] += 1
        turn = (turn + 1) % len(batches)
    return done, turn


def next_with_batches(turn: int, done: list[int], batches: list[int]) -> int | None:
    """The worker asked next from ``turn``, exhausted ones skipped (None: all are)."""
    for step in range(len(batches)):
        worker = (turn + step) % len(batches)
        if done[worker] < batches[worker]:
            return worker
    return None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(worker_rows, min_size=1, max_size=3).filter(
        lambda ranks: len({len(r) for r in ranks}) == 1
    ),
    sizes,
    sizes,
    st.booleans(),
    st.data(),
)
def test_consumed_after_is_what_a_round_robin_hands_over(
    slot_rows: list[list[int]], per_item: int, per_batch: int, drop: bool, data: Any
) -> None:
    per_rank = [rank_batches(rows, per_item, per_batch, drop) for rows in slot_rows]
    taken = [data.draw(st.integers(0, sum(b) + 2)) for b in per_rank]
    consumed, rotations = consumed_after(
        taken, slot_rows, rows_per_item=per_item, items_per_batch=per_batch, drop_last=drop
    )
    workers = len(slot_rows[0])
    for rank, (rows, batches) in enumerate(zip(slot_rows, per_rank, strict=True)):
        done, turn = simulated_round_robin(batches, min(taken[rank], sum(batches)))
        mine = consumed[rank * workers : (rank + 1) * workers]
        # a finished worker consumed all its rows (a dropped partial batch's too)
        assert mine == [
            n if d == b else d * per_item * per_batch
            for n, d, b in zip(rows, done, batches, strict=True)
        ]
        assert next_with_batches(rotations[rank], done, batches) == next_with_batches(
            turn, done, batches
        )


def test_a_handover_is_plain_data() -> None:
    handover = Handover(2, 3, (1, 2, 3, 4, 5, 6))
    assert handover_dict(handover) == {
        "world_size": 2,
        "num_workers": 3,
        "consumed": [1, 2, 3, 4, 5, 6],
    }


# --------------------------------------------------------------------------- making a state
def test_a_state_holds_the_layout_the_counts_and_what_was_read() -> None:
    state = state_of(stream(rank=1, world_size=2), 3, num_readers=2, items_per_batch=1,
                     drop_last=False)  # fmt: skip
    assert state["type"] == "PlannedStream"
    assert state["version"] == STATE_VERSION
    assert (state["rank"], state["world_size"], state["num_workers"]) == (1, 2, 2)
    assert state["batches"] == [3, 3]  # every rank in lockstep
    assert state["known"] == [0, 1]
    assert len(state["consumed"]) == 4 and state["offsets"] == [0, 0, 0, 0]
    assert state["data"] == {"rows": [10, 7, 9, 6]}
    assert sum(state["consumed"]) == 2 * 3 * 2  # 3 batches of 2 rows on each of 2 ranks


def test_a_state_with_own_positions_knows_only_its_rank() -> None:
    own = (1, [(4, 0), (3, 1)])
    state = state_of(
        stream(rank=1, world_size=2), 5, num_readers=2, items_per_batch=1, drop_last=False,
        own=own,
    )  # fmt: skip
    assert state["known"] == [1]
    assert state["consumed"][2:] == [4, 3] and state["offsets"][2:] == [0, 1]
    assert state["rotations"][1] == 1 and state["batches"][1] == 5


# --------------------------------------------------------------------------- merging ranks
def ranks_states(batches: list[int]) -> list[dict[str, Any]]:
    return [
        stream(rank=r, world_size=len(batches)).state_dict(Delivered(b, readers=2))
        for r, b in enumerate(batches)
    ]


def test_merged_states_hold_each_ranks_own_counts() -> None:
    states = ranks_states([2, 4])
    with pytest.warns(UserWarning, match="not in lockstep") as warned:
        merged = merge(copy.deepcopy(states))
    assert warned[0].filename == __file__
    assert merged["batches"] == [2, 4]
    assert merged["consumed"] == states[0]["consumed"][:2] + states[1]["consumed"][2:]
    assert merged["rotations"] == [states[0]["rotations"][0], states[1]["rotations"][1]]
    assert merged["known"] == [0, 1]
    check_state(stream(rank=0, world_size=2), merged)


def test_lockstep_states_merge_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        merged = merge(ranks_states([3, 3]))
    assert merged["batches"] == [3, 3]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda s: s[:1], "1 states for a job of world_size=2"),
        (lambda s: s[::-1], r"states\[0\] is rank 1's"),
        (lambda s: [s[0], {**s[1], "epoch": 1}], "differ in epoch"),
        (lambda s: [s[0], {**s[1], "data": {"rows": []}}], "differ in data"),
    ],
)
def test_states_of_another_job_are_not_merged(change: Any, words: str) -> None:
    with pytest.raises(ResumeError, match=words):
        merge(change(ranks_states([3, 3])))


def test_out_of_turn_each_reader_counts_from_where_it_began() -> None:
    # 3 readers of slots reading 20, 9 and 30 rows; batches of 4 rows
    assert taken_out_of_turn([2, 0, 1], [20, 9, 30], 4, None) == [8, 0, 4]
    start = Resume(3, consumed=(4, 8, 0), rotation=1, offsets=(0, 0, 0))
    # worker w reads slot (w + 1) % 3: worker 0 slot 1 (capped at its 9 rows), worker 2 slot 0
    assert taken_out_of_turn([2, 0, 1], [20, 9, 30], 4, start) == [8, 9, 0]
