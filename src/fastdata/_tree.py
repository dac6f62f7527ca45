"""The one walk over a nested batch that replaces its tensors: :func:`map_tensors`.

:func:`fastdata.to_device` (pinning, copies, normalization) and the tuner's transfer
(:mod:`fastdata.tune`) both move every tensor of a batch with it, so a batch that one of them
moves whole, the other moves whole too. Collate walks batches its own way
(:mod:`fastdata.collate._walk`): it zips many samples into one and rebuilds containers as
``default_collate`` does, which is a different contract.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, TypeVar

import torch

from fastdata.ragged import Ragged

T = TypeVar("T")
KeyPath = tuple[Any, ...]
"""Where a tensor sits in a batch: mapping keys and sequence positions, outermost first."""


def map_tensors(fn: Callable[[torch.Tensor, KeyPath], torch.Tensor], batch: T) -> T:
    """``batch`` with each tensor ``t`` found at key path ``path`` replaced by ``fn(t, path)``.

    Walks mappings, lists, tuples and named tuples depth-first, in their order. A mutable
    mapping (``dict``, ``OrderedDict``, ``defaultdict``, ...) comes back as a shallow copy of
    its own type, other mappings as ``dict``; a named tuple keeps its type, other tuples
    become ``tuple`` and lists ``list``. A :class:`~fastdata.Ragged` comes back as a Ragged of
    its mapped tensors (at ``(*path, "values")``, ``"offsets"`` and ``"valid"``). Any other
    object (strings, numbers, ``None``, numpy arrays) is returned as it is. Named-tuple fields
    are addressed by position in ``path``.
    """
    return _walk(fn, batch, ())


def _walk(fn: Callable[[torch.Tensor, KeyPath], torch.Tensor], obj: T, path: KeyPath) -> T:
    if isinstance(obj, torch.Tensor):
        return fn(obj, path)  # type: ignore[return-value]
    if isinstance(obj, Ragged):
        return obj.map_tensors(lambda t, name: fn(t, (*path, name)))  # type: ignore[return-value]
    if isinstance(obj, Mapping):
        items = {k: _walk(fn, v, (*path, k)) for k, v in obj.items()}
        if isinstance(obj, MutableMapping):
            clone = copy.copy(obj)
            clone.update(items)
            return clone
        return items  # type: ignore[return-value]
    if isinstance(obj, (list, tuple)):
        values = [_walk(fn, v, (*path, i)) for i, v in enumerate(obj)]
        if hasattr(obj, "_fields"):  # a named tuple
            return type(obj)(*values)
        return tuple(values) if isinstance(obj, tuple) else values  # type: ignore[return-value]
    return obj
