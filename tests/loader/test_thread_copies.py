"""Thread workers' dataset copies: each thread its own copy, shared-memory tensors shared."""

from __future__ import annotations

import pickle

import pytest
import torch

from fastdata.loader._thread_copies import ThreadCopies, _shared_tensor


class Holder:
    def __init__(self) -> None:
        self.counts = torch.zeros(4).share_memory_()
        self.plain = torch.zeros(4)
        self.seen: list[int] = []


def test_each_thread_gets_its_own_copy_sharing_only_shared_memory_tensors() -> None:
    original = Holder()
    copies = ThreadCopies(original)
    a, b = copies.make(), copies.make()
    assert a is not b and a.seen is not b.seen and a.plain is not original.plain
    a.counts[0] = 5  # the shared tensor is the same storage everywhere
    assert b.counts[0] == 5 and original.counts[0] == 5
    a.plain[0] = 5
    assert b.plain[0] == 0


def test_a_shared_tensor_in_a_copy_is_the_same_tensor_whatever_holds_it() -> None:
    shared = torch.arange(3).share_memory_()
    copies = ThreadCopies({"a": shared, "b": [shared, "path"] * 3, "plain": torch.ones(2)})
    copy = copies.make()
    assert copy["a"] is shared and all(t is shared for t in copy["b"][::2])
    assert copy["plain"] is not None and not copy["plain"].is_shared()


def test_a_copys_stand_in_for_a_shared_tensor_fails_in_any_other_unpickler() -> None:
    copies = ThreadCopies({"a": torch.zeros(2).share_memory_()})
    copies.make()
    assert copies._pickled
    with pytest.raises(pickle.UnpicklingError, match="shared tensor 0"):
        pickle.loads(copies._pickled)
    with pytest.raises(pickle.UnpicklingError):
        _shared_tensor(0)
