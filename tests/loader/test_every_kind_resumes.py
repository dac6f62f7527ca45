"""The resume contract over every kind of dataset users bring (torchdata's StatefulDataLoader
contract): map-style (``batch_size`` an int, and None), iterable, iterable with
``state_dict()`` (torchdata's ``Stateful``), Hugging Face ``IterableDataset`` and fastdata's own
streams, with 0, 1 and 3 workers, persistent or not, saved before the first batch, mid-epoch,
after the last batch and after the end was seen. What was consumed before the save and after
the resume is one uninterrupted run, value by value — random draws in the datasets (Python's,
numpy's and torch's global generators, in the workers and in the main process) and in the
training step included — and the epoch after it is the uninterrupted run's next epoch.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import fastdata as fd

N = 24


def draws() -> list[float]:
    """One draw of each global generator: what a random augmentation takes; in a thread
    worker, whose global generators are every thread's, from the worker's own generator."""
    if torch.utils.data.get_worker_info() is not None and THREADS:
        own = fd.worker_generator()
        return [float(torch.rand(1, generator=own)) for _ in range(3)]
    return [random.random(), float(np.random.rand()), float(torch.rand(1))]


THREADS = False  # set while a test runs thread workers (their threads see it)


class MapAugmented(tud.Dataset):
    """Items drawn at random per access, as a random augmentation is."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> list[Any]:
        return [i, *draws()]


class IterableAugmented(tud.IterableDataset):
    """Split by worker; each item carries random draws."""

    def __iter__(self):
        info = tud.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, N, step):
            yield [i, *draws()]


class StatefulIterable(tud.IterableDataset):
    """torchdata's Stateful protocol: a position and a shuffle from a generator of its own,
    kept and restored by the dataset itself (its state_dict holds a tensor)."""

    def __init__(self) -> None:
        self.position = 0
        self.generator = torch.Generator().manual_seed(5)
        self.pending: dict[str, Any] | None = None

    def __iter__(self):
        info = tud.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        mine = list(range(start, N, step))
        self.position = 0
        if self.pending is not None:
            self.position = self.pending["position"]
            self.generator.set_state(self.pending["generator"])
            self.pending = None
        while self.position < len(mine):
            pick = mine[int(torch.randint(len(mine), (1,), generator=self.generator))]
            self.position += 1
            yield [pick, self.position, *draws()]
        self.position = 0  # (torchdata's convention) the state after the end starts anew

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pending = state


def plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def hugging_face() -> Any:
    import datasets

    table = datasets.Dataset.from_dict({"i": list(range(N))})
    return table.to_iterable_dataset(num_shards=3)


@pytest.fixture(scope="module")
def parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("resume-kinds")
    fd.synthetic.make_parquet(path, 120, files=2, row_group_size=20)
    return path


KINDS = ["map-batched", "map-unbatched", "iterable", "stateful", "hugging-face", "stream"]


def make(kind: str, workers: int, persistent: bool, parquet: Path) -> fd.DataLoader:
    common: dict[str, Any] = {"num_workers": workers, "persistent_workers": persistent}
    if THREADS:
        common["worker_method"] = "thread"
    if kind == "map-batched":
        return fd.DataLoader(MapAugmented(), batch_size=4, shuffle=True, **common)
    if kind == "map-unbatched":
        return fd.DataLoader(MapAugmented(), batch_size=None, shuffle=True, **common)
    if kind == "iterable":
        return fd.DataLoader(IterableAugmented(), batch_size=3, **common)
    if kind == "stateful":
        return fd.DataLoader(StatefulIterable(), batch_size=None, **common)
    if kind == "hugging-face":
        return fd.DataLoader(hugging_face(), batch_size=2, **common)
    stream = fd.ParquetStream(parquet, columns=["id", "x"], batch_size=16, shuffle=True)
    return fd.DataLoader(stream, batch_size=None, **common)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def epoch(loader: fd.DataLoader, number: int, limit: int | None = None) -> list[Any]:
    """The batches of one epoch (the first ``limit``), a training step's random draw after
    each (the main process's generators are the step's too)."""
    if hasattr(loader.dataset, "set_epoch"):  # fastdata streams and Hugging Face datasets
        loader.dataset.set_epoch(number)
    out = []
    iterator = iter(loader)
    for batch in iterator:
        out.append([plain(batch), draws()])
        if limit is not None and len(out) == limit:
            break
    return out


SAVES = ["first", "middle", "last", "after-end"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("workers", "persistent", "method"),
    [
        (0, False, "multiprocessing"),
        *[(w, p, m) for w in (1, 3) for p in (False, True) for m in ("multiprocessing", "thread")],
    ],
)
def test_every_kind_resumes_exactly(
    kind: str,
    workers: int,
    persistent: bool,
    method: str,
    parquet: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(globals(), "THREADS", method == "thread")
    seed_everything(7)
    reference = make(kind, workers, persistent, parquet)
    first, second = epoch(reference, 0), epoch(reference, 1)
    assert len(first) > 2
    for save in SAVES:
        k = {"first": 0, "middle": len(first) // 2, "last": len(first)}.get(save, len(first))
        seed_everything(7)
        interrupted = make(kind, workers, persistent, parquet)
        if hasattr(interrupted.dataset, "set_epoch"):
            interrupted.dataset.set_epoch(0)
        iterator = iter(interrupted)
        head = []
        for _ in range(k):
            head.append([plain(next(iterator)), draws()])
        if save == "after-end":
            with pytest.raises(StopIteration):
                next(iterator)
        state = json.loads(json.dumps(interrupted.state_dict()))
        del iterator, interrupted

        seed_everything(99)  # another job: the state must bring back what it needs
        resumed = make(kind, workers, persistent, parquet)
        resumed.load_state_dict(state)
        where = f"{kind}, {workers} workers, persistent={persistent}, saved {save} ({k})"
        assert head == first[:k], where
        if save == "after-end":
            assert epoch(resumed, 1) == second, f"{where}: the next epoch"
            continue
        assert head + epoch(resumed, 0) == first, f"{where}: the rest of the epoch"
        assert epoch(resumed, 1) == second, f"{where}: the next epoch"


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", ["multiprocessing", "thread"])
def test_persistent_workers_resume_a_state_saved_in_a_later_epoch(
    kind: str, method: str, parquet: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers that live on from epoch to epoch count each epoch afresh: a state saved in
    the middle of the second epoch resumes it (a map-style state counted the first epoch's
    batches too, and was refused as corrupt)."""
    monkeypatch.setitem(globals(), "THREADS", method == "thread")
    seed_everything(7)
    reference = make(kind, 2, True, parquet)
    epochs = [epoch(reference, number) for number in range(3)]
    k = len(epochs[1]) // 2
    seed_everything(7)
    interrupted = make(kind, 2, True, parquet)
    assert epoch(interrupted, 0) == epochs[0]
    assert epoch(interrupted, 1, limit=k) == epochs[1][:k]
    state = json.loads(json.dumps(interrupted.state_dict()))
    del interrupted

    seed_everything(99)
    resumed = make(kind, 2, True, parquet)
    resumed.load_state_dict(state)
    assert epochs[1][:k] + epoch(resumed, 1) == epochs[1], f"{kind}: the rest of epoch 1"
    assert epoch(resumed, 2) == epochs[2], f"{kind}: the epoch after"
