"""pad_collate and nested_collate (fastdata.collate._collate) of lists of samples: padding and
nesting. Bucketing and padding statistics: test_bucket.py; the structure walk: test_walk.py.

The properties are checked against independent references: each item cut back out of the
padded batch, ``torch.utils.data.default_collate`` where every item has one size, and
``torch.nested.to_padded_tensor`` for nested batches.
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch
from collate_helpers import (
    DTYPES,
    Point,
    assert_same,
    make_tensor,
    ragged_batches,
    tokens,
    var_len_samples,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, default_collate

from fastdata import _padding
from fastdata.collate import (
    Padded,
    nested_collate,
    pad_collate,
)

# Both padding strategies: one slice copy per item (threshold 0) and the masked scatter.
PATHS = pytest.mark.parametrize("scatter_max", [0, 10**9], ids=["copy", "scatter"])


def cut_out(padded: Padded, i: int, left: bool) -> torch.Tensor:
    """Item ``i`` sliced back out of the padded values, using only its lengths."""
    lengths = padded.lengths[i].reshape(-1).tolist()
    region = [
        slice(p - n, p) if left else slice(0, n)
        for n, p in zip(lengths, padded.values.shape[1:], strict=True)
    ]
    return padded.values[(i, *region)]


def round_up(n: int, m: int | None) -> int:
    return n if m is None else math.ceil(n / m) * m


# --- pad_collate: properties -------------------------------------------------------------


@PATHS
@settings(max_examples=150, deadline=None)
@given(
    batch=ragged_batches(),
    left=st.booleans(),
    multiple=st.one_of(st.none(), st.integers(1, 8)),
    data=st.data(),
)
def test_unpadding_gives_back_every_item(
    scatter_max: int, batch: list[torch.Tensor], left: bool, multiple: int | None, data: Any
) -> None:
    ndim = batch[0].ndim
    if data.draw(st.booleans(), label="per-dim multiples"):
        multiple = data.draw(st.tuples(*[st.one_of(st.none(), st.integers(1, 8))] * ndim))
    pad_value = data.draw(st.sampled_from([0, 1] if batch[0].dtype == torch.bool else [0, 7]))
    side = "left" if left else "right"
    with mock.patch.object(_padding, "_SCATTER_MAX_MEAN_NUMEL", scatter_max):
        out = pad_collate(
            batch, keys=[()], padding_side=side, pad_to_multiple_of=multiple, pad_value=pad_value
        )
    assert isinstance(out, Padded)
    per_dim = multiple if isinstance(multiple, tuple) else (multiple,) * ndim
    want_shape = [round_up(max(t.shape[d] for t in batch), per_dim[d]) for d in range(ndim)]
    assert list(out.values.shape) == [len(batch), *want_shape]
    assert out.values.dtype == batch[0].dtype
    assert out.values.device == batch[0].device
    assert out.lengths.dtype == torch.int64
    assert out.mask is not None
    assert out.mask.dtype == torch.bool
    assert out.mask.shape == out.values.shape
    for i, item in enumerate(batch):
        assert torch.equal(cut_out(out, i, left), item)
        assert out.mask[i].sum().item() == item.numel()
    # the items fill exactly the masked positions, in order, and padding fills the rest
    assert torch.equal(out.values[out.mask], torch.cat([t.reshape(-1) for t in batch]))
    assert bool((out.values[~out.mask] == pad_value).all())


@settings(max_examples=100, deadline=None)
@given(batch=ragged_batches(max_ndim=1), left=st.booleans())
def test_1d_mask_sums_equal_lengths(batch: list[torch.Tensor], left: bool) -> None:
    out = pad_collate(batch, keys=[()], padding_side="left" if left else "right")
    assert out.lengths.tolist() == [len(t) for t in batch]
    assert out.mask.sum(1).tolist() == out.lengths.tolist()
    positions = torch.arange(out.values.shape[1])
    first_valid = out.values.shape[1] - out.lengths[:, None]
    want = positions >= first_valid if left else positions < out.lengths[:, None]
    assert torch.equal(out.mask, want)


@settings(max_examples=60, deadline=None)
@given(batch=ragged_batches())
def test_nested_to_padded_equals_pad_collate(batch: list[torch.Tensor]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: the strided layout is a prototype
        nested = nested_collate(batch, keys=[()])
    ragged_beyond_first = any(t.shape[1:] != batch[0].shape[1:] for t in batch)
    assert nested.layout == (torch.strided if ragged_beyond_first else torch.jagged)
    assert [t.shape for t in nested.unbind()] == [t.shape for t in batch]
    padded = pad_collate(batch, keys=[()], pad_value=0)
    if nested.layout == torch.strided and not any(t.numel() for t in batch):
        return  # torch: "to_padded_tensor: at least one constituent ... non-zero numel"
    assert nested.dtype == padded.values.dtype
    assert torch.equal(torch.nested.to_padded_tensor(nested, 0), padded.values)


def test_fields_are_padded_by_type_not_by_this_batchs_sizes() -> None:
    batch = [
        {"tokens": torch.tensor([1, 2, 3]), "image": torch.ones(3, 2, 2), "label": 1},
        {"tokens": torch.tensor([4]), "image": torch.zeros(3, 2, 2), "label": 0},
    ]
    out = pad_collate(batch)
    assert list(out) == [
        "tokens",
        "image",
        "label",
        "tokens_lengths",
        "tokens_mask",
        "image_lengths",
        "image_mask",
    ]
    assert out["tokens"].tolist() == [[1, 2, 3], [4, 0, 0]]
    assert out["tokens_lengths"].tolist() == [3, 1]
    assert out["tokens_mask"].tolist() == [[True, True, True], [True, False, False]]
    assert_same(out["image"], torch.stack([batch[0]["image"], batch[1]["image"]]))
    assert out["image_lengths"].tolist() == [[3, 2, 2], [3, 2, 2]]
    assert bool(out["image_mask"].all())
    assert_same(out["label"], torch.tensor([1, 0]))
    only_tokens = pad_collate(batch, keys=["tokens"])  # keys: the rest is stacked
    assert list(only_tokens) == ["tokens", "image", "label", "tokens_lengths", "tokens_mask"]
    assert_same(only_tokens["image"], out["image"])


def test_equal_lengths_and_batches_of_one_keep_the_structure() -> None:
    same = [{"tokens": torch.tensor([1, 2])}, {"tokens": torch.tensor([3, 4])}]
    for batch in (same, same[:1]):
        assert list(pad_collate(batch)) == ["tokens", "tokens_lengths", "tokens_mask"]
        nested = nested_collate(batch)["tokens"]
        assert nested.is_nested and nested.layout == torch.jagged
        assert [t.tolist() for t in nested.unbind()] == [s["tokens"].tolist() for s in batch]
    out = pad_collate(same, keys=["tokens"], pad_to_multiple_of=4)
    assert list(out) == ["tokens", "tokens_lengths", "tokens_mask"]
    assert out["tokens"].tolist() == [[1, 2, 0, 0], [3, 4, 0, 0]]
    assert list(pad_collate(same, keys=["tokens"], return_mask=False)) == [
        "tokens",
        "tokens_lengths",
    ]
    assert isinstance(pad_collate([torch.tensor([1, 2])]), Padded)  # a bare batch of one


@PATHS
def test_device_is_kept(scatter_max: int) -> None:
    batch = [torch.ones(3, 2, device="meta"), torch.ones(1, 2, device="meta")]  # no data, no GPU
    with mock.patch.object(_padding, "_SCATTER_MAX_MEAN_NUMEL", scatter_max):
        out = pad_collate(batch)
    assert {t.device.type for t in out} == {"meta"}
    assert out.values.shape == out.mask.shape == (2, 3, 2)


def test_left_padding_and_multiples() -> None:
    batch = [torch.tensor([1, 2, 3]), torch.tensor([4])]
    out = pad_collate(batch, padding_side="left", pad_to_multiple_of=4, pad_value=-1)
    assert out.values.tolist() == [[-1, 1, 2, 3], [-1, -1, -1, 4]]
    assert out.mask.tolist() == [[False, True, True, True], [False, False, False, True]]
    assert out.lengths.tolist() == [3, 1]


def test_images_pad_height_and_width_with_per_dim_multiples() -> None:
    a, b = torch.rand(3, 5, 7), torch.rand(3, 6, 2)
    out = pad_collate([a, b], pad_to_multiple_of=(None, 4, 4))
    assert out.values.shape == (2, 3, 8, 8)
    assert out.lengths.tolist() == [[3, 5, 7], [3, 6, 2]]
    assert torch.equal(out.values[1, :, :6, :2], b)
    assert out.mask[:, 0].sum((1, 2)).tolist() == [35, 12]  # the valid pixels


def test_paddings_place_lengths_in_tuples_lists_and_namedtuples() -> None:
    batch = [
        (torch.tensor([1, 2]), [np.arange(3), "a"], Point(torch.ones(2), 1.5)),
        (torch.tensor([3]), [np.arange(1), "b"], Point(torch.ones(1), 2.5)),
    ]
    tokens, (arrays, names), point = pad_collate(batch)
    assert isinstance(tokens, Padded)
    assert tokens.values.tolist() == [[1, 2], [3, 0]]
    assert isinstance(arrays, Padded)
    assert arrays.lengths.tolist() == [3, 1]
    assert arrays.values.dtype == torch.from_numpy(np.arange(3)).dtype
    assert names == ("a", "b")
    assert isinstance(point, Point)
    assert isinstance(point.x, Padded)
    assert_same(point.y, torch.tensor([1.5, 2.5], dtype=torch.float64))


def test_nested_key_paths() -> None:
    batch = [
        {"text": {"ids": torch.tensor([1, 2]), "lang": "en"}, "pair": (torch.ones(2),)},
        {"text": {"ids": torch.tensor([3, 4]), "lang": "fr"}, "pair": (torch.ones(2),)},
    ]
    out = pad_collate(batch, keys=[("text", "ids"), ("pair", 0)])
    assert list(out["text"]) == ["ids", "lang", "ids_lengths", "ids_mask"]
    assert isinstance(out["pair"][0], Padded)


def test_mapping_types_are_kept() -> None:
    batch = [OrderedDict(t=torch.tensor([1, 2])), OrderedDict(t=torch.tensor([3]))]
    out = pad_collate(batch)
    assert type(out) is OrderedDict
    assert list(out) == ["t", "t_lengths", "t_mask"]


# --- agreement with default_collate ------------------------------------------------------

LEAVES = ["tensor", "ndarray", "int", "float", "bool", "str", "np_scalar", "tensor0d"]


@st.composite
def leaf_schemas(draw: Any) -> tuple[Any, ...]:
    kind = draw(st.sampled_from(LEAVES))
    if kind in ("tensor", "ndarray"):
        shape = draw(st.tuples(*[st.integers(0, 3)] * draw(st.integers(1, 3))))
        return (kind, shape, draw(st.sampled_from(DTYPES)))
    return (kind,)


SCHEMAS = st.recursive(
    leaf_schemas(),
    lambda children: st.one_of(
        st.dictionaries(
            st.text("abcxyz", min_size=1, max_size=3), children, min_size=1, max_size=3
        ).map(lambda d: ("dict", d)),
        st.lists(children, min_size=1, max_size=3).map(lambda c: ("tuple", c)),
        st.lists(children, min_size=1, max_size=3).map(lambda c: ("list", c)),
        st.tuples(children, children).map(lambda c: ("namedtuple", c)),
    ),
    max_leaves=6,
)


def make_sample(schema: tuple[Any, ...], gen: torch.Generator) -> Any:
    """One sample of ``schema``: the same structure and sizes every time, fresh values."""
    kind = schema[0]
    if kind == "tensor":
        return make_tensor(schema[1], schema[2], gen)
    if kind == "ndarray":
        dtype = torch.float32 if schema[2] == torch.bfloat16 else schema[2]  # numpy lacks it
        return make_tensor(schema[1], dtype, gen).numpy()
    value = int(torch.randint(0, 100, (), generator=gen))
    if kind in ("int", "float", "bool", "np_scalar", "str", "tensor0d"):
        return {
            "int": value,
            "float": value / 4,
            "bool": value % 2 == 0,
            "np_scalar": np.int16(value),
            "str": f"s{value}",
            "tensor0d": torch.tensor(value),
        }[kind]
    if kind == "dict":
        return {k: make_sample(v, gen) for k, v in schema[1].items()}
    children = [make_sample(c, gen) for c in schema[1]]
    return {"tuple": tuple, "list": list, "namedtuple": lambda c: Point(*c)}[kind](children)


def by_type_reference(schema: tuple[Any, ...], collated: Any, nested: bool) -> Any:
    """What the collate functions return for ``schema``, built from ``default_collate``'s
    output: the same everywhere except tensors / arrays of at least one dim, which are
    padded (all-True masks, the items' shapes as lengths) or nested."""
    kind = schema[0]
    if kind in ("tensor", "ndarray"):
        if nested:
            return torch.nested.nested_tensor(list(collated), layout=torch.jagged)
        shape = tuple(collated.shape[1:])
        lengths = torch.tensor([shape] * len(collated), dtype=torch.int64).reshape(
            len(collated), -1
        )
        mask = torch.ones(collated.shape, dtype=torch.bool)
        return Padded(collated, lengths[:, 0] if len(shape) == 1 else lengths, mask)
    if kind == "dict":
        out = {k: by_type_reference(v, collated[k], nested) for k, v in schema[1].items()}
        for k, value in list(out.items()):
            if isinstance(value, Padded):
                out[k] = value.values
                out[f"{k}_lengths"], out[f"{k}_mask"] = value.lengths, value.mask
        return out
    if kind in ("tuple", "list", "namedtuple"):
        values = [by_type_reference(c, v, nested) for c, v in zip(schema[1], collated, strict=True)]
        return Point(*values) if kind == "namedtuple" else values
    return collated


@settings(max_examples=150, deadline=None)
@given(schema=SCHEMAS, size=st.integers(1, 5), seed=st.integers(0, 2**31))
def test_agrees_with_default_collate_except_padded_fields(
    schema: tuple[Any, ...], size: int, seed: int
) -> None:
    gen = torch.Generator().manual_seed(seed)
    batch = [make_sample(schema, gen) for _ in range(size)]
    want = default_collate(batch)
    assert_same(pad_collate(batch), by_type_reference(schema, want, nested=False))
    assert_same(nested_collate(batch), by_type_reference(schema, want, nested=True))


@pytest.mark.parametrize(
    ("batch", "kwargs", "fragments"),
    [
        (tokens(1, 2), {"keys": ["tokenz"]}, ["keys names 'tokenz'", "batch[0] (a dict"]),
        ([{"a": [torch.ones(1)]}], {"keys": [("a", 1)]}, ["('a', 1)", "batch[0]['a'] (a list"]),
        ([Point(torch.ones(1), 2)], {"keys": ["z"]}, ["'z'", "batch[0] (a Point"]),
        ([{"t": torch.ones(2), "t_mask": 1}], {}, ["'t_mask'", "rename"]),
        ([{"a": 1, "b": torch.ones(1)}], {"keys": ["a"]}, ["'a'", "remove it from keys"]),
        ([{"a": torch.ones(()), "b": 1}], {"keys": ["a"]}, ["at least one dim", "remove it"]),
        (
            [{"a": torch.ones(1), "b": torch.ones(1)}, {"a": torch.ones(2), "b": torch.ones(2)}],
            {"keys": ["a"]},
            ["batch[1]['b']", "add it to keys"],
        ),
        (tokens(1, dtype=torch.uint8), {"keys": ["tokens"], "pad_value": -1}, ["uint8"]),
        (tokens(1, 2), {"pad_value": 0.5}, ["pad_value=0.5", "batch[*]['tokens']"]),
        (tokens(1, 2), {"padding_side": "top"}, ["'right' or 'left'"]),
        (tokens(1, 2), {"pad_to_multiple_of": 0}, ["positive int"]),
        (tokens(1, 2), {"pad_to_multiple_of": (8, 8)}, ["2 entries", "1 dims"]),
    ],
)
def test_argument_errors(batch: Any, kwargs: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(ValueError, match=r".") as info:
        pad_collate(batch, **kwargs)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_keys_must_be_a_collection() -> None:
    with pytest.raises(TypeError, match=r"keys=\['tokens'\]"):
        pad_collate(tokens(1, 2), keys="tokens")


# --- DataLoader --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_works_as_collate_fn_in_worker_processes(context: str) -> None:
    samples = var_len_samples()
    loader = DataLoader(
        samples,
        batch_size=5,
        collate_fn=pad_collate,
        num_workers=2 if context == "fork" else 1,  # a spawned worker imports torch: ~5 s
        multiprocessing_context=context,
    )
    got = list(loader)
    want = [pad_collate(samples[s : s + 5]) for s in range(0, 24, 5)]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert_same(g, w)
