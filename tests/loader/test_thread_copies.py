"""Thread workers' copies: each thread its own dataset, collate function and worker init,
made together as a worker process gets them; shared-memory tensors and code shared."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
import time
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import fastdata as fd
from fastdata.loader._thread_copies import ThreadCopies, _shallow_copy, _shared, shallow


class Holder:
    def __init__(self) -> None:
        self.counts = torch.zeros(4).share_memory_()
        self.plain = torch.zeros(4)
        self.seen: list[int] = []


def test_each_thread_gets_its_own_copy_sharing_only_shared_memory_tensors() -> None:
    original = Holder()
    copies = ThreadCopies((original,))
    (a,), (b,) = copies.make(), copies.make()
    assert a is not b and a.seen is not b.seen and a.plain is not original.plain
    a.counts[0] = 5  # the shared tensor is the same storage everywhere
    assert b.counts[0] == 5 and original.counts[0] == 5
    a.plain[0] = 5
    assert b.plain[0] == 0


def test_a_shared_tensor_in_a_copy_is_the_same_tensor_whatever_holds_it() -> None:
    shared = torch.arange(3).share_memory_()
    copies = ThreadCopies(({"a": shared, "b": [shared, "path"] * 3, "plain": torch.ones(2)},))
    (copy,) = copies.make()
    assert copy["a"] is shared and all(t is shared for t in copy["b"][::2])
    assert copy["plain"] is not None and not copy["plain"].is_shared()


def test_a_copys_stand_in_for_a_shared_tensor_fails_in_any_other_unpickler() -> None:
    copies = ThreadCopies(({"a": torch.zeros(2).share_memory_()},))
    copies.make()
    assert copies._pickled is not None
    with pytest.raises(pickle.UnpicklingError, match="shared object 0"):
        pickle.loads(copies._pickled[0])
    with pytest.raises(pickle.UnpicklingError):
        _shared(0)
    with pytest.raises(pickle.UnpicklingError):
        _shallow_copy(0)


def test_methods_of_the_dataset_are_bound_to_each_copy_and_functions_are_shared() -> None:
    original = Holder()
    local = lambda batch: batch  # noqa: E731 - a lambda: pickle cannot name it

    (a, init_a, collate_a, fn_a), (b, init_b, *_) = (
        ThreadCopies((original, original.seen.append, Padder(), local)).make() for _ in range(2)
    )
    assert a is not original and init_a.__self__ is a.seen and fn_a is local
    init_a(1)
    init_b(2)
    assert (a.seen, b.seen, original.seen) == ([1], [2], [])
    assert collate_a is not None and init_a is not init_b


def test_a_shallow_dataset_is_copied_once_per_copy_and_what_refers_to_it_follows() -> None:
    data = torch.arange(6)
    dataset = Handles(data)
    (own, init, collate), _ = (
        ThreadCopies((dataset, dataset.open, dataset.collate), shallow=dataset).make()
        for _ in range(2)
    )
    assert own is not dataset and own.data is data  # shallow: the data is not copied
    init(3)
    assert (own.handle, dataset.handle) == ("handle-3", None)
    assert collate([1]) == ("handle-3", [1])


def test_an_array_or_tensor_dataset_is_shared_not_copied() -> None:
    array, tensor = np.zeros((4, 3)), torch.zeros(4, 3)
    assert shallow(array) is array and shallow(tensor) is tensor
    holder = Holder()
    assert shallow(holder) is not holder and shallow(holder).plain is holder.plain


class Padder:
    """A collate object with scratch state of its own (as padding helpers keep buffers)."""

    def __init__(self) -> None:
        self.rows: list[Any] = []

    def __call__(self, items: list[Any]) -> list[Any]:
        self.rows = []
        for item in items:
            self.rows.append(item)
            time.sleep(0.001)  # another thread's batch would interleave here
        return [tud.get_worker_info().id, list(self.rows), id(self)]


class Handles(tud.Dataset):
    """A map-style dataset whose worker init and collate are its own methods."""

    def __init__(self, data: torch.Tensor) -> None:
        self.data, self.handle = data, None

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        return self.handle, int(self.data[i])

    def open(self, worker_id: int) -> None:
        self.handle = f"handle-{worker_id}"

    def collate(self, items: list[Any]) -> tuple[Any, list[Any]]:
        return self.handle, items


class Counting(tud.IterableDataset):
    """An iterable dataset that opens its handle in worker_init_fn (a method of its own)."""

    def __init__(self) -> None:
        self.handle: str | None = None

    def __iter__(self) -> Any:
        info = tud.get_worker_info()
        for i in range(info.id, 6, info.num_workers):
            yield self.handle, i

    def open(self, worker_id: int) -> None:
        self.handle = f"handle-{worker_id}"


@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_a_worker_init_method_sets_up_the_threads_own_dataset(kind: str) -> None:
    dataset = Handles(torch.arange(6)) if kind == "map" else Counting()
    loader = fd.DataLoader(
        dataset, batch_size=None, num_workers=2, worker_method="thread", worker_init_fn=dataset.open
    )
    for _ in range(2):  # the second epoch's copies start from the untouched dataset again
        got = sorted(tuple(item) for item in loader)
        assert got == sorted((f"handle-{i % 2}", i) for i in range(6))
    assert dataset.handle is None  # as with worker processes: the loop's dataset is untouched


def test_a_collate_object_with_state_has_one_per_thread() -> None:
    loader = fd.DataLoader(
        list(range(40)), batch_size=4, num_workers=2, worker_method="thread", collate_fn=Padder()
    )
    batches = list(loader)
    assert [rows for _, rows, _ in batches] == [list(range(i, i + 4)) for i in range(0, 40, 4)]
    owners = {worker: {obj for w, _, obj in batches if w == worker} for worker in (0, 1)}
    assert all(len(objs) == 1 for objs in owners.values()) and owners[0] != owners[1]


def test_an_iterable_dataset_that_does_not_pickle_is_shared_with_a_warning() -> None:
    class WithValue(tud.IterableDataset):
        def __init__(self) -> None:
            self.count = multiprocessing.Value("i", 0)  # pickles only to child processes
            self.lock = threading.Lock()

        def __iter__(self) -> Any:
            info = tud.get_worker_info()
            yield from range(info.id, 6, info.num_workers)

    with pytest.warns(UserWarning, match="WithValue cannot be pickled .*RuntimeError"):
        got = list(fd.DataLoader(WithValue(), batch_size=None, num_workers=2,
                                 worker_method="thread"))  # fmt: skip
    assert sorted(int(x) for x in got) == list(range(6))


def test_a_collate_or_init_that_does_not_pickle_is_shared_and_the_dataset_still_copied() -> None:
    """A worker init bound to an object holding a lock (a framework's module, say): the
    dataset is still each thread's own copy, the init shared as it is."""

    class Owner:
        def __init__(self) -> None:
            self.lock, self.calls = threading.Lock(), 0

        def init(self, worker_id: int) -> None:
            with self.lock:
                self.calls += 1

    owner, original = Owner(), Holder()
    (a, init_a), (b, init_b) = (ThreadCopies((original, owner.init)).make() for _ in range(2))
    assert a is not b and a is not original and a.seen is not original.seen
    assert init_a == owner.init and init_b == owner.init
    init_a(0)
    init_b(1)
    assert owner.calls == 2
