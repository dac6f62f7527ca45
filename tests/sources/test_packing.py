"""The table-at-a-time packer (fastdata.sources._packing, driven by Packer.items) against a
plain reference: documents taken one at a time into rows, as the packer did before it cut
batches from whole tables. Same batches, same position after each, same overlong counts,
whatever the tables' boundaries."""

from __future__ import annotations

import bisect
import itertools
from collections import deque

import numpy as np
import pyarrow as pa
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastdata as fd
from fastdata.sources.base import Context
from fastdata.sources.pack import Packer

CONTEXT = Context(epoch=0, seed=0, locate=lambda row: {})


def as_policy(doc: list[int], seq_len: int, overlong: str) -> list[int]:
    if len(doc) <= seq_len or overlong == "split":
        return doc
    return [] if overlong == "drop" else doc[:seq_len]


def reference_rows(
    docs: list[list[int]], seq_len: int, rows: int, split: bool, offset: int
) -> list[list[list[int]]]:
    """Batches of rows of pieces: documents (the overlong policy applied) one at a time, the
    first from ``offset``; a document that does not fit what is left of a row goes on in the
    next row (``split``) or starts it."""
    queue = deque(doc[offset:] if i == 0 else doc for i, doc in enumerate(docs))
    batches = []
    while True:
        batch = []
        for _ in range(rows):
            row, room = [], seq_len
            while room and queue:
                doc = queue[0]
                if not doc:
                    queue.popleft()
                    continue
                if not split and row and len(doc) > room:
                    break
                row.append(doc[:room])
                room -= len(row[-1])
                queue[0] = doc[len(row[-1]) :]
            if row:
                batch.append(row)
        if not batch:
            return batches
        batches.append(batch)
        if len(batch) < rows:
            return batches


def reference_batch(batch: list[list[list[int]]], seq_len: int, pad_id: int) -> dict:
    """A batch of rows of pieces laid out token by token."""
    tokens = [[pad_id] * seq_len for _ in batch]
    positions = [[0] * seq_len for _ in batch]
    ids = [[-1] * seq_len for _ in batch]
    cu, piece = [], 0
    for r, row in enumerate(batch):
        at = 0
        for part in row:
            cu.append(r * seq_len + at)
            for k, token in enumerate(part):
                tokens[r][at + k], positions[r][at + k], ids[r][at + k] = token, k, piece
            piece, at = piece + 1, at + len(part)
        if at < seq_len:
            cu.append(r * seq_len + at)
    cu.append(len(batch) * seq_len)
    return {
        "tokens": tokens,
        "position_ids": positions,
        "document_ids": ids,
        "cu_seqlens": cu,
        "max_seqlen": max(b - a for a, b in itertools.pairwise(cu)),
    }


def tables_of(docs: list[list[int]], cuts: list[int], dtype: pa.DataType) -> list[pa.Table]:
    """The documents in tables split at ``cuts``; every other table of two chunks."""
    bounds = [0, *sorted(c % (len(docs) + 1) for c in cuts), len(docs)]
    tables = []
    for k, (a, b) in enumerate(itertools.pairwise(bounds)):
        column = pa.array(docs[a:b], pa.list_(dtype))
        table = pa.table({"id": pa.array(range(a, b), pa.int64()), "tokens": column})
        if k % 2 and b - a > 1:
            table = pa.concat_tables([table.slice(0, 1), table.slice(1)])
        tables.append(table)
    return tables


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    lengths=st.lists(
        st.one_of(st.integers(0, 12), st.integers(0, 40), st.integers(60, 130)), max_size=30
    ),
    cuts=st.lists(st.integers(0, 40), max_size=8),
    seq_len=st.integers(1, 24),
    rows=st.integers(1, 4),
    split=st.booleans(),
    overlong=st.sampled_from(["split", "drop", "truncate"]),
    offset=st.integers(0, 200),
    dtype=st.sampled_from([pa.int32(), pa.int64(), pa.uint16()]),
)
def test_packing_equals_a_plain_reference(
    lengths, cuts, seq_len, rows, split, overlong, offset, dtype
) -> None:
    docs = [[(7 * d + p) % 60_000 + 1 for p in range(n)] for d, n in enumerate(lengths)]
    packed = [as_policy(doc, seq_len, overlong) for doc in docs]
    offset = offset % len(packed[0]) if packed and packed[0] else 0  # resume into doc 0
    ends = list(np.cumsum([len(doc) for doc in packed], dtype=np.int64))
    over = [len(doc) > seq_len and overlong != "split" for doc in docs]
    want = reference_rows(packed, seq_len, rows, split, offset)

    packer = Packer(
        "tokens", seq_len=seq_len, rows=rows, overlong=overlong, split_documents=split, pad_id=9
    )
    got = packer.items(iter(tables_of(docs, cuts, dtype)), CONTEXT, offset)
    token_dtype = torch.from_numpy(np.zeros(0, dtype.to_pandas_dtype())).dtype
    cursor = offset
    for k, rows_k in enumerate(want):
        batch, position = next(got)
        expected = reference_batch(rows_k, seq_len, pad_id=9)
        for name in ("tokens", "position_ids", "document_ids", "cu_seqlens"):
            assert batch[name].tolist() == expected[name], (k, name)
        assert batch["tokens"].dtype == token_dtype
        assert batch["position_ids"].dtype == batch["document_ids"].dtype == torch.int32
        assert batch["cu_seqlens"].dtype == torch.int32
        assert batch["max_seqlen"] == expected["max_seqlen"]
        cursor += sum(len(piece) for row in rows_k for piece in row)
        # documents read: those ending before the cursor, and one ending at it, not empty
        done = bisect.bisect_left(ends, cursor)
        done += done < len(ends) and len(packed[done]) > 0 and ends[done] == cursor
        into = cursor - (int(ends[done - 1]) if done else 0)
        assert position == (done, into), k
        last = k == len(want) - 1 and len(rows_k) < rows
        reached = len(docs) if last else done + (into > 0)
        assert int(packer.tally.counted()[2]) == sum(over[:reached]), k
    assert next(got, None) is None
    real = sum(len(doc) for doc in packed) - offset
    delivered = sum(len(rows_k) * seq_len for rows_k in want)
    assert packer.tally.counted().tolist() == [real, delivered - real, sum(over), len(want), 0]


def test_a_null_document_or_a_null_inside_one_is_refused() -> None:
    packer = Packer("tokens", seq_len=8, rows=2, overlong="split", split_documents=True, pad_id=0)
    nulls = pa.table({"tokens": pa.array([[1, 2], None, [3]], pa.list_(pa.int64()))})
    with pytest.raises(fd.SchemaError, match=r"1 null document.*'tokens'"):
        next(packer.items(iter([nulls]), CONTEXT, 0))
    inside = pa.table({"tokens": pa.array([[1, 2], [3, None]], pa.list_(pa.int64()))})
    with pytest.raises(fd.SourceError, match=r"null.*inside the lists of column 'tokens'"):
        next(packer.items(iter([inside]), CONTEXT, 0))


def test_a_pad_id_the_tokens_dtype_cannot_hold_is_refused_at_the_first_batch() -> None:
    """A reader with no schema: the first batch (a full one, which needs no padding) is
    where pad_id is checked, not the first padded batch at the end of the epoch."""
    packer = Packer("tokens", seq_len=2, rows=1, overlong="split", split_documents=True,
                    pad_id=-100)  # fmt: skip
    uint16 = pa.table({"tokens": pa.array([[1, 2], [3, 4], [5]], pa.list_(pa.uint16()))})
    with pytest.raises(
        ValueError, match=r"pad_id=-100 cannot be stored in column 'tokens', whose dtype is uint16"
    ):
        next(packer.items(iter([uint16]), CONTEXT, 0))
    int32 = uint16.cast(pa.schema({"tokens": pa.list_(pa.int32())}))
    assert [b["tokens"].tolist() for b, _ in packer.items(iter([int32]), CONTEXT, 0)] == [
        [[1, 2]], [[3, 4]], [[5, -100]]
    ]  # fmt: skip
