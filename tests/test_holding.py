"""The consumer hook of :mod:`fastdata._holding`: a consumer that holds batches it read from a
fastdata DataLoader (or from an iterator the loader returned) makes the loader's
``state_dict()`` refuse, with the consumer's message, while it holds some."""

from __future__ import annotations

import gc

import pytest

import fastdata as fd
from fastdata._holding import hold, note_iterator, owner_of
from fastdata.errors import ResumeError


class Buffer:
    """A consumer that holds ``held`` batches."""

    def __init__(self) -> None:
        self.held = 0

    def unsaved(self) -> str | None:
        return f"holds {self.held} batches" if self.held else None


def test_a_holder_of_the_loader_or_its_iterator_makes_its_state_refuse() -> None:
    loader = fd.DataLoader(list(range(6)), batch_size=2)
    buffer = Buffer()
    assert hold(loader, buffer) is loader
    loader.state_dict()  # nothing held
    buffer.held = 2
    with pytest.raises(ResumeError, match="holds 2 batches"):
        loader.state_dict()
    buffer.held = 0
    iterator = iter(loader)
    other = Buffer()
    assert owner_of(iterator) is loader and hold(iterator, other) is loader
    other.held = 1
    with pytest.raises(ResumeError, match="holds 1 batches"):
        loader.state_dict()
    del other
    gc.collect()
    loader.state_dict()  # a holder that is gone holds nothing (weakly registered)


def test_what_is_no_fastdata_loader_has_no_owner() -> None:
    assert owner_of([1, 2]) is None and owner_of(iter([1])) is None and owner_of(3) is None
    assert hold(iter([1]), Buffer()) is None
    note_iterator(3, object())  # no weak reference to an int: nothing noted, no error
    assert owner_of(3) is None
