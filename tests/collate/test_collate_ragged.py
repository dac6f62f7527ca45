"""Collate, bucketing and padding statistics of already batched items (Ragged columns).

The reference for each property is the per-row form: the same rows as separate tensors
through the sample path of the same function (``keys=[()]``), or Python lists.
"""

from __future__ import annotations

import warnings
from collections import Counter
from itertools import pairwise
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_collate import DTYPES, assert_same, make_tensor

from fastdata import Padded, Ragged, _padding
from fastdata.collate import bucket_by_length, nested_collate, pad_collate, padding_stats


@st.composite
def raggeds(draw: Any, max_inner: int = 2) -> tuple[Ragged, list[torch.Tensor]]:
    """A Ragged of 1-8 rows (some null, some empty) and its rows as tensors (null: empty)."""
    dtype = draw(st.sampled_from(DTYPES))
    inner = draw(st.tuples(*[st.integers(0, 3)] * draw(st.integers(0, max_inner))))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    rows: list[torch.Tensor | None] = []
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.integers(0, 5)) == 0:
            rows.append(None)
        else:
            rows.append(make_tensor((draw(st.integers(0, 6)), *inner), dtype, gen))
    if all(r is None for r in rows):
        rows[0] = make_tensor((0, *inner), dtype, gen)
    empty = torch.empty((0, *inner), dtype=dtype)
    ragged = Ragged.from_rows(rows)
    return ragged, [empty if r is None else r for r in rows]


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


# --------------------------------------------------------------------------- bucketing
@st.composite
def batched_streams(draw: Any) -> list[dict[str, Any]]:
    """Batches of 0-9 rows each; row ``i`` holds ``lengths[i]`` copies of ``i``."""
    sizes = draw(st.lists(st.integers(0, 9), max_size=12))
    batches, start = [], 0
    for size in sizes:
        lengths = draw(st.lists(st.integers(0, 30), min_size=size, max_size=size))
        ids = list(range(start, start + size))
        batches.append(
            {
                "id": torch.tensor(ids, dtype=torch.int64),
                "tokens": Ragged.from_rows(
                    [[i] * n for i, n in zip(ids, lengths, strict=True)], dtype=torch.int64
                ),
                "name": [f"r{i}" for i in ids],
            }
        )
        start += size
    return batches


def check_rows_intact(batch: dict[str, Any]) -> list[int]:
    ids = batch["id"].tolist()
    assert batch["name"] == [f"r{i}" for i in ids]
    for i, row in zip(ids, batch["tokens"].tolist(), strict=True):
        assert set(row) <= {i}
    return ids


@settings(max_examples=150, deadline=None)
@given(stream=batched_streams(), data=st.data())
def test_bucketing_rows_of_batches_yields_every_row_once(stream: list, data: Any) -> None:
    batch_size = data.draw(st.integers(1, 8))
    mode = data.draw(st.sampled_from(["pool", "auto", "list"]))
    boundaries: Any = {"pool": None, "auto": "auto"}.get(mode)
    if mode == "list":
        boundaries = sorted(data.draw(st.sets(st.integers(1, 30), min_size=1, max_size=4)))
    buffer_size = data.draw(st.one_of(st.none(), st.integers(batch_size, 4 * batch_size)))
    if mode == "list":
        buffer_size = None
    drop_last = data.draw(st.booleans())
    total = sum(len(b["id"]) for b in stream)
    out = list(
        bucket_by_length(
            stream,
            key="tokens",
            batch_size=batch_size,
            boundaries=boundaries,
            buffer_size=buffer_size,
            seed=data.draw(st.integers(0, 3)),
            drop_last=drop_last,
        )
    )
    seen = Counter(i for b in out for i in check_rows_intact(b))
    assert all(c == 1 for c in seen.values())
    sizes = [len(b["id"]) for b in out]
    if drop_last:
        assert all(s == batch_size for s in sizes)
        assert total - len(seen) < batch_size
    else:
        assert len(seen) == total
        assert all(s == batch_size for s in sizes[:-1])
        assert all(0 < s <= batch_size for s in sizes[-1:])
    if mode == "pool" and total < (buffer_size or 32 * batch_size):
        # one pool, sorted before it is cut: no two batches' length ranges overlap
        spans = sorted(
            (int(b["tokens"].lengths.min()), int(b["tokens"].lengths.max())) for b in out
        )
        assert all(hi <= lo for (_, hi), (lo, _) in pairwise(spans))


def test_bucketing_rows_is_deterministic_and_cuts_padding() -> None:
    lengths = (np.random.default_rng(0).lognormal(3.0, 1.0, 2048) + 1).astype(int).tolist()
    batches = []
    for start in range(0, 2048, 256):
        ids = list(range(start, start + 256))
        batches.append(
            {
                "id": torch.tensor(ids),
                "tokens": Ragged.from_rows([[1] * lengths[i] for i in ids], dtype=torch.int32),
            }
        )

    def run(seed: int) -> list[list[int]]:
        return [
            b["id"].tolist()
            for b in bucket_by_length(batches, key="tokens", batch_size=32, seed=seed)
        ]

    assert run(0) == run(0) != run(1)
    plain = padding_stats([b["tokens"][i : i + 32] for b in batches for i in range(0, 256, 32)])
    bucketed = padding_stats(bucket_by_length(batches, key="tokens", batch_size=32), key="tokens")
    assert bucketed.valid_elements == plain.valid_elements == sum(lengths)
    assert bucketed.padded_fraction * 3 < plain.padded_fraction


@settings(max_examples=60, deadline=None)
@given(cases=st.lists(raggeds(max_inner=1), min_size=1, max_size=4))
def test_padding_stats_of_raggeds_equal_those_of_their_rows(cases: list) -> None:
    raggeds_, rows = zip(*cases, strict=True)
    want = padding_stats(rows, length_fn=lambda t: t.shape)
    assert padding_stats(raggeds_) == want
    assert padding_stats([{"x": {"t": r}} for r in raggeds_], key=("x", "t")) == want


def test_bucketing_argument_errors() -> None:
    with pytest.raises(TypeError, match="not neither"):
        bucket_by_length([], batch_size=2)
    with pytest.raises(TypeError, match="not both"):
        bucket_by_length([], batch_size=2, length_fn=len, key="tokens")
    with pytest.raises(TypeError, match=r"stream item 0.*not a fastdata\.Ragged"):
        list(bucket_by_length([{"tokens": [1, 2]}], key="tokens", batch_size=2))
