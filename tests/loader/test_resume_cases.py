"""Resume cases that used to be wrong or refused (issue 30), one test each: the silent ones
(repeated samples, different samples, an extra epoch) and the refusals StatefulDataLoader
does not make (shuffle without a generator, custom samplers, iterable and Stateful datasets,
in_order=False, a used loader with persistent workers, snapshot_every_n_steps)."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import fastdata as fd


class Drawing(tud.Dataset):
    """Each item draws from the global generators, as a random augmentation does."""

    def __init__(self, n: int = 30) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> list[float]:
        return [i, random.random(), float(np.random.rand()), float(torch.rand(1))]


class Shards(tud.IterableDataset):
    def __init__(self, n: int = 30) -> None:
        self.n = n

    def __iter__(self):
        info = tud.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            yield [i, float(torch.rand(1))]


def ids(batches: list) -> list[int]:
    """The item ids of collated [ids, draws] batches, in order."""
    return [i for batch in batches for i in batch[0]]


def plain(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.tolist()
    if isinstance(batch, list | tuple):
        return [plain(b) for b in batch]
    return batch


def seed(value: int) -> None:
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)


def resume_after(make, k: int) -> tuple[list, list, list]:
    """(all batches of an uninterrupted epoch, the first k of another run, the rest after
    its state was saved, JSON'd and loaded into a fresh loader)."""
    seed(0)
    full = [plain(b) for b in make()]
    seed(0)
    first = make()
    iterator = iter(first)
    head = [plain(next(iterator)) for _ in range(k)]
    state = json.loads(json.dumps(first.state_dict()))
    del iterator, first
    seed(123)
    resumed = make()
    resumed.load_state_dict(state)
    return full, head, [plain(b) for b in resumed]


def test_map_style_without_batching_resumes_with_workers() -> None:
    """batch_size=None with workers used to ignore load_state_dict: the epoch came again."""
    full, head, rest = resume_after(
        lambda: fd.DataLoader(Drawing(), batch_size=None, shuffle=True, num_workers=2), 7
    )
    assert head + rest == full


@pytest.mark.parametrize("workers", [0, 2])
def test_random_draws_in_the_dataset_resume(workers: int) -> None:
    """Indices were right, values drawn in __getitem__ were not: now they are too."""
    full, head, rest = resume_after(
        lambda: fd.DataLoader(
            Drawing(),
            batch_size=4,
            num_workers=workers,
            generator=torch.Generator().manual_seed(1),
            shuffle=True,
        ),
        3,
    )
    assert head + rest == full


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_after_the_last_batch_resumes_an_empty_epoch(workers: int) -> None:
    """As StatefulDataLoader: the rest of that epoch is empty, and the next iteration is the
    next epoch (a state after the end was seen goes straight to the next epoch)."""

    def make() -> fd.DataLoader:
        return fd.DataLoader(
            Drawing(12),
            batch_size=4,
            shuffle=True,
            num_workers=workers,
            generator=torch.Generator().manual_seed(3),
        )

    seed(0)
    loader = make()
    epochs = [[plain(b) for b in loader] for _ in range(2)]
    seed(0)
    loader = make()
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    inside = json.loads(json.dumps(loader.state_dict()))
    with pytest.raises(StopIteration):
        next(iterator)
    after = json.loads(json.dumps(loader.state_dict()))
    for state, expected in ((inside, [[], epochs[1]]), (after, [epochs[1]])):
        resumed = make()
        resumed.load_state_dict(state)
        assert [[plain(b) for b in resumed] for _ in expected] == expected


def test_shuffle_without_a_generator_resumes() -> None:
    """Refused at the first checkpoint before; now the order comes back from the global
    generator as it was at the epoch's first draw."""
    full, head, rest = resume_after(
        lambda: fd.DataLoader(Drawing(), batch_size=5, shuffle=True, num_workers=2), 2
    )
    assert head + rest == full


class EveryOther(tud.Sampler):
    """A custom sampler without state."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n // 2

    def __iter__(self):
        return iter(range(0, self.n, 2))


class Counted(tud.Sampler):
    """A custom sampler with state_dict()/load_state_dict() (torchdata's Stateful)."""

    def __init__(self, n: int) -> None:
        self.n, self.start, self.i = n, 0, 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        self.i, self.start = self.start, 0
        while self.i < self.n:
            self.i += 1
            yield (self.i * 7) % self.n

    def state_dict(self) -> dict[str, int]:
        return {"i": self.i}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.start = state["i"]


@pytest.mark.parametrize("sampler", [EveryOther, Counted])
@pytest.mark.parametrize("workers", [0, 2])
def test_custom_samplers_resume(sampler, workers: int) -> None:
    full, head, rest = resume_after(
        lambda: fd.DataLoader(Drawing(20), batch_size=3, sampler=sampler(20), num_workers=workers),
        2,
    )
    assert head + rest == full


class Epochs(tud.Sampler):
    """A stateful sampler with an order per epoch of its own, which moves on to the next
    epoch when its iterator ends (as torchdata's samplers do)."""

    def __init__(self, n: int) -> None:
        self.n, self.epoch, self.yielded = n, 0, 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(100 + self.epoch))
        for i in order[self.yielded :].tolist():
            self.yielded += 1
            yield i
        self.epoch, self.yielded = self.epoch + 1, 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "yielded": self.yielded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.yielded = state["epoch"], state["yielded"]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("as_batch_sampler", [False, True])
def test_a_stateful_sampler_saved_between_epochs_starts_the_next(
    workers: int, as_batch_sampler: bool, worker_method: str
) -> None:
    """A state saved after the loop (or before iter() of the next epoch) held no sampler
    state, and a sampler whose order follows its own epoch replayed epoch 0."""

    def make() -> fd.DataLoader:
        sampler = Epochs(8)
        batching: dict[str, Any] = {"batch_size": 4, "sampler": sampler}
        if as_batch_sampler:
            batching = {"batch_sampler": tud.BatchSampler(sampler, 4, False)}
        return fd.DataLoader(
            Drawing(8), num_workers=workers, worker_method=worker_method, **batching
        )

    def order(loader: fd.DataLoader) -> list[int]:
        return [int(i) for batch in loader for i in batch[0]]

    uninterrupted = make()
    epochs = [order(uninterrupted) for _ in range(3)]
    assert epochs[0] != epochs[1]
    first = make()
    assert order(first) == epochs[0]
    state = json.loads(json.dumps(first.state_dict()))
    resumed = make()
    resumed.load_state_dict(state)
    assert [order(resumed), order(resumed)] == epochs[1:]


class OwnIterator(tud.IterableDataset):
    """A dataset that is its own iterator and builds its epoch's order in ``__iter__`` from
    its state (epoch, position), moving to the next epoch when it ends."""

    def __init__(self) -> None:
        self.epoch, self.i, self.order = 0, 0, [0]

    def __iter__(self):
        seeded = torch.Generator().manual_seed(400 + self.epoch)
        self.order = torch.randperm(6, generator=seeded).tolist()
        return self

    def __next__(self) -> int:
        if self.i >= len(self.order):
            self.epoch, self.i = self.epoch + 1, 0
            raise StopIteration
        self.i += 1
        return self.order[self.i - 1]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "i": self.i}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.i = state["epoch"], state["i"]


@pytest.mark.parametrize(
    "where", [0, 2, 6], ids=["epoch-start", "mid-epoch", "after-the-last-item"]
)
@pytest.mark.parametrize("workers", [0, 1])
def test_a_dataset_that_is_its_own_iterator_resumes_in_a_later_epoch(
    where: int, workers: int
) -> None:
    """Its state was loaded after iter() only, which had built epoch 0's order already:
    resumed in epoch 1, it read epoch 0 again."""
    options: dict[str, Any] = {"batch_size": None, "num_workers": workers}
    options.update({"persistent_workers": True} if workers else {})
    reference = fd.DataLoader(OwnIterator(), **options)
    epochs = [[int(x) for x in reference] for _ in range(3)]
    saving = fd.DataLoader(OwnIterator(), **options)
    assert [int(x) for x in saving] == epochs[0]
    iterator = iter(saving)
    head = [int(next(iterator)) for _ in range(where)]
    state = json.loads(json.dumps(saving.state_dict()))
    del iterator
    resumed = fd.DataLoader(OwnIterator(), **options)
    resumed.load_state_dict(state)
    rest = [int(x) for x in resumed]
    assert head + rest == epochs[1] and [int(x) for x in resumed] == epochs[2]


@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_out_of_order_resumes_every_item_once(kind: str, worker_method: str) -> None:
    """in_order=False hands batches out as they come: what was consumed and what the
    resumed run gives are each item exactly once."""

    def make() -> fd.DataLoader:
        data = Drawing(40) if kind == "map" else Shards(40)
        return fd.DataLoader(
            data, batch_size=3, num_workers=2, in_order=False, worker_method=worker_method
        )

    loader = make()
    iterator = iter(loader)
    head = [plain(next(iterator)) for _ in range(5)]
    state = json.loads(json.dumps(loader.state_dict()))
    del iterator
    resumed = make()
    resumed.load_state_dict(state)
    seen = [i for batch in head + [plain(b) for b in resumed] for i in batch[0]]
    assert sorted(seen) == list(range(40))


def test_a_used_loader_with_persistent_workers_loads_a_state(worker_method: str) -> None:
    loader = fd.DataLoader(
        Shards(24),
        batch_size=4,
        num_workers=2,
        persistent_workers=True,
        worker_method=worker_method,
    )
    full = [plain(b) for b in loader]
    iterator = iter(loader)
    head = [plain(next(iterator)) for _ in range(2)]
    state = loader.state_dict()
    list(iterator)  # the epoch goes on, then the state is loaded on the same loader
    loader.load_state_dict(state)
    rest = [plain(b) for b in loader]
    assert ids(head + rest) == ids(full)


class Positioned(tud.IterableDataset):
    """An iterable dataset with state_dict(): where it is, and a draw of its own."""

    def __init__(self) -> None:
        self.position, self.pending = 0, None

    def __iter__(self):
        info = tud.get_worker_info()
        mine = list(range(0 if info is None else info.id, 30, 1 if info is None else 2))
        self.position, self.pending = self.pending or 0, None
        while self.position < len(mine):
            self.position += 1
            yield [mine[self.position - 1], float(torch.rand(1))]
        self.position = 0

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.pending = state["position"]


def test_snapshot_every_n_steps_changes_nothing_but_its_cost() -> None:
    results = []
    for every in (0, 1, 3):
        results.append(
            resume_after(
                lambda every=every: fd.DataLoader(
                    Positioned(), batch_size=2, num_workers=2, snapshot_every_n_steps=every
                ),
                5,
            )
        )
    for full, head, rest in results:
        assert head + rest == full
    assert results[0] == results[1] == results[2]


class Holding(tud.IterableDataset):
    def __init__(self, value: Any) -> None:
        self.value = value

    def __iter__(self):
        yield from range(4)

    def state_dict(self) -> dict[str, Any]:
        return {"held": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = state["held"]


def test_a_state_json_cannot_hold_is_refused_at_state_dict() -> None:
    loader = fd.DataLoader(Holding(object()), batch_size=None)
    next(iter(loader))
    with pytest.raises(fd.ResumeError, match=r"state\['held'\] is an object") as caught:
        loader.state_dict()
    assert "of the dataset:" in str(caught.value)  # no worker with num_workers=0


def test_tensors_in_a_dataset_state_come_back_as_tensors() -> None:
    held = {"rng": torch.get_rng_state(), "weights": np.arange(3.0), "pair": (1, b"x")}
    loader = fd.DataLoader(Holding(held), batch_size=None)
    iterator = iter(loader)
    next(iterator)
    state = json.loads(json.dumps(loader.state_dict()))
    fresh = Holding(None)
    resumed = fd.DataLoader(fresh, batch_size=None)
    resumed.load_state_dict(state)
    next(iter(resumed))
    assert torch.equal(fresh.value["rng"], held["rng"])
    assert np.array_equal(fresh.value["weights"], held["weights"])
    assert fresh.value["pair"] == (1, b"x")


@pytest.mark.parametrize("kind", ["map", "iterable"])
@pytest.mark.parametrize("saved", [True, False], ids=["persistent-saved", "fresh-saved"])
@pytest.mark.parametrize("where", [3, None], ids=["mid-epoch", "between-epochs"])
def test_another_persistent_workers_resumes(
    kind: str, saved: bool, where: int | None, worker_method: str
) -> None:
    """persistent_workers only decides whether workers outlive their epoch: within an epoch the
    rest is the saved run's; a state saved between epochs by persistent workers starts fresh
    ones in a loader without them (torchdata accepts the change; fastdata refused it)."""

    def make(persistent: bool) -> fd.DataLoader:
        data = Drawing(24) if kind == "map" else Shards(24)
        sampler = {"shuffle": True, "generator": torch.Generator().manual_seed(3)}
        return fd.DataLoader(
            data,
            batch_size=4,
            num_workers=2,
            persistent_workers=persistent,
            worker_method=worker_method,
            **(sampler if kind == "map" else {}),
        )

    seed(5)
    reference = make(saved)
    epoch = [plain(b) for b in reference]
    seed(5)
    loader = make(saved)
    iterator = iter(loader)
    head = [plain(next(iterator)) for _ in range(len(epoch) if where is None else where)]
    if where is None:
        assert next(iterator, None) is None
    state = json.loads(json.dumps(loader.state_dict()))
    del iterator
    resumed = make(not saved)
    resumed.load_state_dict(state)
    rest = [plain(b) for b in resumed]
    # thread workers share the global generators: their draws' order is the threads' own
    same = ids if worker_method == "thread" else (lambda batches: batches)
    if where is None:
        assert same(head) == same(epoch) and sorted(ids(rest)) == list(range(24))
    else:
        assert same(head + rest) == same(epoch)
    assert sorted(ids([plain(b) for b in resumed])) == list(range(24))  # and the epoch after
