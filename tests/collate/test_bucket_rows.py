"""Length bucketing of the rows of already batched items (fastdata.collate._bucket_rows):
rows regrouped by length with one take and one concatenation per column, none lost or
repeated, each row's columns kept together."""

from __future__ import annotations

from collections import Counter, namedtuple
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata import Ragged, padding_stats
from fastdata.collate import bucket_by_length
from fastdata.collate._bucket_rows import concat, ragged_at, take

Pair = namedtuple("Pair", ["ids", "tokens"])


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


def test_bucketing_argument_errors() -> None:
    with pytest.raises(TypeError, match="not neither"):
        bucket_by_length([], batch_size=2)
    with pytest.raises(TypeError, match="not both"):
        bucket_by_length([], batch_size=2, length_fn=len, key="tokens")
    with pytest.raises(TypeError, match=r"stream item 0.*not a fastdata\.Ragged"):
        list(bucket_by_length([{"tokens": [1, 2]}], key="tokens", batch_size=2))


@st.composite
def column_batches(draw: Any) -> list[Any]:
    """1-4 batches of one structure holding every column kind; row ``i`` is recognisable in
    each column by ``i``."""
    sizes = draw(st.lists(st.integers(0, 5), min_size=1, max_size=4))
    batches, start = [], 0
    for size in sizes:
        ids = list(range(start, start + size))
        batches.append(
            {
                "tensor": torch.tensor(ids, dtype=torch.int64),
                "array": np.array(ids, dtype=np.int32),
                "list": [f"r{i}" for i in ids],
                "pair": Pair(
                    torch.tensor(ids),
                    Ragged.from_rows([[i] * (i % 3) for i in ids], dtype=torch.int64),
                ),
                "plain": (torch.tensor(ids, dtype=torch.float32),),
            }
        )
        start += size
    return batches


def row_ids(batch: dict[str, Any]) -> list[int]:
    """The row ids of ``batch``, after checking every column agrees on them."""
    ids = batch["tensor"].tolist()
    assert batch["array"].tolist() == ids
    assert batch["list"] == [f"r{i}" for i in ids]
    assert batch["pair"].ids.tolist() == ids and type(batch["pair"]) is Pair
    assert batch["pair"].tokens.tolist() == [[i] * (i % 3) for i in ids]
    assert batch["plain"][0].tolist() == ids and type(batch["plain"]) is tuple
    return ids


@settings(max_examples=60, deadline=None)
@given(batches=column_batches(), data=st.data())
def test_take_of_concat_selects_those_rows_from_every_column(batches: list, data: Any) -> None:
    joined = concat(batches)
    total = sum(len(b["list"]) for b in batches)
    assert row_ids(joined) == list(range(total))
    index = data.draw(st.lists(st.integers(0, max(total - 1, 0)), max_size=8 if total else 0))
    assert row_ids(take(joined, torch.tensor(index, dtype=torch.int64))) == index


def test_a_column_that_is_no_batch_is_refused() -> None:
    with pytest.raises(TypeError, match="cannot select rows of a int column"):
        take({"n": 3}, torch.tensor([0]))
    with pytest.raises(TypeError, match="cannot concatenate int columns"):
        concat([{"n": 3}, {"n": 4}])


def test_ragged_at_follows_the_key_path_and_names_what_it_found() -> None:
    tokens = Ragged.from_rows([[1], [2, 3]])
    batch = {"x": {"t": tokens}, "ids": torch.arange(2)}
    assert ragged_at(batch, ("x", "t")) is tokens
    with pytest.raises(TypeError, match=r"key='ids': the batch \(stream item 4\) holds Tensor"):
        ragged_at(batch, ("ids",), 4)
    with pytest.raises(
        TypeError, match=r"key=\('x', 'u'\): the batch at \['x'\] has no 'u' \(its keys: 't'\)"
    ):
        ragged_at(batch, ("x", "u"))


def test_a_key_names_namedtuple_fields_and_a_missing_key_is_said_missing() -> None:
    """key= takes the key paths pad_collate's keys= takes (a namedtuple field by its name);
    a misspelt key is reported as missing, with the keys there, not as 'holds NoneType'."""
    batch = Pair(torch.arange(3), Ragged.from_rows([[1, 2], [3], []]))
    for key in ("tokens", 1, -1):
        out = list(bucket_by_length([batch], key=key, batch_size=2, seed=0))
        assert sorted(i for b in out for i in b.ids.tolist()) == [0, 1, 2]
        assert all(type(b) is Pair for b in out)
    assert padding_stats([batch], key="tokens").samples == 3
    with pytest.raises(TypeError, match=r"has no 'token' \(its fields: ids, tokens, or positions"):
        list(bucket_by_length([batch], key="token", batch_size=2))
    with pytest.raises(
        TypeError,
        match=r"key='tokens_typo': the batch \(stream item 0\) has no 'tokens_typo' "
        r"\(its keys: 'tokens'\)",
    ):
        list(bucket_by_length([{"tokens": batch.tokens}], key="tokens_typo", batch_size=2))


@pytest.mark.parametrize("boundaries", [None, [2]])
def test_columns_of_other_row_counts_than_the_ragged_are_refused(boundaries: Any) -> None:
    """A batch whose columns disagree on the row count is refused with the columns named
    (as pyarrow refuses a RecordBatch of unequal columns), not regrouped with the extra rows
    lost, nor failed with a bare IndexError for a short list."""
    tokens = Ragged.from_rows([[1], [2, 2], [3, 3, 3], [4]])
    longer = {"id": torch.arange(6), "label": list(range(6)), "tokens": tokens}
    with pytest.raises(
        ValueError,
        match=r"stream item 0.*key='tokens' has 4 rows, but batch\['id'\] has 6, "
        r"batch\['label'\] has 6",
    ):
        list(bucket_by_length([longer], key="tokens", batch_size=2, boundaries=boundaries))
    shorter = {"ok": np.arange(4), "pair": Pair(torch.arange(4), [10, 11]), "tokens": tokens}
    with pytest.raises(ValueError, match=r"batch\['pair'\]\[1\] has 2; every column"):
        list(bucket_by_length([shorter], key="tokens", batch_size=2, boundaries=boundaries))
    with pytest.raises(ValueError, match=r"batch\['n'\] has no rows \(0-d\)"):
        list(bucket_by_length([{"n": torch.tensor(3), "tokens": tokens}], key="tokens",
                              batch_size=2))  # fmt: skip
