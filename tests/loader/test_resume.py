"""fastdata.loader._resume: states made from an epoch's facts, read back through JSON into
the plan that continues them — map-style (in order and out of order), iterable and stream
layouts, within an epoch and between epochs — and every malformed field refused with a
:class:`~fastdata.ResumeError` that names it."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, RandomSampler

from fastdata.errors import ResumeError
from fastdata.loader import _rng
from fastdata.loader._indices import IndexPlan, Indices, sampler_settings, save_generators
from fastdata.loader._jsonable import TAG, encode
from fastdata.loader._record import Position, Record
from fastdata.loader._resume import make_state, plan, position_of
from fastdata.loader._resume_checks import Layout
from fastdata.loader._worker_side import WorkerPlan
from fastdata.sources import STATE_VERSION

N, SIZE = 12, 3
SAMPLER = {
    "type": "RandomSampler",
    "dataset_len": N,
    "drop_last": False,
    "epoch": None,
    "settings": sampler_settings(RandomSampler(range(N))),
}


def map_layout(num_workers: int = 2, **changes: Any) -> Layout:
    """The layout of a 2-worker loader over a shuffled sampler with a generator."""
    fields = {"num_workers": num_workers, "persistent": False, "generators": 1, **changes}
    return Layout("map", sampler=dict(SAMPLER), **fields)


def snapshot(batches: int, items: int, dataset: Any = None) -> dict[str, Any]:
    """A map-style worker's snapshot, as fastdata.loader._worker_side takes it."""
    return {
        "batches": batches,
        "items": items,
        "dataset": None if dataset is None else encode(dataset),
        "iterator": None,
        "own": False,
        "rng": _rng.capture(),
    }


def report(worker: int, batches: int, snap: dict[str, Any] | None) -> dict[str, Any]:
    items = batches * SIZE
    return {"worker": worker, "batches": batches, "items": items, "ended": False, "snapshot": snap}


def map_epoch(order: list[int]) -> tuple[Record, Indices]:
    """A 2-worker epoch over a shuffled sampler whose batches (1, 2, ...) reach the consumer
    in ``order``, worker ``task % 2`` having made batch ``task``."""
    sampler = RandomSampler(range(N), generator=torch.Generator().manual_seed(1))
    indices = Indices(sampler, BatchSampler(sampler, SIZE, False), None, None)
    positions = {}
    for _ in iter(indices):
        at = indices.position
        positions[at.tasks] = Position(at.tasks, at.units, at.first, None)
    record = Record(2)
    made = [0, 0]
    for task in order:
        worker = (task - 1) % 2
        made[worker] += 1
        snap = snapshot(made[worker], made[worker] * SIZE, {"seen": torch.arange(made[worker])})
        record.handed_out(worker, report(worker, made[worker], snap), positions[task], 1 - worker)
    record.base_seed = 2**62 + 5
    return record, indices


def map_state(order: tuple[int, ...] = (1, 2, 3)) -> dict[str, Any]:
    record, indices = map_epoch(list(order))
    state = make_state(
        map_layout(),
        record,
        rng=_rng.capture(),
        generators=save_generators(indices.generators),
        start=indices.start,
    )
    return json.loads(json.dumps(state))


def test_a_map_style_state_plans_each_workers_resume_and_the_samplers_position() -> None:
    state = map_state((1, 2, 3))
    assert state["version"] == STATE_VERSION and state["kind"] == "map"
    loaded = plan(state, map_layout())
    assert not loaded.epoch_done and loaded.batches == 3
    assert loaded.base_seed == 2**62 + 5
    assert loaded.first_worker == 1  # worker 0 made batch 3: worker 1's turn
    assert loaded.workers.keys() == {0, 1}
    assert (loaded.workers[0].batches, loaded.workers[0].items) == (2, 6)
    assert (loaded.workers[1].batches, loaded.workers[1].items) == (1, 3)
    assert loaded.workers[0].snapshot == state["workers"][0]["snapshot"]
    assert [r["worker"] for r in loaded.reports] == [0, 1]
    assert loaded.indices == IndexPlan(
        start=state["sampler"]["start"], states=None, tasks=3, units=9, done=()
    )
    assert loaded.rng == state["rng"] and loaded.generators == state["generators"]
    assert loaded.state == state
    assert position_of(loaded.indices) == Position(3, 9, 0, None)


def test_batches_consumed_out_of_order_are_planned_as_done_beyond_the_prefix() -> None:
    state = map_state((2, 1, 4))  # batch 3 not yet: 4 is beyond the prefix of 1 and 2
    loaded = plan(state, map_layout())
    assert loaded.indices is not None
    assert (loaded.indices.tasks, loaded.indices.units) == (2, 6)
    assert loaded.indices.done == ((3, 3),)  # batch 4: units 9..11, 3 after the prefix


def test_a_state_between_epochs_plans_a_fresh_epoch() -> None:
    record, indices = map_epoch([1, 2, 3, 4])
    record.end()
    layout = map_layout()
    generators = save_generators(indices.generators)
    state = make_state(layout, record, rng=_rng.capture(), generators=generators)
    state = json.loads(json.dumps(state))
    assert state["epoch_done"] and state["batches"] == 0 and state["base_seed"] is None
    assert state["workers"] == [] and "start" not in state["sampler"]  # fresh workers
    loaded = plan(state, layout)
    assert loaded.epoch_done and loaded.indices is None and loaded.workers == {}


def test_a_loader_that_never_iterated_saves_a_state_between_epochs() -> None:
    layout = map_layout()
    rng = _rng.capture()
    state = make_state(layout, None, rng=rng, generators=[base64.b64encode(bytes(5056)).decode()])
    loaded = plan(json.loads(json.dumps(state)), layout)
    assert loaded.epoch_done and loaded.indices is None and loaded.rng == rng


def iterable_state(*, persistent: bool, end: bool) -> tuple[dict[str, Any], Layout]:
    """A 2-worker iterable epoch: worker 0 made two batches of 2 items (a snapshot with the
    second), worker 1 one (none); ``end``: both iterators ended and the consumer saw it."""
    layout = Layout("iterable", 2, persistent)
    record = Record(2)
    snap = {**snapshot(2, 4, {"position": 4}), "iterator": encode({"at": 1})}
    record.handed_out(0, {**report(0, 1, None), "items": 2}, None, 1)
    record.handed_out(1, {**report(1, 1, None), "items": 2}, None, 0)
    record.handed_out(0, {**report(0, 2, snap), "items": 4}, None, 1)
    if end:
        final = {**snap, "iterator": encode({"at": 9}), "batches": 2}
        for worker in (0, 1):
            record.reported(worker, {**report(worker, 2, final), "ended": True})
        record.end()
    record.base_seed = 77
    state = make_state(layout, record, rng=_rng.capture(), generators=[])
    return json.loads(json.dumps(state)), layout


def test_an_iterable_state_plans_each_worker_from_its_snapshot() -> None:
    state, layout = iterable_state(persistent=False, end=False)
    loaded = plan(state, layout)
    assert loaded.indices is None and loaded.base_seed == 77 and loaded.first_worker == 1
    assert loaded.workers[0] == WorkerPlan(
        snapshot=state["workers"][0]["snapshot"], batches=2, items=4, ended=False
    )
    assert loaded.workers[1] == WorkerPlan(snapshot=None, batches=1, items=2, ended=False)


def test_persistent_workers_carry_their_last_snapshot_into_the_next_epoch() -> None:
    state, layout = iterable_state(persistent=True, end=True)
    assert state["epoch_done"] and state["base_seed"] == 77  # the workers live on
    loaded = plan(state, layout)
    for worker in (0, 1):
        snap = loaded.workers[worker].snapshot
        assert snap is not None and snap["dataset"] == encode({"position": 4})
        assert (snap["batches"], snap["items"], snap["iterator"]) == (0, 0, None)
        assert loaded.workers[worker].batches == loaded.workers[worker].items == 0
    assert loaded.reports == [] and loaded.first_worker == 0


def test_fresh_workers_between_epochs_keep_neither_seed_nor_snapshots() -> None:
    state, layout = iterable_state(persistent=False, end=True)
    assert state["base_seed"] is None and state["workers"] == []
    assert plan(state, layout).workers == {}


def stream_state(batches: int = 4) -> tuple[dict[str, Any], Layout]:
    layout = Layout("stream", 2, False)
    record = Record(2, batches=batches)
    record.base_seed = 12345  # drawn by the iterator that handed the batches out
    part = {"batches": batches, "batch_size": None, "drop_last": False, "in_order": True}
    part["dataset"] = {"num_workers": 2, "opaque": [1, 2]}  # the stream's own, checked there
    state = make_state(layout, record, rng=_rng.capture(), generators=[], stream=part)
    return json.loads(json.dumps(state)), layout


def test_a_stream_state_keeps_the_streams_part_and_plans_the_loaders() -> None:
    state, layout = stream_state()
    assert state["dataset"] == {"num_workers": 2, "opaque": [1, 2]}
    assert "sampler" not in state and "workers" not in state
    loaded = plan(state, layout)
    assert not loaded.epoch_done and loaded.batches == 4 and loaded.workers == {}


def test_a_stream_state_whose_worker_counts_disagree_is_refused() -> None:
    state, layout = stream_state()
    state["dataset"]["num_workers"] = 3
    with pytest.raises(ResumeError, match=r"num_workers=2 disagrees with its dataset's num_work"):
        plan(state, layout)


Mutation = Callable[[dict[str, Any]], Any]


def _set(path: str, value: Any) -> Mutation:
    def mutate(state: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = state
        for name in parents:
            node = node[int(name)] if isinstance(node, list) else node[name]
        if isinstance(node, list):
            node[int(last)] = value
        elif value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return mutate


_DELETE = object()
MALFORMED: list[tuple[str, Mutation, str]] = [
    ("version", _set("version", 99), r"state version 99"),
    ("kind", _set("kind", "iterable"), r"saved for an iterable dataset"),
    ("kind", _set("kind", "tensor"), r"saved for kind='tensor'"),
    ("epoch_done", _set("epoch_done", "no"), r"epoch_done='no' is not true or false"),
    (
        "epoch_done",
        lambda s: s.update(epoch_done=True, base_seed=None),
        r"epoch_done=True\) yet counts batches=3",
    ),
    ("batches", _set("batches", -1), r"batches=-1"),
    ("batches", _set("batches", 4), r"batches=4 but its workers made 3"),
    ("num_workers", _set("num_workers", 5000), r"num_workers=5000"),
    ("num_workers", _set("num_workers", 3), r"3 workers' entries|2 workers' entries"),
    ("persistent_workers", _set("persistent_workers", 1), r"persistent_workers=1"),
    (
        "persistent_workers",
        lambda s: s.update(persistent_workers=True, num_workers=0, workers=s["workers"][:1]),
        r"persistent_workers=True with num_workers=0",
    ),
    ("base_seed", _set("base_seed", 2**63), r"base_seed=9223372036854775808"),
    ("base_seed", _set("base_seed", -(2**63) - 1), r"base_seed=-9223372036854775809"),
    ("base_seed", _set("base_seed", "7"), r"base_seed='7'"),
    ("rng", _set("rng.torch", "AAAA"), r"random generator states are malformed"),
    ("rng", _set("rng", _DELETE), r"has no 'rng'"),
    ("generators", _set("generators", ["AAAA"]), r"generators holds 'AAAA'"),
    ("generators", _set("generators", []), r"has 0 generator\(s\)"),
    ("workers", _set("workers", {"0": None}), r"workers=\{'0': None\} is not a list"),
    ("workers", lambda s: s["workers"].append(None), r"3 workers' entries for num_workers=2"),
    ("workers", _set("workers.0.items", 7), r"delivered 10 items, its sampler position counts 9"),
    ("workers", _set("workers.0.items", "6"), r"items='6'"),
    ("workers", _set("workers.0.ended", 0), r"ended=0 is not true or false"),
    ("workers", _set("workers.1", []), r"workers\[1\] is a list"),
    ("workers", _set("workers.0.snapshot.rng", _DELETE), r"workers\[0\] snapshot has no 'rng'"),
    ("workers", _set("workers.0.snapshot.batches", -2), r"batches=-2"),
    (
        "workers",
        _set("workers.0.snapshot.dataset", {TAG: "bytes"}),
        r"workers\[0\] snapshot dataset cannot be read back",
    ),
    ("next_worker", _set("next_worker", 2), r"next_worker=2 is out of range"),
    ("sampler", _set("sampler.type", "SequentialSampler"), r"sampler=SequentialSampler but"),
    ("sampler", _set("sampler.dataset_len", 13), r"dataset_len=13 but this loader"),
    ("sampler", _set("sampler.drop_last", True), r"drop_last=True but this loader"),
    ("sampler", _set("sampler.settings.replacement", True), r"replacement=True but this loader"),
    ("sampler", _set("sampler.epoch", 3), r"sampler epoch=3 is corrupt"),
    ("sampler", _set("sampler.tasks", -1), r"tasks=-1"),
    ("sampler", _set("sampler.done", [[1]]), r"sampler done=\[\[1\]\] is corrupt"),
    ("sampler", _set("sampler.start.draw", _DELETE), r"sampler start has no 'draw'"),
    ("sampler", _set("sampler.start.iter.generators", [1]), r"sampler start iter generators"),
    ("sampler", _set("sampler.start", None), r"neither its first-draw randomness"),
    ("sampler", _set("sampler.states", {"other": 1}), r"sampler states=\{'other': 1\}"),
    ("sampler", _set("sampler.states", {"sampler": 1}), r"holds a sampler state, but"),
]


@pytest.fixture(scope="module")
def valid() -> dict[str, Any]:
    return map_state((1, 2, 3))


@pytest.mark.parametrize(
    ("field", "mutate", "message"),
    MALFORMED,
    ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(MALFORMED)],
)
def test_a_malformed_field_is_refused_naming_it(
    valid: dict[str, Any], field: str, mutate: Mutation, message: str
) -> None:
    state = copy.deepcopy(valid)
    plan(state, map_layout())  # valid as saved
    mutate(state)
    with pytest.raises(ResumeError, match=message) as caught:
        plan(state, map_layout())
    assert str(caught.value).startswith("cannot resume")


@pytest.mark.parametrize("state", [None, [], "state", 3])
def test_what_is_not_a_dict_is_refused(state: Any) -> None:
    with pytest.raises(ResumeError, match="not a dict; pass what state_dict\\(\\) returned"):
        plan(state, map_layout())


def test_a_state_between_epochs_holding_a_sampler_position_is_refused() -> None:
    state = map_state((1, 2, 3))
    state.update(epoch_done=True, batches=0, base_seed=None, workers=[], next_worker=0)
    with pytest.raises(ResumeError, match="holds a position within an epoch"):
        plan(state, map_layout())
    for name in ("start", "states", "tasks", "units", "done"):
        del state["sampler"][name]
    plan(state, map_layout())  # without it: valid
    state["base_seed"] = 5  # fresh workers between epochs draw their own seed
    with pytest.raises(ResumeError, match="keeps a workers' seed between epochs"):
        plan(state, map_layout())


def test_an_iterable_state_does_not_resume_on_another_number_of_workers() -> None:
    state, _ = iterable_state(persistent=False, end=False)
    with pytest.raises(ResumeError, match="resume with the saved num_workers"):
        plan(state, Layout("iterable", 3, False))


def test_a_map_style_state_resumes_its_indices_on_another_number_of_workers() -> None:
    state = map_state((1, 2, 3))
    with pytest.warns(UserWarning, match="every index resumes exactly"):
        loaded = plan(state, map_layout(num_workers=3))
    assert loaded.workers == {} and loaded.first_worker == 0
    assert loaded.indices is not None and loaded.indices.units == 9


def test_a_loader_built_with_another_sampler_or_generator_is_refused() -> None:
    state = map_state((1, 2, 3))
    with pytest.raises(ResumeError, match="this loader's sampler and generator= hold 2"):
        plan(state, map_layout(generators=2))
    with pytest.raises(ResumeError, match="saved for a map-style dataset, this loader reads a "):
        plan(state, Layout("stream", 2, False))
    with pytest.raises(ResumeError, match="sampler has state_dict\\(\\), but the state holds no"):
        plan(state, map_layout(stateful=("sampler",)))


def test_a_stateful_sampler_saved_before_its_first_batch_resumes() -> None:
    layout = map_layout(stateful=("sampler",))
    sampler = RandomSampler(range(N), generator=torch.Generator().manual_seed(1))
    indices = Indices(sampler, BatchSampler(sampler, SIZE, False), None, None)
    iter(indices)  # the loader's iterator was made; no batch reached the consumer yet
    state = make_state(
        layout,
        Record(2),  # the layout's two workers, neither of which handed out a batch yet
        rng=_rng.capture(),
        generators=save_generators(indices.generators),
        start=indices.start,
    )
    loaded = plan(json.loads(json.dumps(state)), layout)
    assert loaded.indices is None or (loaded.indices.tasks, loaded.indices.units) == (0, 0)


@pytest.mark.parametrize(
    "stored",
    [
        pytest.param(
            {TAG: "tensor", "dtype": "float32", "shape": [3], "data": "AAAAAAAAAAA="},
            id="tensor-bytes-short-of-its-shape",
        ),
        pytest.param(
            {TAG: "mystery", "data": ""},
            id="unknown-kind",
        ),
        pytest.param({TAG: "ndarray", "dtype": "<f4", "shape": [3], "data": ""}, id="array"),
    ],
)
def test_a_user_state_that_cannot_be_read_back_is_refused_naming_where(
    valid: dict[str, Any], stored: dict[str, Any]
) -> None:
    state = copy.deepcopy(valid)
    state["workers"][0]["snapshot"]["dataset"] = {"seen": stored}
    with pytest.raises(ResumeError, match=r"workers\[0\] snapshot dataset"):
        plan(state, map_layout())
