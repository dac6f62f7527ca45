"""A dataset that repeats its items once per worker, told apart from a faster loader.

torch gives each worker of a loader over an ``IterableDataset`` its own copy of the dataset;
one that does not split its items between them (by ``get_worker_info()``) yields every item
once per worker. Counted in batches per second, such a loader looks N times faster with N
workers while each epoch delivers every sample N times. :class:`Replicas` watches the first
batches of a pass for the signature of it: with two or more workers, the first batches of
workers 0 and 1 (batches 0 and 1: workers take turns) are equal, while worker 0's second
batch (batch ``num_workers``) is not its first (a stream of one repeated value is not
flagged). fastdata's own streams split themselves and are not watched, nor are map-style
datasets (the sampler splits them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "REPEATS",
    "TUNE_RATES",
    "RepeatedItemsWarning",
    "Replicas",
    "failure_hint",
    "repeats_advice",
    "same",
]

REPEATS = (
    "the dataset repeats its items once per worker: the first batches of two workers are "
    "equal, so its __iter__ does not split them with get_worker_info()"
)
"""Why a trial whose loader repeats its items failed (its error in the table)."""

TUNE_RATES = (
    "batches per second count every repeat, so more workers only look faster: the settings "
    "with two or more workers are left out (failed, in the table), and the choice is among "
    "those with fewer"
)
"""What the tuner did with such a loader, for :func:`repeats_advice`."""


class RepeatedItemsWarning(UserWarning):
    """The Python API's warning that a loader measured repeats its items once per worker
    (the command line says it in its report instead)."""


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
        self._wanted = (0, 1, workers) if workers >= 2 and _unsplit(loader) else ()
        self._seen: dict[int, Any] = {}

    def see(self, index: int, batch: Any) -> None:
        """Batch number ``index`` of the current pass."""
        if index not in self._wanted:
            return
        self._seen[index] = batch
        if len(self._seen) == len(self._wanted):  # decided: nothing more to watch
            first, second, own_next = (self._seen[i] for i in self._wanted)
            self.found = same(first, second) and not same(first, own_next)
            self._wanted, self._seen = (), {}


def _unsplit(loader: Any) -> bool:
    """Whether ``loader`` reads an IterableDataset that is not one of fastdata's streams."""
    from torch.utils.data import IterableDataset

    from fastdata.sources import PlannedStream

    dataset = getattr(loader, "dataset", None)
    return isinstance(dataset, IterableDataset) and not isinstance(dataset, PlannedStream)


def same(a: Any, b: Any) -> bool:
    """Whether two batches are equal: tensors by ``torch.equal``, mappings and sequences item
    by item, anything else by ``==`` (what cannot say is not equal)."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and a.device == b.device
            and torch.equal(a, b)
        )
    if isinstance(a, Mapping):
        return isinstance(b, Mapping) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    try:
        return bool(a == b)
    except Exception:  # e.g. a NumPy array's == is an array
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
