"""Each thread worker's copy of a dataset, made as a worker process gets one (pickled),
except that shared-memory tensors stay shared (see :mod:`fastdata.loader._threads`)."""

from __future__ import annotations

import copy
import io
import pickle
from typing import Any

import torch

from fastdata.errors import warn_user

__all__ = ["ThreadCopies"]


class ThreadCopies:
    """Copies of ``dataset``, one per thread worker: pickled once as for a worker process (its
    ``__getstate__`` applies) and unpickled for each thread, shared-memory tensors passed by
    reference (they are the workers' channel to the main process). A dataset that does not
    pickle is copied shallowly (with a warning: its mutable state is then shared)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self._shared: list[Any] = []
        self._pickled: bytes | None = None

    def make(self) -> Any:
        """One more copy (the first call pickles)."""
        if self._pickled is None:
            self._pickled = self._pickle()
        if not self._pickled:
            return copy.copy(self.dataset)
        shared = self._shared

        class _Unpickler(pickle.Unpickler):
            def find_class(self, module: str, name: str) -> Any:
                if (module, name) == (__name__, _shared_tensor.__name__):
                    return shared.__getitem__
                return super().find_class(module, name)

        return _Unpickler(io.BytesIO(self._pickled)).load()

    def _pickle(self) -> bytes:
        """The dataset pickled, or b"" (warned) when it does not pickle."""
        buffer, shared = io.BytesIO(), self._shared

        class _Pickler(pickle.Pickler):
            # Called for objects of other than the builtin types only (not for each of a
            # stream's thousands of paths, as persistent_id would be).
            def reducer_override(self, obj: Any) -> Any:
                if isinstance(obj, torch.Tensor) and obj.is_shared():
                    shared.append(obj)
                    return _shared_tensor, (len(shared) - 1,)
                return NotImplemented

        try:
            _Pickler(buffer, pickle.HIGHEST_PROTOCOL).dump(self.dataset)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            warn_user(
                f"{type(self.dataset).__name__} cannot be pickled ({exc}): each thread worker "
                "gets a shallow copy, which shares the dataset's mutable attributes between "
                "threads"
            )
            return b""
        return buffer.getvalue()


def _shared_tensor(index: int) -> torch.Tensor:
    """What a shared-memory tensor is pickled as in :class:`ThreadCopies`: its unpickler
    resolves this name to the tensor itself, so no other unpickler may call it."""
    raise pickle.UnpicklingError(f"shared tensor {index} of a thread worker's copy, elsewhere")
