"""pad_collate and nested_collate of already batched items (Ragged columns); their
bucketing is in test_bucket_rows.py.

The reference for each property is the per-row form: the same rows as separate tensors
through the sample path of the same function (``keys=[()]``), or Python lists.
"""

from __future__ import annotations

import warnings
from typing import Any
from unittest import mock

import pytest
import torch
from collate_helpers import assert_same, raggeds
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata import Padded, Ragged, _padding
from fastdata.collate import nested_collate, pad_collate

PATHS = pytest.mark.parametrize("scatter_max", [0, 10**9], ids=["copy", "scatter"])


@PATHS
@settings(max_examples=150, deadline=None)
@given(case=raggeds(), left=st.booleans(), return_mask=st.booleans(), data=st.data())
def test_padding_a_ragged_equals_padding_its_rows(
    scatter_max: int,
    case: tuple[Ragged, list[torch.Tensor]],
    left: bool,
    return_mask: bool,
    data: Any,
) -> None:
    ragged, rows = case
    ndim = rows[0].ndim
    multiple = data.draw(
        st.one_of(
            st.none(),
            st.integers(1, 8),
            st.tuples(*[st.one_of(st.none(), st.integers(1, 8))] * ndim),
        )
    )
    options = {
        "padding_side": "left" if left else "right",
        "pad_to_multiple_of": multiple,
        "pad_value": 1 if ragged.dtype == torch.bool else 7,
        "return_mask": return_mask,
    }
    with mock.patch.object(_padding, "_SCATTER_MAX_MEAN_NUMEL", scatter_max):
        want = pad_collate(rows, keys=[()], **options)
    got = pad_collate(ragged, **options)
    assert isinstance(got, Padded)
    assert_same(got, want)
    assert_same(ragged.to_padded(**options), want)


# Every integer and float dtype torch has, and bool. masked_scatter and index_put have no
# kernel for the wide unsigned ones (uint16 is the usual on-disk dtype of GPT-2 token ids).
EVERY_DTYPE = [
    *(torch.uint8, torch.uint16, torch.uint32, torch.uint64),
    *(torch.int8, torch.int16, torch.int32, torch.int64, torch.bool),
    *(torch.float16, torch.bfloat16, torch.float32, torch.float64),
]


def extreme_row(n: int, inner: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """``n`` rows of the dtype's extremes and small values (the high bit set for unsigned,
    so a copy that is not bit-exact shows), in a seeded order."""
    if dtype == torch.bool:
        pool = [True, False]
    else:
        info = torch.iinfo(dtype) if not dtype.is_floating_point else torch.finfo(dtype)
        pool = [int(info.max) if not dtype.is_floating_point else info.max, info.min, 2, 0]
    picks = torch.randint(0, len(pool), (n, *inner), generator=torch.Generator().manual_seed(seed))
    return torch.tensor([pool[i] for i in picks.flatten().tolist()], dtype=dtype).view(n, *inner)


def pad_sequence(rows: list[torch.Tensor], value: float, left: bool) -> torch.Tensor:
    """torch's padding (left: of the reversed rows, reversed back; torch 2.5 has no side)."""
    if left:
        return pad_sequence([r.flip(0) for r in rows], value, False).flip(1)
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=value)


@PATHS
@pytest.mark.parametrize("dtype", EVERY_DTYPE, ids=str)
@settings(max_examples=15, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 5), min_size=1, max_size=5),
    inner=st.sampled_from([(), (2,)]),
    left=st.booleans(),
    return_mask=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_every_dtype_pads_as_pad_sequence_does(
    scatter_max: int,
    dtype: torch.dtype,
    lengths: list[int],
    inner: tuple[int, ...],
    left: bool,
    return_mask: bool,
    seed: int,
) -> None:
    rows = [extreme_row(n, inner, dtype, seed + i) for i, n in enumerate(lengths)]
    want = pad_sequence(rows, 1, left)
    want_mask = pad_sequence([torch.ones(r.shape, dtype=torch.bool) for r in rows], 0, left)
    side = "left" if left else "right"
    options: dict[str, Any] = {"pad_value": 1, "padding_side": side, "return_mask": return_mask}
    with mock.patch.object(_padding, "_SCATTER_MAX_MEAN_NUMEL", scatter_max):
        from_list = pad_collate([{"tokens": r} for r in rows], **options)
    from_ragged = pad_collate({"tokens": Ragged.from_rows(rows, dtype=dtype)}, **options)
    for out in (from_list, from_ragged):
        assert out["tokens"].dtype == dtype
        assert out["tokens"].tolist() == want.tolist()  # tolist: exact for every dtype
        assert out["tokens_lengths"].tolist() == [[n, *inner] if inner else n for n in lengths]
        assert ("tokens_mask" in out) == return_mask
        if return_mask:
            assert torch.equal(out["tokens_mask"], want_mask)


@settings(max_examples=80, deadline=None)
@given(case=raggeds())
def test_nesting_a_ragged_equals_nesting_its_rows(case: tuple[Ragged, list[torch.Tensor]]) -> None:
    ragged, rows = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        want = nested_collate(rows, keys=[()])
    got = nested_collate(ragged)
    assert got.layout == torch.jagged
    assert_same(list(got.unbind()), list(want.unbind()))
    assert torch.equal(
        torch.nested.to_padded_tensor(got, 0), pad_collate(ragged, pad_value=0).values
    )


def stream_batch(n: int, start: int = 0) -> dict[str, Any]:
    """A batch as ParquetStream yields it: ids, token and text Ragged columns, a list."""
    ids = list(range(start, start + n))
    tokens = [None if i % 5 == 4 else [i] * (i % 4) for i in ids]
    return {
        "id": torch.tensor(ids),
        "tokens": Ragged.from_rows(tokens, dtype=torch.int32),
        "text": Ragged.from_rows([f"doc {i}" for i in ids]),
        "meta": [{"i": i} for i in ids],
    }


def test_a_stream_batch_pads_its_numeric_ragged_columns_only() -> None:
    batch = stream_batch(5)
    out = pad_collate(batch)
    assert list(out) == ["id", "tokens", "text", "meta", "tokens_lengths", "tokens_mask"]
    assert (
        out["id"] is batch["id"] and out["text"] is batch["text"] and out["meta"] is batch["meta"]
    )
    assert out["tokens"].tolist() == [[0, 0, 0], [1, 0, 0], [2, 2, 0], [3, 3, 3], [0, 0, 0]]
    assert out["tokens_lengths"].tolist() == [0, 1, 2, 3, 0]  # the null row is empty
    nested = nested_collate(batch)
    assert list(nested) == ["id", "tokens", "text", "meta"]
    assert [t.tolist() for t in nested["tokens"].unbind()] == [[], [1], [2, 2], [3, 3, 3], []]
    text_bytes = pad_collate(batch, keys=["text"])  # named: the string column's bytes
    assert isinstance(text_bytes["tokens"], Ragged)
    assert bytes(text_bytes["text"][0, : text_bytes["text_lengths"][0]].tolist()) == b"doc 0"
    pair = pad_collate((batch["tokens"], batch["id"]))  # a tuple holding a Ragged
    assert isinstance(pair, tuple) and isinstance(pair[0], Padded) and pair[1] is batch["id"]


@pytest.mark.parametrize(
    ("batch", "kwargs", "exc", "fragments"),
    [
        ({"id": torch.arange(3)}, {}, TypeError, ["holding no Ragged", "list of samples"]),
        (stream_batch(2), {"keys": ["id"]}, ValueError, ["batch['id']", "not a Ragged"]),
        (stream_batch(2), {"keys": ["nope"]}, ValueError, ["'nope'", "has no"]),
        ([stream_batch(2), stream_batch(2)], {}, TypeError, ["a Ragged", "not a list of batches"]),
        (
            {"tokens": Ragged.from_rows([[1]]), "tokens_mask": 1},
            {},
            ValueError,
            ["'tokens_mask'", "rename"],
        ),
    ],
)
def test_batch_errors_say_what_to_do(batch: Any, kwargs: dict, exc: type, fragments: list) -> None:
    with pytest.raises(exc) as info:
        pad_collate(batch, **kwargs)
    for fragment in fragments:
        assert fragment in str(info.value)
