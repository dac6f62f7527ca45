"""Sequence packing vs padding per batch (issue 19), on a lognormal-length token corpus.

Data: ``synthetic.make_tokens`` (document lengths lognormal, median 256 tokens, log-sd 1.0,
mean ~420, clipped to 8,192), 4 files, row groups of 4,096 documents. Both sides read the
``tokens`` column through ``fastdata.DataLoader(batch_size=None, num_workers=0)`` and are
timed in alternating rounds; the unit is real (non-padding) tokens:

- ``fastdata``: ``fastdata.pack(seq_len=2048, rows=8)``: documents laid end to end and cut
  into rows of 2,048 tokens, with the boundaries a varlen attention kernel needs;
- ``baseline:pad-per-batch``: ``ParquetStream(batch_size=32)`` + ``fastdata.pad_collate``:
  each batch of 32 documents padded to its longest (the usual recipe without packing).

Each side's pad share (padding / all tokens delivered) is recorded in ``extra_info``; the
pack's must stay at or under 1% (asserted: a property of the data, not a time).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

import fastdata as fd
from fastdata import DataLoader, ParquetStream
from fastdata.synthetic import make_tokens

from conftest import measure_interleaved, scaled

DOCS = scaled(20_000, 100_000)
SEQ_LEN = 2048


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    root = tmp_path_factory.mktemp("bench-pack")
    make_tokens(root, DOCS, files=4, row_group_size=4096)
    lengths = ds.dataset(root).to_table(columns=["tokens"]).column("tokens")
    return root, int(pc.sum(pc.list_value_length(lengths)).as_py())


def packed_epoch(root: Path) -> tuple[int, int]:
    stream = fd.pack(ParquetStream(root, columns=["tokens"]), seq_len=SEQ_LEN, rows=8)
    real = total = 0
    for batch in DataLoader(stream, batch_size=None):
        real += int((batch["document_ids"] >= 0).sum())
        total += batch["tokens"].numel()
    return real, total


def padded_epoch(root: Path) -> tuple[int, int]:
    stream = ParquetStream(root, columns=["tokens"], batch_size=32)
    real = total = 0
    for batch in DataLoader(stream, batch_size=None, collate_fn=fd.pad_collate):
        real += int(batch["tokens_lengths"].sum())
        total += batch["tokens"].numel()
    return real, total


@pytest.mark.benchmark(group="pack")
def test_pack_vs_padding_per_batch(benchmark, corpus: tuple[Path, int]) -> None:
    root, tokens = corpus
    got = measure_interleaved(
        benchmark,
        lambda: packed_epoch(root),
        {"pad-per-batch": lambda: padded_epoch(root)},
        items=tokens,
        rounds=5,
        unit="tokens",
    )
    (real, total), (real_padded, total_padded) = got["fastdata"], got["pad-per-batch"]
    assert real == real_padded == tokens  # every token, once, on both sides
    pad_share, padded_share = 1 - real / total, 1 - real_padded / total_padded
    benchmark.extra_info["pad_share"] = {"fastdata": pad_share, "pad-per-batch": padded_share}
    benchmark.extra_info["data"] = {"documents": DOCS, "tokens": tokens, "seq_len": SEQ_LEN}
    assert pad_share <= 0.01, f"packing left {pad_share:.2%} padding"
