"""fastdata.loader._resume_checks: a loaded state's sections checked one by one against the
loader (its Layout) — the sampler's, the workers' entries, their snapshots — each problem a
ResumeError naming the field. (Whole states through ``plan``: test_resume.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from fastdata.errors import ResumeError
from fastdata.loader import _rng
from fastdata.loader._indices import IndexPlan
from fastdata.loader._resume_checks import (
    Layout,
    check_sampler,
    flag,
    index_plan,
    next_epoch,
    present,
    worker_plans,
)
from fastdata.loader._worker_side import WorkerPlan

SAMPLER = {"type": "SequentialSampler", "dataset_len": 10, "drop_last": False, "epoch": None}


def test_a_missing_field_and_a_flag_that_is_no_bool_are_named() -> None:
    present({"a": 1}, ("a",), "")
    with pytest.raises(ResumeError, match="the state's sampler has no 'b'"):
        present({"a": 1}, ("a", "b"), "sampler ")
    assert flag({"ended": True}, "ended") is True
    with pytest.raises(ResumeError, match="ended=1 is not true or false"):
        flag({"ended": 1}, "ended")


def sampler_state(epoch_done: bool, **sampler: Any) -> dict[str, Any]:
    return {"epoch_done": epoch_done, "sampler": {**SAMPLER, **sampler}}


def test_a_sampler_section_must_be_the_loaders() -> None:
    layout = Layout("map", 2, False, sampler=dict(SAMPLER))
    assert check_sampler(sampler_state(True), layout) == SAMPLER
    with pytest.raises(ResumeError, match="dataset_len=11 but this loader has dataset_len=10"):
        check_sampler(sampler_state(True, dataset_len=11), layout)
    with pytest.raises(ResumeError, match="sampler=RandomSampler but this loader"):
        check_sampler(sampler_state(True, type="RandomSampler"), layout)
    with pytest.raises(ResumeError, match="sampler epoch=-1 is corrupt"):
        check_sampler(sampler_state(True, epoch=-1), Layout("map", 2, False, sampler=SAMPLER))


def test_a_position_within_an_epoch_is_required_exactly_within_one() -> None:
    layout = Layout("map", 2, False, sampler=dict(SAMPLER))
    with pytest.raises(ResumeError, match="sampler has no 'start'"):
        check_sampler(sampler_state(False), layout)
    with pytest.raises(ResumeError, match="holds a position within an epoch"):
        check_sampler(sampler_state(True, tasks=3), layout)


def position(**changes: Any) -> dict[str, Any]:
    start = {"iter": {"rng": _rng.capture(), "generators": []}, "draw": None}
    return {"start": start, "states": None, "tasks": 0, "units": 0, "done": [], **changes}


def test_a_sampler_position_becomes_an_index_plan() -> None:
    assert index_plan(position(start=None), (), 0) is None  # saved before the first batch
    found = index_plan(position(tasks=2, units=6, done=[[4, 3]], start=None,
                                states={"sampler": {"i": 6}}), ("sampler",), 0)  # fmt: skip
    assert found == IndexPlan(start=None, states={"sampler": {"i": 6}}, tasks=2, units=6,
                              done=((4, 3),))  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "stateful", "words"),
    [
        ({"tasks": 1, "units": 3}, (), r"consumed batches before its first draw"),
        ({"tasks": 1, "start": None}, (), "neither its first-draw randomness"),
        ({"tasks": 1, "done": [[1, -1]]}, (), r"done=\[\[1, -1\]\] is corrupt"),
        ({"start": None, "states": {"other": 1}}, (), r"states=\{'other': 1\}"),
        ({"start": None, "states": {"sampler": 1}}, (), "holds a sampler state, but"),
        ({"start": None, "states": {"iterator": 1}}, ("batch_sampler",), "no batch_sampler"),
    ],
)
def test_a_corrupt_sampler_position_is_refused(
    changes: dict[str, Any], stateful: tuple[str, ...], words: str
) -> None:
    with pytest.raises(ResumeError, match=words):
        index_plan(position(**changes), stateful, 0)


def snapshot(batches: int, own: bool = False) -> dict[str, Any]:
    return {"batches": batches, "items": 2 * batches, "dataset": None, "iterator": {"i": 1},
            "rng": _rng.capture(), "own": own}  # fmt: skip


def entry(batches: int, ended: bool = False) -> dict[str, Any]:
    return {"batches": batches, "items": 2 * batches, "ended": ended, "snapshot": snapshot(batches)}


def workers_state(*entries: Any, epoch_done: bool = False, next_worker: int = 1) -> dict[str, Any]:
    return {
        "epoch_done": epoch_done, "persistent_workers": False, "num_workers": len(entries),
        "batches": sum(e["batches"] for e in entries if e), "workers": list(entries),
        "next_worker": next_worker,
    }  # fmt: skip


def test_each_workers_entry_becomes_its_plan_and_report() -> None:
    state = workers_state(entry(2), None, entry(1, ended=True))
    plans, reports, first = worker_plans(state, Layout("iterable", 3, False))
    assert set(plans) == {0, 2} and first == 1
    assert (plans[0].batches, plans[0].items, plans[2].ended) == (2, 4, True)
    assert reports[1] is None and reports[2]["worker"] == 2


@pytest.mark.parametrize(
    ("state", "words"),
    [
        (workers_state(entry(1, ended=True), entry(1)), "a map-style dataset's workers"),
        (workers_state(entry(1), entry(1), next_worker=2), "next_worker=2"),
        ({**workers_state(entry(1), entry(1)), "batches": 5}, "batches=5 but its workers made 2"),
    ],
)
def test_workers_entries_that_cannot_be_are_refused(state: dict[str, Any], words: str) -> None:
    with pytest.raises(ResumeError, match=words):
        worker_plans(state, Layout("map", 2, False))


def test_another_number_of_workers_resumes_indices_only() -> None:
    state = workers_state(entry(1), entry(1))
    with pytest.raises(ResumeError, match="resume with the saved num_workers"):
        worker_plans(state, Layout("iterable", 3, False))
    with pytest.warns(UserWarning, match="every index resumes exactly"):
        assert worker_plans(state, Layout("map", 3, False)) == ({}, [], 0)


@pytest.mark.parametrize(("saved", "now"), [(0, 1), (1, 0), (0, 2)])
def test_draws_moving_between_the_training_process_and_workers_are_warned_of(
    saved: int, now: int
) -> None:
    """num_workers=0 draws in the training process, a worker in its own seeded process:
    the indices resume, the draws cannot (the state saved without workers holds no worker
    snapshot, so nothing else would say so)."""
    plain = {"batches": 1, "items": 2, "ended": False, "snapshot": None}
    state = {**workers_state(plain, next_worker=0), "num_workers": saved}
    with pytest.warns(UserWarning, match=f"saved with num_workers={saved} with num_workers={now}"):
        plans, _, _ = worker_plans(state, Layout("map", now, False))
    assert set(plans) == ({0} if max(saved, 1) == max(now, 1) else set())


def test_the_next_epoch_starts_from_a_workers_final_snapshot_with_nothing_to_skip() -> None:
    after = next_epoch(WorkerPlan(snapshot=snapshot(3), batches=3, items=6, ended=True))
    assert after.snapshot is not None and (after.batches, after.items) == (0, 0)
    assert (after.snapshot["batches"], after.snapshot["iterator"]) == (0, None)
    own = next_epoch(WorkerPlan(snapshot=snapshot(3, own=True)))
    assert own.snapshot is not None and own.snapshot["iterator"] == {"i": 1}
    assert next_epoch(WorkerPlan(snapshot=None)) == WorkerPlan(snapshot=None)
