"""Datasets and DataLoader arguments that torch's loader and fastdata's must treat alike:
``tests/loader/test_loader.py`` compares them directly, ``tests/test_dropin.py`` with fastdata's
loader installed in torch's names."""

from __future__ import annotations

import numpy as np
import torch
import torch.utils.data as tud


class Squares(tud.Dataset):
    def __len__(self) -> int:
        return 23

    def __getitem__(self, i: int) -> dict:
        return {"x": torch.tensor([i, i * i]), "i": i}


class Counting(tud.IterableDataset):
    def __iter__(self):
        info = tud.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        yield from range(start, 17, step)


def pairs_collate(batch):
    return [b["i"] for b in batch]


def seed_numpy(worker_id: int) -> None:
    np.random.seed(1000 + worker_id)


class RandomDraw(tud.Dataset):
    """Items depend on the per-worker RNG state, which must match torch's exactly."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> tuple:
        return i, float(np.random.rand()), float(torch.rand(1))


class CountingSampler(tud.Sampler):
    """A sampler whose order depends on how often its ``__iter__`` ran (a curriculum that
    counts its epochs): torch runs it once per epoch when batching (its BatchSampler makes
    the sampler's iterator when the first batch is asked for), twice per epoch with workers
    and no batching (the index sampler's iterator is made twice)."""

    def __init__(self) -> None:
        self.calls = 0

    def __len__(self) -> int:
        return 12

    def __iter__(self):
        self.calls += 1
        return iter([(i * self.calls) % 23 for i in range(12)])


SCENARIOS = {
    "defaults": lambda: {"dataset": Squares()},
    "batch-drop_last": lambda: {"dataset": Squares(), "batch_size": 5, "drop_last": True},
    "shuffle-generator": lambda: {
        "dataset": Squares(),
        "batch_size": 4,
        "shuffle": True,
        "generator": torch.Generator().manual_seed(3),
    },
    "sampler": lambda: {
        "dataset": Squares(),
        "sampler": tud.SubsetRandomSampler(range(0, 23, 2), torch.Generator().manual_seed(1)),
    },
    "batch_sampler": lambda: {
        "dataset": Squares(),
        "batch_sampler": tud.BatchSampler(tud.SequentialSampler(range(23)), 6, False),
    },
    "batch_sampler-shuffled": lambda: {  # the loader's sampler= is then torch's default
        "dataset": Squares(),
        "batch_sampler": tud.BatchSampler(
            tud.RandomSampler(range(23), generator=torch.Generator().manual_seed(2)), 6, False
        ),
    },
    "collate_fn": lambda: {"dataset": Squares(), "batch_size": 7, "collate_fn": pairs_collate},
    "no-auto-batching": lambda: {"dataset": Squares(), "batch_size": None},
    "workers-fork": lambda: {"dataset": Squares(), "batch_size": 3, "num_workers": 2},
    "workers-spawn": lambda: {
        "dataset": Squares(),
        "batch_size": 3,
        "num_workers": 2,
        "multiprocessing_context": "spawn",
    },
    "worker_init_fn": lambda: {
        "dataset": RandomDraw(),
        "num_workers": 2,
        "worker_init_fn": seed_numpy,
        "generator": torch.Generator().manual_seed(0),
    },
    "worker-seeding": lambda: {
        "dataset": RandomDraw(),
        "num_workers": 2,
        "generator": torch.Generator().manual_seed(5),
    },
    "persistent-prefetch": lambda: {
        "dataset": Squares(),
        "batch_size": 4,
        "num_workers": 2,
        "persistent_workers": True,
        "prefetch_factor": 3,
    },
    "pin_memory-cpu": lambda: {"dataset": Squares(), "batch_size": 4, "pin_memory": True},
    "timeout": lambda: {"dataset": Squares(), "batch_size": 4, "num_workers": 1, "timeout": 30},
    "sampler-calls-workers": lambda: {
        "dataset": Squares(),
        "sampler": CountingSampler(),
        "batch_size": 4,
        "num_workers": 2,
    },
    "sampler-calls-persistent": lambda: {
        "dataset": Squares(),
        "sampler": CountingSampler(),
        "batch_size": 4,
        "num_workers": 2,
        "persistent_workers": True,
    },
    "sampler-calls-no-batching": lambda: {
        "dataset": Squares(),
        "sampler": CountingSampler(),
        "batch_size": None,
        "num_workers": 2,
    },
    "iterable": lambda: {"dataset": Counting(), "batch_size": 4, "num_workers": 2},
    "iterable-no-batch": lambda: {"dataset": Counting(), "batch_size": None},
}

THREAD_SCENARIOS = sorted(
    n for n in SCENARIOS if n not in ("worker_init_fn", "worker-seeding", "workers-spawn")
)
"""The scenarios whose items do not depend on which worker draws from the global generators
(thread workers share them, worker processes each have their own): under thread workers
(two, where the scenario has none) they give what process workers give."""


def with_workers(kwargs: dict) -> dict:
    """A scenario's arguments with two workers where it has none."""
    return kwargs if kwargs.get("num_workers", 0) else {**kwargs, "num_workers": 2}


def as_plain(batch):
    if isinstance(batch, torch.Tensor):
        return batch.tolist()
    if isinstance(batch, dict):
        return {k: as_plain(v) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return [as_plain(v) for v in batch]
    return batch


class FailsAt(tud.Dataset):
    """A dataset whose item ``bad`` raises, as a corrupt sample would."""

    def __init__(self, bad: int = 5) -> None:
        self.bad = bad

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> int:
        if i == self.bad:
            raise ValueError(f"item {i} is corrupt")
        return i


ERRORS = {
    "error-main": lambda: {"dataset": FailsAt(), "batch_size": 2},
    "error-worker": lambda: {"dataset": FailsAt(), "batch_size": 2, "num_workers": 2},
    "error-persistent": lambda: {
        "dataset": FailsAt(),
        "batch_size": 2,
        "num_workers": 1,
        "persistent_workers": True,
    },
}
"""Loaders whose first epoch fails at item 5: the same batches, then the same error."""


def outcome(loader: tud.DataLoader) -> tuple[list, str | None]:
    """The batches of one epoch as plain values, and the error that ended it (its type and
    the last line torch's re-raise gives it), if any."""
    batches: list = []
    try:
        for batch in loader:
            batches.append(as_plain(batch))
    except Exception as exc:
        return batches, f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1]}"
    return batches, None
