"""A dataset that repeats its items once per worker, told apart from a faster loader.

torch gives each worker of a loader over an ``IterableDataset`` its own copy of the dataset;
one that does not split its items between them (by ``get_worker_info()``) yields every item
once per worker. Counted in batches per second, such a loader looks N times faster with N
workers while each epoch delivers every sample N times. :class:`Replicas` watches the first
batches of a pass for the signature of it. With ``W >= 2`` workers taking turns, batches 0 and
``W`` are worker 0's first two and batches 1 and ``W + 1`` worker 1's: the signature is that
worker 1's first two batches equal worker 0's, while worker 0's two differ (a stream of one
repeated value is not flagged). Two batches of each are asked for, not one: sharded data whose
shards begin alike (a silent frame, a header item) has equal first batches too, but not equal
second ones. Batches are compared by :func:`same`. fastdata's own streams split themselves and
are not watched, nor are map-style datasets (the sampler splits them), nor loaders with
``in_order=False``: their batches come as the workers finish them, so a batch's number does
not say which worker made it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from fastdata.errors import RepeatedItemsWarning

__all__ = [
    "NONE_LEFT",
    "REPEATS",
    "TUNE_RATES",
    "RepeatedItemsWarning",
    "Replicas",
    "failure_hint",
    "repeats_advice",
    "same",
]

REPEATS = (
    "the dataset repeats its items once per worker: the first two batches of two workers "
    "are equal, so its __iter__ does not split them with get_worker_info()"
)
"""Why a trial whose loader repeats its items failed (its error in the table)."""

TUNE_RATES = (
    "batches per second count every repeat, so more workers only look faster: the settings "
    "with two or more workers are left out (failed, in the table), and the choice is among "
    "those with fewer"
)
"""What the tuner did with such a loader, for :func:`repeats_advice`."""

NONE_LEFT = (
    "batches per second count every repeat, so more workers only look faster: every setting "
    "searched has two or more workers, and all were left out; add num_workers 0 or 1 to the "
    "search space"
)
"""What the tuner did when no setting was left, for :func:`repeats_advice`."""


def repeats_advice(rates: str) -> str:
    """What the repeats mean and what to do, after ``rates`` (what the rates count)."""
    return (
        "Your IterableDataset repeats its items once per worker: each worker iterates its own "
        f"copy of it, and {rates}. Split the items between workers in __iter__ with "
        "torch.utils.data.get_worker_info() (yield every num_workers-th item, from its id), or "
        "read the data with a fastdata stream (ParquetStream, ImageStream), which splits itself."
    )


class Replicas:
    """Watches a pass of ``loader`` (:meth:`see` each batch, counting from 0); :attr:`found`
    is set once its first batches show the module's signature."""

    def __init__(self, loader: Any) -> None:
        workers = getattr(loader, "num_workers", 0) or 0
        self.found = False
        watched = workers >= 2 and getattr(loader, "in_order", True) and _unsplit(loader)
        # worker 0's first two batches, then worker 1's
        self._wanted = (0, workers, 1, workers + 1) if watched else ()
        self._seen: dict[int, Any] = {}

    def see(self, index: int, batch: Any) -> None:
        """Batch number ``index`` of the current pass."""
        if index not in self._wanted:
            return
        self._seen[index] = batch
        if len(self._seen) == len(self._wanted):  # decided: nothing more to watch
            first, own_next, other, other_next = (self._seen[i] for i in self._wanted)
            self.found = (
                not same(first, own_next) and same(first, other) and same(own_next, other_next)
            )
            self._wanted, self._seen = (), {}
        elif index == 1 and not same(self._seen.get(0), batch):  # split: no need to hold more
            self._wanted, self._seen = (), {}


def _unsplit(loader: Any) -> bool:
    """Whether ``loader`` reads an IterableDataset that is not one of fastdata's streams."""
    from torch.utils.data import IterableDataset

    from fastdata.sources import PlannedStream

    dataset = getattr(loader, "dataset", None)
    return isinstance(dataset, IterableDataset) and not isinstance(dataset, PlannedStream)


def same(a: Any, b: Any) -> bool:
    """Whether two batches are equal: tensors by ``torch.equal`` and NumPy arrays by
    ``numpy.array_equal`` (of the same shape and dtype), mappings, sequences and dataclasses
    item by item (field by field), anything else by ``==`` (what cannot say is not equal)."""
    import numpy as np
    import torch

    arrays: list[tuple[type[Any], Callable[[Any, Any], Any]]] = [
        (torch.Tensor, torch.equal),
        (np.ndarray, np.array_equal),
    ]
    for kind, equal in arrays:
        if isinstance(a, kind) or isinstance(b, kind):
            return (
                isinstance(a, kind)
                and isinstance(b, kind)
                and a.shape == b.shape
                and a.dtype == b.dtype
                and getattr(a, "device", None) == getattr(b, "device", None)
                and bool(equal(a, b))
            )
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        fields = [f.name for f in dataclasses.fields(a)]
        return type(a) is type(b) and all(same(getattr(a, n), getattr(b, n)) for n in fields)
    if isinstance(a, Mapping):
        return isinstance(b, Mapping) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    try:
        return bool(a == b)
    except Exception:  # e.g. an object whose == raises
        return False


def failure_hint(exc: BaseException) -> str:
    """A sentence on what a loader's failure means, where it is one the tuner's trials meet
    for a reason of the dataset's ("" for others)."""
    if isinstance(exc, ValueError) and "generator already executing" in str(exc):
        return (
            " (two thread workers read the same generator at once: the dataset's __iter__ "
            "returns an iterator it keeps, e.g. one made in __init__, so it can be read only "
            "once; make __iter__ a generator function that splits the items between workers "
            "with get_worker_info())"
        )
    return ""
