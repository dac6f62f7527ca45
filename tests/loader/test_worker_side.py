"""fastdata.loader._worker_side: what a worker does beside fetching, driven here as torch's
fetcher drives it (in this process, where ``get_worker_info()`` is None: worker 0).

An iterable worker pads its last batch with END and the reporting collate turns it back into
the real items (or a report alone, under ``drop_last``); reports count batches and items and
carry a snapshot every ``snapshot_every_n_steps`` batches and at the end; a resumed worker
restores its dataset (before ``iter()``, or after it for a dataset that is its own iterator,
which is never ``iter()``'d twice), its iterator and its generators, and skips exactly what it
had delivered after its snapshot."""

from __future__ import annotations

import itertools
import pickle
import random
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import IterableDataset
from torch.utils.data._utils.collate import default_collate, default_convert

from fastdata.loader import _rng
from fastdata.loader._jsonable import encode
from fastdata.loader._worker_side import (
    END,
    NOTHING,
    Carried,
    IterableSide,
    ReportingCollate,
    WorkerPlan,
    WorkerSide,
    stateful,
)


class Positional(IterableDataset):
    """``n`` items from its position on; Stateful: the position of the next item. It logs
    the calls the loader makes, to check their order."""

    def __init__(self, n: int) -> None:
        self.n, self.position, self.calls = n, 0, []

    def __iter__(self) -> Iterator[int]:
        self.calls.append("iter")
        for i in range(self.position, self.n):
            self.position = i + 1
            yield i
        self.position = 0

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls.append("load")
        self.position = state["position"]


class Plain(IterableDataset):
    """No state: a resume replays it from its start."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.n))


class OwnIterator(IterableDataset):
    """A dataset that is its own iterator and starts over on every ``iter()``."""

    def __init__(self, n: int) -> None:
        self.n, self.at, self.iters = n, 0, 0

    def __iter__(self) -> OwnIterator:
        self.iters += 1
        self.at = 0
        return self

    def __next__(self) -> int:
        if self.at >= self.n:
            raise StopIteration
        self.at += 1
        return self.at - 1

    def state_dict(self) -> dict[str, Any]:
        return {"at": self.at}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.at = state["at"]


def side(
    dataset: Any,
    *,
    batch_size: int | None = 2,
    drop_last: bool = False,
    every: int = 1,
    plans: dict[int, WorkerPlan] | None = None,
    in_process: bool = False,
    rng: bool = False,
    kind: str = "iterable",
) -> WorkerSide:
    batched = batch_size is not None
    return WorkerSide(
        dataset,
        kind=kind,  # type: ignore[arg-type]
        plans=plans or {},
        every=every,
        rng=rng,
        batching=(batched, batch_size, drop_last),
        in_process=in_process,
    )


def fetch(worker: WorkerSide) -> list[Carried]:
    """What torch's iterable fetcher makes of the worker's items: batches of ``batch_size``
    (a short one only at the end, none empty; or single items) through the reporting
    collate."""
    size = worker.batch_size
    collate = ReportingCollate(default_collate if size else default_convert, worker)
    items = IterableSide(worker).__iter__()
    made = []
    while True:
        data = list(itertools.islice(items, size or 1))
        if not data:
            return made
        made.append(collate(data if size else data[0]))


def plain(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.tolist()
    return [plain(b) for b in batch] if isinstance(batch, list) else batch


def values(carried: list[Carried]) -> list[Any]:
    """The batches handed out (not the reports alone), as plain lists."""
    return [plain(c.batch) for c in carried if c.batch is not NOTHING]


@pytest.mark.parametrize(
    ("n", "size", "padding"), [(7, 3, 2), (6, 3, 3), (1, 4, 3), (0, 2, 2), (5, None, 1)]
)
def test_the_last_batch_is_filled_with_end(n: int, size: int | None, padding: int) -> None:
    items = list(side(Plain(n), batch_size=size, in_process=True).iterate())
    assert items[:n] == list(range(n))
    assert items[n:] == [END] * padding


def test_the_collate_takes_end_out_and_reports_the_end_with_the_last_batch() -> None:
    made = fetch(side(Plain(7), batch_size=3))
    assert values(made) == [[0, 1, 2], [3, 4, 5], [6]]
    reports = [c.report for c in made]
    assert [(r["batches"], r["items"], r["ended"]) for r in reports] == [
        (1, 3, False),
        (2, 6, False),
        (3, 7, True),
    ]
    assert all(r["worker"] == 0 for r in reports)


@pytest.mark.parametrize("n", [7, 6])
def test_under_drop_last_a_short_last_batch_leaves_as_a_report_alone(n: int) -> None:
    made = fetch(side(Plain(n), batch_size=3, drop_last=True))
    assert values(made) == [[0, 1, 2], [3, 4, 5]]
    last = made[-1]
    assert last.batch is NOTHING and last.report["ended"] and last.report["batches"] == 2


def test_without_batching_the_end_is_a_report_alone() -> None:
    made = fetch(side(Plain(3), batch_size=None))
    assert [c.batch for c in made[:3]] == [0, 1, 2]
    assert made[3].batch is NOTHING and made[3].report["ended"]
    assert [c.report["batches"] for c in made] == [1, 2, 3, 3]


def test_a_map_style_worker_counts_the_items_of_each_fetch() -> None:
    worker = side({}, kind="map", batch_size=4, rng=True)
    carried = ReportingCollate(default_collate, worker)([1, 2, 3])
    assert carried.batch.tolist() == [1, 2, 3] and carried.report["items"] == 3
    assert carried.report["snapshot"]["rng"] is not None  # its generators, every batch
    single = side({}, kind="map", batch_size=None)
    assert ReportingCollate(default_convert, single)(5).report["items"] == 1


@pytest.mark.parametrize(("every", "due"), [(1, [1, 2, 3, 4, 5]), (2, [2, 4]), (0, [])])
def test_a_stateful_dataset_snapshots_every_n_batches_and_at_its_end(
    every: int, due: list[int]
) -> None:
    made = fetch(side(Positional(10), every=every))
    with_snapshot = [c.report for c in made if c.report["snapshot"] is not None]
    assert [r["batches"] for r in with_snapshot if not r["ended"]] == due
    assert all(
        r["snapshot"]["dataset"] == {"position": 2 * r["batches"]}
        for r in with_snapshot
        if not r["ended"]
    )
    end = made[-1].report
    assert end["ended"] and end["snapshot"] is not None  # where the next epoch starts


def test_without_state_only_the_end_is_snapshotted_and_in_process_nothing_is() -> None:
    made = fetch(side(Plain(5), every=1))
    assert [c.report["snapshot"] is not None for c in made] == [False, False, True]
    made = fetch(side(Positional(5), every=1, in_process=True))
    assert all(c.report["snapshot"] is None for c in made)


def snapshot_after(dataset: Any, batches: int, *, rng: bool = False) -> dict[str, Any]:
    """The snapshot a worker reported with its ``batches``-th batch."""
    made = fetch(side(dataset, every=1, rng=rng))
    return made[batches - 1].report["snapshot"]


def test_a_resumed_worker_restores_before_iter_and_skips_what_it_delivered_after() -> None:
    snap = snapshot_after(Positional(10), 2)  # position 4
    dataset = Positional(10)
    worker = side(dataset, plans={0: WorkerPlan(snap, batches=3, items=6)})
    made = fetch(worker)
    assert dataset.calls == ["load", "iter"]
    assert values(made) == [[6, 7], [8, 9]]
    assert [(c.report["batches"], c.report["items"]) for c in made] == [(4, 8), (5, 10), (5, 10)]


def test_a_worker_without_state_replays_its_iterator_and_skips_what_it_delivered() -> None:
    worker = side(Plain(9), plans={0: WorkerPlan(None, batches=2, items=4)})
    assert values(fetch(worker)) == [[4, 5], [6, 7], [8]]


def test_a_worker_whose_iterator_had_ended_yields_nothing() -> None:
    snap = snapshot_after(Positional(4), 2)
    made = fetch(side(Positional(4), plans={0: WorkerPlan(snap, 2, 4, ended=True)}))
    assert values(made) == [] and made[-1].report["ended"]


def test_the_plan_is_used_once_a_later_epoch_starts_afresh() -> None:
    worker = side(Plain(5), plans={0: WorkerPlan(None, batches=1, items=2)})
    assert values(fetch(worker)) == [[2, 3], [4]]
    assert values(fetch(worker)) == [[0, 1], [2, 3], [4]]


def test_a_dataset_that_is_its_own_iterator_is_restored_after_iter_once() -> None:
    snap = snapshot_after(OwnIterator(9), 2)
    assert snap["own"] and snap["dataset"] is None and snap["iterator"] == {"at": 4}
    dataset = OwnIterator(9)
    made = fetch(side(dataset, plans={0: WorkerPlan(snap, batches=2, items=4)}))
    assert values(made) == [[4, 5], [6, 7], [8]]
    assert dataset.iters == 1  # iter() again would have started it over


def test_a_snapshot_restores_the_workers_generators() -> None:
    """A worker's random augmentations continue as they would have."""

    class Noisy(Positional):
        def __iter__(self) -> Iterator[Any]:
            for i in super().__iter__():
                yield [i, random.random(), float(torch.rand(1))]

    torch.manual_seed(1)
    random.seed(1)
    made = fetch(side(Noisy(6), every=1, rng=True))
    snap = made[0].report["snapshot"]
    random.seed(99)
    torch.manual_seed(99)
    resumed = fetch(side(Noisy(6), plans={0: WorkerPlan(snap, batches=1, items=2)}, rng=True))
    assert values(resumed) == values(made)[1:]


def test_in_process_a_stateless_iterable_saves_what_replays_its_epoch() -> None:
    class Draws(IterableDataset):
        def __iter__(self) -> Iterator[float]:
            return iter(torch.rand(4).tolist())

    worker = side(Draws(), batch_size=None, in_process=True)
    items = worker.iterate()
    first = list(itertools.islice(items, 2))
    saved = worker.state_now()
    assert saved is not None and set(saved) == {"batches", "items", "replay_rng"}
    before = _rng.capture()
    expected = [*first, *list(itertools.islice(items, 2))]
    torch.manual_seed(5)
    replayed = side(
        Draws(), batch_size=None, in_process=True, plans={0: WorkerPlan(saved, 0, 0)}
    ).iterate()
    after_resume = _rng.capture()
    assert list(itertools.islice(replayed, 4)) == expected
    assert _rng.capture() == after_resume != before  # the replay left the generators alone


def test_in_process_a_stateful_dataset_is_snapshotted_when_asked() -> None:
    worker = side(Positional(6), in_process=True)
    items = worker.iterate()
    next(items), next(items), next(items)
    assert worker.state_now() == {
        "batches": 0,
        "items": 0,
        "dataset": {"position": 3},
        "iterator": None,
        "own": False,
        "rng": None,
        "own_rng": None,  # no fastdata.worker_generator() was asked for
    }
    assert side({}, kind="map", in_process=True).state_now() is None


def test_a_map_style_worker_starts_from_its_plan() -> None:
    class MapState:
        def __init__(self) -> None:
            self.state: Any = None

        def state_dict(self) -> Any:
            return self.state

        def load_state_dict(self, state: Any) -> None:
            self.state = state

    torch.manual_seed(3)
    rng = _rng.capture()
    expected = torch.rand(2)
    dataset = MapState()
    snap = {"dataset": encode({"w": torch.ones(2)}), "rng": rng}
    worker = side(dataset, kind="map", plans={0: WorkerPlan(snap, batches=4, items=8)}, rng=True)
    torch.manual_seed(0)
    worker.start_map()
    assert torch.equal(dataset.state["w"], torch.ones(2))
    assert torch.equal(torch.rand(2), expected)
    assert (worker.batches, worker.items) == (4, 8)
    worker.start_map()  # a persistent worker's next epoch: afresh
    assert (worker.batches, worker.items) == (0, 0)


def test_a_state_json_cannot_hold_is_kept_as_an_error_for_the_main_process() -> None:
    class Unstorable(Positional):
        def state_dict(self) -> dict[str, Any]:
            return {"handle": object()}

    made = fetch(side(Unstorable(4), every=1))
    error = made[0].report["snapshot"]["error"]
    assert error.startswith("ResumeError:") and "state['handle'] is an object" in error


def test_end_and_nothing_stay_themselves_through_pickling() -> None:
    assert pickle.loads(pickle.dumps(END)) is END
    assert pickle.loads(pickle.dumps(NOTHING)) is NOTHING
    report = {"batches": 1}
    alone = Carried(NOTHING, report)
    assert alone.pin_memory() is alone


def test_stateful_means_both_methods() -> None:
    assert stateful(Positional(1)) and stateful(OwnIterator(1))
    assert not stateful(Plain(1))

    class Half:
        def state_dict(self) -> dict[str, Any]:
            return {}

    assert not stateful(Half())
