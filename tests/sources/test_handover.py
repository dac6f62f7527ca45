"""A batch handed from a worker process to the main process (fastdata.sources._handover): each
Ragged in one shared-memory segment holding its values, offsets and validity; the rest, and
every batch outside a worker process, as it was."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdata.sources._handover as handover
from fastdata import Ragged
from fastdata.sources._handover import handed_over

DTYPES = [torch.int8, torch.int16, torch.int64, torch.float32, torch.float64]


@st.composite
def raggeds(draw: Any) -> Ragged:
    """A Ragged of numbers (some rows null) or of strings."""
    if draw(st.booleans()):
        return Ragged.from_rows(draw(st.lists(st.one_of(st.none(), st.text(max_size=6)))))
    dtype = draw(st.sampled_from(DTYPES))
    rows = draw(st.lists(st.one_of(st.none(), st.lists(st.integers(-100, 100), max_size=5))))
    return Ragged.from_rows(rows, dtype=dtype)


def test_outside_a_worker_process_the_batch_is_handed_over_as_it_is() -> None:
    batch = {"tokens": Ragged.from_rows([[1, 2], [3]]), "id": torch.arange(2)}
    assert handed_over(batch, reuse=True) is batch


@settings(max_examples=60, deadline=None)
@given(ragged=raggeds(), other=raggeds())
def test_in_a_worker_process_each_ragged_moves_into_one_shared_segment(
    ragged: Ragged, other: Ragged
) -> None:
    ids = torch.arange(3)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(handover, "in_worker_process", lambda: True)
        out = handed_over({"a": ragged, "id": ids, "b": other, "meta": ["x"]}, reuse=False)
    assert out["id"] is ids and out["meta"] == ["x"]
    for name, original in (("a", ragged), ("b", other)):
        moved = out[name]
        assert moved.tolist() == original.tolist() and moved.kind == original.kind
        parts = [t for t in (moved.values, moved.offsets, moved.valid) if t is not None]
        storages = {t.untyped_storage().data_ptr() for t in parts}
        assert len(storages) == 1  # one segment
        segment = parts[0].untyped_storage()
        assert segment.is_shared()
        size = segment.nbytes()
        assert size >= 64 << 10 and size & (size - 1) == 0  # a power of two, 64 KiB or more
        assert all((t.data_ptr() - segment.data_ptr()) % 8 == 0 for t in parts)
