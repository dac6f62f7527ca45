"""The walk over a batch's structure (fastdata.collate._walk) that pad_collate and
nested_collate share: which fields reach the padding leaf, which are stacked, which are
left as they are, and errors that name the position, the value and the fix."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import pytest
import torch
from collate_helpers import Point, tokens
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata import Ragged
from fastdata.collate import nested_collate, pad_collate
from fastdata.collate._walk import Walk, collate_batch


def recording_walk(keys: frozenset | None = None) -> tuple[Walk, list[str]]:
    """A Walk whose leaves record where they were called and return a marker."""
    seen: list[str] = []

    def leaf(tensors: list[torch.Tensor], shapes: list[torch.Size], where: str) -> str:
        assert [t.shape for t in tensors] == shapes
        seen.append(where)
        return f"leaf{where}"

    def ragged_leaf(ragged: Ragged, where: str) -> str:
        seen.append(where)
        return f"ragged{where}"

    return Walk(leaf, ragged_leaf, keys, (), "walker"), seen


def test_pads_is_true_for_the_named_paths_only() -> None:
    walk, _ = recording_walk(frozenset({("a",), ("b", 0)}))
    assert walk.pads(("a",)) and walk.pads(("b", 0))
    assert not walk.pads(("b",)) and not walk.pads(())
    assert not recording_walk(None)[0].pads(("a",))


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    labels=st.lists(st.integers(-5, 5), min_size=5, max_size=5),
)
def test_without_keys_every_tensor_with_a_dim_reaches_the_leaf_and_numbers_are_stacked(
    lengths: list[int], labels: list[int]
) -> None:
    walk, seen = recording_walk()
    batch = [
        {"x": torch.ones(n), "label": labels[i], "name": f"s{i}", "pair": (torch.tensor(i),)}
        for i, n in enumerate(lengths)
    ]
    out = collate_batch(batch, walk)
    assert seen == ["['x']"]
    assert out["x"] == "leaf['x']"
    assert out["label"].tolist() == labels[: len(lengths)]
    assert out["name"] == [f"s{i}" for i in range(len(lengths))]
    assert out["pair"][0].tolist() == list(range(len(lengths)))  # 0-dim tensors: stacked


def test_with_keys_only_the_named_fields_reach_the_leaf() -> None:
    walk, seen = recording_walk(frozenset({("b", 1)}))
    batch = [{"a": torch.ones(2), "b": [torch.ones(2), torch.ones(i + 1)]} for i in range(3)]
    out = collate_batch(batch, walk)
    assert seen == ["['b'][1]"]
    assert out["a"].shape == (3, 2) and out["b"][0].shape == (3, 2)
    assert out["b"][1] == "leaf['b'][1]"


def test_a_batched_item_sends_list_raggeds_to_the_ragged_leaf_and_keeps_the_rest() -> None:
    walk, seen = recording_walk()
    ids = torch.arange(3)
    text = Ragged.from_rows(["a", "bb", ""])
    batch = OrderedDict(ids=ids, tokens=Ragged.from_rows([[1], [2, 2], []]), text=text)
    out = collate_batch(batch, walk)
    assert seen == ["['tokens']"]
    assert type(out) is OrderedDict and list(out) == ["ids", "tokens", "text"]
    assert out["ids"] is ids and out["text"] is text and out["tokens"] == "ragged['tokens']"


def test_the_leafs_padded_result_becomes_values_lengths_and_mask_keys() -> None:
    out = pad_collate(tokens(1, 3))
    assert list(out) == ["tokens", "tokens_lengths", "tokens_mask"]
    assert out["tokens_lengths"].tolist() == [1, 3]
    assert out["tokens_mask"].sum().item() == 4


ERRORS = {
    "empty batch": (lambda: [], ValueError, ["empty batch"]),
    "one sample": (lambda: {"tokens": torch.ones(2)}, TypeError, ["no Ragged", "pad_collate(["]),
    "a tensor": (lambda: torch.ones(2), TypeError, ["pad_collate([sample])"]),
    "rank": (
        lambda: [*tokens(1, 2, 3), {"tokens": torch.ones(2, 2, dtype=torch.int64)}],
        ValueError,
        ["batch[3]['tokens']", "2 dims", "batch[0]['tokens']"],
    ),
    "dtype": (
        lambda: [*tokens(1, 2), *tokens(3, dtype=torch.int32)],
        TypeError,
        ["batch[2]['tokens']", "torch.int32", "x.to(torch.int64)"],
    ),
    "string for tensor": (
        lambda: [*tokens(1), {"tokens": "oops"}],
        TypeError,
        ["batch[1]['tokens']", "'oops'", "same type"],
    ),
    "missing key": (
        lambda: [*tokens(1), {"token": torch.ones(1)}],
        ValueError,
        ["batch[1]", "missing"],
    ),
    "tuple length": (lambda: [(1, 2), (1,)], ValueError, ["batch[1]", "length 1", "length 2"]),
    "namedtuple field": (
        lambda: [Point(torch.ones(1), 1), Point(torch.ones(1, dtype=torch.int8), 2)],
        TypeError,
        ["batch[1].x"],
    ),
    "nested position": (
        lambda: [{"a": [torch.ones(1)]}, {"a": [None]}],
        TypeError,
        ["batch[1]['a'][0]", "NoneType"],
    ),
    "numpy strings": (lambda: [np.array(["a", "b"])], TypeError, ["batch[0]", "<U1"]),
    "device": (
        lambda: [torch.ones(2), torch.ones(3, device="meta")],
        ValueError,
        ["batch[1]", "meta", "one device"],
    ),
    "nested tensor": (
        lambda: [torch.nested.nested_tensor([torch.ones(2)], layout=torch.jagged)],
        TypeError,
        ["batch[0]", "dense"],
    ),
}


@pytest.mark.parametrize("fn", [pad_collate, nested_collate])
@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_name_the_position_the_value_and_the_fix(fn: Any, case: str) -> None:
    make_batch, exc, fragments = ERRORS[case]
    with pytest.raises(exc) as info:
        fn(make_batch())
    for fragment in fragments:
        assert fragment.replace("pad_collate", fn.__name__) in str(info.value)
