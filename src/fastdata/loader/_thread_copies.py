"""Each thread worker's copy of what a worker process gets: the dataset, the collate function
and the worker init, made as a worker process gets them (pickled together), except that
shared-memory tensors stay shared and functions and classes are the same objects (see
:mod:`fastdata.loader._threads`)."""

from __future__ import annotations

import copy
import io
import pickle
import types
from typing import Any

import numpy as np
import torch

from fastdata.errors import warn_user

__all__ = ["ThreadCopies", "shallow"]


class ThreadCopies:
    """Copies of ``parts`` (the dataset, the collate function, the worker init), one per
    thread worker, pickled once together as for a worker process (``__getstate__`` applies),
    so that what refers to the dataset refers to the thread's copy: a ``worker_init_fn`` or
    ``collate_fn`` that is a method of the dataset sets and reads that thread's dataset, a
    collate object with state of its own has a copy per thread, as in worker processes.

    With ``shallow`` (a map-style dataset, whose data is shared, not duplicated), that object
    is copied shallowly instead (:func:`shallow`), once per copy, and the rest is pickled
    around it. Where the collate function or the worker init does not pickle, the dataset
    alone is copied and they are shared; where the dataset does not either, it is copied
    shallowly, with a warning unless it was to be copied shallowly anyway."""

    def __init__(self, parts: tuple[Any, ...], *, shallow: Any = None) -> None:
        self.parts = parts
        self._shallow = shallow
        self._shared: list[Any] = []
        self._pickled: tuple[bytes, int] | None = None  # the first parts pickled, how many

    def make(self) -> tuple[Any, ...]:
        """One more copy of the parts (the first call pickles)."""
        if self._pickled is None:
            self._pickled = self._pickle()
        pickled, copied = self._pickled
        if not copied:
            return (shallow(self.parts[0]), *self.parts[1:])
        rest = self.parts[copied:]  # what did not pickle: shared as it is
        shared = self._shared

        class _Unpickler(pickle.Unpickler):
            def find_class(self, module: str, name: str) -> Any:
                if (module, name) == (__name__, _shared.__name__):
                    return shared.__getitem__
                if (module, name) == (__name__, _shallow_copy.__name__):
                    return lambda index: shallow(shared[index])
                return super().find_class(module, name)

        return (*_Unpickler(io.BytesIO(pickled)).load(), *rest)

    def _pickle(self) -> tuple[bytes, int]:
        """The parts pickled together, else the dataset alone (the collate function or the
        worker init holds what does not pickle: they are shared, as before they were
        copied), else nothing (a shallow copy of the dataset, warned unless it was to be
        shallow anyway)."""
        for parts in (self.parts, self.parts[:1]):
            try:
                return self._dumps(parts), len(parts)
            except Exception as exc:  # whatever a __reduce__ or __getstate__ raises
                self._shared.clear()
                error = exc
        if self._shallow is None:
            warn_user(
                f"{type(self.parts[0]).__name__} cannot be pickled ({type(error).__name__}: "
                f"{error}): each thread worker gets a shallow copy, which shares the dataset's "
                "mutable attributes between threads"
            )
        return b"", 0

    def _dumps(self, parts: tuple[Any, ...]) -> bytes:
        buffer, shared, target = io.BytesIO(), self._shared, self._shallow

        class _Pickler(pickle.Pickler):
            # Called for objects of other than the builtin types only (not for each of a
            # stream's thousands of paths, as persistent_id would be).
            def reducer_override(self, obj: Any) -> Any:
                if obj is _shared or obj is _shallow_copy:
                    return NotImplemented  # the stand-ins themselves, saved by name
                if obj is target:
                    shared.append(obj)
                    return _shallow_copy, (len(shared) - 1,)
                if _by_reference(obj):
                    shared.append(obj)
                    return _shared, (len(shared) - 1,)
                return NotImplemented

        _Pickler(buffer, pickle.HIGHEST_PROTOCOL).dump(parts)
        return buffer.getvalue()


def _by_reference(obj: Any) -> bool:
    """Whether ``obj`` is passed to each copy as it is: code (a function, a class, also a
    lambda or a local one, which pickle cannot name; a builtin, unless it is a method of an
    object, which is copied as a worker process would have it) and shared-memory tensors
    (the workers' channel to the main process)."""
    if isinstance(obj, types.BuiltinFunctionType):
        return obj.__self__ is None or isinstance(obj.__self__, types.ModuleType | type)
    if isinstance(obj, torch.Tensor):
        return obj.is_shared()
    return isinstance(obj, types.FunctionType | type)


def shallow(dataset: Any) -> Any:
    """A thread's own copy of a map-style dataset: its attributes are the thread's (what a
    ``worker_init_fn`` sets on it stays with that worker), the objects they refer to shared.
    An array or tensor given as the dataset is shared itself (a copy of it would copy its
    data); a dataset that cannot be copied is shared, with a warning."""
    if isinstance(dataset, np.ndarray | torch.Tensor):
        return dataset
    try:
        return copy.copy(dataset)
    except Exception as exc:  # any failure of a user's __copy__ or __reduce__
        warn_user(
            f"{type(dataset).__name__} cannot be copied ({exc}): the thread workers share it, "
            "so what worker_init_fn sets on it is seen by every thread"
        )
        return dataset


def _shared(index: int) -> Any:
    """What an object passed by reference is pickled as in :class:`ThreadCopies`: its
    unpickler resolves this name to the object itself, so no other unpickler may call it."""
    raise pickle.UnpicklingError(f"shared object {index} of a thread worker's copy, elsewhere")


def _shallow_copy(index: int) -> Any:
    """What the dataset copied shallowly is pickled as in :class:`ThreadCopies` (resolved
    by its unpickler alone, as :func:`_shared`)."""
    raise pickle.UnpicklingError(f"shallow copy {index} of a thread worker's copy, elsewhere")
