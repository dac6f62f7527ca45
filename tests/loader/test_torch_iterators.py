"""fastdata.loader._torch_iterators: torch's own iterators made from a view of the loader with
four things replaced, telling the epoch's record each batch handed out (its worker, report
and sampler position) and the end; a loaded base seed taken as it is; a resumed epoch's first
batch from the worker whose turn it was; a worker's init seeing the user's dataset."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    SequentialSampler,
    get_worker_info,
)
from torch.utils.data._utils.collate import default_collate

import fastdata as fd
from fastdata.loader._indices import Indices
from fastdata.loader._record import Position, Record
from fastdata.loader._torch_iterators import (
    LoaderView,
    Setup,
    WorkerIterator,
    iterator_setup,
    make_iterator,
)
from fastdata.loader._worker_side import IterableSide, ReportingCollate, WorkerSide


class WorkerIds(torch.utils.data.Dataset):
    """Each item is the id of the worker that read it (-1 in the main process)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        info = get_worker_info()
        return -1 if info is None else info.id


class Countdown(IterableDataset):
    def __iter__(self) -> Any:
        return iter(range(5))


def plain_setup(loader: DataLoader, record: Record, **changes: Any) -> Setup:
    """The loader's own four things, less ``changes``."""
    fields = {
        "dataset": loader.dataset,
        "collate_fn": loader.collate_fn,
        "index_sampler": loader._index_sampler,
        "worker_init_fn": loader.worker_init_fn,
        **changes,
    }
    return Setup(record, **fields)


def worker_side(loader: DataLoader, kind: str, *, in_process: bool) -> WorkerSide:
    """The worker side fastdata's loader makes for ``loader`` (no resume plan)."""
    return WorkerSide(
        loader.dataset,
        kind=kind,  # type: ignore[arg-type]
        plans={},
        every=1,
        rng=False,
        batching=(True, loader.batch_size, loader.drop_last),
        in_process=in_process,
    )


def test_the_view_replaces_four_things_and_passes_the_rest_through() -> None:
    generator = torch.Generator()
    loader = DataLoader(list(range(6)), batch_size=2, generator=generator, timeout=3)
    setup = Setup(Record(1), "dataset", "collate", "sampler", "init")
    view = LoaderView(loader, setup)
    assert (view.dataset, view.collate_fn, view._index_sampler, view.worker_init_fn) == (
        "dataset",
        "collate",
        "sampler",
        "init",
    )
    assert (view.batch_size, view.timeout, view.num_workers) == (2, 3, 0)
    assert view.generator is generator
    assert loader.dataset == list(range(6))  # the loader itself is untouched
    seeded = LoaderView(loader, Setup(Record(1), None, None, None, None, base_seed=5))
    assert isinstance(seeded.generator, torch.Generator) and seeded.generator is not generator


def test_the_position_is_the_indices_with_the_samplers_states() -> None:
    assert Setup(Record(1), None, None, None, None).position() is None
    sampler = SequentialSampler(range(5))
    indices = Indices(sampler, BatchSampler(sampler, 2, False), None, None)
    setup = Setup(Record(1), None, None, indices, None, indices=indices)
    iterator = iter(indices)
    next(iterator), next(iterator)
    assert setup.position() == Position(2, 4, 2, None)


def test_an_in_process_iterator_tells_the_record_each_batch_and_the_end() -> None:
    loader = DataLoader(list(range(7)), batch_size=3)
    sampler = loader.sampler
    indices = Indices(sampler, loader.batch_sampler, None, None)
    record = Record(1)
    side = worker_side(loader, "map", in_process=True)
    collate = ReportingCollate(default_collate, side)
    setup = plain_setup(loader, record, collate_fn=collate, index_sampler=indices, indices=indices)
    setup.base_seed = 1234
    iterator = make_iterator(loader, setup)
    assert iterator_setup(iterator) is setup
    assert iterator._base_seed == 1234 and record.base_seed == 1234  # loaded, not drawn
    first = next(iterator)
    assert first.tolist() == [0, 1, 2]  # the batch alone, not the report it came with
    assert (record.batches, record.prefix) == (1, Position(1, 3, 0, None))
    assert record.workers[0]["items"] == 3
    rest = [b.tolist() for b in iterator]
    assert rest == [[3, 4, 5], [6]]
    assert record.finished and record.batches == 3 and record.prefix.units == 7


def test_a_report_alone_is_recorded_but_not_handed_out() -> None:
    """An iterable worker's last report under drop_last travels without a batch."""
    loader = DataLoader(Countdown(), batch_size=2, drop_last=True)
    side = worker_side(loader, "iterable", in_process=True)
    record = Record(1)
    setup = plain_setup(
        loader,
        record,
        dataset=IterableSide(side),
        collate_fn=ReportingCollate(default_collate, side),
    )
    assert [b.tolist() for b in make_iterator(loader, setup)] == [[0, 1], [2, 3]]
    assert record.batches == 2 and record.finished
    assert record.workers[0]["ended"] and record.workers[0]["items"] == 5


def test_a_resumed_epoch_starts_at_the_worker_whose_turn_it_was() -> None:
    loader = DataLoader(WorkerIds(), batch_size=1, num_workers=2)
    record = Record(2)
    iterator = make_iterator(loader, plain_setup(loader, record, first_worker=1))
    try:
        assert isinstance(iterator, WorkerIterator)
        got = [int(next(iterator)) for _ in range(4)]
    finally:
        iterator._shutdown_workers()
    assert got == [1, 0, 1, 0]
    assert record.handed == [2, 2] and record.next_worker == 1


def test_batches_from_workers_carry_the_position_of_their_indices() -> None:
    """The workers are sent batches ahead; each batch handed out moves the record's prefix
    to the position its indices left the sampler at, not to the latest sent."""
    loader = DataLoader(list(range(10)), batch_size=3, num_workers=2)
    indices = Indices(loader.sampler, loader.batch_sampler, None, None)
    side = worker_side(loader, "map", in_process=False)
    record = Record(2)
    collate = ReportingCollate(default_collate, side)
    setup = plain_setup(loader, record, collate_fn=collate, index_sampler=indices, indices=indices)
    iterator = make_iterator(loader, setup)
    try:
        got = [next(iterator).tolist(), next(iterator).tolist()]
        assert indices.position.tasks == 4  # all sent ahead
        assert record.prefix == Position(2, 6, 3, None)
        got += [b.tolist() for b in iterator]
    finally:
        iterator._shutdown_workers()
    assert got == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert record.prefix == Position(4, 10, 9, None) and record.beyond() == []
    assert [w["items"] for w in record.workers] == [6, 4]  # type: ignore[index]
    assert record.handed == [2, 2] and record.finished


def test_a_worker_init_sees_the_users_dataset() -> None:
    """The iterator is given the dataset behind an IterableSide; in the worker, torch's
    get_worker_info().dataset is the user's again, for the user's worker_init_fn."""

    def init(worker_id: int) -> None:
        dataset = get_worker_info().dataset  # type: ignore[union-attr]
        if not isinstance(dataset, Countdown):
            raise TypeError(f"worker_init_fn saw a {type(dataset).__name__}")

    loader = fd.DataLoader(Countdown(), batch_size=2, num_workers=1, worker_init_fn=init)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4]]


class _FailsAtFive(Dataset):
    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> int:
        if i == 5:
            raise ValueError("bad item")
        return i


def test_an_iterator_that_re_raised_a_workers_error_is_freed_when_dropped() -> None:
    """torch's re-raise leaves the exception in a local of its own frame, a cycle through the
    traceback that held the iterator (and its workers) until the cycle collector ran, which
    then waited 5 s per worker on queues it had finalized first. Dropped, it goes now."""
    import gc
    import weakref

    gc.disable()  # only reference counting may free it
    try:
        for method in ("multiprocessing", "thread"):
            loader = fd.DataLoader(_FailsAtFive(), batch_size=2, num_workers=2,
                                   worker_method=method)  # fmt: skip
            iterator = iter(loader)
            gone = weakref.ref(iterator)
            workers = list(getattr(iterator, "_workers", []))
            try:
                for _ in iterator:
                    pass
            except ValueError:
                pass
            del iterator
            assert gone() is None, method
            for worker in workers:
                worker.join(10)
                assert not worker.is_alive(), method
    finally:
        gc.enable()
