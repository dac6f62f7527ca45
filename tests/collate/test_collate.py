"""Tests of fastdata.collate: padding, nesting, bucketing and padding statistics.

The properties are checked against independent references: each item cut back out of the
padded batch, ``torch.utils.data.default_collate`` where every item has one size,
``torch.nested.to_padded_tensor`` for nested batches, and a ``Counter`` for exactly-once.
"""

from __future__ import annotations

import math
import random
import warnings
from collections import Counter, OrderedDict, namedtuple
from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, IterableDataset, default_collate, get_worker_info

from fastdata import _padding
from fastdata.collate import (
    Padded,
    bucket_by_length,
    nested_collate,
    pad_collate,
    padding_stats,
)

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
    torch.bool,
]
# Both padding strategies: one slice copy per item (threshold 0) and the masked scatter.
PATHS = pytest.mark.parametrize("scatter_max", [0, 10**9], ids=["copy", "scatter"])
Point = namedtuple("Point", ["x", "y"])


def make_tensor(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Random values of any dtype, never equal to the pad value 0 for integers, so a misplaced
    pad is visible."""
    if dtype.is_floating_point:
        return torch.rand(shape, generator=gen).to(dtype) + 1
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    return torch.randint(1, 100, shape, generator=gen).to(dtype)


@st.composite
def ragged_batches(draw: Any, max_ndim: int = 3) -> list[torch.Tensor]:
    """A batch of 1-6 tensors of one rank and dtype whose sizes vary independently per dim."""
    ndim = draw(st.integers(1, max_ndim))
    dtype = draw(st.sampled_from(DTYPES))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    fixed = draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim))  # dims all items share
    base = draw(st.tuples(*[st.integers(0, 5)] * ndim))
    batch = []
    for _ in range(draw(st.integers(1, 6))):
        shape = tuple(b if f else draw(st.integers(0, 5)) for b, f in zip(base, fixed, strict=True))
        batch.append(make_tensor(shape, dtype, gen))
    return batch


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


def assert_same(got: Any, want: Any, where: str = "out") -> None:
    """Equal structure, types, dtypes and values (nested tensors: row by row)."""
    assert type(got) is type(want), f"{where}: {type(got)} != {type(want)}"
    if isinstance(want, torch.Tensor) and want.is_nested:
        assert got.is_nested and got.layout == want.layout, where
        assert_same(list(got.unbind()), list(want.unbind()), where)
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype, f"{where}: {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"{where}: {got.shape} != {want.shape}"
        assert torch.equal(got, want), f"{where}: values differ"
    elif isinstance(want, dict):
        assert list(got) == list(want), where
        for k in want:
            assert_same(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{where}[{i}]")
    else:
        assert got == want, where


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


# --- errors name the position ------------------------------------------------------------


def tokens(*lengths: int, dtype: torch.dtype = torch.int64) -> list[dict[str, Any]]:
    return [{"tokens": torch.ones(n, dtype=dtype)} for n in lengths]


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


def var_len_samples() -> list[dict[str, Any]]:
    """Sample ``i`` holds ``i % 7 + 1`` tokens, each equal to ``i``. A list is a map-style
    dataset that spawned workers unpickle without importing this module."""
    return [{"tokens": torch.full((i % 7 + 1,), i), "id": i} for i in range(24)]


class BucketedStream(IterableDataset):
    """Each worker buckets its own share (every ``num_workers``-th) of var_len_samples()."""

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        share = var_len_samples()[worker::workers]
        return bucket_by_length(share, length_fn=lambda s: len(s["tokens"]), batch_size=4)


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


@pytest.mark.slow
def test_bucketed_iterable_dataset_with_workers_is_exactly_once() -> None:
    loader = DataLoader(BucketedStream(), batch_size=None, collate_fn=pad_collate, num_workers=2)
    seen = Counter()
    for batch in loader:
        assert batch["tokens"].shape[0] == batch["id"].shape[0] <= 4
        for row, n, i in zip(batch["tokens"], batch["tokens_lengths"], batch["id"], strict=True):
            assert n == i % 7 + 1
            assert row[:n].eq(i).all()
        seen.update(batch["id"].tolist())
    assert seen == Counter(range(24))


# --- bucket_by_length --------------------------------------------------------------------


@st.composite
def bucket_setups(draw: Any) -> dict[str, Any]:
    batch_size = draw(st.integers(1, 12))
    mode = draw(st.sampled_from(["pool", "auto", "list"]))
    if mode == "list":
        boundaries: Any = sorted(draw(st.sets(st.integers(1, 40), min_size=1, max_size=5)))
        held = (len(boundaries) + 1) * (batch_size - 1) + 1
        buffer = draw(st.one_of(st.none(), st.integers(held, held + 30)))
    else:
        boundaries = None if mode == "pool" else "auto"
        buffer = draw(st.one_of(st.none(), st.integers(batch_size, batch_size * 6)))
    return {
        "batch_size": batch_size,
        "boundaries": boundaries,
        "buffer_size": buffer,
        "seed": draw(st.integers(0, 3)),
        "drop_last": draw(st.booleans()),
    }


@settings(max_examples=300, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), max_size=150), setup=bucket_setups())
def test_bucketing_yields_every_sample_exactly_once(lengths: list[int], setup: Any) -> None:
    consumed = 0

    def stream() -> Iterator[int]:
        nonlocal consumed
        for i in range(len(lengths)):
            consumed += 1
            yield i

    batches, held = [], []
    for batch in bucket_by_length(stream(), length_fn=lengths.__getitem__, **setup):
        held.append(consumed - sum(map(len, batches)))
        batches.append(batch)
    size = setup["batch_size"]
    counts = Counter(i for b in batches for i in b)
    assert all(c == 1 for c in counts.values())  # never twice
    missing = set(range(len(lengths))) - set(counts)
    if setup["drop_last"]:
        assert len(missing) < size
        assert all(len(b) == size for b in batches)
    else:
        assert not missing
        assert all(len(b) == size for b in batches[:-1])
        assert all(0 < len(b) <= size for b in batches[-1:])
    bound = setup["buffer_size"] or (
        32 * size
        if not isinstance(setup["boundaries"], list)
        else (len(setup["boundaries"]) + 1) * (size - 1) + 1
    )
    assert max(held, default=0) <= bound


@settings(max_examples=50, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), max_size=100), setup=bucket_setups())
def test_bucketing_is_deterministic_and_ignores_the_global_rng(
    lengths: list[int], setup: Any
) -> None:
    def run(global_seed: int) -> list[list[int]]:
        random.seed(global_seed)
        np.random.seed(global_seed)
        torch.manual_seed(global_seed)
        return list(bucket_by_length(range(len(lengths)), length_fn=lengths.__getitem__, **setup))

    assert run(0) == run(1)


def test_seed_changes_the_order() -> None:
    lengths = [i % 13 for i in range(200)]
    orders = {
        str(list(bucket_by_length(lengths, length_fn=int, batch_size=4, seed=s))) for s in range(3)
    }
    assert len(orders) == 3


def long_tailed(n: int, seed: int = 0) -> list[int]:
    gen = np.random.default_rng(seed)
    return np.clip((gen.pareto(1.5, n) * 20).astype(int) + 1, 1, 512).tolist()


@pytest.mark.parametrize("boundaries", [None, "auto", [8, 16, 32, 64, 128, 256]])
def test_bucketing_cuts_padding_on_long_tailed_lengths(boundaries: Any) -> None:
    lengths = long_tailed(4096)
    random_batches = [lengths[i : i + 32] for i in range(0, len(lengths), 32)]
    bucketed = bucket_by_length(lengths, length_fn=int, batch_size=32, boundaries=boundaries)
    baseline = padding_stats(random_batches, length_fn=int)
    stats = padding_stats(bucketed, length_fn=int)
    assert stats.samples == baseline.samples == 4096
    assert stats.valid_elements == baseline.valid_elements
    assert stats.padded_fraction * 3 <= baseline.padded_fraction


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, r"batch_size=0: expected an integer >= 1"),
        ({"batch_size": 4, "buffer_size": 3}, r"buffer_size=3: expected an integer >= 4"),
        ({"batch_size": 4, "boundaries": "sorted"}, "None, 'auto' or a list"),
        ({"batch_size": 4, "boundaries": [8, 4]}, "strictly increasing"),
        ({"batch_size": 4, "boundaries": [0, 4]}, "positive"),
        ({"batch_size": 4, "boundaries": [4, 8], "buffer_size": 9}, "buffer_size>=10"),
    ],
)
def test_bucketing_checks_arguments_at_the_call(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bucket_by_length([], length_fn=len, **kwargs)


@pytest.mark.parametrize(("length", "exc"), [("3", TypeError), (-1, ValueError), (True, TypeError)])
def test_bad_lengths_name_the_stream_item(length: Any, exc: type[Exception]) -> None:
    values = [1, 2, length]
    with pytest.raises(exc, match="stream item 2"):
        list(bucket_by_length(range(3), length_fn=values.__getitem__, batch_size=2))


# --- padding_stats -----------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(ragged_batches(), min_size=1, max_size=4))
def test_padding_stats_agree_with_the_masks(batches: list[list[torch.Tensor]]) -> None:
    stats = padding_stats(batches, length_fn=lambda t: t.shape)
    masks = [pad_collate(b, keys=[()]).mask for b in batches]
    assert stats.batches == len(batches)
    assert stats.samples == sum(map(len, batches))
    assert stats.valid_elements == sum(int(m.sum()) for m in masks)
    assert stats.total_elements == sum(m.numel() for m in masks)


def test_padding_stats_of_nothing() -> None:
    stats = padding_stats([])
    assert (stats.batches, stats.padded_fraction) == (0, 0.0)
