"""Consumers that hold items read from a fastdata DataLoader: the loader's state must not
lose them.

A loader's :meth:`~fastdata.DataLoader.state_dict` is the position of the batches it handed
out. A consumer that reads batches and holds some before handing them on (length bucketing
buffers a pool of rows) makes that position run ahead of what its own consumer got: a state
saved then would resume past the held rows, and lose them. Such a consumer registers here
with the loader it reads from (the loader itself, or an iterator the loader returned), weakly;
the loader's ``state_dict()`` asks every registered holder first and raises
:class:`~fastdata.errors.ResumeError` with the holder's message while one holds items.

A holder is any object with ``unsaved() -> str | None``: ``None`` when it holds nothing read
from the loader, else what it holds and what to save instead. This module is torch-free.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Protocol

from fastdata.errors import ResumeError

__all__ = ["Holder", "check_holders", "hold", "note_iterator", "owner_of"]

_OWNERS: weakref.WeakKeyDictionary[Any, weakref.ref[Any]] = weakref.WeakKeyDictionary()
"""The loader each of its live iterators came from."""


class Holder(Protocol):
    def unsaved(self) -> str | None: ...


def note_iterator(iterator: Any, loader: Any) -> None:
    """Remember that ``iterator`` came from ``loader`` (a DataLoader's ``__iter__``)."""
    with contextlib.suppress(TypeError):  # one without weak references: not found by it
        _OWNERS[iterator] = weakref.ref(loader)


def owner_of(stream: Any) -> Any:
    """The fastdata DataLoader ``stream`` is, or returned as an iterator; else None."""
    if getattr(type(stream), "_fd_holds_consumers", False):
        return stream
    try:
        ref = _OWNERS.get(stream)
    except TypeError:
        return None
    return ref() if ref is not None else None


def hold(stream: Any, holder: Holder) -> Any:
    """Register ``holder`` (weakly) with the loader of ``stream``; that loader, or None."""
    owner = owner_of(stream)
    if owner is not None:
        owner._fd_holders.add(holder)
    return owner


def check_holders(holders: weakref.WeakSet[Any]) -> None:
    """Raise ResumeError with the message of the first holder that holds items."""
    for holder in list(holders):
        message = holder.unsaved()
        if message:
            raise ResumeError(message)
