"""fastdata._tree.map_tensors: the walk that to_device and the tuner share."""

from __future__ import annotations

import functools
import operator
import types
from collections import OrderedDict, defaultdict, namedtuple
from typing import Any

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata import Ragged
from fastdata._tree import map_tensors

Pair = namedtuple("Pair", ["image", "label"])


def paths_of(batch: Any) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    map_tensors(lambda t, path: found.append(path) or t, batch)
    return found


def test_paths_name_keys_positions_and_ragged_parts_in_order() -> None:
    tokens = Ragged.from_rows([[1, 2], None])
    batch = {
        "pair": Pair(torch.zeros(1), 7),
        "seq": [torch.ones(1), ("text", torch.ones(2))],
        "tokens": tokens,
    }
    assert paths_of(batch) == [
        ("pair", 0),  # a named tuple's field by position
        ("seq", 0),
        ("seq", 1, 1),
        ("tokens", "valid"),  # a Ragged's parts in Ragged.map_tensors' order
        ("tokens", "values"),
        ("tokens", "offsets"),
    ]


def test_containers_keep_their_types_and_other_leaves_pass_through() -> None:
    leaf = object()
    counts: defaultdict[str, Any] = defaultdict(int, x=torch.ones(1))
    batch = OrderedDict(
        counts=counts,
        frozen=types.MappingProxyType({"x": torch.ones(1)}),
        pair=Pair(torch.zeros(1), leaf),
        pairs=(torch.zeros(1), [torch.zeros(1), None]),
        tokens=Ragged.from_rows([[1], [2, 3]]),
    )
    out = map_tensors(lambda t, _: t + 1, batch)
    assert type(out) is OrderedDict and list(out) == list(batch)
    assert type(out["counts"]) is defaultdict and out["counts"].default_factory is int
    assert type(out["frozen"]) is dict  # an immutable mapping cannot be copied and updated
    assert type(out["pair"]) is Pair and out["pair"].label is leaf
    assert type(out["pairs"]) is tuple and type(out["pairs"][1]) is list
    assert out["pairs"][1][1] is None
    assert isinstance(out["tokens"], Ragged)
    assert torch.equal(out["tokens"].values, batch["tokens"].values + 1)
    assert torch.equal(out["tokens"].offsets, batch["tokens"].offsets + 1)
    assert torch.equal(batch["counts"]["x"], torch.ones(1))  # the input is not changed
    assert torch.equal(out["counts"]["x"], torch.full((1,), 2.0))


def nested(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.lists(children, max_size=3).map(tuple),
            st.dictionaries(st.text("abc", min_size=1, max_size=2), children, max_size=3),
            st.tuples(children, children).map(lambda xy: Pair(*xy)),
        ),
        max_leaves=12,
    )


LEAVES = st.one_of(
    st.integers(0, 5).map(lambda n: torch.arange(float(n))),
    st.integers(),
    st.text(max_size=3),
    st.none(),
)


@settings(max_examples=200, deadline=None)
@given(nested(LEAVES))
def test_every_tensor_is_visited_once_at_its_path(batch: Any) -> None:
    seen: list[tuple[tuple[Any, ...], torch.Tensor]] = []

    def visit(t: torch.Tensor, path: tuple[Any, ...]) -> torch.Tensor:
        seen.append((path, t))
        return t * 2

    out = map_tensors(visit, batch)
    at = functools.partial(functools.reduce, operator.getitem)
    assert len({id(t) for _, t in seen}) == len(seen)
    for path, t in seen:
        assert at(path, batch) is t  # the path leads to the tensor in the input...
        assert torch.equal(at(path, out), t * 2)  # ...and to fn's result in the output
    assert paths_of(out) == [path for path, _ in seen]  # the same structure, the same order
