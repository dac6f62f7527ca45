"""A stream's resume state: fastdata.sources.state (what it holds, making it, the rows consumed
after some batches, merging ranks' states) and fastdata.sources._state (the checks a loaded
state must pass, and where it puts the next iteration). The two modules are the two halves of
one state, so one test module covers both."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdata as fd
from fastdata.errors import ResumeError
from fastdata.sources._state import Resume, check_state, resume_point, validate
from fastdata.sources.elastic import Handover
from fastdata.sources.state import (
    STATE_VERSION,
    consumed_after,
    handover_dict,
    merge,
    rank_batches,
    state_of,
)


class Units:
    """A reader of units of the given row counts, row ``i`` of a unit being ``{"id": i}``."""

    def __init__(self, rows: list[int]) -> None:
        self.rows = rows

    def unit_rows(self) -> list[int]:
        return self.rows

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        return pa.table({"id": list(range(start, stop))})

    def location(self, unit: int, row: int) -> dict[str, Any]:
        return {"unit": unit, "row": row}

    def identity(self) -> dict[str, Any]:
        return {"rows": list(self.rows)}


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


# --------------------------------------------------------------------------- loading a state
def saved(batches: int = 3, **where: Any) -> dict[str, Any]:
    return stream(**where).state_at(batches, num_readers=2)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("version", STATE_VERSION - 1, "state version"),
        ("type", "ParquetStream", "saved by a 'ParquetStream'"),
        ("world_size", 0, "world_size"),
        ("batches", [1, 2], "batches"),
        ("consumed", "many", "consumed"),
        ("rotations", [5], "rotations"),
        ("known", [0, 0], "known"),
        ("handovers", {}, "handovers"),
        ("settings", None, "settings"),
    ],
)
def test_a_malformed_state_is_refused_naming_the_field(field: str, value: Any, words: str) -> None:
    state = saved()
    state[field] = value
    with pytest.raises(ResumeError, match=words):
        validate(state, type_name="PlannedStream")


def test_a_state_of_other_settings_or_data_is_refused() -> None:
    state = saved()
    with pytest.raises(ResumeError, match="batch_size"):
        check_state(fd.PlannedStream(Units([10, 7, 9, 6]), batch_size=3), state)
    with pytest.raises(ResumeError, match="data"):
        check_state(stream(rows=(10, 7, 9, 5)), state)


def test_a_state_counting_more_rows_than_a_slot_reads_is_refused() -> None:
    state = saved()
    state["consumed"][0] = 1_000
    with pytest.raises(ResumeError, match=r"consumed\[0\]=1000"):
        check_state(stream(), state)


def test_offsets_are_refused_on_a_stream_of_whole_rows() -> None:
    state = saved()
    state["offsets"][0] = 1
    with pytest.raises(ResumeError, match="offsets"):
        check_state(stream(), state)


def test_the_same_layout_resumes_at_the_saved_counts() -> None:
    state = saved(batches=3)
    epoch, handovers, resume = resume_point(stream(), state, num_workers=2)
    assert (epoch, handovers) == (0, ())
    assert resume == Resume(2, tuple(state["consumed"]), state["rotations"][0], (0, 0))


def test_another_layout_hands_the_rest_over() -> None:
    state = saved(batches=3)
    epoch, handovers, resume = resume_point(stream(), state, num_workers=3)
    assert epoch == 0
    assert handovers == (Handover(1, 2, tuple(state["consumed"])),)
    assert resume == Resume(3, (0, 0, 0), 0, (0, 0, 0))


def test_a_finished_epoch_continues_with_the_next_one() -> None:
    done = saved(batches=1_000)
    assert resume_point(stream(), done, num_workers=2)[2] is None
    assert resume_point(stream(), done, num_workers=2, end_continues=False)[2] is not None


def test_a_state_knowing_one_rank_only_loads_on_that_rank() -> None:
    own = state_of(
        stream(rank=1, world_size=2), 2, num_readers=2, items_per_batch=1, drop_last=False,
        own=(0, [(2, 0), (2, 0)]),
    )  # fmt: skip
    with pytest.raises(ResumeError, match="gather_state"):
        resume_point(stream(rank=0, world_size=2), own, num_workers=2)
    assert resume_point(stream(rank=1, world_size=2), own, num_workers=2)[2] is not None


# --------------------------------------------------------------------------- merging ranks
def ranks_states(batches: list[int]) -> list[dict[str, Any]]:
    return [
        stream(rank=r, world_size=len(batches)).state_at(b, num_readers=2)
        for r, b in enumerate(batches)
    ]


def test_merged_states_hold_each_ranks_own_counts() -> None:
    states = ranks_states([2, 4])
    with pytest.warns(UserWarning, match="not in lockstep"):
        merged = merge(copy.deepcopy(states))
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
