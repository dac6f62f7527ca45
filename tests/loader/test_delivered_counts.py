"""Counters that say "delivered so far" count what the training loop received, not what the
workers made ahead of it: ``packed.packing()`` and ``stats()["sources"]`` after k batches
equal the counts of those k batches, whatever the workers (threads, processes) prefetched,
and add up to the whole epoch once it ends (the review's p15 and p24 scripts, as tests)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import fastdata as fd

TAKEN = 5


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Token documents, a few longer than a row (for overlong="drop")."""
    root = tmp_path_factory.mktemp("counts")
    lengths = np.random.default_rng(3).integers(0, 50, 700)
    lengths[::97] = 200
    docs = [list(range(n)) for n in lengths]
    for part in range(2):
        rows = docs[part * 350 : (part + 1) * 350]
        table = pa.table({"tokens": pa.array(rows, pa.list_(pa.int32()))})
        pq.write_table(table, root / f"part-{part}.parquet", row_group_size=40)
    fd.synthetic.make_parquet(root / "a", 600, files=2, row_group_size=50)
    fd.synthetic.make_parquet(root / "b", 300, files=2, row_group_size=30, seed=1)
    return root


def packed(corpus: Path) -> fd.PackedStream:
    source = fd.ParquetStream(corpus, columns=["tokens"])
    return fd.pack(source, seq_len=64, rows=4, overlong="drop", drop_last=True)


def mixed(corpus: Path, batch_size: int | None = 16) -> fd.MixedStream:
    sources = {
        "a": fd.ParquetStream(corpus / "a", columns=["id"]),
        "b": fd.ParquetStream(corpus / "b", columns=["id"]),
    }
    return fd.mix(sources, weights={"a": 0.6, "b": 0.4}, batch_size=batch_size, shuffle=True)


def batch_counts(batches: list[dict]) -> dict[str, int]:
    real = sum(int((b["document_ids"] >= 0).sum()) for b in batches)
    cells = sum(b["tokens"].numel() for b in batches)
    return {"tokens": real, "pad_tokens": cells - real, "batches": len(batches)}


def settle() -> None:
    time.sleep(0.5)  # the workers fill their prefetch queues meanwhile


def test_packing_counts_the_batches_the_loop_received(corpus: Path, worker_method: str) -> None:
    stream = packed(corpus)
    loader = fd.DataLoader(
        stream, batch_size=None, num_workers=2, prefetch_factor=4, worker_method=worker_method
    )
    it = iter(loader)
    taken = [next(it) for _ in range(TAKEN)]
    settle()
    counts = stream.packing()
    assert {k: counts[k] for k in ("tokens", "pad_tokens", "batches")} == batch_counts(taken)
    taken += list(it)
    # the whole epoch: what a loader that counts as made (torch's own, processes) counts
    reference = packed(corpus)
    made = list(torch.utils.data.DataLoader(reference, batch_size=None, num_workers=2))
    assert len(made) == len(taken)
    assert stream.packing() == reference.packing()
    assert reference.packing()["overlong_documents"] > 0  # (the counts after the last batch)
    assert reference.packing()["drop_last_tokens"] > 0


def test_an_abandoned_iterators_prefetched_batches_are_not_counted(corpus: Path) -> None:
    stream = packed(corpus)
    loader = fd.DataLoader(stream, batch_size=None, num_workers=2, worker_method="thread")
    it = iter(loader)
    first = [next(it) for _ in range(TAKEN)]
    settle()
    del it
    whole = list(loader)
    assert stream.packing()["batches"] == TAKEN + len(whole)
    assert stream.packing()["tokens"] == batch_counts(first + whole)["tokens"]


def test_stats_sources_count_the_rows_the_loop_received(corpus: Path, worker_method: str) -> None:
    stream = mixed(corpus)
    loader = fd.DataLoader(
        stream, batch_size=None, num_workers=2, worker_method=worker_method, stats=True
    )
    it = iter(loader)
    rows = Counter()
    for _ in range(TAKEN):
        rows.update(next(it)["source"].tolist())
    settle()
    assert loader.stats()["sources"] == {"a": rows[0], "b": rows[1]}
    assert loader.stats()["batches"] == TAKEN
    for batch in it:
        rows.update(batch["source"].tolist())
    assert stream.source_counts() == {"a": rows[0], "b": rows[1]} == {"a": 540, "b": 360}


def test_rows_batched_by_the_loader_count_the_rows_of_its_batches(
    corpus: Path, worker_method: str
) -> None:
    """Rows as items, batched by the DataLoader: each batch counts its own rows, and the
    short last batch of each worker that drop_last drops counts none."""
    stream = mixed(corpus, batch_size=None)
    loader = fd.DataLoader(
        stream, batch_size=7, drop_last=True, num_workers=2, worker_method=worker_method
    )
    it = iter(loader)
    rows = Counter()
    for _ in range(TAKEN):
        rows.update(next(it)["source"].tolist())
    settle()
    assert stream.source_counts() == {"a": rows[0], "b": rows[1]}
    for batch in it:
        rows.update(batch["source"].tolist())
    assert sum(rows.values()) < 900  # some rows were dropped with the short batches
    assert stream.source_counts() == {"a": rows[0], "b": rows[1]}


def test_the_device_stage_prefetch_is_not_counted(corpus: Path) -> None:
    """With device= the loader moves the next batch ahead of the loop (num_workers=0 too):
    the counts are the loop's batches still."""
    stream = packed(corpus)
    loader = fd.DataLoader(stream, batch_size=None, device="cpu")
    it = iter(loader)
    taken = [next(it) for _ in range(TAKEN)]
    counts = stream.packing()
    assert {k: counts[k] for k in ("tokens", "pad_tokens", "batches")} == batch_counts(taken)


def test_persistent_workers_count_each_epoch(corpus: Path, worker_method: str) -> None:
    stream = mixed(corpus)
    loader = fd.DataLoader(
        stream,
        batch_size=None,
        num_workers=2,
        persistent_workers=True,
        worker_method=worker_method,
    )
    for epoch in range(2):
        stream.set_epoch(epoch)
        for _ in loader:
            pass
    assert stream.source_counts() == {"a": 1080, "b": 720}
