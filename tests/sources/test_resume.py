"""fastdata.sources.resume: the checks a loaded stream state must pass, where it puts the next
iteration, and a loaded position taken once by the readers of one iteration."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import fastdata as fd
from fastdata.errors import ResumeError
from fastdata.sources.elastic import Handover
from fastdata.sources.resume import Pending, check_state, resume_point, validate
from fastdata.sources.state import STATE_VERSION, Delivered, Resume, state_of

from .stream_readers import Units


def stream(rank: int = 0, world_size: int = 1, rows: tuple[int, ...] = (10, 7, 9, 6)) -> Any:
    return fd.PlannedStream(Units(list(rows)), batch_size=2, rank=rank, world_size=world_size)


def point(on: Any, state: Any, **kwargs: Any) -> Any:
    """Where ``state`` puts ``on``'s next iteration."""
    return resume_point(on, check_state(on, state), **kwargs)


# --------------------------------------------------------------------------- loading a state
def saved(batches: int = 3, **where: Any) -> dict[str, Any]:
    return stream(**where).state_dict(Delivered(batches, readers=2))


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
    epoch, handovers, resume = point(stream(), state, num_workers=2)
    assert (epoch, handovers) == (0, ())
    assert resume == Resume(2, tuple(state["consumed"]), state["rotations"][0], (0, 0))


def test_another_layout_hands_the_rest_over() -> None:
    state = saved(batches=3)
    epoch, handovers, resume = point(stream(), state, num_workers=3)
    assert epoch == 0
    assert handovers == (Handover(1, 2, tuple(state["consumed"])),)
    assert resume == Resume(3, (0, 0, 0), 0, (0, 0, 0))


def test_a_finished_epoch_continues_with_the_next_one() -> None:
    done = saved(batches=1_000)
    assert point(stream(), done, num_workers=2)[2] is None
    assert point(stream(), done, num_workers=2, end_continues=False)[2] is not None


def test_a_state_knowing_one_rank_only_loads_on_that_rank() -> None:
    own = state_of(
        stream(rank=1, world_size=2), 2, num_readers=2, items_per_batch=1, drop_last=False,
        own=(0, [(2, 0), (2, 0)]),
    )  # fmt: skip
    with pytest.raises(ResumeError, match="gather_state"):
        point(stream(rank=0, world_size=2), own, num_workers=2)
    assert point(stream(rank=1, world_size=2), own, num_workers=2)[2] is not None


# --------------------------------------------------------------------------- taken once
class Worker:
    """What torch's get_worker_info() tells a worker: its id and seed (base seed + id)."""

    def __init__(self, worker_id: int, base_seed: int) -> None:
        self.id, self.seed = worker_id, base_seed + worker_id


def test_a_loaded_position_is_taken_by_the_readers_of_one_iteration_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resume = Resume(2, consumed=(4, 6), rotation=1, offsets=(0, 0))
    pending = Pending(resume)
    taking = Worker(0, 100)
    monkeypatch.setattr("fastdata.sources.resume.get_worker_info", lambda: taking)
    assert not pending.taken and pending.take(0, 2) == resume
    assert pending.taken
    taking = Worker(1, 100)  # its sibling, starting later: the same iteration
    assert pending.take(1, 2) == resume
    for later in (Worker(0, 7), Worker(1, 7)):  # the next iteration's workers
        taking = later
        assert pending.take(later.id, 2) is None
    taking = Worker(0, 100)  # the same base seed again (a generator seeded alike)
    assert pending.take(0, 2) is None


def test_a_later_iteration_finds_the_position_taken_also_where_a_reader_never_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pending = Pending(Resume(2, consumed=(4, 6), rotation=0, offsets=(0, 0)))
    taking = Worker(0, 100)
    monkeypatch.setattr("fastdata.sources.resume.get_worker_info", lambda: taking)
    assert pending.take(0, 2) is not None  # worker 1 of that iteration never started
    taking = Worker(1, 55)
    assert pending.take(1, 2) is None


def test_a_position_loaded_for_other_readers_is_refused_until_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pending = Pending(Resume(2, consumed=(4, 6), rotation=0, offsets=(0, 0)))
    monkeypatch.setattr("fastdata.sources.resume.get_worker_info", lambda: Worker(0, 1))
    with pytest.raises(ResumeError, match=r"loaded for 2 reader\(s\) per rank, and 3 read"):
        pending.take(0, 3)
    assert not pending.taken


@pytest.mark.parametrize("readers", [0, 2])
def test_torchs_loader_resumes_once_then_reads_the_epoch_again(readers: int) -> None:
    """A stream loaded and read by torch's own DataLoader: the first iteration continues
    the state, the next one (the same epoch, set_epoch not called) reads it in full."""

    def rows(made: Any) -> list[int]:
        return sorted(i for batch in made for i in batch["id"].tolist())

    full = rows(torch.utils.data.DataLoader(stream(), batch_size=None))
    state = saved(batches=3) if readers else stream().state_dict(Delivered(3))
    again = stream()
    again.load_state_dict(state, num_workers=max(readers, 1))
    assert again.resume is not None
    made = torch.utils.data.DataLoader(again, batch_size=None, num_workers=readers)
    rest = rows(made)
    assert len(rest) == len(full) - sum(state["consumed"]) and set(rest) < set(full)
    assert again.resume is None
    assert rows(made) == full
